"""Tests for mgrpo.trainer (docs/trainer.md): the M-GRPO TRL glue on a tiny model.

A deterministic toy ``rollout_func`` builds multi-turn trajectories (model tokens, an observation
with ``env_mask`` 0, more model tokens, EOS) and a ``reward`` column from a fixed table, so every
expected value is known. The model is a random 2-layer Qwen3 (hidden 64, vocab 300) and the
tokenizer a word-level one built in memory: nothing is downloaded.
"""

from __future__ import annotations

import math
import os
import time
from functools import lru_cache

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
torch.set_num_threads(1)

from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from mgrpo.advantage import group_advantages  # noqa: E402
from mgrpo.loss import clipped_surrogate_loss  # noqa: E402
from mgrpo.trainer import PHASES, BatchRecord, MGRPOConfig, MGRPOTrainer, rollout_reward  # noqa: E402

K = 4  # rollouts per query (num_generations)
# Rewards per query and rollout index; q1 is an all-equal group (advantage 0 for every member).
REWARD_TABLE = {
    "q0": [0.0, 1.0, 0.25, 1.0],
    "q1": [0.5, 0.5, 0.5, 0.5],
    "q2": [1.0, 0.0, 0.0, 0.0],
}
QUERIES = sorted(REWARD_TABLE)
WORDS = (
    "search visit answer fox dog cat city river person founder company year page result "
    "the a of in is what who where when tool call response error"
).split()


# ----------------------------------------------------------------------------- fixtures
@lru_cache(maxsize=1)
def make_tokenizer():
    """A word-level tokenizer with ~300 entries, EOS/PAD set; built in memory (offline)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_end|>", "<unk>"]
    vocab_words = specials + WORDS + QUERIES + [f"w{i}" for i in range(300 - len(specials) - len(WORDS) - len(QUERIES))]
    vocab = {w: i for i, w in enumerate(vocab_words)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token="<unk>"
    )


def make_model(seed: int = 0):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tok = make_tokenizer()
    config = Qwen3Config(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Qwen3ForCausalLM(config)


class ToyRollout:
    """Deterministic fake agent trajectories, shaped like the harness's rollout output.

    ``trajectory``: model tokens, an observation (``env_mask`` 0), model tokens, EOS; with
    ``trailing_obs`` the observation comes last (after EOS), so its content cannot influence any
    model token's log-probability. ``obs_word`` changes the observation's content only.
    """

    def __init__(self, obs_word: str = "river", trailing_obs: bool = False, all_model_tokens: bool = False,
                 with_reward: bool = True, missing_reward: bool = False):
        self.obs_word = obs_word
        self.trailing_obs = trailing_obs
        self.all_model_tokens = all_model_tokens
        self.with_reward = with_reward
        self.missing_reward = missing_reward
        self.calls: list[list[str]] = []
        self.training_flags: list[bool] = []

    def trajectory(self, query: str, k: int) -> tuple[list[int], list[int]]:
        tok = make_tokenizer()
        enc = lambda text: tok.encode(text, add_special_tokens=False)  # noqa: E731
        first = enc(f"search {query} " + " ".join(f"w{(k * 7 + j) % 50}" for j in range(2 + k)))
        obs = enc(f"tool response {self.obs_word} {self.obs_word} page result")
        second = enc(f"answer w{60 + k} w{70 + 2 * k}")
        eos = [tok.eos_token_id]
        if self.trailing_obs:
            ids, mask = first + second + eos + obs, [1] * (len(first) + len(second) + 1) + [0] * len(obs)
        else:
            ids, mask = first + obs + second + eos, [1] * len(first) + [0] * len(obs) + [1] * (len(second) + 1)
        if self.all_model_tokens:
            mask = [1] * len(ids)
        return ids, mask

    def __call__(self, prompts, trainer):
        self.calls.append(list(prompts))
        self.training_flags.append(trainer.model.training)
        tok = make_tokenizer()
        seen: dict[str, int] = {}
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": None, "env_mask": [],
               "query_id": [], "rollout": []}
        rewards = []
        for prompt in prompts:
            k = seen.get(prompt, 0)
            seen[prompt] = k + 1
            ids, mask = self.trajectory(prompt, k)
            out["prompt_ids"].append(tok.encode(f"what is {prompt}", add_special_tokens=False))
            out["completion_ids"].append(ids)
            out["env_mask"].append(mask)
            out["query_id"].append(prompt)
            out["rollout"].append(k)
            table = REWARD_TABLE[prompt]  # groups larger than K reuse the table cyclically
            rewards.append(None if self.missing_reward else table[k % len(table)])
        if self.with_reward:
            out["reward"] = rewards
        return out


def make_args(tmp_path, **overrides) -> MGRPOConfig:
    kwargs = dict(
        output_dir=str(tmp_path / "out"),
        num_generations=K,
        per_device_train_batch_size=K * len(QUERIES),
        max_steps=1,
        learning_rate=1e-2,
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
    )
    kwargs.update(overrides)
    return MGRPOConfig(**kwargs)


def make_trainer(tmp_path, rollout=None, records=None, model=None, **overrides) -> MGRPOTrainer:
    rollout = ToyRollout() if rollout is None else rollout
    return MGRPOTrainer(
        make_model() if model is None else model,
        args=make_args(tmp_path, **overrides),
        rollout_func=rollout,
        train_dataset=Dataset.from_dict({"prompt": QUERIES}),
        processing_class=make_tokenizer(),
        on_batch=None if records is None else records.append,
    )


def score_batch(trainer: MGRPOTrainer, rollout: ToyRollout | None = None) -> dict:
    """One generation + scoring through the trainer (no optimizer step): the batch TRL trains on."""
    if rollout is not None:
        trainer.rollout_func = rollout
    trainer.model.train()
    inputs = [{"prompt": q} for q in QUERIES for _ in range(K)]  # TRL's RepeatSampler layout
    return trainer._generate_and_score_completions(inputs)


def independent_logps(model, batch, temperature=1.0) -> torch.Tensor:
    """Per-token log-probabilities of the completion from a plain forward pass (not TRL's path)."""
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    c = batch["completion_ids"].size(1)
    logits = model(input_ids=ids, attention_mask=attn).logits[:, -c - 1 : -1, :].float() / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)


def perturbed_old(logps: torch.Tensor, seed: int = 0, spread: float = 0.4) -> torch.Tensor:
    """Old log-probabilities that differ from the current ones, so ratios leave the clip range."""
    g = torch.Generator().manual_seed(seed)
    b, t = logps.shape
    return (logps.detach() + spread * torch.randn(b, 1, generator=g) + spread * torch.randn(b, t, generator=g)).float()


def params_vector(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for p in model.parameters()])


# ----------------------------------------------------------------------------- (1) training runs
@pytest.mark.parametrize("ratio_level", ["sequence", "token"])
def test_train_two_steps_runs_updates_and_logs(tmp_path, ratio_level):
    records: list[BatchRecord] = []
    rollout = ToyRollout()
    trainer = make_trainer(tmp_path, rollout=rollout, records=records, max_steps=2, ratio_level=ratio_level)
    before = params_vector(trainer.model)
    result = trainer.train()

    assert trainer.state.global_step == 2
    assert len(records) == 2 and [r.mode for r in records] == ["train", "train"]
    assert all(rollout.training_flags), "the rollout must be called with the model in train mode"
    # TRL hands the rollout each prompt repeated K times side by side (docs/trainer.md).
    for call in rollout.calls:
        assert len(call) == K * len(QUERIES)
        assert all(len(set(call[i : i + K])) == 1 for i in range(0, len(call), K))
    assert not torch.equal(before, params_vector(trainer.model)), "two optimizer steps left the weights unchanged"
    assert math.isfinite(result.training_loss)
    logs = [entry for entry in trainer.state.log_history if "advantage_abs_mean" in entry]
    assert len(logs) == 2  # logging_steps=1 by default
    for entry in logs:
        for key in ("frac_zero_std_groups", "policy_loss", "clip_ratio/region_mean", "entropy", "reward"):
            assert key in entry, key
        assert entry["frac_zero_std_groups"] == pytest.approx(1 / 3)  # q1 is all-equal
        assert "kl" not in entry  # beta = 0 by default


class SlowRollout(ToyRollout):
    """A rollout that takes at least ``SLOW_ROLLOUT_S`` (so its phase is known to be at least that)."""

    def __call__(self, prompts, trainer):
        time.sleep(SLOW_ROLLOUT_S)
        return super().__call__(prompts, trainer)


SLOW_ROLLOUT_S = 1.0


def test_each_step_logs_where_its_time_went(tmp_path):
    """time/<phase> per optimizer step (docs/performance.md): the rollout's own time, not counted again in
    scoring or the backward pass, and the phases together within the step's wall time."""
    trainer = make_trainer(tmp_path, rollout=SlowRollout(), max_steps=2)
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    logs = [e for e in trainer.state.log_history if "advantage_abs_mean" in e]
    assert len(logs) == 2
    for entry in logs:
        phases = {p: entry[f"time/{p}"] for p in PHASES}
        assert phases["rollout_s"] >= SLOW_ROLLOUT_S
        # the rollout's second is in rollout_s only (the toy model scores and trains in milliseconds)
        assert 0 < phases["score_s"] < SLOW_ROLLOUT_S and 0 < phases["forward_backward_s"] < SLOW_ROLLOUT_S, phases
        assert phases["optimizer_s"] > 0, phases
    assert sum(e[f"time/{p}"] for e in logs for p in PHASES) <= wall


# ----------------------------------------------------------------------------- (2) advantages
def test_advantages_are_group_advantages_of_logged_rewards(tmp_path):
    records: list[BatchRecord] = []
    trainer = make_trainer(tmp_path, records=records, max_steps=2)
    trainer.train()
    assert len(records) == 2
    for rec in records:
        assert rec.group_size == K and rec.local_slice == (0, K * len(QUERIES))
        # The logged rewards are the rollout's reward column, per (query_id, rollout).
        for qid, k, r in zip(rec.fields["query_id"], rec.fields["rollout"], rec.local_rewards):
            assert r == pytest.approx(REWARD_TABLE[qid][k])
        assert rec.reward_components["rollout_reward"] == rec.rewards
        groups = [rec.fields["query_id"][i : i + K] for i in range(0, len(rec.rewards), K)]
        assert all(len(set(g)) == 1 for g in groups), "a TRL group must be one query's K rollouts"
        n_zero = 0
        for start in range(0, len(rec.rewards), K):
            rewards = rec.rewards[start : start + K]
            advantages = rec.advantages[start : start + K]
            assert advantages == group_advantages(rewards)  # exactly, not approximately
            if len(set(rewards)) == 1:
                n_zero += 1
                assert advantages == [0.0] * K
            else:
                # TRL's own rule (Bessel std + 1e-4) gives other numbers: the override is active.
                t = torch.tensor(rewards)
                trl = ((t - t.mean()) / (t.std() + 1e-4)).tolist()
                assert max(abs(a - b) for a, b in zip(advantages, trl)) > 1e-2
        assert n_zero == 1
        # The tensor the loss trains on is exactly the local slice.
        torch.testing.assert_close(
            rec.batch["advantages"], torch.tensor(rec.local_advantages, dtype=torch.float32), rtol=0, atol=0
        )
    # The completions table TRL keeps shows our advantages, not TRL's.
    assert list(trainer._logs["advantages"]) == records[-1].advantages


def test_rewards_are_trl_weighted_sum_of_reward_funcs(tmp_path):
    def r_table(completions, reward, **kw):
        return reward

    def r_len(completions, completion_ids, **kw):
        return [float(len(ids)) for ids in completion_ids]

    records: list[BatchRecord] = []
    trainer = MGRPOTrainer(
        make_model(),
        reward_funcs=[r_table, r_len],
        args=make_args(tmp_path, reward_weights=[2.0, 0.5]),
        rollout_func=ToyRollout(),
        train_dataset=Dataset.from_dict({"prompt": QUERIES}),
        processing_class=make_tokenizer(),
        on_batch=records.append,
    )
    trainer.train()
    rec = records[0]
    a, b = rec.reward_components["r_table"], rec.reward_components["r_len"]
    expected = [2.0 * x + 0.5 * y for x, y in zip(a, b)]
    assert rec.rewards == pytest.approx(expected)
    for start in range(0, len(expected), K):
        assert rec.advantages[start : start + K] == group_advantages(rec.rewards[start : start + K])
    # Lengths differ within every group, so no group is all-equal any more.
    assert all(any(x != 0.0 for x in rec.advantages[s : s + K]) for s in range(0, len(expected), K))


def test_custom_advantage_fn_is_used(tmp_path):
    records: list[BatchRecord] = []
    trainer = make_trainer(tmp_path, records=records)
    trainer.advantage_fn = lambda rewards: [r - sum(rewards) / len(rewards) for r in rewards]  # Dr.GRPO-style
    score_batch(trainer)
    rec = records[-1]
    for s in range(0, len(rec.rewards), K):
        group = rec.rewards[s : s + K]
        assert rec.advantages[s : s + K] == pytest.approx([r - sum(group) / K for r in group])


# ----------------------------------------------------------------------------- (3) loss == mgrpo.loss
@pytest.mark.parametrize("ratio_level", ["sequence", "token"])
def test_mgrpo_loss_equals_direct_clipped_surrogate(tmp_path, ratio_level):
    trainer = make_trainer(tmp_path, ratio_level=ratio_level)
    batch = score_batch(trainer)
    model = trainer.model
    model.train()
    mask = batch["completion_mask"] * batch["tool_mask"]
    assert (mask == 0).any() and (mask == 1).any()

    # Old log-probabilities away from the current ones, so clipping binds on some trajectories.
    with torch.no_grad():
        old = perturbed_old(independent_logps(model, batch))
    batch = dict(batch, old_per_token_logps=old)

    model.zero_grad()
    loss = trainer.compute_loss(model, batch)
    loss.backward()
    grads_trainer = [p.grad.detach().clone() for p in model.parameters()]

    model.zero_grad()
    direct = clipped_surrogate_loss(
        independent_logps(model, batch), old, batch["advantages"], mask,
        ratio_level=ratio_level, eps_low=0.2, eps_high=0.28,
    )
    direct.loss.backward()
    grads_direct = [p.grad.detach().clone() for p in model.parameters()]

    assert float(direct.clip_fraction) > 0, "the test batch must exercise clipping"
    torch.testing.assert_close(loss.detach(), direct.loss.detach(), rtol=1e-5, atol=1e-6)
    for g1, g2 in zip(grads_trainer, grads_direct):
        torch.testing.assert_close(g1, g2, rtol=1e-4, atol=1e-6)
    logged = trainer._metrics["train"]
    assert logged["clip_ratio/region_mean"][-1] == pytest.approx(float(direct.clip_fraction), abs=1e-6)
    assert logged["policy_loss"][-1] == pytest.approx(float(direct.loss.detach()), rel=1e-5, abs=1e-6)


def test_mgrpo_loss_without_old_logps_uses_ratio_one(tmp_path):
    """num_iterations=1, generation aligned with steps: TRL leaves old logps out; ratio is exactly 1."""
    trainer = make_trainer(tmp_path)
    batch = score_batch(trainer)
    assert "old_per_token_logps" not in batch
    loss = trainer.compute_loss(trainer.model, batch)
    mask = (batch["completion_mask"] * batch["tool_mask"]).bool()
    adv = batch["advantages"]
    expected = -(adv * mask.any(dim=1)).sum() / adv.numel()  # rho = 1: -mean(A) over trajectories
    torch.testing.assert_close(loss.detach(), expected, rtol=0, atol=1e-6)
    assert trainer._metrics["train"]["ratio_mean"][-1] == pytest.approx(1.0)


def test_mgrpo_loss_divides_by_gradient_accumulation(tmp_path):
    """1/B over the accumulated batch: each micro-batch loss is its mean over trajectories / GA."""
    trainer = make_trainer(tmp_path)
    batch = score_batch(trainer)
    with torch.no_grad():
        batch = dict(batch, old_per_token_logps=perturbed_old(independent_logps(trainer.model, batch), seed=3))
        trainer.current_gradient_accumulation_steps = 1
        one = trainer.compute_loss(trainer.model, batch)
        trainer.current_gradient_accumulation_steps = 4
        four = trainer.compute_loss(trainer.model, batch)
    torch.testing.assert_close(four * 4, one)


# ----------------------------------------------------------------------------- (3b) unpadded forward
def ragged_batch() -> tuple[torch.Tensor, torch.Tensor, int]:
    """Left-padded prompts and right-padded completions of different lengths, as TRL lays them out; row 2's
    completion is masked out entirely (a truncated completion) and row 3 has a hole in its prompt mask."""
    g = torch.Generator().manual_seed(5)
    prompt_lens, completion_lens, p, c = [3, 7, 5, 6], [9, 4, 6, 12], 7, 12
    ids = torch.randint(3, 290, (4, p + c), generator=g)
    mask = torch.zeros(4, p + c, dtype=torch.long)
    for i, (pl, cl) in enumerate(zip(prompt_lens, completion_lens)):
        mask[i, p - pl : p] = 1
        mask[i, p : p + cl] = 1
    mask[2, p:] = 0
    mask[3, p - 4] = 0
    ids = ids.masked_fill(mask == 0, make_tokenizer().pad_token_id)
    return ids, mask, c


def test_unpadded_forward_gives_the_padded_log_probabilities_and_gradients(tmp_path):
    """Each row alone, cut to its attended span, scores what TRL's padded pass scores at every attended
    completion position (values, entropies, gradients); positions it does not score are 0."""
    trainer = make_trainer(tmp_path)
    ids, mask, c = ragged_batch()
    keep = mask[:, -c:].bool()
    results = {}
    for unpadded in (False, True):
        trainer.args.unpadded_forward = unpadded
        trainer.model.zero_grad()
        logps, ent, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, c, compute_entropy=True)
        (logps * keep).sum().backward()
        grads = [p.grad.detach().clone() for p in trainer.model.parameters()]
        results[unpadded] = (logps.detach(), ent.detach(), grads)
    (lp0, ent0, g0), (lp1, ent1, g1) = results[False], results[True]
    assert lp1.shape == lp0.shape == (4, c)
    torch.testing.assert_close(lp1[keep], lp0[keep], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent1[keep], ent0[keep], rtol=1e-5, atol=1e-5)
    assert torch.count_nonzero(lp1[~keep]) == 0 and torch.count_nonzero(ent1[~keep]) == 0
    for a, b in zip(g1, g0):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    # the control: a shifted mask scores other positions, so the comparison above can fail
    trainer.args.unpadded_forward = True
    shifted, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask.roll(1, dims=1), c)
    assert not torch.allclose(shifted[keep], lp0[keep], atol=1e-3)


def test_a_row_without_prompt_keeps_trls_padded_pass(tmp_path):
    """TRL scores such a row's first completion token from a padding position; per row it would have no position
    to score it from, so the whole batch keeps TRL's pass (the same values exactly)."""
    trainer = make_trainer(tmp_path)
    ids, mask, c = ragged_batch()
    mask[0, : ids.size(1) - c] = 0  # row 0: no prompt token
    out = {}
    for unpadded in (False, True):
        trainer.args.unpadded_forward = unpadded
        with torch.no_grad():
            out[unpadded] = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, c)[0]
    assert torch.equal(out[True], out[False])


def test_unpadded_forward_trains_the_same_step(tmp_path):
    """One optimizer step with the per-row pass and one with the padded pass end at the same weights."""
    after = []
    for unpadded in (False, True):
        trainer = make_trainer(tmp_path / str(unpadded), unpadded_forward=unpadded)
        trainer.train()
        after.append(params_vector(trainer.model))
    start = params_vector(make_model())
    assert (after[0] - start).abs().max() > 5e-3  # the step moved the weights (lr 1e-2)
    # within 1% of a step: Adam divides each gradient element by its own magnitude, which magnifies float
    # rounding in elements whose gradient is near 0
    torch.testing.assert_close(after[1], after[0], rtol=0, atol=1e-4)


# ----------------------------------------------------------------------------- (4) env_mask
def test_env_mask_zero_tokens_get_no_gradient(tmp_path, monkeypatch):
    trainer = make_trainer(tmp_path, ratio_level="token")
    batch = score_batch(trainer)
    with torch.no_grad():
        real = independent_logps(trainer.model, batch)
    leaf = real.clone().requires_grad_(True)
    entropies = torch.zeros_like(real)
    monkeypatch.setattr(trainer, "_get_per_token_logps_and_entropies", lambda *a, **k: (leaf, entropies, None))
    batch = dict(batch, old_per_token_logps=perturbed_old(real, seed=1, spread=0.1))
    trainer.compute_loss(trainer.model, batch).backward()

    model_tok = (batch["completion_mask"] * batch["tool_mask"]).bool()
    obs_tok = batch["completion_mask"].bool() & ~batch["tool_mask"].bool()
    assert obs_tok.any()
    assert torch.count_nonzero(leaf.grad[obs_tok]) == 0, "observation tokens received gradient"
    assert torch.count_nonzero(leaf.grad[~batch["completion_mask"].bool()]) == 0, "padding received gradient"
    nonzero_adv = batch["advantages"] != 0
    assert torch.count_nonzero(leaf.grad[model_tok & nonzero_adv.unsqueeze(1)]) > 0


def test_observation_content_does_not_change_loss(tmp_path):
    """Observations after the last model token: changing their text leaves the loss unchanged,
    unless the env_mask marks them as model tokens (the control, so the test can fail)."""

    def loss_for(rollout, old_seed=2):
        trainer = make_trainer(tmp_path, rollout=rollout)
        batch = score_batch(trainer)
        with torch.no_grad():
            # Old log-probs that do not depend on the content (so the ratio does): about log(1/vocab).
            shape = batch["completion_ids"].shape
            old = perturbed_old(torch.full(shape, -math.log(len(make_tokenizer()))), seed=old_seed, spread=0.05)
            # Garbage at the observation positions of the old log-probs must not matter either.
            garbage = torch.full_like(old, 7.0 * (rollout.obs_word == "dog"))
            old = torch.where(batch["tool_mask"].bool(), old, garbage)
            return float(trainer.compute_loss(trainer.model, dict(batch, old_per_token_logps=old)))

    a = loss_for(ToyRollout(obs_word="river", trailing_obs=True))
    b = loss_for(ToyRollout(obs_word="dog", trailing_obs=True))
    assert a == pytest.approx(b, abs=1e-7)
    c = loss_for(ToyRollout(obs_word="river", trailing_obs=True, all_model_tokens=True))
    d = loss_for(ToyRollout(obs_word="dog", trailing_obs=True, all_model_tokens=True))
    assert abs(c - d) > 1e-4


# ----------------------------------------------------------------------------- (5) TRL loss types
@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_trl_loss_types_still_work(tmp_path, loss_type):
    records: list[BatchRecord] = []
    trainer = make_trainer(tmp_path, records=records, loss_type=loss_type, max_steps=1)
    before = params_vector(trainer.model)
    trainer.train()
    assert not torch.equal(before, params_vector(trainer.model))
    entry = next(e for e in trainer.state.log_history if "advantage_abs_mean" in e)
    assert "clip_ratio/region_mean" in entry and math.isfinite(entry["loss"])
    assert "ratio_mean" not in entry  # only the mgrpo loss logs it: TRL's own loss code ran
    rec = records[0]
    for s in range(0, len(rec.rewards), K):
        assert rec.advantages[s : s + K] == group_advantages(rec.rewards[s : s + K])

    # On a recorded batch, the trainer's loss is TRL's own _compute_loss (unchanged code path).
    batch = score_batch(trainer)
    with torch.no_grad():
        batch = dict(batch, old_per_token_logps=perturbed_old(independent_logps(trainer.model, batch), seed=4))
        ours = trainer.compute_loss(trainer.model, batch)
        trl = GRPOTrainer._compute_loss(trainer, trainer.model, batch)
        mgrpo_value = clipped_surrogate_loss(
            independent_logps(trainer.model, batch), batch["old_per_token_logps"], batch["advantages"],
            batch["completion_mask"] * batch["tool_mask"], ratio_level="sequence",
        ).loss
    torch.testing.assert_close(ours, trl)
    assert abs(float(ours) - float(mgrpo_value)) > 1e-6


# ----------------------------------------------------------------------------- (6) config errors
def test_config_defaults_suit_cpu(tmp_path):
    args = make_args(tmp_path)
    assert args.loss_type == "mgrpo" and args.ratio_level == "sequence"
    assert args.beta == 0.0 and args.epsilon == 0.2 and args.epsilon_high == 0.28 and args.num_iterations == 1
    assert args.logging_steps == 1 and args.report_to in ("none", [], ["none"])
    assert args.group_size == K
    if not torch.cuda.is_available():
        assert args.use_cpu is True and args.bf16 is False and args.gradient_checkpointing is False
        assert args.unpadded_forward is None  # decided per micro-batch: its device and length


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (dict(num_generations=5), r"divisible by num_generations.*group size"),
        (dict(ratio_level="trajectory"), r"ratio_level='trajectory'.*'sequence'"),
        (dict(loss_type="ppo"), r"loss_type='ppo'"),
        (dict(scale_rewards="batch"), r"scale_rewards='batch'.*population std"),
        (dict(multi_objective_aggregation="normalize_then_sum"), r"multi_objective_aggregation"),
        (dict(top_entropy_quantile=0.5), r"loss_type='mgrpo'.*top_entropy_quantile"),
        (dict(delta=2.0), r"loss_type='mgrpo'.*delta"),
        (dict(epsilon=1.5), r"epsilon=1.5"),
    ],
)
def test_config_errors_are_clear(tmp_path, overrides, match):
    with pytest.raises(ValueError, match=match):
        make_args(tmp_path, **overrides)


def test_trl_loss_type_accepts_trl_only_options(tmp_path):
    args = make_args(tmp_path, loss_type="grpo", top_entropy_quantile=0.5)
    assert args.top_entropy_quantile == 0.5


def test_trainer_argument_errors(tmp_path):
    grpo_args = GRPOConfig(output_dir=str(tmp_path), num_generations=K, per_device_train_batch_size=K,
                           bf16=False, use_cpu=True, report_to="none")
    with pytest.raises(TypeError, match="MGRPOConfig"):
        MGRPOTrainer(make_model(), args=grpo_args, rollout_func=ToyRollout(),
                     train_dataset=Dataset.from_dict({"prompt": QUERIES}), processing_class=make_tokenizer())
    with pytest.raises(ValueError, match="reward_funcs"):
        MGRPOTrainer(make_model(), args=make_args(tmp_path),
                     train_dataset=Dataset.from_dict({"prompt": QUERIES}), processing_class=make_tokenizer())


def test_rollout_without_reward_column_fails_clearly(tmp_path):
    trainer = make_trainer(tmp_path, rollout=ToyRollout(with_reward=False))
    with pytest.raises(ValueError, match="'reward' column"):
        score_batch(trainer)


def test_missing_reward_is_an_error_not_a_zero_advantage(tmp_path):
    trainer = make_trainer(tmp_path, rollout=ToyRollout(missing_reward=True))
    with pytest.raises(ValueError, match="no reward"):
        score_batch(trainer)


def test_rollout_reward_validates_length():
    assert rollout_reward(["a", "b"], reward=[1, 0.5]) == [1.0, 0.5]
    with pytest.raises(ValueError, match="2 rewards for 3 completions"):
        rollout_reward(["a", "b", "c"], reward=[1, 0])


def test_config_parses_from_cli_like_trl_configs(tmp_path):
    from trl import TrlParser

    (args,) = TrlParser(MGRPOConfig).parse_args_into_dataclasses(
        ["--output_dir", str(tmp_path), "--ratio_level", "token", "--num_generations", "4",
         "--per_device_train_batch_size", "8"]
    )
    assert isinstance(args, MGRPOConfig) and args.ratio_level == "token" and args.loss_type == "mgrpo"
    if not torch.cuda.is_available():  # the machine-dependent defaults resolve through the parser too
        assert args.use_cpu is True and args.bf16 is False and args.gradient_checkpointing is False
    with pytest.raises(SystemExit):  # argparse rejects a choice outside RATIO_LEVELS
        TrlParser(MGRPOConfig).parse_args_into_dataclasses(["--output_dir", str(tmp_path), "--ratio_level", "x"])


def test_checkpoint_and_resume(tmp_path):
    """TRL/Trainer checkpoints work unchanged: save at step 1, resume to step 2."""
    records: list[BatchRecord] = []
    trainer = make_trainer(tmp_path, records=records, max_steps=1, save_strategy="steps", save_steps=1)
    trainer.train()
    ckpt = tmp_path / "out" / "checkpoint-1"
    assert (ckpt / "trainer_state.json").exists() and (ckpt / "optimizer.pt").exists()
    resumed = make_trainer(tmp_path, records=records, max_steps=2, save_strategy="no")
    resumed.train(resume_from_checkpoint=str(ckpt))
    assert resumed.state.global_step == 2 and len(records) == 2


class BehaviourRollout(ToyRollout):
    """ToyRollout that reports sampling log-probabilities: ``shift`` below the trainer's own on model tokens
    (``None`` for all-NaN), and optionally a ``loss_weight`` column."""

    def __init__(self, model, shift=0.5, weights=None, nan=False):
        super().__init__()
        self.model, self.shift, self.weights, self.nan = model, shift, weights, nan

    def __call__(self, prompts, trainer):
        out = super().__call__(prompts, trainer)
        out["logprobs"] = []
        with torch.no_grad():
            for p_ids, c_ids in zip(out["prompt_ids"], out["completion_ids"]):
                ids = torch.tensor([p_ids + c_ids])
                logits = self.model(input_ids=ids).logits[0, len(p_ids) - 1: -1].float()
                lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(c_ids).unsqueeze(-1)).squeeze(-1)
                out["logprobs"].append([float("nan")] * len(c_ids) if self.nan else (lp - self.shift).tolist())
        if self.weights is not None:
            out["loss_weight"] = [self.weights(q, i) for i, q in enumerate(out["query_id"])]
        return out


def test_behaviour_logprobs_are_the_old_policy_and_recompute_ignores_them(tmp_path):
    model = make_model()
    behaviour = make_trainer(tmp_path, model=model, old_logprobs="behaviour")
    batch = score_batch(behaviour, BehaviourRollout(model, shift=0.5))
    behaviour.compute_loss(model, batch)
    # sequence ratio = exp(mean log-ratio) = exp(0.5) on every trajectory: the behaviour policy was older
    assert behaviour._metrics["train"]["ratio_mean"][-1] == pytest.approx(math.exp(0.5), rel=1e-3)
    recompute = make_trainer(tmp_path / "r", model=model)
    assert recompute.args.old_logprobs == "recompute"
    batch = score_batch(recompute, BehaviourRollout(model, shift=0.5))
    recompute.compute_loss(model, batch)
    assert recompute._metrics["train"]["ratio_mean"][-1] == pytest.approx(1.0)
    # no usable behaviour log-probabilities (NaN): the recomputed ones, ratio 1
    batch = score_batch(behaviour, BehaviourRollout(model, nan=True))
    behaviour.compute_loss(model, batch)
    assert behaviour._metrics["train"]["ratio_mean"][-1] == pytest.approx(1.0)


def test_loss_weight_zero_leaves_a_trajectory_out_of_the_loss(tmp_path):
    model = make_model()
    trainer = make_trainer(tmp_path, model=model)
    full = score_batch(trainer, BehaviourRollout(model, shift=0.0))
    dropped = score_batch(trainer, BehaviourRollout(model, shift=0.0, weights=lambda q, i: 0.0 if q == "q0" else 1.0))
    assert dropped["loss_weight"].tolist() == [0.0] * K + [1.0] * (2 * K)
    torch.testing.assert_close(dropped["advantages"], full["advantages"])  # still in its group
    mask = (full["completion_mask"] * full["tool_mask"]).bool()
    adv = full["advantages"]
    keep = mask.any(dim=1) & (dropped["loss_weight"] > 0)
    loss = trainer.compute_loss(model, dropped)
    torch.testing.assert_close(loss.detach(), -(adv * keep).sum() / adv.numel(), rtol=0, atol=1e-6)
    none = score_batch(trainer, BehaviourRollout(model, shift=0.0, weights=lambda q, i: 0.0))
    assert float(trainer.compute_loss(model, none).detach()) == 0.0


def test_bad_old_logprobs_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match=r"old_logprobs='stale' is not one of \('recompute', 'behaviour'\)"):
        make_args(tmp_path, old_logprobs="stale")


def test_the_training_order_of_an_epoch_does_not_depend_on_the_epochs_before_it():
    """A resumed run starts a fresh sampler and skips the batches it trained: the epoch it resumes in must be
    ordered as in the uninterrupted run (docs/reliability.md). Epoch 0 keeps TRL's order."""
    from trl.trainer.utils import RepeatSampler

    from mgrpo.trainer import EpochSeededRepeatSampler

    data = list(range(12))
    uninterrupted = EpochSeededRepeatSampler(data, mini_repeat_count=2, batch_size=2, seed=3)
    orders = []
    for epoch in range(3):
        uninterrupted.set_epoch(epoch)
        orders.append(list(uninterrupted))
    for epoch in range(3):
        resumed = EpochSeededRepeatSampler(data, mini_repeat_count=2, batch_size=2, seed=3)
        resumed.set_epoch(epoch)
        assert list(resumed) == orders[epoch]
    assert orders[0] == list(RepeatSampler(data, mini_repeat_count=2, batch_size=2, seed=3))
    assert orders[1] != orders[0] and sorted(orders[1]) == sorted(orders[0])
