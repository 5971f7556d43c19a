"""The M-GRPO trainer options that two config classes declare, declared once (docs/paper.md, docs/architecture.md §Layout).

:class:`mgrpo.trainer.MGRPOConfig` (TRL's side) and the harness's per-role config
(``harness.train_config.RoleTrainConfig``, which ``harness.role.mgrpo_args`` forwards to
``MGRPOConfig``) both have the fields ``ratio_level``, ``loss_type``, ``epsilon_high``, ``bf16`` and
``gradient_checkpointing``. Their default, help text and choices live here, and both classes build
the field with :func:`option_field`, so the two declarations cannot drift apart. The value
domains (:data:`LOSS_TYPES`, :data:`RATIO_LEVELS`) live here too.

Why a module of its own: ``mgrpo/`` imports nothing from ``harness/`` (docs/architecture.md §Layers and dependency direction), and loading a run
config must not import torch or TRL (``mgrpo.trainer`` and ``mgrpo.loss`` do), so this module
imports neither. The field convention is TRL's, which :func:`harness.config.help_field` follows
too: ``field(default=..., metadata={"help": ..., "choices": [...]})``.

``mgrpo.loss`` imports :data:`RATIO_LEVELS` from here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = ["LOSS_TYPES", "OPTIONS", "RATIO_LEVELS", "TRL_LOSS_TYPES", "Option", "option_field"]

#: The loss types TRL 1.16's ``GRPOTrainer._compute_loss`` implements (run unchanged).
TRL_LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")
#: Everything ``loss_type`` accepts.
LOSS_TYPES = ("mgrpo", *TRL_LOSS_TYPES)
#: Importance-ratio levels of ``loss_type="mgrpo"`` (as in :data:`mgrpo.loss.RATIO_LEVELS`).
RATIO_LEVELS = ("sequence", "token")


@dataclass(frozen=True)
class Option:
    """One trainer option: its default, its help text and, when it has a closed set of values, its choices."""

    default: Any
    help: str
    choices: tuple[Any, ...] | None = None


#: The options declared both by ``MGRPOConfig`` and by the harness's role config.
OPTIONS: dict[str, Option] = {
    "ratio_level": Option(
        "sequence",
        "Importance ratio used by loss_type='mgrpo': 'sequence' (GSPO-style, length-normalised exp(mean log-ratio "
        "over model tokens), clipped once per trajectory; the paper's sequence-level ratio; default) or 'token' "
        "(per-token ratio and clip, averaged over the trajectory's model tokens).",
        RATIO_LEVELS,
    ),
    "loss_type": Option(
        "mgrpo",
        "Loss formulation. 'mgrpo' (default): the M-GRPO clipped surrogate of docs/paper.md "
        "(mgrpo.loss.clipped_surrogate_loss, ratio per `ratio_level`, clip range [1-epsilon, 1+epsilon_high], "
        "averaged 1/B over trajectories). Any of TRL's own loss types ('grpo', 'dr_grpo', 'dapo', 'bnpo', "
        "'cispo', 'sapo', 'luspo', 'vespo') runs TRL's loss unchanged, with the M-GRPO advantages.",
        LOSS_TYPES,
    ),
    "epsilon_high": Option(
        0.28,
        "Upper clip bound: the ratio is clipped to [1 - epsilon, 1 + epsilon_high]. M-GRPO default 0.28 "
        "(DAPO's clip-higher); None (MGRPOConfig only) means epsilon.",
    ),
    # bf16 and gradient_checkpointing default to None = "decide from the machine" (MGRPOConfig.__post_init__),
    # not to a default_factory: HfArgumentParser ignores default factories of bool fields.
    "bf16": Option(
        None,
        "Use bf16 mixed precision. None (default): False without CUDA (CPU autocast is slow and lossy for tiny "
        "models); with CUDA, True unless fp16 is set (TRL's rule).",
    ),
    "gradient_checkpointing": Option(
        None,
        "Trade compute for memory by recomputing activations. None (default): True with CUDA (TRL's default), "
        "False without (CPU models are small; checkpointing only costs time).",
    ),
}


def option_field(name: str) -> Any:
    """The dataclass field of option ``name`` (default, ``metadata={"help", "choices"}``), for either config class."""
    opt = OPTIONS[name]
    metadata: dict[str, Any] = {"help": opt.help}
    if opt.choices is not None:
        metadata["choices"] = list(opt.choices)
    return dataclasses.field(default=opt.default, metadata=metadata)
