"""Compact, JSON-able transcripts of evaluated episodes for task records (docs/report.md; issue 15 item 8).

An evaluated episode (:class:`harness.rollout.Episode`: the planner's or single agent's
``trajectory.messages`` and, per ``delegate`` call, a :class:`~harness.rollout.SubResult` with the
sub-agent's trajectory) becomes the ``transcript`` of its :class:`harness.records.TaskRecord`, so a
reader of the report can see *why* an answer was wrong. arXiv 2511.13288 shows no transcripts; this
is a harness addition.

Format (``TRANSCRIPT_FORMAT``), a JSON object whose keys come in this order::

    {"agent": "planner" | "single_agent",      # the top-level agent of the episode
     "end_reason": "answer" | "max_turns" | ... | null,
     "limits": {"observation_chars": 600, "model_chars": 4000},
     "cut": false,                              # true when any turn's text was cut
     "turns": [{"agent": "planner" | "sub_agent" | "single_agent", "call": null | 0, 1, ...,
                "role": "user" | "assistant" | "tool", "text": "...",
                "chars": 2345},                 # only on a cut turn: its length before the cut
               ...],
     "missing_sub_calls": [0, ...],             # only when a sub-agent's turns were not available
     "format": "transcript/1"}                  # always last (see harness.records.read_tasks)

Rules (decisions; the issue leaves them open):

- The **system prompt is omitted** (it is the same for every task and long).
- Each agent's **first user message** (the question; for a sub-agent, the planner's task) and every
  **model turn** is kept whole up to ``MAX_MODEL_CHARS``; every later ``tool``/``user`` message (an
  observation: search results, page text, a sub-agent's result, an error) is cut to
  ``MAX_OBSERVATION_CHARS``. A cut text keeps its head and ends with ``…``; the turn then carries
  ``chars`` (its full length) and the transcript ``cut: true``.
- **Order**: turns in the order they happened. A sub-agent episode is placed just before the
  planner observation that returned its result (its ``call`` index says which delegate call it
  was); the planner's result text is matched against ``SubResult.result`` so that a format-error or
  delegation-limit observation in between is not mistaken for a result. Without result texts (the
  scripted expert's transcripts) call ``i`` goes before the planner's ``i``-th observation.
  Sub-agent episodes that match no observation are appended at the end.
- A sub-agent whose trajectory is not available (``SubResult.trajectory is None``: the sub-agent
  ran in its role's HTTP service, which keeps its trajectories) contributes no turns; its call index
  is listed in ``missing_sub_calls`` and the planner's observation still shows its result.

Stdlib only and duck-typed on the rollout data types (nothing is imported from
:mod:`harness.rollout`), so record writers and tests can call it cheaply.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # only for the annotations
    from harness.rollout import Episode

MAX_OBSERVATION_CHARS = 600
"""Characters kept of each observation (a tool or later user message)."""
MAX_MODEL_CHARS = 4000
"""Characters kept of each model turn and of each agent's first user message."""
TRANSCRIPT_FORMAT = "transcript/1"
"""Value of the transcript's last key, ``format``."""
CUT_MARK = "…"

__all__ = ["MAX_MODEL_CHARS", "MAX_OBSERVATION_CHARS", "TRANSCRIPT_FORMAT", "episode_transcript",
           "messages_transcript"]


@dataclass(frozen=True)
class _SubCall:
    call: int
    messages: Sequence[Mapping[str, Any]] | None
    """The sub-agent's messages; None when they were not available."""
    result: str | None
    """The text the planner observed (None: unknown, match by position)."""


def episode_transcript(episode: Episode, *, max_observation_chars: int = MAX_OBSERVATION_CHARS,
                       max_model_chars: int = MAX_MODEL_CHARS) -> dict[str, Any]:
    """The transcript of a finished planner or single-agent episode and its sub-agent calls."""
    traj = episode.trajectory
    subs = [_SubCall(int(r.call), r.trajectory.messages if r.trajectory is not None else None, r.result)
            for r in episode.sub_results]
    return _build(str(traj.agent), traj.messages, subs, traj.end_reason or None,
                  max_observation_chars, max_model_chars)


def messages_transcript(messages: Sequence[Mapping[str, Any]], *, agent: str = "planner",
                        sub_calls: Sequence[Sequence[Mapping[str, Any]] | None] = (),
                        end_reason: str | None = None,
                        max_observation_chars: int = MAX_OBSERVATION_CHARS,
                        max_model_chars: int = MAX_MODEL_CHARS) -> dict[str, Any]:
    """The transcript of plain chat messages (e.g. :class:`harness.world.expert.Transcript`:
    ``messages_transcript(t.planner, sub_calls=t.sub_calls)``); sub-agent call ``i`` is
    ``sub_calls[i]`` and goes before the planner's ``i``-th observation."""
    subs = [_SubCall(i, m, None) for i, m in enumerate(sub_calls)]
    return _build(agent, messages, subs, end_reason, max_observation_chars, max_model_chars)


def _build(agent: str, messages: Sequence[Mapping[str, Any]], subs: list[_SubCall], end_reason: str | None,
           max_obs: int, max_model: int) -> dict[str, Any]:
    if max_obs < 1 or max_model < 1:
        raise ValueError(f"transcript limits must be >= 1, got observation {max_obs}, model {max_model}")
    turns: list[dict[str, Any]] = []
    missing: list[int] = []
    nxt = 0  # the next sub-agent call to place

    def place(sub: _SubCall) -> None:
        if sub.messages is None:
            missing.append(sub.call)
        else:
            _agent_turns(turns, "sub_agent", sub.call, sub.messages, max_obs, max_model)

    for role, text, first in _messages(messages):
        if role == "tool" and nxt < len(subs) and subs[nxt].result in (None, text):
            place(subs[nxt])
            nxt += 1
        turns.append(_turn(agent, None, role, text, max_model if role == "assistant" or first else max_obs))
    for sub in subs[nxt:]:
        place(sub)
    out: dict[str, Any] = {
        "agent": agent, "end_reason": end_reason,
        "limits": {"observation_chars": max_obs, "model_chars": max_model},
        "cut": any("chars" in t for t in turns), "turns": turns,
    }
    if missing:
        out["missing_sub_calls"] = missing
    out["format"] = TRANSCRIPT_FORMAT  # last: harness.records' lazy reader relies on it
    return out


def _messages(messages: Sequence[Mapping[str, Any]]):
    """``(role, text, is_first_user_message)`` of the non-system messages."""
    seen_user = False
    for m in messages:
        role = str(m.get("role", ""))
        if role == "system":
            continue
        content = m.get("content")
        text = content if isinstance(content, str) else ("" if content is None else str(content))
        first = role == "user" and not seen_user
        seen_user = seen_user or role == "user"
        yield role, text, first


def _agent_turns(turns: list[dict[str, Any]], agent: str, call: int | None,
                 messages: Sequence[Mapping[str, Any]], max_obs: int, max_model: int) -> None:
    for role, text, first in _messages(messages):
        turns.append(_turn(agent, call, role, text, max_model if role == "assistant" or first else max_obs))


def _turn(agent: str, call: int | None, role: str, text: str, limit: int) -> dict[str, Any]:
    t: dict[str, Any] = {"agent": agent, "call": call, "role": role, "text": text}
    if len(text) > limit:
        t["text"] = text[:limit] + CUT_MARK
        t["chars"] = len(text)
    return t
