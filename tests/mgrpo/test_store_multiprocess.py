"""Several processes on one store (docs/training.md), on both backends:

- 4 writer processes upsert interleaved rollouts of many groups (with retried re-writes) while 2
  consumer processes of the same consumer name take and ack groups: every group handed out exactly
  once, nothing lost, no duplicates, records intact;
- a trainer-like consumer killed in both dangerous windows and restarted resumes without losing or
  double-counting a group (the recipe in the ``mgrpo.store`` docstring)."""

from __future__ import annotations

import json
import multiprocessing as mp
import queue
import uuid

import pytest

from mgrpo.store import StoreTimeout, open_store
from tests.support import store_workers

N_WRITERS, N_CONSUMERS, N_GROUPS, K = 4, 2, 60, 4


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def store_url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/store.db"
    return request.getfixturevalue("redis_url")


def _collect(results, n: int, what: str, timeout: float = 120.0) -> list[tuple]:
    got = []
    for _ in range(n):
        try:
            got.append(results.get(timeout=timeout))
        except queue.Empty:
            raise AssertionError(f"only {len(got)} of {n} {what} processes reported within {timeout} s: {got}")
    errors = [m[-1] for m in got if m[-1] is not None]
    assert not errors, "child process failed:\n" + "\n".join(errors)
    return got


@pytest.mark.slow
def test_many_writers_two_consumers_every_group_exactly_once(store_url):
    ctx = mp.get_context("spawn")
    run_id = f"mp-{uuid.uuid4().hex[:10]}"
    results, writers_done, ready = ctx.Queue(), ctx.Event(), ctx.Queue()
    consumers = [
        ctx.Process(
            target=store_workers.consumer, args=(store_url, run_id, f"c{i}", "sub", K, writers_done, ready, results)
        )
        for i in range(N_CONSUMERS)
    ]
    writers = [
        ctx.Process(target=store_workers.writer, args=(store_url, run_id, w, N_WRITERS, N_GROUPS, K, 3, results))
        for w in range(N_WRITERS)
    ]
    procs = consumers + writers
    try:
        # Concurrent workers of one consumer name must all be open before the first group is taken
        # (mgrpo.store, "Resume"): a handle opened later takes unacked groups as a restarted process
        # would. A CI run where one consumer started late saw exactly that ("q00021: delivered 2 times").
        for p in consumers:
            p.start()
        for _ in consumers:
            try:
                ready.get(timeout=120)
            except queue.Empty:
                _collect(results, N_CONSUMERS, "consumer", timeout=1)  # shows a consumer's traceback
                raise AssertionError("a consumer process did not open the store within 120 s") from None
        for p in writers:
            p.start()
        writer_reports = _collect(results, N_WRITERS, "writer")
        for p in writers:
            p.join(30)
        writers_done.set()
        consumer_reports = _collect(results, N_CONSUMERS, "consumer")
        for p in consumers:
            p.join(30)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()

    assert all(m[0] == "writer" for m in writer_reports)
    n_writes = sum(m[2] for m in writer_reports)
    assert n_writes > N_GROUPS * K  # the re-writes happened
    taken = [q for m in consumer_reports for q in m[2]]
    problems = [p for m in consumer_reports for p in m[3]]
    assert not problems, problems
    expected = {store_workers.query_id(g) for g in range(N_GROUPS)}
    assert len(taken) == len(set(taken)), "a group was handed out twice"
    assert set(taken) == expected, f"groups never handed out: {sorted(expected - set(taken))}"

    store = open_store(store_url, run_id=run_id)
    try:
        progress = store.group_progress()
        assert len(progress) == N_GROUPS and all(p.complete and p.have == K for p in progress.values())
        for g in range(N_GROUPS):  # no rollout lost or duplicated
            want = [store_workers.expected_rollout(g, r) for r in range(K)]
            assert store.get_rollouts(store_workers.query_id(g)) == want
        log = store.consumed_groups("sub")
        assert [c.position for c in log] == list(range(1, N_GROUPS + 1))
        assert {c.query_id for c in log} == expected and all(c.state == "done" for c in log)
        assert store.pending_groups("sub") == []
        with pytest.raises(StoreTimeout):
            store.take_next_group(0.05, consumer="sub")
    finally:
        store.close()


@pytest.mark.slow
def test_killed_consumer_resumes_without_losing_or_double_counting(store_url, tmp_path):
    """A trainer-like consumer (tests/support/store_workers.checkpointing_consumer) is killed twice,
    in both dangerous windows (trained but not checkpointed; checkpointed but not acked), and
    restarted; the final model state holds every group exactly once."""
    ctx = mp.get_context("spawn")
    run_id = f"resume-{uuid.uuid4().hex[:10]}"
    n_groups = 20
    store = open_store(store_url, run_id=run_id)
    try:
        for g in range(n_groups):
            store.upsert_rollouts([store_workers.expected_rollout(g, r) for r in range(K)], group_size=K)
        ckpt = tmp_path / "ckpt.json"
        runs = [("before_ack", 6), ("before_checkpoint", 5), (None, 0)]
        codes = []
        for crash, at in runs:
            p = ctx.Process(
                target=store_workers.checkpointing_consumer, args=(store_url, run_id, str(ckpt), 3, crash, at)
            )
            p.start()
            p.join(120)
            if p.is_alive():
                p.kill()
                p.join()
            codes.append(p.exitcode)
            if crash is not None:
                assert store.pending_groups("sub"), f"the crash {crash!r} should leave unacknowledged groups"
        assert codes == [9, 9, 0], f"consumer exit codes {codes} (9 = simulated kill)"
        trained = json.loads(ckpt.read_text())["trained"]
        expected = [store_workers.query_id(g) for g in range(n_groups)]
        assert sorted(trained) == expected, "a group was lost or trained twice across the restarts"
        log = store.consumed_groups("sub")
        assert [c.query_id for c in log] == expected and all(c.state == "done" for c in log)
        assert max(c.deliveries for c in log) == 2  # the crashes did force redeliveries
    finally:
        store.close()


def test_roles_creating_a_fresh_sqlite_store_at_once_all_open_it(tmp_path):
    """Two roles start at the same instant on a new store file (`python -m harness train`): neither
    may die of "database is locked" while the other switches the file to WAL (seen 1 launch in ~20)."""
    ctx = mp.get_context("spawn")
    for attempt in range(4):
        url = f"sqlite:///{tmp_path}/fresh{attempt}.db"
        start, results = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=store_workers.opener, args=(url, "run", start, results)) for _ in range(6)]
        for p in procs:
            p.start()
        start.set()
        _collect(results, len(procs), "opener")
        for p in procs:
            p.join(30)
