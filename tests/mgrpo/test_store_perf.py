"""Store write throughput (docs/performance.md), measured with pytest-benchmark: rollout upserts per second on
each backend with 1 writer process and with 4 concurrent writer processes.

Each round sends "write N fresh rollouts" to already-running writer processes (spawned once, so
process start-up is not measured) and waits until all of them finished; the benchmark time is that
total wall time, ``extra_info["upserts_per_s"]`` is N / median round time. Rollouts come in groups of
K=8, so group completion is part of the measured work, as in a real run. ``single``: one
``upsert_rollout`` call per rollout; ``group``: one ``upsert_rollouts`` call per group of K; ``step``: one
call per 8 groups, the pipelined write the planner role makes once per step (all its groups in one
script call or transaction). Run with ``make bench`` or ``pytest tests/mgrpo/test_store_perf.py``; under
xdist (``make test``) pytest-benchmark is disabled and each test runs one round of 1,024 upserts as a
correctness smoke check only."""

from __future__ import annotations

import itertools
import multiprocessing as mp
import queue
import statistics
import uuid

import pytest

from mgrpo.store import open_store
from tests.support import store_workers
from tests.support.perf import figure

TOTAL_UPSERTS, SMOKE_UPSERTS, K, ROUNDS = 4096, 1024, 8, 3
#: Targets (upserts/s, docs/performance.md): Redis with pipelining (the planner's per-step write), SQLite at
#: 4 writers in every mode.
TARGETS = {("redis", 1, "step"): 20_000, ("redis", 4, "step"): 20_000,
           ("sqlite", 4, "single"): 5_000, ("sqlite", 4, "group"): 5_000, ("sqlite", 4, "step"): 5_000}


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def store_url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/store.db"
    return request.getfixturevalue("redis_url")


class WriterPool:
    """``n`` live ``perf_writer`` processes (spawn) fed one command queue each."""

    def __init__(self, url: str, run_id: str, n: int) -> None:
        ctx = mp.get_context("spawn")
        self.out = ctx.Queue()
        self.commands = [ctx.Queue() for _ in range(n)]
        self.procs = [
            ctx.Process(target=store_workers.perf_writer, args=(url, run_id, w, self.commands[w], self.out))
            for w in range(n)
        ]
        for p in self.procs:
            p.start()
        self._wait("ready")

    def _wait(self, kind: str) -> list[float]:
        times = []
        for _ in self.procs:
            try:
                got, _worker, seconds, error = self.out.get(timeout=300)
            except queue.Empty:
                raise AssertionError(f"a writer process did not report {kind!r} within 300 s") from None
            assert error is None, f"writer process failed:\n{error}"
            assert got == kind
            times.append(seconds)
        return times

    def round(self, round_id: int, per_writer: int, mode: str) -> None:
        for q in self.commands:
            q.put((round_id, per_writer, K, mode))
        self._wait("done")

    def close(self) -> None:
        for q in self.commands:
            q.put(None)
        for p in self.procs:
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join()


@pytest.mark.slow
@pytest.mark.perf
@pytest.mark.parametrize("mode", ["single", "group", "step"])
@pytest.mark.parametrize("n_writers", [1, 4])
def test_upserts_per_second(benchmark, store_url, n_writers, mode):
    run_id = f"perf-{uuid.uuid4().hex[:10]}"
    # Benchmarks disabled (e.g. under xdist in `make test`): one small round, checked for correctness.
    total = SMOKE_UPSERTS if benchmark.disabled else TOTAL_UPSERTS
    per_writer = total // n_writers
    assert per_writer % (K * store_workers.STEP_GROUPS) == 0
    pool = WriterPool(store_url, run_id, n_writers)
    rounds = itertools.count()
    walls: list[float] = []

    def one_round() -> None:
        import time

        t0 = time.perf_counter()
        pool.round(next(rounds), per_writer, mode)
        walls.append(time.perf_counter() - t0)

    try:
        benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1, warmup_rounds=0)
    finally:
        pool.close()

    n_rounds = len(walls)
    assert n_rounds >= 1
    rate = total / statistics.median(walls)
    benchmark.extra_info.update(
        backend=store_url.split(":", 1)[0], writers=n_writers, mode=mode, upserts_per_round=total,
        upserts_per_s=round(rate, 1), upserts_per_s_best=round(total / min(walls), 1),
    )
    backend = store_url.split(":", 1)[0]
    figure(benchmark, f"store upserts, {backend}, {n_writers} writer(s), {mode} (median round)", rate,
           unit="upserts/s", target=TARGETS.get((backend, n_writers, mode)))
    # Every upsert of every round landed and every group completed (nothing lost under contention).
    store = open_store(store_url, run_id=run_id)
    try:
        progress = store.group_progress()
    finally:
        store.close()
    assert len(progress) == n_rounds * total // K
    assert all(p.complete and p.have == K for p in progress.values())
