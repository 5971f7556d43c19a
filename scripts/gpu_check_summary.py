"""Summarise the runs of scripts/gpu_check.sh into one JSON document (docs/training.md "The GPU check").

``python scripts/gpu_check_summary.py RUNS_DIR`` reads every ``<run>/<role>/metrics.jsonl`` under ``RUNS_DIR``
(the runs ``python -m harness profile`` made, each with its provenance.json) and prints, per trainer and role: the steps recorded, the mean
step time split (rollout / wait / train, steps after the first when there are several), the rollout tokens per
second (generated tokens / generation seconds over those steps) and the peak memory (host RSS and GPU). A role
with no step record is listed with ``"steps": 0``. Exit status 1 when no run was found.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.records import read_steps


def summarise(runs_dir: Path) -> dict:
    out: dict = {"runs_dir": str(runs_dir), "roles": []}
    for prov in sorted(runs_dir.glob("**/provenance.json")):
        run = prov.parent
        for role in ("planner", "sub"):
            if (run / role).is_dir():
                out["roles"].append(_role(run, role))
    return out


def _role(run: Path, role: str) -> dict:
    """One role's figures (``steps: 0`` and nulls when it recorded no step, e.g. a sub role that never trained)."""
    metrics = run / role / "metrics.jsonl"
    recs = read_steps(metrics, tolerate_truncated_tail=True).records if metrics.is_file() else []
    trainer = recs[0].trainer if recs else json.loads((run / "provenance.json").read_text()).get("trainer")
    steady = recs[1:] or recs  # step 1 includes warm-up (compilation, caches)

    def mean(field: str) -> float | None:
        vals = [getattr(r, field) for r in steady if getattr(r, field, None) is not None]
        return round(sum(vals) / len(vals), 4) if vals else None

    tokens = sum(float(r.extra.get("generated_tokens") or 0) for r in steady)
    gen_s = sum(float(r.extra.get("generate_s") or 0.0) for r in steady)
    return {
        "run": run.name, "trainer": trainer, "role": role, "steps": len(recs), "steps_averaged": len(steady),
        "rollout_s": mean("rollout_s"), "wait_s": mean("wait_s"), "train_s": mean("train_s"),
        "rollout_tokens_per_s": round(tokens / gen_s, 1) if gen_s > 0 else None,
        "peak_rss_mib": max((r.peak_rss_mib for r in recs if r.peak_rss_mib is not None), default=None),
        "peak_gpu_mib": max((r.peak_gpu_mib for r in recs if r.peak_gpu_mib is not None), default=None),
    }


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/gpu_check_summary.py RUNS_DIR", file=sys.stderr)
        return 2
    doc = summarise(Path(argv[0]))
    print(json.dumps(doc, indent=2))
    return 0 if doc["roles"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
