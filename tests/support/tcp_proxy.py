"""A TCP forwarder on 127.0.0.1 that a test can cut, standing in for the network between two roles
(docs/reliability.md, "Network cut").

``CuttableProxy(target_port)`` listens on a free port and forwards every connection to
``127.0.0.1:target_port`` (one thread per direction). :meth:`CuttableProxy.cut` resets every open
connection and refuses new ones (connection refused: the listening socket is closed) for the given
seconds, then listens again on the same port. What the roles see is what a dropped link between two
hosts gives them: resets and refused connects until it is back.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

__all__ = ["CuttableProxy"]


class CuttableProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._closed = False
        self._listener = self._listen(0)
        self.port = self._listener.getsockname()[1]
        self.cuts = 0
        threading.Thread(target=self._accept_loop, name="proxy-accept", daemon=True).start()

    @property
    def url_host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _listen(self, port: int) -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen(64)
        return s

    def _accept_loop(self) -> None:
        while True:
            with self._lock:
                listener = self._listener
                if self._closed:
                    return
            if listener is None:
                time.sleep(0.02)
                continue
            try:
                client, _ = listener.accept()
            except OSError:
                continue  # closed by cut(): wait for the new listener
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _reset(client)
                continue
            with self._lock:
                self._conns.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):  # wakes the other direction's pump, which closes its own end
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            with self._lock:
                self._conns.discard(src)
            src.close()

    def _drop_everything(self, closing: bool = False) -> None:
        """Stop listening and reset every open connection (``closing``: for good)."""
        with self._lock:
            self._closed = self._closed or closing
            listener, self._listener = self._listener, None
            conns, self._conns = list(self._conns), set()
        if listener is not None:
            _close_listener(listener)
        for s in conns:
            _reset(s)

    def cut(self, seconds: float) -> None:
        """Reset every connection and refuse new ones for ``seconds``; then accept again (same port)."""
        self._drop_everything()
        self.cuts += 1
        time.sleep(seconds)
        with self._lock:
            if not self._closed:
                self._listener = self._listen(self.port)

    def close(self) -> None:
        self._drop_everything(closing=True)

    def __enter__(self) -> "CuttableProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _close_listener(s: socket.socket) -> None:
    """Stop listening now: ``shutdown`` wakes the thread blocked in ``accept`` (a bare ``close`` would leave
    the kernel socket listening until that call returns)."""
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()


def _reset(s: socket.socket) -> None:
    """Drop a connection as a broken link would: ``shutdown`` first (it wakes the pump thread blocked in
    ``recv`` on it; a bare ``close`` would leave the kernel socket open and the peer waiting for ever), then
    close with an RST (SO_LINGER 0)."""
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass
