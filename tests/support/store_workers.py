"""Child-process entry points for the multi-process store tests and benchmarks (docs/training.md: roles are
separate processes sharing one store). Kept outside the test modules so ``spawn`` children import
only this module and ``mgrpo.store``, not pytest.

Every function reports through a queue and never raises into the void: an exception is sent back as
its traceback so the test can show it.
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path

from mgrpo.store import RolloutRecord, StoreTimeout, SubCallRecord, open_store


def query_id(g: int) -> str:
    return f"q{g:05d}"


def expected_rollout(g: int, r: int) -> RolloutRecord:
    """The deterministic content of rollout ``r`` of group ``g`` (so a reader can check it)."""
    q = query_id(g)
    n_calls = r % 3
    correct = float((g + r) % 2)
    return RolloutRecord(
        q, r, R_M=0.1 + 0.9 * correct, r_correct=correct, r_format=1.0,
        sub_call_ids=[f"{q}/{r}/{c}" for c in range(n_calls)], policy_version=g % 7,
        sub_policy_versions=[g % 5] * n_calls, extra={"g": g, "r": r},
    )


def expected_sub_call(g: int, r: int, c: int) -> SubCallRecord:
    return SubCallRecord(
        query_id(g), r, c, r_expert=(g + r + c) % 4 / 4, result_hash=f"h{g}-{r}-{c}", policy_version=g % 5
    )


def assignments(worker: int, n_workers: int, n_groups: int, k: int) -> list[tuple[int, int]]:
    """Rollout r of group g is written by worker (g + r) % n_workers: every group has several writers."""
    return [(g, r) for g in range(n_groups) for r in range(k) if (g + r) % n_workers == worker]


def writer(url: str, run_id: str, worker: int, n_workers: int, n_groups: int, k: int, rewrite_every: int, out) -> None:
    """Write this worker's share of rollouts (sub-calls first), re-writing every ``rewrite_every``-th
    one (a retried write) and reporting ``("writer", worker, n_writes, error)``."""
    n = 0
    try:
        store = open_store(url, run_id=run_id)
        for i, (g, r) in enumerate(assignments(worker, n_workers, n_groups, k)):
            for c in range(r % 3):
                store.upsert_sub_call(expected_sub_call(g, r, c))
            record = expected_rollout(g, r)
            store.upsert_rollout(record, group_size=k)
            n += 1
            if rewrite_every and i % rewrite_every == 0:
                store.upsert_rollout(record, group_size=k)
                if r % 3:
                    store.upsert_sub_call(expected_sub_call(g, r, 0))
                n += 1
        store.close()
        out.put(("writer", worker, n, None))
    except BaseException:  # noqa: BLE001 - reported to the parent
        out.put(("writer", worker, n, traceback.format_exc()))


def consumer(url: str, run_id: str, name: str, consumer_name: str, k: int, writers_done, ready, out) -> None:
    """Open the store and put ``name`` on ``ready``; then take and ack groups until the writers are
    done and nothing is left; report ``("consumer", name, taken_query_ids, problems, error)``.

    The parent starts the writers only once every consumer is open: by the store's resume rule, a
    handle opened after another live handle took a group treats that group as abandoned by a
    restarted process and takes it again (``mgrpo.store``, "Resume")."""
    taken: list[str] = []
    problems: list[str] = []
    try:
        store = open_store(url, run_id=run_id)
        ready.put(name)
        while True:
            try:
                g = store.take_next_group(0.5, consumer=consumer_name)
            except StoreTimeout:
                if writers_done.is_set():
                    try:  # every write is committed once the writers have exited: one last drain
                        g = store.take_next_group(0.2, consumer=consumer_name)
                    except StoreTimeout:
                        break
                else:
                    continue
            gi = int(g.query_id[1:])
            want = [expected_rollout(gi, r) for r in range(k)]
            if list(g.rollouts) != want:
                problems.append(f"{g.query_id}: rollouts differ from what was written")
            want_calls = [expected_sub_call(gi, r, c) for r in range(k) for c in range(r % 3)]
            if list(g.sub_calls) != want_calls:
                problems.append(f"{g.query_id}: sub-calls differ ({len(g.sub_calls)} vs {len(want_calls)})")
            if g.deliveries != 1:
                problems.append(f"{g.query_id}: delivered {g.deliveries} times")
            store.ack_group(g.query_id, consumer=consumer_name)
            taken.append(g.query_id)
        store.close()
        out.put(("consumer", name, taken, problems, None))
    except BaseException:  # noqa: BLE001 - reported to the parent
        out.put(("consumer", name, taken, problems, traceback.format_exc()))


#: Groups per ``upsert_rollouts`` call in ``perf_writer``'s ``step`` mode (a planner step of B = 8 queries).
STEP_GROUPS = 8


def perf_writer(url: str, run_id: str, worker: int, commands, out) -> None:
    """A benchmark writer that stays alive between rounds (process start-up is not measured).

    Receives ``(round_id, n, k, mode)`` and upserts ``n`` fresh rollouts in groups of ``k`` (so
    groups complete along the way, as in a real run): one call per rollout (``single``), one
    ``upsert_rollouts`` call per group (``group``), or one per :data:`STEP_GROUPS` groups (``step``: a
    planner step's groups in one write, as the planner role does); then reports
    ``("done", worker, seconds, error)``. ``None`` ends it.
    """
    try:
        store = open_store(url, run_id=run_id)
        out.put(("ready", worker, 0.0, None))
    except BaseException:  # noqa: BLE001
        out.put(("ready", worker, 0.0, traceback.format_exc()))
        return
    while True:
        cmd = commands.get()
        if cmd is None:
            break
        round_id, n, k, mode = cmd
        try:
            t0 = time.perf_counter()
            per_call = {"single": 1, "group": k, "step": k * STEP_GROUPS}[mode]
            records = [
                RolloutRecord(f"r{round_id}-w{worker}-g{i // k}", i % k, R_M=1.0, r_correct=1.0, r_format=1.0,
                              sub_call_ids=["a", "b"], policy_version=round_id, extra={"i": i})
                for i in range(n)
            ]
            for start in range(0, n, per_call):
                if mode == "single":
                    store.upsert_rollout(records[start], group_size=k)
                else:
                    store.upsert_rollouts(records[start:start + per_call], group_size=k)
            out.put(("done", worker, time.perf_counter() - t0, None))
        except BaseException:  # noqa: BLE001
            out.put(("done", worker, 0.0, traceback.format_exc()))
    store.close()


def checkpointing_consumer(
    url: str, run_id: str, ckpt_path: str, every: int, crash: str | None, crash_at: int
) -> None:
    """A trainer-like consumer following the resume recipe of ``mgrpo.store``: "training" appends a
    query id to the model state; every ``every`` groups it writes a checkpoint (model state + the
    largest position it covers) atomically, then acks the covered groups.

    ``crash`` simulates a kill (``os._exit``, no clean-up) at the ``crash_at``-th group taken:
    ``"before_checkpoint"`` (trained, not checkpointed) or ``"before_ack"`` (checkpointed, not acked).
    Exit code 0 when it ran out of groups.
    """
    import json
    import os

    path = Path(ckpt_path)
    ckpt = json.loads(path.read_text()) if path.exists() else {"position": 0, "trained": []}
    trained: list[str] = list(ckpt["trained"])
    position = int(ckpt["position"])
    store = open_store(url, run_id=run_id)
    to_ack: list[str] = []

    def checkpoint(last: int) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"position": last, "trained": trained}))
        os.replace(tmp, path)

    n = 0
    last = position
    while True:
        try:
            g = store.take_next_group(0.3)
        except StoreTimeout:
            break
        n += 1
        if g.redelivered and g.position <= position:
            store.ack_group(g.query_id)  # already in the checkpointed model: do not train twice
            continue
        trained.append(g.query_id)
        to_ack.append(g.query_id)
        last = g.position
        if crash == "before_checkpoint" and n == crash_at:
            os._exit(9)
        if len(to_ack) == every:
            checkpoint(last)
            if crash == "before_ack" and n >= crash_at:
                os._exit(9)
            for q in to_ack:
                store.ack_group(q)
            to_ack.clear()
    checkpoint(last)
    for q in to_ack:
        store.ack_group(q)
    store.close()


def opener(url: str, run_id: str, start, out) -> None:
    """Open (and so create) the store the moment ``start`` is set; report ``(None|error,)``."""
    try:
        start.wait(30)
        open_store(url, run_id=run_id).close()
        out.put((None,))
    except BaseException:  # noqa: BLE001 - the parent asserts on it
        out.put((traceback.format_exc(),))
