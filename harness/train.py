"""``python -m harness train``: one trainer on one machine, its roles as separate processes (docs/training.md, docs/report.md).

    python -m harness train --trainer mgrpo --config baselines/configs/tiny/mgrpo.yaml \\
        [--seed S] [--max-steps N] [--run-dir DIR | --resume RUN_DIR] [key.path=value ...]

1. Loads and validates the :class:`harness.train_config.TrainConfig` (``--trainer``, ``--seed``,
   ``--max-steps`` and ``key=value`` override the file) and checks ``models.planner`` / ``models.sub``
   (:func:`harness.models.check_model_ref`), and prepares the run's task set (:func:`prepare_tasks`,
   :mod:`harness.role.tasks`: the world's tasks, selected and hard-filtered as the config says): a bad
   value, or a selection that leaves too few training tasks, is a one-line error, exit status 2, before
   anything exists. Then creates ``runs/<run_id>/`` and writes ``config.yaml`` (the resolved config
   the roles read), ``provenance.json`` and the task set (``tasks/``). ``--resume`` reuses the run's task
   set and refuses (exit status 2) when the config or the world the code generates no longer matches it.
2. Starts the world server (``python -m harness world serve``) and the roles the trainer needs
   (:data:`baselines.TRAINERS`), each ``python -m harness.role --role ... --tasks <run>/tasks`` with
   ``threads`` torch/OMP threads, logging to ``<run>/logs/<role>.log``. The roles talk over real HTTP and
   the shared store (sqlite in the run directory unless ``store.url`` says otherwise).
3. Waits. When the planner finishes, the sub role drains the remaining groups and stops (bounded
   wait). When a role dies, the others are stopped after a bounded wait and the error names the role
   and its log file. Ctrl-C or SIGTERM stops everything; a child also gets SIGTERM when the launcher
   dies (``PR_SET_PDEATHSIG``). ``status.json`` says ``completed`` or ``failed``. Meanwhile
   :class:`RoleProgress` tails each training role's ``<run>/<role>/metrics.jsonl`` and shows a
   progress bar per role (step of max steps, last reward, seconds per step) on a terminal, or one
   plain line per step when stdout is a file or a pipe.

``--resume RUN_DIR`` restarts the roles of an existing run from their last checkpoints with the
run's own ``config.yaml`` (the store's consumer log makes sure no group is lost or counted twice).
"""

from __future__ import annotations

import argparse
import ctypes
import datetime as _dt
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import psutil
import yaml
from tqdm import tqdm

from baselines import TRAINERS, get_trainer
from harness.config import ConfigError, apply_overrides, from_dict, load_yaml, to_dict
from harness.records import read_steps, write_provenance, write_status
from harness.role.checkpoints import STORE_POSITION_FILE, last_checkpoint
from harness.role.common import PLANNER_DONE, SUB_URL, store_url
from harness.role.tasks import RunTasks, generate_run_tasks, reuse_run_tasks, write_run_tasks
from harness.train_config import TrainConfig
from mgrpo.store import open_store

#: Seconds a role may stay idle after the planner finished before it counts as stuck: a role still computing
#: (the sub role training its last step, which takes minutes with SmolLM2 on a CPU) is waited for.
DRAIN_TIMEOUT_S = 300.0
#: A role is computing while it uses at least this many cores (CPU seconds per second, its child processes
#: included); one that only waits (serving no one, polling the store) uses a few percent of one.
BUSY_CORES = 0.25
#: Seconds between SIGTERM and SIGKILL when stopping a role.
KILL_GRACE_S = 10.0


class RoleProcess:
    """A child process (world server or role) with its log file."""

    def __init__(self, name: str, argv: list[str], log_path: Path, env: dict[str, str]) -> None:
        self.name = name
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        # Own session (a Ctrl-C reaches only the launcher, which stops the roles in order); on Linux the
        # child also gets SIGTERM if the launcher itself dies (even by SIGKILL), so nothing is orphaned.
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True, preexec_fn=_die_with_parent)

    def poll(self) -> int | None:
        return self.proc.poll()

    def stop(self, grace_s: float = KILL_GRACE_S) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=10)
        self._log.close()

    def cpu_seconds(self) -> float | None:
        """CPU time (user + system) the process and its children (e.g. an ``accelerate launch``'s ranks) have used so
        far, or None when it cannot be read (the process has gone, or the platform refuses)."""
        try:
            proc = psutil.Process(self.proc.pid)
            total = 0.0
            for q in [proc, *proc.children(recursive=True)]:
                try:
                    t = q.cpu_times()
                except (psutil.NoSuchProcess, psutil.ZombieProcess):
                    continue
                total += t.user + t.system
            return total
        except (psutil.Error, OSError):
            return None

    def tail(self, n: int = 15) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def role_env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    n = str(threads)
    env.update(OMP_NUM_THREADS=n, MKL_NUM_THREADS=n, OPENBLAS_NUM_THREADS=n, TOKENIZERS_PARALLELISM="false",
               HF_HUB_OFFLINE=env.get("HF_HUB_OFFLINE", "1"), HF_DATASETS_OFFLINE=env.get("HF_DATASETS_OFFLINE", "1"),
               TRL_EXPERIMENTAL_SILENCE="1", PYTHONUNBUFFERED="1")
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def start_world(cfg: TrainConfig, run_dir: Path, env: dict[str, str], timeout_s: float = 60.0) -> tuple[RoleProcess, str]:
    """Start ``python -m harness world serve`` and return it with its base URL (read from its log).

    The log is appended to across resumes: only what this start wrote is read (an earlier start's address, of a
    server long gone, would otherwise be found first)."""
    log = run_dir / "logs" / "world.log"
    offset = log.stat().st_size if log.is_file() else 0
    proc = RoleProcess("world", [sys.executable, "-m", "harness", "world", "serve", "--seed", str(cfg.world.seed),
                                 "--size", cfg.world.size, "--port", "0"], log, env)
    deadline = time.monotonic() + timeout_s
    pattern = re.compile(r"at (http://127\.0\.0\.1:\d+)/")
    while time.monotonic() < deadline:
        with open(proc.log_path, "rb") as fh:
            fh.seek(offset)
            m = pattern.search(fh.read().decode(errors="replace"))
        if m:
            return proc, m.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.stop()
    raise RuntimeError(f"the world server did not start within {timeout_s:.0f}s; see {proc.log_path}:\n{proc.tail()}")


def build_config(args: argparse.Namespace) -> tuple[TrainConfig, Path]:
    """The resolved config and the run directory from the command line."""
    overrides = list(args.overrides)
    if args.resume:
        run_dir = Path(args.resume)
        path = run_dir / "config.yaml"
        if not path.is_file():
            raise ConfigError(f"--resume {run_dir}: no config.yaml there (is it a run directory made by harness train?)")
        data = load_yaml(path)
        if args.trainer and data.get("trainer") != args.trainer:
            raise ConfigError(f"--resume {run_dir} is a {data.get('trainer')} run, not {args.trainer}")
    else:
        if not args.config:
            raise ConfigError("--config is required (e.g. baselines/configs/tiny/mgrpo.yaml)")
        data = load_yaml(args.config)
        if args.trainer:
            if data.get("trainer") not in (None, args.trainer):
                raise ConfigError(f"{args.config} is a config for trainer {data.get('trainer')!r}, but --trainer is "
                                  f"{args.trainer!r}; pick the matching config file")
            overrides.append(f"trainer={args.trainer}")
        if args.seed is not None:
            overrides.append(f"seed={args.seed}")
    if args.max_steps is not None:
        overrides.append(f"planner.max_steps={args.max_steps}")
        sub = (data.get("sub") or {}).get("max_steps")
        if sub is not None and sub > args.max_steps:
            overrides.append(f"sub.max_steps={args.max_steps}")
    where = str(args.resume or args.config)
    cfg = from_dict(TrainConfig, apply_overrides(data, overrides), where=where)
    if args.resume:
        return cfg, Path(args.resume)
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    run_dir = Path(args.run_dir) if args.run_dir else Path(cfg.runs_dir) / cfg.resolved_run_id(now)
    cfg.run_id = run_dir.name
    return cfg, run_dir


def summarise(run_dir: Path, roles: tuple[str, ...]) -> str:
    lines = []
    for role in roles:
        path = run_dir / role / "metrics.jsonl"
        if not path.is_file():
            lines.append(f"  {role}: no steps recorded")
            continue
        recs = read_steps(path, tolerate_truncated_tail=True).records
        if not recs:
            lines.append(f"  {role}: no steps recorded")
            continue

        def avg(key: str) -> float:
            vals = [getattr(r, key) for r in recs if getattr(r, key) is not None]
            return sum(vals) / len(vals) if vals else float("nan")

        lines.append(f"  {role}: {len(recs)} steps, reward {avg('reward_mean'):.3f}, per step: rollout "
                     f"{avg('rollout_s'):.1f}s wait {avg('wait_s'):.1f}s train {avg('train_s'):.1f}s")
    return "\n".join(lines)


def check_models(cfg: TrainConfig, run_dir: Path, *, resume: bool) -> None:
    """Check ``models.planner`` / ``models.sub`` before anything starts (:class:`ConfigError` naming the field and
    the path), so a bad path costs no role start-up and, for a new run, leaves no run directory behind."""
    from harness.models import check_model_ref  # lazy: torch; the launcher stays torch-free

    spec = get_trainer(str(cfg.trainer))
    check_model_ref(cfg.models.planner, spec.planner_agent, key="models.planner")
    if not spec.has_sub:
        return
    # A resumed training sub role loads its last checkpoint, not models.sub (harness.role.sub.run_sub).
    if resume and spec.sub_trains:
        if last_checkpoint(run_dir / "sub" / "checkpoints", required=(STORE_POSITION_FILE,)) is not None:
            return
    check_model_ref(cfg.models.sub, "sub_agent", key="models.sub")


def prepare_tasks(cfg: TrainConfig, run_dir: Path, *, resume: bool) -> tuple[RunTasks, bool]:
    """The run's task set before anything starts (``harness.role.tasks.RunTasks``) and whether it was reused.

    A new run generates it (written by :func:`launch` once the run directory exists); ``--resume`` reuses
    ``<run>/tasks`` (:class:`harness.role.tasks.TaskSetError`, a :class:`ConfigError`, when it was prepared
    for another world or task selection) or, for a run that has none yet, generates it."""
    if resume:
        tasks = reuse_run_tasks(run_dir / "tasks", cfg)
        if tasks is not None:
            return tasks, True
    return generate_run_tasks(cfg), False


def role_totals(cfg: TrainConfig) -> dict[str, int]:
    """Optimizer steps of each role that trains (the progress bars' totals)."""
    totals = {"planner": cfg.planner_steps}
    if get_trainer(str(cfg.trainer)).sub_trains:
        totals["sub"] = cfg.sub_max_steps
    return totals


class RoleProgress:
    """Console progress of the training roles, read from their ``<run>/<role>/metrics.jsonl``.

    On a terminal: one tqdm bar per role (steps done of its max steps; postfix: the last step's reward
    and its seconds, rollout + train). Otherwise (stdout is a file or a pipe, e.g. ``harness experiment``'s
    log): one plain line per new step, so logs stay readable. Steps recorded before this launcher started
    (``--resume``) count towards the bar but are not printed again; a step the resumed role rewrites is."""

    def __init__(self, run_dir: Path, totals: dict[str, int], stream: TextIO | None = None,
                 bars: bool | None = None) -> None:
        self.run_dir = run_dir
        self.totals = dict(totals)
        self.stream = stream if stream is not None else sys.stdout
        self.bars = _isatty(self.stream) if bars is None else bars
        self._stat: dict[str, tuple[int, int]] = {}
        self._shown: dict[str, set[tuple[int, float]]] = {}
        self._bars: dict[str, Any] = {}
        for role in self.totals:
            self._shown[role] = {(r.step, r.time) for r in self._read(role) or []}
        if self.bars:
            width = max(len(r) for r in self.totals)
            for i, (role, total) in enumerate(self.totals.items()):
                done = max((step for step, _ in self._shown[role]), default=0)
                # no tqdm rate: it would count the start-up (model loading, step-0 evaluation) as step time
                self._bars[role] = tqdm(total=total, initial=min(done, total), desc=role.rjust(width), unit="step",
                                        position=i, file=self.stream, dynamic_ncols=True, leave=True,
                                        bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} "
                                                   "[{elapsed}<{remaining}{postfix}]")

    def _read(self, role: str) -> list[Any] | None:
        """The role's step records when its file changed since the last read, else None."""
        path = self.run_dir / role / "metrics.jsonl"
        try:
            st = path.stat()
        except OSError:
            return None
        key = (st.st_size, st.st_mtime_ns)
        if self._stat.get(role) == key:
            return None
        try:  # the role appends while we read: a half-written last line is skipped, never an error
            recs = read_steps(path, tolerate_truncated_tail=True).records
        except (OSError, ValueError):
            return None
        self._stat[role] = key
        return recs

    def poll(self) -> None:
        """Show the steps recorded since the last call."""
        for role, total in self.totals.items():
            recs = self._read(role)
            bar = self._bars.get(role)
            if recs:
                new = [r for r in recs if (r.step, r.time) not in self._shown[role]]
                self._shown[role].update((r.step, r.time) for r in new)
                if bar is not None:
                    last = recs[-1]
                    bar.n = min(last.step, total)
                    bar.initial = min(bar.initial, bar.n)  # a resumed role rewrote steps after its checkpoint
                    bar.set_postfix_str(_step_postfix(last), refresh=False)
                else:
                    for r in new:
                        print(f"[train] {role} step {r.step}/{total}: {_step_postfix(r)}", file=self.stream, flush=True)
            if bar is not None:
                bar.refresh()  # also ticks the elapsed time while a step runs

    def close(self) -> None:
        self.poll()
        for bar in self._bars.values():
            bar.close()
        self._bars.clear()


def _step_postfix(rec: Any) -> str:
    reward = "n/a" if rec.reward_mean is None else f"{rec.reward_mean:.3f}"
    return f"reward {reward}, {(rec.rollout_s or 0.0) + (rec.train_s or 0.0):.1f} s/step"


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def launch(cfg: TrainConfig, run_dir: Path, *, resume: bool, tasks: tuple[RunTasks, bool] | None = None) -> int:
    """Run the trainer's roles; ``tasks`` is :func:`prepare_tasks`'s answer (prepared here when None)."""
    spec = get_trainer(str(cfg.trainer))
    run_tasks, reused = tasks if tasks is not None else prepare_tasks(cfg, run_dir, resume=resume)
    run_dir.mkdir(parents=True, exist_ok=True)
    config_path = run_dir / "config.yaml"
    task_dir = run_dir / "tasks"
    if not resume:
        config_path.write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
        arm = f"{cfg.trainer}[alignment=none]" if spec.sub_trains and cfg.alignment.mode == "none" else cfg.trainer
        write_provenance(run_dir, cfg, [cfg.seed], trainer=cfg.trainer, arm=arm)
    else:
        write_status(run_dir, "running", resumed=True)
        reset_run_signals(cfg, run_dir)
    if not reused:  # before any role starts: the roles read it, none generates tasks
        write_run_tasks(task_dir, run_tasks)
    how = "reused" if reused else f"prepared in {run_tasks.meta.get('prepare_s', 0.0):.1f}s"
    print(f"[train] task set {task_dir}: {len(run_tasks.train)} training and {len(run_tasks.evals)} evaluation "
          f"tasks ({how})", flush=True)
    env = role_env(cfg.threads)
    # Ctrl-C and SIGTERM (a scheduler) stop the roles cleanly; set explicitly because a launcher started
    # in the background inherits SIGINT as ignored.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    procs: list[RoleProcess] = []
    error: str | None = None
    try:
        world, world_url = start_world(cfg, run_dir, env)
        procs.append(world)
        print(f"[train] {cfg.trainer} run {run_dir} (world at {world_url})", flush=True)
        roles: dict[str, RoleProcess] = {}
        for role in spec.roles:
            argv = [*role_launcher(cfg, role), "--role", role, "--config", str(config_path),
                    "--run-dir", str(run_dir), "--world-url", world_url, "--tasks", str(task_dir)] \
                + (["--resume"] if resume else [])
            roles[role] = RoleProcess(role, argv, run_dir / "logs" / f"{role}.log", env)
            procs.append(roles[role])
            print(f"[train] started role {role} (pid {roles[role].proc.pid}, log {roles[role].log_path})", flush=True)
        error = supervise(roles, progress=RoleProgress(run_dir, role_totals(cfg)))
    except KeyboardInterrupt as exc:
        error = f"interrupted ({exc or 'SIGINT'}); all roles stopped"
    except Exception as exc:  # a launcher failure still stops the children
        error = f"{type(exc).__name__}: {exc}"
    finally:
        for p in reversed(procs):
            p.stop()
    print(summarise(run_dir, spec.roles), flush=True)
    if error:
        write_status(run_dir, "failed", error=error)
        print(f"[train] FAILED: {error}", file=sys.stderr, flush=True)
        return 1
    write_status(run_dir, "completed")
    print(f"[train] completed: {run_dir}", flush=True)
    return 0


def role_launcher(cfg: TrainConfig, role: str) -> list[str]:
    """How a role's processes start on this machine: ``python -m harness.role`` for one process, else torchrun
    (``torch.distributed.run --standalone``: a free rendezvous port, ``<role>.num_processes`` workers, gloo on
    CPU, NCCL on GPUs), the same as ``accelerate launch`` with a multi-process config (docs/training.md)."""
    n = (cfg.planner if role == "planner" else cfg.sub).num_processes
    if n == 1:
        return [sys.executable, "-m", "harness.role"]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(n),
            "-m", "harness.role"]


def reset_run_signals(cfg: TrainConfig, run_dir: Path) -> None:
    """Before a resume: forget the previous processes' "planner done" and service URL in the store."""
    store = open_store(store_url(cfg, run_dir), run_id=run_dir.name, connect_timeout_s=cfg.store.retry_s,
                       retry_s=cfg.store.retry_s)
    try:
        store.put_stat(PLANNER_DONE, None)
        store.put_stat(SUB_URL, None)
    finally:
        store.close()


def killed_hint(rc: int) -> str:
    """Why a role's negative exit status matters: SIGKILL that no one sent on purpose is, on Linux, most often the
    kernel's out-of-memory killer, which leaves nothing in the role's own log."""
    if rc == -signal.SIGKILL:
        return (" (killed by SIGKILL: if nothing stopped it on purpose, most likely the kernel's out-of-memory killer; "
                "`dmesg` says so, and docs/performance.md, \"Memory\", lists what lowers a role's peak)")
    if rc < 0:
        try:
            return f" (killed by {signal.Signals(-rc).name})"
        except ValueError:
            return ""
    return ""


def supervise(roles: dict[str, RoleProcess], poll_s: float = 0.5, progress: RoleProgress | None = None) -> str | None:
    """Wait for the roles; None when all finished cleanly, else an error naming the role and its log.

    ``progress`` (if given) shows each role's steps on the console while it waits, and is closed on return."""
    try:
        return _wait_for_roles(roles, poll_s, progress)
    finally:
        if progress is not None:
            progress.close()


class BusyWatch:
    """When each role last computed (used at least :data:`BUSY_CORES` between two looks), so that the drain after
    the planner's end waits for a role that is still working and gives up on one that only waits."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, float]] = {}  # role -> (monotonic time, cpu seconds) of the last look
        self.busy_at: dict[str, float] = {}

    def look(self, p: RoleProcess, now: float) -> None:
        cpu = p.cpu_seconds()
        if cpu is None:
            return
        prev = self._last.get(p.name)
        self._last[p.name] = (now, cpu)
        if prev is not None and now > prev[0] and (cpu - prev[1]) / (now - prev[0]) >= BUSY_CORES:
            self.busy_at[p.name] = now


def _wait_for_roles(roles: dict[str, RoleProcess], poll_s: float, progress: RoleProgress | None) -> str | None:
    planner_done_at: float | None = None
    watch = BusyWatch()
    while True:
        if progress is not None:
            progress.poll()
        for name, p in roles.items():
            rc = p.poll()
            if rc is not None and rc != 0:
                others = [o for o in roles.values() if o is not p and o.poll() is None]
                for o in others:  # bounded: SIGTERM, then SIGKILL after the grace period
                    o.stop()
                return (f"role {name} exited with status {rc}{killed_hint(rc)}; see its log {p.log_path}:\n{p.tail()}"
                        + (f"\n(stopped {', '.join(o.name for o in others)})" if others else ""))
        if all(p.poll() == 0 for p in roles.values()):
            return None
        planner = roles.get("planner")
        if planner is not None and planner.poll() == 0:
            now = time.monotonic()
            planner_done_at = planner_done_at or now
            waiting = [n for n, p in roles.items() if p.poll() is None]
            for n in waiting:
                watch.look(roles[n], now)
            # each role idle since the planner's end or since it last computed, whichever is later
            idle = max((now - max(planner_done_at, watch.busy_at.get(n, planner_done_at)) for n in waiting),
                       default=0.0)
            if idle > DRAIN_TIMEOUT_S:
                return (f"the planner finished but role(s) {waiting} did not stop, idle (under {BUSY_CORES:g} of a "
                        f"core) for {DRAIN_TIMEOUT_S:.0f}s; see {', '.join(str(roles[n].log_path) for n in waiting)}")
        time.sleep(poll_s)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness train", description=__doc__.split("\n\n")[0])
    ap.add_argument("--trainer", choices=sorted(TRAINERS), default=None, help="which trainer (baselines.TRAINERS)")
    ap.add_argument("--config", default=None, help="run config YAML, e.g. baselines/configs/tiny/mgrpo.yaml")
    ap.add_argument("--seed", type=int, default=None, help="run seed (overrides the config)")
    ap.add_argument("--max-steps", type=int, default=None, help="planner optimizer steps (overrides the config)")
    ap.add_argument("--run-dir", default=None, help="run directory (default: <runs_dir>/<run_id>)")
    ap.add_argument("--resume", default=None, metavar="RUN_DIR", help="resume this run from its last checkpoints")
    ap.add_argument("overrides", nargs="*", help="key.path=value config overrides")
    args = ap.parse_args(argv)
    if not args.resume and not args.trainer:
        ap.error("--trainer is required (or --resume RUN_DIR)")
    try:
        cfg, run_dir = build_config(args)
        check_models(cfg, run_dir, resume=bool(args.resume))  # before the run directory exists
        tasks = prepare_tasks(cfg, run_dir, resume=bool(args.resume))  # so is a task selection left empty
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return launch(cfg, run_dir, resume=bool(args.resume), tasks=tasks)


if __name__ == "__main__":
    sys.exit(main())
