"""The bottom of the ``benchmarks`` package: what a scorer returns and what loading raises (docs/benchmarks.md).

* :class:`Verdict`: the outcome of scoring one prediction (benchmarks and judges return it);
* the errors: :class:`BenchmarkError`, :class:`BenchmarkDataMissing` (data absent: "not run"),
  :class:`BenchmarkDataError` (data present but garbled: names file and line);
* :func:`sha256_text`: the hash of record keys, judge caches and redacted (sensitive) fields;
* :func:`read_jsonl`: the JSONL data files of the benchmarks and the replay judge, read by
  :func:`harness.records.iter_jsonl` (the repository's one JSONL reader).

:mod:`benchmarks.base` (the ``Benchmark`` contract) and :mod:`benchmarks.judges` both need these
and this module imports neither, so ``base`` can import ``judges`` at module level without an
import cycle. ``benchmarks.base`` re-exports every name here (``from benchmarks.base import
Verdict`` keeps working).

Deliberate decision: a broken JSONL line raises :class:`BenchmarkDataError` naming the file and the
line but never quoting the line (``iter_jsonl``'s message quotes its first 80 bytes): benchmark text
(GAIA questions, recorded predictions) stays out of tracebacks and logs, as ``Task`` keeps it out of
its ``repr``. The line number and the JSON error are taken from ``iter_jsonl``'s message, whose
format (``<path>:<line>: broken JSONL line (<why>): <bytes>`` / ``<path>:<line>: expected a JSON
object, got <type>``) is pinned by ``tests/benchmarks/test_gaia.py``.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.records import RecordError, iter_jsonl


class BenchmarkError(Exception):
    """Base class of the errors raised by the benchmarks package."""


class BenchmarkDataMissing(BenchmarkError):
    """The benchmark's data is not available here; ``reason`` says what to set or fetch."""

    def __init__(self, benchmark: str, reason: str):
        self.benchmark = benchmark
        self.reason = reason
        super().__init__(f"benchmark {benchmark!r}: data missing: {reason}")


class BenchmarkDataError(BenchmarkError):
    """A data file is present but unreadable or malformed (``path`` and ``line`` name where)."""

    def __init__(self, path: str | os.PathLike[str], line: int | None, problem: str):
        self.path = str(path)
        self.line = line
        self.problem = problem
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {problem}")


@dataclass(frozen=True)
class Verdict:
    """The outcome of scoring one prediction.

    ``judge`` is the name of what decided (``exact``, ``gaia_scorer``, ``llm``, ``replay``...),
    ``verdict`` a short label (``match``, ``no_match``, ``correct``, ``garbage``...), ``error`` a
    note when the prediction or the judge could not be scored normally (then ``correct`` is False).
    """

    correct: bool
    judge: str
    verdict: str
    error: str | None = None


def sha256_text(text: str) -> str:
    """Hex SHA-256 of the UTF-8 bytes of ``text`` (used for record keys and redaction)."""
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()


# What follows "<path>:" in the two messages of harness.records.iter_jsonl.
_BROKEN_LINE = re.compile(r"(?P<line>\d+): (?:broken JSONL line \((?P<why>.*?)\): b['\"]"
                          r"|expected a JSON object, got (?P<type>\w+))", re.S)


def read_jsonl(path: str | os.PathLike[str], what: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` of every non-blank line of a JSONL data file.

    A line that is not JSON, or not a JSON object, raises :class:`BenchmarkDataError` with the file,
    the line and ``not valid JSON (<why>)`` / ``<what> must be a JSON object`` (``what`` names the
    row, e.g. ``"a GAIA row"``); the line itself is never quoted (see the module docstring).
    """
    try:
        yield from iter_jsonl(path)
    except RecordError as exc:
        raise _data_error(Path(path), str(exc), what) from None


def _data_error(path: Path, message: str, what: str) -> BenchmarkDataError:
    prefix = f"{path}:"
    m = _BROKEN_LINE.match(message[len(prefix):]) if message.startswith(prefix) else None
    if m is None:  # a message we do not know: keep the file, drop the text (it may quote the line)
        return BenchmarkDataError(path, None, "not valid JSONL")
    line = int(m.group("line"))
    if m.group("type") is not None:
        return BenchmarkDataError(path, line, f"{what} must be a JSON object")
    return BenchmarkDataError(path, line, f"not valid JSON ({m.group('why')})")
