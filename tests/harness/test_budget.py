"""The experiment's time budget (issue "the embedded default learns", bad input): the estimate's
arithmetic against hand numbers, the calibration on a real tiny model, and an over-budget preset
refused before anything starts."""

from __future__ import annotations

import pytest

from harness.budget import (
    SFT_OVERHEAD,
    Calibration, EpisodeShape, calibrate, format_breakdown, padded_tokens, rollout_seconds, run_seconds,
    warmstart_seconds,
)

CAL = Calibration(sft_s_per_token=1e-4, prefill_s_per_token=1e-5, decode_s_per_step=0.01, decode_batch=16)
SHAPE = EpisodeShape(planner_turns=3, sub_calls=2, sub_turns=3, tokens_per_turn=20, planner_len=500,
                     sub_len=800, planner_sequences=100, sub_sequences=200)


def test_warmstart_seconds_by_hand():
    out = warmstart_seconds({"planner": 50_000, "joint": 160_000}, CAL, epochs=2, shape=SHAPE, check_tasks=0,
                            max_new_tokens=96)
    # padded tokens x epochs x calibrated s/token x TRL's measured overhead
    assert out["sft_planner_s"] == pytest.approx(50_000 * 2 * 1e-4 * SFT_OVERHEAD)  # 10 s x 1.75
    assert out["sft_joint_s"] == pytest.approx(160_000 * 2 * 1e-4 * SFT_OVERHEAD)  # 32 s x 1.75
    assert out["check_s"] == 0.0 and len(out) == 3


def test_padded_tokens_pads_each_batch_to_its_longest():
    # equal lengths: no padding, whatever the order
    assert padded_tokens([10] * 8, 4) == 80
    # one batch: everything padded to the longest
    assert padded_tokens([1, 2, 3, 10], 4) == 40
    # batch size 1: no padding; a last partial batch counts only its rows
    assert padded_tokens([5, 7, 9], 1) == 21 and padded_tokens([10] * 5, 4) == 50
    # mixed lengths in batches of 2: between the raw tokens and all-padded-to-the-longest
    mixed = [100, 100, 1000, 1000]
    assert sum(mixed) < padded_tokens(mixed, 2, shuffles=50) < 4 * 1000
    # grouped by length (sorted inside each mega-batch of 50 batches): short rows pair with short ones,
    # except at most one mixed pair per mega-batch
    rows = mixed * 50
    assert padded_tokens(rows, 2, grouped=True) <= sum(rows) + 2 * 900 * 2 < padded_tokens(rows, 2)


def test_rollout_seconds_by_hand():
    # turn batch: min(96, 1.5 * 20) = 30 decode steps of 0.01 s at the calibrated batch
    # planner: 3 turns x (0.3 s + 16 * 500/3 * 1e-5 s); sub: (3 - 1) delegating turns x 3 turns x 0.3 s
    # + prefill 16 * 2 * 800 * 1e-5 s
    expected = 3 * (0.3 + 16 * 500 / 3 * 1e-5) + 2 * 3 * 0.3 + 16 * 2 * 800 * 1e-5
    assert rollout_seconds(SHAPE, CAL, batch=16, max_new_tokens=96) == pytest.approx(expected)
    # a shorter turn limit caps the decode steps
    assert rollout_seconds(SHAPE, CAL, batch=16, max_new_tokens=10) < expected


def test_the_sub_roles_optimizer_step_adds_to_the_planners_unless_the_two_overlap():
    """With ``sub.serve: locked`` the planner's delegations wait for the sub role's optimizer step, so mgrpo's steps
    cost the sub-agent's three passes over its trajectories in full (make demo's mgrpo runs took 133 s against 82 s
    when it was counted half). With ``snapshot`` and ``max_lag`` (the tiny presets) the sub role trains while the
    planner rolls out its next step: a step costs the longer of the two (docs/performance.md)."""
    from harness.experiment import CONFIGS
    from harness.train_config import load_train_config

    paced = load_train_config(str(CONFIGS / "tiny-generalise" / "mgrpo.yaml"), [])
    assert (paced.sub.serve, paced.sub.max_lag) == ("snapshot", 1)
    locked = load_train_config(str(CONFIGS / "tiny-generalise" / "mgrpo.yaml"), ["sub.serve=locked"])
    frozen = run_seconds(locked, SHAPE, CAL, sub_trains=False, multi_agent=True)
    batch = locked.planner_groups * locked.k
    capped = SHAPE.capped(locked.rollout, multi_agent=True)
    sub_step = 3 * batch * capped.sub_calls * capped.sub_len * CAL.sft_s_per_token
    planner_step = frozen["steps_s"] / locked.planner_steps
    serial = run_seconds(locked, SHAPE, CAL, sub_trains=True, multi_agent=True)
    assert serial["steps_s"] - frozen["steps_s"] == pytest.approx(locked.planner_steps * sub_step)
    assert serial["eval_s"] == frozen["eval_s"] and serial["startup_s"] == frozen["startup_s"]
    overlapped = run_seconds(paced, SHAPE, CAL, sub_trains=True, multi_agent=True)
    assert overlapped["steps_s"] == pytest.approx(paced.planner_steps * max(planner_step, sub_step))
    unpaced = load_train_config(str(CONFIGS / "tiny-generalise" / "mgrpo.yaml"), ["sub.max_lag=null"])
    assert run_seconds(unpaced, SHAPE, CAL, sub_trains=True, multi_agent=True)["steps_s"] == pytest.approx(
        serial["steps_s"])


def test_from_examples_counts_model_tokens_per_turn():
    planner = [{"input_ids": [1] * 10, "labels": [-100] * 6 + [1] * 4}]
    sub = [{"input_ids": [1] * 20, "labels": [-100] * 12 + [1] * 8}] * 2
    shape = EpisodeShape.from_examples(planner, sub, planner_turns=2, sub_turns=2)
    assert shape.sub_calls == 2 and shape.planner_len == 10 and shape.sub_len == 20
    assert shape.tokens_per_turn == pytest.approx((4 + 8 + 8) / (2 + 4))


def test_calibrate_measures_a_real_model():
    from harness.models import ModelSpec, load_model

    model, _ = load_model(ModelSpec(name="tiny", seed=0))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cal = calibrate(model, sft_batch=2, sft_len=32, decode_batch=4, prompt_len=32, repeats=1)
    assert cal.sft_s_per_token > 0 and cal.prefill_s_per_token > 0 and cal.decode_s_per_step > 0
    assert all((before[k] == v).all() for k, v in model.state_dict().items())  # trained a copy
    text = format_breakdown({"warm start": 600.0, "mgrpo x 2": 300.0})
    assert "10.0 min" in text and "total" in text and "15.0 min" in text


def test_over_budget_preset_is_refused_before_it_starts(tmp_path, capsys):
    from harness.experiment import main

    out = tmp_path / "exp"
    rc = main(["--preset", "tiny", "--seeds", "1", "--quick", "--arms", "mgrpo", "--budget-min", "0.01",
               "--out", str(out), "--report", str(tmp_path / "report")])
    captured = capsys.readouterr()
    assert rc == 3, captured.out + captured.err
    assert "over the budget of 0.01 min" in captured.err and "nothing was started" in captured.err
    assert "warm start" in captured.out and "mgrpo x 1" in captured.out
    assert not out.exists()  # nothing ran: no warm start, no run directory


def test_shape_capped_by_the_presets_limits():
    from harness.rollout import RolloutConfig

    limits = RolloutConfig(planner_turns=4, sub_turns=2, max_delegations=1, context_tokens=700)
    multi = SHAPE.capped(limits, multi_agent=True)
    assert (multi.planner_turns, multi.sub_turns, multi.sub_calls, multi.sub_len) == (3, 2, 1, 700)
    # single agent: 3 + 2 x 3 = 9 turns cut to 4, its context (500 + 2 x 800) cut in proportion
    single = SHAPE.capped(limits, multi_agent=False)
    assert single.planner_turns == pytest.approx(4) and single.sub_calls == 0
    assert single.planner_len == pytest.approx(min(700, 2100 * 4 / 9))
    # an uncapped single agent costs its planner turns plus the sub-agent's turns, no sub prefill
    loose = SHAPE.capped(RolloutConfig(planner_turns=20, context_tokens=8000), multi_agent=False)
    assert rollout_seconds(loose, CAL, batch=16, max_new_tokens=96) == pytest.approx(9 * (0.3 + 16 * 2100 / 9 * 1e-5))


@pytest.mark.parametrize("done, expected", [(True, 20), (False, 300)])
def test_a_done_warm_start_takes_its_episode_shape_from_a_few_demonstration_worlds(monkeypatch, done, expected):
    import harness.budget as budget
    from harness.config import load_config
    from harness.warmstart import WarmstartConfig

    seen = []

    def stop(cfg):
        seen.append(cfg.demo_worlds)
        raise RuntimeError("stop")

    monkeypatch.setattr(budget, "prepare", stop)
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    cfg = load_config(WarmstartConfig, str(root / "baselines" / "configs" / "tiny-generalise" / "warmstart.yaml"))
    with pytest.raises(RuntimeError, match="stop"):
        budget.estimate_experiment(cfg, {}, 1, warmstart_done=done)
    assert seen == [expected] and cfg.demo_worlds == 300  # the preset's own config is left as it was
