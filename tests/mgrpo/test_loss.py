"""Tests for mgrpo.loss (docs/paper.md §Objective): values and gradients against a naive
per-trajectory Python loop, hand cases for the clip fraction, masking and validation."""

import math

import pytest
import torch

from mgrpo.loss import LossOutput, clipped_surrogate_loss

EPS_LOW, EPS_HIGH = 0.2, 0.28


def naive_loss(lp, old, adv, mask, level, eps_low=EPS_LOW, eps_high=EPS_HIGH, denom=None):
    """Direct transcription of docs/paper.md, one trajectory and one token at a time."""
    B, T = lp.shape
    total = lp.new_zeros(())
    for i in range(B):
        toks = [t for t in range(T) if bool(mask[i, t])]
        if not toks:
            continue  # contributes 0, still counted in the denominator
        a = float(adv[i])
        if level == "sequence":
            s = sum(lp[i, t] - old[i, t] for t in toks) / len(toks)
            rho = torch.exp(s)
            obj = torch.minimum(rho * a, torch.clamp(rho, 1 - eps_low, 1 + eps_high) * a)
        else:
            per = []
            for t in toks:
                rho = torch.exp(lp[i, t] - old[i, t])
                per.append(torch.minimum(rho * a, torch.clamp(rho, 1 - eps_low, 1 + eps_high) * a))
            obj = sum(per) / len(toks)
        total = total + obj
    return -total / (denom or B)


def random_batch(seed, B=6, T=9, spread=0.5, garbage=True):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g, dtype=torch.float64) * 3
    # Per-row offset so that sequence-level ratios also leave the clip range; per-token noise
    # so that token-level ratios do too.
    lp = old + spread * torch.randn(B, 1, generator=g, dtype=torch.float64) + spread * torch.randn(
        B, T, generator=g, dtype=torch.float64
    )
    mask = torch.rand(B, T, generator=g) < 0.6
    mask[0] = False  # a trajectory with no model tokens
    mask[1] = True
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    adv[2] = 0.0
    adv[3] = abs(adv[3]) + 0.1
    adv[4] = -abs(adv[4]) - 0.1
    if garbage:
        # Padding / observation positions may hold anything.
        lp = torch.where(mask, lp, torch.full_like(lp, -math.inf))
        old = torch.where(mask, old, torch.full_like(old, 50.0))
    return lp, old, adv, mask


@pytest.mark.parametrize("level", ["sequence", "token"])
@pytest.mark.parametrize("seed", range(8))
def test_matches_naive_loop_values_and_gradients(level, seed):
    lp, old, adv, mask = random_batch(seed)
    lp_a = lp.clone().requires_grad_(True)
    lp_b = lp.clone().requires_grad_(True)
    old_a = old.clone().requires_grad_(True)
    adv_a = adv.clone().requires_grad_(True)

    out = clipped_surrogate_loss(lp_a, old_a, adv_a, mask, ratio_level=level)
    out.loss.backward()
    ref = naive_loss(lp_b, old, adv, mask, level)
    ref.backward()

    assert torch.isfinite(out.loss)
    torch.testing.assert_close(out.loss, ref, rtol=1e-10, atol=1e-12)
    assert torch.isfinite(lp_a.grad).all()
    torch.testing.assert_close(lp_a.grad, torch.nan_to_num(lp_b.grad, nan=0.0), rtol=1e-10, atol=1e-12)
    assert (lp_a.grad[~mask] == 0).all()
    # gradients flow to logprobs only
    assert old_a.grad is None and adv_a.grad is None
    assert out.clip_fraction.requires_grad is False


@pytest.mark.parametrize("level", ["sequence", "token"])
def test_some_random_batches_actually_clip(level):
    # Guards the comparison above against only exercising the unclipped branch.
    fracs = []
    for seed in range(8):
        lp, old, adv, mask = random_batch(seed)
        fracs.append(float(clipped_surrogate_loss(lp, old, adv, mask, ratio_level=level).clip_fraction))
    assert max(fracs) > 0.1
    assert min(fracs) < 1.0


def test_sequence_hand_case_values_and_clip_fraction():
    # 4 trajectories of one model token each; ratios 1.5, 1.5, 0.5, 1.0.
    ratios = torch.tensor([1.5, 1.5, 0.5, 1.0], dtype=torch.float64)
    old = torch.zeros(4, 1, dtype=torch.float64)
    lp = torch.log(ratios).unsqueeze(1).requires_grad_(True)
    adv = torch.tensor([1.0, -1.0, -1.0, 2.0], dtype=torch.float64)
    mask = torch.ones(4, 1)
    out = clipped_surrogate_loss(lp, old, adv, mask, ratio_level="sequence")
    # objectives: min(1.5, 1.28)=1.28 (high clip binds), min(-1.5, -1.28)=-1.5 (no clip),
    # min(-0.5, -0.8)=-0.8 (low clip binds), 2.0
    expected = -(1.28 - 1.5 - 0.8 + 2.0) / 4
    assert out.loss.item() == pytest.approx(expected)
    assert out.clip_fraction.item() == pytest.approx(0.5)
    assert out.clip_low_fraction.item() == pytest.approx(0.25)
    assert out.clip_high_fraction.item() == pytest.approx(0.25)
    assert out.ratio_mean.item() == pytest.approx(1.125)
    assert out.n_model_tokens == 4
    out.loss.backward()
    # clipped trajectories get no gradient; d(-rho*A/4)/dlp = -rho*A/4
    torch.testing.assert_close(
        lp.grad.squeeze(1), torch.tensor([0.0, 1.5 / 4, 0.0, -2.0 / 4], dtype=torch.float64)
    )


def test_sequence_ratio_is_length_normalised():
    # log-ratios +0.4 and -0.2 over two model tokens -> rho = exp(0.1), inside the clip range.
    lp = torch.tensor([[0.4, -0.2, 9.0]], dtype=torch.float64, requires_grad=True)
    old = torch.zeros(1, 3, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0]])
    out = clipped_surrogate_loss(lp, old, torch.tensor([1.0], dtype=torch.float64), mask)
    assert out.loss.item() == pytest.approx(-math.exp(0.1))
    assert out.clip_fraction.item() == 0.0
    out.loss.backward()
    torch.testing.assert_close(
        lp.grad, torch.tensor([[-math.exp(0.1) / 2, -math.exp(0.1) / 2, 0.0]], dtype=torch.float64)
    )


def test_token_hand_case_clip_fraction():
    # trajectory 0 (A=+1): ratios 1.5 (high clip), 1.0, 0.5 (not binding for A>0), padding
    # trajectory 1 (A=-1): ratios 0.5 (low clip), 1.5 (not binding for A<0)
    lp = torch.log(torch.tensor([[1.5, 1.0, 0.5, 1.0], [0.5, 1.5, 1.0, 1.0]], dtype=torch.float64))
    old = torch.zeros_like(lp)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.float32)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    out = clipped_surrogate_loss(lp, old, adv, mask, ratio_level="token")
    assert out.n_model_tokens == 5
    assert out.clip_fraction.item() == pytest.approx(2 / 5)
    assert out.clip_low_fraction.item() == pytest.approx(1 / 5)
    assert out.clip_high_fraction.item() == pytest.approx(1 / 5)
    obj0 = (1.28 + 1.0 + 0.5) / 3
    obj1 = (-0.8 - 1.5) / 2
    assert out.loss.item() == pytest.approx(-(obj0 + obj1) / 2)


@pytest.mark.parametrize("level", ["sequence", "token"])
def test_empty_trajectory_counts_in_denominator_only(level):
    lp, old, adv, mask = random_batch(3, garbage=False)
    full = clipped_surrogate_loss(lp, old, adv, mask, ratio_level=level)
    B = lp.shape[0]
    assert not mask[0].any()
    rest = clipped_surrogate_loss(lp[1:], old[1:], adv[1:], mask[1:], ratio_level=level)
    assert full.loss.item() == pytest.approx(rest.loss.item() * (B - 1) / B)
    # its advantage does not matter
    adv2 = adv.clone()
    adv2[0] = 100.0
    assert clipped_surrogate_loss(lp, old, adv2, mask, ratio_level=level).loss.item() == pytest.approx(
        full.loss.item()
    )


@pytest.mark.parametrize("level", ["sequence", "token"])
def test_all_empty_batch_is_zero_not_nan(level):
    lp = torch.randn(3, 4, requires_grad=True)
    out = clipped_surrogate_loss(lp, torch.randn(3, 4), torch.ones(3), torch.zeros(3, 4), ratio_level=level)
    assert out.loss.item() == 0.0
    assert out.clip_fraction.item() == 0.0
    assert out.ratio_mean.item() == 1.0
    assert out.n_model_tokens == 0
    out.loss.backward()
    assert (lp.grad == 0).all()


@pytest.mark.parametrize("level", ["sequence", "token"])
def test_num_trajectories_splits_group_over_micro_batches(level):
    lp, old, adv, mask = random_batch(5, B=8, garbage=False)
    whole = clipped_surrogate_loss(lp, old, adv, mask, ratio_level=level).loss
    parts = sum(
        clipped_surrogate_loss(lp[s], old[s], adv[s], mask[s], ratio_level=level, num_trajectories=8).loss
        for s in (slice(0, 3), slice(3, 8))
    )
    torch.testing.assert_close(parts, whole)
    with pytest.raises(ValueError, match=r"num_trajectories=2 must be an int >= the batch size 3"):
        clipped_surrogate_loss(lp[:3], old[:3], adv[:3], mask[:3], num_trajectories=2)


@pytest.mark.parametrize("level", ["sequence", "token"])
def test_on_policy_loss_is_minus_mean_advantage(level):
    # rho = 1 everywhere: the objective is the mean advantage over trajectories with tokens.
    lp, _, adv, mask = random_batch(1, garbage=False)
    out = clipped_surrogate_loss(lp, lp.clone(), adv, mask, ratio_level=level)
    has = mask.any(dim=1)
    assert out.loss.item() == pytest.approx(-(adv * has).sum().item() / len(adv))
    assert out.clip_fraction.item() == 0.0


def test_bool_and_float_masks_agree_and_half_precision_runs():
    lp, old, adv, mask = random_batch(2, garbage=False)
    a = clipped_surrogate_loss(lp, old, adv, mask)
    b = clipped_surrogate_loss(lp, old, adv, mask.to(torch.float32))
    torch.testing.assert_close(a.loss, b.loss)
    c = clipped_surrogate_loss(lp.to(torch.bfloat16), old.to(torch.bfloat16), adv.float(), mask.long())
    assert c.loss.dtype == torch.float32
    assert abs(c.loss.item() - a.loss.item()) < 0.05


def test_returns_loss_output():
    lp, old, adv, mask = random_batch(0, garbage=False)
    assert isinstance(clipped_surrogate_loss(lp, old, adv, mask), LossOutput)


def test_validation_messages():
    lp = torch.zeros(2, 3)
    old = torch.zeros(2, 3)
    adv = torch.zeros(2)
    mask = torch.ones(2, 3)
    with pytest.raises(ValueError, match=r"ratio_level='seq' is not one of \('sequence', 'token'\)"):
        clipped_surrogate_loss(lp, old, adv, mask, ratio_level="seq")
    with pytest.raises(ValueError, match=r"logprobs must have shape \(B, T\), got \(6,\)"):
        clipped_surrogate_loss(lp.flatten(), old, adv, mask)
    with pytest.raises(ValueError, match=r"old_logprobs has shape \(2, 4\), expected \(2, 3\)"):
        clipped_surrogate_loss(lp, torch.zeros(2, 4), adv, mask)
    with pytest.raises(ValueError, match=r"mask has shape \(3, 2\)"):
        clipped_surrogate_loss(lp, old, adv, torch.ones(3, 2))
    with pytest.raises(ValueError, match=r"advantages has shape \(2, 1\), expected \(2,\)"):
        clipped_surrogate_loss(lp, old, adv.unsqueeze(1), mask)
    with pytest.raises(ValueError, match="mask must hold only 0 and 1"):
        clipped_surrogate_loss(lp, old, adv, mask * 0.5)
    with pytest.raises(ValueError, match=r"eps_low=1\.0 must be < 1"):
        clipped_surrogate_loss(lp, old, adv, mask, eps_low=1.0)
    with pytest.raises(ValueError, match=r"eps_high=-0\.1 must be a finite number >= 0"):
        clipped_surrogate_loss(lp, old, adv, mask, eps_high=-0.1)
    with pytest.raises(ValueError, match="0 trajectories"):
        clipped_surrogate_loss(torch.zeros(0, 3), torch.zeros(0, 3), torch.zeros(0), torch.zeros(0, 3))
    with pytest.raises(ValueError, match="floating-point"):
        clipped_surrogate_loss(lp.long(), old, adv, mask)
    with pytest.raises(ValueError, match="advantages must be a torch.Tensor"):
        clipped_surrogate_loss(lp, old, [0.0, 0.0], mask)
