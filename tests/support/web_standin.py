"""A local stand-in for the internet: a SearXNG-compatible search API and the pages it points at.

The real-web path of the evaluation suite (``pytest benchmarks/ --web searxng ...``, docs/evaluation.md) is
tested against this server on 127.0.0.1, browsed by real Chromium; no test reaches the internet.

* ``GET /search?q=...&format=json`` answers as SearXNG does (``{"query", "results": [{"title", "url",
  "content"}]}``), ranking the served pages by the words they share with the query (only pages sharing at
  least one); without ``format=json`` it answers 403, as an instance without the JSON format enabled does.
* ``GET /api/search?q=...`` is a keyed JSON API (``--web json_api``): it needs the header
  ``X-API-KEY: <key>`` (401 otherwise) and answers ``{"organic": [{"title", "link", "snippet"}]}`` (Serper's
  shape, so ``results_path=organic``).
* ``GET /<path>`` serves the pages given to the constructor (HTML; a site's pages link to each other).
* A search whose query holds one of ``fail_words`` answers HTTP 500 (the API failing during a run).

Every request is logged (path, query, whether a key header came) in memory only: nothing is written to
disk, so an XBench question searched here never touches it either.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from tests.support.http_fixtures import _send as send

_WORD = re.compile(r"\w+", re.U)


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)}


def page(title: str, *paragraphs: str, links: tuple[tuple[str, str], ...] = (), nav: tuple[tuple[str, str], ...] = ()) -> str:
    """A small HTML page: a menu (``nav``), a heading, paragraphs and a list of links, as real sites have."""
    menu = "".join(f'<a href="{href}">{text}</a> ' for text, href in nav)
    body = "".join(f"<p>{p}</p>" for p in paragraphs)
    items = "".join(f'<li><a href="{href}">{text}</a></li>' for text, href in links)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>"
            f"<nav>{menu}</nav><div class='cookie'>We use cookies.</div><article><h1>{title}</h1>{body}"
            f"<ul>{items}</ul></article><footer>Copyright 2026</footer></body></html>")


class WebStandIn:
    """``WebStandIn(pages, api_key=...)`` serving on a free loopback port; ``with`` starts and stops it."""

    def __init__(self, pages: dict[str, str], api_key: str | None = None, fail_words: tuple[str, ...] = ()) -> None:
        self.pages = dict(pages)
        self.api_key = api_key
        self.fail_words = fail_words
        """A search whose query holds one of these words answers HTTP 500 (a search API failing mid-run)."""
        self.log: list[dict[str, object]] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None, "start() first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def host(self) -> str:
        return self.base_url.removeprefix("http://")

    def url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"

    def searches(self) -> list[dict[str, object]]:
        with self._lock:
            return [e for e in self.log if str(e["path"]).endswith("search")]

    def rank(self, query: str, k: int = 5) -> list[tuple[str, str, str]]:
        """``(title, url, snippet)`` of the pages sharing most words with ``query`` (at least one)."""
        q = _words(query)
        scored = []
        for path, html in self.pages.items():
            title = re.search(r"<title>(.*?)</title>", html, re.S)
            text = re.sub(r"<[^>]+>", " ", html)
            score = len(q & _words(text))
            if score:
                scored.append((-score, path, title.group(1) if title else path, " ".join(text.split())[:200]))
        return [(t, self.url(p), snip) for _, p, t, snip in sorted(scored)[:k]]

    def start(self) -> "WebStandIn":
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet; the log is standin.log
                pass

            def _send(self, status: int, body: str, ctype: str = "text/html; charset=utf-8") -> None:
                send(self, status, body.encode("utf-8"), ctype)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                parts = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                with standin._lock:
                    standin.log.append({"path": parts.path, "query": query,
                                        "key_header": "X-API-KEY" in self.headers})
                if parts.path.endswith("/search") and any(w in query.get("q", "") for w in standin.fail_words):
                    return self._send(500, '{"error": "internal"}', "application/json")
                if parts.path == "/search":
                    if query.get("format") != "json":
                        return self._send(403, "json format not enabled")
                    hits = standin.rank(query.get("q", ""), int(query.get("count", 5)))
                    body = {"query": query.get("q", ""),
                            "results": [{"title": t, "url": u, "content": c} for t, u, c in hits]}
                    return self._send(200, json.dumps(body), "application/json")
                if parts.path == "/api/search":
                    if standin.api_key is None or self.headers.get("X-API-KEY") != standin.api_key:
                        return self._send(401, '{"error": "unauthorized"}', "application/json")
                    hits = standin.rank(query.get("q", ""), int(query.get("count", 5)))
                    body = {"organic": [{"title": t, "link": u, "snippet": c} for t, u, c in hits]}
                    return self._send(200, json.dumps(body), "application/json")
                html = standin.pages.get(parts.path.lstrip("/"))
                if html is None:
                    return self._send(404, "<html><body><p>Not found</p></body></html>")
                return self._send(200, html)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="web-standin", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "WebStandIn":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
