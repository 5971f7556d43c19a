"""Deliberately broken advantage rules for the negative control of ``tests/harness/test_rl_works.py``.

Used through the config key ``<role>.advantage_fn`` (``harness.train_config.RoleTrainConfig``), e.g.
``planner.advantage_fn=tests.support.broken_advantage:sign_flipped``; the role processes run from
the repository root, so this module is importable there.
"""

from __future__ import annotations

from collections.abc import Sequence

from mgrpo.advantage import group_advantages


def sign_flipped(rewards: Sequence[float]) -> list[float]:
    """Minus the advantages of docs/paper.md: pushes the policy *away* from its better rollouts."""
    return [-a for a in group_advantages(rewards)]
