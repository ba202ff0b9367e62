"""One subagent process working a task board in PostgreSQL until every task is finished:
it takes a ready task whose locks are free (``assign``), beats, logs, and hands in a
passing result (``submit``); a task another process took first is left to it.

Usage: ``python board_pg_worker.py DSN BOARD_ID OWNER OUT``; ``OUT`` gets the JSON list
of the tasks this process submitted, in order.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

from orchestrator._errors import BoardError
from orchestrator.adapters.postgres.task_board import PostgresBoardStore
from orchestrator.board.board import Board
from orchestrator.board.ledger import TERMINAL
from orchestrator.formats.board_documents import WorklogEntry
from orchestrator.formats.scope import lock_conflicts

# Another process changed the board between this one's read and its assign.
LOST_RACES = {"LOCK_CONFLICT", "CONCURRENCY_CONFLICT", "INVALID_TRANSITION"}


def result(board: Board, task_id: str) -> bytes:
    task = board.state().rows[task_id].task
    return json.dumps(
        {
            "schema_version": "1.0.0",
            "run_id": board.run_id,
            "task_id": task_id,
            "status": "done",
            "changes": [{"resource": r, "action": "edit"} for r in task.lock_scope],
            "acceptance_check": [
                {"criterion": c, "status": "pass", "evidence": "pytest -q: 1 passed"}
                for c in task.acceptance_criteria
            ],
            "worklog_path": task.worklog_path,
            "notes_for_orchestrator": [],
        }
    ).encode()


def main(dsn: str, board_id: str, owner: str, out: Path) -> None:
    rng = random.Random(owner)
    submitted: list[str] = []
    with PostgresBoardStore(dsn, board_id) as store:
        board = Board(store=store)
        while True:
            state = board.state()
            if all(row.status in TERMINAL for row in state.rows.values()):
                break
            held = state.active_locks()
            free = [r for r in board.ready(state) if not lock_conflicts(held, r.task_id, r.locks)]
            if not free:
                time.sleep(0.002)
                continue
            row = rng.choice(free[:8])
            try:
                board.assign([row.task_id], owner=owner)
            except BoardError as exc:
                if exc.code in LOST_RACES:
                    continue
                raise
            attempt = board.state().rows[row.task_id].attempts
            board.heartbeat(row.task_id, attempt=attempt)
            board.append_worklog(
                WorklogEntry(
                    timestamp=board.now(),
                    run_id=board.run_id,
                    task_id=row.task_id,
                    actor=owner,
                    action="edit",
                    files_touched=list(row.task.lock_scope),
                    decision="do the task",
                    result="done",
                    next_step="submit",
                )
            )
            judgement = board.submit(row.task_id, result(board, row.task_id), attempt=attempt)
            if not judgement.passed:
                raise SystemExit(f"{row.task_id}: {judgement.problem}")
            submitted.append(row.task_id)
    out.write_text(json.dumps(submitted))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4]))
