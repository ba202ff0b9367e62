"""The task board: tasks, assignments, heartbeats, worklogs and results, in one directory
or in a database (a :class:`orchestrator._ports.BoardStore`; the logic is the same).

See ``docs/board.md`` for the files and the rules. :class:`Board` is made of one class
per role, each in its module: :mod:`~orchestrator.board.tasks`,
:mod:`~orchestrator.board.assignment`, :mod:`~orchestrator.board.progress`,
:mod:`~orchestrator.board.results` and :mod:`~orchestrator.board.watchdog`, all built on
:class:`orchestrator.board.core.BoardCore`; the handoff bundle is
:mod:`orchestrator.board.bundle`. Every change of a task is a ledger delta appended
under the board's writer lock (:class:`orchestrator.board.ledger.Ledger`); documents a
delta relies on (a packet, a verdict) are written before it.

Time comes from an injected clock, so the watchdog is tested without sleeping.
"""

from __future__ import annotations

from pathlib import Path

from .._ports import BoardStore, Clock
from ..formats.board_documents import ActiveLock, HandoffBundle
from .assignment import BoardAssignments
from .bundle import (
    HANDOFF_MAX_BYTES,
    cap_handoff,
    continue_handoff,
    handoff_bundle,
    handoff_markdown,
)
from .core import BOARD_DIR, BoardInfo
from .progress import BoardProgress
from .results import BoardResults
from .tasks import BoardTasks, topological_order
from .watchdog import BoardWatchdog

__all__ = [
    "BOARD_DIR",
    "HANDOFF_MAX_BYTES",
    "Board",
    "BoardInfo",
    "adopt_handoff",
    "cap_handoff",
    "handoff_markdown",
    "topological_order",
]


class Board(BoardTasks, BoardAssignments, BoardProgress, BoardResults, BoardWatchdog):
    """One board, in a directory or in the ``store`` given. Cheap to construct; reads
    lazily."""

    # -- views ----------------------------------------------------------------------------

    def lock_table(self, *, history: bool = False) -> list[ActiveLock]:
        """The active locks; with ``history``, also every lock ever released (inactive)."""
        state = self.state()
        active = {(t, r) for t, r in state.active_locks()}
        table = [ActiveLock(task_id=t, resource=r, active=True) for t, r in sorted(active)]
        if history:
            released = sorted(
                {
                    (row.task_id, resource)
                    for row in state.rows.values()
                    if row.attempts > 0
                    for resource in row.locks
                }
                - active
            )
            table += [ActiveLock(task_id=t, resource=r, active=False) for t, r in released]
        return table

    def handoff(self) -> HandoffBundle:
        """Everything a fresh orchestrator needs to continue, deterministic and size-capped."""
        return handoff_bundle(self)


def adopt_handoff(
    directory: Path | None,
    bundle: HandoffBundle,
    *,
    clock: Clock | None = None,
    store: BoardStore | None = None,
) -> Board:
    """A new board in ``directory`` (or ``store``) that continues the run ``bundle``
    describes: every task recreated and brought to its recorded status (finished tasks
    stay finished, a task that was in progress is blocked, to be reassigned)."""
    board = Board.create(
        directory,
        run_id=bundle.run_id,
        objective=bundle.objective,
        constraints=bundle.constraints,
        clock=clock,
        store=store,
    )
    continue_handoff(board, bundle)
    return board
