"""Which URLs the ``visit`` tool may open (docs/tools.md).

By default only the offline world's own host (``host:port`` of its base URL) is allowed;
``file:``, ``chrome:``, ``data:``, ``javascript:``, ``about:`` and every other non-HTTP(S)
scheme is refused, and so is every other host. Both ``visit`` backends ask the same
:class:`Allowlist`, for the URL the agent asked for and for every redirect hop, so a refused
URL always yields the same error observation, for example::

    Error: URL not allowed: scheme 'file' is refused; allowed hosts: 127.0.0.1:43121

Real web (GPU users, online) opts in with ``allow_all_hosts=True``: any ``http``/``https`` host
is allowed, still never another scheme.

Deliberate additions:

* with ``allow_all_hosts`` the loopback, private, link-local (cloud metadata) and other
  non-global IP *literals* are refused by default (``block_private_networks``), so an agent on
  a cluster cannot reach internal services by typing an address. Host *names* are not resolved
  here (no DNS look-up per check), so a public name that resolves to a private address is not
  caught: run real-web browsing on a network that has nothing to hide.
* URLs carrying credentials (``http://user:pass@host/``) are refused: an agent never needs them
  and they would end up in observations and records.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from urllib.parse import urlsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}
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
    """With ``allow_all_hosts``: refuse loopback/private/link-local IP literals and ``localhost``."""
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
    def open_web(cls, block_private_networks: bool = True) -> "Allowlist":
        """Any ``http``/``https`` host (explicit opt-in for the real web)."""
        return cls(hosts=(), allow_all_hosts=True, block_private_networks=block_private_networks)

    def describe(self) -> str:
        """What is allowed, as shown at the end of every refusal message."""
        if self.allow_all_hosts:
            return "allowed: any public http(s) host" if self.block_private_networks else "allowed: any http(s) host"
        return "allowed hosts: " + ", ".join(self.hosts)

    def check(self, url: str) -> str | None:
        """``None`` when ``url`` may be opened, else the refusal message (without ``Error:``)."""
        text = url.strip()
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
            if self.block_private_networks and _is_private_host(parts.hostname or ""):
                return f"URL not allowed: host '{key}' is a local or private network address; {self.describe()}"
            return None
        if key not in self._host_set:
            return f"URL not allowed: host '{key}' is not in the allowlist; {self.describe()}"
        return None

    def allows(self, url: str) -> bool:
        """True when :meth:`check` finds nothing to refuse."""
        return self.check(url) is None


def _is_private_host(host: str) -> bool:
    host = host.strip("[]").lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return False  # a name: not resolved here (see module docstring)
    return not addr.is_global
