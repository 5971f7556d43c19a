"""The planner role of a decoupled M-GRPO run (docs/paper.md, docs/training.md, docs/evaluation.md): ``python -m harness.role --role planner``.

It holds the planner (or the single agent) and an :class:`mgrpo.trainer.MGRPOTrainer` with
``num_generations = K``. Its ``rollout_func`` (:class:`PlannerRollout`) receives the step's questions (task
ids, each already repeated K times side by side by TRL), runs :func:`harness.rollout.run_group` on them
(delegating over HTTP to the sub role, or with the ``search``/``visit`` toolbox for ``single_agent``), scores
``R_M = main_reward(format_ok, correct)`` against the task's gold answer, writes one rollout record per
(query, rollout) plus one sub-call record per delegation to the shared store, and returns the token
trajectories with a ``reward`` column. With ``eval.every`` it evaluates (``eval.runs`` inference runs, K = 1) on the evaluation
tasks (:func:`run_eval`) before training, every N steps and at the end. When it finishes it sets the store
stat ``planner_done``.

Start-up is forward only (:func:`run_planner`): the prepared task set (read by the caller,
:mod:`harness.role.tasks`) -> the checkpoint to resume from -> the model -> the sub-agent client or the
toolbox -> the trainer -> resume clean-up and a redone evaluation -> training.

Decisions where the paper is silent:
- **Store query ids** are ``<task_id>@<step>.<process>.<i>`` (the task id is also in the record's ``extra``):
  a task seen again in a later step is a new group (the store never re-queues a completed group), and a
  resumed step rewrites the same keys (idempotent).
- Evaluation runs on the test split, ``eval.runs`` independent inference runs (paper: 3) sampled at
  ``eval.temperature``, K = 1, through the same sub-agent service, and writes one task record per task and run
  to ``<run>/eval/<step>/local_<style>.jsonl``. On resume from step ``c`` the records of later steps
  are dropped; an evaluation of step ``c`` that a kill cut is redone whole with step ``c``'s weights.
- With ``eval.train_tasks`` the same evaluation also runs on the first training tasks of each style before
  training and after the last step (in-distribution accuracy before and after RL, as
  ``tests/harness/test_rl_works.py`` measures it), into ``<run>/eval_train/<step>/``, resumed the same way.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from baselines import get_trainer
from harness.records import RecordError, RunPaths, TaskRecord, append_task, read_tasks
from harness.role.checkpoints import checkpoint_step, last_checkpoint, resume_records
from harness.role.common import (
    EVAL_PREFIX,
    PLANNER_DONE,
    SUB_URL,
    PeerUnreachable,
    StepStats,
    append_completion,
    build_toolbox,
    check_generation_backend,
    gold_answer,
    args_then_model,
    local_benchmarks,
    make_backend,
    make_step_recorder,
    mean_of,
    mgrpo_args,
    score_task,
    wait_reachable,
)
from harness.role.tasks import RunTasks, task_key
from harness.rollout import AgentRuntime, Query, run_group
from harness.subagent_service import HTTPSubAgentClient
from harness.tools.reasoner import ReasonerClient
from harness.train_config import TrainConfig, resolve_advantage_fn
from harness.transcript import episode_transcript
from harness.world.expert import answers_match
from harness.world.schemas import benchmark_of, task_prompt
from harness.world.tasks import rebase
from mgrpo.alignment import sub_calls_quantile
from mgrpo.rewards import main_reward
from mgrpo.store import RolloutRecord, SubCallRecord


class PlannerRollout:
    """``rollout_func`` of the planner role (see the module docstring)."""

    def __init__(self, cfg: TrainConfig, tasks: dict[str, dict[str, Any]], store: Any, world_url: str,
                 sub_client: Any, toolbox: Any, tokenizer: Any, stats: StepStats, reasoner: Any = None) -> None:
        self.cfg, self.tasks, self.store, self.world_url = cfg, tasks, store, world_url
        self.sub_client, self.toolbox, self.tokenizer, self.stats = sub_client, toolbox, tokenizer, stats
        self.reasoner = reasoner  # tools.reasoner: the untrained reasoner tool (harness.tools.reasoner)
        self.runtime: Any = None
        # sub.max_lag paces the planner to the sub role only when the sub-agent trains (a frozen one never steps)
        self.max_lag: int | None = cfg.sub.max_lag if get_trainer(str(cfg.trainer)).sub_trains else None

    def ensure_runtime(self, trainer: Any) -> Any:
        if self.runtime is None:
            model = trainer.accelerator.unwrap_model(trainer.model)
            self.runtime = AgentRuntime(make_backend(model, self.tokenizer, self.cfg.planner.vllm_url), self.tokenizer)
        self.runtime.policy_version = int(trainer.state.global_step)
        return self.runtime

    def run(self, queries: list[Any], cfg: Any, seed: int, step: int) -> Any:
        if self.sub_client is not None:
            return run_group(queries, self.runtime, cfg, sub_agent=self.sub_client, reasoner=self.reasoner,
                             seed=seed, step=step)
        return run_group(queries, self.runtime, cfg, toolbox=self.toolbox, seed=seed, step=step)

    def question(self, task: dict[str, Any]) -> str:
        return task_prompt(rebase(task, self.cfg.world.address or self.world_url))

    def __call__(self, prompts: list[str], trainer: Any) -> dict[str, Any]:
        k = self.cfg.k
        step = int(trainer.state.global_step)
        if len(prompts) % k or any(len(set(prompts[i:i + k])) != 1 for i in range(0, len(prompts), k)):
            raise RuntimeError(f"the planner rollout expects each task id repeated K={k} times side by side, got "
                               f"{prompts[:2 * k]}...; check that num_generations equals rollout.k")
        t0 = time.perf_counter()
        lag_wait_s = 0.0
        if self.max_lag is not None:
            lag_wait_s = wait_for_sub(self.store, step, self.max_lag, self.cfg.store.group_timeout_s)
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
        sub_calls: list[SubCallRecord] = []
        formats, corrects, calls = [], [], []
        for ep in res.episodes:
            traj = ep.trajectory
            tid = task_ids[qids.index(traj.query_id)]
            correct = ep.answer is not None and answers_match(ep.answer, gold_answer(self.tasks[tid]))
            reward = main_reward(bool(traj.format_ok), correct, w_format=w.planner_format, w_correct=w.planner_correct)
            sub_calls += [SubCallRecord(
                query_id=traj.query_id, rollout=traj.rollout, call=sr.call,
                result_hash=hashlib.sha1(sr.result.encode()).hexdigest()[:16],
                policy_version=int(sr.policy_version), r_format=1.0 if sr.format_ok else 0.0) for sr in ep.sub_results]
            by_query.setdefault(traj.query_id, []).append(RolloutRecord(
                query_id=traj.query_id, rollout=traj.rollout, R_M=reward, r_correct=float(correct),
                r_format=float(traj.format_ok), sub_call_ids=[sr.call for sr in ep.sub_results],
                policy_version=step, sub_policy_versions=[int(sr.policy_version) for sr in ep.sub_results],
                extra={"task_id": tid, "step": step, "end_reason": traj.end_reason}))
            append_completion(out, traj, reward)
            formats.append(float(traj.format_ok))
            corrects.append(float(correct))
            calls.append(len(ep.sub_results))
        # Sub-call records first (a group is handed out with what is present), then every group of the step
        # in one atomic write: two round trips per step instead of one per record (docs/performance.md).
        t_store = time.perf_counter()
        self.store.upsert_sub_calls(sub_calls)
        self.store.upsert_rollouts([r for qid in qids for r in by_query[qid]], group_size=k)
        self.store.heartbeat("planner", {"step": step})
        store_s = time.perf_counter() - t_store

        s = self.stats
        s.rollout_s = time.perf_counter() - t0
        s.wait_s = float(res.stats.get("delegate_s", 0.0))
        s.rollout_end = time.perf_counter()
        s.n_trajectories = len(res.episodes)
        s.n_model_tokens = sum(e.trajectory.n_model_tokens for e in res.episodes)
        s.components = {"format": mean_of(formats) or 0.0, "correct": mean_of(corrects) or 0.0}
        if self.sub_client is not None:
            hist = [0] * (max(calls) + 1)
            for c in calls:
                hist[c] += 1
            s.fields = {"sub_calls_mean": mean_of(calls), "sub_calls_p99": float(sub_calls_quantile(calls)),
                        "sub_calls_hist": hist}
        s.extra = {"generate_s": round(res.stats.get("generate_s", 0.0), 4),
                   "generated_tokens": int(res.stats.get("generated_tokens", 0))}
        s.phases = {"generate_s": float(res.stats.get("generate_s", 0.0)),
                    "delegate_s": float(res.stats.get("delegate_s", 0.0)),
                    "tool_s": float(res.stats.get("tool_s", 0.0)), "store_s": store_s}
        if self.max_lag is not None:
            s.phases["sub_lag_wait_s"] = lag_wait_s
        trainer.model.train()  # TRL reads model.training after the rollout (docs/trainer.md)
        return out


# ------------------------------------------------------------------------------ evaluation
def run_eval(cfg: TrainConfig, run_dir: Path, rollout: PlannerRollout, eval_tasks: list[dict[str, Any]],
             step: int, split: str = "test") -> int:
    """``eval.runs`` independent inference runs (K = 1, sampled at ``eval.temperature``, run ``r`` seeded
    ``eval_seed(cfg, step, r)``) of the eval tasks with the current policies -> one task record per task and
    run (docs/evaluation.md, docs/report.md); returns the number of records. ``split="train"``: the
    in-distribution evaluation of training tasks (``eval.train_tasks``), recorded under ``eval_train/``."""
    if not eval_tasks:
        return 0
    # One answer matcher per benchmark name: the records are named local_<style>, so they are scored by that
    # benchmark's registered score (GAIA's scorer for local_gaia), as the evaluation suite scores them.
    benches = local_benchmarks(cfg, eval_tasks)
    temperature = cfg.eval_temperature
    ecfg = replace(cfg.rollout, k=1, temperature=temperature,
                   max_new_tokens=cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens)
    prefix = EVAL_PREFIX if split == "test" else f"{EVAL_PREFIX}{split}/"
    for run in range(cfg.eval.runs):
        seed = eval_seed(cfg, step, run)
        queries = [Query(f"{prefix}{step}/{run}/{task_key(t)}", rollout.question(t)) for t in eval_tasks]
        t0 = time.perf_counter()
        res = rollout.run(queries, ecfg, seed=seed, step=step)
        latency = (time.perf_counter() - t0) / max(1, len(eval_tasks))
        for task, ep in zip(eval_tasks, res.episodes):
            gold = gold_answer(task)
            pred = ep.answer
            bench, verdict = score_task(benches, task, pred)
            traj = ep.trajectory
            append_task(run_dir, TaskRecord(
                run_id=run_dir.name, trainer=str(cfg.trainer), seed=cfg.seed, step=step,
                benchmark=bench.name, benchmark_version=bench.version,
                task_id=task_key(task), correct=bool(verdict.correct), prediction=pred, gold=gold, judge=verdict.judge,
                verdict=verdict.verdict,
                error=None if pred is not None else f"no answer ({traj.end_reason})", n_turns=traj.n_turns,
                n_sub_calls=len(ep.sub_results), n_tokens=traj.n_model_tokens, latency_s=round(latency, 4),
                inference_run=run, temperature=temperature, sample_seed=seed, transcript=episode_transcript(ep)),
                split)
    return len(eval_tasks) * cfg.eval.runs


def eval_seed(cfg: TrainConfig, step: int, run: int) -> int:
    """Sampling seed of inference run ``run`` of the evaluation at ``step``: distinct per run and step, fixed
    by the run's seed (so a resumed run repeats it exactly)."""
    return (cfg.seed * 1_000_003 + step) * 101 + run


def is_eval_step(cfg: TrainConfig, step: int) -> bool:
    """Whether ``eval.every`` asks for an evaluation of the policy of ``step`` (0, every N, the last)."""
    return bool(cfg.eval.every) and (step % cfg.eval.every == 0 or step == cfg.planner_steps)


def is_train_eval_step(cfg: TrainConfig, step: int) -> bool:
    """Whether ``eval.train_tasks`` asks for the in-distribution evaluation of ``step``'s policy (before training
    and after the last step)."""
    return cfg.eval.train_tasks > 0 and step in (0, cfg.planner_steps)


def in_distribution_tasks(cfg: TrainConfig, train: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first ``eval.train_tasks`` training tasks of each benchmark style, in selection order."""
    return [t for b in cfg.tasks.benchmarks for t in [x for x in train if benchmark_of(x) == b][:cfg.eval.train_tasks]]


def _local_eval_files(run_dir: Path, split: str = "test") -> list[tuple[int, Path]]:
    """``(step, file)`` of the planner role's own evaluation records (``eval/<step>/local_<style>.jsonl``; ``split``
    ``train``: ``eval_train/``)."""
    return [(step, path) for step, bench, path in RunPaths(run_dir).eval_files(split) if bench.startswith("local_")]


def eval_complete(run_dir: Path, step: int, eval_tasks: list[dict[str, Any]], runs: int = 1,
                  split: str = "test") -> bool:
    """Whether the evaluation of ``step`` holds exactly one record per evaluation task and inference run (none
    cut, none twice)."""
    got = []
    for s, path in _local_eval_files(run_dir, split):
        if s != step:
            continue
        try:
            res = read_tasks(path, tolerate_truncated_tail=True)
        except RecordError:
            return False
        if res.truncated_tail:
            return False
        got += [(r.benchmark, r.task_id, r.inference_run or 0) for r in res.records]
    return sorted(got) == sorted((f"local_{benchmark_of(t)}", task_key(t), run)
                                 for t in eval_tasks for run in range(runs))


def drop_evals(run_dir: Path, which: Any, split: str = "test") -> list[int]:
    """Delete the planner's evaluation records of the steps ``which(step)`` selects; returns those steps."""
    dropped = set()
    for s, path in _local_eval_files(run_dir, split):
        if which(s):
            path.unlink(missing_ok=True)
            dropped.add(s)
            try:
                path.parent.rmdir()  # when nothing else (e.g. a benchmark's records) is in it
            except OSError:
                pass
    return sorted(dropped)


# ------------------------------------------------------------------------------ the role
def wait_for_sub_url(store: Any, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        url = store.get_stat(SUB_URL)
        if url:
            return str(url)
        time.sleep(0.2)
    raise PeerUnreachable(f"the sub role did not publish its service URL (store stat {SUB_URL!r}) within "
                          f"{timeout_s:.0f}s; check that it is running (its log: <run>/logs/sub.log) or pass --sub-url")


def untaken_groups(store: Any) -> int:
    """Complete query groups the sub role has not taken from the store yet."""
    taken = {c.query_id for c in store.consumed_groups("sub")}
    return sum(1 for qid, p in store.group_progress().items() if p.complete and qid not in taken)


def wait_for_sub(store: Any, step: int, max_lag: int, timeout_s: float) -> float:
    """Before planner step ``step``'s rollouts (``sub.max_lag``, docs/training.md "Staleness"): wait until the sub
    role has finished ``step - max_lag`` optimizer steps (its published policy version), so the sub-trajectories
    generated now train at most ``max_lag`` versions later. No wait while the sub role has taken every complete
    group: it then waits for this planner (e.g. after query groups without a delegation, which it skips), and the
    groups written next are trained by its next step. Returns the seconds waited; a sub role that neither trains
    nor takes groups for ``timeout_s`` (``store.group_timeout_s``) is an error that names it."""
    need = step - max_lag
    t0 = time.monotonic()
    delay = 0.02
    while store.get_policy_version("sub") < need and untaken_groups(store) > 0:
        if time.monotonic() - t0 > timeout_s:
            raise PeerUnreachable(
                f"planner step {step}: the sub role is at policy version {store.get_policy_version('sub')} and "
                f"sub.max_lag={max_lag} needs {need}, but it has not trained for store.group_timeout_s="
                f"{timeout_s:.0f}s with {untaken_groups(store)} complete groups waiting; check its log "
                "(<run>/logs/sub.log)")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.2)
    return time.monotonic() - t0


def run_planner(cfg: TrainConfig, run_tasks: RunTasks, run_dir: Path, store: Any, world_url: str,
                sub_url: str | None, resume: bool) -> int:
    """The planner role on the prepared ``run_tasks``; returns the exit status."""
    from datasets import Dataset

    from mgrpo.trainer import MGRPOTrainer  # lazy: torch/TRL; after the role's config and tasks

    spec = get_trainer(str(cfg.trainer))
    check_generation_backend(cfg, "planner")
    # the reasoner's endpoint comes from the environment: a missing variable fails here, before any model loads
    reasoner = ReasonerClient.from_env() if cfg.tools.reasoner else None
    store.put_stat(PLANNER_DONE, None)  # a previous (killed) planner's signal does not count
    tasks, eval_tasks = run_tasks.by_id(), run_tasks.evals
    train_evals = in_distribution_tasks(cfg, run_tasks.train)
    out_dir = run_dir / "planner" / "checkpoints"
    ckpt = last_checkpoint(out_dir) if resume else None  # complete checkpoints only
    done = checkpoint_step(ckpt) if ckpt else 0
    # The checkpoint's weights from the start (TRL loads them again in train()), so an evaluation of step
    # `done` that has to be redone below evaluates that step's policy.
    args, model, tok = args_then_model(
        lambda: mgrpo_args(cfg, "planner", out_dir, cfg.k, cfg.planner_groups, cfg.planner_steps),
        ckpt or cfg.models.planner, spec.planner_agent, cfg)
    sub_client, toolbox = None, None
    if spec.delegates:
        sub_url = sub_url or wait_for_sub_url(store, cfg.service.startup_timeout_s)
        wait_reachable(f"{sub_url.rstrip('/')}/health", "the sub-agent service", cfg.service.startup_timeout_s)
        sub_client = HTTPSubAgentClient(sub_url, timeout_s=cfg.service.timeout_s)
        print(f"[planner] sub-agent service at {sub_url}", flush=True)
    else:
        wait_reachable(world_url.rstrip("/") + "/", "the world server", cfg.store.retry_s)
        toolbox = build_toolbox(cfg, world_url)
    stats = StepStats()
    rollout = PlannerRollout(cfg, tasks, store, world_url, sub_client, toolbox, tok, stats, reasoner)
    dataset = Dataset.from_dict({"prompt": sorted(tasks)})

    def on_step(step: int) -> None:
        store.set_policy_version("planner", step)
        if not trainer.accelerator.is_main_process:
            return  # evaluation on the main process (with vLLM generation; see docs/training.md)
        if is_eval_step(cfg, step):
            n = run_eval(cfg, run_dir, rollout, eval_tasks, step)
            print(f"[planner] eval at step {step}: {n} task records", flush=True)
        if is_train_eval_step(cfg, step):
            n = run_eval(cfg, run_dir, rollout, train_evals, step, split="train")
            print(f"[planner] in-distribution eval at step {step}: {n} task records", flush=True)

    trainer = MGRPOTrainer(model, args=args, rollout_func=rollout, train_dataset=dataset, processing_class=tok,
                           callbacks=[make_step_recorder("planner", cfg, run_dir, stats, on_step)],
                           advantage_fn=resolve_advantage_fn(cfg.planner.advantage_fn))
    rollout.ensure_runtime(trainer)
    main = trainer.accelerator.is_main_process
    if resume and main:  # the records after step `done` are redone: drop them (also with no checkpoint: done = 0)
        resume_records(run_dir, "planner", done, out_dir)
        for split in ("test", "train"):
            dropped = drop_evals(run_dir, lambda s: s > done, split)
            if dropped:
                print(f"[planner] resume from step {done}: dropped the {split} evaluation records of steps {dropped}",
                      flush=True)
    redo = [("test", eval_tasks)] if is_eval_step(cfg, done) else []
    redo += [("train", train_evals)] if is_train_eval_step(cfg, done) else []
    for split, split_tasks in redo if main else []:
        if eval_complete(run_dir, done, split_tasks, cfg.eval.runs, split):
            continue
        drop_evals(run_dir, lambda s: s == done, split)  # a cut evaluation is redone whole, never appended to
        rollout.runtime.policy_version = done
        n = run_eval(cfg, run_dir, rollout, split_tasks, done, split)
        what = "eval" if split == "test" else "in-distribution eval"
        print(f"[planner] {what} at step {done}: {n} task records", flush=True)
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
