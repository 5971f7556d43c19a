"""Browser safety: every URL an agent may emit is refused or bounded, and none reaches a disallowed host
(docs/tools.md, "Safety"; the developers' guide's security standard).

Each case runs through both ``visit`` backends (real Chromium through the Playwright pool, and the
direct HTTP backend) with the world's allowlist: only the fixture site's ``host:port``. A second
fixture server on another loopback port stands for every disallowed host and counts each request
it gets; after every case its count must be unchanged. Every visit must come back within its
timeout (plus a bounded slack for Chromium's clean-up) as an observation no longer than
``max_chars`` (plus the truncation marker).

- schemes: ``file:``, ``javascript:``, ``data:``, ``blob:``, ``view-source:``, ``chrome:``, ``about:``,
  ``ftp:``, ``ws:``; credentials in the URL;
- hosts: the disallowed server itself, and the loopback, private and link-local addresses and names
  (``localhost``, ``127.0.0.2``, ``[::1]``, ``0.0.0.0``, the numeric spellings ``2130706433``, ``127.1``
  and ``0x7f000001`` of 127.0.0.1, ``169.254.169.254``);
- pages of the allowed host that redirect, refresh, script-navigate, open popups and tabs, start
  downloads, or load subresources towards the disallowed server;
- bounds: a page that never finishes, a script that never returns, a huge page, a 100,000-character URL
  and a 300-character host name.

With ``allow_all_hosts`` (the real web) the same loopback spellings and a name that resolves to
loopback are refused: the names through the allowlist's resolver, which Chromium shares here through
``--host-resolver-rules``.
"""

from __future__ import annotations

import socket
import time

import pytest

from harness.tools.allowlist import Allowlist
from harness.tools.browser import DEFAULT_ARGS, BrowserConfig, BrowserPool
from harness.tools.visit import DirectBackend, VisitTool
from tests.support.http_fixtures import Sites, sites  # noqa: F401 - pytest fixture

pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("chromium")]

TIMEOUT = 4.0
SLACK = 6.0  # a timed-out Chromium visit also waits for its page to be torn down
MAX_CHARS = 2000
MARKER_ROOM = 200  # the truncation marker appended to a cut page


def _refused_urls(sites: Sites) -> dict[str, str]:  # noqa: F811
    site, bad = sites.site, sites.foreign
    p = bad.port
    return {
        "file": "file:///etc/passwd",
        "javascript": "javascript:fetch('" + bad.url("/js") + "')",
        "data": "data:text/html,<script>fetch('" + bad.url("/data") + "')</script>",
        "blob": f"blob:{site.base_url}/0d9a1e4c-0000-4000-8000-000000000000",
        "view-source": f"view-source:{bad.url('/vs.html')}",
        "chrome": "chrome://settings",
        "about": "about:blank",
        "ftp": f"ftp://{bad.host}/",
        "ws": f"ws://{bad.host}/socket",
        "credentials": f"http://user:secret@{site.host}/article.html",
        "other host": bad.url("/secret.html"),
        "localhost": f"http://localhost:{p}/secret.html",
        "127.0.0.2": f"http://127.0.0.2:{p}/secret.html",
        "[::1]": f"http://[::1]:{p}/secret.html",
        "0.0.0.0": f"http://0.0.0.0:{p}/secret.html",
        "decimal 127.0.0.1": f"http://2130706433:{p}/secret.html",
        "short 127.0.0.1": f"http://127.1:{p}/secret.html",
        "hex 127.0.0.1": f"http://0x7f000001:{p}/secret.html",
        "cloud metadata": "http://169.254.169.254/latest/meta-data/",
        "private range": "http://10.0.0.1/",
        "long host": "http://" + "a" * 60 + "." + "b" * 60 + "." + "c" * 60 + "." + "d" * 60 + "." + "e" * 55 + ".example/",
    }


#: Pages of the allowed host that try to leave it once loaded: the visit is refused or answers with the
#: allowed page's own text, and the disallowed server sees nothing either way.
LEAVING_PAGES = ["/redirect-offsite", "/redirect-file", "/meta-refresh-offsite.html", "/js-navigate-offsite.html",
                 "/offsite-subresources.html", "/popup.html", "/js-download.html", "/report.csv", "/download.html"]

#: Pages that test the bounds: time (never finishes, a script that never returns) and size.
BOUNDED_PAGES = ["/slow.html", "/busy-loop.html", "/huge.html"]


@pytest.fixture(scope="module")
def world_allowlist(sites: Sites) -> Allowlist:  # noqa: F811
    return Allowlist.for_base_url(sites.site.base_url)


@pytest.fixture(scope="module")
def chromium(world_allowlist: Allowlist):
    with BrowserPool(world_allowlist, BrowserConfig(max_concurrency=1)) as pool:
        yield pool


@pytest.fixture(params=["chromium", "direct"])
def visit(request, world_allowlist: Allowlist) -> VisitTool:
    backend = request.getfixturevalue("chromium") if request.param == "chromium" else DirectBackend(world_allowlist)
    return VisitTool(backend, world_allowlist, max_chars=MAX_CHARS, timeout_s=TIMEOUT)


def _bounded_visit(visit: VisitTool, url: str, sites: Sites) -> str:  # noqa: F811
    before = sites.foreign.total_hits()
    start = time.monotonic()
    out = visit(url)
    elapsed = time.monotonic() - start
    assert isinstance(out, str) and out, url
    assert elapsed < TIMEOUT + SLACK, f"{url[:120]}: {elapsed:.1f} s"
    assert len(out) <= MAX_CHARS + MARKER_ROOM, f"{url[:120]}: {len(out)} characters"
    assert sites.foreign.total_hits() == before, f"{url[:120]} reached the disallowed server: {sites.foreign.hits}"
    return out


REFUSED_CASES = ["file", "javascript", "data", "blob", "view-source", "chrome", "about", "ftp", "ws", "credentials",
                 "other host", "localhost", "127.0.0.2", "[::1]", "0.0.0.0", "decimal 127.0.0.1", "short 127.0.0.1",
                 "hex 127.0.0.1", "cloud metadata", "private range", "long host"]


def test_the_refused_cases_are_all_parametrised(sites: Sites) -> None:  # noqa: F811
    assert sorted(_refused_urls(sites)) == sorted(REFUSED_CASES)


@pytest.mark.parametrize("case", REFUSED_CASES)
def test_urls_outside_the_allowlist_are_refused_before_any_request(visit: VisitTool, sites: Sites, case: str) -> None:  # noqa: F811
    url = _refused_urls(sites)[case]
    out = _bounded_visit(visit, url, sites)
    assert out.startswith("Error: URL not allowed: "), (case, out)


@pytest.mark.parametrize("path", LEAVING_PAGES)
def test_pages_that_try_to_leave_the_allowed_host_never_reach_another(visit: VisitTool, sites: Sites, path: str) -> None:  # noqa: F811
    out = _bounded_visit(visit, sites.site.url(path), sites)
    browser = not isinstance(visit.backend, DirectBackend)  # the direct backend runs no script, follows no refresh
    if path in ("/redirect-offsite", "/redirect-file") or (browser and path == "/meta-refresh-offsite.html"):
        assert out.startswith("Error: URL not allowed: "), out
    if path in ("/report.csv", "/download.html"):
        assert out.startswith("Error: ") and "download" in out, out


@pytest.mark.parametrize("path", BOUNDED_PAGES)
def test_pages_that_never_finish_or_never_end_are_bounded(visit: VisitTool, sites: Sites, path: str) -> None:  # noqa: F811
    out = _bounded_visit(visit, sites.site.url(path), sites)
    if path == "/slow.html":
        assert out.startswith("Error: ") and "timed out" in out, out


def test_a_very_long_url_on_the_allowed_host_is_bounded(visit: VisitTool, sites: Sites) -> None:  # noqa: F811
    url = sites.site.url("/article.html?q=" + "a" * 100_000)
    out = _bounded_visit(visit, url, sites)
    assert out == f"Error: URL not allowed: {len(url):,} characters, more than the 4,096 a visit accepts", out
    _bounded_visit(visit, sites.site.url("/article.html?q=" + "a" * 4000), sites)  # accepted, and still bounded


def test_after_popups_downloads_and_a_spinning_script_the_pool_still_serves_one_page_per_context(
        chromium: BrowserPool, world_allowlist: Allowlist, sites: Sites) -> None:  # noqa: F811
    """What the pages above leave behind: popups and tabs are closed with the visit, and the next
    visit in the same (only) context answers normally."""
    tool = VisitTool(chromium, world_allowlist, max_chars=MAX_CHARS, timeout_s=TIMEOUT)
    for path in ("/popup.html", "/busy-loop.html", "/js-download.html"):
        _bounded_visit(tool, sites.site.url(path), sites)
    assert tool(sites.site.url("/article.html")).startswith("# Ardent Labs")
    deadline = time.monotonic() + 10
    while chromium.open_pages() != 1 and time.monotonic() < deadline:  # clean-up runs after the answer
        time.sleep(0.05)
    assert chromium.open_pages() == 1


# ------------------------------------------------------------------------ real web (allow_all_hosts)

def _loopback_resolver(host: str) -> list[str]:
    """The system resolver, except one name that resolves to loopback as a hostile DNS answer would (no
    DNS server needed)."""
    if host == "rebound.test":
        return ["127.0.0.1"]
    return [str(info[4][0]) for info in socket.getaddrinfo(host, None)]  # the system's for the rest


@pytest.mark.parametrize("backend", ["chromium", "direct"])
def test_open_web_refuses_loopback_by_address_spelling_and_by_name(sites: Sites, backend: str) -> None:  # noqa: F811
    web = Allowlist.open_web(resolve=_loopback_resolver)
    p = sites.foreign.port
    urls = [f"http://127.0.0.1:{p}/x", f"http://localhost:{p}/x", f"http://2130706433:{p}/x", f"http://127.1:{p}/x",
            f"http://0x7f000001:{p}/x", f"http://[::ffff:127.0.0.1]:{p}/x", f"http://[::1]:{p}/x",
            f"http://rebound.test:{p}/x"]
    if backend == "chromium":
        # Chromium resolves rebound.test to loopback too, so a gap in the check would really connect.
        config = BrowserConfig(max_concurrency=1, args=(*DEFAULT_ARGS, "--host-resolver-rules=MAP rebound.test 127.0.0.1"))
        with BrowserPool(web, config) as pool:
            tool = VisitTool(pool, web, max_chars=MAX_CHARS, timeout_s=TIMEOUT)
            outs = [_bounded_visit(tool, u, sites) for u in urls]
    else:
        tool = VisitTool(DirectBackend(web), web, max_chars=MAX_CHARS, timeout_s=TIMEOUT)
        outs = [_bounded_visit(tool, u, sites) for u in urls]
    for url, out in zip(urls, outs):
        assert out.startswith("Error: URL not allowed: ") and "local or private network address" in out, (url, out)
