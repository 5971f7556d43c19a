"""The roles of a decoupled run (harness/role.py, DESIGN §3, §4) and the trainer registry (baselines).

The sub role's training path is exercised for real: a tiny-model sub-agent engine behind a real
``SubAgentServer`` (HTTP), the offline world served on 127.0.0.1, a sqlite store; this test plays
the planner (it sends the subtasks over HTTP and writes the rollout records) because an untrained
tiny planner almost never emits a valid ``delegate`` call.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from baselines import TRAINERS, get_trainer, register_trainer  # noqa: E402
from harness.config import from_dict  # noqa: E402
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
    from harness.role import r_expert, subtask_text
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


def test_step_lock_blocks_other_holders_until_released():
    from harness.role import StepLock

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
    from harness.role import PlannerRollout, build_toolbox, load_tasks
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
        tasks, _ = load_tasks(cfg)
        task = next(iter(tasks.values()))
        question = PlannerRollout(cfg, tasks, None, world.base_url, None, None, None, {}).question(task)
        assert "Start from this website: http://world.local/" in question, question
        # without an address the agents see the live server (the old behaviour, still the default)
        plain = _cfg(tmp_path, tasks={"benchmarks": ["webwalkerqa"]})
        assert world.base_url in PlannerRollout(plain, tasks, None, world.base_url, None, None, None,
                                                {}).question(task)


@pytest.fixture()
def sub_setup(tmp_path):
    import torch

    torch.set_num_threads(1)
    from harness.role import build_toolbox, load_model_for, load_tasks
    from harness.rollout import AgentRuntime, SubAgentEngine
    from harness.backends import HFBackend
    from harness.subagent_service import SubAgentServer
    from harness.world.generator import generate_world
    from harness.world.server import WorldServer
    from mgrpo.store import open_store

    def make(mode: str = "query"):
        cfg = _cfg(tmp_path, mode)
        world = WorldServer(generate_world(seed=0, size="tiny")).start()
        toolbox = build_toolbox(cfg, world.base_url)
        model, tok = load_model_for("tiny", "sub_agent", cfg)
        engine = SubAgentEngine(AgentRuntime(HFBackend(model, tok), tok), toolbox, cfg.rollout, seed=1)
        server = SubAgentServer(engine).start()
        run_dir = tmp_path / "run"
        run_dir.mkdir(exist_ok=True)
        store = open_store(f"sqlite:///{run_dir / 'store.db'}", run_id="run")
        tasks, _ = load_tasks(cfg)
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
    from harness.role import PLANNER_DONE, StepStats, _sub_trainer

    cfg, run_dir, store, server, model, tok, tasks = sub_setup("query")
    # Query A: rollout 0 made 3 calls (> d = 2: one dropped), rollout 1 made none (filled from rollout 0).
    res_a = _play_planner(cfg, store, server, tasks, "qa@0.0.0", [3, 0], [1.0, 0.0])
    # Query B: no rollout called the sub-agent -> no sub-agent group (skipped, counted).
    _play_planner(cfg, store, server, tasks, "qb@0.0.1", [0, 0], [0.0, 0.0])
    # Query C: 1 call and 1 call (each duplicated once).
    _play_planner(cfg, store, server, tasks, "qc@1.0.0", [1, 1], [0.0, 1.0])
    store.put_stat(PLANNER_DONE, {"step": 2})
    assert len(server._trajectories) == 5  # the trajectories stayed in the sub role's process

    trainer = _sub_trainer(cfg, run_dir, store, server, model, tok, run_dir / "sub" / "checkpoints", StepStats())
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
    assert not trainer._mgrpo_lock.held and server.lock.acquire(timeout=1)
    server.lock.release()


def test_sub_role_alignment_none_uses_fifo_chunks_across_queries(sub_setup):
    from harness.role import PLANNER_DONE, PlannerFinished, StepStats, _sub_trainer

    cfg, run_dir, store, server, model, tok, tasks = sub_setup("none")
    _play_planner(cfg, store, server, tasks, "qa@0.0.0", [1, 0], [1.0, 0.0])
    _play_planner(cfg, store, server, tasks, "qb@0.0.1", [2, 1], [0.0, 1.0])
    store.put_stat(PLANNER_DONE, {"step": 1})
    stats = StepStats()
    trainer = _sub_trainer(cfg, run_dir, store, server, model, tok, run_dir / "sub" / "checkpoints", stats)
    with pytest.raises(PlannerFinished):  # 4 sub-trajectories = one chunk of d*K = 4; the second step has none
        trainer.train()
    trainer._mgrpo_lock.release()
    recs = read_steps(run_dir / "sub" / "metrics.jsonl").records
    assert len(recs) == 1 and recs[0].n_trajectories == 4
    assert recs[0].align_duplicated is None  # no alignment in the ablation
    assert recs[0].extra["alignment"] == "none"
    # The chunk mixes both queries in arrival order: qa's call, then qb's three.
    assert recs[0].reward_components["correct"] == pytest.approx((1.0 + 0.0 + 0.0 + 1.0) / 4)


def test_restarted_sub_role_trains_a_redelivered_group_from_its_spool(sub_setup, tmp_path):
    """Kill after taking a group (before its checkpoint/ack): a restarted sub role gets it again,
    finds its trajectories in the run dir's spool (its in-memory buffer is gone) and trains on it."""
    from harness.role import PLANNER_DONE, STORE_POSITION_FILE, StepStats, _sub_trainer
    from mgrpo.store import open_store

    cfg, run_dir, store, server, model, tok, tasks = sub_setup("query")
    cfg.sub.save_steps = 1
    ckpts = run_dir / "sub" / "checkpoints"
    first = _sub_trainer(cfg, run_dir, store, server, model, tok, ckpts, StepStats())  # installs the spool
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
        second = _sub_trainer(cfg, run_dir, restarted, server, model, tok, ckpts, StepStats(),
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
    from harness.role import PLANNER_DONE, SUB_URL, load_tasks
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
    tasks, _ = load_tasks(cfg)
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
