"""The ``local_*`` twins of the three benchmarks, over the offline web world (docs/world.md, docs/evaluation.md).

``local_gaia``, ``local_xbench`` and ``local_webwalkerqa`` pose the tasks that
:mod:`harness.world.tasks` generates for a world seed, in each benchmark's own schema, and score
them with that benchmark's own rule:

* ``local_gaia``: the official GAIA scorer (:func:`benchmarks.gaia.question_scorer`), then the
  configured judge only if it is not ``exact`` (as :class:`benchmarks.gaia.Gaia`);
* ``local_xbench`` and ``local_webwalkerqa``: normalised exact match
  (:func:`benchmarks.scoring.answers_match`), then the configured judge if it is not ``exact``.

Options (besides ``judge``/``judge_options`` of every benchmark):

* ``world_seed`` (default 0) and ``world_size`` (default ``"default"``, the preset of
  ``python -m harness world``): which world the tasks come from.
* ``tasks_dir`` (or an explicit ``data_dir``): read the task files that
  ``python -m harness world tasks --seed N --out DIR`` wrote (``DIR/<gaia|xbench|webwalkerqa>/
  <split>.jsonl``) instead of generating them in memory. A missing file raises
  :class:`~benchmarks.base.BenchmarkDataMissing` naming the command that writes it. The directory
  must have been written for the same world seed and size (the files do not record them).

Without ``tasks_dir`` the tasks are generated in memory with the default
:class:`~harness.world.tasks.TaskConfig` (the same tasks ``world tasks`` writes by default), once
per process and (seed, size, split) (about 7 s for the default world: the scripted expert verifies
every emitted task). For the train split the test split is not generated: the generator emits
train first from one random stream, so the train tasks are identical either way; the test split
needs the train split (XBench ids count on from it). Both are checked against the full default
generation in ``tests/benchmarks/test_eval_suite.py``.

Splits: ``test`` (default, 50 tasks per benchmark where the world has them) and ``train`` (200);
they share no answer entity (docs/world.md).

``Task`` fields: ``task_id`` is the schema's own id (GAIA ``task_id``, XBench ``id``) or, for
WebWalkerQA rows (which have none), the generator's stable ``gold.uid``; ``question`` is
:func:`harness.world.schemas.task_prompt` of the row (GAIA attachments inlined as text, WebWalkerQA's
``root_url`` appended) with the world's placeholder base URL ``http://world.local``: a runner moves
the row to its live server with :func:`harness.world.tasks.rebase` of ``metadata["world_task"]``
(the raw generated row, gold decomposition included; do not mutate it). ``metadata`` also holds
``level`` (GAIA), ``type``/``difficulty_level``/``root_url`` (WebWalkerQA, so
:func:`benchmarks.scoring.webwalkerqa_breakdown` works) and ``template`` (all).

Deliberate decisions: the local twins are not ``sensitive`` (their text is invented by our
generator, not a published benchmark); records still go through ``record_fields`` like every other
benchmark. ``version`` is ``"1+seed<N>.<size>"`` so records of different worlds never compare as
the same benchmark version.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, ClassVar

from benchmarks.base import Benchmark, BenchmarkDataError, BenchmarkDataMissing, Task
from benchmarks.gaia import GaiaScoring
from benchmarks.registry import register_benchmark
from harness.world.generator import SIZES, WorldConfig, generate_world
from harness.world.schemas import task_id, task_prompt
from harness.world.tasks import TaskConfig, TaskFileError, generate_tasks, load_tasks

SPLITS = ("test", "train")
DEFAULT_WORLD_SIZE = "default"


def _check_world(world_seed: Any, world_size: Any) -> tuple[int, str]:
    if isinstance(world_seed, bool) or not isinstance(world_seed, int) or world_seed < 0:
        raise ValueError(f"world_seed must be an int >= 0, got {world_seed!r}")
    if world_size not in SIZES:
        raise ValueError(f"world_size must be one of {'|'.join(SIZES)}, got {world_size!r}")
    return world_seed, world_size


@functools.lru_cache(maxsize=16)
def generated_tasks(world_seed: int, world_size: str, split: str) -> dict[str, tuple[dict[str, Any], ...]]:
    """``{world benchmark: rows}`` of one split, generated in memory (cached per process)."""
    # The train split comes first in the generator's order, so it does not depend on n_test; the
    # test split does depend on the train split (XBench ids count on from the train tasks).
    cfg = TaskConfig(n_test=0) if split == "train" else TaskConfig()
    taskset = generate_tasks(generate_world(WorldConfig(seed=world_seed, size=world_size)), cfg)
    return {bench: tuple(rows) for (bench, s), rows in taskset.tasks.items() if s == split}


class LocalBenchmark(Benchmark):
    """Base of the ``local_*`` twins: tasks of one world benchmark (``world_benchmark``)."""

    version = "1"
    #: The :data:`harness.world.schemas.BENCHMARKS` name whose rows this twin poses.
    world_benchmark: ClassVar[str] = ""

    def __init__(self, *, world_seed: int = 0, world_size: str = DEFAULT_WORLD_SIZE,
                 tasks_dir: str | os.PathLike[str] | None = None,
                 data_dir: str | os.PathLike[str] | None = None, **options: Any):
        super().__init__(data_dir=data_dir, **options)
        self.world_seed, self.world_size = _check_world(world_seed, world_size)
        source = tasks_dir if tasks_dir is not None else data_dir
        self.tasks_dir = Path(source).expanduser() if source is not None else None
        self.version = f"{type(self).version}+seed{self.world_seed}.{self.world_size}"

    # -- load -----------------------------------------------------------------------------------
    def _rows(self, split: str) -> list[dict[str, Any]]:
        if self.tasks_dir is None:
            return list(generated_tasks(self.world_seed, self.world_size, split).get(self.world_benchmark, ()))
        path = self.tasks_dir / self.world_benchmark / f"{split}.jsonl"
        if not path.is_file():
            raise BenchmarkDataMissing(
                self.name, f"{path} not found; write it with `python -m harness world tasks --seed "
                           f"{self.world_seed} --size {self.world_size} --out {self.tasks_dir}`, or leave "
                           f"tasks_dir/data_dir unset to generate the tasks in memory")
        try:
            rows = load_tasks(str(path))
        except TaskFileError as exc:
            raise BenchmarkDataError(path, None, str(exc)) from None
        for lineno, row in enumerate(rows, 1):
            if not isinstance(row.get("gold"), dict) or "answer" not in row["gold"]:
                raise BenchmarkDataError(path, lineno, "row lacks the generator's 'gold' object (with 'answer')")
        return rows

    def load(self, split: str | None = None, limit: int | None = None) -> list[Task]:
        split = split or "test"
        if split not in SPLITS:
            raise ValueError(f"{self.name}: unknown split {split!r}; use one of {SPLITS}")
        limit = self._check_limit(limit)
        rows = self._rows(split)
        if limit is not None:
            rows = rows[:limit]
        return [self._task(row, split) for row in rows]

    def _task(self, row: dict[str, Any], split: str) -> Task:
        gold = row["gold"]
        meta: dict[str, Any] = {"split": split, "template": gold.get("template"),
                                "world_seed": self.world_seed, "world_size": self.world_size,
                                "world_task": row}
        attachments: tuple[str, ...] = ()
        base_dir = None
        if self.tasks_dir is not None:
            base_dir = str(self.tasks_dir / self.world_benchmark)
            if row.get("file_path"):
                attachments = (str((self.tasks_dir / self.world_benchmark / row["file_path"]).resolve()),)
        meta.update(self._metadata(row))
        return Task(task_id=task_id(row), question=task_prompt(row, base_dir), gold=str(gold["answer"]),
                    metadata=meta, attachments=attachments)

    def _metadata(self, row: dict[str, Any]) -> dict[str, Any]:
        return {}

@register_benchmark
class LocalGaia(GaiaScoring, LocalBenchmark):
    """GAIA-style tasks of the offline world (Levels 1-3 by hops), scored by GAIA's scorer."""

    name = "local_gaia"
    world_benchmark = "gaia"

    def _metadata(self, row: dict[str, Any]) -> dict[str, Any]:
        return {"level": int(row["Level"]), "file_name": row.get("file_name") or None}

@register_benchmark
class LocalXBench(LocalBenchmark):
    """XBench-DeepSearch-style multi-constraint identification tasks of the offline world."""

    name = "local_xbench"
    world_benchmark = "xbench"
    judge_rule = "xbench"


@register_benchmark
class LocalWebWalkerQA(LocalBenchmark):
    """WebWalkerQA-style site-walking tasks of the offline world (single/multi-source, by depth)."""

    name = "local_webwalkerqa"
    world_benchmark = "webwalkerqa"
    judge_rule = "webwalkerqa"

    def _metadata(self, row: dict[str, Any]) -> dict[str, Any]:
        info = row.get("info") or {}
        return {"type": info.get("type"), "difficulty_level": info.get("difficulty_level"),
                "root_url": row.get("root_url"), "golden_path": info.get("golden_path"),
                "source_website": info.get("source_website"), "domain": info.get("domain"),
                "lang": info.get("lang")}
