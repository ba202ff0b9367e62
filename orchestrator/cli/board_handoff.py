"""The board commands' side of handing a task's answer to the workflow run waiting for it.

The hand-off itself is the board wing's (``orchestrator.board.handoff``), through the
board and the ``RunStore`` port; here the store a command names is opened for it:
``board watchdog`` and a worker's watchdog pass time out subagents that stopped
heartbeating and answer the requests waiting for them TIMEOUT.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..board.board import Board


def time_out_stale_tasks(
    board: Board, workdir: Path, *, now: Any = None, dsn: str | None = None
) -> list[Any]:
    """Run the watchdog; a workflow request waiting for a timed-out task is answered
    TIMEOUT, so the workflow moves on (and reassigns the task) when it resumes. The
    workflow is a run of the work directory ``workdir``, or with ``dsn`` of that store."""
    from ..board import handoff
    from .run_store import store_at

    runs = store_at(dsn, workdir)
    try:
        return handoff.time_out_stale_tasks(board, runs, now=now)
    finally:
        runs.close()


def watch_store_board(dsn: str, board_id: str) -> list[Any]:
    """One watchdog pass over board ``board_id`` of the store at ``dsn`` (a worker's, say),
    unless another pass runs now; requests of the board's run waiting for a timed-out
    task are answered TIMEOUT. Returns the deltas that timed tasks out."""
    from ..board.board import Board
    from ..board.handoff import watch_board
    from .run_store import close_board_stores, open_board_store, store_at

    board = Board(store=open_board_store(dsn, board_id))
    runs = store_at(dsn, Path.cwd())
    try:
        return watch_board(board, runs)
    finally:
        runs.close()
        close_board_stores()
