"""xbench-DeepSearch: in-memory decryption, clear errors, and no plain text on disk or in logs (docs/benchmarks.md).

Assertion messages here name rows and files only: the decrypted text itself is never printed.
"""

from __future__ import annotations

import base64
import csv
import json
import logging
import re
import tempfile
from pathlib import Path

import pytest

from benchmarks.base import BenchmarkDataError, BenchmarkDataMissing, default_data_dir, sha256_text
from benchmarks.registry import get_benchmark
from benchmarks.xbench import XBenchDecryptError, decrypt_field, read_encrypted_csv, xor_decrypt, xor_encrypt
from tests.support.judge_stub import JudgeStub

XDIR = default_data_dir() / "xbench"
SYNTH = XDIR / "synthetic_deepsearch_sample.csv"
CANARY = "TEST CANARY. canary GUID xbench-test:11111111-2222-4333-8444-555555555555"
_CJK = re.compile(r"[\u4e00-\u9fff]")


def test_xor_round_trip():
    for text in ["", "abc", "北京是中国的首都。", "x" * 500]:
        assert decrypt_field(xor_encrypt(text, CANARY), CANARY) == text
    assert xor_decrypt(b"\x00\x01", "AB") == b"AC"


def test_synthetic_sample_decrypts():
    rows = read_encrypted_csv(SYNTH)
    assert [r["id"] for r in rows] == ["9001", "9002", "9003"]
    assert all(_CJK.search(r["prompt"]) for r in rows)
    assert all(r["answer"] and r["reference_steps"] for r in rows)
    tasks = get_benchmark("xbench_deepsearch", csv_path=SYNTH).load()
    assert [t.task_id for t in tasks] == ["9001", "9002", "9003"]


@pytest.mark.parametrize("version,first,last", [("2505", 1, 100), ("2510", 101, 200)])
def test_real_files_decrypt(version, first, last):
    bench = get_benchmark("xbench_deepsearch", version=version)
    assert bench.version == version
    tasks = bench.load()
    assert [int(t.task_id) for t in tasks] == list(range(first, last + 1))
    assert sum(bool(_CJK.search(t.question)) for t in tasks) == 100  # all questions are Chinese
    assert all(t.gold.strip() for t in tasks)
    assert all(bench.reference_steps(t.task_id).strip() for t in tasks)
    assert all(t.metadata["benchmark_version"] == version for t in tasks)
    assert all(bench.score(t, t.gold).correct for t in tasks)
    assert not any(bench.score(t, t.gold + "不对").correct for t in tasks[:10])
    assert len(bench.load(limit=5)) == 5


def test_unknown_version_and_split():
    with pytest.raises(ValueError, match="version"):
        get_benchmark("xbench_deepsearch", version="2099")
    with pytest.raises(ValueError, match="split"):
        get_benchmark("xbench_deepsearch").load(split="dev")


def write_csv(path: Path, rows: list[list[str]]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "prompt", "answer", "reference_steps", "canary"])
        writer.writerows(rows)
    return path


def good_row(row_id: str) -> list[str]:
    return [row_id, xor_encrypt("问题文本", CANARY), xor_encrypt("答案", CANARY), xor_encrypt("步骤", CANARY), CANARY]


def test_bad_base64_names_file_and_row(tmp_path):
    row = good_row("77")
    row[2] = "###not base64###"
    path = write_csv(tmp_path / "bad.csv", [good_row("76"), row])
    with pytest.raises(XBenchDecryptError) as info:
        read_encrypted_csv(path)
    message = str(info.value)
    assert str(path) in message and "row id 77" in message and "answer" in message and "base64" in message
    assert info.value.line == 3


def test_canary_that_does_not_decrypt_to_utf8(tmp_path):
    row = good_row("78")
    row[1] = base64.b64encode(xor_decrypt(b"ok \xff\xfe\xfd", CANARY)).decode()
    path = write_csv(tmp_path / "bad.csv", [row])
    with pytest.raises(XBenchDecryptError, match=r"bad\.csv:2: row id 78: prompt .*not UTF-8"):
        read_encrypted_csv(path)


def test_wrong_canary_is_detected(tmp_path):
    # Chinese text encrypted under one canary and decrypted under another: not UTF-8 any more.
    row = good_row("79")
    row[4] = "a different canary string entirely"
    with pytest.raises(XBenchDecryptError, match="row id 79"):
        read_encrypted_csv(write_csv(tmp_path / "bad.csv", [row]))


def test_garbled_csv_shape(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("id,prompt,answer\n1,a,b\n", encoding="utf-8")
    with pytest.raises(BenchmarkDataError, match=r"bad\.csv:1: expected CSV header"):
        read_encrypted_csv(path)
    path.write_text("id,prompt,answer,reference_steps,canary\n1,YQ==,YQ==\n", encoding="utf-8")
    with pytest.raises(BenchmarkDataError, match=r"bad\.csv:2: row has"):
        read_encrypted_csv(path)


def test_missing_file_is_data_missing(tmp_path):
    with pytest.raises(BenchmarkDataMissing, match="DeepSearch-2505.csv"):
        get_benchmark("xbench_deepsearch", data_dir=tmp_path).load()


def test_record_fields_are_hashed():
    bench = get_benchmark("xbench_deepsearch", csv_path=SYNTH)
    task = bench.load()[0]
    fields = bench.record_fields(task, task.gold)
    assert fields["gold"] == "sha256:" + sha256_text(task.gold)
    assert fields["prediction"] == fields["gold"]
    assert bench.record_fields(task, None)["prediction"] is None


# -- the plain-text rule ------------------------------------------------------------------------------
def _needles(text: str) -> list[bytes]:
    """Byte patterns whose presence in a file means ``text`` (or a long piece of it) leaked."""
    pieces = {text}
    if len(text) > 24:
        mid = len(text) // 2
        pieces |= {text[:12], text[mid:mid + 12], text[-12:]}
    out = []
    for piece in pieces:
        piece = piece.strip()
        # Too short to be evidence (one ASCII letter occurs everywhere); CJK pairs are specific enough.
        if len(piece.encode("utf-8")) < 4 or (not _CJK.search(piece) and len(piece) < 4):
            continue
        out.append(piece.encode("utf-8"))
        escaped = json.dumps(piece)[1:-1].encode("ascii", "backslashreplace")
        out.append(escaped)  # json.dumps(ensure_ascii=True) form
        out.append(piece.encode("utf-16-le"))
    return [n for n in out if len(n) >= 4]


def test_no_plain_text_reaches_disk_or_logs(tmp_path, monkeypatch, caplog, capsys):
    work, tmp = tmp_path / "cwd", tmp_path / "tmp"
    work.mkdir()
    tmp.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.delenv("MGRPO_JUDGE_CACHE_DIR", raising=False)
    caplog.set_level(logging.DEBUG)

    # The judge answers like a real xbench grader would, but never echoes benchmark text.
    replies = lambda body: "最终答案: 无\n结论: 错误"  # noqa: E731
    plain: list[tuple[str, str, str, str]] = []  # (source, row id, field, text): never printed
    scored = 0
    with JudgeStub(default=replies) as stub:
        judge_options = {"base_url": stub.base_url, "model": "stub-judge", "api_key_env": None, "backoff_s": 0}
        sources = {"synthetic": {"csv_path": SYNTH}, "2505": {"version": "2505"}, "2510": {"version": "2510"}}
        for source, options in sources.items():
            bench = get_benchmark("xbench_deepsearch", judge="llm", judge_options=judge_options, **options)
            tasks = bench.load()
            logging.getLogger("benchmarks").debug("loaded %s: %r", source, tasks[:3])
            for task in tasks:
                plain += [(source, task.task_id, "prompt", task.question), (source, task.task_id, "answer", task.gold),
                          (source, task.task_id, "reference_steps", bench.reference_steps(task.task_id))]
            for task in tasks[:8]:
                assert bench.score(task, task.gold).correct
                verdict = bench.score(task, f"一个错误的答案 {task.task_id}")
                assert verdict.correct is False and verdict.judge == "llm"
                logging.getLogger("benchmarks").info("verdict %s %r", task.task_id, verdict)
                scored += 1
            for task in tasks[:2]:  # re-scoring hits the cache
                bench.score(task, f"一个错误的答案 {task.task_id}")
        assert stub.count == scored, "second scoring must come from the cache"

    written = [p for root in (work, tmp) for p in root.rglob("*") if p.is_file()]
    assert len(written) == scored, "every judged verdict is cached on disk (so the scan below has files to scan)"
    blobs = {str(p.relative_to(tmp_path)): p.read_bytes() for p in written}
    out = capsys.readouterr()
    blobs["<log>"] = caplog.text.encode("utf-8")
    blobs["<stdout+stderr>"] = (out.out + out.err).encode("utf-8")
    blobs["<log records>"] = repr([r.args for r in caplog.records]).encode("utf-8")

    leaks, checked = [], 0
    for source, row_id, field, text in plain:
        needles = _needles(text)
        checked += bool(needles)
        for name, blob in blobs.items():
            if any(n in blob for n in needles):
                leaks.append(f"{source} row {row_id} {field} -> {name}")
    assert not leaks, f"decrypted plain text found: {leaks[:10]}"
    # every real prompt and reference text, and every answer long enough to be evidence (165 of 200;
    # the rest are short numbers or single characters that occur in any file by chance)
    assert checked >= 2 * 200 + 160, "the scan must cover the real rows"
    for p in written:  # the cache entry holds a key and a verdict, nothing else
        entry = json.loads(p.read_text())
        assert set(entry) == {"schema", "key", "correct", "verdict", "error"}
        assert re.fullmatch(r"[0-9a-f]{64}", entry["key"])


def test_scan_would_catch_a_leak(tmp_path):
    """The needle scan is not vacuous: a file holding a decrypted answer is detected."""
    task = get_benchmark("xbench_deepsearch", version="2510").load(limit=1)[0]
    leaked = tmp_path / "leak.json"
    leaked.write_text(json.dumps({"gold": task.gold, "q": task.question}))
    blob = leaked.read_bytes()
    assert any(n in blob for n in _needles(task.question))
    assert any(n in blob for n in _needles(task.gold)) or len(task.gold.encode()) < 4
