"""The planner's optional reasoner tool (harness/tools/reasoner.py; issue 17, paper §3), against a local
stand-in for an OpenAI-compatible chat-completions server that records every request it gets."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harness.config import ConfigError
from harness.models import load_model
from harness.protocol import format_answer, format_tool_call
from harness.rollout import AgentRuntime, InProcessSubAgent, Query, RolloutConfig, SubAgentEngine, run_group
from harness.tools.reasoner import KEY_ENV, MODEL_ENV, URL_ENV, ReasonerClient
from harness.train_config import load_train_config
from tests.harness.test_rollout import RecordingToolbox, ScriptedBackend, sub_policy

KEY = "sk-test-secret-0123456789"
ROOT = Path(__file__).resolve().parents[3]


class StandIn:
    """``POST /v1/chat/completions`` answering ``reply(question)``; ``status`` forces an HTTP error."""

    def __init__(self):
        self.requests: list[dict] = []
        self.status = 200
        self.body: str | None = None
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                data = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stand_in.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **data})
                question = data["messages"][-1]["content"]
                body = stand_in.body if stand_in.body is not None else json.dumps(
                    {"choices": [{"message": {"role": "assistant", "content": f"reasoned: {question}"}}]})
                self.send_response(stand_in.status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stand_in(monkeypatch):
    server = StandIn()
    monkeypatch.setenv(URL_ENV, server.url)
    monkeypatch.setenv(MODEL_ENV, "reasoner-model")
    monkeypatch.setenv(KEY_ENV, KEY)
    yield server
    server.close()


def test_ask_sends_the_model_and_the_key_and_returns_the_answer(stand_in):
    client = ReasonerClient.from_env()
    assert client.ask("What is 17 * 3?") == "reasoned: What is 17 * 3?"
    (req,) = stand_in.requests
    assert req["path"] == "/v1/chat/completions" and req["model"] == "reasoner-model"
    assert req["auth"] == f"Bearer {KEY}" and req["messages"] == [{"role": "user", "content": "What is 17 * 3?"}]
    assert KEY not in repr(client)


def test_failures_are_error_observations_that_never_show_the_key(stand_in, monkeypatch):
    client = ReasonerClient.from_env(max_chars=20)
    stand_in.status = 500
    assert client.ask("q") == f"Error: reasoner returned HTTP 500 ({stand_in.url}/chat/completions)"
    stand_in.status, stand_in.body = 200, '{"choices": []}'
    assert client.ask("q").startswith("Error: reasoner response without choices[0].message.content")
    stand_in.body = json.dumps({"choices": [{"message": {"content": f"the key is {KEY} " + "x" * 50}}]})
    long = client.ask("q")
    assert KEY not in long and long.endswith("[truncated]")
    # unreachable (the key in the URL of a careless user is still removed)
    monkeypatch.setenv(URL_ENV, f"http://127.0.0.1:9/{KEY}")
    down = ReasonerClient.from_env(timeout_s=2).ask("q")
    assert down.startswith("Error: reasoner unreachable") and KEY not in down


def test_a_missing_endpoint_is_a_clear_error_naming_the_variable(monkeypatch):
    monkeypatch.delenv(URL_ENV, raising=False)
    monkeypatch.setenv(MODEL_ENV, "m")
    with pytest.raises(ConfigError, match=f"set {URL_ENV} in the environment"):
        ReasonerClient.from_env()
    monkeypatch.setenv(URL_ENV, "ftp://x")
    with pytest.raises(ConfigError, match="must start with http"):
        ReasonerClient.from_env()


def test_the_planner_with_the_reasoner_sees_the_tool_and_its_answer(stand_in):
    tokenizer = load_model("tiny")[1]

    def planner(prompt: str) -> str:
        n_obs = prompt.count("<tool_response>")
        if n_obs == 0:
            return format_tool_call("reasoner", {"question": "Is 1997 before 2003?"})
        if n_obs == 1:
            return format_tool_call("delegate", {"task": "find the founder of Ardent Labs"})
        return format_answer("Marlow Vance")

    cfg = RolloutConfig(k=2)
    runtime = AgentRuntime(ScriptedBackend(tokenizer, planner), tokenizer)
    engine = SubAgentEngine(AgentRuntime(ScriptedBackend(tokenizer, sub_policy), tokenizer), RecordingToolbox(), cfg)
    res = run_group([Query("q", "Who founded Ardent Labs?")], runtime, cfg, sub_agent=InProcessSubAgent(engine),
                    reasoner=ReasonerClient.from_env())
    for ep in res.episodes:
        t = ep.trajectory
        assert t.agent == "planner_reasoner" and t.format_ok and t.final == "Marlow Vance"
        assert "reasoner" in tokenizer.decode(t.prompt_ids)  # the tool schema is in the system turn
        tool_turns = [m["content"] for m in t.messages if m["role"] == "tool"]
        assert tool_turns[0] == "reasoned: Is 1997 before 2003?" and len(ep.sub_results) == 1
    assert len(stand_in.requests) == 2  # one per rollout; a reasoner call is not a delegation
    # without the reasoner the same call is an unknown tool: a format error, no request
    runtime = AgentRuntime(ScriptedBackend(tokenizer, planner), tokenizer)
    res = run_group([Query("q", "?")], runtime, cfg, sub_agent=InProcessSubAgent(engine))
    assert all(not e.trajectory.format_ok and e.trajectory.agent == "planner" for e in res.episodes)
    assert len(stand_in.requests) == 2


def test_the_reasoner_is_the_planners_tool_only():
    with pytest.raises(ConfigError, match="tools.reasoner is the planner's tool; trainer single_agent"):
        load_train_config(str(ROOT / "baselines/configs/tiny/single_agent.yaml"), ["tools.reasoner=true"])
    assert load_train_config(str(ROOT / "baselines/configs/tiny/mgrpo.yaml"), ["tools.reasoner=true"]).tools.reasoner
