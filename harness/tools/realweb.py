"""Real-web search through an HTTP search API (docs/tools.md §Real-web search, GPU users, online).

Two kinds of endpoint, both mapped to :class:`~harness.protocol.SearchHit`:

* ``searxng``: a self-hosted SearXNG instance, ``GET {endpoint}/search?q=...&format=json``
  (the instance must enable the JSON format in its ``settings.yml``: ``search.formats``);
  results are ``results[].title/url/content``.
* ``json_api``: a hosted JSON API with a key. The key is read from the environment variable
  named by ``api_key_env`` (never from a config file) and sent as a header
  (``api_key_header``, optional ``api_key_prefix`` such as ``"Bearer "``). Where the results
  sit (``results_path``) and which fields hold title/url/snippet are configurable, e.g.
  Brave Search: ``endpoint=https://api.search.brave.com/res/v1/web/search``,
  ``api_key_header=X-Subscription-Token``, ``results_path=web.results``,
  ``snippet_field=description``; Serper: ``method=POST``, ``endpoint=https://google.serper.dev/search``,
  ``api_key_header=X-API-KEY``, ``results_path=organic``, ``url_field=link``.

Secrets: the key lives only in the process environment and in the request header. It is not
stored on the object (read per request), not in ``repr``, and :meth:`RealWebSearch.scrub`
removes it from every error message, so it never reaches observations, records or logs; the
error text of a failed request names the status and endpoint, never the response body verbatim.

Real-web browsing itself is the Playwright backend with ``allow_all_hosts=True``
(:mod:`harness.tools.toolbox`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Literal

import requests

from harness.protocol import SearchHit
from harness.config import ConfigError, help_field


@dataclasses.dataclass
class RealWebSearchConfig:
    """Where and how to call the search API."""

    provider: Literal["searxng", "json_api"] = help_field(
        "searxng", help="'searxng' (self-hosted, JSON format enabled) or 'json_api' (hosted, keyed)")
    endpoint: str = help_field(
        "http://127.0.0.1:8888", help="searxng: the instance's base URL; json_api: the full search URL")
    api_key_env: str = help_field(
        "", help="name of the environment variable holding the API key (e.g. SEARCH_API_KEY); '' = no key")
    api_key_header: str = help_field("Authorization", help="header that carries the key")
    api_key_prefix: str = help_field("", help="text before the key in the header, e.g. 'Bearer '")
    method: Literal["GET", "POST"] = help_field(
        "GET", help="json_api: GET with query parameters or POST with a JSON body")
    query_param: str = help_field("q", help="parameter (or JSON body key) that carries the query")
    count_param: str = help_field("count", help="parameter for the number of results ('' = do not send)")
    extra_params: dict[str, str] = help_field({}, help="more fixed parameters sent with every request")
    results_path: str = help_field(
        "results", help="dot path to the result list in the JSON response, e.g. 'web.results'")
    title_field: str = help_field("title", help="result field with the title")
    url_field: str = help_field("url", help="result field with the URL ('link' and 'href' are tried next)")
    snippet_field: str = help_field(
        "content", help="result field with the snippet ('snippet', 'description', 'body' are tried next)")
    timeout_s: float = help_field(10.0, help="seconds before a search request fails")
    max_snippet_chars: int = help_field(300, help="snippets are cut to this many characters")

    def validate(self) -> None:
        if not self.endpoint.startswith(("http://", "https://")):
            raise ConfigError(f"realweb.endpoint {self.endpoint!r} must start with http:// or https://")
        if self.provider == "json_api" and not self.api_key_env:
            raise ConfigError("realweb.api_key_env: a json_api provider needs the name of the environment "
                              "variable that holds its key (e.g. SEARCH_API_KEY)")
        if self.timeout_s <= 0:
            raise ConfigError("realweb.timeout_s must be positive")


class RealWebSearchError(RuntimeError):
    """The search API could not be used (message already scrubbed of the key)."""


class RealWebSearch:
    """``search(query, k) -> list[SearchHit]`` against SearXNG or a keyed JSON API."""

    def __init__(self, config: RealWebSearchConfig | None = None) -> None:
        self.config = config or RealWebSearchConfig()
        self.config.validate()
        if self.config.api_key_env and not os.environ.get(self.config.api_key_env):
            raise RealWebSearchError(
                f"environment variable {self.config.api_key_env} is not set: export the search API key there "
                "(realweb.api_key_env names the variable)"
            )

    def __repr__(self) -> str:
        c = self.config
        return f"RealWebSearch(provider={c.provider!r}, endpoint={c.endpoint!r}, api_key_env={c.api_key_env!r})"

    def _key(self) -> str:
        return os.environ.get(self.config.api_key_env, "") if self.config.api_key_env else ""

    def scrub(self, text: str) -> str:
        """``text`` with the API key (if any) replaced by ``***``."""
        key = self._key()
        return text.replace(key, "***") if key else text

    def search(self, query: str, k: int) -> list[SearchHit]:
        c = self.config
        headers = {"Accept": "application/json", "User-Agent": "mgrpo-harness/0.1"}
        key = self._key()
        if c.api_key_env:
            if not key:
                raise RealWebSearchError(f"environment variable {c.api_key_env} is not set")
            headers[c.api_key_header] = c.api_key_prefix + key
        params: dict[str, Any] = dict(c.extra_params)
        params[c.query_param] = query
        if c.count_param:
            params[c.count_param] = k
        if c.provider == "searxng":
            url = c.endpoint.rstrip("/") + "/search"
            params["format"] = "json"
        else:
            url = c.endpoint
        try:
            if c.method == "POST" and c.provider == "json_api":
                resp = requests.post(url, json=params, headers=headers, timeout=c.timeout_s, allow_redirects=False)
            else:
                resp = requests.get(url, params=params, headers=headers, timeout=c.timeout_s, allow_redirects=False)
        except requests.Timeout:
            raise RealWebSearchError(f"search API at {c.endpoint} did not answer within {c.timeout_s:g} s") from None
        except requests.RequestException as exc:
            raise RealWebSearchError(self.scrub(f"search API at {c.endpoint} failed: {type(exc).__name__}")) from None
        if resp.status_code != 200:
            hint = " (check the key in $" + c.api_key_env + ")" if resp.status_code in (401, 403) and c.api_key_env else ""
            if c.provider == "searxng" and resp.status_code == 403:
                hint = " (enable the json format in the instance's settings.yml: search.formats)"
            raise RealWebSearchError(f"search API at {c.endpoint} answered HTTP {resp.status_code}{hint}")
        try:
            data = resp.json()
        except ValueError:
            raise RealWebSearchError(f"search API at {c.endpoint} did not return JSON") from None
        return self._hits(data, k)

    def _hits(self, data: Any, k: int) -> list[SearchHit]:
        c = self.config
        node = data
        for part in c.results_path.split(".") if c.results_path else []:
            node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            return []
        if not isinstance(node, list):
            raise RealWebSearchError(f"search API response: {c.results_path!r} is not a list (check realweb.results_path)")
        hits: list[SearchHit] = []
        for item in node:
            if not isinstance(item, dict):
                continue
            url = _first(item, (c.url_field, "url", "link", "href"))
            if not url:
                continue
            title = _first(item, (c.title_field, "title", "name")) or url
            snippet = _first(item, (c.snippet_field, "snippet", "content", "description", "body"))
            snippet = " ".join(snippet.split())[: c.max_snippet_chars]
            hits.append(SearchHit(title=" ".join(title.split()), url=url, snippet=snippet))
            if len(hits) >= k:
                break
        return hits


def _first(item: dict[str, Any], names: tuple[str, ...]) -> str:
    for name in names:
        value = item.get(name)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""
