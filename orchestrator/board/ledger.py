"""The task board's ledger: ledger deltas, appended to a file and folded into rows.

The rules are the ledger rules D1-D5 of the task board documents, as ``docs/board.md``
defines them: deltas apply in file order; a ``delta_id`` seen before is a duplicate (or,
with other content, a forgery); the last applied delta wins per task; only a delta
carrying ``x_create`` makes a row; ``x_base_version`` is the row version the writer saw,
and a stale one is a ``CONCURRENCY_CONFLICT``. The lock table is derived: a task in
``in_progress`` holds its ``lock_scope``.

:class:`LedgerState` is the pure fold (no I/O; the property tests drive it directly).
:class:`Ledger` keeps it on disk: ``ledger.ndjson`` appended under the board's writer
lock, and ``ledger.snapshot.json`` so that loading a long ledger folds only its tail.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

from .._errors import BoardError, ContractError
from .._ports import (
    AppendLedgerInput,
    LedgerLine,
    LedgerLines,
    LedgerSnapshot,
    LedgerStore,
    ReadLedgerInput,
)
from ..formats.board_documents import ErrorCode, LedgerDelta, Task, TaskStatus
from ..formats.convert import structure, unstructure
from ..formats.strict_json import loads_strict
from ..storage.durable import sha256_hex
from .file_store import LEDGER_FILE as LEDGER_FILE
from .file_store import LOCK_FILE as LOCK_FILE
from .file_store import SNAPSHOT_FILE as SNAPSHOT_FILE
from .file_store import SNAPSHOT_FORMAT as SNAPSHOT_FORMAT

SNAPSHOT_EVERY = 1000

TERMINAL = frozenset({TaskStatus.DONE, TaskStatus.FAILED, TaskStatus.CANCELED})
LEGAL_TRANSITIONS: dict[TaskStatus, frozenset[TaskStatus]] = {
    TaskStatus.TODO: frozenset(
        {TaskStatus.IN_PROGRESS, TaskStatus.BLOCKED, TaskStatus.FAILED, TaskStatus.CANCELED}
    ),
    TaskStatus.IN_PROGRESS: frozenset(
        {TaskStatus.DONE, TaskStatus.BLOCKED, TaskStatus.FAILED, TaskStatus.CANCELED}
    ),
    TaskStatus.BLOCKED: frozenset(
        {TaskStatus.TODO, TaskStatus.IN_PROGRESS, TaskStatus.FAILED, TaskStatus.CANCELED}
    ),
}
_DELTA_ID = re.compile(r"[!-~]{1,200}")  # printable ASCII, no spaces: it is an index key
_BOOKKEEPING = ("x_seq", "x_at")  # set by the board when it appends; not part of a delta


@attrs.define
class TaskRow:
    """One task as the ledger has it: its definition and the fold of its deltas."""

    task: Task
    status: TaskStatus
    owner: str
    reason: str
    version: int  # the x_seq of the last delta applied to this task
    locks: list[str]  # the lock scope, normalised
    created: int  # the x_seq of the delta that created it: the board's order of tasks
    delta_id: str = ""  # the last delta applied to it
    attempts: int = 0
    code: ErrorCode | None = None
    verdict: str | None = None
    last_heartbeat_at: str | None = None
    timed_out: bool | None = None
    retry_after_ms: int | None = None
    updated_at: str | None = None

    @property
    def task_id(self) -> str:
        return self.task.task_id


def delta_digest(delta: LedgerDelta) -> str:
    """What makes two deltas "the same" for D2: every field but the board's bookkeeping."""
    data = {k: v for k, v in unstructure(delta).items() if k not in _BOOKKEEPING}
    return sha256_hex(json.dumps(data, sort_keys=True, separators=(",", ":")).encode())[:32]


class DeltaIndex:
    """``delta_id`` -> digest of every applied delta; built lazily from a snapshot's text."""

    def __init__(self, packed: str = "") -> None:
        self._packed = packed
        self._entries: dict[str, str] | None = None if packed else {}

    def get(self, delta_id: str) -> str | None:
        return self._table().get(delta_id)

    def add(self, delta_id: str, digest: str) -> None:
        self._table()[delta_id] = digest

    def __len__(self) -> int:
        return len(self._table())

    def pack(self) -> str:
        return "".join(f"{k} {v}\n" for k, v in self._table().items())

    def _table(self) -> dict[str, str]:
        if self._entries is None:
            self._entries = dict(line.split(" ", 1) for line in self._packed.splitlines())
            self._packed = ""
        return self._entries


class LedgerState:
    """The fold of a ledger: rows by task id, the head sequence, the delta index."""

    def __init__(
        self,
        rows: dict[str, TaskRow] | None = None,
        *,
        seq: int = 0,
        index: DeltaIndex | None = None,
        live: set[str] | None = None,
    ) -> None:
        self.rows: dict[str, TaskRow] = rows if rows is not None else {}
        self.seq = seq
        self.index = index if index is not None else DeltaIndex()
        # Tasks in progress (the lock holders), kept as rows change: a board may hold
        # thousands of finished tasks and a handful of live ones.
        self.live: set[str] = (
            live
            if live is not None
            else {t for t, row in self.rows.items() if row.status is TaskStatus.IN_PROGRESS}
        )

    # -- reading ----------------------------------------------------------------------

    def row(self, task_id: str) -> TaskRow:
        try:
            return self.rows[task_id]
        except KeyError:
            raise BoardError(
                f"there is no task {task_id} on this board; create it first",
                code=ErrorCode.LEDGER_INCONSISTENT.value,
                task_id=task_id,
            ) from None

    def version(self, task_id: str) -> int:
        row = self.rows.get(task_id)
        return 0 if row is None else row.version

    def active_locks(self) -> list[tuple[str, str]]:
        """(task_id, resource) of every lock held now, sorted."""
        return sorted(
            (task_id, resource) for task_id in self.live for resource in self.rows[task_id].locks
        )

    # -- applying ---------------------------------------------------------------------

    def apply_batch(self, deltas: Sequence[LedgerDelta], *, at: str) -> list[LedgerDelta]:
        """Judge ``deltas`` in order and apply them all, or none (a :class:`BoardError`).

        Returns the deltas that are new, numbered (``x_seq``) and stamped (``x_at``);
        duplicates (D2) are left out.
        """
        scratch = self.scratch()
        applied = []
        for delta in deltas:
            if scratch.judge(delta):
                numbered = attrs.evolve(delta, x_seq=scratch.seq + 1, x_at=at)
                scratch.apply(numbered)
                scratch.index.add(numbered.delta_id, delta_digest(numbered))  # the batch's own
                applied.append(numbered)
        self.rows, self.seq, self.live = scratch.rows, scratch.seq, scratch.live
        for delta in applied:
            self.index.add(delta.delta_id, delta_digest(delta))
        return applied

    def scratch(self) -> LedgerState:
        """A copy to try changes on: rows are replaced, never changed in place, so a
        shallow copy suffices; new index entries stay in the copy."""
        return LedgerState(
            dict(self.rows), seq=self.seq, index=_Overlay(self.index), live=set(self.live)
        )

    def judge(self, delta: LedgerDelta) -> bool:
        """True if ``delta`` applies, False if it is a duplicate; :class:`BoardError` if refused."""
        refuse = _Refuser(delta)
        if _DELTA_ID.fullmatch(delta.delta_id) is None:
            raise refuse(ErrorCode.SCHEMA_INVALID, "delta_id must be 1..200 printable characters")
        seen = self.index.get(delta.delta_id)
        if seen is not None:
            if seen == delta_digest(delta):
                return False
            raise refuse(
                ErrorCode.LEDGER_INCONSISTENT,
                f"delta_id {delta.delta_id} was already used for a different delta (forged or "
                "colliding id); a new change needs a new delta_id",
            )
        row = self.rows.get(delta.task_id)
        if delta.x_create is not None:
            self._judge_create(delta, row, refuse)
            return True
        if row is None:
            raise refuse(
                ErrorCode.LEDGER_INCONSISTENT,
                f"there is no task {delta.task_id} on this board, and the delta is not a create "
                "(x_create); create the task first",
            )
        if delta.x_base_version is not None and delta.x_base_version != row.version:
            raise refuse(
                ErrorCode.CONCURRENCY_CONFLICT,
                f"task {delta.task_id} is at version {row.version}, the writer saw "
                f"{delta.x_base_version}: another writer changed it; re-read the ledger and "
                "decide again",
                details={"seen_version": delta.x_base_version, "current_version": row.version},
            )
        self._judge_transition(delta, row, refuse)
        return True

    def apply(self, delta: LedgerDelta) -> None:
        """Fold one judged, numbered delta into the rows (D3: the last applied wins)."""
        assert delta.x_seq is not None
        self.seq = delta.x_seq
        if delta.x_create is not None:
            self.rows[delta.task_id] = TaskRow(
                task=delta.x_create,
                status=delta.status,
                owner=delta.owner,
                reason=delta.reason,
                version=delta.x_seq,
                locks=_normalised_scope(delta.x_create.lock_scope),
                created=delta.x_seq,
                delta_id=delta.delta_id,
                last_heartbeat_at=delta.last_heartbeat_at,
                updated_at=delta.x_at,
            )
            return
        row = self.rows[delta.task_id]
        if delta.status is TaskStatus.IN_PROGRESS:
            self.live.add(delta.task_id)
        else:
            self.live.discard(delta.task_id)
        if delta.status is row.status and row.status in TERMINAL:
            self.rows[delta.task_id] = attrs.evolve(
                row, version=delta.x_seq, delta_id=delta.delta_id, updated_at=delta.x_at
            )
            return
        entering = delta.status
        self.rows[delta.task_id] = attrs.evolve(
            row,
            status=entering,
            owner=delta.owner,
            reason=delta.reason,
            version=delta.x_seq,
            delta_id=delta.delta_id,
            attempts=(delta.x_attempt or row.attempts + 1)
            if entering is TaskStatus.IN_PROGRESS
            else row.attempts,
            code=delta.x_code,
            verdict=delta.x_verdict if entering is TaskStatus.DONE else row.verdict,
            last_heartbeat_at=delta.last_heartbeat_at or row.last_heartbeat_at,
            timed_out=delta.timed_out if delta.timed_out is not None else row.timed_out,
            retry_after_ms=delta.retry_after_ms,
            updated_at=delta.x_at,
        )

    def _judge_create(self, delta: LedgerDelta, row: TaskRow | None, refuse: _Refuser) -> None:
        task = delta.x_create
        assert task is not None
        if row is not None:
            raise refuse(
                ErrorCode.LEDGER_INCONSISTENT,
                f"task {delta.task_id} already exists (created at ledger line {row.version} or "
                "before); a task is created once",
            )
        if task.task_id != delta.task_id:
            raise refuse(
                ErrorCode.SCHEMA_INVALID,
                f"x_create.task_id is {task.task_id}, the delta's task_id is {delta.task_id}",
            )
        if delta.status is not TaskStatus.TODO:
            raise refuse(ErrorCode.INVALID_TRANSITION, "a task is created in status todo")
        if delta.x_base_version not in (None, 0):
            raise refuse(
                ErrorCode.CONCURRENCY_CONFLICT,
                f"a create must have seen no row (x_base_version 0), not {delta.x_base_version}",
            )
        for dependency in task.dependencies:
            if dependency == task.task_id or dependency not in self.rows:
                raise refuse(
                    ErrorCode.DEPENDENCY_NOT_MET,
                    f"dependency {dependency} is not a task created before {task.task_id}; "
                    "create dependencies first (so the graph stays acyclic)",
                )
        from ..formats.scope import ScopeError, check_scope_pair

        try:
            check_scope_pair(task.lock_scope, task.forbidden_scope)
        except ScopeError as exc:
            raise refuse(ErrorCode.SCHEMA_INVALID, str(exc)) from None

    def _judge_transition(self, delta: LedgerDelta, row: TaskRow, refuse: _Refuser) -> None:
        current, entering = row.status, delta.status
        if entering is current and current in TERMINAL:
            return  # a terminal state re-asserted (replay): no locks, no owner change
        if entering not in LEGAL_TRANSITIONS.get(current, frozenset()):
            raise refuse(
                ErrorCode.INVALID_TRANSITION,
                f"task {row.task_id} is {current.value}; it cannot go to {entering.value}",
                details={"from": current.value, "to": entering.value},
            )
        if entering is TaskStatus.IN_PROGRESS:
            self._judge_start(delta, row, refuse)
        elif entering is TaskStatus.DONE and not delta.x_verdict:
            raise refuse(
                ErrorCode.ACCEPTANCE_FAILED,
                f"task {row.task_id} can be done only with a PASS verdict (x_verdict); submit "
                "a result through the gateway",
            )

    def _judge_start(self, delta: LedgerDelta, row: TaskRow, refuse: _Refuser) -> None:
        waiting = [
            dependency
            for dependency in row.task.dependencies
            if self.rows[dependency].status is not TaskStatus.DONE
        ]
        if waiting:
            raise refuse(
                ErrorCode.DEPENDENCY_NOT_MET,
                f"task {row.task_id} depends on {', '.join(waiting)}, not done yet",
                details={"waiting_for": waiting},
            )
        if not delta.owner.strip():
            raise refuse(
                ErrorCode.MISSING_REQUIRED_INPUT,
                f"task {row.task_id} needs an owner to enter in_progress",
            )
        conflicts = lock_conflicts_of(self, row)
        if conflicts:
            held_by, held, wanted = conflicts[0]
            raise refuse(
                ErrorCode.LOCK_CONFLICT,
                f"task {row.task_id} wants {wanted}, but task {held_by} holds {held}",
                details={
                    "conflicts": [
                        {"task_id": t, "resource": r, "wanted": w} for t, r, w in conflicts
                    ]
                },
            )


def lock_conflicts_of(state: LedgerState, row: TaskRow) -> list[tuple[str, str, str]]:
    """The held locks that keep ``row`` from entering in_progress: (task, held, wanted)."""
    from ..formats.scope import normalised_conflict

    return sorted(
        (task_id, held, wanted)
        for task_id in state.live
        if task_id != row.task_id
        for held in state.rows[task_id].locks
        for wanted in row.locks
        if normalised_conflict(held, wanted)
    )


class _Overlay(DeltaIndex):
    """A batch's view of the index: its own new entries over the ledger's, discarded on refusal."""

    def __init__(self, base: DeltaIndex) -> None:
        super().__init__()
        self._base = base

    def get(self, delta_id: str) -> str | None:
        own = super().get(delta_id)
        return own if own is not None else self._base.get(delta_id)


class _Refuser:
    def __init__(self, delta: LedgerDelta) -> None:
        self.delta = delta

    def __call__(
        self, code: ErrorCode, message: str, *, details: dict[str, Any] | None = None
    ) -> BoardError:
        return BoardError(
            f"delta {self.delta.delta_id} for task {self.delta.task_id}: {message}",
            code=code.value,
            task_id=self.delta.task_id,
            delta_id=self.delta.delta_id,
            details=details,
        )


def _normalised_scope(scope: Iterable[str]) -> list[str]:
    from ..formats.scope import normalize_resource

    return sorted({normalize_resource(resource) for resource in scope})


# -- on disk ---------------------------------------------------------------------------


def encode_delta(delta: LedgerDelta) -> bytes:
    """One ledger line: compact JSON, ASCII (so always valid UTF-8), newline-terminated."""
    return (json.dumps(unstructure(delta), separators=(",", ":")) + "\n").encode()


class Ledger:
    """A board's ledger in its store: readers fold it, writers append under a lock.

    Built on a directory (``ledger.ndjson`` there:
    :class:`orchestrator.board.file_store.FileBoardStore`) or on any
    :class:`orchestrator._ports.LedgerStore`. A reader needs no lock: lines are appended
    whole and durably, and a torn last line (a writer killed mid-append) is ignored until
    the next writer cuts it. The instance keeps the fold and the position it
    reached, so reading again folds only new lines.
    """

    def __init__(self, where: Path | LedgerStore, *, snapshot_every: int = SNAPSHOT_EVERY) -> None:
        if isinstance(where, Path):
            from .file_store import FileBoardStore

            where = FileBoardStore(where)
        self.store: LedgerStore = where
        self.snapshot_every = snapshot_every
        self._state = LedgerState()
        self._position = 0
        self._locked = False
        self._appended = False  # inside ``locked``: whether this block appended

    @property
    def path(self) -> Path:
        """``ledger.ndjson`` of a board kept in a directory."""
        return Path(self.store.ledger_location)

    @property
    def location(self) -> str:
        return self.store.ledger_location

    def read(self) -> LedgerState:
        """The ledger as it is stored now (the returned state is this ledger's own: a
        caller must not change it)."""
        if self._position == 0:
            self._load_from_scratch()
            return self._state
        lines = self.store.read_ledger(ReadLedgerInput(after=self._position))
        if lines.restart:
            self._load_from_scratch()
        elif lines.data:
            self._fold(lines)
        return self._state

    @contextmanager
    def locked(self) -> Iterator[LedgerState]:
        """Hold the writers' lock and give the ledger as it is under it: read, decide, then
        :meth:`append`, with no other writer in between."""
        with self.store.locked():
            self._locked, self._appended = True, False
            try:
                yield self.read()
            except BaseException:
                if self._appended:
                    # A store that writes in a transaction drops what this block appended:
                    # fold the ledger again rather than keep deltas that were not stored.
                    self._state, self._position = LedgerState(), 0
                raise
            finally:
                self._locked = False

    def append(self, deltas: Sequence[LedgerDelta], *, at: str) -> list[LedgerDelta]:
        """Judge and append ``deltas`` (all or none); returns the new ones, numbered.

        Must run inside :meth:`locked`. Duplicates (D2) are skipped; a refusal raises
        :class:`BoardError` and writes nothing.
        """
        if not self._locked:
            raise RuntimeError("Ledger.append needs the writers' lock: use 'with ledger.locked()'")
        _check_contract(deltas, at)
        # Under the lock no other writer appends: the state read when it was taken, with
        # this block's own appends, is the stored ledger.
        state = self._state
        applied = state.apply_batch(deltas, at=at)
        if not applied:
            return []
        lines = [
            LedgerLine(
                seq=delta.x_seq or 0,
                delta_id=delta.delta_id,
                task_id=delta.task_id,
                data=encode_delta(delta),
            )
            for delta in applied
        ]
        self._appended = True
        self._position = self.store.append_ledger(
            AppendLedgerInput(lines=lines, after=self._position)
        )
        every = self.snapshot_every
        if state.seq // every > (state.seq - len(applied)) // every:
            # The append that crosses a multiple writes it, whichever process that is.
            self.write_snapshot()
        return applied

    def write_snapshot(self) -> None:
        """Store the fold up to the current position, for fast loading."""
        state = self._state
        self.store.save_snapshot(
            LedgerSnapshot(
                position=self._position,
                seq=state.seq,
                body={
                    "rows": [unstructure(row) for row in state.rows.values()],
                    "delta_index": state.index.pack(),
                },
            )
        )

    # -- loading ----------------------------------------------------------------------

    def _load_from_scratch(self) -> None:
        self._state, self._position = LedgerState(), 0
        self._load_snapshot()
        lines = self.store.read_ledger(ReadLedgerInput(after=self._position))
        if lines.restart and self._position:  # the snapshot is of another ledger
            self._state, self._position = LedgerState(), 0
            lines = self.store.read_ledger(ReadLedgerInput(after=0))
        if lines.data:
            self._fold(lines)

    def _load_snapshot(self) -> None:
        """Adopt the store's snapshot if it has one it trusts and the board can read."""
        snapshot = self.store.load_snapshot()
        if snapshot is None:
            return
        try:
            rows = {}
            for data in snapshot.body["rows"]:
                row = structure(data, TaskRow, source=self.location + " snapshot")
                rows[row.task_id] = row
            index = DeltaIndex(str(snapshot.body["delta_index"]))
        except (ValueError, KeyError, TypeError, ContractError):
            return  # a snapshot we cannot read: fold the whole ledger
        self._state = LedgerState(rows, seq=snapshot.seq, index=index)
        self._position = snapshot.position

    def _fold(self, lines: LedgerLines) -> None:
        fold_ledger(self._state, lines.data, source=self.location)
        self._position = lines.end


@attrs.define
class Fold:
    """What :func:`fold_ledger` did: bytes consumed (whole lines), the last line folded,
    how many deltas applied and how many were duplicates."""

    consumed: int = 0
    last_line: bytes = b""
    applied: int = 0
    duplicates: int = 0
    #: what the snapshot line a compacted ledger begins with folded (see ``compaction``)
    snapshot: Any = None


def fold_ledger(
    state: LedgerState, data: bytes, *, source: str, first_line: int | None = None
) -> Fold:
    """Fold the whole lines of ``data`` (ledger bytes from a line start) into ``state``,
    as every reader of a ledger does: the board and ``orchestrate check ledger``.

    A torn last line (no newline: a writer killed mid-append) is not folded. A line that
    cannot be read, or holds a delta the board would refuse, is LEDGER_INCONSISTENT: the
    ledger cannot be reconciled; ``details["cause"]`` is the code of the rule it breaks.
    Errors name a line by its number in ``data`` counted from ``first_line`` when given
    (a reader of the whole ledger), else by the sequence number it should hold.
    """
    fold = Fold()
    end = data.rfind(b"\n") + 1  # a torn last line is left for the next writer to cut
    # Only "\n" ends a line: a bare "\r" is JSON whitespace, not a line break.
    for offset, line in enumerate(data[:end].split(b"\n")[:-1]):
        line += b"\n"
        fold.consumed += len(line)
        if not line.strip():
            continue
        number = state.seq + 1 if first_line is None else first_line + offset
        where = f"{source} line {number}"
        if line.startswith(b'{"x_ledger_snapshot":') and _snapshot_only(line):
            _adopt_snapshot(state, fold, line, where)
            continue
        delta = _parse_line(line, where)
        try:
            if delta.x_seq != state.seq + 1:
                raise BoardError(
                    f"x_seq is {delta.x_seq}, expected {state.seq + 1}; the ledger was "
                    "edited or two files were joined",
                    code=ErrorCode.LEDGER_INCONSISTENT.value,
                )
            fresh = state.judge(delta)
        except BoardError as exc:
            raise BoardError(
                f"{where}: {exc.reason}; the ledger holds a delta the board would refuse "
                "(edited by hand?); restore it from a copy",
                code=ErrorCode.LEDGER_INCONSISTENT.value,
                task_id=delta.task_id,
                delta_id=delta.delta_id,
                details={"cause": exc.code, **exc.details},
            ) from None
        if fresh:
            state.apply(delta)
            state.index.add(delta.delta_id, delta_digest(delta))
            fold.applied += 1
        else:
            fold.duplicates += 1
        fold.last_line = line
    return fold


def _snapshot_only(line: bytes) -> bool:
    """Whether ``line`` is an object with ``x_ledger_snapshot`` as its one member (a delta
    that merely begins with that extension field is read as a delta, as ever)."""
    try:
        document = json.loads(line)
    except ValueError:
        return False
    return isinstance(document, dict) and list(document) == ["x_ledger_snapshot"]


def _adopt_snapshot(state: LedgerState, fold: Fold, line: bytes, where: str) -> None:
    """The snapshot line of a compacted ledger: only its first line, read on an empty
    board."""
    from .compaction import adopt_snapshot

    if state.seq or state.rows or fold.applied or fold.duplicates or fold.snapshot:
        raise BoardError(
            f"{where}: a ledger snapshot line stands only at the start of a ledger; the "
            "ledger was edited or two files were joined; restore it from a copy",
            code=ErrorCode.LEDGER_INCONSISTENT.value,
        )
    fold.snapshot = adopt_snapshot(state, line, where)
    fold.last_line = line


def _check_contract(deltas: Sequence[LedgerDelta], at: str) -> None:
    """Refuse, before anything is written, a delta the ledger's readers would refuse."""
    from ..formats.board_rules import validate_ledger_delta
    from ..formats.convert import check_date_time

    for delta in deltas:
        where = f"delta {delta.delta_id} for task {delta.task_id}"
        try:
            check_date_time(at, source=where, json_path="$.x_at")
            validate_ledger_delta(delta, source=where)
        except ContractError as exc:
            raise BoardError(
                f"{exc}; nothing was written",
                code=ErrorCode.SCHEMA_INVALID.value,
                task_id=delta.task_id,
                delta_id=delta.delta_id,
            ) from None


def _parse_line(line: bytes, where: str) -> LedgerDelta:
    # The converter refuses unknown fields without the x_ prefix (strict mode) by itself.
    from ..formats.board_rules import error_code_for, validate_ledger_delta

    try:
        delta = structure(loads_strict(line, source=where), LedgerDelta, source=where)
        validate_ledger_delta(delta, source=where)
        return delta
    except ContractError as exc:
        raise BoardError(
            f"{exc}; the ledger line cannot be read; restore the ledger from a copy",
            code=ErrorCode.LEDGER_INCONSISTENT.value,
            details={"cause": error_code_for(exc).value, "json_path": exc.json_path},
        ) from None
