"""Two simulated hosts: network namespaces joined by a veth pair (docs/training.md "Two nodes").

:class:`TwoHosts` creates namespaces ``a`` and ``b``, each with its own loopback and one end of a veth pair,
addresses ``10.231.<n>.1/24`` and ``10.231.<n>.2/24`` (``n`` from the test's process id, so parallel test
workers do not collide), and removes everything on exit (deleting a namespace deletes its veth end, and the
pair with it). A process started with :meth:`TwoHosts.cmd` sees only its namespace: the other host is
reachable only at its address over the veth link, which :meth:`cut` takes down and :meth:`restore` brings
back. :meth:`traffic` reads the link's byte and packet counters (the test bounds them).

Needs root (``ip netns add``); :func:`unavailable` says why not otherwise, for a skip with a clear reason.
"""

from __future__ import annotations

import os
import subprocess
import uuid


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


def unavailable() -> str | None:
    """None when network namespaces can be created here, else why not."""
    if os.geteuid() != 0:
        return "creating network namespaces needs root (CI runs as root)"
    name = f"mgprobe{uuid.uuid4().hex[:6]}"
    try:
        res = _ip("netns", "add", name)
    except FileNotFoundError:
        return "the ip command (iproute2) is not installed"
    if res.returncode != 0:
        return f"ip netns add failed: {res.stderr.strip()}"
    _ip("netns", "del", name)
    return None


class TwoHosts:
    """Namespaces ``a`` and ``b`` joined by a veth pair; a context manager."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:6]
        self.ns = {"a": f"mga{tag}", "b": f"mgb{tag}"}
        self.dev = {"a": f"va{tag}", "b": f"vb{tag}"}  # interface names: at most 15 characters
        n = 1 + os.getpid() % 250
        self.addr = {"a": f"10.231.{n}.1", "b": f"10.231.{n}.2"}

    def _run(self, *args: str) -> None:
        res = _ip(*args)
        if res.returncode != 0:
            raise RuntimeError(f"ip {' '.join(args)}: {res.stderr.strip()}")

    def __enter__(self) -> "TwoHosts":
        try:
            for host in ("a", "b"):
                self._run("netns", "add", self.ns[host])
            self._run("link", "add", self.dev["a"], "type", "veth", "peer", "name", self.dev["b"])
            for host in ("a", "b"):
                self._run("link", "set", self.dev[host], "netns", self.ns[host])
                self._run("-n", self.ns[host], "addr", "add", f"{self.addr[host]}/24", "dev", self.dev[host])
                self._run("-n", self.ns[host], "link", "set", "lo", "up")
                self._run("-n", self.ns[host], "link", "set", self.dev[host], "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for host in ("a", "b"):
            _ip("netns", "del", self.ns[host])

    def cmd(self, host: str, argv: list[str]) -> list[str]:
        """``argv`` run inside ``host``'s namespace."""
        return ["ip", "netns", "exec", self.ns[host], *argv]

    def cut(self) -> None:
        """Take both ends of the link down: packets between the hosts are dropped until :meth:`restore`."""
        for host in ("a", "b"):
            self._run("-n", self.ns[host], "link", "set", self.dev[host], "down")

    def restore(self) -> None:
        for host in ("a", "b"):
            self._run("-n", self.ns[host], "link", "set", self.dev[host], "up")

    def traffic(self) -> dict[str, int]:
        """Bytes and packets host ``a`` sent and received over the link."""
        out = {}
        for key in ("tx_bytes", "rx_bytes", "tx_packets", "rx_packets"):
            res = subprocess.run(self.cmd("a", ["cat", f"/sys/class/net/{self.dev['a']}/statistics/{key}"]),
                                 capture_output=True, text=True, timeout=30)
            out[key] = int(res.stdout.strip() or 0)
        return out
