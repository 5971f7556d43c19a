"""Files of a warm-start folder, without loading a model (no torch): which sub-folder holds each agent's
model, and the check of a shipped checkpoint against its provenance (docs/training.md, "The shipped
warm-start checkpoint").

A warm-start folder (``python -m harness warmstart --out DIR``) holds ``planner/``, ``sub_agent/`` and
``single_agent/``. A shipped checkpoint (``--ship DIR``, e.g. ``baselines/checkpoints/tiny``) also holds
``provenance.json``: the SHA-256 of every file and an ``agents`` table (a joint warm start is stored once,
as ``joint/``); it is verified on every load, so a changed or swapped file is refused by name.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from harness.config import ConfigError

#: The sub-folder of a warm-start directory (``python -m harness warmstart --out DIR``) that holds
#: each agent's model (the roles load ``DIR/<sub-folder>`` when it exists, else ``DIR`` itself).
WARM_START_DIRS = {"planner": "planner", "sub_agent": "sub_agent", "single_agent": "single_agent"}


#: A shipped warm start's record (``python -m harness warmstart --ship DIR``): the command, commit,
#: config, data seeds, wall time, held-out check and the SHA-256 of every file; ``agents`` maps each agent
#: to its sub-folder (one ``joint/`` folder for a joint warm start instead of three identical copies).
PROVENANCE_FILE = "provenance.json"


class CheckpointError(ConfigError):
    """A warm-start checkpoint that does not match its provenance (the message names the file)."""


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tokenizer_size(model_dir: Path) -> int:
    """Tokens in ``model_dir/tokenizer.json`` (base vocabulary plus added tokens), read as JSON."""
    data = json.loads((model_dir / "tokenizer.json").read_text())
    ids = set(data.get("model", {}).get("vocab", {}).values()) | {t["id"] for t in data.get("added_tokens", [])}
    return len(ids)


def verify_checkpoint(root: Path) -> dict[str, Any]:
    """Check a warm-start folder against its :data:`PROVENANCE_FILE`: every recorded file exists with its
    recorded SHA-256, no model file is unrecorded, and each model's tokenizer fits its embedding
    (``tokenizer.json`` size <= ``config.json`` ``vocab_size``). Returns the provenance; raises
    :class:`CheckpointError` naming the first file that does not match."""
    root = Path(root)
    prov_path = root / PROVENANCE_FILE
    try:
        prov = json.loads(prov_path.read_text())
        recorded: dict[str, str] = prov["sha256"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{prov_path}: not a readable provenance file with a 'sha256' table ({exc})") from None
    for rel, digest in sorted(recorded.items()):
        path = root / rel
        if not path.is_file():
            raise CheckpointError(f"{path}: recorded in {PROVENANCE_FILE} but missing")
        if sha256_file(path) != digest:
            raise CheckpointError(f"{path}: SHA-256 does not match {PROVENANCE_FILE} (the file was changed or "
                                  "replaced; rebuild the checkpoint or restore the file)")
    for sub in sorted(set(prov.get("agents", {}).values())):
        model_dir = root / sub
        for path in sorted(model_dir.glob("*")):
            if path.is_file() and path.relative_to(root).as_posix() not in recorded:
                raise CheckpointError(f"{path}: not recorded in {PROVENANCE_FILE}")
        cfg = json.loads((model_dir / "config.json").read_text())
        n_tok = tokenizer_size(model_dir)
        if n_tok > int(cfg.get("vocab_size", 0)):
            raise CheckpointError(f"{model_dir / 'tokenizer.json'}: {n_tok} tokens but the model in "
                                  f"{model_dir / 'config.json'} has vocab_size {cfg.get('vocab_size')}: the "
                                  "tokenizer does not belong to this model")
    return prov


def warm_start_model_dir(root: Path, agent: str) -> Path:
    """The folder holding ``agent``'s model in a warm-start folder ``root``: the provenance's ``agents``
    entry (checked by :func:`verify_checkpoint` first), else ``WARM_START_DIRS[agent]`` when it exists,
    else ``root`` itself (a plain model folder)."""
    root = Path(root)
    if (root / PROVENANCE_FILE).is_file():
        prov = verify_checkpoint(root)
        sub = prov.get("agents", {}).get(agent)
        if sub is None:
            raise CheckpointError(f"{root / PROVENANCE_FILE}: no model for agent {agent!r} "
                                  f"(has {sorted(prov.get('agents', {}))})")
        return root / sub
    sub_dir = root / WARM_START_DIRS[agent]
    return sub_dir if sub_dir.is_dir() else root


#: The tool settings of a warm-start build (the ``tools`` fields of the same name): its agents' observations.
BUILD_TOOL_KEYS = ("search_top_k", "search_snippets", "max_chars", "visit_focus", "visit_links")
#: The settings of a warm-start build that its agents' observations depend on (``build_settings``).
BUILD_KEYS = ("world_seed", "world_size", *BUILD_TOOL_KEYS, "eval_max_new_tokens")


def record_settings(record: Any) -> dict[str, Any]:
    """The :data:`BUILD_KEYS` present in a build record's ``config`` (``provenance.json`` or ``warmstart.json``,
    already read); ``{}`` when it has none."""
    config = record.get("config") if isinstance(record, dict) else None
    return {k: config[k] for k in BUILD_KEYS if isinstance(config, dict) and config.get(k) is not None}


def build_settings(root: Path) -> dict[str, Any]:
    """What a warm-start folder was built and checked with, from its ``provenance.json`` (a shipped checkpoint)
    or ``warmstart.json`` (a build folder): :func:`record_settings` (``{}`` for a plain model folder). Evaluating
    or watching the folder's agents with other tool settings shows them observations they never saw (e.g. search
    snippets to a model trained on title lines). A file that is not JSON is a :class:`CheckpointError` naming it."""
    root = Path(root)
    for name in (PROVENANCE_FILE, "warmstart.json"):
        path = root / name
        if path.is_file():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise CheckpointError(f"{path}: not a readable JSON file ({exc})") from None
            return record_settings(data)
    return {}
