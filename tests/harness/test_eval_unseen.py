"""``python -m harness eval-unseen`` (harness/eval_unseen.py; docs/evaluation.md, "Unseen worlds"): a run's held-out
accuracy on worlds it never trained on, before (step 0) and after RL, from its own config, in ``eval_unseen/``."""

from __future__ import annotations

import fnmatch
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from benchmarks.runners import task_seed
from harness.config import ConfigError, to_dict
from harness.eval_unseen import evaluate_unseen, pytest_argv, unseen_plan
from harness.records import read_json, read_tasks, write_provenance
from harness.train_config import load_train_config

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = ["gaia.person.*"]


def tiny_run(tmp_path: Path, **unseen) -> Path:
    """An mgrpo run folder as ``python -m harness train`` leaves it (config.yaml, provenance, a planner and a
    sub-agent checkpoint at step 2) with the tiny model's random weights, short turns, and ``eval.unseen``."""
    from harness.models import ModelSpec, load_model

    cache = str(tmp_path / "cache")
    overrides = ["trainer=mgrpo", f"models.cache_dir={cache}", "rollout.max_new_tokens=8", "rollout.planner_turns=1",
                 "rollout.sub_turns=1", "tasks.benchmarks=[gaia]", f"tasks.templates={TEMPLATES}",
                 *(f"eval.unseen.{k}={v}" for k, v in unseen.items())]
    cfg = load_train_config(str(REPO / "baselines" / "configs" / "tiny" / "mgrpo.yaml"), overrides)
    run = tmp_path / "runs" / "mgrpo-s3"
    model, tokenizer = load_model(ModelSpec(name="tiny", cache_dir=cache))
    for role in ("planner", "sub"):
        model.save_pretrained(run / role / "checkpoints" / "checkpoint-2")
        tokenizer.save_pretrained(run / role / "checkpoints" / "checkpoint-2")
    (run / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
    write_provenance(run, cfg, [3], trainer="mgrpo", arm="mgrpo", mark_running=False)
    return run


def test_the_plan_and_the_command_come_from_the_runs_config(tmp_path):
    """Step 0 and the last planner checkpoint, per world; the run's styles, templates, world size, seeds and the
    configured runs and temperature; the run's own world and a greedy run repeated are refused when the config
    loads."""
    run = tmp_path / "run"
    (run / "planner" / "checkpoints" / "checkpoint-4").mkdir(parents=True)
    for name in ("config.json", "model.safetensors"):
        (run / "planner" / "checkpoints" / "checkpoint-4" / name).write_text("{}")
    cfg = load_train_config(str(REPO / "baselines" / "configs" / "tiny-blind" / "mgrpo.yaml"), ["trainer=mgrpo"])
    assert unseen_plan(run, cfg) == [(0, 1), (0, 2), (4, 1), (4, 2)]
    argv = pytest_argv(run, cfg, 4, 2, tmp_path / "tasks", workers=2)
    joined = " ".join(argv)
    for part in ("--trainer mgrpo", "--eval-step 4", "--world-seed 2", "--world-size tiny", "--bench local_gaia",
                 "--inference-runs 4", "--temperature 0.7", "-n 2", f"--world-tasks {tmp_path / 'tasks'}"):
        assert part in joined, joined
    assert argv[argv.index("--templates") + 1] == ",".join(cfg.tasks.templates)
    with pytest.raises(ConfigError, match=r"holds world.seed=0, the world the run trains on"):
        load_train_config(str(REPO / "baselines" / "configs" / "tiny-blind" / "mgrpo.yaml"),
                          ["trainer=mgrpo", "eval.unseen.worlds=[0,1]"])
    with pytest.raises(ConfigError, match=r"repeats one greedy run"):
        load_train_config(str(REPO / "baselines" / "configs" / "tiny-blind" / "mgrpo.yaml"),
                          ["trainer=mgrpo", "eval.unseen.temperature=0"])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match="no config.yaml"):
        evaluate_unseen(empty)


@pytest.mark.slow
def test_eval_unseen_writes_before_and_after_records_of_other_worlds_and_resumes(tmp_path):
    """End to end through the command line: the tasks of world 5 are written once, step 0 and step 2 are each one
    ``pytest benchmarks/`` session whose records (the run's templates only, 2 sampled runs each) land in
    eval_unseen/ and never in eval/; a second call does nothing; the report has the before/after table."""
    run = tiny_run(tmp_path, worlds="[5]", n_test=60, runs=2, temperature=1.0)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "XDIST_"))}
    cmd = [sys.executable, "-m", "harness", "eval-unseen", str(run), "--workers", "1"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "unseen world 5, step 0" in proc.stdout and "unseen world 5, step 2" in proc.stdout
    assert "mgrpo evaluation: trainer=mgrpo" in proc.stdout  # the suite's table, passed on
    assert not (run / "eval").exists()
    per_step = {}
    for step in (0, 2):
        recs = read_tasks(run / "eval_unseen" / str(step) / "local_gaia.jsonl").records
        assert recs and {r.extra["world_seed"] for r in recs} == {5}
        assert all(any(fnmatch.fnmatchcase(r.extra["template"], p) for p in TEMPLATES) for r in recs)
        assert {r.inference_run for r in recs} == {0, 1} and {r.temperature for r in recs} == {1.0}
        # a task's runs are the rollouts of one group drawn from the run's seed hashed with the task id: before and
        # after draw from the same seeds, and no two tasks from the same
        assert all(r.sample_seed == task_seed(3, r.task_id) for r in recs)
        assert len({r.sample_seed for r in recs}) == len({r.task_id for r in recs})
        assert {r.step for r in recs} == {step}
        per_step[step] = recs
    assert {r.task_id for r in per_step[0]} == {r.task_id for r in per_step[2]}
    assert per_step[0][0].extra["weights"]["planner"]["source"] == "started"
    assert per_step[2][0].extra["weights"]["planner"]["source"] == "checkpoint"
    done = read_json(run / "eval_unseen" / "done.json")["done"]
    assert [(d["step"], d["world"]) for d in done] == [(0, 5), (2, 5)]
    n = len(per_step[0])

    again = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "pytest" not in again.stdout, again.stdout
    assert len(read_tasks(run / "eval_unseen" / "0" / "local_gaia.jsonl").records) == n

    rep = subprocess.run([sys.executable, "-m", "harness.report", "--runs", str(tmp_path / "runs"), "--out",
                          str(tmp_path / "report"), "--bootstrap", "100"], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=300)
    assert rep.returncode == 0, rep.stdout + rep.stderr
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## Held-out accuracy on unseen worlds, before and after RL" in md
    assert f"| local_gaia | mgrpo | {0:.3f} |" in md  # random weights answer nothing, before or after
