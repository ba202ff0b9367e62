"""``orchestrate prune`` on a PostgreSQL store: over a thousand finished runs it removes
exactly the runs it selects, every row of each; a kill -9 at its crash points, or after a
random while, leaves every run whole or gone and the next prune finishes; a live run, and
a run another process holds, stay; a dry run removes nothing."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from support import prune_support as prune
from support.cli import child_env, command, orchestrate

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
NOW_TEXT = "2026-06-01T12:00:00Z"
ARGS = ("--status", "completed,cancelled", "--older-than", "300h", "--keep-last", "400")


def prune_cli(dsn: str, *args: str) -> dict[str, object]:
    done = orchestrate("prune", "--store", dsn, "--json", *args, env={"ORCHESTRATOR_NOW": NOW_TEXT})
    assert done.returncode == 0, done.stderr
    document: dict[str, object] = json.loads(done.stdout)
    return document


def prune_process(dsn: str, crash_at: int | str | None, log: str) -> subprocess.Popen[bytes]:
    env = {"ORCHESTRATOR_NOW": NOW_TEXT}
    if crash_at is not None:
        env.update(ORCHESTRATOR_CRASH_AT=str(crash_at), ORCHESTRATOR_CRASH_LOG=log)
    return subprocess.Popen(
        command("prune", "--store", dsn, *ARGS),
        env=child_env(env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def expected(made: dict[str, datetime], statuses: dict[str, str]) -> set[str]:
    """What ``ARGS`` remove, worked out here on its own."""
    cutoff = NOW - timedelta(hours=300)
    candidates = sorted(
        (r for r in made if statuses[r] in ("completed", "cancelled")),
        key=lambda r: made[r],
        reverse=True,
    )
    return {r for r in candidates[400:] if made[r] < cutoff}


def read_listing(dsn: str) -> list[Any]:
    from orchestrator._ports import ListRunsInput
    from orchestrator.adapters.postgres.runs import PostgresRunStore

    with PostgresRunStore(dsn) as store:
        return store.list_runs(ListRunsInput(limit=100_000))


def read_all(dsn: str) -> dict[str, str]:
    """Every run of the store read whole through the port: its status."""
    from orchestrator._ports import ListRunsInput, RunInput
    from orchestrator.adapters.postgres.runs import PostgresRunStore

    with PostgresRunStore(dsn) as store:
        found = {}
        for row in store.list_runs(ListRunsInput(limit=100_000)):
            read = store.read_run(RunInput(run_id=row.run_id))
            assert read.state is not None and read.problem is None, row.run_id
            found[row.run_id] = row.status
    return found


@pytest.fixture
def thousand_runs(pg_fresh_dsn: str) -> tuple[str, dict[str, datetime], str]:
    """A store of 1,000 finished runs (copies of two completed and one cancelled real
    run) and one live run paused for its host."""
    dsn = pg_fresh_dsn
    sources = prune.pg_real_runs(dsn, 2)
    paused = orchestrate("run", prune.FLOW, "--store", dsn)
    assert paused.returncode == 42, paused.stderr
    cancelled = paused.stdout.strip()
    done = orchestrate("cancel", "--store", dsn, "--run", cancelled)
    assert done.returncode == 0, done.stderr
    made = prune.pg_clone_many(dsn, [*sources[:1], cancelled], 997, now=NOW)
    for row in read_listing(dsn):  # the real runs too: 1,000 finished runs in all
        made.setdefault(row.run_id, row.updated_at)
    assert len(made) == 1000
    live = orchestrate("run", prune.FLOW, "--store", dsn)
    assert live.returncode == 42, live.stderr
    return dsn, made, live.stdout.strip()


def test_prune_over_a_thousand_runs_removes_exactly_those_selected(
    thousand_runs: tuple[str, dict[str, datetime], str],
) -> None:
    import psycopg

    from orchestrator.adapters.postgres.bridge import run_lock_name
    from orchestrator.adapters.postgres.connection import schema_of

    dsn, made, live = thousand_runs
    statuses = read_all(dsn)
    assert set(statuses) == {*made, live} and statuses[live] == "paused"
    goes = expected(made, statuses)
    assert 500 < len(goes) < 700
    older = {r for r in made if made[r] < NOW - timedelta(hours=300)}
    assert older - goes  # kept by --keep-last
    assert {statuses[r] for r in goes} == {"completed", "cancelled"}
    before = prune.pg_run_digests(dsn)

    dry = prune_cli(dsn, *ARGS, "--dry-run")
    assert {r["run_id"] for r in dry["runs"]} == goes  # type: ignore[attr-defined]
    assert prune.pg_run_digests(dsn) == before  # a dry run removes nothing

    held = sorted(goes)[0]  # a run another process holds (a worker, a command) stays
    with psycopg.connect(dsn, autocommit=True) as other:
        other.execute(
            "select pg_advisory_lock(hashtextextended(%s, 0))",
            (run_lock_name(schema_of(dsn), held),),
        )
        done = prune_cli(dsn, *ARGS)
    outcome = {r["run_id"]: r for r in done["runs"]}  # type: ignore[attr-defined]
    assert set(outcome) == goes
    assert outcome[held]["removed"] is False and "another process" in outcome[held]["skipped"]
    assert done["removed"] == len(goes) - 1

    after = prune.pg_run_digests(dsn)
    assert set(after) == ({*made, live} - goes) | {held}
    assert after == {r: before[r] for r in after}  # what stays is as it was, row for row
    assert set(read_all(dsn)) == set(after)
    again = prune_cli(dsn, *ARGS)
    assert [r["run_id"] for r in again["runs"]] == [held]  # type: ignore[index]
    assert set(prune.pg_run_digests(dsn)) == {*made, live} - goes

    kept = sorted(set(made) - goes)[0]
    shown = orchestrate("history", "--store", dsn, "--run", kept)
    assert shown.returncode == 0 and "phase 3 three: done" in shown.stdout, shown.stderr
    gone = orchestrate("history", "--store", dsn, "--run", held)
    assert gone.returncode == 2 and f"no run {held}" in gone.stderr
    status = orchestrate("status", "--store", dsn, "--run", live, "--json")
    assert json.loads(status.stdout)["status"] == "paused"


def test_kill_9_during_prune_leaves_every_run_whole_or_gone(
    thousand_runs: tuple[str, dict[str, datetime], str], tmp_path: Path
) -> None:
    dsn, made, live = thousand_runs
    statuses = read_all(dsn)
    goes = expected(made, statuses)
    before = prune.pg_run_digests(dsn)
    from orchestrator.adapters.postgres.pruning import BATCH

    log = f"{tmp_path}/crash.log"
    gone_so_far: set[str] = set()
    # Two crash points a batch: its rows deleted, not committed; committed. Each process
    # counts its own: 1 and 3 fall inside a transaction (3 in its second batch), 2 right
    # after a commit.
    kills = [(1, None), (2, None), (3, None), (None, 0.3), (None, 0.6)]
    for crash_at, delay in kills:
        process = prune_process(dsn, crash_at, log)
        if delay is not None:
            time.sleep(random.Random(len(gone_so_far)).uniform(0, delay))
            process.send_signal(signal.SIGKILL)
        _, stderr = process.communicate(timeout=120)
        if delay is None:
            assert process.returncode == -signal.SIGKILL, (crash_at, stderr)
        now = prune.pg_run_digests(dsn)
        assert set(now) <= set(before)
        assert now == {r: before[r] for r in now}, "a run is not whole"
        assert set(before) - set(now) <= goes and live in now
        assert read_all(dsn).keys() == now.keys()
        gone_so_far = set(before) - set(now)
        if crash_at is not None:  # a batch goes at its commit, whole: none of it before
            assert len(gone_so_far) == {1: 0, 2: BATCH, 3: 2 * BATCH}[crash_at]
    prune_cli(dsn, *ARGS)
    assert set(prune.pg_run_digests(dsn)) == set(before) - goes
