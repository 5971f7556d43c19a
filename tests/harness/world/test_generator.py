"""World generator and HTML sites (docs/world.md, harness.world.generator / render)."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from html.parser import HTMLParser

import pytest

from harness.tools.html_text import html_to_text
from harness.world.generator import RELATIONS, SIZES, WorldConfig, generate_world

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture(scope="module")
def world():
    return generate_world(WorldConfig(seed=7, size="small"))


def _digest(w) -> str:
    h = hashlib.sha256()
    for path, page in w.pages.items():
        h.update(path.encode() + b"\0" + page.html.encode() + b"\0")
    return h.hexdigest()


def test_same_seed_and_size_give_byte_identical_pages(world):
    again = generate_world(WorldConfig(seed=7, size="small"))
    assert list(again.pages) == list(world.pages)
    assert all(again.pages[p].html == world.pages[p].html for p in world.pages)


def test_pages_do_not_depend_on_the_process_hash_seed(world):
    code = ("import hashlib;from harness.world.generator import *;w=generate_world(WorldConfig(seed=7,size='small'));"
            "h=hashlib.sha256()\nfor p,g in w.pages.items(): h.update(p.encode()+b'\\0'+g.html.encode()+b'\\0')\nprint(h.hexdigest())")
    for hs in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONHASHSEED": hs},
                             capture_output=True, text=True, check=True)
        assert out.stdout.strip() == _digest(world)


def test_other_seed_gives_another_world(world):
    other = generate_world(WorldConfig(seed=8, size="small"))
    assert _digest(other) != _digest(world)
    assert {e.name for e in other.entities.values()} != {e.name for e in world.entities.values()}


@pytest.mark.parametrize("size", list(SIZES))
def test_every_fact_appears_on_a_page(size):
    w = generate_world(WorldConfig(seed=3, size=size))
    texts = {}
    assert len(w.facts) > 0
    for f in w.facts:
        paths = w.fact_pages.get((f.subject, f.relation), [])
        assert paths, f"fact {f} is on no page"
        for p in paths:
            if p not in texts:
                texts[p] = re.sub(r" \[[^\]]*\]", "", html_to_text(w.pages[p].html))
            shown = f.shown or f.value
            items = shown.split(", ") if RELATIONS[f.relation][1] == "list" else [shown]
            for item in items:
                assert item in texts[p], f"{f} claimed on {p} but its value is not in the text"
            assert w.entities[f.subject].name in texts[p]


def test_every_relation_is_used(world):
    assert {f.relation for f in world.facts} == set(RELATIONS)


def test_titles_and_names_are_distinct_and_pronounceable(world):
    titles = [p.title for p in world.pages.values()]
    assert len(titles) == len(set(titles))
    names = [e.name for e in world.entities.values()]
    assert len(names) == len(set(names))
    suffix_words = {"Labs", "Systems", "Group", "Works", "Industries", "Collective", "Dynamics", "Partners",
                    "Pro", "One", "Max", "Mini", "Air", "Prime", "Lite", "Duo",
                    "Summit", "Expo", "Festival", "Forum", "Fair", "Congress"}
    words = [w for n in names for w in n.split() if w not in suffix_words]
    assert len(words) == len(set(words)), "an invented word is used by two entities"
    for w in words:
        assert re.fullmatch(r"[A-Z][a-z]{3,9}", w), w
        assert not re.search(r"[^aeiou]{4}", w.lower()), f"{w} has an unpronounceable consonant run"
        assert re.search(r"[aeiou]", w.lower())


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.hrefs.append(dict(attrs)["href"])


def test_every_link_resolves_and_site_depths_match_links(world):
    # breadth-first from each site's home page: the shortest click distance is the recorded depth
    graph = {}
    for path, page in world.pages.items():
        parser = _Links()
        parser.feed(page.html)
        for href in parser.hrefs:
            assert world.resolve(href) is not None, f"{path} links to missing {href}"
        graph[path] = [world.resolve(h).path for h in parser.hrefs]
    for org in world.of_kind("org"):
        root = world.site_root(org)
        dist, frontier = {root: 0}, [root]
        while frontier:
            nxt = []
            for p in frontier:
                for q in graph[p]:
                    if q.startswith(f"/site/{org.slug}/") and q not in dist:
                        dist[q] = dist[p] + 1
                        nxt.append(q)
            frontier = nxt
        site_pages = [p for p in world.pages.values() if p.site == f"site/{org.slug}"]
        assert {p.path for p in site_pages} == set(dist)
        for p in site_pages:
            assert dist[p.path] == p.depth, p.path
        assert max(p.depth for p in site_pages) == 4


def test_site_only_facts_are_deep(world):
    prod = world.of_kind("product")[0]
    assert [world.pages[p].depth for p in world.fact_pages[(prod.id, "price")]] == [3]
    assert [world.pages[p].depth for p in world.fact_pages[(prod.id, "warranty")]] == [4]
    person = world.of_kind("person")[0]
    assert [world.pages[p].depth for p in world.fact_pages[(person.id, "joined_year")]] == [2]


def test_pages_keep_links_visible_to_agents(world):
    org = world.of_kind("org")[0]
    text = html_to_text(world.pages[world.site_root(org)].html, base_url="http://h")
    for label in ("About", "Team", "Products", "News"):
        assert f"{label} [http://h/site/{org.slug}/" in text


@pytest.mark.parametrize("kwargs, field", [
    (dict(seed=-1), "seed"), (dict(seed=1.5), "seed"), (dict(seed="3"), "seed"), (dict(seed=True), "seed"),
    (dict(seed=1, size="huge"), "size"), (dict(seed=1, n_orgs=0), "n_orgs"),
    (dict(seed=1, size="tiny", n_people=5), "n_people"),
])
def test_invalid_config_says_what_is_accepted(kwargs, field):
    with pytest.raises(ValueError, match=f"WorldConfig.{field}") as info:
        WorldConfig(**kwargs)
    if field == "size":
        assert "tiny|small|default" in str(info.value)
    if field == "seed":
        assert "int >= 0" in str(info.value)


def test_explicit_counts_override_the_preset():
    w = generate_world(WorldConfig(seed=1, size="tiny", n_orgs=4, n_people=20))
    assert len(w.of_kind("org")) == 4 and len(w.of_kind("person")) == 20
    assert len(w.of_kind("city")) == SIZES["tiny"]["n_cities"]


def test_generate_default_world_benchmark(benchmark):
    w = benchmark.pedantic(generate_world, args=(WorldConfig(seed=11, size="default"),), rounds=3, iterations=1)
    assert len(w.pages) >= 500
