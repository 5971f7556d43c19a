"""The ``visit(url, goal)`` tool and its direct-HTTP backend (docs/tools.md, docs/architecture.md §The agent system).

Two backends share one interface, :class:`VisitBackend` (``fetch(url, timeout) -> FetchResult``):

* :class:`DirectBackend` (this module): one HTTP(S) GET with the standard library, a total
  deadline, a byte cap, redirects followed by hand so that every hop passes the
  :class:`~harness.tools.allowlist.Allowlist`, and a content-type check. The fast path for CPU
  training.
* :class:`harness.tools.browser.BrowserPool`: Playwright driving Chromium, the default for
  evaluation and the real web.

:class:`VisitTool` turns either into the observation the agent sees: the URL is checked against
the allowlist, the page is fetched, its HTML goes through the page extractor (by default
:func:`harness.tools.html_text.html_to_text`, the one conversion both backends use, with the
final URL after redirects as base; ``tools.extractor: web`` for the open web, :mod:`harness.tools.extract`), and the text is cut to ``max_chars`` characters with a
``[truncated]`` line. Every failure (refused URL, HTTP error status, timeout, download, connection
error) comes back as :func:`harness.protocol.render_error` text; nothing raises into the
agent loop.

Both backends produce the same error *messages* for the same condition (the helpers below), so
a run does not change behaviour when the backend changes.

Deliberate deviations from the paper:

* The paper's visit tool summarises the page with an LLM guided by ``goal``; here the observation
  is the page's main text itself (no extra model in the loop), truncated to a character budget (a
  stand-in for the token budget). ``goal`` is not used unless ``focus`` is set (``tools.visit_focus``,
  the tiny presets): then the table rows that match it come first, before the cut
  (:func:`harness.tools.focus.focus_rows`, a deterministic stand-in for the goal-guided summary), and with
  ``links`` too (``tools.visit_links``) a page on which no row matches gets its menu and list links ordered by
  the goal, each linked page peeked at once through the same backend and allowlist
  (:func:`harness.tools.focus.focus_links`).
* ``text/plain`` pages are allowed and rendered as Chromium does (one ``<pre>`` block); any other
  non-HTML type (PDF, images, archives) is refused with an error observation.
* The direct backend decodes with the charset of the ``Content-Type`` header, else a
  ``<meta charset>`` in the first 2 KiB, else UTF-8; Chromium may guess differently for a page
  that declares nothing (the offline world always declares UTF-8).
* DNS look-ups of the direct backend are not bounded by the timeout (the standard library
  cannot interrupt ``getaddrinfo``); on the offline world there are none.
"""

from __future__ import annotations

import codecs
import html as html_lib
import http.client
import re
import socket
import ssl
import sys
import time
from dataclasses import dataclass
from http import HTTPStatus
from typing import Callable, Protocol, runtime_checkable
from urllib.parse import urljoin, urlsplit

from harness.protocol import render_error
from harness.tools.allowlist import Allowlist
from harness.tools.focus import focus_page
from harness.tools.html_text import html_to_text

TRUNCATION_MARKER = "[truncated]"
REDIRECT_STATUSES = (301, 302, 303, 307, 308)
HTML_TYPES = ("text/html", "application/xhtml+xml")
TEXT_TYPES = ("text/plain",)
DEFAULT_USER_AGENT = "mgrpo-harness/0.1 (offline research agent)"


class VisitError(Exception):
    """A page could not be visited; ``str(exc)`` is the agent-facing message (no ``Error:``)."""


@dataclass(frozen=True)
class FetchResult:
    """What a backend fetched: always HTML (plain text is wrapped in ``<pre>``)."""

    url: str
    """The URL that was asked for."""
    final_url: str
    """The URL after redirects: the base for relative links."""
    status: int
    """HTTP status of the final response (always < 400: error statuses raise)."""
    content_type: str
    """Media type of the final response, lower-case, without parameters."""
    html: str
    """The document's HTML (rendered DOM for Playwright, the body for direct), capped."""
    html_truncated: bool = False
    """True when the HTML was cut at the backend's size cap."""


@runtime_checkable
class VisitBackend(Protocol):
    """A way to load a page. Must be safe to call from several threads at once."""

    def fetch(self, url: str, timeout: float) -> FetchResult:
        """Load ``url`` within ``timeout`` seconds; raise :class:`VisitError` on any failure."""
        ...


# --- messages shared by both backends (identical wording whichever backend runs) -----------

def http_status_error(status: int, url: str) -> VisitError:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "error"
    return VisitError(f"HTTP {status} {phrase} for {url}")


def download_error(url: str) -> VisitError:
    return VisitError(f"{url} is a file download (Content-Disposition: attachment); downloads are disabled")


def content_type_error(content_type: str, url: str) -> VisitError:
    return VisitError(
        f"unsupported content type '{content_type or 'unknown'}' at {url}; visit reads HTML and plain-text pages only"
    )


def timeout_error(url: str, timeout: float) -> VisitError:
    return VisitError(f"timed out after {timeout:g} s loading {url}")


def redirect_refused(reason: str, from_url: str) -> VisitError:
    return VisitError(f"{reason} (redirected from {from_url})")


def too_many_redirects(url: str) -> VisitError:
    return VisitError(f"too many redirects starting at {url}")


def media_type(content_type_header: str | None) -> str:
    """``text/html`` from ``text/html; charset=utf-8``."""
    return (content_type_header or "").split(";", 1)[0].strip().lower()


def check_content(url: str, content_type_header: str | None, disposition: str | None) -> str:
    """Raise for downloads and unsupported types; return the media type otherwise."""
    if disposition and disposition.strip().lower().startswith("attachment"):
        raise download_error(url)
    mtype = media_type(content_type_header)
    if mtype not in HTML_TYPES + TEXT_TYPES:
        raise content_type_error(mtype, url)
    return mtype


def plain_text_as_html(text: str) -> str:
    """The HTML Chromium builds around a ``text/plain`` document (same text after conversion)."""
    return f"<html><head></head><body><pre>{html_lib.escape(text, quote=False)}</pre></body></html>"


def truncate_text(text: str, max_chars: int) -> str:
    """Cut ``text`` to ``max_chars`` characters and mark the cut with a ``[truncated]`` line."""
    if len(text) <= max_chars:
        return text
    return text[:max_chars].rstrip() + "\n" + TRUNCATION_MARKER


def page_text(html: str, base_url: str, max_chars: int) -> str:
    """``truncate_text(html_to_text(html, base_url), max_chars)``, without converting all of a huge page.

    ``html_to_text`` is a streaming parser: the text of an HTML prefix is, line for line, a
    prefix of the text of the whole document, except possibly its last line (a construct cut
    in the middle). So growing prefixes are converted until the complete lines alone exceed the
    budget; the result is the same as converting everything (checked by the tests), at a cost
    proportional to ``max_chars`` instead of the page size.
    """
    cap = max(65536, 32 * max_chars)
    while cap < len(html):
        lines = html_to_text(html[:cap], base_url=base_url).split("\n")[:-1]
        complete = "\n".join(lines)
        if len(complete) > max_chars:
            return truncate_text(complete, max_chars)
        cap *= 4
    return truncate_text(html_to_text(html, base_url=base_url), max_chars)


# --- direct HTTP backend ----------------------------------------------------------------------

_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([A-Za-z0-9_\-:.]+)""", re.I)


def _charset(content_type_header: str | None, head: bytes) -> str:
    for param in (content_type_header or "").split(";")[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            candidate = value.strip().strip("\"'")
            break
    else:
        match = _META_CHARSET.search(head[:2048])
        candidate = match.group(1).decode("ascii") if match else "utf-8"
    try:
        return codecs.lookup(candidate).name
    except LookupError:
        return "utf-8"


class DirectBackend:
    """Direct HTTP(S) fetch with the standard library (``http.client``).

    Thread-safe: every call opens its own connection. The whole call, redirects included,
    respects one deadline: the socket timeout is re-armed with the time left before every read.
    """

    def __init__(
        self,
        allowlist: Allowlist,
        max_bytes: int = 1_000_000,
        max_redirects: int = 5,
        user_agent: str = DEFAULT_USER_AGENT,
    ) -> None:
        self.allowlist = allowlist
        self.max_bytes = max_bytes
        self.max_redirects = max_redirects
        self.user_agent = user_agent
        self._ssl = ssl.create_default_context()

    def __repr__(self) -> str:
        return f"DirectBackend(max_bytes={self.max_bytes}, max_redirects={self.max_redirects}, {self.allowlist.describe()})"

    def fetch(self, url: str, timeout: float) -> FetchResult:
        deadline = time.monotonic() + timeout
        current = url
        for hop in range(self.max_redirects + 1):
            reason = self.allowlist.check(current)
            if reason is not None:
                raise VisitError(reason) if hop == 0 else redirect_refused(reason, url)
            try:
                result = self._get(current, deadline)
            except (socket.timeout, TimeoutError):
                raise timeout_error(url, timeout) from None
            except (OSError, http.client.HTTPException) as exc:
                raise VisitError(f"could not load {current}: {type(exc).__name__}: {exc}") from None
            status, headers, body, truncated = result
            if status in REDIRECT_STATUSES and headers.get("location"):
                current = urljoin(current, headers["location"])
                continue
            if status >= 400:
                raise http_status_error(status, current)
            mtype = check_content(current, headers.get("content-type"), headers.get("content-disposition"))
            text = body.decode(_charset(headers.get("content-type"), body), errors="replace")
            html = plain_text_as_html(text) if mtype in TEXT_TYPES else text
            return FetchResult(url, current, status, mtype, html, truncated)
        raise too_many_redirects(url)

    def _get(self, url: str, deadline: float) -> tuple[int, dict[str, str], bytes, bool]:
        parts = urlsplit(url)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout()
        conn: http.client.HTTPConnection
        if parts.scheme == "https":
            conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=remaining, context=self._ssl)
        else:
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=remaining)
        try:
            path = parts.path or "/"
            if parts.query:
                path += "?" + parts.query
            conn.request("GET", path, headers={
                "User-Agent": self.user_agent,
                "Accept": "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.1",
                "Accept-Encoding": "identity",
                "Connection": "close",
            })
            self._arm(conn, deadline)
            resp = conn.getresponse()
            headers = {k.lower(): v for k, v in resp.getheaders()}
            if resp.status in REDIRECT_STATUSES or resp.status >= 400:
                return resp.status, headers, b"", False
            mtype = media_type(headers.get("content-type"))
            disposition = headers.get("content-disposition", "")
            if disposition.strip().lower().startswith("attachment") or mtype not in HTML_TYPES + TEXT_TYPES:
                return resp.status, headers, b"", False  # refused by check_content: never read the body
            chunks: list[bytes] = []
            size = 0
            while size <= self.max_bytes:
                self._arm(conn, deadline)
                chunk = resp.read(min(65536, self.max_bytes + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            body = b"".join(chunks)
            truncated = len(body) > self.max_bytes
            return resp.status, headers, body[: self.max_bytes], truncated
        finally:
            conn.close()

    @staticmethod
    def _arm(conn: http.client.HTTPConnection, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout()
        if conn.sock is not None:
            conn.sock.settimeout(remaining)


# --- the tool ---------------------------------------------------------------------------------

class VisitTool:
    """``visit(url, goal)``: the agent-facing tool. Never raises; thread-safe if the backend is."""

    def __init__(self, backend: VisitBackend, allowlist: Allowlist, max_chars: int = 6000, timeout_s: float = 10.0,
                 extract: Callable[[str, str, int], str] | None = None, focus: bool = False,
                 links: bool = False) -> None:
        if links and not focus:
            raise ValueError("VisitTool: links=True orders links by the goal when no row matches it; set focus=True")
        self.backend = backend
        self.allowlist = allowlist
        self.max_chars = max_chars
        self.timeout_s = timeout_s
        # HTML -> text (harness.tools.extract, tools.extractor); None: this module's page_text ("simple")
        self.extract = extract or page_text
        # the goal's rows first (tools.visit_focus): the whole page is converted, reordered, then cut
        self.focus = focus
        # ... or, where no row matches, its links, peeking at each linked page (tools.visit_links)
        self.links = links

    def __repr__(self) -> str:
        return (f"VisitTool(backend={self.backend!r}, max_chars={self.max_chars}, timeout_s={self.timeout_s}"
                f"{', focus' if self.focus else ''}{', links' if self.links else ''})")

    def page_text(self, url: str, goal: str = "") -> str:
        """The page text (truncated; with ``focus``, the rows matching ``goal`` first), raising
        :class:`VisitError` on failure."""
        url = url.strip()
        reason = self.allowlist.check(url)
        if reason is not None:
            raise VisitError(reason)
        result = self.backend.fetch(url, self.timeout_s)
        if self.focus and goal.strip():  # a row past the budget can still come first: reorder, then cut
            text = self.extract(result.html, result.final_url, sys.maxsize)
            text = truncate_text(focus_page(text, goal, self.links, self._peek), self.max_chars)
        else:
            text = self.extract(result.html, result.final_url, self.max_chars)
        if not text:
            return f"(the page at {result.final_url} has no text)"
        return text

    def _peek(self, url: str) -> str | None:
        """A linked page's whole text for the link order of ``links`` (None when the allowlist refuses it or it
        cannot be read: the link then counts by its own text)."""
        if self.allowlist.check(url) is not None:
            return None
        try:
            result = self.backend.fetch(url, self.timeout_s)
            return self.extract(result.html, result.final_url, sys.maxsize)
        except Exception:  # noqa: BLE001 - a page that cannot be peeked at only loses its look-ahead score
            return None

    def __call__(self, url: str, goal: str = "") -> str:
        try:
            return self.page_text(url, goal if isinstance(goal, str) else "")
        except VisitError as exc:
            message = str(exc)
        except Exception as exc:  # noqa: BLE001 - the agent loop must never see an exception
            message = f"visit failed for {url}: {type(exc).__name__}: {exc}"
        # An error quotes its URL, which may be long: the observation keeps the page budget all the same.
        return truncate_text(render_error(message), self.max_chars)
