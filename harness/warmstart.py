"""Warm start: SFT of the agents on scripted-expert transcripts with TRL's ``SFTTrainer`` (DESIGN §5, §6).

``python -m harness warmstart --model tiny --out DIR [--config YAML] [key=value ...]``

1. Generate the offline world and its local tasks (train split for the demonstrations, test
   split for the check afterwards; they share no answer entity).
2. Build the model: for ``tiny`` the BPE tokenizer is trained on the world's page text, the
   task prompts and the agents' prompts, so names are cheap to copy.
3. Run the scripted expert (noise rate in config) on the train tasks through the same tools and
   message format the models use. A planner transcript, one transcript per sub-agent call, and
   a single-agent transcript (the sub-agents' search/visit turns spliced into the planner's
   episode in place of its ``delegate`` calls) per task.
4. Tokenise each transcript exactly as a rollout would (:class:`EpisodeTokens`): labels are the
   assistant turns only (loss on model tokens; observations and prompts are ``-100``).
5. Fine-tune one model per agent (``planner``, ``sub_agent``, ``single_agent``) with
   ``SFTTrainer`` (progress bar), save each under ``DIR/<agent>/``.
6. Check the planner + sub-agent system on held-out test tasks (greedy, and sampled): valid-format
   share of turns, success, wall time; written to ``DIR/warmstart.json``.

Deliberate choices: the demonstrations use the agents' own prompts (:func:`initial_messages`),
not the expert's, so SFT and RL see the same context; demonstrations of wrong expert answers are
kept (noise is part of the data the design asks for) but counted in the summary.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config import ConfigError, help_field, load_config, to_dict

log = logging.getLogger(__name__)

AGENTS = ("planner", "sub_agent", "single_agent")


@dataclass
class WarmstartConfig:
    """Warm start of the agents by SFT on scripted-expert transcripts."""

    model: str = help_field("tiny", "model name (tiny, smollm2-135m), local path or HF id")
    seed: int = help_field(0, "seed of the model initialisation, data order and sampling")
    world_seed: int = help_field(0, "seed of the offline world")
    world_size: str = help_field("small", "world preset: tiny, small or default")
    n_train_tasks: int = help_field(120, "train tasks per benchmark style (demonstrations)")
    n_test_tasks: int = help_field(20, "held-out test tasks per benchmark style (the check)")
    noise: float = help_field(0.05, "scripted-expert noise rate in the demonstrations")
    agents: list[str] = help_field(list(AGENTS), "which agents to fine-tune")
    epochs: float = help_field(3.0, "passes over the demonstrations")
    max_steps: int = help_field(-1, "optimizer steps (overrides epochs when > 0)")
    learning_rate: float = help_field(2e-3, "AdamW learning rate")
    batch_size: int = help_field(8, "sequences per optimizer step")
    max_length: int = help_field(3072, "longest tokenised transcript; longer ones are dropped (counted)")
    eval_tasks: int = help_field(30, "held-out tasks checked after SFT (0 = no check)")
    eval_max_new_tokens: int = help_field(96, "new tokens per turn in the check")
    threads: int = help_field(0, "torch threads (0 = torch's default)")

    def validate(self) -> None:
        unknown = sorted(set(self.agents) - set(AGENTS))
        if unknown:
            raise ConfigError(f"agents: unknown {unknown}; choose from {list(AGENTS)}")
        if not 0.0 <= self.noise <= 1.0:
            raise ConfigError(f"noise={self.noise} must be in [0, 1]")
        if self.batch_size < 1 or self.n_train_tasks < 1:
            raise ConfigError("batch_size and n_train_tasks must be >= 1")


# --------------------------------------------------------------------------- data
@dataclass
class Demonstrations:
    """Transcripts per agent as chat messages (system, user, then assistant/tool turns)."""

    planner: list[list[dict[str, str]]] = field(default_factory=list)
    sub_agent: list[list[dict[str, str]]] = field(default_factory=list)
    single_agent: list[list[dict[str, str]]] = field(default_factory=list)
    n_tasks: int = 0
    n_correct: int = 0

    def of(self, agent: str) -> list[list[dict[str, str]]]:
        return getattr(self, agent)


def _delegated(turn: str) -> tuple[str, str] | None:
    from harness.agents.parsing import ToolCall, parse_turn

    parsed = parse_turn(turn, {"delegate"})
    if isinstance(parsed, ToolCall):
        return parsed.arguments.get("task", ""), parsed.arguments.get("context", "")
    return None


def expert_demonstrations(tasks: list[dict[str, Any]], toolbox: Any, noise: float, seed: int) -> Demonstrations:
    """Run the scripted expert on ``tasks`` and rewrite its transcripts into the agents' prompts."""
    from harness.agents.prompts import initial_messages
    from harness.world.expert import run_expert_episode
    from harness.world.tasks import task_prompt

    demos = Demonstrations()
    for task in tasks:
        tr = run_expert_episode(task, toolbox, noise=noise, seed=seed)
        demos.n_tasks += 1
        demos.n_correct += int(tr.correct)
        question = task_prompt(task)
        planner_turns = tr.planner[2:]  # drop the expert's own system/user messages
        demos.planner.append(initial_messages("planner", question) + planner_turns)
        single = initial_messages("single_agent", question)
        calls = iter(tr.sub_calls)
        for msg in planner_turns:
            if msg["role"] != "assistant":
                continue
            delegated = _delegated(msg["content"])
            if delegated is None:  # the final answer
                single.append(msg)
                continue
            sub = next(calls, None)
            if sub is None:
                break
            task_text, context = delegated
            demos.sub_agent.append(initial_messages("sub_agent", task_text, context) + sub[2:])
            # the single agent does the sub-agent's tool work itself, without its final result turn
            body = sub[2:]
            if body and body[-1]["role"] == "assistant":
                body = body[:-1]
            single.extend(body)
        demos.single_agent.append(single)
    return demos


def tokenize_transcript(codec: Any, messages: list[dict[str, str]]) -> dict[str, list[int]]:
    """``input_ids`` and ``labels`` (-100 outside assistant turns) as a rollout would build them."""
    ids = list(codec.prompt_ids(messages[:2]))
    labels = [-100] * len(ids)
    for msg in messages[2:]:
        if msg["role"] == "assistant":
            piece = codec.assistant_ids(msg["content"])
            ids += piece
            labels += piece
        else:
            piece = codec.observation_ids(msg["content"])
            ids += piece
            labels += [-100] * len(piece)
    return {"input_ids": ids, "labels": labels}


def tokenizer_corpus(world: Any, tasks: list[dict[str, Any]]) -> list[str]:
    """Text the tiny tokenizer is trained on: page text, task prompts and the agents' prompts."""
    from harness.agents.prompts import AGENT_PROMPTS
    from harness.tools.html_text import html_to_text
    from harness.world.tasks import task_prompt

    texts = [html_to_text(p.html) for p in world.pages.values()]
    texts += [task_prompt(t) for t in tasks]
    texts += [p.system for p in AGENT_PROMPTS.values()]
    texts += [json.dumps(t) for p in AGENT_PROMPTS.values() for t in p.tools]
    return texts


# --------------------------------------------------------------------------- training
def sft_train(model: Any, tokenizer: Any, examples: list[dict[str, list[int]]], cfg: WarmstartConfig,
              out_dir: Path) -> dict[str, float]:
    """Fine-tune ``model`` on pre-tokenised examples with TRL's ``SFTTrainer``; save to ``out_dir``."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    args = SFTConfig(
        output_dir=str(out_dir / "trainer"),
        per_device_train_batch_size=cfg.batch_size,
        num_train_epochs=cfg.epochs,
        max_steps=cfg.max_steps,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type="cosine",
        warmup_steps=0.05,
        weight_decay=0.0,
        logging_steps=10,
        save_strategy="no",
        report_to="none",
        seed=cfg.seed,
        max_length=None,  # examples are already filtered by length
        use_cpu=not _cuda(),
        # TRL's SFTConfig defaults to bf16 and gradient checkpointing; on a CPU without bf16 units both
        # cost a lot (bf16 autocast was ~3x slower here) for a model this small.
        bf16=_cuda() and _bf16_ok(),
        gradient_checkpointing=_cuda(),
        dataloader_num_workers=0,
        disable_tqdm=False,
    )
    model.train()
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(examples), processing_class=tokenizer)
    t0 = time.perf_counter()
    out = trainer.train()
    seconds = time.perf_counter() - t0
    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    n_tokens = sum(sum(1 for x in e["labels"] if x != -100) for e in examples)
    return {"train_loss": float(out.training_loss), "train_s": seconds, "steps": int(out.global_step),
            "n_examples": len(examples), "n_model_tokens": n_tokens}


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _bf16_ok() -> bool:
    import torch

    return torch.cuda.is_bf16_supported()


# --------------------------------------------------------------------------- check
def evaluate_system(planner: Any, sub_agent: Any, tokenizer: Any, tasks: list[dict[str, Any]], toolbox: Any, *,
                    temperature: float, max_new_tokens: int, seed: int = 0) -> dict[str, float]:
    """Planner + sub-agent on ``tasks`` (K=1 each): success and the share of valid-format turns."""
    from harness.backends import HFBackend
    from harness.rollout import AgentRuntime, InProcessSubAgent, Query, RolloutConfig, SubAgentEngine, run_group
    from harness.world.expert import answers_match, task_id
    from harness.world.tasks import task_prompt

    cfg = RolloutConfig(k=1, temperature=temperature, max_new_tokens=max_new_tokens, planner_turns=8, sub_turns=8,
                        context_tokens=4096)
    engine = SubAgentEngine(AgentRuntime(HFBackend(sub_agent, tokenizer), tokenizer), toolbox, cfg, seed=seed)
    runtime = AgentRuntime(HFBackend(planner, tokenizer), tokenizer)
    queries = [Query(task_id(t), task_prompt(t)) for t in tasks]
    t0 = time.perf_counter()
    res = run_group(queries, runtime, cfg, sub_agent=InProcessSubAgent(engine), seed=seed)
    engine.close()
    gold = {task_id(t): _gold_answer(t) for t in tasks}
    trajs = [e.trajectory for e in res.episodes] + res.sub_trajectories
    turns = sum(t.n_turns for t in trajs)
    bad = sum(t.n_format_errors for t in trajs)
    correct = sum(1 for e in res.episodes if e.answer is not None and answers_match(e.answer, gold[e.trajectory.query_id]))
    return {"n_tasks": len(tasks), "success": correct / max(1, len(tasks)), "valid_turns": 1 - bad / max(1, turns),
            "turns": turns, "seconds": time.perf_counter() - t0, "temperature": temperature}


def _gold_answer(task: dict[str, Any]) -> str:
    for key in ("Final answer", "answer"):
        if key in task:
            return str(task[key])
    raise ValueError("task has no gold answer field")


# --------------------------------------------------------------------------- main
def run_warmstart(cfg: WarmstartConfig, out: Path) -> dict[str, Any]:
    import torch

    from harness.agents.prompts import EpisodeTokens, agent_prompt
    from harness.models import ModelSpec, load_model
    from harness.world.generator import generate_world
    from harness.world.tasks import TaskConfig, generate_tasks
    from harness.world.toolbox import WorldToolbox

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    t_start = time.perf_counter()
    stages: dict[str, float] = {}
    world = generate_world(seed=cfg.world_seed, size=cfg.world_size)
    taskset = generate_tasks(world, TaskConfig(n_train=cfg.n_train_tasks, n_test=cfg.n_test_tasks))
    train = [t for (b, s), ts in sorted(taskset.tasks.items()) if s == "train" for t in ts]
    test = [t for (b, s), ts in sorted(taskset.tasks.items()) if s == "test" for t in ts]
    toolbox = WorldToolbox(world)
    stages["world_s"] = time.perf_counter() - t_start

    t0 = time.perf_counter()
    demos = expert_demonstrations(train, toolbox, cfg.noise, cfg.seed)
    stages["expert_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    corpus = tokenizer_corpus(world, train + test) if cfg.model == "tiny" else None
    spec = ModelSpec(name=cfg.model, seed=cfg.seed)
    _, tokenizer = load_model(spec, corpus=corpus)
    stages["model_s"] = time.perf_counter() - t0

    summary: dict[str, Any] = {
        "config": to_dict(cfg), "n_train_tasks": len(train), "n_test_tasks": len(test),
        "expert_demo_accuracy": demos.n_correct / max(1, demos.n_tasks), "agents": {},
    }
    models: dict[str, Any] = {}
    for agent in cfg.agents:
        codec = EpisodeTokens(tokenizer, agent_prompt(agent).tools)
        examples = [tokenize_transcript(codec, m) for m in demos.of(agent)]
        kept = [e for e in examples if len(e["input_ids"]) <= cfg.max_length]
        random.Random(cfg.seed).shuffle(kept)
        model, _ = load_model(spec, corpus=corpus)  # a fresh copy of the same initialisation per agent
        print(f"[warmstart] {agent}: {len(kept)} transcripts ({len(examples) - len(kept)} over max_length)", flush=True)
        stats = sft_train(model, tokenizer, kept, cfg, out / agent)
        stats["dropped_too_long"] = len(examples) - len(kept)
        summary["agents"][agent] = stats
        models[agent] = model
        stages[f"sft_{agent}_s"] = stats["train_s"]

    if cfg.eval_tasks and "planner" in models and "sub_agent" in models:
        t0 = time.perf_counter()
        held_out = test[: cfg.eval_tasks]
        summary["check"] = {
            "greedy": evaluate_system(models["planner"], models["sub_agent"], tokenizer, held_out, toolbox,
                                      temperature=0.0, max_new_tokens=cfg.eval_max_new_tokens, seed=cfg.seed),
            "sampled": evaluate_system(models["planner"], models["sub_agent"], tokenizer, held_out, toolbox,
                                       temperature=1.0, max_new_tokens=cfg.eval_max_new_tokens, seed=cfg.seed),
        }
        stages["check_s"] = time.perf_counter() - t0
    stages["total_s"] = time.perf_counter() - t_start
    summary["stages"] = stages
    out.mkdir(parents=True, exist_ok=True)
    (out / "warmstart.json").write_text(json.dumps(summary, indent=2))
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness warmstart", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="model name/path (overrides the config)")
    ap.add_argument("--out", required=True, help="output directory (one sub-directory per agent)")
    ap.add_argument("--config", default=None, help="YAML file with WarmstartConfig keys")
    ap.add_argument("overrides", nargs="*", help="key=value overrides, e.g. noise=0.1 max_steps=50")
    args = ap.parse_args(argv)
    overrides = list(args.overrides) + ([f"model={args.model}"] if args.model else [])
    try:
        cfg = load_config(WarmstartConfig, args.config, overrides)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    summary = run_warmstart(cfg, Path(args.out))
    check = summary.get("check", {})
    print(json.dumps({"expert_demo_accuracy": summary["expert_demo_accuracy"], "check": check,
                      "stages": summary["stages"]}, indent=2))
    return 0
