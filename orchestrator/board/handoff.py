"""Handing a task's answer to the workflow run waiting for it.

A run that dispatched tasks waits on one request per assignment (its context names the
board and the task's attempt). When a subagent submits its result, or the watchdog times
its task out, the answer goes to that request through the run store, and the run judges
it when it goes on (``ctx.dispatch`` submits it to the board then). Everything here goes
through the board and the :class:`orchestrator._ports.RunStore` port: it works alike on
a work directory's files and on a PostgreSQL store.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import attrs

from .._ports import PendingInput, RespondInput, RunInput

if TYPE_CHECKING:
    from .._ports import RunStore
    from ..formats.bridge import AgentResponse
    from .board import Board
    from .gateway import Judgement


@attrs.define
class WaitingRequests:
    """Workflow requests pending for this board's assignments, ``(task, attempt) ->
    (run id, request id)``, and the ids of those whose answer waits to be read."""

    runs: RunStore
    requests: dict[tuple[str, int], tuple[str, str]] = attrs.Factory(dict)
    answered: set[str] = attrs.Factory(set)

    def answered_tasks(self) -> set[str]:
        """Tasks whose subagent's answer is in: alive, not to time out."""
        return {task for (task, _), (_, rid) in self.requests.items() if rid in self.answered}

    def answer(self, key: tuple[str, int], *, text: str, status: str = "success") -> str:
        """Answer the request waiting for ``key``'s attempt; where the answer went."""
        run_id, request_id = self.requests[key]
        response = answer_document(request_id, text=text, status=status)
        return self.runs.respond(RespondInput(run=RunInput(run_id=run_id), response=response))


def asks_of(board: Board, context: dict[str, Any]) -> bool:
    """Whether a request's context asks a task of ``board``: it names the board's id (a
    board in a store), or its location (a board directory)."""
    if "x_task_id" not in context:
        return False
    board_id = board.store.ask_context.get("x_board_id")
    if board_id is not None and "x_board_id" in context:
        return bool(context["x_board_id"] == board_id)
    return bool(context.get("x_board") == board.location)


def waiting_requests(board: Board, runs: RunStore) -> WaitingRequests:
    """The requests of the store's runs pending for an assignment of ``board``."""
    found = WaitingRequests(runs=runs)
    if not board.store.board_exists():
        return found
    waiting_runs: set[str] = set()
    for pending in runs.pending(PendingInput()):
        request = json.loads(pending.document)
        context = request.get("context") or {}
        if isinstance(context, dict) and asks_of(board, context):
            key = (str(context["x_task_id"]), int(context.get("x_attempt", 0)))
            found.requests[key] = (pending.run_id, pending.request_id)
            waiting_runs.add(pending.run_id)
    for run_id in sorted(waiting_runs):
        found.answered |= runs.answered(RunInput(run_id=run_id))
    return found


@attrs.frozen
class Delivery:
    """A result handed to the run waiting for it: where it went, and the gateway's
    judgement of it as a preview (the run records its own when it goes on)."""

    target: str
    preview: Judgement


def deliver_result(
    board: Board, runs: RunStore, task_id: str, raw: bytes, *, attempt: int, source: str
) -> Delivery | None:
    """Hand ``raw``, a subagent's result for ``task_id``'s ``attempt``, to the workflow
    request waiting for it; ``None`` when no run waits for it (the caller submits it to
    the board itself). The ledger is left as it is: the waiting run submits the result
    to the board when it goes on, so the verdict is recorded once, by the run."""
    from .gateway import evaluate

    waiting = waiting_requests(board, runs)
    if (task_id, attempt) not in waiting.requests:
        return None
    preview = evaluate(
        raw,
        task=board.state().row(task_id).task,
        run_id=board.run_id,
        source=source,
        submitted_at=board.now(),
        evaluated_at=board.now(),
        result_link=f"results/{task_id}.{attempt}.json",
        workspace=board.workspace,
    )
    target = waiting.answer((task_id, attempt), text=raw.decode("utf-8", "replace"))
    return Delivery(target=target, preview=preview)


def time_out_stale_tasks(board: Board, runs: RunStore, *, now: Any = None) -> list[Any]:
    """Run the watchdog (inside the board's maintenance lock); a workflow request waiting
    for a timed-out task is answered TIMEOUT, so the run moves on (and reassigns the
    task) when it goes on. Returns the deltas that timed tasks out."""
    waiting = waiting_requests(board, runs)
    timed_out = board.watchdog(now=now, spare=waiting.answered_tasks())
    for delta in timed_out:
        key = (delta.task_id, board.state().row(delta.task_id).attempts)
        if key in waiting.requests:
            waiting.answer(key, text=delta.reason, status="timeout")
    return timed_out


def watch_board(board: Board, runs: RunStore) -> list[Any]:
    """One watchdog pass over ``board``, unless another pass runs now (then nothing)."""
    with board.store.maintenance(wait=None) as held:
        if not held:
            return []
        return time_out_stale_tasks(board, runs)


def answer_document(request_id: str, *, text: str, status: str = "success") -> AgentResponse:
    """The answer a task's result (``success``) or its time-out (``timeout``) makes."""
    from ..formats.bridge_codec import parse_response
    from ..formats.times import SystemClock, format_time

    document: dict[str, Any] = {
        "request_id": request_id,
        "version": "1.0",
        "status": status,
        "created_at": format_time(SystemClock().now()),
    }
    if status == "success":
        document["response"] = text
    else:
        document["error_message"] = text or status
        document["error_type"] = "TIMEOUT" if status == "timeout" else "UNKNOWN"
    return parse_response(document, source="response")
