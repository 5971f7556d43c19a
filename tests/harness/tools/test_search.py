"""The ``search`` tool and the real-web search client (docs/tools.md), against a local stub API."""

from __future__ import annotations

import logging

import pytest

from harness.protocol import SearchHit
from harness.config import ConfigError
from harness.tools.realweb import RealWebSearch, RealWebSearchConfig, RealWebSearchError
from harness.tools.search import SearchTool, bind_base_url
from tests.support.http_fixtures import SearchStubServer

SECRET = "sk-test-0123456789abcdef"


class ListBackend:
    def __init__(self, hits: list[SearchHit]) -> None:
        self.hits = hits
        self.calls: list[tuple[str, int]] = []

    def search(self, query: str, k: int) -> list[SearchHit]:
        self.calls.append((query, k))
        return self.hits


class WorldLikeIndex:
    """The world's SearchIndex shape: search(query, k, base_url)."""

    def search(self, query: str, k: int = 5, base_url: str = "") -> list[SearchHit]:
        return [SearchHit("Ardent Labs", base_url + "/wiki/ardent-labs.html", f"about {query}")][:k]


HITS = [SearchHit(f"T{i}", f"http://h/{i}", f"s{i}") for i in range(10)]


def test_search_renders_top_k_and_normalises_the_query() -> None:
    backend = ListBackend(HITS)
    out = SearchTool(backend, top_k=3)("  Ardent \n Labs  ")
    assert backend.calls == [("Ardent Labs", 3)]
    assert out == "[1] T0\nURL: http://h/0\ns0\n\n[2] T1\nURL: http://h/1\ns1\n\n[3] T2\nURL: http://h/2\ns2"


def test_empty_query_and_no_results() -> None:
    tool = SearchTool(ListBackend([]), top_k=5)
    assert tool("   ").startswith("Error: search query is empty")
    assert tool("anything") == "No results."
    assert SearchTool(ListBackend(HITS))("x" * 2000).startswith("Error: search query is 2000 characters long")


def test_backend_failure_is_an_error_observation() -> None:
    class Broken:
        def search(self, query: str, k: int) -> list[SearchHit]:
            raise RuntimeError("index not loaded")

    assert SearchTool(Broken())("q") == "Error: search failed: RuntimeError: index not loaded"


def test_world_index_gets_the_base_url() -> None:
    backend = bind_base_url(WorldLikeIndex(), "http://127.0.0.1:4000")
    out = SearchTool(backend, top_k=2)("ardent")
    assert out == "[1] Ardent Labs\nURL: http://127.0.0.1:4000/wiki/ardent-labs.html\nabout ardent"
    with pytest.raises(ValueError, match="needs base_url"):
        bind_base_url(WorldLikeIndex(), None)
    plain = ListBackend(HITS)
    assert bind_base_url(plain, "http://x") is plain
    with pytest.raises(TypeError, match="no search"):
        bind_base_url(object(), "http://x")


# --- real web -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def stub():
    with SearchStubServer(api_key=SECRET) as server:
        yield server


def test_searxng_json(stub: SearchStubServer) -> None:
    client = RealWebSearch(RealWebSearchConfig(provider="searxng", endpoint=stub.base_url))
    hits = client.search("ardent labs", 5)
    assert hits == [
        SearchHit("Ardent Labs", "https://ardent.example/", "Research company founded in 1987."),
        SearchHit("Marlow Vance", "https://wiki.example/Marlow_Vance", "Founder of Ardent Labs."),
        SearchHit("No snippet", "https://x.example/", ""),
    ]
    request = stub.requests[-1]
    assert request["path"] == "/search"
    assert request["query"]["q"] == ["ardent labs"] and request["query"]["format"] == ["json"]
    assert client.search("ardent labs", 1) == hits[:1]


def _api_config(stub: SearchStubServer, path: str = "/api/search", **kw: object) -> RealWebSearchConfig:
    return RealWebSearchConfig(
        provider="json_api", endpoint=stub.base_url + path, api_key_env="MGRPO_TEST_SEARCH_KEY",
        api_key_header="X-Subscription-Token", results_path="web.results", snippet_field="description", **kw)


def test_keyed_api_sends_the_key_header_and_maps_results(stub: SearchStubServer, monkeypatch) -> None:
    monkeypatch.setenv("MGRPO_TEST_SEARCH_KEY", SECRET)
    client = RealWebSearch(_api_config(stub))
    assert client.search("quill", 5) == [
        SearchHit("Quill 9", "https://quill.example/9", "A sensor."),
        SearchHit("Quill Works", "https://quill.example/", "The maker."),
    ]
    assert stub.requests[-1]["headers"]["X-Subscription-Token"] == SECRET
    assert stub.requests[-1]["query"]["count"] == ["5"]


def test_keyed_api_by_post(stub: SearchStubServer, monkeypatch) -> None:
    monkeypatch.setenv("MGRPO_TEST_SEARCH_KEY", SECRET)
    config = RealWebSearchConfig(provider="json_api", endpoint=stub.base_url + "/post", method="POST",
                                 api_key_env="MGRPO_TEST_SEARCH_KEY", api_key_header="X-Subscription-Token",
                                 results_path="organic", count_param="num")
    assert RealWebSearch(config).search("ardent", 3) == [SearchHit("Posted", "https://p.example/", "ardent")]
    assert stub.requests[-1]["body"] == {"q": "ardent", "num": 3}


def test_wrong_key_is_a_clear_error(stub: SearchStubServer, monkeypatch) -> None:
    monkeypatch.setenv("MGRPO_TEST_SEARCH_KEY", "wrong-key")
    with pytest.raises(RealWebSearchError, match=r"HTTP 401 \(check the key in \$MGRPO_TEST_SEARCH_KEY\)"):
        RealWebSearch(_api_config(stub)).search("quill", 5)


def test_missing_key_variable_fails_at_construction(stub: SearchStubServer, monkeypatch) -> None:
    monkeypatch.delenv("MGRPO_TEST_SEARCH_KEY", raising=False)
    with pytest.raises(RealWebSearchError, match="environment variable MGRPO_TEST_SEARCH_KEY is not set"):
        RealWebSearch(_api_config(stub))
    with pytest.raises(ConfigError, match="api_key_env"):
        RealWebSearchConfig(provider="json_api", endpoint="https://api.example/search").validate()
    with pytest.raises(ConfigError, match="must start with http"):
        RealWebSearchConfig(endpoint="api.example").validate()


def test_timeout_and_unreachable(stub: SearchStubServer, monkeypatch) -> None:
    monkeypatch.setenv("MGRPO_TEST_SEARCH_KEY", SECRET)
    with pytest.raises(RealWebSearchError, match="did not answer within 0.5 s"):
        RealWebSearch(_api_config(stub, "/api/slow", timeout_s=0.5)).search("q", 3)
    gone = RealWebSearch(RealWebSearchConfig(endpoint="http://127.0.0.1:9"))
    assert SearchTool(gone)("q").startswith("Error: search failed: RealWebSearchError: search API at http://127.0.0.1:9 failed")


def test_the_key_never_reaches_observations_repr_or_logs(stub: SearchStubServer, monkeypatch, caplog) -> None:
    monkeypatch.setenv("MGRPO_TEST_SEARCH_KEY", SECRET)
    caplog.set_level(logging.DEBUG)  # urllib3 logs requests at DEBUG
    good = RealWebSearch(_api_config(stub))
    echo = RealWebSearch(_api_config(stub, "/api/echo-key"))  # an API that echoes the key in its error body
    observations = [SearchTool(good)("quill"), SearchTool(echo)("quill")]
    assert observations[0].startswith("[1] Quill 9")
    assert observations[1] == f"Error: search failed: RealWebSearchError: search API at {stub.base_url}/api/echo-key answered HTTP 500"
    texts = observations + [repr(good), repr(echo), repr(SearchTool(good)), repr(good.config), caplog.text]
    assert caplog.records  # the request was logged at DEBUG: the check below is not vacuous
    for text in texts:
        assert SECRET not in text
    assert stub.requests[-1]["headers"]["X-Subscription-Token"] == SECRET  # it was sent, though
    assert good.scrub(f"bad key {SECRET}") == "bad key ***"
