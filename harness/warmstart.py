"""Warm start: SFT of the agents on scripted-expert transcripts with TRL's ``SFTTrainer`` (docs/world.md, docs/models.md).

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
import hashlib
import json
import logging
import os
import random
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from harness.config import ConfigError, help_field, load_config, to_dict
from harness.world.schemas import BENCHMARKS

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
    test_fraction: float = help_field(0.25, "share of the world's entities that are test answer entities")
    benchmarks: list[str] = help_field(list(BENCHMARKS), "task styles demonstrated and checked")
    max_hops: int | None = help_field(None, "keep tasks with at most this many gold subtasks (null = all)")
    templates: list[str] | None = help_field(None, "keep tasks whose gold template matches one of these glob "
                                             "patterns, e.g. gaia.person.* (null = all)")
    demo_worlds: int = help_field(0, "extra worlds (fresh entities, seeds derived from world_seed) whose tasks "
                                  "add demonstrations, so the model learns to copy names instead of memorising them")
    demo_world_size: str = help_field("tiny", "world preset of the extra demonstration worlds")
    tokenizer_worlds: int = help_field(0, "tiny only: extra worlds (the demo worlds' seeds) whose pages the BPE tokenizer "
                                       "is also trained on, so its merges are syllables many names share instead of "
                                       "whole names: a held-out name that is one token of its own has an embedding no "
                                       "demonstration trained, and the model cannot write it")
    n_demos: int | None = help_field(None, "cap on demonstration tasks over all worlds (null = all), drawn "
                                     "evenly by template")
    search_top_k: int = help_field(5, "hits per search call in the demonstrations and the check (use the same value "
                                   "as the training preset's tools.search_top_k)")
    noise: float = help_field(0.05, "scripted-expert noise rate in the demonstrations")
    expert: dict[str, Any] = help_field({}, "more ExpertConfig fields for the demonstrations: rates, template_rates, "
                                        "phrase_rates (systematic blind spots that RL can fix)")
    agents: list[str] = help_field(list(AGENTS), "which agents to fine-tune")
    joint: bool = help_field(False, "one model fine-tuned on all the agents' transcripts together (each agent is "
                             "told apart by its own system prompt) and saved as every agent; the agents then "
                             "share what is common (the tool-call format) and the planner, whose transcripts "
                             "are the shortest, gets every step instead of its own few")
    repeat: dict[str, int] = help_field({}, "times an agent's transcripts appear in its SFT data, e.g. {planner: 2} "
                                        "(default 1): the planner's transcripts are the fewest tokens, and its "
                                        "turns are the ones that break format")
    epochs: float = help_field(3.0, "passes over the demonstrations")
    max_steps: int = help_field(-1, "optimizer steps (overrides epochs when > 0)")
    learning_rate: float = help_field(2e-3, "AdamW learning rate")
    group_by_length: bool = help_field(False, "batch transcripts of similar length together (transformers' "
                                       "LengthGroupedSampler): less padding, so a joint warm start that mixes short "
                                       "planner and long single-agent transcripts costs ~1/3 less")
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
        bad = sorted(set(self.benchmarks) - set(BENCHMARKS))
        if bad or not self.benchmarks:
            raise ConfigError(f"benchmarks={self.benchmarks}: choose one or more of {', '.join(BENCHMARKS)}")
        if self.search_top_k < 1:
            raise ConfigError(f"search_top_k={self.search_top_k} must be >= 1")
        if self.demo_worlds < 0 or self.tokenizer_worlds < 0 or (self.n_demos is not None and self.n_demos < 1):
            raise ConfigError("demo_worlds and tokenizer_worlds must be >= 0, n_demos >= 1 or null")
        bad_repeat = {a: n for a, n in self.repeat.items() if a not in AGENTS or not isinstance(n, int) or n < 1}
        if bad_repeat:
            raise ConfigError(f"repeat={bad_repeat}: keys are agents {list(AGENTS)}, values integers >= 1")
        if not 0.0 < self.test_fraction < 1.0:
            raise ConfigError(f"test_fraction={self.test_fraction} must be in (0, 1)")
        try:
            self.expert_config()
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"expert: {exc}") from None

    def expert_config(self) -> Any:
        from harness.world.expert import ExpertConfig

        return ExpertConfig(noise=self.noise, **self.expert)


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


def expert_demonstrations(tasks: list[dict[str, Any]], toolbox: Any, noise: float, seed: int, *,
                          config: Any = None, demos: Demonstrations | None = None) -> Demonstrations:
    """Run the scripted expert on ``tasks`` and rewrite its transcripts into the agents' prompts.

    ``config`` (an :class:`ExpertConfig`) replaces ``noise`` when given; ``demos`` is extended in place."""
    from harness.agents.prompts import initial_messages
    from harness.world.expert import run_expert_episode
    from harness.world.tasks import task_prompt

    demos = demos if demos is not None else Demonstrations()
    for task in tasks:
        tr = run_expert_episode(task, toolbox, noise=noise, seed=seed, config=config)
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


def _selected(taskset: Any, split: str, cfg: WarmstartConfig) -> list[dict[str, Any]]:
    from harness.world.tasks import select_tasks

    tasks = [t for b in cfg.benchmarks for t in taskset.tasks.get((b, split), [])]
    return select_tasks(tasks, max_hops=cfg.max_hops, templates=cfg.templates)


def demo_world_seed(world_seed: int, i: int) -> int:
    """Seed of the ``i``-th extra demonstration world: derived by hashing, so it never equals a small
    world seed a training preset uses (and differs for every ``world_seed``)."""
    digest = hashlib.blake2b(f"mgrpo-demo-world:{world_seed}:{i}".encode(), digest_size=4).digest()
    return 1_000_000 + int.from_bytes(digest, "big") % 1_000_000_000


def demo_world_tasks(cfg: WarmstartConfig, held_out: list[dict[str, Any]], world: Any) -> Any:
    """(toolbox, tasks) of each extra demonstration world: both splits, filtered like the main world.

    Names are generated independently per world, so the name of a held-out answer entity of
    ``world`` could reappear by chance; demonstration tasks that mention one are dropped, so that the
    check's answer entities never appear in training tasks."""
    from harness.world.generator import generate_world
    from harness.world.tasks import TaskConfig, generate_tasks
    from harness.world.toolbox import WorldToolbox

    banned = {world.entities[e].name for t in held_out for e in t["gold"].get("answer_entities", [])
              if e in world.entities}

    def clean(task: dict[str, Any]) -> bool:
        text = json.dumps({k: v for k, v in task.items() if k != "gold"}) + str(task["gold"].get("answer"))
        return not any(name in text for name in banned)
    for i in range(cfg.demo_worlds):
        demo = generate_world(seed=demo_world_seed(cfg.world_seed, i), size=cfg.demo_world_size)
        ts = generate_tasks(demo, TaskConfig(n_train=cfg.n_train_tasks, n_test=cfg.n_test_tasks,
                                              test_fraction=cfg.test_fraction))
        tasks = _selected(ts, "train", cfg) + _selected(ts, "test", cfg)
        yield WorldToolbox(demo, k=cfg.search_top_k), [t for t in tasks if clean(t)]


def _cap_demos(sources: list[tuple[Any, list[dict[str, Any]]]], n: int | None, seed: int) -> list[tuple[Any, list]]:
    """At most ``n`` tasks over all sources, drawn round-robin by template (then by world)."""
    if n is None or sum(len(t) for _, t in sources) <= n:
        return sources
    rng = random.Random(f"demos:{seed}")
    by_template: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for i, (_, tasks) in enumerate(sources):
        for t in tasks:
            by_template.setdefault(str(t["gold"].get("template")), []).append((i, t))
    for items in by_template.values():
        rng.shuffle(items)
    keep: list[list[dict[str, Any]]] = [[] for _ in sources]
    taken = 0
    lists = [by_template[k] for k in sorted(by_template)]
    while taken < n and any(lists):
        for items in lists:
            if items and taken < n:
                i, t = items.pop()
                keep[i].append(t)
                taken += 1
    return [(tb, kept) for (tb, _), kept in zip(sources, keep) if kept]


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
        train_sampling_strategy="group_by_length" if cfg.group_by_length else "random",
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
@dataclass
class Prepared:
    """Everything before the fine-tuning: the world, its task splits, the demonstrations, the tokenizer."""

    world: Any
    train: list[dict[str, Any]]
    test: list[dict[str, Any]]
    toolbox: Any
    demos: Demonstrations
    tokenizer: Any
    corpus: list[str] | None
    spec: Any
    n_worlds: int
    stages: dict[str, float]

    def examples(self, agent: str) -> list[dict[str, list[int]]]:
        """The agent's demonstrations tokenised as a rollout would build them (all lengths)."""
        from harness.agents.prompts import EpisodeTokens, agent_prompt

        codec = EpisodeTokens(self.tokenizer, agent_prompt(agent).tools)
        return [tokenize_transcript(codec, m) for m in self.demos.of(agent)]

    def sft_runs(self, cfg: WarmstartConfig) -> list[tuple[str, list[str], list[dict[str, list[int]]], int]]:
        """The fine-tunings of ``cfg``: ``(name, agents saved from it, examples, dropped)``. One per agent, or
        (joint) one on every agent's transcripts; an agent's transcripts count ``repeat`` times; examples over
        ``max_length`` are dropped (their number returned). The warm start and its time estimate both use this."""
        runs = [("joint", list(cfg.agents))] if cfg.joint else [(agent, [agent]) for agent in cfg.agents]
        out = []
        for name, agents in runs:
            examples = [e for agent in agents for e in self.examples(agent) * cfg.repeat.get(agent, 1)]
            kept = [e for e in examples if len(e["input_ids"]) <= cfg.max_length]
            out.append((name, agents, kept, len(examples) - len(kept)))
        return out


def prepare(cfg: WarmstartConfig) -> Prepared:
    """Generate the world and tasks, run the scripted expert and build the tokenizer (seconds)."""
    from harness.models import ModelSpec, load_model
    from harness.world.generator import generate_world
    from harness.world.tasks import TaskConfig, generate_tasks
    from harness.world.toolbox import WorldToolbox

    stages: dict[str, float] = {}
    t0 = time.perf_counter()
    world = generate_world(seed=cfg.world_seed, size=cfg.world_size)
    taskset = generate_tasks(world, TaskConfig(n_train=cfg.n_train_tasks, n_test=cfg.n_test_tasks,
                                               test_fraction=cfg.test_fraction))
    train = _selected(taskset, "train", cfg)
    test = _selected(taskset, "test", cfg)
    toolbox = WorldToolbox(world, k=cfg.search_top_k)
    sources = [(toolbox, train)] + list(demo_world_tasks(cfg, held_out=test, world=world))
    stages["world_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    expert = cfg.expert_config()
    picked = _cap_demos(sources, cfg.n_demos, cfg.seed)
    demos = Demonstrations()
    for tb, tasks in tqdm(picked, desc="expert demonstrations", unit="world", disable=len(picked) < 3):
        expert_demonstrations(tasks, tb, cfg.noise, cfg.seed, config=expert, demos=demos)
    stages["expert_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    corpus = None
    if cfg.model == "tiny":
        corpus = tokenizer_corpus(world, train + test)
        for i in range(cfg.tokenizer_worlds):
            corpus += tokenizer_corpus(generate_world(seed=demo_world_seed(cfg.world_seed, i), size=cfg.demo_world_size), [])
    spec = ModelSpec(name=cfg.model, seed=cfg.seed)
    _, tokenizer = load_model(spec, corpus=corpus)
    stages["model_s"] = time.perf_counter() - t0
    return Prepared(world, train, test, toolbox, demos, tokenizer, corpus, spec, len(picked), stages)


def run_warmstart(cfg: WarmstartConfig, out: Path) -> dict[str, Any]:
    import torch

    from harness.models import load_model

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    t_start = time.perf_counter()
    prep = prepare(cfg)
    stages = dict(prep.stages)
    test, toolbox, demos, tokenizer, corpus, spec = (prep.test, prep.toolbox, prep.demos, prep.tokenizer,
                                                      prep.corpus, prep.spec)

    summary: dict[str, Any] = {
        "config": to_dict(cfg), "n_train_tasks": len(prep.train), "n_test_tasks": len(test),
        "n_demo_tasks": demos.n_tasks, "n_demo_worlds": prep.n_worlds,
        "expert_demo_accuracy": demos.n_correct / max(1, demos.n_tasks), "agents": {},
    }
    models: dict[str, Any] = {}
    # One SFT per agent, or (joint) one SFT on every agent's transcripts, saved under each agent's name.
    for name, agents, kept, dropped in prep.sft_runs(cfg):
        random.Random(cfg.seed).shuffle(kept)
        model, _ = load_model(spec, corpus=corpus)  # a fresh copy of the same initialisation per SFT
        print(f"[warmstart] {name}: {len(kept)} transcripts ({dropped} over max_length)", flush=True)
        stats = sft_train(model, tokenizer, kept, cfg, out / agents[0])
        stats["dropped_too_long"] = dropped
        for agent in agents[1:]:
            shutil.copytree(out / agents[0], out / agent, ignore=shutil.ignore_patterns("trainer"), dirs_exist_ok=True)
        summary["agents"][name] = stats
        models.update({agent: model for agent in agents})
        stages[f"sft_{name}_s"] = stats["train_s"]

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
