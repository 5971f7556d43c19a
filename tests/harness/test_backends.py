"""Tests of harness.backends: HFBackend on the tiny model, VLLMBackend against the stub (DESIGN §6)."""

from __future__ import annotations

import math

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
    _, tok = tiny
    prompts = _prompts(tok, [5, 5], seed=2)
    a = backend.generate(prompts, max_new_tokens=16, temperature=1.0, seed=3)
    b = backend.generate(prompts, max_new_tokens=16, temperature=1.0, seed=3)
    c = backend.generate(prompts, max_new_tokens=16, temperature=1.0, seed=4)
    assert a == b
    assert a != c


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


def test_restores_training_mode(tiny, backend):
    model, tok = tiny
    model.train()
    try:
        backend.generate(_prompts(tok, [3]), max_new_tokens=2, temperature=0.0)
        assert model.training
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
        return backend.generate(prompts, max_new_tokens=64, temperature=1.0, seed=0)

    gens = benchmark.pedantic(run, rounds=3, iterations=1, warmup_rounds=1)
    n_tokens = sum(len(g.token_ids) for g in gens)
    assert n_tokens == 8 * 64
    if benchmark.stats is not None:
        benchmark.extra_info["tokens_per_s"] = n_tokens / benchmark.stats.stats.median


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
