"""``python -m harness train`` end to end, one real run per trainer (docs/training.md, docs/report.md), slow.

Each run: the tiny preset shrunk to 2 planner steps x 2 queries x K=2, an untrained tiny model,
16 new tokens per turn, 2 turns; real processes (world server, roles), real HTTP, a sqlite store.
An untrained planner practically never emits a valid ``delegate`` call, so for ``mgrpo`` the sub
role sees only empty groups and stops cleanly when the planner is done (its training path is
covered by tests/harness/test_roles.py, which delegates for real).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.records import read_steps, read_tasks

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["rollout.k=2", "planner.groups_per_step=2", "rollout.max_new_tokens=16", "rollout.planner_turns=2",
         "rollout.sub_turns=2", "alignment.d=2", "tasks.n_train=4", "tasks.n_test=1", "eval.every=2",
         "eval.n_tasks=1", "eval.runs=2", "eval.train_tasks=1", "planner.save_steps=1", "store.group_timeout_s=120"]


def _train(tmp_path: Path, trainer: str, *extra: str, run_name: str = "run", timeout: float = 600):
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    cmd = [sys.executable, "-m", "harness", "train", "--trainer", trainer, "--config",
           str(ROOT / f"baselines/configs/tiny/{trainer}.yaml"), "--max-steps", "2",
           "--run-dir", str(tmp_path / run_name), *SMALL, *extra]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    return proc, tmp_path / run_name


@pytest.mark.parametrize("trainer", ["single_agent", "frozen_sub", "mgrpo"])
def test_train_runs_roles_end_to_end(tmp_path, trainer):
    proc, run = _train(tmp_path, trainer)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads((run / "status.json").read_text())["state"] == "completed"
    prov = json.loads((run / "provenance.json").read_text())
    assert prov["trainer"] == trainer and prov["config"]["rollout"]["k"] == 2 and prov["seeds"] == [0]
    assert (run / "config.yaml").is_file()
    # the task set, prepared once by the launcher before the roles (which read it: --tasks)
    meta = json.loads((run / "tasks" / "taskset.json").read_text())
    assert meta["world"]["seed"] == 0 and meta["tasks"]["n_train"] == 4 and meta["n_train"] > 0
    assert len((run / "tasks" / "train.jsonl").read_text().splitlines()) == meta["n_train"]
    assert re.search(r"^\[train\] task set .*: \d+ training and 3 evaluation tasks \(prepared in", proc.stdout, re.M)

    steps = read_steps(run / "planner" / "metrics.jsonl").records
    assert [s.step for s in steps] == [1, 2]
    for s in steps:
        assert s.trainer == trainer and s.role == "planner" and s.n_trajectories == 4
        assert s.rollout_s > 0 and s.train_s > 0 and s.wait_s >= 0 and s.policy_version == s.step
        assert s.peak_rss_mib > 100 and s.peak_gpu_mib is None  # a torch process on CPU: hundreds of MiB
        split = s.time_split  # where the step's time went (docs/performance.md)
        assert {"wall_s", "rollout_s", "score_s", "forward_backward_s", "optimizer_s", "generate_s", "delegate_s",
                "tool_s", "store_s"} <= set(split), split
        assert 0 < split["generate_s"] <= split["rollout_s"] <= split["wall_s"] and 0 < s.model_share <= 1, split
        assert s.reward_mean is not None and s.entropy is not None and s.n_model_tokens > 0
        assert set(s.reward_components) == {"format", "correct"}
        if trainer == "single_agent":
            assert s.sub_calls_mean is None
        else:
            assert s.sub_calls_mean is not None and sum(s.sub_calls_hist) == 4
    assert (run / "planner" / "checkpoints" / "checkpoint-2" / "model.safetensors").is_file()
    from harness.profile import profile_run

    prof = profile_run(run)["planner"]  # step 1 (lazy initialisation) is left out of the means
    assert prof["steps"] == 1 and prof["wall_s"] == pytest.approx(steps[1].time_split["wall_s"], abs=1e-4)

    # Periodic evaluation: before training and at step 2, one task per style, two inference runs.
    for step in (0, 2):
        files = sorted(p.name for p in (run / "eval" / str(step)).glob("*.jsonl"))
        assert files == ["local_gaia.jsonl", "local_webwalkerqa.jsonl", "local_xbench.jsonl"]
        for f in files:
            recs = read_tasks(run / "eval" / str(step) / f).records
            assert [r.inference_run for r in recs] == [0, 1] and {(r.step, r.trainer) for r in recs} == {(step, trainer)}

    # The in-distribution evaluation (eval.train_tasks=1): the first training task of each style, before training
    # and after the last step only, in eval_train/ (never among the held-out records above).
    from harness.role.tasks import task_key
    from harness.world.schemas import benchmark_of

    firsts: dict[str, str] = {}
    for t in (json.loads(ln) for ln in (run / "tasks" / "train.jsonl").read_text().splitlines()):
        firsts.setdefault(benchmark_of(t), task_key(t))
    assert sorted(p.name for p in (run / "eval_train").iterdir()) == ["0", "2"]
    for step in (0, 2):
        recs = [r for f in sorted((run / "eval_train" / str(step)).glob("*.jsonl")) for r in read_tasks(f).records]
        assert sorted((r.task_id, r.inference_run) for r in recs) == sorted((i, n) for i in firsts.values() for n in (0, 1))
        assert {r.step for r in recs} == {step} and not {r.task_id for r in recs} & {
            r.task_id for f in (run / "eval" / str(step)).glob("*.jsonl") for r in read_tasks(f).records}
    assert (f"[planner] in-distribution eval at step 2: {2 * len(firsts)} task records"
            in (run / "logs" / "planner.log").read_text())

    # The shared store holds the 4 query groups (2 steps x 2 queries), complete, with K=2 each.
    from mgrpo.store import open_store

    store = open_store(f"sqlite:///{run / 'store.db'}", run_id=run.name)
    try:
        progress = store.group_progress()
        assert len(progress) == 4 and all(p.complete and p.k == 2 for p in progress.values())
        assert store.get_policy_version("planner") == 2
        if trainer == "mgrpo":  # every group was taken and acknowledged (none lost)
            assert store.pending_groups() == [] and len(store.consumed_groups()) == 4
    finally:
        store.close()

    if trainer == "frozen_sub":
        assert (run / "sub" / "checkpoints" / "checkpoint-0" / "model.safetensors").is_file()
        assert "planner finished; service stopped" in (run / "logs" / "sub.log").read_text()
    if trainer == "mgrpo":
        assert "[sub] finished after" in (run / "logs" / "sub.log").read_text()
    assert "per step: rollout" in proc.stdout
    # console progress: stdout is a pipe here, so one plain line per step and role (no bars)
    for step in (1, 2):
        assert re.search(rf"^\[train\] planner step {step}/2: reward \d\.\d{{3}}, \d+\.\d s/step$", proc.stdout, re.M), proc.stdout


def test_a_dying_role_stops_the_others_and_names_its_log(tmp_path):
    # An argument TRL rejects kills the sub role when it builds its trainer (a bad model path no longer
    # gets that far: the launcher checks it first, see tests/harness/test_train_cli.py).
    proc, run = _train(tmp_path, "mgrpo", "sub.trl.no_such_trl_argument=1", "eval.every=0")
    assert proc.returncode == 1
    assert re.search(r"role sub exited with status \d+; see its log .*logs/sub\.log", proc.stderr), proc.stderr
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "failed" and "role sub" in status["error"]
    pid = int(re.search(r"started role planner \(pid (\d+)", proc.stdout).group(1))
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the planner was stopped, not left running


def test_sigkill_of_a_role_then_resume_continues_without_lost_or_duplicated_steps(tmp_path):
    """SIGKILL the planner after step 7 (checkpoint 6, in the run's second epoch: 12 training tasks, 2 per step);
    ``--resume`` redoes step 7 with the same queries and finishes step 8 (frozen_sub). A resume after the first
    epoch used to draw another epoch order (TRL's sampler), so the redone step wrote other groups."""
    import signal
    import time

    run = tmp_path / "run"
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    cmd = [sys.executable, "-m", "harness", "train", "--trainer", "frozen_sub", "--config",
           str(ROOT / "baselines/configs/tiny/frozen_sub.yaml"), "--max-steps", "8", "--run-dir", str(run),
           *SMALL, "eval.every=0", "planner.save_steps=2"]
    launcher = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pid = None
        deadline = time.monotonic() + 300
        ckpt = run / "planner" / "checkpoints" / "checkpoint-6" / "trainer_state.json"

        def at_step_7() -> bool:
            path = run / "planner" / "metrics.jsonl"
            return ckpt.is_file() and path.is_file() and 7 in [r.step for r in read_steps(
                path, tolerate_truncated_tail=True).records]

        while time.monotonic() < deadline and not at_step_7():
            time.sleep(0.05)
        assert at_step_7(), "the planner never recorded step 7"
        ps = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
        for line in ps.splitlines():
            if "harness.role --role planner" in line and str(run) in line:
                pid = int(line.split()[0])
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        stdout, stderr = launcher.communicate(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 1 and "role planner exited with status -9 (killed by SIGKILL" in stderr, stderr
    assert json.loads((run / "status.json").read_text())["state"] == "failed"

    resumed = subprocess.run([sys.executable, "-m", "harness", "train", "--resume", str(run)], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert json.loads((run / "status.json").read_text())["state"] == "completed"
    assert "evaluation tasks (reused)" in resumed.stdout  # the run's own task set, not a new one
    steps = [s.step for s in read_steps(run / "planner" / "metrics.jsonl").records]
    assert steps == [1, 2, 3, 4, 5, 6, 7, 8]  # none lost, none twice (records after the checkpoint were replayed)
    assert (run / "planner" / "checkpoints" / "checkpoint-8").is_dir()
    from mgrpo.store import open_store

    store = open_store(f"sqlite:///{run / 'store.db'}", run_id=run.name)
    try:
        progress = store.group_progress()
        # 8 steps x 2 queries: the replayed step 7 rewrote its own keys (same queries) instead of adding groups
        assert len(progress) == 16 and all(p.complete for p in progress.values()), sorted(progress)
        assert sorted({q.split("@")[1].split(".")[0] for q in progress}) == [str(s) for s in range(8)]
    finally:
        store.close()


def test_sigterm_to_the_launcher_stops_every_role(tmp_path):
    import signal
    import time

    run = tmp_path / "run"
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    cmd = [sys.executable, "-m", "harness", "train", "--trainer", "frozen_sub", "--config",
           str(ROOT / "baselines/configs/tiny/frozen_sub.yaml"), "--max-steps", "50", "--run-dir", str(run),
           *SMALL, "eval.every=0"]
    launcher = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        metrics = run / "planner" / "metrics.jsonl"
        while time.monotonic() < deadline and not metrics.is_file():
            time.sleep(0.1)
        assert metrics.is_file(), "the planner never finished a step"
        launcher.send_signal(signal.SIGTERM)
        stdout, stderr = launcher.communicate(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 1 and "interrupted (SIGTERM); all roles stopped" in stderr, stderr
    assert json.loads((run / "status.json").read_text())["state"] == "failed"
    ps = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
    assert str(run) not in ps, "a role process outlived the launcher"
    pids = [int(m) for m in re.findall(r"\(pid (\d+)", stdout)]
    assert len(pids) == 2
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_profile_command_tabulates_each_roles_step_time(tmp_path):
    """``python -m harness profile`` (docs/performance.md) on the small single_agent run: one run, its table."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    small = [o for o in SMALL if not o.startswith(("eval.", "planner.save_steps"))]
    cmd = [sys.executable, "-m", "harness", "profile", "--trainer", "single_agent", "--steps", "3",
           "--out", str(tmp_path / "prof"), *small]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((tmp_path / "prof" / "profile.json").read_text())
    planner = doc["roles"]["single_agent"]["planner"]
    assert planner["steps"] == 2 and 0 < planner["model_share"] <= 1
    parts = ("generate_s", "delegate_s", "tool_s", "store_s", "rollout_other_s", "score_s", "forward_backward_s",
             "optimizer_s", "other_s")
    assert sum(planner[k] for k in parts) == pytest.approx(planner["wall_s"], rel=0.02)  # the parts add up
    assert not (tmp_path / "prof" / "single_agent" / "eval").exists()  # steps only: no evaluation
    text = (tmp_path / "prof" / "profile.md").read_text()
    assert "**single_agent / planner**" in text and "model compute" in text and text in proc.stdout
    again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "exists: remove it" in again.stderr  # never mixes two runs

