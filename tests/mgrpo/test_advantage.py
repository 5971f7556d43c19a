"""Tests for mgrpo.advantage (docs/paper.md §Advantages: population std, all-equal group -> 0)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mgrpo.advantage import ZERO_STD_TOL, group_advantages, grouped_advantages, has_zero_std


def test_hand_computed():
    assert group_advantages([1, 0, 0, 1]) == [1.0, -1.0, -1.0, 1.0]
    # population std of [0, 1, 2] is sqrt(2/3)
    s = math.sqrt(2 / 3)
    assert group_advantages([0.0, 1.0, 2.0]) == pytest.approx([-1 / s, 0.0, 1 / s])
    # one correct of four: mean 0.25, std sqrt(0.1875)
    s = math.sqrt(0.1875)
    assert group_advantages([1, 0, 0, 0]) == pytest.approx([0.75 / s, -0.25 / s, -0.25 / s, -0.25 / s])


def test_population_not_bessel():
    # ddof=1 would give [0.7071..., -0.7071...]; ddof=0 gives exactly +-1.
    assert group_advantages([1.0, 0.0]) == [1.0, -1.0]


def test_all_equal_is_zero():
    assert group_advantages([0.5] * 4) == [0.0] * 4
    assert group_advantages([0.0] * 8) == [0.0] * 8
    assert has_zero_std([0.5] * 4)


def test_round_off_equal_group_is_zero():
    # The same reward reached along two float paths differs in the last bit.
    a, b = 0.1 + 0.2, 0.3
    assert a != b
    assert group_advantages([a, b, a, b]) == [0.0] * 4
    assert has_zero_std([a, b])


def test_single_and_empty():
    assert group_advantages([0.7]) == [0.0]
    assert group_advantages([]) == []
    assert has_zero_std([0.7]) and has_zero_std([])


def test_small_real_difference_not_zeroed():
    adv = group_advantages([0.0, 1e-6])
    assert adv == pytest.approx([-1.0, 1.0])
    assert not has_zero_std([0.0, 1e-6])


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_raises(bad):
    with pytest.raises(ValueError, match=r"rewards\[1\]=.* is not finite"):
        group_advantages([0.0, bad, 1.0])


def test_non_numeric_raises():
    with pytest.raises(ValueError, match=r"rewards\[0\]"):
        group_advantages(["a", 1.0])
    with pytest.raises(ValueError, match="string"):
        group_advantages("0101")


def test_grouped():
    out = grouped_advantages([1, 0, 0, 1, 0.5, 0.5, 0.5, 0.5], 4)
    assert out == [1.0, -1.0, -1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    assert grouped_advantages([], 8) == []


def test_grouped_validation():
    with pytest.raises(ValueError, match=r"len\(rewards\)=5 is not a multiple of group_size=4"):
        grouped_advantages([0.0] * 5, 4)
    with pytest.raises(ValueError, match="group_size"):
        grouped_advantages([0.0] * 4, 0)


finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(st.lists(finite, min_size=0, max_size=80))
def test_properties(rewards):
    adv = group_advantages(rewards)
    assert len(adv) == len(rewards)
    assert all(math.isfinite(a) for a in adv)
    if has_zero_std(rewards):
        assert adv == [0.0] * len(rewards)
    else:
        r = np.asarray(rewards)
        # Round-off in (r - mean) is ~eps * max|r|, so the attainable accuracy of the
        # standardised values degrades with max|r| / std; bound the check by it.
        cond = max(1.0, float(np.abs(r).max())) / float(r.std(ddof=0))
        tol = 1e-13 * cond * len(r) + 1e-9
        arr = np.asarray(adv)
        assert abs(arr.mean()) <= tol
        assert abs(arr.std(ddof=0) - 1.0) <= tol
        # order-preserving: the largest reward has the largest advantage
        i, j = int(r.argmax()), int(r.argmin())
        assert adv[i] > adv[j]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.1, 0.5, 0.55, 1.0]), min_size=2, max_size=64))
def test_properties_reward_like(rewards):
    adv = group_advantages(rewards)
    if len(set(rewards)) == 1:
        assert adv == [0.0] * len(rewards)
    else:
        assert abs(sum(adv)) < 1e-9
        assert np.std(adv) == pytest.approx(1.0, rel=1e-9)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(0, 100).map(lambda i: i / 100), min_size=1, max_size=10),
    st.floats(min_value=-100, max_value=100),
    st.floats(min_value=0.01, max_value=100),
)
def test_affine_invariance(rewards, shift, scale):
    base = group_advantages(rewards)
    moved = group_advantages([scale * r + shift for r in rewards])
    if len(set(rewards)) == 1:
        assert base == moved == [0.0] * len(rewards)
    else:
        assert moved == pytest.approx(base, abs=1e-6)


def test_tolerance_constant_is_tiny():
    assert 0 < ZERO_STD_TOL <= 1e-9


def test_huge_rewards_do_not_overflow():
    # The sum (first case) or the variance (second case) overflows; advantages are scale-invariant.
    assert group_advantages([1e308, -1e308, 1e308]) == pytest.approx(group_advantages([1.0, -1.0, 1.0]))
    assert group_advantages([1e200, -1e200]) == pytest.approx([1.0, -1.0])
    assert not has_zero_std([1e200, -1e200])
