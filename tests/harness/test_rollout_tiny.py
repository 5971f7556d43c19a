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


class _LeanDecoder:
    """One decoding step of the tiny Qwen3 model written as bare tensor operations (no modules, no cache
    objects, fused q/k/v and gate/up weights): the least per-call overhead a decode step can have on this CPU
    in eager PyTorch. Used only to measure how far batching can go (docs/performance.md), never to generate."""

    def __init__(self, model):
        c = model.config
        self.heads, self.kv_heads = c.num_attention_heads, c.num_key_value_heads
        self.head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        self.eps, self.rotary = c.rms_norm_eps, model.model.rotary_emb
        self.layers = [
            dict(qkv=torch.cat([l.self_attn.q_proj.weight, l.self_attn.k_proj.weight, l.self_attn.v_proj.weight]),
                 o=l.self_attn.o_proj.weight, q_norm=l.self_attn.q_norm.weight, k_norm=l.self_attn.k_norm.weight,
                 norm_in=l.input_layernorm.weight, norm_post=l.post_attention_layernorm.weight,
                 gate_up=torch.cat([l.mlp.gate_proj.weight, l.mlp.up_proj.weight]), down=l.mlp.down_proj.weight)
            for l in model.model.layers
        ]
        self.embed, self.norm, self.head = model.model.embed_tokens.weight, model.model.norm.weight, model.lm_head.weight

    def _rope(self, x, cos, sin):
        half = self.head_dim // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin

    def step(self, tokens, positions, keys, values, filled, mask):
        """Logits of the next token for ``tokens`` [B] at ``positions`` [B]; ``keys``/``values`` per layer
        [B, kv_heads, columns, head_dim] with ``filled`` columns used (the new token's KV is written after them)."""
        rms = torch.nn.functional.rms_norm
        batch, (h, kv, d) = tokens.shape[0], (self.heads, self.kv_heads, self.head_dim)
        x = self.embed[tokens]
        cos, sin = self.rotary(x, positions.unsqueeze(-1))  # [B, 1, D]: broadcast over heads
        for i, w in enumerate(self.layers):
            q, k, v = (rms(x, x.shape[-1:], w["norm_in"], self.eps) @ w["qkv"].T).split([h * d, kv * d, kv * d], -1)
            q = self._rope(rms(q.view(batch, h, d), (d,), w["q_norm"], self.eps), cos, sin)
            keys[i][:, :, filled] = self._rope(rms(k.view(batch, kv, d), (d,), w["k_norm"], self.eps), cos, sin)
            values[i][:, :, filled] = v.view(batch, kv, d)
            attn = torch.nn.functional.scaled_dot_product_attention(
                q.unsqueeze(2), keys[i][:, :, : filled + 1], values[i][:, :, : filled + 1],
                attn_mask=None if mask is None else mask[:, :, :, : filled + 1], enable_gqa=True)
            x = x + attn.reshape(batch, h * d) @ w["o"].T
            gate, up = (rms(x, x.shape[-1:], w["norm_post"], self.eps) @ w["gate_up"].T).chunk(2, -1)
            x = x + (torch.nn.functional.silu(gate) * up) @ w["down"].T
        return rms(x, x.shape[-1:], self.norm, self.eps) @ self.head.T


def _median_ms(fn, rounds: int = 5, calls: int = 200) -> float:
    fn()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e3)
    return sorted(times)[rounds // 2]


@pytest.mark.slow
@pytest.mark.perf
def test_batching_ceiling_of_a_decode_step(runtime, benchmark):
    """How much K=8 batching can gain at most: 8 x (decode step at batch 1) / (decode step at batch 8), with
    300 cached tokens and a padding mask at batch 8, for transformers' forward and for a lean step with no
    framework overhead (:class:`_LeanDecoder`). The lean step is checked against the model's own logits first,
    so the timing is of the same computation. Both ceilings are figures (the K=8 target is 6x); the assertion is
    only the equality of the logits."""
    model = runtime.backend.model
    lean, cached = _LeanDecoder(model), 300
    ceilings = {}
    with torch.no_grad():
        # the lean step computes what the model computes
        ids = torch.randint(0, model.config.vocab_size, (2, cached + 1), generator=torch.Generator().manual_seed(0))
        want = model(input_ids=ids).logits[:, -1]
        past = model(input_ids=ids[:, :cached], use_cache=True).past_key_values
        keys = [torch.zeros(2, lean.kv_heads, cached + 1, lean.head_dim) for _ in lean.layers]
        values = [torch.zeros_like(k) for k in keys]
        for i, layer in enumerate(past.layers):
            keys[i][:, :, :cached], values[i][:, :, :cached] = layer.keys, layer.values
        got = lean.step(ids[:, -1], torch.full((2,), cached), keys, values, cached, None)
        assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()

        times = {}
        for batch in (1, 8):
            mask = torch.ones(batch, 1, 1, cached + 1, dtype=torch.bool)
            attention_mask = torch.ones(batch, cached + 1, dtype=torch.long)
            if batch > 1:  # left padding of the shorter rows, as in a batched group
                mask[1:, :, :, :20] = False
                attention_mask[1:, :20] = 0
            tokens, positions = torch.zeros(batch, dtype=torch.long), torch.full((batch,), cached)
            keys = [torch.randn(batch, lean.kv_heads, cached + 1, lean.head_dim) for _ in lean.layers]
            values = [torch.randn_like(k) for k in keys]
            lean_ms = _median_ms(lambda: lean.step(tokens, positions, keys, values, cached, mask if batch > 1 else None))
            past = model(input_ids=torch.zeros(batch, cached, dtype=torch.long), use_cache=True).past_key_values

            def hf_step():
                model(input_ids=tokens.unsqueeze(-1), attention_mask=attention_mask, position_ids=positions.unsqueeze(-1),
                      past_key_values=past, use_cache=True)
                for layer in past.layers:  # drop the step's column: every call sees 300 cached tokens
                    layer.keys, layer.values = layer.keys[:, :, :cached], layer.values[:, :, :cached]

            times[batch] = (lean_ms, _median_ms(hf_step, calls=100))
    benchmark.pedantic(lambda: lean.step(tokens, positions, keys, values, cached, mask), rounds=1, iterations=1)
    for j, name in enumerate(("a lean decode step", "transformers' decode step")):
        ceilings[name] = 8 * times[1][j] / times[8][j]
        figure(benchmark, f"K=8 batching ceiling with {name}: 8 x batch-1 / batch-8 step", ceilings[name],
               unit="x", target=6.0)
    benchmark.extra_info.update(step_ms={str(b): {"lean": t[0], "transformers": t[1]} for b, t in times.items()})
    lean_x, hf_x = ceilings["a lean decode step"], ceilings["transformers' decode step"]
    print(f"decode step ms, batch 1 / batch 8: lean {times[1][0]:.2f} / {times[8][0]:.2f} (ceiling {lean_x:.2f}x); "
          f"transformers {times[1][1]:.2f} / {times[8][1]:.2f} (ceiling {hf_x:.2f}x)")
