"""The sub role of a decoupled M-GRPO run (docs/paper.md, docs/training.md): ``python -m harness.role --role sub``.

It serves :class:`harness.subagent_service.SubAgentServer` (its engine uses the sub-agent model and the
toolbox on the world server) and publishes the service URL in the store. For a trainer whose sub-agent
trains (``mgrpo``) it also runs a :class:`SubRoleTrainer` (an :class:`mgrpo.trainer.MGRPOTrainer` with
``num_generations = d*K``) whose ``rollout_func`` (:class:`SubRollout`) takes the next complete query group
from the store, joins it with the sub-trajectories kept in the server's buffer (by
``(query_id, rollout, call)``), aligns them with :func:`mgrpo.alignment.align` (seeded by run seed and query
id), scores ``R_S = sub_reward(format_ok, r_correct, r_expert)`` with ``r_expert`` from
:func:`harness.world.judge.expert_judge` on the matched gold subtask of the prepared task set (or, with
``rewards.sub_expert_reference: delegated``, on the subtask as delegated, :class:`DelegatedGold`), and returns the
d*K completions. From the end of that rollout until the optimizer step is done and logged it holds
``server.lock`` (:class:`StepLock`), so no sub-agent episode runs on weights that are being updated; after each step it bumps
the policy version (engine and store). With ``sub.serve: snapshot`` the service generates with its own copy of the
weights instead (:func:`serving_model`): the lock is taken only to copy the new weights in and bump the version. ``alignment.mode: none`` (paper Fig. 8) groups sub-trajectories FIFO in
chunks of d*K regardless of query (:class:`mgrpo.alignment.FifoChunker`).

Start-up is forward only (:func:`run_sub`): the prepared task set (read by the caller when the sub-agent
trains) -> the checkpoint to resume from -> the model -> the toolbox -> the service -> the trainer -> serving.

Resume (docs/training.md): the sub role acknowledges a group only after a checkpoint covers it and records the
covered store position in the checkpoint (``mgrpo_store.json``, :meth:`SubRollout.checkpoint_saved`); it
spools every sub-agent trajectory to ``<run>/sub/trajectories.jsonl`` before answering the planner, so a
restarted sub role trains on redelivered groups.

Decisions where the paper is silent:
- A query whose rollouts made no sub-agent call yields no sub-agent group (docs/paper.md): the sub role
  acknowledges it and counts it (``extra.empty_groups``). When the planner has finished and no complete group
  is left, the sub role stops early, saves a full checkpoint and says so.
- A ``d_k = 0`` slot filled with another rollout's sub-trajectory takes that trajectory's own reward (its
  rollout's ``r_correct``): the reward belongs to the trajectory.
"""

from __future__ import annotations

import copy
import json
import signal
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from baselines import get_trainer
from harness.config import ConfigError
from harness.records import append_jsonl, iter_jsonl, write_json_atomic
from harness.role.checkpoints import STORE_POSITION_FILE, checkpoint_step, last_checkpoint, resume_records
from harness.role.common import (
    EVAL_PREFIX,
    PLANNER_DONE,
    SUB_URL,
    StepStats,
    append_completion,
    args_then_model,
    build_toolbox,
    check_generation_backend,
    make_backend,
    make_step_recorder,
    mean_of,
    mgrpo_args,
    process_rank,
    trainer_callback_base,
    wait_reachable,
)
from harness.role.tasks import RunTasks
from harness.rollout import AgentRuntime, SubAgentEngine, Trajectory
from harness.subagent_service import SubAgentServer
from harness.train_config import TrainConfig, resolve_advantage_fn
from harness.world.expert import delegated_subtask_gold
from harness.world.generator import generate_world
from harness.world.judge import expert_judge, match_subtask
from harness.world.toolbox import WorldToolbox
from mgrpo.alignment import FifoChunker, align, alignment_stats, query_seed
from mgrpo.rewards import sub_reward
from mgrpo.store import StoreTimeout
from mgrpo.trainer import MGRPOTrainer


class PlannerFinished(Exception):
    """The planner has finished and no complete query group is left for the sub role."""


def subtask_text(traj: Any) -> str:
    """The delegated task text of a sub-agent trajectory (its user message without the context)."""
    user = next((m["content"] for m in traj.messages if m.get("role") == "user"), "")
    text = user.split("\nContext:", 1)[0]
    return text[len("Task: "):] if text.startswith("Task: ") else text


def r_expert(task: dict[str, Any] | None, traj: Any,
             reference: Callable[[str], dict[str, Any] | None] | None = None) -> float:
    """The expert judge's score of a sub-agent result (docs/paper.md, Rewards): against the subtask as it was
    delegated when ``reference`` gives that subtask's gold (``rewards.sub_expert_reference: delegated``,
    :class:`DelegatedGold`), else against the gold subtask of the task's gold path that the text matches best."""
    if task is None or traj.final is None:
        return 0.0
    text = subtask_text(traj)
    if reference is not None and (own := reference(text)) is not None:
        return float(expert_judge(own, traj.final))
    gold = task.get("gold", {}).get("subtasks") or []
    i = match_subtask(gold, text)
    return 0.0 if i is None else float(expert_judge(gold[i], traj.final))


class DelegatedGold:
    """``rewards.sub_expert_reference: delegated``: the gold of each delegated subtask text, solved once by the
    noise-free scripted sub-agent (:func:`harness.world.expert.delegated_subtask_gold`) over the run's offline world
    in process (no HTTP), at the address the agents see (``world.address``, else the world server's URL), and
    cached by text: a group's K rollouts mostly delegate the same few texts."""

    def __init__(self, cfg: TrainConfig, world_url: str) -> None:
        world = generate_world(seed=cfg.world.seed, size=cfg.world.size)
        self.toolbox = WorldToolbox(world, base_url=(cfg.world.address or world_url).rstrip("/"))
        self.cache: dict[str, dict[str, Any] | None] = {}

    def __call__(self, text: str) -> dict[str, Any] | None:
        if text not in self.cache:
            self.cache[text] = delegated_subtask_gold(text, self.toolbox)
            self.toolbox.calls.clear()  # the toolbox logs every call; the judge needs none of them
        return self.cache[text]


class StepLock:
    """``server.lock`` held from the end of the sub role's rollout until its optimizer step is done and logged
    (``sub.serve: locked``); with ``across_steps=False`` (``sub.serve: snapshot``, the service answers from its
    own copy of the weights) it is never held across a step, only while :func:`publish_policy_version` copies
    the new weights in."""

    def __init__(self, lock: threading.Lock, across_steps: bool = True) -> None:
        self.lock = lock
        self.across_steps = across_steps
        self.held = False
        self.wait_s = 0.0

    def hold(self) -> None:
        if self.across_steps and not self.held:
            t0 = time.perf_counter()
            self.lock.acquire()
            self.wait_s = time.perf_counter() - t0
            self.held = True

    def release(self) -> None:
        if self.held:
            self.held = False
            self.lock.release()


class SubRollout:
    """``rollout_func`` of the sub role: store groups + buffered sub-trajectories -> d*K aligned items."""

    def __init__(self, cfg: TrainConfig, tasks: dict[str, dict[str, Any]], store: Any, server: Any,
                 step_lock: StepLock, stats: StepStats, spool: Path | None = None,
                 resume_position: int | None = None,
                 reference: Callable[[str], dict[str, Any] | None] | None = None) -> None:
        self.cfg, self.tasks, self.store, self.server = cfg, tasks, store, server
        self.reference = reference  # r_expert's delegated-subtask gold (rewards.sub_expert_reference), or None
        self.step_lock, self.stats = step_lock, stats
        self.buffer: dict[tuple[str, int, int], Any] = {}
        self.to_ack: list[tuple[str, int]] = []  # (query_id, position) trained on, acked once checkpointed
        self.current: list[str] = []  # query ids taken for the step being filled (its record's extra.groups)
        self.spool = spool
        self.resume_position = resume_position
        self.skipped_redelivered = 0
        if spool is not None and spool.is_file():
            self._load_spool(spool)
        self.empty_groups = 0
        self.missing = 0
        self.chunker: Any = FifoChunker(cfg.sub_group_size)
        self.ready: list[list[Any]] = []
        self.dup = self.drop = 0

    def drain(self) -> None:
        for t in self.server.take_trajectories():
            if not t.query_id.startswith(EVAL_PREFIX):
                self.buffer[(t.query_id, t.rollout, t.call or 0)] = t

    def _load_spool(self, spool: Path) -> None:
        for _, row in iter_jsonl(spool, tolerate_truncated_tail=True):
            t = Trajectory(**row)
            self.buffer[(t.query_id, t.rollout, t.call or 0)] = t

    def covered(self, group: Any) -> bool:
        """A redelivered group the resumed checkpoint already trained on (killed between checkpoint and ack)."""
        return (group.redelivered and self.resume_position is not None and group.position is not None
                and group.position <= self.resume_position)

    def take(self) -> Any:
        """The next group to train on; redelivered groups the last checkpoint covers are acked and skipped."""
        while True:
            group = self.next_group()
            if self.covered(group):
                self.store.ack_group(group.query_id)  # trained on before the kill, checkpointed, not acked
                self.skipped_redelivered += 1
                continue
            return group

    def settle_covered(self) -> int:
        """For a resumed role with no step left: ack the redelivered groups its checkpoint covers; the count.

        Redeliveries come before any new group, so taking as many groups as are pending takes only those."""
        n = 0
        for _ in range(len(self.store.pending_groups())):
            try:
                group = self.store.take_next_group(timeout=0.0)
            except StoreTimeout:
                break
            if self.covered(group):
                self.store.ack_group(group.query_id)
                n += 1
        return n

    def ack_checkpointed(self) -> int | None:
        """Ack the groups trained on so far (call right after a checkpoint); returns the largest position."""
        top = max((p for _, p in self.to_ack), default=None)
        for qid, _ in self.to_ack:
            self.store.ack_group(qid)
        self.to_ack.clear()
        return top

    def checkpoint_saved(self, ckpt: Path) -> None:
        """After checkpoint ``ckpt`` is written: the store position it covers, then the acks (store recipe:
        *done* implies *checkpointed*).

        The position first (atomically; it completes the checkpoint, see :func:`last_checkpoint`), then the
        acks: a kill in between leaves groups the checkpoint covers unacknowledged, and those are skipped on
        resume (:meth:`covered`)."""
        top = max((p for _, p in self.to_ack), default=-1)
        if ckpt.is_dir():
            prev = self.resume_position if self.resume_position is not None else -1
            write_json_atomic(ckpt / STORE_POSITION_FILE, {"max_position": max(prev, top)})
            self.resume_position = max(prev, top)
        self.ack_checkpointed()

    def next_group(self) -> Any:
        """The next complete group; :class:`PlannerFinished` when the planner is done and none is left."""
        deadline = time.monotonic() + self.cfg.store.group_timeout_s
        while True:
            try:
                return self.store.take_next_group(timeout=min(2.0, max(0.0, deadline - time.monotonic())))
            except StoreTimeout as exc:
                if self.store.get_stat(PLANNER_DONE) is not None:
                    try:
                        return self.store.take_next_group(timeout=0.0)
                    except StoreTimeout:
                        raise PlannerFinished() from None
                if time.monotonic() >= deadline:
                    raise StoreTimeout(f"sub role waited store.group_timeout_s={self.cfg.store.group_timeout_s:.0f}s "
                                       f"for a complete query group: {exc}") from None

    def items_of(self, group: Any) -> dict[tuple[int, int], tuple[Any, float, dict[str, float]]]:
        """Every sub-trajectory of a group with its R_S and reward parts, keyed by (rollout, call)."""
        w = self.cfg.rewards
        out = {}
        for rec in group.rollouts:
            task = self.tasks.get(str(rec.extra.get("task_id")))
            for call in range(int(rec.n_sub_calls or 0)):
                traj = self.buffer.pop((group.query_id, rec.rollout, call), None)
                if traj is None:
                    self.missing += 1  # e.g. the sub role restarted after the call: the trajectory is gone
                    continue
                expert = r_expert(task, traj, self.reference)
                reward = sub_reward(bool(traj.format_ok), rec.r_correct, expert, w_format=w.sub_format,
                                    w_main=w.sub_correct, w_expert=w.sub_expert)
                out[(rec.rollout, call)] = (traj, reward, {"format": float(traj.format_ok),
                                                           "correct": rec.r_correct, "expert": expert})
        return out

    def aligned(self, group: Any, items: dict[tuple[int, int], Any]) -> list[Any] | None:
        counts = [0] * group.k
        # Re-index the calls present (missing trajectories shrink d_k) so align() sees 0..d_k-1.
        present: dict[int, list[tuple[int, int]]] = {}
        for (r, c) in sorted(items):
            present.setdefault(r, []).append((r, c))
        for r, pairs in present.items():
            counts[r] = len(pairs)
        if sum(counts) == 0:
            return None
        slots = align(counts, self.cfg.alignment.d, query_seed(self.cfg.seed, group.query_id))
        st = alignment_stats(counts, self.cfg.alignment.d)
        self.dup += st["align_duplicated"]
        self.drop += st["align_dropped"]
        return [items[present[r][c]] for row in slots for (r, c) in row]

    def __call__(self, prompts: list[str], trainer: Any) -> dict[str, Any]:
        """This rank's d*K items for each of its ``len(prompts) / (d*K)`` slots. With several processes rank 0 takes
        the whole step's groups (every rank's share) and hands each rank its whole groups (:func:`share_from_rank0`);
        a failure or the planner's end is handed on too, so no rank waits for a batch that never comes."""
        n_groups = len(prompts) // self.cfg.sub_group_size
        n_proc = int(trainer.accelerator.num_processes)
        if n_proc == 1:
            return self.batch(n_groups, trainer)[0]
        try:
            shares = [("batch", b) for b in self.batch(n_groups * n_proc, trainer, parts=n_proc)]
        except PlannerFinished:
            share_from_rank0([("finished", None)] * n_proc)
            raise
        except BaseException as exc:
            share_from_rank0([("error", f"{type(exc).__name__}: {exc}")] * n_proc)
            raise
        return share_from_rank0(shares)[1]

    def batch(self, n_groups: int, trainer: Any, parts: int = 1) -> list[dict[str, Any]]:
        """The step's ``n_groups`` groups from the store, aligned and scored, as ``parts`` trainer batches of
        ``n_groups / parts`` whole groups each (one per rank); the step's statistics cover all of them."""
        g = self.cfg.sub_group_size
        t0 = time.perf_counter()
        wait = 0.0
        self.dup = self.drop = 0
        self.current = []
        chosen: list[Any] = []
        if self.cfg.alignment.mode == "none":
            # Ablation: FIFO chunks of d*K in arrival order regardless of query; surplus chunks wait.
            while len(self.ready) < n_groups:
                tw = time.perf_counter()
                group = self.take()
                wait += time.perf_counter() - tw
                self.drain()
                self.to_ack.append((group.query_id, int(group.position or 0)))
                self.current.append(group.query_id)
                items = self.items_of(group)
                self.chunker.push([items[key] for key in sorted(items)])
                self.ready.extend(self.chunker.pop_ready())
            for chunk in self.ready[:n_groups]:
                chosen.extend(chunk)
            del self.ready[:n_groups]
        while len(chosen) < n_groups * g:
            tw = time.perf_counter()
            group = self.take()
            wait += time.perf_counter() - tw
            self.drain()
            aligned = self.aligned(group, self.items_of(group))
            if aligned is None:
                self.empty_groups += 1  # no rollout of the query called the sub-agent (docs/paper.md)
                self.store.ack_group(group.query_id)  # nothing to train on: done now
                continue
            self.to_ack.append((group.query_id, int(group.position or 0)))
            self.current.append(group.query_id)
            chosen.extend(aligned)
        self.step_lock.hold()  # from here until the optimizer step ends, no sub-agent episode runs

        outs: list[dict[str, Any]] = []
        components: dict[str, list[float]] = {"format": [], "correct": [], "expert": []}
        # Staleness: the weights now are policy version `version` (the steps trained); a sub-trajectory
        # generated by an older version waited in the queue. Past sub.max_staleness it leaves the loss.
        version = int(trainer.state.global_step)
        lags = [max(0, version - int(t.policy_version)) for t, _, _ in chosen]
        bound = self.cfg.sub.max_staleness
        per_part = len(chosen) // parts  # whole groups: n_groups is a multiple of parts (validated)
        for i, ((traj, reward, comp), lag) in enumerate(zip(chosen, lags)):
            if i % per_part == 0:
                outs.append({"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [],
                             "reward": [], "query_id": [], "rollout": [], "call": [], "loss_weight": []})
            out = outs[-1]
            append_completion(out, traj, reward)
            out["call"].append(int(traj.call or 0))
            out["loss_weight"].append(0.0 if bound is not None and lag > bound else 1.0)
            for key in components:
                components[key].append(comp[key])
        s = self.stats
        s.rollout_s = time.perf_counter() - t0
        s.wait_s = wait + self.step_lock.wait_s
        s.rollout_end = time.perf_counter()
        s.n_trajectories = len(chosen)
        s.n_model_tokens = sum(t.n_model_tokens for t, _, _ in chosen)
        s.components = {k: mean_of(v) or 0.0 for k, v in components.items()}
        counts = staleness_counts(lags, bound, self.cfg.sub.old_logprobs)
        s.fields = ({"align_duplicated": self.dup, "align_dropped": self.drop}
                    if self.cfg.alignment.mode == "query" else {})
        s.fields.update(stale_trajectories=counts.pop("stale_trajectories"), dropped_stale=counts.pop("dropped_stale"))
        busy = self.server.take_busy()
        s.phases = {"wait_s": s.wait_s, "service_generate_s": busy.get("generate_s", 0.0),
                    "service_tool_s": busy.get("tool_s", 0.0)}
        s.extra = {"empty_groups": self.empty_groups, "missing_trajectories": self.missing,
                   "alignment": self.cfg.alignment.mode, "groups": list(self.current),
                   "sub_policy_versions": sorted({int(t.policy_version) for t, _, _ in chosen}), **counts}
        trainer.model.train()
        return outs


class RankShare:
    """``rollout_func`` of the sub role's ranks > 0: their whole groups of the step, which rank 0 took from the store,
    aligned and scored (:meth:`SubRollout.__call__`). Rank 0 alone talks to the store, serves and acknowledges."""

    def __init__(self) -> None:
        self.empty_groups = 0
        self.current: list[str] = []

    def __call__(self, prompts: list[str], trainer: Any) -> dict[str, Any]:
        kind, payload = share_from_rank0(None)
        if kind == "finished":
            raise PlannerFinished()
        if kind == "error":
            raise RuntimeError(f"sub role rank 0 failed while taking the step's groups: {payload}")
        trainer.model.train()
        return payload

    def checkpoint_saved(self, ckpt: Path) -> None:
        """Rank 0 records the store position and acknowledges."""

    def settle_covered(self) -> int:
        return 0


def share_from_rank0(items: list[Any] | None) -> Any:
    """Rank 0 hands ``items[r]`` to rank ``r`` (every rank calls this; the others pass None) and gets ``items[0]``.

    Waits as long as the process group's timeout allows (TRL's ``ddp_timeout``, 1,800 s by default; set it with
    ``sub.trl``), so a rank > 0 can wait for rank 0 to collect a step's groups from the planner."""
    import torch.distributed as dist

    out: list[Any] = [None]
    dist.scatter_object_list(out, items, src=0)
    return out[0]


def staleness_counts(lags: list[int], max_staleness: int | None, old_logprobs: str) -> dict[str, int]:
    """Step-record counts of a sub-role batch whose trajectories lag ``lags`` policy versions behind the
    weights that train them: ``stale_trajectories`` (lag > 0), ``dropped_stale`` (lag > ``max_staleness``:
    out of the loss), ``corrected`` (stale, trained, with the behaviour policy as the old one, so the
    importance ratio corrects them) and ``max_policy_lag``."""
    stale = [lag for lag in lags if lag > 0]
    dropped = [lag for lag in stale if max_staleness is not None and lag > max_staleness]
    corrected = len(stale) - len(dropped) if old_logprobs == "behaviour" else 0
    return {"stale_trajectories": len(stale), "dropped_stale": len(dropped), "corrected": corrected,
            "max_policy_lag": max(lags, default=0)}


def spool_engine_results(engine: Any, spool: Path) -> None:
    """Append every sub-agent trajectory to ``spool`` before the service answers the planner.

    So a group the planner completed always has its trajectories on the sub role's disk (docs/training.md:
    the service "keeps the token trajectory locally (run dir)"), and a restarted sub role can train on
    a redelivered group.
    """
    run = engine.run

    def run_and_spool(subtasks: Any, stats: Any = None) -> Any:
        results = run(subtasks, stats)
        for r in results:
            if r.trajectory is not None and not r.trajectory.query_id.startswith(EVAL_PREFIX):
                append_jsonl(spool, asdict(r.trajectory))
        return results

    engine.run = run_and_spool


# ------------------------------------------------------------------------------ the trainer
class SubRoleTrainer(MGRPOTrainer):
    """The sub role's :class:`MGRPOTrainer`: d*K groups from the store (``group_source``, its ``rollout_func``)
    and the service lock held across each optimizer step (``step_lock``), as explicit attributes."""

    def __init__(self, model: Any, *, group_source: SubRollout, step_lock: StepLock, **kwargs: Any) -> None:
        super().__init__(model, rollout_func=group_source, **kwargs)
        self.group_source = group_source
        self.step_lock = step_lock

    def train_until_planner_done(self, resume_from_checkpoint: str | None = None) -> int:
        """Train to ``max_steps``, or stop early with a full checkpoint once the planner has finished and no
        complete query group is left; returns the optimizer steps done."""
        try:
            self.train(resume_from_checkpoint=resume_from_checkpoint)
        except PlannerFinished:
            step = int(self.state.global_step)
            # every rank decides on the same files: none writes the checkpoint before all have looked
            self.accelerator.wait_for_everyone()
            src = self.group_source
            print(f"[sub] the planner finished and no complete query group is left: stopping after {step} of "
                  f"{self.args.max_steps} steps ({src.empty_groups} groups had no sub-agent call"
                  + (f"; {len(src.current)} taken groups, fewer than a step needs, not trained: {src.current}"
                     if src.current else "") + ")", flush=True)
            self.step_lock.release()
            target = Path(self.args.output_dir) / f"checkpoint-{step}"
            if step > 0 and not target.is_dir():
                self.save_checkpoint_now()
            src.checkpoint_saved(target)
        finally:
            self.step_lock.release()
        return int(self.state.global_step)

    def save_checkpoint_now(self) -> None:
        """A full checkpoint of the current step (model, optimizer, scheduler, RNG, trainer state), as the
        training loop saves one, outside the loop.

        The one call of a private TRL/transformers method in the harness (transformers 5.17, TRL 1.16): the
        public way, ``control.should_save`` set by a callback, is only read by the loop after an optimizer step,
        and the early stop is discovered inside the rollout of a step that never happens (doing it would count
        a step and move the LR schedule). ``save_model`` saves the weights only."""
        self._save_checkpoint(self.model, trial=None)


def sub_args(cfg: TrainConfig, out_dir: Path) -> Any:
    """The sub role's ``MGRPOConfig`` (num_generations = d*K). Created before the model is loaded: it joins the
    process group and sets up accelerate's sharding plugin, so a sharded launch loads the model sharded."""
    return mgrpo_args(cfg, "sub", out_dir, cfg.sub_group_size, cfg.sub_groups, cfg.sub_max_steps)


def build_sub_trainer(cfg: TrainConfig, run_dir: Path, store: Any, server: Any, model: Any, tok: Any,
                      tasks: dict[str, dict[str, Any]], out_dir: Path, stats: StepStats,
                      resume_from: str | None = None, args: Any = None,
                      reference: Callable[[str], dict[str, Any] | None] | None = None) -> SubRoleTrainer:
    """The sub role's trainer (d*K groups from the store; ``tasks`` by id for the expert judge);
    ``resume_from`` = a checkpoint dir. Installs the trajectory spool on ``server.engine``.

    ``server`` None: a rank > 0 of a multi-process sub role, which trains on the groups rank 0 hands it
    (:class:`RankShare`) and neither serves nor touches the store's groups."""
    from datasets import Dataset

    snapshot = cfg.sub.serve == "snapshot"
    step_lock = StepLock(threading.Lock() if server is None else server.lock, across_steps=not snapshot)
    rollout: Any
    if server is None:
        rollout = RankShare()
    else:
        position = None
        if resume_from is not None and (Path(resume_from) / STORE_POSITION_FILE).is_file():
            position = json.loads((Path(resume_from) / STORE_POSITION_FILE).read_text())["max_position"]
        spool = run_dir / "sub" / "trajectories.jsonl"
        rollout = SubRollout(cfg, tasks, store, server, step_lock, stats, spool=spool, resume_position=position,
                             reference=reference)
        spool_engine_results(server.engine, spool)

    built: dict[str, Any] = {}  # the trainer, once built (the step callback pushes its weights)

    def on_step(step: int) -> None:
        if server is None:  # rank > 0: takes part in a vLLM weight push (collective under ZeRO-3), nothing else
            publish_policy_version(built["trainer"], None, None, step)
            return
        if snapshot:  # the new weights into the service's copy, between two of its batches
            with server.lock:
                refresh_serving_weights(built["trainer"].model, server.engine.runtime.backend.model)
                publish_policy_version(built["trainer"], server.engine, store, step)
        else:
            publish_policy_version(built["trainer"], server.engine, store, step)
        store.heartbeat("sub", {"step": step})

    class ReleaseAfterLog(trainer_callback_base()):  # type: ignore[misc]
        """Ends the step's hold on the service lock once TRL has logged the step (on_log), not at on_step_end.

        TRL's ``log`` files the step's metrics under train or eval by ``model.training``, and a sub-agent episode
        switches the shared model to eval mode while it generates (``HFBackend``): released at on_step_end, a
        request waiting on the lock flipped the mode before TRL logged, and the step lost its record (seen in
        tests/harness/test_resume.py). ``on_step_begin`` releases a step that logged nothing (``logging_steps``
        > 1 via ``sub.trl``), so the service is never held across a rollout that waits for the planner."""

        def on_log(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            step_lock.release()

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            step_lock.release()

    class AckOnSave(trainer_callback_base()):  # type: ignore[misc]
        """Checkpoint first, then ack (store recipe: *done* implies *checkpointed*)."""

        def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            rollout.checkpoint_saved(Path(args.output_dir) / f"checkpoint-{state.global_step}")

    args = sub_args(cfg, out_dir) if args is None else args
    # The dataset only paces TRL's sampler: each "prompt" is a slot the rollout fills with one query group.
    slots = Dataset.from_dict({"prompt": [f"group-slot-{i}" for i in range(cfg.sub_groups)]})
    built["trainer"] = SubRoleTrainer(
        model, group_source=rollout, step_lock=step_lock, args=args, train_dataset=slots, processing_class=tok,
        callbacks=[make_step_recorder("sub", cfg, run_dir, stats, on_step), ReleaseAfterLog(), AckOnSave()],
        advantage_fn=resolve_advantage_fn(cfg.sub.advantage_fn))
    return built["trainer"]


def serving_model(model: Any, cfg: TrainConfig) -> Any:
    """The model the sub-agent service generates with: ``model`` itself (``sub.serve: locked``), or its own copy
    (``snapshot``), so that requests are answered while the trainer updates ``model``."""
    return copy.deepcopy(model).eval() if cfg.sub.serve == "snapshot" else model


def refresh_serving_weights(trained: Any, serving: Any) -> None:
    """Copy the trainer's weights into the service's copy (``sub.serve: snapshot``), in place: the backend's
    prefix cache sees the parameters' version counters move and drops what the old weights computed."""
    import torch

    with torch.no_grad():
        for dst, src in zip(serving.parameters(), trained.parameters(), strict=True):
            dst.copy_(src)


def publish_policy_version(trainer: Any, engine: Any, store: Any, step: int) -> None:
    """After optimizer step ``step``: the service's episodes are labelled policy version ``step`` from now on.

    With vLLM (``sub.vllm_url``) the service generates with the server's weights, which TRL would push only
    at the trainer's next ``_generate`` (when it takes the next groups). The new weights are pushed here
    first (TRL's ``sync_weights``), then the version is published, so no request is served under the new
    version with the old weights. The step lock is still held at this point (released at ``on_log``): no
    sub-agent episode runs in between."""
    if getattr(trainer, "use_vllm", False) and getattr(trainer, "_last_loaded_step", None) != step:
        trainer.vllm_generation.sync_weights()
        trainer._last_loaded_step = step  # TRL's own marker: its next _generate does not push them again
    if engine is None:  # a rank > 0 of a multi-process sub role: no service, no store writes
        return
    engine.runtime.policy_version = step
    store.set_policy_version("sub", step)


# ------------------------------------------------------------------------------ the role
def run_sub(cfg: TrainConfig, run_tasks: RunTasks | None, run_dir: Path, store: Any, world_url: str,
            resume: bool) -> int:
    """The sub role; ``run_tasks`` (the prepared task set) is needed when the sub-agent trains."""
    spec = get_trainer(str(cfg.trainer))
    if not spec.has_sub:
        raise ConfigError(f"trainer {cfg.trainer!r} has no sub role (roles: {spec.roles})")
    if spec.sub_trains and run_tasks is None:
        raise ConfigError(f"trainer {cfg.trainer!r} trains the sub-agent: its role needs the run's task set")
    out_dir = run_dir / "sub" / "checkpoints"
    # A sub checkpoint is complete with its store position too (written after TRL's files, before the acks).
    ckpt = last_checkpoint(out_dir, (STORE_POSITION_FILE,)) if resume and spec.sub_trains else None
    done = checkpoint_step(ckpt) if ckpt else 0
    check_generation_backend(cfg, "sub")
    if process_rank() > 0:
        return run_sub_rank(cfg, run_dir, store, ckpt, done)
    wait_reachable(world_url.rstrip("/") + "/", "the world server", cfg.store.retry_s)  # before a model loads
    # On resume the service must answer with the checkpoint's weights from its first request on.
    args, model, tok = args_then_model(lambda: sub_args(cfg, out_dir) if spec.sub_trains else None,
                                       ckpt or cfg.models.sub, "sub_agent", cfg)
    toolbox = build_toolbox(cfg, world_url)
    trainer: SubRoleTrainer | None = None
    stats = StepStats()
    serving = serving_model(model, cfg) if spec.sub_trains else model
    engine = SubAgentEngine(AgentRuntime(make_backend(serving, tok, cfg.sub.vllm_url), tok), toolbox,
                            cfg.rollout, seed=cfg.seed + 7)
    engine.runtime.policy_version = done
    server = SubAgentServer(engine, host=cfg.service.host, port=cfg.service.port)
    url = cfg.service.public_url or server.url
    if not spec.sub_trains:  # frozen: its weights are the checkpoint at every step (for evaluation)
        frozen = out_dir / "checkpoint-0"
        if not frozen.is_dir():
            model.save_pretrained(frozen)
            tok.save_pretrained(frozen)
    if spec.sub_trains:  # built before the service answers, so every trajectory is spooled
        if resume:  # also with no checkpoint (done = 0): every step record is redone
            resume_records(run_dir, "sub", done, out_dir, (STORE_POSITION_FILE,))
        reference = DelegatedGold(cfg, world_url) if cfg.rewards.sub_expert_reference == "delegated" else None
        trainer = build_sub_trainer(cfg, run_dir, store, server, model, tok, run_tasks.by_id(), out_dir, stats,
                                    resume_from=ckpt, args=args, reference=reference)
    finished = spec.sub_trains and done >= cfg.sub_max_steps
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set() if trainer is None else _raise_sigterm())
    with server:
        store.put_stat(SUB_URL, url)
        print(f"[sub] serving sub-agent at {url} (trains: {spec.sub_trains})", flush=True)
        try:
            version = done
            if finished:
                # TRL would train one step more: its loop only checks max_steps after a step
                settled = trainer.group_source.settle_covered()
                print(f"[sub] already finished: {Path(ckpt).name} is step {done} of {cfg.sub_max_steps}"
                      + (f" ({settled} redelivered groups it covers acknowledged)" if settled else ""), flush=True)
            elif trainer is not None:
                version = trainer.train_until_planner_done(resume_from_checkpoint=ckpt)
                print(f"[sub] finished after {version} steps", flush=True)
            # The planner can still call the service after the sub-agent's last step: its final evaluation,
            # and its last step's episodes when the sub role trains faster. Serve until it says it is done.
            while not stop.wait(0.5):
                store.heartbeat("sub", {"policy_version": version})
                if store.get_stat(PLANNER_DONE) is not None:
                    break
            print("[sub] planner finished; service stopped", flush=True)
        finally:
            toolbox.close()
    return 0


def run_sub_rank(cfg: TrainConfig, run_dir: Path, store: Any, ckpt: str | None, done: int) -> int:
    """A rank > 0 of a multi-process sub role (``sub.num_processes`` > 1, docs/training.md): the same model and
    trainer, fed by rank 0 (:class:`RankShare`); rank 0 alone serves the sub-agent, reads and acknowledges the
    store's groups and writes the records. It stays until the planner has finished, as rank 0 does."""
    out_dir = run_dir / "sub" / "checkpoints"
    args, model, tok = args_then_model(lambda: sub_args(cfg, out_dir), ckpt or cfg.models.sub, "sub_agent", cfg)
    trainer = build_sub_trainer(cfg, run_dir, store, None, model, tok, {}, out_dir, StepStats(), resume_from=ckpt,
                                args=args)
    signal.signal(signal.SIGTERM, lambda *_: _raise_sigterm())
    if done < cfg.sub_max_steps:
        trainer.train_until_planner_done(resume_from_checkpoint=ckpt)
    while store.get_stat(PLANNER_DONE) is None:
        time.sleep(0.5)
    return 0


def _raise_sigterm() -> None:
    raise KeyboardInterrupt("SIGTERM")
