"""Which URLs the ``visit`` tool may open (docs/tools.md).

By default only the offline world's own host (``host:port`` of its base URL) is allowed;
``file:``, ``chrome:``, ``data:``, ``javascript:``, ``about:`` and every other non-HTTP(S)
scheme is refused, and so is every other host. Both ``visit`` backends ask the same
:class:`Allowlist`, for the URL the agent asked for and for every redirect hop, so a refused
URL always yields the same error observation, for example::

    Error: URL not allowed: scheme 'file' is refused; allowed hosts: 127.0.0.1:43121

Real web (GPU users, online) opts in with ``allow_all_hosts=True``: any ``http``/``https`` host
is allowed, still never another scheme; hosts listed next to it are the named exceptions to the
private-network block below.

Deliberate additions:

* with ``allow_all_hosts`` the loopback, private, link-local (cloud metadata) and other
  non-global addresses are refused by default (``block_private_networks``), so an agent on a
  cluster cannot reach internal services: IP literals directly, and host *names* by resolving
  them (:attr:`Allowlist.resolve`, cached for :data:`RESOLVE_TTL_S`): a name that resolves to any
  such address (``localhost``, a name in ``/etc/hosts``, a public name pointing at 10.x, the
  numeric forms ``2130706433``, ``0x7f000001`` and ``127.1`` that resolvers read as 127.0.0.1) is
  refused, and so is a name that does not resolve. Residual risk: the backend resolves the name
  again when it connects, so a DNS server that answers differently the second time (DNS
  rebinding) is not caught; run real-web browsing on a network that has nothing to hide.
* URLs carrying credentials (``http://user:pass@host/``) are refused: an agent never needs them
  and they would end up in observations and records. So are URLs longer than
  :data:`MAX_URL_CHARS`.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import urlsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}

#: The longest URL a visit accepts (servers commonly refuse beyond 8 KiB; an agent never needs one this long).
MAX_URL_CHARS = 4096

#: Seconds a host name's resolved addresses are reused by the open-web check.
RESOLVE_TTL_S = 60.0
ALLOWED_SCHEMES = ("http", "https")


def host_key(url_or_host: str) -> str:
    """Normalised ``host:port`` of a URL or of a ``host[:port]`` string.

    Host names are lower-cased, IPv6 literals keep their brackets, and a missing port becomes the
    scheme's default (80 for a bare ``host``).

    Raises:
        ValueError: the text has no host or an invalid port.
    """
    text = url_or_host.strip()
    if "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    host = parts.hostname
    if not host:
        raise ValueError(f"{url_or_host!r} has no host")
    port = parts.port  # raises ValueError for a bad port
    if port is None:
        port = _DEFAULT_PORTS.get(parts.scheme.lower(), 80)
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    return f"{host.lower()}:{port}"


@dataclass(frozen=True)
class Allowlist:
    """The visit policy: which schemes and hosts a URL may have.

    Build it with :meth:`for_base_url` (the world) or :meth:`open_web` (real web).
    """

    hosts: tuple[str, ...] = ()
    """Allowed ``host:port`` keys (normalised by :func:`host_key`)."""
    allow_all_hosts: bool = False
    """Allow every ``http``/``https`` host (real web); the scheme check still applies."""
    block_private_networks: bool = True
    """With ``allow_all_hosts``: refuse loopback/private/link-local addresses, literal or resolved from a name."""
    resolve: Callable[[str], list[str]] | None = field(default=None, repr=False, compare=False)
    """The addresses a host name resolves to (raises ``OSError`` when it does not); ``None``: the system
    resolver (``socket.getaddrinfo``), cached for :data:`RESOLVE_TTL_S`. Tests pass a fixed mapping."""
    _host_set: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        normalised = tuple(dict.fromkeys(host_key(h) for h in self.hosts))
        object.__setattr__(self, "hosts", normalised)
        object.__setattr__(self, "_host_set", frozenset(normalised))
        if not self.allow_all_hosts and not normalised:
            raise ValueError(
                "the visit allowlist is empty: give the world's base_url, list hosts in "
                "allowed_hosts, or set allow_all_hosts=True for the real web"
            )

    @classmethod
    def for_base_url(cls, base_url: str | None, extra_hosts: tuple[str, ...] | list[str] = ()) -> "Allowlist":
        """Only the host of ``base_url`` (the world's server) plus ``extra_hosts``."""
        hosts = ([base_url] if base_url else []) + list(extra_hosts)
        return cls(hosts=tuple(hosts))

    @classmethod
    def open_web(cls, block_private_networks: bool = True,
                 resolve: Callable[[str], list[str]] | None = None,
                 hosts: tuple[str, ...] | list[str] = ()) -> "Allowlist":
        """Any ``http``/``https`` host (explicit opt-in for the real web); ``resolve``: see :attr:`resolve`.

        ``hosts``: ``host[:port]`` entries allowed even when they are local or private (the only way
        past ``block_private_networks`` for one service: a local search stand-in, the offline world next
        to the real web, an intranet mirror the user names)."""
        return cls(hosts=tuple(hosts), allow_all_hosts=True, block_private_networks=block_private_networks,
                   resolve=resolve)

    def describe(self) -> str:
        """What is allowed, as shown at the end of every refusal message."""
        if self.allow_all_hosts:
            what = "any public http(s) host" if self.block_private_networks else "any http(s) host"
            return f"allowed: {what}" + (f" and {', '.join(self.hosts)}" if self.hosts else "")
        return "allowed hosts: " + ", ".join(self.hosts)

    def check(self, url: str) -> str | None:
        """``None`` when ``url`` may be opened, else the refusal message (without ``Error:``)."""
        text = url.strip()
        if len(text) > MAX_URL_CHARS:  # checked first: no message below may quote such a URL
            return f"URL not allowed: {len(text):,} characters, more than the {MAX_URL_CHARS:,} a visit accepts"
        try:
            parts = urlsplit(text)
        except ValueError as exc:
            return f"URL not allowed: {url!r} is not a valid URL ({exc}); {self.describe()}"
        scheme = parts.scheme.lower()
        if not scheme:
            return f"URL not allowed: {url!r} is not an absolute URL (give http://host/path); {self.describe()}"
        if scheme not in ALLOWED_SCHEMES:
            return f"URL not allowed: scheme '{scheme}' is refused; {self.describe()}"
        if parts.username is not None or parts.password is not None:
            return f"URL not allowed: URLs with credentials are refused; {self.describe()}"
        try:
            key = host_key(text)
        except ValueError as exc:
            return f"URL not allowed: {exc}; {self.describe()}"
        if self.allow_all_hosts:
            if not self.block_private_networks or key in self._host_set:
                return None
            host = parts.hostname or ""
            if _is_private_host(host):
                return f"URL not allowed: host '{key}' is a local or private network address; {self.describe()}"
            if _ip_literal(host) is None:
                try:
                    addresses = (self.resolve or _resolve_cached)(host)
                except OSError as exc:
                    return f"URL not allowed: host '{host}' does not resolve ({exc}); {self.describe()}"
                private = [a for a in addresses if _is_private_host(a)]
                if private or not addresses:
                    return (f"URL not allowed: host '{host}' resolves to a local or private network address "
                            f"({', '.join(private) or 'none'}); {self.describe()}")
            return None
        if key not in self._host_set:
            return f"URL not allowed: host '{key}' is not in the allowlist; {self.describe()}"
        return None

    def allows(self, url: str) -> bool:
        """True when :meth:`check` finds nothing to refuse."""
        return self.check(url) is None


def _ip_literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]").split("%")[0])
    except ValueError:
        return None


def _is_private_host(host: str) -> bool:
    """``localhost`` names and non-global IP literals (names are resolved by :meth:`Allowlist.check`)."""
    host = host.strip("[]").lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    addr = _ip_literal(host)
    if addr is None:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    return not addr.is_global


_resolved: dict[str, tuple[float, list[str]]] = {}
_resolved_lock = threading.Lock()


def _resolve_cached(host: str) -> list[str]:
    """The system resolver's addresses for ``host`` (``OSError`` when none), reused for :data:`RESOLVE_TTL_S`."""
    now = time.monotonic()
    with _resolved_lock:
        hit = _resolved.get(host)
    if hit is not None and hit[0] > now:
        return hit[1]
    infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    with _resolved_lock:
        if len(_resolved) > 4096:  # a long real-web run visits many hosts: keep the cache bounded
            _resolved.clear()
        _resolved[host] = (now + RESOLVE_TTL_S, addresses)
    return addresses
