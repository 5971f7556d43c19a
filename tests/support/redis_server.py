"""A throw-away real ``redis-server`` for tests (docs/training.md, docs/CONTRIBUTING.md §Tests: "tests start their own server on a
free loopback port and stop it").

Usage::

    with RedisServer() as server:      # starts on 127.0.0.1:<free port>, no persistence
        url = server.url(db=0)         # "redis://127.0.0.1:<port>/0"

The server runs in a temporary directory with ``--save "" --appendonly no`` (nothing written to
disk; ``RedisServer(persistent=True)``: an append-only file synced at every write, so that
``restart()`` -- SIGKILL, then a new server on the same port and directory -- keeps the data, as a
production Redis with ``appendonly yes`` would), is bound to 127.0.0.1 only, and is shut down (then killed if it does not exit) on leaving the
context. Start-up failures raise :class:`RedisServerError` with the tail of the server log.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["RedisServer", "RedisServerError", "free_port", "redis_server_binary"]


class RedisServerError(RuntimeError):
    """The test Redis server could not be started."""


def redis_server_binary() -> str | None:
    """Path of ``redis-server`` on PATH, or None when it is not installed."""
    return shutil.which("redis-server")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A ``redis-server`` child process on a free loopback port, in a temporary directory; or, with ``netns``,
    inside that network namespace bound to ``host`` (another simulated host reaches it there)."""

    def __init__(self, binary: str | None = None, startup_timeout_s: float = 15.0, persistent: bool = False, *,
                 host: str = "127.0.0.1", netns: str | None = None, port: int | None = None) -> None:
        self.binary = binary or redis_server_binary()
        if self.binary is None:
            raise RedisServerError(
                "redis-server is not installed (Debian: apt-get install redis-server); "
                "it is needed for the Redis store tests"
            )
        self.startup_timeout_s = startup_timeout_s
        self.persistent = persistent
        self.host = host
        self.netns = netns
        """Run inside this network namespace (``ip netns exec``; tests/support/netns.py), bound to ``host`` there."""
        self.fixed_port = port
        self.port: int | None = None
        self._proc: subprocess.Popen | None = None
        self._dir: tempfile.TemporaryDirectory | None = None

    def url(self, db: int = 0) -> str:
        if self.port is None:
            raise RedisServerError("the server is not started")
        return f"redis://{self.host}:{self.port}/{db}"

    @property
    def log_path(self) -> Path:
        assert self._dir is not None
        return Path(self._dir.name) / "redis.log"

    def _log_tail(self, n: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def start(self) -> "RedisServer":
        self._dir = tempfile.TemporaryDirectory(prefix="mgrpo-redis-")
        # The free port can be taken between the probe and the bind: retry with a new one.
        for _ in range(1 if self.fixed_port else 3):
            self.port = self.fixed_port or free_port()
            self._spawn()
            if self._wait_ready():
                return self
            self._kill()
        log = self._log_tail()
        self._dir.cleanup()
        raise RedisServerError(
            f"redis-server did not become ready on {self.host} (3 ports tried); log tail:\n{log}"
        )

    def _spawn(self) -> None:
        assert self._dir is not None and self.port is not None
        persistence = ["--appendonly", "yes", "--appendfsync", "always"] if self.persistent else ["--appendonly", "no"]
        prefix = ["ip", "netns", "exec", self.netns] if self.netns else []
        if self.netns:
            self.log_path.unlink(missing_ok=True)  # readiness is read from the log (below)
        self._proc = subprocess.Popen(
            [
                *prefix, self.binary, "--port", str(self.port), "--bind", self.host, "--save", "", *persistence,
                "--dir", self._dir.name, "--logfile", str(self.log_path), "--daemonize", "no",
                # another host's clients need it off (no password here); on loopback it stays on
                "--protected-mode", "no" if self.netns else "yes",
            ],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

    def kill(self) -> None:
        """SIGKILL the server (a crash): clients see connection errors until :meth:`revive`."""
        self._kill()

    def revive(self) -> None:
        """Start the server again on the same port and directory (a persistent one reloads its data)."""
        if self._proc is not None and self._proc.poll() is None:
            raise RedisServerError("the server is still running")
        self._spawn()
        if not self._wait_ready():
            raise RedisServerError(f"redis-server did not come back on port {self.port}; log tail:\n{self._log_tail()}")

    def restart(self, down_s: float = 0.0) -> None:
        """:meth:`kill`, stay down ``down_s`` seconds, then :meth:`revive`."""
        self.kill()
        time.sleep(down_s)
        self.revive()

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                return False  # exited (port taken, bad option): caller retries / reports
            if self.netns:  # this process cannot connect into another namespace: the server says when it is ready
                try:
                    if "Ready to accept connections" in self.log_path.read_text(errors="replace"):
                        return True
                except OSError:
                    pass
                time.sleep(0.05)
                continue
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        return True
            except OSError:
                pass
            time.sleep(0.05)
        return False

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=10)

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()  # SIGTERM: redis-server shuts down cleanly (nothing to save)
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._kill()
        self._proc = None
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self) -> "RedisServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
