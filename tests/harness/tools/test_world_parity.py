"""Integration with the offline world (docs/tools.md): both visit backends return the same text.

On a generated world served by ``WorldServer`` on 127.0.0.1:

* every page, fetched by the direct backend, gives exactly the text the in-process world toolbox
  gives (``html_to_text`` of the page source), so scripted-expert transcripts match real tool
  observations;
* one page of every page type (wiki page per entity kind, portal, news, each organisation-site
  page kind) gives identical observations through Playwright/Chromium and the direct backend;
* the world's own test routes (500, slow, big, download, off-host redirect, links) give identical
  error/text observations through both backends;
* the goal-guided visit (``tools.visit_focus``, :mod:`harness.tools.focus`) gives the same text through the
  world toolbox, the direct backend and Chromium, cut to a budget after the rows are reordered.

Skipped, with the reason, only when ``harness.world`` cannot be imported.
"""

from __future__ import annotations

import re

import pytest

world_generator = pytest.importorskip("harness.world.generator", reason="harness.world is not importable (world generator missing)")
world_server = pytest.importorskip("harness.world.server", reason="harness.world is not importable (world server missing)")

from harness.tools.allowlist import Allowlist  # noqa: E402
from harness.tools.browser import BrowserConfig, BrowserPool  # noqa: E402
from harness.tools.html_text import html_to_text  # noqa: E402
from harness.tools.visit import DirectBackend, VisitTool, truncate_text  # noqa: E402
from harness.world.toolbox import WorldToolbox  # noqa: E402

TIMEOUT = 20.0
MAX_CHARS = 100_000  # large: compare whole pages, not truncations
FIXED_SEGMENTS = {"", "wiki", "news", "site", "team", "products", "index.html", "about.html", "team.html",
                  "news.html", "products.html"}


@pytest.fixture(scope="module")
def world():
    return world_generator.generate_world(size="tiny", seed=0)


@pytest.fixture(scope="module")
def served(world):
    with world_server.WorldServer(world, test_routes=True) as server:
        yield server


@pytest.fixture(scope="module")
def allowlist(served) -> Allowlist:
    return Allowlist.for_base_url(served.base_url)


def page_type(world, page) -> tuple[str, ...]:
    """Path shape with names replaced by ``*``, plus the entity kind of the page's first fact."""
    shape = tuple(seg if seg in FIXED_SEGMENTS else "*" for seg in page.path.split("/"))
    kind = world.entities[page.facts[0][0]].kind if page.facts and page.facts[0][0] in world.entities else ""
    return (*shape, kind)


def one_page_per_type(world) -> list[str]:
    chosen: dict[tuple[str, ...], str] = {}
    for path in sorted(world.pages):
        chosen.setdefault(page_type(world, world.pages[path]), path)
    return sorted(chosen.values())


def test_direct_backend_matches_the_page_source_on_every_page(world, served, allowlist: Allowlist) -> None:
    tool = VisitTool(DirectBackend(allowlist), allowlist, max_chars=MAX_CHARS, timeout_s=TIMEOUT)
    assert len(world.pages) > 50
    for path, page in sorted(world.pages.items()):
        url = served.base_url + path
        expected = truncate_text(html_to_text(page.html, base_url=url), MAX_CHARS)
        assert tool(url) == expected, path


#: Goals as the agents write them (``<relation> of <name>``): each asks for a row some page type has.
GOALS = ("country of it", "birth year of it", "founding year of it", "price of it", "host city of it",
         "chief executive of it", "joining year of it", "nothing at all")


def test_focused_visit_is_the_same_in_the_world_toolbox_and_the_direct_backend(world, served, allowlist) -> None:
    """Every page and goal: the same text in both, under a budget that cuts most pages (so the row must move
    before the cut); and the goal's row does move on a good share of them."""
    budget = 200
    tool = VisitTool(DirectBackend(allowlist), allowlist, max_chars=budget, timeout_s=TIMEOUT, focus=True)
    plain = VisitTool(DirectBackend(allowlist), allowlist, max_chars=budget, timeout_s=TIMEOUT)
    box = WorldToolbox(world, base_url=served.base_url, max_chars=budget, focus=True)
    moved = 0
    for path in sorted(world.pages)[::3]:
        url = served.base_url + path
        for goal in GOALS:
            text = tool(url, goal)
            assert text == box.call("visit", {"url": url, "goal": goal}), (path, goal)
            moved += text != plain(url, goal)
    assert plain(served.base_url + "/", "country of it") == tool(served.base_url + "/", "")  # no goal: no focus
    assert moved > 50, moved


def site_questions(world) -> list[tuple[str, str]]:
    """(site page path, goal) pairs: every organisation's home and list pages, asked about one of its people,
    products and events in the words of the WebWalkerQA-style questions (what the tiny presets' goals are)."""
    from harness.world.render import site_prefix
    from harness.world.subtasks import WALK_QUESTION

    out = []
    for org in world.of_kind("org"):
        people = sorted(p.name for p in world.of_kind("person") if p.attrs["employer"] == org.id)
        events = sorted(e.name for e in world.of_kind("event") if e.attrs["organiser"] == org.id)
        product = world.entities[org.attrs["products"][0]].name
        goals = [WALK_QUESTION["price"].format(org=org.name, x=product),
                 WALK_QUESTION["founded_year"].format(org=org.name)]
        goals += [WALK_QUESTION["role"].format(org=org.name, x=people[0])] if people else []
        goals += [WALK_QUESTION["attendance"].format(org=org.name, x=events[0])] if events else []
        for page in ("index", "team", "products", "news"):
            out += [(f"{site_prefix(org)}/{page}.html", goal) for goal in goals]
    return out


def test_link_order_is_the_same_in_the_world_toolbox_and_the_direct_backend(world, served, allowlist) -> None:
    """tools.visit_links: where no row matches, the menu's and lists' links that lead to the goal come first; the
    linked pages are peeked at through each backend's own fetch, and the texts agree; links do move."""
    tool = VisitTool(DirectBackend(allowlist), allowlist, max_chars=6000, timeout_s=TIMEOUT, focus=True, links=True)
    rows_only = VisitTool(DirectBackend(allowlist), allowlist, max_chars=6000, timeout_s=TIMEOUT, focus=True)
    box = WorldToolbox(world, base_url=served.base_url, focus=True, links=True)
    moved, pairs = 0, site_questions(world)
    for path, goal in pairs:
        url = served.base_url + path
        text = tool(url, goal)
        assert not text.startswith("Error"), (path, text)
        assert text == box.call("visit", {"url": url, "goal": goal}), (path, goal)
        moved += text != rows_only(url, goal)
        # only the order of lines and of menu items changes: the page keeps every line and link
        assert sorted(re.findall(r"\[(\S+?)\]", text)) == sorted(re.findall(r"\[(\S+?)\]", rows_only(url, goal)))
    assert len(pairs) > 40 and moved > 15, (moved, len(pairs))  # 22 of 96 on world 0
    with pytest.raises(ValueError, match="focus=True"):
        VisitTool(DirectBackend(allowlist), allowlist, links=True)


@pytest.mark.browser
@pytest.mark.xdist_group("chromium")
def test_playwright_and_direct_agree_on_every_page_type(world, served, allowlist: Allowlist) -> None:
    paths = one_page_per_type(world)
    kinds = {page_type(world, world.pages[p]) for p in paths}
    assert len(kinds) >= 8, kinds  # wiki per entity kind, portal, news, org home/about/team/news/products...
    direct = VisitTool(DirectBackend(allowlist), allowlist, max_chars=MAX_CHARS, timeout_s=TIMEOUT)
    with BrowserPool(allowlist, BrowserConfig(max_concurrency=2)) as pool:
        browser = VisitTool(pool, allowlist, max_chars=MAX_CHARS, timeout_s=TIMEOUT)
        for path in paths:
            url = served.base_url + path
            text = browser(url)
            assert not text.startswith("Error"), (path, text)
            assert text == direct(url), path
        # Default budget: both truncate the same way.
        small_b = VisitTool(pool, allowlist, max_chars=300, timeout_s=TIMEOUT)
        small_d = VisitTool(DirectBackend(allowlist), allowlist, max_chars=300, timeout_s=TIMEOUT)
        longest = max(paths, key=lambda p: len(world.pages[p].html))
        assert small_b(served.base_url + longest) == small_d(served.base_url + longest)
        assert small_b(served.base_url + longest).endswith("\n[truncated]")
        # the goal-guided visit: the same reordered, cut text through Chromium
        focus_b = VisitTool(pool, allowlist, max_chars=300, timeout_s=TIMEOUT, focus=True)
        focus_d = VisitTool(DirectBackend(allowlist), allowlist, max_chars=300, timeout_s=TIMEOUT, focus=True)
        for path in paths:
            url = served.base_url + path
            for goal in GOALS[:4]:
                assert focus_b(url, goal) == focus_d(url, goal), (path, goal)
        # ... and the link order, peeking through Chromium
        links_b = VisitTool(pool, allowlist, max_chars=MAX_CHARS, timeout_s=TIMEOUT, focus=True, links=True)
        links_d = VisitTool(DirectBackend(allowlist), allowlist, max_chars=MAX_CHARS, timeout_s=TIMEOUT, focus=True,
                            links=True)
        for path, goal in site_questions(world)[:8]:
            url = served.base_url + path
            assert links_b(url, goal) == links_d(url, goal), (path, goal)


@pytest.mark.browser
@pytest.mark.xdist_group("chromium")
def test_world_test_routes_agree(served, allowlist: Allowlist) -> None:
    base = served.base_url
    cases = {
        "/__test__/error": r"^Error: HTTP 500 Internal Server Error for ",
        "/__test__/download": r"^Error: .* is a file download \(Content-Disposition: attachment\); downloads are disabled$",
        "/__test__/redirect?to=http://example.com/": r"^Error: URL not allowed: host 'example.com:80' is not in the allowlist",
        "/__test__/redirect?to=/index.html": r"^# ",
        "/__test__/links": r"external \[http://example.com/\]",
        "/__test__/big?bytes=2000000": r"\n\[truncated\]$",
        "/__test__/slow": r"^Error: timed out after 3 s loading ",
    }
    with BrowserPool(allowlist, BrowserConfig(max_concurrency=1)) as pool:
        for path, pattern in cases.items():
            timeout = 3.0 if "slow" in path else TIMEOUT
            direct = VisitTool(DirectBackend(allowlist), allowlist, max_chars=2000, timeout_s=timeout)
            browser = VisitTool(pool, allowlist, max_chars=2000, timeout_s=timeout)
            a, b = direct(base + path), browser(base + path)
            assert re.search(pattern, a), (path, a)
            assert a == b, path
