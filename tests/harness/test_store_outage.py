"""A training run on a Redis store through Redis outages (docs/training.md, "When the store goes away"), slow.

One ``python -m harness train`` run (mgrpo, the tiny preset shrunk as in test_train_e2e, a real
``redis-server`` with an append-only file on a free loopback port):

1. Redis is killed and restarted within ``store.retry_s``: the roles wait it out and go on;
2. Redis is killed for longer: a role stops with exit status 3 and one line naming the store URL and
   the step in progress; the launcher stops the other role and marks the run failed;
3. Redis comes back and ``--resume`` finishes the run: steps 1..N once each, every query group complete
   and taken by the sub role exactly once.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.records import read_steps
from tests.harness.test_train_e2e import ROOT, SMALL
from tests.support.redis_server import RedisServer, redis_server_binary

pytestmark = [pytest.mark.slow, pytest.mark.redis]

STEPS = 4


def _steps(run: Path) -> list[int]:
    path = run / "planner" / "metrics.jsonl"
    if not path.is_file():
        return []
    return [r.step for r in read_steps(path, tolerate_truncated_tail=True).records]


def _wait_for(pred, what: str, launcher: subprocess.Popen, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        if launcher.poll() is not None:
            raise AssertionError(f"the run ended (status {launcher.returncode}) before {what}:\n"
                                 + launcher.stdout.read() + launcher.stderr.read())
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_run_waits_out_a_redis_restart_stops_clearly_on_a_long_outage_and_resumes(tmp_path):
    if redis_server_binary() is None:
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server)")
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    run = tmp_path / "run"
    with RedisServer(persistent=True) as redis:
        url = redis.url(0)
        cmd = [sys.executable, "-m", "harness", "train", "--trainer", "mgrpo", "--config",
               str(ROOT / "baselines/configs/tiny/mgrpo.yaml"), "--max-steps", str(STEPS), "--run-dir", str(run),
               *SMALL, "eval.every=0", f"store.url={url}", "store.retry_s=3"]
        launcher = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            _wait_for(lambda: 1 in _steps(run), "planner step 1", launcher)
            redis.restart(down_s=1.0)  # within store.retry_s=3: waited out
            _wait_for(lambda: 2 in _steps(run), "planner step 2 (after the short outage)", launcher)
            redis.kill()  # longer than store.retry_s: a role stops
            stdout, stderr = launcher.communicate(timeout=180)
        finally:
            if launcher.poll() is None:
                launcher.kill()
                launcher.communicate()
        assert launcher.returncode == 1, stdout + stderr
        assert re.search(r"role (planner|sub) exited with status 3", stderr), stderr
        m = re.search(r"error: the (planner|sub) role stopped (in step \d+ \(steps up to \d+ recorded\)|before its "
                      r"first step) on store (\S+): lost Redis at 127\.0\.0\.1:(\d+) \(db 0\) for [\d.]+ s", stderr)
        assert m, stderr
        assert m.group(3) == url and int(m.group(4)) == redis.port
        assert "no group is half-applied" in stderr and f"python -m harness train --resume {run}" in stderr
        assert json.loads((run / "status.json").read_text())["state"] == "failed"

        redis.revive()
        resumed = subprocess.run([sys.executable, "-m", "harness", "train", "--resume", str(run)], cwd=ROOT, env=env,
                                 capture_output=True, text=True, timeout=600)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert json.loads((run / "status.json").read_text())["state"] == "completed"
        assert _steps(run) == list(range(1, STEPS + 1))  # none lost, none twice

        from mgrpo.store import open_store

        store = open_store(url, run_id=run.name)
        try:
            progress = store.group_progress()
            assert len(progress) == 2 * STEPS and all(p.complete and p.k == 2 for p in progress.values())
            log = store.consumed_groups()  # the sub role took every group once and acknowledged it
            assert sorted(c.query_id for c in log) == sorted(progress) and store.pending_groups() == []
            assert [c.position for c in log] == list(range(1, 2 * STEPS + 1))
        finally:
            store.close()
