"""Rollouts with the real tiny model and the ``hf`` backend (docs/architecture.md §The agent system, docs/models.md).

- decoding the ``env_mask == 1`` tokens gives exactly the generated text;
- sampling logprobs recomputed by a forward pass over the whole trajectory match the ones the
  backend returned, within ``LOGPROB_ATOL`` (fp32, same temperature; the difference is KV-cache
  vs full-sequence numerics only);
- with the backend's cross-turn KV reuse (prefix cache), greedy trajectories are identical to
  those without it, and finished episodes leave nothing cached;
- a group of K=8 episodes batched across episodes against the same 8 run one after another
  (pytest-benchmark, side by side; the target is >= 6x, docs/performance.md).
"""

from __future__ import annotations

import time

import pytest
import torch

from harness.backends import HFBackend, sampling_logprobs
from harness.models import load_model
from harness.rollout import AgentRuntime, Query, RolloutConfig, run_group
from tests.support.perf import figure

LOGPROB_ATOL = 1e-4


class EchoToolbox:
    def call(self, name, arguments):
        return f"[1] Result for {arguments}\nURL: http://127.0.0.1:1/page\nsnippet"


@pytest.fixture(scope="module")
def runtime():
    torch.set_num_threads(1)
    model, tok = load_model("tiny")
    return AgentRuntime(HFBackend(model, tok), tok)


def test_tiny_trajectories_are_consistent(runtime):
    cfg = RolloutConfig(k=4, planner_turns=3, max_new_tokens=24, temperature=1.0)
    res = run_group([Query("q", "Who founded Ardent Labs?")], runtime, cfg, toolbox=EchoToolbox(), seed=7)
    tok = runtime.tokenizer
    model = runtime.backend.model
    for ep in res.episodes:
        t = ep.trajectory
        assert t.n_turns >= 1 and t.end_reason in {"answer", "max_turns", "context", "format_error"}
        model_ids = [i for i, m in zip(t.completion_ids, t.env_mask) if m]
        assert sum(t.env_mask) > 0
        # the generated tokens, decoded, are exactly the turns (each without/with its stop token)
        turns = [m["content"] for m in t.messages if m["role"] == "assistant"]
        decoded = tok.decode(model_ids, skip_special_tokens=False)
        assert decoded.replace("<|im_end|>", "") == "".join(turns)
        # logprobs recomputed by one forward pass over the whole trajectory
        ids = torch.tensor([t.prompt_ids + t.completion_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(t.prompt_ids) - 1 : -1]
        recomputed = sampling_logprobs(logits, torch.tensor(t.completion_ids), cfg.temperature)
        mask = torch.tensor(t.env_mask, dtype=torch.bool)
        sampled = torch.tensor(t.logprobs)[mask]
        assert torch.allclose(recomputed[mask], sampled, atol=LOGPROB_ATOL), (
            (recomputed[mask] - sampled).abs().max()
        )
    # later turns reused the KV of earlier ones; finished episodes were released
    assert runtime.backend.cache_stats["reused_tokens"] > 0
    assert runtime.backend.cached_sequences == 0


def test_cross_turn_kv_reuse_keeps_greedy_trajectories(runtime):
    """The same greedy group with and without the backend's prefix cache: identical trajectories."""
    model, tok = runtime.backend.model, runtime.tokenizer
    cfg = RolloutConfig(k=3, planner_turns=3, max_new_tokens=20, temperature=0.0)
    queries = [Query("a", "Who founded Ardent Labs?"), Query("b", "Where is Qarth?")]
    runs = []
    for cache_bytes in (2**30, 0):
        backend = HFBackend(model, tok, prefix_cache_bytes=cache_bytes)
        res = run_group(queries, AgentRuntime(backend, tok), cfg, toolbox=EchoToolbox(), seed=3)
        runs.append([(e.trajectory.completion_ids, e.trajectory.env_mask, e.trajectory.end_reason) for e in res.episodes])
        if cache_bytes:
            assert backend.cache_stats["reused_tokens"] > 0 and backend.cached_sequences == 0
    assert runs[0] == runs[1]
    assert max(len(c) for c, _, _ in runs[0]) > 40  # several turns, so reuse was exercised


def _sequential(runtime, cfg, query):
    one = RolloutConfig(**{**cfg.__dict__, "k": 1})
    return [run_group([query], runtime, one, toolbox=EchoToolbox(), seed=s) for s in range(cfg.k)]


@pytest.mark.slow
@pytest.mark.perf
def test_cross_episode_batching_speedup(runtime, benchmark):
    """K=8 batched vs the same 8 episodes one after another, side by side in one process.

    Both sides are timed here with ``perf_counter`` (alternating, median of rounds) so the ratio
    is measured even when pytest-benchmark is disabled (under xdist); the batched side is also
    handed to the ``benchmark`` fixture. The ratio is reported in ``extra_info`` (target
    >= 6x); the assertion is only that batching wins, since these machines are noisy.
    """
    cfg = RolloutConfig(k=8, planner_turns=3, max_new_tokens=32)
    query = Query("q", "Who founded Ardent Labs?")

    def batched():
        return run_group([query], runtime, cfg, toolbox=EchoToolbox())

    batched()  # warm-up
    seq_times, batch_times = [], []
    for _ in range(3):
        t0 = time.perf_counter()
        _sequential(runtime, cfg, query)
        seq_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        result = batched()
        batch_times.append(time.perf_counter() - t0)
    sequential_s, batched_s = sorted(seq_times)[1], sorted(batch_times)[1]
    benchmark.pedantic(batched, rounds=1, iterations=1)
    tokens = result.stats["generated_tokens"]
    benchmark.extra_info.update(
        sequential_s=sequential_s, batched_s=batched_s, speedup=sequential_s / batched_s,
        generated_tokens_per_group=tokens, batched_tokens_per_s=tokens / batched_s,
    )
    figure(benchmark, "K=8 group of tiny-model episodes, batched vs one after another (median of 3)",
           sequential_s / batched_s, unit="x", target=6.0)
    print(f"K=8 group: sequential {sequential_s:.2f} s, batched {batched_s:.2f} s, "
          f"speedup {sequential_s / batched_s:.2f}x ({tokens} tokens, {tokens / batched_s:.0f} tokens/s batched)")
    assert sequential_s / batched_s > 1.0
