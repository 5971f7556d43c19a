"""Local HTTP fixture servers for the tool tests (docs/tools.md).

Real HTTP on 127.0.0.1 (stdlib ``http.server``, port 0, one thread per request) serving the
page types the ``visit`` backends must handle: a simple article, a page with nav/links/tables/
lists, scripts and styles, a JS-rendered page, a page that never finishes, error statuses, a huge
page, a download, plain text, a PDF, redirects (same host, off-host, loops), pages whose
subresources point off-host, and pages that act once loaded (popups, script-started downloads, a
script navigation off-host, a script that never returns).

:class:`FixtureServer` counts every request by path (``hits``), so a test can prove that a
refused host was never contacted. :class:`SearchStubServer` is a canned search API (SearXNG
JSON and a keyed JSON API) that checks the API key header.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable
from urllib.parse import parse_qs, urlsplit

HTML_HEAD = '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>{extra}</head>\n'

ARTICLE = HTML_HEAD.format(title="Ardent Labs — overview", extra="") + """<body>
<main><article>
<h1>Ardent Labs</h1>
<p>Ardent Labs is a research company founded in 1987 in Port Verrin by <b>Marlow Vance</b>.</p>
<p>Its flagship product is the Quill&nbsp;9 sensor; revenue in 2019 was 41 million crowns.
Café staff call it “the lab”.</p>
<p>See also the <a href="/rich.html">company directory</a>.</p>
</article></main>
</body></html>
"""

RICH = HTML_HEAD.format(title="Company directory", extra='<link rel="stylesheet" href="/style.css">') + """<body>
<nav><a href="/">Home</a> | <a href="/about.html">About</a></nav>
<header><h1>Directory of companies</h1></header>
<section>
<h2>Members</h2>
<ul>
  <li><a href="/article.html">Ardent Labs</a> (founded 1987)</li>
  <li><a href="team/marlow.html">Marlow Vance</a>, chief executive</li>
  <li>Quill Works<ul><li>subsidiary: Quill East</li></ul></li>
</ul>
<ol><li>first</li><li>second</li></ol>
<table>
  <tr><th>Name</th><th>City</th><th>Founded</th></tr>
  <tr><td>Ardent Labs</td><td>Port Verrin</td><td>1987</td></tr>
  <tr><td>Quill Works</td><td>Hallow Bay</td><td>2001</td></tr>
</table>
<dl><dt>CEO</dt><dd>Marlow Vance</dd></dl>
<blockquote>We measure things.<br>Carefully.</blockquote>
<p>External: <a href="https://example.org/page?x=1&amp;y=2">example</a>.</p>
</section>
<footer>© 2026 Directory</footer>
</body></html>
"""

SCRIPTED = HTML_HEAD.format(
    title="Scripted page",
    extra="<style>body { color: #333 } p::after { content: 'styled' }</style><script>var x = 1;</script>",
) + """<body>
<script>window.counter = (window.counter || 0) + 1; /* does not touch the DOM */</script>
<p>Visible paragraph one.</p>
<noscript>Please enable JavaScript.</noscript>
<style>.hidden { display: none }</style>
<template><p>template text</p></template>
<p>Visible paragraph two with <span class="hidden">hidden-by-css text</span>.</p>
</body></html>
"""

JS_RENDERED = HTML_HEAD.format(title="Rendered by script", extra="") + """<body>
<p>Static part.</p>
<div id="out"></div>
<script>document.getElementById('out').innerHTML = '<p>Rendered by JavaScript.</p>';</script>
</body></html>
"""

PLAIN = "Plain text file.\n  Indented <not a tag> & more.\nLast line.\n"


def huge_page(paragraphs: int = 16_000) -> str:
    """About 1.2 MB of HTML (over the default 1,000,000-character cap)."""
    body = "\n".join(f"<p>Paragraph {i}: the quick brown fox jumps over the lazy dog.</p>" for i in range(paragraphs))
    return HTML_HEAD.format(title="Huge page", extra="") + f"<body>\n{body}\n</body></html>\n"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request: object, client_address: object) -> None:
        # A client that gave up (a timeout test) is expected, not an error worth printing.
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]


class FixtureServer:
    """A page server on ``127.0.0.1:<free port>``; use as a context manager.

    ``foreign_base`` is the base URL of another server (a non-allowlisted host) that the
    off-host redirect and subresource pages point to.
    """

    def __init__(self, foreign_base: str = "http://localhost:9") -> None:
        self.foreign_base = foreign_base.rstrip("/")
        self.hits: Counter[str] = Counter()
        self._hits_lock = threading.Lock()
        self._stop = threading.Event()
        self._huge = huge_page().encode()
        self._server = _Server(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._server.serve_forever, name="FixtureServer", daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return self.base_url + path

    def __enter__(self) -> "FixtureServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def total_hits(self) -> int:
        with self._hits_lock:
            return sum(self.hits.values())

    # --- routes -----------------------------------------------------------------------------

    def _routes(self) -> dict[str, Callable[[BaseHTTPRequestHandler], None]]:
        foreign = self.foreign_base
        html = _send_html
        return {
            "/article.html": lambda h: html(h, ARTICLE),
            "/rich.html": lambda h: html(h, RICH),
            "/scripted.html": lambda h: html(h, SCRIPTED),
            "/js-rendered.html": lambda h: html(h, JS_RENDERED),
            "/style.css": lambda h: _send(h, 200, b"body { margin: 0 }", "text/css"),
            "/latin1.html": lambda h: _send(
                h, 200, "<html><head><title>Latin</title></head><body><p>Œuvre? No: café, naïve.</p></body></html>".encode("cp1252"),
                "text/html; charset=windows-1252"),
            "/plain.txt": lambda h: _send(h, 200, PLAIN.encode(), "text/plain; charset=utf-8"),
            "/doc.pdf": lambda h: _send(h, 200, b"%PDF-1.4\n%fake\n", "application/pdf"),
            "/report.csv": lambda h: _send(
                h, 200, b"a,b\n1,2\n", "text/csv", {"Content-Disposition": 'attachment; filename="report.csv"'}),
            "/download.html": lambda h: _send(
                h, 200, ARTICLE.encode(), "text/html; charset=utf-8", {"Content-Disposition": "attachment; filename=a.html"}),
            "/error500.html": lambda h: _send(h, 500, b"<html><body><p>boom</p></body></html>", "text/html"),
            "/huge.html": lambda h: _send(h, 200, self._huge, "text/html; charset=utf-8"),
            "/slow.html": self._slow,
            "/redirect-local": lambda h: _redirect(h, "/article.html"),
            "/redirect-chain": lambda h: _redirect(h, "/redirect-local"),
            "/redirect-loop": lambda h: _redirect(h, "/redirect-loop"),
            "/redirect-offsite": lambda h: _redirect(h, foreign + "/secret.html"),
            "/redirect-file": lambda h: _redirect(h, "file:///etc/passwd"),
            "/meta-refresh-offsite.html": lambda h: html(
                h, f'<html><head><meta http-equiv="refresh" content="0; url={foreign}/meta.html"><title>Moving</title></head><body><p>moving</p></body></html>'),
            "/offsite-subresources.html": lambda h: html(h, (
                "<html><head><title>Subresources</title>"
                f'<link rel="stylesheet" href="{foreign}/x.css"><script src="{foreign}/x.js"></script></head>'
                f'<body><p>Body text.</p><img src="{foreign}/pixel.png"><img src="/redirect-img">'
                f'<iframe src="{foreign}/frame.html"></iframe>'
                f"<script>fetch('{foreign}/xhr').catch(() => null);</script></body></html>")),
            "/redirect-img": lambda h: _redirect(h, foreign + "/redirected.png"),
            # pages that act on their own once loaded (the browser safety suite)
            "/popup.html": lambda h: html(h, (
                "<html><head><title>Popups</title></head><body><p>Popup page.</p>"
                f"<a id='a' href='{foreign}/tab.html' target='_blank'>tab</a>"
                f"<script>window.open('{foreign}/popup.html'); window.open('/article.html');"
                "document.getElementById('a').click();</script></body></html>")),
            "/js-download.html": lambda h: html(h, (
                "<html><head><title>Downloads</title></head><body><p>Download page.</p><script>"
                f"for (const u of ['/report.csv', '{foreign}/payload.bin']) {{"
                "  const a = document.createElement('a'); a.href = u; a.download = 'x'; document.body.appendChild(a);"
                "  a.click(); }"
                "</script></body></html>")),
            "/js-navigate-offsite.html": lambda h: html(h, (
                "<html><head><title>Leaving</title></head><body><p>Leaving soon.</p>"
                f"<script>setTimeout(() => {{ location.href = '{foreign}/nav.html'; }}, 50);</script></body></html>")),
            "/busy-loop.html": lambda h: html(h, (
                "<html><head><title>Busy</title></head><body><p>Spinning.</p>"
                "<script>for (;;) {}</script></body></html>")),
        }

    def _slow(self, h: BaseHTTPRequestHandler) -> None:
        """Headers and the start of a page, then nothing until the server stops (or 60 s)."""
        h.send_response(200)
        h.send_header("Content-Type", "text/html; charset=utf-8")
        h.send_header("Content-Length", "100000")
        h.end_headers()
        h.wfile.write(b"<html><head><title>Slow</title></head><body><p>The beginning")
        h.wfile.flush()
        self._stop.wait(60)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self
        routes = self._routes()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server API
                path = urlsplit(self.path).path
                with server._hits_lock:
                    server.hits[path] += 1
                route = routes.get(path)
                if route is None:
                    _send(self, 404, b"<html><body><p>not found</p></body></html>", "text/html")
                    return
                try:
                    route(self)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        return Handler


def _send(h: BaseHTTPRequestHandler, status: int, body: bytes, ctype: str, headers: dict[str, str] | None = None) -> None:
    h.send_response(status)
    h.send_header("Content-Type", ctype)
    h.send_header("Content-Length", str(len(body)))
    for k, v in (headers or {}).items():
        h.send_header(k, v)
    h.end_headers()
    h.wfile.write(body)


def _send_html(h: BaseHTTPRequestHandler, text: str) -> None:
    _send(h, 200, text.encode("utf-8"), "text/html; charset=utf-8")


def _redirect(h: BaseHTTPRequestHandler, location: str) -> None:
    h.send_response(302)
    h.send_header("Location", location)
    h.send_header("Content-Length", "0")
    h.end_headers()


# --- search API stub ----------------------------------------------------------------------------

SEARXNG_RESULTS = {
    "query": "ardent labs",
    "results": [
        {"title": "Ardent Labs", "url": "https://ardent.example/", "content": "Research company founded in 1987."},
        {"title": "Marlow Vance", "url": "https://wiki.example/Marlow_Vance", "content": "Founder of Ardent Labs."},
        {"title": "No snippet", "url": "https://x.example/"},
    ],
}

API_RESULTS = {
    "web": {
        "results": [
            {"title": "Quill 9", "url": "https://quill.example/9", "description": "A sensor."},
            {"title": "Quill Works", "url": "https://quill.example/", "description": "The maker."},
        ]
    }
}


class SearchStubServer:
    """A canned search API on 127.0.0.1: ``/search`` (SearXNG JSON) and ``/api/search`` (keyed).

    ``/api/search`` answers 401 unless header ``key_header`` equals ``api_key``. ``requests``
    records every request's path, query and headers for assertions.
    """

    def __init__(self, api_key: str, key_header: str = "X-Subscription-Token") -> None:
        self.api_key = api_key
        self.key_header = key_header
        self.requests: list[dict[str, object]] = []
        self._server = _Server(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._server.serve_forever, name="SearchStub", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "SearchStubServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _reply(self, status: int, payload: object) -> None:
                _send(self, status, json.dumps(payload).encode(), "application/json")

            def do_GET(self) -> None:  # noqa: N802
                parts = urlsplit(self.path)
                query = parse_qs(parts.query)
                stub.requests.append({"path": parts.path, "query": query, "headers": dict(self.headers)})
                if parts.path == "/search":
                    if query.get("format") != ["json"]:
                        self._reply(403, {"error": "format not enabled"})
                    else:
                        self._reply(200, SEARXNG_RESULTS)
                elif parts.path == "/api/search":
                    if self.headers.get(stub.key_header) != stub.api_key:
                        self._reply(401, {"error": "bad key"})
                    else:
                        self._reply(200, API_RESULTS)
                elif parts.path == "/api/echo-key":
                    # A misbehaving API that echoes the key back in an error body.
                    self._reply(500, {"error": f"invalid key {self.headers.get(stub.key_header)}"})
                elif parts.path == "/api/slow":
                    time.sleep(3)
                    self._reply(200, API_RESULTS)
                else:
                    self._reply(404, {"error": "no such endpoint"})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                stub.requests.append({"path": self.path, "body": body, "headers": dict(self.headers)})
                if self.headers.get(stub.key_header) != stub.api_key:
                    self._reply(401, {"error": "bad key"})
                else:
                    self._reply(200, {"organic": [{"title": "Posted", "link": "https://p.example/", "snippet": body.get("q", "")}]})

        return Handler


# --- pytest fixtures (import them into a test module to use them) -----------------------------

import pytest  # noqa: E402 - kept with the fixtures that need it


class Sites:
    """The allowlisted fixture site and a foreign (non-allowlisted) one that counts its hits."""

    def __init__(self, site: FixtureServer, foreign: FixtureServer) -> None:
        self.site = site
        self.foreign = foreign


@pytest.fixture(scope="module")
def sites():
    with FixtureServer() as foreign, FixtureServer(foreign_base=foreign.base_url) as site:
        yield Sites(site, foreign)
