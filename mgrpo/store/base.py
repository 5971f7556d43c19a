"""The store API every backend implements (:class:`Store`), and the logic both backends share.

:class:`Store` holds the public methods of the contract in the :mod:`mgrpo.store` docstring. Each
public method checks its arguments and encodes JSON here, then calls its backend part (``_name``),
so both backends accept and refuse exactly the same input; the blocking hand-out loop
(:meth:`Store.take_next_group`), the "0 when unset" and "default when absent" answers, record
decoding and :class:`~mgrpo.store.records.Group` assembly, and the :class:`StoreTimeout` message
that names what a consumer waited for are here once too. A backend implements the atomic
operations: ``_declare_group``, ``_upsert_rollouts``, ``_try_take``, ``_ack_group`` and the reads.

How the roles use this API: ``docs/training.md``, "What each role does" (the planner writes, the sub
role takes groups, both publish heartbeats and policy versions) and "Checkpoints and resume" (ack
after a checkpoint; redelivery after a restart).
"""

from __future__ import annotations

import abc
import json
import re
import time
import urllib.parse
import uuid
from typing import Any, Iterable, Mapping, Sequence

from mgrpo.store.errors import GroupSizeError, StoreError, StoreTimeout
from mgrpo.store.records import (
    ConsumedGroup,
    Group,
    GroupProgress,
    Heartbeat,
    RolloutRecord,
    SubCallRecord,
    _decode,
    _dumps,
    _json_dict,
    _nonneg_int,
    _query_id,
)

# Names used inside Redis key names / SQL keys: no braces (hash tag), no ':' in consumer names.
_RUN_ID_RE = re.compile(r"^[A-Za-z0-9._@+=-][A-Za-z0-9._:@+=/-]{0,199}$")
_CONSUMER_RE = re.compile(r"^[A-Za-z0-9._@+=/-]{1,100}$")


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


def _dumps_value(key: Any, value: Any) -> str:
    if not isinstance(key, str) or not key:
        raise ValueError(f"stat key must be a non-empty str, got {key!r}")
    try:
        return _dumps(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"stat {key!r} must be JSON-serialisable without NaN/inf: {exc}") from None


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def redact_url(url: str) -> str:
    """The URL without its password (for messages)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return url
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    return url


class Store(abc.ABC):
    """The shared store of one run (all records are scoped to ``run_id``). See the :mod:`mgrpo.store`
    docstring for the semantics; :func:`~mgrpo.store.open_store` picks the backend from the URL."""

    backend: str = "?"

    def __init__(self, url: str, run_id: str) -> None:
        self.url = url
        self.run_id = _check_run_id(run_id)
        # Identifies this handle as the owner of the groups it takes (redelivery rule, see package doc).
        self.session = uuid.uuid4().hex

    # ---- records
    def declare_group(self, query_id: str, k: int) -> None:
        """Declare that query ``query_id`` has a group of ``k`` rollouts (idempotent; a different
        ``k`` than declared before raises :class:`GroupSizeError`)."""
        _query_id(query_id, "declare_group")
        _check_k(k, query_id)
        self._declare_group(query_id, k)

    @abc.abstractmethod
    def _declare_group(self, query_id: str, k: int) -> None:
        """Backend part of :meth:`declare_group` (arguments already checked)."""

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

    def upsert_sub_call(self, record: SubCallRecord) -> None:
        """Insert or replace the record of ``(query_id, rollout, call)``."""
        self.upsert_sub_calls([record])

    def upsert_sub_calls(self, records: Sequence[SubCallRecord]) -> None:
        """Insert or replace several sub-call records in one write (one transaction or one pipelined round
        trip): what a planner does with all the sub-calls of a step before it writes the step's groups."""
        records = list(records)
        for record in records:
            if not isinstance(record, SubCallRecord):
                raise TypeError(f"upsert_sub_call(s) needs SubCallRecord objects, got {type(record).__name__}")
        if records:
            self._upsert_sub_calls(records)

    @abc.abstractmethod
    def _upsert_sub_calls(self, records: list[SubCallRecord]) -> None:
        """Backend part of :meth:`upsert_sub_calls` (records already type-checked, at least one)."""

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

    # ---- decoding stored records (rows already in order: rollout index / (rollout, call))
    def _decode_rollouts(self, query_id: str, rows: Iterable[tuple[Any, str]]) -> list[RolloutRecord]:
        return [_decode(RolloutRecord, d, f"rollout ({self.run_id}, {query_id}, {r})") for r, d in rows]

    def _decode_sub_calls(self, query_id: str, rows: Iterable[tuple[Any, Any, str]]) -> list[SubCallRecord]:
        return [
            _decode(SubCallRecord, d, f"sub-call ({self.run_id}, {query_id}, {r}, {i})") for r, i, d in rows
        ]

    def _make_group(
        self,
        query_id: str,
        k: Any,
        completion_seq: Any,
        rollout_rows: Iterable[tuple[Any, str]],
        sub_call_rows: Iterable[tuple[Any, Any, str]],
        **consumer_info: Any,
    ) -> Group:
        """A :class:`Group` from stored rows (decoded here, so a schema error raises before any write
        the caller would make after it)."""
        return Group(
            run_id=self.run_id,
            query_id=query_id,
            k=int(k),
            rollouts=tuple(self._decode_rollouts(query_id, rollout_rows)),
            sub_calls=tuple(self._decode_sub_calls(query_id, sub_call_rows)),
            completion_seq=int(completion_seq),
            **consumer_info,
        )

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

    def ack_group(self, query_id: str, *, consumer: str = "sub") -> bool:
        """Mark a taken group done for ``consumer``. Returns False when it was already done
        (idempotent); raises :class:`GroupStateError` when the consumer never took it."""
        _check_consumer(consumer)
        return self._ack_group(query_id, consumer)

    @abc.abstractmethod
    def _ack_group(self, query_id: str, consumer: str) -> bool:
        """Backend part of :meth:`ack_group` (consumer name already checked)."""

    def consumed_groups(self, consumer: str = "sub") -> list[ConsumedGroup]:
        """The consumer's persistent log, in take order (taken and done groups)."""
        _check_consumer(consumer)
        return self._consumed_groups(consumer)

    @abc.abstractmethod
    def _consumed_groups(self, consumer: str) -> list[ConsumedGroup]:
        """Backend part of :meth:`consumed_groups` (consumer name already checked)."""

    def pending_groups(self, consumer: str = "sub") -> list[str]:
        """Query ids taken by ``consumer`` but not acknowledged, in take order."""
        return [c.query_id for c in self.consumed_groups(consumer) if c.state == "taken"]

    # ---- roles
    def heartbeat(self, role: str, info: Mapping[str, Any] | None = None) -> None:
        """Record that ``role`` is alive now (store clock), with optional JSON ``info``."""
        _check_role(role)
        self._heartbeat(role, _dumps(_json_dict("info", info or {}, f"heartbeat of role {role!r}")))

    @abc.abstractmethod
    def _heartbeat(self, role: str, info_json: str) -> None:
        """Backend part of :meth:`heartbeat`: store ``info_json`` with the store clock's time."""

    @abc.abstractmethod
    def heartbeats(self) -> dict[str, Heartbeat]:
        """Last heartbeat of every role."""

    def set_policy_version(self, role: str, version: int) -> None:
        """Publish the policy version (optimizer steps taken) of ``role``."""
        _check_role(role)
        _nonneg_int("version", version, f"set_policy_version({role!r})")
        self._set_policy_version(role, version)

    @abc.abstractmethod
    def _set_policy_version(self, role: str, version: int) -> None:
        """Backend part of :meth:`set_policy_version` (arguments already checked)."""

    def get_policy_version(self, role: str) -> int:
        """The last published policy version of ``role``; 0 when none was published."""
        _check_role(role)
        version = self._get_policy_version(role)
        return int(version) if version is not None else 0

    @abc.abstractmethod
    def _get_policy_version(self, role: str) -> Any:
        """The stored version of ``role`` (an int or its text), None when none was published."""

    def put_stat(self, key: str, value: Any) -> None:
        """Store a JSON value under ``key`` (run-level statistics)."""
        self._put_stat(key, _dumps_value(key, value))

    @abc.abstractmethod
    def _put_stat(self, key: str, value_json: str) -> None:
        """Backend part of :meth:`put_stat` (key checked, value encoded)."""

    def get_stat(self, key: str, default: Any = None) -> Any:
        """The JSON value stored under ``key``, or ``default``."""
        text = self._get_stat(key)
        return json.loads(text) if text is not None else default

    @abc.abstractmethod
    def _get_stat(self, key: str) -> str | None:
        """The stored JSON text of ``key``, None when absent."""

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
        return f"{type(self).__name__}(url={redact_url(self.url)!r}, run_id={self.run_id!r})"

    # ---- the StoreTimeout message
    def _describe_wait(self, consumer: str, timeout: float) -> str:
        head = (
            f"no complete group for consumer {consumer!r} of run {self.run_id!r} within "
            f"{float(timeout):.1f} s (store {redact_url(self.url)})"
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
