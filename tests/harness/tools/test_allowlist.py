"""The visit allowlist (docs/tools.md): schemes, hosts, ports, real-web opt-in."""

from __future__ import annotations

import pytest

from harness.tools.allowlist import Allowlist, host_key

WORLD = "http://127.0.0.1:43121"


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("http://127.0.0.1:43121/a.html", "127.0.0.1:43121"),
        ("https://Example.ORG/x", "example.org:443"),
        ("http://example.org", "example.org:80"),
        ("example.org:8080", "example.org:8080"),
        ("example.org", "example.org:80"),
        ("http://[::1]:9000/", "[::1]:9000"),
    ],
)
def test_host_key_normalises(text: str, key: str) -> None:
    assert host_key(text) == key


def test_world_host_is_allowed_and_nothing_else() -> None:
    allow = Allowlist.for_base_url(WORLD)
    assert allow.check(WORLD + "/wiki/ardent-labs.html") is None
    assert allow.check(WORLD) is None
    assert allow.check("HTTP://127.0.0.1:43121/x?q=1#frag") is None
    other_port = allow.check("http://127.0.0.1:43122/x")
    assert other_port == ("URL not allowed: host '127.0.0.1:43122' is not in the allowlist; "
                          "allowed hosts: 127.0.0.1:43121")
    assert "not in the allowlist" in allow.check("http://localhost:43121/")  # same server, other name
    assert "not in the allowlist" in allow.check("http://example.org/")


@pytest.mark.parametrize("scheme", ["file", "chrome", "data", "javascript", "about", "ftp", "ws", "blob"])
def test_non_http_schemes_are_refused_with_a_clear_message(scheme: str) -> None:
    allow = Allowlist.for_base_url(WORLD)
    url = {"file": "file:///etc/passwd", "data": "data:text/html,<p>x</p>", "javascript": "javascript:alert(1)",
           "about": "about:blank", "chrome": "chrome://settings"}.get(scheme, f"{scheme}://127.0.0.1:43121/x")
    message = allow.check(url)
    assert message == f"URL not allowed: scheme '{scheme}' is refused; allowed hosts: 127.0.0.1:43121"
    assert not allow.allows(url)
    # Opening the whole web never opens other schemes.
    assert Allowlist.open_web().check(url) is not None


def test_relative_url_and_credentials_are_refused() -> None:
    allow = Allowlist.for_base_url(WORLD)
    assert "not an absolute URL" in allow.check("/wiki/x.html")
    assert "credentials" in allow.check("http://user:pw@127.0.0.1:43121/")


def test_extra_hosts_and_default_ports() -> None:
    allow = Allowlist.for_base_url(WORLD, ["docs.example", "api.example:8443"])
    assert allow.hosts == ("127.0.0.1:43121", "docs.example:80", "api.example:8443")
    assert allow.allows("http://docs.example/page")
    assert allow.allows("http://docs.example:80/page")
    assert not allow.allows("https://docs.example/page")  # 443 is not 80
    assert allow.allows("https://api.example:8443/v1")


DNS = {"en.wikipedia.org": ["208.80.154.224", "2620:0:861:ed1a::1"], "intranet.example": ["10.0.0.7"],
       "rebound.example": ["93.184.216.34", "127.0.0.1"], "metadata.example": ["169.254.169.254"]}


def _fake_dns(host: str) -> list[str]:
    if host not in DNS:
        raise OSError(f"[Errno -2] Name or service not known: {host}")
    return DNS[host]


def test_open_web_allows_public_hosts_but_not_private_addresses() -> None:
    web = Allowlist.open_web(resolve=_fake_dns)
    assert web.allows("https://en.wikipedia.org/wiki/GRPO")
    assert web.allows("http://93.184.216.34/")
    for url in ("http://localhost:8080/", "http://127.0.0.1/", "http://10.1.2.3/", "http://169.254.169.254/latest",
                "http://[::1]/", "http://192.168.0.1/", "http://[::ffff:127.0.0.1]/"):
        assert "local or private network address" in web.check(url), url
    assert web.describe() == "allowed: any public http(s) host"
    assert Allowlist.open_web(block_private_networks=False).allows("http://10.1.2.3/")


@pytest.mark.parametrize(("host", "shown"), [("intranet.example", "10.0.0.7"), ("rebound.example", "127.0.0.1"),
                                             ("metadata.example", "169.254.169.254")])
def test_open_web_refuses_names_that_resolve_to_private_addresses(host: str, shown: str) -> None:
    reason = Allowlist.open_web(resolve=_fake_dns).check(f"http://{host}:8080/x")
    assert reason is not None and f"host '{host}' resolves to a local or private network address ({shown})" in reason


def test_open_web_refuses_names_that_do_not_resolve() -> None:
    reason = Allowlist.open_web(resolve=_fake_dns).check("https://nowhere.example/")
    assert reason is not None and "host 'nowhere.example' does not resolve" in reason


@pytest.mark.parametrize("host", ["2130706433", "127.1", "0x7f000001", "0177.0.0.1", "017700000001"])
def test_open_web_refuses_numeric_spellings_of_loopback_with_the_system_resolver(host: str) -> None:
    """The system resolver reads these as 127.0.0.1 (inet_aton), as Chromium and Python's sockets would."""
    reason = Allowlist.open_web().check(f"http://{host}:8080/")
    assert reason is not None and "resolves to a local or private network address (127.0.0.1)" in reason


def test_empty_allowlist_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match="allowlist is empty"):
        Allowlist.for_base_url(None)
