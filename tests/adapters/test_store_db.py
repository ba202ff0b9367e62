"""``orchestrate db upgrade`` and ``db status`` as an operator runs them: new processes
against a real server, each test in a schema no one used before. Two upgrades started
together are made to meet at the migrations' advisory lock (the test holds it until both
wait), so the race is there every time, not by luck."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from typing import Any

import pytest

from orchestrator.adapters.postgres.migrations import MIGRATION_LOCK, latest, shipped
from support import needs
from support.cli import command, orchestrate

psycopg = needs.psycopg()


def snapshot(dsn: str) -> dict[str, Any]:
    """What an upgrade may change in the store's schema: the migrations it recorded (with
    when) and every table's columns."""
    with psycopg.connect(dsn) as conn:
        schema = conn.execute("select current_schema()").fetchone()
        columns = conn.execute(
            "select table_name, column_name, data_type from information_schema.columns "
            "where table_schema = current_schema() order by 1, 2"
        ).fetchall()
        migrations = []
        if conn.execute("select to_regclass('schema_migrations')").fetchone() != (None,):
            migrations = conn.execute(
                "select version, name, applied_at from schema_migrations order by version"
            ).fetchall()
    return {"schema": schema, "columns": columns, "migrations": migrations}


def test_the_first_upgrade_makes_the_schema_and_a_second_does_nothing(
    pg_fresh_dsn: str,
) -> None:
    first = orchestrate("db", "upgrade", "--store", pg_fresh_dsn)
    assert first.returncode == 0, first.stderr
    names = ", ".join(f"{m.version:04d}_{m.name}" for m in shipped())
    assert first.stdout.strip().endswith(f"upgraded to version {latest()} ({names})")
    made = snapshot(pg_fresh_dsn)
    assert [row[:2] for row in made["migrations"]] == [(m.version, m.name) for m in shipped()]
    assert {"runs", "requests", "responses", "archive", "events", "run_files"} <= {
        table for table, _, _ in made["columns"]
    }
    second = orchestrate("db", "upgrade", "--store", pg_fresh_dsn)
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip().endswith(f"at version {latest()} already; nothing to do")
    assert snapshot(pg_fresh_dsn) == made


def test_two_upgrades_of_a_fresh_schema_at_once_both_succeed_each_version_once(
    pg_fresh_dsn: str,
) -> None:
    name = f"upgrade_race_{secrets.token_hex(4)}"
    dsn = f"{pg_fresh_dsn}&application_name={name}"
    upgrade = command("db", "upgrade", "--store", dsn)
    with (
        psycopg.connect(pg_fresh_dsn) as holder,
        psycopg.connect(pg_fresh_dsn, autocommit=True) as watcher,
    ):
        holder.execute("select pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        racers = [
            subprocess.Popen(upgrade, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        try:
            wait_until_waiting(watcher, name, count=2, racers=racers)
        finally:
            holder.rollback()  # lets them in, one after the other
        results = [racer.communicate(timeout=120) for racer in racers]
    assert [racer.returncode for racer in racers] == [0, 0], results
    said = sorted(out.strip().rsplit(": ", 1)[1] for out, _ in results)
    names = ", ".join(f"{m.version:04d}_{m.name}" for m in shipped())
    assert said == [
        f"at version {latest()} already; nothing to do",
        f"upgraded to version {latest()} ({names})",
    ]
    with psycopg.connect(pg_fresh_dsn) as conn:
        counted = conn.execute(
            "select version, count(*) from schema_migrations group by version order by version"
        ).fetchall()
    assert counted == [(m.version, 1) for m in shipped()]


def wait_until_waiting(
    conn: psycopg.Connection[Any], name: str, *, count: int, racers: list[subprocess.Popen[str]]
) -> None:
    """Until ``count`` sessions named ``name`` wait for the migrations' advisory lock
    (``conn`` in autocommit: a transaction would see the sessions as they first were)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        row = conn.execute(
            "select count(*) from pg_locks l join pg_stat_activity a using (pid) "
            "where a.application_name = %s and l.locktype = 'advisory' and not l.granted "
            "and l.objid = %s",
            (name, MIGRATION_LOCK),
        ).fetchone()
        if row is not None and row[0] == count:
            return
        ended = [racer.communicate() for racer in racers if racer.poll() is not None]
        assert not ended, f"an upgrade ended before it could wait: {ended}"
        time.sleep(0.05)
    raise AssertionError(f"{count} upgrades never waited for the lock")


@pytest.mark.slow
def test_a_store_a_newer_version_migrated_is_refused_unchanged(pg_fresh_dsn: str) -> None:
    assert orchestrate("db", "upgrade", "--store", pg_fresh_dsn).returncode == 0
    newer = latest() + 1
    with psycopg.connect(pg_fresh_dsn) as conn:
        conn.execute(
            "insert into schema_migrations (version, name) values (%s, 'from_a_newer_one')",
            (newer,),
        )
    before = snapshot(pg_fresh_dsn)
    refused = orchestrate("db", "upgrade", "--store", pg_fresh_dsn)
    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert (
        f"the store's schema is at version {newer}, newer than this orchestrate knows "
        f"({latest()}); use the orchestrate that upgraded it" in refused.stderr
    )
    assert snapshot(pg_fresh_dsn) == before
    status = orchestrate("db", "status", "--store", pg_fresh_dsn, "--json")
    assert status.returncode == 0, status.stderr
    shown = json.loads(status.stdout)
    assert (shown["version"], shown["latest"]) == (newer, latest())
    assert shown["advice"].startswith("newer than this orchestrate knows")
    assert snapshot(pg_fresh_dsn) == before


@pytest.mark.slow
def test_status_shows_the_version_and_the_runs_by_status_changing_nothing(
    pg_fresh_dsn: str,
) -> None:
    untouched = orchestrate("db", "status", "--store", pg_fresh_dsn)
    assert untouched.returncode == 0, untouched.stderr
    assert f"schema version: none (latest known: {latest()}); not made yet" in untouched.stdout
    assert "runs: none" in untouched.stdout
    with psycopg.connect(pg_fresh_dsn) as conn:
        assert conn.execute("select to_regnamespace(current_schema())").fetchone() == (None,)
    assert orchestrate("db", "upgrade", "--store", pg_fresh_dsn).returncode == 0
    with psycopg.connect(pg_fresh_dsn) as conn:
        for run_id, status in [("a", "paused"), ("b", "completed"), ("c", "paused")]:
            conn.execute(
                "insert into runs (run_id, workflow_name, workflow_ref, status) "
                "values (%s, 'w', 'w.py:W', %s)",
                (run_id, status),
            )
    shown = orchestrate(
        "db", "status", "--json", env={"ORCHESTRATOR_STORE": pg_fresh_dsn}
    )  # the store from the environment
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["runs"] == {"completed": 1, "paused": 2}
    assert json.loads(shown.stdout)["advice"] == "up to date"
    text = orchestrate("db", "status", "--store", pg_fresh_dsn)
    assert "runs: 1 completed, 2 paused" in text.stdout


@pytest.mark.slow
def test_a_store_that_cannot_be_used_is_one_line_naming_why(pg_fresh_dsn: str) -> None:
    no_server = orchestrate("db", "upgrade", "--store", "postgresql://127.0.0.1:1/test")
    assert no_server.returncode == 1
    assert no_server.stderr.count("\n") == 1
    assert "postgresql://127.0.0.1:1/test: cannot connect:" in no_server.stderr
    assert "check that the server runs" in no_server.stderr

    bad = orchestrate("db", "upgrade", "--store", "postgresql://u:secret@[db/test")
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1
    assert "postgresql://u:***@[db/test: not a PostgreSQL URL libpq accepts" in bad.stderr
    assert "secret" not in bad.stderr

    unknown = orchestrate("db", "status", "--store", "postgresql:///test?colour=blue")
    assert unknown.returncode == 2
    assert 'invalid URI query parameter: "colour"' in unknown.stderr

    directory = orchestrate("db", "upgrade", "--store", "/tmp/somewhere")
    assert directory.returncode == 2
    assert "--store '/tmp/somewhere': name a PostgreSQL store" in directory.stderr

    nothing = orchestrate("db", "upgrade")
    assert nothing.returncode == 2
    assert "name the PostgreSQL store: --store" in nothing.stderr

    # Without the driver (the import fails as it does where the extra is not installed).
    without = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.modules['psycopg'] = None; from orchestrator.cli.main import main; "
            "sys.exit(main(sys.argv[1:]))",
            "db",
            "upgrade",
            "--store",
            pg_fresh_dsn,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert without.returncode == 1
    assert without.stderr.count("\n") == 1, without.stderr
    assert "pip install 'checkpoint-orchestrator[postgres]'" in without.stderr
    with psycopg.connect(pg_fresh_dsn) as conn:
        assert conn.execute("select to_regnamespace(current_schema())").fetchone() == (None,)
