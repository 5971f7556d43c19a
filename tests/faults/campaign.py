"""Injected-fault campaigns on real training runs, and the checker (docs/reliability.md).

A *campaign* is one short tiny-preset ``mgrpo`` run (``python -m harness train``) in which the sub-agent
trains: the planner and the sub-agent are warm-started to always delegate and always visit
(tests/support/runs.py), visits go through Chromium (the Playwright pool), the store is a real
``redis-server`` with an append-only file, the planner reaches the sub-agent service and both roles reach
Redis through :class:`~tests.support.tcp_proxy.CuttableProxy` forwarders, and the run folder lies on its
own small tmpfs. While the run goes, faults are injected at seeded random moments, one after another:

==============  ==========================================================================  ===============
kind            what                                                                        expected
==============  ==========================================================================  ===============
``kill``        SIGKILL of the planner role, the sub role or the launcher                   stop, --resume
``redis``       SIGKILL of redis-server, back on the same port 0.2-2 s later                 retried
``network``     both links (planner -> sub-agent service, roles -> Redis) reset and          retried
                refused for 0.5-3 s
``browser``     SIGKILL of the Chromium behind the sub role's Playwright pool                relaunched
``disk``        the run folder's tmpfs filled up until a role fails on a write, then         stop, --resume
                freed
==============  ==========================================================================  ===============

After a fault that stops the run (or any stop), the campaign runs ``python -m harness train --resume``;
it ends when the run completes. :func:`check_run` then compares the run with a fault-free run of the same
seed and config: planner and sub-role steps 1..N once each; the same query groups, all complete; every
group taken once by the sub role and acknowledged; every group trained by exactly one sub-role step
(``lost``: acknowledged groups no step trained, ``duplicated``: trained by two); evaluation records at the
reference's steps only, one per task; the last checkpoint of each role loads.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.records import read_status, read_steps, read_tasks
from tests.support.redis_server import RedisServer, free_port
from tests.support.runs import ROOT, Launch, _proc_state, _signal, steps_of, store_groups
from tests.support.tcp_proxy import CuttableProxy

KINDS = ("kill", "redis", "network", "browser", "disk")
STEPS, SAVE, EVERY = 8, 2, 4
CONFIG = ROOT / "baselines/configs/tiny/mgrpo.yaml"
#: The run's shape (the tiny preset shrunk as in tests/harness/test_resume.py), without the per-campaign
#: addresses (store, service) and models.
OVERRIDES = ["rollout.k=2", "planner.groups_per_step=2", "rollout.max_new_tokens=16", "rollout.planner_turns=2",
             "rollout.sub_turns=2", "alignment.d=2", "tasks.n_train=4", "tasks.n_test=2", f"eval.every={EVERY}",
             "eval.n_tasks=1", "eval.runs=1", f"planner.save_steps={SAVE}", f"sub.save_steps={SAVE}",
             "store.group_timeout_s=120", "threads=1", "tools.visit_backend=playwright", "tools.timeout_s=5",
             "store.retry_s=15", "service.timeout_s=60"]
TMPFS_MB = 400


@dataclass
class Fault:
    kind: str
    detail: str
    at_planner_step: int
    stopped: bool  # the run stopped (and was resumed with --resume)
    message: str = ""  # the stop's last error line


@dataclass
class Campaign:
    seed: int
    faults: list[Fault] = field(default_factory=list)
    launches: int = 0
    completed: bool = False
    check: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


class Environment:
    """Redis (persistent), the two cuttable links and the run folder's tmpfs of one campaign."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.redis = RedisServer(persistent=True).start()
        self.redis_link = CuttableProxy(self.redis.port)
        self.service_port = free_port()
        self.service_link = CuttableProxy(self.service_port)
        self.mount = root / "disk"
        self.mount.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_MB}m", "tmpfs", str(self.mount)], check=True,
                       capture_output=True)
        self.fillers = 0

    def overrides(self, run: Path) -> list[str]:
        return [f"store.url=redis://{self.redis_link.url_host}/0", f"service.port={self.service_port}",
                f"service.public_url=http://{self.service_link.url_host}"]

    def fill_disk(self) -> int:
        """Take every free byte of the run folder's tmpfs (again: a role may have freed some); returns how many."""
        st = os.statvfs(self.mount)
        free = st.f_bavail * st.f_frsize
        if free:
            self.fillers += 1
            with open(self.mount / f"filler-{self.fillers}.bin", "wb") as fh:
                try:
                    os.posix_fallocate(fh.fileno(), 0, free)
                except OSError:
                    pass
        return free

    def free_disk(self) -> None:
        for f in self.mount.glob("filler-*.bin"):
            f.unlink()

    def close(self) -> None:
        self.service_link.close()
        self.redis_link.close()
        self.redis.stop()
        subprocess.run(["umount", "-l", str(self.mount)], capture_output=True)


def can_mount_tmpfs() -> str | None:
    """None when this process may mount a tmpfs (root), else why not."""
    if os.geteuid() != 0:
        return "mounting a tmpfs for the full-disk fault needs root (CI runs as root)"
    if shutil.which("mount") is None:
        return "no mount command"
    return None


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _chromium_browsers(role_pid: int) -> list[int]:
    """The Chromium browser processes (not their renderers) under a role process."""
    found = []
    for pid in _descendants(role_pid):
        try:
            args = (Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"))
        except OSError:
            continue
        if args and b"chromium" in args[0] and not any(a.startswith(b"--type=") for a in args):
            found.append(pid)
    return found


def _wait_exit(launch: Launch, timeout: float) -> int | None:
    try:
        return launch.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def _wait_roles_gone(launch: Launch, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    for pid in launch.role_pids().values():
        while _proc_state(pid) not in (None, "Z") and time.monotonic() < deadline:
            time.sleep(0.05)
        if _proc_state(pid) not in (None, "Z"):
            _signal(pid, signal.SIGKILL)


def _log_marks(run: Path) -> dict[Path, int]:
    """The role logs' sizes now (their lines after these marks are the current launch's)."""
    return {p: p.stat().st_size for p in (run / "logs").glob("*.log")} if (run / "logs").is_dir() else {}


def _last_error(launch: Launch, run: Path, marks: dict[Path, int]) -> str:
    """The error line the stopped launch left: a role log's (written since ``marks``), else the launcher's."""
    lines = []
    for log in sorted((run / "logs").glob("*.log")):
        try:
            with open(log, "rb") as fh:
                fh.seek(marks.get(log, 0))
                text = fh.read().decode(errors="replace")
        except OSError:
            continue
        lines += [ln for ln in text.splitlines()
                  if ln.startswith(("error:", "OSError", "RuntimeError", "harness.", "mgrpo.")) or "No space" in ln]
    if not lines:
        lines = [ln for ln in launch.text().splitlines() if "FAILED" in ln or ln.startswith("error")]
    return lines[-1][:300] if lines else ""


def fault_plan(n: int, seed: int, kinds: tuple[str, ...] = KINDS) -> list[str]:
    """``n`` fault kinds, each kind ``n / len(kinds)`` times (rounded), in a seeded random order."""
    plan = [kinds[i % len(kinds)] for i in range(n)]
    random.Random(seed).shuffle(plan)
    return plan


def run_campaign(seed: int, plan: list[str], warm: Path, root: Path) -> Campaign:
    """One run, resumed until it completes, with the faults of ``plan`` injected in that order at moments drawn
    from ``seed``. A run can complete before the whole plan is injected (its ``faults`` then hold a prefix of
    the plan): the caller starts another run for the rest."""
    rng = random.Random(seed)
    camp = Campaign(seed)
    env = Environment(root)
    t0 = time.monotonic()
    run = env.mount / "run"
    first = ["--trainer", "mgrpo", "--config", str(CONFIG), "--max-steps", str(STEPS), "--run-dir", str(run),
             f"models.planner={warm}", f"models.sub={warm}", *OVERRIDES, *env.overrides(run)]
    try:
        launch = Launch(run, *first, log_dir=root)
        camp.launches = 1
        for i, kind in enumerate(plan):
            # a seeded moment: a planner step to reach, then a little more (spread over the run's steps)
            done = max(steps_of(run, "planner"), default=0)
            target = min(STEPS - 1, max(done, (i * STEPS) // len(plan) + rng.randint(0, 1)))
            try:
                launch.wait_for(f"planner step {target}", lambda: max(steps_of(run, "planner"), default=0) >= target
                                and "sub" in launch.role_pids(), timeout=300, poll=0.05)
            except AssertionError:
                if launch.proc.poll() == 0:
                    break  # the run completed before this fault: it is not counted
                raise
            time.sleep(rng.uniform(0.0, 2.0))
            if launch.proc.poll() is not None:
                break
            at = max(steps_of(run, "planner"), default=0)
            marks = _log_marks(run)
            detail = _inject(kind, rng, launch, env)
            stopped = kind in ("kill", "disk")
            if kind == "disk":
                deadline = time.monotonic() + 120
                while launch.proc.poll() is None and time.monotonic() < deadline:
                    env.fill_disk()  # keep it full until a role fails on a write
                    time.sleep(0.2)
                env.free_disk()
                if launch.proc.poll() is None:
                    raise AssertionError(f"the run did not stop within 120 s of a full disk:\n{launch.text()[-3000:]}")
                stopped = launch.proc.returncode != 0  # 0: the run completed before it wrote again
            elif stopped:
                _wait_exit(launch, 120)
            else:
                time.sleep(0.5)
                stopped = launch.proc.poll() not in (None, 0)  # a retried fault should not stop the run
            fault = Fault(kind, detail, at, stopped)
            camp.faults.append(fault)
            if launch.proc.poll() not in (None, 0):
                _wait_roles_gone(launch)
                fault.message = _last_error(launch, run, marks) or (
                    "(no error line: the disk was full)" if kind == "disk" else "(no error line: killed)")
                launch = Launch(run, "--resume", str(run), log_dir=root)
                camp.launches += 1
        while True:
            rc = launch.finish(timeout=600)
            if rc == 0:
                break
            if camp.launches > len(plan) + 3:
                raise AssertionError(f"the run keeps failing after {camp.launches} launches:\n{launch.text()[-3000:]}")
            _wait_roles_gone(launch)
            camp.faults.append(Fault("unplanned stop", _last_error(launch, run, {}), max(steps_of(run, "planner"),
                                                                                         default=0), True))
            launch = Launch(run, "--resume", str(run), log_dir=root)
            camp.launches += 1
        camp.completed = read_status(run)["state"] == "completed"
        camp.check = check_run(run, f"redis://127.0.0.1:{env.redis.port}/0")
        camp.check["logs"] = str(root)
        (root / "check.json").write_text(json.dumps(camp.check, indent=1, default=str))
    finally:
        camp.seconds = time.monotonic() - t0
        try:
            if launch.proc.poll() is None:
                launch.crash()
        except Exception:  # noqa: BLE001 - clean-up only
            pass
        if run.exists():  # the records and logs outlive the tmpfs, for a failing check to be read
            shutil.copytree(run, root / "run-copy", ignore=shutil.ignore_patterns("*.safetensors", "*.pt", "*.bin"),
                            dirs_exist_ok=True)
        env.close()
    return camp


def _inject(kind: str, rng: random.Random, launch: Launch, env: Environment) -> str:
    if kind == "kill":
        victim = rng.choice(["planner", "sub", "launcher"])
        pid = launch.proc.pid if victim == "launcher" else launch.role_pids()[victim]
        _signal(pid, signal.SIGKILL)
        return f"SIGKILL {victim}"
    if kind == "redis":
        down = rng.uniform(0.2, 2.0)
        env.redis.restart(down_s=down)
        return f"redis-server killed, back after {down:.1f} s"
    if kind == "network":
        down = rng.uniform(0.5, 3.0)
        cuts = [threading.Thread(target=link.cut, args=(down,)) for link in (env.service_link, env.redis_link)]
        for t in cuts:
            t.start()
        for t in cuts:
            t.join()
        return f"both links cut for {down:.1f} s"
    if kind == "browser":
        deadline = time.monotonic() + 30  # after an earlier crash the pool relaunches at the next visit
        while not (browsers := _chromium_browsers(launch.role_pids()["sub"])) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in browsers:
            _signal(pid, signal.SIGKILL)
        return f"SIGKILL of {len(browsers)} Chromium process(es)"
    if kind == "disk":
        free = env.fill_disk()
        return f"run folder's disk filled ({free / 2**20:.0f} MiB)"
    raise ValueError(kind)


def reference_run(warm: Path, root: Path) -> dict[str, Any]:
    """The fault-free run of the same config and seed: what :func:`check_run` compares with."""
    env = Environment(root)
    run = env.mount / "run"
    try:
        launch = Launch(run, "--trainer", "mgrpo", "--config", str(CONFIG), "--max-steps", str(STEPS), "--run-dir",
                        str(run), f"models.planner={warm}", f"models.sub={warm}", *OVERRIDES, *env.overrides(run),
                        log_dir=root)
        rc = launch.finish(timeout=600)
        assert rc == 0, launch.text()[-3000:]
        return check_run(run, f"redis://127.0.0.1:{env.redis.port}/0")
    finally:
        env.close()


def check_run(run: Path, store_url: str) -> dict[str, Any]:
    """What a faulted run is compared on (module docstring)."""
    from harness.models import load_model
    from harness.role.checkpoints import last_checkpoint

    progress, consumed, pending, delegated = store_groups(store_url, run.name)
    taken = {c.query_id: (c.position, c.state, c.deliveries) for c in consumed}
    detail = {q: {"have": p.have, "k": p.k, "complete": p.complete, "sub_calls": delegated.get(q),
                  "taken": taken.get(q)} for q, p in progress.items()}
    sub_records = read_steps(run / "sub" / "metrics.jsonl").records
    trained = Counter(q for r in sub_records for q in r.extra["groups"])
    acked = {c.query_id for c in consumed if c.state == "done"}
    should_train = {q for q in acked if delegated.get(q)}
    evals = {}
    for d in sorted((run / "eval").iterdir(), key=lambda p: int(p.name)):
        for f in sorted(d.glob("local_*.jsonl")):
            recs = read_tasks(f).records
            evals[f"{d.name}/{f.stem}"] = sorted((r.task_id, r.inference_run) for r in recs)
    loads = {}
    for role in ("planner", "sub"):
        ckpt = last_checkpoint(run / role / "checkpoints")
        model, _ = load_model(ckpt) if ckpt else (None, None)
        loads[role] = Path(ckpt).name if model is not None else None
    return {
        "planner_steps": steps_of(run, "planner"),
        "sub_steps": [r.step for r in sub_records],
        "groups": sorted(progress),
        "complete": all(p.complete for p in progress.values()),
        "consumer_positions": sorted(c.position for c in consumed),
        "taken_once": len(consumed) == len({c.query_id for c in consumed}),
        "pending": pending,
        "lost": sorted(should_train - set(trained)),
        "duplicated": sorted(q for q, n in trained.items() if n > 1),
        "trained_not_acked": sorted(set(trained) - acked),
        "delegated_groups": sum(1 for v in delegated.values() if v),
        "evals": evals,
        "checkpoints": loads,
        "group_detail": detail,
    }


def compare(check: dict[str, Any], ref: dict[str, Any]) -> list[str]:
    """What differs from the fault-free reference (empty: the faulted run is as good as the reference)."""
    problems = []
    n = len(ref["groups"])
    extra, missing = sorted(set(check["groups"]) - set(ref["groups"])), sorted(set(ref["groups"]) - set(check["groups"]))
    if extra or missing:
        problems.append(f"groups: {len(check['groups'])} in the store, {len(ref['groups'])} in the reference; not in the "
                        f"reference: {check['group_detail'].get(q) for q in extra} {extra}; missing: {missing}")
    for key in ("planner_steps", "sub_steps", "evals", "checkpoints"):
        if check[key] != ref[key]:
            problems.append(f"{key}: {json.dumps(check[key])[:300]} != reference {json.dumps(ref[key])[:300]}")
    if not check["complete"]:
        problems.append("a group is incomplete")
    if check["consumer_positions"] != list(range(1, n + 1)) or not check["taken_once"]:
        problems.append(f"consumer log positions {check['consumer_positions']} (expected 1..{n} once each)")
    for key in ("pending", "lost", "duplicated", "trained_not_acked"):
        if check[key]:
            problems.append(f"{key}: {check[key]}")
    return problems


def table(campaigns: list[Campaign]) -> str:
    """The suite's table: faults injected per kind, runs recovered, groups lost and duplicated."""
    kinds = [k for k in KINDS] + sorted({f.kind for c in campaigns for f in c.faults} - set(KINDS))
    lines = ["| fault | injected | stopped the run (then --resume) | retried/relaunched without a stop |",
             "|---|---:|---:|---:|"]
    for k in kinds:
        fs = [f for c in campaigns for f in c.faults if f.kind == k]
        lines.append(f"| {k} | {len(fs)} | {sum(f.stopped for f in fs)} | {sum(not f.stopped for f in fs)} |")
    total = [f for c in campaigns for f in c.faults if f.kind in KINDS]
    lost = sum(len(c.check.get("lost", [])) for c in campaigns)
    dup = sum(len(c.check.get("duplicated", [])) for c in campaigns)
    groups = sum(len(c.check.get("groups", [])) for c in campaigns)
    lines += ["", f"{len(total)} faults in {len(campaigns)} runs ({sum(c.launches for c in campaigns)} launches, "
              f"{sum(c.seconds for c in campaigns):.0f} s); runs recovered: {sum(c.completed for c in campaigns)} of "
              f"{len(campaigns)}; groups lost: {lost}, duplicated: {dup} (of {groups})"]
    return "\n".join(lines)
