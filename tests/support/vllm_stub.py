"""A stdlib HTTP stub of the vLLM server that ``trl vllm-serve`` runs (TRL 1.16), for client tests.

Speaks the subset :class:`harness.backends.VLLMBackend` and TRL's ``VLLMClient.generate`` use:
``GET /health``, ``GET /v1/models`` and ``POST /v1/completions`` with token-id prompts,
``return_token_ids``/``return_tokens_as_token_ids``, ``logprobs``, ``stop_token_ids``, ``seed``.
Each choice carries ``index``, ``token_ids``, ``prompt_token_ids``, ``finish_reason`` and
``logprobs = {"tokens": ["token_id:<id>", ...], "token_logprobs": [...], "top_logprobs": [...]}``
like vLLM's completions endpoint. Like vLLM, the stop token is included in ``token_ids``.

Completions are deterministic: token ``j`` of a completion is ``(sum(prompt) + 7 * j + seed) %
vocab_size`` (seed 0 when absent), its logprob ``-0.01 * (j + 1)``; pass ``responder`` to script
something else. Every request body is kept in ``requests`` for assertions; ``fail_next`` makes the
next completions request answer HTTP 500; ``reverse_choices`` returns choices
in reverse order (vLLM keeps prompt order; this checks clients use ``index``). Binds 127.0.0.1 on a free port only.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Responder = Callable[[list[int], dict[str, Any]], tuple[list[int], list[float]]]


def default_responder(vocab_size: int) -> Responder:
    def respond(prompt: list[int], params: dict[str, Any]) -> tuple[list[int], list[float]]:
        seed = int(params.get("seed") or 0)
        n = int(params.get("max_tokens", 16))
        ids = [(sum(prompt) + 7 * j + seed) % vocab_size for j in range(n)]
        return ids, [-0.01 * (j + 1) for j in range(n)]

    return respond


class VLLMStub:
    """Context manager running the stub server in a thread; ``url`` is its base URL."""

    def __init__(self, model: str = "stub-model", vocab_size: int = 100, responder: Responder | None = None) -> None:
        self.model = model
        self.vocab_size = vocab_size
        self.responder = responder or default_responder(vocab_size)
        self.requests: list[dict[str, Any]] = []
        self.fail_next = False
        self.reverse_choices = False
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "stub not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> "VLLMStub":
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 (http.server API)
                if self.path.rstrip("/") == "/health":
                    self._send(200, {})
                elif self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": stub.model, "object": "model"}]})
                else:
                    self._send(404, {"detail": "Not Found"})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", 0))
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    self._send(400, {"error": "invalid JSON"})
                    return
                if self.path.rstrip("/") != "/v1/completions":
                    self._send(404, {"detail": "Not Found"})
                    return
                with stub._lock:
                    stub.requests.append(body)
                    fail, stub.fail_next = stub.fail_next, False
                if fail:
                    self._send(500, {"error": "injected failure"})
                    return
                self._send(200, stub._complete(body))

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _complete(self, body: dict[str, Any]) -> dict[str, Any]:
        prompts = body["prompt"]
        if prompts and isinstance(prompts[0], int):  # a single token-id prompt
            prompts = [prompts]
        stops = set(body.get("stop_token_ids") or [])
        want_logprobs = body.get("logprobs") is not None
        choices = []
        for i, prompt in enumerate(prompts):
            ids, logprobs = self.responder(list(prompt), body)
            ids, logprobs = ids[: body.get("max_tokens", 16)], logprobs[: body.get("max_tokens", 16)]
            finish = "length"
            for j, t in enumerate(ids):
                if t in stops:
                    ids, logprobs, finish = ids[: j + 1], logprobs[: j + 1], "stop"
                    break
            choices.append(
                {
                    "index": i,
                    "text": "",
                    "token_ids": ids,
                    "prompt_token_ids": list(prompt),
                    "finish_reason": finish,
                    "stop_reason": ids[-1] if finish == "stop" else None,
                    "logprobs": {
                        "tokens": [f"token_id:{t}" for t in ids],
                        "token_logprobs": logprobs,
                        "top_logprobs": [{} for _ in ids],
                        "text_offset": [0 for _ in ids],
                    }
                    if want_logprobs
                    else None,
                }
            )
        if self.reverse_choices:  # to check that a client orders choices by "index"
            choices = choices[::-1]
        return {"id": "cmpl-stub", "object": "text_completion", "model": self.model, "choices": choices}
