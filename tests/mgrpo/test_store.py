"""Contract tests of the shared store (docs/training.md), run identically on both backends: SQLite in a
temporary directory and a real ``redis-server`` started by the ``redis_server`` fixture."""

from __future__ import annotations

import json
import math
import sqlite3
import time
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mgrpo.store import (
    SCHEMA_VERSION,
    ConsumedGroup,
    GroupSizeError,
    GroupStateError,
    RolloutRecord,
    SchemaVersionError,
    SqliteStore,
    Store,
    StoreTimeout,
    StoreUnavailable,
    StoreURLError,
    SubCallRecord,
    open_store,
)
from tests.support.redis_server import free_port


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def backend(request, tmp_path):
    """A factory that opens handles of one fresh store (same backend, same run) for this test."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/run/store.db"
    else:
        url = request.getfixturevalue("redis_url")
    run_id = f"test-{uuid.uuid4().hex[:12]}"
    opened: list[Store] = []

    def open_handle(run: str = run_id) -> Store:
        store = open_store(url, run_id=run)
        opened.append(store)
        return store

    open_handle.url = url  # type: ignore[attr-defined]
    yield open_handle
    for store in opened:
        store.close()


@pytest.fixture
def store(backend) -> Store:
    return backend()


def rec(q: str, r: int, reward: float = 1.0, **kw) -> RolloutRecord:
    return RolloutRecord(q, r, R_M=reward, r_correct=1.0 if reward > 0.5 else 0.0, r_format=1.0, **kw)


def fill(store: Store, q: str, k: int, reward: float = 1.0) -> None:
    for r in range(k):
        store.upsert_rollout(rec(q, r, reward), group_size=k)


def write_raw_rollout(store: Store, q: str, r: int, data: dict) -> None:
    """Bypass the API to plant a record as another code version would have written it."""
    text = json.dumps(data)
    if isinstance(store, SqliteStore):
        with sqlite3.connect(store.path) as conn:
            n = conn.execute(
                "UPDATE rollouts SET data=? WHERE run_id=? AND query_id=? AND rollout=?", (text, store.run_id, q, r)
            ).rowcount
        assert n == 1
    else:
        store._r.hset(store._key("ro", q), str(r), text)  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------------- records


def test_rollout_and_sub_call_round_trip(store):
    r = RolloutRecord(
        "q1", 0, R_M=0.91, r_correct=1.0, r_format=1.0, sub_call_ids=["q1/0/0", "q1/0/1"],
        policy_version=3, sub_policy_versions=[2, 2], extra={"answer": "Paris", "turns": [1, 2]},
    )
    s = SubCallRecord("q1", 0, 1, r_expert=0.75, result_hash="ab12", policy_version=2, r_format=1.0, extra={"n": 1})
    store.upsert_sub_call(s)
    store.upsert_rollout(r, group_size=2)
    (got,) = store.get_rollouts("q1")
    assert got == r
    assert got.n_sub_calls == 2 and got.sub_call_ids == ("q1/0/0", "q1/0/1")
    assert store.get_sub_calls("q1") == [s]
    assert store.get_rollouts("unknown") == [] and store.get_sub_calls("unknown") == []


def test_upsert_is_idempotent_and_replaces(store):
    assert store.upsert_rollout(rec("q1", 0, 0.1), group_size=2) is False
    store.upsert_rollout(rec("q1", 0, 0.2), group_size=2)
    assert store.upsert_rollout(rec("q1", 1, 0.3), group_size=2) is True  # completes the group
    # rewrites after completion replace the record and do not complete (queue) the group again
    assert store.upsert_rollout(rec("q1", 1, 0.4), group_size=2) is False
    assert store.upsert_rollout(rec("q1", 0, 0.5), group_size=2) is False
    assert [x.R_M for x in store.get_rollouts("q1")] == [0.5, 0.4]
    for call_reward in (0.1, 0.9):
        store.upsert_sub_call(SubCallRecord("q1", 0, 0, r_expert=call_reward))
    assert [s.r_expert for s in store.get_sub_calls("q1")] == [0.9]
    g = store.take_next_group(5)
    assert g.query_id == "q1" and len(g.rollouts) == 2
    with pytest.raises(StoreTimeout):
        store.take_next_group(0.05)


def test_a_steps_writes_in_two_calls_land_like_one_call_per_record(store):
    """What the planner writes per step (docs/performance.md): all sub-call records in one call, then every
    group in one call. Same records, same completion order, later records replace earlier ones."""
    subs = [SubCallRecord(q, r, c, r_expert=0.5, policy_version=1) for q in ("a", "b") for r in range(2) for c in range(2)]
    store.upsert_sub_calls(subs)
    store.upsert_sub_calls([SubCallRecord("a", 0, 0, r_expert=0.9)])  # replaces
    store.upsert_sub_calls([])  # nothing to write: no error
    assert store.upsert_rollouts([rec(q, r, 1.0) for q in ("b", "a") for r in range(2)], group_size=2) == ["b", "a"]
    assert [store.take_next_group(5).query_id for _ in range(2)] == ["b", "a"]
    assert [(s.rollout, s.call, s.r_expert) for s in store.get_sub_calls("a")] == [
        (0, 0, 0.9), (0, 1, 0.5), (1, 0, 0.5), (1, 1, 0.5)]
    assert store.get_sub_calls("b") == [s for s in subs if s.query_id == "b"]
    with pytest.raises(TypeError, match="SubCallRecord"):
        store.upsert_sub_calls([rec("c", 0, 1.0)])


def test_sub_calls_ordered_and_in_group(store):
    for r, c in [(1, 1), (0, 2), (1, 0), (0, 0), (0, 10)]:
        store.upsert_sub_call(SubCallRecord("q", r, c, r_expert=r + c / 100))
    fill(store, "q", 2)
    g = store.take_next_group(5)
    assert [(s.rollout, s.call) for s in g.sub_calls] == [(0, 0), (0, 2), (0, 10), (1, 0), (1, 1)]
    assert [s.call for s in g.sub_calls_of(1)] == [0, 1]
    assert [x.rollout for x in g.rollouts] == [0, 1]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(R_M=math.nan), "R_M must be a finite number"),
        (dict(r_correct=math.inf), "r_correct must be a finite number"),
        (dict(n_sub_calls=3, sub_call_ids=["a"]), "n_sub_calls=3 but 1 sub_call_ids"),
        (dict(extra={"x": object()}), "extra must be JSON-serialisable"),
        (dict(sub_call_ids="abc"), "sub_call_ids must be a list"),
        (dict(policy_version=-1), "policy_version must be an int >= 0"),
    ],
)
def test_invalid_records_are_refused_at_construction(kwargs, match):
    base = dict(R_M=1.0, r_correct=1.0, r_format=1.0)
    base.update(kwargs)
    with pytest.raises(ValueError, match=match):
        RolloutRecord("q1", 0, **base)


def test_group_size_rules_and_nothing_written_on_refusal(store):
    with pytest.raises(GroupSizeError, match=r"group size K of query 'q1' is unknown.*declare_group"):
        store.upsert_rollout(rec("q1", 0))
    assert store.get_rollouts("q1") == [] and store.group_progress() == {}
    store.declare_group("q1", 3)
    store.declare_group("q1", 3)  # idempotent
    with pytest.raises(GroupSizeError, match=r"declared with K=3.*group_size=4"):
        store.declare_group("q1", 4)
    store.upsert_rollout(rec("q1", 0))  # K known from the declaration
    with pytest.raises(GroupSizeError, match=r"declared with K=3.*group_size=2"):
        store.upsert_rollout(rec("q1", 1), group_size=2)
    with pytest.raises(GroupSizeError, match=r"rollout index 3 .* out of range.*K=3"):
        store.upsert_rollout(rec("q1", 3))
    with pytest.raises(GroupSizeError, match="must be an int >= 1"):
        store.declare_group("q2", 0)
    # the refused writes left nothing behind
    assert [x.rollout for x in store.get_rollouts("q1")] == [0]
    progress = store.group_progress()
    assert set(progress) == {"q1"} and (progress["q1"].have, progress["q1"].k, progress["q1"].complete) == (1, 3, False)


def test_batch_upsert_is_atomic_and_reports_completions(store):
    store.upsert_rollout(rec("qb", 0), group_size=2)
    batch = [rec("qa", 0), rec("qa", 1), rec("qb", 1), rec("qc", 0)]
    assert store.upsert_rollouts(batch, group_size=2) == ["qa", "qb"]
    assert store.upsert_rollouts(batch, group_size=2) == []  # idempotent: nothing completes twice
    assert store.upsert_rollouts([]) == []
    # one refused record (rollout 2 >= K=2) refuses the whole batch: qc's rollout 1 is not written
    with pytest.raises(GroupSizeError, match=r"rollout index 2 of query 'qc'"):
        store.upsert_rollouts([rec("qc", 1), rec("qc", 2)])
    with pytest.raises(GroupSizeError, match=r"'qd' is unknown"):
        store.upsert_rollouts([rec("qc", 1), rec("qd", 0)])
    with pytest.raises(TypeError, match="RolloutRecord"):
        store.upsert_rollouts([rec("qc", 1), {"query_id": "qc"}])
    assert [x.rollout for x in store.get_rollouts("qc")] == [0]
    assert "qd" not in store.group_progress()
    assert [store.take_next_group(1).query_id for _ in range(2)] == ["qa", "qb"]


def test_get_group_by_id(store):
    fill(store, "q1", 2)
    store.upsert_rollout(rec("q2", 0), group_size=2)
    g = store.get_group("q1")
    assert (g.query_id, g.k, len(g.rollouts), g.consumer, g.deliveries) == ("q1", 2, 2, None, 0)
    with pytest.raises(GroupStateError, match=r"'q2' .* not complete: 1/2 rollouts"):
        store.get_group("q2")
    with pytest.raises(GroupStateError, match="no group"):
        store.get_group("nope")


# ------------------------------------------------------------------------------- hand-out


def test_completion_order_not_declaration_order(store):
    for q in ("qa", "qb", "qc"):
        store.declare_group(q, 2)
    store.upsert_rollout(rec("qa", 0))
    store.upsert_rollout(rec("qb", 0))
    store.upsert_rollout(rec("qc", 1))
    store.upsert_rollout(rec("qc", 0))  # qc complete first
    store.upsert_rollout(rec("qa", 1))  # then qa
    store.upsert_rollout(rec("qb", 1))  # then qb
    taken = [store.take_next_group(5) for _ in range(3)]
    assert [g.query_id for g in taken] == ["qc", "qa", "qb"]
    assert [g.position for g in taken] == [1, 2, 3]
    seqs = [g.completion_seq for g in taken]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_completion_order_matches_a_reference_model(backend, data):
    """Random interleavings with retried writes: hand-out order == the order in which each group's
    last missing rollout was first written; each group exactly once."""
    sizes = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=5), label="K per group")
    slots = [(g, r) for g, k in enumerate(sizes) for r in range(k)]
    writes = data.draw(st.lists(st.sampled_from(slots), max_size=3 * len(slots)), label="extra writes")
    order = data.draw(st.permutations(slots + writes), label="write order")
    store = backend(f"prop-{uuid.uuid4().hex[:12]}")
    seen: dict[int, set[int]] = {}
    expected: list[str] = []
    for g, r in order:
        completed = store.upsert_rollout(rec(f"g{g}", r, reward=r / 4), group_size=sizes[g])
        before = len(seen.setdefault(g, set()))
        seen[g].add(r)
        newly = before < sizes[g] == len(seen[g])
        assert completed == newly
        if newly:
            expected.append(f"g{g}")
    assert [store.take_next_group(0).query_id for _ in expected] == expected
    with pytest.raises(StoreTimeout):
        store.take_next_group(0)


def test_each_group_once_per_consumer(store, backend):
    for q in ("q1", "q2"):
        fill(store, q, 2)
    other = backend()  # a second live handle of the same consumer (another process)
    a = store.take_next_group(5, consumer="sub")
    b = other.take_next_group(5, consumer="sub")
    assert {a.query_id, b.query_id} == {"q1", "q2"}
    for h in (store, other):
        with pytest.raises(StoreTimeout):
            h.take_next_group(0.05, consumer="sub")
    # consumers are independent: another consumer name sees every group, in order
    assert [store.take_next_group(5, consumer="audit").query_id for _ in range(2)] == ["q1", "q2"]
    assert [c.query_id for c in store.consumed_groups("sub")] == [a.query_id, b.query_id]


def test_take_blocks_until_group_completes(store, backend):
    import threading

    store.upsert_rollout(rec("q1", 0), group_size=2)
    writer = backend()
    t = threading.Timer(0.2, lambda: writer.upsert_rollout(rec("q1", 1), group_size=2))
    t.start()
    try:
        g = store.take_next_group(10)
    finally:
        t.join()
    assert g.query_id == "q1" and len(g.rollouts) == 2


def test_timeout_error_names_what_it_waited_for(store):
    store.upsert_rollout(rec("q17", 0), group_size=3)
    store.upsert_rollout(rec("q3", 0), group_size=8)
    store.upsert_rollout(rec("q3", 5), group_size=8)
    fill(store, "q1", 2)
    store.take_next_group(5)
    store.heartbeat("planner", {"step": 1})
    start = time.monotonic()
    with pytest.raises(StoreTimeout) as info:
        store.take_next_group(0.3, consumer="sub")
    assert time.monotonic() - start >= 0.3
    msg = str(info.value)
    assert isinstance(info.value, TimeoutError)
    for part in (
        f"run {store.run_id!r}", "consumer 'sub'", "within 0.3 s", "3 groups declared", "1 complete",
        "1 already taken", "2 incomplete", "q17 (1/3 rollouts)", "q3 (2/8 rollouts)", "planner",
        "Check that the planner role is running",
    ):
        assert part in msg, (part, msg)


def test_timeout_on_empty_run_suggests_checking_run_id(store):
    with pytest.raises(StoreTimeout, match=r"no group has been declared.*same store URL and run_id"):
        store.take_next_group(0)
    with pytest.raises(ValueError, match="timeout must be"):
        store.take_next_group(-1)


def test_ack_and_redelivery_after_restart(store, backend):
    for q in ("q1", "q2", "q3", "q4"):
        fill(store, q, 2)
    g1, g2 = store.take_next_group(5), store.take_next_group(5)
    assert store.ack_group(g1.query_id) is True
    assert store.ack_group(g1.query_id) is False  # idempotent
    with pytest.raises(GroupStateError, match=r"never took it"):
        store.ack_group("q3")
    assert store.pending_groups() == ["q2"]
    store.close()  # the consumer process dies with q2 taken but not acknowledged

    resumed = backend()  # restarted process: same consumer name, opened after q2 was taken
    again = resumed.take_next_group(5)
    assert (again.query_id, again.position, again.deliveries, again.redelivered) == ("q2", 2, 2, True)
    assert len(again.rollouts) == 2
    nxt = resumed.take_next_group(5)  # then the new groups, from where the consumer stopped
    assert (nxt.query_id, nxt.position, nxt.deliveries, nxt.redelivered) == ("q3", 3, 1, False)
    resumed.ack_group("q2")
    log = resumed.consumed_groups()
    assert [(c.query_id, c.position, c.state, c.deliveries) for c in log] == [
        ("q1", 1, "done", 1), ("q2", 2, "done", 2), ("q3", 3, "taken", 1)
    ]
    assert all(isinstance(c, ConsumedGroup) and c.taken_at > 0 for c in log)
    assert log[0].acked_at is not None and log[2].acked_at is None
    assert resumed.pending_groups() == ["q3"]


def test_live_handles_do_not_steal_each_others_taken_groups(store, backend):
    fill(store, "q1", 2)
    fill(store, "q2", 2)
    other = backend()  # opened before q1 is taken: a concurrent worker, not a restart
    assert store.take_next_group(5).query_id == "q1"
    assert other.take_next_group(5).query_id == "q2"
    with pytest.raises(StoreTimeout):
        other.take_next_group(0.05)
    # the handle that took q1 does not get it again either
    with pytest.raises(StoreTimeout):
        store.take_next_group(0.05)


# ------------------------------------------------------------------------- schema versions


def test_record_of_other_schema_is_refused_and_not_taken(store):
    fill(store, "q1", 2)
    good = json.loads(rec("q1", 1).to_json())
    assert good["schema"] == SCHEMA_VERSION
    write_raw_rollout(store, "q1", 1, {**good, "schema": 999})
    with pytest.raises(SchemaVersionError, match=r"schema version 999, this code reads version 1"):
        store.get_rollouts("q1")
    with pytest.raises(SchemaVersionError, match=r"q1.*999"):
        store.take_next_group(1)
    assert store.consumed_groups() == []  # the failed take left no trace
    write_raw_rollout(store, "q1", 1, good)
    g = store.take_next_group(1)
    assert g.query_id == "q1" and g.position == 1


def test_store_of_other_layout_version_is_refused_at_open(store, backend):
    if isinstance(store, SqliteStore):
        with sqlite3.connect(store.path) as conn:
            conn.execute("UPDATE store_meta SET value='0' WHERE key='schema'")
    else:
        store._r.hset(store._key("meta"), "schema", "0")  # type: ignore[attr-defined]
    with pytest.raises(SchemaVersionError, match=r"layout schema version 0.*reads version 1"):
        backend()


# ------------------------------------------------------------------ heartbeats, versions


def test_heartbeats_and_policy_versions(store, backend):
    assert store.heartbeats() == {}
    assert store.get_policy_version("planner") == 0
    before = store.now()
    store.heartbeat("planner", {"step": 3, "host": "a"})
    store.heartbeat("sub")
    store.heartbeat("planner", {"step": 4})
    other = backend()
    beats = other.heartbeats()
    assert set(beats) == {"planner", "sub"}
    t, info = beats["planner"]
    assert info == {"step": 4} and beats["sub"].info == {}
    assert before - 1 <= t <= other.now() + 1
    store.set_policy_version("planner", 7)
    store.set_policy_version("sub", 2)
    store.set_policy_version("planner", 8)
    assert (other.get_policy_version("planner"), other.get_policy_version("sub")) == (8, 2)
    with pytest.raises(ValueError, match="version must be an int >= 0"):
        store.set_policy_version("planner", -1)


def test_stats(store):
    assert store.get_stat("d_quantile") is None and store.get_stat("x", 5) == 5
    store.put_stat("d_quantile", {"p99": 8, "n": 120})
    store.put_stat("d_quantile", {"p99": 9, "n": 240})
    assert store.get_stat("d_quantile") == {"p99": 9, "n": 240}
    with pytest.raises(ValueError, match="JSON-serialisable"):
        store.put_stat("bad", float("nan"))


def test_runs_are_isolated(backend):
    a, b = backend("run-a-" + uuid.uuid4().hex[:6]), backend("run-b-" + uuid.uuid4().hex[:6])
    fill(a, "q1", 2)
    a.set_policy_version("planner", 3)
    assert b.get_rollouts("q1") == [] and b.group_progress() == {} and b.get_policy_version("planner") == 0
    with pytest.raises(StoreTimeout):
        b.take_next_group(0.05)
    assert a.take_next_group(1).query_id == "q1"


# ----------------------------------------------------------------------------- opening


@pytest.mark.parametrize(
    "url",
    [
        "store.db", "sqlite://store.db", "sqlite://host/store.db", "sqlite:///", "sqlite:///:memory:",
        "sqlite:///a.db?mode=ro", "postgres://localhost/x", "redis://", "redis://localhost:notaport/0",
        "redis://localhost:6379/zero", "redis://localhost:6379/0?timeout=1", "",
    ],
)
def test_malformed_url_names_accepted_forms(url):
    accepted = r"Accepted forms: 'sqlite:///relative/path/store.db'.*redis://host:port/db"
    with pytest.raises(ValueError, match=accepted) as info:
        open_store(url, run_id="r")
    assert isinstance(info.value, StoreURLError)


def test_bad_run_id_is_refused(tmp_path):
    with pytest.raises(ValueError, match="run_id must be"):
        open_store(f"sqlite:///{tmp_path}/s.db", run_id="has space")
    with pytest.raises(ValueError, match="run_id must be"):
        open_store(f"sqlite:///{tmp_path}/s.db", run_id="{tag}")


def test_sqlite_relative_and_absolute_paths_wal(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rel = open_store("sqlite:///runs/r1/store.db", run_id="r1")
    absolute = open_store(f"sqlite:///{tmp_path}/runs/r1/store.db", run_id="r1")  # four slashes
    try:
        fill(rel, "q1", 1)
        assert (tmp_path / "runs" / "r1" / "store.db").is_file()
        assert absolute.take_next_group(1).query_id == "q1"
        with sqlite3.connect(tmp_path / "runs" / "r1" / "store.db") as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        rel.close()
        absolute.close()


def test_sqlite_failing_write_leaves_nothing_half_written(tmp_path, monkeypatch):
    store = open_store(f"sqlite:///{tmp_path}/s.db", run_id="r")
    try:
        store.upsert_rollout(rec("q1", 0), group_size=2)

        def boom(*a, **k):
            raise OSError("simulated failure after the rollout row was written")

        monkeypatch.setattr(SqliteStore, "_complete_if_full", boom)
        with pytest.raises(OSError, match="simulated"):
            store.upsert_rollout(rec("q1", 1), group_size=2)
        with pytest.raises(OSError, match="simulated"):
            store.upsert_rollout(rec("q9", 0), group_size=2)
        monkeypatch.undo()
        assert [x.rollout for x in store.get_rollouts("q1")] == [0]
        assert set(store.group_progress()) == {"q1"}  # q9's group row was rolled back too
        store.upsert_rollout(rec("q1", 1), group_size=2)  # the store is still usable
        assert store.take_next_group(1).query_id == "q1"
    finally:
        store.close()


def test_sqlite_locked_past_its_busy_timeout_is_a_clear_error_and_writes_nothing(tmp_path):
    url = f"sqlite:///{tmp_path}/store.db"
    store = open_store(url, run_id="r", busy_timeout_s=1.0)
    try:
        blocker = sqlite3.connect(str(tmp_path / "store.db"), isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # another process holding a write transaction (a hung role)
        start = time.monotonic()
        with pytest.raises(StoreUnavailable, match=r"sqlite store .*store\.db stayed locked for 1 s.*hung role"):
            store.upsert_rollouts([rec("q1", 0), rec("q1", 1)], group_size=2)
        assert time.monotonic() - start < 10.0
        blocker.execute("ROLLBACK")
        blocker.close()
        assert store.group_progress() == {}  # nothing of the refused write landed
        store.upsert_rollouts([rec("q1", 0), rec("q1", 1)], group_size=2)  # and the store works again
        assert store.take_next_group(1).query_id == "q1"
    finally:
        store.close()


def test_sqlite_unwritable_location(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreUnavailable, match=r"cannot open the sqlite store .*writable"):
        open_store(f"sqlite:///{blocker}/sub/store.db", run_id="r")


def test_unreachable_redis_fails_fast_with_clear_error():
    port = free_port()  # nothing listens there
    start = time.monotonic()
    with pytest.raises(StoreUnavailable) as info:
        open_store(f"redis://127.0.0.1:{port}/0", run_id="r", connect_timeout_s=2.0)
    elapsed = time.monotonic() - start
    msg = str(info.value)
    assert f"127.0.0.1:{port}" in msg and "redis-server is running" in msg and "attempts" in msg
    assert elapsed < 10.0  # bounded: the budget is 2 s plus one connect attempt


@pytest.mark.redis
def test_redis_bad_database_number_is_refused_clearly(redis_server):
    with pytest.raises(StoreUnavailable, match=r"\(db 99\) refused the connection.*database number"):
        open_store(redis_server.url(99), run_id="r")


@pytest.mark.redis
def test_redis_down_past_the_retry_budget_names_the_server_and_the_wait(redis_server):
    from tests.support.redis_server import RedisServer

    with RedisServer() as private:
        store = open_store(private.url(), run_id="r", retry_s=1.0)
        store.heartbeat("planner")
        private.kill()
        start = time.monotonic()
        with pytest.raises(StoreUnavailable) as info:
            store.heartbeat("planner")
        waited = time.monotonic() - start
        msg = str(info.value)
        assert f"lost Redis at 127.0.0.1:{private.port} (db 0) for " in msg and "retry budget 1 s" in msg, msg
        assert "attempts" in msg and "redis-server is running" in msg
        assert 0.5 <= waited < 10.0  # it did retry, and gave up within the budget (plus one attempt)
        store.close()


@pytest.mark.redis
def test_a_redis_restart_within_the_retry_budget_loses_and_repeats_nothing(redis_server):
    """Redis is killed and restarted (append-only file) while a writer and a consumer keep working:
    every call waits it out, every group is complete and handed out once, in completion order."""
    import threading

    from tests.support.redis_server import RedisServer

    with RedisServer(persistent=True) as private:
        writer = open_store(private.url(), run_id="r", retry_s=20.0)
        consumer = open_store(private.url(), run_id="r", retry_s=20.0)
        fill(writer, "q00", 2)
        taken = [consumer.take_next_group(5).query_id]
        restarted = threading.Event()

        def crash_and_restart() -> None:
            private.restart(down_s=1.0)
            restarted.set()

        t = threading.Thread(target=crash_and_restart)
        t.start()
        for i in range(1, 6):  # these calls straddle the outage
            fill(writer, f"q{i:02d}", 2)
            writer.heartbeat("planner", {"step": i})
            taken.append(consumer.take_next_group(30).query_id)
            consumer.ack_group(taken[-1])
        t.join(30)
        assert restarted.is_set()
        assert taken == [f"q{i:02d}" for i in range(6)]
        log = consumer.consumed_groups()
        assert [(c.query_id, c.position, c.deliveries) for c in log] == [(q, i + 1, 1) for i, q in enumerate(taken)]
        assert all(p.complete for p in writer.group_progress().values()) and len(writer.group_progress()) == 6
        writer.close()
        consumer.close()


@pytest.mark.redis
def test_a_redis_that_comes_back_without_the_run_is_refused(redis_server):
    from tests.support.redis_server import RedisServer

    with RedisServer() as private:  # no persistence: a restart loses everything
        store = open_store(private.url(), run_id="r", retry_s=20.0)
        fill(store, "q1", 2)
        private.restart(down_s=0.2)
        with pytest.raises(StoreUnavailable, match=r"came back without run 'r'.*appendonly yes"):
            store.heartbeat("planner")
        store.close()


@pytest.mark.redis
def test_a_retried_take_whose_reply_was_lost_hands_back_the_same_group(redis_url, monkeypatch):
    """The take script ran on the server but its reply never arrived (connection dropped): the retry
    with the same request id gets that group, not a second one, so no group is left taken and unseen."""
    import redis

    store = open_store(redis_url, run_id=f"lost-{uuid.uuid4().hex[:8]}", retry_s=5.0)
    try:
        for q in ("q1", "q2", "q3"):
            fill(store, q, 2)
        real, calls = store._s_take, []

        def reply_lost_once(*args, **kwargs):
            out = real(*args, **kwargs)
            calls.append(kwargs["args"][-1])
            if len(calls) == 1:
                raise redis.ConnectionError("simulated: connection dropped before the reply")
            return out

        monkeypatch.setattr(store, "_s_take", reply_lost_once)
        g1 = store.take_next_group(5)
        assert calls[0] == calls[1]  # the retry carried the same request id
        g2 = store.take_next_group(5)
        assert (g1.query_id, g1.position, g1.deliveries) == ("q1", 1, 1)
        assert (g2.query_id, g2.position, g2.deliveries) == ("q2", 2, 1)
        assert [(c.query_id, c.state) for c in store.consumed_groups()] == [("q1", "taken"), ("q2", "taken")]
    finally:
        store.close()
