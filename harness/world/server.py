"""Local HTTP server for the offline web world (docs/world.md).

``with WorldServer(world) as srv: srv.base_url`` serves every page of a :class:`World` on
127.0.0.1 (a free port by default) from a background thread; ``/`` and ``dir/`` serve
``index.html``; unknown paths get a 404 HTML page; pages are ``text/html; charset=utf-8``.
GET and HEAD only. A port that is taken raises :class:`PortInUseError` naming the port.

Test-only routes (``WorldServer(world, test_routes=True)``; 404 otherwise), for the tools'
timeout/cap/allowlist tests:

* ``/__test__/slow`` -- never answers (the handler waits until the server stops).
* ``/__test__/error`` -- HTTP 500 with a small HTML body.
* ``/__test__/big?bytes=N`` -- an HTML page of about N bytes (default 5,000,000).
* ``/__test__/download`` -- ``application/octet-stream`` with ``Content-Disposition: attachment``.
* ``/__test__/redirect?to=URL`` -- 302 to ``URL`` (e.g. a non-allowlisted host).
* ``/__test__/links`` -- a page linking to an external host, a ``file:`` and a ``data:`` URL.

Deliberate decisions: the server never logs requests to stderr unless ``verbose=True`` (tests
and training would drown in access lines); threads are daemons so a hung ``slow`` request
cannot keep a process alive.
"""

from __future__ import annotations

import errno
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from harness.world.generator import World

HOST = "127.0.0.1"
NOT_FOUND_HTML = (
    "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>404 Not Found</title></head>"
    "<body><h1>404 Not Found</h1><p>No page at this address.</p></body></html>\n"
)


class PortInUseError(OSError):
    """The requested port on the bind address is already taken."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False  # a taken port must fail loudly, not share

    def __init__(self, addr: tuple[str, int], world: World, test_routes: bool, verbose: bool) -> None:
        self.world = world
        self.test_routes = test_routes
        self.verbose = verbose
        self.stopping = threading.Event()
        super().__init__(addr, _Handler)


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (stdlib name)
        if self.server.verbose:
            super().log_message(format, *args)

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def do_GET(self) -> None:
        self._serve(head=False)

    def _send(self, status: int, body: bytes, ctype: str = "text/html; charset=utf-8",
              head: bool = False, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _serve(self, head: bool) -> None:
        parts = urlsplit(self.path)
        if parts.path.startswith("/__test__/") and self.server.test_routes:
            self._test_route(parts.path, parse_qs(parts.query), head)
            return
        page = self.server.world.resolve(parts.path)
        if page is None:
            self._send(404, NOT_FOUND_HTML.encode(), head=head)
        else:
            self._send(200, page.html.encode("utf-8"), head=head)

    def _test_route(self, path: str, query: dict[str, list[str]], head: bool) -> None:
        if path == "/__test__/slow":
            self.server.stopping.wait()  # hang until the server stops
            self.close_connection = True
            return
        if path == "/__test__/error":
            self._send(500, b"<html><body><h1>500 Internal Server Error</h1></body></html>", head=head)
        elif path == "/__test__/big":
            n = int(query.get("bytes", ["5000000"])[0])
            filler = ("<p>" + "lorem ipsum " * 8 + "</p>\n").encode()
            body = b"<html><head><title>Big page</title></head><body>" + filler * (max(n, 1) // len(filler) + 1) + b"</body></html>"
            self._send(200, body, head=head)
        elif path == "/__test__/download":
            self._send(200, b"\x00binary\x01" * 64, "application/octet-stream", head,
                       {"Content-Disposition": 'attachment; filename="data.bin"'})
        elif path == "/__test__/redirect":
            self._send(302, b"", head=head, extra={"Location": query.get("to", ["/"])[0]})
        elif path == "/__test__/links":
            body = ("<html><head><title>Links</title></head><body>"
                    '<p><a href="http://example.com/">external</a> <a href="file:///etc/passwd">file</a> '
                    '<a href="data:text/html,hi">data</a> <a href="/index.html">portal</a></p></body></html>')
            self._send(200, body.encode(), head=head)
        else:
            self._send(404, NOT_FOUND_HTML.encode(), head=head)


class WorldServer:
    """Serves a :class:`World` over HTTP; a context manager.

    ``host``: the bind address (default 127.0.0.1, this machine only; another node's roles need an address
    they can reach, e.g. the node's own, or ``0.0.0.0`` for every interface). ``port=0`` (default) picks a
    free port; ``base_url`` is ``http://<host>:<port>`` (``http://127.0.0.1:<port>`` when bound to every
    interface: the address that works from this machine; give the others the node's).
    """

    def __init__(self, world: World, port: int = 0, *, host: str = HOST, test_routes: bool = False,
                 verbose: bool = False) -> None:
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"WorldServer.port: expected an int in 0..65535 (0 = a free port), got {port!r}")
        if not isinstance(host, str) or not host.strip():
            raise ValueError(f"WorldServer.host: expected a bind address such as 127.0.0.1, got {host!r}")
        self.world = world
        self.host = host.strip().strip("[]")
        self.requested_port = port
        self.test_routes = test_routes
        self.verbose = verbose
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("WorldServer is not running; call start() or use it as a context manager")
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        """``http://<host>:<port>`` (no trailing slash); 127.0.0.1 when bound to every interface."""
        host = HOST if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"

    def start(self) -> WorldServer:
        if self._server is not None:
            return self
        try:
            server_cls = _Server6 if ":" in self.host else _Server
            self._server = server_cls((self.host, self.requested_port), self.world, self.test_routes, self.verbose)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUseError(
                    exc.errno, f"port {self.requested_port} on {self.host} is already in use; "
                    "choose another port or pass port=0 (--port 0) for a free one"
                ) from exc
            if exc.errno == errno.EADDRNOTAVAIL:
                raise OSError(exc.errno, f"cannot bind {self.host}: no interface of this machine has that address "
                                         "(give one of its own addresses, 127.0.0.1 or 0.0.0.0)") from exc
            raise
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name=f"world-server:{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> WorldServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
