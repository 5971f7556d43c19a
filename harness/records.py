"""Run records: the JSONL schemas, the run directory layout and safe readers/writers (docs/report.md).

This module is the ONE place that defines what a run writes and what the report reads
(arXiv 2511.13288 reports curves only, so records are the evidence). It is imported by anyone
who writes or reads records and is deliberately stdlib-only (no numpy, no torch), so roles,
benchmarks and the report can all import it cheaply.

Run directory layout (path helpers in :class:`RunPaths`)::

    runs/<run_id>/provenance.json                 write_provenance(): git, versions, config, seeds, host
    runs/<run_id>/status.json                     {"state": "running|completed|failed", ...}
    runs/<run_id>/<role>/metrics.jsonl            one StepRecord per optimizer step of that role
    runs/<run_id>/<role>/checkpoints/
    runs/<run_id>/eval/<step>/<benchmark>.jsonl   one TaskRecord per evaluated task
    runs/<run_id>/store.db                        embedded store (sqlite backend)

Roles are ``planner`` and ``sub`` (docs/training.md); ``single_agent`` runs only write ``planner``.
``<step>`` is the plain decimal optimizer step of the evaluated policy (``eval/25/``); readers
also accept zero-padded names.

Decisions where the paper is silent (documented again in docs/report.md):

- **Run state convention.** ``status.json`` holds ``{"state": ..., "updated": <unix s>, ...}``
  written atomically. ``write_provenance`` marks a run ``running``; :func:`run_status` (a context
  manager) marks it ``completed`` or ``failed`` (with the error). A run without ``status.json``
  is ``unknown``; the report also flags a run whose metrics stop before its siblings' as short.
  The status names its writer (``pid``, ``host``); :func:`read_status` reports a ``running`` run
  whose writer on this host is dead (killed without a word) as ``failed`` (``stale: true``).
- **Sub-calls histogram source.** Step records of the planner role carry an optional
  ``sub_calls_hist``: ``hist[i]`` = number of the step's rollouts that made exactly ``i``
  sub-agent calls (d_k in docs/paper.md). The report pools these for the training histogram and its 0.99
  quantile (the paper's rule for choosing d); when a run has none it falls back to the eval
  task records' ``n_sub_calls``.
- **Unknown keys** in a record are kept in ``extra`` (not refused), so a writer adding a
  diagnostic never breaks old readers; the report ignores ``extra``.
- **Non-finite floats** (a NaN loss is a real collapse signal) are written as Python's JSON does
  (``NaN``); records are meant for Python readers.
- **Schema versions.** ``SCHEMA_VERSION`` is 1. Records without a ``schema`` key or with
  ``schema: 0`` are migrated on read (see :func:`migrate`); a version newer than this code is
  refused with a message naming the file, the line and the version. A version step is for a
  change old records must be rewritten for (a rename, a new meaning); an *optional* field with a
  ``None`` default is added without one: old records read with the default, and older code keeps the
  new key in ``extra`` instead of refusing every new record (a bump would make it refuse them, and
  the version is shared with step, provenance and status documents).
- **Staleness** (issue 17): ``StepRecord.stale_trajectories`` and ``dropped_stale`` (sub role) are optional
  fields too; ``extra`` also holds ``corrected`` and ``max_policy_lag``.
- **Inference runs** (issue 17): ``TaskRecord.inference_run``, ``temperature`` and ``sample_seed`` are
  such optional fields too: an evaluation of ``eval.runs`` independent sampled runs writes one record per
  task and run; old records (None) are one run.
- **Task transcripts** (issue 15): ``TaskRecord.transcript`` is such an optional field (schema 1):
  the evaluated episode's turns in the format of :mod:`harness.transcript` (observations cut to a
  stated size), or None. :func:`to_dict` writes it as the record's last member and leaves it out
  when None; ``read_tasks(path, transcripts=False)`` (the report's tables) does not decode it: a
  line that ends with a transcript member is cut before it (checked: the rest must parse as an
  object and the member must end with the transcript's closing ``format`` key), any other line is
  decoded whole and its transcript dropped.
- **Crash tolerance.** A final line without a trailing newline that does not parse is the
  signature of a writer killed mid-line: readers skip it when ``tolerate_truncated_tail`` (the
  report does, and says so); any other broken line raises :class:`RecordError` naming file and
  line.
- **Concurrent writers** (several processes, pytest-xdist workers) append through
  :func:`append_jsonl`: one ``os.write`` of a whole line under an exclusive ``fcntl.flock``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import fcntl
import importlib.metadata
import json
import os
import platform
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

SCHEMA_VERSION = 1
"""Current version of the step, task, provenance and status schemas."""

RUN_STATES = ("running", "completed", "failed")
ROLES = ("planner", "sub")

PROVENANCE_FILE = "provenance.json"
STATUS_FILE = "status.json"
METRICS_FILE = "metrics.jsonl"
EVAL_DIR = "eval"
#: In-distribution evaluation records (``eval.train_tasks``: training questions, before and after RL), kept apart
#: from the held-out ones so that no held-out table or claim ever mixes them in.
EVAL_TRAIN_DIR = "eval_train"
#: Held-out evaluation on worlds the run never trained on (``eval.unseen``, ``python -m harness eval-unseen``; also
#: ``pytest benchmarks/ --run RUN --world-seed N`` for a world other than the run's), before and after RL: kept apart
#: from the run's own world's records, which the accuracy table and the curves read.
EVAL_UNSEEN_DIR = "eval_unseen"
#: Folder of each evaluation split: ``test`` (held-out tasks of the run's world, every table and claim), ``train``
#: (in-distribution) and ``unseen`` (held-out tasks of other worlds).
SPLIT_DIRS = {"test": EVAL_DIR, "train": EVAL_TRAIN_DIR, "unseen": EVAL_UNSEEN_DIR}

DEFAULT_PACKAGES = (
    "mgrpo-harness", "torch", "transformers", "trl", "accelerate", "datasets", "peft",
    "tokenizers", "vllm", "deepspeed", "numpy", "pandas", "matplotlib", "playwright",
    "redis", "bm25s",
)
"""Packages whose versions provenance records (via importlib.metadata: nothing is imported)."""


class RecordError(ValueError):
    """A record file or line is invalid; the message names the file, the line and the field."""


# --------------------------------------------------------------------------------------------
# Schemas
# --------------------------------------------------------------------------------------------

@dataclass
class StepRecord:
    """One optimizer step of one role (``<role>/metrics.jsonl``), docs/report.md.

    Fields that do not apply to a role (``align_*`` for the planner, ``sub_calls_*`` for the
    sub-agent, ``kl`` without a KL term) are ``None``.
    """

    run_id: str
    trainer: str
    role: str
    seed: int
    step: int
    schema: int = SCHEMA_VERSION
    time: float | None = None
    """Unix time (s) when the step finished."""
    reward_mean: float | None = None
    """Mean reward over the step's trajectories of this role (R_M or R_S, docs/paper.md)."""
    reward_std: float | None = None
    reward_components: dict[str, float] = field(default_factory=dict)
    """Means of the reward's parts, e.g. ``{"format": .., "correct": .., "expert": ..}``."""
    advantage_abs_mean: float | None = None
    frac_zero_std_groups: float | None = None
    """Fraction of groups whose rewards were all equal (advantage 0)."""
    policy_loss: float | None = None
    clip_ratio: float | None = None
    """Fraction of model tokens whose ratio was clipped."""
    entropy: float | None = None
    """Mean token entropy of the policy (nats/token)."""
    grad_norm: float | None = None
    kl: float | None = None
    n_trajectories: int | None = None
    """Trajectories consumed by this step (K per query for the planner, d·K for the sub-agent)."""
    n_model_tokens: int | None = None
    """Model (env_mask = 1) tokens consumed by this step."""
    sub_calls_mean: float | None = None
    sub_calls_p99: float | None = None
    sub_calls_hist: list[int] | None = None
    """``hist[i]`` = rollouts of this step with exactly ``i`` sub-agent calls (planner role)."""
    align_duplicated: int | None = None
    align_dropped: int | None = None
    rollout_s: float | None = None
    train_s: float | None = None
    wait_s: float | None = None
    """Seconds this role waited (for the store, the other role or the sub-agent lock)."""
    policy_version: int | None = None
    stale_trajectories: int | None = None
    """Sub role: trajectories of this step generated by an older policy version than the one trained."""
    dropped_stale: int | None = None
    """Sub role: of those, the ones staler than ``sub.max_staleness``, left out of the loss."""
    time_split: dict[str, float] = field(default_factory=dict)
    """Seconds of this step per phase (docs/performance.md): ``wall_s`` (since the role's previous step
    ended), the trainer's ``rollout_s``, ``score_s``, ``forward_backward_s`` and ``optimizer_s``, and the
    parts of the rollout the role measured (planner: ``generate_s``, ``delegate_s``, ``tool_s``,
    ``store_s``; sub role: ``wait_s`` (for complete groups and the service lock) and, served to the planner since its previous step,
    ``service_generate_s`` and ``service_tool_s``)."""
    model_share: float | None = None
    """Share of ``wall_s`` spent in this role's own model compute: generation in its rollout, scoring,
    forward/backward and optimizer (docs/performance.md)."""
    peak_rss_mib: float | None = None
    """Peak resident memory (MiB) of this role's process so far (``getrusage`` ``ru_maxrss``; child
    processes such as Chromium or a vLLM server are not included)."""
    peak_gpu_mib: float | None = None
    """Peak CUDA memory allocated by this role's process so far (MiB, ``torch.cuda.max_memory_allocated``);
    ``None`` without a GPU."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Keys not in this schema, kept as read; ignored by the report."""

    KIND: ClassVar[str] = "step"


@dataclass
class TaskRecord:
    """One evaluated task (``eval/<step>/<benchmark>.jsonl``), docs/evaluation.md, docs/report.md.

    A crash, timeout or unscorable verdict is ``correct = False`` with ``error`` set (docs/evaluation.md).
    """

    run_id: str
    trainer: str
    seed: int
    step: int
    benchmark: str
    task_id: str
    correct: bool
    schema: int = SCHEMA_VERSION
    benchmark_version: str | None = None
    prediction: str | None = None
    gold: Any = None
    judge: str | None = None
    verdict: str | None = None
    error: str | None = None
    n_turns: int | None = None
    n_sub_calls: int | None = None
    n_tokens: int | None = None
    latency_s: float | None = None
    inference_run: int | None = None
    """Which of the evaluation's independent inference runs (0..eval.runs-1) this record is; None: the only run."""
    temperature: float | None = None
    """Sampling temperature of the evaluated episode (0: greedy); None when not recorded."""
    sample_seed: int | None = None
    """Seed of the inference run's sampling; None when not recorded."""
    transcript: dict[str, Any] | None = None
    """The evaluated episode's turns (:mod:`harness.transcript` format), or None when not recorded.

    Written as the record's last member (:func:`to_dict`) and left out when None; readers that do not
    need it skip it cheaply (``read_tasks(..., transcripts=False)``)."""
    extra: dict[str, Any] = field(default_factory=dict)

    KIND: ClassVar[str] = "task"


# Field type specs used by the validating reader: name -> (accepted exact types or None for any,
# nullable). Exact ``type(v) in kinds`` (not isinstance) is both faster and rejects bools where
# numbers are expected.
def _spec(cls: type) -> dict[str, tuple[frozenset[type] | None, bool]]:
    out: dict[str, tuple[frozenset[type] | None, bool]] = {}
    for f in dataclasses.fields(cls):
        t = str(f.type)
        nullable = "None" in t
        kinds: frozenset[type] | None
        if t.startswith("int"):
            kinds = frozenset({int})
        elif t.startswith("float"):
            kinds = frozenset({int, float})
        elif t.startswith("str"):
            kinds = frozenset({str})
        elif t.startswith("bool"):
            kinds = frozenset({bool})
        elif t.startswith("dict"):
            kinds = frozenset({dict})
        elif t.startswith("list"):
            kinds = frozenset({list})
        else:
            kinds = None  # Any
        out[f.name] = (kinds, nullable)
    return out


_SPECS: dict[type, dict[str, tuple[frozenset[type] | None, bool]]] = {
    StepRecord: _spec(StepRecord), TaskRecord: _spec(TaskRecord),
}
_REQUIRED: dict[type, frozenset[str]] = {
    cls: frozenset(f.name for f in dataclasses.fields(cls)
                   if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
    for cls in (StepRecord, TaskRecord)
}
_DEFAULTS: dict[type, dict[str, Any]] = {
    cls: {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
    for cls in (StepRecord, TaskRecord)
}
_FACTORY_FIELDS: dict[type, tuple[str, ...]] = {
    # every default_factory in these schemas is ``dict``
    cls: tuple(f.name for f in dataclasses.fields(cls) if f.default_factory is not dataclasses.MISSING)
    for cls in (StepRecord, TaskRecord)
}


# --------------------------------------------------------------------------------------------
# Migration
# --------------------------------------------------------------------------------------------

Migration = Callable[[dict[str, Any]], dict[str, Any]]
_MIGRATIONS: dict[tuple[str, int], Migration] = {}


def register_migration(kind: str, from_version: int) -> Callable[[Migration], Migration]:
    """Register ``fn(record) -> record`` upgrading a ``kind`` record from ``from_version`` by one."""

    def deco(fn: Migration) -> Migration:
        _MIGRATIONS[(kind, from_version)] = fn
        return fn

    return deco


@register_migration("step", 0)
def _step_v0_to_v1(d: dict[str, Any]) -> dict[str, Any]:
    # Schema 0 (pre-release metrics files): the mean reward was called ``reward`` and there were
    # no reward components, alignment counters, wait time or policy version (all default).
    if "reward" in d and "reward_mean" not in d:
        d["reward_mean"] = d.pop("reward")
    d.setdefault("reward_components", {})
    d["schema"] = 1
    return d


@register_migration("task", 0)
def _task_v0_to_v1(d: dict[str, Any]) -> dict[str, Any]:
    # Schema 0 task records had ``answer`` for the prediction and no benchmark version.
    if "answer" in d and "prediction" not in d:
        d["prediction"] = d.pop("answer")
    d["schema"] = 1
    return d


def migrate(kind: str, record: dict[str, Any], where: str = "<record>") -> dict[str, Any]:
    """Upgrade a raw ``kind`` ("step"/"task") record to ``SCHEMA_VERSION``.

    A record without ``schema`` is schema 0. Raises :class:`RecordError` naming ``where`` for a
    version newer than this code or one with no migration path.
    """
    version = record.get("schema", 0)
    if not isinstance(version, int) or isinstance(version, bool):
        raise RecordError(f"{where}: field 'schema' must be an integer, got {version!r}")
    if version > SCHEMA_VERSION:
        raise RecordError(
            f"{where}: {kind} record has schema version {version}, newer than this harness "
            f"understands ({SCHEMA_VERSION}); update the harness to read it")
    while version < SCHEMA_VERSION:
        fn = _MIGRATIONS.get((kind, version))
        if fn is None:
            raise RecordError(
                f"{where}: {kind} record has schema version {version} and there is no migration "
                f"from it to {SCHEMA_VERSION}; regenerate the records")
        record = fn(dict(record))
        version = record["schema"]
    return record


# --------------------------------------------------------------------------------------------
# Conversion and validation
# --------------------------------------------------------------------------------------------

def to_dict(record: StepRecord | TaskRecord) -> dict[str, Any]:
    """The JSON object of a record: ``extra`` keys are flattened back to the top level.

    A task record's ``transcript`` comes last (after the ``extra`` keys), and is left out when None,
    so that readers can skip it without decoding it (:func:`read_tasks`)."""
    d = dict(record.__dict__)
    extra = d.pop("extra") or {}
    transcript = d.pop("transcript", None)
    for k, v in extra.items():
        if k == "transcript":  # put in extra by hand: still the transcript, still last
            transcript = v if transcript is None else transcript
            continue
        d.setdefault(k, v)
    if transcript is not None:
        d["transcript"] = transcript
    return d


def from_dict(cls: type, raw: Mapping[str, Any], where: str = "<record>") -> Any:
    """Migrate and validate a raw dict into ``cls`` (StepRecord/TaskRecord); errors name ``where``."""
    if not isinstance(raw, Mapping):
        raise RecordError(f"{where}: expected a JSON object, got {type(raw).__name__}")
    d = raw if raw.get("schema") == SCHEMA_VERSION else migrate(cls.KIND, dict(raw), where)
    spec = _SPECS[cls]
    required = _REQUIRED[cls]
    if not required <= d.keys():
        missing = sorted(required - d.keys())
        raise RecordError(f"{where}: {cls.KIND} record misses required field(s) {', '.join(missing)}")
    extra = dict(d.get("extra") or {})
    kwargs: dict[str, Any] = {}
    for k, v in d.items():
        s = spec.get(k)
        if s is None or k == "extra":
            if k != "extra":
                extra[k] = v
            continue
        kinds = s[0]
        if v is None:
            if k in required:
                raise RecordError(f"{where}: field {k!r} must not be null")
        elif kinds is not None and type(v) not in kinds:
            names = "/".join(sorted(t.__name__ for t in kinds))
            raise RecordError(f"{where}: field {k!r} must be {names}, got {type(v).__name__} "
                              f"{v!r:.60}")
        kwargs[k] = v
    # Build without calling __init__ (a 30-argument dataclass __init__ was half of the read
    # time): start from the class defaults, fresh containers for the mutable ones.
    obj = object.__new__(cls)
    obj.__dict__.update(_DEFAULTS[cls])
    for name in _FACTORY_FIELDS[cls]:
        obj.__dict__[name] = {}
    obj.__dict__.update(kwargs)
    obj.__dict__["extra"] = extra
    return obj


# --------------------------------------------------------------------------------------------
# Atomic I/O
# --------------------------------------------------------------------------------------------

def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=_json_default)


def _json_default(o: Any) -> Any:
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return dataclasses.asdict(o)
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    raise TypeError(f"object of type {type(o).__name__} is not JSON serialisable: {o!r:.80}")


def append_jsonl(path: str | os.PathLike[str], obj: Any) -> None:
    """Append one JSON line to ``path`` atomically with respect to other writers.

    The whole line goes out in one ``os.write`` on an ``O_APPEND`` descriptor while holding an
    exclusive ``fcntl.flock``, so concurrent processes never interleave or split lines. If a
    previous writer was cut off mid-line (killed, or its write failed on a full disk: the file does
    not end in a newline), that partial line is removed first: it was never a record, and left in
    place it would become a broken line in the middle of the file that no reader accepts
    (docs/reliability.md).
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = to_dict(obj) if isinstance(obj, (StepRecord, TaskRecord)) else dataclasses.asdict(obj)
    data = (_dumps(obj) + "\n").encode("utf-8")
    fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            size = os.fstat(fd).st_size
            if size:
                end = _complete_lines_end(p, size)
                if end < size:
                    os.ftruncate(fd, end)
            view = memoryview(data)
            while view:  # os.write may write less than asked (signals); finish the line
                n = os.write(fd, view)
                view = view[n:]
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _complete_lines_end(path: Path, size: int, chunk: int = 1 << 16) -> int:
    """The length of ``path``'s first ``size`` bytes up to and including the last newline (0 if none)."""
    with open(path, "rb") as fh:
        pos = size
        while pos > 0:
            start = max(0, pos - chunk)
            fh.seek(start)
            block = fh.read(pos - start)
            i = block.rfind(b"\n")
            if i >= 0:
                return start + i + 1
            pos = start
    return 0


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` via a temp file in the same folder and ``os.replace``."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; records are meant to be shared and read
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(obj, ensure_ascii=False, indent=2, default=_json_default))
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def read_json(path: str | os.PathLike[str]) -> Any:
    """Read a JSON file; a parse error names the file, line and column."""
    p = Path(path)
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RecordError(f"{p}:{exc.lineno}: invalid JSON ({exc.msg}, column {exc.colno})") from None


@dataclass
class ReadResult:
    """Records of one JSONL file plus what the reader had to do to get them."""

    records: list[Any]
    path: Path
    migrated: int = 0
    """Lines whose schema was older than ``SCHEMA_VERSION`` (migrated on read)."""
    schemas: set[int] = field(default_factory=set)
    truncated_tail: bool = False
    """The last line was incomplete (writer killed mid-line) and was skipped."""


_TRANSCRIPT_KEY = b'"transcript"'
_TRANSCRIPT_END = re.compile(rb'"format"\s*:\s*"transcript/[0-9]+"\s*\}\s*\}\s*$')


def _cut_transcript(raw: bytes) -> bytes:
    """``raw`` (one line) without its last member when that is a transcript written by :func:`to_dict`."""
    return _cut_span(raw, 0, len(raw))


def _cut_span(data: bytes, start: int, end: int) -> bytes:
    """The line ``data[start:end]``, cut before its last member when that is a transcript.

    Cheap checks only, and no copy of the transcript: the line ends with the transcript's closing
    ``"format": "transcript/N"}}`` and its last ``"transcript"`` key is preceded by ``,`` and followed by
    ``:``. The caller decodes the cut line and falls back to the whole line when it does not parse (the
    key was inside a nested object)."""
    if not _TRANSCRIPT_END.search(data, max(start, end - 64), end):
        return data[start:end]
    k = data.rfind(_TRANSCRIPT_KEY, start, end)
    if k < 0:
        return data[start:end]
    before = data[start:k].rstrip()
    after = data[k + len(_TRANSCRIPT_KEY):min(end, k + len(_TRANSCRIPT_KEY) + 16)].lstrip()
    if not before.endswith(b",") or not after.startswith(b":"):
        return data[start:end]
    return before[:-1] + b"}"


def _lines(data: bytes, skip_transcripts: bool) -> list[tuple[int, bytes, int, int]]:
    """``(line number, bytes to decode, start, end)`` of each non-blank line of ``data`` (start -1:
    the bytes are the line).

    With ``skip_transcripts`` a line is cut before a transcript written last, without copying the
    transcript (a copy of every line was most of the cost of skipping them)."""
    if not skip_transcripts:  # the lines themselves (start -1: nothing was cut)
        return [(i + 1, raw, -1, -1) for i, raw in enumerate(data.split(b"\n")) if raw and not raw.isspace()]
    out, pos, lineno, n = [], 0, 0, len(data)
    while pos <= n:
        end = data.find(b"\n", pos)
        end = n if end < 0 else end
        lineno += 1
        if end > pos and not (data[pos] in b" \t\r\f\v" and data[pos:end].isspace()):
            out.append((lineno, _cut_span(data, pos, end), pos, end))
        pos = end + 1
    return out


def iter_jsonl(path: str | os.PathLike[str], *, tolerate_truncated_tail: bool = False,
               skip_transcripts: bool = False) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line; broken lines raise RecordError.

    ``skip_transcripts``: a line whose last member is a task transcript (as :func:`to_dict` writes
    it) is decoded without that member, so reading the report's tables does not pay for transcripts;
    other lines are decoded whole (the caller drops their transcript)."""
    p = Path(path)
    with open(p, "rb") as fh:
        data = fh.read()
    rows = _lines(data, skip_transcripts)
    # Fast path: one decode of the whole file as a JSON array (json.loads per line is most of the
    # report's reading time); on any error, fall back to line by line to name the broken line.
    try:
        objs = json.loads(b"[" + b",".join(text for _, text, _, _ in rows) + b"]")
        if len(objs) == len(rows) and all(type(o) is dict for o in objs):
            for (lineno, _, _, _), obj in zip(rows, objs):
                yield lineno, obj
            return
    except (json.JSONDecodeError, UnicodeDecodeError):
        pass
    ends_with_newline = data.endswith(b"\n")
    last = data.count(b"\n") + 1
    for lineno, text, start, end in rows:
        raw = text if start < 0 else data[start:end]
        try:
            if len(text) != len(raw):  # a transcript was cut off
                try:
                    obj = json.loads(text)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    obj = json.loads(raw)  # the cut was wrong (a nested key): decode it whole
            else:
                obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            if tolerate_truncated_tail and lineno == last and not ends_with_newline:
                return
            msg = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            raise RecordError(f"{p}:{lineno}: broken JSONL line ({msg}): {raw[:80]!r}") from None
        if not isinstance(obj, dict):
            raise RecordError(f"{p}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        yield lineno, obj


def _read(cls: type, path: str | os.PathLike[str], tolerate_truncated_tail: bool,
          skip_transcripts: bool = False) -> ReadResult:
    p = Path(path)
    res = ReadResult(records=[], path=p)
    n_lines = 0
    for lineno, obj in iter_jsonl(p, tolerate_truncated_tail=tolerate_truncated_tail,
                                  skip_transcripts=skip_transcripts):
        n_lines = lineno
        if skip_transcripts:
            obj.pop("transcript", None)
        version = obj.get("schema", 0)
        if isinstance(version, int):
            res.schemas.add(version)
            if version < SCHEMA_VERSION:
                res.migrated += 1
        res.records.append(from_dict(cls, obj, f"{p}:{lineno}"))
    if tolerate_truncated_tail:
        # Detect whether iter_jsonl skipped an unparsable tail (for the report's notes); the whole
        # file is read again only when it does not end with a newline.
        with open(p, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            if size:
                fh.seek(size - 1)
                if fh.read(1) != b"\n":
                    fh.seek(0)
                    tail_no = fh.read().count(b"\n") + 1
                    res.truncated_tail = tail_no > n_lines
    return res


def read_steps(path: str | os.PathLike[str], *, tolerate_truncated_tail: bool = False) -> ReadResult:
    """Read a ``metrics.jsonl`` into :class:`StepRecord` objects (validated, migrated)."""
    return _read(StepRecord, path, tolerate_truncated_tail)


def read_tasks(path: str | os.PathLike[str], *, tolerate_truncated_tail: bool = False,
               transcripts: bool = True) -> ReadResult:
    """Read an ``eval/<step>/<benchmark>.jsonl`` into :class:`TaskRecord` objects.

    ``transcripts=False``: every record's ``transcript`` is None, and a transcript written last (as
    :func:`to_dict` does) is not even decoded (the report's tables read thousands of records)."""
    return _read(TaskRecord, path, tolerate_truncated_tail, skip_transcripts=not transcripts)


# --------------------------------------------------------------------------------------------
# Run directory layout
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunPaths:
    """Paths inside one run directory ``runs/<run_id>/`` (docs/report.md)."""

    root: Path

    @classmethod
    def of(cls, runs_dir: str | os.PathLike[str], run_id: str) -> RunPaths:
        _check_component(run_id, "run_id")
        return cls(Path(runs_dir) / run_id)

    @property
    def run_id(self) -> str:
        return self.root.name

    @property
    def provenance(self) -> Path:
        return self.root / PROVENANCE_FILE

    @property
    def status(self) -> Path:
        return self.root / STATUS_FILE

    @property
    def store_db(self) -> Path:
        return self.root / "store.db"

    @property
    def eval_dir(self) -> Path:
        return self.root / EVAL_DIR

    def split_dir(self, split: str) -> Path:
        """The evaluation records of ``split`` (``test``: ``eval/``, ``train``: ``eval_train/``, ``unseen``:
        ``eval_unseen/``)."""
        if split not in SPLIT_DIRS:
            raise ValueError(f"evaluation split must be one of {sorted(SPLIT_DIRS)}, got {split!r}")
        return self.root / SPLIT_DIRS[split]

    def role_dir(self, role: str) -> Path:
        _check_component(role, "role")
        if role in SPLIT_DIRS.values():
            raise ValueError(f"role name {role!r} is reserved for evaluation records")
        return self.root / role

    def metrics(self, role: str) -> Path:
        return self.role_dir(role) / METRICS_FILE

    def checkpoints(self, role: str) -> Path:
        return self.role_dir(role) / "checkpoints"

    def eval_file(self, step: int, benchmark: str, split: str = "test") -> Path:
        _check_component(benchmark, "benchmark")
        if not isinstance(step, int) or step < 0:
            raise ValueError(f"eval step must be a non-negative int, got {step!r}")
        return self.split_dir(split) / str(step) / f"{benchmark}.jsonl"

    def roles(self) -> list[str]:
        """Roles that wrote a metrics file, sorted (planner first)."""
        if not self.root.is_dir():
            return []
        found = [d.name for d in self.root.iterdir()
                 if d.is_dir() and d.name not in SPLIT_DIRS.values() and (d / METRICS_FILE).is_file()]
        return sorted(found, key=lambda r: (ROLES.index(r) if r in ROLES else len(ROLES), r))

    def eval_files(self, split: str = "test") -> list[tuple[int, str, Path]]:
        """``(step, benchmark, path)`` for every eval file of ``split``, sorted by step then benchmark."""
        out: list[tuple[int, str, Path]] = []
        root = self.split_dir(split)
        if not root.is_dir():
            return out
        for d in root.iterdir():
            if not d.is_dir():
                continue
            try:
                step = int(d.name)
            except ValueError:
                continue  # not a step folder (e.g. a judge cache); ignore
            for f in d.glob("*.jsonl"):
                out.append((step, f.stem, f))
        out.sort(key=lambda t: (t[0], t[1]))
        return out

    def is_run(self) -> bool:
        """Whether this folder looks like a run (provenance, status, metrics or eval records)."""
        return (self.provenance.is_file() or self.status.is_file() or bool(self.roles())
                or bool(self.eval_files()))


def _check_component(value: str, what: str) -> None:
    if not isinstance(value, str) or not value or value in (".", "..") or "/" in value \
            or "\\" in value or "\0" in value:
        raise ValueError(f"{what} must be a non-empty single path component, got {value!r}")


def find_runs(runs_dir: str | os.PathLike[str]) -> list[RunPaths]:
    """Run folders directly under ``runs_dir`` (or ``runs_dir`` itself if it is a run), sorted."""
    root = Path(runs_dir)
    if not root.is_dir():
        return []
    me = RunPaths(root)
    if me.provenance.is_file():
        return [me]
    return [rp for rp in (RunPaths(d) for d in sorted(root.iterdir()) if d.is_dir()) if rp.is_run()]


# --------------------------------------------------------------------------------------------
# Writers for the run directory
# --------------------------------------------------------------------------------------------

def append_step(run_dir: str | os.PathLike[str], record: StepRecord) -> Path:
    """Append a step record to ``<run_dir>/<role>/metrics.jsonl``; returns the file."""
    path = RunPaths(Path(run_dir)).metrics(record.role)
    append_jsonl(path, to_dict(record))
    return path


def append_task(run_dir: str | os.PathLike[str], record: TaskRecord, split: str = "test") -> Path:
    """Append a task record to ``<run_dir>/eval/<step>/<benchmark>.jsonl`` (``split="train"``: ``eval_train/``, the
    in-distribution evaluation; ``"unseen"``: ``eval_unseen/``, other worlds); returns the file."""
    path = RunPaths(Path(run_dir)).eval_file(record.step, record.benchmark, split)
    append_jsonl(path, to_dict(record))
    return path


def write_status(run_dir: str | os.PathLike[str], state: str, **info: Any) -> dict[str, Any]:
    """Atomically write ``status.json`` with ``state`` in RUN_STATES plus ``info`` (e.g. error).

    The document also names the writing process (``pid``, ``host``): for ``running`` that is the process
    that owns the run (the ``harness train`` launcher), which :func:`read_status` checks is still alive."""
    if state not in RUN_STATES:
        raise ValueError(f"run state must be one of {RUN_STATES}, got {state!r}")
    doc = {"schema": SCHEMA_VERSION, "state": state, "updated": time.time(),
           "host": socket.gethostname(), "pid": os.getpid(), **info}
    write_json_atomic(RunPaths(Path(run_dir)).status, doc)
    return doc


def read_status(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """``status.json`` as a dict; ``{"state": "unknown"}`` when the file is missing.

    A ``running`` run whose writer (``pid`` on ``host``) is this machine's and no longer alive was killed
    without a chance to say so (SIGKILL, power cut): it reads as ``failed`` with an ``error`` that says
    how to resume, and ``stale: true``. The file itself is left as it is (a later ``--resume`` rewrites it).
    """
    p = RunPaths(Path(run_dir)).status
    if not p.is_file():
        return {"state": "unknown"}
    doc = read_json(p)
    if not isinstance(doc, dict) or doc.get("state") not in RUN_STATES:
        raise RecordError(f"{p}: 'state' must be one of {RUN_STATES}, got "
                          f"{doc.get('state') if isinstance(doc, dict) else doc!r}")
    if doc["state"] == "running" and writer_gone(doc):
        launched = (Path(run_dir) / "config.yaml").is_file()  # a `python -m harness train` run
        how = f"; resume with python -m harness train --resume {Path(run_dir)}" if launched else ""
        doc = {**doc, "state": "failed", "stale": True,
               "error": f"{'launcher' if launched else 'writer'} (pid {doc['pid']}) is no longer running{how}"}
    return doc


def writer_gone(doc: Mapping[str, Any]) -> bool:
    """Whether the process that wrote a status document (its ``pid`` on its ``host``) is known to be gone.

    Only decidable on the same host: another host's process, or a document without a pid, counts as alive.
    A zombie (killed, not yet reaped) is gone; so is a pid that now belongs to a process started after the
    document was written (pid reuse; checked through ``/proc`` where there is one)."""
    pid, host = doc.get("pid"), doc.get("host")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or host != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # alive, another user's process
    started = _process_start_time(pid)
    if started is None:
        return False
    if started == "zombie":
        return True
    updated = doc.get("updated")
    # The owner wrote "running" after it started; a process started later only reuses the number. The slack
    # absorbs clock steps (NTP) between then and now: a live launcher must never read as dead.
    return isinstance(updated, (int, float)) and started > updated + 60.0


def _process_start_time(pid: int) -> float | str | None:
    """Unix start time of ``pid`` from ``/proc`` (``"zombie"`` for a dead, unreaped one); None where unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        btime = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                     if line.startswith("btime "))
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    fields = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) ": state is field 3, starttime field 22
    try:
        if fields[0] in ("Z", "X"):
            return "zombie"
        return btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (IndexError, ValueError, OSError):
        return None


@contextlib.contextmanager
def run_status(run_dir: str | os.PathLike[str], **info: Any) -> Iterator[None]:
    """Mark the run ``running`` for the block, then ``completed``, or ``failed`` with the error."""
    write_status(run_dir, "running", **info)
    try:
        yield
    except BaseException as exc:
        write_status(run_dir, "failed", error=f"{type(exc).__name__}: {exc}", **info)
        raise
    write_status(run_dir, "completed", **info)


def _git(repo: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                             timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def portable_argv(argv: list[str], repo_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """``argv`` with this repository's absolute path written relative to it (``python -m harness`` puts
    the absolute path of ``__main__.py`` in ``argv[0]``), so committed records name no machine's folders.

    Only the repository prefix is rewritten, in plain arguments and in ``key=value`` overrides; a path
    elsewhere on the machine is the user's and stays as given."""
    repo = str(Path(repo_dir) if repo_dir is not None else Path(__file__).resolve().parent.parent).rstrip("/") + "/"

    def one(arg: str) -> str:
        if arg.startswith(repo):
            return arg[len(repo):]
        key, eq, value = arg.partition("=")
        return f"{key}={value[len(repo):]}" if eq and value.startswith(repo) else arg
    return [one(a) for a in argv]


def git_state(repo_dir: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """``{"commit", "dirty", "branch"}`` of the repository at ``repo_dir`` (default: this code's).

    Values are ``None`` when git or the repository (or a first commit) is missing.
    """
    repo = Path(repo_dir) if repo_dir is not None else Path(__file__).resolve().parent.parent
    commit = _git(repo, "rev-parse", "HEAD")
    status = _git(repo, "status", "--porcelain", "--untracked-files=no")
    branch = _git(repo, "rev-parse", "--abbrev-ref", "HEAD")
    return {
        "commit": commit.strip() if commit else None,
        "dirty": (bool(status.strip()) if status is not None else None),
        "branch": branch.strip() if branch else None,
    }


def package_versions(packages: tuple[str, ...] | list[str] = DEFAULT_PACKAGES) -> dict[str, str | None]:
    """Installed versions from importlib.metadata (None if not installed); imports nothing."""
    out: dict[str, str | None] = {}
    for name in packages:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def _plain(obj: Any) -> Any:
    """Config to plain JSON data (dataclasses and mappings accepted)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = dataclasses.asdict(obj)
    return json.loads(json.dumps(obj, default=_json_default))


def write_provenance(run_dir: str | os.PathLike[str], config: Any, seeds: int | list[int], *,
                     trainer: str | None = None, arm: str | None = None,
                     repo_dir: str | os.PathLike[str] | None = None,
                     packages: tuple[str, ...] | list[str] = DEFAULT_PACKAGES,
                     mark_running: bool = True, **extra: Any) -> dict[str, Any]:
    """Write ``provenance.json`` for a run and (by default) mark it ``running``.

    Captures the git commit and dirty flag (tolerating no git), package versions (no imports),
    Python, host, command line, the resolved ``config`` (a mapping or a dataclass), ``seeds``,
    ``trainer`` and ``arm`` (the report's comparison label; default the trainer, or
    ``<trainer>[alignment=none]`` for the Fig. 8 ablation when the config says so).
    """
    rp = RunPaths(Path(run_dir))
    seed_list = [seeds] if isinstance(seeds, int) else list(seeds)
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in seed_list):
        raise ValueError(f"seeds must be ints, got {seeds!r}")
    doc = {
        "schema": SCHEMA_VERSION,
        "run_id": rp.run_id,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "trainer": trainer,
        "arm": arm,
        "seeds": seed_list,
        "git": git_state(repo_dir),
        "versions": {"python": platform.python_version(), **package_versions(packages)},
        "host": {"hostname": socket.gethostname(), "platform": platform.platform(),
                 "machine": platform.machine(), "cpu_count": os.cpu_count()},
        "argv": portable_argv(sys.argv, repo_dir),
        "config": _plain(config),
        **{k: _plain(v) for k, v in extra.items()},
    }
    write_json_atomic(rp.provenance, doc)
    if mark_running:
        write_status(rp.root, "running")
    return doc

