"""``make test`` runs ``pytest -n 2 --dist loadgroup`` and relies on ``xdist_group`` keeping a group on one
worker (the RL-works runs share their warm starts that way, the browser tests one Chromium; docs/performance.md).
pytest 9.2 silently broke that with pytest-xdist 3.8 (pytest-xdist#1386: the tests were spread as if unmarked),
so this checks it on the installed versions."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BODY = '''
import os
import time
from pathlib import Path

import pytest


def _record(name):
    time.sleep(0.3)  # long enough that both workers are up and asking for work
    (Path(os.environ["GROUP_OUT"]) / name).write_text(os.environ["PYTEST_XDIST_WORKER"])


@pytest.mark.xdist_group("shared")
@pytest.mark.parametrize("i", range(3))
def test_grouped(i):
    _record(f"grouped{i}")


@pytest.mark.parametrize("i", range(4))
def test_free(i):
    _record(f"free{i}")
'''


def test_an_xdist_group_runs_on_one_worker(tmp_path: Path):
    (tmp_path / "test_groups.py").write_text(BODY)
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider",
                           "test_groups.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "GROUP_OUT": str(out)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    workers = {p.name: p.read_text() for p in out.iterdir()}
    assert len(workers) == 7
    assert len({workers[f"grouped{i}"] for i in range(3)}) == 1, workers  # the group stayed together
    assert len(set(workers.values())) == 2, workers  # and both workers did work
