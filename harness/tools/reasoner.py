"""The planner's optional ``reasoner`` tool (paper §3: the planner may consult an external reasoning LLM,
which is not trained; docs/tools.md §Reasoner).

Off by default (``tools.reasoner: false``). When on, the planner's prompt lists ``reasoner`` next to
``delegate`` (``harness.agents.prompts``: ``planner_reasoner``) and each ``reasoner`` call is one request
to an OpenAI-compatible chat-completions endpoint named by the environment, never by a config file:

* ``MGRPO_REASONER_URL``: the API base, e.g. ``http://127.0.0.1:8000/v1`` (``/chat/completions`` is added);
* ``MGRPO_REASONER_MODEL``: the model name sent with each request;
* ``MGRPO_REASONER_API_KEY`` (optional): sent as ``Authorization: Bearer <key>``.

The answer (``choices[0].message.content``) becomes the observation, cut to ``max_chars``. A failed request
(unreachable, timeout, HTTP error, a malformed response) is an ``Error: ...`` observation naming the status,
never an exception that ends the rollout. Secrets: the key is read from the environment per request, kept
out of ``repr``, and removed from every error text, so it never reaches observations, records or logs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import requests

from harness.config import ConfigError
from harness.protocol import render_error

URL_ENV = "MGRPO_REASONER_URL"
MODEL_ENV = "MGRPO_REASONER_MODEL"
KEY_ENV = "MGRPO_REASONER_API_KEY"


@dataclass(frozen=True)
class ReasonerClient:
    """``ask(question) -> observation`` against an OpenAI-compatible chat-completions endpoint."""

    url: str
    model: str
    timeout_s: float = 60.0
    max_tokens: int = 512
    max_chars: int = 2000

    @classmethod
    def from_env(cls, **kw: Any) -> ReasonerClient:
        """The endpoint of the environment; :class:`ConfigError` naming the variable that is missing."""
        url, model = os.environ.get(URL_ENV, "").strip(), os.environ.get(MODEL_ENV, "").strip()
        missing = [name for name, value in ((URL_ENV, url), (MODEL_ENV, model)) if not value]
        if missing:
            raise ConfigError(f"tools.reasoner: set {' and '.join(missing)} in the environment (an OpenAI-compatible "
                              f"endpoint, e.g. {URL_ENV}=http://127.0.0.1:8000/v1 {MODEL_ENV}=Qwen/Qwen3-8B; the key, "
                              f"if any, in {KEY_ENV}); docs/tools.md")
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"{URL_ENV}={url!r} must start with http:// or https://")
        return cls(url.rstrip("/"), model, **kw)

    def _scrub(self, text: str) -> str:
        key = os.environ.get(KEY_ENV, "")
        return text.replace(key, "<key>") if key else text

    def ask(self, question: str) -> str:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(KEY_ENV, "")
        if key:
            headers["Authorization"] = f"Bearer {key}"
        body = {"model": self.model, "messages": [{"role": "user", "content": question}],
                "max_tokens": self.max_tokens}
        endpoint = f"{self.url}/chat/completions"
        try:
            resp = requests.post(endpoint, json=body, headers=headers, timeout=self.timeout_s)
        except requests.RequestException as exc:
            return render_error(self._scrub(f"reasoner unreachable ({type(exc).__name__} at {endpoint})"))
        if resp.status_code != 200:
            return render_error(self._scrub(f"reasoner returned HTTP {resp.status_code} ({endpoint})"))
        try:
            text = resp.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            return render_error(self._scrub(f"reasoner response without choices[0].message.content ({endpoint})"))
        text = self._scrub(str(text or "")).strip()
        if len(text) > self.max_chars:
            text = text[: self.max_chars] + "\n[truncated]"
        return text or render_error("the reasoner returned an empty answer")
