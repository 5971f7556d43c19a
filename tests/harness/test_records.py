"""Tests of harness.records (docs/report.md): schemas, validation, migration, atomic I/O, layout,
provenance and run status."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing as mp
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import records as rec


def _step(**kw) -> rec.StepRecord:
    base = dict(run_id="r1", trainer="mgrpo", role="planner", seed=0, step=1, reward_mean=0.5)
    base.update(kw)
    return rec.StepRecord(**base)


def _task(**kw) -> rec.TaskRecord:
    base = dict(run_id="r1", trainer="mgrpo", seed=0, step=25, benchmark="local_gaia",
                task_id="t1", correct=True)
    base.update(kw)
    return rec.TaskRecord(**base)


def test_schema_fields_match_design_section_8():
    design_step = ("schema run_id trainer role seed step time reward_mean reward_std "
                   "reward_components advantage_abs_mean frac_zero_std_groups policy_loss "
                   "clip_ratio entropy grad_norm kl n_trajectories n_model_tokens sub_calls_mean "
                   "sub_calls_p99 align_duplicated align_dropped rollout_s train_s wait_s "
                   "policy_version").split()
    design_task = ("schema run_id trainer seed step benchmark benchmark_version task_id prediction "
                   "gold correct judge verdict error n_turns n_sub_calls n_tokens latency_s").split()
    step_fields = {f.name for f in dataclasses.fields(rec.StepRecord)}
    task_fields = {f.name for f in dataclasses.fields(rec.TaskRecord)}
    assert set(design_step) <= step_fields
    assert set(design_task) <= task_fields
    # only documented additions
    assert step_fields - set(design_step) == {"sub_calls_hist", "extra", "stale_trajectories", "dropped_stale",
                                              "peak_rss_mib", "peak_gpu_mib", "time_split", "model_share"}
    assert task_fields - set(design_task) == {"extra", "transcript", "inference_run", "temperature", "sample_seed"}


def test_step_round_trip_through_file(tmp_path: Path):
    r = _step(reward_components={"format": 1.0, "correct": 0.5}, sub_calls_hist=[1, 2, 3],
              align_duplicated=4, kl=None, grad_norm=float("nan"))
    path = rec.append_step(tmp_path, r)
    assert path == tmp_path / "planner" / "metrics.jsonl"
    res = rec.read_steps(path)
    (back,) = res.records
    assert back.reward_components == {"format": 1.0, "correct": 0.5}
    assert back.sub_calls_hist == [1, 2, 3]
    assert back.align_duplicated == 4 and back.kl is None
    assert back.grad_norm != back.grad_norm  # NaN survives (a collapse signal)
    assert back.schema == rec.SCHEMA_VERSION and res.migrated == 0


def test_task_round_trip_and_eval_path(tmp_path: Path):
    path = rec.append_task(tmp_path, _task(prediction="Paris", gold=["a", "b"], error=None))
    assert path == tmp_path / "eval" / "25" / "local_gaia.jsonl"
    (back,) = rec.read_tasks(path).records
    assert back.correct is True and back.gold == ["a", "b"] and back.prediction == "Paris"


def _transcript(task_id: str = "t1") -> dict:
    from harness.transcript import messages_transcript

    return messages_transcript([{"role": "system", "content": "S"}, {"role": "user", "content": f"Q {task_id}"},
                                {"role": "assistant", "content": 'search "x" \\ {"transcript": 1}'},
                                {"role": "tool", "content": "o" * 900},
                                {"role": "assistant", "content": "<answer>A</answer>"}], agent="single_agent")


def test_task_transcript_is_written_last_and_read_with_or_without_it(tmp_path: Path):
    """Issue 15: an optional field of schema 1 (no version step): written as the last member, left out
    when None; ``transcripts=False`` gives the same records without it (and without decoding it)."""
    tr = _transcript()
    path = rec.append_task(tmp_path, _task(transcript=tr, prediction="A", extra={"runner": "m", "w": {"a": 1}}))
    rec.append_task(tmp_path, _task(task_id="t2"))
    first, second = path.read_text().splitlines()
    assert first.endswith(',"format":"transcript/1"}}') and list(json.loads(first))[-1] == "transcript"
    assert "transcript" not in json.loads(second)  # None is left out
    full = rec.read_tasks(path)
    assert [r.transcript for r in full.records] == [tr, None]
    assert full.records[0].extra == {"runner": "m", "w": {"a": 1}}
    lazy = rec.read_tasks(path, transcripts=False)
    assert [r.transcript for r in lazy.records] == [None, None]
    assert [rec.to_dict(r) for r in lazy.records] == [
        {k: v for k, v in rec.to_dict(r).items() if k != "transcript"} for r in full.records]
    assert rec.to_dict(full.records[0]) == json.loads(first)  # round trip


def test_records_without_transcripts_still_read(tmp_path: Path):
    p = tmp_path / "old.jsonl"
    v1 = {k: v for k, v in rec.to_dict(_task()).items()}  # a schema-1 record written before issue 15
    v0 = {"run_id": "r", "trainer": "m", "seed": 0, "step": 25, "benchmark": "b", "task_id": "2",
          "correct": False, "answer": "x"}
    p.write_text(json.dumps(v1) + "\n" + json.dumps(v0) + "\n")
    for transcripts in (True, False):
        res = rec.read_tasks(p, transcripts=transcripts)
        assert [r.transcript for r in res.records] == [None, None] and res.records[1].prediction == "x"


def test_skipping_transcripts_never_loses_other_fields(tmp_path: Path):
    """The cut is checked: a transcript that is not the last member, a "transcript" key nested in another
    field, other separators and a torn last line all read exactly as a full read (minus the transcript)."""
    tr = _transcript()
    base = rec.to_dict(_task())
    no_gold = {k: v for k, v in base.items() if k != "gold"}
    decoy = {"y": 1, "transcript": 5, "format": "transcript/1"}  # ends the line like a transcript does
    lines = [
        json.dumps({**base, "transcript": tr}),  # spaced separators, last: cut
        json.dumps({**base, "task_id": "t2", "transcript": tr, "after": 1.5}),  # not last: decoded whole
        json.dumps({**no_gold, "task_id": "t3", "gold": decoy}),  # nested key: the cut fails, decoded whole
        json.dumps({**no_gold, "task_id": "t4", "gold": {"transcript": tr}, "transcript": tr}),  # cut at the last
        json.dumps({**base, "task_id": "t5", "transcript": None}),
    ]
    p = tmp_path / "mixed.jsonl"
    p.write_text("\n".join(lines) + "\n" + lines[0][:-40])  # and a torn last line
    full = rec.read_tasks(p, tolerate_truncated_tail=True)
    lazy = rec.read_tasks(p, tolerate_truncated_tail=True, transcripts=False)
    assert lazy.truncated_tail and len(lazy.records) == len(full.records) == 5
    for f, z in zip(full.records, lazy.records):
        assert z.transcript is None
        assert {**f.__dict__, "transcript": None} == z.__dict__
    assert lazy.records[1].extra == {"after": 1.5} and lazy.records[2].gold == decoy
    assert lazy.records[3].gold == {"transcript": tr}
    assert [r.transcript is not None for r in full.records] == [True, True, False, True, False]
    # the cheap cut itself: tried only where the line ends like a transcript
    assert [rec._cut_transcript(ln.encode()) != ln.encode() for ln in lines] == [True, False, True, True, False]
    compact = json.dumps({**base, "transcript": tr}, separators=(",", ":")).encode()
    assert json.loads(rec._cut_transcript(compact)) == base


def test_a_transcript_of_the_wrong_type_is_named(tmp_path: Path):
    p = tmp_path / "x.jsonl"
    p.write_text(json.dumps({**rec.to_dict(_task()), "transcript": ["turn"]}) + "\n")
    with pytest.raises(rec.RecordError, match=r"x.jsonl:1: field 'transcript' must be dict"):
        rec.read_tasks(p)


def test_unknown_keys_are_kept_in_extra_and_written_back(tmp_path: Path):
    p = tmp_path / "m.jsonl"
    line = rec.to_dict(_step())
    line["my_new_metric"] = 3.5
    p.write_text(json.dumps(line) + "\n")
    (r,) = rec.read_steps(p).records
    assert r.extra == {"my_new_metric": 3.5}
    assert rec.to_dict(r)["my_new_metric"] == 3.5


@pytest.mark.parametrize("field,value,expect", [
    ("seed", "0", "field 'seed' must be int"),
    ("step", 1.5, "field 'step' must be int"),
    ("reward_mean", "high", "field 'reward_mean' must be float/int"),
    ("seed", True, "field 'seed' must be int"),
])
def test_wrong_types_name_file_line_and_field(tmp_path: Path, field, value, expect):
    p = tmp_path / "metrics.jsonl"
    good = rec.to_dict(_step())
    bad = dict(good, **{field: value})
    p.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(rec.RecordError) as ei:
        rec.read_steps(p)
    assert f"{p}:2" in str(ei.value) and expect in str(ei.value)


def test_missing_required_field_is_named(tmp_path: Path):
    p = tmp_path / "x.jsonl"
    d = rec.to_dict(_task())
    del d["correct"]
    p.write_text(json.dumps(d) + "\n")
    with pytest.raises(rec.RecordError, match=r"x.jsonl:1: task record misses required field\(s\) correct"):
        rec.read_tasks(p)


def test_broken_line_in_the_middle_names_file_and_line(tmp_path: Path):
    p = tmp_path / "metrics.jsonl"
    good = json.dumps(rec.to_dict(_step()))
    p.write_text(good + "\n" + good[:30] + "\n" + good + "\n")
    for tolerate in (False, True):
        with pytest.raises(rec.RecordError, match=r"metrics.jsonl:2: broken JSONL line"):
            rec.read_steps(p, tolerate_truncated_tail=tolerate)


def test_truncated_last_line_tolerated_only_when_asked(tmp_path: Path):
    p = tmp_path / "metrics.jsonl"
    good = json.dumps(rec.to_dict(_step()))
    p.write_text(good + "\n" + good[:25])  # writer killed mid-line
    with pytest.raises(rec.RecordError, match=":2: broken JSONL line"):
        rec.read_steps(p)
    res = rec.read_steps(p, tolerate_truncated_tail=True)
    assert len(res.records) == 1 and res.truncated_tail
    # a complete last line without newline is not "truncated"
    p.write_text(good + "\n" + good)
    res = rec.read_steps(p, tolerate_truncated_tail=True)
    assert len(res.records) == 2 and not res.truncated_tail


def test_append_after_a_torn_line_removes_it_so_no_broken_line_stays_in_the_middle(tmp_path: Path):
    """A writer killed mid-line, or whose write failed on a full disk, leaves a partial line; the next append
    removes it (it never was a record) instead of burying it under new lines where no reader accepts it."""
    p = tmp_path / "m.jsonl"
    p.write_text('{"run_id": "r1", "tr')  # a previous writer died mid-line, on the first line
    rec.append_jsonl(p, rec.to_dict(_step(step=7)))
    assert [json.loads(x)["step"] for x in p.read_text().splitlines()] == [7]
    first = p.read_text()
    big = "x" * 200_000  # a torn line longer than the backward scan's block
    with open(p, "a") as fh:
        fh.write('{"run_id": "r1", "transcript": "' + big)
    rec.append_jsonl(p, rec.to_dict(_step(step=8)))
    assert p.read_text().startswith(first)
    assert [r.step for r in rec.read_steps(p).records] == [7, 8]  # strict read: no broken line anywhere


def test_schema_zero_is_migrated(tmp_path: Path):
    p = tmp_path / "metrics.jsonl"
    v0 = {"run_id": "r", "trainer": "mgrpo", "role": "planner", "seed": 1, "step": 3, "reward": 0.7}
    v1 = rec.to_dict(_step(step=4))
    p.write_text(json.dumps(v0) + "\n" + json.dumps(v1) + "\n")
    res = rec.read_steps(p)
    assert [r.reward_mean for r in res.records] == [0.7, 0.5]
    assert all(r.schema == rec.SCHEMA_VERSION for r in res.records)
    assert res.migrated == 1 and res.schemas == {0, 1}
    t0 = {"run_id": "r", "trainer": "m", "seed": 0, "step": 0, "benchmark": "b",
          "task_id": "1", "correct": False, "answer": "x", "schema": 0}
    assert rec.from_dict(rec.TaskRecord, t0).prediction == "x"


def test_newer_schema_is_refused_with_file_and_version(tmp_path: Path):
    p = tmp_path / "metrics.jsonl"
    d = rec.to_dict(_step())
    d["schema"] = 99
    p.write_text(json.dumps(d) + "\n")
    with pytest.raises(rec.RecordError, match=r"metrics.jsonl:1: step record has schema version 99, newer"):
        rec.read_steps(p)


def _append_many(path: str, worker: int, n: int) -> None:
    for i in range(n):
        rec.append_jsonl(path, {"worker": worker, "i": i, "pad": "x" * (500 + 37 * worker)})


def test_concurrent_appends_never_corrupt_lines(tmp_path: Path):
    path = str(tmp_path / "shared.jsonl")
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_append_many, args=(path, w, 150)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    rows = [obj for _, obj in rec.iter_jsonl(path)]
    assert len(rows) == 600
    for w in range(4):
        assert sorted(r["i"] for r in rows if r["worker"] == w) == list(range(150))


def test_atomic_json_write_replaces_and_leaves_no_temp(tmp_path: Path):
    p = tmp_path / "sub" / "status.json"
    rec.write_json_atomic(p, {"a": 1})
    rec.write_json_atomic(p, {"a": 2})
    assert json.loads(p.read_text()) == {"a": 2}
    assert [f.name for f in p.parent.iterdir()] == ["status.json"]
    with pytest.raises(TypeError):
        rec.write_json_atomic(p, {"bad": object()})
    assert json.loads(p.read_text()) == {"a": 2}  # the old file survived the failed write
    assert [f.name for f in p.parent.iterdir()] == ["status.json"]


def test_run_paths_layout_and_validation(tmp_path: Path):
    rp = rec.RunPaths.of(tmp_path, "run-1")
    assert rp.provenance == tmp_path / "run-1" / "provenance.json"
    assert rp.status == tmp_path / "run-1" / "status.json"
    assert rp.metrics("sub") == tmp_path / "run-1" / "sub" / "metrics.jsonl"
    assert rp.checkpoints("planner") == tmp_path / "run-1" / "planner" / "checkpoints"
    assert rp.eval_file(50, "gaia") == tmp_path / "run-1" / "eval" / "50" / "gaia.jsonl"
    assert rp.store_db == tmp_path / "run-1" / "store.db"
    for bad in ("", "..", "a/b"):
        with pytest.raises(ValueError):
            rec.RunPaths.of(tmp_path, bad)
    with pytest.raises(ValueError, match="reserved"):
        rp.metrics("eval")
    with pytest.raises(ValueError):
        rp.eval_file(-1, "gaia")
    assert not rp.is_run()
    rec.append_step(rp.root, _step(role="sub"))
    rec.append_step(rp.root, _step(role="planner"))
    rec.append_task(rp.root, _task(step=100))
    rec.append_task(rp.root, _task(step=25, benchmark="b2"))
    (rp.eval_dir / "cache").mkdir()  # not a step folder: ignored
    assert rp.roles() == ["planner", "sub"]
    assert [(s, b) for s, b, _ in rp.eval_files()] == [(25, "b2"), (100, "local_gaia")]
    assert rec.find_runs(tmp_path) == [rp]
    assert rec.find_runs(tmp_path / "missing") == []
    rec.write_provenance(rp.root, {}, 0, repo_dir=tmp_path, packages=())
    assert rec.find_runs(rp.root) == [rp]  # a run folder given directly


def test_status_lifecycle(tmp_path: Path):
    assert rec.read_status(tmp_path) == {"state": "unknown"}
    with rec.run_status(tmp_path, step=0):
        assert rec.read_status(tmp_path)["state"] == "running"
    assert rec.read_status(tmp_path)["state"] == "completed"
    with pytest.raises(RuntimeError):
        with rec.run_status(tmp_path):
            raise RuntimeError("boom")
    st = rec.read_status(tmp_path)
    assert st["state"] == "failed" and st["error"] == "RuntimeError: boom"
    with pytest.raises(ValueError, match="run state must be one of"):
        rec.write_status(tmp_path, "crashed")
    (tmp_path / "status.json").write_text('{"state": "weird"}')
    with pytest.raises(rec.RecordError, match="'state' must be one of"):
        rec.read_status(tmp_path)


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@example.org", "-c", "user.name=t",
                    *args], check=True, capture_output=True)


def test_provenance_captures_git_commit_dirty_flag_versions_and_config(tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "f.txt").write_text("a")
    _git(repo, "add", "f.txt")
    _git(repo, "commit", "-q", "-m", "init")
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    run = tmp_path / "runs" / "mgrpo-s0"
    doc = rec.write_provenance(run, {"lr": 1e-4, "nested": {"alignment": "fixed"}}, [0],
                               trainer="mgrpo", repo_dir=repo, packages=("numpy", "no-such-pkg"))
    assert doc["git"] == {"commit": head, "dirty": False, "branch": doc["git"]["branch"]}
    assert doc["versions"]["numpy"] and doc["versions"]["no-such-pkg"] is None
    assert doc["versions"]["python"].count(".") == 2
    assert doc["config"] == {"lr": 1e-4, "nested": {"alignment": "fixed"}}
    assert doc["seeds"] == [0] and doc["trainer"] == "mgrpo" and doc["run_id"] == "mgrpo-s0"
    assert doc["host"]["hostname"]
    assert json.loads((run / "provenance.json").read_text()) == doc
    assert rec.read_status(run)["state"] == "running"
    (repo / "f.txt").write_text("b")
    assert rec.git_state(repo)["dirty"] is True


def test_provenance_argv_names_repository_paths_relative_to_it(tmp_path: Path, monkeypatch):
    """``python -m harness`` puts the absolute path of ``__main__.py`` in argv[0]; committed records must not
    carry the machine's folders (issue 7), while a path outside the repository is the user's and stays."""
    repo = tmp_path / "repo"
    argv = [f"{repo}/harness/__main__.py", "train", "--config", f"{repo}/baselines/configs/tiny/mgrpo.yaml",
            f"models.planner={repo}/runs/ws/planner", "--run-dir", "/elsewhere/run", "x=1", f"{repo}x/other"]
    assert rec.portable_argv(argv, repo) == [
        "harness/__main__.py", "train", "--config", "baselines/configs/tiny/mgrpo.yaml",
        "models.planner=runs/ws/planner", "--run-dir", "/elsewhere/run", "x=1", f"{repo}x/other"]
    monkeypatch.setattr(sys, "argv", argv)
    doc = rec.write_provenance(tmp_path / "runs" / "r", {}, [0], trainer="mgrpo", repo_dir=repo, packages=())
    assert doc["argv"][0] == "harness/__main__.py"


def test_provenance_tolerates_no_git_and_accepts_dataclass_config(tmp_path: Path):
    from dataclasses import dataclass

    @dataclass
    class Cfg:
        lr: float = 1e-3
        k: int = 8

    doc = rec.write_provenance(tmp_path / "r", Cfg(), 3, repo_dir=tmp_path, mark_running=False)
    assert doc["git"]["commit"] is None and doc["git"]["dirty"] is None
    assert doc["config"] == {"lr": 1e-3, "k": 8} and doc["seeds"] == [3]
    assert not (tmp_path / "r" / "status.json").exists()
    with pytest.raises(ValueError, match="seeds must be ints"):
        rec.write_provenance(tmp_path / "r2", {}, ["0"])


def test_records_module_is_stdlib_only():
    code = ("import sys, harness.records; bad = [m for m in ('numpy', 'pandas', 'torch', "
            "'matplotlib') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[2], env={**os.environ})
    assert out.returncode == 0, out.stdout + out.stderr
