"""``python -m harness experiment`` (what ``make demo`` runs): argument errors and the committed report.

The quick smoke run end to end (warm start, every arm, the report) is ``make demo QUICK=1`` in
``tests/test_readme.py``, which follows the README in a fresh clone."""

from __future__ import annotations

import re
from pathlib import Path

from harness.experiment import main

REPO = Path(__file__).resolve().parents[2]


def test_unknown_preset_is_a_clear_error(capsys):
    assert main(["--preset", "nope"]) == 2
    err = capsys.readouterr().err
    assert "no preset 'nope'" in err and "tiny" in err


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
