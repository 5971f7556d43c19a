"""What travels through the shared store: the records the roles write, the values the store hands
back, and their stored (JSON) form with its schema version.

The planner role writes one :class:`RolloutRecord` per rollout of a query and one
:class:`SubCallRecord` per sub-agent call; the sub role reads them back as a :class:`Group`
(``docs/training.md``, "What each role does"; M-GRPO, arXiv 2511.13288, Sec. 3: the roles exchange
only these small statistics, never gradients or trajectories). Records are validated when they are
built, so a bad value fails in the role that made it, not mid-write. Every stored record carries
``schema`` (:data:`SCHEMA_VERSION`); :func:`_decode` refuses another version with a message naming
both (the contract in the :mod:`mgrpo.store` docstring).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from typing import Any, Mapping, NamedTuple, Sequence

from mgrpo.store.errors import SchemaVersionError, StoreError

#: Version of the record schema and of the store layout. Bump on any incompatible change.
SCHEMA_VERSION = 1


# --------------------------------------------------------------------------------- validation


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


# ------------------------------------------------------------------------------------ records


@dataclass(frozen=True)
class RolloutRecord:
    """What the planner role writes for rollout ``rollout`` (0..K-1) of query ``query_id``.

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
        return _encode(self)


@dataclass(frozen=True)
class SubCallRecord:
    """One sub-agent call ``call`` of rollout ``rollout`` of query ``query_id``.

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
        return _encode(self)


# ------------------------------------------------------------------------------- stored form


def _dumps(obj: Any) -> str:
    return json.dumps(obj, allow_nan=False, separators=(",", ":"), sort_keys=True)


def _encode(record: RolloutRecord | SubCallRecord) -> str:
    """A record's stored form: every field (tuples become JSON arrays) plus ``schema``."""
    return _dumps({"schema": SCHEMA_VERSION, **{f.name: getattr(record, f.name) for f in fields(record)}})


def _schema_msg(where: str, found: str) -> str:
    """The message for a record of another schema version (``found`` as the reader shows it)."""
    return (
        f"{where}: record has schema version {found}, this code reads version {SCHEMA_VERSION}. "
        "It was written by another version of mgrpo-harness: read it with that version, or "
        "start a fresh store / run_id."
    )


def _decode(cls: type, text: str | bytes, where: str):
    """Parse a stored record, refusing another schema version with a message naming both."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise StoreError(f"{where}: stored record is not valid JSON ({exc}); the store is damaged") from None
    found = data.get("schema") if isinstance(data, dict) else None
    if found != SCHEMA_VERSION:
        raise SchemaVersionError(_schema_msg(where, repr(found)))
    data.pop("schema")
    try:
        return cls(**data)
    except TypeError as exc:
        raise SchemaVersionError(f"{where}: record fields do not match schema {SCHEMA_VERSION}: {exc}") from None


# --------------------------------------------------------------------------- returned values


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
