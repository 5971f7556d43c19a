"""``WebToolbox`` / ``build_toolbox`` / ``ToolsConfig`` (docs/architecture.md §The agent system, docs/tools.md): the Toolbox contract."""

from __future__ import annotations

import pytest

from harness.protocol import SearchHit, Toolbox
from harness.config import ConfigError, from_dict
from harness.tools.browser import BrowserPool
from harness.tools.toolbox import ToolsConfig, WebToolbox, build_toolbox
from harness.tools.visit import DirectBackend
from tests.support.http_fixtures import SearchStubServer, Sites, sites  # noqa: F401 - pytest fixture


class WorldLikeIndex:
    def search(self, query: str, k: int = 5, base_url: str = "") -> list[SearchHit]:
        return [SearchHit("Ardent Labs", base_url + "/article.html", f"about {query}")]


@pytest.fixture(scope="module")
def toolbox(sites: Sites):  # noqa: F811
    config = ToolsConfig(visit_backend="direct", max_chars=500, timeout_s=10)
    with build_toolbox(config, WorldLikeIndex(), sites.site.base_url) as tb:
        yield tb


def test_is_a_toolbox_and_runs_both_tools(toolbox: WebToolbox, sites: Sites) -> None:  # noqa: F811
    as_protocol: Toolbox = toolbox  # structural: WebToolbox satisfies the agents' Toolbox protocol
    out = as_protocol.call("search", {"query": "ardent"})
    assert out == f"[1] Ardent Labs\nURL: {sites.site.base_url}/article.html\nabout ardent"
    page = toolbox.call("visit", {"url": sites.site.url("/article.html"), "goal": "founder"})
    assert page.startswith("# Ardent Labs — overview\nArdent Labs\n")
    assert toolbox.call("visit", {"url": sites.site.url("/article.html")}) == page  # goal is optional


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("browse", {"url": "x"}, "Error: unknown tool 'browse'; available tools: search, visit"),
        ("delegate", {"task": "x"}, "Error: unknown tool 'delegate'; available tools: search, visit"),
        (None, {}, "Error: unknown tool None; available tools: search, visit"),
        ("search", ["ardent"], "Error: tool 'search': arguments must be a JSON object, got list"),
        ("search", {}, "Error: tool 'search': missing required argument(s) 'query'"),
        ("visit", {"goal": "g"}, "Error: tool 'visit': missing required argument(s) 'url'"),
        ("search", {"query": "a", "k": 3}, "Error: tool 'search': unexpected argument(s) 'k'; it takes 'query'"),
        ("visit", {"url": "u", "page": 2}, "Error: tool 'visit': unexpected argument(s) 'page'; it takes 'url', 'goal'"),
        ("search", {"query": 42}, "Error: tool 'search': argument 'query' must be a string, got int"),
        ("visit", {"url": None}, "Error: tool 'visit': argument 'url' must be a string, got NoneType"),
        ("visit", {"url": "http://x/", "goal": ["a"]}, "Error: tool 'visit': argument 'goal' must be a string, got list"),
        ("search", {"query": ""}, None),
    ],
)
def test_bad_calls_are_error_observations(toolbox: WebToolbox, name, arguments, message) -> None:
    out = toolbox.call(name, arguments)
    if message is None:
        assert out.startswith("Error: search query is empty")
    else:
        assert out == message


def test_never_raises_even_if_a_tool_crashes(sites: Sites) -> None:  # noqa: F811
    class Exploding:
        def search(self, query: str, k: int) -> list[SearchHit]:
            raise KeyError("boom")

    tb = build_toolbox(ToolsConfig(visit_backend="direct"), Exploding(), sites.site.base_url)
    assert tb.call("search", {"query": "q"}) == "Error: search failed: KeyError: 'boom'"
    tb.visit = None  # type: ignore[assignment] - simulate a broken wiring
    assert tb.call("visit", {"url": sites.site.url("/article.html")}).startswith("Error: tool 'visit' failed: TypeError")


def test_visit_allowlist_defaults_to_the_world_host(toolbox: WebToolbox, sites: Sites) -> None:  # noqa: F811
    assert toolbox.visit.allowlist.hosts == (sites.site.host,)
    out = toolbox.call("visit", {"url": sites.foreign.url("/article.html")})
    assert out.startswith(f"Error: URL not allowed: host '{sites.foreign.host}'")
    assert toolbox.call("visit", {"url": "file:///etc/passwd"}) == (
        f"Error: URL not allowed: scheme 'file' is refused; allowed hosts: {sites.site.host}")


def test_extra_allowed_hosts(sites: Sites) -> None:  # noqa: F811
    config = ToolsConfig(visit_backend="direct", allowed_hosts=[sites.foreign.host])
    tb = build_toolbox(config, WorldLikeIndex(), sites.site.base_url)
    assert tb.call("visit", {"url": sites.foreign.url("/article.html")}).startswith("# Ardent Labs")


def test_playwright_backend_is_owned_lazy_and_closed(sites: Sites) -> None:  # noqa: F811
    tb = build_toolbox(ToolsConfig(visit_backend="playwright"), WorldLikeIndex(), sites.site.base_url)
    pool = tb.visit.backend
    assert isinstance(pool, BrowserPool)
    assert "not started" in repr(pool)  # Chromium starts only on the first visit
    tb.call("search", {"query": "x"})
    assert "not started" in repr(pool)
    tb.close()
    tb.close()
    assert "closed" in repr(pool)


def test_shared_visit_backend_is_not_closed(sites: Sites) -> None:  # noqa: F811
    class Recording(DirectBackend):
        closed = False

        def close(self) -> None:
            self.closed = True

    config = ToolsConfig(visit_backend="direct")
    shared = Recording(config.allowlist(sites.site.base_url))
    tb = build_toolbox(config, WorldLikeIndex(), sites.site.base_url, visit_backend=shared)
    assert tb.call("visit", {"url": sites.site.url("/plain.txt")}).startswith("Plain text file.")
    tb.close()
    assert not shared.closed


def test_config_from_yaml_mapping_and_validation() -> None:
    config = from_dict(ToolsConfig, {"visit_backend": "direct", "search_top_k": 3, "allowed_hosts": ["docs.example"],
                                     "realweb": {"provider": "searxng", "endpoint": "http://127.0.0.1:8888"}})
    assert config.search_top_k == 3 and config.realweb.endpoint == "http://127.0.0.1:8888"
    with pytest.raises(ConfigError, match="not one of"):
        from_dict(ToolsConfig, {"visit_backend": "selenium"})
    with pytest.raises(ConfigError, match="unknown key"):
        from_dict(ToolsConfig, {"max_char": 10})
    with pytest.raises(ConfigError, match="max_chars must be at least 100"):
        from_dict(ToolsConfig, {"max_chars": 10})
    with pytest.raises(ConfigError, match="allow_all_hosts is for the real web"):
        from_dict(ToolsConfig, {"allow_all_hosts": True})
    with pytest.raises(ConfigError, match="set tools.visit_focus: true too"):
        from_dict(ToolsConfig, {"visit_links": True})
    assert from_dict(ToolsConfig, {"visit_links": True, "visit_focus": True}).visit_links
    with pytest.raises(ConfigError, match="give host\\[:port\\], not a URL"):
        from_dict(ToolsConfig, {"allowed_hosts": ["http://docs.example/"]})
    with pytest.raises(ConfigError, match="allowlist is empty"):
        build_toolbox(ToolsConfig(visit_backend="direct"), WorldLikeIndex(), None)
    with pytest.raises(ConfigError, match="give the world's search index"):
        build_toolbox(ToolsConfig(visit_backend="direct"), None, "http://127.0.0.1:1")


def test_real_web_toolbox(monkeypatch) -> None:
    secret = "sk-toolbox-secret-42"
    monkeypatch.setenv("MGRPO_TEST_TOOLBOX_KEY", secret)
    with SearchStubServer(api_key=secret) as stub:
        config = from_dict(ToolsConfig, {
            "search_backend": "realweb", "visit_backend": "direct", "allow_all_hosts": True,
            "realweb": {"provider": "json_api", "endpoint": stub.base_url + "/api/search",
                        "api_key_env": "MGRPO_TEST_TOOLBOX_KEY", "api_key_header": "X-Subscription-Token",
                        "results_path": "web.results", "snippet_field": "description"},
        })
        with build_toolbox(config) as tb:
            out = tb.call("search", {"query": "quill"})
            assert out.startswith("[1] Quill 9\nURL: https://quill.example/9\nA sensor.")
            # allow_all_hosts still refuses local addresses (the stub itself is on loopback).
            assert "local or private network address" in tb.call("visit", {"url": stub.base_url + "/search"})
            assert tb.visit.allowlist.allow_all_hosts
            assert secret not in repr(tb)


def test_addressed_toolbox_shows_the_stable_address_and_visits_the_live_server(toolbox: WebToolbox,
                                                                               sites: Sites) -> None:  # noqa: F811
    """``world.address`` (issue 8): agents see http://world.local whatever port the server got; the tools map it."""
    from harness.tools.toolbox import AddressedToolbox

    tb = AddressedToolbox(toolbox, "http://world.local", sites.site.base_url)
    assert tb.call("search", {"query": "ardent"}) == "[1] Ardent Labs\nURL: http://world.local/article.html\nabout ardent"
    page = tb.call("visit", {"url": "http://world.local/article.html"})
    assert page == toolbox.call("visit", {"url": sites.site.url("/article.html")}).replace(sites.site.base_url,
                                                                                         "http://world.local")
    assert page.startswith("# Ardent Labs") and sites.site.base_url not in page
    # other hosts are not mapped: the inner allowlist still refuses them (and the error names the stable address)
    out = tb.call("visit", {"url": sites.foreign.url("/article.html")})
    assert out.startswith(f"Error: URL not allowed: host '{sites.foreign.host}'")
    assert tb.call("visit", {"url": "http://world.local.evil/article.html"}).startswith("Error: URL not allowed")
    assert tb.call("visit", {"url": None}).startswith("Error:")  # bad calls stay error observations
