"""What the planner role and the sub role share (docs/paper.md, docs/training.md, docs/report.md): store signals, config and model
loading, the toolbox, the TRL arguments of a role and its per-step records.

* :data:`PLANNER_DONE`, :data:`SUB_URL`: the store stats through which the roles coordinate;
  :func:`store_url` picks the store (``store.url`` or the run directory's sqlite file).
* :func:`load_model_for` loads an agent's model from a name, a path or a warm-start directory
  (:func:`args_then_model`: after the trainer's config, so a sharded launch loads it sharded);
  :func:`make_backend` wraps it for generation (in-process HF, or a vLLM server).
* :func:`build_toolbox`: ``search`` over the world's BM25 index + ``visit`` on the world server. It
  regenerates the world from its seed for the index (measured: docs/training.md "Task set").
* :func:`mgrpo_args`: a role's :class:`mgrpo.trainer.MGRPOConfig` from its config section.
* :class:`StepStats` and :func:`make_step_recorder`: one :class:`harness.records.StepRecord` per optimizer
  step, from TRL's logs plus what the rollout measured.
"""

from __future__ import annotations

import os
import resource
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.base import Task
from benchmarks.registry import get_benchmark
from harness.checkpoint_files import warm_start_model_dir
from harness.config import ConfigError, apply_overrides, from_dict, load_yaml
from harness.records import RunPaths, StepRecord, append_step
from harness.tools.toolbox import AddressedToolbox
from harness.tools.toolbox import build_toolbox as _build
from harness.train_config import TrainConfig, report_targets
from harness.world.generator import generate_world
from harness.world.schemas import benchmark_of, task_id
from harness.world.search import SearchIndex

#: Store stat the planner role sets when it has finished (the sub role then drains and stops).
PLANNER_DONE = "planner_done"
#: Store stat the sub role sets to publish its service URL.
SUB_URL = "sub_url"
#: Query-id prefix of evaluation episodes (their sub-trajectories are never trained on).
EVAL_PREFIX = "eval/"


# ------------------------------------------------------------------------------ config, store
def load_role_config(path: str, overrides: list[str]) -> TrainConfig:
    """The run config a role reads (``<run>/config.yaml``) with ``key.path=value`` overrides."""
    data = apply_overrides(load_yaml(path), overrides)
    return from_dict(TrainConfig, data, where=path)


def store_url(cfg: TrainConfig, run_dir: Path) -> str:
    """``store.url``, else the embedded sqlite store of the run directory (docs/report.md layout)."""
    return cfg.store.url or f"sqlite:///{RunPaths(run_dir).store_db.resolve()}"


# ------------------------------------------------------------------------------ models, tools
def load_model_for(name: str, agent: str, cfg: TrainConfig) -> tuple[Any, Any]:
    """(model, tokenizer) of ``agent`` from a model name/path or a warm-start directory (a shipped
    checkpoint is verified against its provenance first)."""
    from harness.models import ModelSpec, load_model  # lazy: torch; after the role's config and tasks

    root = Path(name)
    if root.is_dir():
        name = str(warm_start_model_dir(root, agent))
    spec = ModelSpec(name=name, seed=cfg.models.init_seed, dtype=cfg.models.dtype, cache_dir=cfg.models.cache_dir)
    return load_model(spec)


def args_then_model(make_args: Callable[[], Any], ref: str, agent: str, cfg: TrainConfig) -> tuple[Any, Any, Any]:
    """``(args, model, tokenizer)``: the trainer's config first, then the model. Creating the config joins the
    process group and sets up accelerate's plugin from the launch (``accelerate launch`` with zero3.yaml or
    fsdp2.yaml), so transformers loads the model the sharded way (ZeRO-3's ``zero.Init``, FSDP's CPU-RAM-efficient
    loading: full weights on rank 0 only, handed to the other ranks when the trainer prepares the model). Loaded
    first, every rank would hold the whole model (docs/training.md, "More than one process per role")."""
    args = make_args()
    model, tok = load_model_for(ref, agent, cfg)
    return args, model, tok


def make_backend(model: Any, tokenizer: Any, vllm_url: str | None) -> Any:
    from harness.backends import HFBackend, VLLMBackend  # lazy: torch; after the role's config and tasks

    return VLLMBackend(vllm_url) if vllm_url else HFBackend(model, tokenizer)


def process_rank(env: dict[str, str] | None = None) -> int:
    """This process's rank in its role (``RANK``, set by torchrun and ``accelerate launch``; 0 for one process)."""
    return int((os.environ if env is None else env).get("RANK", "0"))


def sharded_launch(env: dict[str, str] | None = None) -> str | None:
    """``"ZeRO-3"`` or ``"FSDP"`` when accelerate launched this process to shard the model's parameters (its
    environment says so), else None (one process, DDP, ZeRO-1/2: every rank holds the whole model)."""
    env = os.environ if env is None else env
    if env.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true" and env.get("ACCELERATE_DEEPSPEED_ZERO_STAGE") == "3":
        return "ZeRO-3"
    if env.get("ACCELERATE_USE_FSDP", "").lower() == "true":
        return "FSDP"
    return None


def check_generation_backend(cfg: TrainConfig, role: str, env: dict[str, str] | None = None) -> None:
    """A role whose parameters are sharded must generate with a vLLM server: the in-process HF generator would
    generate on each rank with its shard only, and ranks that generate different token counts would leave the
    sharding's collectives mismatched (a hang). Checked at start, before a model loads."""
    how = sharded_launch(env)
    sec = cfg.planner if role == "planner" else cfg.sub
    if how and not sec.vllm_url:
        raise ConfigError(f"{role}: launched with {how}, which shards the model over the processes, but {role}.vllm_url "
                          "is not set: the in-process generator cannot generate with a shard. Set "
                          f"{role}.vllm_url to a `trl vllm-serve` server (docs/training.md), or launch with "
                          "baselines/accelerate/ddp.yaml or zero2.yaml")


class PeerUnreachable(RuntimeError):
    """A server a role needs at start (the world server, the sub-agent service) did not answer within its budget."""


#: The exit status of a role that could not reach a server it needs at start (harness/role/__main__.py).
PEER_UNREACHABLE = 4


def wait_reachable(url: str, what: str, budget_s: float, poll_s: float = 0.5) -> None:
    """Wait until ``url`` answers HTTP (any status) or ``budget_s`` seconds pass; :class:`PeerUnreachable` names
    ``what``, the address and the last error. A role checks its peers at start, so a wrong address or a server
    that is not up is one line within the budget, not an error at the first rollout."""
    deadline = time.monotonic() + budget_s
    last = "no attempt"
    while True:
        try:
            with urllib.request.urlopen(url, timeout=max(0.5, min(5.0, budget_s))):
                return
        except urllib.error.HTTPError:
            return  # it answered
        except (urllib.error.URLError, OSError) as exc:
            last = str(getattr(exc, "reason", exc))
        if time.monotonic() + poll_s > deadline:
            raise PeerUnreachable(f"cannot reach {what} at {url} within {budget_s:g} s ({last}); check that it is "
                                  "running and that this host can reach that address")
        time.sleep(poll_s)


def build_toolbox(cfg: TrainConfig, world_url: str) -> Any:
    """``search`` (BM25 over the world's pages, built here) and ``visit`` (the world server at ``world_url``).
    With ``tools.search_backend: realweb`` the search is the configured API and, with ``tools.allow_all_hosts``,
    visits reach the web as well as the world's server (docs/tools.md).

    The world is regenerated from ``world.seed`` / ``world.size`` for the search index: deterministic, and
    cheap next to loading a model (the world server does the same); the tasks are not (they are read from
    the prepared task set, :mod:`harness.role.tasks`)."""
    if cfg.tools.search_backend == "realweb":  # training against the web: the search API of tools.realweb
        toolbox = _build(cfg.tools, None, world_url)
    else:
        world = generate_world(seed=cfg.world.seed, size=cfg.world.size)
        toolbox = _build(cfg.tools, SearchIndex.build(world), world_url)
    return AddressedToolbox(toolbox, cfg.world.address, world_url) if cfg.world.address else toolbox


# ------------------------------------------------------------------------------ rollouts
def gold_answer(task: dict[str, Any]) -> str:
    return str(task["gold"]["answer"])


def local_benchmarks(cfg: TrainConfig, tasks: list[dict[str, Any]]) -> dict[str, Any]:
    """The registered ``local_<style>`` benchmark of every task style in ``tasks``, by name."""
    return {name: get_benchmark(name, world_seed=cfg.world.seed, world_size=cfg.world.size)
            for name in {f"local_{benchmark_of(t)}" for t in tasks}}


def score_task(benches: dict[str, Any], task: dict[str, Any], prediction: str | None) -> tuple[Any, Any]:
    """``(benchmark, verdict)`` of ``prediction`` for a generated task: its ``local_<style>`` benchmark's
    registered ``score``, the one answer matcher that the evaluation suite, training-time evaluation and
    the hard filter share (docs/evaluation.md). ``None`` (no answer) is a verdict too: incorrect."""
    bench = benches[f"local_{benchmark_of(task)}"]
    return bench, bench.score(Task(task_id=task_id(task), question="", gold=gold_answer(task)), prediction)


def mean_of(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def append_completion(out: dict[str, list[Any]], traj: Any, reward: float) -> None:
    """Add one trajectory as a ``rollout_func`` completion (the columns TRL and the reward read)."""
    out["prompt_ids"].append(list(traj.prompt_ids))
    out["completion_ids"].append(list(traj.completion_ids))
    out["logprobs"].append(list(traj.logprobs))
    out["env_mask"].append(list(traj.env_mask))
    out["reward"].append(reward)
    out["query_id"].append(traj.query_id)
    out["rollout"].append(traj.rollout)


# ------------------------------------------------------------------------------ TRL trainer
@dataclass
class StepStats:
    """What a rollout measured for the step record of the optimizer step that follows it."""

    rollout_s: float = 0.0
    wait_s: float = 0.0
    rollout_end: float = 0.0
    n_trajectories: int = 0
    n_model_tokens: int = 0
    components: dict[str, float] = field(default_factory=dict)
    fields: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=dict)
    """The role's parts of its rollout time, for ``StepRecord.time_split`` (e.g. ``generate_s``)."""


#: Phases of ``StepRecord.time_split`` that are the role's own model compute (docs/performance.md).
COMPUTE_PHASES = ("generate_s", "score_s", "forward_backward_s", "optimizer_s")


def time_split(logs: dict[str, Any], phases: dict[str, float], wall_s: float) -> tuple[dict[str, float], float | None]:
    """``(time_split, model_share)`` of a step record from TRL's logged ``time/<phase>`` metrics (the
    trainer's phases), the role's own ``phases`` and the step's wall time."""
    split = {"wall_s": wall_s}
    split.update({k[len("time/"):]: float(v) for k, v in logs.items() if k.startswith("time/") and v is not None})
    split.update(phases)
    split = {k: round(v, 4) for k, v in split.items()}
    compute = sum(split.get(k, 0.0) for k in COMPUTE_PHASES)
    return split, (round(min(1.0, compute / wall_s), 4) if wall_s > 0 else None)


def trainer_callback_base() -> type:
    """``transformers.TrainerCallback``, imported when a role builds its trainer (not when this module loads)."""
    from transformers import TrainerCallback

    return TrainerCallback


def peak_memory_mib() -> dict[str, float | None]:
    """``peak_rss_mib`` and ``peak_gpu_mib`` of this process so far, for its step records (docs/performance.md)."""
    import torch

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    rss_mib = rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024
    gpu = torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    return {"peak_rss_mib": round(rss_mib, 1), "peak_gpu_mib": None if gpu is None else round(gpu, 1)}


def make_step_recorder(role: str, cfg: TrainConfig, run_dir: Path, stats: StepStats, on_step: Any = None) -> Any:
    """A TrainerCallback writing one StepRecord per optimizer step (docs/report.md) from TRL's logs + ``stats``."""
    base = trainer_callback_base()

    class StepRecorder(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            self.train_s = 0.0
            self.last_step = -1
            self.last_end = time.perf_counter()

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.last_end = time.perf_counter()  # step 1's wall time starts here, not at model loading

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.train_s = time.perf_counter() - stats.rollout_end if stats.rollout_end else 0.0
            if on_step is not None:
                on_step(int(state.global_step))

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> None:
            logs = logs or {}
            step = int(state.global_step)
            if not state.is_world_process_zero:
                return  # one record per step, not one per data-parallel process
            if step == self.last_step or "reward" not in logs:
                return  # the end-of-training summary, or a second log of the same step
            self.last_step = step
            now = time.perf_counter()
            split, share = time_split(logs, stats.phases, now - self.last_end)
            self.last_end = now
            rec = StepRecord(
                run_id=run_dir.name, trainer=str(cfg.trainer), role=role, seed=cfg.seed, step=step,
                time=time.time(), reward_mean=logs.get("reward"), reward_std=logs.get("reward_std"),
                reward_components=dict(stats.components), advantage_abs_mean=logs.get("advantage_abs_mean"),
                frac_zero_std_groups=logs.get("frac_zero_std_groups"), policy_loss=logs.get("policy_loss"),
                clip_ratio=logs.get("clip_ratio/region_mean"), entropy=logs.get("entropy"),
                grad_norm=logs.get("grad_norm"), kl=logs.get("kl"), n_trajectories=stats.n_trajectories,
                n_model_tokens=stats.n_model_tokens, rollout_s=round(stats.rollout_s, 4),
                train_s=round(self.train_s, 4), wait_s=round(stats.wait_s, 4), policy_version=step,
                time_split=split, model_share=share, **peak_memory_mib(), extra=dict(stats.extra), **stats.fields,
            )
            append_step(run_dir, rec)
            print(f"[{role}] step {step}: reward {rec.reward_mean:.3f} rollout {rec.rollout_s:.1f}s "
                  f"wait {rec.wait_s:.1f}s train {rec.train_s:.1f}s"
                  + (f" model compute {share:.0%}" if share is not None else ""), flush=True)

    return StepRecorder()


def mgrpo_args(cfg: TrainConfig, role: str, out_dir: Path, group_size: int, n_groups: int, max_steps: int) -> Any:
    """The ``MGRPOConfig`` of a role from its config section (batch sizes derived, docs/paper.md).

    ``out_dir`` is ``<run>/<role>/checkpoints``. TRL also reports to the trackers of ``report_to``
    under the run name ``<run_id>-<role>``; TensorBoard writes to ``<run>/<role>/tensorboard``."""
    import torch

    from mgrpo.trainer import MGRPOConfig  # lazy: torch/TRL; after the role's config and tasks

    sec = cfg.planner if role == "planner" else cfg.sub
    n_proc = int(os.environ.get("WORLD_SIZE", "1"))
    if n_proc != sec.num_processes:
        raise ConfigError(f"{role}.num_processes={sec.num_processes} but this role runs with {n_proc} processes "
                          f"(WORLD_SIZE); set {role}.num_processes={n_proc}")
    per_device = n_groups * group_size // sec.micro_batches
    report_to = report_targets(cfg.report_to)
    role_dir = out_dir.parent
    if "tensorboard" in report_to:
        # transformers 5 has no TrainingArguments.logging_dir: its TensorBoard callback reads this variable
        # (else it writes under output_dir, among the checkpoints). One folder per role, so `tensorboard
        # --logdir runs/` shows every run and role apart.
        os.environ["TENSORBOARD_LOGGING_DIR"] = str(role_dir / "tensorboard")
    kwargs: dict[str, Any] = dict(
        output_dir=str(out_dir), num_generations=group_size, per_device_train_batch_size=per_device,
        gradient_accumulation_steps=sec.gradient_accumulation_steps, max_steps=max_steps,
        learning_rate=sec.learning_rate, lr_scheduler_type=sec.lr_scheduler_type, warmup_steps=sec.warmup_steps,
        weight_decay=sec.weight_decay, max_grad_norm=sec.max_grad_norm, loss_type=sec.loss_type,
        ratio_level=sec.ratio_level, old_logprobs=sec.old_logprobs, epsilon=sec.epsilon, epsilon_high=sec.epsilon_high, beta=sec.beta,
        temperature=max(cfg.rollout.temperature, 1e-6), seed=cfg.seed, disable_tqdm=True,
        report_to=report_to or "none", run_name=f"{role_dir.parent.name}-{role}",
        save_strategy="steps", save_steps=sec.save_steps or max_steps, save_only_model=False,
        logging_steps=1, bf16=sec.bf16, gradient_checkpointing=sec.gradient_checkpointing,
        unpadded_forward=sec.unpadded_forward,
        dataloader_num_workers=0, shuffle_dataset=True,
    )
    if not torch.cuda.is_available():
        kwargs["use_cpu"] = True
    if sec.vllm_url:
        kwargs.update(use_vllm=True, vllm_mode="server", vllm_server_base_url=sec.vllm_url,
                      vllm_importance_sampling_correction=False)
    kwargs.update(sec.trl)
    return MGRPOConfig(**kwargs)
