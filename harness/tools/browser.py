"""Playwright browser pool: the Chromium ``visit`` backend (docs/tools.md).

:class:`BrowserPool` launches **one** Chromium (Debian's ``/usr/bin/chromium``; ``playwright
install`` cannot download browsers here) and serves ``fetch(url, timeout) -> FetchResult`` to
any number of ordinary (sync) threads: the rollout engine calls tools from plain threads, so the
pool runs its own asyncio event loop in a background thread and ``fetch`` hands each visit to it
(``asyncio.run_coroutine_threadsafe``). Browser contexts are created lazily and **reused**; at
most ``max_concurrency`` visits run at once (one context each), the rest wait their turn.

Every visit: the context's page is reused (a fresh one after a failed visit, whose pending
error-page navigation would interrupt the next ``goto``), ``page.goto`` with the per-page
timeout (the whole visit, waiting for a free context included, is also bounded by
``asyncio.wait_for``), the response checked (status, ``Content-Disposition``, content type: the
same rules and messages as the direct backend), then the rendered DOM serialised
(``page.content()``'s doctype-less equivalent, cut at ``max_html_chars`` inside the page so a
huge page never crosses the pipe whole). Cookie clean-up runs after the caller has its answer;
the context returns to the pool only when it is done.

Isolation and the allowlist, in three layers:

1. Allowlist mode (the offline world): Chromium is launched with a proxy that refuses every
   connection (a bound, never-listening loopback port) and a proxy bypass list holding only the
   allowed ``host:port`` keys (``<-loopback>`` removes Chromium's implicit loopback bypass), and
   WebRTC may use only proxied traffic. Every request to any other host or port (navigations,
   redirect hops, frames, subresources, XHR, workers, WebSockets) fails inside Chromium before a
   byte leaves; ``file:``/``chrome:`` URLs cannot be loaded by a web page at all. No
   ``context.route`` is installed in this mode: it would pause *every* request for a round trip
   to the Playwright driver (a few ms per visit) and adds nothing the proxy does not
   already refuse. With ``allow_all_hosts`` (real web, no proxy) ``context.route`` aborts every
   request whose URL the :class:`~harness.tools.allowlist.Allowlist` refuses (scheme, private
   addresses); Playwright does not route HTTP redirect hops, so there the redirect chain checked
   after the navigation is the redirect check (documented limitation: a redirect to a refused
   private address is requested but its content never reaches the agent).
2. A ``requestfailed`` listener (failed requests only: successful ones cost no event) notes each
   refused main-frame navigation, so an off-host redirect, meta refresh or script navigation
   comes back as an observation naming the refused URL. The final URL and the redirect chain are
   checked again after the navigation.
3. Contexts are created with ``accept_downloads=False`` and ``service_workers="block"``; cookies
   are cleared and the pages a visit opened (popups, tabs) are closed when a context goes back to
   the pool.

Latency (docs/tools.md "Performance"): besides the above, Chromium runs without the per-window
omnibox WebUI renderers and without RenderDocument, Playwright's own ``--disable-features`` list
is kept (Chromium honours only the last such switch, so the pool merges them into one), and each
page's browser window is minimised so the toolbar and tab strip are not repainted on every
navigation.

Deliberate choices: the pool is lazy (Chromium starts on the first ``fetch`` or on ``start()``),
a crashed browser is relaunched on the next visit, and ``close()`` is idempotent (also called by
the context manager and, as a last resort, at interpreter exit).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from harness.config import help_field
from harness.tools.allowlist import Allowlist
from harness.tools.visit import (
    FetchResult,
    VisitError,
    check_content,
    download_error,
    http_status_error,
    redirect_refused,
    timeout_error,
    too_many_redirects,
)

DEFAULT_CHROMIUM = "/usr/bin/chromium"
# Features Playwright itself disables (its ``chromiumSwitches``). Chromium honours only the *last*
# ``--disable-features`` switch, so any list we pass replaces Playwright's: ``_launch_args``
# merges this one, the pool's and the user's into a single switch (a test checks that this copy
# still covers the installed Playwright's list).
PLAYWRIGHT_DISABLED_FEATURES = (
    "AvoidUnnecessaryBeforeUnloadCheckSync", "DestroyProfileOnBrowserClose", "HttpsUpgrades",
    "HttpsFirstBalancedModeAutoEnable", "LensOverlay", "MediaRouter", "PaintHolding",
    "ThirdPartyStoragePartitioning", "AvoidCorsURLLoaderRestartOnRedirect", "TcpPortRandomizationWin",
    "OptimizationHints", "NetworkTimeServiceQuerying", "AimEnabled", "PreconnectToSearch",
    "msForceBrowserSignIn", "msEdgeUpdateLaunchServicesPreferredVersion",
)
# Disabled for speed (measured on the 2-core development box, docs/tools.md "Performance"):
# the omnibox-popup WebUI renderers that new-headless Chromium keeps per window and updates on
# every navigation (about a fifth of a visit's CPU), and RenderDocument (a new frame host, hence
# a new Blink frame, for every same-site navigation of the reused page).
POOL_DISABLED_FEATURES = (
    "Translate", "OptimizationHints", "MediaRouter", "HttpsUpgrades",
    "WebUIOmniboxPopup", "WebUIOmniboxAimPopup", "WebUIOmniboxFullPopup", "PreloadTopChromeWebUI",
    "RenderDocument",
)
DEFAULT_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    # Not in the project's base list: measured 10-20 % faster visits on a loaded 2-core box
    # (pooled contexts are otherwise treated as background renderers and deprioritised), and
    # no automatic http -> https upgrade (it rewrites a server's redirect into a synthetic 307 to
    # https; the direct backend follows what the server said, so both must).
    "--disable-extensions",
    "--disable-renderer-backgrounding",
    "--disable-background-timer-throttling",
    "--disable-backgrounding-occluded-windows",
    "--disable-ipc-flooding-protection",
    "--disable-features=" + ",".join(POOL_DISABLED_FEATURES),
)
# The DOM serialisation, cut in the page (Playwright's page.content() is doctype + this).
# Also returns the document's URL: a page that navigated on its own between ``goto`` and this
# read (meta refresh, script) is noticed even when the new document answered the read. A page
# with an immediate ``<meta http-equiv="refresh" content="0; ...">`` starts navigating just after
# its load event, racing this read: the read then waits ``settle`` ms for the navigation to
# replace the document (it returns as soon as it does), so the outcome does not depend on timing.
_SERIALISE_JS = """async ([limit, settle, ready, waitMs]) => {
  const refresh = settle > 0 ? document.querySelector('meta[http-equiv="refresh" i]') : null;
  if (refresh && parseFloat(refresh.content) === 0) await new Promise(r => setTimeout(r, settle));
  const event = ready === 'complete' ? 'load' : 'DOMContentLoaded';
  const done = () => document.readyState === 'complete' || (ready === 'interactive' && document.readyState === 'interactive');
  if (ready && !done()) await new Promise(r => { window.addEventListener(event, r, {once: true}); setTimeout(r, waitMs); });
  const h = document.documentElement ? document.documentElement.outerHTML : '';
  return [h.length, h.slice(0, limit), location.href];
}"""
_REFRESH_SETTLE_MS = 1000


@dataclass(frozen=True)
class BrowserConfig:
    """How the pool launches Chromium and loads pages."""

    executable_path: str = help_field(DEFAULT_CHROMIUM, "Chromium binary (Debian package ``chromium``).")
    args: tuple[str, ...] = help_field(
        DEFAULT_ARGS, "Command-line switches for Chromium (the proxy switches of the allowlist are added).")
    headless: bool = help_field(True, "Run without a window.")
    max_concurrency: int = help_field(
        4, "Visits loaded at the same time (one reused browser context each); others wait.")
    max_html_chars: int = help_field(1_000_000, "Cap on the serialised DOM handed to ``html_to_text``.")
    wait_until: str = help_field(
        "load", "Navigation event ``goto`` waits for: ``load``, ``domcontentloaded``, ``networkidle`` or ``commit``.")
    user_agent: str | None = help_field(None, "User-Agent header; ``None`` keeps Chromium's own.")
    launch_timeout_s: float = help_field(60.0, "How long starting Chromium may take before the pool gives up.")
    extra_context_options: dict[str, Any] = help_field(
        {}, "More ``browser.new_context`` keyword arguments (e.g. ``locale``, ``viewport``).")
    close_connections: bool | None = help_field(
        None, "Send ``Connection: close``, so every request gets a fresh TCP connection (as the direct backend does). "
        "``None``: on in allowlist mode, off with ``allow_all_hosts``. On loopback a connection costs ~0.1 ms, while "
        "a reused one to a Python ``http.server`` (the world's server writes headers and body separately, Nagle's "
        "algorithm on) holds the body back until Chromium's delayed ACK, ~40 ms per visit; on the real web it would "
        "cost a TLS handshake per request.")


class BrowserPool:
    """One Chromium, reused contexts, bounded concurrency; a thread-safe sync ``fetch``.

    Use as a context manager, or call :meth:`close` when done::

        with BrowserPool(Allowlist.for_base_url(world.base_url)) as pool:
            result = pool.fetch(world.base_url + "/wiki/x.html", timeout=10)
    """

    def __init__(self, allowlist: Allowlist, config: BrowserConfig | None = None) -> None:
        self.allowlist = allowlist
        self.config = config or BrowserConfig()
        if self.config.max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        # Loop-owned state (touched only from the pool's thread).
        self._pw: Any = None
        self._browser: Any = None
        self._idle: list[_Slot] = []
        self._n_contexts = 0
        self._cleanup: set[asyncio.Task[None]] = set()
        self._sem: asyncio.Semaphore | None = None
        self._launch_lock: asyncio.Lock | None = None
        self._dead_proxy: socket.socket | None = None

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("running" if self._loop else "not started")
        return f"BrowserPool({state}, contexts={self._n_contexts}, max_concurrency={self.config.max_concurrency}, {self.allowlist.describe()})"

    @property
    def n_contexts(self) -> int:
        """Browser contexts alive now (never more than ``max_concurrency``)."""
        return self._n_contexts

    def open_pages(self) -> int:
        """Pages open in the pool's contexts now (popups and tabs a page opened included): one per
        idle context once every visit's clean-up has run."""
        if self._loop is None or self._browser is None:
            return 0

        async def count() -> int:
            return sum(len(ctx.pages) for ctx in self._browser.contexts)

        return asyncio.run_coroutine_threadsafe(count(), self._loop).result(30)

    # --- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> "BrowserPool":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Start the event-loop thread and launch Chromium (idempotent)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("this BrowserPool is closed")
            if self._loop is not None:
                return
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="BrowserPool-loop", daemon=True)
            thread.start()
            try:
                asyncio.run_coroutine_threadsafe(self._astart(), loop).result(self.config.launch_timeout_s)
            except BaseException as exc:
                loop.call_soon_threadsafe(loop.stop)
                thread.join(5)
                loop.close()
                if isinstance(exc, concurrent.futures.TimeoutError):
                    raise RuntimeError(f"Chromium did not start within {self.config.launch_timeout_s:g} s") from None
                raise
            self._loop, self._thread = loop, thread
            atexit.register(self.close)

    def close(self) -> None:
        """Close every context, the browser, Playwright and the loop thread (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            loop, thread = self._loop, self._thread
            self._loop = None
        if loop is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._aclose(), loop).result(30)
        except Exception:  # noqa: BLE001 - best effort: the loop stops below regardless
            pass
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(10)
        loop.close()
        atexit.unregister(self.close)

    # --- the backend interface --------------------------------------------------------------

    def fetch(self, url: str, timeout: float) -> FetchResult:
        """Load ``url`` in Chromium within ``timeout`` s; raise :class:`VisitError` on failure.

        Safe to call from any number of threads; at most ``max_concurrency`` run at once (time
        spent waiting for a free context counts against ``timeout``).
        """
        reason = self.allowlist.check(url)
        if reason is not None:
            raise VisitError(reason)
        if self._loop is None:
            self.start()
        loop = self._loop
        if loop is None:
            raise VisitError("the browser pool is closed")
        future = asyncio.run_coroutine_threadsafe(self._afetch(url, timeout), loop)
        try:
            # The coroutine bounds itself; this margin only guards against a wedged loop.
            return future.result(timeout + 15.0)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise timeout_error(url, timeout) from None

    # --- loop side --------------------------------------------------------------------------

    def _launch_args(self) -> list[str]:
        # Every --disable-features switch (ours, the user's, Playwright's own) merged into one:
        # Chromium keeps only the last one it is given.
        features = dict.fromkeys(PLAYWRIGHT_DISABLED_FEATURES)
        args = []
        for arg in self.config.args:
            if arg.startswith("--disable-features="):
                features.update(dict.fromkeys(f for f in arg.split("=", 1)[1].split(",") if f))
            else:
                args.append(arg)
        args.append("--disable-features=" + ",".join(features))
        if not self.allowlist.allow_all_hosts:
            if self._dead_proxy is None:
                # Bound but never listening: connecting to it is refused, and no other process
                # can take the port while the pool lives.
                self._dead_proxy = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                self._dead_proxy.bind(("127.0.0.1", 0))
            port = self._dead_proxy.getsockname()[1]
            bypass = ";".join(["<-loopback>", *self.allowlist.hosts])
            args += [
                f"--proxy-server=http://127.0.0.1:{port}",
                f"--proxy-bypass-list={bypass}",
                # WebRTC may send UDP around a proxy (STUN/TURN): only proxied traffic.
                "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
            ]
        return args

    async def _astart(self) -> None:
        from playwright.async_api import async_playwright

        self._sem = asyncio.Semaphore(self.config.max_concurrency)
        self._launch_lock = asyncio.Lock()
        self._pw = await async_playwright().start()
        try:
            await self._launch()
        except BaseException:
            await self._pw.stop()
            raise

    async def _launch(self) -> None:
        self._idle.clear()  # contexts of a crashed browser are gone with it
        self._n_contexts = 0
        self._browser = await self._pw.chromium.launch(
            executable_path=self.config.executable_path,
            headless=self.config.headless,
            args=self._launch_args(),
        )

    async def _aclose(self) -> None:
        if self._cleanup:
            await asyncio.wait(list(self._cleanup), timeout=10)
        for slot in self._idle:
            try:
                await slot.ctx.close()
            except Exception:  # noqa: BLE001
                pass
        self._idle.clear()
        if self._browser is not None:
            try:
                await self._browser.close()
            except Exception:  # noqa: BLE001
                pass
        if self._pw is not None:
            await self._pw.stop()
        if self._dead_proxy is not None:
            self._dead_proxy.close()

    async def _new_slot(self) -> _Slot:
        options: dict[str, Any] = {"accept_downloads": False, "service_workers": "block"}
        if self.config.user_agent:
            options["user_agent"] = self.config.user_agent
        options.update(self.config.extra_context_options)
        close = self.config.close_connections
        if close if close is not None else not self.allowlist.allow_all_hosts:
            headers = dict(options.get("extra_http_headers") or {})
            if not any(k.lower() == "connection" for k in headers):
                headers["Connection"] = "close"
            options["extra_http_headers"] = headers
        ctx = await self._browser.new_context(**options)
        self._n_contexts += 1
        ctx.on("close", self._on_context_close)
        if self.allowlist.allow_all_hosts:
            # No proxy lock-down in this mode: every request is checked (scheme, private
            # addresses). In allowlist mode the proxy alone refuses other hosts, so allowed
            # requests are never paused for interception (a round trip to the driver each).
            await ctx.route("**/*", self._route)
        return _Slot(ctx)

    def _on_context_close(self, *_: Any) -> None:
        self._n_contexts = max(0, self._n_contexts - 1)

    async def _new_page(self, slot: _Slot) -> Any:
        page = await slot.ctx.new_page()

        def on_request_failed(request: Any) -> None:
            # A main-frame navigation (redirect hop, meta refresh, script) that the proxy or the
            # route stopped: remember the refused URL so the observation names it. Only failed
            # requests reach Python; the successful ones cost no event.
            try:
                if not request.is_navigation_request() or request.frame.parent_frame is not None:
                    return
            except Exception:  # noqa: BLE001 - a request without a frame (worker) is no navigation
                return
            reason = self.allowlist.check(request.url)
            if reason is not None:
                slot.refused.append(reason)

        page.on("requestfailed", on_request_failed)
        await self._minimise_window(slot.ctx, page)
        slot.page = page
        return page

    async def _minimise_window(self, ctx: Any, page: Any) -> None:
        """Minimise the page's browser window (best effort). New-headless Chromium still lays out
        and paints its toolbar and tab strip on every navigation; a minimised window skips that
        (about a fifth of a visit's CPU here). The page itself stays visible to scripts
        (``document.visibilityState``, timers, ``requestAnimationFrame`` and the viewport are
        unchanged)."""
        if not self.config.headless:
            return
        try:
            session = await ctx.new_cdp_session(page)
            try:
                window = await session.send("Browser.getWindowForTarget")
                await session.send("Browser.setWindowBounds",
                                   {"windowId": window["windowId"], "bounds": {"windowState": "minimized"}})
            finally:
                await session.detach()
        except Exception:  # noqa: BLE001 - only a speed-up
            pass

    async def _route(self, route: Any) -> None:
        """``allow_all_hosts`` only: abort refused requests (the failure names them, above). The check may
        resolve a host name (Allowlist.resolve), so it runs off the event loop that serves every visit."""
        loop = asyncio.get_running_loop()
        if await loop.run_in_executor(None, self.allowlist.check, route.request.url) is None:
            await route.continue_()
        else:
            await route.abort("blockedbyclient")

    async def _afetch(self, url: str, timeout: float) -> FetchResult:
        assert self._sem is not None
        try:
            return await asyncio.wait_for(self._afetch_inner(url, timeout), timeout)
        except asyncio.TimeoutError:
            raise timeout_error(url, timeout) from None

    async def _afetch_inner(self, url: str, timeout: float) -> FetchResult:
        assert self._sem is not None and self._launch_lock is not None
        await self._sem.acquire()
        handed_over = False
        try:
            if self._browser is None or not self._browser.is_connected():
                async with self._launch_lock:  # one relaunch, however many visits noticed
                    if self._browser is None or not self._browser.is_connected():
                        await self._launch()  # Chromium crashed or was killed: start a fresh one
            slot = self._idle.pop() if self._idle else await self._new_slot()
            slot.refused = []
            ok = False
            try:
                result = await self._visit(slot, url, timeout)
                ok = True
                return result
            finally:
                # Clean-up (cookies, a failed page) runs after the caller has its answer; the
                # slot and its semaphore permit return to the pool only when it is done.
                task = asyncio.get_running_loop().create_task(self._release_and_free(slot, ok))
                self._cleanup.add(task)
                task.add_done_callback(self._cleanup.discard)
                handed_over = True
        finally:
            if not handed_over:
                self._sem.release()

    async def _release_and_free(self, slot: _Slot, reuse_page: bool) -> None:
        assert self._sem is not None
        try:
            await self._release(slot, reuse_page)
        finally:
            self._sem.release()

    async def _release(self, slot: _Slot, reuse_page: bool) -> None:
        """Back to the pool. After a failure the page is closed: a failed navigation leaves a
        pending error-page navigation that would interrupt the next ``goto``."""
        try:
            if not reuse_page and slot.page is not None:
                page, slot.page = slot.page, None
                await page.close()
            for other in list(slot.ctx.pages):  # popups and tabs the page opened: gone with the visit
                if other is not slot.page:
                    await other.close()
            await slot.ctx.clear_cookies()
        except Exception:  # noqa: BLE001 - a broken context is dropped, not reused
            try:
                await slot.ctx.close()
            except Exception:  # noqa: BLE001
                pass
            return
        if self._browser is not None and self._browser.is_connected():
            self._idle.append(slot)

    async def _visit(self, slot: _Slot, url: str, timeout: float) -> FetchResult:
        from playwright.async_api import Error as PlaywrightError
        from playwright.async_api import TimeoutError as PlaywrightTimeout

        deadline = time.monotonic() + timeout
        page = slot.page if slot.page is not None and not slot.page.is_closed() else await self._new_page(slot)
        try:
            response = await page.goto(url, timeout=timeout * 1000, wait_until=self.config.wait_until)
        except PlaywrightTimeout:
            raise timeout_error(url, timeout) from None
        except PlaywrightError as exc:
            message = str(exc)
            if "Download is starting" in message:
                raise download_error(url) from None
            if slot.refusal:
                raise redirect_refused(slot.refusal, url) from None
            if "ERR_TOO_MANY_REDIRECTS" in message:
                raise too_many_redirects(url) from None
            if "ERR_UNSAFE_REDIRECT" in message:
                raise redirect_refused(
                    f"URL not allowed: the page redirects to a refused scheme; {self.allowlist.describe()}", url
                ) from None
            detail = message.splitlines()[0].replace("Page.goto: ", "")
            raise VisitError(f"could not load {url}: {detail}") from None
        if response is None:
            raise VisitError(f"could not load {url}: no response")
        # The redirect chain once more (the only redirect check with allow_all_hosts).
        req = response.request.redirected_from
        while req is not None:
            reason = self.allowlist.check(req.url)
            if reason is not None:
                raise redirect_refused(reason, url)
            req = req.redirected_from
        final_url = response.url
        reason = self.allowlist.check(final_url)
        if reason is not None:
            raise redirect_refused(reason, url)
        if response.status >= 400:
            raise http_status_error(response.status, final_url)
        headers = response.headers  # provisional headers: enough for type and disposition, no round trip
        mtype = check_content(final_url, headers.get("content-type"), headers.get("content-disposition"))
        try:
            read = [self.config.max_html_chars, _REFRESH_SETTLE_MS, "", 0]
            total, html, doc_url = await page.evaluate(_SERIALISE_JS, read)
            navigated = _without_fragment(doc_url) != _without_fragment(final_url)
        except PlaywrightError:
            navigated = True
        # A refused navigation after the load (meta refresh, script): its failure event arrives
        # before the read's answer, whichever document answered.
        if slot.refusal:
            raise redirect_refused(slot.refusal, url)
        if navigated:
            # The page navigated on its own after loading: wait for the new document, read that.
            # The wait can return for the old document's state while the new one has not committed yet: the
            # read then dies with the old document ("Execution context was destroyed"; wait and read again,
            # until the deadline) or runs in a new one still loading (so the read itself waits until its
            # document is parsed, or loaded, as far as `wait_until` asks).
            state = self.config.wait_until if self.config.wait_until != "commit" else "load"
            ready = "interactive" if state == "domcontentloaded" else "complete"
            while True:
                remaining = max(0.05, deadline - time.monotonic())
                try:
                    await page.wait_for_load_state(state, timeout=remaining * 1000)
                    read = [self.config.max_html_chars, 0, ready, int(remaining * 1000)]
                    total, html, _ = await page.evaluate(_SERIALISE_JS, read)
                    break
                except PlaywrightTimeout:
                    raise timeout_error(url, timeout) from None
                except PlaywrightError as exc:
                    if slot.refusal:
                        raise redirect_refused(slot.refusal, url) from None
                    if _navigation_in_flight(exc) and time.monotonic() < deadline:
                        await asyncio.sleep(0.02)
                        continue
                    raise VisitError(f"could not load {url}: {str(exc).splitlines()[0]}") from None
            if slot.refusal:
                raise redirect_refused(slot.refusal, url)
            final_url = page.url
            reason = self.allowlist.check(final_url)
            if reason is not None:
                raise redirect_refused(reason, url)
        return FetchResult(url, final_url, response.status, mtype, html, total > self.config.max_html_chars)


def _navigation_in_flight(exc: BaseException) -> bool:
    """Whether a page read failed only because the page was replacing its document."""
    message = str(exc)
    return "Execution context was destroyed" in message or "Cannot find context" in message


class _Slot:
    """One reused browser context and its current page."""

    __slots__ = ("ctx", "page", "refused")

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.page: Any = None
        self.refused: list[str] = []
        """Why main-frame navigations of the current visit were stopped (refused URLs, in order)."""

    @property
    def refusal(self) -> str | None:
        """Why the current visit was stopped: the first refused navigation."""
        return self.refused[0] if self.refused else None


def _without_fragment(url: str) -> str:
    return url.split("#", 1)[0]
