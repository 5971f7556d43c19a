"""The prepared task set of a run: written once before the roles start, read by every role (docs/training.md, docs/world.md).

``python -m harness train`` prepares it into ``<run>/tasks/`` before it starts anything else; by hand (the
two-node setup of docs/training.md)::

    python -m harness.role.tasks --config baselines/configs/paper/mgrpo_stage1.yaml --out runs/mgrpo-stage1/tasks

and each role reads it (``python -m harness.role ... --tasks DIR``, default ``<run-dir>/tasks``). Preparing
is what each role used to do at start-up: generate the world, its tasks (each verified by the scripted
expert's gold episode), select them (``tasks.benchmarks``, ``split``, ``max_hops``, ``templates``), apply the
stage-2 hard filter (``tasks.hard_filter``: a folder written by ``python -m harness filter``) and ``tasks.limit``, and take the first ``eval.n_tasks``
held-out tasks per style for evaluation. The order is kept exactly.

Layout of the folder:

* ``train.jsonl``: the training tasks in selection order, one task object per line;
* ``eval.jsonl``: the evaluation tasks, in order;
* ``taskset.json`` (written last, atomically: a folder without it is not a task set): ``format``, the world
  (``seed``, ``size`` and a fingerprint of its generated pages), the ``tasks`` config section and
  ``eval_n_tasks`` it was selected with, counts, each file's sha256 and the seconds preparing took.

A role refuses a task set whose world or selection differs from its config (:class:`TaskSetError`), and one
whose files do not match their sha256. ``--resume`` reuses the run's task set; the launcher refuses to resume
when the config or the world the current code generates no longer matches it (:func:`reuse_run_tasks`).

Deliberate decisions: JSON lines, not an Arrow (``datasets``) table: the three task styles have different
fields, which a table would merge into one schema with nulls, so a task would not read back as written. The
world itself is not stored: a role regenerates it from its seed for the search index (cheap, measured in
docs/training.md), and the world fingerprint makes sure that world is the one the tasks were made on.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config import ConfigError, to_dict
from harness.records import write_json_atomic
from harness.role.common import load_role_config
from harness.train_config import TrainConfig
from harness.world.generator import generate_world
from harness.world.schemas import task_id
from harness.world.tasks import TaskConfig, generate_tasks, select_tasks

#: Written into ``taskset.json``; a reader refuses any other.
TASKSET_FORMAT = "mgrpo-taskset/1"
META_FILE = "taskset.json"
TRAIN_FILE = "train.jsonl"
EVAL_FILE = "eval.jsonl"


class TaskSetError(ConfigError):
    """A task set is missing, incomplete, or was prepared for another world or task selection."""


@dataclass
class RunTasks:
    """The tasks of a run: ``train`` (selection order) and ``evals``; ``meta`` is ``taskset.json``."""

    train: list[dict[str, Any]]
    evals: list[dict[str, Any]]
    meta: dict[str, Any] = field(default_factory=dict)

    def by_id(self) -> dict[str, dict[str, Any]]:
        """The training tasks by task id (the planner's dataset is their sorted ids)."""
        return {task_key(t): t for t in self.train}


def task_key(task: dict[str, Any]) -> str:
    return task_id(task)


# ------------------------------------------------------------------------------ identity
def selection(cfg: TrainConfig) -> dict[str, Any]:
    """What decides which tasks a run gets, in the order they come: compared on every read."""
    return {"world": {"seed": cfg.world.seed, "size": cfg.world.size}, "tasks": to_dict(cfg.tasks),
            "eval_n_tasks": cfg.eval.n_tasks}


def world_fingerprint(world: Any) -> str:
    """sha256 of the world's pages (path, title, html): the same seed and size with changed generator code
    gives another fingerprint."""
    h = hashlib.sha256()
    for path in sorted(world.pages):
        page = world.pages[path]
        for part in (path, page.title, page.html):
            h.update(part.encode())
            h.update(b"\0")
    return h.hexdigest()


def _differences(a: Any, b: Any, where: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b), key=str):
            out += _differences(a.get(key), b.get(key), f"{where}.{key}" if where else str(key))
        return out
    return [] if a == b else [f"{where}: {a!r} in the task set, {b!r} in the config"]


def check_selection(meta: dict[str, Any], cfg: TrainConfig, where: Path) -> None:
    """:class:`TaskSetError` naming each key on which the task set and the config disagree."""
    diff = _differences({k: meta.get(k) for k in ("world", "tasks", "eval_n_tasks")}, selection(cfg))
    diff = [d for d in diff if not d.startswith("world.fingerprint")]
    if diff:
        raise TaskSetError(f"task set {where} was prepared for another world or task selection than this config: "
                           + "; ".join(diff) + ". Use the run's own config (its config.yaml), or prepare the task "
                           "set again for this config in a new run folder")


def _check_enough(train: list[dict[str, Any]], cfg: TrainConfig) -> None:
    if len(train) < cfg.planner_groups:
        raise ConfigError(
            f"only {len(train)} training tasks are left after filtering, fewer than planner.groups_per_step="
            f"{cfg.planner_groups}; raise tasks.n_train or relax tasks.max_hops / tasks.hard_filter_*")


# ------------------------------------------------------------------------------ generation
def candidate_tasks(cfg: TrainConfig) -> tuple[Any, list[dict[str, Any]], list[dict[str, Any]]]:
    """``(world, training candidates, evaluation tasks)`` as the config selects them, before the hard filter
    and ``tasks.limit`` (deterministic per world seed; every task verified by the scripted expert's gold
    episode). The hard filter (``python -m harness filter``) scores exactly these candidates."""
    world = generate_world(seed=cfg.world.seed, size=cfg.world.size)
    taskset = generate_tasks(world, TaskConfig(n_train=cfg.tasks.n_train, n_test=cfg.tasks.n_test,
                                               test_fraction=cfg.tasks.test_fraction))
    other = "test" if cfg.tasks.split == "train" else "train"

    def selected(split: str) -> list[dict[str, Any]]:
        tasks = [t for b in cfg.tasks.benchmarks for t in taskset.tasks.get((b, split), [])]
        return select_tasks(tasks, max_hops=cfg.tasks.max_hops, templates=cfg.tasks.templates)

    # the evaluation tasks follow the same selection (the held-out tasks of the trained distribution)
    evals = [t for b in cfg.tasks.benchmarks for t in select_tasks(
        taskset.tasks.get((b, other), []), max_hops=cfg.tasks.max_hops, templates=cfg.tasks.templates)[: cfg.eval.n_tasks]]
    return world, selected(cfg.tasks.split), evals


def generate_run_tasks(cfg: TrainConfig) -> RunTasks:
    """(training tasks, evaluation tasks) as the config selects them (deterministic per world seed), with
    the world fingerprint in ``meta``; generates the world and verifies every task with the scripted expert."""
    t0 = time.perf_counter()
    world, train, evals = candidate_tasks(cfg)
    fingerprint = world_fingerprint(world)
    if cfg.tasks.hard_filter:
        filtered = read_filter(Path(cfg.tasks.hard_filter), cfg, fingerprint)
        train = hard_filter(train, filtered, cfg.tasks.hard_filter_max_success, Path(cfg.tasks.hard_filter))
    if cfg.tasks.limit is not None:
        train = train[: cfg.tasks.limit]
    _check_enough(train, cfg)
    meta = selection(cfg)
    meta["world"]["fingerprint"] = fingerprint
    meta["prepare_s"] = round(time.perf_counter() - t0, 3)
    return RunTasks(train, evals, meta)


# ------------------------------------------------------------------------------ the stage-2 hard filter
#: Written into ``filter.json`` by ``python -m harness filter``; a reader refuses any other.
FILTER_FORMAT = "mgrpo-filter/1"
FILTER_META = "filter.json"
FILTER_FILE = "filter.jsonl"
#: Task-section fields that do not change which candidates a filter scores.
_NOT_CANDIDATE_FIELDS = ("hard_filter", "hard_filter_max_success", "limit")


def filter_selection(cfg: TrainConfig) -> dict[str, Any]:
    """What decides a filter's candidate tasks: the world and the task selection without the filter's own
    fields and ``limit``. Every stage-2 arm that reads one filter must select the same candidates."""
    tasks = {k: v for k, v in to_dict(cfg.tasks).items() if k not in _NOT_CANDIDATE_FIELDS}
    return {"world": {"seed": cfg.world.seed, "size": cfg.world.size}, "tasks": tasks}


def read_filter(filter_dir: Path, cfg: TrainConfig, fingerprint: str) -> dict[str, float]:
    """Success rate per candidate task id from a filter folder (``python -m harness filter``), checked
    against ``cfg``'s candidate selection and the world (``fingerprint``): :class:`TaskSetError` naming the
    reason when the filter was written for another world, selection or filter version."""
    where = f"tasks.hard_filter={filter_dir}"
    try:
        meta = json.loads((filter_dir / FILTER_META).read_text())
    except FileNotFoundError:
        raise TaskSetError(f"{where}: no {FILTER_META} there (missing, or the filter was cut before it finished); "
                           f"write it with python -m harness filter --config <this config> --out {filter_dir}") from None
    except (OSError, ValueError) as exc:
        raise TaskSetError(f"{where}: {FILTER_META} is unreadable ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FILTER_FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else None
        raise TaskSetError(f"{where}: written by another filter version (format {got!r}, this code reads "
                           f"{FILTER_FORMAT}); run python -m harness filter again")
    diff = _differences({k: meta.get(k) for k in ("world", "tasks")}, filter_selection(cfg))
    diff = [d.replace("in the task set", "in the filter") for d in diff if not d.startswith("world.fingerprint")]
    if diff:
        raise TaskSetError(f"{where}: the filter scored other candidate tasks than this config selects: "
                           + "; ".join(diff) + ". Every stage-2 arm must select the candidates the filter scored")
    if meta["world"].get("fingerprint") != fingerprint:
        raise TaskSetError(f"{where}: the filter was written on another world than the one this code generates "
                           f"for seed {cfg.world.seed}, size {cfg.world.size} (the world generator changed); "
                           "run the filter again")
    try:
        data = (filter_dir / FILTER_FILE).read_bytes()
    except OSError as exc:
        raise TaskSetError(f"{where}: cannot read {FILTER_FILE} ({exc})") from None
    if hashlib.sha256(data).hexdigest() != meta.get("sha256"):
        raise TaskSetError(f"{where}: {FILTER_FILE} does not match the sha256 in {FILTER_META} (edited or cut); "
                           "run the filter again")
    rates: dict[str, float] = {}
    for n, line in enumerate(data.decode("utf-8").splitlines(), 1):
        try:
            row = json.loads(line)
            rates[str(row["task_id"])] = float(row["success_rate"])
        except (ValueError, KeyError, TypeError) as exc:
            raise TaskSetError(f"{where}: {FILTER_FILE} line {n} is not a filter row ({exc})") from None
    return rates


def hard_filter(tasks: list[dict[str, Any]], rates: dict[str, float], max_success: float,
                filter_dir: Path) -> list[dict[str, Any]]:
    """Paper §5 stage 2: keep the candidate tasks the filtering system solved in at most ``max_success`` of
    its attempts (in their order). Every candidate must have been scored."""
    missing = [task_key(t) for t in tasks if task_key(t) not in rates]
    if missing:
        raise TaskSetError(f"tasks.hard_filter={filter_dir}: {len(missing)} candidate tasks were never scored by "
                           f"the filter (first: {missing[0]}); run the filter again for this config")
    return [t for t in tasks if rates[task_key(t)] <= max_success]


# ------------------------------------------------------------------------------ files
def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    """``rows`` as JSON lines, written to a temporary file and renamed (a reader never sees half a file)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def write_run_tasks(out_dir: Path, tasks: RunTasks) -> dict[str, Any]:
    """Write the task set into ``out_dir`` (``taskset.json`` last, so a cut write is no task set); its meta."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / META_FILE).unlink(missing_ok=True)  # replaced last: until then the folder is no task set
    write_jsonl(out_dir / TRAIN_FILE, tasks.train)
    write_jsonl(out_dir / EVAL_FILE, tasks.evals)
    meta = {"format": TASKSET_FORMAT, **tasks.meta, "n_train": len(tasks.train), "n_eval": len(tasks.evals),
            "files": {name: sha256_of(out_dir / name) for name in (TRAIN_FILE, EVAL_FILE)},
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    write_json_atomic(out_dir / META_FILE, meta)
    tasks.meta = meta
    return meta


def read_meta(task_dir: Path) -> dict[str, Any] | None:
    """``taskset.json`` of ``task_dir``; None when there is none (never prepared, or the write was cut)."""
    try:
        meta = json.loads((task_dir / META_FILE).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise TaskSetError(f"task set {task_dir}: {META_FILE} is unreadable ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != TASKSET_FORMAT:
        raise TaskSetError(f"task set {task_dir}: {META_FILE} is not a {TASKSET_FORMAT} task set "
                           f"(format {meta.get('format') if isinstance(meta, dict) else None!r})")
    return meta


def read_run_tasks(task_dir: Path, cfg: TrainConfig) -> RunTasks:
    """The prepared task set in ``task_dir``, checked against ``cfg`` (:class:`TaskSetError` otherwise)."""
    meta = read_meta(task_dir)
    if meta is None:
        raise TaskSetError(
            f"no prepared task set in {task_dir} ({META_FILE} missing). python -m harness train writes it before "
            f"it starts the roles; for a role started by hand prepare it first: python -m harness.role.tasks "
            f"--config <run>/config.yaml --out {task_dir}")
    check_selection(meta, cfg, task_dir)
    rows: dict[str, list[dict[str, Any]]] = {}
    for name in (TRAIN_FILE, EVAL_FILE):
        path = task_dir / name
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise TaskSetError(f"task set {task_dir}: cannot read {name} ({exc})") from None
        if hashlib.sha256(data).hexdigest() != meta.get("files", {}).get(name):
            raise TaskSetError(f"task set {task_dir}: {name} does not match the sha256 in {META_FILE} (edited or "
                               "cut after it was prepared); prepare the task set again")
        rows[name] = [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]
    _check_enough(rows[TRAIN_FILE], cfg)
    return RunTasks(rows[TRAIN_FILE], rows[EVAL_FILE], meta)


def reuse_run_tasks(task_dir: Path, cfg: TrainConfig) -> RunTasks | None:
    """``--resume``: the run's task set, or None when it has none (made before task sets existed, or killed
    while preparing: prepare it then). :class:`TaskSetError` when the config no longer selects the same tasks
    or the current code generates another world for its seed and size: the roles would train or be judged on
    other tasks or pages."""
    meta = read_meta(task_dir)
    if meta is None:
        return None
    check_selection(meta, cfg, task_dir)

    now = world_fingerprint(generate_world(seed=cfg.world.seed, size=cfg.world.size))
    if now != meta["world"].get("fingerprint"):
        raise TaskSetError(
            f"task set {task_dir} was prepared on another world than the one this code generates for world seed "
            f"{cfg.world.seed}, size {cfg.world.size} (page fingerprint {str(meta['world'].get('fingerprint'))[:12]} "
            f"vs {now[:12]}): the world generator changed since the run started, so its tasks no longer match the "
            "served pages. Resume with the code the run was made with (provenance.json names the commit) or start "
            "a new run")
    return read_run_tasks(task_dir, cfg)


# ------------------------------------------------------------------------------ command line
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.role.tasks",
                                 description="Prepare a run's task set (what python -m harness train writes to "
                                             "<run>/tasks before it starts the roles).")
    ap.add_argument("--config", required=True, help="run config YAML (the roles' config, e.g. <run>/config.yaml)")
    ap.add_argument("--out", required=True, help="task set folder (the roles' --tasks; default there <run-dir>/tasks)")
    ap.add_argument("overrides", nargs="*", help="key.path=value config overrides")
    args = ap.parse_args(argv)

    try:
        cfg = load_role_config(args.config, args.overrides)
        tasks = generate_run_tasks(cfg)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    write_run_tasks(Path(args.out), tasks)
    print(f"wrote {args.out}: {len(tasks.train)} training and {len(tasks.evals)} evaluation tasks "
          f"(world seed {cfg.world.seed}, size {cfg.world.size}; {tasks.meta['prepare_s']:.1f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
