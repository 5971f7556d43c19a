"""Transcripts of evaluated episodes (harness.transcript; issue 15 item 8), on hand-made trajectories."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.rollout import Episode, SubResult, Trajectory
from harness.transcript import (
    MAX_MODEL_CHARS,
    MAX_OBSERVATION_CHARS,
    TRANSCRIPT_FORMAT,
    episode_transcript,
    messages_transcript,
)


def _traj(agent: str, messages: list[dict[str, str]], *, call: int | None = None,
          end_reason: str = "answer") -> Trajectory:
    return Trajectory(agent=agent, query_id="q1", rollout=0, call=call, prompt_ids=[1, 2],
                      messages=messages, end_reason=end_reason)


def _sub(call: int, result: str, messages: list[dict[str, str]] | None) -> SubResult:
    return SubResult("q1", 0, call, result, True, 0, 2, False,
                     trajectory=_traj("sub_agent", messages, call=call) if messages is not None else None)


SYSTEM = {"role": "system", "content": "SYSTEM PROMPT " * 50}
DELEGATE = '<tool_call>{"name": "delegate", "arguments": {"task": "find X"}}</tool_call>'


def _planner_episode(sub_messages: list[dict[str, str]] | None) -> Episode:
    planner = [SYSTEM, {"role": "user", "content": "Who founded X?"},
               {"role": "assistant", "content": "no tags here"},
               {"role": "tool", "content": "error: format error: no tool call or answer"},
               {"role": "assistant", "content": DELEGATE},
               {"role": "tool", "content": "Marlow Vance"},
               {"role": "assistant", "content": "<answer>Marlow Vance</answer>"}]
    sub = _sub(0, "Marlow Vance", sub_messages)
    return Episode(_traj("planner", planner), [sub])


SUB_MESSAGES = [SYSTEM, {"role": "user", "content": "find X"},
                {"role": "assistant",
                 "content": '<tool_call>{"name": "search", "arguments": {"query": "X"}}</tool_call>'},
                {"role": "tool", "content": "r" * 1000},
                {"role": "assistant", "content": "<answer>Marlow Vance</answer>"}]


def test_planner_episode_in_order_with_the_sub_agent_before_its_result():
    tr = episode_transcript(_planner_episode(SUB_MESSAGES))
    assert json.loads(json.dumps(tr)) == tr  # JSON-able as is
    assert list(tr)[-1] == "format" and tr["format"] == TRANSCRIPT_FORMAT  # last: the lazy reader's mark
    assert tr["agent"] == "planner" and tr["end_reason"] == "answer"
    assert tr["limits"] == {"observation_chars": MAX_OBSERVATION_CHARS, "model_chars": MAX_MODEL_CHARS}
    got = [(t["agent"], t["call"], t["role"], t["text"][:20]) for t in tr["turns"]]
    assert got == [
        ("planner", None, "user", "Who founded X?"),
        ("planner", None, "assistant", "no tags here"),
        ("planner", None, "tool", "error: format error:"),  # not the sub-agent's result
        ("planner", None, "assistant", DELEGATE[:20]),
        ("sub_agent", 0, "user", "find X"),
        ("sub_agent", 0, "assistant", '<tool_call>{"name": '),
        ("sub_agent", 0, "tool", "r" * 20),
        ("sub_agent", 0, "assistant", "<answer>Marlow Vance"),
        ("planner", None, "tool", "Marlow Vance"),
        ("planner", None, "assistant", "<answer>Marlow Vance"),
    ]
    assert not any("SYSTEM PROMPT" in t["text"] for t in tr["turns"])  # system prompts omitted
    obs = tr["turns"][6]
    assert obs["text"] == "r" * MAX_OBSERVATION_CHARS + "…" and obs["chars"] == 1000
    assert tr["cut"] is True
    assert sum("chars" in t for t in tr["turns"]) == 1  # only the long observation was cut
    assert "missing_sub_calls" not in tr


def test_limits_model_turns_whole_up_to_their_cap_observations_cut():
    long_q, turn, huge = "q" * 2000, "a" * 3000, "b" * (MAX_MODEL_CHARS + 10)
    msgs = [{"role": "user", "content": long_q}, {"role": "assistant", "content": turn},
            {"role": "user", "content": "u" * 700},  # a later user message is an observation
            {"role": "assistant", "content": huge}, {"role": "tool", "content": "t" * 600}]
    tr = messages_transcript(msgs, agent="single_agent")
    texts = [t["text"] for t in tr["turns"]]
    assert texts[0] == long_q and texts[1] == turn  # the question and a model turn: whole
    assert texts[2] == "u" * 600 + "…" and tr["turns"][2]["chars"] == 700
    assert texts[3] == "b" * MAX_MODEL_CHARS + "…" and tr["turns"][3]["chars"] == MAX_MODEL_CHARS + 10
    assert texts[4] == "t" * 600 and "chars" not in tr["turns"][4]  # exactly at the limit: not cut
    assert all(t["agent"] == "single_agent" and t["call"] is None for t in tr["turns"])
    small = messages_transcript(msgs, max_observation_chars=10, max_model_chars=50)
    assert small["limits"] == {"observation_chars": 10, "model_chars": 50}
    assert small["turns"][4]["text"] == "t" * 10 + "…"
    assert messages_transcript(msgs[:2])["cut"] is False
    with pytest.raises(ValueError, match="limits"):
        messages_transcript(msgs, max_observation_chars=0)


def test_remote_sub_agent_turns_are_listed_as_missing():
    tr = episode_transcript(_planner_episode(None))  # the HTTP sub-agent keeps its trajectories
    assert tr["missing_sub_calls"] == [0]
    assert [t["agent"] for t in tr["turns"]] == ["planner"] * 6
    assert tr["turns"][4]["text"] == "Marlow Vance"  # its result, as the planner saw it
    assert list(tr)[-1] == "format"


def test_sub_calls_without_results_go_before_the_ith_observation_and_leftovers_at_the_end():
    # the scripted expert: every planner observation is the result of the next delegate call
    planner = [SYSTEM, {"role": "user", "content": "Q"}, {"role": "assistant", "content": "d0"},
               {"role": "tool", "content": "R0"}, {"role": "assistant", "content": "d1"},
               {"role": "tool", "content": "R1"}, {"role": "assistant", "content": "<answer>A</answer>"}]
    subs = [[{"role": "user", "content": f"task {i}"}, {"role": "assistant", "content": f"<answer>R{i}</answer>"}]
            for i in range(3)]
    tr = messages_transcript(planner, sub_calls=subs)
    got = [(t["agent"], t["call"], t["text"]) for t in tr["turns"]]
    assert got == [("planner", None, "Q"), ("planner", None, "d0"),
                   ("sub_agent", 0, "task 0"), ("sub_agent", 0, "<answer>R0</answer>"), ("planner", None, "R0"),
                   ("planner", None, "d1"),
                   ("sub_agent", 1, "task 1"), ("sub_agent", 1, "<answer>R1</answer>"), ("planner", None, "R1"),
                   ("planner", None, "<answer>A</answer>"),
                   ("sub_agent", 2, "task 2"), ("sub_agent", 2, "<answer>R2</answer>")]  # matched no observation
    # an episode whose result text matches no observation keeps its sub-agent turns too (at the end)
    ep = _planner_episode(SUB_MESSAGES)
    ep.sub_results[0].result = "something else"
    tr = episode_transcript(ep)
    assert [t["agent"] for t in tr["turns"]][-4:] == ["sub_agent"] * 4


def test_module_imports_nothing_heavy():
    code = ("import sys, harness.transcript; "
            "heavy = [m for m in ('torch', 'numpy', 'transformers', 'harness.rollout') if m in sys.modules]; "
            "print(heavy); sys.exit(1 if heavy else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
