"""Two hosts, simulated: an mgrpo run split across two network namespaces (docs/training.md "Two nodes").

Host ``a`` runs Redis and the planner role; host ``b`` runs the world server and the sub role (its service and
its trainer). They reach each other only at their addresses over a veth pair (tests/support/netns.py): every
server is bound to its host's address (``redis-server --bind``, ``world serve --host``, ``service.host``), the
planner finds the service at ``service.public_url``, the sub role finds Redis at ``store.url``. The roles are
started by hand, as the two-node recipe does (no launcher): the task set first, then each role with
``python -m harness.role``.

Mid-run the link is cut for a few seconds: the planner's delegations and both roles' store calls fail and are
retried (the service client's retries, ``store.retry_s``), and the run completes with every group taken once,
trained by exactly one sub-role step, and acknowledged (the checks of the fault suite, tests/faults/campaign.py,
run inside host ``a`` where Redis is). The traffic over the link is counted and bounded.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness.config import to_dict
from harness.records import read_steps, write_provenance
from harness.role.common import load_role_config
from harness.train import role_env
from tests.faults.campaign import CONFIG, OVERRIDES
from tests.support import netns
from tests.support.redis_server import RedisServer, redis_server_binary
from tests.support.runs import ROOT, build_warm_start, steps_of

pytestmark = [pytest.mark.slow, pytest.mark.redis]

STEPS = 6
REDIS_PORT, WORLD_PORT, SERVICE_PORT = 6390, 8080, 8100
CUT_S = 3.0
#: The link carries the run's Redis calls, delegations and their answers: far below this for 6 tiny steps.
MAX_LINK_BYTES = 50_000_000


def _wait(what: str, cond, procs: dict[str, subprocess.Popen], logs: dict[str, Path], timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        for name, p in procs.items():
            if p.poll() is not None and p.returncode != 0:
                raise AssertionError(f"{name} exited {p.returncode} before {what}:\n{logs[name].read_text()[-3000:]}")
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {n}\n{logs[n].read_text()[-1500:]}" for n in logs)
            raise AssertionError(f"timed out waiting for {what}\n{tails}")
        time.sleep(0.1)


@pytest.mark.skipif(redis_server_binary() is None, reason="redis-server is not installed")
def test_an_mgrpo_run_across_two_hosts_survives_a_cut_link(tmp_path):
    why = netns.unavailable()
    if why is not None:
        pytest.skip(why)
    warm = build_warm_start(tmp_path / "warm", CONFIG, OVERRIDES + ["tools.visit_backend=direct"], sub_visits=True)
    run = tmp_path / "run"
    procs: dict[str, subprocess.Popen] = {}
    logs: dict[str, Path] = {}
    with netns.TwoHosts() as hosts:
        a, b = hosts.addr["a"], hosts.addr["b"]
        redis = RedisServer(persistent=True, host=a, netns=hosts.ns["a"], port=REDIS_PORT).start()
        try:
            store = f"redis://{a}:{REDIS_PORT}/0"
            world_url = f"http://{b}:{WORLD_PORT}"
            cfg = load_role_config(str(CONFIG), [
                *OVERRIDES, "tools.visit_backend=direct", f"planner.max_steps={STEPS}", f"models.planner={warm}",
                f"models.sub={warm}", f"store.url={store}", f"service.host={b}", f"service.port={SERVICE_PORT}",
                f"service.public_url=http://{b}:{SERVICE_PORT}"])
            run.mkdir()
            (run / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
            write_provenance(run, cfg, [cfg.seed], trainer="mgrpo", arm="mgrpo")
            env = role_env(cfg.threads)
            subprocess.run([sys.executable, "-m", "harness.role.tasks", "--config", str(run / "config.yaml"),
                            "--out", str(run / "tasks")], cwd=ROOT, env=env, check=True, capture_output=True)

            def start(name: str, host: str, argv: list[str]) -> None:
                logs[name] = tmp_path / f"{name}.log"
                with open(logs[name], "wb") as fh:
                    procs[name] = subprocess.Popen(hosts.cmd(host, [sys.executable, *argv]), cwd=ROOT, env=env,
                                                   stdout=fh, stderr=subprocess.STDOUT)

            start("world", "b", ["-m", "harness", "world", "serve", "--seed", str(cfg.world.seed), "--size",
                                 cfg.world.size, "--host", b, "--port", str(WORLD_PORT)])
            _wait("the world server", lambda: "Serving the offline world" in logs["world"].read_text(), procs, logs, 60)
            assert f"at {world_url}/" in logs["world"].read_text()
            role = ["-m", "harness.role", "--config", str(run / "config.yaml"), "--run-dir", str(run),
                    "--world-url", world_url, "--tasks", str(run / "tasks")]
            start("sub", "b", [*role, "--role", "sub"])
            start("planner", "a", [*role, "--role", "planner", "--sub-url", f"http://{b}:{SERVICE_PORT}"])

            # each server listens on its host's address only, and nothing of host b listens on host a
            listening = {h: subprocess.run(hosts.cmd(h, ["ss", "-ltnH"]), capture_output=True, text=True).stdout
                         for h in ("a", "b")}
            assert f"{a}:{REDIS_PORT}" in listening["a"] and f"{b}:{WORLD_PORT}" in listening["b"]

            _wait("planner step 2", lambda: len(steps_of(run, "planner")) >= 2, procs, logs)
            _wait("the sub service", lambda: f"{b}:{SERVICE_PORT}" in subprocess.run(
                hosts.cmd("b", ["ss", "-ltnH"]), capture_output=True, text=True).stdout, procs, logs, 60)
            t_cut = time.time()
            hosts.cut()
            time.sleep(CUT_S)
            hosts.restore()
            t_restore = time.time()

            for name in ("planner", "sub"):
                try:
                    rc = procs[name].wait(timeout=600)
                except subprocess.TimeoutExpired:
                    raise AssertionError(f"{name} did not finish:\n{logs[name].read_text()[-3000:]}") from None
                assert rc == 0, f"{name} exited {rc}:\n{logs[name].read_text()[-3000:]}"
            traffic = hosts.traffic()

            # the store lives on host a: the checks run there
            probe = ("import json, sys; from pathlib import Path; from tests.faults.campaign import check_run; "
                     "c = check_run(Path(sys.argv[1]), sys.argv[2]); c.pop('group_detail'); print(json.dumps(c))")
            res = subprocess.run(hosts.cmd("a", [sys.executable, "-c", probe, str(run), store]), cwd=ROOT, env=env,
                                 capture_output=True, text=True, timeout=300)
            assert res.returncode == 0, res.stderr[-3000:]
            check = json.loads(res.stdout.strip().splitlines()[-1])
        finally:
            for p in procs.values():
                if p.poll() is None:
                    p.kill()
                    p.wait(timeout=30)
            redis.stop()

    n_groups = STEPS * cfg.planner.groups_per_step
    assert check["planner_steps"] == list(range(1, STEPS + 1))
    assert len(check["groups"]) == n_groups and check["complete"]
    assert check["consumer_positions"] == list(range(1, n_groups + 1)) and check["taken_once"]
    assert check["delegated_groups"] == n_groups and check["sub_steps"] == list(range(1, len(check["sub_steps"]) + 1))
    for key in ("pending", "lost", "duplicated", "trained_not_acked"):
        assert check[key] == [], (key, check[key])
    assert check["checkpoints"]["planner"] and check["checkpoints"]["sub"]
    # the cut was felt and survived: a delegation or a store call failed and was retried (a warning line each), or
    # a planner step that spans the cut waited through it. A call already on an open connection is not refused by a
    # downed link, it waits for it: with sub.max_lag (the preset) the planner may spend the cut waiting for the sub
    # role, whose Redis call on its open connection waits until the link is back (redis socket timeout 30 s).
    felt = logs["planner"].read_text() + logs["sub"].read_text()
    retried = re.search(r"sub-agent service at .*: attempt 1 of 4 failed .*; retrying in 1 s|lost Redis at .*; retrying",
                        felt)
    spanning = [r for r in read_steps(run / "planner" / "metrics.jsonl").records
                if r.time - r.time_split["wall_s"] <= t_cut and r.time >= t_restore]
    waited = [r.time_split.get("sub_lag_wait_s", 0.0) + r.time_split.get("delegate_s", 0.0) for r in spanning]
    assert retried or any(w >= 0.8 * CUT_S for w in waited), (waited, felt[-3000:])
    assert 0 < traffic["tx_bytes"] + traffic["rx_bytes"] < MAX_LINK_BYTES, traffic
    print(f"two hosts: {n_groups} groups, sub steps {len(check['sub_steps'])}, link traffic {traffic}")
