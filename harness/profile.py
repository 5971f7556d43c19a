"""``python -m harness profile``: where a training step's time goes, per trainer and role (docs/performance.md).

One short run per trainer (``python -m harness train`` on the preset, ``--steps`` planner steps, no
evaluation and no checkpoints, so that the steps are only steps), then a table per role from its step
records' ``time_split`` (docs/report.md): seconds per step in each phase, its share of the step's wall
time, and the share spent in the role's own model compute (``model_share``). Step 1 is left out of the
means when there are more (it pays for lazy initialisation). Written to ``<out>/profile.md`` and
``<out>/profile.json`` and printed.

Phases (``harness.role.common.time_split``, ``mgrpo.trainer.PHASES``):

- planner: ``sub_lag_wait_s`` (with ``sub.max_lag``: waiting for the sub role to catch up before the rollouts),
  ``generate_s`` (its own generation), ``delegate_s`` (waiting on the sub-agent service over HTTP,
  the sub-agent's generation included), ``tool_s``, ``store_s``, the rest of the rollout (parsing,
  tokenising, rewards), then TRL's ``score_s``, ``forward_backward_s`` and ``optimizer_s``;
- sub role: ``wait_s`` (waiting for complete groups in the store and for the service's lock), the rest of its rollout
  (alignment, the judge, loading trajectories), the same three trainer phases; and, served to the planner
  in its own process since its previous step, ``service_generate_s`` and ``service_tool_s`` (not part of
  its step: they run in the service's threads);
- ``other``: the step's wall time minus all of the above (TRL's logging, callbacks, the scheduler).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from baselines import CONFIGS_DIR, DEFAULT_PRESET, TRAINERS
from harness.records import read_steps

ROOT = Path(__file__).resolve().parents[1]
TRAINER_PHASES = ("score_s", "forward_backward_s", "optimizer_s")
#: The rollout's parts each role measures (harness/role/planner.py, harness/role/sub.py).
ROLLOUT_PARTS = {"planner": ("sub_lag_wait_s", "generate_s", "delegate_s", "tool_s", "store_s"), "sub": ("wait_s",)}
SERVICE = ("service_generate_s", "service_tool_s")
#: Overrides of every profiling run: steps only (evaluation and checkpoints would land in ``other``).
RUN_OVERRIDES = ("eval.every=0", "planner.save_steps=0", "sub.save_steps=0")


def role_profile(splits: list[dict[str, float]], shares: list[float | None]) -> dict[str, Any]:
    """Mean seconds per step of each phase over ``splits`` (one ``time_split`` per step), with
    ``rollout_other_s`` and ``other_s`` derived, and the mean model-compute share."""
    def mean(key: str) -> float:
        return statistics.fmean(s.get(key, 0.0) for s in splits)

    keys = sorted({k for s in splits for k in s})
    out: dict[str, Any] = {k: mean(k) for k in keys}
    role_parts = [k for k in ("sub_lag_wait_s", "generate_s", "delegate_s", "tool_s", "store_s", "wait_s") if k in out]
    out["rollout_other_s"] = max(0.0, out.get("rollout_s", 0.0) - sum(out[k] for k in role_parts))
    out["other_s"] = max(0.0, out["wall_s"] - out.get("rollout_s", 0.0) - sum(out.get(k, 0.0) for k in TRAINER_PHASES))
    known = [x for x in shares if x is not None]
    out["model_share"] = statistics.fmean(known) if known else None
    out["steps"] = len(splits)
    return out


def profile_run(run: Path) -> dict[str, dict[str, Any]]:
    """``{role: role_profile}`` of a finished run's step records (step 1 left out when there are more)."""
    out: dict[str, dict[str, Any]] = {}
    for metrics in sorted(run.glob("*/metrics.jsonl")):
        steps = sorted(read_steps(metrics).records, key=lambda s: s.step)
        steps = [s for s in steps if s.time_split]
        if len(steps) > 1:
            steps = steps[1:]
        if steps:
            out[metrics.parent.name] = role_profile([s.time_split for s in steps], [s.model_share for s in steps])
    return out


def _row(role: str, p: dict[str, Any]) -> list[tuple[str, float]]:
    order = [*ROLLOUT_PARTS.get(role, ()), "rollout_other_s", *TRAINER_PHASES, "other_s"]
    return [(k, p[k]) for k in order if k in p]


def markdown(results: dict[str, dict[str, dict[str, Any]]], meta: dict[str, Any]) -> str:
    lines = [f"# Step time profile: preset {meta['preset']}, {meta['steps']} steps, seed {meta['seed']}", "",
             f"{meta['cores']} cores; steps 2..N averaged (docs/performance.md). Seconds per step, and the share "
             "of the step's wall time in parentheses. Model compute: the role's own generation, scoring, "
             "forward/backward and optimizer.", ""]
    for trainer, roles in results.items():
        for role, p in roles.items():
            wall = p["wall_s"]
            share = "n/a" if p["model_share"] is None else f"{p['model_share']:.0%}"
            # phases under 5 ms per step are left out of the line (a single agent never delegates); profile.json has all
            cells = "; ".join(f"{k[:-2]} {v:.2f} ({v / wall:.0%})" for k, v in _row(role, p) if wall > 0 and v >= 0.005)
            service = [f"{k[:-2]} {p[k]:.2f}" for k in SERVICE if k in p]
            n = p["steps"]
            lines.append(f"- **{trainer} / {role}**: {wall:.2f} s per step over {n} step{'s' * (n != 1)}, model compute "
                         f"{share}. {cells}." + (f" Served to the planner meanwhile: {'; '.join(service)}."
                                                  if service else ""))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness profile", description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default=DEFAULT_PRESET, help=f"a folder of {CONFIGS_DIR}/ (default {DEFAULT_PRESET})")
    ap.add_argument("--trainer", default=",".join(TRAINERS), help="trainer(s), comma-separated (default: all)")
    ap.add_argument("--steps", type=int, default=4, help="planner steps per run (default 4; step 1 is not averaged)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("runs/profile"), help="folder for the runs and profile.md")
    ap.add_argument("overrides", nargs="*", help="key.path=value overrides for every run (e.g. rollout.k=8)")
    args = ap.parse_args(argv)
    trainers = [t for t in args.trainer.split(",") if t]
    unknown = [t for t in trainers if t not in TRAINERS]
    if unknown:
        ap.error(f"unknown trainer(s) {unknown}; choose from {sorted(TRAINERS)}")
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    configs = {t: ROOT / TRAINERS[t].config_path(args.preset) for t in trainers}
    missing = [str(c) for c in configs.values() if not c.is_file()]
    if missing:
        ap.error(f"--preset {args.preset}: no {', '.join(missing)}")

    results: dict[str, dict[str, dict[str, Any]]] = {}
    for i, trainer in enumerate(trainers, 1):
        run = (args.out / trainer).resolve()  # the run starts in the repository root
        if run.exists():
            ap.error(f"{run} exists: remove it or give another --out")
        cmd = [sys.executable, "-m", "harness", "train", "--trainer", trainer, "--config", str(configs[trainer]),
               "--max-steps", str(args.steps), "--seed", str(args.seed), "--run-dir", str(run),
               *RUN_OVERRIDES, *args.overrides]
        print(f"[profile] {i}/{len(trainers)} {trainer}: {args.steps} steps -> {run} (log: {run}.log)", flush=True)
        args.out.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        with open(f"{run}.log", "w") as log:
            proc = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        if proc.returncode != 0:
            print(f"error: {trainer}'s run failed (exit {proc.returncode}); see {run}.log", file=sys.stderr)
            return 1
        results[trainer] = profile_run(run)
        print(f"[profile] {trainer} done in {time.perf_counter() - t0:.0f} s", flush=True)

    meta = {"preset": args.preset, "steps": args.steps, "seed": args.seed, "cores": os.cpu_count(),
            "overrides": [*RUN_OVERRIDES, *args.overrides]}
    text = markdown(results, meta)
    (args.out / "profile.md").write_text(text)
    (args.out / "profile.json").write_text(json.dumps({"meta": meta, "roles": results}, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
