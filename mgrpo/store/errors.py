"""The shared store's errors, and the messages that both backends raise them with.

Every message says what to check (``docs/CONTRIBUTING.md``, "Conventions"): a refused group size names
the planner config's ``num_generations``, an unknown group names the run, an unacknowledgeable group
names the consumer. The group-size and hand-out rules these messages enforce are the contract in the
:mod:`mgrpo.store` docstring; ``docs/training.md`` ("What each role does", "Checkpoints and resume")
describes how the roles rely on them. The record-schema message lives with the schema version in
:mod:`mgrpo.store.records`.
"""

from __future__ import annotations


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
