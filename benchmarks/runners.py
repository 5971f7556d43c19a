"""How a "trainer" becomes an agent that answers benchmark tasks (docs/evaluation.md, docs/report.md).

``pytest benchmarks/ --trainer=NAME`` evaluates a *runner*. Runners are registered by name
(:func:`register_runner`, :func:`build_runner`):

* ``expert``: the scripted expert of the world (:func:`harness.world.expert.run_expert_episode`,
  planner and sub-agent) acting through a real :class:`harness.tools.toolbox.WebToolbox` that talks
  HTTP to a :class:`harness.world.server.WorldServer` on 127.0.0.1 (visit backend ``direct`` by
  default, ``playwright`` on request). It is the upper bound of the offline world and needs no
  training. On the real GAIA / XBench / WebWalkerQA (only with ``--web``: real search and browsing) it
  is :class:`benchmarks.web.WebReader`, a scripted extractive reader: a plumbing check and a weak
  baseline, not an upper bound. Without ``--web`` the plugin reports those benchmarks as "not run"
  with the options that would run them.
* every trainer of the registry :data:`baselines.TRAINERS` (``mgrpo``, ``frozen_sub``,
  ``single_agent``): a trained run of that trainer, the latest under
  ``runs/`` (the one whose ``provenance.json`` is newest among those naming the trainer) or the
  one given with ``--run DIR``. When there is none, :class:`NoRunFound` carries the one-line
  message naming the command that makes one (with the trainer's ``TrainerSpec.config_path()``).
  :class:`ModelRunner` is the model-based runner: it loads the run's weights
  (:func:`resolve_weights`) and answers with :func:`harness.rollout.run_group` (K = 1, greedy),
  planner + :class:`~harness.rollout.InProcessSubAgent` when the trainer's planner delegates
  (``TrainerSpec.delegates``: ``mgrpo``/``frozen_sub``), else the single agent with the toolbox.
  What differs by trainer is read from its ``TrainerSpec`` (``delegates``, ``has_sub``,
  ``sub_trains``, ``planner_agent``), never from its name. A real benchmark (``--web``) is posed with
  its own ``Benchmark.prompt`` (GAIA attachments as text, WebWalkerQA's start URL) and answered with
  the real-web toolbox of :mod:`benchmarks.web` (the run's hits per search and page budget kept);
  a task whose every tool call failed to reach the web is an error (``Answer.error``), not a skip.
  ``--inference-runs N`` answers each task N times: a local task's N runs are the N rollouts of one group, sampled
  in one batch (:meth:`ModelRunner.answer_runs`), a real one's N separate episodes; every task draws from its own
  stream (:func:`task_seed`), so the tasks of one run are independent samples.

Run layout this module reads (docs/report.md; the trainers write it): ``<run>/provenance.json`` with
``trainer`` at the top level (:func:`harness.records.write_provenance`) or under ``config``;
checkpoints ``<run>/<role>/checkpoints/checkpoint-<step>/`` (or ``<step>/``), each a
``save_pretrained`` directory (model + tokenizer) that :func:`harness.models.load_model` opens.
**Hook**: :func:`load_policy` is the one place that turns a checkpoint into an
:class:`~harness.rollout.AgentRuntime`; if the trainers settle on another checkpoint format, only
it changes. Rollout limits come from the run's resolved config (``config["rollout"]``) when present.

**Which weights** (:func:`resolve_weights`, issue 14): the planner's checkpoint of the evaluated
step; a training sub-agent's (``sub_trains``: ``mgrpo``) latest checkpoint at or before that step
(the weights the sub role had reached by then), a frozen one's latest (``frozen_sub``: its
``checkpoint-0``). A role with no such checkpoint
(e.g. an ``mgrpo`` sub role that trained 0 steps because the planner never delegated, so it saved
nothing) is evaluated with **the weights it started from**: the run's ``config.models.<role>`` (a
warm-start folder's ``planner/``, ``sub_agent/`` or ``single_agent/``), loaded as the role loaded it.
The choice per role goes into every task record (``extra["weights"]``) and under the table, so an
``mgrpo`` evaluation whose sub-agent never trained says so instead of passing for a trained one.

Deliberate decisions: the expert's eval run is ``runs/expert-<world_seed>`` (``-noise<p>`` appended
when ``--expert-noise`` is not 0) at step 0; a runner never raises into pytest for a bad answer:
:meth:`Runner.answer` exceptions and timeouts are turned into recorded errors by the plugin.
"""

from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import replace
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from baselines import TRAINERS, get_trainer
from benchmarks.base import Benchmark, Task
from benchmarks.local import LocalBenchmark
from benchmarks.web import ToolTally, WebError, WebOptions, WebReader, web_toolbox
from harness.checkpoint_files import CheckpointError, record_settings, warm_start_model_dir
from harness.config import from_dict
from harness.records import PROVENANCE_FILE, RecordError, read_json
from harness.rollout import AgentRuntime, InProcessSubAgent, Query, RolloutConfig, SubAgentEngine, run_group
from harness.tools.reasoner import ReasonerClient
from harness.tools.toolbox import AddressedToolbox, ToolsConfig, build_toolbox
from harness.transcript import episode_transcript, messages_transcript
from harness.world.expert import ExpertConfig, run_expert_episode
from harness.world.generator import WorldConfig, generate_world
from harness.world.search import SearchIndex
from harness.world.toolbox import DEFAULT_BASE_URL
from harness.world.server import WorldServer
from harness.world.tasks import rebase, task_prompt

EXPERT = "expert"
"""The runner of the world's scripted expert (not a trainer: it needs no run)."""
VISIT_BACKENDS = ("direct", "playwright")


class RunnerError(Exception):
    """A runner cannot be built or cannot answer (the message says what to change)."""


class NoRunFound(RunnerError):
    """No run of a trainer exists; ``str()`` is the one line the suite prints."""

    def __init__(self, trainer: str, runs_dir: Path):
        self.trainer = trainer
        self.runs_dir = runs_dir
        super().__init__(
            f"no {trainer} run under {runs_dir}/ (a run has provenance.json with trainer {trainer!r}); "
            f"make one with `{train_command(trainer)}`, or pass --run DIR")


def train_command(trainer: str) -> str:
    """The command that makes a run of ``trainer`` with its config of the default (tiny) preset."""
    return f"python -m harness train --trainer {trainer} --config {get_trainer(trainer).config_path()}"


# ------------------------------------------------------------------------------ run lookup
def run_provenance(run_dir: Path) -> dict[str, Any] | None:
    """``provenance.json`` of ``run_dir`` as a dict, None when absent or unreadable."""
    path = Path(run_dir) / PROVENANCE_FILE
    if not path.is_file():
        return None
    try:
        doc = read_json(path)
    except (RecordError, OSError):
        return None
    return doc if isinstance(doc, dict) else None


def run_trainer(provenance: dict[str, Any] | None) -> str | None:
    """The trainer a run's provenance names (top level, else ``config.trainer``)."""
    if not provenance:
        return None
    trainer = provenance.get("trainer")
    if not trainer and isinstance(provenance.get("config"), dict):
        trainer = provenance["config"].get("trainer")
    return trainer if isinstance(trainer, str) else None


def find_latest_run(runs_dir: Path, trainer: str) -> Path:
    """The newest run (by provenance.json mtime) under ``runs_dir`` whose trainer is ``trainer``."""
    runs_dir = Path(runs_dir)
    found: list[tuple[float, str, Path]] = []
    if runs_dir.is_dir():
        for d in runs_dir.iterdir():
            if d.is_dir() and run_trainer(run_provenance(d)) == trainer:
                found.append(((d / "provenance.json").stat().st_mtime, d.name, d))
    if not found:
        raise NoRunFound(trainer, runs_dir)
    return max(found)[2]


_CKPT = re.compile(r"^(?:checkpoint-)?(\d+)$")


def checkpoints(run_dir: Path, role: str) -> list[tuple[int, Path]]:
    """``(step, dir)`` of ``<run>/<role>/checkpoints/{checkpoint-<step>|<step>}``, by step."""
    root = Path(run_dir) / role / "checkpoints"
    out = []
    if root.is_dir():
        for d in root.iterdir():
            m = _CKPT.match(d.name)
            if m and d.is_dir() and _has_weights(d):
                out.append((int(m.group(1)), d))
    return sorted(out)


def _has_weights(d: Path) -> bool:
    """Whether a checkpoint folder holds a model to load: a kill during a save can leave an empty or
    half-written ``checkpoint-<step>/`` (the trainer writes the config and weights first), which is skipped
    like a step that was never saved (the role deletes it when the run resumes)."""
    return (d / "config.json").is_file() and (any(d.glob("*.safetensors")) or (d / "pytorch_model.bin").is_file())


def _int_or(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


@dataclass(frozen=True)
class EvalTarget:
    """What is evaluated and where its records go (``<run_dir>/eval/<step>/<benchmark>.jsonl``, or
    ``eval_unseen/``: :attr:`records_split`)."""

    trainer: str
    run_dir: Path
    step: int
    seed: int
    """The run's seed, written into every task record (the expert: the world seed)."""
    world_seed: int
    provenance: dict[str, Any] | None = None
    world_size: str = "default"
    """The world size the run trained on (its config's ``world.size``), unless ``--world-size`` says otherwise."""
    records_split: str = "test"
    """Where the records go (``harness.records.SPLIT_DIRS``): ``test`` (``eval/``), or ``unseen`` (``eval_unseen/``)
    when a trained run is evaluated on a world other than the one it trained on, so that its own world's
    held-out records, which the report's accuracy table and curves read, never mix with another world's."""

    @property
    def run_id(self) -> str:
        return self.run_dir.name


def expert_run_id(world_seed: int, noise: float) -> str:
    return f"expert-{world_seed}" + (f"-noise{noise:g}" if noise else "")


def resolve_target(trainer: str, *, run: Path | None, runs_dir: Path, world_seed: int | None,
                   expert_noise: float = 0.0, step: int | None = None, world_size: str | None = None) -> EvalTarget:
    """The run to evaluate. Raises :class:`NoRunFound` (model trainers) or :class:`RunnerError`."""
    if trainer == EXPERT:
        seed = 0 if world_seed is None else world_seed
        run_dir = Path(run) if run is not None else Path(runs_dir) / expert_run_id(seed, expert_noise)
        prov = run_provenance(run_dir)
        other = run_trainer(prov)
        if prov is not None and other not in (None, EXPERT):
            raise RunnerError(f"--run {run_dir} is a {other} run; the expert's records belong in their own "
                              f"run folder (omit --run to use {Path(runs_dir) / expert_run_id(seed, expert_noise)})")
        return EvalTarget(EXPERT, run_dir, 0 if step is None else step, seed, seed, prov, world_size or "default")
    if trainer not in TRAINERS:
        raise RunnerError(f"unknown trainer {trainer!r}; use one of {', '.join((*TRAINERS, EXPERT))}")
    if run is not None:
        run_dir = Path(run)
        prov = run_provenance(run_dir)
        if prov is None:
            raise RunnerError(f"--run {run_dir}: no readable provenance.json there (is it a run folder?)")
        if run_trainer(prov) not in (None, trainer):
            raise RunnerError(f"--run {run_dir} is a {run_trainer(prov)} run, not {trainer}; "
                              f"pass --trainer={run_trainer(prov)} or another run")
    else:
        run_dir = find_latest_run(Path(runs_dir), trainer)
        prov = run_provenance(run_dir)
    assert prov is not None
    config = prov.get("config") if isinstance(prov.get("config"), dict) else {}
    world_cfg = config.get("world") if isinstance(config.get("world"), dict) else {}
    seeds = prov.get("seeds") or [0]
    trained = (_int_or(world_cfg.get("seed"), 0), str(world_cfg.get("size") or "default"))
    if world_seed is None:
        world_seed = trained[0]
    if world_size is None:  # the world the run trained on (a tiny-preset run is evaluated on the tiny world)
        world_size = trained[1]
    if step is None:
        ckpts = checkpoints(run_dir, "planner")
        step = ckpts[-1][0] if ckpts else 0
    split = "test" if (world_seed, world_size) == trained else "unseen"
    return EvalTarget(trainer, run_dir, step, _int_or(seeds[0], 0), world_seed, prov, world_size, split)


def model_target(model_dir: Path, trainer: str, *, runs_dir: Path, world_seed: int | None = None,
                 world_size: str | None = None) -> EvalTarget:
    """Evaluate a model folder without a training run (``--model DIR``): a warm-start build folder
    (``warmstart.json``) or a shipped checkpoint (``provenance.json``, verified). ``trainer`` picks the
    system: one that delegates evaluates DIR's planner with DIR's sub-agent, ``single_agent`` its single
    agent. The world (seed, size), the hits per search and the turn limits are the folder's own (the
    build's check world, where no demonstration came from) unless ``world_seed``/``world_size`` say
    otherwise; records go to ``<runs_dir>/model-<name>-<size>-w<seed>/`` (the folder is the started
    weights of every role: ``extra.weights`` says so)."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise RunnerError(f"--model {model_dir}: not a folder (give a warm-start folder or a shipped checkpoint)")
    if trainer not in TRAINERS:
        raise RunnerError(f"--model evaluates a model as one of {', '.join(TRAINERS)} (--trainer), not {trainer!r}")
    src: dict[str, Any] = {}
    for name in ("provenance.json", "warmstart.json"):
        if (model_dir / name).is_file():
            try:
                src = read_json(model_dir / name)
            except RecordError as exc:
                raise RunnerError(f"--model {model_dir}: {exc}") from None
            break
    built = record_settings(src)  # the settings the build trained and checked with
    try:  # a shipped checkpoint is verified here, before any task (its agents: the planner's and the sub-agent)
        for agent in {get_trainer(trainer).planner_agent, "sub_agent"}:
            warm_start_model_dir(model_dir, agent)
    except CheckpointError as exc:
        raise RunnerError(str(exc)) from None
    seed = _int_or(built.get("world_seed"), 0) if world_seed is None else world_seed
    size = world_size or str(built.get("world_size") or "default")
    path = str(model_dir.resolve())
    tools = {"search_top_k": _int_or(built.get("search_top_k"), 5),  # the observations the build trained on
             "search_snippets": bool(built.get("search_snippets", True))}
    if built.get("max_chars") is not None:
        tools["max_chars"] = _int_or(built["max_chars"], 6000)
    for key in ("visit_focus", "visit_links"):  # goal-guided visits: only in the builds that trained with them
        if built.get(key):
            tools[key] = True
    config = {
        "world": {"seed": seed, "size": size, "address": DEFAULT_BASE_URL},  # the demonstrations' address
        "tools": tools,
        "rollout": {"planner_turns": 8, "sub_turns": 8, "context_tokens": 4096,
                    "max_new_tokens": _int_or(built.get("eval_max_new_tokens"), 96)},
        "models": {"planner": path, "sub": path},
    }
    prov = {"trainer": trainer, "seeds": [0], "config": config,
            "model": {"dir": path, **{k: src.get(k) for k in ("command", "git", "created") if k in src}}}
    run_dir = Path(runs_dir) / f"model-{model_dir.resolve().name}-{size}-w{seed}"
    return EvalTarget(trainer, run_dir, 0, 0, seed, prov, size)


# ------------------------------------------------------------------------------ the world
class LocalWorld:
    """The offline world served on 127.0.0.1 with a toolbox over HTTP; started on first use."""

    def __init__(self, seed: int, size: str, visit_backend: str = "direct", max_chars: int | None = None):
        if visit_backend not in VISIT_BACKENDS:
            raise RunnerError(f"unknown visit backend {visit_backend!r}; use one of {', '.join(VISIT_BACKENDS)}")
        self.seed, self.size, self.visit_backend, self.max_chars = seed, size, visit_backend, max_chars
        self._lock = threading.Lock()
        self._server: Any = None
        self._toolbox: Any = None
        self.world: Any = None

    def start(self) -> LocalWorld:
        with self._lock:
            if self._server is None:
                world = generate_world(WorldConfig(seed=self.seed, size=self.size))
                self.world = world
                server = WorldServer(world).start()
                try:
                    cfg = ToolsConfig(visit_backend=self.visit_backend)  # type: ignore[arg-type]
                    if self.max_chars is not None:
                        cfg.max_chars = self.max_chars
                    self._toolbox = build_toolbox(cfg, SearchIndex.build(world), server.base_url)
                    # Launch Chromium now (the pool is lazy), so no task's latency includes it.
                    start = getattr(self._toolbox.visit.backend, "start", None)
                    if callable(start):
                        start()
                except BaseException:
                    if self._toolbox is not None:
                        self._toolbox.close()
                        self._toolbox = None
                    server.stop()
                    raise
                self._server = server
        return self

    @property
    def base_url(self) -> str:
        return self.start()._server.base_url

    @property
    def toolbox(self) -> Any:
        return self.start()._toolbox

    def close(self) -> None:
        with self._lock:
            if self._toolbox is not None:
                self._toolbox.close()
            if self._server is not None:
                self._server.stop()
            self._server = self._toolbox = None


# ------------------------------------------------------------------------------ runners
@dataclass
class Answer:
    """What an agent produced for one task (the plugin scores and records it)."""

    prediction: str | None
    n_turns: int | None = None
    n_sub_calls: int | None = None
    n_tokens: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    transcript: dict[str, Any] | None = None
    """The episode's turns (:mod:`harness.transcript`); the plugin keeps it off disk for sensitive benchmarks."""
    error: str | None = None
    """Why the answer does not count although the agent ran (the web unreachable for every tool call of the
    task, :class:`benchmarks.web.ToolTally`): recorded as an error, incorrect, in the denominator."""
    sample_seed: int | None = None
    """The seed the episode was sampled with (:func:`task_seed`; recorded when the run samples)."""


@dataclass
class RunnerContext:
    """What a runner may use: the target run, the world (lazy) and the plugin's options."""

    target: EvalTarget
    world: LocalWorld
    expert_noise: float = 0.0
    web: WebOptions | None = None
    """Real-web tools for the real benchmarks (``--web``); None: only the ``local_*`` benchmarks can run."""
    temperature: float = 0.0
    """Sampling temperature of a model runner's inference runs (0: greedy, one run)."""


class Runner:
    """Turns tasks into answers. Subclasses set ``name`` and implement ``answer``."""

    name = ""

    def __init__(self, ctx: RunnerContext):
        self.ctx = ctx

    @classmethod
    def unsupported(cls, bench: Benchmark, world_seed: int, world_size: str, web: bool = False) -> str | None:
        """None when this runner can answer ``bench``'s tasks on that world (a real benchmark: with real-web
        tools, ``web``), else why it cannot.

        A classmethod, so the plugin can ask at collection time without building the runner.
        """
        if isinstance(bench, LocalBenchmark):
            if bench.world_seed != world_seed or bench.world_size != world_size:
                return (f"{bench.name} is over world seed {bench.world_seed} ({bench.world_size}) but the "
                        f"served world is seed {world_seed} ({world_size})")
            return None
        if web:
            return None
        return (f"{bench.name} needs real-web tools: pass --web searxng --search-endpoint URL (or --web json_api; "
                f"docs/evaluation.md); without them the {cls.name or 'model'} runner answers only the local_* "
                "benchmarks of the offline world")

    def answer(self, bench: Benchmark, task: Task, run: int = 0) -> Answer:
        """Answer ``task`` in inference run ``run`` (``0`` .. ``--inference-runs`` - 1)."""
        raise NotImplementedError

    def answer_runs(self, bench: Benchmark, task: Task, runs: int) -> list[Answer] | None:
        """All ``runs`` inference runs of ``task`` at once, in run order; None when this runner answers them one by
        one (:meth:`answer`), as the base does."""
        return None

    def web_toolbox(self, run_tools: dict[str, Any] | None = None) -> ToolTally:
        """The real-web toolbox of the suite's ``--web`` options (built once, closed with the runner)."""
        if self.ctx.web is None:
            raise RunnerError("a real benchmark needs --web (docs/evaluation.md)")
        if getattr(self, "_web", None) is None:
            try:
                self._web = web_toolbox(self.ctx.web, run_tools)
            except WebError as exc:
                raise RunnerError(str(exc)) from None
        return self._web

    def close(self) -> None:
        """Release what the runner holds (the world is closed by its owner)."""
        web = getattr(self, "_web", None)
        if web is not None:
            self._web = None
            web.close()


def _local_row(task: Task, base_url: str) -> dict[str, Any]:
    row = task.metadata.get("world_task")
    if not isinstance(row, dict):
        raise RunnerError(f"task {task.task_id} has no world_task metadata (not a local_* task)")
    return rebase(row, base_url)


class ExpertRunner(Runner):
    """The scripted expert (planner + sub-agent) through the HTTP toolbox."""

    name = EXPERT

    def answer(self, bench: Benchmark, task: Task, run: int = 0) -> Answer:
        if not isinstance(bench, LocalBenchmark):  # a real benchmark: the scripted reader on the web
            toolbox = self.web_toolbox()
            before = toolbox.snapshot()
            prediction, messages = WebReader(toolbox).run(bench.prompt(task))
            counts, error = toolbox.verdict(before)
            n_turns = sum(1 for m in messages if m["role"] == "assistant")
            return Answer(prediction, n_turns=n_turns, n_sub_calls=0, extra=counts, error=error,
                          transcript=messages_transcript(messages, agent="single_agent"))
        world = self.ctx.world
        row = _local_row(task, world.base_url)
        episode = run_expert_episode(row, world.toolbox, config=ExpertConfig(noise=self.ctx.expert_noise),
                                     seed=self.ctx.target.seed + run)
        n_turns = sum(1 for m in episode.planner if m["role"] == "assistant")
        return Answer(episode.answer, n_turns=n_turns, n_sub_calls=len(episode.sub_calls),
                      extra={"n_sub_turns": sum(1 for s in episode.sub_calls for m in s if m["role"] == "assistant")},
                      transcript=messages_transcript(episode.planner, sub_calls=episode.sub_calls))


# The agent whose model each role loads from a warm-start folder (as harness.role.common.load_model_for does).
_ROLE_AGENT = {"planner": "planner", "single_agent": "single_agent", "sub": "sub_agent"}
REPO_ROOT = Path(__file__).resolve().parents[1]


#: ``PolicyWeights.reason`` of a model folder evaluated without a run (``--model DIR``).
MODEL_REASON = "a model folder evaluated without a run (--model)"


@dataclass(frozen=True)
class PolicyWeights:
    """The weights one role is evaluated with: a checkpoint of the run, or the weights it started from."""

    role: str
    """``planner`` or ``sub`` (the single agent is the ``planner`` role)."""
    source: str
    """``checkpoint`` or ``started`` (no checkpoint: the run's ``config.models.<role>``)."""
    path: str
    """The checkpoint folder, or the model the role started from (name or path, as loaded)."""
    step: int | None = None
    """The checkpoint's step; None for started weights."""
    reason: str | None = None
    """Why the started weights (e.g. ``the sub role saved no checkpoint``)."""
    model: dict[str, Any] = field(default_factory=dict)
    """For started weights: the run's ``config.models`` fields that shape the load (init_seed, dtype, cache_dir)."""

    def record(self) -> dict[str, Any]:
        """What a task record keeps (``extra["weights"][role]``)."""
        out: dict[str, Any] = {"source": self.source, "path": self.path, "step": self.step}
        if self.reason:
            out["reason"] = self.reason
        return out

    def describe(self) -> str:
        """One line for the table, e.g. ``untrained (no checkpoint; started weights models.sub=tiny)``."""
        if self.reason == MODEL_REASON:
            return f"the model folder's weights (--model): {self.path}"
        if self.source == "checkpoint":
            return f"checkpoint-{self.step} ({self.path})" + ("; step 0: the weights it started from"
                                                               if self.step == 0 else "")
        return f"untrained ({self.reason}; started weights models.{self.role}={self.path})"


def _models_config(target: EvalTarget) -> dict[str, Any]:
    config = (target.provenance or {}).get("config")
    models = config.get("models") if isinstance(config, dict) else None
    return models if isinstance(models, dict) else {}


def started_weights(target: EvalTarget, role: str, reason: str) -> PolicyWeights:
    """The weights ``role`` started from: the run's ``config.models.<role>`` (default ``tiny``).

    A warm-start folder resolves to its agent's sub-folder; a relative path is looked up from the
    current folder, then from the repository root (where ``python -m harness experiment`` runs its
    children); a registry name (``tiny``, ``smollm2-135m``) or Hub id is kept as is.
    """
    models = _models_config(target)
    name = models.get(role)
    name = name if isinstance(name, str) and name.strip() else "tiny"
    agent = get_trainer(target.trainer).planner_agent if role == "planner" else role
    for base in (Path.cwd(), REPO_ROOT):
        cand = Path(name) if Path(name).is_absolute() else base / name
        if cand.is_dir():
            try:
                name = str(warm_start_model_dir(cand, _ROLE_AGENT[agent]))
            except CheckpointError as exc:
                raise RunnerError(str(exc)) from None
            break
    spec = {k: models[k] for k in ("init_seed", "dtype", "cache_dir") if k in models}
    return PolicyWeights(role, "started", name, None, reason, spec)


def resolve_weights(target: EvalTarget) -> dict[str, PolicyWeights]:
    """Per role, the weights the evaluation of ``target`` uses (reads folders only; loads nothing).

    Raises :class:`RunnerError` when a planner step was asked for (``--eval-step``) that has no
    checkpoint while others exist.
    """
    run, step = target.run_dir, target.step
    out: dict[str, PolicyWeights] = {}
    if (target.provenance or {}).get("model"):  # --model: the folder's own weights, no run
        out["planner"] = started_weights(target, "planner", MODEL_REASON)
        if get_trainer(target.trainer).delegates:
            out["sub"] = started_weights(target, "sub", MODEL_REASON)
        return out
    planner = checkpoints(run, "planner")
    exact = [d for s, d in planner if s == step]
    if exact:
        out["planner"] = PolicyWeights("planner", "checkpoint", str(exact[-1]), step)
    elif not planner:
        out["planner"] = started_weights(target, "planner", "the planner role saved no checkpoint")
    elif step == 0:
        out["planner"] = started_weights(target, "planner", "step 0 is the start")
    else:
        raise RunnerError(f"{run}/planner/checkpoints/ has no checkpoint for step {step}; it has steps "
                          f"{', '.join(str(s) for s, _ in planner)} (pass one of them as --eval-step)")
    spec = get_trainer(target.trainer)
    if not spec.has_sub:
        return out
    sub = checkpoints(run, "sub")
    # A sub role that trains (mgrpo): its latest weights at the evaluated step; a frozen one: its only ones.
    usable = [(s, d) for s, d in sub if s <= step] if spec.sub_trains else sub
    if usable:
        s, d = usable[-1]
        out["sub"] = PolicyWeights("sub", "checkpoint", str(d), s)
    elif sub:
        out["sub"] = started_weights(target, "sub", f"no sub checkpoint at or before step {step} "
                                                    f"(its first is step {sub[0][0]})")
    elif spec.sub_trains:  # the planner never delegated, so no query group reached the sub role
        out["sub"] = started_weights(target, "sub", "no checkpoint: the sub role trained no step")
    else:
        out["sub"] = started_weights(target, "sub", "no checkpoint: the frozen sub role saved none")
    return out


def load_policy(run_dir: Path, role: str, step: int | None = None, *,
                weights: PolicyWeights | None = None) -> Any:
    """HOOK: the :class:`~harness.rollout.AgentRuntime` of ``weights``, else of ``role``'s checkpoint
    (latest, or ``step``)."""
    from harness.backends import HFBackend  # lazy: torch; only the model runners need it, not the expert
    from harness.models import ModelSpec, load_model  # lazy: torch; only the model runners need it, not the expert

    if weights is None:
        found = checkpoints(run_dir, role)
        if step is not None:
            found = [(s, d) for s, d in found if s == step]
        if not found:
            want = f"step {step}" if step is not None else "any step"
            raise RunnerError(f"{run_dir}/{role}/checkpoints/ has no checkpoint for {want} "
                              f"(expected checkpoint-<step>/ folders written by the trainer)")
        weights = PolicyWeights(role, "checkpoint", str(found[-1][1]), found[-1][0])
    if weights.source == "checkpoint":
        spec = ModelSpec(name=weights.path)
    else:  # as the role loaded it (harness.role.common.load_model_for): same seed, dtype and cache
        spec = ModelSpec(name=weights.path, seed=_int_or(weights.model.get("init_seed"), 0),
                         **{k: str(weights.model[k]) for k in ("dtype", "cache_dir") if weights.model.get(k)})
    model, tokenizer = load_model(spec)
    return AgentRuntime(HFBackend(model, tokenizer), tokenizer, policy_version=weights.step or 0)


class ModelRunner(Runner):
    """A trained run: planner (+ sub-agent) checkpoints answering through ``run_group``."""

    def __init__(self, ctx: RunnerContext):
        super().__init__(ctx)

        target = ctx.target
        self.multi = get_trainer(target.trainer).delegates  # planner + sub-agent, else the single agent
        config = (target.provenance or {}).get("config") or {}
        rollout = config.get("rollout") if isinstance(config.get("rollout"), dict) else {}
        self.cfg = from_dict(RolloutConfig, dict(rollout), "provenance config.rollout") if rollout else RolloutConfig()
        self.cfg.k, self.cfg.temperature = 1, ctx.temperature  # one episode per task and run (greedy: 0)
        self.cfg.validate()
        self.weights = resolve_weights(target)
        self.planner = load_policy(target.run_dir, "planner", weights=self.weights["planner"])
        self.sub = load_policy(target.run_dir, "sub", weights=self.weights["sub"]) if self.multi else None
        self._engines: dict[str, Any] = {}  # the sub-agent's engine per toolbox: "world", "web"
        # The agents see the world as they did in training: the run's address for it (world.address, e.g.
        # http://world.local, which the warm start's demonstrations use) and its tool settings (hits per
        # search, characters per page); only the visit backend is the suite's (--visit-backend).
        world_cfg = config.get("world") if isinstance(config.get("world"), dict) else {}
        self.address: str | None = world_cfg.get("address") or None
        tools = config.get("tools") if isinstance(config.get("tools"), dict) else {}
        self.tools_cfg: dict[str, Any] = dict(tools)
        self._toolbox: Any = None
        # a planner trained with the reasoner tool is evaluated with it (its prompt lists the tool)
        self.reasoner = ReasonerClient.from_env() if self.multi and tools.get("reasoner") else None

    def toolbox(self) -> Any:
        """The run's toolbox over the suite's world server (built once, on first use)."""
        if self._toolbox is None:
            world = self.ctx.world.start()
            cfg = from_dict(ToolsConfig, {**self.tools_cfg, "visit_backend": world.visit_backend},
                            "provenance config.tools")
            inner = build_toolbox(cfg, SearchIndex.build(world.world), world.base_url)
            self._toolbox = AddressedToolbox(inner, self.address, world.base_url) if self.address else inner
        return self._toolbox

    def answer(self, bench: Benchmark, task: Task, run: int = 0) -> Answer:
        return self._answers(bench, task, 1, task_seed(sample_seed(self.ctx.target, run), task.task_id))[0]

    def answer_runs(self, bench: Benchmark, task: Task, runs: int) -> list[Answer] | None:
        """A local task's ``runs`` inference runs as the ``runs`` rollouts of one group: one batch per turn and model,
        as in training, each rollout its own draw (run ``r`` = rollout ``r``), several times faster on a CPU than
        ``runs`` episodes one after another. A real benchmark's runs stay separate episodes (its toolbox tallies
        the web's failures per episode)."""
        if runs == 1 or not isinstance(bench, LocalBenchmark):
            return None
        return self._answers(bench, task, runs, task_seed(sample_seed(self.ctx.target, 0), task.task_id))

    def _answers(self, bench: Benchmark, task: Task, k: int, seed: int) -> list[Answer]:
        """``k`` episodes of ``task`` sampled in one group from ``seed``, in rollout order."""
        web = not isinstance(bench, LocalBenchmark)
        if web:  # a real benchmark: its own prompt (attachments, start URL) and the real-web toolbox
            toolbox: Any = self.web_toolbox(self.tools_cfg)
            question = bench.prompt(task)
            before = toolbox.snapshot()
        else:
            toolbox = self.toolbox()
            question = task_prompt(_local_row(task, self.address or self.ctx.world.base_url))
        cfg = replace(self.cfg, k=k) if k != self.cfg.k else self.cfg
        if self.multi:
            kind = "web" if web else "world"
            if kind not in self._engines:
                self._engines[kind] = SubAgentEngine(self.sub, toolbox, self.cfg, seed=seed)
            # the sub-agent's draws from the task's seed too, whichever tasks this process answered before
            self._engines[kind].reseed(seed)
            result = run_group([Query(task.task_id, question)], self.planner, cfg,
                               sub_agent=InProcessSubAgent(self._engines[kind]), reasoner=self.reasoner, seed=seed)
        else:
            result = run_group([Query(task.task_id, question)], self.planner, cfg, toolbox=toolbox, seed=seed)
        counts, error = toolbox.verdict(before) if web else ({}, None)
        out = []
        for episode in sorted(result.episodes, key=lambda e: e.trajectory.rollout):
            traj = episode.trajectory
            n_tokens = traj.n_model_tokens + sum(r.trajectory.n_model_tokens for r in episode.sub_results
                                                 if r.trajectory is not None)
            out.append(Answer(episode.answer, n_turns=traj.n_turns, n_sub_calls=len(episode.sub_results),
                              n_tokens=n_tokens, extra={"end_reason": traj.end_reason, "format_ok": traj.format_ok,
                                                        **counts},
                              transcript=episode_transcript(episode), error=error, sample_seed=seed))
        return out

    def close(self) -> None:
        for engine in self._engines.values():
            engine.close()
        self._engines.clear()
        super().close()
        if self._toolbox is not None:
            self._toolbox.close()  # the run's own toolbox (its browser pool, with --visit-backend playwright)
            self._toolbox = None


def sample_seed(target: EvalTarget, run: int) -> int:
    """The seed of inference run ``run`` of ``target`` (run 0: the run's seed, as before runs existed); each task's
    episode is sampled from it hashed with the task id (:func:`task_seed`)."""
    return target.seed + run


def task_seed(seed: int, task_id: str) -> int:
    """The sampling seed of one task's episodes: ``seed`` hashed with the task id. One seed for every task of an
    inference run made them all draw the same random numbers at the same turn, so a blind spot hit every task of
    a run or none (21 tasks of one template family: whole runs at 9.5% and at 81%), and the runs were not
    independent samples of the tasks."""
    return int.from_bytes(hashlib.blake2b(f"{seed}:{task_id}".encode(), digest_size=4).digest(), "big")


RunnerFactory = Callable[[RunnerContext], Runner]
RUNNERS: dict[str, RunnerFactory] = {}


def register_runner(name: str) -> Callable[[RunnerFactory], RunnerFactory]:
    """Register ``factory(ctx) -> Runner`` under ``name`` (a ``--trainer`` value)."""
    def deco(factory: RunnerFactory) -> RunnerFactory:
        RUNNERS[name] = factory
        return factory
    return deco


register_runner(EXPERT)(ExpertRunner)
for _trainer in TRAINERS:
    register_runner(_trainer)(ModelRunner)


def runner_names() -> list[str]:
    return sorted(RUNNERS)


def unsupported(name: str, bench: Benchmark, world_seed: int, world_size: str, web: bool = False) -> str | None:
    """Why runner ``name`` cannot answer ``bench`` (None if it can), without building it."""
    factory = RUNNERS[name]
    check = getattr(factory, "unsupported", None)
    return check(bench, world_seed, world_size, web) if check is not None else None


def build_runner(name: str, ctx: RunnerContext) -> Runner:
    """The runner registered as ``name`` built for ``ctx``; :class:`RunnerError` if unknown."""
    try:
        factory = RUNNERS[name]
    except KeyError:
        raise RunnerError(f"unknown trainer {name!r}; use one of {', '.join(runner_names())}") from None
    return factory(ctx)
