"""xbench-DeepSearch (https://github.com/xbench-ai/xbench-evals, MIT): loader and scorer (docs/benchmarks.md).

Data: the published, **encrypted** CSVs ``<data_dir>/xbench/DeepSearch-2505.csv`` (ids 1-100)
and ``DeepSearch-2510.csv`` (ids 101-200); columns ``id, prompt, answer, reference_steps,
canary``. Decryption, as in xbench-evals' ``xbench_evals.py``: base64-decode each of ``prompt``,
``answer`` and ``reference_steps``, XOR byte ``i`` with byte ``i mod len(key)`` of the row's own
``canary`` string (UTF-8), decode as UTF-8.

Plain text rule (the xbench README asks that the decrypted text never be put online; docs/benchmarks.md
"decrypt in memory only, never write plain text to disk or logs"): the CSV is read as bytes and
decrypted in memory; nothing here writes a file or logs a decrypted field; error messages name
the file, line and row id but never show decrypted bytes; ``Task`` hides question/gold from its
``repr``; ``sensitive = True`` makes record writers store hashes (``record_fields``) and makes
the llm judge keep replies out of its messages; its disk cache stores only the key hash and the
verdict. ``reference_steps`` stay in memory (:meth:`XBenchDeepSearch.reference_steps`), not in
``Task.metadata``, so a record writer that dumps metadata cannot leak them.

Scoring (xbench grades with an LLM judge, ``eval_grader.py``): normalised exact final-answer
match first (:func:`benchmarks.scoring.answers_match`); otherwise the configured judge, whose
``xbench`` prompt applies xbench's rule. With the default ``exact`` judge (offline), "no exact
match" means incorrect.

Options: ``version`` (``"2505"`` default, or ``"2510"``), ``csv_path`` (another CSV in the same
format, e.g. ``synthetic_deepsearch_sample.csv``). The one split is called ``"test"`` (the Hub
names it ``train``; both, and ``None``, are accepted).
"""

from __future__ import annotations

import base64
import binascii
import csv
import io
import os
from pathlib import Path
from typing import Any

from benchmarks.base import Benchmark, BenchmarkDataError, BenchmarkDataMissing, Task
from benchmarks.registry import register_benchmark

VERSIONS = {"2505": "DeepSearch-2505.csv", "2510": "DeepSearch-2510.csv"}
COLUMNS = ("id", "prompt", "answer", "reference_steps", "canary")
ENCRYPTED_FIELDS = ("prompt", "answer", "reference_steps")


class XBenchDecryptError(BenchmarkDataError):
    """An encrypted field does not decrypt with its row's canary (bad base64 or not UTF-8)."""


def xor_decrypt(data: bytes, key: str) -> bytes:
    """XOR ``data`` with the UTF-8 bytes of ``key`` repeated (xbench-evals' ``xor_decrypt``)."""
    key_bytes = key.encode("utf-8")
    if not key_bytes:
        raise ValueError("empty canary")
    n = len(key_bytes)
    return bytes(b ^ key_bytes[i % n] for i, b in enumerate(data))


def xor_encrypt(plain: str, key: str) -> str:
    """Inverse of :func:`decrypt_field` (used by tests to build encrypted rows)."""
    return base64.b64encode(xor_decrypt(plain.encode("utf-8"), key)).decode("ascii")


def decrypt_field(value: str, canary: str) -> str:
    """base64 → XOR with the canary → UTF-8 (raises ``ValueError`` / ``UnicodeDecodeError``)."""
    raw = base64.b64decode(value.strip(), validate=True)
    return xor_decrypt(raw, canary).decode("utf-8")


def read_encrypted_csv(path: Path) -> list[dict[str, Any]]:
    """Decrypt every row of an xbench CSV in memory: ``[{id, prompt, answer, reference_steps, line}]``."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise BenchmarkDataMissing("xbench_deepsearch", f"{path} not found (see ../shared/data/README.md)") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BenchmarkDataError(path, None, f"not UTF-8 (byte offset {exc.start})") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if reader.fieldnames is None or [f.strip() for f in reader.fieldnames] != list(COLUMNS):
        raise BenchmarkDataError(path, 1, f"expected CSV header {','.join(COLUMNS)}, got {reader.fieldnames}")
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for row in reader:
        line = reader.line_num
        if None in row or any(row.get(c) is None for c in COLUMNS):
            raise BenchmarkDataError(path, line, f"row has {len(row)} fields, expected {len(COLUMNS)}")
        row_id = row["id"].strip()
        if not row_id:
            raise BenchmarkDataError(path, line, "empty id")
        if row_id in seen:
            raise BenchmarkDataError(path, line, f"duplicate id {row_id}")
        seen.add(row_id)
        canary = row["canary"]
        if not canary:
            raise XBenchDecryptError(path, line, f"row id {row_id}: empty canary")
        out: dict[str, Any] = {"id": row_id, "line": line}
        for field_name in ENCRYPTED_FIELDS:
            try:
                out[field_name] = decrypt_field(row[field_name], canary)
            except (binascii.Error, ValueError) as exc:
                # exc never holds plain text: base64 errors describe the cipher text, and for a
                # UnicodeDecodeError only the position is shown (its .object would be plain bytes).
                what = (f"decrypted bytes are not UTF-8 (offset {exc.start})"
                        if isinstance(exc, UnicodeDecodeError) else "field is not valid base64")
                raise XBenchDecryptError(
                    path, line, f"row id {row_id}: {field_name} does not decrypt with the row's canary: {what}"
                ) from None
        rows.append(out)
    return rows


@register_benchmark
class XBenchDeepSearch(Benchmark):
    """xbench-DeepSearch 2505 / 2510 (encrypted CSVs, decrypted in memory)."""

    name = "xbench_deepsearch"
    version = "2505"
    sensitive = True
    judge_rule = "xbench"

    def __init__(self, *, version: str | int = "2505", csv_path: str | os.PathLike[str] | None = None,
                 **options: Any):
        super().__init__(**options)
        version = str(version)
        if csv_path is None and version not in VERSIONS:
            raise ValueError(f"xbench_deepsearch: unknown version {version!r}; use one of {sorted(VERSIONS)}")
        self.version = version if csv_path is None else f"{version}+{Path(csv_path).name}"
        self.csv_path = Path(csv_path) if csv_path is not None else self.data_dir / "xbench" / VERSIONS[version]
        self._csv_in_data_dir = csv_path is None
        self._reference_steps: dict[str, str] = {}

    def data_files(self, split: str | None = None) -> list[Path]:
        return [self.csv_path] if self._csv_in_data_dir else []

    def load(self, split: str | None = None, limit: int | None = None) -> list[Task]:
        if split not in (None, "test", "train", "all"):
            raise ValueError(f"xbench_deepsearch: unknown split {split!r}; it has one split, 'test'")
        limit = self._check_limit(limit)
        rows = read_encrypted_csv(self.csv_path)
        if limit is not None:
            rows = rows[:limit]
        tasks = []
        for row in rows:
            self._reference_steps[row["id"]] = row["reference_steps"]
            tasks.append(Task(task_id=row["id"], question=row["prompt"], gold=row["answer"],
                              metadata={"benchmark_version": self.version, "source_file": self.csv_path.name,
                                        "line": row["line"], "lang": "zh"}))
        return tasks

    def reference_steps(self, task_id: str) -> str:
        """The decrypted reference steps of a loaded task (in memory only)."""
        return self._reference_steps[task_id]
