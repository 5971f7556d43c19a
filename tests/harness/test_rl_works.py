"""RL works at all (issue 6, acceptance point 8), with a test that can fail.

From a warm-started tiny model, ``python -m harness train`` on a handful of fixed local questions
raises their success rate well beyond its starting value within a bounded number of steps, for
each trainer (``single_agent``, ``frozen_sub``, ``mgrpo``: the planner's success, and for
``mgrpo`` the sub-agent's too); the same run with a deliberately broken advantage (sign flipped,
``tests/support/broken_advantage.py``) fails the very same check.

Design (measured on the shared 2-core CPU, 2026-12; see the module constants for the numbers):

* **Questions**: the 4 one-hop GAIA-style train tasks of the tiny world (seed 0, ``n_train=6``):
  the country and the population of a city, the host city of an event, the organiser of another.
* **Warm starts** (~4-5 min each): a tiny model fine-tuned with the project's
  :func:`harness.warmstart.sft_train` (TRL ``SFTTrainer``) on scripted-expert transcripts of those
  questions for all three agents (one joint model, saved as ``planner/``, ``sub_agent/`` and
  ``single_agent/``; each agent is told apart by its own system prompt). The expert has one
  *systematic blind spot*: in a fixed share of its transcripts the agent gives up at once
  (``<answer>Not found</answer>`` without using its tools): planner 3 of 5 (the other two: the
  full episode, and "the sub-agent said Not found, so answer Not found"), sub-agent 1 of 4,
  single agent 1 of 3 (:data:`MIXES` ``main``). ``frozen_sub`` starts from a second warm start
  whose sub-agent has no blind spot (``sure_sub``): the frozen sub-agent's success is the ceiling
  of the planner's, and with 1 of 4 it answered ~0.45, so the planner could rise only from ~0.2 to
  that (a CI failure); one shared compromise (1 of 6) left ``mgrpo``'s sub-agent starting at up to
  0.78 with no room to rise by the margin (the next CI failure). The demonstrations contain the
  world's URL, whose port changes every run, so the warm starts (and the step-1 values) vary from
  run to run: the margins above are sized for that. All runs are one test, so they share the warm
  starts on one pytest-xdist worker.
  The other errors the expert can make (wrong relation, misread row) were measured
  too: on a memorising tiny model they are tied to near-identical question contexts and GRPO did
  not move them within 40 steps, and T=1 sampling adds scattered token slips (per-token error
  ~ the SFT loss) whose negative-advantage gradients destabilise the policy (lr >= 5e-4 collapsed
  the format; 2e-4 stayed flat).
* **Same URLs as training**: the launcher starts its world server on a free port, so the search
  results' URLs (which the agents copy into ``visit``) change every run; a tiny model fine-tuned
  in minutes cannot copy an unseen port. The test serves the world itself (one in-process server
  for the module), builds the demonstrations against that URL, and runs the launcher through a
  small shim (:data:`LAUNCH_SHIM`) that hands the roles this URL instead of starting a world
  process. Everything else is ``python -m harness train`` as users run it.
* **RL**: K=8 rollouts x 4 questions per step, d=1, 12 steps, lr 2e-4 (constant after a 2-step
  linear warm-up), sampling
  temperature 0.7, ``tools.search_top_k=2``, short turn limits.
* **Check** (:func:`rose`): mean success over the last 3 steps minus the success of step 1 >=
  :data:`MARGIN`. Step 1's 32 episodes are the only ones sampled from the warm start itself (one
  update already moves this tiny policy a lot: in the measured runs step 2 differed between the
  real and the sign-flipped advantage), so they are the starting value; planner success = the step records' ``correct`` component (the share
  of the step's K x B episodes answered correctly), sub-agent success = its ``expert`` component
  (the share of its aligned sub-trajectories whose result the expert judge accepts).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest


pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
WORLD = {"seed": 0, "size": "tiny"}
N_TRAIN, N_TEST, N_QUESTIONS = 6, 2, 4
SEARCH_TOP_K, MAX_CHARS = 2, 1500
#: Copies per question in the demonstrations: (full episode, "sub-agent said Not found" echo, give-up),
#: per warm start. ``frozen_sub`` gets its own: there the frozen sub-agent's success is the ceiling of the
#: planner's, so its sub-agent has no blind spot; ``mgrpo``'s sub-agent needs one to have room to improve.
MIXES = {
    "main": {"planner": (1, 1, 3), "sub_agent": (3, 0, 1), "single_agent": (2, 0, 1)},
    "sure_sub": {"planner": (1, 1, 3), "sub_agent": (1, 0, 0)},
}
#: Which warm start each run starts from.
WARM_FOR = {"single_agent": "main", "frozen_sub": "sure_sub", "mgrpo": "main"}
SFT = {"max_steps": 350, "learning_rate": 8e-3, "batch_size": 4}
STEPS = 12
LR = "2.0e-4"
#: Success must rise by at least this much (absolute, on a 0-1 share) from step 1 (the warm start) to the last 3 steps.
MARGIN = 0.2
FIRST, LAST = 1, 3
RUN_OVERRIDES = [
    "tasks.benchmarks=[gaia]", f"tasks.n_train={N_TRAIN}", f"tasks.n_test={N_TEST}", "tasks.max_hops=1",
    f"tasks.limit={N_QUESTIONS}", f"world.seed={WORLD['seed']}", f"world.size={WORLD['size']}",
    # the agents see the served URL, which the demonstrations were written against (not the presets' world.local)
    "world.address=null",
    "rollout.k=8", f"planner.groups_per_step={N_QUESTIONS}", "alignment.d=1", "rollout.temperature=0.7",
    "rollout.planner_turns=3", "rollout.sub_turns=4", "rollout.max_new_tokens=96",
    f"tools.search_top_k={SEARCH_TOP_K}", f"tools.max_chars={MAX_CHARS}", "tools.visit_backend=direct",
    f"planner.learning_rate={LR}", f"sub.learning_rate={LR}",
    "planner.lr_scheduler_type=constant_with_warmup", "planner.warmup_steps=2",
    "sub.lr_scheduler_type=constant_with_warmup", "sub.warmup_steps=2",
    "eval.every=0", "planner.save_steps=0", "sub.save_steps=0", "seed=0", "threads=1",
    "store.group_timeout_s=300",
]
FLIPPED = "tests.support.broken_advantage:sign_flipped"

#: ``python -c`` body: ``python -m harness train`` with the world served by the test (see the docstring).
LAUNCH_SHIM = """
import os, sys
import harness.train as train

URL = os.environ["RL_WORKS_WORLD_URL"]

def start_world(cfg, run_dir, env, timeout_s=60.0):
    keeper = [sys.executable, "-c", "import time; time.sleep(86400)"]  # stands in for the world process
    return train.RoleProcess("world", keeper, run_dir / "logs" / "world.log", env), URL

train.start_world = start_world
sys.exit(train.main(sys.argv[1:]))
"""


# ----------------------------------------------------------------------------------- the check
def rose(series: list[float], first: int = FIRST, last: int = LAST, margin: float = MARGIN) -> bool:
    """True when the mean of the last ``last`` values exceeds the mean of the first ``first`` by ``margin``."""
    if len(series) < first + last:
        return False
    start = sum(series[:first]) / first
    end = sum(series[-last:]) / last
    return end - start >= margin


def success_series(run: Path, role: str) -> list[float]:
    from harness.records import read_steps

    key = "correct" if role == "planner" else "expert"
    steps = sorted(read_steps(run / role / "metrics.jsonl").records, key=lambda s: s.step)
    return [float(s.reward_components[key]) for s in steps]


def rl_improved(run: Path, trainer: str) -> tuple[bool, dict[str, list[float]]]:
    """The check, the same for the real and the broken advantage: every role that trains got better."""
    roles = ["planner", "sub"] if trainer == "mgrpo" else ["planner"]
    series = {role: success_series(run, role) for role in roles}
    return all(rose(s) for s in series.values()), series


# ----------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def world_url():
    from harness.world.generator import generate_world
    from harness.world.server import WorldServer

    with WorldServer(generate_world(seed=WORLD["seed"], size=WORLD["size"])) as server:
        yield server.base_url


def questions(world: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the training questions, the world's test tasks) exactly as the planner role selects them."""
    from harness.world.tasks import TaskConfig, generate_tasks

    taskset = generate_tasks(world, TaskConfig(n_train=N_TRAIN, n_test=N_TEST))
    train = [t for t in taskset.tasks[("gaia", "train")] if len(t["gold"]["subtasks"]) <= 1][:N_QUESTIONS]
    test = [t for (_, split), ts in sorted(taskset.tasks.items()) if split == "test" for t in ts]
    return train, test


def demonstrations(train: list[dict[str, Any]], toolbox: Any, mix: dict[str, tuple[int, int, int]]
                   ) -> dict[str, list[list[dict[str, str]]]]:
    """The expert's transcripts per agent, with the give-up blind spot mixed in (one of :data:`MIXES`)."""
    from harness.agents.protocol import format_answer
    from harness.warmstart import expert_demonstrations

    demos = expert_demonstrations(train, toolbox, noise=0.0, seed=0)
    assert demos.n_correct == demos.n_tasks == N_QUESTIONS
    give_up = {"role": "assistant", "content": format_answer("Not found")}
    out: dict[str, list[list[dict[str, str]]]] = {}
    for agent, (full, echo, gave_up) in mix.items():
        rows: list[list[dict[str, str]]] = []
        for msgs in demos.of(agent):
            rows += [msgs] * full
            rows += [msgs[:3] + [{"role": "tool", "content": "Not found"}, give_up]] * echo  # msgs[2]: the delegate call
            rows += [msgs[:2] + [give_up]] * gave_up
        out[agent] = rows
    return out


def build_warm_start(out: Path, world_url: str, mix: dict[str, tuple[int, int, int]]) -> Path:
    """A warm-start directory (planner/, sub_agent/, single_agent/): one joint SFT on ``mix``'s transcripts."""
    import random

    import torch

    from harness.agents.prompts import EpisodeTokens, agent_prompt
    from harness.models import ModelSpec, load_model
    from harness.warmstart import WarmstartConfig, sft_train, tokenize_transcript, tokenizer_corpus
    from harness.world.generator import generate_world
    from harness.world.toolbox import WorldToolbox

    world = generate_world(seed=WORLD["seed"], size=WORLD["size"])
    train, test = questions(world)
    toolbox = WorldToolbox(world, base_url=world_url, k=SEARCH_TOP_K, max_chars=MAX_CHARS)
    mixed = demonstrations(train, toolbox, mix)
    model, tok = load_model(ModelSpec(name="tiny", seed=0), corpus=tokenizer_corpus(world, train + test))
    examples = []
    for agent, rows in mixed.items():
        codec = EpisodeTokens(tok, agent_prompt(agent).tools)
        examples += [tokenize_transcript(codec, m) for m in rows]
    random.Random(0).shuffle(examples)
    cfg = WarmstartConfig(model="tiny", seed=0, max_steps=SFT["max_steps"], learning_rate=SFT["learning_rate"],
                          batch_size=SFT["batch_size"])
    threads = torch.get_num_threads()
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    t0 = time.perf_counter()
    try:
        stats = sft_train(model, tok, examples, cfg, out / "planner")
    finally:
        torch.set_num_threads(threads)
    for agent in ("sub_agent", "single_agent"):
        shutil.copytree(out / "planner", out / agent, ignore=shutil.ignore_patterns("trainer"))
    print(f"\n[rl_works] warm start {out.name}: {len(examples)} transcripts, {stats['steps']} SFT steps, "
          f"loss {stats['train_loss']:.3f}, {time.perf_counter() - t0:.0f}s", flush=True)
    return out


def train_run(tmp_path: Path, trainer: str, warm: Path, world_url: str, *extra: str) -> Path:
    """``python -m harness train`` (through :data:`LAUNCH_SHIM`) on the test's questions; the run dir."""
    from mgrpo.store import open_store

    run = tmp_path / f"{trainer}-run"
    run.mkdir(parents=True)
    # Open the run's sqlite store once before the roles start: two roles creating a fresh store at the
    # same moment can hit "database is locked" on PRAGMA journal_mode=WAL (seen 1 in ~20 launches).
    open_store(f"sqlite:///{run / 'store.db'}", run_id=run.name).close()
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", RL_WORKS_WORLD_URL=world_url)
    cmd = [sys.executable, "-c", LAUNCH_SHIM, "--trainer", trainer,
           "--config", str(ROOT / f"baselines/configs/tiny/{trainer}.yaml"), "--max-steps", str(STEPS),
           "--run-dir", str(run), f"models.planner={warm}", f"models.sub={warm}", *RUN_OVERRIDES, *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    print(f"\n[rl_works] {trainer} {' '.join(extra)}: {time.perf_counter() - t0:.0f}s", flush=True)
    return run


def _show(trainer: str, series: dict[str, list[float]]) -> str:
    return f"{trainer}: " + "; ".join(f"{r} success per step {[round(x, 2) for x in s]}" for r, s in series.items())


# ----------------------------------------------------------------------------------- tests
def test_the_check_itself():
    assert rose([0.2, 0.3, 0.5, 0.7, 0.8, 0.75])
    assert not rose([0.3, 0.2, 0.4, 0.45, 0.4, 0.45])  # +0.13: not enough
    assert not rose([0.6, 0.5, 0.3, 0.1, 0.0])  # falling
    assert not rose([0.1, 0.9])  # too few steps to tell


def test_rl_raises_success_on_fixed_questions_and_a_sign_flipped_advantage_does_not(tmp_path, world_url):
    """One test for the four runs, so they share their warm starts on one xdist worker (each costs minutes)."""
    warm = {name: build_warm_start(tmp_path / f"warm-{name}", world_url, mix) for name, mix in MIXES.items()}
    problems, shown = [], []
    for trainer in ("single_agent", "frozen_sub", "mgrpo"):
        run = train_run(tmp_path, trainer, warm[WARM_FOR[trainer]], world_url)
        ok, series = rl_improved(run, trainer)
        shown.append(_show(trainer, series))
        print(shown[-1], flush=True)
        if len(series["planner"]) != STEPS:
            problems.append(f"{trainer}: {len(series['planner'])} step records, expected {STEPS}")
            continue
        start = sum(series["planner"][:FIRST]) / FIRST
        if not 0.05 <= start <= 0.75:
            problems.append(f"{trainer}: the warm start should begin at a moderate success, got {start:.2f}")
        if not ok:
            problems.append(f"{trainer}: success did not rise by {MARGIN} (first {FIRST} steps -> last {LAST})")

    run = train_run(tmp_path / "flipped", "mgrpo", warm[WARM_FOR["mgrpo"]], world_url,
                    f"planner.advantage_fn={FLIPPED}", f"sub.advantage_fn={FLIPPED}")
    ok, series = rl_improved(run, "mgrpo")
    shown.append(_show("mgrpo (sign-flipped advantages)", series))
    print(shown[-1], flush=True)
    planner = series["planner"]
    if ok:
        problems.append("a sign-flipped advantage still passed the check")
    if not sum(planner[-LAST:]) / LAST < sum(planner[:FIRST]) / FIRST:
        problems.append("with a sign-flipped advantage the planner did not get worse")
    assert not problems, "; ".join(problems) + "\n" + "\n".join(shown)
