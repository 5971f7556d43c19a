"""The SQLite backend of the shared store: one file that the processes of one machine share.

Chosen with ``sqlite:///relative/path/store.db`` or ``sqlite:////absolute/path/store.db`` (the
embedded default; a run keeps it at ``runs/<run_id>/store.db``, see ``docs/report.md``). WAL mode
and a busy timeout let any number of processes share the file; every write is one
``BEGIN IMMEDIATE`` transaction, so its statements commit together or not at all (a refused or
failed write leaves nothing half-written). ``synchronous=NORMAL``: durable across process crashes,
which is what resume needs (``docs/training.md``, "Checkpoints and resume"); a power cut may lose
the last transactions, never corrupt the file. Timestamps use this host's ``time.time()``.

The API and its checks are :class:`mgrpo.store.base.Store`'s; this module holds the tables and the
transactions that make each operation atomic.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Iterator

from mgrpo.store.base import Store
from mgrpo.store.errors import (
    GroupSizeError,
    GroupStateError,
    SchemaVersionError,
    StoreUnavailable,
    _conflict_msg,
    _not_complete_msg,
    _not_taken_msg,
    _range_msg,
    _unknown_k_msg,
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
    def _write(self) -> AbstractContextManager[Any]:
        """One ``BEGIN IMMEDIATE`` transaction: all its statements commit together or not at all."""
        return self._transaction("BEGIN IMMEDIATE")

    def _read(self) -> AbstractContextManager[Any]:
        """A consistent read snapshot (deferred transaction)."""
        return self._transaction("BEGIN")

    @contextmanager
    def _transaction(self, begin: str) -> Iterator[Any]:
        """Run the block in one transaction; roll back (only what it opened) when the block fails."""
        with self._lock:
            try:
                self._conn.execute(begin)
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

    def _declare_group(self, query_id: str, k: int) -> None:
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

    def _upsert_sub_calls(self, records: list[SubCallRecord]) -> None:
        rows = [(self.run_id, r.query_id, r.rollout, r.call, r.to_json()) for r in records]
        with self._write() as c:  # one transaction for all of them
            c.executemany(
                "INSERT INTO sub_calls (run_id, query_id, rollout, call, data) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (run_id, query_id, rollout, call) DO UPDATE SET data = excluded.data",
                rows,
            )

    def _rollout_rows(self, c: Any, query_id: str) -> list[tuple[int, str]]:
        return c.execute(
            "SELECT rollout, data FROM rollouts WHERE run_id=? AND query_id=? ORDER BY rollout",
            (self.run_id, query_id),
        ).fetchall()

    def _sub_call_rows(self, c: Any, query_id: str) -> list[tuple[int, int, str]]:
        return c.execute(
            "SELECT rollout, call, data FROM sub_calls WHERE run_id=? AND query_id=? ORDER BY rollout, call",
            (self.run_id, query_id),
        ).fetchall()

    def get_rollouts(self, query_id: str) -> list[RolloutRecord]:
        with self._read() as c:
            return self._decode_rollouts(query_id, self._rollout_rows(c, query_id))

    def get_sub_calls(self, query_id: str) -> list[SubCallRecord]:
        with self._read() as c:
            return self._decode_sub_calls(query_id, self._sub_call_rows(c, query_id))

    def _build_group(self, c: Any, query_id: str, **consumer_info: Any) -> Group:
        row = c.execute(
            "SELECT k, completed_seq FROM groups WHERE run_id=? AND query_id=?", (self.run_id, query_id)
        ).fetchone()
        if row is None or row[1] is None:
            have = len(self._decode_rollouts(query_id, self._rollout_rows(c, query_id))) if row else 0
            raise GroupStateError(_not_complete_msg(self.run_id, query_id, have, row[0] if row else None))
        return self._make_group(
            query_id, row[0], row[1], self._rollout_rows(c, query_id), self._sub_call_rows(c, query_id),
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

    def _ack_group(self, query_id: str, consumer: str) -> bool:
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

    def _consumed_groups(self, consumer: str) -> list[ConsumedGroup]:
        with self._read() as c:
            rows = c.execute(
                "SELECT query_id, position, state, deliveries, taken_at, acked_at FROM takes "
                "WHERE run_id=? AND consumer=? ORDER BY position",
                (self.run_id, consumer),
            ).fetchall()
        return [ConsumedGroup(q, int(p), s, int(d), float(t), a) for q, p, s, d, t, a in rows]

    # ---- roles
    def _heartbeat(self, role: str, info_json: str) -> None:
        with self._write() as c:
            c.execute(
                "INSERT INTO heartbeats (run_id, role, time, info) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (run_id, role) DO UPDATE SET time=excluded.time, info=excluded.info",
                (self.run_id, role, time.time(), info_json),
            )

    def heartbeats(self) -> dict[str, Heartbeat]:
        with self._read() as c:
            rows = c.execute("SELECT role, time, info FROM heartbeats WHERE run_id=?", (self.run_id,)).fetchall()
        return {r: Heartbeat(float(t), json.loads(i)) for r, t, i in rows}

    def _set_policy_version(self, role: str, version: int) -> None:
        self._put_value("policy_versions", "role", "version", role, version)

    def _get_policy_version(self, role: str) -> int | None:
        return self._get_value("policy_versions", "role", "version", role)

    def _put_stat(self, key: str, value_json: str) -> None:
        self._put_value("stats", "key", "value", key, value_json)

    def _get_stat(self, key: str) -> str | None:
        return self._get_value("stats", "key", "value", key)

    # Run-scoped ``name -> value`` tables; table and column names are the constants above, never input.
    def _put_value(self, table: str, name_col: str, value_col: str, name: str, value: Any) -> None:
        with self._write() as c:
            c.execute(
                f"INSERT INTO {table} (run_id, {name_col}, {value_col}) VALUES (?, ?, ?) "
                f"ON CONFLICT (run_id, {name_col}) DO UPDATE SET {value_col}=excluded.{value_col}",
                (self.run_id, name, value),
            )

    def _get_value(self, table: str, name_col: str, value_col: str, name: str) -> Any:
        with self._read() as c:
            row = c.execute(
                f"SELECT {value_col} FROM {table} WHERE run_id=? AND {name_col}=?", (self.run_id, name)
            ).fetchone()
        return row[0] if row else None

    def now(self) -> float:
        return time.time()

    def close(self) -> None:
        with self._lock:
            self._conn.close()
