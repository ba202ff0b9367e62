"""``orchestrate prune`` on a PostgreSQL store: finished runs removed whole, or not at all.

A run is its ``runs`` row and the rows that hang on it (requests, responses, archive,
events, evidence files: removed with it by the schema's ``on delete cascade``), and its
dispatch board (the board whose id is the run's). Runs are removed a batch per
transaction: a crash or a lost server rolls the batch back whole. Each run is taken with
its row locked (``for update skip locked``) and its advisory lock tried for the
transaction, so a run a worker or a command holds, or one that changed since it was
chosen (retried, rewound), stays.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import attrs

from ..._ports import PrunedRun, PruneInput, RunListing
from ...storage.durable import crash_point
from ...storage.runs import ENGINE_KEY
from ..prune_rule import select_runs
from .bridge import run_lock_name
from .store import PostgresStore

#: Runs removed per transaction: small enough that a batch holds its locks briefly.
BATCH = 100
_BOARD_TABLES = (
    "board_ledger",
    "board_snapshots",
    "board_documents",
    "board_heartbeats",
    "board_worklogs",
    "boards",
)


def prune_runs(store: PostgresStore, request: PruneInput) -> list[PrunedRun]:
    """Remove the runs of ``store`` that ``request`` selects (see
    :meth:`orchestrator._ports.RunStore.prune_runs`)."""
    rows = store.conn.execute(
        "select run_id, workflow_name, status, updated_at from runs where status = any(%s)",
        (list(request.status),),
    ).fetchall()
    listed = [
        RunListing(run_id=str(r[0]), workflow=str(r[1]), status=str(r[2]), updated_at=r[3])
        for r in rows
    ]
    keep = [*request.keep, *_children_of_live_runs(store)]
    chosen = select_runs(listed, attrs.evolve(request, keep=keep))
    if request.dry_run:
        return [_pruned(run, removed=True) for run in chosen]
    outcomes: dict[str, PrunedRun] = {}
    for start in range(0, len(chosen), BATCH):
        batch = chosen[start : start + BATCH]
        for outcome in _prune_batch(store, batch):
            outcomes[outcome.run_id] = outcome
    return [outcomes[run.run_id] for run in chosen]


def _children_of_live_runs(store: PostgresStore) -> list[str]:
    """The child runs of runs that have not ended: they stay, whatever their status, as
    their parent reads their outputs when it goes on."""
    import json

    found: list[str] = []
    for (state,) in store.conn.execute(
        "select state from runs where status in ('queued', 'running', 'paused') "
        "and state is not null"
    ).fetchall():
        try:
            record = json.loads(bytes(state))["phase_data"][ENGINE_KEY]
            found.extend(str(run_id) for run_id in record.get("children") or ())
        except (ValueError, KeyError, TypeError, AttributeError):
            continue  # a damaged state names no children ('status' says what is wrong)
    return found


def _pruned(run: RunListing, *, removed: bool, skipped: str | None = None) -> PrunedRun:
    return PrunedRun(
        run_id=run.run_id,
        workflow=run.workflow,
        status=run.status,
        updated_at=run.updated_at,
        removed=removed,
        skipped=skipped,
    )


def _prune_batch(store: PostgresStore, batch: list[RunListing]) -> list[PrunedRun]:
    """Remove ``batch`` in one transaction: each run that is still as it was chosen and
    that no one holds."""
    conn: Any = store.conn
    ids = [run.run_id for run in batch]
    with conn.transaction():
        rows = conn.execute(
            "select run_id, status, updated_at from runs where run_id = any(%s) "
            "for update skip locked",
            (ids,),
        ).fetchall()
        now: dict[str, tuple[str, datetime]] = {str(r[0]): (str(r[1]), r[2]) for r in rows}
        outcomes = []
        going = []
        for run in batch:
            why = _why_kept(store, run, now.get(run.run_id))
            outcomes.append(_pruned(run, removed=why is None, skipped=why))
            if why is None:
                going.append(run.run_id)
        if going:
            for table in _BOARD_TABLES:  # a dispatch board's id is its run's id
                conn.execute(f"delete from {table} where board_id = any(%s)", (going,))
            # Every other row of a run goes with it (on delete cascade).
            conn.execute("delete from runs where run_id = any(%s)", (going,))
            # Texts stored once by digest, when runs reference them: the ones no kept run
            # references any more are removed here, in the same transaction.
        crash_point("prune: a batch of runs removed, not committed")
    crash_point("prune: a batch of runs committed")
    return outcomes


def _why_kept(
    store: PostgresStore, run: RunListing, now: tuple[str, datetime] | None
) -> str | None:
    if now is None:
        return "another process holds it, or it is gone already"
    if now != (run.status, run.updated_at):
        return "it changed while prune looked at it"
    taken = store.conn.execute(
        "select pg_try_advisory_xact_lock(hashtextextended(%s, 0))",
        (run_lock_name(store.schema, run.run_id),),
    ).fetchone()
    if not (taken and taken[0]):
        return "another process is working on it"
    return None
