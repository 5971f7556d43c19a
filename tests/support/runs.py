"""Real training runs for the resume and fault tests (docs/training.md "Checkpoints and resume", docs/reliability.md).

- :func:`build_warm_start`: a tiny planner fine-tuned in ~20 s to answer every question with one fixed
  ``delegate`` call (:data:`CALL_JSON`, added to its tokenizer as one token, so a few dozen SFT steps suffice),
  and optionally a sub-agent fine-tuned the same way to answer every subtask with one fixed ``visit`` call
  (:data:`VISIT_JSON`), so that the sub-agent trains (an untrained tiny planner never delegates) and its
  episodes use the browser.
- :class:`Launch`: one ``python -m harness train`` launcher in its own process group, its console in a file,
  with the waits and the SIGSTOP/SIGKILL helpers the tests use.
- :func:`steps_of`: the steps a role has recorded; :func:`store_groups`: a run's groups as the store has them.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from harness.records import read_steps

ROOT = Path(__file__).resolve().parents[2]

#: The one delegation the warm-started planner makes (one added token of its tokenizer).
CALL_JSON = '{"name":"delegate","arguments":{"task":"a"}}'
#: The one tool call the warm-started sub-agent makes (the world's portal; one added token).
VISIT_JSON = '{"name":"visit","arguments":{"url":"http://world.local/index.html"}}'


def _sft(model: Any, tok: Any, examples: list[dict[str, list[int]]], steps: int = 50) -> float:
    """A few AdamW steps on ``examples`` (batches of 4, one thread, seed 0); returns the last loss."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng(devices=[]):  # deterministic: the new token's embedding is drawn too
            torch.manual_seed(0)
            model.resize_token_embeddings(len(tok))  # mean_resizing: at 1e-2 or with a plain init, some seeds diverge
            opt = torch.optim.AdamW(model.parameters(), lr=5e-3, weight_decay=0.0)
            model.train()
            rng = random.Random(0)
            for _ in range(steps):
                batch = rng.sample(examples, min(4, len(examples)))
                n = max(len(e["input_ids"]) for e in batch)
                ids = torch.tensor([e["input_ids"] + [tok.pad_token_id] * (n - len(e["input_ids"])) for e in batch])
                labels = torch.tensor([e["labels"] + [-100] * (n - len(e["labels"])) for e in batch])
                loss = model(input_ids=ids, attention_mask=(ids != tok.pad_token_id).long(), labels=labels).loss
                loss.backward()
                opt.step()
                opt.zero_grad()
    finally:
        torch.set_num_threads(threads)
    model.eval()
    return float(loss.item())


def build_warm_start(out: Path, config: Path, overrides: list[str], *, sub_visits: bool = False) -> Path:
    """Write ``out/planner`` (always delegates :data:`CALL_JSON`) and ``out/sub_agent`` (the same weights, or
    with ``sub_visits`` a sub-agent that always calls :data:`VISIT_JSON`) for the run ``config`` + ``overrides``."""
    from tokenizers import AddedToken

    from harness.agents.prompts import EpisodeTokens, agent_prompt, initial_messages
    from harness.models import ModelSpec, load_model
    from harness.role.common import load_role_config
    from harness.role.tasks import generate_run_tasks
    from harness.warmstart import tokenize_transcript
    from harness.world.tasks import rebase, task_prompt

    t0 = time.perf_counter()
    cfg = load_role_config(str(config), overrides)
    prepared = generate_run_tasks(cfg)  # the run's task set (the launcher prepares the same one)
    tasks, evals = prepared.by_id(), prepared.evals

    def tuned(agent: str, call: str, messages: list[list[dict[str, str]]]) -> Any:
        model, tok = load_model(ModelSpec(name="tiny", seed=0))
        tok.add_tokens([AddedToken(call, special=False, normalized=False, single_word=False)])
        codec = EpisodeTokens(tok, agent_prompt(agent).tools)
        turn = {"role": "assistant", "content": f"<tool_call>{call}</tool_call>"}
        loss = _sft(model, tok, [tokenize_transcript(codec, m + [turn]) for m in messages])
        assert loss < 0.05, f"the {agent} SFT did not converge (loss {loss:.3f})"
        return model, tok, loss

    questions = [initial_messages("planner", task_prompt(rebase(t, cfg.world.address))) for t in [*tasks.values(), *evals]]
    planner, planner_tok, loss = tuned("planner", CALL_JSON, questions)
    sub, sub_tok = planner, planner_tok
    if sub_visits:
        sub, sub_tok, _ = tuned("sub_agent", VISIT_JSON, [initial_messages("sub_agent", "a")])
    for agent, (model, tok) in {"planner": (planner, planner_tok), "sub_agent": (sub, sub_tok)}.items():
        model.save_pretrained(out / agent)
        tok.save_pretrained(out / agent)
    print(f"\n[warm start] {len(questions)} questions, loss {loss:.4f}, sub-agent visits: {sub_visits}, "
          f"{time.perf_counter() - t0:.0f}s", flush=True)
    return out


class Launch:
    """One ``python -m harness train`` launcher (its own process group) with its console in a file."""

    def __init__(self, run: Path, *args: str, log_dir: Path | None = None) -> None:
        self.run = run
        self.log = (log_dir or run.parent) / f"{run.name}-launch-{time.monotonic_ns()}.log"
        env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        with open(self.log, "wb") as fh:
            self.proc = subprocess.Popen([sys.executable, "-m", "harness", "train", *args], cwd=ROOT, env=env,
                                         stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def role_pids(self) -> dict[str, int]:
        return {m.group(1): int(m.group(2)) for m in re.finditer(r"started role (\w+) \(pid (\d+)", self.text())}

    def wait_for(self, what: str, cond: Callable[[], bool], timeout: float = 240.0, poll: float = 0.003) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if self.proc.poll() is not None:
                raise AssertionError(f"the launcher exited ({self.proc.returncode}) before {what}:\n"
                                     f"{self.text()[-3000:]}")
            if time.monotonic() > deadline:
                self.crash()
                raise AssertionError(f"timed out waiting for {what}:\n{self.text()[-3000:]}")
            time.sleep(poll)

    def freeze(self) -> dict[str, int]:
        """SIGSTOP the launcher and its roles at once, so the state seen next is the state killed."""
        os.killpg(self.proc.pid, signal.SIGSTOP)
        pids = self.role_pids()
        for pid in pids.values():
            _signal(pid, signal.SIGSTOP)
        return pids

    def crash(self) -> None:
        """SIGKILL everything: the roles (their own sessions) and the launcher's group. Nobody writes a word."""
        for pid in self.role_pids().values():
            _signal(pid, signal.SIGKILL)
        _signal(-self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        for pid in self.role_pids().values():
            _wait_gone(pid)

    def finish(self, timeout: float = 300.0) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.crash()
            raise AssertionError(f"the launcher did not finish within {timeout:.0f}s:\n{self.text()[-3000:]}") from None


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig) if pid > 0 else os.killpg(-pid, sig)
    except ProcessLookupError:
        pass


def _proc_state(pid: int) -> str | None:
    """The state letter of ``pid`` (``Z``: a zombie), None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _wait_gone(pid: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while _proc_state(pid) not in (None, "Z") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _proc_state(pid) in (None, "Z"), f"pid {pid} outlived SIGKILL"


def steps_of(run: Path, role: str) -> list[int]:
    path = run / role / "metrics.jsonl"
    return [r.step for r in read_steps(path, tolerate_truncated_tail=True).records] if path.is_file() else []




def store_groups(url: str, run_id: str) -> tuple[dict[str, Any], list[Any], list[str], dict[str, int]]:
    """The run's query groups in the store: ``(progress, consumer log, pending, sub-calls per group)``."""
    from mgrpo.store import open_store

    store = open_store(url, run_id=run_id)
    try:
        progress = store.group_progress()
        return (progress, store.consumed_groups(), store.pending_groups(),
                {q: sum(r.n_sub_calls for r in store.get_rollouts(q)) for q in progress})
    finally:
        store.close()
