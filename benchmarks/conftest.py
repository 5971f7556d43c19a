"""The evaluation suite's pytest plugin: options, one item per task, records, the accuracy table.

docs/evaluation.md ("``benchmarks/`` is both a package and the pytest suite that evaluates a trained
system") and docs/report.md (task records under ``runs/<run_id>/eval/<step>/<benchmark>.jsonl``)::

    pytest benchmarks/ --trainer=mgrpo|frozen_sub|single_agent|expert [--run DIR]
           [--bench NAME[,NAME]] [--bench-limit N] [--judge NAME] [--data-dir DIR] [-n 2]
           [--web searxng|json_api --search-endpoint URL [--search-key-env NAME] [--search-option K=V]
            [--web-allow-host HOST:PORT]] [--inference-runs N [--temperature T]]

This conftest only loads for paths under ``benchmarks/`` (the repository's ``testpaths`` is
``tests``), so ``pytest tests`` neither collects the suite nor sees these options.

* **Items**: :func:`pytest_generate_tests` parametrises ``benchmarks/test_eval.py::test_task``
  with one case per task, id ``<benchmark>::<task_id>``, so ``-k``, ``--lf``, ``-x``, ``-n``
  (xdist) and ``--junitxml`` work per task. A benchmark whose data is missing
  (:class:`~benchmarks.base.BenchmarkDataMissing`) or that the runner cannot answer (a real benchmark
  without ``--web``) gets one item ``<benchmark>::NOT_RUN`` that skips with the reason.
* **Verdicts**: a wrong answer is a recorded result and the item **passes**. A runner crash or a
  timeout (``--task-timeout``) is recorded with ``correct=false`` and ``error`` set, and the item
  is reported **xfail** with the error as its reason: visible in the summary (``-ra``), not a
  failure of the suite, never dropped from the table (it stays in the denominator, docs/evaluation.md).
  An unscorable prediction (none, empty, too long) is an ordinary incorrect verdict (passes).
* **Records**: one :class:`harness.records.TaskRecord` per item, appended atomically
  (:func:`harness.records.append_task`: one ``os.write`` under ``flock``, safe with ``-n``) to
  ``<run>/eval/<step>/<benchmark>.jsonl``; prediction and gold come from the benchmark's
  ``record_fields`` (``sha256:`` hashes for XBench). Extra keys: ``eval_session`` (one id per
  pytest run, shared with xdist workers), ``runner``, ``split``, ``world_seed``, ``world_size``,
  ``visit_backend``, the task's cell (``level``, ``type``, ``difficulty_level``, ``template``) and,
  for a model run, ``weights`` (per role: checkpoint or the weights it started from, see
  :func:`benchmarks.runners.resolve_weights`; also printed above the table). Records are
  append-only: a rerun adds lines, and readers keep the last record per task (``harness.report``
  does).
* **Timing**: pytest-benchmark's ``benchmark`` fixture times each task (``pedantic``, 1 round,
  group = benchmark name); with ``--benchmark-disable``, under xdist or with ``-p no:benchmark``
  the task still runs once and ``latency_s`` is recorded either way.
* **Table**: :func:`pytest_terminal_summary` prints accuracy ± binomial standard error per
  benchmark, computed from the records of *this* session (``eval_session``) read back from disk,
  so it is right under xdist; an item that ran but left no record (a worker killed mid-task)
  counts as incorrect. A benchmark none of whose items ran says ``not run`` with the reason,
  never 0% or 100%.
* **Run**: ``--trainer=expert`` writes to ``runs/expert-<world_seed>/`` (or ``--run DIR``), step 0,
  creating ``provenance.json`` if absent (``--model DIR`` likewise to ``runs/model-...``), and marks it
  ``completed`` only when the session wrote a record; otherwise (a collection error, every item errored in
  setup, skipped or ``NOT_RUN``) ``status.json``
  says ``failed`` and why, or keeps an earlier session's state with ``last_eval_error`` (issue 14).
  A model trainer evaluates the latest run of that trainer under ``--runs-dir`` (default
  ``<rootdir>/runs``) or ``--run DIR``, at the step of its latest planner checkpoint
  (``--eval-step`` to choose); when there is none, one line names the command that makes one and
  every item skips with that reason (exit status 0, table "not run").
* **Data**: an explicit ``--data-dir`` that is missing, empty or lacks a file a selected benchmark
  reads (:meth:`benchmarks.base.Benchmark.data_files`) is a usage error naming those files.
* **Real web** (``--web``, :mod:`benchmarks.web`): before any task, each selected real benchmark's data is
  read (missing data or a broken row: a usage error naming it) and one search is made (an unreachable
  endpoint or an unset key variable: a usage error; the key never appears in any message or record). A
  task whose every tool call failed to reach the web is recorded with verdict ``web_unreachable``:
  incorrect, in the errors column and the denominator.
* **Inference runs** (``--inference-runs N``): each item answers its task N times (sampled at
  ``--temperature``, default 1.0; one run is greedy), one record per run (``inference_run``,
  ``temperature``, ``sample_seed``); the table's accuracy is the mean over all runs' records, with the
  accuracy of each run under it.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest

from baselines import TRAINERS
from benchmarks.base import BenchmarkDataError, BenchmarkDataMissing, BenchmarkError
from benchmarks.judges import get_judge, list_judges
from benchmarks.local import LocalBenchmark
from benchmarks.registry import benchmark_class, list_benchmarks
from benchmarks.runners import (
    EXPERT,
    LocalWorld,
    NoRunFound,
    RunnerContext,
    RunnerError,
    build_runner,
    model_target,
    resolve_target,
    resolve_weights,
    runner_names,
    sample_seed,
    unsupported,
)
from benchmarks.scoring import accuracy
from benchmarks.web import PROVIDERS, UNREACHABLE_VERDICT, WebError, WebOptions, preflight
from harness.records import (
    RUN_STATES,
    SPLIT_DIRS,
    RunPaths,
    TaskRecord,
    append_task,
    read_status,
    read_tasks,
    write_provenance,
    write_status,
)
from harness.world.generator import SIZES
from harness.world.tasks import select_tasks

DEFAULT_BENCHES = ("local_gaia", "local_xbench", "local_webwalkerqa")
SESSION_KEY = "mgrpo_eval_session"
NOT_RUN = "NOT_RUN"
CELL_KEYS = ("level", "type", "difficulty_level", "template")
_ITEM_ID = re.compile(r"\[([A-Za-z0-9_]+)::(.*)\]$")


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("mgrpo-eval", "M-GRPO evaluation suite (benchmarks/, docs/evaluation.md)")
    g.addoption("--trainer", default=EXPERT,
                help=f"what to evaluate: {', '.join(TRAINERS)} (the latest run of that trainer) "
                     f"or {EXPERT} (the world's scripted expert; default)")
    g.addoption("--run", default=None, metavar="DIR", help="evaluate this run folder (and write its records there)")
    g.addoption("--model", default=None, metavar="DIR",
                help="evaluate a model folder without a training run: a warm-start folder or a shipped checkpoint "
                     "(e.g. baselines/checkpoints/tiny); planner + sub-agent (or --trainer single_agent); world and "
                     "tools from its provenance unless --world-seed/--world-size; records in "
                     "<runs-dir>/model-<name>-<size>-w<seed>/")
    g.addoption("--runs-dir", default=None, metavar="DIR",
                help="where runs are looked up / the expert's run is created (default: <rootdir>/runs)")
    g.addoption("--bench", action="append", default=None, metavar="NAME[,NAME]",
                help=f"benchmarks to run (repeatable or comma-separated; default {','.join(DEFAULT_BENCHES)})")
    g.addoption("--bench-limit", type=int, default=None, metavar="N", help="first N tasks of each benchmark")
    g.addoption("--templates", default=None, metavar="PATTERN[,PATTERN]",
                help="only the local_* tasks whose world task template matches one of these glob patterns (e.g. "
                     "gaia.person.*, as a run's tasks.templates), before --bench-limit")
    g.addoption("--split", default="test", choices=("test", "train"), help="split of the local_* benchmarks")
    g.addoption("--judge", default="exact", metavar="NAME", help="judge for non-exact answers (exact, llm, replay)")
    g.addoption("--judge-option", action="append", default=[], metavar="KEY=VALUE",
                help="option of the judge (repeatable), e.g. records=runs/x/eval/0/local_gaia.jsonl for replay, "
                     "base_url=... / model=... for llm")
    g.addoption("--data-dir", default=None, metavar="DIR", help="data folder of the real benchmarks")
    g.addoption("--world-seed", type=int, default=None, metavar="N",
                help="world of the local_* benchmarks (default: the run's world seed, else 0)")
    g.addoption("--world-size", default=None, metavar="SIZE",
                help="world size preset (tiny|small|default; default: the run's world.size, else default)")
    g.addoption("--world-tasks", default=None, metavar="DIR",
                help="read local_* tasks written by `python -m harness world tasks --out DIR` instead of generating")
    g.addoption("--visit-backend", default=None, choices=("direct", "playwright"),
                help="visit tool backend for the agent (default direct; with --web playwright)")
    g.addoption("--web", default=None, choices=PROVIDERS,
                help="real-web tools for gaia, xbench_deepsearch and webwalkerqa: a SearXNG instance (searxng) or "
                     "a keyed JSON search API (json_api); docs/evaluation.md")
    g.addoption("--search-endpoint", default=None, metavar="URL",
                help="with --web: the SearXNG base URL, or the JSON API's search URL")
    g.addoption("--search-key-env", default=None, metavar="NAME",
                help="with --web json_api: the environment variable holding the API key (default SEARCH_API_KEY)")
    g.addoption("--search-option", action="append", default=[], metavar="KEY=VALUE",
                help="with --web: another tools.realweb field, e.g. results_path=web.results (repeatable)")
    g.addoption("--web-allow-host", action="append", default=[], metavar="HOST[:PORT]",
                help="with --web: a local or private host the browser may open anyway (repeatable)")
    g.addoption("--inference-runs", type=int, default=1, metavar="N",
                help="independent runs per task, each recorded; accuracy is their mean (default 1)")
    g.addoption("--temperature", type=float, default=None, metavar="T",
                help="sampling temperature of a model's runs (default 0 = greedy for 1 run, 1.0 for more)")
    g.addoption("--expert-noise", type=float, default=0.0, metavar="P", help="error rate of the scripted expert")
    g.addoption("--task-timeout", type=float, default=300.0, metavar="S",
                help="seconds one task may take; longer is recorded as an error (incorrect)")
    g.addoption("--eval-step", type=int, default=None, metavar="N", help="checkpoint step to evaluate (default latest)")


# ------------------------------------------------------------------------------ state
@dataclass(frozen=True)
class EvalCase:
    """One test item: a task of a benchmark, or a NOT_RUN placeholder with the reason."""

    bench: str
    task: Any = None
    skip: str | None = None

    @property
    def id(self) -> str:
        return f"{self.bench}::{self.task.task_id if self.task is not None else NOT_RUN}"


@dataclass
class Outcome:
    record: Any
    path: Path
    crashed: bool


@dataclass
class EvalState:
    """Everything the plugin resolved from the options (one per process)."""

    trainer: str
    bench_names: list[str]
    limit: int | None
    split: str
    judge: str
    judge_options: dict[str, Any]
    data_dir: str | None
    world_seed: int
    world_size: str
    world_tasks: str | None
    visit_backend: str
    expert_noise: float
    task_timeout: float
    session_id: str
    is_worker: bool
    web: Any = None
    """:class:`benchmarks.web.WebOptions` of ``--web``, else None (the real benchmarks are NOT_RUN)."""
    inference_runs: int = 1
    temperature: float = 0.0
    templates: tuple[str, ...] | None = None
    """``--templates``: glob patterns of the world task templates kept in the local_* benchmarks (None = all)."""
    target: Any = None
    no_run: str | None = None
    weights: dict[str, Any] = field(default_factory=dict)
    """Role -> :class:`benchmarks.runners.PolicyWeights` a model runner evaluates (empty for the expert)."""
    _benches: dict[str, Any] = field(default_factory=dict)
    _loaded: dict[str, list[Any]] = field(default_factory=dict)
    """Real benchmarks' tasks already read by the start-up check (``--web``), so collection does not read them again."""
    # controller bookkeeping (per item): "ran" ids and skip reasons per benchmark
    ran: dict[str, set[str]] = field(default_factory=dict)
    skipped: dict[str, list[str]] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    status_note: str | None = None
    """Set by pytest_sessionfinish when the expert's run is not marked completed (printed in the table)."""

    def bench(self, name: str) -> Any:
        """The benchmark object built from the options (once per process)."""
        if name not in self._benches:
            cls = benchmark_class(name)
            opts: dict[str, Any] = {"judge": self.judge, "judge_options": self.judge_options}
            if issubclass(cls, LocalBenchmark):
                opts.update(world_seed=self.world_seed, world_size=self.world_size, tasks_dir=self.world_tasks)
            elif self.data_dir is not None:
                opts["data_dir"] = self.data_dir
            self._benches[name] = cls(**opts)
        return self._benches[name]

    def cases(self) -> list[EvalCase]:
        out: list[EvalCase] = []
        for name in self.bench_names:
            bench = self.bench(name)
            reason = unsupported(self.trainer, bench, self.world_seed, self.world_size, self.web is not None)
            if reason is not None:
                out.append(EvalCase(name, skip=reason))
                continue
            try:
                split = self.split if isinstance(bench, LocalBenchmark) else None
                if name in self._loaded:
                    tasks = self._loaded[name]
                elif self.templates is not None and isinstance(bench, LocalBenchmark):
                    tasks = bench.load(split=split)
                    keep = {id(row) for row in select_tasks([t.metadata["world_task"] for t in tasks],
                                                            templates=self.templates)}
                    tasks = [t for t in tasks if id(t.metadata["world_task"]) in keep][: self.limit]
                else:
                    tasks = bench.load(split=split, limit=self.limit)
            except BenchmarkDataMissing as exc:
                out.append(EvalCase(name, skip=f"data missing: {exc.reason}"))
                continue
            if not tasks:
                out.append(EvalCase(name, skip="the benchmark has no tasks in this split" + (
                    f" of templates {', '.join(self.templates)}" if self.templates is not None else "")))
                continue
            out.extend(EvalCase(name, task, self.no_run) for task in tasks)
        return out


_STATE = pytest.StashKey[EvalState]()


def _state(config: pytest.Config) -> EvalState | None:
    return config.stash.get(_STATE, None)


def _bench_names(raw: list[str] | None) -> list[str]:
    names: list[str] = []
    for chunk in raw or [",".join(DEFAULT_BENCHES)]:
        for name in chunk.split(","):
            name = name.strip()
            if name and name not in names:
                names.append(name)
    return names


def _judge_options(raw: list[str], flag: str = "--judge-option") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in raw:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise pytest.UsageError(f"{flag} expects KEY=VALUE, got {item!r}")
        try:  # numbers, booleans, null as JSON; anything else stays a string
            out[key.strip()] = json.loads(value)
        except ValueError:
            out[key.strip()] = value
    return out


def pytest_configure(config: pytest.Config) -> None:
    opt = config.option
    if opt.trainer not in runner_names():
        raise pytest.UsageError(f"--trainer: unknown trainer {opt.trainer!r}; use one of {', '.join(runner_names())}")
    names = _bench_names(opt.bench)
    unknown = [n for n in names if n not in list_benchmarks()]
    if unknown:
        raise pytest.UsageError(f"--bench: unknown benchmark(s) {', '.join(map(repr, unknown))}; "
                                f"registered: {', '.join(list_benchmarks())}")
    if opt.judge not in list_judges():
        raise pytest.UsageError(f"--judge: unknown judge {opt.judge!r}; use one of {', '.join(list_judges())}")
    judge_options = _judge_options(opt.judge_option)
    try:  # a judge that is not configured (e.g. llm without an endpoint) fails here, not per task
        get_judge(opt.judge, **judge_options)
    except (BenchmarkError, TypeError) as exc:
        raise pytest.UsageError(f"--judge {opt.judge}: {exc}") from None
    if opt.bench_limit is not None and opt.bench_limit < 0:
        raise pytest.UsageError(f"--bench-limit must be >= 0, got {opt.bench_limit}")
    if not opt.task_timeout > 0:
        raise pytest.UsageError(f"--task-timeout must be positive, got {opt.task_timeout}")
    if not 0.0 <= opt.expert_noise <= 1.0:
        raise pytest.UsageError(f"--expert-noise must be in [0, 1], got {opt.expert_noise}")
    if opt.world_size is not None and opt.world_size not in SIZES:
        raise pytest.UsageError(f"--world-size must be one of {'|'.join(SIZES)}, got {opt.world_size!r}")
    if opt.world_seed is not None and opt.world_seed < 0:
        raise pytest.UsageError(f"--world-seed must be >= 0, got {opt.world_seed}")
    if opt.inference_runs < 1:
        raise pytest.UsageError(f"--inference-runs must be >= 1, got {opt.inference_runs}")
    temperature = opt.temperature if opt.temperature is not None else (0.0 if opt.inference_runs == 1 else 1.0)
    if temperature < 0 or (temperature == 0 and opt.inference_runs > 1):
        raise pytest.UsageError(f"--temperature {temperature:g} with --inference-runs {opt.inference_runs}: greedy runs "
                                "repeat one answer; give a temperature above 0, or one run")
    if opt.data_dir is not None:
        _check_data_dir(Path(opt.data_dir), names, opt.judge, judge_options)
    web = _web_options(opt)

    workerinput = getattr(config, "workerinput", None)
    is_worker = workerinput is not None
    session_id = (workerinput or {}).get(SESSION_KEY) or uuid.uuid4().hex
    runs_dir = Path(opt.runs_dir) if opt.runs_dir else config.rootpath / "runs"
    target, no_run = None, None
    if opt.model and opt.run:
        raise pytest.UsageError("--model and --run: give one (a model folder, or a run folder)")
    if opt.model and opt.trainer == EXPERT:
        opt.trainer = "mgrpo"  # a model folder is evaluated as the planner + sub-agent system by default
    try:
        if opt.model:
            target = model_target(Path(opt.model), opt.trainer, runs_dir=runs_dir, world_seed=opt.world_seed,
                                  world_size=opt.world_size)
        else:
            target = resolve_target(opt.trainer, run=Path(opt.run) if opt.run else None, runs_dir=runs_dir,
                                    world_seed=opt.world_seed, expert_noise=opt.expert_noise, step=opt.eval_step,
                                    world_size=opt.world_size)
    except NoRunFound as exc:
        no_run = str(exc)
    except RunnerError as exc:
        raise pytest.UsageError(str(exc)) from None
    weights: dict[str, Any] = {}
    if target is not None and opt.trainer != EXPERT:
        try:  # which weights each role is evaluated with (a role without a checkpoint: its start)
            weights = resolve_weights(target)
        except RunnerError as exc:
            raise pytest.UsageError(str(exc)) from None
    world_seed = target.world_seed if target is not None else (opt.world_seed or 0)
    world_size = target.world_size if target is not None else (opt.world_size or "default")
    state = EvalState(trainer=opt.trainer, bench_names=names, limit=opt.bench_limit, split=opt.split,
                      judge=opt.judge, judge_options=judge_options, data_dir=opt.data_dir, world_seed=world_seed,
                      world_size=world_size, world_tasks=opt.world_tasks,
                      visit_backend=web.visit_backend if web is not None else (opt.visit_backend or "direct"),
                      expert_noise=opt.expert_noise, task_timeout=opt.task_timeout, session_id=session_id,
                      is_worker=is_worker, target=target, no_run=no_run, weights=weights, web=web,
                      inference_runs=opt.inference_runs, temperature=temperature,
                      templates=tuple(t for t in opt.templates.split(",") if t) if opt.templates else None)
    config.stash[_STATE] = state
    if web is not None and not is_worker and not config.option.collectonly:
        _check_real_benchmarks(state)
        if no_run is None:
            try:  # one search before any task: a dead endpoint or an unset key is one message, not N failures
                preflight(web)
            except WebError as exc:
                raise pytest.UsageError(str(exc)) from None
    if not is_worker:
        config.pluginmanager.register(_Bookkeeper(state), "mgrpo-eval-bookkeeper")
        if config.pluginmanager.has_plugin("xdist"):
            config.pluginmanager.register(_XdistSession(session_id), "mgrpo-eval-xdist")


def _web_options(opt: Any) -> WebOptions | None:
    """The ``--web`` options, checked (a wrong field or a missing endpoint is a usage error)."""
    given = [name for name, value in (("--search-endpoint", opt.search_endpoint), ("--search-key-env", opt.search_key_env),
                                      ("--search-option", opt.search_option), ("--web-allow-host", opt.web_allow_host))
             if value]
    if opt.web is None:
        if given:
            raise pytest.UsageError(f"{', '.join(given)} without --web: add --web searxng|json_api")
        return None
    if not opt.search_endpoint:
        raise pytest.UsageError(f"--web {opt.web} needs --search-endpoint URL (a SearXNG instance's base URL, or the "
                                "JSON API's search URL; docs/evaluation.md)")
    key_env = opt.search_key_env or ("SEARCH_API_KEY" if opt.web == "json_api" else "")
    web = WebOptions(provider=opt.web, endpoint=opt.search_endpoint, key_env=key_env,
                     search=_judge_options(opt.search_option, "--search-option"),
                     allow_hosts=tuple(opt.web_allow_host), visit_backend=opt.visit_backend or "playwright")
    try:
        web.tools_config()
    except WebError as exc:
        raise pytest.UsageError(f"--web {opt.web}: {exc}") from None
    return web


def _check_real_benchmarks(state: EvalState) -> None:
    """With ``--web``, read each selected real benchmark's data before any task: missing data or a broken row is a
    usage error naming what is missing or the file and line (without ``--web`` they are NOT_RUN anyway)."""
    for name in state.bench_names:
        bench = state.bench(name)
        if isinstance(bench, LocalBenchmark):
            continue
        try:
            state._loaded[name] = bench.load(split=None, limit=state.limit)
        except BenchmarkDataMissing as exc:
            raise pytest.UsageError(f"--bench {name}: data missing: {exc.reason}") from None
        except BenchmarkDataError as exc:
            raise pytest.UsageError(f"--bench {name}: {exc}") from None


def _check_data_dir(data_dir: Path, names: list[str], judge: str, judge_options: dict[str, Any]) -> None:
    """An explicit ``--data-dir`` that lacks what a selected benchmark reads is a usage error naming the files.

    Without ``--data-dir`` a benchmark whose data is missing is reported "not run" (the default folder
    may simply not be there); a folder the user names but that is missing, empty or incomplete is a
    mistake to say at once, with the files it should hold.
    """
    expected: list[tuple[str, Path]] = []
    for name in names:
        cls = benchmark_class(name)
        if issubclass(cls, LocalBenchmark):
            continue
        bench = cls(data_dir=data_dir, judge=judge, judge_options=judge_options)
        expected += [(name, f) for f in bench.data_files(None)]
    if not expected:
        return
    missing = [(n, f) for n, f in expected if not f.is_file()]
    if not missing:
        return
    if not data_dir.is_dir():
        state = "does not exist"
    elif not any(data_dir.iterdir()):
        state = "is empty"
    else:
        state = "lacks files"
    files = "; ".join(f"{n}: {f}" for n, f in missing)
    raise pytest.UsageError(f"--data-dir {data_dir} {state}; the selected benchmarks read {files} "
                            f"(see ../shared/data/README.md), or drop --data-dir to use "
                            "$MGRPO_DATA_DIR or ../shared/data")


class _XdistSession:
    """Hands the controller's session id to every xdist worker (registered only with xdist)."""

    def __init__(self, session_id: str):
        self.session_id = session_id

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[SESSION_KEY] = self.session_id


def pytest_sessionstart(session: pytest.Session) -> None:
    state = _state(session.config)
    if state is None or state.is_worker or state.target is None:
        return
    model = (state.target.provenance or {}).get("model")
    if model and not session.config.option.collectonly:  # --model: the run folder records what was evaluated
        prov = state.target.provenance
        write_provenance(state.target.run_dir, prov["config"], [0], trainer=state.trainer,
                         arm=f"checkpoint:{Path(model['dir']).name}", mark_running=False, model=model)
        return
    if state.trainer != EXPERT:
        return
    if state.target.provenance is None and not session.config.option.collectonly:
        write_provenance(state.target.run_dir, {
            "trainer": EXPERT, "world": {"seed": state.world_seed, "size": state.world_size},
            "expert_noise": state.expert_noise, "visit_backend": state.visit_backend,
        }, [state.world_seed], trainer=EXPERT, arm=EXPERT, mark_running=False)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "eval_case" not in metafunc.fixturenames:
        return
    state = _state(metafunc.config)
    assert state is not None, "the evaluation plugin did not configure (run pytest on benchmarks/)"
    cases = state.cases()
    metafunc.parametrize("eval_case", cases, ids=[c.id for c in cases])


# ------------------------------------------------------------------------------ fixtures
class EvalSuite:
    """Runs one case: the runner answers, the benchmark scores, the record is appended."""

    def __init__(self, state: EvalState, world: Any):
        self.state = state
        self.world = world
        self._runner: Any = None
        self._lock = threading.Lock()

    @property
    def runner(self) -> Any:
        with self._lock:
            if self._runner is None:
                ctx = RunnerContext(self.state.target, self.world, self.state.expert_noise, self.state.web,
                                    self.state.temperature)
                self._runner = build_runner(self.state.trainer, ctx)
            return self._runner

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()

    def _answer(self, bench: Any, task: Any, run: int | None = 0) -> tuple[Any, str | None, str | None]:
        """(Answer or None, error, traceback) within the task timeout; never raises. ``run=None``: every inference
        run at once (:meth:`benchmarks.runners.Runner.answer_runs`, a list of answers or None), within the timeout
        times the number of runs."""
        box: dict[str, Any] = {}
        n = self.state.inference_runs

        def work() -> None:
            try:
                box["answer"] = (self.runner.answer(bench, task, run) if run is not None
                                 else self.runner.answer_runs(bench, task, n))
            except BaseException as exc:  # noqa: BLE001 - a crash is a recorded verdict (docs/evaluation.md)
                message = "(message withheld: sensitive benchmark)" if bench.sensitive else str(exc)[:500]
                box["error"] = f"{type(exc).__name__}: {message}"
                if not bench.sensitive:
                    box["trace"] = traceback.format_exc(limit=8)[-2000:]

        # A daemon thread, so a hung agent cannot keep the worker alive; it is abandoned on timeout.
        thread = threading.Thread(target=work, name=f"eval-{task.task_id}", daemon=True)
        thread.start()
        timeout = self.state.task_timeout * (n if run is None else 1)
        thread.join(timeout)
        if thread.is_alive():
            return None, f"timeout: no answer after {timeout:g} s", None
        return box.get("answer"), box.get("error"), box.get("trace")

    def evaluate(self, case: EvalCase, timed: Callable[[Callable[[], Any]], Any]) -> list[Outcome]:
        """Answer, score and record ``case`` once per inference run; the outcomes in run order."""
        bench, task = self.state.bench(case.bench), case.task

        def runs() -> list[tuple[Any, str | None, str | None, float]]:
            n = self.state.inference_runs
            if n > 1:  # all runs in one batch where the runner can (a local task's group); latency: their share
                t0 = time.perf_counter()
                answers, error, trace = self._answer(bench, task, None)
                share = (time.perf_counter() - t0) / n
                if error is not None:
                    return [(None, error, trace, share)] * n
                if answers is not None:
                    return [(a, None, None, share) for a in answers]
            out = []
            for run in range(n):
                t0 = time.perf_counter()
                answer, error, trace = self._answer(bench, task, run)
                out.append((answer, error, trace, time.perf_counter() - t0))
            return out

        return [self._record(bench, task, run, *result) for run, result in enumerate(timed(runs))]

    def _record(self, bench: Any, task: Any, run: int, answer: Any, error: str | None, trace: str | None,
                latency: float) -> Outcome:
        state, target = self.state, self.state.target
        if error is None and answer is not None and answer.error:  # the agent ran, the web did not answer
            error = answer.error
            if bench.sensitive:  # the first failure quotes a URL or query, which may hold the question (XBench)
                error = error.split(" (first:", 1)[0] + " (detail withheld: sensitive benchmark)"
        prediction = answer.prediction if answer is not None else None
        verdict = bench.score(task, prediction)
        fields = bench.record_fields(task, prediction)
        extra: dict[str, Any] = {"eval_session": state.session_id, "runner": state.trainer,
                                 "world_seed": state.world_seed, "world_size": state.world_size,
                                 "visit_backend": state.visit_backend,
                                 "split": task.metadata.get("split", state.split)}
        if state.web is not None and not isinstance(bench, LocalBenchmark):
            extra["search"] = state.web.provider  # the provider only: an endpoint may carry a key in its query
        extra.update({k: task.metadata[k] for k in CELL_KEYS if task.metadata.get(k) is not None})
        if state.weights:  # which weights each role answered with (a role without a checkpoint: its start)
            extra["weights"] = {role: w.record() for role, w in state.weights.items()}
        if answer is not None:
            extra.update(answer.extra)
        if trace is not None:  # where the runner crashed (never for a sensitive benchmark)
            extra["traceback"] = trace
        if error is None:
            label = None
        elif error.startswith("timeout"):
            label = "timeout"
        else:
            label = UNREACHABLE_VERDICT if error.startswith(UNREACHABLE_VERDICT) else "crashed"
        # the expert has no temperature: its runs differ by the seed of its noise (--expert-noise)
        sampled = state.inference_runs > 1 or state.temperature > 0
        temperature = state.temperature if sampled and state.trainer != EXPERT else None
        record = TaskRecord(
            run_id=target.run_id, trainer=target.trainer, seed=target.seed, step=target.step,
            benchmark=bench.name, task_id=task.task_id, correct=bool(verdict.correct and error is None),
            benchmark_version=bench.version, prediction=fields["prediction"], gold=fields["gold"],
            judge=verdict.judge if error is None else None,
            verdict=verdict.verdict if error is None else label,
            error=error if error is not None else verdict.error,
            n_turns=getattr(answer, "n_turns", None), n_sub_calls=getattr(answer, "n_sub_calls", None),
            n_tokens=getattr(answer, "n_tokens", None), latency_s=round(latency, 6), extra=extra,
            inference_run=run if state.inference_runs > 1 else None,
            temperature=temperature,
            sample_seed=(answer.sample_seed if answer is not None and answer.sample_seed is not None
                         else sample_seed(target, run)) if sampled else None,
            # the transcript holds the question: never on disk for a sensitive benchmark (XBench plain text)
            transcript=None if bench.sensitive else getattr(answer, "transcript", None))
        path = append_task(target.run_dir, record, target.records_split)
        return Outcome(record, path, crashed=error is not None)

    def timer(self, request: pytest.FixtureRequest, case: EvalCase) -> Callable[[Callable[[], Any]], Any]:
        """Time with pytest-benchmark's fixture when the plugin is active, else call directly."""
        if not request.config.pluginmanager.has_plugin("benchmark"):
            return lambda fn: fn()
        bm = request.getfixturevalue("benchmark")
        bm.group = case.bench
        bm.extra_info["task_id"] = case.task.task_id
        return lambda fn: bm.pedantic(fn, rounds=1, iterations=1, warmup_rounds=0)


@pytest.fixture(scope="session")
def eval_world(pytestconfig: pytest.Config) -> Any:
    """The offline world served over HTTP on 127.0.0.1 with its toolbox (one per process)."""
    state = _state(pytestconfig)
    assert state is not None
    world = LocalWorld(state.world_seed, state.world_size, state.visit_backend)
    if any(isinstance(state.bench(name), LocalBenchmark) for name in state.bench_names):
        world.start()  # here, so the first task's latency does not include starting the world
    yield world
    world.close()


@pytest.fixture(scope="session")
def eval_suite(pytestconfig: pytest.Config, eval_world: Any) -> Any:
    state = _state(pytestconfig)
    assert state is not None
    suite = EvalSuite(state, eval_world)
    suite.runner  # build it now (a model runner loads checkpoints), outside every task's latency
    yield suite
    suite.close()


# ------------------------------------------------------------------------------ the table
class _Bookkeeper:
    """Controller-side record of which items ran or skipped (xdist forwards workers' reports)."""

    def __init__(self, state: EvalState):
        self.state = state

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        m = _ITEM_ID.search(report.nodeid)
        if m is None:
            return
        bench, task_id = m.group(1), m.group(2)
        if report.skipped and not hasattr(report, "wasxfail"):
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            self.state.skipped.setdefault(bench, []).append(reason.removeprefix("Skipped: "))
        elif report.when == "setup" and report.failed:
            # The evaluation could not start (e.g. the run's checkpoints do not load): not a verdict.
            self.state.skipped.setdefault(bench, []).append("setup error (see the errors above)")
        elif report.when not in ("setup", "teardown"):
            # "call", or xdist's "???" report for an item whose worker died while running it.
            self.state.ran.setdefault(bench, set()).add(task_id)


def _session_records(state: EvalState, name: str) -> dict[tuple[str, int], Any]:
    """This session's records of benchmark ``name`` read back from disk (the last per task id and inference run)."""
    recs: dict[tuple[str, int], Any] = {}
    if state.target is not None:
        path = RunPaths(state.target.run_dir).eval_file(state.target.step, name, state.target.records_split)
        if path.is_file():
            for r in read_tasks(path, tolerate_truncated_tail=True, transcripts=False).records:
                if r.extra.get("eval_session") == state.session_id:
                    recs[(r.task_id, r.inference_run or 0)] = r
    return recs


#: Verdicts of a task the agent could not finish (counted in the table's errors column; incorrect).
ERROR_VERDICTS = ("crashed", "timeout", UNREACHABLE_VERDICT)


def _rows(state: EvalState) -> list[dict[str, Any]]:
    rows = []
    for name in state.bench_names:
        recs = _session_records(state, name)
        ran = state.ran.get(name, set())
        missing = sorted(ran - {task_id for task_id, _ in recs})
        # an item that ran without leaving records (its worker died): incorrect in every run
        outcomes = [r.correct for r in recs.values()] + [False] * (len(missing) * state.inference_runs)
        row: dict[str, Any] = {"bench": name, "n": len(outcomes)}
        if not outcomes:
            reasons = state.skipped.get(name) or ["no item of it ran (deselected, or a collection error)"]
            row["not_run"] = reasons[0]
        else:
            acc = accuracy(outcomes)
            lat = [r.latency_s for r in recs.values() if r.latency_s is not None]
            per_run = [accuracy([r.correct for (_, run), r in recs.items() if run == k]).mean
                       for k in range(state.inference_runs)] if state.inference_runs > 1 else []
            row.update(acc=acc, errors=sum(r.error is not None and r.verdict in ERROR_VERDICTS
                                           for r in recs.values()) + len(missing) * state.inference_runs,
                       missing=len(missing), latency=sum(lat) / len(lat) if lat else math.nan,
                       version=next(iter(recs.values())).benchmark_version if recs else "?",
                       cells=_cells(list(recs.values())), per_run=per_run)
        rows.append(row)
    return rows


def _cells(recs: list[Any]) -> str:
    """Per-cell accuracy of records: GAIA levels, WebWalkerQA type x difficulty ('' if none)."""
    def key(r: Any) -> str | None:
        if "type" in r.extra and "difficulty_level" in r.extra:
            return f"{r.extra['type']}/{r.extra['difficulty_level']}"
        if "level" in r.extra:
            return f"level {r.extra['level']}"
        return None

    groups: dict[str, list[Any]] = {}
    for r in recs:
        k = key(r)
        if k is not None:
            groups.setdefault(k, []).append(r)
    return ", ".join(f"{k} {100 * a.mean:.0f}% (n={a.n})"
                     for k, a in ((k, accuracy(groups[k])) for k in sorted(groups)))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = _state(config)
    if state is None or state.is_worker or config.option.collectonly:
        return
    tr = terminalreporter
    target = state.target
    where = f"run={target.run_dir} step={target.step}" if target is not None else "no run"
    tr.write_sep("=", f"mgrpo evaluation: trainer={state.trainer} {where} split={state.split}")
    if state.no_run is not None:
        tr.write_line(state.no_run)
    for role, w in state.weights.items():
        tr.write_line(f"{'sub-agent' if role == 'sub' else role}: {w.describe()}")
    header = f"{'benchmark':<20} {'version':<22} {'n':>5} {'correct':>7}  {'accuracy ± SE':<16} {'errors':>6} " \
             f"{'s/task':>7} {'tasks/min':>9}"
    tr.write_line(header)
    for row in _rows(state):
        if "not_run" in row:
            tr.write_line(f"{row['bench']:<20} {'-':<22} {'-':>5} {'-':>7}  not run: {row['not_run']}")
            continue
        acc = row["acc"]
        lat = row["latency"]
        per_min = 60.0 / lat if lat and lat > 0 else math.nan
        tr.write_line(f"{row['bench']:<20} {str(row['version'])[:22]:<22} {acc.n:>5} {acc.n_correct:>7}  "
                      f"{100 * acc.mean:5.1f}% ± {100 * acc.stderr:4.1f}  {row['errors']:>6} "
                      f"{lat:7.3f} {per_min:9.1f}")
        if row["cells"]:
            tr.write_line(f"  {row['cells']}")
        if row["per_run"]:
            tr.write_line(f"  {state.inference_runs} inference runs at temperature {state.temperature:g}, accuracy per "
                          f"run: {', '.join(f'{100 * a:.1f}%' for a in row['per_run'])} (the row above: their mean)")
        if row["missing"]:
            tr.write_line(f"  {row['missing']} item(s) ran without leaving a record: counted incorrect")
    if target is not None:
        tr.write_line(f"records: {target.run_dir}/{SPLIT_DIRS[target.records_split]}/{target.step}/<benchmark>.jsonl "
                      f"(eval_session {state.session_id}); wall {time.time() - state.started:.1f} s")
    if state.status_note is not None:
        tr.write_line(state.status_note)


def _nothing_evaluated(state: EvalState, exitstatus: int) -> str:
    """Why a session left no record (for status.json)."""
    skipped = [r for reasons in state.skipped.values() for r in reasons]
    if any(r.startswith("setup error") for r in skipped):
        why = "every item errored before running (setup errors: the world or the runner could not start)"
    elif skipped:
        why = f"every item was skipped ({skipped[0]})"
    elif exitstatus in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR):
        why = (f"pytest stopped before running any task (exit status {int(exitstatus)}: a collection error "
               "or an interrupt)")
    else:
        why = "no item ran (deselected, or a collection error)"
    return f"nothing was evaluated in eval_session {state.session_id}: {why}; see the pytest output"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = _state(session.config)
    if state is None or state.is_worker or state.target is None:
        return
    # the runs this suite creates: the expert's and a --model folder's (a trained run's status is its trainer's)
    owned = state.trainer == EXPERT or bool((state.target.provenance or {}).get("model"))
    if not owned or session.config.option.collectonly:
        return

    run_dir = state.target.run_dir
    if not run_dir.is_dir():
        return
    n = sum(len(_session_records(state, name)) for name in state.bench_names)
    if n:
        write_status(run_dir, "completed", eval_session=state.session_id, n_records=n)
        return
    # Not "completed" when nothing ran (issue 14): a folder with no record is a failed evaluation;
    # one holding an earlier session's records keeps that state, with this session's failure noted.
    why = _nothing_evaluated(state, exitstatus)
    try:
        before = read_status(run_dir)
    except ValueError:
        before = {"state": "unknown"}
    if before.get("state") in RUN_STATES and RunPaths(run_dir).eval_files():
        keep = {k: v for k, v in before.items() if k not in ("schema", "state", "updated", "host", "pid")}
        write_status(run_dir, before["state"], **{**keep, "last_eval_session": state.session_id,
                                                  "last_eval_error": why})
        state.status_note = f"{why}; {run_dir} keeps its earlier records and state {before['state']!r}"
    else:
        write_status(run_dir, "failed", eval_session=state.session_id, error=why)
        state.status_note = f"{why}; {run_dir}/status.json says failed"
