"""An upgrade killed with SIGKILL in the middle leaves the store's schema whole: at the
version it had, never between two; the next upgrade finishes the job.

The middle is made, not hoped for: the test holds a lock on ``schema_migrations`` that
lets an upgrade read it but not record a migration in it. The upgrading process takes the
migrations' advisory lock, runs every pending migration's SQL, then waits to record them;
the test sees it waiting (with the tables it made, uncommitted) and kills it there. No
code of the product knows about the test.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest

from orchestrator.adapters.postgres.migrations import MIGRATION_LOCK, latest, shipped
from support import needs
from support.cli import command, orchestrate

psycopg = needs.psycopg()
sql = psycopg.sql


pytestmark = pytest.mark.slow


def columns(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "select table_name, column_name, data_type, is_nullable "
            "from information_schema.columns where table_schema = current_schema() "
            "order by 1, 2"
        ).fetchall()


def recorded(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "select version, name, applied_at from schema_migrations order by version"
        ).fetchall()


def as_an_older_orchestrate_left_it(dsn: str, version: int) -> None:
    """The store at ``dsn`` migrated up to ``version`` (0: its migrations table, empty),
    as an orchestrate that shipped only those migrations would have left it."""
    with psycopg.connect(dsn) as conn:
        schema = conn.execute("select current_schema()").fetchone()
        if schema is None or schema[0] is None:  # the schema is not there yet
            options = psycopg.conninfo.conninfo_to_dict(dsn)["options"]
            name = str(options).split("=", 1)[1]
            conn.execute(sql.SQL("create schema {}").format(sql.Identifier(name)))
            conn.execute(sql.SQL("set search_path = {}").format(sql.Identifier(name)))
        conn.execute(
            "create table schema_migrations (version integer primary key, name text not null,"
            " applied_at timestamptz not null default now())"
        )
        for migration in shipped():
            if migration.version <= version:
                conn.execute(migration.sql.encode())
                conn.execute(
                    "insert into schema_migrations (version, name) values (%s, %s)",
                    (migration.version, migration.name),
                )


def wait_for(what: str, check: Callable[[], bool], process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120
    while not check():
        if process.poll() is not None:
            raise AssertionError(f"the upgrade ended before {what}: {process.communicate()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"never {what}")
        time.sleep(0.05)


def test_an_upgrade_killed_in_the_middle_leaves_the_old_schema_whole(
    pg_fresh_dsn: str, pg_dsn: str
) -> None:
    old = latest() - 1
    as_an_older_orchestrate_left_it(pg_fresh_dsn, old)
    old_columns, old_recorded = columns(pg_fresh_dsn), recorded(pg_fresh_dsn)
    name = f"upgrade_killed_{secrets.token_hex(4)}"
    upgrade = command("db", "upgrade", "--store", f"{pg_fresh_dsn}&application_name={name}")
    with (
        psycopg.connect(pg_fresh_dsn) as holder,
        psycopg.connect(pg_fresh_dsn, autocommit=True) as watcher,
    ):
        # Reading schema_migrations is allowed (ACCESS SHARE); recording in it is not.
        holder.execute("lock table schema_migrations in exclusive mode")
        upgrading = subprocess.Popen(
            upgrade, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:

            def session() -> int | None:
                row = watcher.execute(
                    "select pid from pg_stat_activity where application_name = %s", (name,)
                ).fetchone()
                return None if row is None else int(row[0])

            def blocked_recording() -> bool:
                pid = session()
                return pid is not None and bool(
                    watcher.execute(
                        "select exists (select from pg_locks where pid = %s and not granted "
                        "and relation = 'schema_migrations'::regclass)",
                        (pid,),
                    ).fetchone()[0]
                )

            wait_for("waited to record its migrations", blocked_recording, upgrading)
            pid = session()
            held = watcher.execute(
                "select locktype, mode, objid, relation from pg_locks where pid = %s and granted",
                (pid,),
            ).fetchall()
            # It is in the middle: it holds the migrations' advisory lock, and the tables
            # its migrations made (theirs alone: exclusive locks on relations that no
            # one else can see yet).
            assert ("advisory", "ExclusiveLock", MIGRATION_LOCK, None) in held
            made = [r for r in held if r[0] == "relation" and r[1] == "AccessExclusiveLock"]
            assert made, held
            os.kill(upgrading.pid, signal.SIGKILL)
        finally:
            if upgrading.poll() is None:
                upgrading.kill()
            upgrading.communicate(timeout=60)
            holder.rollback()
        # The server ends the killed process's session once it finds the client gone.
        wait_for_gone = time.monotonic() + 120
        while session() is not None:
            assert time.monotonic() < wait_for_gone, "the killed upgrade's session stayed"
            time.sleep(0.05)
    assert upgrading.returncode == -signal.SIGKILL
    assert (columns(pg_fresh_dsn), recorded(pg_fresh_dsn)) == (old_columns, old_recorded)

    again = orchestrate("db", "upgrade", "--store", pg_fresh_dsn)
    assert again.returncode == 0, again.stderr
    assert columns(pg_fresh_dsn) == columns(pg_dsn)
    assert [row[:2] for row in recorded(pg_fresh_dsn)] == [(m.version, m.name) for m in shipped()]
    assert recorded(pg_fresh_dsn)[: len(old_recorded)] == old_recorded
