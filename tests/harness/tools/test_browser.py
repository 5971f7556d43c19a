"""The Playwright pool (DESIGN §5): parity with the direct backend, isolation, concurrency.

Real Chromium (``/usr/bin/chromium``) against real HTTP servers on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness.tools.allowlist import Allowlist
from harness.tools.browser import BrowserConfig, BrowserPool
from harness.tools.visit import DirectBackend, VisitError, VisitTool
from tests.support.http_fixtures import Sites, sites  # noqa: F401 - pytest fixture

pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("chromium")]

TIMEOUT = 20.0
STATIC_PAGES = ["/article.html", "/rich.html", "/scripted.html", "/latin1.html", "/plain.txt", "/huge.html",
                "/redirect-chain", "/doc.pdf", "/report.csv", "/error500.html", "/missing.html",
                "/redirect-offsite", "/redirect-loop"]


@pytest.fixture(scope="module")
def allowlist(sites: Sites) -> Allowlist:  # noqa: F811
    return Allowlist.for_base_url(sites.site.base_url)


@pytest.fixture(scope="module")
def pool(allowlist: Allowlist):
    with BrowserPool(allowlist, BrowserConfig(max_concurrency=2)) as p:
        yield p


@pytest.mark.parametrize("path", STATIC_PAGES)
def test_both_backends_return_identical_observations(pool: BrowserPool, allowlist: Allowlist, sites: Sites,  # noqa: F811
                                                     path: str) -> None:
    url = sites.site.url(path)
    via_browser = VisitTool(pool, allowlist, max_chars=4000, timeout_s=TIMEOUT)(url)
    via_http = VisitTool(DirectBackend(allowlist), allowlist, max_chars=4000, timeout_s=TIMEOUT)(url)
    assert via_browser == via_http
    assert via_browser  # never an empty observation


def test_javascript_runs_in_the_browser_only(pool: BrowserPool, allowlist: Allowlist, sites: Sites) -> None:  # noqa: F811
    """The documented difference: script-built content exists for Chromium, not for direct."""
    url = sites.site.url("/js-rendered.html")
    via_browser = VisitTool(pool, allowlist, timeout_s=TIMEOUT)(url)
    via_http = VisitTool(DirectBackend(allowlist), allowlist, timeout_s=TIMEOUT)(url)
    assert via_browser == "# Rendered by script\nStatic part.\nRendered by JavaScript."
    assert via_http == "# Rendered by script\nStatic part."


def test_off_host_subresources_and_redirected_subresources_never_leave(pool: BrowserPool, allowlist: Allowlist,
                                                                       sites: Sites) -> None:  # noqa: F811
    """CSS, script, image, iframe, fetch() and an image that redirects off-host: all blocked."""
    site_hits_before = sites.site.hits["/redirect-img"]
    out = VisitTool(pool, allowlist, timeout_s=TIMEOUT)(sites.site.url("/offsite-subresources.html"))
    assert out == "# Subresources\nBody text."
    assert sites.site.hits["/redirect-img"] == site_hits_before + 1  # the same-host hop was requested ...
    assert sites.foreign.total_hits() == 0  # ... but neither its redirect target nor anything else off-host


def test_client_side_navigation_off_host_is_refused(pool: BrowserPool, allowlist: Allowlist, sites: Sites) -> None:  # noqa: F811
    url = sites.site.url("/meta-refresh-offsite.html")
    out = VisitTool(pool, allowlist, timeout_s=TIMEOUT)(url)
    assert out.startswith(f"Error: URL not allowed: host '{sites.foreign.host}' is not in the allowlist")
    assert out.endswith(f"(redirected from {url})")
    assert sites.foreign.total_hits() == 0


def test_many_threads_share_a_bounded_pool(pool: BrowserPool, sites: Sites) -> None:  # noqa: F811
    urls = [sites.site.url(p) for p in ("/article.html", "/rich.html", "/scripted.html", "/plain.txt")] * 3
    with ThreadPoolExecutor(max_workers=6) as ex:
        results = list(ex.map(lambda u: pool.fetch(u, TIMEOUT), urls))
    assert [r.final_url for r in results] == urls
    assert all(r.status == 200 for r in results)
    assert pool.n_contexts <= 2  # max_concurrency: contexts are reused, never more than two


def test_waiting_for_a_slot_counts_against_the_timeout(allowlist: Allowlist, sites: Sites) -> None:  # noqa: F811
    with BrowserPool(allowlist, BrowserConfig(max_concurrency=1)) as single:
        single.fetch(sites.site.url("/article.html"), TIMEOUT)  # warm: context exists
        slow_hits = sites.site.hits["/slow.html"]
        blocker = threading.Thread(target=lambda: _expect_timeout(single, sites.site.url("/slow.html"), 8.0))
        blocker.start()
        deadline = time.monotonic() + 7.0
        while sites.site.hits["/slow.html"] == slow_hits and time.monotonic() < deadline:
            time.sleep(0.05)  # wait until the only slot is busy loading the slow page
        assert sites.site.hits["/slow.html"] == slow_hits + 1
        start = time.monotonic()
        with pytest.raises(VisitError, match=r"timed out after 1\.5 s"):
            single.fetch(sites.site.url("/article.html"), 1.5)
        assert time.monotonic() - start < 1.5 + 5.0
        blocker.join(30)
        # The slot is free again and still works.
        assert single.fetch(sites.site.url("/article.html"), TIMEOUT).status == 200


def _expect_timeout(pool: BrowserPool, url: str, timeout: float) -> None:
    with pytest.raises(VisitError, match="timed out"):
        pool.fetch(url, timeout)


def test_a_crashed_browser_is_relaunched(allowlist: Allowlist, sites: Sites) -> None:  # noqa: F811
    with BrowserPool(allowlist, BrowserConfig(max_concurrency=1)) as p:
        assert p.fetch(sites.site.url("/article.html"), TIMEOUT).status == 200
        assert p._loop is not None
        asyncio.run_coroutine_threadsafe(p._browser.close(), p._loop).result(30)  # simulate a crash
        assert p.fetch(sites.site.url("/rich.html"), TIMEOUT).status == 200


def test_close_is_idempotent_and_later_visits_are_errors(allowlist: Allowlist, sites: Sites) -> None:  # noqa: F811
    p = BrowserPool(allowlist)
    assert "not started" in repr(p)
    p.close()
    p.close()
    assert "closed" in repr(p)
    tool = VisitTool(p, allowlist, timeout_s=TIMEOUT)
    out = tool(sites.site.url("/article.html"))
    assert out.startswith("Error: ") and "closed" in out
    with pytest.raises(RuntimeError, match="closed"):
        p.start()


def test_open_web_mode_still_refuses_schemes_and_private_addresses(sites: Sites) -> None:  # noqa: F811
    """allow_all_hosts: no proxy lock-down, but the route and the URL checks still apply."""
    web = Allowlist.open_web()
    before = sites.site.hits["/article.html"]
    with BrowserPool(web, BrowserConfig(max_concurrency=1)) as p:
        tool = VisitTool(p, web, timeout_s=TIMEOUT)
        assert tool("file:///etc/passwd") == "Error: URL not allowed: scheme 'file' is refused; allowed: any public http(s) host"
        out = tool(sites.site.url("/article.html"))  # 127.0.0.1 is private
        assert out.startswith("Error: URL not allowed: host '127.0.0.1:") and "private" in out
    assert sites.site.hits["/article.html"] == before  # refused before any request


def test_missing_chromium_is_a_clear_error_observation(allowlist: Allowlist, sites: Sites) -> None:  # noqa: F811
    p = BrowserPool(allowlist, BrowserConfig(executable_path="/nonexistent/chromium"))
    with pytest.raises(Exception, match="/nonexistent/chromium"):
        p.start()
    out = VisitTool(p, allowlist, timeout_s=TIMEOUT)(sites.site.url("/article.html"))
    assert out.startswith("Error: visit failed for ") and "/nonexistent/chromium" in out
    p.close()
