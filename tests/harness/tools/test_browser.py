"""The Playwright pool (docs/tools.md): parity with the direct backend, isolation, concurrency.

Real Chromium (``/usr/bin/chromium``) against real HTTP servers on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harness.tools.allowlist import Allowlist
from harness.tools.browser import DEFAULT_ARGS, PLAYWRIGHT_DISABLED_FEATURES, BrowserConfig, BrowserPool
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


# --- launch switches and latency measures (docs/tools.md "Performance") ----------------------

def _disable_features(args: list[str]) -> list[str]:
    return [a.split("=", 1)[1] for a in args if a.startswith("--disable-features=")]


def test_launch_args_merge_every_disable_features_switch(allowlist: Allowlist) -> None:
    """Chromium honours only the last ``--disable-features``: the pool passes exactly one, holding
    Playwright's list, the pool's and the user's."""
    config = BrowserConfig(args=(*DEFAULT_ARGS, "--disable-features=FooBar,Translate"))
    args = BrowserPool(allowlist, config)._launch_args()
    switches = _disable_features(args)
    assert len(switches) == 1
    features = switches[0].split(",")
    assert len(features) == len(set(features))
    assert {"FooBar", "PaintHolding", "RenderDocument", "WebUIOmniboxPopup", "HttpsUpgrades"} <= set(features)
    for base in ("--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"):
        assert base in args
    assert any(a.startswith("--proxy-server=http://127.0.0.1:") for a in args)
    assert "--force-webrtc-ip-handling-policy=disable_non_proxied_udp" in args
    open_web = BrowserPool(Allowlist.open_web())._launch_args()
    assert not any(a.startswith("--proxy") for a in open_web)
    assert len(_disable_features(open_web)) == 1


def test_playwrights_own_disabled_features_are_kept() -> None:
    """Our ``--disable-features`` replaces Playwright's; the copy must cover the installed list."""
    import playwright

    driver = Path(playwright.__file__).parent / "driver" / "package" / "lib"
    candidates = (driver / "coreBundle.js", driver / "server" / "chromium" / "chromiumSwitches.js")
    sources = [p for p in candidates if p.is_file()]
    lists = []
    for source in sources:
        match = re.search(r"disabledFeatures\s*=\s*\[(.*?)\]", source.read_text(encoding="utf-8"), re.S)
        if match:
            body = re.sub(r"//[^\n]*", "", match.group(1))
            lists.append(set(re.findall(r"[\"']([A-Za-z0-9_]+)[\"']", body)))
    if not lists or not lists[0]:
        pytest.skip("Playwright's chromiumSwitches not found in this driver build")
    assert lists[0] <= set(PLAYWRIGHT_DISABLED_FEATURES), lists[0] - set(PLAYWRIGHT_DISABLED_FEATURES)


def test_pooled_pages_stay_visible_to_scripts(pool: BrowserPool, sites: Sites) -> None:  # noqa: F811
    """The minimised window changes nothing a page can see: visible, timers and frames run."""
    assert pool.fetch(sites.site.url("/article.html"), TIMEOUT).status == 200
    assert pool._loop is not None
    deadline = time.monotonic() + TIMEOUT
    while not (pages := [slot.page for slot in list(pool._idle) if slot.page is not None]):
        assert time.monotonic() < deadline, "no pooled page came back"
        time.sleep(0.02)  # the slot returns after its clean-up
    page = pages[0]
    probe = ("() => new Promise(r => requestAnimationFrame(() => setTimeout("
             "() => r([document.visibilityState, document.hidden, innerWidth > 0]), 10)))")
    state = asyncio.run_coroutine_threadsafe(page.evaluate(probe), pool._loop).result(TIMEOUT)
    assert state == ["visible", False, True]


LOCAL_PROBE = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>Local probe</title></head><body>
<p>Start.</p>
<img src="file:///etc/hostname" onload="document.body.insertAdjacentHTML('beforeend', '<p>IMG LOADED</p>')">
<iframe src="file:///etc/passwd"></iframe><iframe src="chrome://version"></iframe>
<img src="http://{foreign}/pixel.png">
<script>
fetch('file:///etc/passwd').then(r => r.text())
  .then(t => document.body.insertAdjacentHTML('beforeend', '<p>FETCHED ' + t + '</p>')).catch(() => null);
location.href = 'file:///etc/passwd';
</script>
</body></html>"""


class _PagesServer:
    """Serves ``pages`` (path -> HTML; 404 elsewhere); records each request's client port,
    ``Connection`` header and path."""

    def __init__(self, pages: dict[str, str]) -> None:
        seen: list[tuple[int, str, str]] = []
        self.requests = seen

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 - http.server API
                seen.append((self.client_address[1], self.headers.get("Connection", ""), self.path))
                page = pages.get(self.path)
                data = (page if page is not None else "<html><body><p>not found</p></body></html>").encode()
                self.send_response(200 if page is not None else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "_PagesServer":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def test_a_page_cannot_reach_local_files_browser_pages_or_other_hosts(sites: Sites) -> None:  # noqa: F811
    """No route in allowlist mode: Chromium itself refuses ``file:``/``chrome:`` from a web page,
    and the proxy refuses the other host."""
    with _PagesServer({"/probe.html": LOCAL_PROBE.replace("{foreign}", sites.foreign.host)}) as server:
        local = Allowlist.for_base_url(server.base_url)
        before = sites.foreign.total_hits()
        with BrowserPool(local, BrowserConfig(max_concurrency=1)) as p:
            out = VisitTool(p, local, timeout_s=TIMEOUT)(server.base_url + "/probe.html")
        assert out == "# Local probe\nStart.", out
        assert sites.foreign.total_hits() == before


def test_allowlist_mode_opens_a_fresh_connection_per_request() -> None:
    """``Connection: close`` (default in allowlist mode): no keep-alive connection whose body a
    Python ``http.server`` would hold back until the client's delayed ACK (~40 ms)."""
    page = "<html><head><title>T</title></head><body><p>x</p></body></html>"
    with _PagesServer({f"/{i}.html": page for i in range(3)}) as server:
        local = Allowlist.for_base_url(server.base_url)
        with BrowserPool(local, BrowserConfig(max_concurrency=1)) as p:
            for i in range(3):
                assert p.fetch(f"{server.base_url}/{i}.html", TIMEOUT).status == 200
        pages = [r for r in server.requests if r[2] != "/favicon.ico"]  # Chromium may ask for icons too
        assert [path for _, _, path in pages] == ["/0.html", "/1.html", "/2.html"]
        assert {header.lower() for _, header, _ in server.requests} == {"close"}
        assert len({port for port, _, _ in server.requests}) == len(server.requests)  # never reused


def test_an_immediate_meta_refresh_on_the_same_host_is_followed() -> None:
    """The page that answers is the one the refresh leads to, whatever the timing (the DOM read
    waits for an immediate refresh to replace the document)."""
    pages = {
        "/from.html": '<html><head><meta http-equiv="refresh" content="0; url=/to.html"><title>From</title></head>'
                      "<body><p>moving</p></body></html>",
        "/to.html": "<html><head><title>To</title></head><body><p>Arrived.</p></body></html>",
    }
    with _PagesServer(pages) as server:
        local = Allowlist.for_base_url(server.base_url)
        with BrowserPool(local, BrowserConfig(max_concurrency=1)) as p:
            for _ in range(3):
                result = p.fetch(server.base_url + "/from.html", TIMEOUT)
                assert result.final_url == server.base_url + "/to.html"
                assert "Arrived." in result.html and "moving" not in result.html
