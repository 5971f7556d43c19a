"""The M-GRPO clipped surrogate loss as a pure torch function (docs/paper.md §Objective).

Per agent, maximised separately (no gradient between agents, no KL term by default):

    J = 1/N * sum_i  min(rho_i * A_i, clip(rho_i, 1 - eps_low, 1 + eps_high) * A_i)

with N = K for the planner and N = d * K for the sub-agent (arXiv 2511.13288, Sec. 3: the
objective averages per trajectory). The loss is ``-J``.

``ratio_level``:
- ``"sequence"`` (default; the paper writes rho as a sequence-level ratio): GSPO-style,
  length-normalised ``rho_i = exp(mean over model tokens t of (logp_t - old_logp_t))``; the
  min/clip is applied once per trajectory. Its gradient w.r.t. ``logp_t`` is
  ``rho_i / n_i`` times the (possibly clipped-away) advantage, as in GSPO.
- ``"token"``: per-token ``rho_{i,t} = exp(logp_t - old_logp_t)``, per-token min/clip, averaged
  over the trajectory's model tokens, then over trajectories (1/N).

Tensors: ``logprobs``, ``old_logprobs``, ``mask`` of shape (B, T) (mask 1 = model token, 0 =
observation or padding, docs/architecture.md §The agent system ``env_mask``); ``advantages`` of shape (B,). Gradients flow to
``logprobs`` only (``old_logprobs`` and ``advantages`` are detached).

Deliberate choices (the paper is silent):
- A trajectory with no model tokens contributes 0 to the objective but still counts in the 1/N
  denominator (the paper averages over the fixed K or d·K). It is left out of ``clip_fraction``
  and ``ratio_mean`` (it has no ratio).
- ``num_trajectories`` overrides N (default B): when one group is split over several
  micro-batches, pass the whole group's count so that the micro-batch losses sum to the group
  average.
- Masked-out positions may hold anything (padding garbage, ``-inf``): log-ratios are selected with
  ``torch.where`` before ``exp``, so they never produce NaN in values or gradients.
- Ratios are not clamped (the math as written); half-precision inputs are computed in float32.
- ``clip_fraction`` counts where clipping binds, i.e. the gradient is cut: ``rho > 1 + eps_high``
  with ``A > 0`` or ``rho < 1 - eps_low`` with ``A < 0`` (TRL's convention), over model tokens
  for ``"token"`` and over trajectories with >= 1 model token for ``"sequence"``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from mgrpo.options import RATIO_LEVELS  # one definition, shared with the configs (pure, no torch)

__all__ = ["RATIO_LEVELS", "LossOutput", "clipped_surrogate_loss"]


@dataclass(frozen=True)
class LossOutput:
    """Result of :func:`clipped_surrogate_loss`.

    Attributes:
        loss: scalar, ``-J``; the only member that carries gradients.
        clip_fraction: fraction of ratios where clipping binds (low or high), detached scalar.
        clip_low_fraction: fraction with ``rho < 1 - eps_low`` and ``A < 0``.
        clip_high_fraction: fraction with ``rho > 1 + eps_high`` and ``A > 0``.
        ratio_mean: mean ratio over the same elements as ``clip_fraction`` (1.0 when none).
        n_model_tokens: number of model tokens in the batch (int).
    """

    loss: torch.Tensor
    clip_fraction: torch.Tensor
    clip_low_fraction: torch.Tensor
    clip_high_fraction: torch.Tensor
    ratio_mean: torch.Tensor
    n_model_tokens: int


def _check_eps(name: str, value: float, upper: float | None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name}={value!r} must be a finite number >= 0")
    if upper is not None and value >= upper:
        raise ValueError(f"{name}={value!r} must be < {upper} (the lower clip bound is 1 - {name})")
    return float(value)


def clipped_surrogate_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    ratio_level: Literal["sequence", "token"] = "sequence",
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    num_trajectories: int | None = None,
) -> LossOutput:
    """M-GRPO clipped surrogate loss ``-J`` (see the module docstring).

    Args:
        logprobs: (B, T) log-probabilities of the completion tokens under the current policy.
        old_logprobs: (B, T) log-probabilities under the sampling policy.
        advantages: (B,) one advantage per trajectory (applied to all its model tokens).
        mask: (B, T) 1 for model tokens, 0 for observation/padding tokens (bool or 0/1 numbers).
        ratio_level: ``"sequence"`` (GSPO-style, default) or ``"token"``.
        eps_low, eps_high: clip range ``[1 - eps_low, 1 + eps_high]``.
        num_trajectories: the denominator N (default B); must be >= B.

    Raises:
        ValueError: wrong shapes, an unknown ``ratio_level``, bad clip bounds, a mask with values
            other than 0/1, an empty batch, or ``num_trajectories < B``.
    """
    if ratio_level not in RATIO_LEVELS:
        raise ValueError(f"ratio_level={ratio_level!r} is not one of {RATIO_LEVELS}")
    eps_low = _check_eps("eps_low", eps_low, 1.0)
    eps_high = _check_eps("eps_high", eps_high, None)
    for name, t in (("logprobs", logprobs), ("old_logprobs", old_logprobs), ("advantages", advantages), ("mask", mask)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if logprobs.dim() != 2:
        raise ValueError(f"logprobs must have shape (B, T), got {tuple(logprobs.shape)}")
    if old_logprobs.shape != logprobs.shape:
        raise ValueError(
            f"old_logprobs has shape {tuple(old_logprobs.shape)}, expected {tuple(logprobs.shape)} like logprobs"
        )
    if mask.shape != logprobs.shape:
        raise ValueError(f"mask has shape {tuple(mask.shape)}, expected {tuple(logprobs.shape)} like logprobs")
    batch = logprobs.shape[0]
    if advantages.shape != (batch,):
        raise ValueError(f"advantages has shape {tuple(advantages.shape)}, expected ({batch},): one per trajectory")
    if batch == 0:
        raise ValueError("logprobs has 0 trajectories; pass a non-empty batch")
    if not logprobs.is_floating_point():
        raise ValueError(f"logprobs must be a floating-point tensor, got {logprobs.dtype}")
    if num_trajectories is None:
        denom = batch
    elif isinstance(num_trajectories, bool) or not isinstance(num_trajectories, int) or num_trajectories < batch:
        raise ValueError(
            f"num_trajectories={num_trajectories!r} must be an int >= the batch size {batch} "
            "(the group's K or d*K when a group spans micro-batches)"
        )
    else:
        denom = num_trajectories

    if mask.dtype == torch.bool:
        keep = mask
    else:
        if not bool(((mask == 0) | (mask == 1)).all()):
            raise ValueError("mask must hold only 0 and 1 (1 = model token, 0 = observation/padding)")
        keep = mask != 0

    dtype = torch.promote_types(logprobs.dtype, torch.float32)
    lp = logprobs.to(dtype)
    old = old_logprobs.detach().to(dtype)
    adv = advantages.detach().to(device=lp.device, dtype=dtype)
    keep = keep.to(lp.device)
    keep_f = keep.to(dtype)

    # where() (not multiplication by the mask) so that garbage/-inf at masked positions cannot
    # turn into NaN, in the value or in the gradient.
    log_ratio = torch.where(keep, lp - old, torch.zeros((), dtype=dtype, device=lp.device))
    n_tokens = keep_f.sum(dim=1)  # (B,)
    has_tokens = n_tokens > 0
    safe_n = n_tokens.clamp(min=1.0)
    low, high = 1.0 - eps_low, 1.0 + eps_high

    if ratio_level == "sequence":
        ratio = torch.exp(log_ratio.sum(dim=1) / safe_n)  # (B,)
        obj = torch.minimum(ratio * adv, ratio.clamp(low, high) * adv)
        # Empty trajectories: ratio is exp(0) = 1, so obj would be A; they must contribute 0.
        obj = torch.where(has_tokens, obj, torch.zeros((), dtype=dtype, device=lp.device))
        counted = has_tokens
        r_det = ratio.detach()
        is_low = (r_det < low) & (adv < 0) & counted
        is_high = (r_det > high) & (adv > 0) & counted
    else:
        ratio = torch.exp(log_ratio)  # (B, T)
        a = adv.unsqueeze(1)
        per_token = torch.minimum(ratio * a, ratio.clamp(low, high) * a)
        per_token = torch.where(keep, per_token, torch.zeros((), dtype=dtype, device=lp.device))
        obj = per_token.sum(dim=1) / safe_n
        counted = keep
        r_det = ratio.detach()
        is_low = (r_det < low) & (a < 0) & counted
        is_high = (r_det > high) & (a > 0) & counted

    loss = -obj.sum() / denom

    n_counted = counted.sum()
    denom_stats = n_counted.clamp(min=1).to(dtype)
    clip_low = is_low.sum().to(dtype) / denom_stats
    clip_high = is_high.sum().to(dtype) / denom_stats
    ratio_sum = torch.where(counted, r_det, torch.zeros((), dtype=dtype, device=lp.device)).sum()
    ratio_mean = torch.where(n_counted > 0, ratio_sum / denom_stats, torch.ones((), dtype=dtype, device=lp.device))
    return LossOutput(
        loss=loss,
        clip_fraction=clip_low + clip_high,
        clip_low_fraction=clip_low,
        clip_high_fraction=clip_high,
        ratio_mean=ratio_mean,
        n_model_tokens=int(n_tokens.sum().item()),
    )
