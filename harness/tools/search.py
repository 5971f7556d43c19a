"""The ``search(query)`` tool (docs/architecture.md §The agent system, docs/tools.md).

:class:`SearchTool` wraps any :class:`SearchBackend` (``search(query, k) -> list[SearchHit]``):
the offline world's BM25 index or :class:`harness.tools.realweb.RealWebSearch`. The observation
is :func:`harness.protocol.render_search_results` of the top ``k`` hits; an empty query or
a failing backend gives a :func:`~harness.protocol.render_error` observation, never an
exception.

The world's index takes the base URL of the running world server as a third argument
(``search(query, k, base_url)``), because page URLs depend on the port the server got;
:func:`bind_base_url` adapts it to the two-argument protocol.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from harness.protocol import SearchHit, render_error, render_search_results

MAX_QUERY_CHARS = 1000


@runtime_checkable
class SearchBackend(Protocol):
    """Anything that returns ranked hits for a query."""

    def search(self, query: str, k: int) -> Sequence[SearchHit]: ...


class _BoundBaseURL:
    """A world index with its server's base URL filled in."""

    def __init__(self, index: Any, base_url: str) -> None:
        self.index = index
        self.base_url = base_url

    def search(self, query: str, k: int) -> Sequence[SearchHit]:
        return self.index.search(query, k, self.base_url)

    def __repr__(self) -> str:
        return f"{type(self.index).__name__}(base_url={self.base_url!r})"


def bind_base_url(backend: Any, base_url: str | None) -> SearchBackend:
    """Adapt a ``search(query, k, base_url)`` index to ``search(query, k)``; others pass through."""
    method: Callable[..., Any] | None = getattr(backend, "search", None)
    if method is None or not callable(method):
        raise TypeError(f"{type(backend).__name__} has no search(query, k) method")
    try:
        params = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return backend
    if "base_url" in params:
        if not base_url:
            raise ValueError(f"{type(backend).__name__}.search needs base_url: give the world server's base_url")
        return _BoundBaseURL(backend, base_url)
    return backend


class SearchTool:
    """``search(query)``: top-``k`` hits as numbered title/URL/snippet blocks. Never raises."""

    def __init__(self, backend: SearchBackend, top_k: int = 5, scrub: Callable[[str], str] | None = None,
                 snippets: bool = True) -> None:
        if top_k < 1:
            raise ValueError("top_k must be at least 1")
        self.backend = backend
        self.top_k = top_k
        self.snippets = snippets
        # Removes secrets (an API key) from error text before the agent sees it.
        self._scrub = scrub or getattr(backend, "scrub", None) or (lambda text: text)

    def __repr__(self) -> str:
        return f"SearchTool(backend={self.backend!r}, top_k={self.top_k})"

    def __call__(self, query: str) -> str:
        query = " ".join(query.split())
        if not query:
            return render_error("search query is empty; give a few keywords, e.g. search(query=\"Ardent Labs founder\")")
        if len(query) > MAX_QUERY_CHARS:
            return render_error(f"search query is {len(query)} characters long; keep it under {MAX_QUERY_CHARS}")
        try:
            hits = list(self.backend.search(query, self.top_k))[: self.top_k]
        except Exception as exc:  # noqa: BLE001 - the agent loop must never see an exception
            return render_error(self._scrub(f"search failed: {type(exc).__name__}: {exc}"))
        return render_search_results(hits, self.snippets)
