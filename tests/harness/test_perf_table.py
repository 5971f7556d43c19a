"""``python -m harness.report.perf`` (docs/performance.md): pytest-benchmark's JSON -> ``reports/perf/``, every
figure against its target, with the machine's cores and load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.report import perf


def bench_doc() -> dict:
    return {
        "datetime": "2026-12-04T21:00:00",
        "machine_info": {"cores": 2, "loadavg_start": [0.5, 0.4, 0.3], "loadavg_end": [1.9, 1.0, 0.5],
                         "python_version": "3.11.7", "node": "secret-host"},
        "benchmarks": [
            {"name": "test_rate[redis-4-step]", "fullname": "tests/x.py::test_rate[redis-4-step]",
             "stats": {"median": 0.2},
             "extra_info": {"figures": [
                 {"name": "upserts, redis", "value": 21000.0, "unit": "upserts/s", "target": 20000, "better": "higher"},
                 {"name": "ratio", "value": 1.3, "unit": "x", "target": 1.15, "better": "lower"},
                 {"name": "info only", "value": 7.0, "unit": "s", "target": None, "better": "lower"}]}},
            {"name": "test_plain", "fullname": "tests/y.py::test_plain", "stats": {"median": 0.0123}, "extra_info": {}},
        ],
    }


def test_table_states_each_figure_against_its_target(tmp_path: Path, capsys):
    src = tmp_path / "bench.json"
    src.write_text(json.dumps(bench_doc()))
    assert perf.main([str(src), "--out", str(tmp_path / "out")]) == 0
    doc = json.loads((tmp_path / "out" / "perf.json").read_text())
    assert [(r["name"], r["met"]) for r in doc["figures"]] == [
        ("upserts, redis", True), ("ratio", False), ("info only", None), ("test_plain", None)]
    assert doc["figures"][3]["value"] == 0.0123 and doc["figures"][3]["unit"] == "s (median)"
    assert doc["machine"]["cores"] == 2 and doc["machine"]["loadavg_end"] == [1.9, 1.0, 0.5]
    md = (tmp_path / "out" / "README.md").read_text()
    assert "| upserts, redis | 21,000 | upserts/s | ≥ 20,000 | yes |" in md
    assert "| ratio | 1.30 | x | ≤ 1.15 | **no** |" in md
    assert "1 of 2 targets met; 2 figures have no target." in md
    assert "load average [0.5, 0.4, 0.3] before the suite and [1.9, 1.0, 0.5] after" in md
    assert "secret-host" not in md + json.dumps(doc)  # no machine names in committed files
    assert "targets missed: ratio" in capsys.readouterr().err


@pytest.mark.parametrize("content, message", [
    (None, "does not exist; run `make bench`"),
    ('{"benchmarks": [\n  oops', "line 2: not JSON"),
])
def test_missing_or_broken_input_names_the_file(tmp_path: Path, content, message):
    src = tmp_path / "bench.json"
    if content is not None:
        src.write_text(content)
    with pytest.raises(SystemExit) as exc:
        perf.main([str(src), "--out", str(tmp_path / "out")])
    assert str(src) in str(exc.value) and message in str(exc.value)
    assert not (tmp_path / "out").exists()


def test_figure_helper_refuses_an_unknown_direction():
    from tests.support.perf import figure

    class Bench:
        extra_info: dict = {}

    with pytest.raises(ValueError, match="choose 'higher' or 'lower'"):
        figure(Bench(), "x", 1.0, unit="s", better="faster")
