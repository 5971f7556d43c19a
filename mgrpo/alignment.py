"""Trajectory alignment of sub-agent calls to a fixed target d (M-GRPO, docs/paper.md, docs/training.md).

Per query q the planner ran K rollouts; rollout k made ``d_k`` sub-agent calls (its
sub-trajectories, named by ``(rollout, call)`` with ``call`` in ``0..d_k-1``). M-GRPO
(arXiv 2511.13288, Sec. 3, "trajectory alignment") turns these into exactly ``d`` items per
rollout, so every query yields a fixed-size group of ``d * K`` sub-agent trajectories:

- ``d_k > d``: keep ``d`` of the rollout's calls, chosen uniformly at random without replacement;
- ``0 < d_k <= d``: keep all ``d_k`` calls and add ``d - d_k`` duplicates drawn uniformly at random
  (with replacement) from the rollout's own calls;
- ``d_k = 0`` (not specified by the paper; our documented rule, docs/paper.md): fill the ``d`` slots with
  duplicates drawn uniformly (with replacement) from the sub-trajectories of the *other* rollouts
  of the same query;
- no rollout of the query called the sub-agent: K empty lists (the query yields no sub-agent
  group; the caller counts it in its metrics).

Also here: ``query_seed`` (stable per-query seed), ``alignment_stats`` (the ``align_duplicated``
/ ``align_dropped`` metrics of docs/report.md), ``sub_calls_quantile`` (the paper chooses d so that
P(d_k <= d) ~= 0.99) and ``FifoChunker`` / ``fifo_chunks`` for the ``alignment: none`` ablation
(docs/paper.md §Trajectory alignment, paper Fig. 8). Everything is pure: no I/O, no global RNG.

Deliberate choices and deviations:
- Randomness comes from a ``random.Random(seed)`` private to the call, and only its ``random()``
  method is used: an index in ``range(n)`` is ``int(random() * n)``, and sampling d of d_k calls
  without replacement keeps the d calls with the smallest of d_k uniform keys. Python guarantees
  that ``random()`` after seeding with an int yields the same sequence across versions, whereas
  ``Random.sample``/``choices`` and numpy's ``Generator.choice`` do not promise stable streams; so
  a rerun aligns identically even after an upgrade. The bias of ``int(random() * n)`` is below
  ``n / 2**53``, negligible for call counts.
- Draw order: rollouts are processed in order k = 0..K-1 from one stream, so the result depends
  on the whole ``sub_counts`` vector and the seed only.
- For ``d_k > d`` the kept calls are returned in ascending call order (the choice of the *set* is
  uniform; sorting only makes outputs easier to read and compare).
- For ``d_k = 0`` the donor pool is *all* sub-trajectories of the other rollouts (each equally
  likely), including calls that their own rollout dropped because it exceeded d: the rule asks for
  "the sub-trajectories of the other rollouts", not for their aligned slots.
- ``d_k == d`` falls under the middle rule with zero duplicates (docs/paper.md writes ``0 < d_k <= d``; the
  issue writes ``<=``; both give the same result).
"""

from __future__ import annotations

import hashlib
import math
import random
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from functools import lru_cache
from itertools import repeat
from numbers import Integral
from operator import mul
from typing import Generic, TypeVar

__all__ = [
    "FifoChunker",
    "align",
    "alignment_stats",
    "fifo_chunks",
    "query_seed",
    "sub_calls_quantile",
]

T = TypeVar("T")

Pair = tuple[int, int]


def query_seed(run_seed: int, query_id: str) -> int:
    """A stable 64-bit seed for aligning one query, from the run seed and the query id.

    Uses BLAKE2b (not Python's ``hash()``, which is salted per process), so the same
    ``(run_seed, query_id)`` gives the same seed in every process, on every machine.
    """
    if isinstance(run_seed, bool) or not isinstance(run_seed, Integral):
        raise ValueError(f"run_seed={run_seed!r} must be an int")
    if not isinstance(query_id, str):
        raise ValueError(f"query_id={query_id!r} must be a str (the query's id in the store)")
    # Length-prefix the id so that no two (run_seed, query_id) pairs share an encoding.
    payload = f"mgrpo-align\x00{int(run_seed)}\x00{len(query_id)}\x00{query_id}".encode()
    return int.from_bytes(hashlib.blake2b(payload, digest_size=8).digest(), "little")


def _check_counts(sub_counts: Sequence[int]) -> list[int]:
    if isinstance(sub_counts, (str, bytes)):
        raise ValueError(f"sub_counts={sub_counts!r} must be a sequence of ints (calls per rollout)")
    counts = list(sub_counts)
    if not counts or (set(map(type, counts)) == {int} and min(counts) >= 0):
        return counts  # fast path (plain non-negative ints); the checks below are slow
    for k, c in enumerate(counts):
        if isinstance(c, bool) or not isinstance(c, Integral):
            raise ValueError(f"sub_counts[{k}]={c!r} must be an int (the number of sub-agent calls of rollout {k})")
        if c < 0:
            raise ValueError(f"sub_counts[{k}]={c} is negative; a rollout makes 0 or more sub-agent calls")
        counts[k] = int(c)
    return counts


def _check_d(d: int) -> int:
    if type(d) is int and d >= 1:
        return d
    if isinstance(d, bool) or not isinstance(d, Integral) or d < 1:
        raise ValueError(f"d={d!r} must be an int >= 1 (the aligned number of sub-trajectories per rollout)")
    return int(d)


def align(sub_counts: Sequence[int], d: int, seed: int) -> list[list[Pair]]:
    """Align each rollout's sub-agent calls to exactly ``d`` ``(rollout, call)`` pairs.

    Args:
        sub_counts: ``d_k`` for each rollout ``k = 0..K-1`` of one query.
        d: the target number of sub-trajectories per rollout (>= 1).
        seed: a non-negative int, normally ``query_seed(run_seed, query_id)``.

    Returns:
        ``K`` lists; list ``k`` holds ``d`` pairs ``(rollout, call)`` naming existing
        sub-trajectories (see the module docstring for the rules), or ``K`` empty lists when no
        rollout made a call.

    Raises:
        ValueError: ``d < 1``, a count that is negative or not an int, or a negative seed.
    """
    counts = _check_counts(sub_counts)
    d = _check_d(d)
    if not (type(seed) is int or (isinstance(seed, Integral) and not isinstance(seed, bool))) or seed < 0:
        # random.Random uses abs(seed): a negative seed would silently collide with its negation.
        raise ValueError(f"seed={seed!r} must be an int >= 0 (use query_seed(run_seed, query_id))")

    total = sum(counts)
    if total == 0:
        return [[] for _ in counts]

    rand = random.Random(int(seed)).random
    donors: list[Pair] | None = None  # built on first use: all (rollout, call) pairs of the query
    out: list[list[Pair]] = []
    # Index arithmetic runs through map() over C builtins and pairs come from a small cache: this
    # runs for every query of every step (target: 64 queries x K=8 x d=8 in < 5 ms, see
    # tests/mgrpo/test_math_perf.py). Each index is int(u * n) for a fresh uniform u.
    for k, d_k in enumerate(counts):
        if d_k > d:
            # One uniform key per call; the d calls with the smallest keys form a uniform
            # d-subset (ties have probability ~0). Returned in call order.
            keys = [rand() for _ in range(d_k)]
            kept = sorted(sorted(range(d_k), key=keys.__getitem__)[:d])
            out.append(list(map(_own_pairs(k, d_k).__getitem__, kept)))
        elif d_k > 0:
            own = _own_pairs(k, d_k)
            m = d - d_k
            slots = list(own)
            if m:
                u = [rand() for _ in range(m)]
                slots.extend(map(own.__getitem__, map(int, map(mul, u, repeat(d_k, m)))))
            out.append(slots)
        else:
            # Every sub-trajectory of the other rollouts, equally likely; since d_k == 0 the
            # other rollouts hold all of the query's calls.
            if donors is None:
                donors = [pair for j, n in enumerate(counts) for pair in _own_pairs(j, n)]
            u = [rand() for _ in range(d)]
            out.append(list(map(donors.__getitem__, map(int, map(mul, u, repeat(total, d))))))
    return out


@lru_cache(maxsize=4096)
def _own_pairs(rollout: int, n: int) -> tuple[Pair, ...]:
    """``((rollout, 0), ..., (rollout, n - 1))``; cached because the same small pairs recur."""
    return tuple(zip(repeat(rollout, n), range(n)))


def alignment_stats(sub_counts: Sequence[int], d: int) -> dict[str, int]:
    """Counts for the alignment metrics of one query (docs/report.md), independent of the seed.

    Returns a dict with
        ``align_duplicated``: slots filled with a duplicate (``d - d_k`` for ``0 < d_k < d``;
            ``d`` for ``d_k = 0`` when the query has calls at all);
        ``align_dropped``: sub-trajectories not kept in their own rollout's slots
            (``d_k - d`` for ``d_k > d``);
        ``n_sub_trajectories``: ``sum d_k``; ``n_aligned``: ``d * K`` or 0 for a query with no
        calls; ``n_empty_rollouts``: rollouts with ``d_k = 0``; ``empty_group``: 1 when no rollout
        called the sub-agent (the query yields no sub-agent group), else 0.
    """
    counts = _check_counts(sub_counts)
    d = _check_d(d)
    total = sum(counts)
    empty = total == 0
    duplicated = 0 if empty else sum(d - c for c in counts if c < d)
    dropped = sum(c - d for c in counts if c > d)
    return {
        "align_duplicated": duplicated,
        "align_dropped": dropped,
        "n_sub_trajectories": total,
        "n_aligned": 0 if empty else d * len(counts),
        "n_empty_rollouts": sum(1 for c in counts if c == 0),
        "empty_group": int(empty),
    }


def sub_calls_quantile(counts: Iterable[int], q: float = 0.99) -> int:
    """The smallest ``d`` with empirical ``P(d_k <= d) >= q`` (inverted-CDF quantile).

    The paper picks the alignment target d so that ``P(d_k <= d) ~= 0.99``; the harness reports
    this value (``sub_calls_p99``) so a user can choose d from observed rollouts.
    """
    if isinstance(q, bool) or not isinstance(q, (int, float)) or math.isnan(q) or not 0.0 < q <= 1.0:
        raise ValueError(f"q={q!r} must be a probability in (0, 1]")
    values = sorted(_check_counts(list(counts)))
    n = len(values)
    if n == 0:
        raise ValueError("counts is empty; pass the sub-agent call counts of at least one rollout")
    for i, v in enumerate(values):
        # (i + 1) / n is the correctly rounded fraction, so q=0.99 with n=100 selects i=98
        # exactly (q * n would round to 99.00000000000001).
        if (i + 1) / n >= q:
            return v
    return values[-1]  # unreachable for q <= 1; kept for type-checkers


class FifoChunker(Generic[T]):
    """First-in first-out grouping into fixed-size chunks, regardless of query.

    The ``alignment: none`` ablation (docs/paper.md §Trajectory alignment, paper Fig. 8): the sub-agent trainer forms its
    "groups" from sub-trajectories in arrival order. Items that do not fill a chunk yet stay
    pending until later pushes complete it.
    """

    def __init__(self, size: int) -> None:
        if isinstance(size, bool) or not isinstance(size, Integral) or size < 1:
            raise ValueError(f"size={size!r} must be an int >= 1 (the chunk size, e.g. d * K)")
        self.size = int(size)
        self._pending: deque[T] = deque()

    def push(self, items: Iterable[T]) -> None:
        """Append items in order."""
        self._pending.extend(items)

    def pop_ready(self) -> list[list[T]]:
        """Remove and return every complete chunk, oldest first; the remainder stays pending."""
        ready: list[list[T]] = []
        while len(self._pending) >= self.size:
            ready.append([self._pending.popleft() for _ in range(self.size)])
        return ready

    @property
    def pending(self) -> int:
        """Items waiting for their chunk to fill."""
        return len(self._pending)

    def __len__(self) -> int:
        return len(self._pending)


def fifo_chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Yield consecutive full chunks of ``size`` items; a final partial chunk is not yielded
    (as with :class:`FifoChunker`, an incomplete chunk never becomes a training group).

    ``size`` is validated at call time, not at the first ``next()``.
    """
    chunker: FifoChunker[T] = FifoChunker(size)

    def gen() -> Iterator[list[T]]:
        for item in items:
            chunker.push((item,))
            yield from chunker.pop_ready()

    return gen()
