"""GAIA: the official scorer on every pinned case, the local-snapshot and Hub loaders, text103 (docs/benchmarks.md)."""

from __future__ import annotations

import json
import sys
import types
import warnings

import pandas as pd
import pytest

from benchmarks.base import BenchmarkDataError, BenchmarkDataMissing, default_data_dir
from benchmarks.gaia import question_scorer, read_text103_ids
from benchmarks.registry import get_benchmark

DATA = default_data_dir() / "gaia"
SYNTHETIC = DATA / "synthetic_gaia_validation.jsonl"
ATTACH = DATA / "synthetic_attachments"
CASES = [json.loads(line) for line in (DATA / "gaia_scorer_cases.jsonl").read_text().splitlines() if line.strip()]


def test_scorer_cases_file_is_the_documented_one():
    assert len(CASES) == 31
    assert {c["expected"] for c in CASES} == {True, False}


@pytest.mark.parametrize("case", CASES, ids=[f"row{i + 1}" for i in range(len(CASES))])
def test_official_scorer_reproduces_every_case(case):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert question_scorer(case["model_answer"], case["ground_truth"]) is case["expected"]


def test_scorer_warns_on_list_length_mismatch_and_prints_nothing(capsys):
    with pytest.warns(UserWarning, match="different lengths"):
        assert question_scorer("a, b, c", "a, b") is False
    assert question_scorer("17", "17") is True
    assert capsys.readouterr().out == ""


def synthetic(**options):
    return get_benchmark("gaia", snapshot=SYNTHETIC, attachments_dir=ATTACH, **options)


def test_local_snapshot_loads_levels_and_attachments():
    tasks = synthetic().load()
    assert len(tasks) == 6
    assert all(t.task_id.startswith("00000000-") for t in tasks)
    assert [t.metadata["level"] for t in tasks] == [1, 1, 2, 2, 1, 3]
    with_files = [t for t in tasks if t.attachments]
    assert len(with_files) == 3
    for task in with_files:
        (path,) = task.attachments
        assert path.endswith("00000000-0000-4000-8000-000000000003.csv")
        with open(path, encoding="utf-8") as fh:
            assert fh.read().strip(), "attachment must be a readable file"
    assert [t.gold for t in tasks][:2] == ["51", "2, 3, 5"]


def test_levels_filter():
    assert {t.metadata["level"] for t in synthetic(levels=[2]).load()} == {2}


def test_gold_and_wrong_answers_scored_with_official_rules():
    bench = synthetic()
    by_id = {t.task_id[-1]: t for t in bench.load()}
    assert bench.score(by_id["1"], "51.0").correct
    assert bench.score(by_id["2"], "2;3;5").correct
    assert bench.score(by_id["5"], "Sea Gull").correct
    verdict = bench.score(by_id["2"], "2, 3")
    assert not verdict.correct and verdict.verdict == "list_length_mismatch"
    assert bench.score(by_id["1"], "fifty-one").correct is False


def snapshot_dir(tmp_path, rows, fmt="jsonl"):
    split_dir = tmp_path / "GAIA" / "2023" / "validation"
    split_dir.mkdir(parents=True)
    if fmt == "jsonl":
        (split_dir / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    else:
        pd.DataFrame(rows).to_parquet(split_dir / "metadata.parquet")
    return tmp_path / "GAIA", split_dir


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_hub_layout_snapshot_dir(tmp_path, fmt):
    rows = [json.loads(l) for l in SYNTHETIC.read_text().splitlines()]
    for r in rows:  # the Hub snapshot keeps attachments next to metadata, by file_name
        r["file_path"] = ""
    root, split_dir = snapshot_dir(tmp_path, rows, fmt)
    (split_dir / "00000000-0000-4000-8000-000000000003.csv").write_text("fruit,units\nbanana,30\n")
    tasks = get_benchmark("gaia", snapshot=root).load(split="validation")
    assert len(tasks) == 6 and sum(bool(t.attachments) for t in tasks) == 3
    assert tasks[2].attachments[0] == str((split_dir / "00000000-0000-4000-8000-000000000003.csv").resolve())


def test_snapshot_env_var(monkeypatch):
    monkeypatch.setenv("MGRPO_GAIA_SNAPSHOT", str(SYNTHETIC))
    assert len(get_benchmark("gaia", attachments_dir=ATTACH).load(limit=2)) == 2


def test_text103_id_list():
    ids = read_text103_ids(DATA / "gaia_text103_task_ids.txt")
    assert len(ids) == 103 == len(set(ids))


def test_text103_subset_filters_by_id(tmp_path, caplog):
    ids = read_text103_ids(DATA / "gaia_text103_task_ids.txt")
    fake = {"Question": "[SYNTHETIC] placeholder", "Level": "1", "Final answer": "x", "file_name": "", "file_path": ""}
    rows = [dict(fake, task_id=ids[0]), dict(fake, task_id=ids[5]), dict(fake, task_id="00000000-0000-4000-8000-0000000000ff")]
    root, _ = snapshot_dir(tmp_path, rows)
    bench = get_benchmark("gaia", snapshot=root, subset="text103")
    with caplog.at_level("WARNING"):
        tasks = bench.load()
    assert [t.task_id for t in tasks] == [ids[0], ids[5]]
    assert "2 of the 103" in caplog.text
    assert get_benchmark("gaia", snapshot=root).load().__len__() == 3
    assert get_benchmark("gaia", snapshot=SYNTHETIC, attachments_dir=ATTACH, subset="text103").load() == []
    with pytest.raises(ValueError, match="subset"):
        get_benchmark("gaia", subset="text104")


def test_text103_bad_id_file_names_line(tmp_path):
    bad = tmp_path / "ids.txt"
    bad.write_text("17b5a6a3-bc87-42e8-b0fb-6ab0781ef2cc\nnot-a-uuid\n")
    with pytest.raises(BenchmarkDataError, match=r"ids\.txt:2"):
        read_text103_ids(bad)


def test_garbled_jsonl_names_file_and_line(tmp_path):
    lines = SYNTHETIC.read_text().splitlines()
    bad = tmp_path / "metadata.jsonl"
    bad.write_text("\n".join(lines[:2] + ['{"task_id": "x", "Question": '] + lines[2:]) + "\n")
    with pytest.raises(BenchmarkDataError) as info:
        get_benchmark("gaia", snapshot=bad).load()
    assert info.value.line == 3 and str(bad) in str(info.value)


@pytest.mark.parametrize("broken, problem", [("{cut}", "not valid JSON ("), ("[{row}]", "a GAIA row must be a JSON object")])
def test_a_broken_line_is_named_but_never_quoted(tmp_path, broken, problem):
    # benchmarks.core.read_jsonl reads through harness.records.iter_jsonl, whose message quotes the line:
    # the benchmark error keeps the file, line and JSON error from it, and leaves the question out.
    lines = SYNTHETIC.read_text().splitlines()
    row = lines[1]
    question = json.loads(row)["Question"]
    bad = tmp_path / "metadata.jsonl"
    bad.write_text("\n".join([lines[0], "", broken.format(cut=row[:-1], row=row)]) + "\n")
    with pytest.raises(BenchmarkDataError) as info:
        get_benchmark("gaia", snapshot=bad).load()
    message = str(info.value)
    assert info.value.line == 3 and message.startswith(f"{bad}:3: {problem}")
    assert question[:20] not in message and "Question" not in message


def test_row_missing_column_names_file_and_line(tmp_path):
    bad = tmp_path / "metadata.jsonl"
    bad.write_text(json.dumps({"task_id": "x", "Question": "q", "Level": "1"}) + "\n")
    with pytest.raises(BenchmarkDataError, match=r"metadata\.jsonl:1: .*Final answer"):
        get_benchmark("gaia", snapshot=bad).load()


def test_missing_attachment_is_a_clear_error(tmp_path):
    bad = tmp_path / "metadata.jsonl"
    row = json.loads(SYNTHETIC.read_text().splitlines()[2])
    bad.write_text(json.dumps(row) + "\n")
    with pytest.raises(BenchmarkDataError, match="attachment not found"):
        get_benchmark("gaia", snapshot=bad).load()


def test_unreadable_parquet(tmp_path):
    bad = tmp_path / "metadata.parquet"
    bad.write_bytes(b"not parquet at all")
    with pytest.raises(BenchmarkDataError, match="unreadable parquet"):
        get_benchmark("gaia", snapshot=bad).load()


def test_unknown_split():
    with pytest.raises(ValueError, match="split"):
        synthetic().load(split="train")


# -- the gated Hub dataset -------------------------------------------------------------------------
@pytest.fixture
def hub_env(monkeypatch):
    for var in ("MGRPO_GAIA_SNAPSHOT", "HF_TOKEN", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_missing_token_says_what_to_set(hub_env):
    with pytest.raises(BenchmarkDataMissing) as info:
        get_benchmark("gaia").load()
    message = str(info.value)
    assert "HF_TOKEN" in message and "gaia-benchmark/GAIA" in message and "snapshot" in message


def test_offline_says_what_to_set(hub_env):
    hub_env.setenv("HF_HUB_OFFLINE", "1")
    hub_env.setenv("HF_TOKEN", "hf_dummy_offline_token")
    with pytest.raises(BenchmarkDataMissing, match="HF_HUB_OFFLINE") as info:
        get_benchmark("gaia").load()
    assert "hf_dummy_offline_token" not in str(info.value)


def fake_datasets(monkeypatch, load_dataset):
    module = types.ModuleType("datasets")
    module.load_dataset = load_dataset
    monkeypatch.setitem(sys.modules, "datasets", module)


def test_wrong_token_is_reported_without_the_token(hub_env):
    secret = "hf_WRONGtoken123456"
    hub_env.setenv("HF_TOKEN", secret)

    def load_dataset(path, name, split, token):
        raise PermissionError(f"401 Client Error for token {token}: gated repo")

    fake_datasets(hub_env, load_dataset)
    with pytest.raises(BenchmarkDataMissing) as info:
        get_benchmark("gaia").load()
    message = str(info.value)
    assert secret not in message and "HF_TOKEN is valid" in message and "PermissionError" in message


def test_hub_rows_are_loaded_with_the_token(hub_env):
    hub_env.setenv("HF_TOKEN", "hf_good")
    seen = {}
    rows = [json.loads(l) for l in SYNTHETIC.read_text().splitlines()]
    for r in rows:  # the Hub loader gives absolute attachment paths
        r["file_path"] = str(ATTACH / r["file_path"]) if r["file_path"] else ""

    def load_dataset(path, name, split, token):
        seen.update(path=path, name=name, split=split, token=token)
        return rows

    fake_datasets(hub_env, load_dataset)
    tasks = get_benchmark("gaia").load(limit=4)
    assert seen == {"path": "gaia-benchmark/GAIA", "name": "2023_all", "split": "validation", "token": "hf_good"}
    assert len(tasks) == 4 and tasks[2].attachments and tasks[3].metadata["level"] == 2
