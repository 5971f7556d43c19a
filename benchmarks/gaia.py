"""GAIA (Mialon et al., 2023; https://huggingface.co/datasets/gaia-benchmark/GAIA): loader and
the official scorer (docs/benchmarks.md).

Scorer: :func:`question_scorer` is the GAIA leaderboard's ``question_scorer`` (the ``scorer.py``
of the ``gaia-benchmark/leaderboard`` Space), rule for rule:

* a ground truth that ``float()`` accepts is a number: the model answer has ``$ % ,`` removed
  and is ``float()``-ed (``inf`` when that fails) and compared with ``==``;
* a ground truth containing ``,`` or ``;`` is a list: both sides split on ``[,;]``; different
  lengths are wrong (with a ``UserWarning``); elements compare as numbers when the ground-truth
  element is a number, else as strings with whitespace removed and lowercased (punctuation kept);
* otherwise both strings have all whitespace and all ``string.punctuation`` removed and are
  lowercased; ``None`` as a model answer becomes ``"None"``.

Deviation: the official file ``print``s a line per comparison; here those lines go to
``logging`` at DEBUG level (without the answer text), so scoring writes nothing to stdout.
Return values are identical; ``../shared/data/gaia/gaia_scorer_cases.jsonl`` pins them.

Data (the GAIA card asks not to reshare the data in crawlable form; it is never committed):

* ``snapshot=PATH`` (or ``$MGRPO_GAIA_SNAPSHOT``): a local snapshot, either a directory laid out
  like the Hub repo (``2023/<split>/metadata.jsonl`` or ``metadata.parquet``, attachments beside
  it) or a single ``metadata.jsonl`` / ``.parquet`` file; ``attachments_dir=`` says where the
  ``file_path`` / ``file_name`` attachments live when it is not the snapshot directory;
* otherwise the gated Hub dataset ``datasets.load_dataset("gaia-benchmark/GAIA", "2023_all",
  token=$HF_TOKEN)``; with ``HF_HUB_OFFLINE=1``/``HF_DATASETS_OFFLINE=1`` or no ``HF_TOKEN`` it
  raises :class:`BenchmarkDataMissing` saying what to set.

``subset="text103"`` keeps the 103 text-only validation tasks listed in
``<data_dir>/gaia/gaia_text103_task_ids.txt`` (GAIA-Text-103 of WebThinker, WebDancer, ...).
``Level`` becomes ``metadata["level"]`` (int); attachments become absolute paths in
``Task.attachments``. An llm judge (``judge="llm"``) is consulted only when the official scorer
says no, for free-form answers; the default ``exact`` keeps the official numbers.
"""

from __future__ import annotations

import logging
import os
import re
import string
import warnings
from pathlib import Path
from typing import Any, ClassVar, Iterable

from benchmarks.attachments import attachment_text
from benchmarks.base import Benchmark, BenchmarkDataError, BenchmarkDataMissing, Task, Verdict, read_jsonl
from benchmarks.registry import register_benchmark
from harness.world.schemas import ATTACHMENT_MARKER

log = logging.getLogger(__name__)

HUB_DATASET = "gaia-benchmark/GAIA"
HUB_CONFIG = "2023_all"
SNAPSHOT_ENV = "MGRPO_GAIA_SNAPSHOT"
TEXT103_FILE = "gaia_text103_task_ids.txt"
SPLITS = ("validation", "test")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


# ---- the official scorer --------------------------------------------------------------------
def normalize_number_str(number_str: str) -> float:
    for char in ["$", "%", ","]:
        number_str = number_str.replace(char, "")
    try:
        return float(number_str)
    except ValueError:
        log.debug("String cannot be normalized to number str.")
        return float("inf")


def split_string(s: str, char_list: list[str] | None = None) -> list[str]:
    char_list = [",", ";"] if char_list is None else char_list
    pattern = f"[{''.join(char_list)}]"
    return re.split(pattern, s)


def normalize_str(input_str: str, remove_punct: bool = True) -> str:
    no_spaces = re.sub(r"\s", "", input_str)
    if remove_punct:
        translator = str.maketrans("", "", string.punctuation)
        return no_spaces.lower().translate(translator)
    return no_spaces.lower()


def _is_float(element: Any) -> bool:
    try:
        float(element)
        return True
    except ValueError:
        return False


def question_scorer(model_answer: str, ground_truth: str) -> bool:
    """The GAIA leaderboard's scorer (see the module docstring)."""
    if model_answer is None:
        model_answer = "None"

    if _is_float(ground_truth):
        log.debug("Evaluating model answer as a number.")
        return normalize_number_str(model_answer) == float(ground_truth)

    if any(char in ground_truth for char in [",", ";"]):
        log.debug("Evaluating model answer as a comma separated list.")
        gt_elems = split_string(ground_truth)
        ma_elems = split_string(model_answer)
        if len(gt_elems) != len(ma_elems):
            warnings.warn("Answer lists have different lengths, returning False.", UserWarning)
            return False
        comparisons = []
        for ma_elem, gt_elem in zip(ma_elems, gt_elems):
            if _is_float(gt_elem):
                comparisons.append(normalize_number_str(ma_elem) == float(gt_elem))
            else:
                comparisons.append(normalize_str(ma_elem, remove_punct=False)
                                   == normalize_str(gt_elem, remove_punct=False))
        return all(comparisons)

    log.debug("Evaluating model answer as a string.")
    return normalize_str(model_answer) == normalize_str(ground_truth)


def scorer_rule(prediction: str, gold: str) -> tuple[bool, str]:
    """:func:`question_scorer` as a :meth:`Benchmark._rule <benchmarks.base.Benchmark._rule>`:
    ``(correct, "list_length_mismatch" | "no_match")``, the scorer's length warning caught."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ok = question_scorer(prediction, gold)
    return ok, "list_length_mismatch" if caught else "no_match"


class GaiaScoring:
    """Mixin of the benchmarks scored like GAIA (``gaia`` and its twin ``local_gaia``): the official
    scorer, then the configured judge with the ``gaia`` prompt only if it is not ``exact``."""

    scorer: ClassVar[str] = "gaia_scorer"
    judge_rule: ClassVar[str] = "gaia"
    _rule = staticmethod(scorer_rule)


# ---- data -----------------------------------------------------------------------------------
def read_text103_ids(path: Path) -> list[str]:
    """The task ids of GAIA-Text-103, one UUID a line (``#`` comments and blanks ignored)."""
    if not path.is_file():
        raise BenchmarkDataMissing("gaia", f"text-only id list {path} not found (see ../shared/data/README.md)")
    ids: list[str] = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if not _UUID.match(line):
            raise BenchmarkDataError(path, lineno, f"not a GAIA task id (UUID): {line[:60]!r}")
        ids.append(line)
    if len(set(ids)) != len(ids):
        raise BenchmarkDataError(path, None, "duplicate task ids")
    return ids


def _read_parquet(path: Path) -> Iterable[tuple[int, dict[str, Any]]]:
    import pandas as pd

    try:
        frame = pd.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises many types for a bad file
        raise BenchmarkDataError(path, None, f"unreadable parquet ({type(exc).__name__}: {exc})") from None
    for i, row in enumerate(frame.to_dict(orient="records"), 1):
        yield i, row  # "line" = 1-based row number


@register_benchmark
class Gaia(GaiaScoring, Benchmark):
    """GAIA 2023 (validation/test); options ``snapshot``, ``attachments_dir``, ``subset``,
    ``config``, ``levels`` (e.g. ``(1, 2)``)."""

    name = "gaia"
    version = "2023"

    def __init__(self, *, snapshot: str | os.PathLike[str] | None = None,
                 attachments_dir: str | os.PathLike[str] | None = None, subset: str | None = None,
                 config: str = HUB_CONFIG, levels: Iterable[int] | None = None, **options: Any):
        super().__init__(**options)
        if subset not in (None, "all", "text103"):
            raise ValueError(f"gaia: unknown subset {subset!r}; use None, 'all' or 'text103'")
        snap = snapshot if snapshot is not None else os.environ.get(SNAPSHOT_ENV) or None
        self.snapshot = Path(snap).expanduser() if snap else None
        self.attachments_dir = Path(attachments_dir).expanduser() if attachments_dir else None
        self.subset = None if subset == "all" else subset
        self.config = config
        self.levels = None if levels is None else {int(x) for x in levels}

    def prompt(self, task: Task) -> str:
        """The question, then each attachment as ``\nAttached file <name>:\n<text>`` (:mod:`benchmarks.attachments`)."""
        text = task.question
        for path in task.attachments:
            text += f"\n{ATTACHMENT_MARKER}{Path(path).name}:\n{attachment_text(Path(path))}"  # as local_gaia's
        return text

    # -- sources --------------------------------------------------------------------------------
    def _local_rows(self, split: str) -> tuple[Path, list[tuple[int, dict[str, Any]]], list[Path]]:
        """Rows of the local snapshot and the directories to look for attachments in."""
        snap = self.snapshot
        assert snap is not None
        if not snap.exists():
            raise BenchmarkDataMissing("gaia", f"snapshot {snap} does not exist (option snapshot= / ${SNAPSHOT_ENV})")
        if snap.is_file():
            meta = snap
            roots = [snap.parent]
        else:
            candidates = [snap / d / f"metadata.{ext}" for d in (f"2023/{split}", split, ".")
                          for ext in ("jsonl", "parquet")]
            candidates += sorted((snap / "2023" / split).glob("*.parquet")) if (snap / "2023" / split).is_dir() else []
            meta = next((c for c in candidates if c.is_file()), None)
            if meta is None:
                raise BenchmarkDataMissing(
                    "gaia", f"no metadata for split {split!r} in snapshot {snap} "
                            f"(looked for 2023/{split}/metadata.jsonl|parquet, {split}/metadata.*, metadata.*)")
            roots = [snap, meta.parent]
        if self.attachments_dir is not None:
            roots.insert(0, self.attachments_dir)
        rows = _read_parquet(meta) if meta.suffix == ".parquet" else read_jsonl(meta, "a GAIA row")
        return meta, list(rows), roots

    def _hub_rows(self, split: str) -> tuple[str, list[tuple[int, dict[str, Any]]], list[Path]]:
        how = (f"or use a local snapshot: get_benchmark('gaia', snapshot=DIR) / ${SNAPSHOT_ENV}=DIR "
               f"(a copy of the {HUB_DATASET} repo)")
        if _truthy(os.environ.get("HF_HUB_OFFLINE")) or _truthy(os.environ.get("HF_DATASETS_OFFLINE")):
            raise BenchmarkDataMissing(
                "gaia", f"{HUB_DATASET} is gated and HF_HUB_OFFLINE/HF_DATASETS_OFFLINE is set; "
                        f"unset it (HF_HUB_OFFLINE=0) and set HF_TOKEN, {how}")
        token = os.environ.get("HF_TOKEN")
        if not token:
            raise BenchmarkDataMissing(
                "gaia", f"{HUB_DATASET} is gated: set HF_TOKEN to a token of an account that accepted "
                        f"the dataset's terms on https://huggingface.co/datasets/{HUB_DATASET}, {how}")
        import datasets

        try:
            data = datasets.load_dataset(HUB_DATASET, self.config, split=split, token=token)
        except Exception as exc:  # noqa: BLE001 - hub errors come in many types
            message = str(exc).replace(token, "***")
            raise BenchmarkDataMissing(
                "gaia", f"loading {HUB_DATASET} ({self.config}, {split}) failed: {type(exc).__name__}: "
                        f"{message[:300]}. Check that HF_TOKEN is valid and its account accepted the "
                        f"dataset's terms, {how}") from None
        return f"hf://{HUB_DATASET}/{self.config}/{split}", list(enumerate(data, 1)), []

    # -- load -----------------------------------------------------------------------------------
    def data_files(self, split: str | None = None) -> list[Path]:
        # The questions come from the snapshot or the Hub; the data folder holds only the text-only id list.
        return [self.data_dir / "gaia" / TEXT103_FILE] if self.subset == "text103" else []

    def load(self, split: str | None = None, limit: int | None = None) -> list[Task]:
        split = split or "validation"
        if split not in SPLITS:
            raise ValueError(f"gaia: unknown split {split!r}; use one of {SPLITS}")
        limit = self._check_limit(limit)
        if self.snapshot is not None:
            source, rows, roots = self._local_rows(split)
        else:
            source, rows, roots = self._hub_rows(split)
        keep: list[str] | None = None
        if self.subset == "text103":
            keep = read_text103_ids(self.data_dir / "gaia" / TEXT103_FILE)
        wanted = set(keep) if keep is not None else None
        tasks: list[Task] = []
        for lineno, row in rows:
            task = self._task(row, source, lineno, roots, split)
            if wanted is not None and task.task_id not in wanted:
                continue
            if self.levels is not None and task.metadata["level"] not in self.levels:
                continue
            tasks.append(task)
        if wanted is not None and len(tasks) < len(wanted) and self.levels is None:
            log.warning("gaia text103: %d of the %d listed task ids found in %s", len(tasks), len(wanted), source)
        return tasks if limit is None else tasks[:limit]

    def _task(self, row: dict[str, Any], source: Any, lineno: int, roots: list[Path], split: str) -> Task:
        missing = [k for k in ("task_id", "Question", "Level") if not _present(row.get(k))]
        if split == "validation" and row.get("Final answer") is None:
            missing.append("Final answer")
        if missing:
            raise BenchmarkDataError(source, lineno, f"GAIA row lacks {', '.join(missing)}")
        try:
            level = int(str(row["Level"]).strip())
        except ValueError:
            raise BenchmarkDataError(source, lineno, f"Level is not an integer: {str(row['Level'])[:20]!r}") from None
        gold = str(row.get("Final answer") or "")
        attachments: tuple[str, ...] = ()
        file_name = str(row.get("file_name") or "").strip()
        file_path = str(row.get("file_path") or "").strip()
        if file_name or file_path:
            attachments = (str(self._attachment(file_path, file_name, roots, source, lineno)),)
        meta = {"level": level, "split": split, "file_name": file_name or None,
                "annotator_metadata": row.get("Annotator Metadata")}
        return Task(task_id=str(row["task_id"]).strip(), question=str(row["Question"]), gold=gold,
                    metadata=meta, attachments=attachments)

    @staticmethod
    def _attachment(file_path: str, file_name: str, roots: list[Path], source: Any, lineno: int) -> Path:
        tried: list[Path] = []
        if file_path and Path(file_path).is_absolute():
            tried.append(Path(file_path))
        for root in roots:
            if file_path:
                tried.append(root / file_path)
            if file_name:
                tried.append(root / file_name)
        for path in tried:
            if path.is_file():
                return path.resolve()
        raise BenchmarkDataError(source, lineno, "attachment not found; tried " + ", ".join(map(str, tried))
                                 + " (pass attachments_dir=DIR)")

    # -- score ----------------------------------------------------------------------------------
    def _score_text(self, task: Task, prediction: str) -> Verdict:
        if not task.gold or task.gold == "?":
            return Verdict(False, self.scorer, "no_gold", "this split has no public answers")
        return super()._score_text(task, prediction)


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _present(value: Any) -> bool:
    return value is not None and str(value).strip() != ""
