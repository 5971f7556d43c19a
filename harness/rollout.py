"""Batched multi-agent rollouts: token-level trajectories of planner and sub-agent (docs/architecture.md §The agent system).

A *group* is B queries x K rollouts. Every episode is a small state machine (generate a turn,
parse it, run its tool, append the observation); the engine advances all active episodes of a
group together, so that **at every turn all pending generations of one model go to the backend
as one batch** (planner turns together, sub-agent turns together), never one episode at a time.
An episode that ends is released from the backend (``backend.release(sequences)`` when it has
one): the ``hf`` backend keeps each episode's KV from turn to turn, so a turn prefills only its new
tokens (see :class:`harness.backends.HFBackend`).

The planner reaches the sub-agent through :class:`SubAgentClient`, with two implementations:
:class:`InProcessSubAgent` (an engine in this process) and
:class:`harness.subagent_service.HTTPSubAgentClient` (the sub-agent role's HTTP service). All
``delegate`` calls that the planner episodes of a group make at one turn are sent together, so
the sub-agent episodes they start are batched as well.

Every episode yields a :class:`Trajectory`: ``prompt_ids`` (system + user + assistant
opening), ``completion_ids`` (the assistant turns and the observations between them),
``env_mask`` (1 = model token, 0 = observation token) and ``logprobs`` (the sampling
log-probabilities of the model tokens, 0.0 at observation tokens), linked by ``query_id``,
``rollout`` (0..K-1) and ``call`` (0..d_k-1 for sub-agent episodes, ``None`` otherwise).

Deliberate choices where the design is silent:
- a turn cut off by ``max_new_tokens`` is closed with the template's end-of-turn tokens as
  observation tokens (``env_mask`` 0) and usually parses as a format error;
- the context budget is checked before a turn: an episode whose prompt + completion +
  ``max_new_tokens`` would exceed ``context_tokens`` ends as truncated (``end_reason="context"``);
- a planner that exceeds ``max_delegations`` gets an error observation, not the end of the episode;
- the turn limit ends an episode that has not answered (``end_reason="max_turns"``); a
  sub-agent episode without an answer returns a "no result" text to the planner.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from harness.agents.parsing import FinalAnswer, FormatError, ToolCall, parse_turn
from harness.agents.prompts import EpisodeTokens, agent_prompt, initial_messages
from harness.protocol import Toolbox, render_error
from harness.config import ConfigError, help_field


@dataclass
class RolloutConfig:
    """Limits and sampling of one group of episodes (docs/architecture.md §The agent system)."""

    k: int = help_field(8, "rollouts per query (the GRPO group size K)")
    planner_turns: int = help_field(6, "assistant turns per planner / single-agent episode")
    sub_turns: int = help_field(6, "assistant turns per sub-agent episode")
    max_delegations: int = help_field(4, "delegate calls per planner episode; further calls get an error observation")
    max_new_tokens: int = help_field(96, "new tokens per turn")
    context_tokens: int = help_field(2048, "prompt + completion tokens per episode; overflow ends it as truncated")
    temperature: float = help_field(1.0, "sampling temperature (0 = greedy)")
    top_p: float = help_field(1.0, "nucleus sampling threshold")
    end_on_format_error: bool = help_field(False, "end the episode at a format error instead of showing an error observation")
    tool_workers: int = help_field(4, "threads that run search/visit calls of one turn concurrently")

    def validate(self) -> None:
        for name in ("k", "planner_turns", "sub_turns", "max_new_tokens", "context_tokens", "tool_workers"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)} must be >= 1")
        if self.max_delegations < 0:
            raise ConfigError(f"max_delegations={self.max_delegations} must be >= 0")
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ConfigError("temperature must be >= 0 and top_p in (0, 1]")


@dataclass
class Trajectory:
    """One agent's episode at token level (docs/architecture.md §The agent system)."""

    agent: str
    query_id: str
    rollout: int
    call: int | None
    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    messages: list[dict[str, str]] = field(default_factory=list)
    final: str | None = None
    """The answer (planner, single agent) or result (sub-agent); ``None`` when it never answered."""
    format_ok: bool = True
    """False once any turn of this agent was a format error (then its reward is 0, docs/paper.md)."""
    n_turns: int = 0
    n_format_errors: int = 0
    truncated: bool = False
    end_reason: str = ""
    policy_version: int = 0

    @property
    def n_model_tokens(self) -> int:
        return sum(self.env_mask)


@dataclass(frozen=True)
class Query:
    """A question to run K rollouts of."""

    query_id: str
    question: str


@dataclass(frozen=True)
class SubTask:
    """One ``delegate`` call: the planner's rollout and call index, the task and its context."""

    query_id: str
    rollout: int
    call: int
    task: str
    context: str = ""
    temperature: float | None = None
    """Sampling temperature of this call's sub-agent episode: the calling rollout's, so that an evaluation at
    ``eval.temperature`` (0 = greedy) decodes both agents alike; None = the sub-agent engine's own."""


@dataclass
class SubResult:
    """What the planner gets back from one sub-agent episode."""

    query_id: str
    rollout: int
    call: int
    result: str
    format_ok: bool
    policy_version: int
    n_turns: int
    truncated: bool
    trajectory: Trajectory | None = None
    """The token trajectory; only in-process (the HTTP service keeps it in its role)."""


@dataclass
class Episode:
    """A finished planner or single-agent episode with its sub-agent calls."""

    trajectory: Trajectory
    sub_results: list[SubResult] = field(default_factory=list)

    @property
    def answer(self) -> str | None:
        return self.trajectory.final


@dataclass
class GroupResult:
    episodes: list[Episode]
    sub_trajectories: list[Trajectory]
    stats: dict[str, float]


class Generation(Protocol):
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str


class Backend(Protocol):
    def generate(self, prompts: list[list[int]], **kwargs: Any) -> Sequence[Generation]: ...


@dataclass
class AgentRuntime:
    """A model as the rollout sees it: its generation backend, tokenizer and policy version."""

    backend: Any
    tokenizer: Any
    policy_version: int = 0
    _codecs: dict[str, EpisodeTokens] = field(default_factory=dict, repr=False)

    def codec(self, agent: str) -> EpisodeTokens:
        if agent not in self._codecs:
            self._codecs[agent] = EpisodeTokens(self.tokenizer, agent_prompt(agent).tools)
        return self._codecs[agent]


class SubAgentClient(Protocol):
    """How a planner reaches the sub-agent: run a batch of subtasks, get their results in order."""

    def run(self, subtasks: Sequence[SubTask], stats: dict[str, float] | None = None) -> list[SubResult]: ...


def _step_seed(seed: int, *parts: object) -> int:
    h = hashlib.blake2b(repr((seed, *parts)).encode(), digest_size=8)
    return int.from_bytes(h.digest(), "little") & 0x7FFFFFFF


class _Active:
    """Mutable state of one running episode."""

    def __init__(self, traj: Trajectory, runtime: AgentRuntime, max_turns: int) -> None:
        self.traj = traj
        self.runtime = runtime
        self.codec = runtime.codec(traj.agent)
        self.allowed = agent_prompt(traj.agent).allowed_tools
        self.max_turns = max_turns
        self.pending: ToolCall | None = None
        self.done = False
        self.delegations = 0

    def append(self, ids: Sequence[int], *, model: bool, logprobs: Sequence[float] | None = None) -> None:
        t = self.traj
        t.completion_ids.extend(ids)
        t.env_mask.extend([1 if model else 0] * len(ids))
        t.logprobs.extend(list(logprobs) if logprobs is not None else [0.0] * len(ids))

    def observe(self, content: str) -> None:
        self.traj.messages.append({"role": "tool", "content": content})
        self.append(self.codec.observation_ids(content), model=False)

    def finish(self, reason: str, *, truncated: bool = False) -> None:
        self.done = True
        self.pending = None
        self.traj.end_reason = reason
        self.traj.truncated = truncated


def _start(agent: str, runtime: AgentRuntime, text: str, context: str, max_turns: int, **ids: Any) -> _Active:
    messages = initial_messages(agent, text, context)
    codec = runtime.codec(agent)
    traj = Trajectory(agent=agent, prompt_ids=codec.prompt_ids(messages), messages=messages,
                      policy_version=runtime.policy_version, **ids)
    return _Active(traj, runtime, max_turns)


def _turn_text(codec: EpisodeTokens, ids: Sequence[int]) -> str:
    """Text of a generated turn for the parser: everything before the end-of-turn token."""
    ids = list(ids)
    if ids and ids[-1] in codec.stop_token_ids:
        ids = ids[:-1]
    return codec.tokenizer.decode(ids, skip_special_tokens=False)


def generate_turns(active: Sequence[_Active], cfg: RolloutConfig, seed: int, stats: dict[str, float]) -> None:
    """One batched generation for every episode in ``active`` that waits for its next turn.

    All episodes must share one runtime (one model). Parses each turn and sets ``pending``
    (a tool call to run), ``done`` (answer, limit) or appends a format-error observation.
    """
    todo, ended = [], []
    for ep in active:
        if ep.done or ep.pending is not None:
            continue
        used = len(ep.traj.prompt_ids) + len(ep.traj.completion_ids)
        if used + cfg.max_new_tokens > cfg.context_tokens:
            ep.finish("context", truncated=True)
            ended.append(ep)
            continue
        todo.append(ep)
    if not todo:
        _release(ended)
        return
    runtime = todo[0].runtime
    t0 = time.perf_counter()
    gens = runtime.backend.generate(
        [ep.traj.prompt_ids + ep.traj.completion_ids for ep in todo],
        max_new_tokens=cfg.max_new_tokens,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        stop_token_ids=todo[0].codec.stop_token_ids,
        seed=seed,
    )
    stats["generate_s"] = stats.get("generate_s", 0.0) + time.perf_counter() - t0
    stats["generate_calls"] = stats.get("generate_calls", 0) + 1
    stats["generated_tokens"] = stats.get("generated_tokens", 0) + sum(len(g.token_ids) for g in gens)
    for ep, gen in zip(todo, gens, strict=True):
        ids = list(gen.token_ids)
        ep.append(ids, model=True, logprobs=gen.logprobs)
        if not ids or ids[-1] not in ep.codec.stop_token_ids:
            # Cut off by max_new_tokens: close the turn so the context stays well-formed.
            ep.append(ep.codec.end_of_turn_ids, model=False)
        text = _turn_text(ep.codec, ids)
        ep.traj.messages.append({"role": "assistant", "content": text})
        ep.traj.n_turns += 1
        parsed = parse_turn(text, ep.allowed)
        if isinstance(parsed, FinalAnswer):
            ep.traj.final = parsed.text.strip()
            ep.finish("answer")
            continue
        if isinstance(parsed, FormatError):
            ep.traj.format_ok = False
            ep.traj.n_format_errors += 1
            if cfg.end_on_format_error:
                ep.finish("format_error")
                continue
            if ep.traj.n_turns >= ep.max_turns:
                ep.finish("max_turns", truncated=True)
                continue
            ep.observe(render_error(f"format error: {parsed.reason}"))
            continue
        if ep.traj.n_turns >= ep.max_turns:
            ep.finish("max_turns", truncated=True)
            continue
        ep.pending = parsed
    _release(ended + [ep for ep in todo if ep.done])


def _release(ended: Sequence[_Active]) -> None:
    """Tell the backend that these episodes will not generate again (it frees their cached KV)."""
    release = getattr(ended[0].runtime.backend, "release", None) if ended else None
    if release is not None:
        release([ep.traj.prompt_ids + ep.traj.completion_ids for ep in ended])


def run_tools(active: Sequence[_Active], toolbox: Toolbox, pool: ThreadPoolExecutor, stats: dict[str, float]) -> None:
    """Run the pending search/visit calls of all episodes concurrently; append observations."""
    calls = [ep for ep in active if ep.pending is not None]
    if not calls:
        return
    t0 = time.perf_counter()
    outs = list(pool.map(lambda ep: toolbox.call(ep.pending.name, dict(ep.pending.arguments)), calls))
    stats["tool_s"] = stats.get("tool_s", 0.0) + time.perf_counter() - t0
    for ep, out in zip(calls, outs, strict=True):
        ep.pending = None
        ep.observe(out)


def no_result_text(end_reason: str) -> str:
    """What the planner is shown for a sub-agent episode that ended without a result."""
    return f"The sub-agent found no result ({end_reason})."


class SubAgentEngine:
    """Runs batches of sub-agent episodes with one model (the in-process sub-agent)."""

    def __init__(self, runtime: AgentRuntime, toolbox: Toolbox, cfg: RolloutConfig, seed: int = 0) -> None:
        self.runtime = runtime
        self.toolbox = toolbox
        self.cfg = cfg
        self.seed = seed
        self._batches = 0
        self._pool = ThreadPoolExecutor(max_workers=cfg.tool_workers, thread_name_prefix="sub-tools")

    def reseed(self, seed: int) -> None:
        """Draw the next batches from ``seed``, as a new engine would (the evaluation suite: one seed per task)."""
        self.seed, self._batches = seed, 0

    def run(self, subtasks: Sequence[SubTask], stats: dict[str, float] | None = None) -> list[SubResult]:
        stats = stats if stats is not None else {}
        temps = {s.temperature for s in subtasks if s.temperature is not None}
        if len(temps) > 1 or any(t < 0 for t in temps):
            raise ValueError(f"a sub-agent batch runs at one temperature >= 0, got {sorted(temps)}")
        cfg = replace(self.cfg, temperature=temps.pop()) if temps else self.cfg
        self._batches += 1
        active = [
            _start("sub_agent", self.runtime, s.task, s.context, cfg.sub_turns,
                   query_id=s.query_id, rollout=s.rollout, call=s.call)
            for s in subtasks
        ]
        turn = 0
        sub_stats: dict[str, float] = {}
        while not all(ep.done for ep in active):
            generate_turns(active, cfg, _step_seed(self.seed, "sub", self._batches, turn), sub_stats)
            run_tools(active, self.toolbox, self._pool, sub_stats)
            turn += 1
        for key, value in sub_stats.items():
            stats[f"sub_{key}"] = stats.get(f"sub_{key}", 0.0) + value
        out = []
        for ep in active:
            t = ep.traj
            text = t.final if t.final is not None else no_result_text(t.end_reason)
            out.append(SubResult(t.query_id, t.rollout, t.call or 0, text, t.format_ok, t.policy_version,
                                 t.n_turns, t.truncated, trajectory=t))
        return out

    def close(self) -> None:
        self._pool.shutdown(wait=False)


class InProcessSubAgent:
    """:class:`SubAgentClient` backed by a :class:`SubAgentEngine` in this process."""

    def __init__(self, engine: SubAgentEngine) -> None:
        self.engine = engine

    def run(self, subtasks: Sequence[SubTask], stats: dict[str, float] | None = None) -> list[SubResult]:
        return self.engine.run(subtasks, stats)


def run_group(
    queries: Sequence[Query],
    planner: AgentRuntime,
    cfg: RolloutConfig,
    *,
    sub_agent: SubAgentClient | None = None,
    toolbox: Toolbox | None = None,
    reasoner: Any = None,
    seed: int = 0,
    step: int = 0,
) -> GroupResult:
    """Run K rollouts of every query, batched per model at every turn.

    With ``sub_agent`` the episodes are planner episodes (tool ``delegate``; with ``reasoner``, an object
    with ``ask(question) -> observation`` such as :class:`harness.tools.reasoner.ReasonerClient`, also the
    untrained ``reasoner`` tool, prompt ``planner_reasoner``); without it, they are single-agent episodes
    that call ``search``/``visit`` through ``toolbox`` themselves.
    """
    multi = sub_agent is not None
    if not multi and toolbox is None:
        raise ValueError("run_group needs a sub_agent (planner episodes) or a toolbox (single-agent episodes)")
    if reasoner is not None and not multi:
        raise ValueError("the reasoner tool is the planner's: run_group needs a sub_agent with it")
    agent = ("planner_reasoner" if reasoner is not None else "planner") if multi else "single_agent"
    stats: dict[str, float] = {}
    t_start = time.perf_counter()
    active = [
        _start(agent, planner, q.question, "", cfg.planner_turns, query_id=q.query_id, rollout=k, call=None)
        for q in queries
        for k in range(cfg.k)
    ]
    subs: dict[int, list[SubResult]] = {i: [] for i in range(len(active))}
    pool = ThreadPoolExecutor(max_workers=cfg.tool_workers, thread_name_prefix="tools") if not multi else None
    try:
        turn = 0
        while not all(ep.done for ep in active):
            generate_turns(active, cfg, _step_seed(seed, "planner", step, turn), stats)
            if multi:
                if reasoner is not None:
                    _reason(active, reasoner, stats)
                _delegate(active, sub_agent, cfg, subs, stats)
            else:
                run_tools(active, toolbox, pool, stats)  # type: ignore[arg-type]
            turn += 1
    finally:
        if pool is not None:
            pool.shutdown(wait=False)
    episodes = [Episode(ep.traj, subs[i]) for i, ep in enumerate(active)]
    sub_trajs = [r.trajectory for e in episodes for r in e.sub_results if r.trajectory is not None]
    stats["rollout_s"] = time.perf_counter() - t_start
    return GroupResult(episodes, sub_trajs, stats)


def _reason(active: Sequence[_Active], reasoner: Any, stats: dict[str, float]) -> None:
    """Answer every pending ``reasoner`` call of this turn (requests in parallel; a failed request is an
    ``Error:`` observation, which the client returns instead of raising)."""
    todo = [ep for ep in active if ep.pending is not None and ep.pending.name == "reasoner"]
    if not todo:
        return
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=min(8, len(todo)), thread_name_prefix="reasoner") as pool:
        answers = list(pool.map(lambda ep: reasoner.ask(str(ep.pending.arguments.get("question", ""))), todo))
    for ep, answer in zip(todo, answers, strict=True):
        ep.pending = None
        ep.observe(answer)
    stats["reasoner_s"] = stats.get("reasoner_s", 0.0) + time.perf_counter() - t0
    stats["reasoner_calls"] = stats.get("reasoner_calls", 0.0) + len(todo)


def _delegate(active: Sequence[_Active], client: SubAgentClient, cfg: RolloutConfig,
              subs: dict[int, list[SubResult]], stats: dict[str, float]) -> None:
    """Send every pending ``delegate`` call of this turn to the sub-agent as one batch."""
    batch: list[tuple[int, SubTask]] = []
    for i, ep in enumerate(active):
        call = ep.pending
        if call is None:
            continue
        if ep.delegations >= cfg.max_delegations:
            ep.pending = None
            ep.observe(render_error(f"delegation limit of {cfg.max_delegations} reached; give your final answer"))
            continue
        batch.append((i, SubTask(ep.traj.query_id, ep.traj.rollout, ep.delegations,
                                 call.arguments.get("task", ""), call.arguments.get("context", ""),
                                 temperature=cfg.temperature)))
        ep.delegations += 1
    if not batch:
        return
    t0 = time.perf_counter()
    try:
        results = client.run([s for _, s in batch], stats)
    finally:
        stats["delegate_s"] = stats.get("delegate_s", 0.0) + time.perf_counter() - t0
    for (i, _), res in zip(batch, results, strict=True):
        ep = active[i]
        ep.pending = None
        subs[i].append(res)
        ep.observe(res.result)
