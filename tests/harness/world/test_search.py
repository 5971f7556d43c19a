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
