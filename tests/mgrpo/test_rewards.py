"""Tests for mgrpo.rewards (docs/paper.md §Rewards)."""

import math

import numpy as np
import pytest

from mgrpo.rewards import main_reward, sub_reward


def test_main_reward_defaults_hand_computed():
    assert main_reward(True, True) == pytest.approx(1.0)
    assert main_reward(True, False) == pytest.approx(0.1)
    assert main_reward(True, 0.5) == pytest.approx(0.1 + 0.45)
    assert main_reward(False, True) == 0.0
    assert main_reward(False, False) == 0.0


def test_sub_reward_defaults_hand_computed():
    assert sub_reward(True, 1, 0.5) == pytest.approx(0.75)
    assert sub_reward(True, True, 1.0) == pytest.approx(1.0)
    assert sub_reward(True, False, 0.0) == pytest.approx(0.1)
    assert sub_reward(True, False, 1.0) == pytest.approx(0.6)
    assert sub_reward(True, 1, 0.0) == pytest.approx(0.5)
    assert sub_reward(False, True, 1.0) == 0.0
    assert sub_reward(False, 0.3, 0.2) == 0.0


def test_custom_weights():
    assert main_reward(True, True, w_format=0.0, w_correct=1.0) == pytest.approx(1.0)
    assert main_reward(True, 0.5, w_format=0.2, w_correct=0.8) == pytest.approx(0.6)
    assert sub_reward(True, 1, 1, w_format=0.0, w_main=0.0, w_expert=1.0) == pytest.approx(1.0)
    assert sub_reward(True, 0, 0.4, w_format=0.3, w_main=0.2, w_expert=0.5) == pytest.approx(0.5)


def test_returns_plain_float():
    assert type(main_reward(True, True)) is float
    assert type(sub_reward(True, 1, 0.5)) is float
    assert type(sub_reward(False, 1, 0.5)) is float


@pytest.mark.parametrize("bad", [1.3, -0.1, math.nan, math.inf])
def test_expert_out_of_range_names_argument(bad):
    with pytest.raises(ValueError, match=r"expert=.* is outside \[0, 1\]"):
        sub_reward(True, 1, bad)


def test_expert_message_exact():
    with pytest.raises(ValueError, match=r"^expert=1\.3 is outside \[0, 1\]"):
        sub_reward(True, 1, 1.3)


@pytest.mark.parametrize("bad", [2, -1, 1.0001, math.nan])
def test_correct_out_of_range(bad):
    with pytest.raises(ValueError, match=r"^correct="):
        main_reward(True, bad)
    with pytest.raises(ValueError, match=r"^main_correct="):
        sub_reward(True, bad, 0.5)


def test_components_validated_even_when_format_invalid():
    with pytest.raises(ValueError, match="expert"):
        sub_reward(False, 1, 1.5)
    with pytest.raises(ValueError, match="correct"):
        main_reward(False, -0.5)


@pytest.mark.parametrize("bad", ["yes", 2, None, 0.5])
def test_format_ok_must_be_bool(bad):
    with pytest.raises(ValueError, match="format_ok"):
        main_reward(bad, True)
    with pytest.raises(ValueError, match="format_ok"):
        sub_reward(bad, True, 0.5)


def test_non_numeric_component():
    with pytest.raises(ValueError, match="correct"):
        main_reward(True, "1")
    with pytest.raises(ValueError, match="expert"):
        sub_reward(True, 1, None)


@pytest.mark.parametrize(
    "kwargs,name",
    [({"w_format": -0.1}, "w_format"), ({"w_correct": -1.0}, "w_correct"), ({"w_correct": math.nan}, "w_correct")],
)
def test_main_negative_weights_raise(kwargs, name):
    with pytest.raises(ValueError, match=name):
        main_reward(True, True, **kwargs)


@pytest.mark.parametrize(
    "kwargs,name",
    [({"w_format": -0.1}, "w_format"), ({"w_main": -0.4}, "w_main"), ({"w_expert": -1e-9}, "w_expert")],
)
def test_sub_negative_weights_raise(kwargs, name):
    with pytest.raises(ValueError, match=name):
        sub_reward(True, True, 0.5, **kwargs)


def test_numpy_scalars_accepted():
    assert main_reward(np.bool_(True), np.float64(1.0)) == pytest.approx(1.0)
    assert sub_reward(np.bool_(True), np.int64(1), np.float32(0.5)) == pytest.approx(0.75)
