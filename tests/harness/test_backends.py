"""Tests of harness.backends: HFBackend on the tiny model, VLLMBackend against the stub (docs/models.md)."""

from __future__ import annotations

import math
import time

import pytest
import torch

from harness.backends import BackendError, Generation, GenerationBackend, HFBackend, VLLMBackend, sampling_logprobs
from harness.models import ModelSpec, load_model
from tests.support.vllm_stub import VLLMStub

torch.set_num_threads(1)

CORPUS = ["Marlow Vance founded Ardent Labs in 1987 in the city of Qarth.", '{"query": "Ardent Labs"}'] * 20


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    model, tok = load_model(ModelSpec(cache_dir=str(tmp_path_factory.mktemp("models"))), corpus=CORPUS)
    # scale the random init up so greedy choices are not near-ties (a realistic, peaked distribution)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(4.0)
    return model, tok


@pytest.fixture(scope="module")
def backend(tiny):
    return HFBackend(*tiny)


def _prompts(tok, lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, len(tok), (n,), generator=g).tolist() for n in lengths]


def _recompute(model, prompt, gen, temperature, top_p=1.0):
    ids = torch.tensor([prompt + gen.token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1]
    return sampling_logprobs(logits, torch.tensor(gen.token_ids), temperature, top_p)


def test_is_a_generation_backend(backend):
    assert isinstance(backend, GenerationBackend)


def test_left_padding_equals_unpadded_greedy(tiny, backend):
    model, tok = tiny
    prompts = _prompts(tok, [3, 21, 40, 9, 1])
    batched = backend.generate(prompts, max_new_tokens=24, temperature=0.0)
    for prompt, got in zip(prompts, batched):
        alone = backend.generate([prompt], max_new_tokens=24, temperature=0.0)[0]
        assert got.token_ids == alone.token_ids
        assert max(abs(a - b) for a, b in zip(got.logprobs, alone.logprobs)) < 1e-4
    assert len({tuple(g.token_ids) for g in batched}) > 1  # not a degenerate constant output


def test_greedy_matches_transformers_generate(tiny, backend):
    model, tok = tiny
    prompt = _prompts(tok, [12], seed=5)[0]
    ours = backend.generate([prompt], max_new_tokens=16, temperature=0.0)[0]
    ref = model.generate(torch.tensor([prompt]), max_new_tokens=16, do_sample=False, eos_token_id=None, pad_token_id=tok.pad_token_id)
    assert ours.token_ids == ref[0, len(prompt) :].tolist()


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 1.0), (0.0, 1.0), (1.0, 0.9)])
def test_logprobs_match_forward_pass(tiny, backend, temperature, top_p):
    model, tok = tiny
    prompts = _prompts(tok, [4, 30, 17, 8], seed=1)
    gens = backend.generate(prompts, max_new_tokens=20, temperature=temperature, top_p=top_p, seed=11)
    for prompt, gen in zip(prompts, gens):
        assert len(gen.logprobs) == len(gen.token_ids) == 20
        ref = _recompute(model, prompt, gen, temperature, top_p)
        assert torch.allclose(ref, torch.tensor(gen.logprobs), atol=1e-4), (ref - torch.tensor(gen.logprobs)).abs().max()
        assert all(lp <= 0 and math.isfinite(lp) for lp in gen.logprobs)


def test_sampling_is_seeded(tiny, backend):
    model, tok = tiny
    prompts = _prompts(tok, [5, 5], seed=2)
    a = HFBackend(model, tok).generate(prompts, max_new_tokens=16, temperature=1.0, seed=3)
    b = HFBackend(model, tok).generate(prompts, max_new_tokens=16, temperature=1.0, seed=3)
    c = HFBackend(model, tok).generate(prompts, max_new_tokens=16, temperature=1.0, seed=4)
    assert a == b
    assert a != c
    # the same backend again: the prompts now come from its prefix cache, so the logprobs may differ
    # in the last float bits (KV computed in another batch), but not the samples
    again = HFBackend(model, tok)
    again.generate(prompts, max_new_tokens=16, temperature=1.0, seed=3)
    d = again.generate(prompts, max_new_tokens=16, temperature=1.0, seed=3)
    assert again.cache_stats["reused_tokens"] > 0
    assert [g.token_ids for g in d] == [g.token_ids for g in a]
    assert all(max(abs(x - y) for x, y in zip(g.logprobs, h.logprobs)) < 1e-5 for g, h in zip(d, a))


def test_top_p_keeps_to_the_nucleus(tiny, backend):
    model, tok = tiny
    prompt = _prompts(tok, [6], seed=3)[0]
    gens = backend.generate([prompt] * 8, max_new_tokens=1, temperature=1.0, top_p=1e-6, seed=0)
    with torch.no_grad():
        top = model(torch.tensor([prompt])).logits[0, -1].argmax().item()
    assert all(g.token_ids == [top] and abs(g.logprobs[0]) < 1e-6 for g in gens)


def test_stop_tokens_end_generation_inclusive(tiny, backend):
    model, tok = tiny
    prompts = _prompts(tok, [7, 13, 2], seed=4)
    free = backend.generate(prompts, max_new_tokens=30, temperature=0.0)
    # stop at a token that greedy decoding of the first prompt produces at position 5
    stop = free[0].token_ids[5]
    gens = backend.generate(prompts, max_new_tokens=30, temperature=0.0, stop_token_ids=[stop])
    for full, gen in zip(free, gens):
        if stop in full.token_ids:
            cut = full.token_ids.index(stop) + 1
            assert gen.token_ids == full.token_ids[:cut] and gen.finish_reason == "stop"
            assert len(gen.logprobs) == cut
        else:
            assert gen.token_ids == full.token_ids and gen.finish_reason == "length"
    assert gens[0].token_ids[-1] == stop and len(gens[0].token_ids) <= 6
    assert all(tok.pad_token_id not in g.token_ids for g in gens if tok.pad_token_id != stop)


def test_max_new_tokens_respected(tiny, backend):
    _, tok = tiny
    gens = backend.generate(_prompts(tok, [3, 9]), max_new_tokens=5, temperature=1.0, seed=0)
    assert [len(g.token_ids) for g in gens] == [5, 5]
    assert all(g.finish_reason == "length" for g in gens)
    one = backend.generate(_prompts(tok, [3]), max_new_tokens=1, temperature=0.0)[0]
    assert len(one.token_ids) == 1


def test_context_limit_clamps_new_tokens(tiny):
    model, tok = tiny
    limit = model.config.max_position_embeddings
    gen = HFBackend(model, tok).generate([[5] * (limit - 3)], max_new_tokens=50, temperature=0.0)[0]
    assert len(gen.token_ids) == 3 and gen.finish_reason == "length"


def test_chunked_batches_equal_one_batch(tiny):
    model, tok = tiny
    prompts = _prompts(tok, [4, 11, 6, 20, 3], seed=6)
    whole = HFBackend(model, tok).generate(prompts, max_new_tokens=10, temperature=0.0)
    chunked = HFBackend(model, tok, max_batch_size=2).generate(prompts, max_new_tokens=10, temperature=0.0)
    assert [g.token_ids for g in whole] == [g.token_ids for g in chunked]


def _turns(tok, backend, scratch, histories, observations, *, stop, temperature=0.0, seed=None):
    """Generate turn after turn (history + completion + observation) with ``backend`` in one batch
    and check every turn against ``scratch`` generating each row alone from scratch."""
    for turn, obs in enumerate(observations):
        gens = backend.generate(histories, max_new_tokens=12, temperature=temperature, stop_token_ids=[stop], seed=seed)
        for h, got in zip(histories, gens):
            alone = scratch.generate([h], max_new_tokens=12, temperature=temperature, stop_token_ids=[stop], seed=seed)[0]
            assert got.token_ids == alone.token_ids and got.finish_reason == alone.finish_reason, turn
            assert max(abs(a - b) for a, b in zip(got.logprobs, alone.logprobs)) < 1e-4
        histories = [h + g.token_ids + o for h, g, o in zip(histories, gens, obs)]
    return histories


def test_prefix_cache_multi_turn_greedy_equals_from_scratch(tiny):
    """Cross-turn KV reuse: several turns, observations of different lengths (0 to 29 tokens), rows
    that stop early while others go on; every turn equals each episode generated alone from scratch."""
    model, tok = tiny
    scratch = HFBackend(model, tok, prefix_cache_bytes=0)
    histories = _prompts(tok, [5, 23, 40, 12, 31, 2], seed=8)
    free = scratch.generate(histories[:1], max_new_tokens=12, temperature=0.0)[0]
    stop = free.token_ids[3]  # so that some rows stop early and others run to the length limit
    lengths = [[0, 1, 7, 17, 3, 29], [12, 0, 2, 5, 1, 9], [4, 21, 0, 1, 8, 2], [1, 1, 1, 1, 1, 1]]
    observations = [_prompts(tok, row, seed=30 + i) for i, row in enumerate(lengths)]
    backend = HFBackend(model, tok)
    final = _turns(tok, backend, scratch, histories, observations, stop=stop)
    stats = backend.cache_stats
    # after the first turn only the new suffixes were prefilled
    first_turn = sum(len(h) for h in histories)
    assert stats["reused_tokens"] > 0
    assert stats["prefilled_tokens"] - first_turn < sum(len(o) for row in observations for o in row) + 13 * 6 * 4
    # one entry per row, plus the ones a zero-length observation left behind (its next prompt was
    # only a prefix of that entry, which therefore stays; released with the episode)
    assert len(histories) <= backend.cached_sequences <= len(histories) + 3
    backend.release(final)
    assert backend.cached_sequences == 0 and backend.cached_bytes == 0


def test_prefix_cache_sampling_logprobs_match_forward_pass(tiny):
    """Sampling with reuse (and identical prompts in one batch, prefilled once): every turn's
    logprobs equal a fresh forward pass over the whole sequence."""
    model, tok = tiny
    backend = HFBackend(model, tok)
    p, q = _prompts(tok, [14, 6], seed=13)
    histories = [p, p, q, p]
    obs = _prompts(tok, [3, 11, 1, 6], seed=14)
    for turn in range(3):
        gens = backend.generate(histories, max_new_tokens=10, temperature=1.0, seed=turn)
        for h, gen in zip(histories, gens):
            ref = _recompute(model, h, gen, 1.0)
            assert torch.allclose(ref, torch.tensor(gen.logprobs), atol=1e-4), (turn, (ref - torch.tensor(gen.logprobs)).abs().max())
        if turn == 0:
            assert len({tuple(g.token_ids) for g in gens}) > 2  # the identical prompts were sampled independently
        histories = [h + g.token_ids + o for h, g, o in zip(histories, gens, obs)]
    assert backend.cache_stats["reused_tokens"] > 0


@pytest.mark.parametrize("change", ["optimizer_step", "load_state_dict", "data_swap"])
def test_weight_change_invalidates_prefix_cache(tiny, change):
    """Logprobs must come from the current weights: any change of a parameter empties the cache."""
    import copy

    model, tok = tiny
    model = copy.deepcopy(model)
    old = copy.deepcopy(model)
    backend = HFBackend(model, tok)
    prompts = _prompts(tok, [9, 30, 17], seed=12)
    first = backend.generate(prompts, max_new_tokens=8, temperature=1.0, seed=0)
    nxt = [p + g.token_ids + [7, 8, 9] for p, g in zip(prompts, first)]
    assert backend.cached_sequences == 3
    weight = model.model.layers[0].self_attn.v_proj.weight
    if change == "optimizer_step":
        model.train()
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        model(torch.tensor([nxt[1]]), labels=torch.tensor([nxt[1]])).loss.backward()
        opt.step()
        model.eval()
    elif change == "load_state_dict":
        state = {k: v * 1.5 if k.endswith("v_proj.weight") else v for k, v in model.state_dict().items()}
        model.load_state_dict(state)
    else:
        weight.data = weight.data * 1.5
    gens = backend.generate(nxt, max_new_tokens=8, temperature=1.0, seed=1)
    assert backend.cache_stats["invalidations"] == 1
    assert backend.cache_stats["reused_tokens"] == 0
    for h, gen in zip(nxt, gens):
        ref = _recompute(model, h, gen, 1.0)
        assert torch.allclose(ref, torch.tensor(gen.logprobs), atol=1e-4)
        stale = _recompute(old, h, gen, 1.0)
        assert (stale - ref).abs().max() > 1e-3  # the change matters: stale KV would have been caught
    fresh = HFBackend(model, tok, prefix_cache_bytes=0).generate(nxt, max_new_tokens=8, temperature=1.0, seed=1)
    assert [g.token_ids for g in gens] == [g.token_ids for g in fresh]
    # no change since: the next turn reuses again
    backend.generate([h + g.token_ids + [5] for h, g in zip(nxt, gens)], max_new_tokens=4, temperature=0.0)
    assert backend.cache_stats["invalidations"] == 1 and backend.cache_stats["reused_tokens"] > 0


def test_prefix_cache_budget_and_clear(tiny):
    model, tok = tiny
    prompts = _prompts(tok, [20, 21, 22], seed=15)
    probe = HFBackend(model, tok)
    probe.generate(prompts[:1], max_new_tokens=5, temperature=0.0)
    one = probe.cached_bytes
    small = HFBackend(model, tok, prefix_cache_bytes=int(one * 1.5))
    small.generate(prompts, max_new_tokens=5, temperature=0.0)
    assert small.cached_sequences == 1 and small.cached_bytes <= int(one * 1.5)
    off = HFBackend(model, tok, prefix_cache_bytes=0)
    off.generate(prompts, max_new_tokens=5, temperature=0.0)
    assert off.cached_sequences == 0
    probe.clear_cache()
    assert probe.cached_sequences == 0 and probe.cached_bytes == 0
    with pytest.raises(ValueError, match="prefix_cache_bytes"):
        HFBackend(model, tok, prefix_cache_bytes=-1)


def test_restores_training_mode(tiny, backend):
    model, tok = tiny
    model.train()
    try:
        backend.generate(_prompts(tok, [3]), max_new_tokens=2, temperature=0.0)
        assert model.training
        assert model.config._attn_implementation == "sdpa"  # the grouped attention is only for generate
    finally:
        model.eval()


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"max_new_tokens": 4, "temperature": -1.0}, "temperature"),
        ({"max_new_tokens": 4, "top_p": 0.0}, "top_p"),
    ],
)
def test_invalid_arguments(backend, kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        backend.generate([[1, 2]], **kwargs)
    with pytest.raises(ValueError, match="at least one token"):
        backend.generate([[]], max_new_tokens=2)
    assert backend.generate([], max_new_tokens=2) == []


def test_benchmark_hf_tokens_per_second(tiny, benchmark):
    """Generated tokens/s of HFBackend on the tiny model, batch 8 x 64 new tokens (sampling)."""
    model, tok = tiny
    backend = HFBackend(model, tok)
    prompts = _prompts(tok, [40, 60, 80, 100, 50, 70, 90, 30], seed=9)

    def run():
        backend.clear_cache()  # cold prompts every round (the prefix cache would reuse them)
        return backend.generate(prompts, max_new_tokens=64, temperature=1.0, seed=0)

    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    gens = benchmark.pedantic(run, rounds=3, iterations=1, warmup_rounds=1)
    n_tokens = sum(len(g.token_ids) for g in gens)
    assert n_tokens == 8 * 64
    tokens_per_s = n_tokens / sorted(times)[1]
    benchmark.extra_info["tokens_per_s"] = tokens_per_s
    print(f"HFBackend tiny, batch 8 x 64 new tokens: {tokens_per_s:.0f} generated tokens/s")


# ------------------------------------------------------------------ vLLM client
def test_vllm_backend_against_stub():
    with VLLMStub(vocab_size=100) as stub:
        backend = VLLMBackend(stub.url)
        assert isinstance(backend, GenerationBackend)
        assert backend.model == "stub-model"
        prompts = [[1, 2, 3], [10, 20]]
        gens = backend.generate(prompts, max_new_tokens=6, temperature=0.8, top_p=0.95, stop_token_ids=[])
        assert gens[0] == Generation([(6 + 7 * j) % 100 for j in range(6)], [-0.01 * (j + 1) for j in range(6)], "length")
        assert gens[1].token_ids[0] == 30
        (req,) = stub.requests
        assert req["prompt"] == prompts and req["max_tokens"] == 6 and req["model"] == "stub-model"
        assert req["temperature"] == 0.8 and req["top_p"] == 0.95 and req["logprobs"] == 0
        assert req["return_token_ids"] is True and req["return_tokens_as_token_ids"] is True
        assert "seed" not in req


def test_vllm_stop_tokens_and_order():
    with VLLMStub(vocab_size=100) as stub:
        stub.reverse_choices = True
        backend = VLLMBackend(stub.url)
        # prompt [1]: tokens 1, 8, 15, 22, ...: stop at 15 (inclusive)
        gens = backend.generate([[1], [2]], max_new_tokens=10, stop_token_ids=[15], temperature=1.0)
        assert gens[0] == Generation([1, 8, 15], [-0.01, -0.02, -0.03], "stop")
        assert gens[1].token_ids[0] == 2 and gens[1].finish_reason == "length"
        assert stub.requests[0]["stop_token_ids"] == [15]


def test_vllm_seeded_calls_use_one_seed_per_prompt():
    with VLLMStub(vocab_size=1000) as stub:
        backend = VLLMBackend(stub.url)
        gens = backend.generate([[5], [5], [5]], max_new_tokens=3, seed=100)
        assert len({tuple(g.token_ids) for g in gens}) == 3  # same prompt, different samples
        assert sorted(r["seed"] for r in stub.requests) == [100, 101, 102]
        assert all(len(r["prompt"]) == 1 for r in stub.requests)
        assert backend.generate([[5], [5], [5]], max_new_tokens=3, seed=100) == gens


def test_vllm_errors_are_clear():
    with VLLMStub() as stub:
        backend = VLLMBackend(stub.url)
        stub.fail_next = True
        with pytest.raises(BackendError, match="HTTP 500"):
            backend.generate([[1]], max_new_tokens=2)
        url = stub.url
    with pytest.raises(BackendError, match="cannot be reached"):
        VLLMBackend(url)
