"""The task board: tasks, assignments, heartbeats, worklogs and results, in one directory
or in a database (a :class:`orchestrator._ports.BoardStore`; the logic is the same).

See ``docs/board.md`` for the files and the rules. Every change of a task is a ledger
delta appended under the board's writer lock (:class:`orchestrator.board.ledger.Ledger`);
documents a delta relies on (a packet, a verdict) are written before it. The board's own
deltas have deterministic ids (``T-3/2/done``), so an operation repeated after a crash
appends nothing twice; worklog entries it writes carry the id of the delta they explain
(``x_delta_id``) for the same reason.

Time comes from an injected clock, so the watchdog is tested without sleeping.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import attrs

from .._errors import BoardError, ContractError
from .._ports import BoardDocumentInput, BoardStore, Clock, HeartbeatInput, WorklogInput
from .._text import plural
from ..formats.board import (
    BOARD_SCHEMA_VERSION,
    AcceptanceTarget,
    ActiveLock,
    AssignmentPacket,
    Blocker,
    ContextItem,
    ErrorCode,
    HandoffBundle,
    HandoffDependency,
    HandoffRow,
    LedgerDelta,
    Pins,
    Priority,
    Task,
    TaskStatus,
    WorklogEntry,
)
from ..formats.convert import structure, unstructure
from ..formats.times import SystemClock, format_time, parse_time
from ..storage import beneath
from .files import INFO_FILE
from .gateway import Judgement, evaluate
from .ledger import TERMINAL, Ledger, LedgerState, TaskRow

BOARD_DIR = ".board"
PRIORITY_RANK = {Priority.CRITICAL: 0, Priority.HIGH: 1, Priority.NORMAL: 2, Priority.LOW: 3}
HANDOFF_MAX_BYTES = 256 * 1024
ORCHESTRATOR_ACTOR = "orchestrator"


INFO_MAX_BYTES = 16 * 1024 * 1024  # board.json, a verdict
HEARTBEAT_MAX_BYTES = 256  # one RFC 3339 time


@attrs.define(kw_only=True)
class BoardInfo:
    """``board.json``: what the board is for (written once)."""

    schema_version: str = BOARD_SCHEMA_VERSION
    run_id: str
    objective: str
    constraints: list[str] = attrs.Factory(list)
    created_at: str
    x_workspace: str | None = None  # where results' files live (submit artifacts)


class Board:
    """One board, in a directory or in the ``store`` given. Cheap to construct; reads
    lazily."""

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
            from .files import FileBoardStore

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

    # -- creating and opening -----------------------------------------------------------

    @classmethod
    def create(
        cls,
        directory: Path | None = None,
        *,
        run_id: str | None = None,
        objective: str,
        constraints: Sequence[str] = (),
        workspace: Path | None = None,
        clock: Clock | None = None,
        store: BoardStore | None = None,
    ) -> Board:
        """Make the board (or open it, if this run made it already). ``run_id`` is the
        run id every document of the board carries, a UUID as their format requires; a
        board no run dispatches may leave it out: a fresh one (or the board's own, when
        the board is there already)."""
        board = cls(directory, clock=clock, store=store)
        if board.store.board_exists():
            info = board.info
            if run_id is not None and info.run_id.lower() != run_id.lower():
                raise BoardError(
                    f"{board.location} is the board of run {info.run_id}, not {run_id}; use "
                    "another board or remove that one",
                    code=ErrorCode.LEDGER_INCONSISTENT.value,
                )
            return board
        _refuse_secrets(constraints, "a constraint")
        info = BoardInfo(
            run_id=run_id or str(uuid.uuid4()),
            objective=objective,
            constraints=list(constraints),
            created_at=format_time(board.clock.now()),
            x_workspace=str(workspace) if workspace is not None else None,
        )
        _check_info(info)
        if not board.store.create_board(_dump(info)):
            return cls.create(
                directory,
                run_id=run_id,
                objective=objective,
                constraints=constraints,
                workspace=workspace,
                clock=clock,
                store=store,
            )  # another process made it first: open it as made, or refuse another run's
        board._info = info
        return board

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

    # -- tasks ---------------------------------------------------------------------------

    def create_tasks(self, tasks: Sequence[Task], *, owner: str = "") -> list[LedgerDelta]:
        """Create ``tasks`` (in dependency order; a cycle is refused before anything is
        written). Creating the same tasks again changes nothing."""
        from ..formats.board_rules import error_code_for, refuse_untrusted_secret, validate_task

        for task in tasks:
            where = f"task {task.task_id}"
            try:
                validate_task(task, source=where)
                refuse_untrusted_secret(task, source=where)
            except ContractError as exc:
                raise BoardError(
                    f"{exc}; nothing was created",
                    code=error_code_for(exc).value,
                    task_id=task.task_id,
                ) from None
        ordered = topological_order(tasks)
        deltas = [
            LedgerDelta(
                task_id=task.task_id,
                status=TaskStatus.TODO,
                owner=owner,
                reason=f"created: {task.title}",
                delta_id=f"{task.task_id}/create",
                x_base_version=0,
                x_create=task,
            )
            for task in ordered
        ]
        with self.ledger.locked():
            return self.ledger.append(deltas, at=self.now())

    def ready(self, state: LedgerState | None = None) -> list[TaskRow]:
        """Tasks that may start now, in the order they should: todo, every dependency
        done; by priority, then creation order. Locks are not considered here."""
        state = state or self.state()
        ready = [
            row
            for row in state.rows.values()
            if row.status is TaskStatus.TODO
            and all(state.rows[d].status is TaskStatus.DONE for d in row.task.dependencies)
        ]
        return sorted(ready, key=lambda r: (PRIORITY_RANK[r.task.priority], _created(r)))

    def set_status(
        self,
        task_id: str,
        status: TaskStatus,
        *,
        reason: str,
        owner: str | None = None,
        code: ErrorCode | None = None,
        base_version: int | None = None,
        delta_id: str | None = None,
    ) -> LedgerDelta | None:
        """One transition as a person or another tool asks for it (checked like any other).

        Entering ``in_progress`` goes through :meth:`assign` (it needs a packet), and
        ``done`` through :meth:`submit` (it needs a PASS verdict).
        """
        if status is TaskStatus.IN_PROGRESS:
            raise BoardError(
                f"task {task_id}: use 'assign' to start a task (it writes the packet)",
                code=ErrorCode.INVALID_TRANSITION.value,
                task_id=task_id,
            )
        if status is TaskStatus.DONE:
            raise BoardError(
                f"task {task_id}: a task is done only through 'submit' and a PASS verdict",
                code=ErrorCode.ACCEPTANCE_FAILED.value,
                task_id=task_id,
            )
        from ..formats.secrets import redact

        with self.ledger.locked() as state:
            row = state.row(task_id)
            delta = LedgerDelta(
                task_id=task_id,
                status=status,
                owner=row.owner if owner is None else owner,
                reason=redact(reason),
                delta_id=delta_id or f"{task_id}/v{row.version}/{status.value}",
                x_base_version=row.version if base_version is None else base_version,
                x_code=code,
            )
            applied = self.ledger.append([delta], at=self.now())
        if applied and status in (TaskStatus.BLOCKED, TaskStatus.FAILED):
            self._final_worklog(
                applied[0], row.task, next_step="a person decides: requeue or cancel"
            )
        return applied[0] if applied else None

    # -- assignment ----------------------------------------------------------------------

    def assign(
        self,
        task_ids: Sequence[str],
        *,
        owner: str,
        context: Sequence[ContextItem] = (),
    ) -> list[AssignmentPacket]:
        """Start ``task_ids`` (all or none): write each packet, then one ledger append that
        takes their locks. A task this owner already started (the call repeated after a
        crash) is given back as it is: the same packet, nothing appended."""
        with self.ledger.locked() as state:
            packets, deltas = [], []
            scratch = state.scratch()
            for task_id in task_ids:
                row = scratch.row(task_id)
                if row.status is TaskStatus.IN_PROGRESS and row.owner == owner:
                    packets.append(self._read_packet(task_id, row.attempts))
                    continue
                attempt = row.attempts + 1
                delta = LedgerDelta(
                    task_id=task_id,
                    status=TaskStatus.IN_PROGRESS,
                    owner=owner,
                    reason=f"assigned to {owner} (attempt {attempt})",
                    delta_id=f"{task_id}/{attempt}/in_progress",
                    x_base_version=row.version,
                    x_attempt=attempt,
                )
                scratch.judge(delta)  # refuses before any packet is written
                scratch.apply(attrs.evolve(delta, x_seq=scratch.seq + 1, x_at=""))
                packets.append(self._packet(scratch, scratch.rows[task_id], context))
                deltas.append(delta)
            fresh = {delta.task_id: delta for delta in deltas}
            for packet in packets:
                started = fresh.get(packet.task.task_id)
                if started is not None:
                    self.store.write_document(
                        _packet_input(started.task_id, started.x_attempt or 1, _dump(packet))
                    )
            self.ledger.append(deltas, at=self.now())
        return packets

    def _read_packet(self, task_id: str, attempt: int) -> AssignmentPacket:
        from ..formats.board_rules import parse_packet
        from ..formats.strict_json import loads_strict

        raw, source = self.packet_text(task_id, attempt)
        return parse_packet(loads_strict(raw, source=source), source=source)

    def packet_text(self, task_id: str, attempt: int) -> tuple[bytes, str]:
        """The packet of an attempt as written, and where it is."""
        where = _packet_input(task_id, attempt)
        source = self.store.document_location(where)
        raw = self.store.read_document(where)
        if raw is None:
            raise FileNotFoundError(2, "No such file or directory", source)
        return raw, source

    def packet_location(self, task_id: str, attempt: int) -> str:
        """Where the packet of an attempt is: a path, or a name in the database."""
        return self.store.document_location(_packet_input(task_id, attempt))

    def packet_path(self, task_id: str, attempt: int) -> Path:
        return self.directory / "packets" / f"{task_id}.{attempt}.json"

    def _packet(
        self, state: LedgerState, row: TaskRow, context: Sequence[ContextItem]
    ) -> AssignmentPacket:
        from ..formats.board_rules import untrusted_secret

        info = self.info
        packet = AssignmentPacket(
            run_id=info.run_id,
            global_objective=info.objective,
            task=row.task,
            active_locks=[
                ActiveLock(task_id=t, resource=r, active=True) for t, r in state.active_locks()
            ],
            context_package=[
                *(ContextItem(kind=_kind("constraint"), value=c) for c in info.constraints),
                *context,
            ],
        )
        found = untrusted_secret(packet)
        if found is not None:  # as `orchestrate check packet` refuses it
            raise BoardError(
                f"the packet of task {row.task_id}: {found[1]}; it was not written",
                code=ErrorCode.UNTRUSTED_CONTEXT_BLOCK.value,
                task_id=row.task_id,
            )
        return packet

    # -- the subagent's side -------------------------------------------------------------

    def heartbeat(self, task_id: str, *, attempt: int | None = None) -> str:
        """Record that the subagent of ``task_id`` is alive; returns the time written."""
        row = self.state().row(task_id)
        if row.status is not TaskStatus.IN_PROGRESS:
            raise BoardError(
                f"task {task_id} is {row.status.value}, not in_progress: no heartbeat is "
                "expected (was it timed out and reassigned?)",
                code=ErrorCode.INVALID_TRANSITION.value,
                task_id=task_id,
            )
        if attempt is not None and attempt != row.attempts:
            raise BoardError(
                f"task {task_id} is at attempt {row.attempts}; a heartbeat for attempt "
                f"{attempt} comes from a subagent that was replaced: stop working",
                code=ErrorCode.CONCURRENCY_CONFLICT.value,
                task_id=task_id,
            )
        now = self.now()
        self.store.write_heartbeat(HeartbeatInput(task_id=task_id, at=now))
        return now

    def last_heartbeat(self, row: TaskRow) -> str | None:
        """The later of the task's last heartbeat and the start of its current attempt."""
        beat = self.store.read_heartbeat(row.task_id) or ""
        try:
            parse_time(beat)
        except (ValueError, ContractError):
            beat = ""  # a heartbeat that cannot be read is no heartbeat
        candidates = [t for t in (beat, row.updated_at) if t]
        return max(candidates, key=parse_time) if candidates else None

    def append_worklog(self, entry: WorklogEntry) -> WorklogEntry:
        """Append one entry to its task's worklog, any process at once. Secrets in
        ``decision``/``result`` (untrusted) refuse it; elsewhere they are redacted."""
        from ..formats.board_rules import untrusted_secret
        from ..formats.secrets import redact

        if entry.run_id.lower() != self.run_id.lower():
            raise BoardError(
                f"worklog entry for run {entry.run_id}; this board is run {self.run_id}",
                code=ErrorCode.SCHEMA_INVALID.value,
                task_id=entry.task_id,
            )
        row = self.state().row(entry.task_id)
        found = untrusted_secret(entry)
        if found is not None:  # as `orchestrate check worklog` refuses it
            raise BoardError(
                f"the worklog entry's {found[1]}; it was not written: append it again once "
                "scrubbed",
                code=ErrorCode.UNTRUSTED_CONTEXT_BLOCK.value,
                task_id=entry.task_id,
            )
        clean = attrs.evolve(
            entry,
            actor=redact(entry.actor),
            action=redact(entry.action),
            files_touched=[redact(f) for f in entry.files_touched],
            next_step=redact(entry.next_step),
            evidence=None if entry.evidence is None else redact(entry.evidence),
        )
        self.store.append_worklog(WorklogInput(path=self.worklog_name(row.task), line=_line(clean)))
        return clean

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

    def worklog_path(self, task: Task) -> Path:
        path = self.directory / self.worklog_name(task)
        beneath.make_directories(path.parent)
        return path

    def worklog(self, task_id: str) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = self.store.read_worklog(
            self.worklog_name(self.state().row(task_id).task)
        )
        return records

    # -- results -------------------------------------------------------------------------

    def submit(
        self, task_id: str, raw: bytes, *, attempt: int | None = None, pins: Pins | None = None
    ) -> Judgement:
        """Judge a subagent's answer for the current attempt of ``task_id`` and record the
        outcome: done on PASS, blocked with the first blocking code otherwise.

        The judging happens under the board's lock, so no other writer (the watchdog)
        can settle the attempt between the verdict and the delta that records it.
        """
        with self.ledger.locked() as state:
            row = state.row(task_id)
            attempt = attempt or row.attempts
            if row.status is not TaskStatus.IN_PROGRESS or row.attempts != attempt:
                settled = self._settled(row, attempt, state)
                if settled is not None:
                    return settled  # this very result was judged already (a step run again)
                raise BoardError(
                    f"task {task_id} is {row.status.value} at attempt {row.attempts}: a result "
                    f"for attempt {attempt} is not expected (only a task in progress takes "
                    "results)",
                    code=ErrorCode.INVALID_TRANSITION.value,
                    task_id=task_id,
                )
            judgement, delta = self._judge(row, attempt, raw, pins)
            applied = self.ledger.append([delta], at=self.now())
        if delta.status is TaskStatus.BLOCKED:
            self._final_worklog(delta, row.task, next_step=_next_step(delta), fresh=bool(applied))
        return judgement

    def _judge(
        self, row: TaskRow, attempt: int, raw: bytes, pins: Pins | None
    ) -> tuple[Judgement, LedgerDelta]:
        """Keep the result, judge it, keep the verdict; the delta that records it."""
        task_id = row.task_id
        result = BoardDocumentInput(kind="results", task_id=task_id, attempt=attempt, data=raw)
        self.store.write_document(result)
        now = self.now()
        judgement = evaluate(
            raw,
            task=row.task,
            run_id=self.run_id,
            source=self.store.document_location(result),
            submitted_at=now,
            evaluated_at=now,
            result_link=f"results/{task_id}.{attempt}.json",
            pins=pins,
            workspace=self.workspace,
        )
        verdict = BoardDocumentInput(
            kind="verdicts", task_id=task_id, attempt=attempt, data=_dump(judgement.verdict)
        )
        self.store.write_document(verdict)
        link = f"verdicts/{task_id}.{attempt}.json"
        if judgement.problem is not None:
            message = _short(judgement.problem.message)
            return judgement, self._blocked(row, attempt, judgement.problem.code, message)
        return judgement, LedgerDelta(
            task_id=task_id,
            status=TaskStatus.DONE,
            owner=row.owner,
            reason=f"verdict PASS ({link})",
            delta_id=f"{task_id}/{attempt}/done",
            x_base_version=row.version,
            x_verdict=link,
        )

    def _settled(self, row: TaskRow, attempt: int, state: LedgerState) -> Judgement | None:
        """The judgement recorded for ``attempt`` of ``row``'s task, if it was judged; a
        PASS that lost the race to another settlement (the watchdog) is reported failed."""
        from ..formats.board import FailCode, VerdictOutcome
        from ..formats.board_rules import parse_verdict
        from ..formats.strict_json import loads_strict
        from .gateway import Problem

        task_id = row.task_id
        done = state.index.get(f"{task_id}/{attempt}/done") is not None
        blocked_id = f"{task_id}/{attempt}/blocked"
        where = BoardDocumentInput(kind="verdicts", task_id=task_id, attempt=attempt)
        if not (done or state.index.get(blocked_id) is not None):
            return None
        raw = self.store.read_document(where)
        if raw is None:
            return None
        source = self.store.document_location(where)
        verdict = parse_verdict(loads_strict(raw, source=source), source=source)
        problem = None
        if not done:
            if verdict.verdict is VerdictOutcome.FAIL and verdict.x_code:
                code, fail_code = ErrorCode(verdict.x_code), FailCode(verdict.reason_code)
                message = "; ".join(verdict.messages)
            else:
                ended = row.code if row.delta_id == blocked_id and row.code else None
                code = ended or ErrorCode.TASK_TIMEOUT
                fail_code, message = (
                    FailCode.TIMEOUT_EXCEEDED,
                    (
                        f"the attempt was settled as blocked ({code.value}) before this result "
                        "was recorded"
                    ),
                )
            problem = Problem(code, fail_code, message)
        return Judgement(verdict=verdict, problem=problem, document=None, changed=[])

    def fail_attempt(
        self,
        task_id: str,
        attempt: int,
        *,
        code: ErrorCode,
        reason: str,
        timed_out: bool = False,
    ) -> LedgerDelta | None:
        """The attempt ended without a result (timeout, crash of the subagent): blocked,
        its locks released by the same delta. Repeating it changes nothing; an attempt
        settled otherwise meanwhile (its result judged, the watchdog) is left as it is."""
        with self.ledger.locked() as state:
            row = state.row(task_id)
            if row.status is not TaskStatus.IN_PROGRESS or row.attempts != attempt:
                return None  # already settled (by the watchdog, or before a crash)
            delta = self._blocked(row, attempt, code, reason, timed_out=timed_out)
            applied = self.ledger.append([delta], at=self.now())
        self._final_worklog(delta, row.task, next_step=_next_step(delta), fresh=bool(applied))
        return applied[0] if applied else None

    def _blocked(
        self, row: TaskRow, attempt: int, code: ErrorCode, reason: str, *, timed_out: bool = False
    ) -> LedgerDelta:
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

    # -- the watchdog --------------------------------------------------------------------

    def watchdog(
        self, *, now: datetime | None = None, spare: Iterable[str] = ()
    ) -> list[LedgerDelta]:
        """Block every task in progress whose last heartbeat is older than its
        ``timeout_seconds`` (TASK_TIMEOUT; the same delta releases its locks). Tasks in
        ``spare`` (their answer is in, waiting to be judged) are left alone."""
        moment = now or self.clock.now()
        if moment.tzinfo is None:
            raise ValueError("the watchdog's time must carry a timezone (UTC)")
        spared = set(spare)
        timed_out = []
        for row in list(self.state().rows.values()):
            if row.status is not TaskStatus.IN_PROGRESS or row.task_id in spared:
                continue
            last = self.last_heartbeat(row)
            if last is None:
                continue
            if moment - parse_time(last) <= timedelta(seconds=row.task.timeout_seconds):
                continue
            delta = self.fail_attempt(
                row.task_id,
                row.attempts,
                code=ErrorCode.TASK_TIMEOUT,
                reason=f"no heartbeat since {last} (timeout {row.task.timeout_seconds} s); "
                "locks released",
                timed_out=True,
            )
            if delta is not None:
                timed_out.append(delta)
        return timed_out

    # -- rescheduling ---------------------------------------------------------------------

    def requeue_or_fail(self, *, max_attempts: int, retry_after_ms: int = 0) -> list[LedgerDelta]:
        """Blocked tasks back to todo while attempts remain, else failed; tasks that can
        never start (a dependency failed or was canceled) canceled."""
        changed = []
        for row in list(self.state().rows.values()):
            if row.status is not TaskStatus.BLOCKED:
                continue
            if row.attempts < max_attempts:
                delta = LedgerDelta(
                    task_id=row.task_id,
                    status=TaskStatus.TODO,
                    owner="",
                    reason=f"requeued after {row.code.value if row.code else 'a block'} "
                    f"(attempt {row.attempts} of {max_attempts})",
                    delta_id=f"{row.task_id}/v{row.version}/requeue",
                    x_base_version=row.version,
                    retry_after_ms=retry_after_ms,
                )
            else:
                delta = LedgerDelta(
                    task_id=row.task_id,
                    status=TaskStatus.FAILED,
                    owner=row.owner,
                    reason=f"gave up after {plural(row.attempts, 'attempt')}; last: {row.reason}",
                    delta_id=f"{row.task_id}/{row.attempts}/failed",
                    x_base_version=row.version,
                    x_code=row.code,
                )
            applied = self._append_once(delta, row.task, next_step=_next_step(delta))
            if applied is not None:
                changed.append(applied)
        changed += self._cancel_unreachable()
        # A failure or cancel appended just before a crash may lack its worklog entry.
        self.settle_worklogs(
            row.task_id
            for row in self.state().rows.values()
            if row.status in (TaskStatus.FAILED, TaskStatus.CANCELED)
        )
        return changed

    def _cancel_unreachable(self) -> list[LedgerDelta]:
        changed: list[LedgerDelta] = []
        while True:
            state = self.state()
            doomed = [
                (row, dep)
                for row in state.rows.values()
                if row.status in (TaskStatus.TODO, TaskStatus.BLOCKED)
                for dep in row.task.dependencies
                if state.rows[dep].status in (TaskStatus.FAILED, TaskStatus.CANCELED)
            ]
            if not doomed:
                return changed
            row, dep = doomed[0]
            delta = LedgerDelta(
                task_id=row.task_id,
                status=TaskStatus.CANCELED,
                owner=row.owner,
                reason=f"dependency {dep} is {state.rows[dep].status.value}: it can never start",
                delta_id=f"{row.task_id}/canceled",
                x_base_version=row.version,
                x_code=ErrorCode.DEPENDENCY_NOT_MET,
            )
            applied = self._append_once(delta, row.task, next_step=_next_step(delta))
            if applied is not None:
                changed.append(applied)

    def _append_once(self, delta: LedgerDelta, task: Task, *, next_step: str) -> LedgerDelta | None:
        """Append ``delta``; for a block or failure also the worklog's final entry, once."""
        with self.ledger.locked():
            applied = self.ledger.append([delta], at=self.now())
        if delta.status in (TaskStatus.BLOCKED, TaskStatus.FAILED, TaskStatus.CANCELED):
            self._final_worklog(delta, task, next_step=next_step, fresh=bool(applied))
        return applied[0] if applied else None

    def _final_worklog(
        self, delta: LedgerDelta, task: Task, *, next_step: str, fresh: bool = True
    ) -> None:
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
            WorklogInput(path=path, line=_json_line(data), delta_id=delta.delta_id)
        )

    def settle_worklogs(self, task_ids: Iterable[str] | None = None) -> None:
        """Give every blocked, failed or canceled task (of ``task_ids``, default all) the
        final worklog entry of the delta that put it there, if a crash between that
        delta and its entry left it out."""
        state = self.state()
        wanted = state.rows.keys() if task_ids is None else task_ids
        for task_id in wanted:
            row = state.rows[task_id]
            if row.status not in (TaskStatus.BLOCKED, TaskStatus.FAILED, TaskStatus.CANCELED):
                continue
            delta = LedgerDelta(
                task_id=task_id,
                status=row.status,
                owner=row.owner,
                reason=row.reason,
                delta_id=row.delta_id,
                x_code=row.code,
            )
            self._final_worklog(delta, row.task, next_step=_next_step(delta), fresh=False)

    def sweep(self) -> None:
        """Remove temporary files that writers killed mid-write left in the board."""
        self.store.sweep()

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
        state = self.state()
        info = self.info
        rows = sorted(state.rows.values(), key=_created)
        bundle = HandoffBundle(
            run_id=info.run_id,
            objective=info.objective,
            constraints=list(info.constraints),
            ledger=[
                HandoffRow(
                    task_id=row.task_id,
                    title=row.task.title,
                    status=row.status,
                    owner=row.owner,
                    lock_scope=list(row.task.lock_scope),
                    timeout_seconds=row.task.timeout_seconds,
                    heartbeat_interval_seconds=row.task.heartbeat_interval_seconds,
                    priority=row.task.priority,
                    last_heartbeat_at=self.last_heartbeat(row)
                    if row.status is TaskStatus.IN_PROGRESS
                    else row.last_heartbeat_at,
                    x_task=row.task,
                )
                for row in rows
            ],
            active_locks=self.lock_table(),
            dependencies=[
                HandoffDependency(task_id=row.task_id, depends_on=list(row.task.dependencies))
                for row in rows
                if row.task.dependencies
            ],
            open_blockers=[
                Blocker(
                    task_id=row.task_id,
                    code=row.code or ErrorCode.NON_COMPLIANT,
                    reason=row.reason,
                )
                for row in rows
                if row.status is TaskStatus.BLOCKED
                or (row.status is TaskStatus.FAILED and row.code is not None)
            ],
            acceptance_targets=[
                AcceptanceTarget(
                    task_id=row.task_id, acceptance_criteria=list(row.task.acceptance_criteria)
                )
                for row in rows
            ],
        )
        return cap_handoff(bundle)


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
    depends = {d.task_id: list(d.depends_on) for d in bundle.dependencies}
    criteria = {t.task_id: list(t.acceptance_criteria) for t in bundle.acceptance_targets}
    tasks = [
        row.x_task
        or Task(
            task_id=row.task_id,
            title=row.title,
            type=_task_type("parallelizable"),
            dependencies=depends.get(row.task_id, []),
            lock_scope=list(row.lock_scope),
            forbidden_scope=[],
            acceptance_criteria=criteria.get(row.task_id) or [f"{row.title}: done"],
            worklog_path=f"worklogs/{row.task_id}.jsonl",
            timeout_seconds=row.timeout_seconds,
            heartbeat_interval_seconds=row.heartbeat_interval_seconds,
            priority=row.priority,
        )
        for row in bundle.ledger
    ]
    for task in tasks:
        from ..formats.board_rules import validate_task

        validate_task(task, source=f"handoff ledger {task.task_id}")
    board.create_tasks(tasks, owner="handoff")
    by_id = {row.task_id: row for row in bundle.ledger}
    for task in topological_order(tasks):
        _bring_to(board, task.task_id, by_id[task.task_id].status, bundle.run_id)
    return board


def _bring_to(board: Board, task_id: str, status: TaskStatus, run_id: str) -> None:
    """Replay ``task_id`` (just created, todo) to ``status`` through legal transitions."""
    note = f"adopted from the handoff of run {run_id}"
    current = board.state().row(task_id).status
    target = TaskStatus.BLOCKED if status is TaskStatus.IN_PROGRESS else status
    if current is target or status is TaskStatus.TODO:
        return  # there already (adopting again after a crash)
    if status is TaskStatus.DONE:
        if current is not TaskStatus.IN_PROGRESS:
            board.assign([task_id], owner="handoff")
        with board.ledger.locked() as state:
            row = state.row(task_id)
            board.ledger.append(
                [
                    LedgerDelta(
                        task_id=task_id,
                        status=TaskStatus.DONE,
                        owner=row.owner,
                        reason=note,
                        delta_id=f"{task_id}/handoff/done",
                        x_base_version=row.version,
                        x_verdict=f"handoff:{run_id}",
                    )
                ],
                at=board.now(),
            )
        return
    board.set_status(task_id, target, reason=note, delta_id=f"{task_id}/handoff/{target.value}")


def _task_type(name: str) -> Any:
    from ..formats.board import TaskType

    return TaskType(name)


def cap_handoff(bundle: HandoffBundle, limit: int = HANDOFF_MAX_BYTES) -> HandoffBundle:
    """Keep the bundle under ``limit`` bytes by leaving out the oldest finished tasks
    (their rows, targets and dependency lists), with a constraint saying how many. Open
    work, and every finished task open work depends on, always stays."""
    if len(_dump(bundle)) <= limit:
        return bundle
    depends = {d.task_id: d.depends_on for d in bundle.dependencies}
    keep = {row.task_id for row in bundle.ledger if row.status not in TERMINAL}
    pending = list(keep)
    while pending:  # what open tasks wait for, transitively
        for dependency in depends.get(pending.pop(), []):
            if dependency not in keep:
                keep.add(dependency)
                pending.append(dependency)
    droppable = [row.task_id for row in bundle.ledger if row.task_id not in keep]

    def without(dropped: set[str]) -> HandoffBundle:
        note = (
            f"{len(dropped)} finished tasks are left out of this bundle (size cap); "
            "the board's ledger.ndjson has them"
        )
        return attrs.evolve(
            bundle,
            ledger=[r for r in bundle.ledger if r.task_id not in dropped],
            dependencies=[d for d in bundle.dependencies if d.task_id not in dropped],
            acceptance_targets=[t for t in bundle.acceptance_targets if t.task_id not in dropped],
            constraints=[*bundle.constraints, note],
        )

    count = 1
    while count < len(droppable) and len(_dump(without(set(droppable[:count])))) > limit:
        count *= 2
    return without(set(droppable[: min(count, len(droppable))]))


def handoff_markdown(bundle: HandoffBundle) -> str:
    """The bundle as a page a fresh model context reads first."""
    lines = [
        f"# Handoff: run {bundle.run_id}",
        "",
        f"Objective: {bundle.objective}",
        "",
    ]
    if bundle.constraints:
        lines += ["## Constraints", "", *(f"- {c}" for c in bundle.constraints), ""]
    lines += [
        "## Tasks",
        "",
        "| task | status | owner | priority | lock scope | title |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in bundle.ledger:
        lines.append(
            f"| {row.task_id} | {row.status.value} | {row.owner or '-'} | {row.priority.value} "
            f"| {', '.join(row.lock_scope)} | {row.title} |"
        )
    lines.append("")
    if bundle.active_locks:
        lines += [
            "## Locks held",
            "",
            *(f"- {lock.resource} ({lock.task_id})" for lock in bundle.active_locks),
            "",
        ]
    if bundle.open_blockers:
        lines += [
            "## Open blockers",
            "",
            *(f"- {b.task_id}: {b.code.value}: {b.reason}" for b in bundle.open_blockers),
            "",
        ]
    if bundle.dependencies:
        lines += [
            "## Dependencies",
            "",
            *(f"- {d.task_id} after {', '.join(d.depends_on)}" for d in bundle.dependencies),
            "",
        ]
    open_tasks = {row.task_id for row in bundle.ledger if row.status not in TERMINAL}
    targets = [t for t in bundle.acceptance_targets if t.task_id in open_tasks]
    if targets:
        lines += ["## Acceptance targets (open tasks)", ""]
        for target in targets:
            lines += [f"- {target.task_id}:", *(f"  - {c}" for c in target.acceptance_criteria)]
        lines.append("")
    return "\n".join(lines)


def topological_order(tasks: Sequence[Task]) -> list[Task]:
    """``tasks`` with every dependency first (ties in the given order); a cycle is refused
    with the tasks that form it."""
    by_id = {}
    for task in tasks:
        if task.task_id in by_id:
            raise BoardError(
                f"task {task.task_id} is listed twice",
                code=ErrorCode.SCHEMA_INVALID.value,
                task_id=task.task_id,
            )
        by_id[task.task_id] = task
    ordered: list[Task] = []
    done: set[str] = set()
    visiting: list[str] = []

    def visit(task: Task) -> None:
        if task.task_id in done:
            return
        if task.task_id in visiting:
            cycle = [*visiting[visiting.index(task.task_id) :], task.task_id]
            raise BoardError(
                f"the dependencies form a cycle: {' -> '.join(cycle)}; a task graph must "
                "be acyclic",
                code=ErrorCode.DEPENDENCY_NOT_MET.value,
                task_id=task.task_id,
                details={"cycle": cycle},
            )
        visiting.append(task.task_id)
        for dependency in task.dependencies:
            if dependency in by_id:
                visit(by_id[dependency])
        visiting.pop()
        done.add(task.task_id)
        ordered.append(task)

    for task in tasks:
        visit(task)
    return ordered


def _created(row: TaskRow) -> int:
    return row.created


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


def _kind(name: str) -> Any:
    from ..formats.board import ContextKind

    return ContextKind(name)


def _next_step(delta: LedgerDelta) -> str:
    if delta.status is TaskStatus.BLOCKED:
        return "the orchestrator requeues the task while attempts remain, else fails it"
    if delta.status is TaskStatus.FAILED:
        return "no more attempts: a person reviews the worklog and the last verdict"
    if delta.status is TaskStatus.CANCELED:
        return "nothing: the task cannot start; fix its dependency and create it again"
    return "none"


def _short(text: str, limit: int = 500) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _packet_input(task_id: str, attempt: int, data: bytes = b"") -> BoardDocumentInput:
    return BoardDocumentInput(kind="packets", task_id=task_id, attempt=attempt, data=data)


def _dump(obj: Any) -> bytes:
    from ..formats.strict_json import dumps_canonical

    return dumps_canonical(unstructure(obj))


def _line(entry: WorklogEntry) -> bytes:
    return _json_line(unstructure(entry))


def _json_line(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, separators=(",", ":")) + "\n").encode()
