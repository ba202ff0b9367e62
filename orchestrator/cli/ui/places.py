"""Where the page finds runs: a run store (a work directory's files, or a PostgreSQL
store), seen through the :class:`orchestrator._ports.RunStore` port.

Each served place is one store; the browser names it by its number. A place gives the
runs to list, a run's state, what of it is answered, an answer taken through
``orchestrate respond``'s own validation, the command that resumes or recovers it, its
events and its evidence files, and the task boards kept there.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from ..._ports import (
    BoardTailInput,
    ListRunsInput,
    PendingInput,
    ReadEventsInput,
    RespondInput,
    RunFileInput,
    RunInput,
    RunStore,
    SendSignalInput,
)
from .runs import RunRef, RunRow

#: An event line: (x_seq, its bytes without the newline, its name).
EventLine = tuple[int, bytes, str]
MAX_LISTED = 10_000


@attrs.frozen(kw_only=True)
class LoadedRun:
    """A run's state as a page shows it: where it was read from, whether the run lives,
    and why its signature does not hold, if so (then nothing is done to it from here)."""

    state: Any
    source: str
    live: bool
    problem: str | None = None


class Place:
    """The runs of one store. ``workdir``: the work directory it is, when it is one (its
    regression reports are served too)."""

    def __init__(self, store: RunStore, *, workdir: Path | None = None) -> None:
        self.store = store
        self.workdir = workdir
        self.label = store.name

    def rows(self, index: int) -> list[RunRow]:
        return [
            RunRow(
                ref=RunRef(directory=index, run_id=r.run_id),
                where=self.label,
                workflow=r.workflow,
                status=r.status,
                phase=r.phase,
                waiting_for=r.pending,
                updated=r.updated_at.timestamp(),
                problem=r.problem,
            )
            for r in self.store.list_runs(ListRunsInput(limit=MAX_LISTED))
        ]

    def load(self, run_id: str) -> LoadedRun:
        """The run's state (archived requests whole), where from, whether it lives, and
        why its signature does not hold, if so."""
        run = self.store.read_run(RunInput(run_id=run_id))
        if run.state is None:
            from ..._errors import NoInstanceError

            raise NoInstanceError(f"{run.source} is {run.status}: it has no state yet")
        return LoadedRun(state=run.state, source=run.source, live=run.live, problem=run.problem)

    def answered(self, run_id: str, pending: list[str]) -> frozenset[str]:
        return frozenset(self.store.answered(RunInput(run_id=run_id)) & set(pending))

    def answer(self, run_id: str, request_id: str, text: str) -> int:
        """Take the answer; how many of the run's requests still wait for one."""
        from ..instance import choose_request, response_document

        run = RunInput(run_id=run_id)
        pending = [p.request_id for p in self.store.pending(PendingInput(run_id=run_id))]
        choose_request(pending, request_id, where=f"run {run_id}")
        self.store.respond(RespondInput(run=run, response=response_document(request_id, text=text)))
        return len(pending) - len(self.answered(run_id, pending))

    def signal(self, run_id: str, name: str, payload: Any) -> str:
        """Keep signal ``name`` for the run, through the answer gate; its id."""
        return self.store.send_signal(
            SendSignalInput(run=RunInput(run_id=run_id), name=name, payload=payload)
        )

    def command(self, run_id: str) -> list[str]:
        """The options that name this run to an ``orchestrate`` command."""
        return self.store.command_arguments(run_id)

    def event_reader(self, run_id: str) -> Callable[[], list[EventLine]]:
        last = 0

        def read_new() -> list[EventLine]:
            nonlocal last
            lines = []
            for seq, line in self.store.events(ReadEventsInput(run_id=run_id, after=last)):
                last = seq
                try:
                    name = str(json.loads(line).get("event", ""))
                except (ValueError, AttributeError):
                    continue
                lines.append((seq, line.rstrip(b"\n"), name))
            return lines

        return read_new

    def files(self, run_id: str) -> list[str]:
        return self.store.run_files(RunInput(run_id=run_id))

    def read_file(self, run_id: str, relative: str) -> bytes | None:
        return self.store.read_run_file(RunFileInput(run_id=run_id, path=relative))

    def boards(self) -> list[str]:
        """The ids of the task boards here ("" for a work directory's one board)."""
        return self.store.boards()

    def board(self, board_id: str) -> tuple[Any, list[bytes]]:
        """The board (``orchestrator.board.board.Board``) and its ledger's last lines;
        ``NoInstanceError`` when there is none by that id."""
        from ...board.board import Board

        board = Board(store=self.store.board_store(board_id))
        return board, self.store.board_tail(BoardTailInput(board_id=board_id, count=30))
