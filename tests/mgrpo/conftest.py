"""Fixtures for the mgrpo tests: a real ``redis-server`` for the store contract (docs/training.md, docs/CONTRIBUTING.md §Tests).

``redis_server`` starts one server per test session (per xdist worker) on a free 127.0.0.1 port
and stops it at the end; tests isolate themselves with a distinct ``run_id`` (every key of a run is
prefixed with it). The tests that need it are skipped with the reason only when the
``redis-server`` binary is missing (CI installs it).
"""

from __future__ import annotations

import pytest

from tests.support.redis_server import RedisServer, redis_server_binary


@pytest.fixture(scope="session")
def redis_server():
    if redis_server_binary() is None:
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server); Redis store tests need it")
    with RedisServer() as server:
        yield server


@pytest.fixture(scope="session")
def redis_url(redis_server) -> str:
    """URL of the session's Redis server, database 0 (e.g. ``redis://127.0.0.1:39123/0``)."""
    return redis_server.url(0)
