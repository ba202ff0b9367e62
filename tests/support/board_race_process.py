"""One worker process for tests/board/test_board_concurrency.py: appends to a shared task board's
worklogs and races the other workers for overlapping locks.

    python board_race_process.py BOARD WORKER COUNT --holders PATH --journal PATH
                                 [--start-fd FD]

The worker appends ``COUNT`` worklog entries (:func:`worklog_entry`: its id and sequence
number in ``actor`` and ``action``, every 97th several kilobytes long) through
``Board.append_worklog``, spread over the tasks. Between appends it:

- starts a lock round every ``ROUND_EVERY`` appends: ``Board.assign`` one task; on success
  it enters its resources in the shared holder table (``--holders``, a JSON file updated
  under its own ``flock``, separate from the board's lock) and checks that nobody holds a
  conflicting resource; it keeps the task for ``HOLD_FOR`` appends, checks the table again,
  leaves it, and only then releases the task (blocked, then todo);
- right after taking a task, writes once more with the version it read before assigning
  (a stale view of its own making), which the board must refuse with
  ``CONCURRENCY_CONFLICT``;
- every ``PARK_EVERY`` appends reads a todo task's version, makes one more append (another
  worker may change the task meanwhile) and then parks it (todo -> blocked, then
  blocked -> todo) with that version: applied or refused, whichever the race gives.

Every attempt goes to the journal (``--journal``, JSON lines): the operation, the task,
what it expected to write, and the outcome (``applied`` with the ledger's ``x_seq`` and
``delta_id``, or ``refused`` with the error code), plus every holder-table violation. With
``--start-fd`` the process reads that pipe until EOF before its first append, so the test
releases every worker at once.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

from orchestrator._errors import BoardError
from orchestrator.board.board import Board
from orchestrator.formats.board_documents import TaskStatus, WorklogEntry
from orchestrator.formats.scope import resources_conflict

RUN_ID = "5f0c6a52-8d3e-4b7a-9c1e-2a4b6c8d0e1f"
# One task per scope; T-8 locks exactly what T-2 locks, T-9 two resources at once. "src"
# and "src2" share a prefix but not a path segment, so they do not conflict.
SCOPES: dict[str, list[str]] = {
    "T-1": ["src"],
    "T-2": ["src/api.py"],
    "T-3": ["src/db"],
    "T-4": ["src2"],
    "T-5": ["docs"],
    "T-6": ["docs/api.md"],
    "T-7": ["tests"],
    "T-8": ["src/api.py"],
    "T-9": ["tests", "docs/api.md"],
}
TASK_IDS = list(SCOPES)
ROUND_EVERY = 25
HOLD_FOR = 4
PARK_EVERY = 50

_FILLER = "abcdefghijklmnopqrstuvwxyz0123456789 "


def worklog_entry(worker: int, seq: int) -> WorklogEntry:
    """Entry ``seq`` of ``worker``; which task it goes to and its length depend on both."""
    size = 3000 + (seq * 131) % 6000 if seq % 97 == 0 else 20 + (seq * 37 + worker) % 300
    return WorklogEntry(
        timestamp=f"2025-01-01T{seq // 3600 % 24:02d}:{seq // 60 % 60:02d}:{seq % 60:02d}Z",
        run_id=RUN_ID,
        task_id=TASK_IDS[(seq + worker) % len(TASK_IDS)],
        actor=f"w{worker}",
        action=f"note {seq}",
        files_touched=[f"src/w{worker}/file{seq % 7}.py"],
        decision=(_FILLER * (size // len(_FILLER) + 1))[:size],
        result="ok",
        next_step="continue",
    )


class HolderTable:
    """The shared counter: resource -> holders (``w3:T-2``), in a file under its own flock."""

    def __init__(self, path: Path, worker: int) -> None:
        self.path = path
        self.worker = worker

    def enter(self, task_id: str) -> list[str]:
        """Record that this worker holds ``task_id``'s resources; return the conflicting
        holders already there (none, if the board's locks work)."""
        with self._table() as table:
            conflicts = self._conflicts(table, task_id)
            for resource in SCOPES[task_id]:
                table.setdefault(resource, []).append(self._tag(task_id))
        return conflicts

    def leave(self, task_id: str) -> list[str]:
        """Remove this worker's entries for ``task_id``; return the conflicting holders that
        arrived while it held them."""
        with self._table() as table:
            conflicts = self._conflicts(table, task_id)
            for resource in SCOPES[task_id]:
                table[resource].remove(self._tag(task_id))
        return conflicts

    def _tag(self, task_id: str) -> str:
        return f"w{self.worker}:{task_id}"

    def _conflicts(self, table: dict[str, list[str]], task_id: str) -> list[str]:
        mine = self._tag(task_id)
        return sorted(
            f"{holder} on {held} (wanted {wanted})"
            for held, holders in table.items()
            for wanted in SCOPES[task_id]
            if resources_conflict(held, wanted)
            for holder in holders
            if holder != mine
        )

    @contextmanager
    def _table(self) -> Iterator[dict[str, list[str]]]:
        fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            table: dict[str, list[str]] = json.loads(os.pread(fd, size, 0) or b"{}")
            yield table
            data = json.dumps(table, sort_keys=True).encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
        finally:
            os.close(fd)  # drops the flock


@attrs.define
class Hold:
    task_id: str
    version: int  # the row version of our in_progress delta
    until: int  # release after the append with this sequence number


class Racer:
    """One worker's ledger operations, each written to the journal with its outcome."""

    def __init__(self, board: Board, worker: int, holders: HolderTable) -> None:
        self.board = board
        self.worker = worker
        self.owner = f"w{worker}"
        self.holders = holders
        self.journal: list[dict[str, Any]] = []
        self._ops = 0

    def acquire(self, task_id: str, *, until: int) -> Hold | None:
        seen = self.board.state().row(task_id).version
        try:
            self.board.assign([task_id], owner=self.owner)
        except BoardError as exc:
            self._note("assign", task_id, outcome="refused", code=exc.code)
            return None
        row = self.board.state().row(task_id)  # ours now: nobody else may change it
        self._note(
            "assign",
            task_id,
            outcome="applied",
            x_seq=row.version,
            delta_id=f"{task_id}/{row.attempts}/in_progress",
            status_after=row.status.value,
            owner_after=row.owner,
        )
        self._check("enter", task_id, self.holders.enter(task_id))
        # Our own assign moved the row past `seen`: a write based on it must be refused.
        self._set_status("stale", task_id, TaskStatus.BLOCKED, seen, must_refuse=True)
        return Hold(task_id, row.version, until)

    def release(self, hold: Hold) -> None:
        self._check("leave", hold.task_id, self.holders.leave(hold.task_id))
        blocked = self._set_status("release", hold.task_id, TaskStatus.BLOCKED, hold.version)
        if blocked is not None:
            # Another worker may assign the blocked task before this lands: then it is refused.
            self._set_status("requeue", hold.task_id, TaskStatus.TODO, blocked)

    def read_for_park(self, task_id: str) -> tuple[str, int] | None:
        row = self.board.state().row(task_id)
        return (task_id, row.version) if row.status is TaskStatus.TODO else None

    def park(self, task_id: str, seen: int) -> None:
        parked = self._set_status("park", task_id, TaskStatus.BLOCKED, seen)
        if parked is not None:
            self._set_status("unpark", task_id, TaskStatus.TODO, parked)

    def _set_status(
        self,
        op: str,
        task_id: str,
        status: TaskStatus,
        base_version: int,
        *,
        must_refuse: bool = False,
    ) -> int | None:
        """One ``set_status`` with ``base_version``; the new version if it applied."""
        self._ops += 1
        op_id = f"{self.owner}#{self._ops} {op}"  # the delta's reason: unique, so traceable
        expected = {"status": status.value, "base_version": base_version, "reason": op_id}
        try:
            delta = self.board.set_status(
                task_id, status, reason=op_id, owner=self.owner, base_version=base_version
            )
        except BoardError as exc:
            self._note(
                op,
                task_id,
                outcome="refused",
                code=exc.code,
                details=exc.details,
                must_refuse=must_refuse,
                **expected,
            )
            return None
        if delta is None:  # the board said "nothing new": a write dropped without an error
            self._note(op, task_id, outcome="dropped", must_refuse=must_refuse, **expected)
            return None
        self._note(
            op,
            task_id,
            outcome="applied",
            x_seq=delta.x_seq,
            delta_id=delta.delta_id,
            must_refuse=must_refuse,
            **expected,
        )
        return delta.x_seq

    def _check(self, when: str, task_id: str, conflicts: list[str]) -> None:
        if conflicts:
            self._note("violation", task_id, when=when, conflicts=conflicts)

    def _note(self, op: str, task_id: str, **facts: Any) -> None:
        self.journal.append({"op": op, "task_id": task_id, "owner": self.owner, **facts})


def race(board: Board, worker: int, count: int, holders: HolderTable) -> list[dict[str, Any]]:
    racer = Racer(board, worker, holders)
    choose = random.Random(worker).choice
    hold: Hold | None = None
    stale_view: tuple[str, int] | None = None
    for seq in range(count):
        board.append_worklog(worklog_entry(worker, seq))
        if stale_view is not None:
            racer.park(*stale_view)  # one append after reading it: it may be stale by now
            stale_view = None
        if hold is not None and seq >= hold.until:
            racer.release(hold)
            hold = None
        elif hold is None and seq % ROUND_EVERY == worker % ROUND_EVERY:
            hold = racer.acquire(choose(TASK_IDS), until=seq + HOLD_FOR)
        if seq % PARK_EVERY == (worker * 7) % PARK_EVERY:
            stale_view = racer.read_for_park(choose(TASK_IDS))
    if hold is not None:
        racer.release(hold)
    return racer.journal


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("board", type=Path)
    parser.add_argument("worker", type=int)
    parser.add_argument("count", type=int)
    parser.add_argument("--holders", type=Path, required=True)
    parser.add_argument("--journal", type=Path, required=True)
    parser.add_argument("--start-fd", type=int)
    args = parser.parse_args()
    board = Board(args.board)
    board.state()  # fold the ledger before the start, not in the race
    if args.start_fd is not None:
        while os.read(args.start_fd, 4096):
            pass
    journal = race(board, args.worker, args.count, HolderTable(args.holders, args.worker))
    args.journal.write_text("".join(json.dumps(item) + "\n" for item in journal))


if __name__ == "__main__":
    main()
