"""BM25 search over the world (docs/world.md, docs/architecture.md §Making the tiny default learn: exact title -> first; harness.world.search)."""

from __future__ import annotations

import random

import pytest

from harness.protocol import SearchHit, render_search_results
from harness.world.generator import WorldConfig, generate_world
from harness.world.search import SNIPPET_CHARS, SearchIndex, tokenize

BASE = "http://127.0.0.1:8123"


@pytest.fixture(scope="module")
def world():
    return generate_world(WorldConfig(seed=4, size="default"))


@pytest.fixture(scope="module")
def index(world):
    return SearchIndex.build(world)


def test_indexes_every_page(world, index):
    assert len(index) == len(world.pages)


def test_exact_title_query_ranks_that_page_first(world, index):
    for page in world.pages.values():
        hits = index.search(page.title, k=5, base_url=BASE)
        assert hits and hits[0].url == BASE + page.path, page.title
    # case and spacing do not matter
    e = world.of_kind("person")[0]
    assert index.search("  " + e.name.upper() + " ", base_url=BASE)[0].url == f"{BASE}/wiki/{e.slug}.html"


def test_a_task_sentence_finds_the_page_of_the_entity_it_names(world, index):
    # a title that occurs in the query as a phrase comes first, the longest first: a whole task sentence (the
    # tiny presets' sub-agent searches with it, docs/world.md "Search") finds the entity's page as its name does
    for e in world.entities.values():
        for sentence in (f"Find the country of {e.name}.", f"List the people born in {e.name}, with their birth years."):
            hits = index.search(sentence, k=3, base_url=BASE)
            assert hits[0].url == f"{BASE}/wiki/{e.slug}.html", (sentence, [h.title for h in hits])
    # the longer of two titles in the query wins, whichever comes first in it
    product = world.of_kind("product")[0]
    support = f"{product.name} support"  # the product's support page on its maker's site
    assert any(p.title == support for p in world.pages.values())
    hits = index.search(f"{product.name} and {support}", k=3, base_url=BASE)
    assert [h.title for h in hits[:2]] == [support, product.name]
    # without a title in it, the query is ranked by BM25 alone
    assert index._titles_in(tokenize("find the country of nowhere")) == []


def test_entity_name_query_finds_its_encyclopedia_page_by_bm25_alone(world, index):
    # the exact-title rule is a guarantee; BM25 itself should already agree for entity names
    for e in world.entities.values():
        q = e.name.split()[0] + " " + e.name.split()[-1] if " " in e.name else e.name
        scores = index._bm25.get_scores(tokenize(q))
        best = max(range(len(scores)), key=lambda i: scores[i])
        assert index._docs[best].title.startswith(e.name.split()[0]) or e.name in index._docs[best].title


def test_hits_are_absolute_with_useful_snippets(world, index):
    e = world.of_kind("product")[3]
    hits = index.search(f"{e.name} price", k=3, base_url=BASE + "/")
    assert 1 <= len(hits) <= 3
    assert all(isinstance(h, SearchHit) and h.url.startswith(BASE + "/") and "//" not in h.url[8:] for h in hits)
    assert all(0 < len(h.snippet) <= SNIPPET_CHARS for h in hits)
    assert all("[http" not in h.snippet for h in hits)
    assert e.name.split()[0] in hits[0].snippet
    text = render_search_results(hits)
    assert text.startswith("[1] ") and f"URL: {hits[0].url}" in text


def test_k_and_empty_queries(index):
    assert len(index.search("robotics company", k=7)) == 7
    assert index.search("", k=3) == [] and index.search("!!! ...") == []
    assert index.search("zzzqqqxxx unknownword") == []
    with pytest.raises(ValueError, match="k must be >= 1"):
        index.search("x", k=0)


def test_path_only_urls_without_base(world, index):
    hit = index.search(world.of_kind("city")[0].name)[0]
    assert hit.url.startswith("/wiki/")


def test_deterministic_ranking(world):
    a = SearchIndex.build(world).search("festival visitors", k=5)
    b = SearchIndex.build(world).search("festival visitors", k=5)
    assert a == b


def test_search_speed_benchmark(world, index, benchmark):
    rng = random.Random(0)
    names = [e.name for e in world.entities.values()]
    queries = [rng.choice(names) + rng.choice(["", " price", " founded", " born", " visitors"]) for _ in range(200)]

    def run():
        for q in queries:
            index.search(q, k=5, base_url=BASE)

    benchmark(run)
    if benchmark.stats is not None:  # None under --benchmark-disable
        per_query = benchmark.stats.stats.mean / len(queries)
        assert per_query < 5e-3, f"{per_query * 1e3:.2f} ms per query"


def test_build_index_benchmark(world, benchmark):
    idx = benchmark.pedantic(SearchIndex.build, args=(world,), rounds=2, iterations=1)
    assert len(idx) == len(world.pages)


def test_compact_results_are_ranked_title_lines_the_expert_still_reads(world, index):
    """Issue 16: ``tools.search_snippets: false`` (tiny presets) shows each hit as its title and URL only,
    the same through the in-process toolbox, the HTTP search tool, and to the scripted expert; pages cut
    by ``max_chars`` end as the real visit tool's do."""
    from harness.tools.search import SearchTool
    from harness.tools.visit import TRUNCATION_MARKER
    from harness.world.expert import _HIT
    from harness.world.toolbox import WorldToolbox

    name = next(e.name for e in world.entities.values() if e.kind == "org")
    hits = index.search(name, k=3, base_url="http://world.local")
    full, compact = render_search_results(hits), render_search_results(hits, snippets=False)
    assert compact == "\n".join(f"[{i}] {h.title}\nURL: {h.url}" for i, h in enumerate(hits, 1))
    assert len(compact) < len(full) and hits[0].title == name  # the exact title match first
    assert [m.groups() for m in _HIT.finditer(compact)] == [m.groups() for m in _HIT.finditer(full)]
    tb = WorldToolbox(world, index=index, k=3, snippets=False, max_chars=120)
    assert tb.call("search", {"query": name}) == compact

    class Backend:
        def search(self, query, k):
            return index.search(query, k=k, base_url="http://world.local")

    assert SearchTool(Backend(), top_k=3, snippets=False)(name) == compact
    page = tb.call("visit", {"url": hits[0].url})
    assert page.endswith("\n" + TRUNCATION_MARKER) and len(page) <= 120 + len(TRUNCATION_MARKER) + 1
