"""Will an experiment fit its time budget? An estimate from a short calibration, before anything runs.

``python -m harness experiment --budget-min M`` calls :func:`estimate_experiment` first: a preset
that cannot fit says so in about a minute, with the breakdown, instead of after half an hour.

How the estimate is made (every input is either measured on this machine now or read from the
preset's own scripted-expert demonstrations, which the warm-started policies imitate):

* **Calibration** (:func:`calibrate`, a few seconds): on the preset's model, the seconds per token of
  an SFT step (forward, backward, AdamW) at the warm start's batch shape, the seconds per token of a
  batched prefill and the seconds of one batched decode step, at the batch sizes the rollouts use.
* **Episode shape** (:class:`EpisodeShape`, from the demonstrations): planner turns, sub-agent calls
  per episode, sub-agent turns per call, model tokens per turn, sequence lengths.
* **Warm start** = SFT tokens (each batch padded to its longest transcript) x epochs x s/token + the
  check's episodes.
* **One training run** = role start-up + planner steps x (rollout + optimizer steps) + evaluations.
  A rollout is a sequence of *turn batches* (docs/architecture.md §The agent system: all pending turns of a group go to the
  model together): the planner's turns, and for each planner turn that delegates, the sub-agent's
  turns of all delegated calls batched. Each turn batch costs one prefill of the new tokens plus
  ``tokens_per_turn`` decode steps (the longest turn of the batch sets the pace, hence a factor
  1.5 on the mean). An optimizer step costs about three passes over its trajectories (old
  log-probabilities, forward and backward). The sub role's step adds to the planner's, except with
  ``sub.serve: snapshot`` and ``sub.max_lag``, where the two overlap and a step costs the longer one.

Deliberate simplifications: the estimate ignores tool latency (the world is local; direct fetch
takes milliseconds) and assumes the roles of one run share the machine's cores; it is meant to be
within a factor of about 1.5, which is enough to refuse a preset that is two times over budget.
The breakdown is printed, so a researcher can see which stage to cut.
"""

from __future__ import annotations

import copy
import random
import statistics
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from baselines import TRAINERS
from harness.warmstart import prepare

#: Role start-up (world server, model loading, TRL set-up) per training run, seconds; measured
#: 15-30 s on the 2-core CI machine.
RUN_STARTUP_S = 25.0
#: The report over an experiment's records (measured 4-15 s; docs/report.md).
REPORT_S = 20.0
#: Longest turn of a batch / mean turn length (see the module docstring).
LONGEST_TURN_FACTOR = 1.5
#: TRL's SFTTrainer step over a bare forward/backward/AdamW step at the same shape (it also computes
#: entropy and token accuracy over the vocabulary each step, collates, logs); measured 1.75 on two
#: tiny joint warm starts (2026-12-03: 888 s vs 507 s and 662 s vs 376 s from the bare calibration).
SFT_OVERHEAD = 1.75

#: Demonstration worlds whose expert episodes give the episode shape when the warm start is already done.
SHAPE_WORLDS = 20


@dataclass(frozen=True)
class Calibration:
    """Measured costs of the preset's model on this machine."""

    sft_s_per_token: float
    """One SFT step (forward, backward, AdamW) per token of the batch."""
    prefill_s_per_token: float
    """A batched forward pass over new tokens, per token."""
    decode_s_per_step: float
    """One batched decode step (one new token for every sequence of the batch)."""
    decode_batch: int
    """Batch size the decode step was measured at."""

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True)
class EpisodeShape:
    """What an episode of the preset looks like (means over the scripted-expert demonstrations)."""

    planner_turns: float
    sub_calls: float
    sub_turns: float
    tokens_per_turn: float
    planner_len: float
    sub_len: float
    planner_sequences: int
    sub_sequences: int

    @classmethod
    def from_examples(cls, planner: list[dict[str, list[int]]], sub: list[dict[str, list[int]]],
                      planner_turns: float, sub_turns: float) -> "EpisodeShape":
        def mean_len(xs: list[dict[str, list[int]]]) -> float:
            return statistics.fmean(len(x["input_ids"]) for x in xs) if xs else 0.0

        model_tokens = [sum(1 for t in x["labels"] if t != -100) for x in planner + sub]
        turns = len(planner) * planner_turns + len(sub) * sub_turns
        return cls(planner_turns=planner_turns, sub_calls=len(sub) / max(1, len(planner)), sub_turns=sub_turns,
                   tokens_per_turn=sum(model_tokens) / max(1.0, turns), planner_len=mean_len(planner),
                   sub_len=mean_len(sub), planner_sequences=len(planner), sub_sequences=len(sub))


    def capped(self, rollout: Any, *, multi_agent: bool) -> "EpisodeShape":
        """The shape under a training preset's limits (``rollout``: a RolloutConfig). The demonstrations
        are uncapped; a preset with ``planner_turns: 4`` cuts a single-agent episode of ~9 turns to 4."""
        if multi_agent:
            return replace(self, planner_turns=min(self.planner_turns, rollout.planner_turns),
                           sub_turns=min(self.sub_turns, rollout.sub_turns),
                           sub_calls=min(self.sub_calls, rollout.max_delegations),
                           sub_len=min(self.sub_len, rollout.context_tokens))
        # the single agent does the sub-agent's turns in its own episode, under the planner's turn limit
        turns = self.planner_turns + self.sub_calls * self.sub_turns
        kept = min(1.0, rollout.planner_turns / max(1.0, turns))
        return replace(self, planner_turns=turns * kept, sub_calls=0.0,
                       planner_len=min(rollout.context_tokens, (self.planner_len + self.sub_calls * self.sub_len) * kept))


def _timed(fn: Any, repeats: int) -> float:
    """The fastest of ``repeats`` timed calls after one warm-up (allocations, kernel selection).

    The minimum, not the median: a calibration of a few seconds is easily hit by another process's
    burst, and the median of a handful of calls then moves the whole estimate by 1.5-2x from one try to
    the next (issue 14: 31.8 and 35.8 min on two tries of the same preset); the fastest call is the
    machine's own cost, which a quiet experiment run then pays."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def calibrate(model: Any, *, sft_batch: int, sft_len: int, decode_batch: int, prompt_len: int,
              repeats: int = 5) -> Calibration:
    """Time the three costs on ``model`` (a copy is trained for the SFT timing; ``model`` is untouched)."""
    import torch

    vocab = int(model.config.vocab_size)
    gen = torch.Generator().manual_seed(0)
    trainee = copy.deepcopy(model).train()
    opt = torch.optim.AdamW(trainee.parameters(), lr=1e-4)
    ids = torch.randint(0, vocab, (sft_batch, sft_len), generator=gen)

    def sft_step() -> None:
        out = trainee(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    sft_s = _timed(sft_step, repeats) / ids.numel()
    del trainee, opt

    model.eval()
    prompt = torch.randint(0, vocab, (decode_batch, prompt_len), generator=gen)
    with torch.no_grad():
        def prefill() -> Any:
            return model(input_ids=prompt, use_cache=True)

        prefill_s = _timed(prefill, repeats) / prompt.numel()
        out = prefill()
        past = out.past_key_values
        nxt = out.logits[:, -1:].argmax(-1)
        step_times = []
        for i in range(3 + 4 * repeats):  # the first decode steps select kernels for the new shapes: untimed
            t0 = time.perf_counter()
            o = model(input_ids=nxt, past_key_values=past, use_cache=True)
            past, nxt = o.past_key_values, o.logits[:, -1:].argmax(-1)
            if i >= 3:
                step_times.append(time.perf_counter() - t0)
        # the lower quartile: robust to another process's burst like _timed's minimum, and the cache grows
        decode_s = sorted(step_times)[len(step_times) // 4]
    return Calibration(sft_s_per_token=sft_s, prefill_s_per_token=prefill_s, decode_s_per_step=decode_s,
                       decode_batch=decode_batch)


def padded_tokens(lengths: list[int], batch_size: int, *, grouped: bool = False, shuffles: int = 8,
                  seed: int = 0) -> float:
    """Tokens one epoch of SFT actually computes: each batch is padded to its longest sequence, and the
    batches are drawn in a random order (mean over ``shuffles`` orders). Mixed lengths (a joint warm
    start mixes short planner and long single-agent transcripts) make this up to ~2x the raw tokens.
    ``grouped``: transformers' LengthGroupedSampler (random mega-batches of up to 50 batches, sorted
    by length inside), which leaves little padding."""
    if not lengths:
        return 0.0
    total = 0
    rng = random.Random(seed)
    for _ in range(shuffles):
        order = list(lengths)
        rng.shuffle(order)
        if grouped:
            mega = batch_size * max(1, min(len(order) // (batch_size * 4), 50))
            order = [n for i in range(0, len(order), mega) for n in sorted(order[i:i + mega], reverse=True)]
        total += sum(max(order[i:i + batch_size]) * len(order[i:i + batch_size])
                     for i in range(0, len(order), batch_size))
    return total / shuffles


def warmstart_seconds(sft_tokens: dict[str, float], cal: Calibration, *, epochs: float, shape: EpisodeShape,
                      check_tasks: int, max_new_tokens: int) -> dict[str, float]:
    """The SFT runs (``sft_tokens``: padded tokens per epoch of each, see :func:`padded_tokens`) and the check."""
    out = {f"sft_{name}_s": tokens * epochs * cal.sft_s_per_token * SFT_OVERHEAD for name, tokens in sft_tokens.items()}
    # the check: greedy and sampled, K = 1, batched over the check tasks
    per_episode = rollout_seconds(shape, cal, batch=check_tasks, max_new_tokens=max_new_tokens)
    out["check_s"] = 2 * per_episode if check_tasks else 0.0
    return out


def rollout_seconds(shape: EpisodeShape, cal: Calibration, *, batch: int, max_new_tokens: int) -> float:
    """One group of ``batch`` episodes, batched per turn (see the module docstring). A single-agent
    episode is a shape with ``sub_calls = 0`` (:meth:`EpisodeShape.capped` folds the sub-agent's turns in)."""
    turn_tokens = min(float(max_new_tokens), LONGEST_TURN_FACTOR * shape.tokens_per_turn)
    decode_scale = max(1.0, batch / cal.decode_batch) ** 0.5  # decode steps grow slowly with the batch on CPU
    per_turn_batch = turn_tokens * cal.decode_s_per_step * decode_scale
    planner = shape.planner_turns * (per_turn_batch + batch * shape.planner_len / max(1.0, shape.planner_turns)
                                     * cal.prefill_s_per_token)
    if not shape.sub_calls:
        return planner
    sub_batches = max(0.0, shape.planner_turns - 1) * shape.sub_turns  # delegating planner turns x sub turns
    sub_prefill = batch * shape.sub_calls * shape.sub_len * cal.prefill_s_per_token
    return planner + sub_batches * per_turn_batch + sub_prefill


def run_seconds(train_cfg: Any, shape: EpisodeShape, cal: Calibration, *, sub_trains: bool,
                multi_agent: bool) -> dict[str, float]:
    """One ``python -m harness train`` run of ``train_cfg`` (a :class:`TrainConfig`)."""
    steps = train_cfg.planner_steps
    batch = train_cfg.planner_groups * train_cfg.k
    shape = shape.capped(train_cfg.rollout, multi_agent=multi_agent)
    rollout = rollout_seconds(shape, cal, batch=batch, max_new_tokens=train_cfg.rollout.max_new_tokens)
    train = 3 * batch * shape.planner_len * cal.sft_s_per_token
    per_step = rollout + train
    if sub_trains:
        sub_train = 3 * batch * shape.sub_calls * shape.sub_len * cal.sft_s_per_token
        if train_cfg.sub.serve == "snapshot" and train_cfg.sub.max_lag is not None:
            # The sub role trains on step t's groups while the planner rolls out and trains step t+1 (its service
            # answers from a copy of the weights), so a step costs the longer of the two (docs/performance.md).
            per_step = max(per_step, sub_train)
        else:
            # On the critical path, counted whole: with `sub.serve: locked` the planner's delegations wait for it,
            # and with `snapshot` unpaced the sub role's own steps bound the run (docs/performance.md; counted half
            # until 2026-12-06, when make demo's mgrpo runs took 133 s against 82 s estimated).
            per_step += sub_train
    n_evals = (steps // train_cfg.eval.every + 1) if train_cfg.eval.every else 0
    n_eval_tasks = train_cfg.eval.n_tasks * len(train_cfg.tasks.benchmarks) * train_cfg.eval.runs
    eval_s = n_evals * rollout_seconds(shape, cal, batch=n_eval_tasks,
                                       max_new_tokens=train_cfg.eval.max_new_tokens or train_cfg.rollout.max_new_tokens)
    return {"startup_s": RUN_STARTUP_S, "steps_s": steps * per_step, "eval_s": eval_s}


def format_breakdown(stages: dict[str, float]) -> str:
    width = max(len(k) for k in stages)
    lines = [f"  {k:<{width}}  {v / 60:6.1f} min" for k, v in stages.items()]
    lines.append(f"  {'total':<{width}}  {sum(stages.values()) / 60:6.1f} min")
    return "\n".join(lines)


def estimate_experiment(ws_cfg: Any, arms: dict[str, Any], seeds: int, *, warmstart_done: bool,
                        stage1: Any = None, filter_k: int = 4) -> dict[str, Any]:
    """Stage seconds of ``python -m harness experiment``: warm start (unless done) and every run; with
    ``stage1`` (``--two-stage``: the stage-1 :class:`TrainConfig`) also the stage-1 runs and the hard filter
    (``filter_k`` sampled episodes per candidate task, estimated like evaluation episodes).

    ``ws_cfg`` is the preset's :class:`WarmstartConfig`, ``arms`` maps run names to their
    :class:`TrainConfig`. Returns ``{"stages": {...}, "total_s": ..., "calibration": {...}, "shape": {...}}``.
    """
    import torch

    t0 = time.perf_counter()
    if warmstart_done and ws_cfg.demo_worlds > SHAPE_WORLDS:
        # only the episode shape is needed (the warm start is not estimated): a few demonstration worlds give it;
        # all 300 of tiny-generalise took ~6 of the ~6.5 min of calibration (measured 2026-12-06)
        ws_cfg = replace(ws_cfg, demo_worlds=SHAPE_WORLDS)
    prep = prepare(ws_cfg)
    planner_x, sub_x = prep.examples("planner"), prep.examples("sub_agent")
    shape = EpisodeShape.from_examples(
        planner_x, sub_x,
        planner_turns=_mean_turns(prep.demos.planner), sub_turns=_mean_turns(prep.demos.sub_agent))
    # The fine-tunings exactly as run_warmstart builds them (joint or per agent, repeats, length cap).
    sft_lengths = {name: [len(x["input_ids"]) for x in kept] for name, _, kept, _ in prep.sft_runs(ws_cfg)}
    sft_tokens = {name: padded_tokens(ls, ws_cfg.batch_size, grouped=ws_cfg.group_by_length, seed=ws_cfg.seed)
                  for name, ls in sft_lengths.items()}
    n_rows = sum(len(ls) for ls in sft_lengths.values())
    # calibrated at the mean padded row length: attention makes long rows dearer per token
    sft_len = int(sum(sft_tokens.values()) / max(1, n_rows))
    model = prep.new_model()  # the warm start's own initial model (its tokenizer's vocabulary)
    threads_before = torch.get_num_threads()
    any_cfg = next(iter(arms.values()), None)
    batch = max((c.planner_groups * c.k for c in arms.values()), default=8)
    try:
        if ws_cfg.threads:
            torch.set_num_threads(ws_cfg.threads)
        cal_ws = calibrate(model, sft_batch=ws_cfg.batch_size, sft_len=max(16, sft_len),
                           decode_batch=max(1, min(ws_cfg.eval_tasks, 64)), prompt_len=max(16, int(shape.planner_len)))
        torch.set_num_threads(any_cfg.threads if any_cfg is not None else threads_before)
        cal_run = calibrate(model, sft_batch=batch, sft_len=max(16, int(shape.planner_len)), decode_batch=batch,
                            prompt_len=max(16, int(shape.planner_len)))
    finally:
        torch.set_num_threads(threads_before)
    stages: dict[str, float] = {}
    if not warmstart_done:
        largest = max((len(ls) for ls in sft_lengths.values()), default=1)
        epochs = ws_cfg.epochs if ws_cfg.max_steps <= 0 else ws_cfg.max_steps * ws_cfg.batch_size / max(1, largest)
        ws = warmstart_seconds(sft_tokens, cal_ws, epochs=epochs, shape=shape, check_tasks=ws_cfg.eval_tasks,
                               max_new_tokens=ws_cfg.eval_max_new_tokens)
        # the copy drill before each SFT: copy_batch_size sequences of 50 tokens on average per step
        drill = len(sft_lengths) * ws_cfg.copy_steps * ws_cfg.copy_batch_size * 50 * cal_ws.sft_s_per_token
        stages["warm start"] = sum(ws.values()) + sum(prep.stages.values()) + drill * SFT_OVERHEAD
    if stage1 is not None:
        stages[f"stage 1 (mgrpo) x {seeds}"] = seeds * sum(run_seconds(stage1, shape, cal_run, sub_trains=True,
                                                                       multi_agent=True).values())
        candidates = next(iter(arms.values()), stage1)
        n_candidates = candidates.tasks.n_train * len(candidates.tasks.benchmarks)
        per_task = rollout_seconds(shape.capped(candidates.rollout, multi_agent=True), cal_run, batch=filter_k,
                                   max_new_tokens=candidates.rollout.max_new_tokens)
        stages[f"hard filter x {seeds}"] = seeds * n_candidates * per_task
    for name, cfg in arms.items():
        spec = TRAINERS[str(cfg.trainer)]
        per_run = run_seconds(cfg, shape, cal_run, sub_trains=spec.sub_trains, multi_agent=name != "single_agent"
                              and str(cfg.trainer) != "single_agent")
        stages[f"{name} x {seeds}"] = seeds * sum(per_run.values())
    stages["report"] = REPORT_S
    return {"stages": stages, "total_s": sum(stages.values()), "calibration_s": time.perf_counter() - t0,
            "calibration": {"warm_start": cal_ws.to_dict(), "runs": cal_run.to_dict()},
            "shape": asdict(shape)}


def _mean_turns(transcripts: list[list[dict[str, str]]]) -> float:
    counts = [sum(1 for m in t if m["role"] == "assistant") for t in transcripts]
    return statistics.fmean(counts) if counts else 0.0
