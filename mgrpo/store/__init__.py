"""The shared store between decoupled roles (M-GRPO, arXiv 2511.13288: agents on separate servers
train decoupled and exchange only small statistics, never gradients or trajectories).

How the roles use it: ``docs/training.md``, "What each role does" (the planner writes, the sub role
takes complete groups), "Checkpoints and resume" (acknowledge after a checkpoint, redelivery after a
restart) and "Two-node GPU cluster (paper setting)" (a Redis store shared by two nodes);
``docs/trainer.md``, "Roles and groups" (a taken group is one sub-agent TRL group).

The planner role writes one :class:`RolloutRecord` per rollout ``k`` of query ``q`` (``R_M``,
``r_correct``, ``r_format``, its sub-call ids and the policy versions that produced it) and one
:class:`SubCallRecord` per sub-agent call. The sub-agent role takes the next **complete** query group
(all ``K`` rollouts recorded) with :meth:`Store.take_next_group`, aligns it and computes ``R_S`` and
advantages. Heartbeats, policy versions and run statistics travel through the same store.

Modules (one job each):

- :mod:`mgrpo.store.errors`: :class:`StoreError` and its subclasses, and the messages both backends
  raise them with.
- :mod:`mgrpo.store.records`: the records, the values the store returns (:class:`Group`,
  :class:`ConsumedGroup`, :class:`GroupProgress`, :class:`Heartbeat`), their JSON form and
  :data:`SCHEMA_VERSION`.
- :mod:`mgrpo.store.base`: the :class:`Store` API with the argument checks, the hand-out loop,
  record decoding and the timeout message that both backends share.
- :mod:`mgrpo.store.sqlite`: :class:`SqliteStore`, ``sqlite:///relative/path/store.db`` and
  ``sqlite:////absolute/path/store.db``, the embedded default for one machine (WAL, every write one
  ``BEGIN IMMEDIATE`` transaction).
- :mod:`mgrpo.store.redis`: :class:`RedisStore`, ``redis://host:port/db`` (also ``rediss://``,
  ``redis://:password@host:port/db``) for several nodes (every multi-key write one atomic Lua script
  that checks everything before its first write; keys ``mgrpo:{<run_id>}:...``).
- :mod:`mgrpo.store.url`: :func:`open_store`, which picks the backend from the URL.

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
``declare_group``, ``upsert_rollout(s)``, ``upsert_sub_call(s)``, ``get_rollouts``, ``get_sub_calls``,
``get_group``, ``group_progress``, ``take_next_group``, ``ack_group``, ``consumed_groups``,
``pending_groups``, ``heartbeat(s)``, ``set/get_policy_version``, ``put/get_stat``, ``now``,
``close``; :func:`redact_url` (a store URL without its password, for messages); records
:class:`RolloutRecord`, :class:`SubCallRecord`; results :class:`Group`, :class:`ConsumedGroup`,
:class:`GroupProgress`, :class:`Heartbeat`; errors under :class:`StoreError`.

Decisions the docs leave open:

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

from mgrpo.store.base import Store, redact_url
from mgrpo.store.errors import (
    GroupSizeError,
    GroupStateError,
    SchemaVersionError,
    StoreError,
    StoreTimeout,
    StoreUnavailable,
    StoreURLError,
)
from mgrpo.store.records import (
    SCHEMA_VERSION,
    ConsumedGroup,
    Group,
    GroupProgress,
    Heartbeat,
    RolloutRecord,
    SubCallRecord,
)
from mgrpo.store.redis import RedisStore
from mgrpo.store.sqlite import SqliteStore
from mgrpo.store.url import ACCEPTED_URL_FORMS, open_store  # ACCEPTED_URL_FORMS: importable, not in __all__, as before

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
    "redact_url",
]
