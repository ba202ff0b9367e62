"""A board writer killed (``kill -9``) inside its transaction on PostgreSQL: it held the
board's lock and had inserted its delta and its packet, but not committed. Nothing of it
is stored, the server releases its lock at once, and the next writer (another process)
assigns the same task as if the dead one had never started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import uuid
from typing import Any

import pytest

from orchestrator._ports import BoardDocumentInput
from orchestrator.board.board import Board
from orchestrator.formats.board_documents import Task, TaskType
from support.board_store_support import board_pg_store

__all__ = ["board_pg_store"]

# Assigns T-1 inside the board's lock, says so, then waits to be killed before it commits.
DYING_WRITER = textwrap.dedent(
    """
    import sys, time
    from orchestrator.adapters.postgres.task_board import PostgresBoardStore
    from orchestrator.board.board import Board

    store = PostgresBoardStore(sys.argv[1], sys.argv[2])
    board = Board(store=store)
    real_append = store.append_ledger

    def append_then_hang(request):
        end = real_append(request)
        print("appended", flush=True)
        time.sleep(600)
        return end

    store.append_ledger = append_then_hang
    board.assign(["T-1"], owner="doomed")
    """
)


pytestmark = pytest.mark.slow


def task(task_id: str) -> Task:
    return Task(
        task_id=task_id,
        title=f"task {task_id}",
        type=TaskType.PARALLELIZABLE,
        dependencies=[],
        lock_scope=["src"],
        forbidden_scope=[],
        acceptance_criteria=["it works"],
        worklog_path=f"worklogs/{task_id}.jsonl",
        timeout_seconds=600,
        heartbeat_interval_seconds=60,
    )


def test_a_writer_killed_in_its_transaction_leaves_nothing_and_no_lock(
    board_pg_store: Any,
) -> None:
    store = board_pg_store()
    board = Board.create(run_id=str(uuid.uuid4()), objective="crash", store=store)
    board.create_tasks([task("T-1"), task("T-2")])
    before = store.conn.execute(
        "select count(*) from board_ledger where board_id = %s", (store.board_id,)
    ).fetchone()
    with subprocess.Popen(
        [sys.executable, "-c", DYING_WRITER, store.dsn, store.board_id],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as dying:
        try:
            assert dying.stdout is not None
            assert dying.stdout.readline().strip() == "appended"
            # It holds the board's lock now, its transaction open. Kill it.
            os.kill(dying.pid, signal.SIGKILL)
            dying.wait(timeout=30)
        finally:
            if dying.poll() is None:
                dying.kill()
    after_kill = Board(store=board_pg_store())
    assert (
        store.conn.execute(
            "select count(*) from board_ledger where board_id = %s", (store.board_id,)
        ).fetchone()
        == before
    )
    packet = BoardDocumentInput(kind="packets", task_id="T-1", attempt=1)
    assert after_kill.store.read_document(packet) is None
    (started,) = after_kill.assign(["T-1"], owner="survivor")  # the lock is free again
    row = after_kill.state().rows["T-1"]
    assert (row.owner, row.attempts, row.status.value) == ("survivor", 1, "in_progress")
    assert started.task.task_id == "T-1"
