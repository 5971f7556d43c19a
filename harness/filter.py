"""The stage-2 hard filter (paper §5; docs/training.md, "Two stages and the hard filter").

The paper trains stage 2 only on queries the system does not already solve. One filter serves every arm:
``python -m harness filter --config <a stage-2 config> --out DIR`` runs the system that config starts from
(``models.planner`` and ``models.sub``: the stage-1 checkpoint, or the untrained models) ``--k`` times on
each candidate training task (the config's task selection before the filter and ``tasks.limit``), scores
every answer with the benchmark's registered ``score`` (the one answer matcher of evaluation), and writes

* ``filter.jsonl``: one row per candidate task: ``task_id``, ``benchmark``, ``k``, ``solved``,
  ``success_rate``, ``predictions``;
* ``filter.json`` (written last: a folder without it is no filter): ``format``, the world (seed, size,
  page fingerprint) and the candidate selection, ``k``, temperature, seed, the system, the sha256 of
  ``filter.jsonl``, counts and seconds.

Every stage-2 config that names the folder (``tasks.hard_filter``) keeps the candidates solved in at most
``tasks.hard_filter_max_success`` of the attempts (:func:`harness.role.tasks.hard_filter`), so all arms
train on the identical list; a config whose candidates, world or filter version differ is refused.

``--expert NOISE`` scores the scripted expert (with that noise rate) instead of the models: a check of
the filter itself, and what its tests use to have a system that solves some tasks and not others.

Deliberate deviation: attempts are sampled at ``rollout.temperature`` (the paper does not say how its
filter decodes); ``--temperature`` overrides it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from baselines import get_trainer
from harness.config import ConfigError
from harness.records import write_json_atomic
from harness.role.common import build_toolbox, load_model_for, local_benchmarks, score_task
from harness.role.tasks import (
    FILTER_FILE,
    FILTER_FORMAT,
    FILTER_META,
    candidate_tasks,
    filter_selection,
    sha256_of,
    task_key,
    world_fingerprint,
    write_jsonl,
)
from harness.rollout import AgentRuntime, InProcessSubAgent, Query, SubAgentEngine, run_group
from harness.tools.reasoner import ReasonerClient
from harness.train_config import TrainConfig, load_train_config
from harness.world.expert import ExpertConfig, run_expert_episode
from harness.world.schemas import task_prompt
from harness.world.server import WorldServer
from harness.world.tasks import rebase


#: Candidate tasks answered in one batched ``run_group`` call (each with its ``k`` episodes).
BATCH_TASKS = 8


class ModelSystem:
    """The planner (+ sub-agent) a config starts from, answering ``k`` sampled episodes per task; the tasks of
    one call are generated together, batched per turn (``run_group``)."""

    def __init__(self, cfg: TrainConfig, toolbox: Any, rollout: Any):
        from harness.backends import HFBackend  # lazy: torch, only when models answer

        self.cfg, self.toolbox, self.rollout = cfg, toolbox, rollout
        planner, tok = load_model_for(cfg.models.planner, "planner", cfg)
        self.planner = AgentRuntime(HFBackend(planner, tok), tok)
        self.engine = None
        self.sub_agent = None
        self.reasoner = ReasonerClient.from_env() if cfg.tools.reasoner else None  # as the planner trains with it
        if get_trainer(cfg.trainer).delegates:
            sub, sub_tok = load_model_for(cfg.models.sub, "sub_agent", cfg)
            self.engine = SubAgentEngine(AgentRuntime(HFBackend(sub, sub_tok), sub_tok), toolbox, rollout, seed=cfg.seed)
            self.sub_agent = InProcessSubAgent(self.engine)
        self.describe = {"kind": "models", "trainer": str(cfg.trainer), "planner": cfg.models.planner,
                         "sub": cfg.models.sub if self.engine else None}

    def attempts(self, tasks: list[dict[str, Any]], questions: list[str]) -> list[list[str | None]]:
        kw = ({"sub_agent": self.sub_agent, "reasoner": self.reasoner} if self.sub_agent is not None
              else {"toolbox": self.toolbox})
        queries = [Query(task_key(t), q) for t, q in zip(tasks, questions)]
        res = run_group(queries, self.planner, self.rollout, seed=self.cfg.seed, **kw)
        answers: dict[str, list[str | None]] = {q.query_id: [] for q in queries}
        for ep in res.episodes:
            answers[ep.trajectory.query_id].append(ep.answer)
        return [answers[q.query_id] for q in queries]

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()


class ExpertSystem:
    """The scripted expert with noise ``noise``: ``k`` independent episodes per task (seeds ``seed..seed+k-1``)."""

    def __init__(self, noise: float, toolbox: Any, k: int, seed: int):
        self.noise, self.toolbox, self.k, self.seed = noise, toolbox, k, seed
        self.describe = {"kind": "expert", "noise": noise}

    def attempts(self, tasks: list[dict[str, Any]], questions: list[str]) -> list[list[str | None]]:
        return [[run_expert_episode(t, self.toolbox, seed=self.seed + i, config=ExpertConfig(noise=self.noise)).answer
                 for i in range(self.k)] for t in tasks]

    def close(self) -> None:
        pass


def run_filter(cfg: TrainConfig, out: Path, *, k: int, temperature: float | None = None,
               expert_noise: float | None = None) -> dict[str, Any]:
    """Score the system ``cfg`` starts from (or the scripted expert) ``k`` times on every candidate task of
    ``cfg`` and write the filter folder ``out``; returns its meta (``filter.json``)."""
    if k < 1:
        raise ConfigError(f"--k={k}: the filter needs at least one attempt per task")
    t0 = time.perf_counter()
    world, candidates, _ = candidate_tasks(cfg)
    temp = cfg.rollout.temperature if temperature is None else temperature
    rollout = replace(cfg.rollout, k=k, temperature=temp)
    rollout.validate()
    benches = local_benchmarks(cfg, candidates)
    out.mkdir(parents=True, exist_ok=True)
    (out / FILTER_META).unlink(missing_ok=True)  # written last: until then the folder is no filter
    rows = []
    with WorldServer(world) as server:
        toolbox = build_toolbox(cfg, server.base_url)
        system: Any = (ExpertSystem(expert_noise, toolbox, k, cfg.seed) if expert_noise is not None
                       else ModelSystem(cfg, toolbox, rollout))
        try:
            with tqdm(total=len(candidates), desc="hard filter", unit="task") as bar:
                for i in range(0, len(candidates), BATCH_TASKS):
                    batch = candidates[i: i + BATCH_TASKS]
                    questions = [task_prompt(rebase(t, cfg.world.address or server.base_url)) for t in batch]
                    for task, preds in zip(batch, system.attempts(batch, questions), strict=True):
                        # one answer matcher: the benchmark's registered score, as evaluation scores (an
                        # episode without an answer is an attempt that failed, never dropped)
                        verdicts = [score_task(benches, task, p) for p in preds]
                        solved = sum(bool(v.correct) for _, v in verdicts)
                        rows.append({"task_id": task_key(task), "benchmark": verdicts[0][0].name, "k": len(preds),
                                     "solved": solved, "success_rate": solved / max(1, len(preds)),
                                     "predictions": preds})
                    bar.update(len(batch))
        finally:
            system.close()
            toolbox.close()
    write_jsonl(out / FILTER_FILE, rows)
    meta = {"format": FILTER_FORMAT, **filter_selection(cfg), "k": k, "temperature": temp, "seed": cfg.seed,
            "system": system.describe, "sha256": sha256_of(out / FILTER_FILE), "n_tasks": len(rows),
            "n_solved_every_time": sum(r["solved"] == r["k"] for r in rows),
            "n_never_solved": sum(r["solved"] == 0 for r in rows),
            "seconds": round(time.perf_counter() - t0, 2),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    meta["world"]["fingerprint"] = world_fingerprint(world)
    write_json_atomic(out / FILTER_META, meta)
    return meta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m harness filter",
        description="Stage-2 hard filter: score the system a config starts from K times on each candidate "
                    "training task and write the success rates that every stage-2 arm's tasks.hard_filter reads "
                    "(docs/training.md, \"Two stages and the hard filter\").")
    ap.add_argument("--config", required=True, help="a training config (YAML): its world, task selection and "
                    "models (models.planner, models.sub) are the ones filtered with")
    ap.add_argument("--out", required=True, help="the filter folder to write (name it in tasks.hard_filter)")
    ap.add_argument("--k", type=int, default=4, help="attempts per task (default 4)")
    ap.add_argument("--temperature", type=float, default=None, help="sampling temperature (default: the config's "
                    "rollout.temperature)")
    ap.add_argument("--expert", type=float, default=None, metavar="NOISE",
                    help="score the scripted expert with this noise rate instead of the models")
    ap.add_argument("overrides", nargs="*", help="config overrides key.path=value")
    args = ap.parse_args(argv)
    try:
        cfg = load_train_config(args.config, args.overrides)
        if args.expert is not None and not 0.0 <= args.expert <= 1.0:
            raise ConfigError(f"--expert={args.expert}: a noise rate in [0, 1]")
        meta = run_filter(cfg, Path(args.out), k=args.k, temperature=args.temperature, expert_noise=args.expert)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    kept = sum(1 for line in (Path(args.out) / FILTER_FILE).read_text().splitlines()
               if json.loads(line)["success_rate"] <= cfg.tasks.hard_filter_max_success)
    print(f"[filter] {meta['n_tasks']} candidate tasks, {meta['k']} attempts each ({meta['seconds']:.0f} s): "
          f"{meta['n_solved_every_time']} solved every time, {meta['n_never_solved']} never; {kept} kept at "
          f"tasks.hard_filter_max_success={cfg.tasks.hard_filter_max_success}. Written to {args.out}; name it "
          f"in tasks.hard_filter of every stage-2 arm")
    return 0


if __name__ == "__main__":
    sys.exit(main())
