"""The stage-2 hard filter (harness/filter.py, harness/role/tasks.py; docs/training.md "Two stages and the
hard filter"): it removes the tasks the filtering system solves, every arm reads the identical list, and a
filter written for another world, selection or version is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.filter import main, run_filter
from harness.role.tasks import FILTER_FILE, FILTER_META, TaskSetError, candidate_tasks, generate_run_tasks, task_key
from harness.train_config import load_train_config

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "baselines" / "configs" / "tiny"
ARMS = ("mgrpo", "frozen_sub", "single_agent", "mgrpo_align_none")
SMALL = ["tasks.n_train=4"]  # 12 candidates over the three styles


@pytest.fixture(scope="module")
def expert_filter(tmp_path_factory):
    """The scripted expert at noise 0.5, four attempts per candidate: it solves some tasks every time,
    some sometimes, some never."""
    out = tmp_path_factory.mktemp("filter")
    cfg = load_train_config(str(TINY / "mgrpo.yaml"), SMALL)
    meta = run_filter(cfg, out, k=4, expert_noise=0.5)
    rows = [json.loads(line) for line in (out / FILTER_FILE).read_text().splitlines()]
    return out, meta, rows


def test_the_filter_scores_every_candidate_k_times(expert_filter):
    out, meta, rows = expert_filter
    cfg = load_train_config(str(TINY / "mgrpo.yaml"), SMALL)
    _, candidates, _ = candidate_tasks(cfg)
    assert [r["task_id"] for r in rows] == [task_key(t) for t in candidates] and len(rows) == 12
    for r in rows:
        assert r["k"] == 4 and len(r["predictions"]) == 4 and r["success_rate"] == r["solved"] / 4
    assert meta["n_tasks"] == 12 and meta["system"] == {"kind": "expert", "noise": 0.5} and meta["k"] == 4
    # a system that solves some tasks and not others, or the test shows nothing
    assert 0 < sum(r["solved"] for r in rows) < 4 * len(rows)
    assert any(r["success_rate"] > 0.25 for r in rows) and any(r["success_rate"] <= 0.25 for r in rows)


def test_every_arm_trains_on_the_identical_filtered_list(expert_filter):
    out, _, rows = expert_filter
    hard = [r["task_id"] for r in rows if r["success_rate"] <= 0.25]
    lists = {}
    for arm in ARMS:
        cfg = load_train_config(str(TINY / f"{arm}.yaml"), [*SMALL, f"tasks.hard_filter={out}",
                                                           "planner.groups_per_step=1"])
        lists[arm] = [task_key(t) for t in generate_run_tasks(cfg).train]
    assert all(v == hard for v in lists.values()), lists
    # the tasks the system solves are gone
    assert len(hard) < len(rows)
    solved_often = {r["task_id"] for r in rows if r["success_rate"] > 0.25}
    assert solved_often and not solved_often & set(hard)


def test_the_model_system_the_config_starts_from_is_filtered(tmp_path, capsys):
    """The real path: the config's planner and sub-agent (untrained tiny models) answer K sampled episodes."""
    out = tmp_path / "f"
    rc = main(["--config", str(TINY / "mgrpo.yaml"), "--out", str(out), "--k", "2", "tasks.n_train=1",
               "tasks.benchmarks=[gaia]", "rollout.planner_turns=2", "rollout.sub_turns=2", "rollout.max_new_tokens=16"])
    assert rc == 0
    meta = json.loads((out / FILTER_META).read_text())
    rows = [json.loads(line) for line in (out / FILTER_FILE).read_text().splitlines()]
    assert meta["system"]["kind"] == "models" and meta["system"]["planner"] == "tiny" and meta["k"] == 2
    assert len(rows) == meta["n_tasks"] >= 1 and all(r["k"] == 2 and len(r["predictions"]) == 2 for r in rows)
    assert "kept at tasks.hard_filter_max_success=0.25" in capsys.readouterr().out


def test_a_filter_for_other_candidates_is_refused(expert_filter):
    out, _, _ = expert_filter
    cfg = load_train_config(str(TINY / "mgrpo.yaml"), ["tasks.n_train=5", f"tasks.hard_filter={out}"])
    with pytest.raises(TaskSetError, match=r"other candidate tasks .* tasks.n_train: 4 in the filter, 5 in the config"):
        generate_run_tasks(cfg)
    cfg = load_train_config(str(TINY / "mgrpo.yaml"), [*SMALL, "world.seed=1", f"tasks.hard_filter={out}"])
    with pytest.raises(TaskSetError, match="world.seed: 0 in the filter, 1 in the config"):
        generate_run_tasks(cfg)


def test_an_edited_missing_or_foreign_filter_is_refused(expert_filter, tmp_path):
    import shutil

    out, _, _ = expert_filter
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    cfg = load_train_config(str(TINY / "mgrpo.yaml"), [*SMALL, f"tasks.hard_filter={copy}"])
    rows = (copy / FILTER_FILE).read_text().splitlines()
    (copy / FILTER_FILE).write_text("\n".join(rows[:-1]) + "\n")
    with pytest.raises(TaskSetError, match="does not match the sha256"):
        generate_run_tasks(cfg)
    meta = json.loads((copy / FILTER_META).read_text())
    (copy / FILTER_META).write_text(json.dumps({**meta, "format": "mgrpo-filter/0"}))
    with pytest.raises(TaskSetError, match="another filter version"):
        generate_run_tasks(cfg)
    (copy / FILTER_META).unlink()
    with pytest.raises(TaskSetError, match="no filter.json there .* python -m harness filter"):
        generate_run_tasks(cfg)


def test_the_paper_stage2_arms_share_one_filter_and_frozen_sub_starts_from_the_cotrained_checkpoint():
    from harness.role.tasks import filter_selection

    paper = ROOT / "baselines" / "configs" / "paper"
    cfgs = {arm: load_train_config(str(paper / f"{arm}_stage2.yaml")) for arm in ("mgrpo", "frozen_sub", "single_agent")}
    assert len({c.tasks.hard_filter for c in cfgs.values()}) == 1
    assert len({json.dumps(filter_selection(c), sort_keys=True) for c in cfgs.values()}) == 1
    assert cfgs["frozen_sub"].models.planner == cfgs["mgrpo"].models.planner
    assert cfgs["frozen_sub"].models.sub == cfgs["mgrpo"].models.sub


def test_bad_k_is_a_clear_error(tmp_path, capsys):
    assert main(["--config", str(TINY / "mgrpo.yaml"), "--out", str(tmp_path), "--k", "0", *SMALL]) == 2
    assert "--k=0" in capsys.readouterr().err
