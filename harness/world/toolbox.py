"""In-process ``search``/``visit`` toolbox over a world (docs/tools.md), no HTTP.

:class:`WorldToolbox` implements :class:`harness.protocol.Toolbox` with the same
observation text as the real backends of :mod:`harness.tools`: ``search`` returns
:func:`render_search_results` of :meth:`SearchIndex.search`, ``visit`` returns
:func:`html_to_text` of the page with links resolved against the page URL. It serves the
scripted expert at task-generation time (every task is checked solvable before it is
emitted), tests, and fast CPU data generation.

Deliberate decisions: only URLs under ``base_url`` are visited (the world's host, like the
tools' default allowlist); anything else, unknown tools, missing arguments and unknown pages
come back as :func:`render_error` text, never as exceptions. ``max_chars`` optionally
truncates page text with the real visit tool's ``truncate_text`` (same ``[truncated]`` line); ``focus``
puts the rows that match the visit's goal first, before the cut, as the real visit tool does
(:func:`harness.tools.focus.focus_rows`, ``tools.visit_focus``), and with ``links`` too, a page without such rows
gets its links ordered by the goal, peeking at the linked pages of the world (:func:`harness.tools.focus.focus_links`,
``tools.visit_links``).
"""

from __future__ import annotations

from typing import Any

from harness.protocol import render_error, render_search_results
from harness.tools.focus import focus_page
from harness.tools.html_text import html_to_text
from harness.tools.visit import truncate_text
from harness.world.generator import World
from harness.world.search import SearchIndex

DEFAULT_BASE_URL = "http://world.local"
"""Base URL of tasks written without a live server (see :func:`harness.world.tasks.rebase`)."""


class WorldToolbox:
    """``search`` and ``visit`` over ``world`` as if it were served at ``base_url``."""

    def __init__(self, world: World, base_url: str = DEFAULT_BASE_URL, index: SearchIndex | None = None,
                 k: int = 5, max_chars: int | None = None, snippets: bool = True, focus: bool = False,
                 links: bool = False) -> None:
        if links and not focus:
            raise ValueError("WorldToolbox: links=True orders links by the goal when no row matches it; set focus=True")
        self.world = world
        self.base_url = base_url.rstrip("/")
        self.index = index if index is not None else SearchIndex.build(world)
        self.k = k
        self.max_chars = max_chars
        self.snippets = snippets
        self.focus = focus
        self.links = links
        self._texts: dict[str, str] = {}
        self.calls: list[tuple[str, dict[str, Any]]] = []
        """Every call made, in order (for tests and statistics)."""

    def _page_text(self, url: str) -> str | None:
        """The whole text of the world's page at ``url`` (None outside ``base_url`` or for an unknown page)."""
        if not url.startswith(self.base_url + "/") and url != self.base_url:
            return None
        text = self._texts.get(url)
        if text is None:  # pages are static: convert each URL once
            page = self.world.resolve(url[len(self.base_url):] or "/")
            if page is None:
                return None
            text = self._texts[url] = html_to_text(page.html, base_url=url)
        return text

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        self.calls.append((name, dict(arguments)))
        if name == "search":
            query = arguments.get("query")
            if not isinstance(query, str) or not query.strip():
                return render_error("search needs a non-empty string argument 'query'")
            return render_search_results(self.index.search(query, k=self.k, base_url=self.base_url), self.snippets)
        if name == "visit":
            url = arguments.get("url")
            if not isinstance(url, str) or not url:
                return render_error("visit needs a string argument 'url'")
            if not url.startswith(self.base_url + "/") and url != self.base_url:
                return render_error(f"URL not allowed (only {self.base_url}/...): {url}")
            text = self._page_text(url)
            if text is None:
                return render_error(f"404 Not Found: {url}")
            if self.focus:
                goal = arguments.get("goal", "")
                text = focus_page(text, goal if isinstance(goal, str) else "", self.links, self._page_text)
            if self.max_chars is not None:
                text = truncate_text(text, self.max_chars)  # as the real visit tool cuts (same marker)
            return text
        return render_error(f"unknown tool {name!r}; available: search, visit")
