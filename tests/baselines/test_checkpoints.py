"""The warm-start checkpoints committed under ``baselines/checkpoints/`` (docs/training.md, "The shipped
checkpoint"): each loads, matches the SHA-256 its provenance records, stays within the 16 MB the repository
allows for them, and reproduces its recorded greedy held-out check from the committed files alone.

Tolerance: the rerun must solve the same number of the check's tasks as recorded, give or take
``SOLVED_TOLERANCE`` tasks, and keep the share of valid turns within ``VALID_TOLERANCE``. Greedy decoding on
the same files is deterministic on one machine (the recheck of build b8 reproduced every figure exactly);
the slack is for another CPU's float reductions flipping a near-tie token."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINTS = ROOT / "baselines" / "checkpoints"
#: The checkpoints the tiny-generalise and tiny-spans (make demo) presets start from; they must be committed.
EXPECTED = ("tiny-generalise", "tiny-spans")
MAX_BYTES = 16 * 1024 * 1024
SOLVED_TOLERANCE = 2
VALID_TOLERANCE = 0.05


def shipped() -> list[Path]:
    return sorted(p.parent for p in CHECKPOINTS.glob("*/provenance.json"))


def test_the_expected_checkpoints_are_committed():
    names = [p.name for p in shipped()]
    for name in EXPECTED:
        assert name in names, f"baselines/checkpoints/{name}/provenance.json is missing (shipped: {names})"


@pytest.mark.parametrize("ckpt", shipped(), ids=lambda p: p.name)
def test_a_committed_checkpoint_matches_its_hashes_and_loads(ckpt: Path):
    from harness.checkpoint_files import verify_checkpoint
    from harness.models import load_model, warm_start_model_dir

    prov = verify_checkpoint(ckpt)
    size = sum(p.stat().st_size for p in ckpt.rglob("*") if p.is_file())
    assert size <= MAX_BYTES, f"{ckpt}: {size / 1e6:.1f} MB, over the 16 MB allowed for shipped checkpoints"
    assert prov["command"].startswith("python -m harness warmstart") and prov["git"]["commit"]
    assert prov["check"]["greedy"]["n_tasks"] > 0 and prov["wall_s"] > 0
    for agent in ("planner", "sub_agent"):
        model, tok = load_model(str(warm_start_model_dir(ckpt, agent)))
        assert model.config.vocab_size >= len(tok)


@pytest.mark.slow
@pytest.mark.parametrize("ckpt", shipped(), ids=lambda p: p.name)
def test_a_committed_checkpoint_reproduces_its_recorded_greedy_check(ckpt: Path):
    from harness.warmstart import recheck

    result = recheck(ckpt)
    rec, rerun = result["recorded"], result["rerun"]
    assert rerun["n_tasks"] == rec["n_tasks"]
    solved = {k: round(r["success"] * r["n_tasks"]) for k, r in result.items()}
    summary = json.dumps({k: {"solved": solved[k], "valid_turns": r["valid_turns"],
                              "per_benchmark": r["per_benchmark"]} for k, r in result.items()})
    assert abs(solved["rerun"] - solved["recorded"]) <= SOLVED_TOLERANCE, summary
    assert abs(rerun["valid_turns"] - rec["valid_turns"]) <= VALID_TOLERANCE, summary
