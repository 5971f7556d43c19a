"""The typed run configuration of ``python -m harness train`` and ``python -m harness.role`` (docs/paper.md, docs/training.md, docs/architecture.md §Layout).

One YAML preset (``baselines/configs/<preset>/<trainer>.yaml``, a family's ``_base.yaml`` plus the
trainer's differences through ``base:``, see :func:`harness.config.load_yaml`) holds everything a run
needs; both roles read the same resolved config (saved in ``provenance.json`` and ``config.yaml`` of the run
directory), so the planner and the sub-agent role never disagree about K, d, seeds or the world.
Sections: ``models``, ``world``, ``tasks``, ``rollout`` (:class:`harness.rollout.RolloutConfig`),
``tools`` (:class:`harness.tools.toolbox.ToolsConfig`), ``rewards``, ``alignment``, ``planner`` and
``sub`` (per-role trainer hyper-parameters -> :class:`mgrpo.trainer.MGRPOConfig`), ``store``,
``service``, ``eval``; the top-level ``report_to`` names the experiment trackers (TensorBoard,
Trackio, W&B) each role's TRL trainer also reports to. Unknown keys, wrong types and inconsistent
values fail at load time with a message naming the key and what to change
(:func:`harness.config.load_config`).

Batch-size rule (TRL ``GRPOTrainer``): the generation batch of a role is ``groups_per_step`` whole
groups (K completions each for the planner, d*K for the sub-agent) and is split into
``num_processes * gradient_accumulation_steps`` equal micro-batches, so ``groups_per_step * group``
must be divisible by that product. The sub-agent role consumes the groups the planner produces:
``sub.max_steps * sub.groups_per_step`` may not exceed ``planner.max_steps *
planner.groups_per_step``.

Deliberate decisions: ``sub.max_steps`` and ``sub.groups_per_step`` default (``null``) to the
planner's, so the sub-agent takes one optimizer step per planner step (the paper's synchronised
schedule); ``tasks.hard_filter`` (paper stage 2: keep the tasks the stage-1 system mostly fails, as scored
by ``python -m harness filter``) is validated here and applied when the run's task set is prepared.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from baselines import TRAINERS
from harness.config import ConfigError, help_field, load_config
from harness.rollout import RolloutConfig
from harness.tools.toolbox import ToolsConfig
from harness.world.schemas import BENCHMARKS as BENCHMARK_STYLES
from mgrpo.options import LOSS_TYPES, OLD_LOGPROBS, RATIO_LEVELS, option_field

#: The per-group advantage rule of docs/paper.md (``RoleTrainConfig.advantage_fn``).
DEFAULT_ADVANTAGE_FN = "mgrpo.advantage:group_advantages"


@dataclass
class ModelsConfig:
    """Which model each role starts from (docs/models.md)."""

    planner: str = help_field("tiny", "planner (or single agent) model: registry name (tiny, smollm2-135m), local "
                              "path, HF id, or a warm-start dir holding planner/ sub_agent/ single_agent/")
    sub: str = help_field("tiny", "sub-agent model (same forms); ignored by single_agent")
    init_seed: int = help_field(0, "weight seed of a built tiny model")
    dtype: str = help_field("float32", "parameter dtype: float32, bfloat16, float16 or auto")
    cache_dir: str = help_field(".cache/models", "where built/converted models are cached")


@dataclass
class WorldSection:
    """The offline web world (docs/world.md)."""

    seed: int = help_field(0, "world seed")
    size: Literal["tiny", "small", "default"] = help_field("tiny", "world preset")
    address: str | None = help_field(None, "the world's stable address as the agents see it in tasks, search results "
                                     "and pages (e.g. http://world.local, the address the warm-start demonstrations "
                                     "use); the tools map it to the live server. null: show the live server's "
                                     "http://127.0.0.1:<port>, which changes from run to run")

    def validate(self) -> None:
        if self.address is not None and not re.fullmatch(r"https?://[A-Za-z0-9.-]+(:\d+)?", self.address):
            raise ConfigError(f"world.address={self.address!r}: give scheme and host only, e.g. http://world.local "
                              "(or null for the live server's address)")


@dataclass
class TasksConfig:
    """Which generated tasks the planner trains on (docs/world.md)."""

    benchmarks: list[str] = help_field(list(BENCHMARK_STYLES), f"task styles used: {', '.join(BENCHMARK_STYLES)}")
    split: Literal["train", "test"] = help_field("train", "split trained on (evaluation uses the other)")
    n_train: int = help_field(20, "train tasks generated per style")
    n_test: int = help_field(5, "test tasks generated per style")
    limit: int | None = help_field(None, "keep at most this many training tasks after filtering (null = all)")
    max_hops: int | None = help_field(None, "keep tasks whose gold path has at most this many subtasks "
                                      "(paper stage 1: simple tasks for format); null = all")
    templates: list[str] | None = help_field(None, "keep tasks whose gold template matches one of these glob patterns, "
                                             "e.g. gaia.person.* (training and evaluation tasks); null = all")
    test_fraction: float = help_field(0.25, "share of the world's entities that are test answer entities")
    hard_filter: str | None = help_field(None, "paper stage 2: a filter folder written by python -m harness filter "
                                         "(the untrained or stage-1 system's success rate on every candidate task; one "
                                         "filter for all arms); null = no filter")
    hard_filter_max_success: float = help_field(0.25, "stage 2: keep tasks the filtering system solved in at most this "
                                                "share of its attempts")

    def validate(self) -> None:
        unknown = sorted(set(self.benchmarks) - set(BENCHMARK_STYLES))
        if unknown or not self.benchmarks:
            raise ConfigError(f"tasks.benchmarks={self.benchmarks}: choose one or more of {list(BENCHMARK_STYLES)}")
        if self.n_train < 1 or self.n_test < 0:
            raise ConfigError("tasks.n_train must be >= 1 and tasks.n_test >= 0")
        if not 0.0 < self.test_fraction < 1.0:
            raise ConfigError(f"tasks.test_fraction={self.test_fraction} must be in (0, 1)")
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"tasks.limit={self.limit} must be >= 1 or null")
        if self.max_hops is not None and self.max_hops < 1:
            raise ConfigError(f"tasks.max_hops={self.max_hops} must be >= 1 or null")
        if not 0.0 <= self.hard_filter_max_success <= 1.0:
            raise ConfigError("tasks.hard_filter_max_success must be in [0, 1]")


@dataclass
class RewardsConfig:
    """Reward weights (docs/paper.md; paper defaults)."""

    planner_format: float = help_field(0.1, "R_M weight of r_format")
    planner_correct: float = help_field(0.9, "R_M weight of r_correct")
    sub_format: float = help_field(0.1, "R_S weight of the sub-agent's r_format")
    sub_correct: float = help_field(0.4, "R_S weight of the planner's r_correct in the same rollout")
    sub_expert: float = help_field(0.5, "R_S weight of r_expert (the expert judge of the subtask result)")
    sub_expert_reference: Literal["gold", "delegated"] = help_field(
        "gold", "what r_expert judges a sub-agent result against. 'gold': the fact the task's gold path needs for the "
        "gold subtask the delegated text matches best, so a sub-agent that answers a wrongly delegated subtask "
        "correctly scores 0. 'delegated': the fact the subtask asks for as it was delegated (the noise-free scripted "
        "sub-agent solves it in the run's offline world; the gold path where it cannot), so the sub-agent is judged on "
        "its own job and the planner's mistakes reach it only through r_correct (docs/paper.md, Rewards)")

    def validate(self) -> None:
        for name in ("planner_format", "planner_correct", "sub_format", "sub_correct", "sub_expert"):
            if getattr(self, name) < 0:
                raise ConfigError(f"rewards.{name}={getattr(self, name)} must be >= 0")


@dataclass
class AlignmentConfig:
    """Sub-trajectory alignment (docs/paper.md) and the ``none`` ablation (docs/paper.md §Trajectory alignment, paper Fig. 8)."""

    d: int = help_field(8, "aligned sub-trajectories per rollout; the sub-agent group is d*K")
    mode: Literal["query", "none"] = help_field(
        "query", "'query': align each query's calls to d per rollout (M-GRPO); 'none': FIFO chunks of "
        "alignment.chunk (default d*K) sub-trajectories regardless of query (ablation)")
    chunk: int | None = help_field(
        None, "alignment.mode 'none' only: sub-trajectories per FIFO chunk, i.e. per sub-agent group (null: d*K). "
        "A chunk holds raw sub-trajectories, not aligned duplicates, so d*K of them take about d/(calls per "
        "rollout) planner steps to arrive; a smaller chunk lets the ablation's sub-agent train as often as the "
        "aligned one (docs/paper.md)")

    def validate(self) -> None:
        if self.d < 1:
            raise ConfigError(f"alignment.d={self.d} must be >= 1")
        if self.chunk is not None:
            if self.mode != "none":
                raise ConfigError(f"alignment.chunk={self.chunk} applies to alignment.mode=none only (query-aligned "
                                  "groups are d*K by construction); remove it or set alignment.mode=none")
            if isinstance(self.chunk, bool) or not isinstance(self.chunk, int) or self.chunk < 2:
                raise ConfigError(f"alignment.chunk={self.chunk!r} must be an integer >= 2 (a group of one "
                                  "sub-trajectory has no advantage), or null for d*K")


@dataclass
class RoleTrainConfig:
    """Trainer hyper-parameters of one role (-> ``MGRPOConfig``; docs/paper.md).

    ``harness.role.mgrpo_args`` builds the role's :class:`mgrpo.trainer.MGRPOConfig` from this section.
    Forwarded to TRL under the same name: ``gradient_accumulation_steps``, ``learning_rate``,
    ``lr_scheduler_type``, ``warmup_steps``, ``weight_decay``, ``max_grad_norm``, ``loss_type``,
    ``ratio_level``, ``old_logprobs``, ``epsilon``, ``epsilon_high``, ``beta``, ``bf16``, ``gradient_checkpointing``,
    ``unpadded_forward`` and ``save_steps`` (0 -> the role's max steps); ``vllm_url`` becomes ``use_vllm``/``vllm_mode="server"``/
    ``vllm_server_base_url``; ``trl`` is passed as extra keyword arguments, last. The harness's own:
    ``max_steps`` and ``groups_per_step`` (from which the role derives TRL's ``max_steps``,
    ``num_generations`` and ``per_device_train_batch_size``), ``num_processes`` (checked against
    ``WORLD_SIZE``), ``advantage_fn`` (given to the trainer), ``max_staleness`` (sub role: the
    ``loss_weight`` of a sub-trajectory staler than that), ``max_lag`` (sub role: how far the planner may run ahead
    of it) and ``serve`` (sub role: how its service answers during a step). Defaults that differ from TRL's are the
    harness's choice: ``lr_scheduler_type="constant"``, ``save_steps=0``.

    ``ratio_level``, ``loss_type``, ``old_logprobs``, ``epsilon_high``, ``bf16``, ``gradient_checkpointing`` and
    ``unpadded_forward`` are also declared by ``MGRPOConfig``: both classes take default, help text and choices from
    :data:`mgrpo.options.OPTIONS` (one declaration, free of torch and TRL, so loading a config stays light).
    """

    max_steps: int | None = help_field(None, "optimizer steps (planner: required; sub: null = planner's)")
    groups_per_step: int | None = help_field(
        None, "query groups per optimizer step (planner: queries, K rollouts each; sub: null = planner's, "
        "d*K sub-trajectories each)")
    learning_rate: float = help_field(1e-6, "AdamW learning rate")
    lr_scheduler_type: str = help_field("constant", "transformers scheduler name")
    warmup_steps: int = help_field(0, "scheduler warm-up steps")
    weight_decay: float = help_field(0.0, "AdamW weight decay")
    max_grad_norm: float = help_field(1.0, "gradient clipping norm")
    gradient_accumulation_steps: int = help_field(1, "micro-batches per optimizer step")
    num_processes: int = help_field(1, "data-parallel processes of this role (accelerate); checked at start")
    loss_type: str = option_field("loss_type")
    ratio_level: Literal["sequence", "token"] = option_field("ratio_level")
    old_logprobs: Literal["recompute", "behaviour"] = option_field("old_logprobs")
    max_staleness: int | None = help_field(None, "sub role: a sub-trajectory generated more than this many policy "
                                           "versions before the step that trains it is left out of the loss (it "
                                           "stays in its group for the advantages); counted in the step records "
                                           "(stale_trajectories, dropped_stale, corrected); null = no bound")
    max_lag: int | None = help_field(None, "sub role (paces the planner): before each step's rollouts the planner waits "
                                     "until the sub role is at most this many optimizer steps behind it, unless the "
                                     "sub role has taken every complete group (it waits for the planner then); so no "
                                     "sub-trajectory trains more than max_lag policy versions after the one that "
                                     "generated it (with sub.groups_per_step equal to the planner's); the wait is the "
                                     "planner's sub_lag_wait_s; null = no pacing (docs/training.md, 'Staleness')")
    serve: Literal["locked", "snapshot"] = help_field(
        "locked", "sub role: how its service answers the planner while the sub-agent trains; locked = requests wait "
        "for the optimizer step to end (every episode on the newest weights); snapshot = from a copy of the weights, "
        "refreshed after each step (no waiting; episodes started during a step run one policy version behind, "
        "see max_staleness and old_logprobs: behaviour; hf backend only; docs/performance.md)")
    epsilon: float = help_field(0.2, "lower clip: ratio >= 1 - epsilon")
    epsilon_high: float = option_field("epsilon_high")
    beta: float = help_field(0.0, "KL coefficient (0 = no KL, the paper's setting)")
    save_steps: int = help_field(0, "save a checkpoint every N steps (0 = only at the end)")
    bf16: bool | None = option_field("bf16")
    gradient_checkpointing: bool | None = option_field("gradient_checkpointing")
    unpadded_forward: bool | None = option_field("unpadded_forward")
    vllm_url: str | None = help_field(None, "generate with a `trl vllm-serve` server at this URL (TRL syncs "
                                      "the weights into it); null = in-process hf backend")
    advantage_fn: str = help_field(
        DEFAULT_ADVANTAGE_FN, "import path module:function of the per-group advantage rule (rewards of one group "
        "-> advantages); the default is M-GRPO's docs/paper.md; others are for ablations and tests")
    trl: dict[str, Any] = help_field({}, "extra MGRPOConfig/GRPOConfig keyword arguments (checked by TRL)")

    def validate(self) -> None:
        for name in ("gradient_accumulation_steps", "num_processes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)} must be >= 1")
        if self.max_steps is not None and self.max_steps < 1:
            raise ConfigError(f"max_steps={self.max_steps} must be >= 1")
        if self.groups_per_step is not None and self.groups_per_step < 1:
            raise ConfigError(f"groups_per_step={self.groups_per_step} must be >= 1")
        if self.learning_rate <= 0:
            raise ConfigError(f"learning_rate={self.learning_rate} must be > 0")
        if self.save_steps < 0:
            raise ConfigError("save_steps must be >= 0")
        if self.ratio_level not in RATIO_LEVELS:
            raise ConfigError(f"ratio_level={self.ratio_level!r}: choose one of {RATIO_LEVELS}")
        if self.loss_type not in LOSS_TYPES:
            raise ConfigError(f"loss_type={self.loss_type!r}: choose 'mgrpo' or one of TRL's {LOSS_TYPES[1:]}")
        if self.old_logprobs not in OLD_LOGPROBS:
            raise ConfigError(f"old_logprobs={self.old_logprobs!r}: choose one of {OLD_LOGPROBS}")
        if self.max_staleness is not None and self.max_staleness < 0:
            raise ConfigError(f"max_staleness={self.max_staleness} must be >= 0 (policy versions) or null")
        if self.max_lag is not None and self.max_lag < 0:
            raise ConfigError(f"max_lag={self.max_lag} must be >= 0 (policy versions) or null")
        if self.serve not in ("locked", "snapshot"):
            raise ConfigError(f"serve={self.serve!r}: choose 'locked' or 'snapshot'")
        if self.serve == "snapshot" and self.vllm_url:
            raise ConfigError("serve=snapshot needs the in-process hf backend: a vLLM server holds one copy of the "
                              "weights (set serve: locked, or drop vllm_url)")
        resolve_advantage_fn(self.advantage_fn)

    @property
    def micro_batches(self) -> int:
        return self.num_processes * self.gradient_accumulation_steps


_IMPORT_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def resolve_advantage_fn(path: str) -> Callable[..., Any]:
    """The callable named by ``advantage_fn`` (``module:function``); :class:`ConfigError` otherwise.

    Imports the module (the default, :mod:`mgrpo.advantage`, is pure Python: loading a config
    stays free of torch); the roles call this again to get the function they train with."""
    if not isinstance(path, str) or not _IMPORT_PATH.match(path):
        raise ConfigError(f"advantage_fn={path!r}: expected an import path 'module:function', e.g. "
                          f"{DEFAULT_ADVANTAGE_FN!r}")
    module, _, attr = path.partition(":")
    try:
        obj: Any = importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - any failure to import is a config error naming the key
        raise ConfigError(f"advantage_fn={path!r}: cannot import module {module!r} ({type(exc).__name__}: {exc}); "
                          "the roles run from "
                          "the repository root, so a module there (e.g. tests.support...) is importable") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"advantage_fn={path!r}: module {module!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ConfigError(f"advantage_fn={path!r}: {attr!r} is not callable (it must map the rewards of one group "
                          "to their advantages)")
    return obj


#: Experiment trackers ``report_to`` accepts, each with the modules that provide it (any one of them;
#: transformers' TensorBoard callback also works with ``tensorboardX``) and what to ``pip install``.
REPORT_TO_BACKENDS: dict[str, tuple[tuple[str, ...], str]] = {
    "tensorboard": (("tensorboard", "tensorboardX"), "tensorboard"),
    "trackio": (("trackio",), "trackio"),
    "wandb": (("wandb",), "wandb"),
}


def report_targets(value: str | list[str]) -> list[str]:
    """The trackers named by ``report_to`` (``[]`` for ``none``); :class:`ConfigError` for an unknown or
    uninstalled one, so a run does not die in its roles when TRL builds the tracker's callback."""
    names = [value] if isinstance(value, str) else list(value)
    if names == ["none"]:
        return []
    unknown = [n for n in names if n not in REPORT_TO_BACKENDS]
    if unknown or not names:
        raise ConfigError(f"report_to={value!r}: choose none, one of {sorted(REPORT_TO_BACKENDS)}, or a list of them")
    for name in names:
        modules, package = REPORT_TO_BACKENDS[name]
        if not any(importlib.util.find_spec(m) is not None for m in modules):
            raise ConfigError(f"report_to={name!r}: the {package} package is not installed in this environment; "
                              f"pip install {package} (or set report_to: none)")
    return list(dict.fromkeys(names))


@dataclass
class StoreSection:
    """The shared store between roles (docs/training.md)."""

    url: str | None = help_field(None, "sqlite:///path or redis://host:port/db; null = sqlite in the run dir")
    group_timeout_s: float = help_field(600.0, "how long the sub role waits for the next complete query group")
    retry_s: float = help_field(30.0, "redis: how long a role keeps retrying while the store cannot be reached (a "
                                "restart, a network cut), also when it opens the store, before it stops with an error "
                                "(sqlite: a write waits up to 30 s for a lock)")

    def validate(self) -> None:
        if self.url is not None and not self.url.startswith(("sqlite:///", "redis://", "rediss://")):
            raise ConfigError(f"store.url={self.url!r}: use sqlite:///path/store.db or redis://host:port/db")
        if self.group_timeout_s <= 0:
            raise ConfigError("store.group_timeout_s must be > 0")
        if self.retry_s < 0:
            raise ConfigError(f"store.retry_s={self.retry_s} must be >= 0 seconds (0 = no retry)")


@dataclass
class ServiceConfig:
    """The sub-agent HTTP service (docs/training.md)."""

    host: str = help_field("127.0.0.1", "address the sub role binds (0.0.0.0 on a cluster)")
    port: int = help_field(0, "port of the sub role's service (0 = a free port, published in the store)")
    public_url: str | None = help_field(None, "URL the planner should use (default: http://host:port)")
    timeout_s: float = help_field(600.0, "planner: seconds one request to the service may take")
    startup_timeout_s: float = help_field(300.0, "planner: seconds to wait for the service to publish its URL")


@dataclass
class UnseenEvalConfig:
    """Held-out evaluation on worlds the run never trained on, before RL (step 0: the weights the run started from)
    and after its last step: ``python -m harness eval-unseen RUN``, which ``python -m harness experiment`` runs after
    each training run (docs/evaluation.md, "Unseen worlds"; records in ``<run>/eval_unseen/<step>/``). The tasks are
    fixed by these fields and the run's own ``tasks`` section, before any run: no choice is made after seeing one."""

    worlds: list[int] = help_field([], "world seeds to evaluate on, none of them the run's world.seed (nor, for a "
                                   "warm-started run, one the warm start trained on; [] = no such evaluation)")
    n_test: int = help_field(300, "test tasks generated per style in each of those worlds (python -m harness world "
                             "tasks --n-test), of which the run's tasks.benchmarks and tasks.templates are evaluated")
    runs: int = help_field(4, "independent sampled inference runs per task; accuracy is their mean")
    temperature: float | None = help_field(None, "sampling temperature (null = rollout.temperature; 0 = greedy, "
                                           "which needs runs: 1)")

    def validate(self) -> None:
        if any(w < 0 for w in self.worlds) or len(set(self.worlds)) != len(self.worlds):
            raise ConfigError(f"eval.unseen.worlds={self.worlds}: distinct world seeds >= 0")
        if self.n_test < 1 or self.runs < 1:
            raise ConfigError(f"eval.unseen.n_test={self.n_test} and eval.unseen.runs={self.runs} must be >= 1")
        if self.temperature is not None and self.temperature < 0:
            raise ConfigError(f"eval.unseen.temperature={self.temperature} must be >= 0 or null")


@dataclass
class EvalConfig:
    """Periodic evaluation by the planner role (docs/evaluation.md, docs/report.md: ``eval/<step>/<benchmark>.jsonl``)."""

    every: int = help_field(0, "evaluate every N planner steps and at the end (0 = never)")
    n_tasks: int = help_field(5, "test tasks per benchmark style")
    max_new_tokens: int | None = help_field(None, "new tokens per turn (null = rollout.max_new_tokens)")
    runs: int = help_field(3, "independent inference runs per evaluation, each task answered once per run; "
                           "accuracy is their mean and the report shows their spread (the paper averages 3)")
    temperature: float | None = help_field(None, "sampling temperature of the evaluation runs (null = "
                                           "rollout.temperature; 0 = greedy, which needs runs: 1)")
    train_tasks: int = help_field(0, "training tasks per benchmark style (the first of each style, in selection "
                                  "order) also evaluated, like the test tasks, before training and after the last "
                                  "step: in-distribution accuracy before and after RL, which the report shows next "
                                  "to the held-out accuracy (records in <run>/eval_train/<step>/; 0 = none)")
    unseen: UnseenEvalConfig = field(default_factory=UnseenEvalConfig,
                                     metadata={"help": "held-out evaluation on worlds the run never trained on"})

    def validate(self) -> None:
        if self.every < 0 or self.n_tasks < 1:
            raise ConfigError("eval.every must be >= 0 and eval.n_tasks >= 1")
        if self.runs < 1:
            raise ConfigError(f"eval.runs={self.runs} must be >= 1 (independent inference runs per evaluation)")
        if self.train_tasks < 0:
            raise ConfigError(f"eval.train_tasks={self.train_tasks} must be >= 0 (0 = no in-distribution evaluation)")
        if self.temperature is not None and self.temperature < 0:
            raise ConfigError(f"eval.temperature={self.temperature} must be >= 0 or null")
        if self.temperature == 0 and self.runs > 1:
            raise ConfigError(f"eval.runs={self.runs} with eval.temperature=0 repeats one greedy run; set eval.runs=1 "
                              "or a temperature above 0")


@dataclass
class TrainConfig:
    """One training run of one trainer (``python -m harness train``)."""

    trainer: str | None = help_field(None, "single_agent, frozen_sub or mgrpo (set by --trainer)")
    seed: int = help_field(0, "run seed: sampling, data order, alignment")
    run_id: str | None = help_field(None, "run directory name (null: <trainer>-s<seed>-<time>)")
    runs_dir: str = help_field("runs", "parent directory of run directories")
    threads: int = help_field(1, "torch threads of each role process")
    report_to: str | list[str] = help_field(
        "none", "also send each role's TRL training metrics to an experiment tracker: none, tensorboard (event "
        "files in <run>/<role>/tensorboard), trackio or wandb, or a list of them; the tracker's run name is "
        "<run_id>-<role>. The package must be installed (pip install tensorboard|trackio|wandb)")
    models: ModelsConfig = field(default_factory=ModelsConfig, metadata={"help": "models"})
    world: WorldSection = field(default_factory=WorldSection, metadata={"help": "offline world"})
    tasks: TasksConfig = field(default_factory=TasksConfig, metadata={"help": "training tasks"})
    rollout: RolloutConfig = field(default_factory=RolloutConfig, metadata={"help": "rollout limits, K"})
    tools: ToolsConfig = field(default_factory=lambda: ToolsConfig(visit_backend="direct"),
                               metadata={"help": "search/visit tools"})
    rewards: RewardsConfig = field(default_factory=RewardsConfig, metadata={"help": "reward weights"})
    alignment: AlignmentConfig = field(default_factory=AlignmentConfig, metadata={"help": "alignment"})
    planner: RoleTrainConfig = field(default_factory=RoleTrainConfig, metadata={"help": "planner trainer"})
    sub: RoleTrainConfig = field(default_factory=RoleTrainConfig, metadata={"help": "sub-agent trainer"})
    store: StoreSection = field(default_factory=StoreSection, metadata={"help": "shared store"})
    service: ServiceConfig = field(default_factory=ServiceConfig, metadata={"help": "sub-agent service"})
    eval: EvalConfig = field(default_factory=EvalConfig, metadata={"help": "periodic evaluation"})

    # ------------------------------------------------------------------ derived values
    @property
    def k(self) -> int:
        return self.rollout.k

    @property
    def sub_group_size(self) -> int:
        """One sub-agent TRL group: d*K (one query's aligned sub-trajectories), or ``alignment.chunk`` FIFO
        sub-trajectories in the ``none`` ablation when set."""
        if self.alignment.mode == "none" and self.alignment.chunk is not None:
            return self.alignment.chunk
        return self.alignment.d * self.rollout.k

    @property
    def planner_groups(self) -> int:
        return int(self.planner.groups_per_step or 1)

    @property
    def sub_groups(self) -> int:
        return int(self.sub.groups_per_step or self.planner_groups)

    @property
    def sub_max_steps(self) -> int:
        """Sub-agent optimizer steps: as configured, else as many as the planner's groups allow."""
        if self.sub.max_steps is not None:
            return self.sub.max_steps
        return max(1, (self.planner_steps * self.planner_groups) // self.sub_groups)

    @property
    def planner_steps(self) -> int:
        return int(self.planner.max_steps or 1)

    @property
    def eval_temperature(self) -> float:
        """Sampling temperature of the evaluation runs: ``eval.temperature``, else ``rollout.temperature``."""
        return self.rollout.temperature if self.eval.temperature is None else self.eval.temperature

    @property
    def unseen_temperature(self) -> float:
        """Sampling temperature of the unseen-world evaluation: ``eval.unseen.temperature``, else
        ``rollout.temperature``."""
        t = self.eval.unseen.temperature
        return self.rollout.temperature if t is None else t

    def validate(self) -> None:
        if self.trainer is None or self.trainer not in TRAINERS:
            raise ConfigError(f"trainer={self.trainer!r}: set it to one of {sorted(TRAINERS)} (or pass --trainer)")
        spec = TRAINERS[self.trainer]
        if self.threads < 1:
            raise ConfigError("threads must be >= 1")
        report_targets(self.report_to)
        if self.rollout.k < 2:
            raise ConfigError(f"rollout.k={self.rollout.k}: GRPO needs at least 2 rollouts per query (set rollout.k >= 2)")
        if self.planner.max_steps is None:
            raise ConfigError("planner.max_steps is required (optimizer steps of the planner)")
        if self.planner.groups_per_step is None:
            raise ConfigError("planner.groups_per_step is required (queries per planner step, K rollouts each)")
        gen = self.planner_groups * self.k
        if gen % self.planner.micro_batches:
            raise ConfigError(
                f"planner: the generation batch planner.groups_per_step * rollout.k = {self.planner_groups} * {self.k} "
                f"= {gen} must be divisible by planner.num_processes * planner.gradient_accumulation_steps = "
                f"{self.planner.micro_batches}; change planner.groups_per_step or planner.gradient_accumulation_steps")
        if self.planner_groups % self.planner.num_processes:
            # TRL hands each rank a contiguous slice of the generation batch; a slice that ends inside a group
            # leaves a rank with part of its K rollouts, which the rollout and the advantages cannot score
            raise ConfigError(
                f"planner: planner.groups_per_step={self.planner_groups} query groups cannot be split over "
                f"planner.num_processes={self.planner.num_processes} processes without a group of rollout.k={self.k} "
                f"straddling two ranks; make planner.groups_per_step a multiple of {self.planner.num_processes}")
        if spec.has_sub and not spec.sub_trains and self.sub.num_processes != 1:
            raise ConfigError(
                f"sub.num_processes={self.sub.num_processes}: trainer {self.trainer}'s sub-agent is frozen, so its "
                "role is the service alone, one process; set sub.num_processes=1")
        if spec.sub_trains:
            chunked = self.alignment.mode == "none" and self.alignment.chunk is not None
            group_of = "alignment.chunk" if chunked else "alignment.d * rollout.k"
            factors = f"{self.alignment.chunk}" if chunked else f"{self.alignment.d} * {self.k}"
            if self.sub_groups % self.sub.num_processes:
                # rank 0 takes the step's groups from the store and hands each rank whole groups of d*K
                raise ConfigError(
                    f"sub: sub.groups_per_step={self.sub_groups} query groups cannot be split over "
                    f"sub.num_processes={self.sub.num_processes} processes without a group of {group_of} = "
                    f"{self.sub_group_size} straddling two ranks; make sub.groups_per_step (default: "
                    f"planner.groups_per_step) a multiple of {self.sub.num_processes}")
            sub_gen = self.sub_groups * self.sub_group_size
            if sub_gen % self.sub.micro_batches:
                raise ConfigError(
                    f"sub: the generation batch sub.groups_per_step * {group_of} = {self.sub_groups} * {factors} = "
                    f"{sub_gen} must be divisible by sub.num_processes * "
                    f"sub.gradient_accumulation_steps = {self.sub.micro_batches}; change sub.groups_per_step or "
                    "sub.gradient_accumulation_steps")
            produced = self.planner_steps * self.planner_groups
            needed = self.sub_max_steps * self.sub_groups
            if needed > produced:
                raise ConfigError(
                    f"sub: sub.max_steps * sub.groups_per_step = {self.sub_max_steps} * {self.sub_groups} = {needed} "
                    f"query groups, but the planner produces only planner.max_steps * planner.groups_per_step = "
                    f"{self.planner_steps} * {self.planner_groups} = {produced}; lower sub.max_steps (or leave it "
                    "null to follow the planner)")
            if self.sub.max_lag is not None and self.sub_groups != self.planner_groups:
                raise ConfigError(
                    f"sub.max_lag={self.sub.max_lag} counts the sub role's steps against the planner's, one group set "
                    f"each, but sub.groups_per_step={self.sub_groups} differs from planner.groups_per_step="
                    f"{self.planner_groups}; leave sub.groups_per_step null (or equal) or set sub.max_lag to null")
        if self.tasks.limit is not None and self.tasks.limit < self.planner_groups:
            raise ConfigError(f"tasks.limit={self.tasks.limit} is smaller than planner.groups_per_step="
                              f"{self.planner_groups}: one step needs that many distinct queries")
        if self.eval.every and self.tasks.n_test < 1:
            raise ConfigError("eval.every > 0 needs test tasks: set tasks.n_test >= 1")
        if spec.sub_trains and self.rewards.sub_expert_reference == "delegated" and self.tools.search_backend == "realweb":
            raise ConfigError("rewards.sub_expert_reference=delegated solves each delegated subtask in the offline world, "
                              "and tools.search_backend=realweb trains on the web; set rewards.sub_expert_reference=gold")
        if self.tools.reasoner and not spec.delegates:
            raise ConfigError(f"tools.reasoner is the planner's tool; trainer {self.trainer} has no planner that "
                              "delegates (use mgrpo or frozen_sub, or set tools.reasoner: false)")
        if self.eval.runs > 1 and self.eval_temperature == 0:
            raise ConfigError(f"eval.runs={self.eval.runs} with rollout.temperature=0 (eval.temperature null) repeats "
                              "one greedy run; set eval.runs=1 or eval.temperature above 0")
        if self.world.seed in self.eval.unseen.worlds:
            raise ConfigError(f"eval.unseen.worlds={self.eval.unseen.worlds} holds world.seed={self.world.seed}, the "
                              "world the run trains on; name worlds it never sees")
        if self.eval.unseen.runs > 1 and self.unseen_temperature == 0:
            raise ConfigError(f"eval.unseen.runs={self.eval.unseen.runs} at temperature 0 repeats one greedy run; set "
                              "eval.unseen.runs=1 or eval.unseen.temperature above 0")

    def resolved_run_id(self, now: str) -> str:
        return self.run_id or f"{self.trainer}-s{self.seed}-{now}"


def load_train_config(path: str | None, overrides: list[str] | None = None) -> TrainConfig:
    """Load and validate a :class:`TrainConfig` from YAML plus ``key.path=value`` overrides."""
    return load_config(TrainConfig, path, overrides)
