"""The task board tools of ``orchestrate mcp``: what a subagent does on its task, as
``orchestrate board packet|heartbeat|worklog|submit`` does it, on the boards of the
served stores (a work directory's one board, a PostgreSQL store's by their ids).

A result goes through the board's gateway: to the run waiting for it (judged again when
the run goes on) or, with no run waiting, to the board itself. A verdict that fails is
a tool error carrying the gateway's code.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..._errors import BoardError, NoInstanceError, UsageError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ...board.board import Board
    from .run_tools import RunTools


class GatewayRefusal(UsageError):
    """The gateway's verdict on a result was FAIL: ``code`` is its task board error code."""

    def __init__(self, message: str, *, code: str, verdict: dict[str, Any]) -> None:
        self.code = code
        self.verdict = verdict
        super().__init__(message)


class BoardTools:
    """The board tools over the stores of ``runs``."""

    refusals = (BoardError, GatewayRefusal)

    def __init__(self, runs: RunTools) -> None:
        self.runs = runs

    @staticmethod
    def refusal_facts(refused: Exception) -> dict[str, Any]:
        if isinstance(refused, GatewayRefusal):
            return {"refused": True, "code": refused.code, "verdict": refused.verdict}
        assert isinstance(refused, BoardError)
        return {"refused": True, "code": refused.code, "task_id": refused.task_id}

    @contextmanager
    def board_of(self, arguments: dict[str, Any]) -> Iterator[tuple[Board, Any]]:
        """The board that holds ``task_id`` (``board``: its id, when several are served),
        and the run store it lives in; closed after."""
        from ...board.board import Board

        task_id, wanted = str(arguments["task_id"]), arguments.get("board")
        for runs in self.runs.stores:
            for board_id in runs.boards():
                if wanted is not None and board_id != wanted:
                    continue
                board = Board(store=runs.board_store(board_id))
                try:
                    if task_id in board.state().rows:
                        yield board, runs
                        return
                finally:
                    board.store.close()
        where = f"board {wanted!r}" if wanted is not None else "any board served here"
        raise NoInstanceError(f"task_id {task_id!r}: no such task on {where}")

    def task_packet(self, arguments: dict[str, Any]) -> dict[str, Any]:
        with self.board_of(arguments) as (board, _):
            task_id = str(arguments["task_id"])
            attempt = arguments.get("attempt") or board.state().row(task_id).attempts
            try:
                raw, _ = board.packet_text(task_id, attempt)
            except FileNotFoundError:
                raise BoardError(
                    f"task {task_id} has no packet for attempt {attempt}: it was not assigned then",
                    code="MISSING_REQUIRED_INPUT",
                    task_id=task_id,
                ) from None
        packet: dict[str, Any] = json.loads(raw)
        return {"task_id": task_id, "attempt": attempt, "packet": packet}

    def heartbeat(self, arguments: dict[str, Any]) -> dict[str, Any]:
        with self.board_of(arguments) as (board, _):
            at = board.heartbeat(str(arguments["task_id"]))
        return {"task_id": arguments["task_id"], "heartbeat_at": at}

    def worklog_append(self, arguments: dict[str, Any]) -> dict[str, Any]:
        from ...formats.board_rules import parse_worklog_entry
        from ...formats.convert import unstructure

        task_id = str(arguments["task_id"])
        with self.board_of(arguments) as (board, _):
            entry = {
                "timestamp": board.now(),
                "run_id": board.run_id,
                "task_id": task_id,
                "files_touched": [],
                **dict(arguments["entry"]),
            }
            written = board.append_worklog(parse_worklog_entry(entry, source="entry"))
        return {"task_id": task_id, "entry": unstructure(written)}

    def submit(self, arguments: dict[str, Any]) -> dict[str, Any]:
        from ...board.handoff import deliver_result
        from ...formats.convert import unstructure

        task_id = str(arguments["task_id"])
        raw = json.dumps(arguments["result"], ensure_ascii=False).encode("utf-8")
        with self.board_of(arguments) as (board, runs):
            attempt = board.state().row(task_id).attempts
            delivery = deliver_result(board, runs, task_id, raw, attempt=attempt, source="result")
            if delivery is not None:
                judgement, delivered = delivery.preview, delivery.target
            else:
                judgement, delivered = board.submit(task_id, raw, attempt=attempt), None
        verdict = unstructure(judgement.verdict)
        if not judgement.passed:
            code = str(verdict.get("x_code") or verdict.get("reason_code") or "REFUSED")
            messages = "; ".join(verdict.get("messages") or []) or "the gateway refused it"
            raise GatewayRefusal(f"task {task_id}: {code}: {messages}", code=code, verdict=verdict)
        return {"task_id": task_id, "attempt": attempt, "delivered": delivered, "verdict": verdict}
