"""Batched rollouts (docs/architecture.md §The agent system): trajectory bookkeeping, batching, limits, in-process and HTTP sub-agent.

The episode logic is exercised with a scripted backend (a unit-test fake that returns fixed
assistant turns as token ids, so the multi-agent flow is deterministic); the token/logprob
contract with the real tiny model and the ``hf`` backend is in ``test_rollout_tiny.py``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from harness.protocol import format_answer, format_tool_call
from harness.models import load_model
from harness.rollout import (
    AgentRuntime,
    InProcessSubAgent,
    Query,
    RolloutConfig,
    SubAgentEngine,
    SubTask,
    run_group,
)
from harness.subagent_service import HTTPSubAgentClient, SubAgentServer, SubAgentUnavailable


@dataclass
class Gen:
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str


class ScriptedBackend:
    """Answers each prompt with ``policy(prompt_text)``; records batch sizes."""

    def __init__(self, tokenizer, policy):
        self.tok = tokenizer
        self.policy = policy
        self.batches: list[int] = []

    def generate(self, prompts, *, max_new_tokens, temperature, top_p, stop_token_ids, seed):
        self.batches.append(len(prompts))
        out = []
        for p in prompts:
            text = self.policy(self.tok.decode(p, skip_special_tokens=False))
            ids = self.tok(text, add_special_tokens=False)["input_ids"][:max_new_tokens]
            if len(ids) < max_new_tokens:
                ids = ids + [stop_token_ids[0]]
                reason = "stop"
            else:
                reason = "length"
            out.append(Gen(ids, [-0.5] * len(ids), reason))
        return out


@pytest.fixture(scope="module")
def tokenizer():
    return load_model("tiny")[1]


def planner_policy(prompt: str) -> str:
    n_obs = prompt.count("<tool_response>")
    if n_obs == 0:
        return format_tool_call("delegate", {"task": "find the founder of Ardent Labs"})
    return format_answer("Marlow Vance")


def sub_policy(prompt: str) -> str:
    n_obs = prompt.count("<tool_response>")
    if n_obs == 0:
        return format_tool_call("search", {"query": "Ardent Labs"})
    return format_answer("The founder is Marlow Vance")


class RecordingToolbox:
    def __init__(self):
        self.calls = []

    def call(self, name, arguments):
        self.calls.append((name, arguments))
        return f"[1] Ardent Labs\nURL: http://127.0.0.1/x\nobservation for {json.dumps(arguments)}"


def make(tokenizer, cfg, planner_pol=planner_policy, sub_pol=sub_policy):
    planner = AgentRuntime(ScriptedBackend(tokenizer, planner_pol), tokenizer)
    sub_rt = AgentRuntime(ScriptedBackend(tokenizer, sub_pol), tokenizer, policy_version=3)
    tools = RecordingToolbox()
    engine = SubAgentEngine(sub_rt, tools, cfg)
    return planner, sub_rt, engine, tools


def test_group_batches_every_turn_per_model(tokenizer):
    cfg = RolloutConfig(k=4)
    planner, sub_rt, engine, tools = make(tokenizer, cfg)
    queries = [Query("q1", "Who founded Ardent Labs?"), Query("q2", "Who founded Ardent Labs?")]
    res = run_group(queries, planner, cfg, sub_agent=InProcessSubAgent(engine))
    # 8 planner episodes, 2 turns each: exactly two planner batches of 8.
    assert planner.backend.batches == [8, 8]
    # all 8 delegations of the first turn ran as one sub-agent batch of 8, 2 turns.
    assert sub_rt.backend.batches == [8, 8]
    assert len(tools.calls) == 8
    assert [(e.trajectory.query_id, e.trajectory.rollout) for e in res.episodes] == [
        (q, k) for q in ("q1", "q2") for k in range(4)
    ]
    for ep in res.episodes:
        t = ep.trajectory
        assert t.final == "Marlow Vance" and t.format_ok and t.end_reason == "answer" and t.n_turns == 2
        assert len(ep.sub_results) == 1
        sub = ep.sub_results[0]
        assert (sub.query_id, sub.rollout, sub.call) == (t.query_id, t.rollout, 0)
        assert sub.result == "The founder is Marlow Vance" and sub.policy_version == 3
    assert len(res.sub_trajectories) == 8


def test_the_sub_agent_decodes_at_the_calling_rollouts_temperature(tokenizer):
    """An evaluation at eval.temperature 0 decodes the sub-agent greedily too, in process and over HTTP, whatever
    the sub-agent engine's own rollout temperature (before 2026-12-06 it sampled at 1.0 under a greedy planner)."""

    class Recording(ScriptedBackend):
        def __init__(self, tok, policy):
            super().__init__(tok, policy)
            self.temperatures = []

        def generate(self, prompts, *, temperature, **kw):
            self.temperatures.append(temperature)
            return super().generate(prompts, temperature=temperature, **kw)

    engine_cfg = RolloutConfig(k=2, temperature=1.0)
    sub_rt = AgentRuntime(Recording(tokenizer, sub_policy), tokenizer)
    engine = SubAgentEngine(sub_rt, RecordingToolbox(), engine_cfg)
    planner = AgentRuntime(ScriptedBackend(tokenizer, planner_policy), tokenizer)
    greedy = RolloutConfig(k=1, temperature=0.0)
    run_group([Query("q", "Who founded Ardent Labs?")], planner, greedy, sub_agent=InProcessSubAgent(engine))
    assert sub_rt.backend.temperatures == [0.0, 0.0]
    with SubAgentServer(engine) as server:
        run_group([Query("q", "Who founded Ardent Labs?")], planner, greedy, sub_agent=HTTPSubAgentClient(server.url))
        assert sub_rt.backend.temperatures[2:] == [0.0, 0.0]
        run_group([Query("q", "Who?")], planner, engine_cfg, sub_agent=HTTPSubAgentClient(server.url))
        assert sub_rt.backend.temperatures[4:] == [1.0, 1.0]
    # a request without one (an older client) runs at the engine's own; one batch cannot mix temperatures
    engine.run([SubTask("q", 0, 0, "find the founder of Ardent Labs")])
    assert sub_rt.backend.temperatures[6:] == [1.0, 1.0]
    with pytest.raises(ValueError, match="one temperature"):
        engine.run([SubTask("q", 0, 0, "a", temperature=0.0), SubTask("q", 1, 0, "b", temperature=1.0)])


def test_trajectory_masks_decode_to_generated_text(tokenizer):
    cfg = RolloutConfig(k=2)
    planner, _, engine, _ = make(tokenizer, cfg)
    res = run_group([Query("q", "Who?")], planner, cfg, sub_agent=InProcessSubAgent(engine))
    for t in [e.trajectory for e in res.episodes] + res.sub_trajectories:
        assert len(t.completion_ids) == len(t.env_mask) == len(t.logprobs)
        model_ids = [i for i, m in zip(t.completion_ids, t.env_mask) if m]
        generated = "".join(
            m["content"] + "<|im_end|>" for m in t.messages if m["role"] == "assistant"
        )
        assert tokenizer.decode(model_ids, skip_special_tokens=False) == generated
        assert all(lp == 0.0 for lp, m in zip(t.logprobs, t.env_mask) if not m)
        assert all(lp == -0.5 for lp, m in zip(t.logprobs, t.env_mask) if m)
        # the whole trajectory is what the chat template renders for the conversation
        full = tokenizer.apply_chat_template(
            t.messages, tools=None, tokenize=False, add_generation_prompt=False
        )
        assert tokenizer.decode(t.prompt_ids + t.completion_ids, skip_special_tokens=False).endswith(
            t.messages[-1]["content"] + "<|im_end|>"
        )
        assert "<|im_start|>assistant" in full


def test_format_error_observation_then_turn_limit(tokenizer):
    cfg = RolloutConfig(k=2, planner_turns=3)
    planner, _, engine, _ = make(tokenizer, cfg, planner_pol=lambda p: "I think it is Marlow")
    res = run_group([Query("q", "Who?")], planner, cfg, sub_agent=InProcessSubAgent(engine))
    for e in res.episodes:
        t = e.trajectory
        assert not t.format_ok and t.n_format_errors == 3 and t.n_turns == 3
        assert t.truncated and t.end_reason == "max_turns" and t.final is None
        assert sum(1 for m in t.messages if m["role"] == "tool" and "format error" in m["content"]) == 2


def test_end_on_format_error(tokenizer):
    cfg = RolloutConfig(k=1, end_on_format_error=True)
    planner, _, engine, _ = make(tokenizer, cfg, planner_pol=lambda p: "<tool_call>{oops")
    t = run_group([Query("q", "Who?")], planner, cfg, sub_agent=InProcessSubAgent(engine)).episodes[0].trajectory
    assert t.end_reason == "format_error" and t.n_turns == 1 and not t.format_ok


def test_delegation_limit_and_context_limit(tokenizer):
    cfg = RolloutConfig(k=1, planner_turns=5, max_delegations=1, context_tokens=100_000)
    always_delegate = lambda p: format_tool_call("delegate", {"task": "again"})  # noqa: E731
    planner, _, engine, _ = make(tokenizer, cfg, planner_pol=always_delegate)
    ep = run_group([Query("q", "Who?")], planner, cfg, sub_agent=InProcessSubAgent(engine)).episodes[0]
    assert len(ep.sub_results) == 1
    assert sum("delegation limit" in m["content"] for m in ep.trajectory.messages if m["role"] == "tool") >= 1
    assert ep.trajectory.end_reason == "max_turns"

    small = RolloutConfig(k=1, planner_turns=50, context_tokens=1000, max_delegations=50)
    planner, _, engine, _ = make(tokenizer, small, planner_pol=always_delegate)
    t = run_group([Query("q", "Who?")], planner, small, sub_agent=InProcessSubAgent(engine)).episodes[0].trajectory
    assert t.end_reason == "context" and t.truncated and 1 <= t.n_turns < 50
    # it stopped because the next turn would not fit, and every turn it generated did fit
    assert len(t.prompt_ids) + len(t.completion_ids) + small.max_new_tokens > small.context_tokens
    last_model = max(i for i, m in enumerate(t.env_mask) if m)
    assert len(t.prompt_ids) + last_model < small.context_tokens


def test_max_new_tokens_cut_turn_is_closed(tokenizer):
    cfg = RolloutConfig(k=1, planner_turns=1, max_new_tokens=5)
    planner, _, engine, _ = make(tokenizer, cfg)
    t = run_group([Query("q", "Who?")], planner, cfg, sub_agent=InProcessSubAgent(engine)).episodes[0].trajectory
    assert sum(t.env_mask) == 5 and not t.format_ok
    # the closing end-of-turn token is an observation token
    assert t.env_mask[5] == 0


def test_single_agent_uses_tools_directly(tokenizer):
    cfg = RolloutConfig(k=3)
    runtime = AgentRuntime(ScriptedBackend(tokenizer, sub_policy), tokenizer)
    tools = RecordingToolbox()
    res = run_group([Query("q", "Who?")], runtime, cfg, toolbox=tools)
    assert runtime.backend.batches == [3, 3] and len(tools.calls) == 3
    assert all(e.trajectory.agent == "single_agent" and e.sub_results == [] for e in res.episodes)


class ReleasingBackend(ScriptedBackend):
    """Also records the sequences the rollout releases (as the hf backend's prefix cache needs)."""

    def __init__(self, tokenizer, policy):
        super().__init__(tokenizer, policy)
        self.released: list[list[int]] = []

    def release(self, sequences):
        self.released.extend(list(s) for s in sequences)


def test_every_episode_is_released_once_when_it_ends(tokenizer):
    """Each ending episode (answer, turn limit, context limit; planner and sub-agent) is released
    from the backend exactly once, with its whole token sequence."""
    cfg = RolloutConfig(k=3, planner_turns=3)
    planner = AgentRuntime(ReleasingBackend(tokenizer, planner_policy), tokenizer)
    sub_rt = AgentRuntime(ReleasingBackend(tokenizer, sub_policy), tokenizer)
    engine = SubAgentEngine(sub_rt, RecordingToolbox(), cfg)
    res = run_group([Query("q", "Who?")], planner, cfg, sub_agent=InProcessSubAgent(engine))
    full = sorted(t.prompt_ids + t.completion_ids for t in [e.trajectory for e in res.episodes])
    assert sorted(planner.backend.released) == full
    subs = sorted(t.prompt_ids + t.completion_ids for t in res.sub_trajectories)
    assert sorted(sub_rt.backend.released) == subs and len(subs) == 3

    never = lambda p: "thinking"  # noqa: E731  format errors until the turn limit
    limited = RolloutConfig(k=2, planner_turns=2)
    runtime = AgentRuntime(ReleasingBackend(tokenizer, never), tokenizer)
    res = run_group([Query("q", "Who?")], runtime, limited, toolbox=RecordingToolbox())
    assert {e.trajectory.end_reason for e in res.episodes} == {"max_turns"}
    assert sorted(runtime.backend.released) == sorted(e.trajectory.prompt_ids + e.trajectory.completion_ids
                                                       for e in res.episodes)

    small = RolloutConfig(k=1, planner_turns=50, context_tokens=1000, max_delegations=50)
    always = lambda p: format_tool_call("search", {"query": "again"})  # noqa: E731
    runtime = AgentRuntime(ReleasingBackend(tokenizer, always), tokenizer)
    t = run_group([Query("q", "Who?")], runtime, small, toolbox=RecordingToolbox()).episodes[0].trajectory
    assert t.end_reason == "context" and runtime.backend.released == [t.prompt_ids + t.completion_ids]


def test_http_sub_agent_matches_in_process(tokenizer):
    cfg = RolloutConfig(k=3)
    planner, sub_rt, engine, _ = make(tokenizer, cfg)
    with SubAgentServer(engine) as server:
        client = HTTPSubAgentClient(server.url)
        assert client.health()["policy_version"] == 3
        res = run_group([Query("q", "Who?")], planner, cfg, sub_agent=client)
        kept = server.take_trajectories()
        busy = server.take_busy()
    assert len(kept) == 3 and server.take_trajectories() == []
    # what the service served since the last call, for the sub role's step record (docs/performance.md)
    assert busy["generate_s"] > 0 and busy["tool_s"] >= 0 and server.take_busy() == {}
    assert res.sub_trajectories == []  # trajectories stay in the sub-agent role
    for e in res.episodes:
        assert e.answer == "Marlow Vance"
        assert e.sub_results[0].result == "The founder is Marlow Vance"
        assert e.sub_results[0].trajectory is None


def test_http_client_reports_dead_service():
    client = HTTPSubAgentClient("http://127.0.0.1:9", retries=1, backoff_s=0.01, timeout_s=2)
    from harness.rollout import SubTask

    with pytest.raises(SubAgentUnavailable, match="check that the sub-agent role is running"):
        client.run([SubTask("q", 0, 0, "t")])
