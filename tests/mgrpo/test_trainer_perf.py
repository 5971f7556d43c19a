"""Performance of the M-GRPO TRL glue (docs/trainer.md; issue target: an M-GRPO
optimizer step costs at most 1.15x a stock ``GRPOTrainer`` step).

Side by side in one process: an :class:`MGRPOTrainer` step (``loss_type="mgrpo"``, M-GRPO
advantages, ``on_batch`` hook) and a stock ``GRPOTrainer`` step (TRL's default loss type and
advantages), on the same trajectories (same toy ``rollout_func``), the same initial weights and the
same training arguments. One step = rollout + scoring + loss + backward + optimizer step, driven
through ``Trainer.training_step`` as ``Trainer.train`` does. Rounds alternate between the two
trainers so that machine load affects both alike; the ratio of medians goes to ``extra_info``.
Only a very loose bound is asserted (< 2.0), never absolute wall-clock times.
"""

from __future__ import annotations

import statistics
import time

import pytest
import torch
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from mgrpo.trainer import MGRPOConfig, MGRPOTrainer, rollout_reward
from tests.support.perf import figure
from tests.mgrpo.test_trainer import QUERIES, K, ToyRollout, make_model, make_tokenizer

ROUNDS = 16


def _common(tmp_path, name, group_size):
    return dict(
        output_dir=str(tmp_path / name),
        num_generations=group_size,
        per_device_train_batch_size=group_size * len(QUERIES),
        learning_rate=1e-4,
        epsilon=0.2,
        epsilon_high=0.28,
        beta=0.0,
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
    )


def _prepared(trainer):
    """Set up what Trainer.train would before its first step (optimizer, accumulation count)."""
    trainer.create_optimizer_and_scheduler(num_training_steps=10 * ROUNDS)
    trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps
    return trainer


def _step(trainer) -> float:
    """One optimizer step as Trainer.train runs it; returns the loss."""
    inputs = [{"prompt": q} for q in QUERIES for _ in range(trainer.num_generations)]  # RepeatSampler layout
    loss = trainer.training_step(trainer.model, inputs, None)
    trainer.optimizer.step()
    trainer.lr_scheduler.step()
    trainer.model.zero_grad(set_to_none=True)
    for mode in trainer._metrics.values():  # Trainer.log would clear these every step
        mode.clear()
    return float(loss)


def _timed(trainer) -> float:
    start = time.perf_counter()
    _step(trainer)
    return time.perf_counter() - start


# K = 4 (a planner-sized group) and 16 (a sub-agent group, d*K with d = 4); 3 queries per step.
@pytest.mark.perf
@pytest.mark.parametrize("group_size", [K, 4 * K])
def test_mgrpo_step_vs_stock_grpo_step(tmp_path, benchmark, group_size):
    torch.set_num_threads(1)
    dataset = Dataset.from_dict({"prompt": QUERIES})
    records = []
    mgrpo = _prepared(
        MGRPOTrainer(
            make_model(seed=0),
            args=MGRPOConfig(**_common(tmp_path, "mgrpo", group_size), loss_type="mgrpo", ratio_level="sequence"),
            rollout_func=ToyRollout(),
            train_dataset=dataset,
            processing_class=make_tokenizer(),
            on_batch=records.append,
        )
    )
    stock = _prepared(
        GRPOTrainer(
            make_model(seed=0),
            reward_funcs=[rollout_reward],
            args=GRPOConfig(**_common(tmp_path, "stock", group_size)),  # TRL's default loss_type ("dapo")
            rollout_func=ToyRollout(),
            train_dataset=dataset,
            processing_class=make_tokenizer(),
        )
    )
    assert stock.loss_type != "mgrpo" and mgrpo.loss_type == "mgrpo"

    for trainer in (mgrpo, stock):  # warm-up (first-call allocations, lazy inits)
        assert torch.isfinite(torch.tensor(_step(trainer)))

    t_mgrpo, t_stock = [], []
    for i in range(ROUNDS):
        order = (mgrpo, stock) if i % 2 == 0 else (stock, mgrpo)
        for trainer in order:
            (t_mgrpo if trainer is mgrpo else t_stock).append(_timed(trainer))
    med_mgrpo, med_stock = statistics.median(t_mgrpo), statistics.median(t_stock)
    ratio = med_mgrpo / med_stock

    benchmark.extra_info.update(
        {
            "mgrpo_step_s_median": round(med_mgrpo, 5),
            "stock_grpo_step_s_median": round(med_stock, 5),
            "ratio_mgrpo_over_stock": round(ratio, 4),
            "target_ratio": 1.15,
            "rounds": ROUNDS,
            "trajectories_per_step": group_size * len(QUERIES),
        }
    )
    figure(benchmark, f"M-GRPO optimizer step / stock TRL GRPO step, group size {group_size} (medians)", ratio,
           unit="x", target=1.15, better="lower")
    benchmark.pedantic(_step, args=(mgrpo,), rounds=5, iterations=1, warmup_rounds=0)

    assert len(records) >= ROUNDS + 1  # the hook saw every M-GRPO batch
    assert ratio < 2.0, f"M-GRPO step {med_mgrpo:.4f}s vs stock GRPO {med_stock:.4f}s (ratio {ratio:.2f})"


def _tiny_architecture_model(vocab: int = 1143):
    """The embedded default's architecture (docs/models.md: Qwen3, 4 layers, width 128), random weights."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(vocab_size=vocab, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=4096,
                         tie_word_embeddings=True, pad_token_id=0, bos_token_id=None, eos_token_id=2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return Qwen3ForCausalLM(config)


# A sub role's micro-batch on the tiny preset: prompts of about 290 tokens and multi-turn completions of
# 300-1,300 (measured from a tiny-generalise-rl run's trajectories, docs/performance.md); 8 rows here.
SUB_ROWS = 8


@pytest.mark.perf
def test_unpadded_forward_vs_padded_on_sub_role_rows(tmp_path, benchmark):
    """Forward + backward of TRL's scoring pass over a padded micro-batch, against one pass per row
    (``unpadded_forward``), side by side, rounds alternating; the ratio of medians is the figure."""
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    prompt_lens = torch.randint(260, 332, (SUB_ROWS,), generator=g).tolist()
    completion_lens = torch.randint(300, 1300, (SUB_ROWS,), generator=g).tolist()
    p, c = max(prompt_lens), max(completion_lens)
    ids = torch.randint(3, 1143, (SUB_ROWS, p + c), generator=g)
    mask = torch.zeros_like(ids)
    for i, (pl, cl) in enumerate(zip(prompt_lens, completion_lens)):
        mask[i, p - pl : p + cl] = 1
    ids = ids.masked_fill(mask == 0, 0)
    keep = mask[:, -c:].bool()

    trainer = MGRPOTrainer(
        _tiny_architecture_model(),
        args=MGRPOConfig(**_common(tmp_path, "unpadded", K), loss_type="mgrpo"),
        rollout_func=ToyRollout(),
        train_dataset=Dataset.from_dict({"prompt": QUERIES}),
        processing_class=make_tokenizer(),
    )

    def score(unpadded: bool) -> float:
        trainer.args.unpadded_forward = unpadded
        start = time.perf_counter()
        logps, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, c, compute_entropy=True)
        (logps * keep).sum().backward()
        trainer.model.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    score(True), score(False)  # warm-up
    times: dict[bool, list[float]] = {True: [], False: []}
    for i in range(3):
        for unpadded in ((True, False) if i % 2 == 0 else (False, True)):
            times[unpadded].append(score(unpadded))
    med_padded, med_unpadded = statistics.median(times[False]), statistics.median(times[True])
    ratio = med_padded / med_unpadded
    benchmark.extra_info.update({"padded_s_median": round(med_padded, 4), "unpadded_s_median": round(med_unpadded, 4),
                                 "rows": SUB_ROWS, "tokens": int(mask.sum()), "padded_positions": int(mask.numel())})
    figure(benchmark, f"scoring pass of {SUB_ROWS} sub-role rows, padded / one pass per row (medians)", ratio,
           unit="x", target=None, better="higher")
    benchmark.pedantic(score, args=(True,), rounds=1, iterations=1, warmup_rounds=0)
    assert ratio > 1.0, f"one pass per row {med_unpadded:.3f}s is not faster than padded {med_padded:.3f}s"
