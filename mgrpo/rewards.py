"""M-GRPO reward rules for the planner (main agent) and the sub-agent.

Implements docs/paper.md §Rewards (arXiv 2511.13288, Sec. 3, reward design):

- planner:   ``R_M(k)   = w_format * r_format + w_correct * r_correct(k)``
- sub-agent: ``R_S(k,i) = w_format * r_format + w_main * r_correct(k) + w_expert * r_expert(k,i)``

where ``r_correct(k)`` is the *planner's* final correctness in rollout k (copied to every
sub-agent call of that rollout) and ``r_expert`` is a judge's score of the subtask result.
Both rewards are 0 when the agent's own output format was invalid anywhere in its trajectory
(so a format error also zeroes the correctness and expert terms, as in the paper).

These are small pure functions: no config objects, no I/O. The trainers pass the configured
weights in.

Deliberate choices where the paper is silent:
- ``r_format`` is binary: 1 when ``format_ok`` is true (the reward is 0 otherwise anyway).
- ``correct``/``main_correct``/``expert`` may be partial credit in [0, 1] (bool is accepted as
  0/1); anything outside [0, 1], NaN or non-numeric raises ``ValueError`` naming the argument.
  The components are validated even when ``format_ok`` is false, because an out-of-range value
  is a bug upstream whatever the format verdict.
- Weights must be finite and >= 0; they are *not* required to sum to 1 (they are config; the
  defaults do sum to 1, so the rewards then lie in [0, 1]).
"""

from __future__ import annotations

import math
from numbers import Real

__all__ = ["main_reward", "sub_reward"]


def _check_format_ok(format_ok: object) -> bool:
    # `in (True, False)` accepts bool, numpy.bool_ and 0/1, but rejects e.g. 2 or "yes",
    # which would otherwise be silently truthy.
    if isinstance(format_ok, (str, bytes)) or format_ok not in (True, False):
        raise ValueError(
            f"format_ok={format_ok!r} must be a bool (True when the agent's output format "
            "was valid throughout its trajectory)"
        )
    return bool(format_ok)


def _check_component(name: str, value: object) -> float:
    if isinstance(value, (str, bytes)) or not isinstance(value, Real):
        raise ValueError(f"{name}={value!r} must be a bool or a number in [0, 1]")
    x = float(value)
    if math.isnan(x) or not 0.0 <= x <= 1.0:
        raise ValueError(f"{name}={value!r} is outside [0, 1]; pass a score in [0, 1]")
    return x


def _check_weight(name: str, value: object) -> float:
    if isinstance(value, (str, bytes, bool)) or not isinstance(value, Real):
        raise ValueError(f"{name}={value!r} must be a finite number >= 0")
    x = float(value)
    if not math.isfinite(x) or x < 0.0:
        raise ValueError(f"{name}={value!r} must be a finite number >= 0; fix the reward weight in the config")
    return x


def main_reward(
    format_ok: bool,
    correct: bool | float,
    *,
    w_format: float = 0.1,
    w_correct: float = 0.9,
) -> float:
    """Planner reward ``R_M = w_format * r_format + w_correct * r_correct`` (docs/paper.md).

    Args:
        format_ok: the planner's output format was valid in every turn of the rollout.
        correct: the planner's final-answer correctness, bool or a score in [0, 1].
        w_format, w_correct: non-negative weights (paper defaults 0.1 and 0.9).

    Returns:
        The reward; 0.0 when ``format_ok`` is false.

    Raises:
        ValueError: a component outside [0, 1] or NaN, a negative/non-finite weight, or a
            non-bool ``format_ok``.
    """
    ok = _check_format_ok(format_ok)
    r_correct = _check_component("correct", correct)
    wf = _check_weight("w_format", w_format)
    wc = _check_weight("w_correct", w_correct)
    if not ok:
        return 0.0
    return wf * 1.0 + wc * r_correct


def sub_reward(
    format_ok: bool,
    main_correct: bool | float,
    expert: float,
    *,
    w_format: float = 0.1,
    w_main: float = 0.4,
    w_expert: float = 0.5,
) -> float:
    """Sub-agent reward ``R_S = w_format * r_format + w_main * r_correct + w_expert * r_expert``.

    Args:
        format_ok: *this sub-agent call's* output format was valid in every turn.
        main_correct: the planner's final correctness in the same rollout (bool or [0, 1]),
            shared by all sub-agent calls of that rollout.
        expert: the judge's score of this subtask result, in [0, 1].
        w_format, w_main, w_expert: non-negative weights (paper defaults 0.1, 0.4, 0.5).

    Returns:
        The reward; 0.0 when ``format_ok`` is false.

    Raises:
        ValueError: a component outside [0, 1] or NaN, a negative/non-finite weight, or a
            non-bool ``format_ok``.
    """
    ok = _check_format_ok(format_ok)
    r_main = _check_component("main_correct", main_correct)
    r_expert = _check_component("expert", expert)
    wf = _check_weight("w_format", w_format)
    wm = _check_weight("w_main", w_main)
    we = _check_weight("w_expert", w_expert)
    if not ok:
        return 0.0
    return wf * 1.0 + wm * r_main + we * r_expert
