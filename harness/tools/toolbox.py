"""The sub-agent's (and single agent's) toolbox: ``search`` + ``visit`` (docs/architecture.md §The agent system, docs/tools.md).

:class:`WebToolbox` implements :class:`harness.protocol.Toolbox`: ``call(name,
arguments) -> str`` validates the tool name, the argument names (required/optional, from
``protocol.TOOL_ARGUMENTS``) and their types, runs the tool, and returns the observation text.
It never raises: an unknown tool, a missing or unexpected argument, a wrong type or a failing
backend all come back as ``render_error`` text. It is thread-safe, so one toolbox (one browser
pool) serves every episode and thread of a run; build it once with :func:`build_toolbox` and
``close()`` it (or use it as a context manager) at the end.

Configuration is :class:`ToolsConfig` (YAML section ``tools``). Offline (default) the visit
allowlist is the world server's ``host:port``; the real web needs ``allow_all_hosts: true`` and
a ``realweb`` search section.

Deliberate choice: ``visit_backend`` defaults to ``playwright`` (docs/tools.md: the default for
evaluation and the real web); CPU training presets set ``direct``, which returns the same text on
the offline world at a fraction of the cost (see docs/tools.md for figures).
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Literal

from harness.protocol import TOOL_ARGUMENTS, render_error
from harness.config import ConfigError, help_field
from harness.tools.allowlist import Allowlist
from harness.tools.extract import EXTRACTORS, get_extractor
from harness.tools.browser import DEFAULT_ARGS, DEFAULT_CHROMIUM, BrowserConfig, BrowserPool
from harness.tools.realweb import RealWebSearch, RealWebSearchConfig
from harness.tools.search import SearchBackend, SearchTool, bind_base_url
from harness.tools.visit import DEFAULT_USER_AGENT, DirectBackend, VisitBackend, VisitTool


@dataclasses.dataclass
class ToolsConfig:
    """The ``search`` and ``visit`` tools."""

    search_top_k: int = help_field(5, help="hits returned by one search call")
    search_snippets: bool = help_field(True, help="false: each hit is its title and URL only, no snippet (the tiny "
                                       "presets: a third of the tokens; use the warm start's own setting)")
    search_backend: Literal["world", "realweb"] = help_field(
        "world", help="'world' (the offline world's BM25 index) or 'realweb' (the HTTP search API in realweb)")
    visit_backend: Literal["playwright", "direct"] = help_field(
        "playwright", help="'playwright' (Chromium; evaluation, real web) or 'direct' (HTTP fetch; fast CPU training)")
    extractor: str = help_field(
        "simple", help="how a page's HTML becomes text: 'simple' (the offline world's converter, every line) or "
                       "'web' (trafilatura's main content plus the page's links; the real web)")
    max_chars: int = help_field(6000, help="page text budget per visit; longer text ends with a '[truncated]' line")
    visit_focus: bool = help_field(
        False, help="goal-guided visit: the page's table rows that match the visit's goal come first (a "
                    "deterministic stand-in for the paper's goal-guided summary; docs/tools.md; use the warm start's "
                    "own setting)")
    visit_links: bool = help_field(
        False, help="with visit_focus, a page on which no row matches the goal gets the links of each menu line and "
                    "list that match it (by their text, or by the linked page's row labels and listed links, read once "
                    "more) first: a stand-in for a summariser that knows where a site keeps what (docs/tools.md; "
                    "use the warm start's own setting)")
    max_html_chars: int = help_field(
        1_000_000, help="page-size cap: HTML characters (direct: bytes) read before conversion to text")
    timeout_s: float = help_field(10.0, help="seconds one visit may take, waiting for a browser slot included")
    max_concurrency: int = help_field(4, help="Playwright: pages loading at once (reused browser contexts)")
    max_redirects: int = help_field(5, help="direct: redirects followed (each hop checked against the allowlist)")
    allowed_hosts: list[str] = help_field(
        [], help="extra host[:port] entries visit may open besides the world's own host; with allow_all_hosts, "
                 "hosts allowed even though they are local or private (a local stand-in, an intranet mirror)")
    allow_all_hosts: bool = help_field(
        False, help="real web only: allow any http(s) host (file:, data:, chrome:, javascript: stay refused)")
    block_private_networks: bool = help_field(
        True, help="with allow_all_hosts: refuse localhost and private/link-local IP literals")
    wait_until: Literal["load", "domcontentloaded", "networkidle", "commit"] = help_field(
        "load", help="Playwright: navigation event a visit waits for")
    chromium_path: str = help_field(DEFAULT_CHROMIUM, help="Chromium binary for Playwright")
    chromium_args: list[str] = help_field(list(DEFAULT_ARGS), help="Chromium command-line switches")
    user_agent: str = help_field("", help="User-Agent for both backends; '' = each backend's default")
    reasoner: bool = help_field(
        False, help="give the planner the untrained 'reasoner' tool: an OpenAI-compatible endpoint from the "
                    "environment (MGRPO_REASONER_URL, MGRPO_REASONER_MODEL, MGRPO_REASONER_API_KEY; docs/tools.md)")
    realweb: RealWebSearchConfig = dataclasses.field(
        default_factory=RealWebSearchConfig, metadata={"help": "real-web search API (search_backend: realweb)"})

    def validate(self) -> None:
        """Fail early with a message naming the key to change."""
        if self.search_top_k < 1:
            raise ConfigError("tools.search_top_k must be at least 1")
        if self.extractor not in EXTRACTORS:
            raise ConfigError(f"tools.extractor {self.extractor!r}: use one of {', '.join(sorted(EXTRACTORS))}")
        if self.max_chars < 100:
            raise ConfigError("tools.max_chars must be at least 100 (the page text budget)")
        if self.max_html_chars < self.max_chars:
            raise ConfigError("tools.max_html_chars must be at least tools.max_chars")
        if self.visit_links and not self.visit_focus:
            raise ConfigError("tools.visit_links orders links where no row matches the goal: set tools.visit_focus: "
                              "true too")
        if self.timeout_s <= 0:
            raise ConfigError("tools.timeout_s must be positive")
        if self.max_concurrency < 1:
            raise ConfigError("tools.max_concurrency must be at least 1")
        if self.max_redirects < 0:
            raise ConfigError("tools.max_redirects must be 0 or more")
        if self.allow_all_hosts and self.search_backend == "world":
            raise ConfigError("tools.allow_all_hosts is for the real web: set tools.search_backend: realweb too, "
                              "or leave allow_all_hosts false for the offline world")
        for host in self.allowed_hosts:
            if "/" in host:
                raise ConfigError(f"tools.allowed_hosts entry {host!r}: give host[:port], not a URL")
        self.realweb.validate()

    def allowlist(self, base_url: str | None) -> Allowlist:
        """The visit allowlist for a world served at ``base_url`` (or the open web)."""
        if self.allow_all_hosts:  # the world's own server stays reachable next to the web (a local address)
            return Allowlist.open_web(self.block_private_networks,
                                      hosts=[*self.allowed_hosts, *([base_url] if base_url else [])])
        try:
            return Allowlist.for_base_url(base_url, self.allowed_hosts)
        except ValueError as exc:
            raise ConfigError(f"tools: {exc}") from None

    def browser_config(self) -> BrowserConfig:
        return BrowserConfig(
            executable_path=self.chromium_path,
            args=tuple(self.chromium_args),
            max_concurrency=self.max_concurrency,
            max_html_chars=self.max_html_chars,
            wait_until=self.wait_until,
            user_agent=self.user_agent or None,
        )


class WebToolbox:
    """``search`` and ``visit`` behind the :class:`~harness.protocol.Toolbox` protocol."""

    def __init__(self, search: SearchTool, visit: VisitTool, owned: tuple[Any, ...] = ()) -> None:
        self.search = search
        self.visit = visit
        self.tools = ("search", "visit")
        self._owned = owned  # resources closed with the toolbox (a browser pool it started)
        self._close_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"WebToolbox(search={self.search!r}, visit={self.visit!r})"

    def __enter__(self) -> "WebToolbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close what the toolbox started (the browser pool); idempotent."""
        with self._close_lock:
            owned, self._owned = self._owned, ()
        for resource in owned:
            resource.close()

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Run tool ``name``; the observation text, or ``Error: ...`` text. Never raises."""
        try:
            problem = self._check(name, arguments)
            if problem is not None:
                return render_error(problem)
            if name == "search":
                return self.search(arguments["query"])
            return self.visit(arguments["url"], arguments.get("goal", ""))
        except Exception as exc:  # noqa: BLE001 - the agent loop must never see an exception
            return render_error(f"tool {name!r} failed: {type(exc).__name__}: {exc}")

    def _check(self, name: Any, arguments: Any) -> str | None:
        if not isinstance(name, str) or name not in self.tools:
            return f"unknown tool {name!r}; available tools: {', '.join(self.tools)}"
        if not isinstance(arguments, dict):
            return f"tool {name!r}: arguments must be a JSON object, got {type(arguments).__name__}"
        required, optional = TOOL_ARGUMENTS[name]
        missing = [a for a in required if a not in arguments]
        if missing:
            return f"tool {name!r}: missing required argument(s) {', '.join(repr(a) for a in missing)}"
        unexpected = sorted(str(a) for a in arguments if a not in required + optional)
        if unexpected:
            allowed = ", ".join(repr(a) for a in required + optional)
            return f"tool {name!r}: unexpected argument(s) {', '.join(repr(a) for a in unexpected)}; it takes {allowed}"
        for arg, value in arguments.items():
            if not isinstance(value, str):
                return f"tool {name!r}: argument {arg!r} must be a string, got {type(value).__name__}"
        return None


class AddressedToolbox:
    """The offline world under a stable address: agents see ``public`` (e.g. ``http://world.local``) in
    tasks, search results and pages, while visits go to the server actually running at ``live``.

    Why: the world server listens on a free port chosen at start, so without this the URLs an agent sees
    change from run to run, and what a warm start learned from demonstrations written at generation
    time (``http://world.local/...``) is refused by the allowlist during RL. Only URLs under ``public``
    are mapped; every other URL reaches the inner toolbox unchanged, so its allowlist still decides.
    """

    def __init__(self, inner: Any, public: str, live: str) -> None:
        self.inner = inner
        self.public = public.rstrip("/")
        self.live = live.rstrip("/")

    def __repr__(self) -> str:
        return f"AddressedToolbox({self.public} -> {self.live}, {self.inner!r})"

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        url = arguments.get("url") if isinstance(arguments, dict) else None
        if name == "visit" and isinstance(url, str) and (url == self.public or url.startswith(self.public + "/")):
            arguments = {**arguments, "url": self.live + url[len(self.public):]}
        return self.inner.call(name, arguments).replace(self.live, self.public)


def build_toolbox(
    config: ToolsConfig,
    search_backend: Any | None = None,
    base_url: str | None = None,
    *,
    visit_backend: VisitBackend | None = None,
) -> WebToolbox:
    """Wire ``search`` + ``visit`` from ``config``.

    Args:
        config: the tools section.
        search_backend: the world's search index (``search(query, k[, base_url])``) or any
            :class:`~harness.tools.search.SearchBackend`; ``None`` with
            ``config.search_backend == "realweb"`` builds :class:`RealWebSearch` from ``config.realweb``.
        base_url: the world server's base URL (its ``host:port`` is the default allowlist).
        visit_backend: share an existing backend (e.g. one :class:`BrowserPool` across
            toolboxes); not closed by the toolbox. ``None`` builds one from the config, owned
            (closed) by the toolbox.
    """
    config.validate()
    if search_backend is None:
        if config.search_backend != "realweb":
            raise ConfigError("build_toolbox: give the world's search index, or set tools.search_backend: realweb")
        search_backend = RealWebSearch(config.realweb)
    allowlist = config.allowlist(base_url)
    try:
        backend: SearchBackend = bind_base_url(search_backend, base_url)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"build_toolbox: {exc}") from None
    owned: tuple[Any, ...] = ()
    if visit_backend is None:
        if config.visit_backend == "playwright":
            pool = BrowserPool(allowlist, config.browser_config())  # Chromium starts on first visit
            visit_backend, owned = pool, (pool,)
        else:
            visit_backend = DirectBackend(
                allowlist, max_bytes=config.max_html_chars, max_redirects=config.max_redirects,
                user_agent=config.user_agent or DEFAULT_USER_AGENT,
            )
    search = SearchTool(backend, top_k=config.search_top_k, snippets=config.search_snippets)
    visit = VisitTool(visit_backend, allowlist, max_chars=config.max_chars, timeout_s=config.timeout_s,
                      extract=get_extractor(config.extractor), focus=config.visit_focus,
                      links=config.visit_links)
    return WebToolbox(search, visit, owned=owned)
