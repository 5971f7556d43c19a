"""Performance of ``visit`` (pytest-benchmark; docs/tools.md tool backends).

Targets from the issue, reported, not asserted (CONTRIBUTING: no wall-clock asserts): median
visit of a local page < 150 ms with Playwright and < 20 ms with the direct backend, on the
fixture article page and on pages of a generated offline world (served by ``WorldServer``, the
pages cycled so each round loads a different document); throughput of 4 concurrent Playwright
visits. Each benchmark also checks the observation it timed, so a fast wrong answer fails. Run
alone, without ``-n``, for figures (docs/tools.md has them)::

    .venv/bin/python -m pytest tests/harness/tools/test_tools_perf.py
"""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness.tools.allowlist import Allowlist
from harness.tools.browser import BrowserConfig, BrowserPool
from harness.tools.visit import DirectBackend, VisitTool
from tests.support.http_fixtures import Sites, sites  # noqa: F401 - pytest fixture

EXPECTED_START = "# Ardent Labs — overview\nArdent Labs\nArdent Labs is a research company"


@pytest.fixture(scope="module")
def allowlist(sites: Sites) -> Allowlist:  # noqa: F811
    return Allowlist.for_base_url(sites.site.base_url)


@pytest.fixture(scope="module")
def pool(allowlist: Allowlist):
    with BrowserPool(allowlist, BrowserConfig(max_concurrency=4)) as p:
        yield p


def test_visit_direct_median(benchmark, allowlist: Allowlist, sites: Sites) -> None:  # noqa: F811
    tool = VisitTool(DirectBackend(allowlist), allowlist, timeout_s=10)
    url = sites.site.url("/article.html")
    benchmark.group = "visit"
    text = benchmark.pedantic(tool, args=(url,), rounds=50, warmup_rounds=3)
    assert text.startswith(EXPECTED_START)


@pytest.mark.browser
@pytest.mark.xdist_group("chromium")
def test_visit_playwright_median(benchmark, pool: BrowserPool, allowlist: Allowlist, sites: Sites) -> None:  # noqa: F811
    tool = VisitTool(pool, allowlist, timeout_s=20)
    url = sites.site.url("/article.html")
    benchmark.group = "visit"
    text = benchmark.pedantic(tool, args=(url,), rounds=30, warmup_rounds=3)
    assert text.startswith(EXPECTED_START)


@pytest.mark.browser
@pytest.mark.xdist_group("chromium")
def test_playwright_four_concurrent_visits(benchmark, pool: BrowserPool, allowlist: Allowlist, sites: Sites) -> None:  # noqa: F811
    """One round = 4 visits from 4 threads at once; throughput = 4 / round time."""
    tool = VisitTool(pool, allowlist, timeout_s=20)
    urls = [sites.site.url(p) for p in ("/article.html", "/rich.html", "/scripted.html", "/article.html")]
    with ThreadPoolExecutor(max_workers=4) as ex:
        def four() -> list[str]:
            return list(ex.map(tool, urls))

        benchmark.group = "visit-concurrency"
        texts = benchmark.pedantic(four, rounds=15, warmup_rounds=2)
    assert texts[0].startswith(EXPECTED_START) and texts[1].startswith("# Company directory")
    assert not any(t.startswith("Error") for t in texts)
    assert pool.n_contexts <= 4
    if benchmark.stats is not None:  # None when benchmarks are disabled (xdist)
        benchmark.extra_info["visits_per_s"] = round(4 / benchmark.stats.stats.median, 1)


# --- the offline world ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def world_site():
    generator = pytest.importorskip("harness.world.generator", reason="harness.world is not importable")
    server = pytest.importorskip("harness.world.server", reason="harness.world is not importable")
    world = generator.generate_world(size="tiny", seed=0)
    with server.WorldServer(world) as served:
        urls = [served.base_url + path for path in sorted(world.pages)]
        yield Allowlist.for_base_url(served.base_url), urls


def _cycling_visit(tool: VisitTool, urls: list[str]):
    cycle = itertools.cycle(urls)

    def visit() -> str:
        text = tool(next(cycle))
        assert not text.startswith("Error"), text
        return text

    return visit


def test_visit_direct_world_median(benchmark, world_site) -> None:
    allowlist, urls = world_site
    tool = VisitTool(DirectBackend(allowlist), allowlist, timeout_s=10)
    benchmark.group = "visit-world"
    text = benchmark.pedantic(_cycling_visit(tool, urls), rounds=50, warmup_rounds=3)
    assert text.startswith("# ")


@pytest.mark.browser
@pytest.mark.xdist_group("chromium")
def test_visit_playwright_world_median(benchmark, world_site) -> None:
    allowlist, urls = world_site
    with BrowserPool(allowlist, BrowserConfig(max_concurrency=4)) as world_pool:
        tool = VisitTool(world_pool, allowlist, timeout_s=20)
        benchmark.group = "visit-world"
        text = benchmark.pedantic(_cycling_visit(tool, urls), rounds=30, warmup_rounds=3)
    assert text.startswith("# ")
