"""Checkpoints and resume of a role (docs/training.md; docs/training.md "Checkpoints and resume").

Each role's TRL trainer writes ``<run>/<role>/checkpoints/checkpoint-<step>/``. A role resumes from its last
*complete* checkpoint (:func:`last_checkpoint`): TRL's ``trainer_state.json`` (written last) parses and names
the directory's step, and every file the role writes after TRL's (``required``: the sub role's
:data:`STORE_POSITION_FILE`) parses too. On resume from step ``c`` (0 without a checkpoint) the role deletes
the checkpoints a kill left half-written (:func:`drop_incomplete_checkpoints`) and its step records after ``c``
(:func:`truncate_metrics`), since those steps are redone.

Deliberate deviation from TRL: not ``transformers.trainer_utils.get_last_checkpoint``, which returns the
highest-numbered directory, also a half-written one from which ``resume_from_checkpoint`` cannot restore.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

from harness.records import RunPaths

STORE_POSITION_FILE = "mgrpo_store.json"
"""Written into each sub checkpoint: the largest store position (consumer log) the checkpoint covers."""

_CHECKPOINT_DIR = re.compile(r"checkpoint-(\d+)")


def checkpoint_step(path: str | Path) -> int:
    """The optimizer step of a ``checkpoint-<step>`` directory."""
    return int(Path(path).name.split("-")[-1])


def checkpoint_complete(path: Path, required: Sequence[str] = ()) -> bool:
    """Whether a checkpoint was written to the end: TRL's ``_save_checkpoint`` writes ``trainer_state.json``
    last (after the model, optimizer, scheduler and RNG), so it must parse and name the directory's step;
    ``required`` are files the role writes after TRL's (the sub role's store position)."""
    try:
        state = json.loads((path / "trainer_state.json").read_text())
        complete = int(state["global_step"]) == checkpoint_step(path)
        for name in required:
            json.loads((path / name).read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return complete


def last_checkpoint(out_dir: Path, required: Sequence[str] = ()) -> str | None:
    """The newest *complete* ``checkpoint-<step>`` under ``out_dir`` (:func:`checkpoint_complete`), else None.

    Not TRL's ``get_last_checkpoint``: that returns the highest-numbered directory, also one a kill left
    half-written (no ``trainer_state.json``), from which ``resume_from_checkpoint`` cannot restore."""
    if not out_dir.is_dir():
        return None
    found = [(int(m.group(1)), d) for d in out_dir.iterdir()
             if (m := _CHECKPOINT_DIR.fullmatch(d.name)) and d.is_dir() and checkpoint_complete(d, required)]
    return str(max(found)[1]) if found else None


def drop_incomplete_checkpoints(out_dir: Path, required: Sequence[str] = ()) -> list[str]:
    """On resume: delete the checkpoint directories a kill left half-written (the step is redone and saved
    again), so nothing that lists checkpoints (evaluation, TRL's rotation) ever loads one."""
    gone = []
    if out_dir.is_dir():
        for d in sorted(out_dir.iterdir()):
            if _CHECKPOINT_DIR.fullmatch(d.name) and d.is_dir() and not checkpoint_complete(d, required):
                shutil.rmtree(d, ignore_errors=True)
                gone.append(d.name)
    return gone


def truncate_metrics(run_dir: Path, role: str, step: int) -> int:
    """On resume from checkpoint ``step`` (0 when there is none): drop the step records after it (those
    steps are redone) and any line a kill cut; returns how many lines were dropped."""
    path = RunPaths(run_dir).metrics(role)
    if not path.is_file():
        return 0
    lines = path.read_text().splitlines(keepends=True)
    keep = []
    for line in lines:
        try:
            rec_step = json.loads(line).get("step")
        except ValueError:
            continue  # a line cut by the kill
        if isinstance(rec_step, int) and rec_step <= step:
            keep.append(line if line.endswith("\n") else line + "\n")
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(keep))
    os.replace(tmp, path)
    return len(lines) - len(keep)


def resume_records(run_dir: Path, role: str, step: int, out_dir: Path, required: Sequence[str] = ()) -> None:
    """On resume from ``step`` (0: no checkpoint): drop the role's half-written checkpoints and its step
    records after ``step``, and say what was dropped."""
    gone = drop_incomplete_checkpoints(out_dir, required)
    n = truncate_metrics(run_dir, role, step)
    print(f"[{role}] resume from step {step}" + (f" ({n} later step records dropped)" if n else "")
          + (f"; removed half-written {', '.join(gone)}" if gone else ""), flush=True)
