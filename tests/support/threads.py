"""Torch threads for a test that computes in its own process (docs/performance.md, "The test suite")."""

from __future__ import annotations

import os


def worker_threads() -> int:
    """This machine's cores divided among pytest-xdist's workers (at least 1): two workers that each ran two
    threads on two cores would thrash (measured: two SFTs of two threads each, side by side, each ran 2.5 times
    slower than one alone)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    return max(1, (os.cpu_count() or 1) // max(1, workers))
