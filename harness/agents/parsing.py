"""Parse one assistant turn into a tool call, a final answer or a format error (docs/architecture.md §The agent system).

One turn is one assistant message holding **either** exactly one
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` **or** exactly one
``<answer>...</answer>`` (the message format of :mod:`harness.protocol`). Free text
before the opening tag (a "thought") is allowed and ignored. Everything else is a
:class:`FormatError` with a human-readable ``reason``, which the rollout shows the model as an
error observation and which sets ``r_format = 0`` (docs/paper.md).

Rules (decisions the design leaves open are marked *decision*):

* exactly one of the two tags, each opened once and closed once, opening before closing;
  a turn with both a tool call and an answer is an error, so is a tag inside the other's body
  (e.g. ``<answer>`` inside a tool call's JSON string);
* *decision*: after the closing tag only whitespace may follow (anything else is "trailing
  text"), so a model cannot hide a second action after the first;
* the tool call body is one JSON object with exactly the keys ``name`` (a string among the
  ``allowed_tools``) and ``arguments`` (an object); duplicated keys anywhere are an error
  (``json`` would silently keep the last one);
* *decision*: every argument value is a string, the required arguments of
  :data:`harness.protocol.TOOL_ARGUMENTS` are present and non-blank, unknown ones are an
  error; optional ones may be empty;
* the answer body must be non-blank; *decision*: :class:`FinalAnswer` keeps the text exactly as
  written (no strip), so that ``parse_turn(format_answer(t)) == FinalAnswer(t)``; scorers
  normalise whitespace themselves.

Complexity: only ``str.count``/``str.find`` and one ``json.loads`` run over the text, so the parser
is linear in its length (no regular expressions, so no catastrophic backtracking); deeply nested
JSON (``[[[[...``) that would overflow the recursion limit is a format error, not an exception.
The parser never raises for any input text; it raises ``ValueError`` only for a programming error
(an allowed tool that has no argument schema).

Deliberate deviation from Qwen's own parser: Qwen accepts several ``<tool_call>`` blocks in one
message (parallel calls); docs/architecture.md §The agent system allows exactly one action per turn, so two are an error.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.protocol import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    TOOL_ARGUMENTS,
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
)

__all__ = ["ToolCall", "FinalAnswer", "FormatError", "ParsedTurn", "parse_turn"]

_MAX_SHOWN = 80  # characters of offending text quoted in a reason


@dataclass(frozen=True)
class ToolCall:
    """A valid tool call: ``name`` is one of the allowed tools, ``arguments`` maps names to strings."""

    name: str
    arguments: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FinalAnswer:
    """A final answer (planner, single agent) or a result (sub-agent), text as written."""

    text: str


@dataclass(frozen=True)
class FormatError:
    """An invalid turn; ``reason`` says what was wrong, in words a model (or a person) can act on."""

    reason: str


ParsedTurn = ToolCall | FinalAnswer | FormatError


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise _DuplicateKey(key)
        obj[key] = value
    return obj


def _shorten(text: str) -> str:
    text = text.strip()
    if len(text) > _MAX_SHOWN:
        text = text[:_MAX_SHOWN] + "..."
    return repr(text)


def _check_tags(text: str, open_tag: str, close_tag: str) -> tuple[int, int] | FormatError:
    """Positions of the single ``open_tag``/``close_tag`` pair, or why there is no valid pair."""
    n_open, n_close = text.count(open_tag), text.count(close_tag)
    if n_open > 1:
        return FormatError(f"{n_open} {open_tag} tags: give exactly one action per turn")
    if n_close > 1:
        return FormatError(f"{n_close} {close_tag} tags: give exactly one action per turn")
    if n_open == 0:
        return FormatError(f"{close_tag} without an opening {open_tag}")
    if n_close == 0:
        return FormatError(f"{open_tag} is not closed with {close_tag}")
    start, end = text.find(open_tag), text.find(close_tag)
    if end < start:
        return FormatError(f"{close_tag} comes before {open_tag}")
    trailing = text[end + len(close_tag) :]
    if trailing.strip():
        return FormatError(f"text after {close_tag} is not allowed: {_shorten(trailing)}")
    return start + len(open_tag), end


def _parse_tool_call(
    body: str, allowed: Collection[str], schemas: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]]
) -> ToolCall | FormatError:
    if not body.strip():
        return FormatError("empty <tool_call>: expected a JSON object with \"name\" and \"arguments\"")
    try:
        payload = json.loads(body, object_pairs_hook=_no_duplicates)
    except _DuplicateKey as exc:
        return FormatError(f"tool call JSON repeats the key {exc.args[0]!r}")
    except RecursionError:
        return FormatError("tool call JSON is nested too deeply")
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        return FormatError(f"tool call is not valid JSON ({exc})")
    if not isinstance(payload, dict):
        return FormatError(f"tool call must be a JSON object, got {type(payload).__name__}")
    keys = set(payload)
    if keys != {"name", "arguments"}:
        missing = sorted({"name", "arguments"} - keys)
        extra = sorted(keys - {"name", "arguments"})
        parts = []
        if missing:
            parts.append(f"missing {', '.join(map(repr, missing))}")
        if extra:
            parts.append(f"unexpected {', '.join(map(repr, extra))}")
        return FormatError(f"tool call JSON must have exactly \"name\" and \"arguments\": {'; '.join(parts)}")
    name, arguments = payload["name"], payload["arguments"]
    if not isinstance(name, str):
        return FormatError(f"tool name must be a string, got {type(name).__name__}")
    if name not in allowed:
        return FormatError(
            f"unknown tool {_shorten(name)}; available: {', '.join(sorted(allowed)) or 'none'}"
        )
    if not isinstance(arguments, dict):
        return FormatError(f"\"arguments\" must be a JSON object, got {type(arguments).__name__}")
    required, optional = schemas[name]
    unknown = sorted(set(arguments) - set(required) - set(optional))
    if unknown:
        return FormatError(
            f"{name} got unknown argument(s) {', '.join(_shorten(u) for u in unknown)}; "
            f"it takes {', '.join(required + optional)}"
        )
    for arg in required:
        if arg not in arguments:
            return FormatError(f"{name} is missing the required argument {arg!r}")
    for arg, value in arguments.items():
        if not isinstance(value, str):
            return FormatError(f"{name} argument {arg!r} must be a string, got {type(value).__name__}")
    for arg in required:
        if not arguments[arg].strip():
            return FormatError(f"{name} argument {arg!r} is empty")
    return ToolCall(name, dict(arguments))


def parse_turn(
    text: str,
    allowed_tools: Collection[str],
    *,
    tool_arguments: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = TOOL_ARGUMENTS,
) -> ParsedTurn:
    """Parse one assistant message (decoded without special tokens such as ``<|im_end|>``).

    ``allowed_tools`` are the tool names this agent may call (e.g. ``{"delegate"}`` for the
    planner); ``tool_arguments`` maps each name to ``(required, optional)`` argument names
    (default: :data:`~harness.protocol.TOOL_ARGUMENTS`). Returns exactly one of
    :class:`ToolCall`, :class:`FinalAnswer`, :class:`FormatError`; never raises for any ``text``.
    """
    missing_schema = [t for t in allowed_tools if t not in tool_arguments]
    if missing_schema:
        raise ValueError(
            f"allowed tool(s) {missing_schema} have no argument schema; add them to tool_arguments "
            f"(known: {sorted(tool_arguments)})"
        )
    if not isinstance(text, str):
        return FormatError(f"expected text, got {type(text).__name__}")
    has_call = TOOL_CALL_OPEN in text or TOOL_CALL_CLOSE in text
    has_answer = ANSWER_OPEN in text or ANSWER_CLOSE in text
    if has_call and has_answer:
        return FormatError("a turn holds either one tool call or one answer, not both")
    if not has_call and not has_answer:
        if not text.strip():
            return FormatError("empty turn: expected one <tool_call>...</tool_call> or <answer>...</answer>")
        return FormatError(
            "no action found: end the turn with one <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call> "
            "or one <answer>...</answer>"
        )
    if has_call:
        span = _check_tags(text, TOOL_CALL_OPEN, TOOL_CALL_CLOSE)
        if isinstance(span, FormatError):
            return span
        return _parse_tool_call(text[span[0] : span[1]], allowed_tools, tool_arguments)
    span = _check_tags(text, ANSWER_OPEN, ANSWER_CLOSE)
    if isinstance(span, FormatError):
        return span
    body = text[span[0] : span[1]]
    if not body.strip():
        return FormatError("empty <answer>: write the answer between <answer> and </answer>")
    return FinalAnswer(body)
