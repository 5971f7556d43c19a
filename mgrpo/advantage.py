"""Group-relative advantages for M-GRPO (docs/paper.md §Advantages; arXiv 2511.13288, Sec. 3).

``A_i = (R_i - mean(R)) / std(R)`` over one group, with the *population* standard deviation
(ddof = 0), as in the paper:

- planner group: the K rollouts of a query (``R_M``);
- sub-agent group: the ``d * K`` aligned items of a query, duplicates counted (``R_S``).

A group whose rewards are all equal gets advantage 0 for every member, never NaN.

Deliberate choices and deviations:
- TRL normalises with Bessel's correction (ddof = 1) and ``std + 1e-4``; we do neither (docs/paper.md).
  A group is treated as all-equal when ``std <= ZERO_STD_TOL * max(1, |mean R|)``, which absorbs
  floating-point round-off (e.g. the same reward computed along two paths) without affecting real
  reward differences; such a group gets exact zeros.
- A group of one has std 0 and gets ``[0.0]``; an empty group gets ``[]``.
- Non-finite rewards raise ``ValueError`` (a NaN reward is an upstream bug, not something to hide).
- Pure Python floats (groups are small; numpy's per-call overhead would dominate). Two-pass
  mean/variance; if a sum of finite rewards overflows, the group is rescaled first (advantages are
  scale-invariant).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import repeat
from numbers import Integral
from operator import mul, sub, truediv

__all__ = ["ZERO_STD_TOL", "group_advantages", "grouped_advantages", "has_zero_std"]

#: Relative tolerance below which a group's standard deviation counts as zero.
ZERO_STD_TOL = 1e-12


def _bad_reward(rewards: Sequence[float], name: str = "rewards") -> ValueError | None:
    """The error for the first non-numeric or non-finite reward, if any (the slow path)."""
    for i, r in enumerate(rewards):
        try:
            x = float(r)
        except (TypeError, ValueError):
            return ValueError(f"{name}[{i}]={r!r} is not a number")
        if not math.isfinite(x):
            return ValueError(f"{name}[{i}]={r!r} is not finite; rewards must be finite numbers")
    return None


def _as_floats(rewards: Sequence[float]) -> list[float]:
    if isinstance(rewards, (str, bytes)):
        raise ValueError("rewards must be a sequence of numbers, got a string")
    try:
        return list(map(float, rewards))
    except (TypeError, ValueError):
        raise _bad_reward(rewards) from None  # type: ignore[misc]


def _standardise(values: list[float]) -> list[float] | None:
    """``(x - mean) / std`` (ddof = 0), or None when the group's std counts as zero.

    Validates finiteness on the way: a NaN or infinity makes the plain sum non-finite.
    """
    n = len(values)
    if n < 2:
        if n and not math.isfinite(values[0]):
            raise _bad_reward(values)  # type: ignore[misc]
        return None
    total = sum(values)
    if not math.isfinite(total):
        err = _bad_reward(values)
        if err is not None:
            raise err
        return _standardise_rescaled(values)  # all finite, but the sum overflowed
    mean = total / n
    # map() with operator functions keeps the per-element work in C (groups are evaluated for
    # every query of every step; see tests/mgrpo/test_math_perf.py).
    dev = list(map(sub, values, repeat(mean, n)))
    var = sum(map(mul, dev, dev)) / n  # population variance (ddof = 0)
    if not math.isfinite(var):
        return _standardise_rescaled(values)
    std = math.sqrt(var)
    # An all-equal group has std ~ eps * |mean| from round-off in the mean; all-equal groups with
    # mean 0 have std exactly 0.
    if std <= ZERO_STD_TOL * max(1.0, abs(mean)):
        return None
    return list(map(truediv, dev, repeat(std, n)))


def _standardise_rescaled(values: list[float]) -> list[float] | None:
    # Advantages are scale-invariant; dividing by max|R| avoids overflow in the sums.
    scale = max(map(abs, values))
    return _standardise([x / scale for x in values])


def has_zero_std(rewards: Sequence[float]) -> bool:
    """True when the group's advantages are all zero (all-equal rewards, one member, or empty).

    For the ``frac_zero_std_groups`` metric (docs/report.md).
    """
    return _standardise(_as_floats(rewards)) is None


def group_advantages(rewards: Sequence[float]) -> list[float]:
    """Advantages ``(R - mean) / std`` (population std) of one group; zeros if all equal.

    >>> group_advantages([1, 0, 0, 1])
    [1.0, -1.0, -1.0, 1.0]
    >>> group_advantages([0.5, 0.5])
    [0.0, 0.0]
    """
    values = _as_floats(rewards)
    adv = _standardise(values)
    return [0.0] * len(values) if adv is None else adv


def grouped_advantages(rewards: Sequence[float], group_size: int) -> list[float]:
    """Advantages of a flat list made of consecutive groups of ``group_size`` rewards.

    E.g. a batch of Q queries × K rollouts laid out query-major (TRL's layout with
    ``num_generations = K``), or Q queries × d·K aligned sub-agent items.
    """
    if isinstance(group_size, bool) or not isinstance(group_size, Integral) or group_size < 1:
        raise ValueError(f"group_size={group_size!r} must be an int >= 1 (K for the planner, d*K for the sub-agent)")
    values = _as_floats(rewards)
    if len(values) % group_size:
        raise ValueError(
            f"len(rewards)={len(values)} is not a multiple of group_size={group_size}; "
            "pass whole groups laid out consecutively"
        )
    out: list[float] = []
    for start in range(0, len(values), group_size):
        adv = _standardise(values[start : start + group_size])
        out.extend([0.0] * group_size if adv is None else adv)
    return out
