"""A PostgreSQL store for tests: the server ``ORCHESTRATOR_TEST_PG`` names (default: the
local socket, database ``test``), in a schema of this test session's own, dropped after.

Where no server answers, PostgreSQL tests skip with the reason; under ``CI=true`` such a
skip fails the run instead (``conftest.pytest_runtest_makereport``), since CI always has a
server and a skip there would hide that nothing was tested.
"""

from __future__ import annotations

import functools
import os
import secrets
from collections.abc import Iterator
from urllib.parse import quote

import pytest

from support.needs import POSTGRESQL

DEFAULT_SERVER = "postgresql:///test"
SKIP_PREFIX = POSTGRESQL


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
