"""Four processes work one 100-task board in PostgreSQL at once (``board_pg_worker.py``:
assign under the board's locks, heartbeat, worklog, submit). Afterwards, from the
ledger's rows alone: every task was started once and done once, and no two tasks in
progress at the same moment ever held overlapping locks; the processes' own accounts
agree.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from orchestrator.board.board import Board
from orchestrator.formats.board_documents import Task, TaskType
from support.board_store_support import board_pg_store

__all__ = ["board_pg_store"]

WORKER = Path(__file__).parents[1] / "support" / "board_pg_worker.py"
PROCESSES = 4
TASKS = 100
MODULES = 6


pytestmark = pytest.mark.slow


def board_tasks() -> list[Task]:
    """Tasks whose locks overlap: every module has a task locking the whole module
    directory and tasks locking one file in it; some tasks wait for an earlier one."""
    tasks = []
    for number in range(1, TASKS + 1):
        module = f"src/m{number % MODULES}"
        scope = module if number % 10 == 0 else f"{module}/f{number}.py"
        tasks.append(
            Task(
                task_id=f"T-{number}",
                title=f"task {number}",
                type=TaskType.PARALLELIZABLE,
                dependencies=[f"T-{number - 7}"] if number % 9 == 0 and number > 7 else [],
                lock_scope=[scope],
                forbidden_scope=[],
                acceptance_criteria=[f"task {number} works"],
                worklog_path=f"worklogs/T-{number}.jsonl",
                timeout_seconds=600,
                heartbeat_interval_seconds=30,
            )
        )
    return tasks


def overlap(a: str, b: str) -> bool:
    """Two lock resources (plain relative paths) overlap: equal, or one under the other."""
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def check_ledger(documents: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Replay the ledger's rows in order: each task's statuses; fails at the first moment
    two tasks in progress hold overlapping locks."""
    scopes: dict[str, list[str]] = {}
    history: dict[str, list[str]] = {}
    running: dict[str, list[str]] = {}
    for seq, delta in enumerate(documents, 1):
        assert delta["x_seq"] == seq
        task_id = delta["task_id"]
        if "x_create" in delta:
            scopes[task_id] = delta["x_create"]["lock_scope"]
        history.setdefault(task_id, []).append(delta["status"])
        if delta["status"] == "in_progress":
            for other, locks in running.items():
                clash = [(a, b) for a in scopes[task_id] for b in locks if overlap(a, b)]
                assert not clash, f"seq {seq}: {task_id} started while {other} held {clash}"
            running[task_id] = scopes[task_id]
        else:
            running.pop(task_id, None)
    return history


def test_four_processes_work_a_hundred_task_board_each_task_once_no_lock_overlap(
    board_pg_store: Any, tmp_path: Path
) -> None:
    store = board_pg_store()
    board = Board.create(run_id=str(uuid.uuid4()), objective="a hundred tasks", store=store)
    board.create_tasks(board_tasks())
    outs = [tmp_path / f"worker-{n}.json" for n in range(PROCESSES)]
    workers = [
        subprocess.Popen(
            [sys.executable, str(WORKER), store.dsn, store.board_id, f"agent-{n}", str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for n, out in enumerate(outs)
    ]
    for worker in workers:
        _, err = worker.communicate(timeout=600)
        assert worker.returncode == 0, err.decode()

    rows = store.conn.execute(
        "select document from board_ledger where board_id = %s order by seq", (store.board_id,)
    ).fetchall()
    history = check_ledger([json.loads(bytes(row[0])) for row in rows])
    assert len(history) == TASKS
    assert all(statuses == ["todo", "in_progress", "done"] for statuses in history.values())
    accounts = [json.loads(out.read_text()) for out in outs]
    submitted = [task_id for account in accounts for task_id in account]
    assert sorted(submitted) == sorted(history)  # each task handed in by one process, once
    assert sum(1 for account in accounts if account) > 1  # the work was shared
    owners = {
        json.loads(bytes(row[0]))["owner"]
        for row in store.conn.execute(
            "select document from board_ledger where board_id = %s and document like %s",
            (store.board_id, b'%"status":"done"%'),
        ).fetchall()
    }
    assert owners <= {f"agent-{n}" for n in range(PROCESSES)}
