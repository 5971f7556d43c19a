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
import re
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from harness.agents.parsing import FormatError, ToolCall, parse_turn
from harness.agents.prompts import AGENT_PROMPTS, EpisodeTokens, agent_prompt, initial_messages
from harness.checkpoint_files import PROVENANCE_FILE, sha256_file, verify_checkpoint, warm_start_model_dir
from harness.config import ConfigError, from_dict, help_field, load_config, to_dict
from harness.protocol import format_tool_call, render_error
from harness.records import append_jsonl, git_state, iter_jsonl, portable_argv
from harness.rollout import (AgentRuntime, InProcessSubAgent, Query, RolloutConfig, SubAgentEngine, no_result_text,
                             run_group)
from harness.tools.html_text import html_to_text
from harness.world.expert import ExpertConfig, answers_match, run_expert_episode, task_id
from harness.world.generator import generate_world
from harness.world.schemas import BENCHMARKS
from harness.world.tasks import TaskConfig, generate_tasks, select_tasks, task_prompt
from harness.world.toolbox import WorldToolbox

log = logging.getLogger(__name__)

AGENTS = ("planner", "sub_agent", "single_agent")
ROOT = Path(__file__).resolve().parents[1]  # the repository (a relative `init` is also looked up here)
PRESETS_DIR = ROOT / "baselines" / "configs"


@dataclass
class WarmstartConfig:
    """Warm start of the agents by SFT on scripted-expert transcripts."""

    model: str = help_field("tiny", "model name (tiny, smollm2-135m), local path or HF id")
    init: str | None = help_field(None, "start every fine-tuning from this warm start instead of a fresh model: a "
                                  "shipped checkpoint (its hashes verified) or a build folder, e.g. "
                                  "baselines/checkpoints/tiny-generalise (a relative path is looked up from the "
                                  "repository root when it is not found from the current folder). Its tokenizer is "
                                  "used as it is (none is built), so copy_steps and copy_mix must be 0; model is then "
                                  "ignored. null: a fresh model (docs/training.md, \"A warm start with blind spots\")")
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
    tokenizer: str = help_field("bpe", "tiny only: ``bpe`` (BPE over the world's text), ``letters`` (the worlds' "
                                "template words whole, every name, URL slug and fact value spelled in letters) or "
                                "``syllables`` (template words whole, names split into consonant-vowel syllables "
                                "that BPE, trained also on the tokenizer worlds' names, merges into shared tokens)")
    vocab_size: int | None = help_field(None, "tiny only: tokenizer vocabulary (null = TinyModelConfig's 1024; the "
                                        "syllables tokenizer needs room for a few hundred syllables: 2048)")
    world_demos: bool = help_field(True, "demonstrations also from the main world's train split; false: the main "
                                   "world (world_seed) is only checked, never trained on, and none of its entity "
                                   "names appears in a demonstration")
    demo_world_tasks: int | None = help_field(None, "tasks per benchmark style generated in each extra "
                                              "demonstration world (null = n_train_tasks)")
    search_top_k: int = help_field(5, "hits per search call in the demonstrations and the check (use the same value "
                                   "as the training preset's tools.search_top_k)")
    search_snippets: bool = help_field(True, "search hits with their snippet (false: title and URL only; use the same "
                                       "value as the training preset's tools.search_snippets)")
    max_chars: int | None = help_field(None, "page text kept per visit in the demonstrations and the check (null = "
                                       "all; use the training preset's tools.max_chars)")
    visit_focus: bool = help_field(False, "goal-guided visit in the demonstrations and the check: the table rows that "
                                   "match the visit's goal first (use the same value as the training preset's "
                                   "tools.visit_focus; docs/tools.md)")
    visit_links: bool = help_field(False, "with visit_focus, a page on which no row matches the goal gets its menu and "
                                   "list links ordered by the goal (use the same value as the training preset's "
                                   "tools.visit_links; docs/tools.md)")
    noise: float = help_field(0.05, "scripted-expert noise rate in the demonstrations")
    recovery_rate: float = help_field(0.0, "share of the agents' demonstrated turns preceded by a broken copy of "
                                      "themselves (cut short, its end repeated: what a drifting model writes) and the "
                                      "format-error observation a rollout shows for it; the broken turn is outside "
                                      "the loss. The expert never errs in format, so without these a model that "
                                      "breaks one turn has never seen what comes next and keeps breaking "
                                      "(docs/training.md, \"The tiny warm start\")")
    expert: dict[str, Any] = help_field({}, "more ExpertConfig fields for the demonstrations: rates, template_rates, "
                                        "phrase_rates (systematic blind spots that RL can fix), task_sentence (the "
                                        "sub-agent's queries and visit goals: the task's own sentence)")
    agents: list[str] = help_field(list(AGENTS), "which agents to fine-tune")
    joint: bool = help_field(False, "one model fine-tuned on all the agents' transcripts together (each agent is "
                             "told apart by its own system prompt) and saved as every agent; the agents then "
                             "share what is common (the tool-call format) and the planner, whose transcripts "
                             "are the shortest, gets every step instead of its own few")
    repeat: dict[str, int] = help_field({}, "times an agent's transcripts appear in its SFT data, e.g. {planner: 2} "
                                        "(default 1): the planner's transcripts are the fewest tokens, and its "
                                        "turns are the ones that break format")
    copy_steps: int = help_field(0, "steps of a copy drill before the SFT (0 = none): random sequences of name "
                                 "pieces, each written twice, the loss on every token. A model trained from "
                                 "scratch has no induction heads, so it cannot copy a name it never saw, and "
                                 "demonstrations alone did not install them within 600 SFT steps; the drill does "
                                 "(docs/training.md, \"The tiny warm start\")")
    copy_pieces: int = help_field(32, "the drill's first alphabet: the this-many most frequent name pieces (a small "
                                  "alphabet crosses the induction transition in 1,000-2,000 steps; the ~300 pieces "
                                  "of all names did not within 800). Each time the repeat is copied (loss below "
                                  "0.5 nats) the alphabet doubles, up to every name piece")
    copy_full_steps: int = help_field(300, "drill steps once every name piece is copied; the drill ends then, or "
                                      "after copy_steps in all")
    copy_batch_size: int = help_field(32, "sequences per copy-drill step (each 20-80 tokens)")
    copy_alphabet: str = help_field("names", "pieces the drill copies: ``names`` (the tokens of entity names and URL "
                                    "slugs) or ``all`` (those first, then every other token of the demonstrations, "
                                    "most frequent first: relation words, digits and values are copied from the "
                                    "question and the pages too, and a circuit trained on name pieces only did not "
                                    "copy them; docs/training.md, \"The tiny warm start\")")
    copy_mix: float = help_field(0.0, "share of extra SFT examples that are copy-drill sequences over the whole "
                                 "alphabet (loss on the repeat only), so the SFT keeps the induction heads the drill "
                                 "installed (measured: without it the probe's repeat loss rose from 0.79 to 2.46 "
                                 "over 800 SFT steps)")
    loss_tokens: str = help_field("model", "tokens the SFT loss covers: ``model`` (the agent's own turns, what a rollout "
                                  "trains) or ``all`` (also the prompt and the tool observations, whose search "
                                  "results and pages repeat every entity name several times: far more copying "
                                  "signal per sequence; docs/training.md, \"The tiny warm start\")")
    epochs: float = help_field(3.0, "passes over the demonstrations")
    max_steps: int = help_field(-1, "optimizer steps (overrides epochs when > 0)")
    restarts: list[int] = help_field([], "SFT steps at which the learning rate restarts: training first runs to the "
                                     "first listed step on a cosine schedule that ends there, then resumes from that "
                                     "step's checkpoint on the cosine schedule of a run to the next listed step (or "
                                     "max_steps), which it joins part way down (e.g. [2400] with max_steps 3600: "
                                     "steps 2400-3600 start again at a quarter of learning_rate). Each must be a "
                                     "multiple of save_steps, below max_steps; [] = one schedule")
    learning_rate: float = help_field(2e-3, "AdamW learning rate")
    group_by_length: bool = help_field(False, "batch transcripts of similar length together (transformers' "
                                       "LengthGroupedSampler): less padding, so a joint warm start that mixes short "
                                       "planner and long single-agent transcripts costs ~1/3 less")
    batch_size: int = help_field(8, "sequences per optimizer step")
    max_length: int = help_field(3072, "longest tokenised transcript; longer ones are dropped (counted)")
    eval_tasks: int = help_field(30, "held-out tasks checked after SFT (0 = no check)")
    gate_tasks: int = help_field(20, "held-out tasks whose noise-free expert transcripts the copy gate scores "
                                 "(0 = no gate)")
    gate_every: int = help_field(0, "also score the copy gate every this many SFT steps (0 = only at the end)")
    save_steps: int = help_field(0, "save a resumable SFT checkpoint every this many steps (0 = none); a killed "
                                 "build run again with the same --out resumes from the last one")
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
        if self.visit_links and not self.visit_focus:
            raise ConfigError("visit_links orders links where no row matches the goal: set visit_focus: true too")
        if not 0.0 <= self.recovery_rate < 1.0:
            raise ConfigError(f"recovery_rate={self.recovery_rate} must be in [0, 1)")
        if self.copy_steps < 0 or self.copy_pieces < 2 or self.copy_batch_size < 1 or self.copy_full_steps < 0:
            raise ConfigError("copy_steps and copy_full_steps must be >= 0, copy_pieces >= 2, copy_batch_size >= 1")
        if self.copy_alphabet not in ("names", "all"):
            raise ConfigError(f"copy_alphabet={self.copy_alphabet!r}: choose names or all")
        if not 0.0 <= self.copy_mix < 1.0:
            raise ConfigError(f"copy_mix={self.copy_mix} must be in [0, 1) (a share of extra SFT examples)")
        if self.loss_tokens not in ("model", "all"):
            raise ConfigError(f"loss_tokens={self.loss_tokens!r}: choose model or all")
        if self.tokenizer not in ("bpe", "letters", "syllables"):
            raise ConfigError(f"tokenizer={self.tokenizer!r}: choose bpe, letters or syllables")
        resolve_init(self.init)  # a missing folder is refused before anything runs
        if self.init is not None and (self.copy_steps or self.copy_mix):
            raise ConfigError(f"init={self.init!r} starts from a model that went through its own copy drill and keeps "
                              "its tokenizer: set copy_steps: 0 and copy_mix: 0")
        if not self.world_demos and not self.demo_worlds:
            raise ConfigError("world_demos=false needs demo_worlds > 0 (no demonstrations otherwise)")
        if self.restarts:
            ok = (self.max_steps > 0 and self.save_steps > 0 and list(self.restarts) == sorted(set(self.restarts))
                  and all(0 < r < self.max_steps and r % self.save_steps == 0 for r in self.restarts))
            if not ok:
                raise ConfigError(f"restarts={list(self.restarts)}: give increasing steps between 0 and max_steps="
                                  f"{self.max_steps}, each a multiple of save_steps={self.save_steps} (a restart resumes "
                                  "from the checkpoint saved at its step), or [] for one schedule")
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

    def expert_config(self) -> ExpertConfig:
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
    parsed = parse_turn(turn, {"delegate"})
    if isinstance(parsed, ToolCall):
        return parsed.arguments.get("task", ""), parsed.arguments.get("context", "")
    return None


def expert_demonstrations(tasks: list[dict[str, Any]], toolbox: Any, noise: float, seed: int, *,
                          config: Any = None, demos: Demonstrations | None = None) -> Demonstrations:
    """Run the scripted expert on ``tasks`` and rewrite its transcripts into the agents' prompts.

    ``config`` (an :class:`ExpertConfig`) replaces ``noise`` when given; ``demos`` is extended in place."""
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


def broken_turn(turn: str, rng: random.Random) -> str:
    """``turn`` cut short at a random point, with a stretch before the cut repeated 2-4 times: the two ways
    the tiny model's turns were seen to break (an unclosed tool call, runaway repetition)."""
    cut = rng.randint(max(1, len(turn) // 3), max(1, len(turn) - 3))
    head = turn[:cut]
    start = rng.randint(max(0, cut - 24), max(0, cut - 4))
    return head + head[start:] * rng.randint(2, 4)


def with_recovery(messages: list[dict[str, Any]], agent: str, rate: float, rng: random.Random) -> list[dict[str, Any]]:
    """``messages`` with, before each assistant turn (with probability ``rate``), a broken copy of it
    (:func:`broken_turn`, marked ``"loss": False``) and the format-error observation a rollout shows for it
    (the real parser's reason), so that the demonstration shows the correct turn *after* an error. A planner's
    delegation is also (with the same probability) shown failing once first, with the observation of a sub-agent
    that ran out of turns, then made again."""
    allowed = agent_prompt(agent).allowed_tools
    out = list(messages[:2])
    for msg in messages[2:]:
        if msg["role"] == "assistant" and agent == "planner" and _delegated(msg["content"]) and rng.random() < rate:
            out += [dict(msg), {"role": "tool", "content": no_result_text("max_turns")}]
        if msg["role"] == "assistant" and rng.random() < rate:
            bad = broken_turn(msg["content"], rng)
            parsed = parse_turn(bad, allowed)
            if isinstance(parsed, FormatError):
                out += [{"role": "assistant", "content": bad, "loss": False},
                        {"role": "tool", "content": render_error(f"format error: {parsed.reason}")}]
        out.append(msg)
    return out


def tokenize_transcript(codec: Any, messages: list[dict[str, str]], loss_tokens: str = "model") -> dict[str, list[int]]:
    """``input_ids`` as a rollout would build them and ``labels``: -100 outside the assistant turns
    (``loss_tokens="model"``) or nowhere (``"all"``: the prompt and the observations are targets too)."""
    every = loss_tokens == "all"
    ids = list(codec.prompt_ids(messages[:2]))
    labels = list(ids) if every else [-100] * len(ids)
    for msg in messages[2:]:
        if msg["role"] == "assistant":
            piece = codec.assistant_ids(msg["content"])
            ids += piece
            # a demonstrated mistake (``"loss": False``, see with_recovery) is context, never a target
            labels += piece if msg.get("loss", True) else [-100] * len(piece)
        else:
            piece = codec.observation_ids(msg["content"])
            ids += piece
            labels += piece if every else [-100] * len(piece)
    return {"input_ids": ids, "labels": labels}


def tokenizer_corpus(world: Any, tasks: list[dict[str, Any]]) -> list[str]:
    """Text the tiny tokenizer is trained on: page text, task prompts and the agents' prompts."""
    texts = [html_to_text(p.html) for p in world.pages.values()]
    texts += [task_prompt(t) for t in tasks]
    texts += [p.system for p in AGENT_PROMPTS.values()]
    texts += [json.dumps(t) for p in AGENT_PROMPTS.values() for t in p.tools]
    # the call format itself ("arguments" appears in no schema)
    texts += [format_tool_call(t["function"]["name"], dict.fromkeys(t["function"]["parameters"]["properties"], ""))
              for p in AGENT_PROMPTS.values() for t in p.tools]
    return texts


def value_words(world: Any) -> set[str]:
    """Every word that names an entity of ``world`` or is the value of one of its facts (a category, an
    industry, a role, a country), as written and in lower case (URL slugs): the words an agent must
    copy, which the ``letters`` tokenizer spells."""
    texts = [e.name for e in world.entities.values()] + [f.value for f in world.facts] + list(world.countries)
    words = {w for t in texts for w in _LETTER_RUN.findall(t)}
    return words | {w.lower() for w in words} | {w.capitalize() for w in words}


def template_corpus(worlds: list[Any], tasks: list[dict[str, Any]], demos: Demonstrations | None = None) -> list[str]:
    """The ``letters`` tokenizer's corpus: :func:`tokenizer_corpus` of each world and the text of
    ``demos`` (what the agents write: "Find the maker of ..."), with every :func:`value_words` word of
    every world removed: template words only ("founded", "wiki", "Team"...), plus the agents' prompts.
    Its words become whole tokens; any other word (a name or fact value of any world, a slug) is
    spelled in letters. ``tasks`` and ``demos`` belong to any of ``worlds``."""
    banned = set().union(*(value_words(w) for w in worlds)) if worlds else set()
    texts = [t for i, world in enumerate(worlds) for t in tokenizer_corpus(world, tasks if i == 0 else [])]
    if demos is not None:
        texts += [m["content"] for agent in AGENTS for msgs in demos.of(agent) for m in msgs]
    return [" ".join(w for w in _LETTER_RUN.findall(text) if w not in banned) for text in texts]


_LETTER_RUN = re.compile(r"[^\W\d_]+")  # the same letter runs as harness.models.LETTER_RUN (no torch import here)


def _toolbox(world: Any, cfg: WarmstartConfig) -> WorldToolbox:
    """The in-process tools of the demonstrations and the check, set as the training preset's are."""
    return WorldToolbox(world, k=cfg.search_top_k, max_chars=cfg.max_chars, snippets=cfg.search_snippets,
                        focus=cfg.visit_focus, links=cfg.visit_links)


def _selected(taskset: Any, split: str, cfg: WarmstartConfig) -> list[dict[str, Any]]:
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
    check's answer entities never appear in training tasks (with ``world_demos: false`` no name of
    ``world`` at all)."""
    if cfg.world_demos:
        banned = {world.entities[e].name for t in held_out for e in t["gold"].get("answer_entities", [])
                  if e in world.entities}
    else:
        banned = {e.name for e in world.entities.values()}
    per_world = cfg.demo_world_tasks or cfg.n_train_tasks

    def clean(task: dict[str, Any]) -> bool:
        text = json.dumps({k: v for k, v in task.items() if k != "gold"}) + str(task["gold"].get("answer"))
        return not any(name in text for name in banned)
    for i in range(cfg.demo_worlds):
        demo = generate_world(seed=demo_world_seed(cfg.world_seed, i), size=cfg.demo_world_size)
        # each world starts the round robin over templates further on: with a few tasks per world, the first
        # templates in name order would otherwise take every place in every world (measured: 0-3 demonstrations
        # of the person, product and later site templates in 40 worlds, 50-80 of the first ones)
        ts = generate_tasks(demo, TaskConfig(n_train=per_world, n_test=min(per_world, cfg.n_test_tasks),
                                              test_fraction=cfg.test_fraction, template_start=i * per_world))
        tasks = _selected(ts, "train", cfg) + _selected(ts, "test", cfg)
        yield _toolbox(demo, cfg), [t for t in tasks if clean(t)]


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
              out_dir: Path, *, gate: Callable[[Any], dict[str, float]] | None = None) -> dict[str, Any]:
    """Fine-tune ``model`` on pre-tokenised examples with TRL's ``SFTTrainer``; save to ``out_dir``.

    With ``cfg.save_steps`` a checkpoint is saved every that many steps under ``out_dir/trainer`` and a
    second call with the same arguments resumes from the last one (same data order: the examples are
    shuffled by ``cfg.seed`` and the trainer's sampler by its seed). ``gate(model)`` (the copy gate) is
    scored every ``cfg.gate_every`` steps; its results are returned as ``gate_log``. With ``cfg.restarts`` the
    steps run in phases, each on its own cosine schedule (see the field's help)."""
    from datasets import Dataset  # lazy: datasets/trl/transformers only when training
    from transformers import TrainerCallback
    from transformers.trainer_utils import get_last_checkpoint
    from trl import SFTConfig, SFTTrainer

    trainer_dir = out_dir / "trainer"
    saving = cfg.save_steps > 0

    def sft_args(max_steps: int) -> Any:
        return SFTConfig(
            output_dir=str(trainer_dir),
            per_device_train_batch_size=cfg.batch_size,
            num_train_epochs=cfg.epochs,
            max_steps=max_steps,
            learning_rate=cfg.learning_rate,
            lr_scheduler_type="cosine",
            warmup_steps=0.05,
            weight_decay=0.0,
            logging_steps=10,
            save_strategy="steps" if saving else "no",
            save_steps=cfg.save_steps if saving else 500,
            save_total_limit=2 if saving else None,
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

    gate_log: list[dict[str, Any]] = []
    # Each gate row also goes to a file next to the checkpoints, so a resumed build reports the whole curve.
    gate_file = trainer_dir / "gate_log.jsonl"

    class GateCallback(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if gate is not None and cfg.gate_every > 0 and state.global_step % cfg.gate_every == 0:
                row = {"step": state.global_step, **gate(kwargs["model"])}
                gate_log.append(row)
                if saving:
                    append_jsonl(gate_file, row)
                print(f"[copy gate] step {row['step']}: name-token loss {row['name_loss']:.3f} vs other "
                      f"{row['other_loss']:.3f}; names exact {row['names_exact']:.0%} (first token {row['names_first']:.0%}, "
                      f"the rest {row['names_rest']:.0%}); repeated random pieces "
                      f"{row['repeat_loss']:.2f} vs first {row['first_loss']:.2f}", flush=True)

    model.train()
    dataset = Dataset.from_list(examples)
    resume = get_last_checkpoint(str(trainer_dir)) if saving and trainer_dir.is_dir() else None
    done = 0
    if resume:
        print(f"[warmstart] resuming from {resume}", flush=True)
        done = int(Path(resume).name.rsplit("-", 1)[-1])
        if gate_file.is_file():  # the rows up to the checkpoint (the last one per step); later ones are scored again
            rows = {row["step"]: row for _, row in iter_jsonl(gate_file, tolerate_truncated_tail=True)
                    if row["step"] <= done}
            gate_log.extend(rows[k] for k in sorted(rows))
    elif gate_file.is_file():
        gate_file.unlink()  # a fresh build: no rows of an earlier one
    resumed_from = resume
    t0 = time.perf_counter()
    # One trainer per schedule (cfg.restarts): each resumes from the checkpoint its predecessor saved at its last
    # step; a phase a resumed build already finished is skipped (the last one always runs: it returns at once
    # when its checkpoint is already at max_steps).
    ends = [*cfg.restarts, cfg.max_steps]
    for i, end in enumerate(ends):
        if i < len(ends) - 1 and done >= end:
            continue
        if i:
            print(f"[warmstart] learning-rate restart at step {ends[i - 1]}: a cosine schedule to step {end}", flush=True)
        trainer = SFTTrainer(model=model, args=sft_args(end), train_dataset=dataset, processing_class=tokenizer,
                             callbacks=[GateCallback()])
        out = trainer.train(resume_from_checkpoint=resume)
        resume = get_last_checkpoint(str(trainer_dir)) if saving else None
    seconds = time.perf_counter() - t0
    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    n_tokens = sum(sum(1 for x in e["labels"] if x != -100) for e in examples)
    return {"train_loss": float(out.training_loss), "train_s": seconds, "steps": int(out.global_step),
            "n_examples": len(examples), "n_loss_tokens": n_tokens, "resumed_from": resumed_from, "gate_log": gate_log}


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _bf16_ok() -> bool:
    import torch

    return torch.cuda.is_bf16_supported()


# --------------------------------------------------------------------------- check
def evaluate_system(planner: Any, sub_agent: Any, tokenizer: Any, tasks: list[dict[str, Any]], toolbox: Any, *,
                    temperature: float, max_new_tokens: int, seed: int = 0) -> dict[str, float]:
    """Planner + sub-agent on ``tasks`` (K=1 each): success (overall and per benchmark style) and the
    share of valid-format turns."""
    from harness.backends import HFBackend  # lazy: harness.backends imports torch

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
    solved = {e.trajectory.query_id for e in res.episodes
              if e.answer is not None and answers_match(e.answer, gold[e.trajectory.query_id])}
    return {"n_tasks": len(tasks), "success": len(solved) / max(1, len(tasks)), "valid_turns": 1 - bad / max(1, turns),
            "turns": turns, "seconds": time.perf_counter() - t0, "temperature": temperature,
            "per_benchmark": _per_benchmark(tasks, solved)}


def _benchmark(task: dict[str, Any]) -> str:
    return str(task["gold"].get("template", "")).split(".")[0]


def _per_benchmark(tasks: list[dict[str, Any]], solved: set[str]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for t in tasks:
        row = out.setdefault(_benchmark(t), {"n": 0, "solved": 0})
        row["n"] += 1
        row["solved"] += task_id(t) in solved
    for row in out.values():
        row["success"] = row["solved"] / row["n"]
    return out


def interleave_benchmarks(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``tasks`` reordered round-robin over benchmark styles, so any prefix covers them all evenly."""
    by: dict[str, list[dict[str, Any]]] = {}
    for t in tasks:
        by.setdefault(_benchmark(t), []).append(t)
    out: list[dict[str, Any]] = []
    lists = [by[k] for k in sorted(by)]
    for i in range(max((len(v) for v in lists), default=0)):
        out += [v[i] for v in lists if i < len(v)]
    return out


def expert_check(tasks: list[dict[str, Any]], toolbox: Any, seed: int = 0,
                 config: ExpertConfig | None = None) -> dict[str, Any]:
    """The noise-free scripted expert (``config.noise_free()``) on the check tasks: the ceiling a warm start
    stays below."""
    clean = (config or ExpertConfig()).noise_free()
    solved = {task_id(t) for t in tasks if run_expert_episode(t, toolbox, noise=0.0, seed=seed, config=clean).correct}
    return {"n_tasks": len(tasks), "success": len(solved) / max(1, len(tasks)),
            "per_benchmark": _per_benchmark(tasks, solved)}


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
    alphabet: list[int] = field(default_factory=list)  # the copy drill's pieces, most frequent first
    init: Path | None = None  # WarmstartConfig.init, resolved: the warm start every fine-tuning starts from

    def new_model(self, agent: str = "planner") -> Any:
        """A freshly initialised model for :attr:`tokenizer` (the same weights on every call), the named
        pretrained model, or (``init``) ``agent``'s model in the warm start the fine-tuning continues."""
        from harness.models import build_tiny_model, load_model  # lazy: harness.models imports torch

        if self.init is not None:
            return load_model(str(warm_start_model_dir(self.init, agent)))[0]
        if self.spec.name == "tiny":
            return build_tiny_model(self.spec.tiny, self.tokenizer, self.spec.seed)
        return load_model(self.spec, corpus=self.corpus)[0]

    def examples(self, agent: str, loss_tokens: str = "model") -> list[dict[str, list[int]]]:
        """The agent's demonstrations tokenised as a rollout would build them (all lengths)."""
        codec = EpisodeTokens(self.tokenizer, agent_prompt(agent).tools)
        transcripts = self.demos.of(agent)
        return [tokenize_transcript(codec, m, loss_tokens) for m in
                tqdm(transcripts, desc=f"tokenising {agent}", unit="transcript", disable=len(transcripts) < 2000)]

    def sft_runs(self, cfg: WarmstartConfig) -> list[tuple[str, list[str], list[dict[str, list[int]]], int]]:
        """The fine-tunings of ``cfg``: ``(name, agents saved from it, examples, dropped)``. One per agent, or
        (joint) one on every agent's transcripts; an agent's transcripts count ``repeat`` times; examples over
        ``max_length`` are dropped (their number returned). The warm start and its time estimate both use this."""
        runs = [("joint", list(cfg.agents))] if cfg.joint else [(agent, [agent]) for agent in cfg.agents]
        out = []
        for name, agents in runs:
            examples = [e for agent in agents for e in self.examples(agent, cfg.loss_tokens) * cfg.repeat.get(agent, 1)]
            kept = [e for e in examples if len(e["input_ids"]) <= cfg.max_length]
            dropped = len(examples) - len(kept)
            if cfg.copy_mix and self.alphabet:  # drill sequences keep the induction heads through the SFT
                kept += copy_examples(self.alphabet, round(cfg.copy_mix * len(kept)), cfg.seed)
            out.append((name, agents, kept, dropped))
        return out


def checked_world(cfg: WarmstartConfig) -> tuple[Any, list[dict[str, Any]], list[dict[str, Any]], WorldToolbox]:
    """The world ``cfg`` checks on (``world_seed``; never a demonstration world unless ``world_demos``): the
    world, its selected train and test tasks, and the toolbox set as the build's demonstrations were."""
    world = generate_world(seed=cfg.world_seed, size=cfg.world_size)
    taskset = generate_tasks(world, TaskConfig(n_train=cfg.n_train_tasks, n_test=cfg.n_test_tasks,
                                               test_fraction=cfg.test_fraction))
    return world, _selected(taskset, "train", cfg), _selected(taskset, "test", cfg), _toolbox(world, cfg)


def check_tasks(cfg: WarmstartConfig, test: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The build's held-out check: the first ``eval_tasks`` of ``test``, round-robin over benchmark styles."""
    return interleave_benchmarks(test)[: cfg.eval_tasks]


def recheck(root: Path) -> dict[str, Any]:
    """Rerun the greedy held-out check recorded with a warm start: a build folder (``warmstart.json``) or a
    shipped checkpoint (``provenance.json``, its hashes verified first). Same tasks, tools, decoding and seed
    as the build's check, the planner and the sub-agent loaded from the folder. Returns ``{"recorded": ...,
    "rerun": ...}`` (each as :func:`evaluate_system` returns it)."""
    from harness.models import load_model  # lazy: harness.models imports torch

    root = Path(root)
    record_path = root / PROVENANCE_FILE if (root / PROVENANCE_FILE).is_file() else root / "warmstart.json"
    try:
        record = json.loads(record_path.read_text())
        recorded = record["check"]["greedy"]
        cfg = from_dict(WarmstartConfig, dict(record["config"]), f"{record_path} config")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{record_path}: no recorded greedy check to rerun ({exc!r}); give a warm-start build "
                          "folder or a shipped checkpoint") from None
    dirs = {agent: warm_start_model_dir(root, agent) for agent in ("planner", "sub_agent")}
    planner, tokenizer = load_model(str(dirs["planner"]))
    sub = planner if dirs["sub_agent"] == dirs["planner"] else load_model(str(dirs["sub_agent"]))[0]
    _, _, test, toolbox = checked_world(cfg)
    tasks = check_tasks(cfg, test)
    rerun = evaluate_system(planner, sub, tokenizer, tasks, toolbox, temperature=0.0,
                            max_new_tokens=cfg.eval_max_new_tokens, seed=cfg.seed)
    return {"recorded": recorded, "rerun": rerun}


def prepare(cfg: WarmstartConfig) -> Prepared:
    """Generate the world and tasks, run the scripted expert and build the tokenizer (seconds to minutes)."""
    from harness.models import ModelSpec, build_tiny_tokenizer, load_model  # lazy: harness.models imports torch

    stages: dict[str, float] = {}
    t0 = time.perf_counter()
    world, train, test, toolbox = checked_world(cfg)
    extra = tqdm(demo_world_tasks(cfg, held_out=test, world=world), desc="demonstration worlds", unit="world",
                 total=cfg.demo_worlds, disable=cfg.demo_worlds < 50)
    sources = ([(toolbox, train)] if cfg.world_demos else []) + list(extra)
    stages["world_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    expert = cfg.expert_config()
    picked = _cap_demos(sources, cfg.n_demos, cfg.seed)
    demos = Demonstrations()
    for tb, tasks in tqdm(picked, desc="expert demonstrations", unit="world", disable=len(picked) < 3):
        expert_demonstrations(tasks, tb, cfg.noise, cfg.seed, config=expert, demos=demos)
    if cfg.recovery_rate:
        rng = random.Random(f"recovery:{cfg.seed}")
        for agent in AGENTS:
            setattr(demos, agent, [with_recovery(m, agent, cfg.recovery_rate, rng) for m in demos.of(agent)])
    stages["expert_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    corpus = None
    spec = ModelSpec(name=cfg.model, seed=cfg.seed)
    tokenizer = None
    init = resolve_init(cfg.init)
    if init is not None:
        _, tokenizer = load_model(str(warm_start_model_dir(init, "planner")))
    elif cfg.model == "tiny":
        if cfg.vocab_size:
            spec.tiny.vocab_size = cfg.vocab_size
        extra_worlds = [generate_world(seed=demo_world_seed(cfg.world_seed, i), size=cfg.demo_world_size)
                        for i in range(cfg.tokenizer_worlds)]
        if cfg.tokenizer in ("letters", "syllables"):
            # template words only: the names and values of every world involved are removed (held-out
            # names are spelled like any other); the task prompts give the question words, the expert's
            # transcripts on the first demonstration worlds the words the agents write
            sample = Demonstrations()
            corpus_worlds = picked[: max(1, cfg.tokenizer_worlds)]
            for tb, tasks in corpus_worlds:
                expert_demonstrations(tasks, tb, 0.0, cfg.seed, demos=sample)
            corpus = template_corpus([world, *extra_worlds, *(tb.world for tb, _ in corpus_worlds)], train + test, sample)
            whole = sorted({w for t in corpus for w in _LETTER_RUN.findall(t)})
            # syllables: BPE also sees the names and values of the demonstration worlds (never the checked
            # world's), so the syllables many names share become tokens
            names = [w for tb, _ in corpus_worlds for w in sorted(value_words(tb.world))] \
                if cfg.tokenizer == "syllables" else []
            tokenizer = build_tiny_tokenizer(corpus + names, spec.tiny.vocab_size, spec.seed,
                                             model_max_length=spec.tiny.max_position_embeddings, whole_words=whole,
                                             pieces=cfg.tokenizer)
        else:
            corpus = tokenizer_corpus(world, train + test)
            for w in extra_worlds:
                corpus += tokenizer_corpus(w, [])
    if tokenizer is None:
        _, tokenizer = load_model(spec, corpus=corpus)
    stages["model_s"] = time.perf_counter() - t0
    pieces = name_pieces(tokenizer, [tb.world for tb, _ in picked[:50]])
    if cfg.copy_alphabet == "all":
        pieces = transcript_pieces(tokenizer, demos, pieces)
    return Prepared(world, train, test, toolbox, demos, tokenizer, corpus, spec, len(picked), stages, pieces, init)


def resolve_init(init: str | None) -> Path | None:
    """:attr:`WarmstartConfig.init` as a folder: as given, else from the repository root; a missing one is a
    :class:`ConfigError` naming both places."""
    if init is None:
        return None
    path = Path(init)
    for candidate in (path, ROOT / path):
        if candidate.is_dir():
            return candidate
    raise ConfigError(f"init={init!r}: no such folder (looked in {Path.cwd()} and {ROOT}); give a "
                      "shipped checkpoint or a warm-start build folder")


# --------------------------------------------------------------------------- copy drill
def name_pieces(tokenizer: Any, worlds: list[Any]) -> list[int]:
    """The token ids that spell the entity names and URL slugs of ``worlds``, most frequent first (the
    copy drill's alphabet; the demonstration worlds', never the checked world's)."""
    counts: dict[int, int] = {}
    for w in worlds:
        for text in sorted(entity_strings(w)):
            for i in tokenizer(text, add_special_tokens=False)["input_ids"]:
                counts[i] = counts.get(i, 0) + 1
    return sorted(counts, key=lambda i: (-counts[i], i))


def transcript_pieces(tokenizer: Any, demos: Demonstrations, first: list[int], n_transcripts: int = 2000) -> list[int]:
    """``first`` (the name pieces), then every other token of the first ``n_transcripts`` demonstrations of
    each agent, most frequent first, special tokens left out: the drill's ``copy_alphabet: all``."""
    special = set(tokenizer.all_special_ids)
    counts: dict[int, int] = {}
    for agent in AGENTS:
        for msgs in demos.of(agent)[:n_transcripts]:
            for msg in msgs:
                for i in tokenizer(msg["content"], add_special_tokens=False)["input_ids"]:
                    counts[i] = counts.get(i, 0) + 1
    seen = set(first)
    rest = sorted((i for i in counts if i not in seen and i not in special), key=lambda i: (-counts[i], i))
    return list(first) + rest


def repeated_pieces(pieces: list[int], rng: random.Random) -> tuple[list[int], int]:
    """One copy-drill sequence: 10-40 random ``pieces`` written twice; returns the ids and the length of a half."""
    half = [rng.choice(pieces) for _ in range(rng.randint(10, 40))]
    return half + half, len(half)


def copy_examples(pieces: list[int], n: int, seed: int) -> list[dict[str, list[int]]]:
    """``n`` copy-drill sequences as SFT examples (the loss on the predictable tokens of the repeat only),
    mixed into the demonstrations by ``copy_mix``."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        ids, half = repeated_pieces(pieces, rng)
        out.append({"input_ids": ids, "labels": [-100] * (half + 1) + ids[half + 1:]})
    return out


#: The copy drill's repeat loss (nats per token, running mean) below which copying counts as learned.
COPY_LEARNED_LOSS = 0.5


def copy_drill(model: Any, pieces: list[int], cfg: WarmstartConfig, pad_id: int,
               probe: Callable[[Any], dict[str, float]] | None = None) -> dict[str, Any]:
    """Train ``model`` on random sequences of ``pieces`` written twice, the loss on every token (only the
    second copy is predictable, by copying). It starts on the ``copy_pieces`` most frequent pieces; each
    time the running loss on the second copies falls below :data:`COPY_LEARNED_LOSS` (the induction
    transition, then its extension to new pieces) the alphabet doubles, until it holds every piece; once
    that is copied too it goes on for ``copy_full_steps`` steps and stops. ``copy_steps`` caps it all.
    A circuit learned on 32 pieces does not copy the others (measured: the repeat loss went back to
    chance, ln 314, when the alphabet jumped to all 314 pieces), hence the doubling.
    ``probe(model)`` (the induction probe) is logged every 100 steps and at the end. Plain PyTorch:
    synthetic sequences need none of TRL's SFT machinery."""
    import torch  # lazy: the training stack

    rng = random.Random(cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=0.0)
    device = next(model.parameters()).device
    model.train()
    log: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    repeat_loss, learned_at, step = float("inf"), None, 0
    size = min(cfg.copy_pieces, len(pieces))
    widened: list[dict[str, int]] = []
    bar = tqdm(total=cfg.copy_steps, desc="copy drill", unit="step")
    while step < cfg.copy_steps and (learned_at is None or step < learned_at + cfg.copy_full_steps):
        step += 1
        pool = pieces[:size]
        seqs = [repeated_pieces(pool, rng) for _ in range(cfg.copy_batch_size)]
        width = max(len(ids) for ids, _ in seqs)
        x = torch.full((len(seqs), width), pad_id, device=device)
        weight = torch.zeros((len(seqs), width), device=device)  # 1 on real tokens
        second = torch.zeros((len(seqs), width), device=device)  # 1 on the predictable tokens of the repeat
        for r, (ids, half) in enumerate(seqs):
            x[r, : len(ids)] = torch.tensor(ids, device=device)
            weight[r, : len(ids)] = 1.0
            second[r, half + 1: len(ids)] = 1.0
        for group in opt.param_groups:  # 50 warm-up steps, then constant: the transition needs the full rate
            group["lr"] = cfg.learning_rate * min(1.0, step / 50)
        logits = model(input_ids=x, attention_mask=weight.long()).logits[:, :-1].float()
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), x[:, 1:], reduction="none")
        loss = (nll * weight[:, 1:]).sum() / weight[:, 1:].sum()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        batch_repeat = float((nll.detach() * second[:, 1:]).sum() / second[:, 1:].sum())
        repeat_loss = batch_repeat if repeat_loss == float("inf") else 0.9 * repeat_loss + 0.1 * batch_repeat
        if learned_at is None and repeat_loss < COPY_LEARNED_LOSS:
            widened.append({"step": step, "alphabet": size})
            if size >= len(pieces):
                learned_at = step
            else:  # copied on this alphabet: double it; the running loss restarts from the new batches
                size, repeat_loss = min(2 * size, len(pieces)), float("inf")
        bar.update(1)
        bar.set_postfix(repeat=f"{repeat_loss:.2f}", alphabet=len(pool))
        if probe is not None and step % 100 == 0:
            log.append({"step": step, "drill_repeat_loss": repeat_loss, "alphabet": len(pool), **probe(model)})
    bar.close()
    if probe is not None and (not log or log[-1]["step"] != step):
        log.append({"step": step, "drill_repeat_loss": repeat_loss, "alphabet": len(pool), **probe(model)})
    model.eval()
    if learned_at is None:
        print(f"[warmstart] copy drill: copying not learned on all {len(pieces)} name pieces within {step} steps "
              f"(alphabet {size}, repeat loss {repeat_loss:.2f}); raise copy_steps", flush=True)
    return {"steps": step, "learned_at": learned_at, "alphabet_learned": widened,
            "seconds": time.perf_counter() - t0, "probe_log": log}


# --------------------------------------------------------------------------- copy gate
def gate_transcripts(tasks: list[dict[str, Any]], toolbox: Any, seed: int = 0,
                     config: ExpertConfig | None = None) -> Demonstrations:
    """Noise-free expert transcripts (``config.noise_free()``, the demonstrations' expert without its errors) of
    held-out ``tasks``: what the copy gate scores the model on."""
    return expert_demonstrations(tasks, toolbox, noise=0.0, seed=seed, config=(config or ExpertConfig()).noise_free())


def name_spans(text: str, names: set[str]) -> list[tuple[int, int]]:
    """Character spans of ``names`` (entity names and their URL slugs) in ``text``, longest first."""
    spans: list[tuple[int, int]] = []
    taken = [False] * len(text)
    for name in sorted(names, key=len, reverse=True):
        for m in re.finditer(re.escape(name), text):
            if not any(taken[m.start():m.end()]):
                spans.append((m.start(), m.end()))
                taken[m.start():m.end()] = [True] * (m.end() - m.start())
    return spans


def entity_strings(world: Any) -> set[str]:
    """The entity names of ``world`` and their URL slugs (the strings a copying model must reproduce)."""
    names = {e.name for e in world.entities.values()}
    return names | {"-".join(n.lower().split()) for n in names}


def gate_marks(codec: EpisodeTokens, msgs: list[dict[str, str]], names: set[str]) -> tuple[list[int], list[int]]:
    """A transcript's token ids (as :func:`tokenize_transcript` builds them) and, per token, -1 (prompt or
    observation: not a model token), 0 (a model token outside any name) or ``n >= 1`` (a token of the
    ``n``-th name occurrence in the model's turns)."""
    tokenizer = codec.tokenizer
    ids = list(codec.prompt_ids(msgs[:2]))
    kind: list[int] = [-1] * len(ids)
    next_occ = 1
    for msg in msgs[2:]:
        if msg["role"] != "assistant":
            piece = codec.observation_ids(msg["content"])
            ids += piece
            kind += [-1] * len(piece)
            continue
        piece = codec.assistant_ids(msg["content"])
        enc = tokenizer(msg["content"], add_special_tokens=False, return_offsets_mapping=True)
        marks = [0] * len(piece)
        if list(enc["input_ids"]) == piece[: len(enc["input_ids"])]:  # the turn's text tokenises alone as in place
            for a, b in name_spans(msg["content"], names):
                toks = [i for i, (x, y) in enumerate(enc["offset_mapping"]) if x < b and y > a]
                for i in toks:
                    marks[i] = next_occ
                next_occ += 1 if toks else 0
        ids += piece
        kind += marks
    return ids, kind


def induction_probe(model: Any, tokenizer: Any, names: set[str], n: int = 16, length: int = 24,
                    seed: int = 0) -> dict[str, float]:
    """Loss on random sequences of the pieces that spell ``names``, each sequence written twice: on the
    first copy (``first_loss``: no way to predict it) and on the second (``repeat_loss``). A model that can
    copy at all (it has induction heads: attend to the token after the previous occurrence of the current
    one) predicts the repeat: ``repeat_loss`` far below ``first_loss``. Equal losses mean no copying
    mechanism exists yet, whatever the demonstrations look like."""
    import torch  # lazy: torch only when a model is scored

    pieces = sorted({i for name in names for i in tokenizer(name, add_special_tokens=False)["input_ids"]})
    rng = random.Random(seed)
    seqs = [[rng.choice(pieces) for _ in range(length)] for _ in range(n)]
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    with torch.no_grad():
        x = torch.tensor([s + s for s in seqs], device=device)
        logits = model(input_ids=x).logits[:, :-1].float()
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), x[:, 1:], reduction="none")
    if was_training:
        model.train()
    # target position t+1 is predicted at t: the first copy's tokens 1..L-1, the repeat's L+1..2L-1
    return {"first_loss": float(nll[:, : length - 1].mean()), "repeat_loss": float(nll[:, length:].mean())}


def copy_gate(model: Any, tokenizer: Any, demos: Demonstrations, names: set[str],
              agents: tuple[str, ...] = ("planner", "sub_agent")) -> dict[str, float]:
    """Teacher-forced loss on the model tokens of held-out expert transcripts, split into the tokens
    that spell an entity name or its URL slug (copying) and all other model tokens (format, choices).

    Copying is learned when ``name_loss`` approaches ``other_loss``; before that, held-out success
    cannot rise (docs/training.md, "The tiny warm start"). Also the share of name occurrences whose
    every token is the model's argmax (``names_exact``), whose first token is (``names_first``: the token
    an induction head cannot copy, since what precedes the copy differs from what precedes the source)
    and whose later tokens are (``names_rest``), and the :func:`induction_probe` losses."""
    import torch  # lazy: torch only when a model is scored

    sums = {"name": 0.0, "other": 0.0}
    counts = {"name": 0, "other": 0}
    exact = first = rest = occurrences = 0
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    for agent in agents:
        codec = EpisodeTokens(tokenizer, agent_prompt(agent).tools)
        for msgs in demos.of(agent):
            ids, kind = gate_marks(codec, msgs, names)
            with torch.no_grad():
                x = torch.tensor([ids], device=device)
                logits = model(input_ids=x).logits[0, :-1].float()
                target = x[0, 1:]
                nll = torch.nn.functional.cross_entropy(logits, target, reduction="none").tolist()
                hit = (logits.argmax(-1) == target).tolist()
            per_occ: dict[int, list[bool]] = {}  # occurrence -> argmax hit per token
            for pos in range(1, len(ids)):
                k = kind[pos]
                if k < 0:
                    continue
                group = "name" if k > 0 else "other"
                sums[group] += nll[pos - 1]
                counts[group] += 1
                if k > 0:
                    per_occ.setdefault(k, []).append(bool(hit[pos - 1]))
            occurrences += len(per_occ)
            exact += sum(all(h) for h in per_occ.values())
            first += sum(h[0] for h in per_occ.values())
            rest += sum(all(h[1:]) for h in per_occ.values())
    if was_training:
        model.train()
    return {"name_loss": sums["name"] / max(1, counts["name"]), "other_loss": sums["other"] / max(1, counts["other"]),
            "n_name_tokens": counts["name"], "n_other_tokens": counts["other"],
            "names_exact": exact / max(1, occurrences), "names_first": first / max(1, occurrences),
            "names_rest": rest / max(1, occurrences), "n_names": occurrences,
            **induction_probe(model, tokenizer, names)}


def run_warmstart(cfg: WarmstartConfig, out: Path) -> dict[str, Any]:
    import torch  # lazy: the training stack

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    t_start = time.perf_counter()
    prep = prepare(cfg)
    stages = dict(prep.stages)
    test, toolbox, demos, tokenizer = prep.test, prep.toolbox, prep.demos, prep.tokenizer
    held_out = check_tasks(cfg, test)
    gate_demos = gate_transcripts(held_out[: cfg.gate_tasks] if cfg.gate_tasks <= len(held_out) else
                                  interleave_benchmarks(test)[: cfg.gate_tasks], toolbox, cfg.seed,
                                  cfg.expert_config()) if cfg.gate_tasks else None
    names = entity_strings(prep.world)

    def gate(model: Any) -> dict[str, float]:
        return copy_gate(model, tokenizer, gate_demos, names)

    summary: dict[str, Any] = {
        "config": to_dict(cfg), "git": git_state(), "n_train_tasks": len(prep.train), "n_test_tasks": len(test),
        "n_demo_tasks": demos.n_tasks, "n_demo_worlds": prep.n_worlds,
        "expert_demo_accuracy": demos.n_correct / max(1, demos.n_tasks), "agents": {},
    }
    if prep.init is not None:  # what the fine-tuning continued from, by content
        summary["init"] = {"path": cfg.init, "sha256": {str(f.relative_to(prep.init)): sha256_file(f)
                                                         for f in sorted(prep.init.rglob("*.safetensors"))}}
    models: dict[str, Any] = {}
    # One SFT per agent, or (joint) one SFT on every agent's transcripts, saved under each agent's name.
    for name, agents, kept, dropped in prep.sft_runs(cfg):
        random.Random(cfg.seed).shuffle(kept)
        model = prep.new_model(agents[0])  # a fresh copy of the same initialisation (or of init's model) per SFT
        drill = None
        # a resumed SFT loads its checkpoint's weights, which already went through the drill
        resuming = cfg.save_steps > 0 and any((out / agents[0] / "trainer").glob("checkpoint-*"))
        if cfg.copy_steps and not resuming:
            drill = copy_drill(model, prep.alphabet, cfg, tokenizer.pad_token_id or 0,
                               probe=lambda m: induction_probe(m, tokenizer, names))
            stages[f"copy_drill_{name}_s"] = drill["seconds"]
        n_tok = sum(len(e["input_ids"]) for e in kept)
        print(f"[warmstart] {name}: {len(kept)} transcripts, {n_tok} tokens ({dropped} over max_length)", flush=True)
        stats = sft_train(model, tokenizer, kept, cfg, out / agents[0], gate=gate if gate_demos else None)
        stats["dropped_too_long"] = dropped
        if drill is not None:
            stats["copy_drill"] = drill
        if gate_demos:
            stats["copy_gate"] = gate(model)
            print(f"[copy gate] {name}: {json.dumps(stats['copy_gate'])}", flush=True)
        for agent in agents[1:]:
            shutil.copytree(out / agents[0], out / agent, ignore=shutil.ignore_patterns("trainer"), dirs_exist_ok=True)
        summary["agents"][name] = stats
        models.update({agent: model for agent in agents})
        stages[f"sft_{name}_s"] = stats["train_s"]

    if cfg.eval_tasks and "planner" in models and "sub_agent" in models:
        t0 = time.perf_counter()
        summary["check"] = {
            "greedy": evaluate_system(models["planner"], models["sub_agent"], tokenizer, held_out, toolbox,
                                      temperature=0.0, max_new_tokens=cfg.eval_max_new_tokens, seed=cfg.seed),
            "sampled": evaluate_system(models["planner"], models["sub_agent"], tokenizer, held_out, toolbox,
                                       temperature=1.0, max_new_tokens=cfg.eval_max_new_tokens, seed=cfg.seed),
            "expert": expert_check(held_out, toolbox, cfg.seed, cfg.expert_config()),
        }
        stages["check_s"] = time.perf_counter() - t0
    stages["total_s"] = time.perf_counter() - t_start
    summary["stages"] = stages
    out.mkdir(parents=True, exist_ok=True)
    (out / "warmstart.json").write_text(json.dumps(summary, indent=2))
    return summary


# --------------------------------------------------------------------------- the shipped checkpoint
#: Files of a saved model folder that a shipped checkpoint keeps (no trainer state).
SHIPPED_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                 "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")


def ship_checkpoint(build: Path, dest: Path, summary: dict[str, Any], argv: list[str],
                    extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Copy the warm start in ``build`` to ``dest`` as a shipped checkpoint with its provenance.

    A joint warm start is one model: it is stored once (``dest/joint/``) and the provenance's
    ``agents`` table points every agent at it. The provenance records the command, the commit, the
    resolved config, the data seeds, the wall time, the held-out check and copy gate, the warm start it
    continued from (``init``: path and SHA-256 of its weights), and the SHA-256 of every file
    (:func:`harness.models.verify_checkpoint` checks them on every load)."""

    cfg = summary["config"]
    agents = list(cfg["agents"])
    folders = {a: ("joint" if cfg.get("joint") else a) for a in agents}
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    for agent, folder in folders.items():
        src = build / agent
        (tmp / folder).mkdir(parents=True, exist_ok=True)
        for name in SHIPPED_FILES:
            if (src / name).is_file() and not (tmp / folder / name).exists():
                shutil.copy2(src / name, tmp / folder / name)
    hashes = {p.relative_to(tmp).as_posix(): sha256_file(p) for p in sorted(tmp.rglob("*")) if p.is_file()}
    size = sum((tmp / rel).stat().st_size for rel in hashes)
    prov = {
        "command": " ".join(["python -m harness warmstart", *portable_argv(argv)]),
        "git": git_state(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "config": cfg,
        "data_seeds": {"world_seed (checked, never trained on when world_demos is false)": cfg["world_seed"],
                       "demo_world_seeds": f"harness.warmstart.demo_world_seed(world_seed, i) for i < {cfg['demo_worlds']}",
                       "seed (model init, data order, sampling)": cfg["seed"]},
        "wall_s": summary["stages"].get("total_s"),
        "stages": summary["stages"],
        "check": summary.get("check"),
        "copy_gate": {name: stats.get("copy_gate") for name, stats in summary["agents"].items()},
        "n_demo_tasks": summary["n_demo_tasks"], "n_demo_worlds": summary["n_demo_worlds"],
        # what a continuation (``init``) started from, by content: its rebuild needs that checkpoint unchanged
        **({"init": summary["init"]} if summary.get("init") else {}),
        "agents": folders,
        "bytes": size,
        "sha256": hashes,
        **{k: v for k, v in (extra or {}).items() if v is not None},
    }
    (tmp / PROVENANCE_FILE).write_text(json.dumps(prov, indent=2) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, dest)
    verify_checkpoint(dest)
    return prov


def config_differences(recorded: dict[str, Any], cfg: WarmstartConfig) -> dict[str, dict[str, Any]]:
    """Keys whose value in ``cfg`` differs from a build's recorded config (read through today's
    :class:`WarmstartConfig`, so a field the build predates counts with its default)."""
    then = to_dict(from_dict(WarmstartConfig, dict(recorded), "the recorded config"))
    now = to_dict(cfg)
    return {k: {"recorded": then.get(k), "command": now.get(k)} for k in sorted(set(then) | set(now))
            if json.dumps(then.get(k)) != json.dumps(now.get(k))}


def ship_existing_build(build: Path, dest: Path, cfg: WarmstartConfig, note: str | None, argv: list[str]) -> int:
    """``--from-build``: ship the finished build in ``build`` as :func:`ship_checkpoint` does after a build. The
    provenance's command is ``argv`` without ``--from-build``, ``--note`` and ``--out`` (the command that rebuilds
    it), so the command's config must equal the recorded one, or ``note`` must say why not (both then recorded)."""
    path = build / "warmstart.json"
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        summary = repr(exc)
    if not isinstance(summary, dict) or not {"config", "stages", "agents"} <= summary.keys():
        print(f"error: {path}: not a finished warm-start build (no config, stages and agents: {str(summary)[:200]})",
              file=sys.stderr)
        return 2
    recorded = summary["config"]
    diff = config_differences(recorded, cfg)
    if diff and not note:
        print(f"error: the command's config differs from the one {build / 'warmstart.json'} recorded: "
              f"{json.dumps(diff)}; ship with the command that built it, or explain the difference with --note",
              file=sys.stderr)
        return 2
    rebuild: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--out", "--note"):
            skip = True
            continue
        if arg == "--from-build" or arg.startswith(("--out=", "--note=")):
            continue
        rebuild.append(arg)
    summary["config"] = to_dict(cfg) if not diff else recorded
    prov = ship_checkpoint(build, dest, summary, rebuild,
                           extra={"shipped_from_build": build.name, "build_git": summary.get("git"), "note": note,
                                  "config_differences": diff or None})
    print(f"[warmstart] shipped {dest} from the build {build} ({prov['bytes'] / 1e6:.1f} MB, provenance.json)",
          flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness warmstart", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="model name/path (overrides the config)")
    ap.add_argument("--out", default=None, help="build directory (one sub-directory per agent; resumable SFT "
                    "checkpoints with save_steps); default runs/warmstart-<preset> with --preset")
    ap.add_argument("--config", default=None, help="YAML file with WarmstartConfig keys")
    ap.add_argument("--preset", default=None, help="a preset folder under baselines/configs/ (its warmstart.yaml), "
                    "e.g. tiny")
    ap.add_argument("--ship", default=None, metavar="DIR", help="also write the result as a shipped checkpoint "
                    "(one folder per model, provenance.json with hashes), e.g. baselines/checkpoints/tiny")
    ap.add_argument("--recheck", default=None, metavar="DIR", help="build nothing: rerun the greedy held-out check "
                    "recorded in DIR (a build folder or a shipped checkpoint) and compare it with the record")
    ap.add_argument("--from-build", action="store_true",
                    help="with --ship and --out: build nothing; ship the finished build in --out (its warmstart.json). "
                         "The config of --preset/--config and the overrides must be the one the build recorded, so "
                         "that the recorded command rebuilds it; differences are refused unless --note explains them")
    ap.add_argument("--note", default=None, help="with --from-build: a text kept in provenance.json (e.g. how a build "
                    "that was resumed under another config came about)")
    ap.add_argument("overrides", nargs="*", help="key=value overrides, e.g. noise=0.1 max_steps=50")
    args = ap.parse_args(argv)
    if args.recheck:
        try:
            result = recheck(Path(args.recheck))
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        for name in ("recorded", "rerun"):
            r = result[name]
            per = ", ".join(f"{b} {v['solved']}/{v['n']}" for b, v in sorted(r["per_benchmark"].items()))
            print(f"[recheck] {name}: solved {round(r['success'] * r['n_tasks'])}/{r['n_tasks']} ({per}), "
                  f"valid turns {r['valid_turns']:.1%}", flush=True)
        return 0
    overrides = list(args.overrides) + ([f"model={args.model}"] if args.model else [])
    if args.preset and args.config:
        ap.error("give --preset or --config, not both")
    config = args.config
    if args.preset:
        config = str(PRESETS_DIR / args.preset / "warmstart.yaml")
        if not Path(config).is_file():
            ap.error(f"--preset {args.preset}: no {config}")
    out = args.out or (f"runs/warmstart-{args.preset}" if args.preset else None)
    if out is None:
        ap.error("--out is required (or give --preset)")
    try:
        cfg = load_config(WarmstartConfig, config, overrides)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.from_build:
        if not (args.ship and args.out):
            ap.error("--from-build ships the build in --out: give --out BUILD and --ship DIR")
        return ship_existing_build(Path(out), Path(args.ship), cfg, args.note,
                                   list(sys.argv[1:] if argv is None else argv))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    summary = run_warmstart(cfg, Path(out))
    if args.ship:
        prov = ship_checkpoint(Path(out), Path(args.ship), summary, list(sys.argv[1:] if argv is None else argv))
        print(f"[warmstart] shipped {args.ship} ({prov['bytes'] / 1e6:.1f} MB, provenance.json)", flush=True)
    check = summary.get("check", {})
    print(json.dumps({"expert_demo_accuracy": summary["expert_demo_accuracy"], "check": check,
                      "stages": summary["stages"]}, indent=2))
    return 0
