"""Command line: ``python -m harness <command> ...`` (docs/architecture.md §Layout, README.md).

Each command lives in its own module and exposes ``main(argv) -> int``; this file only
dispatches, importing a command's module when it is used (so ``world serve`` never imports
torch).
"""

from __future__ import annotations

import importlib
import os
import sys

# The embedded default runs offline (docs/models.md): set before any Hugging Face library is imported, so a
# command copied into a fresh shell never waits on the Hub; an explicit setting in the environment wins.
for _var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# command: (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "world": ("harness.world.cli", "generate, serve and export the offline web world and its tasks"),
    "run": ("harness.cli_run", "run one episode and print it turn by turn"),
    "warmstart": ("harness.warmstart", "SFT warm start of the agents on scripted-expert transcripts"),
    "train": ("harness.train", "train one trainer (starts the roles it needs on this machine)"),
    "filter": ("harness.filter", "stage-2 hard filter: the starting system's success rate on each candidate task"),
    "eval-unseen": ("harness.eval_unseen", "a run's held-out accuracy on worlds it never trained on, before and "
                    "after RL"),
    "experiment": ("harness.experiment", "world, warm start, all trainers x seeds, evaluation, report"),
    "profile": ("harness.profile", "where a training step's time goes, per trainer and role (short runs)"),
    "report": ("harness.report", "comparison report from run records (same as python -m harness.report)"),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    rows = "\n".join(f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items())
    return f"usage: python -m harness <command> [options]\n\ncommands:\n{rows}\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(_usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        sys.stderr.write(f"unknown command {name!r}\n\n{_usage()}")
        return 2
    module_name = COMMANDS[name][0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            sys.stderr.write(f"command {name!r} is not available yet in this version ({module_name} missing)\n")
            return 2
        raise
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
