"""``python -m harness.report.perf``: the performance suite's figures against their targets (docs/performance.md).

``make bench`` runs the perf tests alone (marker ``perf``, pytest-benchmark enabled, no xdist) with
``--benchmark-json``; this module reads that file and writes ``reports/perf/perf.json`` (every figure,
its target and whether it is met, the machine's core count and load average before and after, the commit)
and ``reports/perf/README.md`` (the same as a Markdown table). A figure is what a test passed to
``tests/support/perf.py:figure``; a benchmark without one is listed with its median time only.

The load average is part of the table on purpose: these figures are wall-clock measurements, and on a
shared 2-core machine a load above the core count slows every one of them (docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from harness.records import git_state


def met(fig: dict[str, Any]) -> bool | None:
    """Whether ``fig`` meets its target (``None`` when it has none)."""
    target = fig.get("target")
    if target is None:
        return None
    return fig["value"] >= target if fig.get("better", "higher") == "higher" else fig["value"] <= target


def collect(bench: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per figure of every benchmark in a pytest-benchmark JSON document (``benchmarks`` list)."""
    rows: list[dict[str, Any]] = []
    for b in bench.get("benchmarks", []):
        test = b.get("fullname") or b.get("name", "?")
        figures = (b.get("extra_info") or {}).get("figures") or []
        if not figures:  # a timing without a stated figure: its median, for the record
            median = (b.get("stats") or {}).get("median")
            figures = [{"name": b.get("name", test), "value": median, "unit": "s (median)", "target": None,
                        "better": "lower"}] if median is not None else []
        for fig in figures:
            rows.append({**fig, "test": test, "met": met(fig)})
    return rows


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}" if abs(value) >= 0.1 else f"{value:.3g}"


def markdown(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    lines = [
        "# Performance suite",
        "",
        f"Written by `make bench` (docs/performance.md) on {doc['datetime']} at commit "
        f"`{(doc['commit'] or 'unknown')[:12]}`{' (dirty)' if doc.get('dirty') else ''}: {m['cores']} cores, "
        f"load average {m['loadavg_start']} before the suite and {m['loadavg_end']} after "
        "(1, 5, 15 min). Wall-clock figures measure the machine too: a load above the core count slows "
        "every one of them.",
        "",
        "| figure | value | unit | target | met | test |",
        "|---|---:|---|---:|---|---|",
    ]
    for r in doc["figures"]:
        target = "-" if r["target"] is None else ("≥ " if r["better"] == "higher" else "≤ ") + _fmt(r["target"])
        ok = {True: "yes", False: "**no**", None: "-"}[r["met"]]
        lines.append(f"| {r['name']} | {_fmt(r['value'])} | {r['unit']} | {target} | {ok} | `{r['test']}` |")
    n_t = sum(r["met"] is not None for r in doc["figures"])
    n_ok = sum(r["met"] is True for r in doc["figures"])
    lines += ["", f"{n_ok} of {n_t} targets met; {len(doc['figures']) - n_t} figures have no target.", ""]
    return "\n".join(lines)


def write(bench_json: Path, out: Path) -> dict[str, Any]:
    """Read ``bench_json`` (pytest-benchmark's file) and write ``out/perf.json`` and ``out/README.md``."""
    try:
        bench = json.loads(bench_json.read_text())
    except FileNotFoundError:
        raise SystemExit(f"error: {bench_json} does not exist; run `make bench` (or pytest -m perf "
                         f"--benchmark-json={bench_json}) first") from None
    except json.JSONDecodeError as exc:
        raise SystemExit(f"error: {bench_json} line {exc.lineno}: not JSON ({exc.msg})") from None
    info = bench.get("machine_info") or {}
    git = git_state()
    doc = {
        "datetime": bench.get("datetime"),
        "commit": git["commit"],
        "dirty": git["dirty"],
        "machine": {"cores": info.get("cores", os.cpu_count()), "loadavg_start": info.get("loadavg_start"),
                    "loadavg_end": info.get("loadavg_end"), "python": info.get("python_version")},
        "figures": collect(bench),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "perf.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / "README.md").write_text(markdown(doc))
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.report.perf", description=__doc__.split("\n\n")[0])
    ap.add_argument("bench_json", type=Path, help="pytest-benchmark JSON (make bench writes "
                    "reports/perf/benchmarks.json)")
    ap.add_argument("--out", type=Path, default=Path("reports/perf"), help="folder for perf.json and README.md")
    args = ap.parse_args(argv)
    doc = write(args.bench_json, args.out)
    print(markdown(doc))
    missed = [r["name"] for r in doc["figures"] if r["met"] is False]
    if missed:
        print(f"targets missed: {'; '.join(missed)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
