"""Load a runs folder into tables for the report (docs/report.md), using :mod:`harness.records` only.

What a run becomes (decisions where the paper is silent, also in docs/report.md):

- **Arm** (the comparison label): ``provenance["arm"]`` if set; otherwise the trainer, suffixed
  ``[alignment=none]`` when the resolved config has a key ``alignment`` equal to ``"none"``
  anywhere (the Fig. 8 ablation, docs/paper.md §Trajectory alignment).
- **Trainer / seed**: from provenance (``trainer``, a single entry of ``seeds``), else from the
  records. A run without provenance is kept and flagged.
- **State**: ``status.json``'s state (``completed``/``failed``/``running``), else ``unknown``. A
  run whose last step is below the longest run of its arm is flagged *short*. Failed runs are
  shown everywhere (provenance, curves up to where they stop, collapse checks) but left out of
  final-accuracy statistics, where the table counts them separately.
- **Eval records**: per ``(run, step, benchmark)`` a task id counts once (the last record wins,
  so a re-evaluation appended to the same file replaces the earlier verdict). Their transcripts are
  not read here (``read_tasks(transcripts=False)``); :mod:`harness.report.examples` reads those it shows.
- A truncated final line (writer killed mid-line) is skipped with a note; any other broken
  line, or a schema newer than the code, stops the report with the file and line.
- **Skipped folders**: a sub-folder of the runs folder that is not a run (no provenance.json,
  status.json, ``<role>/metrics.jsonl`` or ``eval/<step>/<benchmark>.jsonl``) is listed in
  :attr:`Dataset.skipped` with the reason, never dropped silently (issue 14).
- **Sub-agent training** (issue 14): for a run of a trainer that trains the sub-agent (``mgrpo``
  and its ablation) the steps the sub role trained are the last step of ``sub/metrics.jsonl`` (0
  when the planner has step records and the sub role none: it never got a query group, e.g. the
  planner never delegated, and saved no checkpoint). A run whose sub role trained no step, or fewer
  than half the planner's steps, is flagged *not comparable*: its sub-agent is (nearly) the weights
  it started from, so the run is a ``frozen_sub`` run under another name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness import records as rec

STEP_COLUMNS = (
    "reward_mean", "reward_std", "advantage_abs_mean", "frac_zero_std_groups", "policy_loss",
    "clip_ratio", "entropy", "grad_norm", "kl", "n_trajectories", "n_model_tokens",
    "sub_calls_mean", "sub_calls_p99", "align_duplicated", "align_dropped", "rollout_s",
    "train_s", "wait_s", "policy_version", "stale_trajectories", "dropped_stale", "peak_rss_mib", "peak_gpu_mib",
)
#: The step's share of well-formed trajectories (the reward component ``format``: the planner's r_format, the
#: sub-agent's), a column of ``Dataset.steps`` next to STEP_COLUMNS; the training-reward figure draws it dotted.
FORMAT_COLUMN = "format_share"
#: Columns of the task-record frames (``Dataset.evals``, ``.indist`` and ``.unseen``) before ``arm`` is added.
EVAL_COLUMNS = ("run_id", "seed", "step", "benchmark", "task_id", "inference_run", "correct", "n_sub_calls", "error")

ARM_ORDER = ("single_agent", "frozen_sub", "mgrpo", "mgrpo[alignment=none]")
SUB_TRAINERS = ("mgrpo",)
"""Trainers whose sub role trains (frozen_sub's is frozen, single_agent has none)."""
SUB_MIN_FRACTION = 0.5
"""A sub role that trained fewer than this fraction of the planner's steps makes a run not comparable."""
NOT_A_RUN = ("not a run: no provenance.json, status.json, <role>/metrics.jsonl or "
             "eval/<step>/<benchmark>.jsonl in it")


class ReportInputError(Exception):
    """The runs folder cannot be reported on; the message says what is wrong and what to do."""


@dataclass
class RunInfo:
    """One run folder as the report sees it."""

    run_id: str
    path: Path
    trainer: str
    arm: str
    seed: int | None
    state: str
    """completed | failed | running | unknown (no status.json)."""
    status: dict[str, Any]
    provenance: dict[str, Any] | None
    roles: list[str] = field(default_factory=list)
    last_step: dict[str, int] = field(default_factory=dict)
    eval_steps: list[int] = field(default_factory=list)
    benchmarks: list[str] = field(default_factory=list)
    schemas: set[int] = field(default_factory=set)
    migrated: int = 0
    notes: list[str] = field(default_factory=list)
    sub_calls_hist: np.ndarray | None = None
    """Pooled training histogram of sub-agent calls per rollout (planner step records)."""
    short: bool = False
    sub_steps: int | None = None
    """Steps the sub role trained (trainers in SUB_TRAINERS); None when unknown or not applicable."""
    not_comparable: str | None = None
    """Why the run cannot stand for its trainer (its sub-agent did not train), else None."""

    @property
    def failed(self) -> bool:
        return self.state == "failed"

    @property
    def max_step(self) -> int | None:
        steps = list(self.last_step.values()) + self.eval_steps
        return max(steps) if steps else None


@dataclass
class Dataset:
    """Everything the report needs, loaded once."""

    runs_dir: Path
    runs: list[RunInfo]
    steps: pd.DataFrame
    """One row per step record: run_id, arm, seed, role, step, time + STEP_COLUMNS."""
    evals: pd.DataFrame
    """One row per task (deduplicated): run_id, arm, seed, step, benchmark, task_id, correct,
    n_sub_calls, error."""
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(folder, why) for each sub-folder of the runs folder that was not read as a run."""
    indist: pd.DataFrame = field(default_factory=pd.DataFrame)
    """The in-distribution evaluation (``eval.train_tasks``: training questions before and after RL,
    ``eval_train/<step>/<benchmark>.jsonl``), with the columns of ``evals``; never part of a held-out table."""
    unseen: pd.DataFrame = field(default_factory=pd.DataFrame)
    """The held-out evaluation on worlds the run never trained on (``eval.unseen``, before and after RL,
    ``eval_unseen/<step>/<benchmark>.jsonl``), with the columns of ``evals``; its own table, never mixed into the
    accuracy table, the curves or a verdict."""

    def arms(self) -> list[str]:
        return sort_arms({r.arm for r in self.runs})

    def run(self, run_id: str) -> RunInfo:
        return next(r for r in self.runs if r.run_id == run_id)


def sort_arms(arms: set[str] | list[str]) -> list[str]:
    return sorted(arms, key=lambda a: (ARM_ORDER.index(a) if a in ARM_ORDER else len(ARM_ORDER), a))


def _find_alignment_none(cfg: Any) -> bool:
    if isinstance(cfg, dict):
        for k, v in cfg.items():
            if k == "alignment" and isinstance(v, str) and v.lower() == "none":
                return True
            if _find_alignment_none(v):
                return True
    elif isinstance(cfg, list):
        return any(_find_alignment_none(v) for v in cfg)
    return False


def load(runs_dir: str | Path) -> Dataset:
    """Read every run under ``runs_dir``; raises ReportInputError / RecordError with clear text."""
    root = Path(runs_dir)
    if not root.exists():
        raise ReportInputError(
            f"runs folder {root} does not exist; train first (python -m harness train ... or "
            f"python -m harness experiment) or pass --runs DIR")
    if not root.is_dir():
        raise ReportInputError(f"--runs {root} is not a folder")
    paths = rec.find_runs(root)
    skipped = skipped_folders(root, paths)
    if not paths:
        listed = "".join(f"\n  skipped {name}/: {why}" for name, why in skipped)
        raise ReportInputError(
            f"no runs found in {root}: expected folders <run_id>/ holding provenance.json, "
            f"<role>/metrics.jsonl or eval/<step>/<benchmark>.jsonl (docs/report.md){listed}")

    runs: list[RunInfo] = []
    step_cols: dict[str, list[Any]] = {k: [] for k in ("run_id", "role", "seed", "step", "time",
                                                       *STEP_COLUMNS, FORMAT_COLUMN)}
    ev_cols: dict[str, list[Any]] = {k: [] for k in EVAL_COLUMNS}
    in_cols: dict[str, list[Any]] = {k: [] for k in EVAL_COLUMNS}
    un_cols: dict[str, list[Any]] = {k: [] for k in EVAL_COLUMNS}
    for rp in paths:
        info = _load_run(rp, step_cols, ev_cols, in_cols, un_cols)
        runs.append(info)

    steps = pd.DataFrame(step_cols)
    evals = pd.DataFrame(ev_cols)
    indist = pd.DataFrame(in_cols)
    unseen = pd.DataFrame(un_cols)
    arm_of = {r.run_id: r.arm for r in runs}
    seed_of = {r.run_id: r.seed for r in runs}
    for df in (steps, evals, indist, unseen):
        df["arm"] = df["run_id"].map(arm_of)
        # The run's seed (provenance) wins over the per-record field for grouping.
        df["seed"] = df["run_id"].map(seed_of).fillna(df["seed"]) if len(df) else df["seed"]
    evals, indist, unseen = _task_frame(evals), _task_frame(indist), _task_frame(unseen)
    if len(steps):
        steps = steps.sort_values(["run_id", "role", "step"], kind="stable").reset_index(drop=True)
        for c in (*STEP_COLUMNS, FORMAT_COLUMN):
            steps[c] = pd.to_numeric(steps[c], errors="coerce")

    _flag_short(runs)
    _flag_sub_training(runs)
    return Dataset(runs_dir=root, runs=runs, steps=steps, evals=evals.reset_index(drop=True),
                   skipped=skipped, indist=indist.reset_index(drop=True), unseen=unseen.reset_index(drop=True))


def skipped_folders(root: Path, runs: list[rec.RunPaths]) -> list[tuple[str, str]]:
    """(name, why) of the sub-folders of ``root`` that are not among ``runs``."""
    read = {rp.root.resolve() for rp in runs}
    if root.resolve() in read:  # root is itself a run
        return []
    out: list[tuple[str, str]] = []
    for d in sorted(root.iterdir()):
        if not d.is_dir() or d.resolve() in read:
            continue
        why = NOT_A_RUN
        holder = _holds_runs(d)
        if holder is not None:  # e.g. an experiment folder: its runs are in <experiment>/runs/
            why += f"; it holds runs: pass --runs {holder}"
        out.append((d.name, why))
    return out


def _holds_runs(d: Path, depth: int = 2) -> Path | None:
    """The folder at most ``depth`` levels under ``d`` (``d`` included) whose sub-folders are runs."""
    try:
        subs = [c for c in sorted(d.iterdir()) if c.is_dir()]
    except OSError:  # unreadable: the reason already says it is not a run
        return None
    if any(rec.RunPaths(c).is_run() for c in subs):
        return d
    if depth > 1:
        for c in subs:
            found = _holds_runs(c, depth - 1)
            if found is not None:
                return found
    return None


def _load_run(rp: rec.RunPaths, step_cols: dict[str, list[Any]],
              ev_cols: dict[str, list[Any]], in_cols: dict[str, list[Any]],
              un_cols: dict[str, list[Any]]) -> RunInfo:
    notes: list[str] = []
    prov: dict[str, Any] | None = None
    if rp.provenance.is_file():
        doc = rec.read_json(rp.provenance)
        if not isinstance(doc, dict):
            raise rec.RecordError(f"{rp.provenance}: expected a JSON object")
        if isinstance(doc.get("schema"), int) and doc["schema"] > rec.SCHEMA_VERSION:
            raise rec.RecordError(
                f"{rp.provenance}: provenance schema version {doc['schema']} is newer than this "
                f"harness understands ({rec.SCHEMA_VERSION}); update the harness")
        prov = doc
    else:
        notes.append("no provenance.json: commit, config and versions unknown")
    status = rec.read_status(rp.root)
    info = RunInfo(run_id=rp.run_id, path=rp.root, trainer="", arm="", seed=None,
                   state=status["state"], status=status, provenance=prov, notes=notes)

    rec_trainers: set[str] = set()
    rec_seeds: set[int] = set()
    for role in rp.roles():
        res = rec.read_steps(rp.metrics(role), tolerate_truncated_tail=True)
        _note_read(info, res, f"{role}/{rec.METRICS_FILE}")
        if not res.records:
            continue
        info.roles.append(role)
        hist: np.ndarray | None = None
        for r in res.records:
            d = r.__dict__
            step_cols["run_id"].append(rp.run_id)
            step_cols["role"].append(role)
            step_cols["seed"].append(r.seed)
            step_cols["step"].append(r.step)
            step_cols["time"].append(r.time)
            for c in STEP_COLUMNS:
                step_cols[c].append(d[c])
            step_cols[FORMAT_COLUMN].append((r.reward_components or {}).get("format"))
            if r.sub_calls_hist:
                h = np.asarray(r.sub_calls_hist, dtype=float)
                if hist is None or hist.size < h.size:
                    hist = h if hist is None else np.pad(hist, (0, h.size - hist.size)) + h
                else:
                    hist[: h.size] += h
            rec_trainers.add(r.trainer)
            rec_seeds.add(r.seed)
        info.last_step[role] = max(r.step for r in res.records)
        if hist is not None:
            info.sub_calls_hist = (hist if info.sub_calls_hist is None
                                   else _add_hist(info.sub_calls_hist, hist))

    eval_steps, benchmarks = _read_eval_split(rp, info, ev_cols, "test", rec_trainers, rec_seeds)
    info.eval_steps = sorted(eval_steps)
    info.benchmarks = sorted(benchmarks)
    _read_eval_split(rp, info, in_cols, "train", rec_trainers, rec_seeds)
    _read_eval_split(rp, info, un_cols, "unseen", rec_trainers, rec_seeds)

    trainer = (prov or {}).get("trainer")
    if not trainer:
        trainer = sorted(rec_trainers)[0] if rec_trainers else "unknown"
    if len(rec_trainers) > 1:
        notes.append(f"records name several trainers {sorted(rec_trainers)}; using {trainer!r}")
    info.trainer = trainer
    arm = (prov or {}).get("arm")
    if not arm:
        arm = trainer + ("[alignment=none]"
                         if _find_alignment_none((prov or {}).get("config")) else "")
    info.arm = arm
    seeds = (prov or {}).get("seeds")
    if isinstance(seeds, list) and len(seeds) == 1:
        info.seed = int(seeds[0])
    elif len(rec_seeds) == 1:
        info.seed = next(iter(rec_seeds))
    elif rec_seeds:
        info.seed = min(rec_seeds)
        notes.append(f"records carry several seeds {sorted(rec_seeds)}; grouped as seed {info.seed}")
    if not info.roles and not info.eval_steps:
        notes.append("no step or eval records yet")
    if info.state == "failed":
        err = status.get("error")
        notes.append("run failed" + (f": {err}" if err else ""))
    return info


def _task_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Task records as the analysis reads them: one row per run, step, benchmark, task and inference run (the last
    written wins), ``correct`` as 0.0/1.0."""
    if len(df):
        df = df.drop_duplicates(["run_id", "step", "benchmark", "task_id", "inference_run"], keep="last")
        df["correct"] = df["correct"].astype(float)
    return df


def _read_eval_split(rp: rec.RunPaths, info: RunInfo, cols: dict[str, list[Any]], split: str,
                     rec_trainers: set[str], rec_seeds: set[int]) -> tuple[set[int], set[str]]:
    """Append the task records of one evaluation split (``test``: eval/, ``train``: eval_train/, ``unseen``:
    eval_unseen/) to ``cols``;
    returns the steps and benchmarks that hold records."""
    eval_steps: set[int] = set()
    benchmarks: set[str] = set()
    folder = rec.SPLIT_DIRS[split]
    for step, bench, path in rp.eval_files(split):
        # Without transcripts: the tables need none, and decoding them would dominate the reading
        # time (harness.report.examples reads the few it shows).
        res = rec.read_tasks(path, tolerate_truncated_tail=True, transcripts=False)
        _note_read(info, res, str(path.relative_to(rp.root)))
        for r in res.records:
            if r.step != step or r.benchmark != bench:
                raise rec.RecordError(
                    f"{path}: holds a record for step {r.step} / benchmark {r.benchmark!r} "
                    f"(task {r.task_id!r}); records belong in {folder}/<step>/<benchmark>.jsonl")
            cols["run_id"].append(rp.run_id)
            cols["seed"].append(r.seed)
            cols["step"].append(r.step)
            cols["benchmark"].append(r.benchmark)
            cols["task_id"].append(r.task_id)
            cols["inference_run"].append(r.inference_run or 0)  # None: the only run
            cols["correct"].append(bool(r.correct))
            cols["n_sub_calls"].append(r.n_sub_calls)
            cols["error"].append(r.error)
            rec_trainers.add(r.trainer)
            rec_seeds.add(r.seed)
        if res.records:
            eval_steps.add(step)
            benchmarks.add(bench)
    return eval_steps, benchmarks


def _add_hist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    n = max(a.size, b.size)
    return np.pad(a, (0, n - a.size)) + np.pad(b, (0, n - b.size))


def _note_read(info: RunInfo, res: rec.ReadResult, rel: str) -> None:
    info.schemas |= res.schemas
    info.migrated += res.migrated
    if res.truncated_tail:
        info.notes.append(f"{rel}: incomplete last line skipped (writer stopped mid-line)")
    if res.migrated:
        info.notes.append(f"{rel}: {res.migrated} record(s) migrated from schema "
                          f"{sorted(v for v in res.schemas if v < rec.SCHEMA_VERSION)} "
                          f"to {rec.SCHEMA_VERSION}")


def _flag_sub_training(runs: list[RunInfo]) -> None:
    for r in runs:
        if r.trainer not in SUB_TRAINERS:
            continue
        planner = r.last_step.get("planner")
        r.sub_steps = r.last_step.get("sub", 0 if planner is not None else None)
        if r.sub_steps is None or not planner:
            continue
        if r.sub_steps == 0:
            why = f"its sub-agent trained no step (the planner trained {planner})"
        elif r.sub_steps < SUB_MIN_FRACTION * planner:
            why = f"its sub-agent trained {r.sub_steps} of the planner's {planner} steps (fewer than half)"
        else:
            continue
        r.not_comparable = why
        r.notes.append(f"not comparable: {why}; the run is a frozen_sub run under another name")


def _flag_short(runs: list[RunInfo]) -> None:
    longest: dict[str, int] = {}
    for r in runs:
        if r.max_step is not None:
            longest[r.arm] = max(longest.get(r.arm, r.max_step), r.max_step)
    for r in runs:
        if r.max_step is not None and r.max_step < longest[r.arm]:
            r.short = True
            r.notes.append(f"short: stops at step {r.max_step}, other {r.arm} runs reach "
                           f"{longest[r.arm]}")
