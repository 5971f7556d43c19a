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
  full episode, and "the sub-agent said Not found, so answer Not found"), sub-agent 2 of 4,
  single agent 1 of 3 (:data:`MIXES` ``main``). ``frozen_sub`` starts from a second warm start
  whose sub-agent has no blind spot (``sure_sub``): the frozen sub-agent's success is the ceiling
  of the planner's, and with 1 of 4 it answered ~0.45, so the planner could rise only from ~0.2 to
  that (a CI failure); one shared compromise (1 of 6) left ``mgrpo``'s sub-agent starting at up to
  0.78 with no room to rise by the margin (the next CI failure); 2 of 4 leaves it room on the
  clean delegations of the evaluation below. The demonstrations contain the
  world's URL, whose port changes every run, so the warm starts (and the starting values) vary from
  run to run: the margins above are sized for that. The runs are four tests in two pytest-xdist
  groups, one per warm start (``single_agent``, ``mgrpo`` and the sign-flipped run share "main", which
  also shares the evaluation of the warm start between ``mgrpo`` and the flipped run; ``frozen_sub``
  has "sure_sub"), so CI's two workers share them (docs/performance.md, "The test suite").
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
* **Check** (:func:`rose`): a fixed evaluation of the policies before (the warm start) and after
  (the run's last checkpoints) training, :data:`EVAL_K` samples per question at the training
  temperature with a fixed seed (:func:`evaluate`): success after minus success before >=
  :data:`MARGIN`. Planner success = the share of the K x 4 episodes (planner + sub-agent, or the
  single agent) answered correctly; sub-agent success = the share of its episodes on the expert's
  delegations of the 4 questions whose result the expert judge accepts (the sub-agent alone, so the
  planner's change does not blur it). Why not the step records' success: step 1 is the only step
  sampled from the warm start, and its sub-agent share rests on the ~13 episodes in which the
  warm-started planner delegated (std ~0.15): one CI run failed with sub-agent 0.53 -> 0.70 and
  frozen_sub rose by ~0.3 +- 0.09 run to run, both too close to the margin to be a reliable check.
  128 episodes per evaluation put the standard deviation of a difference near 0.06. The step
  series are still printed. Measured (2026-12-03): single_agent 0.45 -> 0.93, frozen_sub 0.27 ->
  0.88, mgrpo planner 0.09 -> 0.73 and sub-agent 0.31 -> 0.90; sign-flipped planner 0.09 -> 0.00,
  sub-agent 0.31 -> 0.05 (docs/training.md).
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

from tests.support.threads import worker_threads

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
WORLD = {"seed": 0, "size": "tiny"}
N_TRAIN, N_TEST, N_QUESTIONS = 6, 2, 4
SEARCH_TOP_K, MAX_CHARS = 2, 1500
#: Copies per question in the demonstrations: (full episode, "sub-agent said Not found" echo, give-up),
#: per warm start. ``frozen_sub`` gets its own: there the frozen sub-agent's success is the ceiling of the
#: planner's, so its sub-agent has no blind spot; ``mgrpo``'s sub-agent needs one to have room to improve.
MIXES = {
    "main": {"planner": (1, 1, 3), "sub_agent": (2, 0, 2), "single_agent": (2, 0, 1)},
    "sure_sub": {"planner": (1, 1, 3), "sub_agent": (1, 0, 0)},
}
#: Which warm start each run starts from.
WARM_FOR = {"single_agent": "main", "frozen_sub": "sure_sub", "mgrpo": "main"}
SFT = {"max_steps": 350, "learning_rate": 8e-3, "batch_size": 4}
STEPS = 12
LR = "2.0e-4"
#: Success must rise by at least this much (absolute, on a 0-1 share) from the warm start to the last checkpoint.
#: 2.5 standard deviations of the evaluation's difference (~0.06). It was 0.2 until a CI run of the unchanged
#: single_agent check rose 0.39 -> 0.57 (+0.18) with its step records climbing 0.44 -> 0.72: real learning at the
#: low end of its run-to-run spread (the warm start changes with the world's port), not noise. The sign-flipped
#: run falls (-0.09) and must still fail.
MARGIN = 0.15
#: Samples per question (and per sub-agent delegation) in the before/after evaluation, and its seed.
EVAL_K, EVAL_SEED = 32, 20261203
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
def rose(before: float, after: float, margin: float = MARGIN) -> bool:
    """True when ``after`` exceeds ``before`` by at least ``margin``."""
    return after - before >= margin


def success_series(run: Path, role: str) -> list[float]:
    """The step records' success per step (shown next to the check; see the module docstring)."""
    from harness.records import read_steps

    key = "correct" if role == "planner" else "expert"
    steps = sorted(read_steps(run / role / "metrics.jsonl").records, key=lambda s: s.step)
    return [float(s.reward_components[key]) for s in steps]


def delegations(train: list[dict[str, Any]], world_url: str) -> list[tuple[dict[str, Any], str, str]]:
    """(task, delegated task, context) of the scripted expert's first ``delegate`` call per question."""
    from harness.agents.parsing import ToolCall, parse_turn
    from harness.warmstart import expert_demonstrations
    from harness.world.generator import generate_world
    from harness.world.toolbox import WorldToolbox

    toolbox = WorldToolbox(generate_world(seed=WORLD["seed"], size=WORLD["size"]), base_url=world_url,
                           k=SEARCH_TOP_K, max_chars=MAX_CHARS)
    demos = expert_demonstrations(train, toolbox, noise=0.0, seed=0)
    out = []
    for task, msgs in zip(train, demos.planner):
        call = parse_turn(msgs[2]["content"], {"delegate"})
        assert isinstance(call, ToolCall), msgs[2]
        out.append((task, call.arguments["task"], call.arguments.get("context", "")))
    return out


def evaluate(run: Path, trainer: str, world_url: str, *, after: bool) -> dict[str, float]:
    """Success of the run's policies on its questions: the warm start (``after=False``) or its last checkpoints.

    :data:`EVAL_K` samples per question at the run's own rollout settings (temperature, turn and
    token limits) with a fixed seed, so before and after see the same random stream."""
    from dataclasses import replace

    import torch

    from harness.backends import HFBackend
    from harness.role.checkpoints import last_checkpoint
    from harness.role.common import build_toolbox, gold_answer, load_model_for, load_role_config
    from harness.role.sub import r_expert
    from harness.rollout import AgentRuntime, InProcessSubAgent, Query, SubAgentEngine, SubTask, run_group
    from harness.world.expert import answers_match, task_id
    from harness.world.generator import generate_world
    from harness.world.tasks import rebase, task_prompt

    cfg = load_role_config(str(run / "config.yaml"), [])
    rcfg = replace(cfg.rollout, k=EVAL_K)

    def policy(role: str, agent: str) -> tuple[Any, Any]:
        ckpt = last_checkpoint(run / role / "checkpoints") if after else None
        frozen = run / role / "checkpoints" / "checkpoint-0"
        if after and ckpt is None and frozen.is_dir():
            ckpt = str(frozen)  # frozen_sub's sub-agent: its weights saved as they are, no trainer state
        assert ckpt or not after, f"{run}: no checkpoint under {role}/checkpoints"
        model, tok = load_model_for(ckpt or (cfg.models.planner if role == "planner" else cfg.models.sub), agent, cfg)
        return model.eval(), tok

    train, _ = questions(generate_world(seed=WORLD["seed"], size=WORLD["size"]))
    queries = [Query(task_id(t), task_prompt(rebase(t, world_url))) for t in train]
    gold = {task_id(t): gold_answer(t) for t in train}
    toolbox = build_toolbox(cfg, world_url)
    threads = torch.get_num_threads()
    torch.set_num_threads(worker_threads())
    out: dict[str, float] = {}
    try:
        with torch.no_grad():
            if trainer == "single_agent":
                model, tok = policy("planner", "single_agent")
                res = run_group(queries, AgentRuntime(HFBackend(model, tok), tok), rcfg, toolbox=toolbox,
                                seed=EVAL_SEED)
            else:
                sub, sub_tok = policy("sub", "sub_agent")
                engine = SubAgentEngine(AgentRuntime(HFBackend(sub, sub_tok), sub_tok), toolbox, rcfg, seed=EVAL_SEED)
                model, tok = policy("planner", "planner")
                res = run_group(queries, AgentRuntime(HFBackend(model, tok), tok), rcfg,
                                sub_agent=InProcessSubAgent(engine), seed=EVAL_SEED)
                if trainer == "mgrpo":  # the sub-agent alone on the expert's delegations
                    cases = delegations(train, world_url)
                    subs = [SubTask(f"sub{i}", k, 0, text, context)
                            for i, (_, text, context) in enumerate(cases) for k in range(EVAL_K)]
                    results = engine.run(subs)
                    out["sub"] = sum(r_expert(cases[int(st.query_id[3:])][0], r.trajectory)
                                     for st, r in zip(subs, results)) / len(subs)
                engine.close()
            out["planner"] = sum(e.answer is not None and answers_match(e.answer, gold[e.trajectory.query_id])
                                 for e in res.episodes) / len(res.episodes)
    finally:
        torch.set_num_threads(threads)
        toolbox.close()
    return out


#: The warm starts' evaluations, by (trainer, planner model, sub-agent model) (see :func:`rl_improved`).
_BEFORE: dict[tuple[str, str, str], dict[str, float]] = {}


def rl_improved(run: Path, trainer: str, world_url: str) -> tuple[bool, dict[str, tuple[float, float]]]:
    """The check, the same for the real and the broken advantage: every role that trains got better."""
    t0 = time.perf_counter()
    import yaml

    models = yaml.safe_load((run / "config.yaml").read_text())["models"]
    # The warm start's evaluation depends on its weights, the trainer and the evaluation settings (the same for
    # every run here) only: the sign-flipped run shares mgrpo's, so it is computed once per worker.
    key = (trainer, str(models["planner"]), str(models["sub"]))
    if key not in _BEFORE:
        _BEFORE[key] = evaluate(run, trainer, world_url, after=False)
    before = _BEFORE[key]
    after = evaluate(run, trainer, world_url, after=True)
    print(f"\n[rl_works] {trainer} evaluation before and after: {time.perf_counter() - t0:.0f}s", flush=True)
    pairs = {role: (before[role], after[role]) for role in before}
    return all(rose(b, a) for b, a in pairs.values()), pairs


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
    from harness.protocol import format_answer
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
    torch.set_num_threads(worker_threads())
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


def _show(trainer: str, run: Path, pairs: dict[str, tuple[float, float]]) -> str:
    roles = ["planner", "sub"] if "mgrpo" in trainer else ["planner"]
    check = "; ".join(f"{r} success {b:.2f} -> {a:.2f}" for r, (b, a) in pairs.items())
    steps = "; ".join(f"{r} {[round(x, 2) for x in success_series(run, r)]}" for r in roles)
    return f"{trainer}: {check} (evaluation, {EVAL_K} samples x {N_QUESTIONS}); step records: {steps}"


# ----------------------------------------------------------------------------------- tests
def test_the_check_itself():
    assert rose(0.2, 0.45)
    assert not rose(0.3, 0.43)  # +0.13: not enough
    assert not rose(0.6, 0.1)  # fell


@pytest.fixture(scope="module")
def warm_start(tmp_path_factory, world_url):
    """``warm_start(name)``: the warm start of :data:`MIXES` ``name``, built once per pytest-xdist worker."""
    built: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in built:
            built[name] = build_warm_start(tmp_path_factory.mktemp(f"warm-{name}"), world_url, MIXES[name])
        return built[name]
    return get


# Two xdist groups, one per warm start, so that the runs spread over both CI workers instead of one worker
# doing all of them: each group builds its warm start once.
@pytest.mark.parametrize("trainer", [
    pytest.param("single_agent", marks=pytest.mark.xdist_group("rl_works_main")),
    pytest.param("mgrpo", marks=pytest.mark.xdist_group("rl_works_main")),
    pytest.param("frozen_sub", marks=pytest.mark.xdist_group("rl_works_sure_sub")),
])
def test_rl_raises_success_on_fixed_questions(tmp_path, world_url, warm_start, trainer):
    run = train_run(tmp_path, trainer, warm_start(WARM_FOR[trainer]), world_url)
    steps = len(success_series(run, "planner"))
    assert steps == STEPS, f"{trainer}: {steps} step records, expected {STEPS}"
    ok, pairs = rl_improved(run, trainer, world_url)
    shown = _show(trainer, run, pairs)
    print(shown, flush=True)
    # Room to rise; no lower bound beyond "solves some": a start near 0 that then rises by the margin is
    # still RL at work, and mgrpo's planner starts low by design (its sub-agent gives up half the time).
    start = pairs["planner"][0]
    assert 0.0 < start <= 0.75, f"{trainer}: the warm start should solve some but not most questions, got {start:.2f}\n{shown}"
    assert ok, f"{trainer}: success did not rise by {MARGIN} (warm start -> last checkpoint)\n{shown}"


@pytest.mark.xdist_group("rl_works_main")
def test_a_sign_flipped_advantage_fails_the_same_check(tmp_path, world_url, warm_start):
    run = train_run(tmp_path / "flipped", "mgrpo", warm_start(WARM_FOR["mgrpo"]), world_url,
                    f"planner.advantage_fn={FLIPPED}", f"sub.advantage_fn={FLIPPED}")
    ok, pairs = rl_improved(run, "mgrpo", world_url)
    shown = _show("mgrpo (sign-flipped advantages)", run, pairs)
    print(shown, flush=True)
    assert not ok, f"a sign-flipped advantage still passed the check\n{shown}"
    assert pairs["planner"][1] < pairs["planner"][0], f"with a sign-flipped advantage the planner did not get worse\n{shown}"
