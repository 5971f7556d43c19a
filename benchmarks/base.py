"""The benchmark contract: ``Task``, ``Verdict``, the ``Benchmark`` base class and its errors.

Implements docs/benchmarks.md ("A benchmark is a small class registered by name with ``name``,
``version``, ``load(split, limit)`` and ``score(task, prediction)``") for the real benchmarks
(GAIA, XBench-DeepSearch, WebWalkerQA) and, later, their ``local_*`` twins from docs/world.md.

Rules every benchmark inherits from :meth:`Benchmark.score` (docs/evaluation.md: "a crash, timeout or
unscorable verdict counts as incorrect and stays in the denominator"):

* a prediction that is not ``str`` (``None``, ``bytes``, ``int`` ...), empty/blank, or longer
  than :data:`MAX_PREDICTION_CHARS` is scored **incorrect** with an ``error`` note; the
  benchmark's own scorer is not called;
* an exception inside a benchmark's scorer or judge is caught and becomes an incorrect
  ``Verdict`` whose ``error`` names the exception. Scoring never raises for a bad prediction.

Data location: ``data_dir`` option, else ``$MGRPO_DATA_DIR``, else ``../shared/data`` next to the
repository root (see ``../shared/data/README.md``). Data that is absent raises
:class:`BenchmarkDataMissing` (the pytest plugin reports it as "not run"); data that is present but
garbled raises :class:`BenchmarkDataError` naming the file and line.

Deliberate choices where the paper is silent:

* ``Task.question`` and ``Task.gold`` are left out of ``repr`` so that a traceback or a log line
  never shows benchmark text (XBench forbids plain text on disk or in logs; the GAIA card asks
  not to reshare its questions).
* ``Benchmark.sensitive`` (True for XBench) tells record writers to store hashes instead of the
  prediction/gold text: :meth:`Benchmark.record_fields` does that.

``Verdict``, the errors, ``sha256_text`` and ``read_jsonl`` are defined in :mod:`benchmarks.core`
(which :mod:`benchmarks.judges` builds on too, so this module imports the judges at module level
without a cycle) and re-exported here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from benchmarks.core import (  # re-exported: part of the contract every benchmark module imports from here
    BenchmarkDataError, BenchmarkDataMissing, BenchmarkError, Verdict, read_jsonl, sha256_text,
)
from benchmarks.judges import Judge, JudgeRequest, get_judge
from benchmarks.scoring import answers_match

# 100k characters: far above any final answer (GAIA answers are a few words, WebWalkerQA a few
# sentences), far below the 10 MB garbage a broken generation loop can produce.
MAX_PREDICTION_CHARS = 100_000

DATA_DIR_ENV = "MGRPO_DATA_DIR"


@dataclass(frozen=True)
class Task:
    """One benchmark question, in memory.

    ``attachments`` are paths of files handed to the agent (GAIA). ``question`` and ``gold`` are
    hidden from ``repr`` (see the module docstring).
    """

    task_id: str
    question: str = field(repr=False)
    gold: str = field(repr=False)
    metadata: dict[str, Any] = field(default_factory=dict)
    attachments: tuple[str, ...] = ()


def default_data_dir() -> Path:
    """``$MGRPO_DATA_DIR`` if set, else ``<repo root>/../shared/data``."""
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return Path(env).expanduser()
    return Path(__file__).resolve().parents[1].parent / "shared" / "data"


def check_prediction(prediction: object) -> tuple[str | None, Verdict | None]:
    """Return ``(text, None)`` for a scorable prediction, else ``(None, incorrect Verdict)``."""
    if not isinstance(prediction, str):
        return None, Verdict(False, "input", "invalid_prediction",
                             f"prediction is not text ({type(prediction).__name__})")
    if not prediction.strip():
        return None, Verdict(False, "input", "empty_prediction", "prediction is empty")
    if len(prediction) > MAX_PREDICTION_CHARS:
        return None, Verdict(False, "input", "prediction_too_long",
                             f"prediction has {len(prediction)} characters "
                             f"(limit {MAX_PREDICTION_CHARS})")
    return prediction, None


class Benchmark:
    """Base class: subclasses set ``name``/``version`` and implement ``load``.

    Scoring: :meth:`score` checks the prediction, then :meth:`_score_text` applies the benchmark's
    own rule (:meth:`_rule`, default the normalised exact match) and, when that says no, the
    configured judge. A benchmark with its own scorer overrides ``_rule`` and ``scorer`` (GAIA),
    one with another procedure overrides ``_score_text``.

    Options common to every benchmark: ``data_dir`` (default :func:`default_data_dir`),
    ``judge`` (a judge name or a ``Judge`` instance; default ``"exact"``) and ``judge_options``
    (keyword arguments for :func:`benchmarks.judges.get_judge`).
    """

    name: ClassVar[str] = ""
    version: ClassVar[str] = ""
    #: Plain text must not reach disk or logs (records store hashes instead).
    sensitive: ClassVar[bool] = False
    #: Which published decision rule an llm judge applies (see ``benchmarks.judges``).
    judge_rule: ClassVar[str] = "generic"
    #: ``Verdict.judge`` when the benchmark's own rule (:meth:`_rule`) decides.
    scorer: ClassVar[str] = "exact"

    def __init__(self, *, data_dir: str | os.PathLike[str] | None = None,
                 judge: Any = "exact", judge_options: dict[str, Any] | None = None):
        self.data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
        if isinstance(judge, Judge):
            self.judge = judge
        else:
            self.judge = get_judge(str(judge), **(judge_options or {}))

    # -- to implement -------------------------------------------------------------------------
    def load(self, split: str | None = None, limit: int | None = None) -> list[Task]:
        raise NotImplementedError

    def data_files(self, split: str | None = None) -> list[Path]:
        """The files under ``data_dir`` that ``load(split)`` reads; ``[]`` when it needs no data folder
        (a local twin, a Hub download, an explicit path option). Lets a caller check a data folder
        up front and name what it should hold (the evaluation suite's ``--data-dir``)."""
        return []

    def prompt(self, task: Task) -> str:
        """The user message that poses ``task`` to an agent with real-web tools (docs/evaluation.md): the
        question plus what the benchmark hands over with it (GAIA: its attachment as text; WebWalkerQA:
        the website to start from), phrased as the offline twins phrase it
        (:func:`harness.world.schemas.task_prompt`), so a model sees the form it trained on."""
        return task.question

    # -- scoring: the defaults a benchmark with its own scorer overrides ----------------------
    @staticmethod
    def _rule(prediction: str, gold: str) -> tuple[bool, str]:
        """The benchmark's own answer rule: ``(correct, verdict label when not)``.

        Default: :func:`benchmarks.scoring.answers_match` (normalised exact match), the rule of the
        benchmarks whose published scorer is an LLM judge (XBench-DeepSearch, WebWalkerQA, their
        local twins); GAIA and ``local_gaia`` use GAIA's official scorer instead.
        """
        return answers_match(prediction, gold), "no_match"

    def _score_text(self, task: Task, prediction: str) -> Verdict:
        """Score a valid text prediction (only :meth:`score` calls it).

        docs/benchmarks.md: the benchmark's own rule first; when it says no, the configured judge, unless
        that is ``exact`` (it would only repeat the rule), whose verdict is then "not correct".
        """
        ok, label = self._rule(prediction, task.gold)
        if ok:
            return Verdict(True, self.scorer, "match")
        if self.judge.name != "exact":
            return self.judge.judge(self._judge_request(task, prediction))
        return Verdict(False, self.scorer, label)

    # -- shared behaviour ---------------------------------------------------------------------
    def score(self, task: Task, prediction: object) -> Verdict:
        """Score ``prediction`` for ``task``; never raises for a bad prediction or judge failure."""
        text, rejected = check_prediction(prediction)
        if rejected is not None:
            return rejected
        try:
            return self._score_text(task, text)  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001 - docs/evaluation.md: unscorable counts as incorrect
            return Verdict(False, "error", "scoring_failed",
                           f"{type(exc).__name__} while scoring task {task.task_id}: "
                           f"{exc if not self.sensitive else '(message withheld: sensitive)'}")

    def _judge_request(self, task: Task, prediction: str) -> JudgeRequest:
        return JudgeRequest(benchmark=self.name, task_id=task.task_id, question=task.question,
                            gold=task.gold, prediction=prediction, rule=self.judge_rule,
                            sensitive=self.sensitive)

    def record_fields(self, task: Task, prediction: object) -> dict[str, Any]:
        """``prediction``/``gold`` for a task record (docs/report.md); hashed for a sensitive benchmark."""
        pred = prediction if isinstance(prediction, str) else None
        if not self.sensitive:
            return {"prediction": pred, "gold": task.gold}
        return {"prediction": None if pred is None else "sha256:" + sha256_text(pred),
                "gold": "sha256:" + sha256_text(task.gold)}

    @staticmethod
    def _check_limit(limit: int | None) -> int | None:
        if limit is None:
            return None
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ValueError(f"limit must be a non-negative int or None, got {limit!r}")
        return limit

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, version={self.version!r})"
