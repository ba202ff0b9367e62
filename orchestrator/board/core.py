"""What every part of the task board stands on: where the board is, its ``board.json``,
its clock and ledger, and the final worklog entry a settled task gets.

:class:`BoardCore` is the base of :class:`orchestrator.board.board.Board`; each role of
the board (tasks, assignment, progress, results, the watchdog) is a class of its own
module built on it. Every change of a task is a ledger delta appended under the board's
writer lock; the board's own deltas have deterministic ids (``T-3/2/done``), so an
operation repeated after a crash appends nothing twice, and the worklog entries it
writes carry the id of the delta they explain (``x_delta_id``) for the same reason.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs

from .._errors import BoardError, ContractError
from .._ports import BoardStore, Clock, WorklogInput
from ..formats.board_documents import (
    BOARD_SCHEMA_VERSION,
    ErrorCode,
    LedgerDelta,
    Task,
    TaskStatus,
    WorklogEntry,
)
from ..formats.convert import structure, unstructure
from ..formats.times import SystemClock, format_time, parse_time
from ..storage import beneath
from .file_store import INFO_FILE
from .ledger import Ledger, LedgerState, TaskRow

BOARD_DIR = ".board"
ORCHESTRATOR_ACTOR = "orchestrator"

_Board = TypeVar("_Board", bound="BoardCore")


@attrs.define(kw_only=True)
class BoardInfo:
    """``board.json``: what the board is for (written once)."""

    schema_version: str = BOARD_SCHEMA_VERSION
    run_id: str
    objective: str
    constraints: list[str] = attrs.Factory(list)
    created_at: str
    x_workspace: str | None = None  # where results' files live (submit artifacts)


class BoardCore:
    """One board, in a directory or in the ``store`` given: what each of its roles uses.
    Cheap to construct; reads lazily."""

    def __init__(
        self,
        directory: Path | None = None,
        *,
        clock: Clock | None = None,
        store: BoardStore | None = None,
    ) -> None:
        if store is None:
            if directory is None:
                raise TypeError("Board needs a directory or a store")
            from .file_store import FileBoardStore

            beneath.guard(directory.parent)  # the board and all in it: never through a link
            store = FileBoardStore(directory)
        self.store: BoardStore = store
        self.clock: Clock = clock or SystemClock()
        self.ledger = Ledger(store)
        self._info: BoardInfo | None = None

    @property
    def directory(self) -> Path:
        """The board's directory (a board kept in files only)."""
        where = getattr(self.store, "directory", None)
        if not isinstance(where, Path):
            raise BoardError(
                f"{self.store.location} is kept in a database, not a directory; name it "
                f"with {self.store.cli_arguments}",
                code=ErrorCode.MISSING_REQUIRED_INPUT.value,
            )
        return where

    @property
    def location(self) -> str:
        """Where the board is, for messages and asks: its directory, or its name in a
        database."""
        return self.store.location

    # -- creating and opening --------------------------------------------------------------

    @classmethod
    def create(
        cls: type[_Board],
        directory: Path | None = None,
        *,
        run_id: str | None = None,
        objective: str,
        constraints: Sequence[str] = (),
        workspace: Path | None = None,
        clock: Clock | None = None,
        store: BoardStore | None = None,
    ) -> _Board:
        """Make the board (or open it, if this run made it already). ``run_id`` is the
        run id every document of the board carries, a UUID as their format requires; a
        board no run dispatches may leave it out: a fresh one (or the board's own, when
        the board is there already)."""
        board = cls(directory, clock=clock, store=store)
        board.open_or_make(
            run_id=run_id, objective=objective, constraints=constraints, workspace=workspace
        )
        return board

    def open_or_make(
        self,
        *,
        run_id: str | None = None,
        objective: str,
        constraints: Sequence[str] = (),
        workspace: Path | None = None,
    ) -> None:
        """Open this board, refusing it if it is another run's, or make it (what
        :meth:`create` does once the board is constructed)."""
        if self.store.board_exists():
            info = self.info
            if run_id is not None and info.run_id.lower() != run_id.lower():
                raise BoardError(
                    f"{self.location} is the board of run {info.run_id}, not {run_id}; use "
                    "another board or remove that one",
                    code=ErrorCode.LEDGER_INCONSISTENT.value,
                )
            return
        _refuse_secrets(constraints, "a constraint")
        info = BoardInfo(
            run_id=run_id or str(uuid.uuid4()),
            objective=objective,
            constraints=list(constraints),
            created_at=format_time(self.clock.now()),
            x_workspace=str(workspace) if workspace is not None else None,
        )
        _check_info(info)
        if self.store.create_board(canonical_bytes(info)):
            self._info = info
            return
        # another process made it first: open it as made, or refuse another run's
        self.open_or_make(
            run_id=run_id, objective=objective, constraints=constraints, workspace=workspace
        )

    @property
    def info(self) -> BoardInfo:
        if self._info is None:
            raw = self.store.read_info()
            if raw is None:
                raise BoardError(
                    f"{self.location}: no task board here (no {INFO_FILE}); a workflow's "
                    "dispatch or 'orchestrate board init' makes one",
                    code=ErrorCode.MISSING_REQUIRED_INPUT.value,
                )
            from ..formats.strict_json import loads_strict

            source = f"{self.location}/{INFO_FILE}"
            try:
                self._info = structure(loads_strict(raw, source=source), BoardInfo, source=source)
            except ContractError as exc:
                raise BoardError(str(exc), code=ErrorCode.SCHEMA_INVALID.value) from None
        return self._info

    @property
    def run_id(self) -> str:
        return self.info.run_id

    @property
    def workspace(self) -> Path | None:
        where = self.info.x_workspace
        return Path(where) if where else None

    def state(self) -> LedgerState:
        return self.ledger.read()

    def now(self) -> str:
        return format_time(self.clock.now())

    def last_heartbeat(self, row: TaskRow) -> str | None:
        """The later of the task's last heartbeat and the start of its current attempt."""
        beat = self.store.read_heartbeat(row.task_id) or ""
        try:
            parse_time(beat)
        except (ValueError, ContractError):
            beat = ""  # a heartbeat that cannot be read is no heartbeat
        candidates = [t for t in (beat, row.updated_at) if t]
        return max(candidates, key=parse_time) if candidates else None

    def worklog_name(self, task: Task) -> str:
        """The task's ``worklog_path``, normalised: where its worklog is in the board."""
        from ..formats.scope import ScopeError, normalize_resource

        try:
            return normalize_resource(task.worklog_path)
        except ScopeError as exc:
            raise BoardError(
                f"task {task.task_id}: worklog_path {exc}",
                code=ErrorCode.SCHEMA_INVALID.value,
                task_id=task.task_id,
            ) from None

    def _blocked(
        self, row: TaskRow, attempt: int, code: ErrorCode, reason: str, *, timed_out: bool = False
    ) -> LedgerDelta:
        """The delta that blocks ``attempt`` of ``row``'s task with ``code`` (a verdict that
        did not pass, a timeout); the same delta releases the attempt's locks."""
        from ..formats.secrets import redact

        return LedgerDelta(
            task_id=row.task_id,
            status=TaskStatus.BLOCKED,
            owner=row.owner,
            reason=redact(reason),
            delta_id=f"{row.task_id}/{attempt}/blocked",
            x_base_version=row.version,
            x_code=code,
            timed_out=True if timed_out else None,
            last_heartbeat_at=self.last_heartbeat(row) if timed_out else None,
        )

    def _final_worklog(
        self, delta: LedgerDelta, task: Task, *, next_step: str, fresh: bool = True
    ) -> None:
        """The orchestrator's worklog entry for ``delta`` (a task blocked, failed or
        canceled). Unless the delta was ``fresh``ly appended, an entry already written
        for it (before a crash) is not written again."""
        path = self.worklog_name(task)
        if not fresh and self.store.worklog_has_entry(
            WorklogInput(path=path, line=b"", delta_id=delta.delta_id)
        ):
            return  # the delta was appended before (a step run again after a crash)
        entry = WorklogEntry(
            timestamp=self.now(),
            run_id=self.run_id,
            task_id=delta.task_id,
            actor=ORCHESTRATOR_ACTOR,
            action=f"task {delta.status.value}",
            files_touched=[],
            decision=delta.status.value,
            result=delta.reason,
            next_step=next_step,
            code=delta.x_code,
        )
        data = unstructure(entry)
        data["x_delta_id"] = delta.delta_id
        self.store.append_worklog(
            WorklogInput(path=path, line=json_line(data), delta_id=delta.delta_id)
        )

    def sweep(self) -> None:
        """Remove temporary files that writers killed mid-write left in the board."""
        self.store.sweep()


def _refuse_secrets(texts: Iterable[str], what: str) -> None:
    """Untrusted fields never carry a secret to a subagent: refuse, naming the kind."""
    from ..formats.secrets import first_secret_kind

    for text in texts:
        kind = first_secret_kind(text)
        if kind is not None:
            raise BoardError(
                f"{what} holds a secret ({kind}); it was not written: remove it",
                code=ErrorCode.UNTRUSTED_CONTEXT_BLOCK.value,
            )


def _check_info(info: BoardInfo) -> None:
    """Refuse a ``board.json`` whose run id is not a UUID or whose objective is empty or
    too long, before it is written."""
    import re

    if re.fullmatch(r"[0-9a-fA-F-]{36}", info.run_id) is None:
        raise BoardError(
            f"run id {info.run_id!r} is not a UUID (36 hexadecimal digits and dashes): every "
            "packet, result and worklog entry of the board carries it, and the task board "
            "documents' format requires one; give a UUID, or leave the run id out and the "
            "board makes one",
            code=ErrorCode.SCHEMA_INVALID.value,
        )
    if not 1 <= len(info.objective) <= 5000:
        raise BoardError(
            "the objective must be 1..5000 characters", code=ErrorCode.SCHEMA_INVALID.value
        )


def next_step_after(delta: LedgerDelta) -> str:
    """What happens next to a task ``delta`` settled, for its final worklog entry."""
    if delta.status is TaskStatus.BLOCKED:
        return "the orchestrator requeues the task while attempts remain, else fails it"
    if delta.status is TaskStatus.FAILED:
        return "no more attempts: a person reviews the worklog and the last verdict"
    if delta.status is TaskStatus.CANCELED:
        return "nothing: the task cannot start; fix its dependency and create it again"
    return "none"


def canonical_bytes(obj: Any) -> bytes:
    """A board document (``board.json``, a packet, a verdict) as its canonical JSON."""
    from ..formats.strict_json import dumps_canonical

    return dumps_canonical(unstructure(obj))


def json_line(data: dict[str, Any]) -> bytes:
    """One worklog line: compact JSON and a newline."""
    return (json.dumps(data, separators=(",", ":")) + "\n").encode()
