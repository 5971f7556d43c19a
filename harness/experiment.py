"""``python -m harness experiment``: the whole comparison on one machine (README.md §Set-up, `make demo`).

    python -m harness experiment --preset tiny --seeds 2 [--quick] [--out DIR] [--report DIR]

1. **Warm start**: the shipped checkpoint ``baselines/checkpoints/<preset>/`` (or ``--checkpoint DIR``), its hashes
   checked, when there is one; else built once (``python -m harness warmstart`` with
   ``baselines/configs/<preset>/warmstart.yaml``) and reused when its ``warmstart.json`` already exists. Either
   way it is shared by every trainer and seed, so the trainers start from the same policies.
2. **Train** every trainer of the preset (``single_agent``, ``frozen_sub``, ``mgrpo`` and the
   ``alignment: none`` ablation when the preset has one) for every seed, each a
   ``python -m harness train`` run with its roles as processes and periodic evaluation on the
   local test tasks (task records), from the warm-started models. When the arm's config sets
   ``eval.unseen.worlds``, each run is then evaluated on those worlds before and after RL
   (``python -m harness eval-unseen``; records in ``<run>/eval_unseen/``).
3. **Report**: ``python -m harness.report`` over the experiment's runs into ``--report``.

``--two-stage`` follows the paper's protocol (§5; docs/training.md, "Two stages and the hard filter"): per
seed, **stage 1** co-trains planner and sub-agent with mgrpo on simple tasks (the preset's ``mgrpo_stage1.yaml``,
in ``<out>/stage1/``); the **hard filter** (``python -m harness filter``, ``--filter-k`` attempts per task)
scores that stage-1 system on the stage-2 candidates (``<out>/filter/seed<N>/``); then every **stage-2 arm**
of that seed starts from the stage-1 checkpoint (``frozen_sub`` freezes the sub-agent only now;
``single_agent``, which has no sub-agent, starts from the warm start) and trains on the filtered tasks
(``tasks.hard_filter``). The report covers the stage-2 runs.

Rerunning the same command resumes the experiment: the warm start and completed runs are reused;
a run that did not complete is moved to ``<out>/incomplete/`` and started afresh, and a completed run whose
resolved config differs from what its preset gives now (an edited preset) is moved to ``<out>/superseded/``
and run again, with the changed settings named.

``--quick`` is a smoke run (a few steps everywhere) that checks the pipeline and claims no
learning; its report says so in the run names (``quick``). Every stage prints progress; a
failed run is kept (shown as failed in the report) and the experiment goes on with the others,
then exits non-zero.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from tqdm import tqdm

from harness.budget import estimate_experiment, format_breakdown
from harness.checkpoint_files import PROVENANCE_FILE, verify_checkpoint
from harness.config import ConfigError, from_dict, load_config, load_yaml, to_dict
from harness.eval_unseen import evaluate_unseen
from harness.records import portable_argv
from harness.role.checkpoints import last_checkpoint
from harness.train_config import load_train_config
from harness.warmstart import WarmstartConfig

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "baselines" / "configs"
ABOUT_FILE = "ABOUT.md"
"""A preset folder's description of its setting (e.g. a probe's design), which the report shows under its title."""
#: Shipped warm-start checkpoints, one folder per preset (``python -m harness warmstart --preset P --ship ...``).
CHECKPOINTS = ROOT / "baselines" / "checkpoints"

#: (run name, config file) per preset, in the order they run.
ARMS = ("single_agent", "frozen_sub", "mgrpo", "mgrpo_align_none")

QUICK_WARMSTART = ["max_steps=3", "n_train_tasks=4", "n_test_tasks=2", "eval_tasks=2", "world_size=tiny",
                   "batch_size=2", "max_length=1536", "eval_max_new_tokens=24"]
QUICK_TRAIN = ["planner.max_steps=2", "eval.every=2", "eval.n_tasks=1", "eval.runs=2", "rollout.k=2",
               "rollout.max_new_tokens=24", "rollout.planner_turns=2", "rollout.sub_turns=2", "alignment.d=2",
               "tasks.n_train=4", "tasks.n_test=2", "planner.groups_per_step=2", "eval.unseen.runs=1",
               "eval.unseen.n_test=20"]


def quick_train(config: Path) -> list[str]:
    """``QUICK_TRAIN`` for one arm's config: an arm that evaluates greedily (``eval.temperature: 0``, as the
    tiny-generalise arms do) keeps its one evaluation run, which a second would only repeat."""
    try:
        greedy = load_train_config(str(config), []).eval.temperature == 0
    except ConfigError:  # the child run reports it, with the run's log
        greedy = False
    if greedy:
        return [o for o in QUICK_TRAIN if not o.startswith("eval.runs=")]
    return list(QUICK_TRAIN)


def wants_unseen(run_dir: Path) -> bool:
    """Whether a completed run's config asks for the unseen-world evaluation (``eval.unseen.worlds``)."""
    config = run_dir / "config.yaml"
    return config.is_file() and bool(load_train_config(str(config), []).eval.unseen.worlds)


def _arg(path: Path) -> str:
    """``path`` as written on a child's command line: relative to the repository when inside it (children
    run there), so the records and the committed report name no machine's folders (issue 7)."""
    return portable_argv([str(path.resolve())], ROOT)[0]


def _run(argv: list[str], log: Path) -> int:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as fh:
        return subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT).returncode


#: Attempts per candidate task of the two-stage experiment's hard filter (``--filter-k``; quick: 2).
FILTER_K = 4


def check_budget(args: argparse.Namespace, preset_dir: Path, arms: list[str], *, ws_done: bool) -> tuple[int, float]:
    """Print the calibrated time estimate; (exit status, estimated minutes): status 3 when it is over
    ``--budget-min`` (nothing has run yet), 2 for a config error."""
    try:
        ws_path = preset_dir / "warmstart.yaml"
        ws_cfg = load_config(WarmstartConfig, str(ws_path) if ws_path.is_file() else None,
                             QUICK_WARMSTART if args.quick else [])
        arm_cfgs = {a: load_train_config(str(preset_dir / f"{a}.yaml"),
                                         quick_train(preset_dir / f"{a}.yaml") if args.quick else [])
                    for a in arms}
        stage1 = (load_train_config(str(preset_dir / "mgrpo_stage1.yaml"),
                                    quick_train(preset_dir / "mgrpo_stage1.yaml") if args.quick else [])
                  if args.two_stage else None)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2, 0.0
    print("budget check: calibrating on this machine ...", flush=True)
    est = estimate_experiment(ws_cfg, arm_cfgs, args.seeds, warmstart_done=ws_done, stage1=stage1,
                              filter_k=args.filter_k)
    unseen = [a for a, c in arm_cfgs.items() if c.eval.unseen.worlds]
    if unseen:
        print(f"note: the estimate leaves out the unseen-world evaluation (eval.unseen) of {', '.join(unseen)}",
              flush=True)
    total_min = est["total_s"] / 60
    print(f"estimated time (calibration took {est['calibration_s']:.0f} s):\n{format_breakdown(est['stages'])}",
          flush=True)
    if total_min > args.budget_min:
        print(f"error: preset {preset_dir.name!r} with --seeds {args.seeds} is estimated at {total_min:.1f} min on "
              f"this machine, over the budget of {args.budget_min:g} min; nothing was started. Cut the largest "
              "stage above (fewer seeds, planner.max_steps, warm-start n_demos/epochs) or raise --budget-min.",
              file=sys.stderr)
        return 3, total_min
    return 0, total_min


def _move_aside(out: Path, why: str, run_dir: Path) -> Path:
    """Move ``run_dir`` to ``<out>/<why>/<name>-<time>`` (kept, never mixed into a new attempt); the new place."""
    kept = out / why / f"{run_dir.name}-{time.strftime('%Y%m%dT%H%M%S')}"
    kept.parent.mkdir(parents=True, exist_ok=True)
    run_dir.rename(kept)
    return kept


def config_changes(saved: Any, now: Any) -> list[str]:
    """``key: before -> now`` for every setting in which ``saved`` (the resolved config a run or a warm start was
    made with, as plain data) differs from ``now`` (the config dataclass its preset and overrides resolve to now,
    e.g. after the preset was edited). ``saved`` is resolved again under today's defaults first, so a setting added
    since, at a default that keeps the old behaviour, is no change. ``run_id`` (a run's folder name) is not
    compared. A saved config that no longer loads (a setting since removed) is a change too."""
    def flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in d.items():
            out.update(flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value})
        return out

    try:
        before = flat(to_dict(from_dict(type(now), dict(saved))))
    except (ConfigError, TypeError, ValueError) as exc:
        return [f"the saved config no longer loads ({exc})"]
    after = flat(to_dict(now))
    return [f"{key}: {before.get(key)!r} -> {after.get(key)!r}" for key in sorted(set(before) | set(after))
            if key != "run_id" and before.get(key) != after.get(key)]


def _changes_note(changed: list[str]) -> str:
    return "; ".join(changed[:6]) + (f"; and {len(changed) - 6} more" if len(changed) > 6 else "")


def run_config_changes(run_dir: Path, config: Path, overrides: list[str]) -> list[str]:
    """:func:`config_changes` of a run folder's ``config.yaml`` against ``config`` with ``overrides`` now."""
    try:
        saved = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        return [f"its config.yaml cannot be read ({exc})"]
    return config_changes(saved if isinstance(saved, dict) else {}, load_train_config(str(config), overrides))


def train_run(args: argparse.Namespace, out: Path, name: str, seed: int, trainer: str, config: Path, run_dir: Path,
              overrides: list[str], log: Path) -> str | None:
    """One ``python -m harness train`` run into ``run_dir`` (skipped when it already completed; an incomplete
    earlier attempt is moved aside); returns why it failed, else None."""
    extra = [*overrides, *(quick_train(config) if args.quick else [])]
    if (run_dir / "status.json").is_file() and json.loads((run_dir / "status.json").read_text()).get("state") == "completed":
        changed = run_config_changes(run_dir, config, [*extra, f"trainer={trainer}", f"seed={seed}"])
        if not changed:
            return None
        kept = _move_aside(out, "superseded", run_dir)
        tqdm.write(f"note: {run_dir.name} completed under another config than {_arg(config)} gives now "
                   f"({_changes_note(changed)}); it was moved to {kept} and runs again")
    elif run_dir.exists():  # an earlier attempt that did not complete: kept aside, never mixed into this one
        kept = _move_aside(out, "incomplete", run_dir)
        tqdm.write(f"note: an incomplete earlier attempt of {run_dir.name} was moved to {kept}; starting it afresh")
    cmd = [sys.executable, "-m", "harness", "train", "--trainer", trainer, "--config", _arg(config),
           "--seed", str(seed), "--run-dir", _arg(run_dir), *extra]
    rc = _run(cmd, log)
    return f"{name} seed {seed} (exit {rc}; see {log})" if rc != 0 else None


def stage_one(args: argparse.Namespace, preset_dir: Path, out: Path, seed: int, start: dict[str, Path],
              failed: list[str]) -> dict[str, str] | None:
    """``--two-stage`` for one seed: the stage-1 mgrpo run (from the warm start), then the hard filter of its
    system on the stage-2 candidates; returns the stage-1 checkpoints and the filter folder (as child
    arguments), or None (the reason appended to ``failed``)."""
    run_dir = out / "stage1" / f"mgrpo-seed{seed}"
    fail = train_run(args, out, "mgrpo", seed, "mgrpo", preset_dir / "mgrpo_stage1.yaml", run_dir,
                     [f"models.planner={_arg(start['planner'])}", f"models.sub={_arg(start['sub_agent'])}"],
                     out / "logs" / f"stage1-mgrpo-seed{seed}.log")
    if fail:
        failed.append(f"stage 1: {fail}")
        return None
    got = {role: last_checkpoint(run_dir / role / "checkpoints") for role in ("planner", "sub")}
    if got["planner"] is None:
        failed.append(f"stage 1: mgrpo seed {seed} saved no planner checkpoint in {run_dir / 'planner' / 'checkpoints'}")
        return None
    planner = _arg(Path(got["planner"]))
    # a sub role that trained no step saved nothing: its start is then still the warm start
    sub = _arg(Path(got["sub"])) if got["sub"] else _arg(start["sub_agent"])
    if not got["sub"]:
        tqdm.write(f"note: stage 1 seed {seed}: the sub-agent trained no step; stage 2 starts it from the warm start")
    filter_dir = out / "filter" / f"seed{seed}"
    if not (filter_dir / "filter.json").is_file():
        log = out / "logs" / f"filter-seed{seed}.log"
        # the candidates of the stage-2 arms: the preset's mgrpo config with the arms' overrides
        cmd = [sys.executable, "-m", "harness", "filter", "--config", _arg(preset_dir / "mgrpo.yaml"),
               "--out", _arg(filter_dir), "--k", str(args.filter_k), f"models.planner={planner}", f"models.sub={sub}",
               f"seed={seed}", *(quick_train(preset_dir / "mgrpo.yaml") if args.quick else [])]
        rc = _run(cmd, log)
        if rc != 0:
            failed.append(f"hard filter seed {seed} (exit {rc}; see {log})")
            return None
    return {"planner": planner, "sub": sub, "filter": _arg(filter_dir)}


def report_title(args: argparse.Namespace) -> str:
    """The report's title, which says what scale of run it is (the committed reference is a tiny CPU run)."""
    scale = ("tiny-scale CPU run" + (f", preset {args.preset}" if args.preset != "tiny" else "")
             if args.preset.startswith("tiny") else f"preset {args.preset}")
    quick = "; --quick smoke run, claims no learning" if args.quick else ""
    stages = "; two stages: stage-2 runs from the stage-1 checkpoint, hard-filtered tasks" if args.two_stage else ""
    return f"M-GRPO comparison, embedded default ({scale}, {args.seeds} seeds{stages}{quick})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness experiment", description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="tiny", help="a folder of baselines/configs/ (tiny, smollm2)")
    ap.add_argument("--seeds", type=int, default=2, help="seeds per trainer")
    ap.add_argument("--quick", action="store_true", help="a few steps everywhere: checks the pipeline, claims no learning")
    ap.add_argument("--out", default=None, help="experiment directory (default runs/experiment-<preset>[-quick])")
    ap.add_argument("--report", default=None, help="report directory (default reports/<preset>-cpu[-quick])")
    ap.add_argument("--arms", default=",".join(ARMS), help="comma-separated trainer configs of the preset to run")
    ap.add_argument("--rebuild-warmstart", action="store_true",
                    help="build the warm start first and ship it to baselines/checkpoints/<preset>/ (make demo "
                         "WARMSTART=1); by default a shipped checkpoint there is the start of every run")
    ap.add_argument("--checkpoint", default=None, metavar="DIR",
                    help="the shipped warm-start checkpoint every run starts from (default "
                         "baselines/checkpoints/<preset>/; e.g. a preset of longer runs from another preset's "
                         "checkpoint); --rebuild-warmstart ships its build there")
    ap.add_argument("--two-stage", action="store_true",
                    help="the paper's protocol: per seed, stage 1 co-trains both agents (the preset's mgrpo_stage1.yaml), the "
                         "hard filter scores that system, and every stage-2 arm starts from the stage-1 checkpoint "
                         "and trains on the filtered tasks")
    ap.add_argument("--filter-k", type=int, default=None,
                    help=f"--two-stage: attempts per candidate task of the hard filter (default {FILTER_K}; quick: 2)")
    ap.add_argument("--budget-min", type=float, default=None,
                    help="refuse to start when the calibrated estimate of the whole experiment exceeds this many "
                         "minutes (make demo: BUDGET, default 40); the estimate and its breakdown are printed either way")
    args = ap.parse_args(argv)
    if args.filter_k is None:
        args.filter_k = 2 if args.quick else FILTER_K

    preset_dir = CONFIGS / args.preset
    if not preset_dir.is_dir():
        known = sorted(p.name for p in CONFIGS.iterdir() if p.is_dir())
        print(f"error: no preset {args.preset!r} in {CONFIGS}; known: {known}", file=sys.stderr)
        return 2
    if args.two_stage and not (preset_dir / "mgrpo_stage1.yaml").is_file():
        print(f"error: --two-stage needs the preset's stage-1 config {preset_dir / 'mgrpo_stage1.yaml'} (mgrpo on simple "
              "tasks; see baselines/configs/tiny/mgrpo_stage1.yaml)", file=sys.stderr)
        return 2
    if args.filter_k < 1:
        print(f"error: --filter-k={args.filter_k}: at least one attempt per task", file=sys.stderr)
        return 2
    suffix = ("-two-stage" if args.two_stage else "") + ("-quick" if args.quick else "")
    out = Path(args.out or ROOT / "runs" / f"experiment-{args.preset}{suffix}").resolve()
    report = Path(args.report or ROOT / "reports" / f"{args.preset}-cpu{suffix}").resolve()
    arms = [a for a in args.arms.split(",") if (preset_dir / f"{a}.yaml").is_file()]
    missing = sorted(set(args.arms.split(",")) - set(arms))
    if missing:
        print(f"note: preset {args.preset} has no config for {missing}; skipped")
    plan = [(arm, seed) for arm in arms for seed in range(args.seeds)]
    print(f"experiment {out}: warm start, {'stage 1 and the hard filter per seed, ' if args.two_stage else ''}then "
          f"{len(plan)} training run{'s' * (len(plan) != 1)} "
          f"({', '.join(arms)} x {args.seeds} seed{'s' * (args.seeds != 1)}), then the report in {report}", flush=True)
    t0 = time.perf_counter()
    n_stages = 4 if args.two_stage else 3  # warm start, [stage 1 + filter,] training runs, report

    ws_dir = out / "warmstart"
    ws_config = preset_dir / "warmstart.yaml"
    shipped = Path(args.checkpoint).resolve() if args.checkpoint else CHECKPOINTS / args.preset
    if args.checkpoint and not (shipped / PROVENANCE_FILE).is_file() and not args.rebuild_warmstart:
        print(f"error: --checkpoint {args.checkpoint}: no {PROVENANCE_FILE} there (a folder written by python -m harness "
              "warmstart --ship DIR); pass --rebuild-warmstart to build one into it", file=sys.stderr)
        return 2
    use_shipped = (shipped / PROVENANCE_FILE).is_file() and not args.rebuild_warmstart
    estimate_min = None
    if args.budget_min is not None:
        rc, estimate_min = check_budget(args, preset_dir, arms,
                                        ws_done=use_shipped or (ws_dir / "warmstart.json").is_file())
        if rc:
            return rc
    if use_shipped:
        try:
            prov = verify_checkpoint(shipped)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"[1/{n_stages}] warm start: the shipped checkpoint {_arg(shipped)} (built {prov.get('created')}; "
              "WARMSTART=1 / --rebuild-warmstart rebuilds it)", flush=True)
        summary = prov
        start = {agent: shipped for agent in ("planner", "sub_agent", "single_agent")}
    else:
        if (ws_dir / "warmstart.json").is_file() and not args.rebuild_warmstart:
            changed = config_changes(json.loads((ws_dir / "warmstart.json").read_text()).get("config") or {},
                                     load_config(WarmstartConfig, str(ws_config) if ws_config.is_file() else None,
                                                 QUICK_WARMSTART if args.quick else []))
            if changed:
                kept = _move_aside(out, "superseded", ws_dir)
                print(f"note: the warm start in {ws_dir} was built under another config than {_arg(ws_config)} "
                      f"gives now ({_changes_note(changed)}); it was moved to {kept} and is built again", flush=True)
        if args.rebuild_warmstart or not (ws_dir / "warmstart.json").is_file():
            print(f"[1/{n_stages}] warm start ...", flush=True)
            cmd = [sys.executable, "-m", "harness", "warmstart", "--out", _arg(ws_dir)]
            if ws_config.is_file():
                cmd += ["--config", _arg(ws_config)]
            if args.rebuild_warmstart:
                cmd += ["--ship", _arg(shipped)]
            cmd += QUICK_WARMSTART if args.quick else []
            if _run(cmd, out / "logs" / "warmstart.log") != 0:
                print(f"error: the warm start failed; see {out / 'logs' / 'warmstart.log'}", file=sys.stderr)
                return 1
        else:
            print(f"[1/{n_stages}] warm start: reusing {ws_dir}", flush=True)
        summary = json.loads((ws_dir / "warmstart.json").read_text())
        start = {agent: ws_dir / agent for agent in ("planner", "sub_agent", "single_agent")}
    print(f"      warm start check: {json.dumps(summary.get('check', {}))}", flush=True)

    failed: list[str] = []
    starts: dict[int, dict[str, str]] = {}  # --two-stage: per seed, the stage-1 checkpoints and the filter
    if args.two_stage:
        print("[2/4] stage 1 (mgrpo, both agents) and the hard filter, per seed ...", flush=True)
        for seed in range(args.seeds):
            got = stage_one(args, preset_dir, out, seed, start, failed)
            if got is not None:
                starts[seed] = got

    print(f"[{n_stages - 1}/{n_stages}] training runs ...", flush=True)
    runs_dir = out / "runs"
    for arm, seed in tqdm(plan, desc="runs", unit="run"):
        config = preset_dir / f"{arm}.yaml"
        run_dir = runs_dir / f"{arm}-seed{seed}"
        if args.two_stage and seed not in starts:
            failed.append(f"{arm} seed {seed} (not started: stage 1 or the hard filter of seed {seed} failed)")
            continue
        overrides = [f"models.planner={_arg(start['single_agent' if arm == 'single_agent' else 'planner'])}",
                     f"models.sub={_arg(start['sub_agent'])}"]
        if args.two_stage:
            if arm != "single_agent":  # it has no sub-agent to take from the two-agent stage-1 checkpoint
                overrides = [f"models.planner={starts[seed]['planner']}", f"models.sub={starts[seed]['sub']}"]
            overrides.append(f"tasks.hard_filter={starts[seed]['filter']}")
        trainer = str(load_yaml(config).get("trainer", arm))
        fail = train_run(args, out, arm, seed, trainer, config, run_dir, overrides, out / "logs" / f"{arm}-seed{seed}.log")
        if fail:
            failed.append(fail)
            tqdm.write(f"run failed: {fail}")
        elif wants_unseen(run_dir):
            # before (step 0) and after RL on worlds the run never saw; done evaluations are skipped on a rerun
            if evaluate_unseen(run_dir, log=tqdm.write) != 0:
                failed.append(f"{arm} seed {seed}: the unseen-world evaluation (rerun: python -m harness eval-unseen "
                              f"{_arg(run_dir)})")

    print(f"[{n_stages}/{n_stages}] report ...", flush=True)
    # A child in the repository like the runs, so the report names the runs folder as the runs do.
    about = preset_dir / ABOUT_FILE  # what the preset's setting is, shown in the report
    rc = subprocess.run([sys.executable, "-m", "harness.report", "--runs", _arg(runs_dir), "--out", _arg(report),
                         "--title", report_title(args), *(["--about", _arg(about)] if about.is_file() else [])],
                        cwd=ROOT).returncode
    wall_min = (time.perf_counter() - t0) / 60
    against = f" (estimated {estimate_min:.1f} min)" if estimate_min is not None else ""
    print(f"done in {wall_min:.1f} min{against}; report: {report / 'report.md'}", flush=True)
    if failed:
        print("failed runs:\n  " + "\n  ".join(failed), file=sys.stderr)
        return 1
    return int(rc)
