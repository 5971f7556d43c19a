"""``python -m harness experiment`` (what ``make demo`` runs): argument errors, and the quick
smoke run end to end (warm start, a training run, the report) on the tiny preset."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.experiment import main

REPO = Path(__file__).resolve().parents[2]


def test_unknown_preset_is_a_clear_error(capsys):
    assert main(["--preset", "nope"]) == 2
    err = capsys.readouterr().err
    assert "no preset 'nope'" in err and "tiny" in err


@pytest.mark.slow
def test_quick_experiment_end_to_end(tmp_path):
    out, report = tmp_path / "exp", tmp_path / "report"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "XDIST_"))}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "experiment", "--preset", "tiny", "--seeds", "1", "--quick",
         "--arms", "mgrpo", "--out", str(out), "--report", str(report)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "warmstart" / "warmstart.json").read_text())
    assert set(summary["agents"]) == {"joint"}  # the tiny preset's warm start is one SFT for every agent
    for agent in ("planner", "sub_agent", "single_agent"):
        assert (out / "warmstart" / agent / "config.json").is_file()
    run = out / "runs" / "mgrpo-seed0"
    assert json.loads((run / "status.json").read_text())["state"] == "completed"
    steps = (run / "planner" / "metrics.jsonl").read_text().splitlines()
    assert len(steps) == 2
    assert list((run / "eval").iterdir())  # periodic evaluation wrote task records
    text = (report / "report.md").read_text()
    assert "## The paper's claims" in text and (report / "report.html").is_file()
    assert "tiny-scale CPU run" in text.splitlines()[0] and "claims no learning" in text.splitlines()[0]


def test_committed_reference_report_is_labelled_and_traceable():
    """``reports/tiny-cpu`` (issue 7): the report `make demo` wrote, labelled as a tiny CPU run, with its records' provenance."""
    from harness.experiment import ROOT

    report = ROOT / "reports" / "tiny-cpu"
    text = (report / "report.md").read_text()
    assert "tiny-scale CPU run" in text.splitlines()[0]
    assert (report / "report.html").stat().st_size > 10_000
    assert list((report / "figures").glob("*.png")), "the figures are committed next to report.md"
    for arm in ("single_agent", "frozen_sub", "mgrpo"):
        assert arm in text
    # No folder of the machine that wrote it (the runs were launched with repository-relative paths):
    # any absolute path left must be a system program named in a config (e.g. /usr/bin/chromium).
    absolute = re.compile(r"(?<![\w.:/])/(?:[\w.-]+/)+[\w.-]*")
    html = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", (report / "report.html").read_text())
    for name, body in (("report.md", text), ("report.json", (report / "report.json").read_text()), ("report.html", html)):
        found = {p for p in absolute.findall(body) if not p.startswith("/usr/") and p != "/eval/"}
        assert not found, f"{name} names absolute paths: {sorted(found)[:5]}"


def test_child_command_lines_name_repository_paths_relative_to_it(tmp_path):
    from harness.experiment import ROOT, _arg

    assert _arg(ROOT / "runs" / "experiment-tiny" / "warmstart") == "runs/experiment-tiny/warmstart"
    assert _arg(tmp_path / "exp") == str(tmp_path / "exp")  # outside the repository: as given
