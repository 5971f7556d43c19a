"""``python -m harness.role --role planner|sub ...``: one role of a decoupled run (docs/paper.md, docs/training.md).

Reads, in this order and nothing twice: the run config (``--config``, ``key=value`` overrides), the prepared
task set (``--tasks``, default ``<run-dir>/tasks``; :mod:`harness.role.tasks`), then hands over to
:func:`harness.role.planner.run_planner` or :func:`harness.role.sub.run_sub` (models -> tools -> trainer).
A bad config or task set is a one-line error with exit status 2. A store that fails past its retry budget
(``store.retry_s``; Redis down, SQLite locked) stops the role with exit status 3 and one line naming the
store URL, the step in progress and how to continue (:func:`store_failure`): every store write is one
atomic transaction or script, so nothing is half-applied, and ``--resume`` continues without losing or
repeating a group (docs/training.md, "Checkpoints and resume"). A server the role needs that does not answer
at start (the world server for a role with tools, within ``store.retry_s``; the sub-agent service for the
planner, within ``service.startup_timeout_s``) stops it with exit status 4 and one line naming the address
(:func:`harness.role.common.wait_reachable`).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

from baselines import get_trainer
from harness.config import ConfigError
from harness.role.common import PEER_UNREACHABLE, PeerUnreachable, load_role_config, store_url
from harness.role.planner import run_planner
from harness.records import RunPaths, read_steps
from harness.role.tasks import read_run_tasks
from mgrpo.store import StoreError, open_store, redact_url

#: Exit status of a role stopped by its store (2 is a bad config or task set).
STORE_FAILED = 3


def store_failure(role: str, run_dir: Path, url: str, exc: Exception) -> str:
    """The one-line message of a role stopped by a store error: the store, the step in progress, what next."""
    try:
        done = [r.step for r in read_steps(RunPaths(run_dir).metrics(role), tolerate_truncated_tail=True).records]
    except (OSError, ValueError):
        done = []
    where = f"in step {max(done) + 1} (steps up to {max(done)} recorded)" if done else "before its first step"
    return (f"error: the {role} role stopped {where} on store {redact_url(url)}: {exc}. Every store write is "
            "all or nothing, so no group is half-applied; once the store is back, continue with "
            f"python -m harness train --resume {run_dir}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.role", description="One role of a decoupled M-GRPO run.")
    ap.add_argument("--role", required=True, choices=("planner", "sub"))
    ap.add_argument("--config", required=True, help="resolved run config (YAML; <run>/config.yaml)")
    ap.add_argument("--run-dir", required=True, help="the run directory (records, checkpoints)")
    ap.add_argument("--world-url", required=True, help="base URL of the world server")
    ap.add_argument("--tasks", default=None, metavar="DIR",
                    help="the prepared task set (default: <run-dir>/tasks; python -m harness.role.tasks writes one)")
    ap.add_argument("--store", default=None, help="store URL (default: store.url of the config, else sqlite in run dir)")
    ap.add_argument("--sub-url", default=None, help="planner: the sub-agent service URL (default: from the store)")
    ap.add_argument("--resume", action="store_true", help="continue from the role's last checkpoint")
    ap.add_argument("overrides", nargs="*", help="key.path=value config overrides")
    args = ap.parse_args(argv)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

    run_dir = Path(args.run_dir)
    try:
        cfg = load_role_config(args.config, args.overrides)
        needs_tasks = args.role == "planner" or get_trainer(str(cfg.trainer)).sub_trains
        tasks = read_run_tasks(Path(args.tasks) if args.tasks else run_dir / "tasks", cfg) if needs_tasks else None
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(cfg.threads)

    url = args.store or store_url(cfg, run_dir)
    store = None
    try:
        store = open_store(url, run_id=run_dir.name, connect_timeout_s=cfg.store.retry_s, retry_s=cfg.store.retry_s)
        if args.role == "planner":
            rc = run_planner(cfg, tasks, run_dir, store, args.world_url, args.sub_url, args.resume)
        else:
            from harness.role.sub import run_sub  # lazy: torch/TRL; after the role's config and tasks

            rc = run_sub(cfg, tasks, run_dir, store, args.world_url, args.resume)
        leave_process_group(torch)
        return rc
    except StoreError as exc:
        print(store_failure(args.role, run_dir, url, exc), file=sys.stderr, flush=True)
        return STORE_FAILED
    except ConfigError as exc:  # found at start, before a model loads (e.g. a sharded launch without vLLM)
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    except PeerUnreachable as exc:
        print(f"error: the {args.role} role {exc}", file=sys.stderr, flush=True)
        return PEER_UNREACHABLE
    finally:
        if store is not None:
            store.close()


def leave_process_group(torch: Any) -> None:
    """With several processes (torchrun): wait for every rank to finish, then close the process group. A rank that
    exited while another still held the group's connections aborted at interpreter exit ("terminate called
    without an active exception", SIGABRT) after a run that had finished."""
    global _LEFT_GROUP
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
        _LEFT_GROUP = True


#: Set once this process has left a torchrun process group (see :func:`exit_now`).
_LEFT_GROUP = False


def exit_now(rc: int) -> None:
    """Exit with ``rc``. A rank that was part of a process group skips the interpreter's teardown (``os._exit``
    after flushing): even after a barrier and ``destroy_process_group``, the C++ destructors that run at
    interpreter exit still aborted a rank now and then (SIGABRT after "finished after 2 steps" in a CI run of
    tests/harness/test_multiprocess.py, 2026-12-07), which torchrun reports as a failed role. Everything the role
    writes (records, checkpoints, the store) is closed before this point."""
    if not _LEFT_GROUP:
        sys.exit(rc)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(rc)


if __name__ == "__main__":
    exit_now(main())
