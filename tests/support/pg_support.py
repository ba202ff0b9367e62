"""A PostgreSQL store for tests: the server ``ORCHESTRATOR_TEST_PG`` names (default: the
local socket, database ``test``), in a schema of this test session's own, dropped after.

Where no server answers, PostgreSQL tests skip with the reason; under ``CI=true`` such a
skip fails the run instead (``conftest.pytest_runtest_makereport``), since CI always has a
server and a skip there would hide that nothing was tested.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import secrets
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from support.needs import POSTGRESQL

DEFAULT_SERVER = "postgresql:///test"
SKIP_PREFIX = POSTGRESQL
#: Held shared by every test on the server, and alone by one that restarts it.
RESTART_LOCK = Path(tempfile.gettempdir()) / "checkpoint-orchestrator-pg-restart.lock"


def server_dsn() -> str:
    return os.environ.get("ORCHESTRATOR_TEST_PG") or DEFAULT_SERVER


def with_schema(dsn: str, schema: str) -> str:
    """``dsn`` with its store in ``schema`` (libpq's ``options``)."""
    joiner = "&" if "?" in dsn else "?"
    return f"{dsn}{joiner}options={quote(f'-csearch_path={schema}')}"


@functools.cache
def unavailable_reason() -> str | None:
    """Why PostgreSQL tests cannot run here, or ``None`` when they can (asked once a
    process: a server that does not answer costs the connect timeout each time)."""
    try:
        import psycopg
    except ImportError:
        return f"{SKIP_PREFIX} psycopg is not installed (pip install -e '.[postgres]')"
    try:
        with psycopg.connect(server_dsn(), connect_timeout=5) as conn:
            conn.execute("select 1")
    except psycopg.Error as exc:
        return f"{SKIP_PREFIX} no server answers at {server_dsn()}: {' '.join(str(exc).split())}"
    return None


def drop_schema(dsn: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'drop schema if exists "{schema}" cascade')


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """A store URL in a fresh schema of this session, migrated; the schema is dropped at
    the end. Tests that need an empty store use :func:`pg_fresh_dsn`."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    schema = f"test_{secrets.token_hex(6)}"
    dsn = with_schema(server_dsn(), schema)
    from orchestrator.adapters.postgres.migrations import upgrade

    upgrade(dsn)
    try:
        yield dsn
    finally:
        drop_schema(server_dsn(), schema)


@pytest.fixture
def pg_fresh_dsn() -> Iterator[str]:
    """A store URL in a schema no one has used yet (not migrated), dropped after the test."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    schema = f"test_{secrets.token_hex(6)}"
    try:
        yield with_schema(server_dsn(), schema)
    finally:
        drop_schema(server_dsn(), schema)


@contextlib.contextmanager
def server_turn(*, restart: bool = False) -> Iterator[None]:
    """Hold the server against restarts (``restart``: to restart it, alone): a restart
    ends every session on the server, so it waits for the tests of other sessions that
    use it, and they wait for it."""
    with RESTART_LOCK.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if restart else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@pytest.fixture(autouse=True)
def _server_held_against_restarts(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that uses the server (a store fixture, or its module reaches the server
    itself) holds it against a restart by another session's test while it runs; the
    test that restarts it (marked ``pg_restart``) takes its turn alone."""
    uses = {"pg_dsn", "pg_fresh_dsn"} & set(request.fixturenames) or hasattr(
        request.module, "server_dsn"
    )
    if not uses or request.node.get_closest_marker("pg_restart") is not None:
        yield
        return
    with server_turn():
        yield
