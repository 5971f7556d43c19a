"""Resume is exact (issue 14): a kill at any point, then ``python -m harness train --resume``, gives each role
steps 1..max_steps once each, the evaluation records at the configured steps once each, every store group
trained once by the sub role, and a dead launcher's run never reads as "running" (harness/role/,
harness/records.py; docs/training.md "Checkpoints and resume").

The end-to-end test kills the real processes of one ``mgrpo`` run five times at different points (SIGKILL of
the roles and the launcher, frozen first with SIGSTOP so the state seen is the state killed; nothing gets to
clean up or write a status) and resumes it each time:

1. fresh run, during the step-0 evaluation (its records are cut to one half-written line);
2. before the first checkpoint (a step recorded, no complete checkpoint);
3. between checkpoints (after checkpoint 2, a later step recorded);
4. during a save (the planner's ``checkpoint-4`` directory appears; if its ``trainer_state.json``, which TRL
   writes last, is already there it is removed, which is the state a kill one write earlier leaves);
5. the sub role alone, mid-step (after a step that is not a checkpoint it has taken the next step's groups);
6. resumed to completion; then 7. ``--resume`` of the completed run, which must change nothing.

The sub-agent trains only on groups in which the planner delegated, and an untrained tiny planner never does:
:func:`warm` fine-tunes it in ~20 s to answer every question with one fixed ``delegate`` call, made one token
of its tokenizer (an added token), so a few dozen SFT steps suffice (tests/support/runs.py). Everything else is the tiny preset
shrunk (K=2, 2 queries per step, 6 steps, checkpoints every 2, evaluation every 2 on 1 task per style).
Measured on the shared 2-core machine: ~20 s warm start, ~100 s for the seven launches (~2 min in all).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from harness.records import read_status, read_steps, read_tasks, write_status
from tests.support.runs import ROOT, Launch, _proc_state, build_warm_start, steps_of, store_groups
STEPS, SAVE, EVERY = 6, 2, 2
EVAL_STEPS = [0, 2, 4, 6]
STYLES = ["local_gaia", "local_webwalkerqa", "local_xbench"]
OVERRIDES = ["rollout.k=2", "planner.groups_per_step=2", "rollout.max_new_tokens=16", "rollout.planner_turns=2",
             "rollout.sub_turns=2", "alignment.d=2", "tasks.n_train=4", "tasks.n_test=2", f"eval.every={EVERY}",
             "eval.n_tasks=1", "eval.runs=2", f"planner.save_steps={SAVE}", f"sub.save_steps={SAVE}", "store.group_timeout_s=120",
             "threads=1"]


# ------------------------------------------------------------------------------------------- fast checks
def _checkpoint(root: Path, step: int, *, state: str | None = "ok", store: bool = False) -> Path:
    d = root / f"checkpoint-{step}"
    d.mkdir(parents=True)
    (d / "model.safetensors").write_bytes(b"x")
    if state == "ok":
        (d / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    elif state == "cut":
        (d / "trainer_state.json").write_text('{"global_st')
    if store:
        (d / "mgrpo_store.json").write_text('{"max_position": 3}')
    return d


def test_last_checkpoint_skips_and_resume_deletes_half_written_ones(tmp_path):
    from transformers.trainer_utils import get_last_checkpoint

    from harness.role.checkpoints import drop_incomplete_checkpoints, last_checkpoint

    _checkpoint(tmp_path, 2, store=True)
    _checkpoint(tmp_path, 4)  # TRL's files, but killed before the sub role's store position
    _checkpoint(tmp_path, 6, state=None)  # killed before trainer_state.json
    _checkpoint(tmp_path, 8, state="cut")  # killed while writing it
    assert get_last_checkpoint(str(tmp_path)).endswith("checkpoint-8")  # what TRL would resume from
    assert last_checkpoint(tmp_path).endswith("checkpoint-4")
    assert last_checkpoint(tmp_path, ("mgrpo_store.json",)).endswith("checkpoint-2")
    assert last_checkpoint(tmp_path / "none") is None
    assert drop_incomplete_checkpoints(tmp_path, ("mgrpo_store.json",)) == ["checkpoint-4", "checkpoint-6",
                                                                            "checkpoint-8"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-2"]


def test_truncate_metrics_with_no_checkpoint_drops_every_step(tmp_path):
    from harness.role.checkpoints import truncate_metrics

    path = tmp_path / "planner" / "metrics.jsonl"
    path.parent.mkdir()
    lines = [json.dumps({"step": s}) for s in (1, 2, 3)]
    path.write_text("\n".join(lines) + '\n{"step": 4, "rew')  # the last line cut by the kill
    assert truncate_metrics(tmp_path, "planner", 2) == 2
    assert [json.loads(x)["step"] for x in path.read_text().splitlines()] == [1, 2]
    assert truncate_metrics(tmp_path, "planner", 0) == 2
    assert path.read_text() == ""


def test_eval_records_are_complete_only_with_one_record_per_task(tmp_path):
    from harness.records import TaskRecord, append_task
    from harness.role.planner import drop_evals, eval_complete

    tasks = [{"task_id": "t0", "Question": "?"}, {"id": "t1", "prompt": "?"}]  # a gaia and an xbench task

    def write(step: int, i: int) -> None:
        append_task(tmp_path, TaskRecord(run_id="r", trainer="mgrpo", seed=0, step=step, task_id=f"t{i}",
                                         benchmark=["local_gaia", "local_xbench"][i], correct=False))

    assert eval_complete(tmp_path, 0, [])  # nothing asked, nothing there
    assert not eval_complete(tmp_path, 0, tasks)
    write(0, 0)
    assert not eval_complete(tmp_path, 0, tasks)  # one missing
    write(0, 1)
    assert eval_complete(tmp_path, 0, tasks)
    write(0, 1)
    assert not eval_complete(tmp_path, 0, tasks)  # one twice
    (tmp_path / "eval" / "0" / "local_xbench.jsonl").write_text("")
    write(0, 1)
    with open(tmp_path / "eval" / "0" / "local_gaia.jsonl", "a") as fh:
        fh.write('{"run_id": "r", "ste')
    assert not eval_complete(tmp_path, 0, tasks)  # cut mid-line
    # with two inference runs a task needs a record of each
    runs_dir = tmp_path / "runs2"
    for i in (0, 1):
        append_task(runs_dir, TaskRecord(run_id="r", trainer="mgrpo", seed=0, step=0, task_id=f"t{i}",
                                         benchmark=["local_gaia", "local_xbench"][i], correct=False, inference_run=0))
    assert not eval_complete(runs_dir, 0, tasks, runs=2)
    for i in (0, 1):
        append_task(runs_dir, TaskRecord(run_id="r", trainer="mgrpo", seed=0, step=0, task_id=f"t{i}",
                                         benchmark=["local_gaia", "local_xbench"][i], correct=False, inference_run=1))
    assert eval_complete(runs_dir, 0, tasks, runs=2)
    for step in (2, 4):
        write(step, 0)
    (tmp_path / "eval" / "4" / "gaia.jsonl").write_text("")  # a benchmark's records: not the role's
    assert drop_evals(tmp_path, lambda s: s > 2) == [4]
    assert not (tmp_path / "eval" / "4" / "local_gaia.jsonl").exists()
    assert (tmp_path / "eval" / "4" / "gaia.jsonl").exists() and (tmp_path / "eval" / "2").is_dir()
    assert drop_evals(tmp_path, lambda s: s == 0) == [0]
    assert not (tmp_path / "eval" / "0").exists()


def test_in_distribution_evaluation_is_its_own_split_for_completeness_and_drops(tmp_path):
    """``eval.train_tasks`` records live in eval_train/ (records.SPLIT_DIRS): complete, dropped and redone on their
    own, never counted as the held-out evaluation of the same step."""
    from harness.records import RunPaths, TaskRecord, append_task
    from harness.role.planner import drop_evals, eval_complete, in_distribution_tasks, is_train_eval_step
    from harness.train_config import load_train_config

    tasks = [{"task_id": "t0", "Question": "?"}]
    path = append_task(tmp_path, TaskRecord(run_id="r", trainer="mgrpo", seed=0, step=0, task_id="t0",
                                            benchmark="local_gaia", correct=True), split="train")
    assert path == tmp_path / "eval_train" / "0" / "local_gaia.jsonl"
    assert eval_complete(tmp_path, 0, tasks, split="train") and not eval_complete(tmp_path, 0, tasks)
    assert RunPaths(tmp_path).eval_files() == [] and len(RunPaths(tmp_path).eval_files("train")) == 1
    with pytest.raises(ValueError, match="evaluation split"):
        RunPaths(tmp_path).eval_files("dev")
    with pytest.raises(ValueError, match="reserved"):
        RunPaths(tmp_path).role_dir("eval_train")
    append_task(tmp_path, TaskRecord(run_id="r", trainer="mgrpo", seed=0, step=0, task_id="t0",
                                     benchmark="local_gaia", correct=True))
    assert drop_evals(tmp_path, lambda s: s == 0, "train") == [0]
    assert not (tmp_path / "eval_train" / "0").exists() and eval_complete(tmp_path, 0, tasks)
    # which steps and which tasks: before training and after the last step, the first n of each style
    preset = str(ROOT / "baselines" / "configs" / "tiny" / "mgrpo.yaml")
    cfg = load_train_config(preset, ["eval.train_tasks=2", "planner.max_steps=6", "tasks.benchmarks=[gaia,xbench]"])
    assert [s for s in range(8) if is_train_eval_step(cfg, s)] == [0, 6]
    train = [{"task_id": f"g{i}", "Question": "?"} for i in range(3)] + [{"id": f"x{i}", "prompt": "?"} for i in range(3)]
    assert [t.get("task_id") or t.get("id") for t in in_distribution_tasks(cfg, train)] == ["g0", "g1", "x0", "x1"]
    assert not any(is_train_eval_step(load_train_config(preset, []), s) for s in range(8))  # default: none
    with pytest.raises(Exception, match="eval.train_tasks=-1"):
        load_train_config(preset, ["eval.train_tasks=-1"])


def test_read_status_reports_a_dead_writer_as_failed(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("trainer: mgrpo\n")
    write_status(run, "running")  # this process: alive
    assert read_status(run)["state"] == "running"

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    doc = write_status(run, "running", resumed=True)
    raw = dict(doc, pid=dead.pid)
    (run / "status.json").write_text(json.dumps(raw))
    st = read_status(run)
    assert st["state"] == "failed" and st["stale"] is True and st["resumed"] is True
    assert st["error"] == (f"launcher (pid {dead.pid}) is no longer running; resume with python -m harness "
                           f"train --resume {run}")
    assert json.loads((run / "status.json").read_text())["state"] == "running"  # read only: file unchanged

    (run / "status.json").write_text(json.dumps(dict(raw, host=socket.gethostname() + "-other")))
    assert read_status(run)["state"] == "running"  # another machine's process: cannot tell

    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 30
        while _proc_state(zombie.pid) != "Z" and time.monotonic() < deadline:
            time.sleep(0.01)
        (run / "status.json").write_text(json.dumps(dict(raw, pid=zombie.pid)))
        assert read_status(run)["state"] == "failed"  # killed but not reaped yet by its parent
    finally:
        zombie.wait()

    # a live pid that started after the status was written is a reused number, not the launcher
    (run / "status.json").write_text(json.dumps(dict(raw, pid=os.getpid(), updated=time.time() - 10 ** 6)))
    assert read_status(run)["state"] == "failed"

    other = tmp_path / "bench"
    other.mkdir()
    (other / "status.json").write_text(json.dumps(dict(raw, pid=dead.pid)))
    assert read_status(other)["error"] == f"writer (pid {dead.pid}) is no longer running"


# ------------------------------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def warm(tmp_path_factory) -> Path:
    """A tiny planner (and sub-agent: the same weights) that answers every training and evaluation question
    with the one delegate call ``tests.support.runs.CALL_JSON``."""
    return build_warm_start(tmp_path_factory.mktemp("warm"), ROOT / "baselines/configs/tiny/mgrpo.yaml", OVERRIDES)


def complete(ckpt: Path) -> bool:
    from harness.role.checkpoints import checkpoint_complete

    return checkpoint_complete(ckpt)


def snapshot(run: Path) -> dict[str, Any]:
    """Every record a resume could change: metrics, evaluation records, checkpoints, the store's groups."""
    from mgrpo.store import open_store

    files = {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.glob("*/metrics.jsonl"))}
    files.update({str(p.relative_to(run)): p.read_bytes() for p in sorted(run.glob("eval/*/*.jsonl"))})
    ckpts = {str(p.relative_to(run)): p.stat().st_mtime_ns for p in sorted(run.glob("*/checkpoints/*/*"))}
    store = open_store(f"sqlite:///{run / 'store.db'}", run_id=run.name)
    try:
        groups = {q: (p.have, p.complete) for q, p in store.group_progress().items()}
        consumed = [(c.query_id, c.position, c.state, c.deliveries) for c in store.consumed_groups()]
        rollouts = {q: [(r.R_M, r.policy_version) for r in store.get_rollouts(q)] for q in groups}
    finally:
        store.close()
    return {"files": files, "checkpoints": ckpts, "groups": groups, "consumed": consumed, "rollouts": rollouts}


@pytest.mark.slow
def test_kill_anywhere_then_resume_gives_every_step_eval_and_group_once(tmp_path, warm):
    from mgrpo.store import open_store

    run = tmp_path / "run"
    t0 = time.perf_counter()
    first = ["--trainer", "mgrpo", "--config", str(ROOT / "baselines/configs/tiny/mgrpo.yaml"),
             "--max-steps", str(STEPS), "--run-dir", str(run), f"models.planner={warm}", f"models.sub={warm}",
             *OVERRIDES]
    resume = ["--resume", str(run)]
    ckpts = {role: run / role / "checkpoints" for role in ("planner", "sub")}
    notes = []

    # 1. During the step-0 evaluation: its records are cut (one half-written line), the launcher never says so.
    launch = Launch(run, *first)
    launch.wait_for("the step-0 evaluation", lambda: any((run / "eval" / "0").glob("local_*.jsonl")))
    launch.freeze()
    for f in sorted((run / "eval" / "0").glob("local_*.jsonl"))[1:]:
        f.unlink()
    cut = next((run / "eval" / "0").glob("local_*.jsonl"))
    cut.write_bytes(cut.read_bytes().splitlines()[0][:40])
    launch.crash()
    assert json.loads((run / "status.json").read_text())["state"] == "running"  # nobody could say otherwise
    status = read_status(run)
    assert status["state"] == "failed" and status["stale"], status
    assert status["error"] == (f"launcher (pid {launch.proc.pid}) is no longer running; "
                               f"resume with python -m harness train --resume {run}")

    # 2. Before the first checkpoint: the roles restart from step 0 and must drop every earlier step record.
    launch = Launch(run, *resume)
    launch.wait_for("a planner step", lambda: steps_of(run, "planner"))
    launch.freeze()
    assert not any(complete(c) for role in ckpts for c in ckpts[role].glob("checkpoint-*")), "a checkpoint exists"
    notes.append(f"2: killed at planner steps {steps_of(run, 'planner')}, sub steps {steps_of(run, 'sub')}")
    launch.crash()

    # 3. Between checkpoints: after the planner's checkpoint 2, with a later step recorded.
    launch = Launch(run, *resume)
    launch.wait_for("a step after checkpoint 2", lambda: complete(ckpts["planner"] / "checkpoint-2")
                    and max(steps_of(run, "planner"), default=0) >= 3)
    launch.freeze()
    assert not (ckpts["planner"] / "checkpoint-4").exists()
    notes.append(f"3: killed at planner steps {steps_of(run, 'planner')}, sub steps {steps_of(run, 'sub')}")
    launch.crash()

    # 4. During a save: the planner's checkpoint-4 directory appears; it must never be resumed from.
    launch = Launch(run, *resume)
    target = ckpts["planner"] / "checkpoint-4"
    launch.wait_for("checkpoint-4", target.exists, poll=0.001)
    launch.freeze()
    state = target / "trainer_state.json"
    when = "trainer_state.json written: removed" if state.exists() else "before trainer_state.json"
    notes.append(f"4: killed during the save of checkpoint-4 ({when}; files {sorted(p.name for p in target.iterdir())}"
                 f"; sub checkpoints {sorted(p.name for p in ckpts['sub'].glob('checkpoint-*'))})")
    state.unlink(missing_ok=True)
    launch.crash()

    # 5. The sub role alone, mid-step: after a step that is not a checkpoint, holding groups it has not acknowledged.
    launch = Launch(run, *resume)
    store = open_store(f"sqlite:///{run / 'store.db'}", run_id=run.name)
    try:
        def sub_mid_step() -> bool:
            recs = read_steps(run / "sub" / "metrics.jsonl", tolerate_truncated_tail=True).records \
                if (run / "sub" / "metrics.jsonl").is_file() else []
            if not recs or recs[-1].step < 3 or recs[-1].step % SAVE == 0:
                return False
            # groups taken and not yet acknowledged: the last step's (acked only with the next checkpoint) and
            # maybe the next step's; the window lasts a whole step, so a busy machine cannot make the test miss it
            # (waiting for the next step's take alone was missed once: the resumed sub role finished first)
            return any(c.state == "taken" for c in store.consumed_groups())

        launch.wait_for("the sub role to take groups for its next step", sub_mid_step, poll=0.01)
    finally:
        store.close()
    sub_pid = launch.role_pids()["sub"]
    os.kill(sub_pid, signal.SIGKILL)
    notes.append(f"5: sub killed after sub steps {steps_of(run, 'sub')} (planner steps {steps_of(run, 'planner')})")
    assert launch.finish() == 1
    assert re.search(r"role sub exited with status -9", launch.text()), launch.text()[-2000:]
    assert read_status(run)["state"] == "failed" and not read_status(run).get("stale")

    # 6. Resume to the end.
    launch = Launch(run, *resume)
    assert launch.finish() == 0, launch.text()[-3000:]
    assert read_status(run)["state"] == "completed"
    print("\n[resume] " + "\n[resume] ".join(notes), flush=True)

    assert steps_of(run, "planner") == list(range(1, STEPS + 1))
    assert steps_of(run, "sub") == list(range(1, STEPS + 1))
    for role, d in ckpts.items():  # every checkpoint left is complete; the half-written one was redone
        assert sorted(int(p.name.split("-")[1]) for p in d.glob("checkpoint-*")) == [2, 4, 6], role
        assert all(complete(p) for p in d.glob("checkpoint-*")), role
    evals = sorted(int(p.name) for p in (run / "eval").iterdir())
    assert evals == EVAL_STEPS
    for step in EVAL_STEPS:
        assert sorted(p.stem for p in (run / "eval" / str(step)).glob("*.jsonl")) == STYLES
        for style in STYLES:
            recs = read_tasks(run / "eval" / str(step) / f"{style}.jsonl").records  # strict: no cut line
            # one record per inference run (eval.runs=2), each sampled with its own recorded seed
            assert sorted(r.inference_run for r in recs) == [0, 1] and {r.step for r in recs} == {step}, (step, style, recs)
            assert len({r.sample_seed for r in recs}) == 2 and {r.temperature for r in recs} == {1.0}

    progress, consumed, pending, delegated = store_groups(f"sqlite:///{run / 'store.db'}", run.name)
    # The planner: 6 steps x 2 queries, complete; a redone step rewrote its own keys.
    assert len(progress) == STEPS * 2 and all(p.complete and p.k == 2 for p in progress.values())
    assert sorted(q.split("@")[1].split(".")[0] for q in progress) == sorted([str(s) for s in range(STEPS)] * 2)
    # The sub role: every group taken once (the consumer log) and done; each trained by exactly one step record.
    assert all(delegated.values()), f"the warm-started planner did not delegate in some groups: {delegated}"
    assert pending == [] and all(c.state == "done" for c in consumed)
    assert sorted(c.query_id for c in consumed) == sorted(progress)
    trained = [q for r in read_steps(run / "sub" / "metrics.jsonl").records for q in r.extra["groups"]]
    assert sorted(trained) == sorted(progress), "a group was lost or trained twice"
    assert any(c.deliveries > 1 for c in consumed), "no group was redelivered: the kills did not hit a taken group"

    # 7. --resume of the completed run: nothing more is trained, evaluated or acknowledged.
    before = snapshot(run)
    launch = Launch(run, *resume)
    assert launch.finish() == 0, launch.text()[-3000:]
    assert read_status(run)["state"] == "completed"
    assert snapshot(run) == before
    assert "[planner] already finished: checkpoint-6 is step 6 of 6" in (run / "logs" / "planner.log").read_text()
    assert "[sub] already finished: checkpoint-6 is step 6 of 6" in (run / "logs" / "sub.log").read_text()
    print(f"[resume] seven launches: {time.perf_counter() - t0:.0f}s", flush=True)
