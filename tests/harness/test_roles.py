"""The roles of a decoupled run (harness/role/, docs/paper.md, docs/training.md), their prepared task set, and the trainer registry
(baselines).

The sub role's training path is exercised for real: a tiny-model sub-agent engine behind a real
``SubAgentServer`` (HTTP), the offline world served on 127.0.0.1, a sqlite store; this test plays
the planner (it sends the subtasks over HTTP and writes the rollout records) because an untrained
tiny planner almost never emits a valid ``delegate`` call.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from baselines import TRAINERS, get_trainer, register_trainer  # noqa: E402
from harness.config import ConfigError, from_dict  # noqa: E402
from harness.records import read_steps  # noqa: E402
from harness.train_config import TrainConfig  # noqa: E402


# ------------------------------------------------------------------------------- registry
def test_registry_says_which_roles_each_trainer_needs():
    assert set(TRAINERS) == {"single_agent", "frozen_sub", "mgrpo"}
    assert TRAINERS["single_agent"].roles == ("planner",) and not TRAINERS["single_agent"].delegates
    assert TRAINERS["frozen_sub"].has_sub and not TRAINERS["frozen_sub"].sub_trains
    assert TRAINERS["mgrpo"].has_sub and TRAINERS["mgrpo"].sub_trains and TRAINERS["mgrpo"].delegates
    assert TRAINERS["mgrpo"].roles[0] == "sub"  # the service starts before the planner calls it
    with pytest.raises(KeyError, match="registered trainers"):
        get_trainer("ppo")
    with pytest.raises(ValueError, match="registered twice"):
        register_trainer("mgrpo", description="x", roles=("planner",), planner_agent="single_agent",
                         sub_trains=False)(type("X", (), {}))
    with pytest.raises(ValueError, match="sub"):
        register_trainer("broken", description="x", roles=("planner",), planner_agent="planner",
                         sub_trains=False)(type("Y", (), {}))
    assert "broken" not in TRAINERS


# ------------------------------------------------------------------------------- helpers
def test_subtask_text_and_r_expert():
    from harness.role.sub import r_expert, subtask_text
    from harness.rollout import Trajectory

    traj = Trajectory(agent="sub_agent", query_id="q", rollout=0, call=0, prompt_ids=[1],
                      messages=[{"role": "system", "content": "s"},
                                {"role": "user", "content": "Task: Find the maker of Reastai Duo.\nContext: x y"}],
                      final="The maker is Kretrair Partners.")
    assert subtask_text(traj) == "Find the maker of Reastai Duo."
    task = {"gold": {"subtasks": [
        {"kind": "lookup", "task": "Find the maker of {f}.", "answer": "Kretrair Partners"},
        {"kind": "lookup", "task": "Find the chief executive of {r0}.", "answer": "Saigeath Gukaglio"}]}}
    assert r_expert(task, traj) == 1.0
    traj.final = "I do not know."
    assert r_expert(task, traj) == 0.0
    traj.final = None
    assert r_expert(task, traj) == 0.0


def test_r_expert_can_judge_the_subtask_as_delegated():
    """``rewards.sub_expert_reference: delegated`` (docs/paper.md, Rewards): a sub-agent that answers a wrongly
    delegated subtask correctly scores 1 against the subtask as delegated and 0 against the gold path; where the
    delegated text has no gold of its own (not in the subtask language), the gold path judges as before.
    :class:`DelegatedGold` solves the text in the run's world at the agents' address, once per text."""
    from harness.role.sub import DelegatedGold, r_expert
    from harness.rollout import Trajectory
    from harness.world.generator import generate_world
    from harness.world.tasks import TaskConfig, generate_tasks

    cfg = from_dict(TrainConfig, {"trainer": "mgrpo", "world": {"seed": 0, "size": "tiny", "address": "http://world.local"},
                                  "rollout": {"k": 2}, "alignment": {"d": 1},
                                  "planner": {"max_steps": 1, "groups_per_step": 1},
                                  "rewards": {"sub_expert_reference": "delegated"}})
    world = generate_world(seed=0, size="tiny")
    task = next(t for t in generate_tasks(world, TaskConfig(n_train=60, n_test=0)).all()
                if t["gold"]["template"] == "gaia.person.birth_city")
    person = task["gold"]["subtasks"][0]["subject"]
    born = next(f.value for f in world.facts if f.relation == "birth_year" and world.entities[f.subject].name == person)
    reference = DelegatedGold(cfg, "http://127.0.0.1:1")
    traj = Trajectory(agent="sub_agent", query_id="q", rollout=0, call=0, prompt_ids=[1],
                      messages=[{"role": "user", "content": f"Task: Find the birth year of {person}."}],
                      final=f"{person} was born in {born}.")
    assert r_expert(task, traj) == 0.0  # the gold path asks for the birthplace
    assert r_expert(task, traj, reference) == 1.0  # ... but the sub-agent did what it was asked
    traj.final = task["gold"]["answer"]  # the birthplace, which is not what it was asked
    assert r_expert(task, traj, reference) == 0.0
    traj.messages = [{"role": "user", "content": "Task: Tell me about " + person + "."}]  # no subtask of its own
    assert r_expert(task, traj, reference) == r_expert(task, traj) == 1.0  # the gold path's subtask
    assert set(reference.cache) == {f"Find the birth year of {person}.", "Tell me about " + person + "."}
    assert not reference.toolbox.calls


def test_step_lock_blocks_other_holders_until_released():
    from harness.role.sub import StepLock

    lock = threading.Lock()
    sl = StepLock(lock)
    sl.hold()
    sl.hold()  # idempotent within a step
    got = []
    t = threading.Thread(target=lambda: (lock.acquire(), got.append(time.perf_counter()), lock.release()))
    t.start()
    time.sleep(0.2)
    assert not got, "a sub-agent request ran while the optimizer step held the lock"
    released = time.perf_counter()
    sl.release()
    t.join(5)
    assert got and got[0] >= released
    sl.release()  # idempotent


# ------------------------------------------------------------------------------- sub role
def _cfg(tmp_path, mode: str = "query", **over) -> TrainConfig:
    data = {
        "trainer": "mgrpo", "seed": 3, "threads": 1,
        "world": {"seed": 0, "size": "tiny"}, "tasks": {"n_train": 4, "n_test": 1},
        "rollout": {"k": 2, "planner_turns": 2, "sub_turns": 2, "max_new_tokens": 12, "context_tokens": 2048},
        "tools": {"visit_backend": "direct", "max_chars": 400},
        "alignment": {"d": 2, "mode": mode},
        "planner": {"max_steps": 2, "groups_per_step": 1, "learning_rate": 1e-3},
        "sub": {"learning_rate": 1e-3},
        "store": {"group_timeout_s": 60},
    }
    for key, value in over.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return from_dict(TrainConfig, data)


def test_world_address_is_what_the_agents_see_in_tasks_search_and_pages(tmp_path):
    """``world.address`` (issue 8): the stable address of the warm-start demonstrations in the question,
    the search results and the pages, whatever port the world server got; visits reach the live server."""
    from harness.role.common import build_toolbox
    from harness.role.planner import PlannerRollout
    from harness.role.tasks import generate_run_tasks
    from harness.world.generator import generate_world
    from harness.world.server import WorldServer

    cfg = _cfg(tmp_path, world={"address": "http://world.local"}, tasks={"benchmarks": ["webwalkerqa"]})
    with WorldServer(generate_world(seed=0, size="tiny")) as world:
        toolbox = build_toolbox(cfg, world.base_url)
        try:
            hits = toolbox.call("search", {"query": "founded"})
            url = hits.split("URL: ", 1)[1].split()[0]
            assert url.startswith("http://world.local/") and world.base_url not in hits
            page = toolbox.call("visit", {"url": url})
            assert not page.startswith("Error") and world.base_url not in page
        finally:
            toolbox.close()
        tasks = generate_run_tasks(cfg).by_id()
        task = next(iter(tasks.values()))
        question = PlannerRollout(cfg, tasks, None, world.base_url, None, None, None, {}).question(task)
        assert "Start from this website: http://world.local/" in question, question
        # without an address the agents see the live server (the old behaviour, still the default)
        plain = _cfg(tmp_path, tasks={"benchmarks": ["webwalkerqa"]})
        assert world.base_url in PlannerRollout(plain, tasks, None, world.base_url, None, None, None,
                                                {}).question(task)


# ------------------------------------------------------------------------------- task set
ROOT = Path(__file__).resolve().parents[2]
TINY_PRESETS = sorted(p for p in (ROOT / "baselines" / "configs" / "tiny").glob("*.yaml")
                      if p.name != "warmstart.yaml" and not p.name.startswith("_"))


def _selected_at_role_start_up(cfg: TrainConfig):
    """What each role selected at start-up before task sets existed (harness/role.py ``load_tasks`` until
    issue 15; stage 2's hard filter aside): the reference the prepared task set must equal, task for task."""
    from harness.world.generator import generate_world
    from harness.world.schemas import task_id
    from harness.world.tasks import TaskConfig, generate_tasks, select_tasks

    world = generate_world(seed=cfg.world.seed, size=cfg.world.size)
    taskset = generate_tasks(world, TaskConfig(n_train=cfg.tasks.n_train, n_test=cfg.tasks.n_test,
                                               test_fraction=cfg.tasks.test_fraction))
    other = "test" if cfg.tasks.split == "train" else "train"

    def selected(split: str) -> list:
        tasks = [t for b in cfg.tasks.benchmarks for t in taskset.tasks.get((b, split), [])]
        return select_tasks(tasks, max_hops=cfg.tasks.max_hops, templates=cfg.tasks.templates)

    train = selected(cfg.tasks.split)
    if cfg.tasks.limit is not None:
        train = train[: cfg.tasks.limit]
    evals = [t for b in cfg.tasks.benchmarks for t in select_tasks(
        taskset.tasks.get((b, other), []), max_hops=cfg.tasks.max_hops, templates=cfg.tasks.templates)[: cfg.eval.n_tasks]]
    return {task_id(t): t for t in train}, evals


def test_the_prepared_task_set_is_what_the_roles_selected_before(tmp_path):
    """Same tasks, same order, for every tiny preset (and a selection that uses every knob but the hard filter),
    after the trip through the files the roles read."""
    from harness.role.common import load_role_config
    from harness.role.tasks import generate_run_tasks, read_run_tasks, selection, write_run_tasks

    cfgs = {}
    for path in TINY_PRESETS:
        cfg = load_role_config(str(path), [])
        cfgs.setdefault(json.dumps(selection(cfg), sort_keys=True), (path.name, cfg))  # presets sharing one
    knobs = {"n_train": 8, "n_test": 3, "max_hops": 1, "limit": 5, "split": "test", "benchmarks": ["xbench", "gaia"]}
    cfgs["knobs"] = ("knobs", _cfg(tmp_path, tasks=knobs, eval={"n_tasks": 2}))
    assert len(TINY_PRESETS) >= 3 and len(cfgs) >= 2
    for name, cfg in cfgs.values():
        out = tmp_path / name
        write_run_tasks(out, generate_run_tasks(cfg))
        got = read_run_tasks(out, cfg)
        train, evals = _selected_at_role_start_up(cfg)
        assert list(got.by_id()) == list(train) and got.by_id() == train, name  # order and content
        assert got.evals == evals, name
        assert got.meta["n_train"] == len(train) > 0 and got.meta["world"] == {
            "seed": cfg.world.seed, "size": cfg.world.size, "fingerprint": got.meta["world"]["fingerprint"]}
        assert sorted(p.name for p in out.iterdir()) == ["eval.jsonl", "taskset.json", "train.jsonl"]


def test_a_role_refuses_a_missing_edited_or_foreign_task_set(tmp_path):
    from harness.role.tasks import TaskSetError, generate_run_tasks, read_run_tasks, write_run_tasks

    cfg = _cfg(tmp_path)
    out = tmp_path / "tasks"
    with pytest.raises(TaskSetError, match=r"no prepared task set in .*python -m harness\.role\.tasks --config"):
        read_run_tasks(out, cfg)
    prepared = generate_run_tasks(cfg)
    write_run_tasks(out, prepared)
    assert read_run_tasks(out, cfg).train == prepared.train
    with pytest.raises(TaskSetError, match=r"world\.seed: 0 in the task set, 1 in the config"):
        read_run_tasks(out, _cfg(tmp_path, world={"seed": 1}))
    with pytest.raises(TaskSetError, match=r"tasks\.max_hops: None in the task set, 1 in the config"):
        read_run_tasks(out, _cfg(tmp_path, tasks={"max_hops": 1}))
    with pytest.raises(TaskSetError, match=r"eval_n_tasks: 5 in the task set, 2 in the config"):
        read_run_tasks(out, _cfg(tmp_path, eval={"n_tasks": 2}))
    lines = (out / "train.jsonl").read_text().splitlines(keepends=True)
    (out / "train.jsonl").write_text("".join(lines[:-1]))
    with pytest.raises(TaskSetError, match=r"train\.jsonl does not match the sha256"):
        read_run_tasks(out, cfg)
    (out / "taskset.json").unlink()  # what a write cut before its end leaves: no task set
    with pytest.raises(TaskSetError, match="no prepared task set"):
        read_run_tasks(out, cfg)


def test_the_launcher_prepares_the_task_set_once_and_refuses_a_foreign_one_on_resume(tmp_path, capsys, monkeypatch):
    import yaml

    import harness.train as train
    from harness.config import to_dict
    from harness.role.tasks import TaskSetError, read_run_tasks, write_run_tasks

    cfg = _cfg(tmp_path)
    run = tmp_path / "run"
    prepared, reused = train.prepare_tasks(cfg, run, resume=False)
    assert not reused and not run.exists()  # prepared before the run directory exists; launch() writes it
    write_run_tasks(run / "tasks", prepared)
    again, reused = train.prepare_tasks(cfg, run, resume=True)
    assert reused and again.train == prepared.train and again.evals == prepared.evals
    meta_path = run / "tasks" / "taskset.json"
    meta = json.loads(meta_path.read_text())
    (run / "tasks" / "taskset.json").unlink()  # a run made before task sets (or killed while preparing)
    fresh, reused = train.prepare_tasks(cfg, run, resume=True)
    assert not reused and fresh.train == prepared.train
    meta_path.write_text(json.dumps(dict(meta, world=dict(meta["world"], fingerprint="0" * 64))))
    with pytest.raises(TaskSetError, match="another world than the one this code generates"):
        train.prepare_tasks(cfg, run, resume=True)  # the generator changed since the run started
    meta_path.write_text(json.dumps(meta))
    assert read_run_tasks(run / "tasks", cfg).train == prepared.train

    # --resume of a run whose config.yaml was edited to another world: one line, exit 2, nothing started
    other = _cfg(tmp_path, world={"seed": 1})
    (run / "config.yaml").write_text(yaml.safe_dump(to_dict(other), sort_keys=False))
    monkeypatch.setattr(train, "launch", lambda *a, **k: pytest.fail("launched a run whose task set does not match"))
    assert train.main(["--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: task set {run / 'tasks'} was prepared for another world") and err.count("\n") == 1
    assert "world.seed: 0 in the task set, 1 in the config" in err
    assert not (run / "status.json").exists()


def test_a_role_reads_its_task_set_before_anything_else(tmp_path):
    """Start-up is forward only (config -> task set -> models -> tools -> trainer): without a task set the role
    stops with a one-line error before it imports torch or loads a model."""
    import subprocess
    import sys

    import yaml

    from harness.config import to_dict

    cfg_path = tmp_path / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(to_dict(_cfg(tmp_path)), sort_keys=False))
    code = ("import sys; from harness.role.__main__ import main; rc = main(sys.argv[1:]); "
            "print('rc', rc, 'torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code, "--role", "planner", "--config", str(cfg_path), "--run-dir",
                           str(tmp_path / "run"), "--world-url", "http://127.0.0.1:9"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "rc 2 False", proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"error: no prepared task set in {tmp_path / 'run' / 'tasks'}"), proc.stderr


def test_a_role_that_cannot_reach_its_servers_says_which_address_failed(tmp_path):
    """The sub role checks the world server before it loads a model, the planner the sub-agent service: an address
    nothing answers is one line naming it, exit status 4, within the budget (docs/training.md)."""
    import socket
    import subprocess
    import sys
    import time

    import yaml

    from harness.config import to_dict
    from harness.role.tasks import generate_run_tasks, write_run_tasks

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    cfg = _cfg(tmp_path, store={"group_timeout_s": 60, "retry_s": 2}, service={"startup_timeout_s": 2})
    cfg_path = tmp_path / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
    write_run_tasks(tmp_path / "run" / "tasks", generate_run_tasks(cfg))
    base = [sys.executable, "-m", "harness.role", "--config", str(cfg_path), "--run-dir", str(tmp_path / "run")]
    for role, extra, what in (("sub", ["--world-url", dead], "the world server"),
                              ("planner", ["--world-url", dead, "--sub-url", dead], "the sub-agent service")):
        t0 = time.monotonic()
        proc = subprocess.run([*base, "--role", role, *extra], cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 4, proc.stderr[-3000:]
        line = proc.stderr.strip().splitlines()[-1]
        assert line.startswith(f"error: the {role} role cannot reach {what} at {dead}") and "within 2 s" in line, line
        assert time.monotonic() - t0 < 120


@pytest.fixture()
def sub_setup(tmp_path):
    import torch

    torch.set_num_threads(1)
    from harness.role.common import build_toolbox, load_model_for
    from harness.role.tasks import generate_run_tasks
    from harness.rollout import AgentRuntime, SubAgentEngine
    from harness.backends import HFBackend
    from harness.subagent_service import SubAgentServer
    from harness.world.generator import generate_world
    from harness.world.server import WorldServer
    from mgrpo.store import open_store

    def make(mode: str = "query", **over):
        cfg = _cfg(tmp_path, mode, **over)
        world = WorldServer(generate_world(seed=0, size="tiny")).start()
        toolbox = build_toolbox(cfg, world.base_url)
        model, tok = load_model_for("tiny", "sub_agent", cfg)
        from harness.role.sub import serving_model

        engine = SubAgentEngine(AgentRuntime(HFBackend(serving_model(model, cfg), tok), tok), toolbox, cfg.rollout,
                                seed=1)
        server = SubAgentServer(engine).start()
        run_dir = tmp_path / "run"
        run_dir.mkdir(exist_ok=True)
        store = open_store(f"sqlite:///{run_dir / 'store.db'}", run_id="run")
        tasks = generate_run_tasks(cfg).by_id()
        cleanup.extend([server.stop, world.stop, toolbox.close, store.close])
        return cfg, run_dir, store, server, model, tok, tasks

    cleanup: list = []
    yield make
    for fn in cleanup:
        fn()


def _play_planner(cfg, store, server, tasks, qid: str, calls_per_rollout: list[int], correct: list[float]):
    """Send the delegations of one query's K rollouts over HTTP and write its store records."""
    from harness.rollout import SubTask
    from harness.subagent_service import HTTPSubAgentClient
    from mgrpo.store import RolloutRecord, SubCallRecord

    task_id = sorted(tasks)[0]
    gold = tasks[task_id]["gold"]["subtasks"]
    subtasks = [SubTask(qid, r, c, gold[c % len(gold)]["task"], "")
                for r, n in enumerate(calls_per_rollout) for c in range(n)]
    results = HTTPSubAgentClient(server.url).run(subtasks) if subtasks else []
    for res in results:
        store.upsert_sub_call(SubCallRecord(qid, res.rollout, res.call, policy_version=res.policy_version,
                                            r_format=float(res.format_ok)))
    records = [RolloutRecord(qid, r, R_M=0.0, r_correct=correct[r], r_format=1.0, sub_call_ids=list(range(n)),
                             extra={"task_id": task_id}) for r, n in enumerate(calls_per_rollout)]
    store.upsert_rollouts(records, group_size=cfg.k)
    return results


def test_sub_role_trains_on_aligned_groups_from_store_and_buffer(sub_setup):
    from harness.role.common import PLANNER_DONE, StepStats
    from harness.role.sub import build_sub_trainer

    cfg, run_dir, store, server, model, tok, tasks = sub_setup("query")
    # Query A: rollout 0 made 3 calls (> d = 2: one dropped), rollout 1 made none (filled from rollout 0).
    res_a = _play_planner(cfg, store, server, tasks, "qa@0.0.0", [3, 0], [1.0, 0.0])
    # Query B: no rollout called the sub-agent -> no sub-agent group (skipped, counted).
    _play_planner(cfg, store, server, tasks, "qb@0.0.1", [0, 0], [0.0, 0.0])
    # Query C: 1 call and 1 call (each duplicated once).
    _play_planner(cfg, store, server, tasks, "qc@1.0.0", [1, 1], [0.0, 1.0])
    store.put_stat(PLANNER_DONE, {"step": 2})
    assert len(server._trajectories) == 5  # the trajectories stayed in the sub role's process

    trainer = build_sub_trainer(cfg, run_dir, store, server, model, tok, tasks, run_dir / "sub" / "checkpoints",
                                StepStats())
    assert trainer.args.num_generations == cfg.alignment.d * cfg.k == 4
    trainer.train()
    assert trainer.state.global_step == 2

    recs = read_steps(run_dir / "sub" / "metrics.jsonl").records
    assert [r.step for r in recs] == [1, 2]
    assert [r.n_trajectories for r in recs] == [4, 4]
    # A: rollout 0 keeps 2 of 3 (1 dropped), rollout 1 gets 2 duplicates; C: 1 duplicate each.
    assert (recs[0].align_dropped, recs[0].align_duplicated) == (1, 2)
    assert (recs[1].align_dropped, recs[1].align_duplicated) == (0, 2)
    assert recs[1].extra["empty_groups"] == 1  # query B
    # staleness: every trajectory was generated by policy version 0; step 2 trains with version 1's weights
    assert (recs[0].stale_trajectories, recs[1].stale_trajectories) == (0, 4)
    assert recs[1].dropped_stale == 0 and recs[1].extra["max_policy_lag"] == 1 and recs[1].extra["corrected"] == 0
    # R_S of query A's items: format 0 -> 0; else 0.1 + 0.4 * r_correct(rollout 0 = 1) + 0.5 * expert.
    ok_a = [r.format_ok for r in res_a]
    assert recs[0].reward_components["correct"] == pytest.approx(1.0)  # every slot holds a rollout-0 trajectory
    if not any(ok_a):
        assert recs[0].reward_mean == pytest.approx(0.0)
    assert all(r.wait_s is not None and r.train_s > 0 for r in recs)
    # Policy versions bumped (engine and store), every taken group acknowledged.
    assert server.engine.runtime.policy_version == 2 and store.get_policy_version("sub") == 2
    assert store.pending_groups() == []
    assert [c.query_id for c in store.consumed_groups()] == ["qa@0.0.0", "qb@0.0.1", "qc@1.0.0"]
    assert not trainer.step_lock.held and server.lock.acquire(timeout=1)
    server.lock.release()


@pytest.mark.parametrize("bound, dropped, corrected", [(0, 4, 0), (1, 0, 4)])
def test_sub_trajectories_staler_than_max_staleness_leave_the_loss_and_the_rest_are_corrected(sub_setup, bound,
                                                                                              dropped, corrected):
    """Issue 17: step 2 trains a group generated before step 1's update (lag 1). With sub.max_staleness=0 it
    trains with loss weight 0 (counted); with 1 it trains, importance-corrected against the behaviour policy
    (sub.old_logprobs=behaviour)."""
    from harness.role.common import PLANNER_DONE, StepStats
    from harness.role.sub import build_sub_trainer

    cfg, run_dir, store, server, model, tok, tasks = sub_setup(
        "query", sub={"learning_rate": 1e-3, "max_staleness": bound, "old_logprobs": "behaviour"})
    _play_planner(cfg, store, server, tasks, "qa@0.0.0", [1, 1], [1.0, 0.0])
    _play_planner(cfg, store, server, tasks, "qc@1.0.0", [1, 1], [0.0, 1.0])
    store.put_stat(PLANNER_DONE, {"step": 2})
    batches = []
    trainer = build_sub_trainer(cfg, run_dir, store, server, model, tok, tasks, run_dir / "sub" / "checkpoints",
                                StepStats())
    assert trainer.args.old_logprobs == "behaviour"
    trainer.on_batch = batches.append
    trainer.train()
    recs = read_steps(run_dir / "sub" / "metrics.jsonl").records
    assert [(r.stale_trajectories, r.dropped_stale) for r in recs] == [(0, 0), (4, dropped)]
    assert [b.batch["loss_weight"].tolist() for b in batches] == [[1.0] * 4, [0.0 if dropped else 1.0] * 4]
    assert recs[1].extra["corrected"] == corrected and recs[0].extra["max_policy_lag"] == 0
    assert "sampling_per_token_logps" in batches[1].batch  # the behaviour policy the ratio is taken against
    # step 1's group was generated by the weights it trains (lag 0): the behaviour log-probabilities recorded
    # by the HF backend equal the trainer's recomputation, so the ratio is 1
    ratios = [h["ratio_mean"] for h in trainer.state.log_history if "ratio_mean" in h]
    assert ratios[0] == pytest.approx(1.0, abs=1e-3), ratios


def test_a_bad_max_staleness_is_a_clear_error():
    with pytest.raises(ConfigError, match=r"max_staleness=-1 must be >= 0"):
        _cfg(Path("."), sub={"max_staleness": -1})


def test_max_lag_is_validated_against_the_group_sets_it_counts():
    with pytest.raises(ConfigError, match=r"max_lag=-1 must be >= 0"):
        _cfg(Path("."), sub={"max_lag": -1})
    with pytest.raises(ConfigError, match=r"sub.max_lag=1 counts the sub role's steps.*sub.groups_per_step=2"):
        _cfg(Path("."), planner={"max_steps": 4, "groups_per_step": 1}, sub={"max_lag": 1, "groups_per_step": 2}).validate()
    _cfg(Path("."), sub={"max_lag": 1}).validate()


def _complete_groups(store, step: int, n: int = 2, k: int = 2) -> list[str]:
    from mgrpo.store import RolloutRecord

    qids = [f"t{i}@{step}.0.{i}" for i in range(n)]
    store.upsert_rollouts([RolloutRecord(q, r, R_M=0.0, r_correct=0.0, r_format=1.0) for q in qids for r in range(k)],
                          group_size=k)
    return qids


def test_the_planner_waits_for_the_sub_role_to_be_at_most_max_lag_steps_behind(tmp_path):
    """sub.max_lag (issue 21): planner step t waits until the sub role has published policy version t - max_lag;
    not while the sub role has taken every complete group (it waits for the planner then: no deadlock); a sub role
    that does neither within the timeout is an error naming it."""
    from harness.role.common import PeerUnreachable
    from harness.role.planner import untaken_groups, wait_for_sub
    from mgrpo.store import open_store

    store = open_store(f"sqlite:///{tmp_path / 'store.db'}", run_id="run")
    try:
        _complete_groups(store, 0)
        _complete_groups(store, 1)
        assert untaken_groups(store) == 4 and store.get_policy_version("sub") == 0
        assert wait_for_sub(store, step=1, max_lag=1, timeout_s=5) < 0.1  # needs version 0: no wait

        def train_one_step():
            time.sleep(0.4)
            store.set_policy_version("sub", 1)

        t = threading.Thread(target=train_one_step)
        t.start()
        waited = wait_for_sub(store, step=2, max_lag=1, timeout_s=5)  # needs version 1
        t.join()
        assert waited >= 0.35, waited
        with pytest.raises(PeerUnreachable, match=r"planner step 3: the sub role is at policy version 1 and "
                                                  r"sub.max_lag=1 needs 2.*4 complete groups waiting.*sub.log"):
            wait_for_sub(store, step=3, max_lag=1, timeout_s=0.3)
        for _ in range(4):  # the sub role takes every group (and would wait for more): the planner goes on
            store.take_next_group(timeout=1.0)
        assert untaken_groups(store) == 0
        assert wait_for_sub(store, step=3, max_lag=1, timeout_s=5) < 0.1
        assert wait_for_sub(store, step=5, max_lag=0, timeout_s=5) < 0.1
    finally:
        store.close()


def test_a_sub_agent_request_waiting_on_the_step_lock_cannot_cost_a_step_its_record(sub_setup):
    """A sub-agent episode switches the shared model to eval mode while it generates, and TRL files a step's
    metrics under train or eval by that mode: the step lock may only let a waiting request in once TRL has
    logged the step (it was released at on_step_end, and tests/harness/test_resume.py once lost a step record)."""
    from harness.role.common import PLANNER_DONE, StepStats
    from harness.role.sub import build_sub_trainer

    cfg, run_dir, store, server, model, tok, tasks = sub_setup("query")
    _play_planner(cfg, store, server, tasks, "qa@0.0.0", [1, 1], [1.0, 0.0])
    _play_planner(cfg, store, server, tasks, "qc@1.0.0", [1, 1], [0.0, 1.0])
    store.put_stat(PLANNER_DONE, {"step": 2})
    trainer = build_sub_trainer(cfg, run_dir, store, server, model, tok, tasks, run_dir / "sub" / "checkpoints",
                                StepStats())
    release = trainer.step_lock.release

    def release_to_a_waiting_request() -> None:  # the worst interleaving: the request starts generating at once
        held = trainer.step_lock.held
        release()
        if held:
            model.eval()

    trainer.step_lock.release = release_to_a_waiting_request
    trainer.train()
    assert [r.step for r in read_steps(run_dir / "sub" / "metrics.jsonl").records] == [1, 2]


@pytest.mark.parametrize("serve", ["locked", "snapshot"])
def test_with_snapshot_serving_the_service_answers_during_an_optimizer_step(sub_setup, serve):
    """sub.serve (docs/performance.md): ``locked`` holds the service across each optimizer step; ``snapshot``
    answers a request sent in the middle of a step (after the backward pass) from its copy of the weights, labelled
    with the version before the step, and copies the new weights in after the step."""
    import torch

    from harness.role.common import PLANNER_DONE, StepStats, trainer_callback_base
    from harness.role.sub import build_sub_trainer
    from harness.rollout import SubTask
    from harness.subagent_service import HTTPSubAgentClient

    cfg, run_dir, store, server, model, tok, tasks = sub_setup("query", sub={"learning_rate": 1e-3, "serve": serve})
    _play_planner(cfg, store, server, tasks, "qa@0.0.0", [1, 1], [1.0, 0.0])
    _play_planner(cfg, store, server, tasks, "qc@1.0.0", [1, 1], [0.0, 1.0])
    store.put_stat(PLANNER_DONE, {"step": 2})
    trainer = build_sub_trainer(cfg, run_dir, store, server, model, tok, tasks, run_dir / "sub" / "checkpoints",
                                StepStats())
    seen = []

    class MidStep(trainer_callback_base()):
        def on_pre_optimizer_step(self, args, state, control, **kw):
            held = trainer.step_lock.held
            answer = None
            if not held:  # with the lock held a request would wait for the step: not sent
                task = tasks[sorted(tasks)[0]]["gold"]["subtasks"][0]["task"]
                answer = HTTPSubAgentClient(server.url, timeout_s=60, retries=0).run([SubTask("mid", 0, 0, task, "")])
            seen.append((state.global_step, held, answer))

    trainer.add_callback(MidStep())
    trainer.train()
    assert [r.step for r in read_steps(run_dir / "sub" / "metrics.jsonl").records] == [1, 2]
    serving = server.engine.runtime.backend.model
    if serve == "locked":
        assert [(s, held) for s, held, _ in seen] == [(0, True), (1, True)] and serving is model
    else:
        assert [(s, held) for s, held, _ in seen] == [(0, False), (1, False)] and serving is not model
        assert [a[0].policy_version for _, _, a in seen] == [0, 1]  # the weights before each step
        assert all(torch.equal(a, b) for a, b in zip(serving.parameters(), model.parameters()))  # refreshed
    assert server.engine.runtime.policy_version == 2 and store.get_policy_version("sub") == 2


def test_snapshot_serving_with_vllm_is_a_clear_error():
    with pytest.raises(ConfigError, match=r"serve=snapshot needs the in-process hf backend"):
        _cfg(Path("."), sub={"serve": "snapshot", "vllm_url": "http://127.0.0.1:8000"})


def test_sub_role_alignment_none_uses_fifo_chunks_across_queries(sub_setup):
    from harness.role.checkpoints import STORE_POSITION_FILE, checkpoint_complete
    from harness.role.common import PLANNER_DONE, StepStats
    from harness.role.sub import build_sub_trainer

    cfg, run_dir, store, server, model, tok, tasks = sub_setup("none")
    _play_planner(cfg, store, server, tasks, "qa@0.0.0", [1, 0], [1.0, 0.0])
    _play_planner(cfg, store, server, tasks, "qb@0.0.1", [2, 1], [0.0, 1.0])
    store.put_stat(PLANNER_DONE, {"step": 1})
    stats = StepStats()
    ckpts = run_dir / "sub" / "checkpoints"
    trainer = build_sub_trainer(cfg, run_dir, store, server, model, tok, tasks, ckpts, stats)
    # 4 sub-trajectories = one chunk of d*K = 4; the second step has none: the planner is done, so the role
    # stops early with a full checkpoint of step 1 (no save step: save_steps follows max_steps = 2)
    assert trainer.train_until_planner_done() == 1
    assert not trainer.step_lock.held and server.lock.acquire(timeout=1)
    server.lock.release()
    assert checkpoint_complete(ckpts / "checkpoint-1", (STORE_POSITION_FILE,))
    assert {"optimizer.pt", "scheduler.pt", "model.safetensors"} <= {p.name for p in (ckpts / "checkpoint-1").iterdir()}
    assert store.pending_groups() == [] and all(c.state == "done" for c in store.consumed_groups())
    recs = read_steps(run_dir / "sub" / "metrics.jsonl").records
    assert len(recs) == 1 and recs[0].n_trajectories == 4
    assert recs[0].align_duplicated is None  # no alignment in the ablation
    assert recs[0].extra["alignment"] == "none"
    # The chunk mixes both queries in arrival order: qa's call, then qb's three.
    assert recs[0].reward_components["correct"] == pytest.approx((1.0 + 0.0 + 0.0 + 1.0) / 4)


def test_sub_role_alignment_none_with_a_smaller_chunk_trains_a_step_per_chunk(sub_setup):
    """``alignment.chunk: 2`` (docs/training.md): the same 4 sub-trajectories as above make two FIFO chunks of 2,
    so the sub-agent trains two steps (d*K = 4 gave it one), each on 2 sub-trajectories of mixed queries."""
    from harness.role.common import PLANNER_DONE, StepStats
    from harness.role.sub import build_sub_trainer

    cfg, run_dir, store, server, model, tok, tasks = sub_setup("none", alignment={"chunk": 2})
    assert cfg.sub_group_size == 2
    _play_planner(cfg, store, server, tasks, "qa@0.0.0", [1, 0], [1.0, 0.0])
    _play_planner(cfg, store, server, tasks, "qb@0.0.1", [2, 1], [0.0, 1.0])
    store.put_stat(PLANNER_DONE, {"step": 1})
    trainer = build_sub_trainer(cfg, run_dir, store, server, model, tok, tasks, run_dir / "sub" / "checkpoints",
                                StepStats())
    assert trainer.train_until_planner_done() == 2
    recs = read_steps(run_dir / "sub" / "metrics.jsonl").records
    assert [(r.step, r.n_trajectories, r.extra["alignment"]) for r in recs] == [(1, 2, "none"), (2, 2, "none")]
    # arrival order: qa's call (correct 1.0) and qb's first (0.0), then qb's other two (0.0, 1.0)
    assert [r.reward_components["correct"] for r in recs] == [pytest.approx(0.5), pytest.approx(0.5)]
    assert store.pending_groups() == [] and all(c.state == "done" for c in store.consumed_groups())


def test_restarted_sub_role_trains_a_redelivered_group_from_its_spool(sub_setup, tmp_path):
    """Kill after taking a group (before its checkpoint/ack): a restarted sub role gets it again,
    finds its trajectories in the run dir's spool (its in-memory buffer is gone) and trains on it."""
    from harness.role.checkpoints import STORE_POSITION_FILE
    from harness.role.common import PLANNER_DONE, StepStats
    from harness.role.sub import build_sub_trainer
    from mgrpo.store import open_store

    cfg, run_dir, store, server, model, tok, tasks = sub_setup("query")
    cfg.sub.save_steps = 1
    ckpts = run_dir / "sub" / "checkpoints"
    first = build_sub_trainer(cfg, run_dir, store, server, model, tok, tasks, ckpts, StepStats())  # installs the spool
    _play_planner(cfg, store, server, tasks, "qa@0.0.0", [1, 1], [1.0, 0.0])
    _play_planner(cfg, store, server, tasks, "qc@1.0.0", [2, 0], [0.0, 1.0])
    store.put_stat(PLANNER_DONE, {"step": 2})
    first.args.max_steps = 1
    first.train()  # step 1 on qa, checkpoint-1, then qa acked
    assert (ckpts / "checkpoint-1" / STORE_POSITION_FILE).is_file()
    assert store.pending_groups() == []
    taken = store.take_next_group(timeout=5)  # step 2 starts: qc taken ... and the process dies here
    assert taken.query_id == "qc@1.0.0"
    server.take_trajectories()  # the dead process's memory is gone

    restarted = open_store(f"sqlite:///{run_dir / 'store.db'}", run_id="run")
    try:
        second = build_sub_trainer(cfg, run_dir, restarted, server, model, tok, tasks, ckpts, StepStats(),
                                   resume_from=str(ckpts / "checkpoint-1"))
        second.train(resume_from_checkpoint=str(ckpts / "checkpoint-1"))
        assert second.state.global_step == 2
        recs = read_steps(run_dir / "sub" / "metrics.jsonl").records
        assert [r.step for r in recs] == [1, 2]
        assert recs[1].n_trajectories == 4 and recs[1].extra["missing_trajectories"] == 0
        log = {c.query_id: c for c in restarted.consumed_groups()}
        assert log["qc@1.0.0"].deliveries == 2 and log["qc@1.0.0"].state == "done"
        assert restarted.pending_groups() == []
    finally:
        restarted.close()


@pytest.mark.slow
def test_sub_role_keeps_serving_after_its_last_step_until_the_planner_is_done(tmp_path):
    """The planner calls the sub-agent after the sub role's last optimizer step (its final evaluation;
    its last step when the sub role is faster). Seen in `make demo`: the service had closed, the
    planner's calls failed and the sub process aborted at exit, so the run failed."""
    import subprocess
    import sys
    from pathlib import Path
    from types import SimpleNamespace

    import yaml

    from harness.config import to_dict
    from harness.role.common import PLANNER_DONE, SUB_URL
    from harness.role.tasks import generate_run_tasks, write_run_tasks
    from harness.rollout import SubTask
    from harness.subagent_service import HTTPSubAgentClient
    from harness.world.generator import generate_world
    from harness.world.server import WorldServer
    from mgrpo.store import open_store

    cfg = _cfg(tmp_path, planner={"max_steps": 1})
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
    store = open_store(f"sqlite:///{run_dir / 'store.db'}", run_id="run")
    run_tasks = generate_run_tasks(cfg)
    write_run_tasks(run_dir / "tasks", run_tasks)  # what the launcher does before it starts the roles
    tasks = run_tasks.by_id()
    log = run_dir / "sub.log"
    with WorldServer(generate_world(seed=0, size="tiny")) as world, open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "harness.role", "--role", "sub", "--config", str(run_dir / "config.yaml"),
             "--run-dir", str(run_dir), "--world-url", world.base_url],
            cwd=Path(__file__).resolve().parents[2], stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 120
            while store.get_stat(SUB_URL) is None:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.2)
            service = SimpleNamespace(url=store.get_stat(SUB_URL))
            _play_planner(cfg, store, service, tasks, "qa@0.0.0", [1, 1], [1.0, 0.0])
            while store.get_policy_version("sub") < 1:  # its one and last optimizer step
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.2)
            # after its last step the service still answers (the planner's final evaluation) ...
            gold = tasks[sorted(tasks)[0]]["gold"]["subtasks"][0]["task"]
            late = HTTPSubAgentClient(service.url).run([SubTask("eval@1", 0, 0, gold, "")])
            assert len(late) == 1 and late[0].policy_version == 1
            assert proc.poll() is None
            # ... and stops cleanly once the planner says it is done
            store.put_stat(PLANNER_DONE, {"step": 1})
            assert proc.wait(60) == 0, log.read_text()[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
            store.close()
    text = log.read_text()
    assert "[sub] finished after 1 steps" in text and "service stopped" in text


def test_with_vllm_the_new_weights_are_pushed_before_the_new_version_is_served():
    """Issue 17: the service labels its episodes with the published version; with vLLM the weights must be on
    the server first. Pure ordering logic (TRL's sync_weights needs a GPU server): the push happens before the
    version changes, once per step (TRL's next _generate does not push again), and not at all without vLLM."""
    from types import SimpleNamespace

    from harness.role.sub import publish_policy_version

    engine = SimpleNamespace(runtime=SimpleNamespace(policy_version=0))
    published: list[int] = []
    store = SimpleNamespace(set_policy_version=lambda role, v: published.append(v))
    seen: list[tuple[int, list[int]]] = []
    trainer = SimpleNamespace(use_vllm=True, _last_loaded_step=0)
    trainer.vllm_generation = SimpleNamespace(
        sync_weights=lambda: seen.append((engine.runtime.policy_version, list(published))))
    publish_policy_version(trainer, engine, store, 1)
    assert seen == [(0, [])]  # pushed while the old version was still the one served and published
    assert engine.runtime.policy_version == 1 and published == [1] and trainer._last_loaded_step == 1
    publish_policy_version(trainer, engine, store, 1)
    assert len(seen) == 1  # already pushed for step 1
    plain = SimpleNamespace(use_vllm=False)
    publish_policy_version(plain, engine, store, 2)
    assert engine.runtime.policy_version == 2 and published == [1, 1, 2] and len(seen) == 1
