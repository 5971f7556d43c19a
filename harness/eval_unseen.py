"""``python -m harness eval-unseen RUN``: a run's held-out accuracy on worlds it never trained on, before RL and after
(docs/evaluation.md, "Unseen worlds"; the report's table "Held-out accuracy on unseen worlds").

    python -m harness eval-unseen runs/experiment-tiny-blind/runs/mgrpo-seed0 [--workers 2]

What is evaluated is fixed by the run's resolved config (``config.yaml``), so it is fixed before the run:

* the worlds ``eval.unseen.worlds`` (never the run's ``world.seed``), of the run's ``world.size``; their tasks are
  written once per world with ``python -m harness world tasks --seed N --size S --n-test eval.unseen.n_test`` into
  ``<run>/eval_unseen/tasks-w<N>/``;
* of those, the test tasks of the run's ``tasks.benchmarks`` (their ``local_*`` twins) whose template matches the
  run's ``tasks.templates``;
* ``eval.unseen.runs`` sampled inference runs per task at ``eval.unseen.temperature`` (null: the rollout's): the
  rollouts of one group per task, drawn from the run's seed hashed with the task id
  (:func:`benchmarks.runners.task_seed`), so "before" and "after" draw from the same seeds;
* twice: at step 0 (``--eval-step 0``: the weights the run started from, e.g. the shipped warm start) and at the
  run's last planner checkpoint step.

Each evaluation is one ``pytest benchmarks/`` session (``--run RUN --world-seed N ...``), whose records go to
``<run>/eval_unseen/<step>/<benchmark>.jsonl`` because the world is not the run's own
(:attr:`benchmarks.runners.EvalTarget.records_split`); crashed or unscorable tasks are records like any other and
count as wrong. ``<run>/eval_unseen/done.json`` lists the evaluations that finished, so rerunning the command
(or ``python -m harness experiment``) does only what is missing; a half-written evaluation is run again and the
report keeps the last record of each task and inference run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.runners import checkpoints
from harness.config import ConfigError
from harness.records import EVAL_UNSEEN_DIR, read_json, write_json_atomic
from harness.train_config import TrainConfig, load_train_config

ROOT = Path(__file__).resolve().parent.parent
DONE_FILE = "done.json"


def unseen_plan(run_dir: Path, cfg: TrainConfig) -> list[tuple[int, int]]:
    """``(step, world)`` of every evaluation the run's config asks for: step 0 and the last planner checkpoint."""
    steps = [0]
    ckpts = checkpoints(run_dir, "planner")
    if ckpts and ckpts[-1][0] > 0:
        steps.append(ckpts[-1][0])
    return [(step, world) for step in steps for world in cfg.eval.unseen.worlds]


def pytest_argv(run_dir: Path, cfg: TrainConfig, step: int, world: int, tasks_dir: Path, workers: int) -> list[str]:
    """The ``pytest benchmarks/`` command line of one evaluation (printed, and run from the repository root)."""
    u = cfg.eval.unseen
    argv = [sys.executable, "-m", "pytest", str(ROOT / "benchmarks"), "-q", "-p", "no:cacheprovider",
            "--benchmark-disable", "--rootdir", str(ROOT),
            "--trainer", str(cfg.trainer), "--run", str(run_dir), "--eval-step", str(step),
            "--world-seed", str(world), "--world-size", cfg.world.size, "--world-tasks", str(tasks_dir),
            "--bench", ",".join(f"local_{b}" for b in cfg.tasks.benchmarks),
            "--inference-runs", str(u.runs), "--temperature", f"{cfg.unseen_temperature:g}"]
    if cfg.tasks.templates:
        argv += ["--templates", ",".join(cfg.tasks.templates)]
    if workers > 1:
        argv += ["-n", str(workers)]
    return argv


def _child_env() -> dict[str, str]:
    """This environment without pytest's and xdist's variables: called from inside a pytest session (a test, an
    xdist worker), the child session would otherwise take itself for a worker."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "XDIST_"))}


def _done(run_dir: Path) -> dict[str, Any]:
    path = run_dir / EVAL_UNSEEN_DIR / DONE_FILE
    return read_json(path) if path.is_file() else {"done": []}


def evaluate_unseen(run_dir: Path, *, workers: int = 2, log: Any = print) -> int:
    """Run the unseen-world evaluations of ``run_dir`` that have not finished; returns 0, or the first failing
    command's exit status (the evaluations after it still run)."""
    run_dir = Path(run_dir).resolve()
    config = run_dir / "config.yaml"
    if not config.is_file():
        raise ConfigError(f"{run_dir}: no config.yaml (a folder written by python -m harness train)")
    cfg = load_train_config(str(config), [])
    if not cfg.eval.unseen.worlds:
        log(f"{run_dir.name}: eval.unseen.worlds is empty in its config; nothing to evaluate")
        return 0
    if cfg.trainer not in ("mgrpo", "frozen_sub", "single_agent"):
        raise ConfigError(f"{run_dir}: trainer {cfg.trainer!r} has no model to evaluate")
    rc_first = 0
    for step, world in unseen_plan(run_dir, cfg):
        done = _done(run_dir)
        key = {"step": step, "world": world}
        if any(d.get("step") == step and d.get("world") == world for d in done["done"]):
            continue
        tasks_dir = run_dir / EVAL_UNSEEN_DIR / f"tasks-w{world}"
        if not tasks_dir.is_dir():  # written aside, then renamed: a killed write leaves no half task set
            part = tasks_dir.with_name(tasks_dir.name + ".part")
            shutil.rmtree(part, ignore_errors=True)
            cmd = [sys.executable, "-m", "harness", "world", "tasks", "--seed", str(world), "--size", cfg.world.size,
                   "--n-test", str(cfg.eval.unseen.n_test), "--out", str(part)]
            got = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            if got.returncode != 0:
                log(f"{run_dir.name}: writing the tasks of world {world} failed (exit {got.returncode}):\n"
                    f"{got.stderr[-2000:]}")
                rc_first = rc_first or got.returncode
                continue
            part.rename(tasks_dir)
        argv = pytest_argv(run_dir, cfg, step, world, tasks_dir, workers)
        log(f"{run_dir.name}: unseen world {world}, step {step}: {' '.join(argv[1:])}")
        t0 = time.perf_counter()
        got = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=_child_env())
        table = got.stdout[got.stdout.find("=== mgrpo evaluation"):] if "=== mgrpo evaluation" in got.stdout else ""
        if got.returncode != 0:
            log(f"{run_dir.name}: the evaluation failed (exit {got.returncode}):\n{(got.stdout + got.stderr)[-3000:]}")
            rc_first = rc_first or got.returncode
            continue
        log(table.rstrip() or got.stdout[-1500:].rstrip())
        done = _done(run_dir)
        done["done"].append({**key, "seconds": round(time.perf_counter() - t0, 1),
                             "temperature": cfg.unseen_temperature, "runs": cfg.eval.unseen.runs,
                             "n_test": cfg.eval.unseen.n_test, "templates": cfg.tasks.templates})
        write_json_atomic(run_dir / EVAL_UNSEEN_DIR / DONE_FILE, done)
    return rc_first


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness eval-unseen", description=__doc__.split("\n\n")[0])
    ap.add_argument("run", help="a run folder of python -m harness train (its config.yaml sets eval.unseen)")
    ap.add_argument("--workers", type=int, default=2, help="pytest-xdist processes per evaluation (default 2)")
    args = ap.parse_args(argv)
    if args.workers < 1:
        print(f"error: --workers={args.workers} must be >= 1", file=sys.stderr)
        return 2
    try:
        return evaluate_unseen(Path(args.run), workers=args.workers)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
