"""``python -m harness.role --role planner|sub ...``: one role of a decoupled run (docs/paper.md, docs/training.md).

Reads, in this order and nothing twice: the run config (``--config``, ``key=value`` overrides), the prepared
task set (``--tasks``, default ``<run-dir>/tasks``; :mod:`harness.role.tasks`), then hands over to
:func:`harness.role.planner.run_planner` or :func:`harness.role.sub.run_sub` (models -> tools -> trainer).
A bad config or task set is a one-line error with exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from baselines import get_trainer
from harness.config import ConfigError
from harness.role.common import load_role_config, store_url
from harness.role.planner import run_planner
from harness.role.tasks import read_run_tasks
from mgrpo.store import open_store


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

    store = open_store(args.store or store_url(cfg, run_dir), run_id=run_dir.name)
    try:
        if args.role == "planner":
            return run_planner(cfg, tasks, run_dir, store, args.world_url, args.sub_url, args.resume)
        from harness.role.sub import run_sub  # lazy: torch/TRL; after the role's config and tasks

        return run_sub(cfg, tasks, run_dir, store, args.world_url, args.resume)
    finally:
        store.close()


if __name__ == "__main__":
    sys.exit(main())
