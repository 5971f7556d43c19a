"""One performance figure per benchmark, in a form ``make bench`` can tabulate (docs/performance.md).

A perf test calls :func:`figure` with the value it measured and the issue's target; the figure lands
in the benchmark's ``extra_info["figures"]``, which pytest-benchmark writes to its JSON file, and
``python -m harness.report.perf`` turns that file into ``reports/perf/``. Under xdist (``make test``)
pytest-benchmark is disabled and no JSON is written; the call is then harmless.
"""

from __future__ import annotations

from typing import Any


def figure(benchmark: Any, name: str, value: float, *, unit: str, target: float | None = None,
           better: str = "higher") -> None:
    """Record ``value`` (in ``unit``) as the figure ``name``; ``target`` is met when ``value`` is at least
    (``better="higher"``) or at most (``better="lower"``) it; ``None``: reported without a target."""
    if better not in ("higher", "lower"):
        raise ValueError(f"better={better!r}: choose 'higher' or 'lower'")
    benchmark.extra_info.setdefault("figures", []).append(
        {"name": name, "value": float(value), "unit": unit, "target": target, "better": better})
