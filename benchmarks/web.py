"""The real benchmarks on the real web: search API, browser, page text and a scripted reader
(docs/evaluation.md §Real benchmarks on the web).

``pytest benchmarks/ --web searxng --search-endpoint URL`` (or ``--web json_api`` with the key in an
environment variable) gives the runners of :mod:`benchmarks.runners` a real-web toolbox for GAIA,
XBench-DeepSearch and WebWalkerQA:

* **search**: :class:`harness.tools.realweb.RealWebSearch` (SearXNG's JSON API or a keyed JSON API);
* **visit**: Chromium through Playwright (``--visit-backend direct`` for plain HTTP), open to every public
  http(s) host, never to loopback, private or link-local addresses (``--web-allow-host HOST:PORT`` names an
  exception: a local SearXNG stand-in, a mirror), never ``file:`` or another scheme;
* **page text**: the ``web`` extractor (trafilatura's main content plus the page's links,
  :mod:`harness.tools.extract`), not the offline world's small converter.

:class:`WebOptions` is what the options say; :func:`preflight` makes one search before any task (an
unreachable endpoint or an unset key variable is one clear message, not a column of failed tasks);
:class:`ToolTally` counts per task the tool calls that failed because the web was unreachable (search API
errors, pages that do not load), so a task whose every call failed is recorded as an error
(:data:`UNREACHABLE_VERDICT`): incorrect, in the denominator, never a skip.

:class:`WebReader` is the scripted agent of ``--trainer expert`` on the real benchmarks. Unlike the offline
world's expert it knows nothing of the pages it will meet, so it is a **plumbing check and a weak
baseline, not an upper bound**: it searches the question (WebWalkerQA: opens the ``root_url``), visits the
top results, follows the link whose text shares most words with the question, and answers with the words of
the best-matching sentence that the question does not contain (an extractive reader by word overlap). The
offline tests write pages it can read; on the real web expect low accuracy.
"""

from __future__ import annotations

import re
import threading
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

from harness.checkpoint_files import BUILD_TOOL_KEYS
from harness.config import ConfigError, from_dict
from harness.protocol import format_answer, format_tool_call
from harness.tools.realweb import RealWebSearch, RealWebSearchConfig, RealWebSearchError
from harness.tools.toolbox import ToolsConfig, build_toolbox
from harness.world.schemas import ATTACHMENT_MARKER, START_MARKER

PROVIDERS = ("searxng", "json_api")
#: ``TaskRecord.verdict`` of a task whose every tool call failed because the web could not be reached.
UNREACHABLE_VERDICT = "web_unreachable"
#: Observation prefixes that mean the web (not the agent) failed: the search API, or a page that did not load.
UNREACHABLE_PREFIXES = ("Error: search failed", "Error: could not load", "Error: timed out after")
#: The run's tool settings a model keeps on the web (what it trained with); the rest is the web's.
RUN_TOOL_KEYS = (*BUILD_TOOL_KEYS, "timeout_s")


class WebError(RuntimeError):
    """The real-web tools cannot be used as configured (the message says what to change; never a key)."""


@dataclass(frozen=True)
class WebOptions:
    """The suite's real-web options (``--web``, ``--search-*``, ``--web-allow-host``, ``--visit-backend``)."""

    provider: str
    """``searxng`` or ``json_api`` (:class:`harness.tools.realweb.RealWebSearchConfig`)."""
    endpoint: str
    """searxng: the instance's base URL; json_api: the full search URL."""
    key_env: str = ""
    """The environment variable that holds the API key (json_api); its value is read per request only."""
    search: dict[str, Any] = field(default_factory=dict)
    """More ``tools.realweb`` fields (``--search-option KEY=VALUE``), e.g. ``results_path=web.results``."""
    allow_hosts: tuple[str, ...] = ()
    """``host[:port]`` the browser may open although local or private (``--web-allow-host``)."""
    visit_backend: str = "playwright"
    extractor: str = "web"

    def search_config(self) -> RealWebSearchConfig:
        data = {**self.search, "provider": self.provider, "endpoint": self.endpoint, "api_key_env": self.key_env}
        return _checked(RealWebSearchConfig, data, "--web/--search-option")

    def tools_config(self, run_tools: dict[str, Any] | None = None) -> ToolsConfig:
        """The toolbox settings: the run's own for what the model trained with (:data:`RUN_TOOL_KEYS`), the
        web's for the rest."""
        keep = {k: v for k, v in (run_tools or {}).items() if k in RUN_TOOL_KEYS}
        data = {**keep, "search_backend": "realweb", "visit_backend": self.visit_backend,
                "extractor": self.extractor, "allow_all_hosts": True, "block_private_networks": True,
                "allowed_hosts": list(self.allow_hosts), "realweb": asdict(self.search_config())}
        return _checked(ToolsConfig, data, "real-web tools")

    def describe(self) -> dict[str, Any]:
        """What a run's provenance keeps: the endpoint without query or credentials, the key's variable name."""
        parts = urlsplit(self.endpoint)
        host = parts.hostname or ""
        where = f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}{parts.path}"
        return {"provider": self.provider, "endpoint": where, "key_env": self.key_env or None,
                "allow_hosts": list(self.allow_hosts), "visit_backend": self.visit_backend,
                "extractor": self.extractor}


def _checked(cls: Any, data: dict[str, Any], where: str) -> Any:
    """``from_dict(cls, data)``, validated; any problem is a :class:`WebError` with the config's message."""
    try:
        cfg = from_dict(cls, data, where)
        cfg.validate()
    except (ConfigError, TypeError, ValueError) as exc:
        raise WebError(str(exc)) from None
    return cfg


def preflight(options: WebOptions) -> None:
    """One search request before any task: a missing key variable, a wrong endpoint or a dead instance is
    one :class:`WebError` naming what to fix (costs one request of the API's quota)."""
    try:
        search = RealWebSearch(options.search_config())
        search.search("GAIA benchmark", 1)
    except RealWebSearchError as exc:
        hint = ("--search-endpoint (a SearXNG instance with the json format enabled)" if options.provider == "searxng"
                else "--search-endpoint and --search-key-env / --search-option (docs/evaluation.md)")
        raise WebError(f"--web {options.provider}: {exc}; check {hint}") from None


class ToolTally:
    """A toolbox that counts calls and the calls that failed because the web was unreachable.

    The suite answers one task at a time per process, so the difference of two :meth:`snapshot` s
    around a task is that task's; a task abandoned at its timeout may still add calls later (rare).
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._lock = threading.Lock()
        self.calls = 0
        self.unreachable = 0
        self._failures: list[tuple[int, str]] = []  # (call number, observation) of the recent failures

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        out = self.inner.call(name, arguments)
        failed = out.startswith(UNREACHABLE_PREFIXES)
        with self._lock:
            self.calls += 1
            if failed:
                self.unreachable += 1
                self._failures = [*self._failures[-99:], (self.calls, out[:300])]
        return out

    def snapshot(self) -> tuple[int, int]:
        with self._lock:
            return self.calls, self.unreachable

    def verdict(self, before: tuple[int, int]) -> tuple[dict[str, int], str | None]:
        """``(counts, error)`` of the calls since ``before``: the error when every one of them failed."""
        with self._lock:
            calls, bad = self.calls, self.unreachable
            first = next((text for n, text in self._failures if n > before[0]), None)
        counts = {"web_calls": calls - before[0], "web_unreachable": bad - before[1]}
        error = None
        if counts["web_calls"] and counts["web_unreachable"] == counts["web_calls"]:
            error = (f"{UNREACHABLE_VERDICT}: all {counts['web_calls']} tool call(s) of the task failed to reach the "
                     f"web (first: {first})")
        return counts, error

    def close(self) -> None:
        self.inner.close()


def web_toolbox(options: WebOptions, run_tools: dict[str, Any] | None = None) -> ToolTally:
    """The real-web toolbox (search API + browser + web extractor), counted; close it when done."""
    return ToolTally(build_toolbox(options.tools_config(run_tools)))


# ------------------------------------------------------------------------------ the scripted reader
_WORD = re.compile(r"\w+", re.U)
_LINK = re.compile(r"^(.*?)\s*\[(https?://[^\]\s]+)\]\s*$")
_HIT_URL = re.compile(r"^URL: (\S+)$", re.M)
_SENTENCE = re.compile(r"(?<=[.!?。！？])\s+|\n+")
STOPWORDS = frozenset("""a an and are as at be been by can did do does for from had has have how in into is it its
not of on or than that the there this to was were what when where which who whom whose why will with according
website page""".split())


def content_words(text: str) -> set[str]:
    """Lower-case words of ``text`` without :data:`STOPWORDS`."""
    return {w for w in (m.lower() for m in _WORD.findall(text)) if w not in STOPWORDS}


def best_sentence(text: str, question: str) -> tuple[int, str | None]:
    """``(overlap, answer)``: the sentence of ``text`` sharing most content words with ``question``, and its
    words that the question lacks (the answer an extractive reader gives); ``(0, None)`` when none."""
    q = content_words(question)
    best: tuple[int, str | None] = (0, None)
    for sentence in _SENTENCE.split(text):
        sentence = _LINK.sub(r"\1", sentence.strip())
        words = _WORD.findall(sentence)
        overlap = len({w.lower() for w in words} & q)
        rest = [w for w in words if w.lower() not in q and w.lower() not in STOPWORDS]
        if overlap > best[0] and rest:
            best = (overlap, " ".join(rest))
    return best


def question_of(prompt: str) -> tuple[str, str, str | None]:
    """``(question, attachment text, start URL)`` of a prompt written by ``Benchmark.prompt``."""
    question, _, attached = prompt.partition("\n" + ATTACHMENT_MARKER)
    question, _, start = question.partition(START_MARKER)
    return question.strip(), attached, (start.strip() or None)


@dataclass
class WebReader:
    """The scripted real-web agent (module docstring). ``run(prompt)`` -> ``(answer, messages)``."""

    toolbox: Any
    max_visits: int = 4
    max_hits: int = 3
    enough: int = 2
    """Answer as soon as a sentence shares this many content words with the question."""

    def run(self, prompt: str) -> tuple[str | None, list[dict[str, str]]]:
        messages: list[dict[str, str]] = [{"role": "user", "content": prompt}]
        question, attached, start = question_of(prompt)
        best = best_sentence(attached, question) if attached else (0, None)
        if best[0] >= self.enough:
            return self._answer(messages, best[1])

        def call(name: str, args: dict[str, str]) -> str:
            messages.append({"role": "assistant", "content": format_tool_call(name, args)})
            obs = self.toolbox.call(name, args)
            messages.append({"role": "tool", "content": obs})
            return obs

        queue: list[str] = [start] if start else _HIT_URL.findall(call("search", {"query": question[:300]}))[: self.max_hits]
        seen: set[str] = set()
        q = content_words(question)
        for _ in range(self.max_visits):
            queue = [u for u in queue if u not in seen]
            if not queue:
                break
            url = queue.pop(0)
            seen.add(url)
            page = call("visit", {"url": url, "goal": question[:200]})
            if page.startswith("Error:"):
                continue
            found = best_sentence(page, question)
            if found[0] > best[0]:
                best = found
            if best[0] >= self.enough:
                break
            links = [(len(content_words(text) & q), link) for text, link in
                     (m.groups() for m in map(_LINK.match, page.splitlines()) if m)]
            queue = [link for score, link in sorted(links, key=lambda x: -x[0]) if score > 0] + queue
        return self._answer(messages, best[1])

    @staticmethod
    def _answer(messages: list[dict[str, str]], answer: str | None) -> tuple[str | None, list[dict[str, str]]]:
        if answer is not None:
            messages.append({"role": "assistant", "content": format_answer(answer)})
        return answer, messages
