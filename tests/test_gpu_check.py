"""``scripts/gpu_check.sh`` (docs/training.md "The GPU check") in its CPU mode: the same stages as on the GPU
machine except the install, the model export and the vLLM servers (tiny preset, in-process generation), so the
script's plumbing (deadlines, the profile runs, the JSON it writes) is checked here; the vLLM path runs only where
a GPU is lent."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_check_cpu_mode_writes_its_summary(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "XDIST_"))}
    env.update(OUT=str(tmp_path / "check"), GPU_CHECK_CPU="1", BUDGET_S="500")
    proc = subprocess.run(["bash", "scripts/gpu_check.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((tmp_path / "check" / "gpu_check.json").read_text())
    assert doc["ok"] is True and doc["backend"] == "hf (CPU)" and 0 < doc["wall_s"] <= 500
    roles = {(r["trainer"], r["role"]): r for r in doc["roles"]}
    assert set(roles) == {("single_agent", "planner"), ("frozen_sub", "planner"), ("frozen_sub", "sub"),
                          ("mgrpo", "planner"), ("mgrpo", "sub")}
    for trainer in ("single_agent", "frozen_sub", "mgrpo"):
        r = roles[(trainer, "planner")]
        assert r["steps"] == 2 and r["rollout_s"] > 0 and r["train_s"] > 0 and r["rollout_tokens_per_s"] > 0
        assert r["peak_rss_mib"] > 0
    assert "done:" in proc.stdout and "single_agent planner  steps 2" in proc.stdout


def test_gpu_check_fails_clearly_past_its_budget(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "XDIST_"))}
    env.update(OUT=str(tmp_path / "check"), GPU_CHECK_CPU="1", BUDGET_S="1")
    proc = subprocess.run(["bash", "scripts/gpu_check.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1 and "FAILED: profile" in proc.stdout
    assert json.loads((tmp_path / "check" / "gpu_check.json").read_text())["ok"] is False
