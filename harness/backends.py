"""Generation backends: batched token-in/token-out sampling with logprobs (DESIGN §6, §2).

A :class:`GenerationBackend` takes a batch of prompts as token ids and returns, per prompt, the
completion token ids, the per-token sampling logprobs and why it stopped. The rollout sends every
pending turn of every active episode of a group to it as **one** batch (DESIGN §2, "batching is
the performance core").

* :class:`HFBackend` runs a transformers causal LM in-process: its own sampling loop over a KV
  cache (``model(input_ids, attention_mask, position_ids, past_key_values)`` step by step), batched
  with **left padding** and explicit position ids, so a padded prompt is generated exactly as it
  would be alone (tested under greedy decoding).
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
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import torch

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


class HFBackend:
    """In-process batched generation with a transformers causal LM (DESIGN §6 ``hf`` backend).

    ``model`` is any ``*ForCausalLM`` that accepts ``position_ids`` and ``past_key_values``;
    ``tokenizer`` provides ``pad_token_id`` (or ``eos_token_id``) for left padding.
    ``max_batch_size`` splits larger batches into chunks (``None``: all at once). The model's
    train/eval mode is restored after each call (TRL reads ``model.training``).
    """

    def __init__(self, model: Any, tokenizer: Any, *, max_batch_size: int | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if pad is None:
            raise ValueError("the tokenizer has neither a pad token nor an eos token to pad with")
        self.pad_token_id: int = int(pad)
        if max_batch_size is not None and max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1 or None, got {max_batch_size}")
        self.max_batch_size = max_batch_size

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
            out: list[Generation] = []
            for start in range(0, len(prompts), size):
                out += self._generate_batch(
                    prompts[start : start + size], max_new_tokens, temperature, top_p, set(stop_token_ids), generator
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
        input_ids = torch.full((batch, longest), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((batch, longest), dtype=torch.long)
        for i, p in enumerate(prompts):
            input_ids[i, longest - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[i, longest - len(p) :] = 1
        input_ids, mask = input_ids.to(device), mask.to(device)
        # positions count real tokens only, so a left-padded prompt sees the positions it would alone
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        stop_tensor = torch.tensor(sorted(stops), dtype=torch.long, device=device) if stops else None

        out = self.model(
            input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1
        )
        cache, logits = out.past_key_values, out.logits[:, -1, :]
        next_pos = positions[:, -1] + 1
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
            mask = torch.cat([mask, torch.ones((batch, 1), dtype=mask.dtype, device=device)], dim=1)
            out = self.model(
                input_ids=token.unsqueeze(-1),
                attention_mask=mask,
                position_ids=next_pos.unsqueeze(-1),
                past_key_values=cache,
                use_cache=True,
            )
            cache, logits = out.past_key_values, out.logits[:, -1, :]
            next_pos = next_pos + 1

        tokens_l, logps_l, length_l, done_l = tokens[:, :steps].tolist(), logps[:, :steps].tolist(), length.tolist(), done.tolist()
        return [
            Generation(
                token_ids=tokens_l[i][: length_l[i]],
                logprobs=logps_l[i][: length_l[i]],
                finish_reason="stop" if done_l[i] else "length",
            )
            for i in range(batch)
        ]


class VLLMBackend:
    """HTTP client of a vLLM server launched with ``trl vllm-serve`` (DESIGN §6 ``vllm`` backend).

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
