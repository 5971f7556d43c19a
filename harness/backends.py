"""Generation backends: batched token-in/token-out sampling with logprobs (docs/models.md, docs/architecture.md §The agent system).

A :class:`GenerationBackend` takes a batch of prompts as token ids and returns, per prompt, the
completion token ids, the per-token sampling logprobs and why it stopped. The rollout sends every
pending turn of every active episode of a group to it as **one** batch (docs/architecture.md §The agent system, "batching is
the performance core").

* :class:`HFBackend` runs a transformers causal LM in-process: its own sampling loop over a KV
  cache (``model(input_ids, attention_mask, position_ids, past_key_values)`` step by step), batched
  with **left padding** and explicit position ids, so a padded prompt is generated exactly as it
  would be alone (tested under greedy decoding). It keeps the KV of what it has computed (a
  **prefix cache**, matched by token content), so the next turn of an episode prefills only its
  new tokens; a weight change empties it (see :class:`HFBackend`, docs/models.md).
* :class:`VLLMBackend` is an HTTP client of a vLLM server started by ``trl vllm-serve`` (which, in
  TRL 1.16, runs vLLM's own OpenAI-compatible server with ``--logprobs-mode processed_logprobs``;
  TRL's ``VLLMClient`` talks to ``/health``, ``/v1/models`` and ``/v1/completions`` with token-id
  prompts, ``return_token_ids`` and ``return_tokens_as_token_ids``; we use the same endpoints).

Which distribution the logprobs are of (both backends): the one the token was *sampled from*,
i.e. ``log_softmax(processed_logits)`` where ``processed_logits = logits / temperature`` with
tokens outside the top-p nucleus set to ``-inf`` (renormalised). With ``top_p = 1`` (the RL
default) this is exactly ``log_softmax(logits / temperature)`` of a plain forward pass, which
the trainer's tolerance check recomputes. At ``temperature = 0`` (greedy) the logprobs are
``log_softmax(logits)`` (temperature 1, no top-p), as vLLM reports them. Logits are taken in
float32 whatever the model's dtype.

Completions end at the first stop token, **inclusive** (``finish_reason = "stop"``), or after
``max_new_tokens`` tokens (``"length"``); no padding is ever returned.

Deliberate deviations: ``HFBackend`` clamps ``max_new_tokens`` so that prompt + completion fits
the model's ``max_position_embeddings`` (the completion then ends with ``"length"``), instead of
failing mid-episode. ``VLLMBackend`` with a ``seed`` sends one request per prompt with seed
``seed + i`` (vLLM applies one request's seed to each of its prompts, which would make the K
rollouts of one query identical); without a seed it sends the whole batch as one request.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import torch
from transformers import AttentionInterface
from transformers.cache_utils import Cache, DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

__all__ = ["Generation", "GenerationBackend", "HFBackend", "VLLMBackend", "BackendError", "sampling_logprobs"]

FinishReason = Literal["stop", "length"]


class BackendError(RuntimeError):
    """A generation server that cannot be reached or answers with an error (message says which)."""


@dataclass(frozen=True)
class Generation:
    """One completion: ``token_ids`` (ending with the stop token when ``finish_reason == "stop"``),
    one sampling logprob per token, and ``"stop"`` or ``"length"``."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason


@runtime_checkable
class GenerationBackend(Protocol):
    """Batched token-in/token-out generation (see module docstring for the logprob distribution)."""

    def generate(
        self,
        prompts: list[list[int]],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        stop_token_ids: Sequence[int] = (),
        seed: int | None = None,
    ) -> list[Generation]: ...


def _validate(prompts: Sequence[Sequence[int]], max_new_tokens: int, temperature: float, top_p: float) -> None:
    if not all(len(p) > 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if not (temperature >= 0 and math.isfinite(temperature)):
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")


def _process_logits(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Temperature then top-p: the logits the next token is sampled from (float32)."""
    logits = logits.float()
    if temperature == 0:
        return logits
    logits = logits / temperature
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # drop a token when the mass *before* it already reaches top_p (the top token always stays)
        drop_sorted = (torch.cumsum(probs, dim=-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sampling_logprobs(logits: torch.Tensor, token_ids: torch.Tensor, temperature: float, top_p: float = 1.0) -> torch.Tensor:
    """Logprobs of ``token_ids`` under the distribution the backends sample from (module docstring).

    ``logits``: ``[..., vocab]``; ``token_ids``: ``[...]``. The reference for recomputing
    sampling logprobs from a forward pass (e.g. the trainer's tolerance check).
    """
    logp = torch.log_softmax(_process_logits(logits, temperature, top_p), dim=-1)
    return logp.gather(-1, token_ids.unsqueeze(-1)).squeeze(-1)


class _PrefixEntry:
    """The KV of one token sequence the backend has already run through the model (see HFBackend)."""

    __slots__ = ("tokens", "keys", "values", "nbytes")

    def __init__(self, tokens: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
        self.tokens = tokens  # [L] int64, CPU
        self.keys = keys  # per layer [kv_heads, L, head_dim], on the model's device
        self.values = values
        self.nbytes = sum(t.numel() * t.element_size() for t in (*keys, *values))


class _BufferLayer(DynamicLayer):
    """One layer's KV for one batched call, in a buffer allocated once (no ``torch.cat`` per step).

    Columns ``[0, cached)`` hold each row's reused prefix, left-padded to the longest; the buffer is
    allocated at the first ``update`` (prefill), where the prefixes are copied in, with room for
    ``columns`` in all. ``keys``/``values`` are views of the filled columns.
    """

    def __init__(self, columns: int, cached: int, prefixes: list[tuple[int, torch.Tensor, torch.Tensor]]) -> None:
        super().__init__()
        self.columns = columns
        self.filled = cached
        self.prefixes = prefixes  # (row, keys [H, u, D], values [H, u, D])

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        batch, heads = key_states.shape[:2]
        self.key_buffer = key_states.new_zeros((batch, heads, self.columns, key_states.shape[-1]))
        self.value_buffer = value_states.new_zeros((batch, value_states.shape[1], self.columns, value_states.shape[-1]))
        for row, keys, values in self.prefixes:
            u = keys.shape[1]
            self.key_buffer[row, :, self.filled - u : self.filled] = keys
            self.value_buffer[row, :, self.filled - u : self.filled] = values
        self.prefixes = []
        self.is_initialized = True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.filled + key_states.shape[-2]
        self.key_buffer[:, :, self.filled : end] = key_states
        self.value_buffer[:, :, self.filled : end] = value_states
        self.filled = end
        self.keys, self.values = self.key_buffer[:, :, :end], self.value_buffer[:, :, :end]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.filled

    def expand_rows(self, index: torch.Tensor) -> None:
        self.key_buffer = self.key_buffer.index_select(0, index)
        self.value_buffer = self.value_buffer.index_select(0, index)
        self.keys, self.values = self.key_buffer[:, :, : self.filled], self.value_buffer[:, :, : self.filled]


def _sdpa_grouped(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                  is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' ``sdpa`` attention, except that a padded batch (a mask) with grouped KV heads is
    computed by SDPA's own ``enable_gqa`` instead of first copying every KV head ``num_key_value_groups``
    times (transformers does that whenever there is a mask, because CUDA kernels need it). On CPU this
    copy of the whole KV cache at every decoding step costs more than the attention itself (the
    attention of the tiny model at batch 8 and 300-600 cached tokens is 2.5-15x faster without it);
    it is the same attention (equal to float rounding)."""
    groups = getattr(module, "num_key_value_groups", 1)
    if (groups > 1 and attention_mask is not None and query.device.type == "cpu" and not torch.is_grad_enabled()
            and kwargs.get("position_bias") is None and attention_mask.dim() == 4):
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True
        )
        return out.transpose(1, 2).contiguous(), None
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  is_causal=is_causal, **kwargs)


_GROUPED_SDPA = "harness_sdpa_grouped"
AttentionInterface.register(_GROUPED_SDPA, _sdpa_grouped)
AttentionMaskInterface.register(_GROUPED_SDPA, sdpa_mask)


@contextmanager
def _grouped_attention(model: Any) -> Iterator[None]:
    """Run ``model`` with :func:`_sdpa_grouped` while inside (only if it uses ``sdpa``)."""
    config = model.config
    if getattr(config, "_attn_implementation", None) != "sdpa":
        yield
        return
    config._attn_implementation = _GROUPED_SDPA
    try:
        yield
    finally:
        config._attn_implementation = "sdpa"


class _ReuseCache(Cache):
    """A transformers ``Cache`` of :class:`_BufferLayer` s (one batched call of :class:`HFBackend`)."""

    def __init__(self, layers: list[_BufferLayer]) -> None:
        super().__init__(layers=layers)


class HFBackend:
    """In-process batched generation with a transformers causal LM (docs/models.md ``hf`` backend).

    ``model`` is any ``*ForCausalLM`` that accepts ``position_ids`` and ``past_key_values``;
    ``tokenizer`` provides ``pad_token_id`` (or ``eos_token_id``) for left padding.
    ``max_batch_size`` splits larger batches into chunks (``None``: all at once). The model's
    train/eval mode is restored after each call (TRL reads ``model.training``).

    **Prefix cache** (``prefix_cache_bytes``, default 1 GiB; 0 turns it off): after each call the
    backend keeps, per returned sequence, the KV of the tokens it ran through the model (prompt +
    completion without its last token). A later prompt that starts with such a sequence (the next
    turn of the same episode: the same tokens + the observation + the next assistant opening)
    prefills only its new suffix. Matching is by token content (longest common prefix, at least one
    prompt token is always recomputed for the next-token logits), so it is transparent to callers.
    Entries are dropped least-recently-used beyond the byte budget, by :meth:`release` (the rollout
    releases an episode when it ends) and by :meth:`clear_cache`; and all of them as soon as any
    parameter or buffer of the model changed (optimizer step, ``load_state_dict``, ``p.data = ...``:
    checked through the tensors' version counters and data pointers at every call), so logprobs
    always come from the current weights. Identical prompts in one call (the K rollouts of a query
    at their first turn) are prefilled once. Only for models whose layers are all full attention
    (sliding-window or linear-attention layers generate without reuse, as before).
    """

    def __init__(
        self, model: Any, tokenizer: Any, *, max_batch_size: int | None = None, prefix_cache_bytes: int = 2**30
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if pad is None:
            raise ValueError("the tokenizer has neither a pad token nor an eos token to pad with")
        self.pad_token_id: int = int(pad)
        if max_batch_size is not None and max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1 or None, got {max_batch_size}")
        self.max_batch_size = max_batch_size
        if prefix_cache_bytes < 0:
            raise ValueError(f"prefix_cache_bytes must be >= 0, got {prefix_cache_bytes}")
        self.prefix_cache_bytes = prefix_cache_bytes
        self._entries: OrderedDict[tuple[int, ...], _PrefixEntry] = OrderedDict()
        self._entries_bytes = 0
        self._weights_key: tuple[tuple[int, int], ...] | None = None
        self._lock = threading.RLock()
        self._layers: int | None = None  # number of layers when the model supports reuse, else 0
        self._layers_model: Any = None
        self.cache_stats: dict[str, int] = {"prefilled_tokens": 0, "reused_tokens": 0, "invalidations": 0}
        """Counters: prompt tokens run through the model, prompt tokens taken from the prefix cache,
        and how often a weight change emptied the cache."""

    # ------------------------------------------------------------------ prefix cache
    def clear_cache(self) -> None:
        """Drop every cached prefix (e.g. after changing the weights in a way the version check
        cannot see)."""
        with self._lock:
            self._entries.clear()
            self._entries_bytes = 0

    def release(self, sequences: Sequence[Sequence[int]]) -> None:
        """Drop the cached prefixes of finished sequences (every entry that is a prefix of one)."""
        with self._lock:
            if not self._entries:
                return
            for seq in sequences:
                st = torch.as_tensor(list(seq), dtype=torch.long)
                for key, entry in list(self._entries.items()):
                    n = entry.tokens.numel()
                    if n <= st.numel() and torch.equal(entry.tokens, st[:n]):
                        self._drop(key)

    @property
    def cached_sequences(self) -> int:
        return len(self._entries)

    @property
    def cached_bytes(self) -> int:
        return self._entries_bytes

    def _drop(self, key: tuple[int, ...]) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._entries_bytes -= entry.nbytes

    def _reuse_layers(self) -> int:
        """Number of cache layers if prefix reuse is possible for this model, else 0."""
        if self._layers is None or self._layers_model is not self.model:
            self._layers_model = self.model
            try:
                from transformers.cache_utils import get_layer_types_and_kwargs

                cfg = self.model.config.get_text_config(decoder=True)
                types, _ = get_layer_types_and_kwargs(cfg)
                ok = len(types) == int(cfg.num_hidden_layers) and all(t == "full_attention" for t in types)
                self._layers = int(cfg.num_hidden_layers) if ok else 0
            except Exception:  # an unusual config: generate without reuse
                self._layers = 0
        return self._layers if self.prefix_cache_bytes > 0 else 0

    def _check_weights(self) -> None:
        """Empty the cache if any parameter or buffer changed since the entries were computed."""
        try:
            key = tuple((t.data_ptr(), t._version) for t in (*self.model.parameters(), *self.model.buffers()))
        except RuntimeError:  # e.g. an inference tensor has no version counter: never trust the cache
            key = None
        with self._lock:
            if key is None or key != self._weights_key:
                if self._entries:
                    self.cache_stats["invalidations"] += 1
                self.clear_cache()
                self._weights_key = key

    def _lookup(self, prompt: list[int]) -> tuple[tuple[int, ...] | None, _PrefixEntry | None, int]:
        """The entry sharing the longest prefix with ``prompt`` (at most ``len(prompt) - 1`` tokens)."""
        best: tuple[tuple[int, ...] | None, _PrefixEntry | None, int] = (None, None, 0)
        if not self._entries or len(prompt) < 2:
            return best
        pt = torch.as_tensor(prompt, dtype=torch.long)
        cap = len(prompt) - 1
        with self._lock:
            for key, entry in self._entries.items():
                m = min(entry.tokens.numel(), cap)
                if m <= best[2] or key[0] != prompt[0]:
                    continue
                differ = entry.tokens[:m] != pt[:m]
                common = int(differ.to(torch.uint8).argmax()) if bool(differ.any()) else m
                if common > best[2]:
                    best = (key, entry, common)
                    if common == cap:
                        break
            if best[0] is not None:
                self._entries.move_to_end(best[0])
        return best

    def _store(
        self, tokens: list[int], keys: list[torch.Tensor], values: list[torch.Tensor], supersedes: tuple[int, ...] | None
    ) -> None:
        entry = _PrefixEntry(torch.tensor(tokens, dtype=torch.long), keys, values)
        key = tuple(tokens)
        with self._lock:
            if supersedes is not None:
                self._drop(supersedes)
            self._drop(key)
            if entry.nbytes > self.prefix_cache_bytes:
                return
            self._entries[key] = entry
            self._entries_bytes += entry.nbytes
            while self._entries_bytes > self.prefix_cache_bytes:
                self._drop(next(iter(self._entries)))

    # ------------------------------------------------------------------ generation
    def generate(
        self,
        prompts: list[list[int]],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        stop_token_ids: Sequence[int] = (),
        seed: int | None = None,
    ) -> list[Generation]:
        """Generate one completion per prompt (see the module docstring for the exact semantics)."""
        if not prompts:
            return []
        _validate(prompts, max_new_tokens, temperature, top_p)
        generator = None
        if seed is not None:
            generator = torch.Generator(device=self._device).manual_seed(int(seed))
        size = self.max_batch_size or len(prompts)
        was_training = self.model.training
        self.model.eval()
        try:
            if self._reuse_layers():
                self._check_weights()
            out: list[Generation] = []
            with _grouped_attention(self.model):
                for start in range(0, len(prompts), size):
                    out += self._generate_batch(
                        [list(p) for p in prompts[start : start + size]], max_new_tokens, temperature, top_p,
                        set(stop_token_ids), generator,
                    )
            return out
        finally:
            self.model.train(was_training)

    @property
    def _device(self) -> torch.device:
        return next(self.model.parameters()).device

    @torch.inference_mode()
    def _generate_batch(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        stops: set[int],
        generator: torch.Generator | None,
    ) -> list[Generation]:
        device = self._device
        batch, longest = len(prompts), max(len(p) for p in prompts)
        limit = getattr(self.model.config, "max_position_embeddings", None)
        if limit is not None:
            max_new_tokens = max(1, min(max_new_tokens, int(limit) - longest))
        layers = self._reuse_layers()
        # Identical prompts (the K rollouts of a query at their first turn) are prefilled once.
        if layers:
            rows: dict[tuple[int, ...], int] = {}
            inverse = [rows.setdefault(tuple(p), len(rows)) for p in prompts]
            unique = [list(k) for k in rows]
        else:
            inverse, unique = list(range(batch)), prompts
        hits = [self._lookup(p) for p in unique] if layers else [(None, None, 0)] * batch
        reused = [h[2] for h in hits]
        # Layout of the KV columns: [reused prefix, left-padded | new prompt tokens, left-padded | completion]
        cached = max(reused)
        fresh = max(len(p) - u for p, u in zip(unique, reused))
        width = cached + fresh
        n_rows = len(unique)
        input_ids = torch.full((n_rows, fresh), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((n_rows, width + max_new_tokens), dtype=torch.long)
        positions = torch.zeros((n_rows, fresh), dtype=torch.long)
        for r, (p, u) in enumerate(zip(unique, reused)):
            n = len(p) - u
            input_ids[r, fresh - n :] = torch.tensor(p[u:], dtype=torch.long)
            positions[r, fresh - n :] = torch.arange(u, u + n)  # real positions, continuing the prefix
            mask[r, cached - u : cached] = 1
            mask[r, width - n : width] = 1
        input_ids, mask, positions = input_ids.to(device), mask.to(device), positions.to(device)
        self.cache_stats["prefilled_tokens"] += sum(len(p) - u for p, u in zip(unique, reused))
        self.cache_stats["reused_tokens"] += sum(reused[r] for r in inverse)
        cache: Any = None
        if layers:
            cache = _ReuseCache([
                _BufferLayer(width + max_new_tokens, cached,
                             [(r, e.keys[i][:, :u], e.values[i][:, :u]) for r, (_, e, u) in enumerate(hits) if u > 0])
                for i in range(layers)
            ])
        stop_tensor = torch.tensor(sorted(stops), dtype=torch.long, device=device) if stops else None

        out = self.model(
            input_ids=input_ids, attention_mask=mask[:, :width], position_ids=positions,
            past_key_values=cache, use_cache=True, logits_to_keep=1,
        )
        cache, logits = out.past_key_values, out.logits[:, -1, :]
        next_pos = positions[:, -1] + 1
        if n_rows < batch:
            index = torch.tensor(inverse, dtype=torch.long, device=device)
            logits, mask = logits.index_select(0, index), mask.index_select(0, index)
            next_pos = next_pos.index_select(0, index)
            for layer in cache.layers:
                layer.expand_rows(index)
        tokens = torch.empty((batch, max_new_tokens), dtype=torch.long, device=device)
        logps = torch.empty((batch, max_new_tokens), dtype=torch.float32, device=device)
        done = torch.zeros(batch, dtype=torch.bool, device=device)
        length = torch.full((batch,), max_new_tokens, dtype=torch.long, device=device)
        steps = 0
        for step in range(max_new_tokens):
            processed = _process_logits(logits, temperature, top_p)
            logp_all = torch.log_softmax(processed, dim=-1)
            if temperature == 0:
                token = processed.argmax(dim=-1)
            else:
                token = torch.multinomial(logp_all.exp(), 1, generator=generator).squeeze(-1)
            token = torch.where(done, torch.full_like(token, self.pad_token_id), token)
            tokens[:, step] = token
            logps[:, step] = logp_all.gather(-1, token.unsqueeze(-1)).squeeze(-1)
            steps = step + 1
            if stop_tensor is not None:
                hit = torch.isin(token, stop_tensor) & ~done
                length = torch.where(hit, torch.full_like(length, step + 1), length)
                done = done | hit
            if bool(done.all()) or step + 1 == max_new_tokens:
                break
            mask[:, width + step] = 1
            out = self.model(
                input_ids=token.unsqueeze(-1),
                attention_mask=mask[:, : width + step + 1],
                position_ids=next_pos.unsqueeze(-1),
                past_key_values=cache,
                use_cache=True,
            )
            cache, logits = out.past_key_values, out.logits[:, -1, :]
            next_pos = next_pos + 1

        tokens_l, logps_l, length_l, done_l = tokens[:, :steps].tolist(), logps[:, :steps].tolist(), length.tolist(), done.tolist()
        if layers:
            # keep each row's KV without the padding: its prefix, its new prompt tokens and the
            # completion tokens that went through the model (all but the last sampled one)
            fed = steps - 1
            for i, p in enumerate(prompts):
                r = inverse[i]
                u, n, f = reused[r], len(p) - reused[r], min(length_l[i], fed)
                index = torch.cat([torch.arange(cached - u, cached), torch.arange(width - n, width + f)]).to(device)
                key, entry, _ = hits[r]
                self._store(
                    p + tokens_l[i][:f],
                    [layer.key_buffer[i].index_select(1, index) for layer in cache.layers],
                    [layer.value_buffer[i].index_select(1, index) for layer in cache.layers],
                    supersedes=key if entry is not None and u == entry.tokens.numel() else None,
                )
        return [
            Generation(
                token_ids=tokens_l[i][: length_l[i]],
                logprobs=logps_l[i][: length_l[i]],
                finish_reason="stop" if done_l[i] else "length",
            )
            for i in range(batch)
        ]


class VLLMBackend:
    """HTTP client of a vLLM server launched with ``trl vllm-serve`` (docs/models.md ``vllm`` backend).

    ``base_url`` like ``http://10.0.0.5:8000``; ``model`` is the served model name (default: the
    first one ``/v1/models`` lists); ``timeout_s`` bounds each HTTP request; ``max_concurrency``
    bounds the per-prompt requests of a seeded call. Construction checks ``/health`` and raises
    :class:`BackendError` naming the URL if the server cannot be reached.
    """

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        timeout_s: float = 600.0,
        max_concurrency: int = 64,
    ) -> None:
        import requests

        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.max_concurrency = max_concurrency
        self._session = requests.Session()
        try:
            health = self._session.get(f"{self.base_url}/health", timeout=min(timeout_s, 10.0))
        except requests.RequestException as exc:
            raise BackendError(
                f"the vLLM server at {self.base_url} cannot be reached ({exc.__class__.__name__}); "
                "start it with `trl vllm-serve --model ...` and check host and port"
            ) from exc
        if health.status_code != 200:
            raise BackendError(f"the vLLM server at {self.base_url} is not healthy: HTTP {health.status_code}")
        self.model = model or self._request("GET", "/v1/models")["data"][0]["id"]

    def _request(self, method: str, path: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        import requests

        try:
            response = self._session.request(method, f"{self.base_url}{path}", json=payload, timeout=self.timeout_s)
        except requests.RequestException as exc:
            raise BackendError(f"{method} {self.base_url}{path} failed: {exc}") from exc
        if response.status_code != 200:
            raise BackendError(f"{method} {self.base_url}{path} -> HTTP {response.status_code}: {response.text[:500]}")
        return response.json()

    def generate(
        self,
        prompts: list[list[int]],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        stop_token_ids: Sequence[int] = (),
        seed: int | None = None,
    ) -> list[Generation]:
        """Generate one completion per prompt through ``POST /v1/completions``."""
        if not prompts:
            return []
        _validate(prompts, max_new_tokens, temperature, top_p)
        stops = [int(t) for t in stop_token_ids]
        params: dict[str, Any] = {
            "model": self.model,
            "n": 1,
            "max_tokens": max_new_tokens,
            "temperature": temperature,
            "top_p": top_p,
            "logprobs": 0,  # only the sampled token's logprob
            "stop_token_ids": stops,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": False,
        }
        if seed is None:
            choices = self._request("POST", "/v1/completions", {**params, "prompt": [list(p) for p in prompts]})["choices"]
            if len(choices) != len(prompts):
                raise BackendError(f"the server returned {len(choices)} completions for {len(prompts)} prompts")
            choices = sorted(choices, key=lambda c: c.get("index", 0))
        else:

            def one(i: int) -> dict[str, Any]:
                payload = {**params, "prompt": [list(prompts[i])], "seed": int(seed) + i}
                return self._request("POST", "/v1/completions", payload)["choices"][0]

            with ThreadPoolExecutor(max_workers=max(1, min(self.max_concurrency, len(prompts)))) as pool:
                choices = list(pool.map(one, range(len(prompts))))
        return [self._to_generation(c, set(stops), max_new_tokens) for c in choices]

    @staticmethod
    def _to_generation(choice: dict[str, Any], stops: set[int], max_new_tokens: int) -> Generation:
        ids = [int(t) for t in choice.get("token_ids") or []]
        lp = choice.get("logprobs") or {}
        logprobs = [float("nan") if v is None else float(v) for v in (lp.get("token_logprobs") or [])]
        if len(logprobs) != len(ids):
            raise BackendError(
                f"the server returned {len(ids)} token ids but {len(logprobs)} logprobs; "
                "is it a vLLM server started by `trl vllm-serve` (logprobs enabled)?"
            )
        # completions end at the first stop token, inclusive, whatever the server did after it
        cut = next((i + 1 for i, t in enumerate(ids) if t in stops), None)
        if cut is not None:
            return Generation(ids[:cut], logprobs[:cut], "stop")
        reason = choice.get("finish_reason")
        finish: FinishReason = "length" if reason == "length" or len(ids) >= max_new_tokens else "stop"
        return Generation(ids, logprobs, finish)
