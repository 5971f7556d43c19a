"""The shared store between decoupled roles (DESIGN §4; M-GRPO, arXiv 2511.13288: agents on separate
servers train decoupled and exchange only small statistics, never gradients or trajectories).

The planner role writes one :class:`RolloutRecord` per rollout ``k`` of query ``q`` (``R_M``,
``r_correct``, ``r_format``, its sub-call ids and the policy versions that produced it) and one
:class:`SubCallRecord` per sub-agent call. The sub-agent role takes the next **complete** query group
(all ``K`` rollouts recorded) with :meth:`Store.take_next_group`, aligns it and computes ``R_S`` and
advantages (§3). Heartbeats, policy versions and run statistics travel through the same store.

Backends, chosen by URL with :func:`open_store`:

- ``sqlite:///relative/path/store.db`` and ``sqlite:////absolute/path/store.db`` (the SQLAlchemy
  convention: what follows ``sqlite:///`` is the path as written): the embedded default. WAL mode,
  a busy timeout, every write one ``BEGIN IMMEDIATE`` transaction, so any number of processes on one
  machine may share a file. ``synchronous=NORMAL``: durable across process crashes (what resume
  needs); a power cut may lose the last transactions (never corrupt the file).
- ``redis://host:port/db`` (also ``rediss://`` for TLS, ``redis://:password@host:port/db``):
  multi-node. Every multi-key write is one Lua script, which Redis runs atomically; the scripts check
  everything before their first write, so a refused write changes nothing (this is stronger than
  MULTI/EXEC, which does not roll back a failing command either). Keys of a run share the hash tag
  ``{run_id}``: ``mgrpo:{<run_id>}:...``. Standalone Redis (or a primary); timestamps use the
  server clock, so ages are comparable across nodes.

Semantics (the contract that ``tests/mgrpo/test_store.py`` checks on both backends):

- **Idempotent upserts.** Rollouts are keyed ``(run_id, query_id, rollout)``, sub-calls
  ``(run_id, query_id, rollout, call)``. Writing a key again replaces the record, never duplicates it,
  so a retried or resumed role never double-counts. :meth:`Store.upsert_rollouts` writes several
  rollouts (a whole group) as one atomic write: all land or none.
- **Group size.** The size ``K`` of a query's group is declared with :meth:`Store.declare_group` or
  with ``group_size=`` on the first :meth:`Store.upsert_rollout` of that query (decision: a rollout
  of a query whose ``K`` is unknown is refused, because "complete" would be undefined; a conflicting
  ``K`` and a rollout index ``>= K`` are refused too). A group becomes complete when its ``K``-th
  distinct rollout lands; completion order is the order of those writes. A rollout rewritten after
  completion replaces the stored record but does not re-queue the group.
- **Write sub-call records before the rollout record** that completes the group: a group is handed
  out with the sub-call records present at that moment.
- **Hand-out.** :meth:`Store.take_next_group` returns each complete group once per consumer name,
  in completion order, atomically across processes (two processes taking for the same consumer
  never both get a group). Taking is the commit point of the consumer's position: the group is
  recorded as *taken* (its position in the consumer's log is ``Group.position``). When the consumer
  is done with it (its optimizer step and checkpoint are written) it calls :meth:`Store.ack_group`,
  which marks it *done*.
- **Resume.** A group that was taken but never acknowledged is handed out again, before any new
  group, to a store handle of the same consumer name that was **opened after the group was taken**
  (a restarted process). Handles that were already open when it was taken (concurrent workers of
  the same consumer name) never get it, so live workers do not steal each other's groups.
  ``Group.deliveries > 1`` marks a redelivery. Recipe for a trainer ("a killed run resumes without
  losing or double-counting a group"): train on taken groups; when a checkpoint is saved, record in
  it the largest ``Group.position`` it covers, then ack the groups it covers (so *done* implies
  *checkpointed*). On resume, a redelivered group whose position is <= the checkpoint's was trained
  on already (killed between checkpoint and ack): ack it without training; any other group is
  trained on. :meth:`Store.consumed_groups` (the ordered, persistent consumer log) and
  :meth:`Store.pending_groups` let a resume check that nothing was lost or taken twice.
- **Schema versions.** Every record carries ``schema`` (:data:`SCHEMA_VERSION`); reading a record
  of another version raises :class:`SchemaVersionError` naming both versions. A store file/database
  created by another layout version is refused at open the same way.
- **Errors say what to check**: :class:`StoreTimeout` names the run, the consumer and the incomplete
  groups with their rollout counts and the roles' heartbeat ages; :class:`StoreUnavailable` names the
  host:port or file.

Public API: :func:`open_store` -> :class:`Store` (:class:`SqliteStore`, :class:`RedisStore`) with
``declare_group``, ``upsert_rollout(s)``, ``upsert_sub_call``, ``get_rollouts``, ``get_sub_calls``,
``get_group``, ``group_progress``, ``take_next_group``, ``ack_group``, ``consumed_groups``,
``pending_groups``, ``heartbeat(s)``, ``set/get_policy_version``, ``put/get_stat``, ``now``,
``close``; records :class:`RolloutRecord`, :class:`SubCallRecord`; results :class:`Group`,
:class:`ConsumedGroup`, :class:`GroupProgress`, :class:`Heartbeat`; errors under :class:`StoreError`.

Deliberate deviations / decisions where DESIGN §4 is silent:

- ``get_policy_version`` of a role that never set one returns 0 ("initial weights").
- ``heartbeats()`` returns ``{role: Heartbeat(time, info)}``; ``Heartbeat`` is a named tuple, so
  ``time, info = hb[role]`` works.
- ``n_sub_calls`` defaults to ``len(sub_call_ids)`` and must equal it when both are given.
- One store handle per process (open it after ``fork``/``spawn``); a handle is thread-safe. In a
  data-parallel trainer, take groups on one rank and broadcast them (or give each rank its own
  consumer name only if every rank should see every group).
- Store clock: sqlite uses this host's ``time.time()``, redis the server's ``TIME``.
- Keys of a run are never expired by the store; delete a finished run's ``mgrpo:{<run_id>}:*`` keys
  (or its ``store.db``) when it is no longer needed.
"""

from __future__ import annotations

import abc
import json
import math
import re
import sqlite3
import threading
import time
import urllib.parse
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, NamedTuple, Sequence

__all__ = [
    "SCHEMA_VERSION",
    "ConsumedGroup",
    "Group",
    "GroupProgress",
    "GroupSizeError",
    "GroupStateError",
    "Heartbeat",
    "RedisStore",
    "RolloutRecord",
    "SchemaVersionError",
    "SqliteStore",
    "Store",
    "StoreError",
    "StoreTimeout",
    "StoreURLError",
    "StoreUnavailable",
    "SubCallRecord",
    "open_store",
]

#: Version of the record schema and of the store layout. Bump on any incompatible change.
SCHEMA_VERSION = 1

ACCEPTED_URL_FORMS = (
    "'sqlite:///relative/path/store.db', 'sqlite:////absolute/path/store.db', "
    "'redis://host:port/db' (e.g. 'redis://127.0.0.1:6379/0'; also 'rediss://' and "
    "'redis://:password@host:port/db')"
)

# Names used inside Redis key names / SQL keys: no braces (hash tag), no ':' in consumer names.
_RUN_ID_RE = re.compile(r"^[A-Za-z0-9._@+=-][A-Za-z0-9._:@+=/-]{0,199}$")
_CONSUMER_RE = re.compile(r"^[A-Za-z0-9._@+=/-]{1,100}$")


# --------------------------------------------------------------------------------------- errors


class StoreError(Exception):
    """Base class of the store's errors."""


class StoreURLError(StoreError, ValueError):
    """A store URL that is not one of the accepted forms."""


class StoreUnavailable(StoreError):
    """The backend cannot be reached (Redis down, SQLite file locked or unwritable)."""


class StoreTimeout(StoreError, TimeoutError):
    """No complete group became available within the timeout."""


class SchemaVersionError(StoreError):
    """A record (or store) was written with another schema version than this code reads."""


class GroupSizeError(StoreError, ValueError):
    """The group size K of a query is unknown, conflicting, or a rollout index is out of range."""


class GroupStateError(StoreError, LookupError):
    """A group is not in the state the operation needs (not complete, not taken)."""


# -------------------------------------------------------------------------------------- records


def _finite(name: str, value: Any, where: str) -> float:
    if isinstance(value, bool):
        value = float(value)
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where}: {name} must be a finite number, got {value!r}")
    return float(value)


def _nonneg_int(name: str, value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where}: {name} must be an int >= 0, got {value!r}")
    return value


def _query_id(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{where}: query_id must be a non-empty str, got {value!r}")
    return value


def _json_dict(name: str, value: Any, where: str) -> dict:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: {name} must be a dict, got {type(value).__name__}")
    try:
        # Round-trip now, so an unserialisable value fails at construction, not mid-write.
        return json.loads(json.dumps(dict(value), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {name} must be JSON-serialisable without NaN/inf: {exc}") from None


@dataclass(frozen=True)
class RolloutRecord:
    """What the planner role writes for rollout ``rollout`` (0..K-1) of query ``query_id`` (§3, §4).

    ``R_M`` is the planner reward ``0.1 r_format + 0.9 r_correct``; ``r_correct`` is copied to every
    sub-call of the rollout by the sub-agent role. ``sub_call_ids`` identify the rollout's sub-agent
    calls (``n_sub_calls`` defaults to their number), ``policy_version`` is the planner policy that
    generated the rollout and ``sub_policy_versions`` the sub-agent policies that answered its calls.
    ``extra`` is free-form JSON.
    """

    query_id: str
    rollout: int
    R_M: float
    r_correct: float
    r_format: float
    n_sub_calls: int | None = None
    sub_call_ids: Sequence[str | int] = ()
    policy_version: int = 0
    sub_policy_versions: Sequence[int] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        where = f"rollout record (query_id={self.query_id!r}, rollout={self.rollout!r})"
        _query_id(self.query_id, where)
        _nonneg_int("rollout", self.rollout, where)
        for name in ("R_M", "r_correct", "r_format"):
            object.__setattr__(self, name, _finite(name, getattr(self, name), where))
        ids = self.sub_call_ids
        if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
            raise ValueError(f"{where}: sub_call_ids must be a list, got {ids!r}")
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, (str, int)):
                raise ValueError(f"{where}: sub_call_ids must hold str or int ids, got {i!r}")
        object.__setattr__(self, "sub_call_ids", tuple(ids))
        if self.n_sub_calls is None:
            object.__setattr__(self, "n_sub_calls", len(ids))
        else:
            _nonneg_int("n_sub_calls", self.n_sub_calls, where)
            if self.n_sub_calls != len(ids):
                raise ValueError(
                    f"{where}: n_sub_calls={self.n_sub_calls} but {len(ids)} sub_call_ids were given;"
                    " they describe the same calls (leave n_sub_calls out to derive it)"
                )
        _nonneg_int("policy_version", self.policy_version, where)
        versions = self.sub_policy_versions
        if isinstance(versions, (str, bytes)) or not isinstance(versions, Sequence):
            raise ValueError(f"{where}: sub_policy_versions must be a list of ints, got {versions!r}")
        for v in versions:
            _nonneg_int("sub_policy_versions[...]", v, where)
        object.__setattr__(self, "sub_policy_versions", tuple(versions))
        object.__setattr__(self, "extra", _json_dict("extra", self.extra, where))

    def to_json(self) -> str:
        return _dumps(
            {
                "schema": SCHEMA_VERSION,
                "query_id": self.query_id,
                "rollout": self.rollout,
                "R_M": self.R_M,
                "r_correct": self.r_correct,
                "r_format": self.r_format,
                "n_sub_calls": self.n_sub_calls,
                "sub_call_ids": list(self.sub_call_ids),
                "policy_version": self.policy_version,
                "sub_policy_versions": list(self.sub_policy_versions),
                "extra": self.extra,
            }
        )


@dataclass(frozen=True)
class SubCallRecord:
    """One sub-agent call ``call`` of rollout ``rollout`` of query ``query_id`` (§3).

    ``r_expert`` is the judge's score of the subtask result in [0, 1] (``None`` until judged),
    ``result_hash`` a hash of the returned result text (trajectories stay in the sub-agent role),
    ``policy_version`` the sub-agent policy that ran the call, ``r_format`` the sub-agent's own
    format reward. ``extra`` is free-form JSON.
    """

    query_id: str
    rollout: int
    call: int
    r_expert: float | None = None
    result_hash: str | None = None
    policy_version: int | None = None
    r_format: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        where = (
            f"sub-call record (query_id={self.query_id!r}, rollout={self.rollout!r}, call={self.call!r})"
        )
        _query_id(self.query_id, where)
        _nonneg_int("rollout", self.rollout, where)
        _nonneg_int("call", self.call, where)
        for name in ("r_expert", "r_format"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _finite(name, getattr(self, name), where))
        if self.result_hash is not None and not isinstance(self.result_hash, str):
            raise ValueError(f"{where}: result_hash must be a str or None, got {self.result_hash!r}")
        if self.policy_version is not None:
            _nonneg_int("policy_version", self.policy_version, where)
        object.__setattr__(self, "extra", _json_dict("extra", self.extra, where))

    def to_json(self) -> str:
        return _dumps(
            {
                "schema": SCHEMA_VERSION,
                "query_id": self.query_id,
                "rollout": self.rollout,
                "call": self.call,
                "r_expert": self.r_expert,
                "result_hash": self.result_hash,
                "policy_version": self.policy_version,
                "r_format": self.r_format,
                "extra": self.extra,
            }
        )


def _dumps(obj: Any) -> str:
    return json.dumps(obj, allow_nan=False, separators=(",", ":"), sort_keys=True)


def _decode(cls: type, text: str | bytes, where: str):
    """Parse a stored record, refusing another schema version with a message naming both."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise StoreError(f"{where}: stored record is not valid JSON ({exc}); the store is damaged") from None
    found = data.get("schema") if isinstance(data, dict) else None
    if found != SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{where}: record has schema version {found!r}, this code reads version {SCHEMA_VERSION}. "
            "It was written by another version of mgrpo-harness: read it with that version, or "
            "start a fresh store / run_id."
        )
    data.pop("schema")
    try:
        return cls(**data)
    except TypeError as exc:
        raise SchemaVersionError(f"{where}: record fields do not match schema {SCHEMA_VERSION}: {exc}") from None


# ------------------------------------------------------------------------------ returned values


class Heartbeat(NamedTuple):
    """Last heartbeat of a role: store-clock time (unix seconds) and the info dict it sent."""

    time: float
    info: dict


class GroupProgress(NamedTuple):
    """How far a declared group is: ``have`` of ``k`` rollouts recorded."""

    have: int
    k: int
    complete: bool


@dataclass(frozen=True)
class ConsumedGroup:
    """One entry of a consumer's persistent log: ``state`` is ``"taken"`` or ``"done"`` (acked)."""

    query_id: str
    position: int
    state: str
    deliveries: int
    taken_at: float
    acked_at: float | None


@dataclass(frozen=True)
class Group:
    """A complete query group as handed to a consumer: K rollouts (index order) and the sub-calls
    present at hand-out (ordered by rollout, call)."""

    run_id: str
    query_id: str
    k: int
    rollouts: tuple[RolloutRecord, ...]
    sub_calls: tuple[SubCallRecord, ...]
    completion_seq: int
    consumer: str | None = None
    position: int | None = None
    deliveries: int = 0

    @property
    def redelivered(self) -> bool:
        """True when this group was taken before by a process that did not acknowledge it."""
        return self.deliveries > 1

    def sub_calls_of(self, rollout: int) -> tuple[SubCallRecord, ...]:
        return tuple(s for s in self.sub_calls if s.rollout == rollout)


# ---------------------------------------------------------------------------------- base class


def _check_run_id(run_id: Any) -> str:
    if not isinstance(run_id, str) or not _RUN_ID_RE.match(run_id):
        raise ValueError(
            f"run_id must be 1-200 characters of letters, digits and . _ : @ + = - / (no spaces or "
            f"braces, not starting with ':' or '/'), got {run_id!r}"
        )
    return run_id


def _check_consumer(consumer: Any) -> str:
    if not isinstance(consumer, str) or not _CONSUMER_RE.match(consumer):
        raise ValueError(
            f"consumer must be 1-100 characters of letters, digits and . _ @ + = - /, got {consumer!r}"
        )
    return consumer


def _check_role(role: Any) -> str:
    if not isinstance(role, str) or not role:
        raise ValueError(f"role must be a non-empty str, got {role!r}")
    return role


def _check_k(k: Any, query_id: str) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise GroupSizeError(f"group size of query {query_id!r} must be an int >= 1, got {k!r}")
    return k


class Store(abc.ABC):
    """The shared store of one run (all records are scoped to ``run_id``). See the module docstring
    for the semantics; :func:`open_store` picks the backend from the URL."""

    backend: str = "?"

    def __init__(self, url: str, run_id: str) -> None:
        self.url = url
        self.run_id = _check_run_id(run_id)
        # Identifies this handle as the owner of the groups it takes (redelivery rule, see module doc).
        self.session = uuid.uuid4().hex

    # ---- records
    @abc.abstractmethod
    def declare_group(self, query_id: str, k: int) -> None:
        """Declare that query ``query_id`` has a group of ``k`` rollouts (idempotent; a different
        ``k`` than declared before raises :class:`GroupSizeError`)."""

    def upsert_rollout(self, record: RolloutRecord, *, group_size: int | None = None) -> bool:
        """Insert or replace the record of ``(query_id, rollout)``. ``group_size`` declares K (needed
        unless :meth:`declare_group` was called). Returns True when this write completed the group."""
        return bool(self.upsert_rollouts([record], group_size=group_size))

    def upsert_rollouts(self, records: Sequence[RolloutRecord], *, group_size: int | None = None) -> list[str]:
        """Upsert several rollouts (typically the K rollouts of a group) in ONE atomic write: either
        all land or, when one is refused, none. Returns the query ids this write completed, in
        completion order. Much cheaper per record than single upserts (one transaction/round trip)."""
        records = list(records)
        for record in records:
            if not isinstance(record, RolloutRecord):
                raise TypeError(f"upsert_rollouts needs RolloutRecord objects, got {type(record).__name__}")
        if group_size is not None:
            for q in {r.query_id for r in records}:
                _check_k(group_size, q)
        if not records:
            return []
        return self._upsert_rollouts(records, group_size)

    @abc.abstractmethod
    def _upsert_rollouts(self, records: list[RolloutRecord], group_size: int | None) -> list[str]:
        """Backend part of :meth:`upsert_rollouts` (records already type-checked)."""

    @abc.abstractmethod
    def upsert_sub_call(self, record: SubCallRecord) -> None:
        """Insert or replace the record of ``(query_id, rollout, call)``."""

    @abc.abstractmethod
    def get_rollouts(self, query_id: str) -> list[RolloutRecord]:
        """The recorded rollouts of a query, by rollout index (empty when none)."""

    @abc.abstractmethod
    def get_sub_calls(self, query_id: str) -> list[SubCallRecord]:
        """The recorded sub-calls of a query, by (rollout, call) (empty when none)."""

    @abc.abstractmethod
    def get_group(self, query_id: str) -> Group:
        """A complete group by id, without taking it (for resume reconciliation).
        Raises :class:`GroupStateError` when the group is unknown or incomplete."""

    @abc.abstractmethod
    def group_progress(self) -> dict[str, GroupProgress]:
        """Every declared group of the run with its rollout count."""

    # ---- consumption
    def take_next_group(self, timeout: float, *, consumer: str = "sub") -> Group:
        """The next complete group for ``consumer``, in completion order (a redelivery of a group
        left unacknowledged by a previous process first). Blocks up to ``timeout`` seconds, then
        raises :class:`StoreTimeout` naming what it waited for."""
        _check_consumer(consumer)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
            raise ValueError(f"timeout must be a number of seconds >= 0, got {timeout!r}")
        deadline = time.monotonic() + timeout
        delay = 0.005
        while True:
            group = self._try_take(consumer)
            if group is not None:
                return group
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise StoreTimeout(self._describe_wait(consumer, timeout))
            time.sleep(min(delay, remaining))
            delay = min(delay * 1.5, 0.1)

    @abc.abstractmethod
    def _try_take(self, consumer: str) -> Group | None:
        """One atomic attempt of take_next_group."""

    @abc.abstractmethod
    def ack_group(self, query_id: str, *, consumer: str = "sub") -> bool:
        """Mark a taken group done for ``consumer``. Returns False when it was already done
        (idempotent); raises :class:`GroupStateError` when the consumer never took it."""

    @abc.abstractmethod
    def consumed_groups(self, consumer: str = "sub") -> list[ConsumedGroup]:
        """The consumer's persistent log, in take order (taken and done groups)."""

    def pending_groups(self, consumer: str = "sub") -> list[str]:
        """Query ids taken by ``consumer`` but not acknowledged, in take order."""
        return [c.query_id for c in self.consumed_groups(consumer) if c.state == "taken"]

    # ---- roles
    @abc.abstractmethod
    def heartbeat(self, role: str, info: Mapping[str, Any] | None = None) -> None:
        """Record that ``role`` is alive now (store clock), with optional JSON ``info``."""

    @abc.abstractmethod
    def heartbeats(self) -> dict[str, Heartbeat]:
        """Last heartbeat of every role."""

    @abc.abstractmethod
    def set_policy_version(self, role: str, version: int) -> None:
        """Publish the policy version (optimizer steps taken) of ``role``."""

    @abc.abstractmethod
    def get_policy_version(self, role: str) -> int:
        """The last published policy version of ``role``; 0 when none was published."""

    @abc.abstractmethod
    def put_stat(self, key: str, value: Any) -> None:
        """Store a JSON value under ``key`` (run-level statistics)."""

    @abc.abstractmethod
    def get_stat(self, key: str, default: Any = None) -> Any:
        """The JSON value stored under ``key``, or ``default``."""

    @abc.abstractmethod
    def now(self) -> float:
        """The store clock (unix seconds): the Redis server's for redis, this host's for sqlite."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections; the handle is unusable afterwards."""

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(url={_redact(self.url)!r}, run_id={self.run_id!r})"

    # ---- shared helpers
    def _describe_wait(self, consumer: str, timeout: float) -> str:
        head = (
            f"no complete group for consumer {consumer!r} of run {self.run_id!r} within "
            f"{float(timeout):.1f} s (store {_redact(self.url)})"
        )
        try:
            progress = self.group_progress()
            consumed = len(self.consumed_groups(consumer))
            beats = self.heartbeats()
            now = self.now()
        except StoreError as exc:  # the wait message must not hide the original situation
            return f"{head}; could not describe the store: {exc}"
        if not progress:
            return (
                f"{head}; no group has been declared in this run yet (no rollout written). Check that "
                "the planner role is running and writes to the same store URL and run_id."
            )
        incomplete = sorted((q, p) for q, p in progress.items() if not p.complete)
        n_complete = len(progress) - len(incomplete)
        shown = ", ".join(f"{q} ({p.have}/{p.k} rollouts)" for q, p in incomplete[:8])
        more = f", ... {len(incomplete) - 8} more" if len(incomplete) > 8 else ""
        parts = [
            head,
            f"{_plural(len(progress), 'group')} declared, {n_complete} complete ({consumed} already taken by "
            f"{consumer!r}), {len(incomplete)} incomplete" + (f": {shown}{more}" if incomplete else ""),
        ]
        if beats:
            ages = ", ".join(f"{r} {max(0.0, now - hb.time):.1f} s ago" for r, hb in sorted(beats.items()))
            parts.append(f"last heartbeats: {ages}")
        else:
            parts.append("no role has sent a heartbeat")
        return "; ".join(parts) + ". Check that the planner role is running and writing rollouts."


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _redact(url: str) -> str:
    """The URL without its password (for messages)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return url
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    return url


# ---------------------------------------------------------------------------------------- sqlite

_SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS groups (
    run_id TEXT NOT NULL, query_id TEXT NOT NULL, k INTEGER NOT NULL,
    completed_seq INTEGER, completed_at REAL,
    PRIMARY KEY (run_id, query_id));
CREATE INDEX IF NOT EXISTS groups_by_completion ON groups (run_id, completed_seq);
CREATE TABLE IF NOT EXISTS rollouts (
    run_id TEXT NOT NULL, query_id TEXT NOT NULL, rollout INTEGER NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (run_id, query_id, rollout)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sub_calls (
    run_id TEXT NOT NULL, query_id TEXT NOT NULL, rollout INTEGER NOT NULL, call INTEGER NOT NULL,
    data TEXT NOT NULL, PRIMARY KEY (run_id, query_id, rollout, call)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS consumers (
    run_id TEXT NOT NULL, consumer TEXT NOT NULL, cursor INTEGER NOT NULL, n_taken INTEGER NOT NULL,
    PRIMARY KEY (run_id, consumer));
CREATE TABLE IF NOT EXISTS takes (
    run_id TEXT NOT NULL, consumer TEXT NOT NULL, query_id TEXT NOT NULL, position INTEGER NOT NULL,
    state TEXT NOT NULL, owner TEXT NOT NULL, ticket INTEGER NOT NULL, deliveries INTEGER NOT NULL,
    taken_at REAL NOT NULL, acked_at REAL,
    PRIMARY KEY (run_id, consumer, query_id));
CREATE INDEX IF NOT EXISTS takes_by_state ON takes (run_id, consumer, state, position);
CREATE TABLE IF NOT EXISTS counters (
    run_id TEXT NOT NULL, name TEXT NOT NULL, value INTEGER NOT NULL, PRIMARY KEY (run_id, name));
CREATE TABLE IF NOT EXISTS heartbeats (
    run_id TEXT NOT NULL, role TEXT NOT NULL, time REAL NOT NULL, info TEXT NOT NULL,
    PRIMARY KEY (run_id, role));
CREATE TABLE IF NOT EXISTS policy_versions (
    run_id TEXT NOT NULL, role TEXT NOT NULL, version INTEGER NOT NULL, PRIMARY KEY (run_id, role));
CREATE TABLE IF NOT EXISTS stats (
    run_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (run_id, key));
"""


class SqliteStore(Store):
    """SQLite backend: one file shared by the processes of one machine (WAL, ``BEGIN IMMEDIATE``)."""

    backend = "sqlite"

    def __init__(self, url: str, run_id: str, path: Path, *, busy_timeout_s: float = 30.0) -> None:
        super().__init__(url, run_id)
        self.path = path
        self._busy_timeout_s = busy_timeout_s
        self._lock = threading.RLock()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(
                str(path), timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as exc:
            raise StoreUnavailable(
                f"cannot open the sqlite store {path} ({exc}); check that the directory exists and is "
                "writable"
            ) from None
        try:
            mode = self._enable_wal()
            if str(mode).lower() != "wal":
                raise StoreUnavailable(
                    f"sqlite store {path}: WAL mode could not be enabled (journal_mode={mode}); "
                    "use a local filesystem (WAL does not work on network filesystems)"
                )
            self._conn.execute("PRAGMA synchronous=NORMAL")
            with self._write() as c:
                for statement in _SQLITE_SCHEMA.split(";"):
                    if statement.strip():
                        c.execute(statement)
                row = c.execute("SELECT value FROM store_meta WHERE key='schema'").fetchone()
                if row is None:
                    c.execute("INSERT INTO store_meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
                elif row[0] != str(SCHEMA_VERSION):
                    raise SchemaVersionError(
                        f"sqlite store {path} has layout schema version {row[0]}, this code reads "
                        f"version {SCHEMA_VERSION}; use a fresh store file or the mgrpo-harness "
                        "version that wrote it"
                    )
            self._open_ticket = self._counter_value("ticket")
        except BaseException:
            self._conn.close()
            raise

    def _enable_wal(self) -> str:
        """``PRAGMA journal_mode=WAL``, retried while another process does the same on a fresh file.

        Switching the journal mode needs an exclusive lock, and SQLite answers "database is locked"
        at once (without its busy handler) when two roles open a new store in the same instant;
        seen about 1 launch in 20. The retry is bounded by the store's busy timeout.
        """
        deadline = time.monotonic() + self._busy_timeout_s
        delay = 0.01
        while True:
            try:
                return str(self._conn.execute("PRAGMA journal_mode=WAL").fetchone()[0])
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.2)

    # ---- transactions
    @contextmanager
    def _write(self) -> Iterator[Any]:
        """One ``BEGIN IMMEDIATE`` transaction: all its statements commit together or not at all."""
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise self._unavailable(exc) from None
            try:
                yield self._conn
                self._conn.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                self._rollback()
                raise self._unavailable(exc) from None
            except BaseException:
                self._rollback()
                raise

    @contextmanager
    def _read(self) -> Iterator[Any]:
        """A consistent read snapshot (deferred transaction)."""
        with self._lock:
            try:
                self._conn.execute("BEGIN")
                yield self._conn
                self._conn.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                self._rollback()
                raise self._unavailable(exc) from None
            except BaseException:
                self._rollback()
                raise

    def _rollback(self) -> None:
        # SQLite rolls some failures back by itself (e.g. SQLITE_FULL); only roll back what is open.
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    def _unavailable(self, exc: Exception) -> StoreUnavailable:
        if "locked" in str(exc) or "busy" in str(exc):
            return StoreUnavailable(
                f"sqlite store {self.path} stayed locked for {self._busy_timeout_s:.0f} s ({exc}): another "
                "process holds a long write transaction; check for a hung role process"
            )
        return StoreUnavailable(f"sqlite store {self.path}: {exc}; check the file and its directory")

    def _counter_value(self, name: str) -> int:
        with self._lock:
            row = self._conn.execute(
                "SELECT value FROM counters WHERE run_id=? AND name=?", (self.run_id, name)
            ).fetchone()
        return int(row[0]) if row else 0

    def _bump(self, c: Any, name: str) -> int:
        return int(
            c.execute(
                "INSERT INTO counters (run_id, name, value) VALUES (?, ?, 1) "
                "ON CONFLICT (run_id, name) DO UPDATE SET value = value + 1 RETURNING value",
                (self.run_id, name),
            ).fetchone()[0]
        )

    # ---- records
    def _resolve_k(self, c: Any, query_id: str, group_size: int | None) -> tuple[int, bool, int | None]:
        """(k, known before, completed_seq) for a write; raises before anything is written."""
        row = c.execute(
            "SELECT k, completed_seq FROM groups WHERE run_id=? AND query_id=?", (self.run_id, query_id)
        ).fetchone()
        if row is not None:
            k = int(row[0])
            if group_size is not None and group_size != k:
                raise GroupSizeError(_conflict_msg(query_id, k, group_size))
            return k, True, row[1]
        if group_size is None:
            raise GroupSizeError(_unknown_k_msg(query_id))
        return group_size, False, None

    def declare_group(self, query_id: str, k: int) -> None:
        _query_id(query_id, "declare_group")
        _check_k(k, query_id)
        with self._write() as c:
            _, known, _ = self._resolve_k(c, query_id, k)
            if not known:
                c.execute("INSERT INTO groups (run_id, query_id, k) VALUES (?, ?, ?)", (self.run_id, query_id, k))

    def _upsert_rollouts(self, records: list[RolloutRecord], group_size: int | None) -> list[str]:
        rows = [(self.run_id, r.query_id, r.rollout, r.to_json()) for r in records]
        completed: list[str] = []
        with self._write() as c:
            groups: dict[str, tuple[int, bool, int | None]] = {}
            for r in records:  # validate everything first (the transaction would roll back anyway)
                if r.query_id not in groups:
                    groups[r.query_id] = self._resolve_k(c, r.query_id, group_size)
                k = groups[r.query_id][0]
                if r.rollout >= k:
                    raise GroupSizeError(_range_msg(r.query_id, r.rollout, k))
            c.executemany(
                "INSERT INTO groups (run_id, query_id, k) VALUES (?, ?, ?)",
                [(self.run_id, q, k) for q, (k, known, _) in groups.items() if not known],
            )
            c.executemany(
                "INSERT INTO rollouts (run_id, query_id, rollout, data) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (run_id, query_id, rollout) DO UPDATE SET data = excluded.data",
                rows,
            )
            for q, (k, _, seq) in groups.items():
                if seq is None and self._complete_if_full(c, q, k):
                    completed.append(q)
        return completed

    def _complete_if_full(self, c: Any, query_id: str, k: int) -> bool:
        (have,) = c.execute(
            "SELECT COUNT(*) FROM rollouts WHERE run_id=? AND query_id=?", (self.run_id, query_id)
        ).fetchone()
        if have < k:
            return False
        seq = self._bump(c, "completion")
        c.execute(
            "UPDATE groups SET completed_seq=?, completed_at=? WHERE run_id=? AND query_id=?",
            (seq, time.time(), self.run_id, query_id),
        )
        return True

    def upsert_sub_call(self, record: SubCallRecord) -> None:
        if not isinstance(record, SubCallRecord):
            raise TypeError(f"upsert_sub_call needs a SubCallRecord, got {type(record).__name__}")
        data = record.to_json()
        with self._write() as c:
            c.execute(
                "INSERT INTO sub_calls (run_id, query_id, rollout, call, data) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (run_id, query_id, rollout, call) DO UPDATE SET data = excluded.data",
                (self.run_id, record.query_id, record.rollout, record.call, data),
            )

    def _load_rollouts(self, c: Any, query_id: str) -> list[RolloutRecord]:
        rows = c.execute(
            "SELECT rollout, data FROM rollouts WHERE run_id=? AND query_id=? ORDER BY rollout",
            (self.run_id, query_id),
        ).fetchall()
        return [_decode(RolloutRecord, d, f"rollout ({self.run_id}, {query_id}, {r})") for r, d in rows]

    def _load_sub_calls(self, c: Any, query_id: str) -> list[SubCallRecord]:
        rows = c.execute(
            "SELECT rollout, call, data FROM sub_calls WHERE run_id=? AND query_id=? ORDER BY rollout, call",
            (self.run_id, query_id),
        ).fetchall()
        return [
            _decode(SubCallRecord, d, f"sub-call ({self.run_id}, {query_id}, {r}, {i})") for r, i, d in rows
        ]

    def get_rollouts(self, query_id: str) -> list[RolloutRecord]:
        with self._read() as c:
            return self._load_rollouts(c, query_id)

    def get_sub_calls(self, query_id: str) -> list[SubCallRecord]:
        with self._read() as c:
            return self._load_sub_calls(c, query_id)

    def _build_group(self, c: Any, query_id: str, **consumer_info: Any) -> Group:
        row = c.execute(
            "SELECT k, completed_seq FROM groups WHERE run_id=? AND query_id=?", (self.run_id, query_id)
        ).fetchone()
        if row is None or row[1] is None:
            have = len(self._load_rollouts(c, query_id)) if row else 0
            raise GroupStateError(_not_complete_msg(self.run_id, query_id, have, row[0] if row else None))
        return Group(
            run_id=self.run_id,
            query_id=query_id,
            k=int(row[0]),
            rollouts=tuple(self._load_rollouts(c, query_id)),
            sub_calls=tuple(self._load_sub_calls(c, query_id)),
            completion_seq=int(row[1]),
            **consumer_info,
        )

    def get_group(self, query_id: str) -> Group:
        with self._read() as c:
            return self._build_group(c, query_id)

    def group_progress(self) -> dict[str, GroupProgress]:
        with self._read() as c:
            rows = c.execute(
                "SELECT g.query_id, g.k, g.completed_seq, "
                "(SELECT COUNT(*) FROM rollouts r WHERE r.run_id = g.run_id AND r.query_id = g.query_id) "
                "FROM groups g WHERE g.run_id=?",
                (self.run_id,),
            ).fetchall()
        return {q: GroupProgress(int(n), int(k), seq is not None) for q, k, seq, n in rows}

    # ---- consumption
    def _candidate_exists(self, consumer: str) -> bool:
        """Cheap check without the write lock, so idle polling does not block the writers."""
        with self._lock:
            row = self._conn.execute(
                "SELECT EXISTS (SELECT 1 FROM groups WHERE run_id=?1 AND completed_seq > "
                "  COALESCE((SELECT cursor FROM consumers WHERE run_id=?1 AND consumer=?2), 0)) "
                "OR EXISTS (SELECT 1 FROM takes WHERE run_id=?1 AND consumer=?2 AND state='taken' "
                "  AND owner<>?3 AND ticket<=?4)",
                (self.run_id, consumer, self.session, self._open_ticket),
            ).fetchone()
        return bool(row[0])

    def _try_take(self, consumer: str) -> Group | None:
        try:
            if not self._candidate_exists(consumer):
                return None
        except sqlite3.OperationalError as exc:
            raise self._unavailable(exc) from None
        with self._write() as c:
            stale = c.execute(
                "SELECT query_id, position, deliveries FROM takes WHERE run_id=? AND consumer=? "
                "AND state='taken' AND owner<>? AND ticket<=? ORDER BY position LIMIT 1",
                (self.run_id, consumer, self.session, self._open_ticket),
            ).fetchone()
            if stale is not None:
                query_id, position, deliveries = stale[0], int(stale[1]), int(stale[2]) + 1
                group = self._build_group(
                    c, query_id, consumer=consumer, position=position, deliveries=deliveries
                )
                c.execute(
                    "UPDATE takes SET owner=?, ticket=?, deliveries=?, taken_at=? "
                    "WHERE run_id=? AND consumer=? AND query_id=?",
                    (self.session, self._bump(c, "ticket"), deliveries, time.time(), self.run_id, consumer, query_id),
                )
                return group
            cur = c.execute(
                "SELECT cursor, n_taken FROM consumers WHERE run_id=? AND consumer=?", (self.run_id, consumer)
            ).fetchone()
            cursor, n_taken = (int(cur[0]), int(cur[1])) if cur else (0, 0)
            nxt = c.execute(
                "SELECT query_id, completed_seq FROM groups WHERE run_id=? AND completed_seq > ? "
                "ORDER BY completed_seq LIMIT 1",
                (self.run_id, cursor),
            ).fetchone()
            if nxt is None:
                return None
            query_id, seq, position = nxt[0], int(nxt[1]), n_taken + 1
            # Decode before writing: a schema error raises and the transaction rolls back.
            group = self._build_group(c, query_id, consumer=consumer, position=position, deliveries=1)
            c.execute(
                "INSERT INTO consumers (run_id, consumer, cursor, n_taken) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (run_id, consumer) DO UPDATE SET cursor=excluded.cursor, n_taken=excluded.n_taken",
                (self.run_id, consumer, seq, position),
            )
            c.execute(
                "INSERT INTO takes (run_id, consumer, query_id, position, state, owner, ticket, deliveries, "
                "taken_at) VALUES (?, ?, ?, ?, 'taken', ?, ?, 1, ?)",
                (self.run_id, consumer, query_id, position, self.session, self._bump(c, "ticket"), time.time()),
            )
            return group

    def ack_group(self, query_id: str, *, consumer: str = "sub") -> bool:
        _check_consumer(consumer)
        with self._write() as c:
            row = c.execute(
                "SELECT state FROM takes WHERE run_id=? AND consumer=? AND query_id=?",
                (self.run_id, consumer, query_id),
            ).fetchone()
            if row is None:
                raise GroupStateError(_not_taken_msg(self.run_id, consumer, query_id))
            if row[0] == "done":
                return False
            c.execute(
                "UPDATE takes SET state='done', acked_at=? WHERE run_id=? AND consumer=? AND query_id=?",
                (time.time(), self.run_id, consumer, query_id),
            )
            return True

    def consumed_groups(self, consumer: str = "sub") -> list[ConsumedGroup]:
        _check_consumer(consumer)
        with self._read() as c:
            rows = c.execute(
                "SELECT query_id, position, state, deliveries, taken_at, acked_at FROM takes "
                "WHERE run_id=? AND consumer=? ORDER BY position",
                (self.run_id, consumer),
            ).fetchall()
        return [ConsumedGroup(q, int(p), s, int(d), float(t), a) for q, p, s, d, t, a in rows]

    # ---- roles
    def heartbeat(self, role: str, info: Mapping[str, Any] | None = None) -> None:
        _check_role(role)
        data = _dumps(_json_dict("info", info or {}, f"heartbeat of role {role!r}"))
        with self._write() as c:
            c.execute(
                "INSERT INTO heartbeats (run_id, role, time, info) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (run_id, role) DO UPDATE SET time=excluded.time, info=excluded.info",
                (self.run_id, role, time.time(), data),
            )

    def heartbeats(self) -> dict[str, Heartbeat]:
        with self._read() as c:
            rows = c.execute("SELECT role, time, info FROM heartbeats WHERE run_id=?", (self.run_id,)).fetchall()
        return {r: Heartbeat(float(t), json.loads(i)) for r, t, i in rows}

    def set_policy_version(self, role: str, version: int) -> None:
        _check_role(role)
        _nonneg_int("version", version, f"set_policy_version({role!r})")
        with self._write() as c:
            c.execute(
                "INSERT INTO policy_versions (run_id, role, version) VALUES (?, ?, ?) "
                "ON CONFLICT (run_id, role) DO UPDATE SET version=excluded.version",
                (self.run_id, role, version),
            )

    def get_policy_version(self, role: str) -> int:
        _check_role(role)
        with self._read() as c:
            row = c.execute(
                "SELECT version FROM policy_versions WHERE run_id=? AND role=?", (self.run_id, role)
            ).fetchone()
        return int(row[0]) if row else 0

    def put_stat(self, key: str, value: Any) -> None:
        data = _dumps_value(key, value)
        with self._write() as c:
            c.execute(
                "INSERT INTO stats (run_id, key, value) VALUES (?, ?, ?) "
                "ON CONFLICT (run_id, key) DO UPDATE SET value=excluded.value",
                (self.run_id, key, data),
            )

    def get_stat(self, key: str, default: Any = None) -> Any:
        with self._read() as c:
            row = c.execute("SELECT value FROM stats WHERE run_id=? AND key=?", (self.run_id, key)).fetchone()
        return json.loads(row[0]) if row else default

    def now(self) -> float:
        return time.time()

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def _dumps_value(key: Any, value: Any) -> str:
    if not isinstance(key, str) or not key:
        raise ValueError(f"stat key must be a non-empty str, got {key!r}")
    try:
        return _dumps(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"stat {key!r} must be JSON-serialisable without NaN/inf: {exc}") from None


def _conflict_msg(query_id: str, k: int, given: int) -> str:
    return (
        f"group {query_id!r} was declared with K={k} rollouts, now written with group_size={given}; "
        "all writers of a run must use the same K (check the planner config's num_generations)"
    )


def _unknown_k_msg(query_id: str) -> str:
    return (
        f"group size K of query {query_id!r} is unknown: pass group_size=K to upsert_rollout or call "
        f"declare_group({query_id!r}, K) first"
    )


def _range_msg(query_id: str, rollout: int, k: int) -> str:
    return f"rollout index {rollout} of query {query_id!r} is out of range: the group has K={k} rollouts (0..{k - 1})"


def _not_complete_msg(run_id: str, query_id: str, have: int, k: int | None) -> str:
    if k is None:
        return f"query {query_id!r} has no group in run {run_id!r} (nothing declared or written)"
    return f"group {query_id!r} of run {run_id!r} is not complete: {have}/{k} rollouts recorded"


def _not_taken_msg(run_id: str, consumer: str, query_id: str) -> str:
    return (
        f"cannot ack group {query_id!r}: consumer {consumer!r} of run {run_id!r} never took it "
        "(check the query id and the consumer name)"
    )


# ----------------------------------------------------------------------------------------- redis

# All scripts validate before their first write, so a refused call leaves nothing half-written.
_LUA_DECLARE = """
local P, qid, k = ARGV[1], ARGV[2], tonumber(ARGV[3])
local cur = redis.call('HGET', P .. ':k', qid)
if cur then
  if tonumber(cur) ~= k then return redis.error_reply('MGRPO_GROUP_SIZE ' .. cur .. ' ' .. k .. ' ' .. qid) end
  return 0
end
redis.call('HSET', P .. ':k', qid, k)
return 1
"""

# ARGV: prefix, group_size ('' = use the declared K), then (query_id, rollout, json) triples.
_LUA_UPSERT_ROLLOUTS = """
local P, gs = ARGV[1], ARGV[2]
local ks, order = {}, {}
for i = 3, #ARGV, 3 do
  local qid, r = ARGV[i], tonumber(ARGV[i + 1])
  local k = ks[qid]
  if k == nil then
    local cur = redis.call('HGET', P .. ':k', qid)
    if cur then
      k = tonumber(cur)
      if gs ~= '' and tonumber(gs) ~= k then
        return redis.error_reply('MGRPO_GROUP_SIZE ' .. cur .. ' ' .. gs .. ' ' .. qid)
      end
    else
      if gs == '' then return redis.error_reply('MGRPO_GROUP_UNKNOWN ' .. qid) end
      k = tonumber(gs)
    end
    ks[qid] = k
    order[#order + 1] = qid
  end
  if r >= k then return redis.error_reply('MGRPO_ROLLOUT_RANGE ' .. k .. ' ' .. r .. ' ' .. qid) end
end
-- checks done: writes from here on
for i = 3, #ARGV, 3 do
  redis.call('HSET', P .. ':ro:' .. ARGV[i], ARGV[i + 1], ARGV[i + 2])
end
local completed = {}
for _, qid in ipairs(order) do
  redis.call('HSET', P .. ':k', qid, ks[qid])
  if redis.call('HEXISTS', P .. ':done', qid) == 0 and redis.call('HLEN', P .. ':ro:' .. qid) >= ks[qid] then
    local seq = redis.call('INCR', P .. ':seq')
    redis.call('HSET', P .. ':done', qid, seq)
    redis.call('RPUSH', P .. ':completed', qid)
    completed[#completed + 1] = qid
  end
end
return completed
"""

_LUA_TAKE = """
local P, consumer, owner, ticket, schema = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local C = P .. ':c:' .. consumer
local tm = redis.call('TIME')
local now = tonumber(tm[1]) + tonumber(tm[2]) / 1000000
local qid, info = nil, nil
local taken = redis.call('HGETALL', C .. ':taken')
for i = 1, #taken, 2 do
  local d = cjson.decode(taken[i + 1])
  if d.owner ~= owner and d.ticket <= ticket and (info == nil or d.position < info.position) then
    qid, info = taken[i], d
  end
end
local fresh = (qid == nil)
if fresh then
  local cursor = tonumber(redis.call('GET', C .. ':cursor') or '0')
  qid = redis.call('LINDEX', P .. ':completed', cursor)
  if not qid then return false end
end
local ro = redis.call('HGETALL', P .. ':ro:' .. qid)
local sc = redis.call('HGETALL', P .. ':sc:' .. qid)
for i = 2, #ro, 2 do
  local ok, d = pcall(cjson.decode, ro[i])
  local found = ok and type(d) == 'table' and d.schema or nil
  if found ~= schema then
    return redis.error_reply('MGRPO_SCHEMA rollout ' .. ro[i - 1] .. ' ' .. tostring(found) .. ' ' .. qid)
  end
end
for i = 2, #sc, 2 do
  local ok, d = pcall(cjson.decode, sc[i])
  local found = ok and type(d) == 'table' and d.schema or nil
  if found ~= schema then
    return redis.error_reply('MGRPO_SCHEMA sub-call ' .. sc[i - 1] .. ' ' .. tostring(found) .. ' ' .. qid)
  end
end
-- checks done: writes from here on
local t = redis.call('INCR', P .. ':ticket')
if fresh then
  redis.call('INCR', C .. ':cursor')
  local pos = redis.call('RPUSH', C .. ':log', qid)
  info = {position = pos, deliveries = 1}
else
  info.deliveries = info.deliveries + 1
end
info.owner = owner
info.ticket = t
info.taken_at = string.format('%.6f', now)
local enc = cjson.encode(info)
redis.call('HSET', C .. ':taken', qid, enc)
return {qid, enc, redis.call('HGET', P .. ':k', qid), redis.call('HGET', P .. ':done', qid), ro, sc}
"""

_LUA_ACK = """
local C, qid = ARGV[1] .. ':c:' .. ARGV[2], ARGV[3]
local enc = redis.call('HGET', C .. ':taken', qid)
if enc then
  local tm = redis.call('TIME')
  local d = cjson.decode(enc)
  d.acked_at = string.format('%.6f', tonumber(tm[1]) + tonumber(tm[2]) / 1000000)
  redis.call('HDEL', C .. ':taken', qid)
  redis.call('HSET', C .. ':acked', qid, cjson.encode(d))
  return 1
end
if redis.call('HEXISTS', C .. ':acked', qid) == 1 then return 0 end
return redis.error_reply('MGRPO_NOT_TAKEN ' .. ARGV[2] .. ' ' .. qid)
"""

_LUA_HEARTBEAT = """
local tm = redis.call('TIME')
local now = string.format('%.6f', tonumber(tm[1]) + tonumber(tm[2]) / 1000000)
redis.call('HSET', ARGV[1] .. ':hb', ARGV[2], '{"time":' .. now .. ',"info":' .. ARGV[3] .. '}')
return now
"""


class RedisStore(Store):
    """Redis backend: atomic Lua scripts over keys ``mgrpo:{<run_id>}:...`` (see module docstring)."""

    backend = "redis"

    def __init__(
        self,
        url: str,
        run_id: str,
        *,
        host: str,
        port: int,
        db: int,
        username: str | None = None,
        password: str | None = None,
        ssl: bool = False,
        connect_timeout_s: float = 3.0,
    ) -> None:
        super().__init__(url, run_id)
        import redis  # imported here so the sqlite path never needs redis-py
        from redis.backoff import ExponentialBackoff
        from redis.retry import Retry

        self._redis_mod = redis
        self.host, self.port, self.db = host, port, db
        self._prefix = f"mgrpo:{{{run_id}}}"
        kwargs = dict(
            host=host, port=port, db=db, username=username, password=password, ssl=ssl,
            decode_responses=True, socket_keepalive=True,
        )
        # A probe without redis-py's own retries, so the bounded connect loop below owns the timing.
        probe = redis.Redis(**kwargs, socket_connect_timeout=min(1.0, connect_timeout_s),
                            socket_timeout=min(1.0, connect_timeout_s), retry=Retry(ExponentialBackoff(), 0))
        try:
            self._connect(probe, connect_timeout_s)
        finally:
            probe.close()
        self._r = redis.Redis(
            **kwargs, socket_connect_timeout=2.0, socket_timeout=30.0,
            retry=Retry(ExponentialBackoff(cap=1.0, base=0.05), 3),
        )
        self._s_declare = self._r.register_script(_LUA_DECLARE)
        self._s_upsert = self._r.register_script(_LUA_UPSERT_ROLLOUTS)
        self._s_take = self._r.register_script(_LUA_TAKE)
        self._s_ack = self._r.register_script(_LUA_ACK)
        self._s_heartbeat = self._r.register_script(_LUA_HEARTBEAT)
        with self._errors():
            meta = self._prefix + ":meta"
            self._r.hsetnx(meta, "schema", str(SCHEMA_VERSION))
            found = self._r.hget(meta, "schema")
            if found != str(SCHEMA_VERSION):
                raise SchemaVersionError(
                    f"redis run {run_id!r} at {host}:{port}/{db} has layout schema version {found}, this "
                    f"code reads version {SCHEMA_VERSION}; use a new run_id or the version that wrote it"
                )
            self._open_ticket = int(self._r.get(self._prefix + ":ticket") or 0)

    def _connect(self, probe: Any, budget_s: float) -> None:
        start = time.monotonic()
        delay, attempts = 0.1, 0
        while True:
            attempts += 1
            try:
                probe.ping()
                return
            except self._redis_mod.AuthenticationError as exc:
                raise StoreUnavailable(
                    f"Redis at {self.host}:{self.port} refused the credentials ({exc}); check the "
                    "user/password in the store URL"
                ) from None
            except (self._redis_mod.ConnectionError, self._redis_mod.TimeoutError, OSError) as exc:
                last = exc
            except self._redis_mod.ResponseError as exc:  # reachable, but refuses us (auth, db index)
                raise StoreUnavailable(
                    f"Redis at {self.host}:{self.port} (db {self.db}) refused the connection: {exc}; check "
                    "the password and the database number in the store URL"
                ) from None
            elapsed = time.monotonic() - start
            if elapsed + delay > budget_s:
                raise StoreUnavailable(
                    f"cannot reach Redis at {self.host}:{self.port} (db {self.db}) after {attempts} "
                    f"attempts over {elapsed:.1f} s: {str(last).rstrip('.')}. Check that redis-server is "
                    f"running and reachable from this host (redis-cli -h {self.host} -p {self.port} ping)"
                )
            time.sleep(delay)
            delay *= 2

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """Map redis-py errors onto the store's errors (messages naming host:port and the cause)."""
        r = self._redis_mod
        try:
            yield
        except (r.ConnectionError, r.TimeoutError) as exc:
            raise StoreUnavailable(
                f"lost Redis at {self.host}:{self.port} (db {self.db}): {exc}. Check that redis-server "
                "is still running and reachable"
            ) from None
        except r.ResponseError as exc:
            raise self._script_error(str(exc)) from None

    def _script_error(self, msg: str) -> Exception:
        """Turn a script's coded error reply into the store's error with a full message."""
        words = msg.split(" ")
        code = words[0] if words else ""
        if code == "MGRPO_GROUP_SIZE":  # k given query_id
            return GroupSizeError(_conflict_msg(" ".join(words[3:]), int(words[1]), int(words[2])))
        if code == "MGRPO_GROUP_UNKNOWN":  # query_id
            return GroupSizeError(_unknown_k_msg(" ".join(words[1:])))
        if code == "MGRPO_ROLLOUT_RANGE":  # k rollout query_id
            return GroupSizeError(_range_msg(" ".join(words[3:]), int(words[2]), int(words[1])))
        if code == "MGRPO_NOT_TAKEN":  # consumer query_id
            return GroupStateError(_not_taken_msg(self.run_id, words[1], " ".join(words[2:])))
        if code == "MGRPO_SCHEMA":  # kind field found query_id
            kind, key, found, qid = words[1], words[2], words[3], " ".join(words[4:])
            return SchemaVersionError(
                f"{kind} ({self.run_id}, {qid}, {key.replace(':', ', ')}): record has schema version "
                f"{found}, this code reads version {SCHEMA_VERSION}. It was written by another version "
                "of mgrpo-harness: read it with that version, or start a fresh store / run_id."
            )
        return StoreError(f"Redis at {self.host}:{self.port} answered an error: {msg}")

    def _key(self, *parts: str) -> str:
        return ":".join((self._prefix, *parts))

    # ---- records
    def declare_group(self, query_id: str, k: int) -> None:
        _query_id(query_id, "declare_group")
        _check_k(k, query_id)
        with self._errors():
            self._s_declare(args=[self._prefix, query_id, k])

    def _upsert_rollouts(self, records: list[RolloutRecord], group_size: int | None) -> list[str]:
        args: list[Any] = [self._prefix, "" if group_size is None else str(group_size)]
        for r in records:
            args += [r.query_id, r.rollout, r.to_json()]
        with self._errors():  # one script: validated as a whole, then written as a whole
            return list(self._s_upsert(args=args))

    def upsert_sub_call(self, record: SubCallRecord) -> None:
        if not isinstance(record, SubCallRecord):
            raise TypeError(f"upsert_sub_call needs a SubCallRecord, got {type(record).__name__}")
        with self._errors():  # one HSET: atomic by itself
            self._r.hset(self._key("sc", record.query_id), f"{record.rollout}:{record.call}", record.to_json())

    def _parse_rollouts(self, query_id: str, flat: Mapping[str, str]) -> list[RolloutRecord]:
        items = sorted(flat.items(), key=lambda kv: int(kv[0]))
        return [_decode(RolloutRecord, d, f"rollout ({self.run_id}, {query_id}, {r})") for r, d in items]

    def _parse_sub_calls(self, query_id: str, flat: Mapping[str, str]) -> list[SubCallRecord]:
        def key(kv: tuple[str, str]) -> tuple[int, int]:
            r, c = kv[0].split(":")
            return int(r), int(c)

        return [
            _decode(SubCallRecord, d, f"sub-call ({self.run_id}, {query_id}, {f.replace(':', ', ')})")
            for f, d in sorted(flat.items(), key=key)
        ]

    def get_rollouts(self, query_id: str) -> list[RolloutRecord]:
        with self._errors():
            flat = self._r.hgetall(self._key("ro", query_id))
        return self._parse_rollouts(query_id, flat)

    def get_sub_calls(self, query_id: str) -> list[SubCallRecord]:
        with self._errors():
            flat = self._r.hgetall(self._key("sc", query_id))
        return self._parse_sub_calls(query_id, flat)

    def get_group(self, query_id: str) -> Group:
        with self._errors():
            pipe = self._r.pipeline(transaction=True)  # MULTI/EXEC: one consistent snapshot
            pipe.hget(self._key("k"), query_id)
            pipe.hget(self._key("done"), query_id)
            pipe.hgetall(self._key("ro", query_id))
            pipe.hgetall(self._key("sc", query_id))
            k, seq, ro, sc = pipe.execute()
        if seq is None:
            raise GroupStateError(_not_complete_msg(self.run_id, query_id, len(ro), int(k) if k else None))
        return Group(
            run_id=self.run_id, query_id=query_id, k=int(k),
            rollouts=tuple(self._parse_rollouts(query_id, ro)),
            sub_calls=tuple(self._parse_sub_calls(query_id, sc)),
            completion_seq=int(seq),
        )

    def group_progress(self) -> dict[str, GroupProgress]:
        with self._errors():
            pipe = self._r.pipeline(transaction=True)
            pipe.hgetall(self._key("k"))
            pipe.hgetall(self._key("done"))
            ks, done = pipe.execute()
            pending = [q for q in ks if q not in done]
            counts: list[int] = []
            if pending:
                pipe = self._r.pipeline(transaction=False)
                for q in pending:
                    pipe.hlen(self._key("ro", q))
                counts = pipe.execute()
        out = {q: GroupProgress(int(k), int(k), True) for q, k in ks.items() if q in done}
        out.update({q: GroupProgress(int(n), int(ks[q]), False) for q, n in zip(pending, counts)})
        return out

    # ---- consumption
    def _try_take(self, consumer: str) -> Group | None:
        with self._errors():
            res = self._s_take(args=[self._prefix, consumer, self.session, self._open_ticket, SCHEMA_VERSION])
        if res is None:
            return None
        qid, enc, k, seq, ro, sc = res
        info = json.loads(enc)
        return Group(
            run_id=self.run_id, query_id=qid, k=int(k),
            rollouts=tuple(self._parse_rollouts(qid, _pairs(ro))),
            sub_calls=tuple(self._parse_sub_calls(qid, _pairs(sc))),
            completion_seq=int(seq), consumer=consumer,
            position=int(info["position"]), deliveries=int(info["deliveries"]),
        )

    def ack_group(self, query_id: str, *, consumer: str = "sub") -> bool:
        _check_consumer(consumer)
        with self._errors():
            return bool(self._s_ack(args=[self._prefix, consumer, query_id]))

    def consumed_groups(self, consumer: str = "sub") -> list[ConsumedGroup]:
        _check_consumer(consumer)
        c = self._key("c", consumer)
        with self._errors():
            pipe = self._r.pipeline(transaction=True)
            pipe.lrange(c + ":log", 0, -1)
            pipe.hgetall(c + ":taken")
            pipe.hgetall(c + ":acked")
            log, taken, acked = pipe.execute()
        out = []
        for qid in log:
            state, enc = ("taken", taken[qid]) if qid in taken else ("done", acked[qid])
            d = json.loads(enc)
            out.append(
                ConsumedGroup(
                    qid, int(d["position"]), state, int(d["deliveries"]), float(d["taken_at"]),
                    float(d["acked_at"]) if "acked_at" in d else None,
                )
            )
        return out

    # ---- roles
    def heartbeat(self, role: str, info: Mapping[str, Any] | None = None) -> None:
        _check_role(role)
        data = _dumps(_json_dict("info", info or {}, f"heartbeat of role {role!r}"))
        with self._errors():
            self._s_heartbeat(args=[self._prefix, role, data])

    def heartbeats(self) -> dict[str, Heartbeat]:
        with self._errors():
            flat = self._r.hgetall(self._key("hb"))
        out = {}
        for role, enc in flat.items():
            d = json.loads(enc)
            out[role] = Heartbeat(float(d["time"]), d["info"])
        return out

    def set_policy_version(self, role: str, version: int) -> None:
        _check_role(role)
        _nonneg_int("version", version, f"set_policy_version({role!r})")
        with self._errors():
            self._r.hset(self._key("pv"), role, version)

    def get_policy_version(self, role: str) -> int:
        _check_role(role)
        with self._errors():
            v = self._r.hget(self._key("pv"), role)
        return int(v) if v is not None else 0

    def put_stat(self, key: str, value: Any) -> None:
        data = _dumps_value(key, value)
        with self._errors():
            self._r.hset(self._key("stats"), key, data)

    def get_stat(self, key: str, default: Any = None) -> Any:
        with self._errors():
            v = self._r.hget(self._key("stats"), key)
        return json.loads(v) if v is not None else default

    def now(self) -> float:
        with self._errors():
            sec, usec = self._r.time()
        return sec + usec / 1e6

    def close(self) -> None:
        self._r.close()


def _pairs(flat: Sequence[str]) -> dict[str, str]:
    """HGETALL as returned from a Lua script (a flat list) -> dict."""
    return dict(zip(flat[0::2], flat[1::2]))


# ------------------------------------------------------------------------------------------ open


def open_store(
    url: str,
    *,
    run_id: str,
    connect_timeout_s: float = 3.0,
    busy_timeout_s: float = 30.0,
) -> Store:
    """Open the shared store of run ``run_id`` at ``url`` (see :data:`ACCEPTED_URL_FORMS`).

    ``connect_timeout_s`` bounds how long an unreachable Redis is retried (with backoff) before
    :class:`StoreUnavailable`; ``busy_timeout_s`` how long a SQLite write waits for another process's
    transaction. A malformed URL raises :class:`StoreURLError` (a ``ValueError``).
    """
    _check_run_id(run_id)
    if not isinstance(url, str):
        raise StoreURLError(f"store URL must be a str, got {type(url).__name__}. Accepted forms: {ACCEPTED_URL_FORMS}")

    def bad(why: str) -> StoreURLError:
        return StoreURLError(f"unsupported store URL {_redact(url)!r}: {why}. Accepted forms: {ACCEPTED_URL_FORMS}")

    if url.startswith("sqlite:"):
        if not url.startswith("sqlite:///"):
            raise bad("a sqlite URL has three slashes before the path (no host part)")
        raw = url[len("sqlite:///"):]
        if not raw or raw.endswith("/"):
            raise bad("the path to the database file is missing")
        if "?" in raw or "#" in raw:
            raise bad("query parameters are not supported")
        if raw == ":memory:":
            raise bad("an in-memory database cannot be shared between processes")
        return SqliteStore(url, run_id, Path(raw), busy_timeout_s=busy_timeout_s)

    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise bad(str(exc)) from None
    if parts.scheme not in ("redis", "rediss"):
        raise bad(f"unknown scheme {parts.scheme!r}" if parts.scheme else "no scheme")
    if not parts.hostname:
        raise bad("the host is missing")
    if parts.query or parts.fragment:
        raise bad("query parameters are not supported")
    path = parts.path.strip("/")
    if path and not path.isdigit():
        raise bad(f"the database must be a number (redis://host:port/0), got {path!r}")
    return RedisStore(
        url,
        run_id,
        host=parts.hostname,
        port=port if port is not None else 6379,
        db=int(path) if path else 0,
        username=urllib.parse.unquote(parts.username) if parts.username else None,
        password=urllib.parse.unquote(parts.password) if parts.password else None,
        ssl=parts.scheme == "rediss",
        connect_timeout_s=connect_timeout_s,
    )
