"""Store URLs: :func:`open_store` parses one and opens the backend it names.

Accepted forms (:data:`ACCEPTED_URL_FORMS`): ``sqlite:///relative/path/store.db`` and
``sqlite:////absolute/path/store.db`` (the SQLAlchemy convention: what follows ``sqlite:///`` is the
path as written) open :class:`~mgrpo.store.sqlite.SqliteStore`; ``redis://host:port/db``,
``rediss://`` (TLS) and ``redis://:password@host:port/db`` open
:class:`~mgrpo.store.redis.RedisStore`. Anything else is refused with :class:`StoreURLError` naming
the accepted forms; messages never show a password. The roles get the URL from the config's
``store.url`` or ``--store`` (``docs/training.md``, "Two-node GPU cluster (paper setting)").
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path

from mgrpo.store.base import Store, _check_run_id, redact_url
from mgrpo.store.errors import StoreURLError
from mgrpo.store.redis import RETRY_S, RedisStore
from mgrpo.store.sqlite import SqliteStore

ACCEPTED_URL_FORMS = (
    "'sqlite:///relative/path/store.db', 'sqlite:////absolute/path/store.db', "
    "'redis://host:port/db' (e.g. 'redis://127.0.0.1:6379/0'; also 'rediss://' and "
    "'redis://:password@host:port/db')"
)


def open_store(
    url: str,
    *,
    run_id: str,
    connect_timeout_s: float = 3.0,
    busy_timeout_s: float = 30.0,
    retry_s: float = RETRY_S,
) -> Store:
    """Open the shared store of run ``run_id`` at ``url`` (see :data:`ACCEPTED_URL_FORMS`).

    ``connect_timeout_s`` bounds how long an unreachable Redis is retried (with backoff) before
    :class:`StoreUnavailable` when the store is opened, ``retry_s`` how long a later call keeps retrying
    while Redis cannot be reached (a restart, a network cut); ``busy_timeout_s`` how long a SQLite write
    waits for another process's transaction. A malformed URL raises :class:`StoreURLError` (a ``ValueError``).
    """
    _check_run_id(run_id)
    if not isinstance(url, str):
        raise StoreURLError(f"store URL must be a str, got {type(url).__name__}. Accepted forms: {ACCEPTED_URL_FORMS}")

    def bad(why: str) -> StoreURLError:
        return StoreURLError(f"unsupported store URL {redact_url(url)!r}: {why}. Accepted forms: {ACCEPTED_URL_FORMS}")

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
        retry_s=retry_s,
    )
