"""The Redis backend of the shared store: for roles on several nodes.

Chosen with ``redis://host:port/db`` (also ``rediss://`` for TLS and
``redis://:password@host:port/db``); ``docs/training.md``, "Two-node GPU cluster (paper setting)",
runs the planner and the sub role on two nodes against one Redis server. Every multi-key write is
one Lua script below, which Redis runs atomically; each script checks everything before its first
write, so a refused write changes nothing (stronger than MULTI/EXEC, which does not roll back a
failing command either). A script refuses with a coded error reply (``MGRPO_GROUP_SIZE ...``) that
:meth:`RedisStore._script_error` turns into the store's error with its full message. Keys of a run
share the hash tag ``{run_id}``: ``mgrpo:{<run_id>}:...``. Standalone Redis (or a primary);
timestamps use the server clock (``TIME``), so ages are comparable across nodes. Keys of a run are
never expired by the store; delete a finished run's ``mgrpo:{<run_id>}:*`` keys when it is no
longer needed.

**Outages.** Every call is retried with backoff (0.05 s doubling to 1 s) while Redis cannot be reached,
for up to ``retry_s`` seconds (default :data:`RETRY_S`), so a Redis restart or a short network cut costs a
role a pause, not its run; past the budget the call raises :class:`StoreUnavailable` naming host:port, the
seconds waited and the attempts. Retrying is safe because every write is idempotent (upserts replace,
an ack of a done group is a no-op) except taking a group, which carries a request id: a retried take
whose first attempt ran on the server (the reply was lost) hands back the group that attempt took
instead of taking another. After a reconnection the run's keys are checked: a Redis that came back
without them (restarted without persistence) is refused with a message saying so. A restart keeps the
run only with persistence on (``appendonly yes``; docs/training.md, "Two-node GPU cluster").

The API and its checks are :class:`mgrpo.store.base.Store`'s; this module holds the key layout,
the scripts and the mapping of redis-py's errors onto the store's.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any, Callable, Mapping, Sequence, TypeVar

from mgrpo.store.base import Store
from mgrpo.store.errors import (
    GroupSizeError,
    GroupStateError,
    SchemaVersionError,
    StoreError,
    StoreUnavailable,
    _conflict_msg,
    _not_complete_msg,
    _not_taken_msg,
    _range_msg,
    _unknown_k_msg,
)

#: Default seconds a call keeps retrying while Redis cannot be reached (a restart takes about 1 s plus
#: loading its append-only file).
RETRY_S = 30.0

T = TypeVar("T")
from mgrpo.store.records import (
    SCHEMA_VERSION,
    ConsumedGroup,
    Group,
    GroupProgress,
    Heartbeat,
    RolloutRecord,
    SubCallRecord,
    _schema_msg,
)

log = logging.getLogger(__name__)

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
local request = ARGV[6]
local C = P .. ':c:' .. consumer
-- A retried call whose first attempt took a group (its reply was lost): hand that group back.
local last = redis.call('HGET', C .. ':request', owner)
if last then
  local r = cjson.decode(last)
  local enc = (r.request == request) and redis.call('HGET', C .. ':taken', r.qid) or nil
  if enc then
    return {r.qid, enc, redis.call('HGET', P .. ':k', r.qid), redis.call('HGET', P .. ':done', r.qid),
            redis.call('HGETALL', P .. ':ro:' .. r.qid), redis.call('HGETALL', P .. ':sc:' .. r.qid)}
  end
end
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
-- The coded error for the first record of another schema version in a flat HGETALL, or nil.
local function schema_error(kind, flat)
  for i = 2, #flat, 2 do
    local ok, d = pcall(cjson.decode, flat[i])
    local found = ok and type(d) == 'table' and d.schema or nil
    if found ~= schema then
      return 'MGRPO_SCHEMA ' .. kind .. ' ' .. flat[i - 1] .. ' ' .. tostring(found) .. ' ' .. qid
    end
  end
  return nil
end
local bad = schema_error('rollout', ro) or schema_error('sub-call', sc)
if bad then return redis.error_reply(bad) end
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
redis.call('HSET', C .. ':request', owner, cjson.encode({request = request, qid = qid}))
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
        retry_s: float = RETRY_S,
    ) -> None:
        super().__init__(url, run_id)
        self.retry_s = float(retry_s)
        # Imported here: redis-py costs ~0.25 s to import, and sqlite-only processes never need it.
        import redis
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
        self._connected = False  # set at every (re)connection of a pooled connection; _call checks the run after it

        def on_connect(conn: Any) -> None:
            conn.on_connect_check_health(check_health=True)
            self._connected = True

        # No redis-py retries: _call owns them (a blind re-send of the take script could take twice). redis-py
        # reconnects a stale pooled connection by itself, hence the hook that tells _call it happened.
        self._r = redis.Redis(**kwargs, socket_connect_timeout=2.0, socket_timeout=30.0,
                              retry=Retry(ExponentialBackoff(), 0), redis_connect_func=on_connect)
        self._s_declare = self._r.register_script(_LUA_DECLARE)
        self._s_upsert = self._r.register_script(_LUA_UPSERT_ROLLOUTS)
        self._s_take = self._r.register_script(_LUA_TAKE)
        self._s_ack = self._r.register_script(_LUA_ACK)
        self._s_heartbeat = self._r.register_script(_LUA_HEARTBEAT)
        meta = self._prefix + ":meta"

        def init() -> str | None:
            self._r.hsetnx(meta, "schema", str(SCHEMA_VERSION))
            return self._r.hget(meta, "schema")

        self._opened = False  # the run's keys are not checked after a reconnection before they exist
        found = self._call(init)
        if found != str(SCHEMA_VERSION):
            raise SchemaVersionError(
                f"redis run {run_id!r} at {host}:{port}/{db} has layout schema version {found}, this "
                f"code reads version {SCHEMA_VERSION}; use a new run_id or the version that wrote it"
            )
        self._open_ticket = int(self._call(lambda: self._r.get(self._prefix + ":ticket")) or 0)
        self._opened = True

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
            delay = min(delay * 2, 1.0)

    def _call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` (one or more Redis commands), retrying while Redis cannot be reached for up to
        ``retry_s`` seconds (module docstring, "Outages"); map redis-py's errors onto the store's."""
        r = self._redis_mod
        start, delay, attempts = time.monotonic(), 0.05, 0
        while True:
            attempts += 1
            try:
                out = fn()
                if self._connected and self._opened:
                    self._check_run_survived()
                self._connected = False
                if attempts > 1:
                    log.warning("Redis at %s:%s is back after %.1f s (%d attempts)", self.host, self.port,
                                time.monotonic() - start, attempts)
                return out
            except (r.ConnectionError, r.TimeoutError) as exc:  # BusyLoadingError is a ConnectionError
                elapsed = time.monotonic() - start
                if attempts == 1:  # once per outage: a role's log shows it, and that it ended (above)
                    log.warning("lost Redis at %s:%s (%s); retrying for up to %g s", self.host, self.port,
                                str(exc).rstrip("."), self.retry_s)
                if elapsed + delay > self.retry_s:
                    raise StoreUnavailable(
                        f"lost Redis at {self.host}:{self.port} (db {self.db}) for {elapsed:.1f} s "
                        f"({attempts} attempts, retry budget {self.retry_s:g} s): {str(exc).rstrip('.')}. "
                        "Check that redis-server is running and reachable "
                        f"(redis-cli -h {self.host} -p {self.port} ping)"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
            except r.ResponseError as exc:
                raise self._script_error(str(exc)) from None

    def _check_run_survived(self) -> None:
        """After a reconnection: the run's keys must still be there (a restart without persistence loses them)."""
        if not self._r.hexists(self._prefix + ":meta", "schema"):
            raise StoreUnavailable(
                f"Redis at {self.host}:{self.port} (db {self.db}) came back without run {self.run_id!r}: "
                "it was restarted without persistence (or flushed), and the run's groups are gone. Turn on "
                "persistence (redis-server --appendonly yes) and start the run again"
            )

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
            where = f"{kind} ({self.run_id}, {qid}, {key.replace(':', ', ')})"
            return SchemaVersionError(_schema_msg(where, found))
        return StoreError(f"Redis at {self.host}:{self.port} answered an error: {msg}")

    def _key(self, *parts: str) -> str:
        return ":".join((self._prefix, *parts))

    # ---- records
    def _declare_group(self, query_id: str, k: int) -> None:
        self._call(lambda: self._s_declare(args=[self._prefix, query_id, k]))

    def _upsert_rollouts(self, records: list[RolloutRecord], group_size: int | None) -> list[str]:
        args: list[Any] = [self._prefix, "" if group_size is None else str(group_size)]
        for r in records:
            args += [r.query_id, r.rollout, r.to_json()]
        # one script: validated as a whole, then written as a whole
        return list(self._call(lambda: self._s_upsert(args=args)))

    def _upsert_sub_calls(self, records: list[SubCallRecord]) -> None:
        by_query: dict[str, dict[str, str]] = {}
        for r in records:
            by_query.setdefault(r.query_id, {})[f"{r.rollout}:{r.call}"] = r.to_json()

        def write() -> None:  # one HSET per query (each atomic by itself), pipelined: one round trip
            pipe = self._r.pipeline(transaction=False)
            for qid, mapping in by_query.items():
                pipe.hset(self._key("sc", qid), mapping=mapping)
            pipe.execute()

        self._call(write)

    def get_rollouts(self, query_id: str) -> list[RolloutRecord]:
        flat = self._call(lambda: self._r.hgetall(self._key("ro", query_id)))
        return self._decode_rollouts(query_id, _rollout_rows(flat))

    def get_sub_calls(self, query_id: str) -> list[SubCallRecord]:
        flat = self._call(lambda: self._r.hgetall(self._key("sc", query_id)))
        return self._decode_sub_calls(query_id, _sub_call_rows(flat))

    def get_group(self, query_id: str) -> Group:
        def read() -> list[Any]:
            pipe = self._r.pipeline(transaction=True)  # MULTI/EXEC: one consistent snapshot
            pipe.hget(self._key("k"), query_id)
            pipe.hget(self._key("done"), query_id)
            pipe.hgetall(self._key("ro", query_id))
            pipe.hgetall(self._key("sc", query_id))
            return pipe.execute()

        k, seq, ro, sc = self._call(read)
        if seq is None:
            raise GroupStateError(_not_complete_msg(self.run_id, query_id, len(ro), int(k) if k else None))
        return self._make_group(query_id, k, seq, _rollout_rows(ro), _sub_call_rows(sc))

    def group_progress(self) -> dict[str, GroupProgress]:
        def read() -> tuple[dict[str, str], dict[str, str], list[str], list[int]]:
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
            return ks, done, pending, counts

        ks, done, pending, counts = self._call(read)
        out = {q: GroupProgress(int(k), int(k), True) for q, k in ks.items() if q in done}
        out.update({q: GroupProgress(int(n), int(ks[q]), False) for q, n in zip(pending, counts)})
        return out

    # ---- consumption
    def _try_take(self, consumer: str) -> Group | None:
        request = uuid.uuid4().hex  # the same id on every retry of this call (module docstring, "Outages")
        res = self._call(lambda: self._s_take(
            args=[self._prefix, consumer, self.session, self._open_ticket, SCHEMA_VERSION, request]
        ))
        if res is None:
            return None
        qid, enc, k, seq, ro, sc = res
        info = json.loads(enc)
        return self._make_group(
            qid, k, seq, _rollout_rows(_pairs(ro)), _sub_call_rows(_pairs(sc)),
            consumer=consumer, position=int(info["position"]), deliveries=int(info["deliveries"]),
        )

    def _ack_group(self, query_id: str, consumer: str) -> bool:
        return bool(self._call(lambda: self._s_ack(args=[self._prefix, consumer, query_id])))

    def _consumed_groups(self, consumer: str) -> list[ConsumedGroup]:
        c = self._key("c", consumer)

        def read() -> list[Any]:
            pipe = self._r.pipeline(transaction=True)
            pipe.lrange(c + ":log", 0, -1)
            pipe.hgetall(c + ":taken")
            pipe.hgetall(c + ":acked")
            return pipe.execute()

        log, taken, acked = self._call(read)
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
    def _heartbeat(self, role: str, info_json: str) -> None:
        self._call(lambda: self._s_heartbeat(args=[self._prefix, role, info_json]))

    def heartbeats(self) -> dict[str, Heartbeat]:
        flat = self._call(lambda: self._r.hgetall(self._key("hb")))
        out = {}
        for role, enc in flat.items():
            d = json.loads(enc)
            out[role] = Heartbeat(float(d["time"]), d["info"])
        return out

    def _set_policy_version(self, role: str, version: int) -> None:
        self._call(lambda: self._r.hset(self._key("pv"), role, version))

    def _get_policy_version(self, role: str) -> str | None:
        return self._call(lambda: self._r.hget(self._key("pv"), role))

    def _put_stat(self, key: str, value_json: str) -> None:
        self._call(lambda: self._r.hset(self._key("stats"), key, value_json))

    def _get_stat(self, key: str) -> str | None:
        return self._call(lambda: self._r.hget(self._key("stats"), key))

    def now(self) -> float:
        sec, usec = self._call(self._r.time)
        return sec + usec / 1e6

    def close(self) -> None:
        self._r.close()


def _pairs(flat: Sequence[str]) -> dict[str, str]:
    """HGETALL as returned from a Lua script (a flat list) -> dict."""
    return dict(zip(flat[0::2], flat[1::2]))


def _rollout_rows(flat: Mapping[str, str]) -> list[tuple[str, str]]:
    """A rollouts hash (field = rollout index) as ``(rollout, data)`` rows in index order."""
    return sorted(flat.items(), key=lambda kv: int(kv[0]))


def _sub_call_rows(flat: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """A sub-calls hash (field = ``rollout:call``) as ``(rollout, call, data)`` rows in that order."""
    rows = []
    for f, d in flat.items():
        r, c = f.split(":")
        rows.append((r, c, d))
    return sorted(rows, key=lambda row: (int(row[0]), int(row[1])))
