"""WebWalkerQA (Wu et al., "WebWalker: Benchmarking LLMs in Web Traversal", ACL 2025;
https://huggingface.co/datasets/callanwu/WebWalkerQA, Apache-2.0): loader and scorer (docs/benchmarks.md).

Data: the Hub ``main`` split schema, one JSON object a line: ``question``, ``answer``,
``root_url``, ``info`` = {``domain``, ``lang``, ``source_website``, ``golden_path``, ``type``,
``difficulty_level``}. Splits: ``"main"`` (all 680 rows, ``<data_dir>/webwalkerqa/webwalkerqa_main.jsonl``)
and ``"sample24"`` (4 rows per type × difficulty cell, ``webwalkerqa_sample24.jsonl``). The Hub
rows have no id: ``task_id`` is the 0-based row number in the ``main`` file (``sample24`` rows
carry it as ``index``), so a task has the same id in both splits. ``path=`` loads another file in
the same schema.

``Task.metadata`` holds ``type``, ``difficulty_level``, ``domain``, ``lang``, ``root_url`` (where
the agent starts), ``source_website`` and ``golden_path``; accuracy is reported overall and in the
six type × difficulty cells by :func:`benchmarks.scoring.webwalkerqa_breakdown`.

Scoring: WebWalker grades with LangChain's ``cot_qa`` LLM evaluator. We try the normalised exact
match first (it only ever says yes for a verbatim answer), then the configured judge with the
``webwalkerqa`` prompt (see ``benchmarks.judges``). With the offline ``exact`` default, anything
but the reference answer is incorrect, so offline numbers are a lower bound.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from benchmarks.base import Benchmark, BenchmarkDataError, BenchmarkDataMissing, Task, read_jsonl
from benchmarks.registry import register_benchmark
from benchmarks.scoring import WEBWALKERQA_DIFFICULTIES, WEBWALKERQA_TYPES
from harness.world.schemas import START_MARKER

SPLIT_FILES = {"main": "webwalkerqa_main.jsonl", "sample24": "webwalkerqa_sample24.jsonl"}


def read_webwalkerqa(path: Path) -> list[Task]:
    """Parse a WebWalkerQA JSONL file (Hub schema) into tasks; errors name file and line."""
    if not path.is_file():
        raise BenchmarkDataMissing("webwalkerqa", f"{path} not found (see ../shared/data/README.md)")
    tasks: list[Task] = []
    seen: set[str] = set()
    for row_number, (lineno, row) in enumerate(read_jsonl(path, "a WebWalkerQA row")):
        info = row.get("info")
        missing = [k for k in ("question", "answer", "root_url") if not isinstance(row.get(k), str)]
        if not isinstance(info, dict):
            missing.append("info")
        else:
            missing += [f"info.{k}" for k in ("type", "difficulty_level") if not isinstance(info.get(k), str)]
        if missing:
            raise BenchmarkDataError(path, lineno, f"row lacks {', '.join(missing)} (Hub schema expected)")
        if info["type"] not in WEBWALKERQA_TYPES:
            raise BenchmarkDataError(path, lineno, f"info.type {info['type']!r} not in {WEBWALKERQA_TYPES}")
        if info["difficulty_level"] not in WEBWALKERQA_DIFFICULTIES:
            raise BenchmarkDataError(path, lineno, f"info.difficulty_level {info['difficulty_level']!r} "
                                                   f"not in {WEBWALKERQA_DIFFICULTIES}")
        index = row.get("index", row_number)
        if isinstance(index, bool) or not isinstance(index, int):
            raise BenchmarkDataError(path, lineno, f"index must be an int, got {index!r}")
        task_id = str(index)
        if task_id in seen:
            raise BenchmarkDataError(path, lineno, f"duplicate task id {task_id}")
        seen.add(task_id)
        meta = {"type": info["type"], "difficulty_level": info["difficulty_level"],
                "domain": info.get("domain"), "lang": info.get("lang"), "root_url": row["root_url"],
                "source_website": info.get("source_website"), "golden_path": info.get("golden_path")}
        tasks.append(Task(task_id=task_id, question=row["question"], gold=row["answer"], metadata=meta))
    return tasks


@register_benchmark
class WebWalkerQA(Benchmark):
    """WebWalkerQA ``main`` (680) / ``sample24``; option ``path`` for another file."""

    name = "webwalkerqa"
    version = "main-680"
    judge_rule = "webwalkerqa"

    def __init__(self, *, path: str | os.PathLike[str] | None = None, **options: Any):
        super().__init__(**options)
        self.path = Path(path) if path is not None else None

    def prompt(self, task: Task) -> str:
        """The question and the website the walk starts from (the task's ``root_url``)."""
        return f"{task.question}{START_MARKER}{task.metadata['root_url']}"

    def data_files(self, split: str | None = None) -> list[Path]:
        split = split or "main"
        if self.path is not None or split not in SPLIT_FILES:
            return []
        return [self.data_dir / "webwalkerqa" / SPLIT_FILES[split]]

    def load(self, split: str | None = None, limit: int | None = None) -> list[Task]:
        split = split or "main"
        if self.path is None and split not in SPLIT_FILES:
            raise ValueError(f"webwalkerqa: unknown split {split!r}; use one of {sorted(SPLIT_FILES)}")
        limit = self._check_limit(limit)
        path = self.path or self.data_dir / "webwalkerqa" / SPLIT_FILES[split]
        tasks = read_webwalkerqa(path)
        return tasks if limit is None else tasks[:limit]
