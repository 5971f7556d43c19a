"""Seeded generator of realistic run records and run folders for tests (docs/report.md layout).

``make_experiment(root, ...)`` writes ``root/<run_id>/`` folders exactly as roles and the
evaluation suite do (provenance.json, status.json, <role>/metrics.jsonl, eval/<step>/<bench>.jsonl)
through the schemas of :mod:`harness.records`, and returns the ground truth it wrote (per-task
correctness per run/step/benchmark) so tests can hand-compute the report's numbers.

Realism: accuracy and reward rise from a shared start towards an arm-specific plateau with
noise; mgrpo (and its alignment ablation) has a trained sub-agent role; the planner records a
sub-calls histogram of K*Q rollouts and the sub-agent the alignment counters for d = 8; runs can
be shortened, crash (status failed, optionally a half-written last line), collapse (reward and
accuracy fall and stay down), or miss a seed. Task records carry a transcript (issue 15, built with
:func:`harness.transcript.messages_transcript`, see :func:`task_transcript`) unless the run's spec says
``transcripts=False``. Everything is deterministic in ``seed``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness import records as rec
from harness.transcript import messages_transcript

BENCHMARKS = ("local_gaia", "local_webwalkerqa", "local_xbench")
TRAINERS = ("single_agent", "frozen_sub", "mgrpo")
DEFAULT_FINAL = {"single_agent": 0.30, "frozen_sub": 0.45, "mgrpo": 0.60,
                 "mgrpo[alignment=none]": 0.50}
K, QUERIES, D = 8, 4, 8


@dataclass
class RunSpec:
    """How one generated run behaves."""

    trainer: str
    seed: int
    arm: str | None = None
    steps: int = 100
    state: str | None = "completed"
    """completed | failed | running | None (no status.json)."""
    collapse_at: int | None = None
    truncated_tail: bool = False
    """Leave a half-written final line in the planner metrics (writer killed mid-line)."""
    final_acc: float | None = None
    provenance: bool = True
    config: dict[str, Any] = field(default_factory=dict)
    transcripts: bool = True
    """Task records carry a transcript (:func:`task_transcript`)."""

    @property
    def label(self) -> str:
        return self.arm or self.trainer

    @property
    def run_id(self) -> str:
        safe = self.label.replace("[alignment=none]", "-align-none")
        return f"{safe}-s{self.seed}"


@dataclass
class Experiment:
    root: Path
    specs: list[RunSpec]
    benchmarks: tuple[str, ...]
    eval_every: int
    correct: dict[tuple[str, int, str], list[bool]] = field(default_factory=dict)
    """(run_id, eval step, benchmark) -> correctness per task in task order."""
    rewards: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    """(run_id, role) -> reward_mean per step."""

    def spec(self, run_id: str) -> RunSpec:
        return next(s for s in self.specs if s.run_id == run_id)


def _curve(step: int, steps_total: int, start: float, final: float) -> float:
    return start + (final - start) * (1.0 - math.exp(-4.0 * step / max(steps_total, 1)))


def make_experiment(root: str | Path, *, trainers: tuple[str, ...] = TRAINERS,
                    seeds: tuple[int, ...] = (0, 1, 2), steps: int = 100, eval_every: int = 25,
                    benchmarks: tuple[str, ...] = BENCHMARKS, n_tasks: int = 40, seed: int = 0,
                    final_acc: dict[str, float] | None = None,
                    overrides: dict[tuple[str, int], dict[str, Any]] | None = None,
                    missing: tuple[tuple[str, int], ...] = (), with_align_none: bool = False,
                    specs: list[RunSpec] | None = None, transcripts: bool = True) -> Experiment:
    """Write an experiment of trainers × seeds runs under ``root``; returns the ground truth.

    ``overrides[(arm, seed)]`` sets RunSpec fields of one run (steps, state, collapse_at, ...);
    ``missing`` leaves runs out; ``with_align_none`` adds the Fig. 8 ablation arm;
    ``transcripts`` is every generated spec's default.
    """
    root = Path(root)
    finals = {**DEFAULT_FINAL, **(final_acc or {})}
    if specs is None:
        specs = []
        arms = list(trainers) + (["mgrpo[alignment=none]"] if with_align_none else [])
        for arm in arms:
            for s in seeds:
                if (arm, s) in missing:
                    continue
                trainer = "mgrpo" if arm.startswith("mgrpo") else arm
                spec = RunSpec(trainer=trainer, seed=s, steps=steps, transcripts=transcripts,
                               arm=arm if arm != trainer else None,
                               config={"trainer": trainer, "K": K, "d": D,
                                       "mgrpo": {"alignment": "none" if "none" in arm else "fixed_d"}})
                for k, v in (overrides or {}).get((arm, s), {}).items():
                    setattr(spec, k, v)
                if spec.final_acc is None:
                    spec.final_acc = finals.get(arm, 0.4)
                specs.append(spec)
    exp = Experiment(root, specs, benchmarks, eval_every)
    for i, spec in enumerate(specs):
        _write_run(exp, spec, np.random.default_rng([seed, i, spec.seed]), n_tasks)
    return exp


def _write_lines(path: Path, objs: list[dict[str, Any]], tail: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(o) + "\n" for o in objs) + tail
    path.write_text(text, encoding="utf-8")


def _write_run(exp: Experiment, spec: RunSpec, rng: np.random.Generator, n_tasks: int) -> None:
    rp = rec.RunPaths(exp.root / spec.run_id)
    rp.root.mkdir(parents=True, exist_ok=True)
    if spec.provenance:
        rec.write_provenance(rp.root, spec.config, [spec.seed], trainer=spec.trainer,
                             arm=None, repo_dir=exp.root, packages=("numpy", "pandas"),
                             mark_running=False)
    horizon = spec.steps
    total_nominal = max(s.steps for s in exp.specs)
    start = 0.15
    final = float(spec.final_acc if spec.final_acc is not None else 0.4)
    roles = ["planner"] + (["sub"] if spec.trainer == "mgrpo" else [])
    t0 = 1.7e9 + 1000 * spec.seed

    def level(step: int) -> float:
        v = _curve(step, total_nominal, start, final)
        if spec.collapse_at is not None and step >= spec.collapse_at:
            v -= 0.4 * min(1.0, (step - spec.collapse_at + 1) / 5)
        return min(max(v, 0.0), 1.0)

    for role in roles:
        lines = []
        rewards = []
        for step in range(1, horizon + 1):
            lv = level(step)
            r_mean = float(np.clip(0.1 + 0.85 * lv + rng.normal(0, 0.03), 0, 1))
            rewards.append(r_mean)
            kwargs: dict[str, Any] = {}
            n_traj = K * QUERIES
            if role == "planner" and spec.trainer != "single_agent":
                calls = np.clip(rng.poisson(3.0, size=K * QUERIES), 0, 12)
                hist = np.bincount(calls, minlength=13).tolist()
                kwargs.update(sub_calls_mean=float(calls.mean()),
                              sub_calls_p99=float(np.quantile(calls, 0.99)), sub_calls_hist=hist)
            if role == "sub":
                n_traj = D * K * QUERIES
                calls = np.clip(rng.poisson(3.0, size=K * QUERIES), 0, 12)
                kwargs.update(align_duplicated=int(np.sum(np.where((calls > 0) & (calls < D), D - calls, 0))),
                              align_dropped=int(np.sum(np.where(calls > D, calls - D, 0))))
            srec = rec.StepRecord(
                run_id=spec.run_id, trainer=spec.trainer, role=role, seed=spec.seed, step=step,
                time=t0 + 10.0 * step, reward_mean=r_mean, reward_std=float(abs(rng.normal(0.3, 0.02))),
                reward_components={"format": float(min(1.0, 0.9 + 0.1 * lv)), "correct": lv},
                advantage_abs_mean=float(abs(rng.normal(0.7, 0.05))),
                frac_zero_std_groups=float(np.clip(rng.normal(0.2, 0.05), 0, 1)),
                policy_loss=float(rng.normal(0, 0.05)), clip_ratio=float(abs(rng.normal(0.02, 0.005))),
                entropy=float(1.5 * math.exp(-step / 400) + rng.normal(0, 0.02)),
                grad_norm=float(abs(rng.normal(1.0, 0.2))), kl=None, n_trajectories=n_traj,
                n_model_tokens=int(n_traj * 120 + rng.integers(0, 500)),
                rollout_s=float(abs(rng.normal(6.0, 0.5))), train_s=float(abs(rng.normal(3.0, 0.3))),
                wait_s=float(abs(rng.normal(0.5 if role == "sub" else 0.2, 0.1))),
                policy_version=step, peak_rss_mib=float(700 + 2 * step), **kwargs)
            lines.append(rec.to_dict(srec))
        exp.rewards[(spec.run_id, role)] = rewards
        tail = ""
        if spec.truncated_tail and role == "planner":
            tail = json.dumps(lines[-1])[: 40]  # a writer killed mid-line
        _write_lines(rp.metrics(role), lines, tail)

    for step in range(0, horizon + 1, exp.eval_every):
        for b_i, bench in enumerate(exp.benchmarks):
            p = float(np.clip(level(step) - 0.05 * b_i, 0.0, 1.0))
            outcome = (rng.random(n_tasks) < p).tolist()
            exp.correct[(spec.run_id, step, bench)] = outcome
            lines = []
            errs = rng.random(n_tasks) < 0.05
            turns = rng.integers(2, 9, size=n_tasks)
            subs = rng.poisson(3.0, size=n_tasks)
            toks = rng.integers(200, 2000, size=n_tasks)
            lat = rng.uniform(0.5, 5, size=n_tasks)
            for t, ok in enumerate(outcome):
                task_id = f"{bench}-{t:04d}"
                trec = rec.TaskRecord(
                    run_id=spec.run_id, trainer=spec.trainer, seed=spec.seed, step=step,
                    benchmark=bench, benchmark_version="1", task_id=task_id,
                    correct=bool(ok), prediction="answer" if ok else "wrong", gold="answer",
                    judge="exact", verdict="correct" if ok else "incorrect",
                    error="timeout" if (errs[t] and not ok) else None, n_turns=int(turns[t]),
                    n_sub_calls=0 if spec.trainer == "single_agent" else int(subs[t]),
                    n_tokens=int(toks[t]), latency_s=float(lat[t]),
                    transcript=task_transcript(task_id, "answer" if ok else "wrong",
                                               multi=spec.trainer != "single_agent")
                    if spec.transcripts else None)
                lines.append(rec.to_dict(trec))
            _write_lines(rp.eval_file(step, bench), lines)

    if spec.state is not None:
        info = {"error": "RuntimeError: CUDA out of memory (simulated)"} if spec.state == "failed" else {}
        rec.write_status(rp.root, spec.state, **info)


def task_transcript(task_id: str, prediction: str, *, multi: bool = True) -> dict[str, Any]:
    """A realistic transcript of one evaluated task: the planner delegates once, the sub-agent
    searches (a long observation, cut to the stated size) and answers, the planner answers
    ``prediction``; ``multi=False``: the single agent searches itself. Each model turn names the
    task, so a test can find a given task's transcript in a page."""
    question = f"Question {task_id}: who founded the lab that made the device, and when?"
    results = "".join(f"{i}. Result {i} for {task_id}\nurl: http://world.local/p/{task_id}/{i}\n"
                      f"snippet: the lab was founded by someone in a year.\n" for i in range(1, 16))
    search = (f'I will search for {task_id}. <tool_call>{{"name": "search", "arguments": '
              f'{{"query": "{task_id} founder"}}}}</tool_call>')
    reasoning = f"The results for {task_id} point to {prediction}. <answer>{prediction}</answer>"
    if not multi:
        return messages_transcript(
            [{"role": "system", "content": "You are a research agent."}, {"role": "user", "content": question},
             {"role": "assistant", "content": search}, {"role": "tool", "content": results},
             {"role": "assistant", "content": reasoning}], agent="single_agent", end_reason="answer")
    planner = [{"role": "system", "content": "You are a planner."}, {"role": "user", "content": question},
               {"role": "assistant", "content": f'Delegating {task_id}. <tool_call>{{"name": "delegate", '
                                                f'"arguments": {{"task": "find the founder of {task_id}"}}}}</tool_call>'},
               {"role": "tool", "content": f"sub-agent: {prediction}"},
               {"role": "assistant",
                "content": f"The sub-agent says {prediction}. <answer>{prediction}</answer>"}]
    sub = [{"role": "system", "content": "You are a sub-agent."},
           {"role": "user", "content": f"find the founder of {task_id}"},
           {"role": "assistant", "content": search}, {"role": "tool", "content": results},
           {"role": "assistant", "content": reasoning}]
    return messages_transcript(planner, sub_calls=[sub], end_reason="answer")


def final_accuracy(exp: Experiment, run_id: str, bench: str) -> float:
    """Hand computation: fraction correct at the run's last eval step of ``bench``."""
    steps = [s for (rid, s, b) in exp.correct if rid == run_id and b == bench]
    outcome = exp.correct[(run_id, max(steps), bench)]
    return sum(outcome) / len(outcome)
