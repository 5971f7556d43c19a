"""``python -m harness experiment`` (what ``make demo`` runs): argument errors and the committed report.

The quick smoke run end to end (warm start, every arm, the report) is ``make demo QUICK=1`` in
``tests/test_readme.py``, which follows the README in a fresh clone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.experiment import main

ROOT = Path(__file__).resolve().parents[2]


def record_children(monkeypatch) -> list[list[str]]:
    """The experiment's child commands, recorded instead of run: a warm start writes its ``warmstart.json`` (with
    the config it was given, resolved, as the real one does), every child succeeds, and the report subprocess is a
    no-op."""
    import json
    import subprocess

    from harness import experiment
    from harness.config import load_config, to_dict
    from harness.warmstart import WarmstartConfig

    calls: list[list[str]] = []

    def fake_run(argv, log):
        calls.append(argv)
        if "warmstart" in argv:
            out = Path(argv[argv.index("--out") + 1])
            out.mkdir(parents=True, exist_ok=True)
            config = str(ROOT / argv[argv.index("--config") + 1]) if "--config" in argv else None
            resolved = load_config(WarmstartConfig, config, [a for a in argv[4:] if "=" in a and a[0] != "-"])
            (out / "warmstart.json").write_text(json.dumps({"check": {}, "config": to_dict(resolved)}))
        return 0

    monkeypatch.setattr(experiment, "_run", fake_run)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0))
    return calls

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


def test_runs_start_from_the_shipped_checkpoint_unless_rebuilt(tmp_path, monkeypatch, capsys):
    """Issue 16: ``make demo`` starts every run from ``baselines/checkpoints/<preset>/`` (verified), and
    ``WARMSTART=1`` (``--rebuild-warmstart``) builds the warm start first and ships it there."""
    import json

    from harness import experiment
    from harness.checkpoint_files import sha256_file

    ship = tmp_path / "checkpoints" / "tiny"
    (ship / "joint").mkdir(parents=True)
    (ship / "joint" / "config.json").write_text(json.dumps({"vocab_size": 10}))
    (ship / "joint" / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0}}, "added_tokens": []}))
    agents = {a: "joint" for a in ("planner", "sub_agent", "single_agent")}
    prov = {"agents": agents, "created": "now", "check": {"greedy": {"success": 0.5}},
            "sha256": {f"joint/{n}": sha256_file(ship / "joint" / n) for n in ("config.json", "tokenizer.json")}}
    (ship / "provenance.json").write_text(json.dumps(prov))
    monkeypatch.setattr(experiment, "CHECKPOINTS", tmp_path / "checkpoints")
    calls = record_children(monkeypatch)
    out = tmp_path / "exp"
    assert experiment.main(["--preset", "tiny", "--seeds", "1", "--quick", "--arms", "mgrpo",
                            "--out", str(out), "--report", str(tmp_path / "rep")]) == 0
    assert not [c for c in calls if "warmstart" in c]  # no warm start: the shipped one
    (train,) = calls
    assert f"models.planner={ship}" in train and f"models.sub={ship}" in train
    assert "the shipped checkpoint" in capsys.readouterr().out
    # --rebuild-warmstart: the warm start runs first and ships to the same folder
    calls.clear()
    assert experiment.main(["--preset", "tiny", "--seeds", "1", "--quick", "--arms", "mgrpo", "--rebuild-warmstart",
                            "--out", str(tmp_path / "exp2"), "--report", str(tmp_path / "rep2")]) == 0
    ws = calls[0]
    assert "warmstart" in ws and ws[ws.index("--ship") + 1] == str(ship)
    assert f"models.planner={tmp_path / 'exp2' / 'warmstart' / 'planner'}" in calls[1]
    # --checkpoint: another folder (e.g. a preset of longer runs from tiny's checkpoint); a folder without
    # provenance is refused before anything runs
    calls.clear()
    assert experiment.main(["--preset", "tiny-generalise", "--seeds", "1", "--quick", "--arms", "mgrpo",
                            "--checkpoint", str(ship), "--out", str(tmp_path / "exp4"),
                            "--report", str(tmp_path / "rep4")]) == 0
    (train,) = calls
    assert f"models.planner={ship}" in train and f"models.sub={ship}" in train
    calls.clear()
    assert experiment.main(["--preset", "tiny", "--seeds", "1", "--quick", "--checkpoint", str(tmp_path / "none"),
                            "--out", str(tmp_path / "exp5")]) == 2
    assert "--checkpoint" in capsys.readouterr().err and not calls
    # a shipped checkpoint whose files changed is refused before anything runs
    (ship / "joint" / "config.json").write_text(json.dumps({"vocab_size": 11}))
    calls.clear()
    assert experiment.main(["--preset", "tiny", "--seeds", "1", "--quick", "--arms", "mgrpo",
                            "--out", str(tmp_path / "exp3"), "--report", str(tmp_path / "rep3")]) == 2
    assert "config.json: SHA-256 does not match" in capsys.readouterr().err and not calls


def test_two_stage_runs_stage1_then_one_filter_per_seed_and_starts_every_stage2_arm_from_it(tmp_path, monkeypatch,
                                                                                            capsys):
    """Issue 17 (paper §5): stage 1 co-trains both agents (mgrpo, the preset's mgrpo_stage1.yaml), the hard filter
    scores that system, and every stage-2 arm of the seed starts from the stage-1 checkpoint (single_agent from
    the warm start) and reads the same filter. The commands are checked here; the real pipeline runs in
    tests/harness/test_filter.py and the README test."""
    import json
    import subprocess

    from harness import experiment

    monkeypatch.setattr(experiment, "CHECKPOINTS", tmp_path / "no-shipped-checkpoints")
    calls: list[list[str]] = []

    def fake_run(argv, log):
        calls.append(argv)
        out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else None
        if "warmstart" in argv:
            out.mkdir(parents=True, exist_ok=True)
            (out / "warmstart.json").write_text(json.dumps({"check": {}}))
        elif "filter" in argv:
            out.mkdir(parents=True, exist_ok=True)
            (out / "filter.json").write_text("{}")
        elif "train" in argv:
            run = Path(argv[argv.index("--run-dir") + 1])
            for role in ("planner", "sub"):
                for step in (1, 2):
                    ck = run / role / "checkpoints" / f"checkpoint-{step}"
                    ck.mkdir(parents=True)
                    (ck / "trainer_state.json").write_text(json.dumps({"global_step": step}))
            (run / "status.json").write_text(json.dumps({"state": "completed"}))
        return 0

    monkeypatch.setattr(experiment, "_run", fake_run)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "exp"
    assert experiment.main(["--preset", "tiny", "--seeds", "2", "--quick", "--two-stage",
                            "--arms", "single_agent,frozen_sub,mgrpo", "--out", str(out),
                            "--report", str(tmp_path / "rep")]) == 0
    kinds = [c[c.index("harness") + 1] for c in calls]
    assert kinds == ["warmstart", "train", "filter", "train", "filter"] + ["train"] * 6
    for seed in (0, 1):
        s1 = next(c for c in calls if "train" in c and f"mgrpo-seed{seed}" in c[c.index("--run-dir") + 1]
                  and "stage1" in c[c.index("--run-dir") + 1])
        assert s1[s1.index("--config") + 1].endswith("tiny/mgrpo_stage1.yaml") and "--trainer" in s1
        ckpt = {role: f"{out / 'stage1' / f'mgrpo-seed{seed}' / role / 'checkpoints' / 'checkpoint-2'}"
                for role in ("planner", "sub")}
        flt = next(c for c in calls if "filter" in c and c[c.index("--out") + 1].endswith(f"seed{seed}"))
        assert f"models.planner={ckpt['planner']}" in flt and f"models.sub={ckpt['sub']}" in flt
        assert flt[flt.index("--k") + 1] == "2"  # quick
        for arm in ("single_agent", "frozen_sub", "mgrpo"):
            run = next(c for c in calls if c[c.index("harness") + 1] == "train"
                       and c[c.index("--run-dir") + 1].endswith(f"runs/{arm}-seed{seed}"))
            assert f"tasks.hard_filter={out / 'filter' / f'seed{seed}'}" in run  # one filter for all arms
            if arm == "single_agent":  # no sub-agent: its own warm start
                assert f"models.planner={out / 'warmstart' / 'single_agent'}" in run
            else:  # frozen_sub too starts from the co-trained stage-1 checkpoint
                assert f"models.planner={ckpt['planner']}" in run and f"models.sub={ckpt['sub']}" in run
    assert "stage 1 (mgrpo, both agents) and the hard filter" in capsys.readouterr().out


def test_two_stage_needs_a_stage1_config(tmp_path, monkeypatch, capsys):
    from harness import experiment

    (tmp_path / "configs" / "bare").mkdir(parents=True)
    monkeypatch.setattr(experiment, "CONFIGS", tmp_path / "configs")
    assert experiment.main(["--preset", "bare", "--two-stage"]) == 2
    assert "--two-stage needs the preset's stage-1 config" in capsys.readouterr().err


@pytest.mark.slow
def test_two_stage_quick_experiment_end_to_end(tmp_path, monkeypatch):
    """The real pipeline (~2 min): quick warm start, stage 1, the hard filter of the stage-1 system, two
    stage-2 arms from its checkpoint on the filtered tasks, the report."""
    import json

    import yaml

    from harness import experiment
    from harness.records import read_tasks

    monkeypatch.setattr(experiment, "CHECKPOINTS", tmp_path / "no-shipped-checkpoints")
    out, rep = tmp_path / "exp", tmp_path / "rep"
    assert experiment.main(["--preset", "tiny", "--seeds", "1", "--quick", "--two-stage", "--arms", "frozen_sub,mgrpo",
                            "--out", str(out), "--report", str(rep)]) == 0
    stage1 = out / "stage1" / "mgrpo-seed0"
    assert json.loads((stage1 / "status.json").read_text())["state"] == "completed"
    assert yaml.safe_load((stage1 / "config.yaml").read_text())["tasks"]["max_hops"] == 1
    meta = json.loads((out / "filter" / "seed0" / "filter.json").read_text())
    planner_ckpt = str(stage1 / "planner" / "checkpoints" / "checkpoint-2")
    assert meta["k"] == 2 and meta["system"]["planner"] == planner_ckpt and meta["n_tasks"] == 12
    for arm in ("frozen_sub", "mgrpo"):
        run = out / "runs" / f"{arm}-seed0"
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        assert cfg["models"]["planner"] == planner_ckpt and cfg["tasks"]["hard_filter"] == str(out / "filter" / "seed0")
        recs = read_tasks(run / "eval" / "2" / "local_gaia.jsonl").records
        assert sorted(r.inference_run for r in recs) == [0, 1]  # quick: eval.runs=2
    assert (rep / "report.md").is_file() and "two stages" in (rep / "report.md").read_text()


def test_quick_overrides_keep_one_evaluation_run_for_a_greedy_arm():
    """``--quick`` asks for two evaluation runs, which a greedy evaluation (eval.temperature 0, the
    tiny-generalise arms of ``make demo``) refuses as a repeat: such an arm keeps its one run."""
    from harness.experiment import CONFIGS, QUICK_TRAIN, quick_train
    from harness.train_config import load_train_config

    sampled = CONFIGS / "tiny" / "mgrpo.yaml"
    assert quick_train(sampled) == QUICK_TRAIN
    for arm in ("single_agent", "frozen_sub", "mgrpo", "mgrpo_align_none"):
        config = CONFIGS / "tiny-generalise" / f"{arm}.yaml"
        overrides = quick_train(config)
        assert "eval.runs=2" not in overrides and "planner.max_steps=2" in overrides
        cfg = load_train_config(str(config), overrides)  # valid: a greedy evaluation with one run
        assert cfg.eval.temperature == 0 and cfg.eval.runs == 1


def test_the_stage1_preset_builds_its_own_weak_warm_start_then_runs_stage1_mgrpo(tmp_path, monkeypatch, capsys):
    """Issue 16 (paper Fig. 5 analogue): ``--preset tiny-stage1`` ships no checkpoint, so the experiment builds the
    preset's weak warm start (the tiny recipe cut short) and starts its one arm, stage-1 mgrpo on one-hop tasks,
    from it; the warm start is weaker than the tiny preset's by construction (fewer passes, nothing else changed)."""
    import json

    from harness import experiment
    from harness.config import load_config
    from harness.train_config import load_train_config
    from harness.warmstart import WarmstartConfig

    preset = ROOT / "baselines" / "configs" / "tiny-stage1"
    weak = load_config(WarmstartConfig, str(preset / "warmstart.yaml"), [])
    tiny = load_config(WarmstartConfig, str(ROOT / "baselines" / "configs" / "tiny" / "warmstart.yaml"), [])
    assert weak.epochs < tiny.epochs and weak.max_steps <= 0 and weak.model == tiny.model == "tiny"
    arm = load_train_config(str(preset / "mgrpo.yaml"), [])
    assert arm.trainer == "mgrpo" and arm.tasks.max_hops == 1 and arm.models.planner == "tiny"
    assert not (experiment.CHECKPOINTS / "tiny-stage1").exists()
    calls = record_children(monkeypatch)
    out = tmp_path / "exp"
    assert experiment.main(["--preset", "tiny-stage1", "--seeds", "2", "--out", str(out),
                            "--report", str(tmp_path / "rep")]) == 0
    ws, *trains = calls
    assert "warmstart" in ws and ws[ws.index("--config") + 1].endswith("baselines/configs/tiny-stage1/warmstart.yaml")
    assert len(trains) == 2  # its one arm (the preset has no other), per seed
    for seed, train in enumerate(trains):
        assert train[train.index("--config") + 1].endswith("baselines/configs/tiny-stage1/mgrpo.yaml")
        assert train[train.index("--seed") + 1] == str(seed)
        assert f"models.planner={out / 'warmstart' / 'planner'}" in train
        assert f"models.sub={out / 'warmstart' / 'sub_agent'}" in train
    assert "has no config for" in capsys.readouterr().out  # the other arms are named as skipped
    # Rerun: the warm start built under the same config is reused; one built under another (an edited preset) is
    # moved to <out>/superseded/ and built again, with the changed setting named.
    again = ["--preset", "tiny-stage1", "--seeds", "1", "--out", str(out), "--report", str(tmp_path / "rep")]
    del calls[:]
    assert experiment.main(again) == 0 and not any("warmstart" in c for c in calls)
    record = json.loads((out / "warmstart" / "warmstart.json").read_text())
    record["config"]["epochs"] = 4.0
    (out / "warmstart" / "warmstart.json").write_text(json.dumps(record))
    del calls[:]
    assert experiment.main(again) == 0 and sum("warmstart" in c for c in calls) == 1
    assert len(list((out / "superseded").iterdir())) == 1
    assert "epochs: 4.0 -> 5.0" in capsys.readouterr().out


def test_a_completed_run_is_reused_only_while_its_preset_resolves_to_the_same_config(tmp_path, monkeypatch, capsys):
    """Rerunning an experiment reuses a completed run only if its saved ``config.yaml`` is what the preset and the
    run's overrides resolve to now; after a preset edit (here ``alignment.chunk``) the run is moved to
    ``<out>/superseded/`` and run again, and the note names the changed setting. A setting added to the config
    since the run, at a default that keeps the old behaviour, is no change."""
    import argparse
    import json

    import yaml

    from harness import experiment
    from harness.config import to_dict
    from harness.train_config import load_train_config

    calls = record_children(monkeypatch)
    preset = ROOT / "baselines/configs/tiny-generalise/mgrpo_align_none.yaml"
    out = tmp_path / "exp"
    run = out / "runs" / "mgrpo_align_none-seed1"
    overrides = ["models.planner=baselines/checkpoints/tiny-generalise", "models.sub=baselines/checkpoints/tiny-generalise"]
    args = argparse.Namespace(quick=False)

    def completed_run(**changes):
        run.mkdir(parents=True)
        cfg = to_dict(load_train_config(str(preset), [*overrides, "trainer=mgrpo", "seed=1",
                                                      f"run_id={run.name}"]))
        for key, value in changes.items():
            section, name = key.split(".")
            if value is None:
                del cfg[section][name]  # as written before the setting existed
            else:
                cfg[section][name] = value
        (run / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        (run / "status.json").write_text(json.dumps({"state": "completed"}))

    def train():
        return experiment.train_run(args, out, "mgrpo_align_none", 1, "mgrpo", preset, run, overrides, tmp_path / "log")

    completed_run()
    assert train() is None and calls == [] and run.is_dir()  # the same config: reused
    run.rename(tmp_path / "same")
    completed_run(**{"alignment.chunk": 16})  # made before the preset set chunk 4
    assert train() is None
    assert len(calls) == 1 and calls[0][calls[0].index("--run-dir") + 1].endswith("mgrpo_align_none-seed1")
    moved = list((out / "superseded").iterdir())
    assert len(moved) == 1 and (moved[0] / "config.yaml").is_file() and not run.exists()
    assert "alignment.chunk: 16 -> 4" in capsys.readouterr().out
    # a config saved before a setting existed is compared under today's default (chunk: null)
    plain = ROOT / "baselines/configs/tiny-generalise/mgrpo.yaml"
    completed_run(**{"alignment.chunk": None, "alignment.mode": "query"})
    assert experiment.run_config_changes(run, plain, [*overrides, "trainer=mgrpo", "seed=1"]) == []
    assert experiment.run_config_changes(run, plain, [*overrides, "trainer=mgrpo", "seed=2"]) == ["seed: 1 -> 2"]


def test_runs_of_a_preset_with_eval_unseen_are_evaluated_on_unseen_worlds(tmp_path, monkeypatch, capsys):
    """Issue 16: after each training run whose config sets ``eval.unseen.worlds`` (preset tiny-blind) the experiment
    runs ``python -m harness eval-unseen`` on it; a preset without it (tiny) runs none; a failed evaluation fails the
    experiment with the command that resumes it. The report gets the preset's ABOUT.md (tiny-blind has one)."""
    import yaml

    from harness import experiment
    from harness.config import to_dict
    from harness.train_config import load_train_config

    import subprocess

    calls = record_children(monkeypatch)
    evaluated: list[str] = []
    monkeypatch.setattr(experiment, "evaluate_unseen", lambda run_dir, log: evaluated.append(run_dir.name) or 0)
    real = experiment._run

    def train_writes_config(argv, log):  # a completed run's config.yaml, as harness train writes it
        real(argv, log)
        if "train" in argv:
            run_dir = Path(argv[argv.index("--run-dir") + 1])
            run_dir = run_dir if run_dir.is_absolute() else ROOT / run_dir
            cfg = load_train_config(argv[argv.index("--config") + 1],
                                    [a for a in argv if "=" in a and not a.startswith("-")]
                                    + [f"trainer={argv[argv.index('--trainer') + 1]}"])
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg)))
        return 0

    monkeypatch.setattr(experiment, "_run", train_writes_config)
    reports: list[list[str]] = []  # the report's command line: the preset's ABOUT.md goes with it when it has one
    monkeypatch.setattr(subprocess, "run", lambda argv, **k: reports.append(argv) or subprocess.CompletedProcess(argv, 0))
    ship = ROOT / "baselines" / "checkpoints" / "tiny-generalise"
    assert experiment.main(["--preset", "tiny-blind", "--seeds", "1", "--quick", "--arms", "single_agent,mgrpo",
                            "--checkpoint", str(ship), "--out", str(tmp_path / "exp"),
                            "--report", str(tmp_path / "rep")]) == 0
    assert evaluated == ["single_agent-seed0", "mgrpo-seed0"] and len(calls) == 2
    assert reports[-1][reports[-1].index("--about") + 1] == "baselines/configs/tiny-blind/ABOUT.md"
    evaluated.clear()
    assert experiment.main(["--preset", "tiny-generalise", "--seeds", "1", "--quick", "--arms", "mgrpo",
                            "--out", str(tmp_path / "exp2"), "--report", str(tmp_path / "rep2")]) == 0
    assert evaluated == [] and "--about" not in reports[-1]
    monkeypatch.setattr(experiment, "evaluate_unseen", lambda run_dir, log: 1)
    assert experiment.main(["--preset", "tiny-blind", "--seeds", "1", "--quick", "--arms", "mgrpo",
                            "--checkpoint", str(ship), "--out", str(tmp_path / "exp3"),
                            "--report", str(tmp_path / "rep3")]) == 1
    assert "python -m harness eval-unseen" in capsys.readouterr().err
