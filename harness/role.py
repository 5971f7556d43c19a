"""One role of a decoupled M-GRPO run as its own process: ``python -m harness.role --role planner|sub`` (DESIGN §3, §4).

The **planner role** holds the planner (or the single agent) and an :class:`mgrpo.trainer.MGRPOTrainer`
with ``num_generations = K``. Its ``rollout_func`` receives the step's questions (task ids, each
already repeated K times side by side by TRL), runs :func:`harness.rollout.run_group` on them
(delegating over HTTP to the sub role, or with the ``search``/``visit`` toolbox for
``single_agent``), scores ``R_M = main_reward(format_ok, correct)`` against the task's gold answer,
writes one rollout record per (query, rollout) plus one sub-call record per delegation to the
shared store, and returns the token trajectories with a ``reward`` column.

The **sub role** serves :class:`harness.subagent_service.SubAgentServer` (its engine uses the
sub-agent model and the toolbox on the world server). For a trainer whose sub-agent trains
(``mgrpo``) it also runs an ``MGRPOTrainer`` with ``num_generations = d*K`` whose ``rollout_func``
takes the next complete query group from the store, joins it with the sub-trajectories kept in the
server's buffer (by ``(query_id, rollout, call)``), aligns them with :func:`mgrpo.alignment.align`
(seeded by run seed and query id), scores ``R_S = sub_reward(format_ok, r_correct, r_expert)`` with
``r_expert`` from :func:`harness.world.judge.expert_judge` on the matched gold subtask, and returns
the d*K completions. From the end of that rollout until the optimizer step is done it holds
``server.lock``, so no sub-agent episode runs on weights that are being updated; after each step it
bumps the policy version (engine and store). ``alignment.mode: none`` (paper Fig. 8) groups
sub-trajectories FIFO in chunks of d*K regardless of query (:class:`mgrpo.alignment.FifoChunker`).

Both roles write one :class:`harness.records.StepRecord` per optimizer step to
``<run>/<role>/metrics.jsonl`` and checkpoints to ``<run>/<role>/checkpoints/checkpoint-<step>/``.
Resume (DESIGN §4): the sub role acknowledges a group only after a checkpoint covers it and records
the covered store position in the checkpoint (``mgrpo_store.json``); it spools every sub-agent
trajectory to ``<run>/sub/trajectories.jsonl`` before answering the planner, so a restarted sub role
trains on redelivered groups. On resume each role starts from its last *complete* checkpoint
(:func:`last_checkpoint`; a half-written one is deleted), or from step 0 when there is none, and drops
its step records after that step; the planner also drops the evaluation records after it and redoes
that step's evaluation when a kill cut it. A role whose checkpoint is already at its max steps trains
no further (resuming a completed run changes no record).

Decisions where DESIGN is silent:
- **Store query ids** are ``<task_id>@<step>.<process>.<i>`` (the task id is also in the record's
  ``extra``): a task seen again in a later step is a new group (the store never re-queues a completed
  group), and a resumed step rewrites the same keys (idempotent).
- A query whose rollouts made no sub-agent call yields no sub-agent group (DESIGN §3): the sub role
  acknowledges it and counts it (``extra.empty_groups``). When the planner has finished and no
  complete group is left, the sub role stops early, saves its model and says so.
- A ``d_k = 0`` slot filled with another rollout's sub-trajectory takes that trajectory's own
  reward (its rollout's ``r_correct``): the reward belongs to the trajectory.
- Periodic evaluation (``eval.every``) runs in the planner role on the test split, greedy, K = 1,
  through the same sub-agent service, and writes task records to ``<run>/eval/<step>/local_<style>.jsonl``.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config import ConfigError, from_dict, load_yaml
from harness.records import StepRecord, TaskRecord, append_step, append_task
from harness.train_config import TrainConfig, resolve_advantage_fn

log = logging.getLogger("harness.role")

#: Store stat the planner role sets when it has finished (the sub role then drains and stops).
PLANNER_DONE = "planner_done"
#: Store stat the sub role sets to publish its service URL.
SUB_URL = "sub_url"
#: Query-id prefix of evaluation episodes (their sub-trajectories are never trained on).
EVAL_PREFIX = "eval/"
_WARM_START_DIRS = {"planner": "planner", "single_agent": "single_agent", "sub_agent": "sub_agent"}


class PlannerFinished(Exception):
    """The planner has finished and no complete query group is left for the sub role."""


# ----------------------------------------------------------------------------------- helpers
def load_model_for(name: str, agent: str, cfg: TrainConfig) -> tuple[Any, Any]:
    """(model, tokenizer) of ``agent`` from a model name/path or a warm-start directory."""
    from harness.models import ModelSpec, load_model

    root = Path(name)
    sub = root / _WARM_START_DIRS[agent]
    if root.is_dir() and sub.is_dir():
        name = str(sub)
    spec = ModelSpec(name=name, seed=cfg.models.init_seed, dtype=cfg.models.dtype, cache_dir=cfg.models.cache_dir)
    return load_model(spec)


def task_key(task: dict[str, Any]) -> str:
    from harness.world.expert import task_id

    return task_id(task)


def load_tasks(cfg: TrainConfig) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """(training tasks by id, evaluation tasks) as the config selects them (deterministic per seed)."""
    from harness.world.generator import generate_world
    from harness.world.tasks import TaskConfig, generate_tasks, select_tasks

    world = generate_world(seed=cfg.world.seed, size=cfg.world.size)
    taskset = generate_tasks(world, TaskConfig(n_train=cfg.tasks.n_train, n_test=cfg.tasks.n_test,
                                               test_fraction=cfg.tasks.test_fraction))
    other = "test" if cfg.tasks.split == "train" else "train"

    def selected(split: str) -> list[dict[str, Any]]:
        tasks = [t for b in cfg.tasks.benchmarks for t in taskset.tasks.get((b, split), [])]
        return select_tasks(tasks, max_hops=cfg.tasks.max_hops, templates=cfg.tasks.templates)

    train = selected(cfg.tasks.split)
    if cfg.tasks.hard_filter_run:
        train = _hard_filter(train, Path(cfg.tasks.hard_filter_run), cfg.tasks.hard_filter_max_success)
    if cfg.tasks.limit is not None:
        train = train[: cfg.tasks.limit]
    if len(train) < cfg.planner_groups:
        raise ConfigError(
            f"only {len(train)} training tasks are left after filtering, fewer than planner.groups_per_step="
            f"{cfg.planner_groups}; raise tasks.n_train or relax tasks.max_hops / tasks.hard_filter_*")
    # the evaluation tasks follow the same selection (the held-out tasks of the trained distribution)
    evals = [t for b in cfg.tasks.benchmarks for t in select_tasks(
        taskset.tasks.get((b, other), []), max_hops=cfg.tasks.max_hops, templates=cfg.tasks.templates)[: cfg.eval.n_tasks]]
    return {task_key(t): t for t in train}, evals


def _hard_filter(tasks: list[dict[str, Any]], run_dir: Path, max_success: float) -> list[dict[str, Any]]:
    """Paper stage 2: keep tasks the stage-1 run solved in at most ``max_success`` of its eval records."""
    from harness.records import RunPaths, read_tasks

    files = RunPaths(run_dir).eval_files()
    if not files:
        raise ConfigError(f"tasks.hard_filter_run={run_dir}: no eval records there (run stage 1 with eval.every > 0)")
    seen: dict[str, list[bool]] = {}
    for _, _, path in files:
        for rec in read_tasks(path, tolerate_truncated_tail=True).records:
            seen.setdefault(str(rec.task_id), []).append(bool(rec.correct))
    keep = []
    for t in tasks:
        results = seen.get(task_key(t))
        if results is None or sum(results) / len(results) <= max_success:
            keep.append(t)
    return keep


def gold_answer(task: dict[str, Any]) -> str:
    return str(task["gold"]["answer"])


def subtask_text(traj: Any) -> str:
    """The delegated task text of a sub-agent trajectory (its user message without the context)."""
    user = next((m["content"] for m in traj.messages if m.get("role") == "user"), "")
    text = user.split("\nContext:", 1)[0]
    return text[len("Task: "):] if text.startswith("Task: ") else text


def r_expert(task: dict[str, Any] | None, traj: Any) -> float:
    """The expert judge's score of a sub-agent result against the matched gold subtask (DESIGN §3)."""
    from harness.world.judge import expert_judge, match_subtask

    if task is None or traj.final is None:
        return 0.0
    gold = task.get("gold", {}).get("subtasks") or []
    i = match_subtask(gold, subtask_text(traj))
    return 0.0 if i is None else float(expert_judge(gold[i], traj.final))


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


@dataclass
class StepStats:
    """What a rollout measured for the step record of the optimizer step that follows it."""

    rollout_s: float = 0.0
    wait_s: float = 0.0
    rollout_end: float = 0.0
    n_trajectories: int = 0
    n_model_tokens: int = 0
    components: dict[str, float] = field(default_factory=dict)
    fields: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


def _trainer_callback_base() -> type:
    from transformers import TrainerCallback

    return TrainerCallback


def make_step_recorder(role: str, cfg: TrainConfig, run_dir: Path, stats: StepStats, on_step: Any = None) -> Any:
    """A TrainerCallback writing one StepRecord per optimizer step (DESIGN §8) from TRL's logs + ``stats``."""
    base = _trainer_callback_base()

    class StepRecorder(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            self.train_s = 0.0
            self.last_step = -1

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.train_s = time.perf_counter() - stats.rollout_end if stats.rollout_end else 0.0
            if on_step is not None:
                on_step(int(state.global_step))

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> None:
            logs = logs or {}
            step = int(state.global_step)
            if not state.is_world_process_zero:
                return  # one record per step, not one per data-parallel process
            if step == self.last_step or "reward" not in logs:
                return  # the end-of-training summary, or a second log of the same step
            self.last_step = step
            rec = StepRecord(
                run_id=run_dir.name, trainer=str(cfg.trainer), role=role, seed=cfg.seed, step=step,
                time=time.time(), reward_mean=logs.get("reward"), reward_std=logs.get("reward_std"),
                reward_components=dict(stats.components), advantage_abs_mean=logs.get("advantage_abs_mean"),
                frac_zero_std_groups=logs.get("frac_zero_std_groups"), policy_loss=logs.get("policy_loss"),
                clip_ratio=logs.get("clip_ratio/region_mean"), entropy=logs.get("entropy"),
                grad_norm=logs.get("grad_norm"), kl=logs.get("kl"), n_trajectories=stats.n_trajectories,
                n_model_tokens=stats.n_model_tokens, rollout_s=round(stats.rollout_s, 4),
                train_s=round(self.train_s, 4), wait_s=round(stats.wait_s, 4), policy_version=step,
                extra=dict(stats.extra), **stats.fields,
            )
            append_step(run_dir, rec)
            print(f"[{role}] step {step}: reward {rec.reward_mean:.3f} rollout {rec.rollout_s:.1f}s "
                  f"wait {rec.wait_s:.1f}s train {rec.train_s:.1f}s", flush=True)

    return StepRecorder()


def mgrpo_args(cfg: TrainConfig, role: str, out_dir: Path, group_size: int, n_groups: int, max_steps: int) -> Any:
    """The ``MGRPOConfig`` of a role from its config section (batch sizes derived, DESIGN §3).

    ``out_dir`` is ``<run>/<role>/checkpoints``. TRL also reports to the trackers of ``report_to``
    under the run name ``<run_id>-<role>``; TensorBoard writes to ``<run>/<role>/tensorboard``."""
    import torch

    from harness.train_config import report_targets
    from mgrpo.trainer import MGRPOConfig

    sec = cfg.planner if role == "planner" else cfg.sub
    n_proc = int(os.environ.get("WORLD_SIZE", "1"))
    if n_proc != sec.num_processes:
        raise ConfigError(f"{role}.num_processes={sec.num_processes} but this role runs with {n_proc} processes "
                          f"(WORLD_SIZE); set {role}.num_processes={n_proc}")
    per_device = n_groups * group_size // sec.micro_batches
    report_to = report_targets(cfg.report_to)
    role_dir = out_dir.parent
    if "tensorboard" in report_to:
        # transformers 5 has no TrainingArguments.logging_dir: its TensorBoard callback reads this variable
        # (else it writes under output_dir, among the checkpoints). One folder per role, so `tensorboard
        # --logdir runs/` shows every run and role apart.
        os.environ["TENSORBOARD_LOGGING_DIR"] = str(role_dir / "tensorboard")
    kwargs: dict[str, Any] = dict(
        output_dir=str(out_dir), num_generations=group_size, per_device_train_batch_size=per_device,
        gradient_accumulation_steps=sec.gradient_accumulation_steps, max_steps=max_steps,
        learning_rate=sec.learning_rate, lr_scheduler_type=sec.lr_scheduler_type, warmup_steps=sec.warmup_steps,
        weight_decay=sec.weight_decay, max_grad_norm=sec.max_grad_norm, loss_type=sec.loss_type,
        ratio_level=sec.ratio_level, epsilon=sec.epsilon, epsilon_high=sec.epsilon_high, beta=sec.beta,
        temperature=max(cfg.rollout.temperature, 1e-6), seed=cfg.seed, disable_tqdm=True,
        report_to=report_to or "none", run_name=f"{role_dir.parent.name}-{role}",
        save_strategy="steps", save_steps=sec.save_steps or max_steps, save_only_model=False,
        logging_steps=1, bf16=sec.bf16, gradient_checkpointing=sec.gradient_checkpointing,
        dataloader_num_workers=0, shuffle_dataset=True,
    )
    if not torch.cuda.is_available():
        kwargs["use_cpu"] = True
    if sec.vllm_url:
        kwargs.update(use_vllm=True, vllm_mode="server", vllm_server_base_url=sec.vllm_url,
                      vllm_importance_sampling_correction=False)
    kwargs.update(sec.trl)
    return MGRPOConfig(**kwargs)


def make_backend(model: Any, tokenizer: Any, vllm_url: str | None) -> Any:
    from harness.backends import HFBackend, VLLMBackend

    return VLLMBackend(vllm_url) if vllm_url else HFBackend(model, tokenizer)


def build_toolbox(cfg: TrainConfig, world_url: str) -> Any:
    from harness.tools.toolbox import AddressedToolbox
    from harness.tools.toolbox import build_toolbox as _build
    from harness.world.generator import generate_world
    from harness.world.search import SearchIndex

    world = generate_world(seed=cfg.world.seed, size=cfg.world.size)
    toolbox = _build(cfg.tools, SearchIndex.build(world), world_url)
    return AddressedToolbox(toolbox, cfg.world.address, world_url) if cfg.world.address else toolbox


_CHECKPOINT_DIR = re.compile(r"checkpoint-(\d+)")


def checkpoint_step(path: str | Path) -> int:
    """The optimizer step of a ``checkpoint-<step>`` directory."""
    return int(Path(path).name.split("-")[-1])


def checkpoint_complete(path: Path, required: Sequence[str] = ()) -> bool:
    """Whether a checkpoint was written to the end: TRL's ``_save_checkpoint`` writes ``trainer_state.json``
    last (after the model, optimizer, scheduler and RNG), so it must parse and name the directory's step;
    ``required`` are files the role writes after TRL's (the sub role's store position)."""
    import json

    try:
        state = json.loads((path / "trainer_state.json").read_text())
        complete = int(state["global_step"]) == checkpoint_step(path)
        for name in required:
            json.loads((path / name).read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return complete


def last_checkpoint(out_dir: Path, required: Sequence[str] = ()) -> str | None:
    """The newest *complete* ``checkpoint-<step>`` under ``out_dir`` (:func:`checkpoint_complete`), else None.

    Not TRL's ``get_last_checkpoint``: that returns the highest-numbered directory, also one a kill left
    half-written (no ``trainer_state.json``), from which ``resume_from_checkpoint`` cannot restore."""
    if not out_dir.is_dir():
        return None
    found = [(int(m.group(1)), d) for d in out_dir.iterdir()
             if (m := _CHECKPOINT_DIR.fullmatch(d.name)) and d.is_dir() and checkpoint_complete(d, required)]
    return str(max(found)[1]) if found else None


def drop_incomplete_checkpoints(out_dir: Path, required: Sequence[str] = ()) -> list[str]:
    """On resume: delete the checkpoint directories a kill left half-written (the step is redone and saved
    again), so nothing that lists checkpoints (evaluation, TRL's rotation) ever loads one."""
    import shutil

    gone = []
    if out_dir.is_dir():
        for d in sorted(out_dir.iterdir()):
            if _CHECKPOINT_DIR.fullmatch(d.name) and d.is_dir() and not checkpoint_complete(d, required):
                shutil.rmtree(d, ignore_errors=True)
                gone.append(d.name)
    return gone


# ------------------------------------------------------------------------------ planner role
def append_completion(out: dict[str, list[Any]], traj: Any, reward: float) -> None:
    """Add one trajectory as a ``rollout_func`` completion (the columns TRL and the reward read)."""
    out["prompt_ids"].append(list(traj.prompt_ids))
    out["completion_ids"].append(list(traj.completion_ids))
    out["logprobs"].append(list(traj.logprobs))
    out["env_mask"].append(list(traj.env_mask))
    out["reward"].append(reward)
    out["query_id"].append(traj.query_id)
    out["rollout"].append(traj.rollout)


class PlannerRollout:
    """``rollout_func`` of the planner role (see the module docstring)."""

    def __init__(self, cfg: TrainConfig, tasks: dict[str, dict[str, Any]], store: Any, world_url: str,
                 sub_client: Any, toolbox: Any, tokenizer: Any, stats: StepStats) -> None:
        self.cfg, self.tasks, self.store, self.world_url = cfg, tasks, store, world_url
        self.sub_client, self.toolbox, self.tokenizer, self.stats = sub_client, toolbox, tokenizer, stats
        self.runtime: Any = None

    def ensure_runtime(self, trainer: Any) -> Any:
        from harness.rollout import AgentRuntime

        if self.runtime is None:
            model = trainer.accelerator.unwrap_model(trainer.model)
            self.runtime = AgentRuntime(make_backend(model, self.tokenizer, self.cfg.planner.vllm_url), self.tokenizer)
        self.runtime.policy_version = int(trainer.state.global_step)
        return self.runtime

    def run(self, queries: list[Any], cfg: Any, seed: int, step: int) -> Any:
        from harness.rollout import run_group

        if self.sub_client is not None:
            return run_group(queries, self.runtime, cfg, sub_agent=self.sub_client, seed=seed, step=step)
        return run_group(queries, self.runtime, cfg, toolbox=self.toolbox, seed=seed, step=step)

    def question(self, task: dict[str, Any]) -> str:
        from harness.world.tasks import rebase, task_prompt

        return task_prompt(rebase(task, self.cfg.world.address or self.world_url))

    def __call__(self, prompts: list[str], trainer: Any) -> dict[str, Any]:
        from harness.rollout import Query
        from harness.world.expert import answers_match
        from mgrpo.alignment import sub_calls_quantile
        from mgrpo.rewards import main_reward
        from mgrpo.store import RolloutRecord, SubCallRecord

        k = self.cfg.k
        step = int(trainer.state.global_step)
        if len(prompts) % k or any(len(set(prompts[i:i + k])) != 1 for i in range(0, len(prompts), k)):
            raise RuntimeError(f"the planner rollout expects each task id repeated K={k} times side by side, got "
                               f"{prompts[:2 * k]}...; check that num_generations equals rollout.k")
        t0 = time.perf_counter()
        self.ensure_runtime(trainer)
        proc = int(trainer.accelerator.process_index)
        task_ids = prompts[::k]
        qids = [f"{tid}@{step}.{proc}.{i}" for i, tid in enumerate(task_ids)]
        queries = [Query(q, self.question(self.tasks[tid])) for q, tid in zip(qids, task_ids)]
        res = self.run(queries, self.cfg.rollout, seed=self.cfg.seed * 1_000_003 + proc, step=step)

        out: dict[str, Any] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [],
                               "reward": [], "query_id": [], "rollout": []}
        w = self.cfg.rewards
        by_query: dict[str, list[Any]] = {}
        formats, corrects, calls = [], [], []
        for ep in res.episodes:
            traj = ep.trajectory
            tid = task_ids[qids.index(traj.query_id)]
            correct = ep.answer is not None and answers_match(ep.answer, gold_answer(self.tasks[tid]))
            reward = main_reward(bool(traj.format_ok), correct, w_format=w.planner_format, w_correct=w.planner_correct)
            for sr in ep.sub_results:  # sub-call records first: a group is handed out with what is present
                self.store.upsert_sub_call(SubCallRecord(
                    query_id=traj.query_id, rollout=traj.rollout, call=sr.call,
                    result_hash=hashlib.sha1(sr.result.encode()).hexdigest()[:16],
                    policy_version=int(sr.policy_version), r_format=1.0 if sr.format_ok else 0.0))
            by_query.setdefault(traj.query_id, []).append(RolloutRecord(
                query_id=traj.query_id, rollout=traj.rollout, R_M=reward, r_correct=float(correct),
                r_format=float(traj.format_ok), sub_call_ids=[sr.call for sr in ep.sub_results],
                policy_version=step, sub_policy_versions=[int(sr.policy_version) for sr in ep.sub_results],
                extra={"task_id": tid, "step": step, "end_reason": traj.end_reason}))
            append_completion(out, traj, reward)
            formats.append(float(traj.format_ok))
            corrects.append(float(correct))
            calls.append(len(ep.sub_results))
        for qid in qids:
            self.store.upsert_rollouts(by_query[qid], group_size=k)
        self.store.heartbeat("planner", {"step": step})

        s = self.stats
        s.rollout_s = time.perf_counter() - t0
        s.wait_s = float(res.stats.get("delegate_s", 0.0))
        s.rollout_end = time.perf_counter()
        s.n_trajectories = len(res.episodes)
        s.n_model_tokens = sum(e.trajectory.n_model_tokens for e in res.episodes)
        s.components = {"format": _mean(formats) or 0.0, "correct": _mean(corrects) or 0.0}
        if self.sub_client is not None:
            hist = [0] * (max(calls) + 1)
            for c in calls:
                hist[c] += 1
            s.fields = {"sub_calls_mean": _mean(calls), "sub_calls_p99": float(sub_calls_quantile(calls)),
                        "sub_calls_hist": hist}
        s.extra = {"generate_s": round(res.stats.get("generate_s", 0.0), 4),
                   "generated_tokens": int(res.stats.get("generated_tokens", 0))}
        trainer.model.train()  # TRL reads model.training after the rollout (DESIGN §3 note)
        return out


def run_eval(cfg: TrainConfig, run_dir: Path, rollout: PlannerRollout, eval_tasks: list[dict[str, Any]],
             step: int) -> int:
    """Greedy K=1 episodes of the eval tasks with the current policies -> task records (DESIGN §7, §8)."""
    from dataclasses import replace

    from harness.rollout import Query
    from harness.world.expert import answers_match
    from harness.world.tasks import benchmark_of

    if not eval_tasks:
        return 0
    ecfg = replace(cfg.rollout, k=1, temperature=0.0,
                   max_new_tokens=cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens)
    queries = [Query(f"{EVAL_PREFIX}{step}/{task_key(t)}", rollout.question(t)) for t in eval_tasks]
    t0 = time.perf_counter()
    res = rollout.run(queries, ecfg, seed=cfg.seed, step=step)
    latency = (time.perf_counter() - t0) / max(1, len(eval_tasks))
    for task, ep in zip(eval_tasks, res.episodes):
        gold = gold_answer(task)
        pred = ep.answer
        correct = pred is not None and answers_match(pred, gold)
        traj = ep.trajectory
        append_task(run_dir, TaskRecord(
            run_id=run_dir.name, trainer=str(cfg.trainer), seed=cfg.seed, step=step,
            benchmark=f"local_{benchmark_of(task)}", benchmark_version=f"1+seed{cfg.world.seed}.{cfg.world.size}",
            task_id=task_key(task), correct=correct, prediction=pred, gold=gold, judge="exact",
            verdict="correct" if correct else "incorrect",
            error=None if pred is not None else f"no answer ({traj.end_reason})", n_turns=traj.n_turns,
            n_sub_calls=len(ep.sub_results), n_tokens=traj.n_model_tokens, latency_s=round(latency, 4)))
    return len(eval_tasks)


def run_planner(cfg: TrainConfig, run_dir: Path, store: Any, world_url: str, sub_url: str | None,
                resume: bool) -> int:
    from datasets import Dataset

    from baselines import get_trainer
    from harness.subagent_service import HTTPSubAgentClient
    from mgrpo.trainer import MGRPOTrainer

    spec = get_trainer(str(cfg.trainer))
    store.put_stat(PLANNER_DONE, None)  # a previous (killed) planner's signal does not count
    tasks, eval_tasks = load_tasks(cfg)
    out_dir = run_dir / "planner" / "checkpoints"
    ckpt = last_checkpoint(out_dir) if resume else None  # complete checkpoints only
    done = checkpoint_step(ckpt) if ckpt else 0
    # The checkpoint's weights from the start (TRL loads them again in train()), so an evaluation of step
    # `done` that has to be redone below evaluates that step's policy.
    model, tok = load_model_for(ckpt or cfg.models.planner, spec.planner_agent, cfg)
    sub_client, toolbox = None, None
    if spec.delegates:
        sub_url = sub_url or wait_for_sub_url(store, cfg.service.startup_timeout_s)
        sub_client = HTTPSubAgentClient(sub_url, timeout_s=cfg.service.timeout_s)
        print(f"[planner] sub-agent service at {sub_url}", flush=True)
    else:
        toolbox = build_toolbox(cfg, world_url)
    stats = StepStats()
    rollout = PlannerRollout(cfg, tasks, store, world_url, sub_client, toolbox, tok, stats)
    args = mgrpo_args(cfg, "planner", out_dir, cfg.k, cfg.planner_groups, cfg.planner_steps)
    ids = sorted(tasks)
    dataset = Dataset.from_dict({"prompt": ids})

    def on_step(step: int) -> None:
        store.set_policy_version("planner", step)
        if not trainer.accelerator.is_main_process:
            return  # evaluation on the main process (with vLLM generation; see docs/training.md)
        if is_eval_step(cfg, step):
            n = run_eval(cfg, run_dir, rollout, eval_tasks, step)
            print(f"[planner] eval at step {step}: {n} task records", flush=True)

    trainer = MGRPOTrainer(model, args=args, rollout_func=rollout, train_dataset=dataset, processing_class=tok,
                           callbacks=[make_step_recorder("planner", cfg, run_dir, stats, on_step)],
                           advantage_fn=resolve_advantage_fn(cfg.planner.advantage_fn))
    rollout.ensure_runtime(trainer)
    main = trainer.accelerator.is_main_process
    if resume and main:  # the records after step `done` are redone: drop them (also with no checkpoint: done = 0)
        resume_records(run_dir, "planner", done, out_dir)
        dropped = drop_evals(run_dir, lambda s: s > done)
        if dropped:
            print(f"[planner] resume from step {done}: dropped the evaluation records of steps {dropped}", flush=True)
    if main and is_eval_step(cfg, done) and not eval_complete(run_dir, done, eval_tasks):
        drop_evals(run_dir, lambda s: s == done)  # a cut evaluation is redone whole, never appended to
        rollout.runtime.policy_version = done
        n = run_eval(cfg, run_dir, rollout, eval_tasks, done)
        print(f"[planner] eval at step {done}: {n} task records", flush=True)
    finished = done >= cfg.planner_steps
    try:
        if finished:
            # TRL would train one step more: its loop only checks max_steps after a step (resume of a completed run)
            print(f"[planner] already finished: {Path(ckpt).name} is step {done} of {cfg.planner_steps}", flush=True)
        else:
            trainer.train(resume_from_checkpoint=ckpt)
    finally:
        if toolbox is not None:
            toolbox.close()
    step = done if finished else int(trainer.state.global_step)
    store.put_stat(PLANNER_DONE, {"step": step, "time": time.time()})
    print(f"[planner] finished after {step} steps", flush=True)
    return 0


def is_eval_step(cfg: TrainConfig, step: int) -> bool:
    """Whether ``eval.every`` asks for an evaluation of the policy of ``step`` (0, every N, the last)."""
    return bool(cfg.eval.every) and (step % cfg.eval.every == 0 or step == cfg.planner_steps)


def _local_eval_files(run_dir: Path) -> list[tuple[int, Path]]:
    """``(step, file)`` of the planner role's own evaluation records (``eval/<step>/local_<style>.jsonl``)."""
    from harness.records import RunPaths

    return [(step, path) for step, bench, path in RunPaths(run_dir).eval_files() if bench.startswith("local_")]


def eval_complete(run_dir: Path, step: int, eval_tasks: list[dict[str, Any]]) -> bool:
    """Whether the evaluation of ``step`` holds exactly one record per evaluation task (none cut, none twice)."""
    from harness.records import RecordError, read_tasks
    from harness.world.tasks import benchmark_of

    got = []
    for s, path in _local_eval_files(run_dir):
        if s != step:
            continue
        try:
            res = read_tasks(path, tolerate_truncated_tail=True)
        except RecordError:
            return False
        if res.truncated_tail:
            return False
        got += [(r.benchmark, r.task_id) for r in res.records]
    return sorted(got) == sorted((f"local_{benchmark_of(t)}", task_key(t)) for t in eval_tasks)


def drop_evals(run_dir: Path, which: Any) -> list[int]:
    """Delete the planner's evaluation records of the steps ``which(step)`` selects; returns those steps."""
    dropped = set()
    for s, path in _local_eval_files(run_dir):
        if which(s):
            path.unlink(missing_ok=True)
            dropped.add(s)
            try:
                path.parent.rmdir()  # when nothing else (e.g. a benchmark's records) is in it
            except OSError:
                pass
    return sorted(dropped)


def resume_records(run_dir: Path, role: str, step: int, out_dir: Path, required: Sequence[str] = ()) -> None:
    """On resume from ``step`` (0: no checkpoint): drop the role's half-written checkpoints and its step
    records after ``step``, and say what was dropped."""
    gone = drop_incomplete_checkpoints(out_dir, required)
    n = truncate_metrics(run_dir, role, step)
    print(f"[{role}] resume from step {step}" + (f" ({n} later step records dropped)" if n else "")
          + (f"; removed half-written {', '.join(gone)}" if gone else ""), flush=True)


def wait_for_sub_url(store: Any, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        url = store.get_stat(SUB_URL)
        if url:
            return str(url)
        time.sleep(0.2)
    raise TimeoutError(f"the sub role did not publish its service URL (store stat {SUB_URL!r}) within {timeout_s:.0f}s; "
                       "check that it is running (its log: <run>/logs/sub.log) or pass --sub-url")


# ---------------------------------------------------------------------------------- sub role
class StepLock:
    """``server.lock`` held from the end of the sub role's rollout to the end of its optimizer step."""

    def __init__(self, lock: threading.Lock) -> None:
        self.lock = lock
        self.held = False
        self.wait_s = 0.0

    def hold(self) -> None:
        if not self.held:
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
                 resume_position: int | None = None) -> None:
        from mgrpo.alignment import FifoChunker

        self.cfg, self.tasks, self.store, self.server = cfg, tasks, store, server
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
        from harness.records import iter_jsonl
        from harness.rollout import Trajectory

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
        from mgrpo.store import StoreTimeout

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

    def next_group(self) -> Any:
        """The next complete group; :class:`PlannerFinished` when the planner is done and none is left."""
        from mgrpo.store import StoreTimeout

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
        from mgrpo.rewards import sub_reward

        w = self.cfg.rewards
        out = {}
        for rec in group.rollouts:
            task = self.tasks.get(str(rec.extra.get("task_id")))
            for call in range(int(rec.n_sub_calls or 0)):
                traj = self.buffer.pop((group.query_id, rec.rollout, call), None)
                if traj is None:
                    self.missing += 1  # e.g. the sub role restarted after the call: the trajectory is gone
                    continue
                expert = r_expert(task, traj)
                reward = sub_reward(bool(traj.format_ok), rec.r_correct, expert, w_format=w.sub_format,
                                    w_main=w.sub_correct, w_expert=w.sub_expert)
                out[(rec.rollout, call)] = (traj, reward, {"format": float(traj.format_ok),
                                                           "correct": rec.r_correct, "expert": expert})
        return out

    def aligned(self, group: Any, items: dict[tuple[int, int], Any]) -> list[Any] | None:
        from mgrpo.alignment import align, alignment_stats, query_seed

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
        g = self.cfg.sub_group_size
        n_groups = len(prompts) // g
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
                self.empty_groups += 1  # no rollout of the query called the sub-agent (DESIGN §3)
                self.store.ack_group(group.query_id)  # nothing to train on: done now
                continue
            self.to_ack.append((group.query_id, int(group.position or 0)))
            self.current.append(group.query_id)
            chosen.extend(aligned)
        self.step_lock.hold()  # from here until the optimizer step ends, no sub-agent episode runs

        out: dict[str, Any] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [],
                               "reward": [], "query_id": [], "rollout": [], "call": []}
        parts: dict[str, list[float]] = {"format": [], "correct": [], "expert": []}
        for traj, reward, comp in chosen:
            append_completion(out, traj, reward)
            out["call"].append(int(traj.call or 0))
            for key in parts:
                parts[key].append(comp[key])
        s = self.stats
        s.rollout_s = time.perf_counter() - t0
        s.wait_s = wait + self.step_lock.wait_s
        s.rollout_end = time.perf_counter()
        s.n_trajectories = len(chosen)
        s.n_model_tokens = sum(t.n_model_tokens for t, _, _ in chosen)
        s.components = {k: _mean(v) or 0.0 for k, v in parts.items()}
        s.fields = ({"align_duplicated": self.dup, "align_dropped": self.drop}
                    if self.cfg.alignment.mode == "query" else {})
        s.extra = {"empty_groups": self.empty_groups, "missing_trajectories": self.missing,
                   "alignment": self.cfg.alignment.mode, "groups": list(self.current),
                   "sub_policy_versions": sorted({int(t.policy_version) for t, _, _ in chosen})}
        trainer.model.train()
        return out


def run_sub(cfg: TrainConfig, run_dir: Path, store: Any, world_url: str, resume: bool) -> int:
    from baselines import get_trainer
    from harness.rollout import AgentRuntime, SubAgentEngine
    from harness.subagent_service import SubAgentServer

    spec = get_trainer(str(cfg.trainer))
    if not spec.has_sub:
        raise ConfigError(f"trainer {cfg.trainer!r} has no sub role (roles: {spec.roles})")
    out_dir = run_dir / "sub" / "checkpoints"
    # A sub checkpoint is complete with its store position too (written after TRL's files, before the acks).
    ckpt = last_checkpoint(out_dir, (STORE_POSITION_FILE,)) if resume and spec.sub_trains else None
    done = checkpoint_step(ckpt) if ckpt else 0
    # On resume the service must answer with the checkpoint's weights from its first request on.
    model, tok = load_model_for(ckpt or cfg.models.sub, "sub_agent", cfg)
    toolbox = build_toolbox(cfg, world_url)
    trainer = None
    stats = StepStats()
    engine = SubAgentEngine(AgentRuntime(make_backend(model, tok, cfg.sub.vllm_url), tok), toolbox,
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
        trainer = _sub_trainer(cfg, run_dir, store, server, model, tok, out_dir, stats, resume_from=ckpt)
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
                settled = trainer._mgrpo_rollout.settle_covered()
                print(f"[sub] already finished: {Path(ckpt).name} is step {done} of {cfg.sub_max_steps}"
                      + (f" ({settled} redelivered groups it covers acknowledged)" if settled else ""), flush=True)
            elif spec.sub_trains:
                _train_sub(trainer, ckpt, cfg, out_dir)
                version = int(trainer.state.global_step)
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


def _train_sub(trainer: Any, ckpt: str | None, cfg: TrainConfig, out_dir: Path) -> None:
    """The sub role's optimizer steps; stops early (with a checkpoint) once no query group can come."""
    try:
        trainer.train(resume_from_checkpoint=ckpt)
    except PlannerFinished:
        step = int(trainer.state.global_step)
        rollout = trainer._mgrpo_rollout
        print(f"[sub] the planner finished and no complete query group is left: stopping after {step} of "
              f"{cfg.sub_max_steps} steps ({rollout.empty_groups} groups had no sub-agent call"
              + (f"; {len(rollout.current)} taken groups, fewer than a step needs, not trained: {rollout.current}"
                 if rollout.current else "") + ")", flush=True)
        trainer._mgrpo_lock.release()
        target = out_dir / f"checkpoint-{step}"
        if step > 0 and not target.is_dir():
            trainer._save_checkpoint(trainer.model, trial=None)  # full state (optimizer, RNG), as TRL saves
        trainer._mgrpo_checkpoint_saved(target)
    finally:
        trainer._mgrpo_lock.release()


def _raise_sigterm() -> None:
    raise KeyboardInterrupt("SIGTERM")


def spool_engine_results(engine: Any, spool: Path) -> None:
    """Append every sub-agent trajectory to ``spool`` before the service answers the planner.

    So a group the planner completed always has its trajectories on the sub role's disk (DESIGN §4:
    the service "keeps the token trajectory locally (run dir)"), and a restarted sub role can train on
    a redelivered group.
    """
    from dataclasses import asdict

    from harness.records import append_jsonl

    run = engine.run

    def run_and_spool(subtasks: Any, stats: Any = None) -> Any:
        results = run(subtasks, stats)
        for r in results:
            if r.trajectory is not None and not r.trajectory.query_id.startswith(EVAL_PREFIX):
                append_jsonl(spool, asdict(r.trajectory))
        return results

    engine.run = run_and_spool


STORE_POSITION_FILE = "mgrpo_store.json"
"""Written into each sub checkpoint: the largest store position (consumer log) the checkpoint covers."""


def _sub_trainer(cfg: TrainConfig, run_dir: Path, store: Any, server: Any, model: Any, tok: Any, out_dir: Path,
                 stats: StepStats, resume_from: str | None = None) -> Any:
    """The sub role's MGRPOTrainer (d*K groups from the store); ``resume_from`` = a checkpoint dir."""
    import json

    from datasets import Dataset

    from harness.records import write_json_atomic
    from mgrpo.trainer import MGRPOTrainer

    tasks, _ = load_tasks(cfg)
    step_lock = StepLock(server.lock)
    position = None
    if resume_from is not None and (Path(resume_from) / STORE_POSITION_FILE).is_file():
        position = json.loads((Path(resume_from) / STORE_POSITION_FILE).read_text())["max_position"]
    spool = run_dir / "sub" / "trajectories.jsonl"
    rollout = SubRollout(cfg, tasks, store, server, step_lock, stats, spool=spool, resume_position=position)
    spool_engine_results(server.engine, spool)

    def on_step(step: int) -> None:
        server.engine.runtime.policy_version = step
        store.set_policy_version("sub", step)
        store.heartbeat("sub", {"step": step})
        step_lock.release()

    class AckOnSave(_trainer_callback_base()):  # type: ignore[misc]
        """Checkpoint first, then ack (store recipe: *done* implies *checkpointed*)."""

        def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            checkpoint_saved(Path(args.output_dir) / f"checkpoint-{state.global_step}")

    def checkpoint_saved(ckpt: Path) -> None:
        # The position first (atomically; it completes the checkpoint, see last_checkpoint), then the acks: a
        # kill in between leaves groups the checkpoint covers unacknowledged, and those are skipped on resume.
        top = max((p for _, p in rollout.to_ack), default=-1)
        if ckpt.is_dir():
            prev = rollout.resume_position if rollout.resume_position is not None else -1
            write_json_atomic(ckpt / STORE_POSITION_FILE, {"max_position": max(prev, top)})
            rollout.resume_position = max(prev, top)
        rollout.ack_checkpointed()

    args = mgrpo_args(cfg, "sub", out_dir, cfg.sub_group_size, cfg.sub_groups, cfg.sub_max_steps)
    # The dataset only paces TRL's sampler: each "prompt" is a slot the rollout fills with one query group.
    slots = Dataset.from_dict({"prompt": [f"group-slot-{i}" for i in range(cfg.sub_groups)]})
    trainer = MGRPOTrainer(model, args=args, rollout_func=rollout, train_dataset=slots, processing_class=tok,
                           callbacks=[make_step_recorder("sub", cfg, run_dir, stats, on_step), AckOnSave()],
                           advantage_fn=resolve_advantage_fn(cfg.sub.advantage_fn))
    trainer._mgrpo_rollout = rollout
    trainer._mgrpo_lock = step_lock
    trainer._mgrpo_checkpoint_saved = checkpoint_saved
    return trainer


# ------------------------------------------------------------------------------- entry point
def store_url(cfg: TrainConfig, run_dir: Path) -> str:
    """``store.url``, else the embedded sqlite store of the run directory (DESIGN §8 layout)."""
    from harness.records import RunPaths

    return cfg.store.url or f"sqlite:///{RunPaths(run_dir).store_db.resolve()}"


def truncate_metrics(run_dir: Path, role: str, step: int) -> int:
    """On resume from checkpoint ``step`` (0 when there is none): drop the step records after it (those
    steps are redone) and any line a kill cut; returns how many lines were dropped."""
    from harness.records import RunPaths

    path = RunPaths(run_dir).metrics(role)
    if not path.is_file():
        return 0
    lines = path.read_text().splitlines(keepends=True)
    import json

    keep = []
    for line in lines:
        try:
            rec_step = json.loads(line).get("step")
        except ValueError:
            continue  # a line cut by the kill
        if isinstance(rec_step, int) and rec_step <= step:
            keep.append(line if line.endswith("\n") else line + "\n")
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(keep))
    os.replace(tmp, path)
    return len(lines) - len(keep)


def load_role_config(path: str, overrides: list[str]) -> TrainConfig:
    from harness.config import apply_overrides

    data = apply_overrides(load_yaml(path), overrides)
    return from_dict(TrainConfig, data, where=path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.role", description=__doc__.split("\n\n")[0])
    ap.add_argument("--role", required=True, choices=("planner", "sub"))
    ap.add_argument("--config", required=True, help="resolved run config (YAML; <run>/config.yaml)")
    ap.add_argument("--run-dir", required=True, help="the run directory (records, checkpoints)")
    ap.add_argument("--world-url", required=True, help="base URL of the world server")
    ap.add_argument("--store", default=None, help="store URL (default: store.url of the config, else sqlite in run dir)")
    ap.add_argument("--sub-url", default=None, help="planner: the sub-agent service URL (default: from the store)")
    ap.add_argument("--resume", action="store_true", help="continue from the role's last checkpoint")
    ap.add_argument("overrides", nargs="*", help="key.path=value config overrides")
    args = ap.parse_args(argv)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    try:
        cfg = load_role_config(args.config, args.overrides)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(cfg.threads)
    from mgrpo.store import open_store

    run_dir = Path(args.run_dir)
    store = open_store(args.store or store_url(cfg, run_dir), run_id=run_dir.name)
    try:
        if args.role == "planner":
            return run_planner(cfg, run_dir, store, args.world_url, args.sub_url, args.resume)
        return run_sub(cfg, run_dir, store, args.world_url, args.resume)
    finally:
        store.close()


if __name__ == "__main__":
    sys.exit(main())
