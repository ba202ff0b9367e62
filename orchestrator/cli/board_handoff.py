"""Handing a task board's outcome to the workflow that waits for it.

A workflow that dispatched a task waits on a request of its own; ``board submit`` and
``board watchdog`` answer that request (a response file beside an instance's state, or a
response in the store of the board's run), and the engine judges the answer on resume.
``resume`` and a worker time out subagents that stopped heartbeating, and a command that
runs a workflow on a store keeps the run's task boards in that store.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .common import close_board_stores as _close_stores
from .common import open_board_store as _open_store

if TYPE_CHECKING:
    from ..board.board import Board


def time_out_stale_tasks(
    board: Board, workdir: Path, *, now: Any = None, dsn: str | None = None
) -> list[Any]:
    """Run the watchdog; a workflow request waiting for a timed-out task is answered
    TIMEOUT, so the workflow moves on (and reassigns the task) when it resumes. The
    workflow is an instance in ``workdir``, or with ``dsn`` the run of the store's board."""
    waiting = _workflow_requests(board, workdir, dsn)
    timed_out = board.watchdog(now=now, spare=waiting.answered_tasks())
    for delta in timed_out:
        attempt = board.state().row(delta.task_id).attempts
        request = waiting.requests.get((delta.task_id, attempt))
        if request is not None:
            waiting.answer(request, text=delta.reason, status="timeout")
    return timed_out


def use_store_boards(engine: Any, dsn: str) -> None:
    """Keep the task boards of ``engine``'s run (``ctx.dispatch``, ``ctx.board()``) in the
    store at ``dsn``, each named by its run's id: what a command that runs a workflow on
    a store (run, resume, drive, worker) calls on the engine it made."""
    from ..adapters.postgres import board_store

    engine.board_store = lambda run_id: board_store(dsn, run_id)


def watch_store_board(dsn: str, board_id: str) -> list[Any]:
    """One watchdog pass over board ``board_id`` of the store at ``dsn`` (a worker's, say),
    unless another pass runs now; requests of the board's run waiting for a timed-out
    task are answered TIMEOUT. Returns the deltas that timed tasks out."""
    from ..board.board import Board

    board = Board(store=_open_store(dsn, board_id))
    try:
        with board.store.maintenance(wait=None) as held:
            if not held:
                return []
            return time_out_stale_tasks(board, Path.cwd(), dsn=dsn)
    finally:
        _close_stores()


class _WorkflowRequests:
    """Workflow requests pending for this board's assignments, (task, attempt) -> request
    id, and how to answer one: a response file beside an instance's state, or a response
    in the store of the board's run."""

    def __init__(self) -> None:
        self.requests: dict[tuple[str, int], str] = {}
        self.answered: set[str] = set()  # request ids whose answer waits to be read
        self._state_paths: dict[str, Path] = {}
        self._dsn: str | None = None
        self._run_id = ""

    def answered_tasks(self) -> set[str]:
        """Tasks whose subagent's answer is in: alive, not to time out."""
        return {task_id for (task_id, _), rid in self.requests.items() if rid in self.answered}

    def answer(self, request_id: str, *, text: str, status: str = "success") -> str:
        """Answer the request; where the answer went."""
        from .instance import response_document, write_response

        if self._dsn is None:
            path = self._state_paths[request_id]
            return str(write_response(path, request_id=request_id, text=text, status=status))
        from .common import open_store

        with open_store(self._dsn) as store:
            store.respond(self._run_id, response_document(request_id, text=text, status=status))
            return f"{store.name} run {self._run_id} request {request_id}"


def _workflow_requests(board: Board, workdir: Path, dsn: str | None) -> _WorkflowRequests:
    found = _WorkflowRequests()
    if dsn is None:
        _instance_requests(board, workdir, found)
    else:
        _store_requests(board, dsn, found)
    return found


def _instance_requests(board: Board, workdir: Path, found: _WorkflowRequests) -> None:
    """The requests of every workflow instance in ``workdir`` pending for an assignment of
    this board, and those a response file answers."""
    from ..formats.bridge import RESPONSE_FILE, RESPONSES_DIR, HistoryStatus
    from ..storage.beneath import list_directory
    from ..storage.files import read_regular_file
    from .instance import load_state_file

    for state_path in sorted(workdir.glob(".*-state.json")):
        for record in load_state_file(state_path).agent_requests:
            if record.status is not HistoryStatus.PENDING or record.x_request is None:
                continue
            context = record.x_request.context or {}
            if context.get("x_board") == board.location and "x_task_id" in context:
                key = (str(context["x_task_id"]), int(context.get("x_attempt", 0)))
                found.requests[key] = record.request_id
                found._state_paths[record.request_id] = state_path
    if not found.requests:
        return
    names = list_directory(workdir / RESPONSES_DIR)
    found.answered = {name[:-5] for name in names if name.endswith(".json")}
    try:
        raw = read_regular_file(workdir / RESPONSE_FILE, max_bytes=16 * 1024 * 1024)
        found.answered.add(str(json.loads(raw).get("request_id")))
    except (OSError, ValueError, AttributeError):  # ContractError is a ValueError
        pass


def _store_requests(board: Board, dsn: str, found: _WorkflowRequests) -> None:
    """The requests of the board's run (a dispatch board's id is its run's id) pending in
    the store for an assignment of this board, and those answered but not yet read."""
    from .common import open_store

    if not board.store.board_exists():
        return
    found._dsn, found._run_id = dsn, board.run_id
    with open_store(dsn) as store:
        for pending in store.pending(board.run_id):
            request = json.loads(pending.document)
            context = request.get("context") or {}
            if "x_board" in context and "x_task_id" in context:
                key = (str(context["x_task_id"]), int(context.get("x_attempt", 0)))
                found.requests[key] = pending.request_id
        if found.requests:
            rows = store.conn.execute(
                "select request_id from responses where run_id = %s", (board.run_id,)
            ).fetchall()
            found.answered = {str(row[0]) for row in rows}
