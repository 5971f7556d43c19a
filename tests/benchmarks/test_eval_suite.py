"""The evaluation suite (docs/evaluation.md, docs/report.md): local twins, runners, and ``pytest benchmarks/`` end to end.

The suite itself is exercised in subprocesses (``python -m pytest benchmarks/ ...``), exactly as a
user runs it: exit status, the closing accuracy table, the task records (one line per task, the
table's numbers recomputed by hand from them), xdist (``-n 2``) writing the same records without
corruption, crashes and timeouts staying in the denominator, clear usage errors, and the one-line
message when a trainer has no run yet.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from benchmarks.base import BenchmarkDataMissing
from benchmarks.local import LocalGaia, LocalWebWalkerQA, LocalXBench, generated_tasks
from benchmarks.registry import get_benchmark, list_benchmarks
from benchmarks.runners import (NoRunFound, RunnerError, checkpoints, find_latest_run, resolve_target,
                                resolve_weights, train_command, unsupported)
from benchmarks.scoring import webwalkerqa_breakdown
from harness.records import read_tasks, write_provenance

REPO = Path(__file__).resolve().parents[2]
TABLE_ROW = re.compile(r"^(?P<bench>\w+)\s+(?P<version>\S+)\s+(?P<n>\d+)\s+(?P<correct>\d+)\s+"
                       r"(?P<acc>[\d.]+)% ± +(?P<se>[\d.]+)\s+(?P<errors>\d+)", re.M)


# ------------------------------------------------------------------------------ local twins
@pytest.fixture(scope="module")
def tiny_full_taskset():
    from harness.world.generator import WorldConfig, generate_world
    from harness.world.tasks import TaskConfig, generate_tasks

    return generate_tasks(generate_world(WorldConfig(seed=0, size="tiny")), TaskConfig())


def test_local_twins_are_registered():
    assert {"local_gaia", "local_xbench", "local_webwalkerqa"} <= set(list_benchmarks())


def test_generating_one_split_gives_the_same_tasks_as_the_default_generation(tiny_full_taskset):
    for split in ("test", "train"):
        mine = generated_tasks(0, "tiny", split)
        for bench in ("gaia", "webwalkerqa", "xbench"):
            full = tiny_full_taskset.tasks[(bench, split)]
            assert json.dumps(list(mine[bench]), sort_keys=True) == json.dumps(full, sort_keys=True), (bench, split)


def test_tasks_dir_reads_what_world_tasks_writes(tiny_full_taskset, tmp_path):
    from harness.world.tasks import write_tasks

    write_tasks(tiny_full_taskset, str(tmp_path))
    for cls in (LocalGaia, LocalXBench, LocalWebWalkerQA):
        from_files = cls(world_size="tiny", tasks_dir=tmp_path).load("test")
        in_memory = cls(world_size="tiny").load("test")
        assert [t.task_id for t in from_files] == [t.task_id for t in in_memory]
        assert [t.gold for t in from_files] == [t.gold for t in in_memory]
    attached = [t for t in LocalGaia(world_size="tiny", tasks_dir=tmp_path).load("train") if t.attachments]
    assert attached and all(Path(a).is_file() for t in attached for a in t.attachments)
    with pytest.raises(BenchmarkDataMissing, match="python -m harness world tasks"):
        LocalXBench(tasks_dir=tmp_path / "nothing").load()


def test_local_gaia_scores_with_the_gaia_scorer_and_the_others_by_exact_match():
    gaia = get_benchmark("local_gaia", world_size="tiny")
    numeric = next(t for t in gaia.load() if t.gold.isdigit() and len(t.gold) >= 4)
    # GAIA's number rule strips $ and , ; the exact rule of the other twins compares numbers too.
    assert gaia.score(numeric, f"${int(numeric.gold):,}").correct
    assert gaia.score(numeric, str(int(numeric.gold) + 1)).correct is False
    assert gaia.score(numeric, numeric.gold).judge == "gaia_scorer"
    xb = get_benchmark("local_xbench", world_size="tiny")
    task = xb.load(limit=1)[0]
    assert xb.score(task, "  " + task.gold.upper() + ".").correct  # normalised exact match
    assert xb.score(task, task.gold + " Jr").correct is False
    assert xb.sensitive is False and xb.record_fields(task, "x")["gold"] == task.gold


def test_local_task_shapes():
    ww = get_benchmark("local_webwalkerqa", world_size="tiny")
    tasks = ww.load()
    assert len({t.task_id for t in tasks}) == len(tasks) > 0
    assert all("Start from this website: http://world.local/" in t.question for t in tasks)
    cells = webwalkerqa_breakdown([(t, ww.score(t, t.gold)) for t in tasks])
    assert cells["overall"].n == len(tasks) and cells["overall"].mean == 1.0
    gaia = get_benchmark("local_gaia", world_size="tiny").load()
    assert {t.metadata["level"] for t in gaia} <= {1, 2, 3}
    assert get_benchmark("local_gaia", world_seed=3, world_size="tiny").version == "1+seed3.tiny"
    with pytest.raises(ValueError, match="world_seed"):
        LocalGaia(world_seed=-1)
    with pytest.raises(ValueError, match="split"):
        LocalGaia(world_size="tiny").load("validation")


# ------------------------------------------------------------------------------ run lookup
def _make_run(root: Path, name: str, trainer: str, mtime: float, steps=()) -> Path:
    run = root / name
    write_provenance(run, {"world": {"seed": 7}}, [3], trainer=trainer, mark_running=False)
    os.utime(run / "provenance.json", (mtime, mtime))
    for s in steps:
        _fake_checkpoint(run / "planner" / "checkpoints" / f"checkpoint-{s}")
    return run


def _fake_checkpoint(d: Path) -> Path:
    """A checkpoint folder as the evaluation lists it (config and weights files present; not loadable)."""
    d.mkdir(parents=True)
    (d / "config.json").write_text("{}")
    (d / "model.safetensors").write_bytes(b"")
    return d


def test_latest_run_lookup(tmp_path):
    with pytest.raises(NoRunFound) as info:
        find_latest_run(tmp_path, "mgrpo")
    assert train_command("mgrpo") in str(info.value) and "\n" not in str(info.value)
    assert train_command("mgrpo") == ("python -m harness train --trainer mgrpo "
                                      "--config baselines/configs/tiny/mgrpo.yaml")
    _make_run(tmp_path, "a", "mgrpo", 1000)
    newest = _make_run(tmp_path, "b", "mgrpo", 2000, steps=(25, 100, 50))
    _make_run(tmp_path, "c", "frozen_sub", 3000)
    assert find_latest_run(tmp_path, "mgrpo") == newest
    assert [s for s, _ in checkpoints(newest, "planner")] == [25, 50, 100]
    (newest / "planner" / "checkpoints" / "checkpoint-150").mkdir()  # a kill during its save left it empty
    assert [s for s, _ in checkpoints(newest, "planner")] == [25, 50, 100]
    target = resolve_target("mgrpo", run=None, runs_dir=tmp_path, world_seed=None)
    assert (target.run_dir, target.step, target.seed, target.world_seed) == (newest, 100, 3, 7)
    with pytest.raises(RunnerError, match="is a frozen_sub run"):
        resolve_target("mgrpo", run=tmp_path / "c", runs_dir=tmp_path, world_seed=None)
    with pytest.raises(RunnerError, match="own run folder"):
        resolve_target("expert", run=tmp_path / "c", runs_dir=tmp_path, world_seed=None)
    with pytest.raises(RunnerError, match="unknown trainer"):
        resolve_target("grpo", run=None, runs_dir=tmp_path, world_seed=None)
    expert = resolve_target("expert", run=None, runs_dir=tmp_path, world_seed=2, expert_noise=0.1)
    assert expert.run_dir == tmp_path / "expert-2-noise0.1" and expert.step == 0


def test_weights_of_each_role_fall_back_to_the_weights_it_started_from(tmp_path):
    """Issue 14: an mgrpo sub role that trained no step saved no checkpoint; it is evaluated with its
    start (config.models.sub, a warm-start folder's sub_agent/), and the choice is described."""
    warm = tmp_path / "warm"
    (warm / "sub_agent").mkdir(parents=True)
    run = _make_run(tmp_path, "r", "mgrpo", 1000, steps=(2,))
    prov = json.loads((run / "provenance.json").read_text())
    prov["config"]["models"] = {"planner": "tiny", "sub": str(warm), "init_seed": 3}
    (run / "provenance.json").write_text(json.dumps(prov))
    (run / "sub" / "checkpoints").mkdir(parents=True)  # what the trainer leaves: an empty folder

    def weights(trainer="mgrpo", step=None):
        return resolve_weights(resolve_target(trainer, run=run, runs_dir=tmp_path, world_seed=None, step=step))

    w = weights()
    assert (w["planner"].source, w["planner"].step) == ("checkpoint", 2)
    assert (w["sub"].source, w["sub"].path, w["sub"].step) == ("started", str(warm / "sub_agent"), None)
    assert w["sub"].model == {"init_seed": 3}
    assert w["sub"].describe().startswith("untrained (no checkpoint") and "started weights models.sub=" in \
        w["sub"].describe()
    assert w["sub"].record() == {"source": "started", "path": str(warm / "sub_agent"), "step": None,
                                 "reason": "no checkpoint: the sub role trained no step"}
    # A sub role that trained less than the planner: its latest checkpoint at or before the step.
    for s in (1, 5):
        _fake_checkpoint(run / "sub" / "checkpoints" / f"checkpoint-{s}")
    w = weights()
    assert (w["sub"].source, w["sub"].step) == ("checkpoint", 1)
    _fake_checkpoint(run / "planner" / "checkpoints" / "checkpoint-6")
    assert weights()["sub"].step == 5
    shutil.rmtree(run / "sub" / "checkpoints" / "checkpoint-1")
    w = weights(step=2)
    assert w["sub"].source == "started" and "no sub checkpoint at or before step 2" in w["sub"].reason
    # the planner at step 0 is its start; a step without a planner checkpoint is an error
    assert weights(step=0)["planner"].source == "started"
    with pytest.raises(RunnerError, match="no checkpoint for step 4; it has steps 2, 6"):
        weights(step=4)
    # frozen_sub: the latest sub checkpoint whatever the step; single_agent: no sub, its own start
    prov["trainer"] = "single_agent"
    (run / "provenance.json").write_text(json.dumps(prov))
    for d in (run / "planner" / "checkpoints").iterdir():
        shutil.rmtree(d)
    w = weights("single_agent")
    assert set(w) == {"planner"} and w["planner"].source == "started" and w["planner"].path == "tiny"


def test_data_files_name_what_a_data_folder_must_hold(tmp_path):
    assert get_benchmark("xbench_deepsearch", data_dir=tmp_path).data_files() == [
        tmp_path / "xbench" / "DeepSearch-2505.csv"]
    assert get_benchmark("xbench_deepsearch", data_dir=tmp_path, csv_path=tmp_path / "x.csv").data_files() == []
    assert get_benchmark("webwalkerqa", data_dir=tmp_path).data_files() == [
        tmp_path / "webwalkerqa" / "webwalkerqa_main.jsonl"]
    assert get_benchmark("gaia", data_dir=tmp_path).data_files() == []  # snapshot or Hub, not the folder
    assert get_benchmark("gaia", data_dir=tmp_path, subset="text103").data_files() == [
        tmp_path / "gaia" / "gaia_text103_task_ids.txt"]
    assert get_benchmark("local_gaia", world_size="tiny").data_files() == []


def test_expert_runner_refuses_real_benchmarks_and_other_worlds():
    local = get_benchmark("local_gaia", world_size="tiny")
    assert unsupported("expert", local, 0, "tiny") is None
    assert "world seed" in unsupported("expert", local, 1, "tiny")
    real = get_benchmark("webwalkerqa")
    assert "only the local_* benchmarks" in unsupported("expert", real, 0, "tiny")
    assert unsupported("expert", real, 0, "tiny", web=True) is None  # with --web it runs on the real web


# ------------------------------------------------------------------------------ the suite
def run_suite(*args: str, env_extra: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    # A clean pytest environment: under `make test -n 2` this process is an xdist worker, and its
    # PYTEST_*/xdist variables would make the child session behave like one (benchmarks disabled).
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "XDIST_"))}
    env.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **(env_extra or {})})
    cmd = [sys.executable, "-m", "pytest", "benchmarks/", "-p", "no:cacheprovider", *args]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def table(stdout: str) -> dict[str, dict[str, str]]:
    return {m["bench"]: m.groupdict() for m in TABLE_ROW.finditer(stdout)}


def records(run: Path, bench: str):
    return read_tasks(run / "eval" / "0" / f"{bench}.jsonl").records


@pytest.mark.slow
def test_suite_expert_end_to_end(tmp_path):
    run = tmp_path / "run"
    junit = tmp_path / "junit.xml"
    proc = run_suite("--trainer=expert", "--bench", "local_gaia", "--bench-limit", "5", "--run", str(run),
                     f"--junitxml={junit}")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "mgrpo evaluation: trainer=expert" in out
    recs = records(run, "local_gaia")
    assert len(recs) == 5 and len({r.task_id for r in recs}) == 5
    assert len((run / "eval" / "0" / "local_gaia.jsonl").read_text().splitlines()) == 5
    row = table(proc.stdout)["local_gaia"]
    n_correct = sum(r.correct for r in recs)
    assert (int(row["n"]), int(row["correct"])) == (5, n_correct)
    assert float(row["acc"]) == pytest.approx(100 * n_correct / 5, abs=0.05)
    assert n_correct == 5  # the expert at noise 0 solves every emitted task (each was verified)
    for r in recs:
        assert (r.trainer, r.step, r.benchmark, r.error) == ("expert", 0, "local_gaia", None)
        assert r.latency_s is not None and r.latency_s > 0 and r.n_sub_calls >= 1
        assert r.extra["eval_session"] == recs[0].extra["eval_session"]
        # issue 15: the episode's transcript, planner and sub-agent turns, so a reader sees how it answered
        turns = r.transcript["turns"]
        assert {t["agent"] for t in turns} == {"planner", "sub_agent"} and r.gold in turns[-1]["text"]
    assert json.loads((run / "provenance.json").read_text())["trainer"] == "expert"
    status = json.loads((run / "status.json").read_text())
    assert (status["state"], status["n_records"]) == ("completed", 5)
    cases = ET.parse(junit).getroot().iter("testcase")
    names = sorted(c.get("name") for c in cases)
    assert names == sorted(f"test_task[local_gaia::{r.task_id}]" for r in recs)
    assert "benchmark 'local_gaia'" in proc.stdout  # pytest-benchmark timed every task


@pytest.mark.slow
def test_suite_xdist_writes_the_same_records(tmp_path):
    common = ("--trainer=expert", "--bench", "local_xbench,local_webwalkerqa", "--bench-limit", "6",
              "--world-size", "tiny", "--benchmark-disable")
    serial, parallel = tmp_path / "serial", tmp_path / "parallel"
    p1 = run_suite(*common, "--run", str(serial))
    p2 = run_suite(*common, "--run", str(parallel), "-n", "2")
    assert p1.returncode == 0, p1.stdout + p1.stderr
    assert p2.returncode == 0, p2.stdout + p2.stderr
    assert "2 workers" in p2.stdout or "gw1" in p2.stdout
    for bench in ("local_xbench", "local_webwalkerqa"):
        lines = (parallel / "eval" / "0" / f"{bench}.jsonl").read_text().splitlines()
        assert all(json.loads(line)["benchmark"] == bench for line in lines)  # no torn or interleaved line
        a, b = records(serial, bench), records(parallel, bench)
        key = lambda r: (r.task_id, r.correct, r.prediction, r.gold, r.n_turns, r.n_sub_calls)  # noqa: E731
        assert sorted(map(key, a)) == sorted(map(key, b)) and len(b) == len(lines)
        assert len({r.extra["eval_session"] for r in b}) == 1  # the workers share the session id
        assert table(p1.stdout)[bench]["correct"] == table(p2.stdout)[bench]["correct"]
        assert table(p2.stdout)[bench]["n"] == str(len(b))


CRASHY_PLUGIN = '''
import time
from benchmarks import runners

class Crashy(runners.ExpertRunner):
    calls = 0

    def answer(self, bench, task, run=0):
        Crashy.calls += 1
        if Crashy.calls == 1:
            raise RuntimeError("boom")
        if Crashy.calls == 2:
            return runners.Answer("definitely not the answer")
        if Crashy.calls == 3:
            time.sleep(8)
        return super().answer(bench, task)

runners.RUNNERS["expert"] = Crashy
'''


@pytest.mark.slow
def test_suite_crash_and_timeout_stay_in_the_denominator(tmp_path):
    (tmp_path / "crashy_plugin.py").write_text(textwrap.dedent(CRASHY_PLUGIN))
    run = tmp_path / "run"
    proc = run_suite("-p", "crashy_plugin", "--trainer=expert", "--bench", "local_gaia", "--bench-limit", "5",
                     "--world-size", "tiny", "--task-timeout", "2", "--run", str(run), "--benchmark-disable",
                     env_extra={"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "2 passed" not in out and re.search(r"3 passed, 2 xfailed", out), out
    recs = sorted(records(run, "local_gaia"), key=lambda r: r.latency_s)
    assert len(recs) == 5
    by_verdict = {r.verdict: r for r in recs}
    assert by_verdict["crashed"].error == "RuntimeError: boom" and not by_verdict["crashed"].correct
    assert 'raise RuntimeError("boom")' in by_verdict["crashed"].extra["traceback"]
    assert by_verdict["timeout"].error.startswith("timeout") and not by_verdict["timeout"].correct
    assert sum(r.correct for r in recs) == 2  # one wrong answer (a result, the item passes)
    row = table(proc.stdout)["local_gaia"]
    assert (row["n"], row["correct"], row["errors"], row["acc"]) == ("5", "2", "2", "40.0")


@pytest.mark.slow
def test_suite_usage_errors_and_missing_runs(tmp_path):
    bad = run_suite("--trainer=grpo")
    assert bad.returncode == 4 and "unknown trainer 'grpo'" in bad.stderr and "mgrpo" in bad.stderr
    bad = run_suite("--bench", "local_gaia,gaia2")
    assert bad.returncode == 4 and "unknown benchmark(s) 'gaia2'" in bad.stderr
    bad = run_suite("--judge", "oracle")
    assert bad.returncode == 4 and "unknown judge 'oracle'" in bad.stderr
    bad = run_suite("--judge", "replay")  # a judge without its options fails once, up front
    assert bad.returncode == 4 and "--judge replay" in bad.stderr and "records=" in bad.stderr

    proc = run_suite("--trainer=frozen_sub", "--runs-dir", str(tmp_path), "--bench", "local_xbench",
                     "--bench-limit", "2", "--world-size", "tiny", "-rs")
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    message = [line for line in out.splitlines() if line.startswith("no frozen_sub run under")]
    assert len(message) == 1 and train_command("frozen_sub") in message[0]
    assert "2 skipped" in out and "passed" not in out
    assert re.search(r"^local_xbench .* not run: no frozen_sub run", out, re.M)
    assert not list(tmp_path.iterdir())  # nothing written for a run that does not exist

    # An explicit --data-dir that is missing or empty names the files the selected benchmarks read.
    for folder, says in ((tmp_path / "nodata", "does not exist"), (tmp_path, "is empty")):
        bad = run_suite("--bench", "webwalkerqa,xbench_deepsearch,local_gaia", "--data-dir", str(folder))
        assert bad.returncode == 4 and f"--data-dir {folder} {says}" in bad.stderr, bad.stderr
        assert str(folder / "webwalkerqa" / "webwalkerqa_main.jsonl") in bad.stderr
        assert str(folder / "xbench" / "DeepSearch-2505.csv") in bad.stderr


@pytest.mark.slow
def test_suite_reports_missing_data_as_not_run(tmp_path):
    run = tmp_path / "run"
    proc = run_suite("--bench", "local_gaia,local_xbench", "--world-tasks", str(tmp_path / "none"),
                     "--run", str(run), "--world-size", "tiny")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for bench in ("local_gaia", "local_xbench"):
        assert re.search(rf"^{bench} .* not run: data missing: .*not found", proc.stdout, re.M)
    assert "0.0%" not in proc.stdout and "100.0%" not in proc.stdout
    # Issue 14: nothing was evaluated, so the expert's run is not marked completed, and says why.
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "failed" and "nothing was evaluated" in status["error"]
    assert "every item was skipped (data missing" in status["error"]
    assert f"{run}/status.json says failed" in proc.stdout
    # A folder holding an earlier session's records keeps its state; the failed session is noted.
    from harness.records import TaskRecord, append_task, write_status

    append_task(run, TaskRecord(run_id="run", trainer="expert", seed=0, step=0, benchmark="local_gaia",
                                task_id="t", correct=True))
    write_status(run, "completed", eval_session="earlier")
    proc = run_suite("--bench", "local_gaia", "--world-tasks", str(tmp_path / "none"), "--run", str(run),
                     "--world-size", "tiny")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    status = json.loads((run / "status.json").read_text())
    assert (status["state"], status["eval_session"]) == ("completed", "earlier")
    assert "nothing was evaluated" in status["last_eval_error"]


@pytest.mark.slow
def test_plugin_options_do_not_reach_the_unit_tests():
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "tests/benchmarks/test_scoring.py", "--trainer=expert"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 4 and "unrecognized arguments: --trainer=expert" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "tests/benchmarks/test_scoring.py"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and "test_eval.py" not in proc.stdout


KILLER_PLUGIN = '''
import os
from benchmarks import runners

class Killer(runners.ExpertRunner):
    def answer(self, bench, task, run=0):
        if task.task_id == os.environ["KILL_TASK_ID"]:
            os._exit(3)  # the xdist worker dies mid-task: no record, no verdict
        return super().answer(bench, task)

runners.RUNNERS["expert"] = Killer
'''


@pytest.mark.slow
def test_suite_counts_a_task_whose_worker_died_as_incorrect(tmp_path):
    (tmp_path / "killer_plugin.py").write_text(textwrap.dedent(KILLER_PLUGIN))
    victim = get_benchmark("local_gaia", world_size="tiny").load(limit=3)[1].task_id
    run = tmp_path / "run"
    proc = run_suite("-p", "killer_plugin", "--bench", "local_gaia", "--bench-limit", "3", "--world-size", "tiny",
                     "--run", str(run), "--benchmark-disable", "-n", "2",
                     env_extra={"KILL_TASK_ID": victim,
                                "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the crashed item is a failure of the suite
    recs = records(run, "local_gaia")
    assert sorted(r.task_id for r in recs) == sorted(set(t.task_id for t in get_benchmark(
        "local_gaia", world_size="tiny").load(limit=3)) - {victim})
    row = table(proc.stdout)["local_gaia"]
    assert (row["n"], row["correct"], row["errors"]) == ("3", "2", "1")
    assert "1 item(s) ran without leaving a record" in proc.stdout


@pytest.mark.slow
@pytest.mark.browser
def test_suite_playwright_backend_gives_the_same_answers(tmp_path):
    common = ("--bench", "local_webwalkerqa,local_xbench", "--bench-limit", "2", "--world-size", "tiny",
              "--benchmark-disable")
    direct = run_suite(*common, "--run", str(tmp_path / "direct"))
    browser = run_suite(*common, "--run", str(tmp_path / "browser"), "--visit-backend", "playwright")
    assert direct.returncode == 0 and browser.returncode == 0, browser.stdout + browser.stderr
    for bench in ("local_webwalkerqa", "local_xbench"):
        a, b = records(tmp_path / "direct", bench), records(tmp_path / "browser", bench)
        key = lambda r: (r.task_id, r.prediction, r.correct, r.n_turns, r.extra["n_sub_turns"])  # noqa: E731
        assert sorted(map(key, a)) == sorted(map(key, b)) and len(b) == 2
        assert {r.extra["visit_backend"] for r in b} == {"playwright"}
        assert all(r.correct for r in b)


@pytest.mark.slow
def test_suite_model_runner_evaluates_a_run_checkpoint(tmp_path):
    """The model-based hook: checkpoints of a (here untrained) run answer through run_group.

    The run is laid out as an mgrpo run whose planner never delegated (issue 14): planner
    checkpoints, an empty sub/checkpoints/ (the sub role trained 0 steps and saved nothing). The sub
    role is evaluated with the weights it started from (config.models.sub), and the table and the
    records say so.
    """
    from harness.models import ModelSpec, load_model

    cache = str(tmp_path / "cache")
    model, tokenizer = load_model(ModelSpec(name="tiny", cache_dir=cache))
    run = tmp_path / "runs" / "mgrpo-tiny"
    for step in (3, 7):
        model.save_pretrained(run / "planner" / "checkpoints" / f"checkpoint-{step}")
        tokenizer.save_pretrained(run / "planner" / "checkpoints" / f"checkpoint-{step}")
    (run / "sub" / "checkpoints").mkdir(parents=True)
    write_provenance(run, {"rollout": {"planner_turns": 1, "sub_turns": 1, "max_new_tokens": 8},
                           "models": {"planner": "tiny", "sub": "tiny", "init_seed": 0, "cache_dir": cache},
                           "world": {"seed": 0, "size": "tiny", "address": "http://world.local"},
                           "tools": {"search_top_k": 2}},
                     [5], trainer="mgrpo", mark_running=False)
    # no --world-size: the run is evaluated on the world it trained on (its config's world.size)
    proc = run_suite("--trainer=mgrpo", "--runs-dir", str(tmp_path / "runs"), "--bench", "local_xbench",
                     "--bench-limit", "1", "--benchmark-disable")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (rec,) = read_tasks(run / "eval" / "7" / "local_xbench.jsonl").records  # the latest checkpoint's step
    assert rec.benchmark_version == "1+seed0.tiny"
    assert (rec.trainer, rec.seed, rec.step, rec.n_turns) == ("mgrpo", 5, 7, 1)
    assert rec.n_tokens is not None and 0 < rec.n_tokens <= 8
    assert rec.correct is False  # an untrained model does not answer
    assert rec.verdict not in ("crashed", "timeout"), rec.error  # a verdict, not a crash
    assert rec.extra["runner"] == "mgrpo"
    assert rec.transcript["turns"][0]["agent"] == "planner"  # the episode is kept with the record (issue 15)
    ckpt = str(run / "planner" / "checkpoints" / "checkpoint-7")
    assert rec.extra["weights"] == {
        "planner": {"source": "checkpoint", "path": ckpt, "step": 7},
        "sub": {"source": "started", "path": "tiny", "step": None,
                "reason": "no checkpoint: the sub role trained no step"}}
    assert f"planner: checkpoint-7 ({ckpt})" in proc.stdout
    assert re.search(r"^sub-agent: untrained \(no checkpoint: .*; started weights models\.sub=tiny\)$",
                     proc.stdout, re.M), proc.stdout


def test_model_runner_sees_the_world_as_the_run_trained_on_it():
    """A run trained under ``world.address`` (the tiny presets: http://world.local) is asked its questions
    and shown search results under that address, with its own tool settings, while visits reach the
    suite's server (issue 14: the demo's runs are evaluated as they trained)."""
    from benchmarks.runners import EvalTarget, LocalWorld, ModelRunner, RunnerContext, _local_row

    world = LocalWorld(0, "tiny")
    runner = ModelRunner.__new__(ModelRunner)  # the toolbox only: no models are loaded for this check
    runner.ctx = RunnerContext(target=EvalTarget("mgrpo", Path("."), 0, 0, 0, None, "tiny"), world=world)
    runner.address, runner.tools_cfg, runner._toolbox, runner._engines = "http://world.local", {"search_top_k": 2}, None, {}
    try:
        task = get_benchmark("local_webwalkerqa", world_size="tiny").load(limit=1)[0]
        assert _local_row(task, runner.address)["root_url"].startswith("http://world.local/")
        hits = runner.toolbox().call("search", {"query": "city"})
        assert "http://world.local/" in hits and world.base_url not in hits
        assert hits.count("http://world.local/") <= 2 * 2  # search_top_k=2 (a hit may name its URL twice)
        page = runner.toolbox().call("visit", {"url": "http://world.local/"})
        assert not page.startswith("Error"), page[:200]
    finally:
        runner.close()
        world.close()


def tiny_ship(tmp_path: Path) -> Path:
    """A shipped-checkpoint folder (``tmp_path/ship``) of the tiny model's random weights for every agent: a model
    that runs the whole evaluation path in seconds and answers nothing (8 new tokens per turn)."""
    from harness.models import ModelSpec, load_model
    from harness.warmstart import ship_checkpoint

    model, tokenizer = load_model(ModelSpec(name="tiny", cache_dir=str(tmp_path / "cache")))
    build = tmp_path / "build"
    for agent in ("planner", "sub_agent", "single_agent"):
        model.save_pretrained(build / agent)
        tokenizer.save_pretrained(build / agent)
    summary = {"config": {"agents": ["planner", "sub_agent", "single_agent"], "joint": True, "world_seed": 0,
                          "world_size": "tiny", "search_top_k": 2, "search_snippets": False, "max_chars": 800,
                          "visit_focus": True, "visit_links": True, "eval_max_new_tokens": 8, "demo_worlds": 0,
                          "seed": 0},
               "stages": {"total_s": 1.0}, "agents": {"joint": {}}, "n_demo_tasks": 0, "n_demo_worlds": 0}
    ship = tmp_path / "ship"
    ship_checkpoint(build, ship, summary, ["--preset", "tiny"])
    return ship


@pytest.mark.slow
def test_suite_evaluates_a_model_folder_without_a_run(tmp_path):
    """Issue 16: ``pytest benchmarks/ --model DIR`` evaluates a shipped checkpoint (planner and sub-agent
    from the folder, world size and tools from its provenance, any --world-seed); a changed file is
    refused before any task runs, naming the file."""
    ship = tiny_ship(tmp_path)
    runs = tmp_path / "runs"
    proc = run_suite("--model", str(ship), "--runs-dir", str(runs), "--world-seed", "7", "--bench", "local_xbench",
                     "--bench-limit", "1", "--benchmark-disable")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = runs / "model-ship-tiny-w7"
    (rec,) = read_tasks(run / "eval" / "0" / "local_xbench.jsonl").records
    assert rec.benchmark_version == "1+seed7.tiny" and rec.trainer == "mgrpo" and rec.correct is False
    joint = str((ship / "joint").resolve())
    assert {r: w["path"] for r, w in rec.extra["weights"].items()} == {"planner": joint, "sub": joint}
    assert f"planner: the model folder's weights (--model): {joint}" in proc.stdout
    prov = json.loads((run / "provenance.json").read_text())
    # the observations the build trained on: its hits per search, title lines without snippets, its page budget,
    # the goal-guided visit and its link order
    assert prov["arm"] == "checkpoint:ship" and prov["config"]["tools"] == {
        "search_top_k": 2, "search_snippets": False, "max_chars": 800, "visit_focus": True, "visit_links": True}
    assert json.loads((run / "status.json").read_text())["state"] == "completed"
    # a benchmark the model runner cannot answer: one NOT_RUN item, and the folder is not marked completed
    proc = run_suite("--model", str(ship), "--runs-dir", str(runs), "--world-seed", "8", "--bench", "webwalkerqa")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"^webwalkerqa .* not run: webwalkerqa needs real-web tools: pass --web searxng", proc.stdout, re.M)
    status = json.loads((runs / "model-ship-tiny-w8" / "status.json").read_text())
    assert status["state"] == "failed" and "every item was skipped (webwalkerqa needs real-web tools" in status["error"]
    # a changed weight file: refused before any task, naming the file
    weights = ship / "joint" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    proc = run_suite("--model", str(ship), "--runs-dir", str(runs), "--bench", "local_xbench", "--bench-limit", "1")
    assert proc.returncode != 0 and "model.safetensors: SHA-256 does not match" in proc.stdout + proc.stderr
