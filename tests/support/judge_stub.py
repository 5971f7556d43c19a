"""A scriptable stub of an OpenAI-compatible chat-completions server, for judge tests.

Stdlib only: ``http.server.ThreadingHTTPServer`` on 127.0.0.1, port 0 (the OS picks a free one),
served from a daemon thread. ``POST /v1/chat/completions`` answers from a script, one entry per
request, then ``default`` for every later request:

* a ``str``: a 200 response whose ``choices[0].message.content`` is that string (``""`` for an
  empty verdict, any text for a garbage one);
* ``None``: a 200 response whose content is JSON ``null``;
* ``Reply(status, body)``: a raw response (e.g. ``Reply(500, "boom")``, or a 200 with a non-JSON body);
* ``Delay(seconds, then)``: sleep first (to trigger client timeouts), then answer ``then``;
* a callable ``f(request_json) -> entry``: decides from the request (e.g. from the prompt).

``stub.requests`` keeps each request's parsed JSON body and ``stub.headers`` its headers, so tests
count calls (cache hits make none) and check what was sent.

    with JudgeStub(["结论: 正确", Reply(500, "x")]) as stub:
        get_judge("llm", base_url=stub.base_url, model="m", api_key_env=None, ...)
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int
    body: str = ""


@dataclass
class Delay:
    seconds: float
    then: Any = "结论: 正确"


class JudgeStub:
    def __init__(self, script: list[Any] | None = None, default: Any = '{"verdict": "incorrect"}'):
        self.script = list(script or [])
        self.default = default
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> "JudgeStub":
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server naming
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"_unparseable": raw.decode("utf-8", "replace")}
                with stub._lock:
                    stub.requests.append(body)
                    stub.headers.append(dict(self.headers.items()))
                    entry = stub.script.pop(0) if stub.script else stub.default
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    entry = Reply(404, "not found")
                self._answer(entry, body)

            def _answer(self, entry: Any, body: dict[str, Any]) -> None:
                if callable(entry) and not isinstance(entry, (Reply, Delay)):
                    entry = entry(body)
                if isinstance(entry, Delay):
                    time.sleep(entry.seconds)
                    entry = entry.then
                if isinstance(entry, Reply):
                    status, payload = entry.status, entry.body.encode("utf-8")
                    ctype = "text/plain"
                else:
                    status, ctype = 200, "application/json"
                    payload = json.dumps({
                        "id": f"stub-{len(stub.requests)}", "object": "chat.completion",
                        "model": body.get("model"),
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": entry}}],
                    }).encode("utf-8")
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="judge-stub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "JudgeStub":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- info --------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        assert self._server is not None, "stub not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def count(self) -> int:
        return len(self.requests)

    def prompts(self) -> list[str]:
        return [m["content"] for r in self.requests for m in r.get("messages", []) if m.get("role") == "user"]


