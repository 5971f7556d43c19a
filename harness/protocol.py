"""The message protocol shared by every agent, the scripted expert and the parser (docs/architecture.md §The agent system).

One turn is one assistant message holding **either** exactly one tool call **or** a final
answer:

* tool call, Qwen-style (what real instruct models emit through their chat template)::

      <tool_call>{"name": "search", "arguments": {"query": "Ardent Labs"}}</tool_call>

* final answer (planner and single agent) or result (sub-agent)::

      <answer>Marlow Vance</answer>

Free text before the tag (a "thought") is allowed and ignored; anything else is a format
error (parsed in :mod:`harness.agents.parsing`). Observations come back to the model as
``tool`` messages rendered by the tokenizer's chat template.

This module only *writes* messages and observations; it never parses model output.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
ANSWER_OPEN = "<answer>"
ANSWER_CLOSE = "</answer>"

# Tool schemas (OpenAI function format, which chat templates render into the system prompt).
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web. Returns the top results as title, url and snippet.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "search query"}},
            "required": ["query"],
        },
    },
}
VISIT_TOOL = {
    "type": "function",
    "function": {
        "name": "visit",
        "description": "Open a web page and return its main text.",
        "parameters": {
            "type": "object",
            "properties": {
                "url": {"type": "string", "description": "absolute URL to open"},
                "goal": {"type": "string", "description": "what to look for on the page"},
            },
            "required": ["url"],
        },
    },
}
DELEGATE_TOOL = {
    "type": "function",
    "function": {
        "name": "delegate",
        "description": "Give one subtask to the sub-agent, which searches and browses, and get its result.",
        "parameters": {
            "type": "object",
            "properties": {
                "task": {"type": "string", "description": "the subtask, self-contained"},
                "context": {"type": "string", "description": "facts the sub-agent needs"},
            },
            "required": ["task"],
        },
    },
}

REASONER_TOOL = {
    "type": "function",
    "function": {
        "name": "reasoner",
        "description": "Ask a reasoning model (no web access) to think a question through: calculations, "
                       "logic, comparisons. Returns its answer.",
        "parameters": {
            "type": "object",
            "properties": {"question": {"type": "string", "description": "the question, with the facts it needs"}},
            "required": ["question"],
        },
    },
}

PLANNER_TOOLS = (DELEGATE_TOOL,)
#: The planner's tools with the optional reasoner (paper §3: an external LLM the planner consults, not trained).
PLANNER_REASONER_TOOLS = (DELEGATE_TOOL, REASONER_TOOL)
SUB_AGENT_TOOLS = (SEARCH_TOOL, VISIT_TOOL)
SINGLE_AGENT_TOOLS = (SEARCH_TOOL, VISIT_TOOL)

TOOL_ARGUMENTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # name: (required arguments, optional arguments)
    "search": (("query",), ()),
    "visit": (("url",), ("goal",)),
    "delegate": (("task",), ("context",)),
    "reasoner": (("question",), ()),
}


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """The canonical text of one tool call (compact JSON, key order as given)."""
    payload = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{TOOL_CALL_OPEN}{payload}{TOOL_CALL_CLOSE}"


def format_answer(text: str) -> str:
    """The canonical text of a final answer (planner, single agent) or result (sub-agent)."""
    return f"{ANSWER_OPEN}{text}{ANSWER_CLOSE}"


@dataclass(frozen=True)
class SearchHit:
    """One search result as the agents see it."""

    title: str
    url: str
    snippet: str


def render_search_results(hits: Sequence[SearchHit], snippets: bool = True) -> str:
    """The observation text of a ``search`` call.

    Numbered blocks, one per hit, so a model (or the scripted expert) can copy a URL::

        [1] Title
        URL: http://127.0.0.1:8000/wiki/ardent-labs.html
        snippet text

    ``snippets=False`` (the tiny presets' ``tools.search_snippets``): ranked title lines, each with its
    URL and no snippet, a third of the tokens for a model that pays for every one."""
    if not hits:
        return "No results."
    if not snippets:
        return "\n".join(f"[{i}] {h.title}\nURL: {h.url}" for i, h in enumerate(hits, 1))
    blocks = [f"[{i}] {h.title}\nURL: {h.url}\n{h.snippet}" for i, h in enumerate(hits, 1)]
    return "\n\n".join(blocks)


def render_error(message: str) -> str:
    """The observation text of a failed tool call or a format error."""
    return f"Error: {message}"


class Toolbox(Protocol):
    """What an agent loop (model or scripted expert) calls to run a tool.

    ``call`` never raises for a bad call: failures come back as ``render_error`` text.
    """

    def call(self, name: str, arguments: dict[str, Any]) -> str: ...
