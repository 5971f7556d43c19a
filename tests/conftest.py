"""Suite-wide hooks: the machine's core count and load average in pytest-benchmark's JSON, so that
``make bench`` (docs/performance.md) states what else the machine was doing while it measured; the
``--faults-n`` option of the fault suite (tests/faults, docs/reliability.md); slow tests first."""

from __future__ import annotations

import os

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--faults-n", type=int, default=None, metavar="N",
                     help="tests/faults: inject N faults in all (default: the CI number; docs/reliability.md)")


def _loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    machine_info["cores"] = os.cpu_count()
    machine_info["loadavg_start"] = getattr(config, "_perf_loadavg_start", None)
    machine_info["loadavg_end"] = _loadavg()


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config._perf_loadavg_start = _loadavg()  # type: ignore[attr-defined]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slow tests first, the order otherwise unchanged: pytest-xdist hands out work in collection order, so a
    long test collected near the end keeps one worker busy long after the other has run out of work
    (docs/performance.md, "The test suite")."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
