"""M-GRPO on TRL: ``MGRPOConfig`` and ``MGRPOTrainer`` (docs/trainer.md, docs/training.md).

Each agent role (planner, sub-agent) trains with its own :class:`MGRPOTrainer`, a subclass of
TRL's ``GRPOTrainer`` (``trl==1.16.x``) driven by the caller's ``rollout_func``, so TRL keeps doing
what it does well (accelerate/DeepSpeed/FSDP, vLLM weight sync, gradient accumulation, logging,
checkpoints) and only the M-GRPO parts are replaced (arXiv 2511.13288, Sec. 3):

- **Groups.** One TRL group (``num_generations`` consecutive completions of one prompt) is one
  M-GRPO group: ``num_generations = K`` for the planner role, ``num_generations = d * K`` for the
  sub-agent role (one query's aligned sub-trajectories). ``MGRPOConfig.group_size`` names it.
- **Advantages.** ``_generate_and_score_completions`` (the maintainers' recommended hook) calls
  TRL's, then replaces ``advantages`` by :func:`mgrpo.advantage.group_advantages` (population std,
  all-equal group -> 0) over each group of the *gathered* rewards, and slices the local part back
  exactly as TRL does (``process_index * len(inputs)``). The rewards are the weighted sum of the
  ``reward_funcs`` outputs that TRL itself computed and gathered (``_calculate_rewards`` is wrapped
  to keep them). With ``reward_funcs=None`` the trainer uses :func:`rollout_reward`, which passes
  through a ``reward`` column returned by the rollout (the harness computes ``R_M``/``R_S`` with
  :mod:`mgrpo.rewards` inside its rollout / from the store).
- **Loss.** ``loss_type="mgrpo"`` computes :func:`mgrpo.loss.clipped_surrogate_loss` on TRL's
  per-token log-probabilities (its own forward pass), the old log-probabilities
  (``old_per_token_logps`` when TRL computed them, else ``per_token_logps.detach()``, exactly as
  TRL does), the advantages and ``completion_mask * tool_mask`` (the rollout's ``env_mask``: 1 =
  model token, 0 = observation). Per-trajectory averaging ``1/B`` over the whole generation batch:
  each micro-batch averages over its trajectories and is divided by the gradient-accumulation
  steps, like TRL's ``"grpo"`` loss. TRL's own loss types run TRL's code unchanged (with the docs/paper.md
  advantages).
- **Records.** ``on_batch(BatchRecord)`` receives each scored batch (rewards, reward components,
  advantages, the rollout's extra columns such as ``query_id``/``rollout``/``call``, and the
  tensors trained on), so a caller can check and store what the trainer used. Metrics
  ``advantage_abs_mean``, ``frac_zero_std_groups`` (docs/report.md) are logged every step; with
  ``loss_type="mgrpo"`` also ``policy_loss``, ``clip_ratio/{low,high,region}_mean`` (TRL's names),
  ``ratio_mean``, ``entropy`` and ``kl`` (when ``beta != 0``).
- **Where a step's time goes.** Each optimizer step also logs ``time/<phase>`` (seconds, summed over the
  step's micro-batches; :data:`PHASES`): ``rollout_s`` (the caller's ``rollout_func``), ``score_s`` (TRL's
  scoring around it: tokenising, padding, old/reference log-probabilities, rewards and advantages),
  ``forward_backward_s`` (loss and backward pass) and ``optimizer_s`` (gradient clipping and the optimizer
  step). docs/performance.md turns them into each role's time split.

Deliberate deviations and decisions:
- ``MGRPOConfig`` defaults differ from ``GRPOConfig``: ``loss_type="mgrpo"``,
  ``epsilon_high=0.28``, ``logging_steps=1``, and on a machine without CUDA ``use_cpu=True``,
  ``bf16=False``, ``gradient_checkpointing=False``.
- ``unpadded_forward`` (by default on a CPU for rows of at least :data:`UNPADDED_MIN_TOKENS` positions): the log-probabilities of a micro-batch are computed one trajectory
  at a time, each cut to its own tokens (``_get_per_token_logps_and_entropies``), for every loss type. Same
  values as TRL's padded pass (up to float rounding); on a CPU the padded pass is several times slower,
  because a padding mask sends scaled-dot-product attention to its unfused path (docs/performance.md).
  Multimodal inputs, MoE auxiliary losses and a batch with a prompt-less row keep TRL's padded pass. ``beta=0`` (TRL's default; no KL, docs/paper.md).
- Unknown ``loss_type`` values are rejected at config time (TRL only fails in the first loss).
- ``scale_rewards`` must stay ``"group"`` and ``multi_objective_aggregation``
  ``"sum_then_normalize"``: M-GRPO fixes the advantage rule; pass ``advantage_fn`` for another.
- A completion for which every reward function returned ``None`` is an error here (TRL gives it
  advantage 0): an M-GRPO reward is always defined (a format error scores 0), so a missing one is an
  upstream bug. Rewards of a row where only some functions returned ``None`` are summed over the
  others, as in TRL (``nansum``).
- ``loss_type="mgrpo"`` does not support TRL's loss add-ons that have no slot in the objective of docs/paper.md
  (``top_entropy_quantile < 1``, ``off_policy_mask_threshold``, ``delta``, the entropy bonus, and
  vLLM's importance-sampling correction); the config rejects them with a message. With
  ``beta != 0`` it adds TRL's k3 KL estimate as ``beta`` times the mean over trajectories of the
  per-trajectory masked mean (GRPO-style), which the paper leaves open.
- The old log-probabilities are TRL's by default (``old_logprobs="recompute"``): with
  ``num_iterations == 1`` and generation aligned with optimizer steps the ratio is exactly 1 (the
  on-policy M-GRPO update), as in TRL. ``old_logprobs="behaviour"`` uses the rollout's sampling
  ``logprobs`` instead (TRL's ``sampling_per_token_logps``): the ratio is then against the policy
  version that generated each token, which corrects trajectories that waited in a queue while the
  weights moved on (the decoupled sub-agent; paper Fig. 8). Set ``temperature`` to the rollout's
  sampling temperature: TRL scales the logits by it when scoring, and the behaviour log-probabilities
  are of the tempered distribution.
- A rollout may return a ``loss_weight`` column (1 = train, 0 = leave the trajectory out of the loss,
  e.g. staler than the caller allows); the trajectory stays in its group for the advantages.
- The training sampler orders epoch ``e`` by ``seed + e`` (:class:`EpochSeededRepeatSampler`), so a run
  resumed after its first epoch redoes its steps on the same queries; TRL's order is kept for epoch 0.

``mgrpo/`` imports nothing from ``harness/``; the caller passes the rollout function and rewards.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import RepeatSampler

from mgrpo.advantage import group_advantages, has_zero_std
from mgrpo.loss import RATIO_LEVELS, clipped_surrogate_loss
from mgrpo.options import LOSS_TYPES, OLD_LOGPROBS, TRL_LOSS_TYPES, option_field

__all__ = [
    "TRL_LOSS_TYPES",
    "LOSS_TYPES",
    "BatchRecord",
    "MGRPOConfig",
    "MGRPOTrainer",
    "PHASES",
    "UNPADDED_MIN_TOKENS",
    "rollout_reward",
]

#: ``unpadded_forward=None`` scores a micro-batch one row at a time on a CPU when its rows span at least this many
#: positions. Measured on the tiny model (docs/performance.md), 16 rows, forward and backward: one padded pass is
#: faster up to about 150 positions (per-call overhead), one pass per row is 1.2x faster at 256, 1.4x at 512 and
#: 3.2x on the sub role's trajectories (about 950 tokens, up to 1,600).
UNPADDED_MIN_TOKENS = 256

#: The phases of one optimizer step that :class:`MGRPOTrainer` times and logs as ``time/<phase>``.
PHASES = ("rollout_s", "score_s", "forward_backward_s", "optimizer_s")


def _cuda() -> bool:
    return torch.cuda.is_available()


@dataclass
class MGRPOConfig(GRPOConfig):
    r"""Configuration of :class:`MGRPOTrainer`: ``GRPOConfig`` plus the M-GRPO options (docs/paper.md).

    ``num_generations`` is the M-GRPO **group size**: ``K`` (rollouts per query) for the planner
    role, ``d * K`` (aligned sub-trajectories per query) for the sub-agent role; the rollout
    function returns each group's completions consecutively. The generation batch
    (``per_device_train_batch_size * num_processes * steps_per_generation``) must hold whole groups.

    Parameters (beyond ``GRPOConfig``):
        ratio_level (`str`, defaults to `"sequence"`):
            Importance ratio of ``loss_type="mgrpo"``: `"sequence"` (GSPO-style, length-normalised,
            the paper's sequence-level ratio) or `"token"`.
        old_logprobs (`str`, defaults to `"recompute"`):
            Old policy of ``loss_type="mgrpo"``: `"recompute"` (TRL's) or `"behaviour"` (the rollout's
            sampling log-probabilities, so stale trajectories are importance-corrected).
        unpadded_forward (`bool`, defaults to `None`):
            Score each trajectory in a forward pass of its own, without padding. `None`: on a CPU, for
            micro-batches of at least :data:`UNPADDED_MIN_TOKENS` positions.

    Defaults changed from ``GRPOConfig``: `loss_type="mgrpo"`, `epsilon_high=0.28`,
    `logging_steps=1`; without CUDA `use_cpu=True`, `bf16=False`, `gradient_checkpointing=False`.

    Convention: TRL's (a type hint and ``field(metadata={"help": ...})`` per field). ``ratio_level``,
    ``loss_type``, ``epsilon_high``, ``bf16`` and ``gradient_checkpointing`` are also fields of the
    harness's per-role config; both classes take them from :mod:`mgrpo.options` (one declaration).
    """

    # Declared once in mgrpo.options (default, help, choices), shared with the harness's role config.
    ratio_level: str = option_field("ratio_level")
    loss_type: str = option_field("loss_type")
    old_logprobs: str = option_field("old_logprobs")
    epsilon_high: float | None = option_field("epsilon_high")
    logging_steps: float = field(
        default=1,
        metadata={"help": "Log every X optimizer steps (M-GRPO default 1: one metrics record per step, docs/report.md)."},
    )
    # use_cpu, bf16 and gradient_checkpointing default to None = "decide from the machine" (resolved in
    # __post_init__), not to a default_factory: HfArgumentParser ignores default factories of bool fields.
    use_cpu: bool | None = field(
        default=None,
        metadata={"help": "Train on the CPU. None (default): True when CUDA is not available, else False."},
    )
    bf16: bool | None = option_field("bf16")
    gradient_checkpointing: bool | None = option_field("gradient_checkpointing")
    unpadded_forward: bool | None = option_field("unpadded_forward")

    @property
    def group_size(self) -> int:
        """The M-GRPO group size: ``num_generations`` (K for the planner, d*K for the sub-agent)."""
        return int(self.num_generations)

    def __post_init__(self) -> None:
        cuda = _cuda()
        if self.use_cpu is None:
            self.use_cpu = not cuda
        if self.bf16 is None and (self.use_cpu or not cuda):
            self.bf16 = False
        if self.gradient_checkpointing is None:
            self.gradient_checkpointing = cuda and not self.use_cpu
        if self.ratio_level not in RATIO_LEVELS:
            raise ValueError(
                f"MGRPOConfig.ratio_level={self.ratio_level!r} is not one of {RATIO_LEVELS}: use 'sequence' "
                "(GSPO-style, the paper's sequence-level ratio) or 'token'"
            )
        if self.old_logprobs not in OLD_LOGPROBS:
            raise ValueError(
                f"MGRPOConfig.old_logprobs={self.old_logprobs!r} is not one of {OLD_LOGPROBS}: 'recompute' (TRL's) "
                "or 'behaviour' (the rollout's sampling log-probabilities)"
            )
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(
                f"MGRPOConfig.loss_type={self.loss_type!r} is not one of {LOSS_TYPES}: 'mgrpo' is the M-GRPO "
                "objective (docs/paper.md); the others are TRL's own loss types"
            )
        if self.scale_rewards not in (True, "group"):  # GRPOConfig maps True to "group" later
            raise ValueError(
                f"MGRPOConfig.scale_rewards={self.scale_rewards!r}: M-GRPO always normalises within each group with "
                "the population std (docs/paper.md); leave scale_rewards='group', or pass advantage_fn= to MGRPOTrainer "
                "for another rule"
            )
        if self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                f"MGRPOConfig.multi_objective_aggregation={self.multi_objective_aggregation!r}: M-GRPO advantages "
                "are computed from the weighted sum of the reward functions; leave it 'sum_then_normalize'"
            )
        if self.loss_type == "mgrpo":
            unsupported = []
            if self.top_entropy_quantile < 1.0:
                unsupported.append(f"top_entropy_quantile={self.top_entropy_quantile} (use 1.0)")
            if self.off_policy_mask_threshold is not None:
                unsupported.append(f"off_policy_mask_threshold={self.off_policy_mask_threshold} (use None)")
            if self.delta is not None:
                unsupported.append(f"delta={self.delta} (use None)")
            if self.entropy_coef != 0.0 or self.use_adaptive_entropy:
                unsupported.append("entropy_coef/use_adaptive_entropy (use 0.0/False)")
            if self.use_vllm and self.vllm_importance_sampling_correction:
                unsupported.append("vllm_importance_sampling_correction=True with use_vllm (set it to False)")
            if unsupported:
                raise ValueError(
                    "loss_type='mgrpo' (the clipped surrogate of docs/paper.md) does not support: "
                    + "; ".join(unsupported)
                    + ". Use one of TRL's loss types for these options."
                )
            eps_high = self.epsilon if self.epsilon_high is None else self.epsilon_high
            if not (0.0 <= self.epsilon < 1.0) or not (eps_high >= 0.0 and math.isfinite(eps_high)):
                raise ValueError(
                    f"MGRPOConfig: epsilon={self.epsilon} must be in [0, 1) and epsilon_high={self.epsilon_high} "
                    "a finite number >= 0 (clip range [1 - epsilon, 1 + epsilon_high])"
                )
        try:
            super().__post_init__()
        except ValueError as err:
            if "num_generations" in str(err):
                raise ValueError(
                    f"{err} In M-GRPO num_generations is the group size (K rollouts per query for the planner, "
                    "d*K aligned sub-trajectories for the sub-agent); choose per_device_train_batch_size * "
                    "num_processes * steps_per_generation as a multiple of it."
                ) from err
            raise


@dataclass
class BatchRecord:
    """One scored generation batch, as given to ``on_batch`` (before TRL shuffles and splits it).

    Attributes:
        step: ``trainer.state.global_step`` when the batch was scored.
        mode: ``"train"`` or ``"eval"``.
        group_size: completions per group (``num_generations`` or ``num_generations_eval``).
        process_index: this process's index; ``local_slice`` is its part of the gathered lists.
        local_slice: ``(start, stop)`` of this process's completions in ``rewards``/``advantages``.
        rewards: the weighted reward of every completion of all processes (gathered, sampler order).
        reward_components: each reward function's raw output (gathered), by function name.
        advantages: the advantages computed from ``rewards`` (gathered); the trainer trains on
            ``advantages[local_slice]``.
        fields: this process's per-completion extra columns returned by the rollout (e.g.
            ``query_id``, ``rollout``, ``call``, ``reward``), ``env_mask`` excluded.
        batch: the local tensors handed to the loss (``prompt_ids``, ``completion_ids``,
            ``completion_mask``, ``tool_mask``, ``advantages``, ...).
    """

    step: int
    mode: str
    group_size: int
    process_index: int
    local_slice: tuple[int, int]
    rewards: list[float]
    reward_components: dict[str, list[float]]
    advantages: list[float]
    fields: dict[str, list[Any]]
    batch: dict[str, Any]

    @property
    def local_rewards(self) -> list[float]:
        """This process's rewards, aligned with ``fields`` and ``batch``."""
        return self.rewards[self.local_slice[0] : self.local_slice[1]]

    @property
    def local_advantages(self) -> list[float]:
        """This process's advantages, aligned with ``fields`` and ``batch``."""
        return self.advantages[self.local_slice[0] : self.local_slice[1]]


def rollout_reward(completions: list, reward: list[float] | None = None, **kwargs: Any) -> list[float | None]:
    """Reward function that passes through the ``reward`` column the rollout returned.

    The default ``reward_funcs`` of :class:`MGRPOTrainer`: the caller's rollout computes ``R_M`` or
    ``R_S`` (``mgrpo.rewards``) and returns them as an extra field ``reward`` (one per completion).
    """
    if reward is None:
        raise ValueError(
            "rollout_reward needs a 'reward' column: the rollout_func must return {'reward': [one float per "
            "completion], ...}, or pass reward_funcs= to MGRPOTrainer"
        )
    if len(reward) != len(completions):
        raise ValueError(f"the rollout returned {len(reward)} rewards for {len(completions)} completions")
    # None stays None: TRL turns it into NaN, and MGRPOTrainer then names the unscored completion.
    return [None if r is None else float(r) for r in reward]


AdvantageFn = Callable[[Sequence[float]], Sequence[float]]


class EpochSeededRepeatSampler(RepeatSampler):
    """TRL's ``RepeatSampler`` whose order in epoch ``e`` depends only on ``(seed, e)``.

    TRL's sampler draws each epoch's permutation from one generator seeded once, so epoch ``e``'s order
    depends on how many epochs that generator has already served. A run resumed from a checkpoint after the
    first epoch starts a fresh sampler and skips batches of the wrong permutation: the redone steps train on
    other queries than the run that was killed (found by the fault suite, docs/reliability.md). Here
    ``set_epoch(e)`` (which transformers' Trainer calls before every epoch, resumed or not) reseeds the
    generator with ``seed + e``. Epoch 0 is TRL's order; later epochs differ from TRL's (deliberate)."""

    def set_epoch(self, epoch: int) -> None:
        if self.shuffle:
            self.generator.manual_seed((self.seed or 0) + int(epoch))


class MGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` with M-GRPO advantages and the ``"mgrpo"`` loss (see the module docstring).

    Args:
        model: the policy (a ``PreTrainedModel`` or a model id), as for ``GRPOTrainer``.
        reward_funcs: TRL reward functions (weights from ``args.reward_weights``); default
            ``[rollout_reward]``, which reads the rollout's ``reward`` column.
        args: an :class:`MGRPOConfig` (a plain ``GRPOConfig`` is rejected: it lacks the M-GRPO fields).
        rollout_func: the caller's rollout, ``rollout_func(prompts, trainer) -> dict`` with
            ``prompt_ids``, ``completion_ids``, ``logprobs`` (may be None), ``env_mask`` and extra
            per-completion columns. It receives each prompt already repeated ``num_generations``
            times side by side and returns one completion per prompt received, groups consecutive.
            A rollout that puts the model in eval mode must put it back in train mode.
        advantage_fn: rewards of one group -> advantages of that group; default
            :func:`mgrpo.advantage.group_advantages` (docs/paper.md).
        on_batch: called with a :class:`BatchRecord` after each batch is scored (on every process).
        **kwargs: passed to ``GRPOTrainer`` (``train_dataset``, ``processing_class``, ``callbacks``, ...).
    """

    _tag_names = ["trl", "grpo", "mgrpo"]
    _name = "M-GRPO"

    def __init__(
        self,
        model: Any,
        reward_funcs: Any = None,
        args: MGRPOConfig | None = None,
        *,
        rollout_func: Callable[[list, Any], dict[str, Any]] | None = None,
        advantage_fn: AdvantageFn = group_advantages,
        on_batch: Callable[[BatchRecord], None] | None = None,
        **kwargs: Any,
    ) -> None:
        if args is None:
            args = MGRPOConfig(output_dir="mgrpo-output")
        if not isinstance(args, MGRPOConfig):
            raise TypeError(
                f"MGRPOTrainer needs args=MGRPOConfig(...), got {type(args).__name__}; MGRPOConfig adds "
                "ratio_level and the 'mgrpo' loss type to GRPOConfig"
            )
        if reward_funcs is None:
            if rollout_func is None:
                raise ValueError(
                    "MGRPOTrainer needs rewards: pass reward_funcs=, or a rollout_func that returns a 'reward' column"
                )
            reward_funcs = [rollout_reward]
        if not callable(advantage_fn):
            raise TypeError(f"advantage_fn must be callable (rewards of one group -> advantages), got {advantage_fn!r}")
        if on_batch is not None and not callable(on_batch):
            raise TypeError(f"on_batch must be callable (BatchRecord -> None), got {on_batch!r}")
        self.ratio_level = args.ratio_level
        self.advantage_fn = advantage_fn
        self.on_batch = on_batch
        self._gathered_rewards_per_func: torch.Tensor | None = None
        self.phase_s = dict.fromkeys(PHASES, 0.0)
        """Seconds per phase of the optimizer step in progress (:data:`PHASES`); logged and reset at its end."""
        self._in_generate_s = 0.0
        self._last_micro_step_end: float | None = None
        super().__init__(model=model, reward_funcs=reward_funcs, args=args,
                         rollout_func=None if rollout_func is None else self._timed(rollout_func), **kwargs)
        self.add_callback(_StepTimer(self))

    # ------------------------------------------------------------------ where a step's time goes
    def _timed(self, rollout_func: Callable[[list, Any], dict[str, Any]]) -> Callable[[list, Any], dict[str, Any]]:
        def rollout(prompts: list, trainer: Any) -> dict[str, Any]:
            t0 = time.perf_counter()
            try:
                return rollout_func(prompts, trainer)
            finally:
                self.phase_s["rollout_s"] += time.perf_counter() - t0
        return rollout

    def training_step(self, model, inputs, num_items_in_batch):  # noqa: D401 - Trainer hook
        t0 = time.perf_counter()
        generate_before = self._in_generate_s
        try:
            return super().training_step(model, inputs, num_items_in_batch)
        finally:
            now = time.perf_counter()
            # what is not generation + scoring (timed inside) is the loss and the backward pass
            self.phase_s["forward_backward_s"] += (now - t0) - (self._in_generate_s - generate_before)
            self._last_micro_step_end = now

    def _end_of_step_timing(self) -> None:
        """At the optimizer step's end: the optimizer phase, then one ``time/<phase>`` metric per phase."""
        if self._last_micro_step_end is not None:
            self.phase_s["optimizer_s"] += time.perf_counter() - self._last_micro_step_end
        metrics = self._metrics["train"]
        for name, seconds in self.phase_s.items():
            metrics[f"time/{name}"] = [seconds]
        self.phase_s = dict.fromkeys(PHASES, 0.0)
        self._last_micro_step_end = None

    # ------------------------------------------------------------------ advantages (docs/paper.md)
    def _get_train_sampler(self, dataset: Any = None) -> Any:  # noqa: D401 - TRL hook
        """TRL's sampler with an order per epoch that a resume reproduces (:class:`EpochSeededRepeatSampler`)."""
        sampler = super()._get_train_sampler(dataset)
        if type(sampler) is RepeatSampler:
            sampler.__class__ = EpochSeededRepeatSampler
        return sampler

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):  # noqa: D401 - TRL hook
        # TRL returns the rewards gathered over all processes; keep them so that the advantages are
        # computed from exactly the rewards TRL logged (same functions, same weights).
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._gathered_rewards_per_func = rewards_per_func
        return rewards_per_func

    def _group_advantages(self, rewards: list[float], group_size: int) -> tuple[list[float], int]:
        """Advantages of consecutive groups and the number of zero-std groups."""
        if len(rewards) % group_size:
            raise ValueError(
                f"{len(rewards)} rewards are not whole groups of {group_size} (num_generations); the rollout must "
                "return one completion per prompt it received"
            )
        advantages: list[float] = []
        zero_std = 0
        for start in range(0, len(rewards), group_size):
            group = rewards[start : start + group_size]
            adv = list(self.advantage_fn(group))
            if len(adv) != group_size:
                raise ValueError(f"advantage_fn returned {len(adv)} advantages for a group of {group_size}")
            advantages.extend(float(a) for a in adv)
            zero_std += has_zero_std(group)
        return advantages, zero_std

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        t0, rollout_before = time.perf_counter(), self.phase_s["rollout_s"]
        try:
            return self._generate_and_score(inputs)
        finally:
            total = time.perf_counter() - t0
            self._in_generate_s += total
            self.phase_s["score_s"] += total - (self.phase_s["rollout_s"] - rollout_before)

    def _generate_and_score(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        mode = "train" if self.model.training else "eval"  # decided before the rollout, as TRL does
        self._gathered_rewards_per_func = None
        output = super()._generate_and_score_completions(inputs)
        rewards_per_func = self._gathered_rewards_per_func
        self._gathered_rewards_per_func = None
        if rewards_per_func is None:  # pragma: no cover - TRL always scores through _calculate_rewards
            raise RuntimeError("TRL did not compute rewards through _calculate_rewards; the trainer cannot run")

        device = output["advantages"].device
        unscorable = torch.isnan(rewards_per_func).all(dim=1)
        if bool(unscorable.any()):
            row = int(unscorable.nonzero()[0, 0])
            raise ValueError(
                f"completion {row} of the gathered batch has no reward (every reward function returned None); "
                "M-GRPO rewards are always defined (a format error scores 0): fix the reward source"
            )
        weights = self.reward_weights.to(rewards_per_func.device).unsqueeze(0)
        rewards_t = (rewards_per_func * weights).nansum(dim=1)  # TRL's weighted sum, all processes
        rewards = rewards_t.tolist()
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        advantages, zero_std = self._group_advantages(rewards, group_size)

        # Slice the local part exactly as TRL does (contiguous blocks of len(inputs) per process).
        n_local = len(inputs)
        start = self.accelerator.process_index * n_local
        local = torch.tensor(advantages[start : start + n_local], dtype=torch.float32, device=device)
        if local.shape != output["advantages"].shape:
            raise RuntimeError(
                f"M-GRPO advantages for this process have shape {tuple(local.shape)} but TRL's have "
                f"{tuple(output['advantages'].shape)}; the gathered batch is not laid out as expected"
            )
        output["advantages"] = local
        # A rollout may weight trajectories out of the loss (``loss_weight`` 0: e.g. a sub-trajectory staler than
        # max_staleness); it stays in its group, whose advantages it shaped.
        if inputs and "loss_weight" in inputs[0]:
            output["loss_weight"] = torch.tensor([float(x["loss_weight"]) for x in inputs], device=device)

        # TRL logged its own advantages for the completions table: replace them with ours.
        logged = self._logs["advantages"]
        for _ in range(min(len(advantages), len(logged))):
            logged.pop()
        logged.extend(advantages)

        n_groups = len(rewards) // group_size
        metrics = self._metrics[mode]
        metrics["advantage_abs_mean"].append(sum(abs(a) for a in advantages) / max(1, len(advantages)))
        metrics["frac_zero_std_groups"].append(zero_std / max(1, n_groups))

        if self.on_batch is not None:
            names = list(self.reward_func_names)
            fields: dict[str, list[Any]] = {}
            for key in inputs[0] if inputs else ():
                if key in ("prompt", "env_mask"):
                    continue
                fields[key] = [x.get(key) for x in inputs]
            self.on_batch(
                BatchRecord(
                    step=int(self.state.global_step),
                    mode=mode,
                    group_size=int(group_size),
                    process_index=int(self.accelerator.process_index),
                    local_slice=(start, start + n_local),
                    rewards=rewards,
                    reward_components={name: rewards_per_func[:, i].tolist() for i, name in enumerate(names)},
                    advantages=advantages,
                    fields=fields,
                    batch=dict(output),
                )
            )
        return output

    # ------------------------------------------------------------------ log-probabilities, one row at a time
    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                                           compute_entropy=False, compute_aux_loss=False, **extra):  # noqa: D401 - TRL hook
        """TRL's per-token log-probabilities (and entropies) of the last ``logits_to_keep`` positions; with
        ``unpadded_forward`` each row runs alone, cut to the span between its first and last attended token.

        Why: a row alone whose span is fully attended needs no attention mask, so scaled-dot-product attention
        takes its fused causal kernel, and no time goes to padding positions (docs/performance.md). The values
        at the positions the mask keeps are TRL's (RoPE attention depends only on relative positions, so the
        left padding TRL adds shifts nothing); positions past the row's last attended token are 0 (the loss masks them)."""
        unpadded = self.args.unpadded_forward
        if unpadded is None:
            unpadded = input_ids.device.type == "cpu" and input_ids.size(1) >= UNPADDED_MIN_TOKENS
        first_completion = input_ids.size(1) - logits_to_keep
        per_row = (unpadded and input_ids.size(0) > 1 and not compute_aux_loss
                   and all(v is None for v in extra.values()))
        if per_row:
            attended = attention_mask.bool()
            # A row whose first completion token has no attended token before it (no prompt) is scored from a
            # padding position in TRL's pass; such a batch keeps that pass, so the values stay TRL's.
            per_row = bool(attended[:, :first_completion].any(dim=1)[attended.any(dim=1)].all())
        if not per_row:
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
                compute_entropy=compute_entropy, compute_aux_loss=compute_aux_loss, **extra)
        logps: list[torch.Tensor | None] = []
        entropies: list[torch.Tensor | None] = []
        for i in range(input_ids.size(0)):
            cols = attended[i].nonzero().flatten()
            if cols.numel() == 0 or int(cols[-1]) < first_completion:
                # no completion token attended (e.g. a truncated completion TRL masked out): nothing to score
                logps.append(None)
                entropies.append(None)
                continue
            start, end = int(cols[0]), int(cols[-1]) + 1
            keep = end - first_completion  # completion positions up to the row's last attended token
            row_logps, row_ent, _ = super()._get_per_token_logps_and_entropies(
                model, input_ids[i : i + 1, start:end], attention_mask[i : i + 1, start:end], keep,
                compute_entropy=compute_entropy)
            tail = logits_to_keep - keep  # the completion's right padding
            logps.append(torch.nn.functional.pad(row_logps[0], (0, tail)))
            entropies.append(torch.nn.functional.pad(row_ent[0], (0, tail)) if compute_entropy else None)
        out = _stack_rows(logps, logits_to_keep, input_ids.device)
        ent = _stack_rows(entropies, logits_to_keep, input_ids.device) if compute_entropy else None
        return out, ent, None

    # ------------------------------------------------------------------ loss (docs/paper.md)
    def _compute_loss(self, model, inputs):
        if self.loss_type != "mgrpo":
            return super()._compute_loss(model, inputs)

        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        logits_to_keep = completion_ids.size(1)
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]

        per_token_logps, entropies, aux_loss = self._get_per_token_logps_and_entropies(
            model,
            input_ids,
            attention_mask,
            logits_to_keep,
            compute_entropy=True,
            compute_aux_loss=self.aux_loss_enabled,
            pixel_values=inputs.get("pixel_values"),
            image_grid_thw=inputs.get("image_grid_thw"),
            num_images=inputs.get("num_images"),
            pixel_attention_mask=inputs.get("pixel_attention_mask"),
            spatial_shapes=inputs.get("spatial_shapes"),
            num_tiles=inputs.get("num_tiles"),
            image_sizes=inputs.get("image_sizes"),
            token_type_ids=inputs.get("token_type_ids"),
            mm_token_type_ids=inputs.get("mm_token_type_ids"),
            image_position_ids=inputs.get("image_position_ids"),
        )
        # As in TRL: with num_iterations == 1 and generation aligned with optimizer steps, TRL
        # skips old_per_token_logps because they equal the current ones.
        old_per_token_logps = inputs.get("old_per_token_logps")
        if old_per_token_logps is None:
            old_per_token_logps = per_token_logps.detach()
        behaviour = inputs.get("sampling_per_token_logps")
        if self.args.old_logprobs == "behaviour" and behaviour is not None:
            # the policy that sampled each token (its version may be older than the weights now): the ratio
            # corrects off-policy trajectories; a missing (non-finite) value keeps the recomputed one
            behaviour = behaviour.to(per_token_logps.dtype)
            old_per_token_logps = torch.where(torch.isfinite(behaviour), behaviour, old_per_token_logps.detach())
        if "loss_weight" in inputs:
            mask = mask * (inputs["loss_weight"] > 0).to(mask.dtype).unsqueeze(1)
        advantages = inputs["advantages"]
        if advantages.dim() != 1:
            raise ValueError(
                f"loss_type='mgrpo' needs one advantage per trajectory (shape (B,)), got {tuple(advantages.shape)}"
            )
        keep = mask.bool()
        out = clipped_surrogate_loss(
            per_token_logps,
            old_per_token_logps,
            advantages,
            keep,
            ratio_level=self.ratio_level,
            eps_low=self.epsilon_low,
            eps_high=self.epsilon_high,
        )
        loss = out.loss
        mode = "train" if self.model.training else "eval"
        mask_f = keep.to(per_token_logps.dtype)
        if self.beta != 0.0:
            ref = inputs["ref_per_token_logps"]
            per_token_kl = torch.exp(ref - per_token_logps) - (ref - per_token_logps) - 1
            per_token_kl = torch.where(keep, per_token_kl, torch.zeros_like(per_token_kl))
            kl_seq = per_token_kl.sum(-1) / mask_f.sum(-1).clamp(min=1.0)
            loss = loss + self.beta * kl_seq.mean()
        policy_loss = out.loss.detach()
        # 1/B over the generation batch: micro-batches are equal slices, so divide by their number.
        # (Trainer sets current_gradient_accumulation_steps in its loop; the fallback lets a caller
        # evaluate compute_loss on a recorded batch outside train().)
        accum = getattr(self, "current_gradient_accumulation_steps", self.args.gradient_accumulation_steps)
        normalizer = accum if mode == "train" else 1.0
        loss = loss / normalizer
        if self.aux_loss_enabled:
            loss = loss + self.router_aux_loss_coef * aux_loss / normalizer
            self._metrics[mode]["aux_loss"].append(self.accelerator.gather_for_metrics(aux_loss).mean().item())

        # Metrics, reduced over processes as sums and counts (like TRL's global_masked_mean).
        if self.ratio_level == "sequence":
            n_counted = (mask_f.sum(-1) > 0).sum().to(torch.float32)
        else:
            n_counted = mask_f.sum().to(torch.float32)
        n_tokens = mask_f.sum().to(torch.float32)
        ent_sum = (entropies.detach() * mask_f).sum().to(torch.float32)
        local = torch.stack(
            [
                out.clip_low_fraction.to(torch.float32) * n_counted,
                out.clip_high_fraction.to(torch.float32) * n_counted,
                out.ratio_mean.to(torch.float32) * n_counted,
                n_counted,
                ent_sum,
                n_tokens,
            ]
        )
        totals = self.accelerator.reduce(local, reduction="sum").tolist()
        low, high, ratio, counted, ent, toks = totals
        counted = max(counted, 1.0)
        metrics = self._metrics[mode]
        metrics["policy_loss"].append(self.accelerator.gather(policy_loss).nanmean().item())
        metrics["clip_ratio/low_mean"].append(low / counted)
        metrics["clip_ratio/high_mean"].append(high / counted)
        metrics["clip_ratio/region_mean"].append((low + high) / counted)
        metrics["ratio_mean"].append(ratio / counted if totals[3] > 0 else 1.0)
        metrics["entropy"].append(ent / max(toks, 1.0))
        if self.beta != 0.0:
            kl_stats = torch.stack([(per_token_kl.detach() * mask_f).sum().to(torch.float32), n_tokens])
            kl_sum, kl_n = self.accelerator.reduce(kl_stats, reduction="sum").tolist()
            metrics["kl"].append(kl_sum / max(kl_n, 1.0))
        return loss


def _stack_rows(rows: list[torch.Tensor | None], width: int, device: Any) -> torch.Tensor:
    """Rows of equal ``width`` stacked into ``(B, width)``; a ``None`` row (nothing scored) is zeros."""
    like = next((r for r in rows if r is not None), None)
    dtype = like.dtype if like is not None else torch.float32
    return torch.stack([r if r is not None else torch.zeros(width, dtype=dtype, device=device) for r in rows])


class _StepTimer(TrainerCallback):
    """Closes :attr:`MGRPOTrainer.phase_s` at each optimizer step (before the step's metrics are logged)."""

    def __init__(self, trainer: MGRPOTrainer) -> None:
        self.trainer = trainer

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.trainer._end_of_step_timing()

