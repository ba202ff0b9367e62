"""The workflow engine: run phases, pause for agents, record answers, replay on resume.

The state file is the source of truth. Phases that completed are skipped; the current
phase runs again from its top, and every ``ctx.ask``/``ctx.step`` it already made returns
its recorded result, matched by position and checked against a fingerprint.

Response files are consumed only after what they said is durably in the state, and a
response whose digest is already recorded is recognised as a crash leftover, so no
answer is ever applied twice.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable, Sequence
from datetime import timedelta
from itertools import compress, repeat
from itertools import count as count_from
from pathlib import Path
from typing import Any

import attrs

from .._errors import (
    AgentFailedError,
    AgentInvocationError,
    InstanceExistsError,
    NonDeterminismError,
    OrchestratorError,
    ResponseRejectedError,
    StateDamagedError,
    StorageError,
    UnsafePathError,
    UsageError,
)
from .._ports import (
    AgentAnswer,
    AgentInvoker,
    ArchiveInput,
    BoardStore,
    Bridge,
    Clock,
    ConsumeInput,
    EvidenceInput,
    FinishInput,
    HostRequired,
    PublishInput,
    ReceivedResponse,
    SaveStateInput,
)
from .._text import plural
from ..evidence.documents import (
    EVENT_RUN_FORK,
    EVENT_RUN_MIGRATE,
    EVENT_RUN_RETRY,
    EVENT_RUN_REWIND,
    EVENT_RUN_START,
)
from ..evidence.recorder import PhaseTally, Recorder, describe_duration, seconds_since
from ..formats.answer_schema import answer_schema
from ..formats.bridge import (
    AgentRequest,
    AgentRequestRecord,
    AgentResponse,
    CheckpointState,
    CompletedPhase,
    ErrorType,
    HistoryStatus,
    RecordIndex,
    RequestStatus,
    ResponseMetadata,
    record_edits,
)
from ..formats.bridge_codec import dump_document, error_type_of
from ..formats.convert import unstructure
from ..formats.step_names import (
    EVENT_DECISION,
    EVENT_ERROR,
    STATUS_ABSTAIN,
    STATUS_ERROR,
    STATUS_PASS,
)
from ..formats.strict_json import SettledItems
from ..formats.times import SystemClock, format_time, parse_time
from ..storage.runs import ENGINE_KEY
from .context import PhaseContext, ReplayRows
from .record import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_PAUSED,
    EngineRecord,
    JournalEntry,
    Outcome,
    Pause,
    copy_json,
    load_record,
    to_json_value,
)
from .workflow import Ask, PhaseResult, PhaseSpec, Workflow

RETRYABLE = frozenset({ErrorType.TIMEOUT, ErrorType.INVOCATION_FAILED})


FALLBACK_ERRORS = (
    frozenset({ErrorType.PARSE_ERROR, ErrorType.VALIDATION_ERROR, ErrorType.UNKNOWN}) | RETRYABLE
)


class Engine:
    """Runs one workflow instance against a bridge (state and host mailbox).

    ``invoker`` answers asks in-process; when it is ``None`` or raises
    :class:`HostRequired`, the ask is left to the host and the engine pauses.
    """

    def __init__(
        self,
        workflow_cls: type[Workflow],
        *,
        bridge: Bridge,
        invoker: AgentInvoker | None = None,
        clock: Clock | None = None,
        new_id: Callable[[], str] | None = None,
        archive_after: int | None = None,
    ) -> None:
        self.workflow_cls = workflow_cls
        self.archive_after = archive_after or workflow_cls.archive_after
        self.bridge = bridge
        self.invoker = invoker
        self.clock = clock or SystemClock()
        self.new_id = new_id or _random_uuid
        self._state: CheckpointState | None = None
        self._record: EngineRecord | None = None
        self._consumed: list[ReceivedResponse] = []
        self._fatal: OrchestratorError | None = None
        self._record_index = RecordIndex()
        #: The current phase's asks answered before, as a replay reads them.
        self.replay_rows = ReplayRows()
        # _pending's last answer: (requests, their count, edit log, its length, pending)
        self._pending_kept: tuple[Any, int, list[Any], int, list[AgentRequestRecord]] | None = None
        # (requests, how many of the first are settled): see _pending
        self._settled: tuple[Any, int] = (None, 0)
        # The engine tells what happens; the recorder writes the run's evidence.
        self.recorder = Recorder(bridge=bridge, clock=self.clock, record_index=self._record_index)
        # A replay (``engine.replay``): every call must be in the journal; none is made.
        self.replay_only = False
        #: Asked after every checkpoint of a run that goes on: when it answers True, the
        #: engine stops there, the run left ``running`` for the next resume (a worker
        #: told to stop finishes the step it is in, not the whole run).
        self.stop_requested: Callable[[], bool] | None = None
        #: Where ``ctx.dispatch`` keeps its task board: called with the run's id, it
        #: returns the board's store (closed when the dispatch returns or pauses), e.g.
        #: ``lambda run_id: orchestrator.adapters.postgres.board_store(dsn, run_id)``.
        #: ``None``: the board is a directory, ``.board`` in the run's work directory.
        self.board_store: Callable[[str], BoardStore] | None = None
        # The journal's entries and their JSON forms at the last save or load: see
        # _journal_data
        self._journal_kept: _JournalKept | None = None

    # -- entry points -------------------------------------------------------------------

    def start(
        self,
        *,
        workflow_ref: str,
        workdir: Path,
        inputs: dict[str, Any] | None = None,
        output_path: str | None = None,
        run_id: str | None = None,
    ) -> Outcome:
        """Create the instance and run until it pauses, fails or completes; ``run_id``:
        the new run's id, when the store has chosen it (default: a new one)."""
        with self.bridge.lock():
            if self.bridge.exists():
                raise InstanceExistsError(
                    f"{workdir}: a {self.workflow_cls.name} instance already lives here; "
                    "'orchestrate resume' continues it, 'orchestrate cancel' removes it"
                )
            self._clear_leftovers()
            inputs = dict(inputs or {})
            first = self.workflow_cls.phases[0]
            now = format_time(self.clock.now())
            record = EngineRecord(
                run_id=run_id or self.new_id(),
                workflow=workflow_ref,
                workflow_name=self.workflow_cls.name,
                workflow_version=self.workflow_cls.version,
                workdir=str(workdir),
                started_at=now,
                inputs=inputs,
                evidence=True,
            )
            state = CheckpointState(
                phase=first.number,
                phase_name=first.name,
                checkpoint_name="started",
                created_at=now,
                output_path=str(output_path or workdir),
                project_path=_optional_str(inputs.get("project_path")),
                template_name=_optional_str(inputs.get("template_name")),
            )
            self._attach(state, record)
            self._tell_start()
            self._save("started")
            return self._advance()

    def _tell_start(self) -> None:
        record = self._require_record()
        self.recorder.emit(
            EVENT_RUN_START,
            {
                "workflow": self.workflow_cls.name,
                "ref": record.workflow,
                "run_id": record.run_id,
                "phases": [p.name for p in self.workflow_cls.phases],
                "inputs": sorted(record.inputs),
            },
        )

    def _clear_leftovers(self) -> None:
        """Before a new run: requests and answers a crash left from an earlier one."""
        try:
            stale = self.bridge.read_responses()
        except ResponseRejectedError:
            stale = []  # not ours to judge; the first resume will name it
        self.bridge.consume(ConsumeInput(consumed=stale))
        self.bridge.publish(PublishInput(pending=()))

    def resume(self) -> Outcome:
        """Record the host's answers, then continue; with nothing answered, pause again."""
        with self.bridge.lock():
            if not self._take_paused():
                state = self.bridge.load_state()
                self._attach_current(state)
                self.recorder.publish()  # a crash may have cut the last publication
            record = self._require_record()
            if record.status == "cancelled":  # a crash cut the cancel short: finish it
                return self._finish_cancel()
            if record.status == "failed":
                return Outcome(
                    status="failed",
                    exit_code=EXIT_ERROR,
                    message=f"the run already failed: {record.failure}; the state is kept: "
                    "fix the cause, then 'orchestrate retry' goes on from the failed phase "
                    "('orchestrate cancel' removes it)",
                )
            received = self.bridge.read_responses()
            changed = self._accept_responses(received)
            if record.status == "completed":  # every phase ran; a crash cut the cleanup
                return self._finish()
            changed |= self._expire_overdue()
            if not changed and not self._pending() and self._sleeping():
                return self._pause_now()  # a timer not yet due: nothing to write
            if self._pending():
                if changed:
                    self._tell_pause()
                    self._save("before_agent_invocation")
                return self._pause_now()
            return self._advance()

    def retry(self, *, run_id: str | None = None) -> Outcome:
        """Re-open a failed run at its failed phase with the current code, and go on.

        The phase is replayed: each recorded ask and step that still matches at its
        position returns what it recorded (a paid answer is not paid for again). The first
        call that no longer matches, or whose record is a failure (an error answer, a
        refused answer, a step that raised), drops the journal from there, and the phase
        runs on anew. Requests left unanswered when the run failed are withdrawn.
        """
        with self.bridge.lock():
            self._attach_current(self.bridge.load_state())
            record = self._require_record()
            if run_id is not None and run_id != record.run_id:
                raise UsageError(
                    f"{self.bridge.location}: the instance here is run {record.run_id}, not "
                    f"{run_id}; a run that ended is history and cannot be retried"
                )
            # A state left "running" (or re-opened) is a retry a crash cut short.
            cut_short = record.status == "running" or (
                record.status != "failed" and record.reopened
            )
            if record.status != "failed" and not cut_short:
                raise UsageError(
                    f"{self.bridge.location}: run {record.run_id} is {record.status}, not "
                    "failed: there is nothing to retry ('orchestrate resume' goes on)"
                )
            if not cut_short:
                return self._reopen()
        # Re-opened already, by a retry that a crash cut short: go on as resume does.
        return self.resume()

    def _reopen(self) -> Outcome:
        state, record = self._require_state(), self._require_record()
        self.recorder.publish()  # a crash may have cut the failure's publication
        for pending in self._pending():
            pending.status = HistoryStatus.WITHDRAWN
            pending.x_note = "withdrawn: the run failed, then was retried"
        failure = record.failure
        record.tries.append(
            {
                "at": format_time(self.clock.now()),
                "phase": state.phase_name,
                "failure": failure,
                "dropped": [],
            }
        )
        record.status, record.failure, record.reopened = "running", None, True
        self.recorder.emit(
            EVENT_RUN_RETRY,
            {
                "phase": state.phase,
                "skill": state.phase_name,
                "failure": failure,
                "try": len(record.tries) + 1,
            },
        )
        self._save("retried")
        return self._advance()

    def rewind(self, to_phase: str, *, ended: CheckpointState | None = None) -> str:
        """Take a paused, failed or completed run back to ``to_phase``: that phase and
        every later one run again (their earlier outputs move to the record's history).

        A run that has ended has no state here any more: ``ended`` is its last state (its
        history), and the rewind makes it live again. Nothing runs now; ``resume`` (or
        ``drive``) runs the phase.
        """
        with self.bridge.lock():
            if self.bridge.exists():
                state = self.bridge.load_state()
            elif ended is not None:
                state = ended
            else:
                self.bridge.load_state()  # says there is no instance here
                raise AssertionError("unreachable")
            self._attach_current(state)
            record = self._require_record()
            target = self._phase_for(to_phase, "rewind to")
            ended_before = record.status in ("failed", "completed", "cancelled")
            if record.status == "cancelled":
                raise UsageError(f"run {record.run_id} was cancelled; it cannot be rewound")
            if target.number > state.phase and record.status != "completed":
                raise UsageError(
                    f"phase {target.name} comes after the run's current phase "
                    f"{state.phase_name}: a rewind goes back ('orchestrate resume' goes on)"
                )
            self.recorder.publish()
            if not ended_before:
                self.recorder.withdraw(self._pending(), f"the run was rewound to {target.name}")
                if record.phase_started_at is not None:  # the current phase stops here
                    self._close_phase(
                        self.workflow_cls.phase_named(state.phase_name),
                        status=STATUS_ABSTAIN,
                        summary=f"rewound to phase {target.number} ({target.name})",
                    )
            for pending in self._pending():
                pending.status = HistoryStatus.WITHDRAWN
            later = {p.name for p in self.workflow_cls.phases if p.number >= target.number}
            moved = {name: state.phase_data.pop(name) for name in later if name in state.phase_data}
            record.rewinds.append(
                {
                    "at": format_time(self.clock.now()),
                    "from_phase": state.phase_name,
                    "from_status": record.status,
                    "to_phase": target.name,
                    "outputs": moved,
                }
            )
            state.completed_phases = [p for p in state.completed_phases if p.phase < target.number]
            state.phase, state.phase_name = target.number, target.name
            record.status, record.failure = "paused", None
            record.journal, record.marks = [], []
            record.reopened, record.waiting_until, record.phase_started_at = False, None, None
            self.recorder.emit(
                EVENT_RUN_REWIND,
                {
                    "phase": target.number,
                    "skill": target.name,
                    "from": record.rewinds[-1]["from_phase"],
                    "outputs_moved": sorted(moved),
                },
            )
            self._save("rewound")
            self.bridge.publish(PublishInput(pending=()))
            return (
                f"{self.workflow_cls.name}: run {record.run_id} rewound to phase "
                f"{target.number} ({target.name}); 'orchestrate resume' (or drive) runs it "
                "and every phase after it again"
            )

    def fork(
        self, source: CheckpointState, *, from_phase: str, workdir: Path, output_path: str
    ) -> str:
        """Start a new run here (a new run id) at ``from_phase`` of the run whose state is
        ``source``: the same inputs, and the outputs of the phases before it. The source
        run is only read."""
        with self.bridge.lock():
            if self.bridge.exists():
                raise InstanceExistsError(
                    f"{self.bridge.location}: an instance already lives here; fork into an "
                    "empty work directory"
                )
            origin = load_record(source, source="the run to fork")
            target = self._phase_for(from_phase, "fork from")
            now = format_time(self.clock.now())
            earlier = {p.name for p in self.workflow_cls.phases if p.number < target.number}
            record = EngineRecord(
                run_id=self.new_id(),
                workflow=origin.workflow,
                workflow_name=self.workflow_cls.name,
                workflow_version=self.workflow_cls.version,
                workdir=str(workdir),
                started_at=now,
                inputs=copy_json(origin.inputs),
                status="paused",
                evidence=True,
                forked_from={
                    "run_id": origin.run_id,
                    "workdir": origin.workdir,
                    "phase": target.name,
                },
            )
            state = CheckpointState(
                phase=target.number,
                phase_name=target.name,
                checkpoint_name="forked",
                created_at=now,
                output_path=output_path,
                project_path=source.project_path,
                template_name=source.template_name,
                completed_phases=[p for p in source.completed_phases if p.phase < target.number],
                phase_data={
                    name: copy_json(value)
                    for name, value in source.phase_data.items()
                    if name in earlier
                },
            )
            self._clear_leftovers()
            self._attach(state, record)
            self._tell_start()
            self.recorder.emit(
                EVENT_RUN_FORK,
                {
                    "phase": target.number,
                    "skill": target.name,
                    "from_run": origin.run_id,
                    "outputs": sorted(state.phase_data),
                },
            )
            self._save("forked")
            return (
                f"{self.workflow_cls.name}: run {record.run_id} forked from run "
                f"{origin.run_id} at phase {target.number} ({target.name}); 'orchestrate "
                "resume' (or drive) runs it"
            )

    def _attach_current(self, state: CheckpointState) -> None:
        """Attach a loaded state, migrated first when an older version of the workflow
        wrote it (see :class:`Workflow`); a state of a newer version, or one that a hook
        is missing for, is refused with nothing changed."""
        record = load_record(state, source=self.bridge.location)
        self._keep_journal_json(state, record)
        have, want = record.workflow_version, self.workflow_cls.version
        name = f"{self.bridge.location}: run {record.run_id}"
        if have > want:
            raise UsageError(
                f"{name} was written by version {have} of {self.workflow_cls.name}, and this "
                f"code is version {want}: resume it with the newer code"
            )
        check_phases(state, self.workflow_cls, source=self.bridge.location)
        self._attach(state, record)
        if have == want:
            return
        hooks = [f"migrate_v{v}_to_v{v + 1}" for v in range(have, want)]
        missing = [hook for hook in hooks if not callable(getattr(self.workflow_cls, hook, None))]
        if missing:
            raise UsageError(
                f"{name} was written by version {have} of {self.workflow_cls.name}, and this "
                f"code (version {want}) has no {missing[0]}: add it, or resume with the code "
                f"of version {have}"
            )
        before = dump_document(state)
        outputs = {k: copy_json(v) for k, v in state.phase_data.items() if k != ENGINE_KEY}
        workflow = self.workflow_cls(copy_json(record.inputs))
        for hook in hooks:
            try:
                outputs = getattr(workflow, hook)(outputs)
            except Exception as exc:
                raise UsageError(
                    f"{name}: {hook} raised {type(exc).__name__}: {exc}; nothing was changed"
                ) from None
            if not isinstance(outputs, dict) or ENGINE_KEY in outputs:
                raise UsageError(
                    f"{name}: {hook} must return the outputs as a dict by phase name; "
                    "nothing was changed"
                )
            outputs = to_json_value(outputs, where=f"what {hook} returned")
        kept = f"state.v{have}.json"  # the state as it was, in the run's history
        self.bridge.write_evidence(EvidenceInput(run_id=record.run_id, files=[(kept, before)]))
        state.phase_data = {**outputs, ENGINE_KEY: state.phase_data[ENGINE_KEY]}
        record.workflow_version = want
        record.migrations.append(
            {"at": format_time(self.clock.now()), "from": have, "to": want, "kept": kept}
        )
        self.recorder.emit(EVENT_RUN_MIGRATE, {"from": have, "to": want, "kept": kept})
        self._save("migrated")

    def _phase_for(self, name: str, what: str) -> PhaseSpec:
        try:
            return self.workflow_cls.phase_named(name)
        except KeyError:
            names = ", ".join(p.name for p in self.workflow_cls.phases)
            raise UsageError(f"{what} {name!r}: the workflow has no such phase ({names})") from None

    def cancel(self) -> str:
        """End the instance on purpose: keep its history, remove state and request files."""
        with self.bridge.lock():
            state = self.bridge.load_state()
            record = load_record(state, source=self.bridge.location)
            check_phases(state, self.workflow_cls, source=self.bridge.location)
            self._attach(state, record)
            if record.status not in ("failed", "completed", "cancelled"):
                self.recorder.withdraw(self._pending(), "the run was cancelled")
                self.recorder.run_end("cancelled")
            record.status = "cancelled"
            # Saved before the end, so that a crash in between finishes the cancel on the
            # next resume or cancel, never runs the workflow on.
            self._save("cancelled", publish=False)
            history = self._finish_cancel().history_path
            assert history is not None
            return history

    def _finish_cancel(self) -> Outcome:
        """The end of a cancel whose state is saved: its evidence, then the cleanup.

        Evidence that cannot be written (a full disk) does not stop a cancel: the
        cancel is how an instance is removed.
        """
        import contextlib

        with contextlib.suppress(OrchestratorError, OSError, ValueError):
            self.recorder.publish()
        record = self._require_record()
        history = self.bridge.finish(
            FinishInput(state=self._require_state(), outcome="cancelled", run_id=record.run_id)
        )
        return Outcome(
            status="failed",
            exit_code=EXIT_ERROR,
            message=f"the run was cancelled (the cancel is now complete); history kept in "
            f"{history}",
            history_path=history,
        )

    # -- recording answers --------------------------------------------------------------

    def _accept_responses(self, received: Sequence[ReceivedResponse]) -> bool:
        """Judge every response before changing anything, then record them all."""
        records = self._records_by_id()
        pending_ids = [r.request_id for r in self._pending()]
        expected = _describe_pending(pending_ids)
        fresh: dict[str, tuple[AgentRequestRecord, ReceivedResponse]] = {}
        late: dict[str, AgentRequestRecord] = {}  # answered request id -> its pending retry
        for item in received:
            record = records.get(item.response.request_id)
            if record is None:
                raise ResponseRejectedError(
                    f"{item.source}: request_id {item.response.request_id} matches no request "
                    f"of this instance ({expected}); the file was left as it is: remove it, or "
                    "correct its request_id, then resume",
                    path=item.source,
                    reason="foreign",
                )
            if record.status is not HistoryStatus.PENDING:
                if record.x_response_sha256 == item.sha256:
                    self._consumed.append(item)  # left behind by a crash after recording
                    continue
                retry = self._pending_retry_of(record, item.response)
                taken = {r.request_id for r in late.values()}
                if retry is not None and retry.request_id not in taken:
                    late[record.request_id] = retry
                    fresh[record.request_id] = (record, item)
                    continue
                raise ResponseRejectedError(
                    f"{item.source}: request {record.request_id} was already answered "
                    f"({record.status.value}); this response is stale ({expected}); the file "
                    "was left as it is: remove it (or answer a pending request), then resume",
                    path=item.source,
                    reason="stale",
                )
            if item.first_pending_only and record.request_id != pending_ids[0]:
                raise ResponseRejectedError(
                    f"{item.source} answers the first pending request, {pending_ids[0]}, but "
                    f"its request_id is {record.request_id}; the file was left as it is and "
                    f"both requests stay pending: write the answer to {record.request_id} in "
                    f"a file of its own ('orchestrate respond --request-id "
                    f"{record.request_id}'), or correct the request_id, then resume",
                    path=item.source,
                    reason="misaddressed",
                )
            earlier = fresh.get(record.request_id)
            if earlier is not None:
                if earlier[1].sha256 == item.sha256:
                    self._consumed.append(item)  # the same answer in both places
                    continue
                raise ResponseRejectedError(
                    f"{item.source} and {earlier[1].source} give two different answers to "
                    f"request {record.request_id}; remove the wrong one, then resume",
                    path=item.source,
                    reason="conflicting",
                )
            fresh[record.request_id] = (record, item)
        # In the order the requests were made, not the order the files were found: the
        # story (and the ids of retries) must not depend on what the host named its files.
        answered = list(fresh.values())
        if len(answered) > 1:
            requests = self._require_state().agent_requests
            order = {r.request_id: index for index, r in enumerate(requests)}
            answered.sort(key=lambda pair: order[pair[0].request_id])
        for record, item in answered:
            retry = late.get(record.request_id)
            if retry is not None:
                self._supersede(retry, answered=record)
            self._apply_response(record, item.response, digest=item.sha256)
            self._consumed.append(item)
        return bool(fresh)

    def _pending_retry_of(
        self, record: AgentRequestRecord, response: AgentResponse
    ) -> AgentRequestRecord | None:
        """The still-pending retry of ``record``, when a successful answer to ``record``
        arrives late (after it timed out and was retried); ``None`` otherwise."""
        if record.status is not HistoryStatus.RETRIED or error_type_of(response) is not None:
            return None
        asked = record.request()
        for candidate in self._pending():
            request = candidate.request()
            if (
                candidate.x_position == record.x_position
                and request.phase == asked.phase
                and request.agent_name == asked.agent_name
                and request.prompt == asked.prompt
            ):
                return candidate
        return None

    def _supersede(self, retry: AgentRequestRecord, *, answered: AgentRequestRecord) -> None:
        """A late answer to ``answered`` makes its pending ``retry`` moot."""
        retry.status = HistoryStatus.SUPERSEDED
        retry.x_note = f"superseded by the late answer to {answered.request_id}"
        answered.x_note = f"answered late; its retry {retry.request_id} was withdrawn"
        self._repoint_journal(retry.request_id, answered.request_id)
        self.recorder.agent_end(retry)

    def _apply_response(
        self, record: AgentRequestRecord, response: AgentResponse, *, digest: str | None
    ) -> AgentRequestRecord | None:
        """Record ``response`` for ``record``; return the retry request if one was made."""
        late = record.status is HistoryStatus.RETRIED  # it ended once already
        record.x_response = response
        record.x_response_sha256 = digest
        record.status = self._settled_status(record, response)
        if late:
            self.recorder.agent_end(record, late=True)
            return None
        if record.status is not HistoryStatus.RETRIED:
            self.recorder.agent_end(record)
            return None
        retry_id = self.new_id()
        record.x_note = f"retried as {retry_id}"
        self.recorder.agent_end(record)  # before the retry's start, as it happened
        return self._retry(record, retry_id)

    def _settled_status(self, record: AgentRequestRecord, response: AgentResponse) -> HistoryStatus:
        error = error_type_of(response)
        if error is None:
            return HistoryStatus.COMPLETED
        if response.status is RequestStatus.CANCELLED:
            return HistoryStatus.CANCELLED
        policy = self.workflow_cls.policy()
        limit = policy.attempts - 1 if record.x_max_retries is None else record.x_max_retries
        if error.value in policy.retry_on and record.request().retry_count < limit:
            return HistoryStatus.RETRIED
        return HistoryStatus.FAILED

    def _retry(self, record: AgentRequestRecord, request_id: str) -> AgentRequestRecord:
        old = record.request()
        request = attrs.evolve(
            old,
            request_id=request_id,
            created_at=format_time(self.clock.now()),
            retry_count=old.retry_count + 1,
        )
        retry = self._new_record(
            request,
            position=record.x_position or 0,
            max_retries=record.x_max_retries,
            answer_within=record.x_answer_within,
        )
        self._repoint_journal(record.request_id, request.request_id)
        return retry

    def _repoint_journal(self, old_id: str, new_id: str) -> None:
        """The journal slot that waited for ``old_id`` now waits for ``new_id`` (a new entry
        in its place)."""
        journal = self._require_record().journal
        for index, entry in enumerate(journal):
            if old_id in entry.request_ids:
                ids = [new_id if rid == old_id else rid for rid in entry.request_ids]
                journal[index] = attrs.evolve(entry, request_ids=ids)

    def _expire_overdue(self) -> bool:
        """A pending request past the ``answer_within`` its ask set counts as a TIMEOUT
        answer. Without one, a request waits for its host as long as it takes."""
        now = self.clock.now()
        expired = False
        for record in self._pending():
            if record.x_answer_within is None:
                continue
            request = record.request()
            waited = timedelta(seconds=record.x_answer_within)
            if now > parse_time(request.created_at) + waited:
                timeout = AgentResponse(
                    request_id=record.request_id,
                    status=RequestStatus.TIMEOUT,
                    created_at=format_time(now),
                    error_type=ErrorType.TIMEOUT,
                    error_message=f"no answer within {describe_duration(waited)} "
                    "(the ask's answer_within)",
                )
                self._apply_response(record, timeout, digest=None)
                expired = True
        return expired

    # -- running phases -----------------------------------------------------------------

    def _advance(self) -> Outcome:
        state = self._require_state()
        workflow = self.workflow_cls(copy_json(self._require_record().inputs))
        while True:
            try:
                spec = self.workflow_cls.phase_named(state.phase_name)
            except KeyError:
                return self._fail_unknown_phase(state.phase_name)
            self.recorder.open_phase(spec.number, spec.name)
            try:
                result = self._run_phase(workflow, spec)
                next_spec = self._complete_phase(spec, result)
            except Pause:
                self._tell_pause()
                self._save(
                    "before_agent_invocation"
                    if self._pending()
                    else "waiting_for_timer"
                    if self._sleeping()
                    else "stopped"
                )
                return self._pause_now()
            except (StorageError, UnsafePathError):
                raise  # the instance's own files, not the phase: nothing to fail the run for
            except OrchestratorError as exc:
                return self._fail(f"phase {spec.number} ({spec.name}): {exc}", spec=spec)
            except Exception as exc:  # the user's phase raised: fail with its words
                return self._fail(
                    f"phase {spec.number} ({spec.name}): {type(exc).__name__}: {exc}", spec=spec
                )
            if next_spec is None:
                return self._finish()
            state.phase, state.phase_name = next_spec.number, next_spec.name
            if self.stop_requested is not None and self.stop_requested():
                self._save("stopped")
                return self._pause_now()

    def _fail_unknown_phase(self, phase_name: str) -> Outcome:
        names = ", ".join(p.name for p in self.workflow_cls.phases)
        error = NonDeterminismError(
            f"the state is in phase {phase_name!r}, which the workflow no longer declares "
            f"(its phases: {names}); restore the phase, or 'orchestrate cancel' and run again",
            phase_name=phase_name,
            position=0,
        )
        return self._fail(str(error))

    def _run_phase(self, workflow: Workflow, spec: PhaseSpec) -> PhaseResult:
        ctx = PhaseContext(self, spec)
        self._fatal = None
        try:
            try:
                value = getattr(workflow, spec.method_name)(ctx)
            except AgentFailedError as exc:
                if (
                    spec.fallback is None
                    or self._fatal is not None
                    or ErrorType(exc.error_type) not in FALLBACK_ERRORS
                ):
                    raise
                if self.recorder.mark(f"fallback {exc.request_id}"):
                    self.recorder.emit(
                        EVENT_DECISION,
                        {
                            "skill": spec.name,
                            "decision": "fallback",
                            "method": spec.fallback,
                            "request_id": exc.request_id,
                            "because": str(exc),
                        },
                    )
                value = getattr(workflow, spec.fallback)(ctx, exc)
        except Pause:
            if self._fatal is not None:  # fail now, not after the host answers the rest
                raise self._fatal from None
            raise
        if self._fatal is not None:
            # AGENT_NOT_FOUND and a cancelled request fail the run even if the phase caught them
            raise self._fatal
        ctx.check_all_replayed()
        if isinstance(value, PhaseResult):
            return value
        return PhaseResult(output=value, summary=f"Completed {spec.name}")

    def _complete_phase(self, spec: PhaseSpec, result: PhaseResult) -> PhaseSpec | None:
        state, record = self._require_state(), self._require_record()
        state.phase_data[spec.name] = to_json_value(
            result.output, where=f"phase {spec.name!r} output"
        )
        summary = result.summary or f"Completed {spec.name}"
        state.completed_phases.append(
            CompletedPhase(
                phase=spec.number,
                phase_name=spec.name,
                completed_at=format_time(self.clock.now()),
                result_summary=summary,
            )
        )
        self._close_phase(spec, status=STATUS_PASS, summary=summary)
        record.journal = []
        record.reopened = False
        return self.workflow_cls.phase_after(spec)

    def _finish(self) -> Outcome:
        state = self._require_state()
        record = self._require_record()
        if record.status != "completed":
            record.status = "completed"
            self.recorder.run_end("completed")
        if self._consumed or self.recorder.unpublished():
            # Answers recorded since the last checkpoint exist only in memory and in their
            # response files, which the end of the run removes, and the last events are
            # published only from a durable state: save first. A crash after this resumes
            # straight into the end (see ``resume``).
            self._save("completed")
        state.checkpoint_name = "completed"
        self._store_record()
        outputs = {k: v for k, v in state.phase_data.items() if k != ENGINE_KEY}
        history = self.bridge.finish(
            FinishInput(state=state, outcome="completed", run_id=record.run_id)
        )
        self._consumed = []
        return Outcome(
            status="completed",
            exit_code=EXIT_OK,
            message=f"{self.workflow_cls.name}: {_all_phases(len(self.workflow_cls.phases))} "
            f"completed; history kept in {history}",
            outputs=outputs,
            history_path=history,
        )

    def _fail(self, failure: str, *, spec: PhaseSpec | None = None) -> Outcome:
        """Record the run as failed, durably, and withdraw its requests."""
        record = self._require_record()
        self.recorder.withdraw(self._pending(), "the run failed")
        self.recorder.emit(
            EVENT_ERROR,
            {"skill": None if spec is None else spec.name, "message": failure, "fatal": True},
        )
        if spec is not None:
            self._close_phase(spec, status=STATUS_ERROR, summary=failure)
        record.status = "failed"
        record.failure = failure
        self.recorder.run_end("failed", failure=failure)
        self._save("run_failed")
        self._flush_consumed()
        self.bridge.publish(PublishInput(pending=()))
        return Outcome(
            status="failed",
            exit_code=EXIT_ERROR,
            message=f"run failed: {record.failure}; the state is kept: fix the cause, then "
            "'orchestrate retry' goes on from this phase",
        )

    def _pause_now(self) -> Outcome:
        pending = tuple(r.request() for r in self._pending())
        record = self._require_record()
        record.status = "paused"
        # Consumed answers go first: a fast host may answer the new request at once.
        self._flush_consumed()
        self.bridge.publish(PublishInput(pending=pending))
        self._leave_paused()
        state = self._require_state()
        where = f"paused in phase {state.phase} ({state.phase_name})"
        if not pending and record.waiting_until is None:
            record.status = "running"  # stopped on request: it goes on at the next resume
            return Outcome(
                status="paused",
                exit_code=EXIT_PAUSED,
                message=f"stopped in phase {state.phase} ({state.phase_name}) at a "
                "checkpoint, as asked; the run goes on from there when next resumed",
            )
        if not pending and record.waiting_until is not None:
            return Outcome(
                status="paused",
                exit_code=EXIT_PAUSED,
                message=f"{where}: sleeping until {record.waiting_until}",
                wake_at=record.waiting_until,
            )
        names = ", ".join(f"{r.agent_name} ({r.request_id})" for r in pending)
        return Outcome(
            status="paused",
            exit_code=EXIT_PAUSED,
            message=f"{where}: waiting for {names}",
            pending=pending,
        )

    def _flush_consumed(self) -> None:
        if self._consumed:
            self.bridge.consume(ConsumeInput(consumed=tuple(self._consumed)))
            self._consumed = []

    # -- state --------------------------------------------------------------------------

    def _leave_paused(self) -> None:
        """Leave the state as this clean pause saved it for the next resume in this
        process, by this engine or by a new one on the same instance (a host that builds
        an engine per resume): while the stored state is still what was saved, that
        resume reads nothing back. Called last before the engine returns: nothing changes
        the state until a resume takes it."""
        token = self.bridge.saved_token()
        if token is None:
            return
        with _paused_lock:
            _paused[self.bridge.location] = _Paused(
                token=token,
                state=self._require_state(),
                record=self._require_record(),
                workflow_cls=self.workflow_cls,
                bridge=self.bridge,
                journal_kept=self._journal_kept,
                published=self.recorder.published,
                record_index=self._record_index,
                replay_rows=self.replay_rows,
                settled=self._settled,
            )
            while len(_paused) > _PAUSED_KEPT:
                del _paused[next(iter(_paused))]

    def _take_paused(self) -> bool:
        """Take the state a clean pause in this process left (see :meth:`_leave_paused`),
        when the stored state is still exactly that one and this engine runs the same
        workflow code. It is taken once: whoever takes it is its only holder."""
        with _paused_lock:
            kept = _paused.pop(self.bridge.location, None)
        if kept is None or kept.workflow_cls is not self.workflow_cls:
            return False
        if self.bridge.state_token() != kept.token:
            return False
        if kept.bridge is not self.bridge and not self.bridge.take_over(kept.bridge):
            return False
        if kept.state is not self._state:
            self._journal_kept, self._record_index = kept.journal_kept, kept.record_index
            self.replay_rows, self._settled = kept.replay_rows, kept.settled
            self._state, self._record = kept.state, kept.record
            self.recorder.attach(
                kept.state, kept.record, published=kept.published, record_index=kept.record_index
            )
        return True

    def _attach(self, state: CheckpointState, record: EngineRecord) -> None:
        self._state, self._record = state, record
        self.recorder.attach(state, record)

    def _require_state(self) -> CheckpointState:
        assert self._state is not None, "engine has no state attached"
        return self._state

    def _require_record(self) -> EngineRecord:
        assert self._record is not None, "engine has no record attached"
        return self._record

    def _store_record(self) -> None:
        record = self._require_record()
        data = unstructure(attrs.evolve(record, journal=[]))
        data["journal"] = SettledItems(self._journal_data(record.journal))
        self._require_state().phase_data[ENGINE_KEY] = data

    def _keep_journal_json(self, state: CheckpointState, record: EngineRecord) -> None:
        """Take each journal entry's JSON form from the state it was read from, so a new
        engine does not encode a long phase's journal again at its first save."""
        written = state.phase_data[ENGINE_KEY].get("journal")
        if not isinstance(written, list) or len(written) != len(record.journal):
            return
        self._journal_kept = (list(record.journal), written)

    def _journal_data(self, journal: list[JournalEntry]) -> list[Any]:
        """The journal's JSON form, each entry's made once: a phase of many asks or steps
        (a loop, a regression run's cases) saves its whole journal at each one. Entries
        are frozen, and one that changes is replaced (``_repoint_journal``): an entry
        that is the very object it was has the JSON form it had, found by identity at C
        speed, so an unchanged entry costs no step of Python."""
        entries, data = self._journal_kept or ([], [])
        count = min(len(entries), len(journal))
        count = next(compress(count_from(), map(operator.is_not, journal, entries)), count)
        made = data[:count] + [unstructure(entry) for entry in journal[count:]]
        self._journal_kept = (list(journal), made)
        return made

    def _save(self, checkpoint_name: str, *, publish: bool = True) -> None:
        state, record = self._require_state(), self._require_record()
        self.recorder.drop_published()
        self._archive_finished()
        record.revision += 1
        if record.status not in ("failed", "completed", "cancelled"):
            record.status = "paused" if self._pending() or self._sleeping() else "running"
        state.checkpoint_name = checkpoint_name
        state.created_at = format_time(self.clock.now())
        self._store_record()
        # The checkpoint and the evidence it makes true go to the disk as one group.
        evidence = self.recorder.outgoing() if publish else None
        self.bridge.save_state(SaveStateInput(state=state, evidence=evidence))
        if publish:
            self.recorder.sent()

    def _archive_finished(self) -> None:
        """Move finished requests of completed phases to the run's history, in batches.

        The state is rewritten at every checkpoint; keeping only what resuming needs keeps
        that cost flat over a long run. The history append is durable before the state
        that drops the text is written; a crash in between only appends them twice.
        """
        state = self._require_state()
        # A request whose evidence is still to be written keeps its text until it is.
        unwritten = {e.request_id for e in self._require_record().events}
        finished = [
            r
            for r in state.agent_requests
            if not r.x_archived
            and r.phase < state.phase
            and r.status is not HistoryStatus.PENDING
            and r.request_id not in unwritten
        ]
        if len(finished) < self.archive_after:
            return
        run_id = self._require_record().run_id
        self.bridge.archive(ArchiveInput(records=tuple(finished), run_id=run_id))
        for record in finished:
            record.x_request = record.x_response = None
            record.x_position = None
            record.x_archived = True

    def _sleeping(self) -> bool:
        """Whether a durable timer of the current phase is not yet due."""
        until = self._require_record().waiting_until
        return until is not None and self.clock.now() < parse_time(until)

    def _pending(self) -> list[AgentRequestRecord]:
        """The requests still waiting for an answer, in the order they were made.

        Asked several times a cycle; the answer is kept while the list has the same
        items and no request was edited since (the engine appends requests and assigns
        their fields, see ``record_edits``), and otherwise found at C speed from the
        first request that waited last time: the engine only appends to the list, and a
        request answered, failed or withdrawn never waits again, so a long run's
        thousand settled requests are not looked at again."""
        requests = self._require_state().agent_requests
        edits = record_edits()
        kept = self._pending_kept
        if (
            kept is not None
            and kept[0] is requests
            and kept[1] == len(requests)
            and kept[2] is edits
            and kept[3] == len(edits)
        ):
            return list(kept[4])
        listed, start = self._settled
        if listed is not requests or start > len(requests):
            start = 0
        tail = requests[start:]
        waiting = list(map(operator.is_, map(_status_of, tail), repeat(HistoryStatus.PENDING)))
        pending = list(compress(tail, waiting))
        self._settled = (requests, next(compress(count_from(start), waiting), len(requests)))
        self._pending_kept = (requests, len(requests), edits, len(edits), pending)
        return list(pending)

    def _records_by_id(self) -> dict[str, AgentRequestRecord]:
        return self._record_index.of(self._require_state().agent_requests)

    def _new_record(
        self,
        request: AgentRequest,
        *,
        position: int,
        max_retries: int | None = None,
        answer_within: float | None = None,
    ) -> AgentRequestRecord:
        output_dir = self.recorder.agent_output_dir(request.agent_name)
        record = AgentRequestRecord(
            request_id=request.request_id,
            agent_name=request.agent_name,
            phase=request.phase,
            status=HistoryStatus.PENDING,
            x_request=request,
            x_position=position,
            x_max_retries=max_retries,
            x_output_dir=output_dir,
            x_answer_within=answer_within,
        )
        self._require_state().agent_requests.append(record)
        self.recorder.agent_start(request, output_dir)
        return record

    # -- called by PhaseContext ---------------------------------------------------------

    def journal_entry(self, position: int) -> JournalEntry | None:
        """The recorded call at ``position``."""
        journal = self._require_record().journal
        if position < len(journal) and journal[position].position == position:
            return journal[position]
        if position >= len(journal) and (not journal or journal[-1].position == len(journal) - 1):
            # Entries are journaled at rising positions: when the last one is at its index,
            # each one is, and none is at ``position`` (the first new call after a replay).
            return None
        for entry in journal:
            if entry.position == position:
                return entry
        return None

    def open_requests(
        self,
        spec: PhaseSpec,
        position: int,
        asks: Sequence[Ask],
        *,
        kind: str,
        fingerprint: list[str],
    ) -> JournalEntry:
        state = self._require_state()
        now = format_time(self.clock.now())
        entry = JournalEntry(position=position, kind=kind, fingerprint=fingerprint)
        records = []
        for ask in asks:
            context = dict(ask.context or {})
            context.setdefault("output_path", state.output_path)
            if state.project_path is not None:
                context.setdefault("project_path", state.project_path)
            if state.template_name is not None:
                context.setdefault("template_name", state.template_name)
            context["x_run_id"] = self._require_record().run_id
            if ask.output_type is not None:
                schema = answer_schema(ask.output_type)
                if schema is not None:  # what shape the answer must have, for hosts to check
                    context.setdefault("x_answer_schema", schema)
            request = AgentRequest(
                request_id=self.new_id(),
                phase=spec.number,
                phase_name=spec.name,
                agent_name=ask.agent,
                prompt=ask.prompt,
                created_at=now,
                context=context,
                timeout_seconds=ask.timeout_seconds,
            )
            within = None if ask.answer_within is None else ask.answer_within.total_seconds()
            records.append(
                self._new_record(
                    request, position=position, max_retries=ask.retries, answer_within=within
                )
            )
            entry.request_ids.append(request.request_id)
        self._require_record().journal.append(entry)
        if self.invoker is not None and self._invoke_in_process(records):
            self._save("after_agent_invocation")
            self._stop_if_requested()
            return self.journal_entry(position) or entry  # a retry put a new one in its place
        return entry

    def _invoke_in_process(self, records: list[AgentRequestRecord]) -> bool:
        """Answer ``records`` through the in-process invoker; False if it defers to the host."""
        assert self.invoker is not None
        answered = False
        for record in records:
            current: AgentRequestRecord | None = record
            while current is not None:
                request = current.request()
                if request.retry_count:  # a retry: wait as the policy says, then ask
                    self._wait(self.workflow_cls.policy().delay(request.retry_count))
                started = self.clock.now()
                try:
                    text = self.invoker.invoke(
                        request.agent_name,
                        request.prompt,
                        request.timeout_seconds,
                        context=request.context,
                    )
                    response = AgentResponse(
                        request_id=request.request_id,
                        status=RequestStatus.SUCCESS,
                        created_at=format_time(self.clock.now()),
                        response=str(text),
                        duration_seconds=seconds_since(started, self.clock.now()),
                        metadata=_metadata_of(text),
                    )
                except HostRequired:
                    return answered
                except AgentInvocationError as exc:
                    response = AgentResponse(
                        request_id=request.request_id,
                        status=RequestStatus.TIMEOUT
                        if exc.error_type == ErrorType.TIMEOUT.value
                        else RequestStatus.ERROR,
                        created_at=format_time(self.clock.now()),
                        error_type=ErrorType(exc.error_type),
                        error_message=str(exc),
                        duration_seconds=seconds_since(started, self.clock.now()),
                    )
                answered = True
                current = self._apply_response(current, response, digest=None)
        return answered

    def _wait(self, seconds: float) -> None:
        """Wait on the engine's clock (a test's clock moves at once)."""
        sleep = getattr(self.clock, "sleep", None)
        if sleep is None:
            import time

            sleep = time.sleep
        sleep(seconds)

    def record_by_id(self, request_id: str) -> AgentRequestRecord:
        return self._records_by_id()[request_id]

    def mark_fatal(self, error: OrchestratorError) -> None:
        self._fatal = error

    def record_step(
        self, position: int, name: str, result: Any, *, error: dict[str, str] | None = None
    ) -> None:
        self._require_record().journal.append(
            JournalEntry(
                position=position, kind="step", fingerprint=[name], result=result, error=error
            )
        )
        self._save(f"after_step_{name}")
        self._stop_if_requested()

    def _stop_if_requested(self) -> None:
        """Leave the phase at the checkpoint just saved when the engine is asked to stop;
        a resume replays the phase to here from its journal."""
        if self.stop_requested is not None and self.stop_requested():
            raise Pause()

    def record_entry(self, entry: JournalEntry) -> None:
        """Journal an ``event``, ``artifact`` or timer call; the next checkpoint saves it."""
        self._require_record().journal.append(entry)

    def reopened(self) -> bool:
        """Whether the current phase replays after a retry (see :meth:`retry`)."""
        return self._require_record().reopened

    def usable(self, entry: JournalEntry) -> bool:
        """Whether a retry may hand back what ``entry`` recorded: not a failure."""
        if entry.kind == "step":
            return entry.error is None
        if entry.kind in ("ask", "ask_all"):
            records = self._records_by_id()
            return all(
                rid in records and records[rid].status is HistoryStatus.COMPLETED
                for rid in entry.request_ids
            )
        return True

    def drop_journal_from(self, position: int, *, because: str) -> None:
        """The retried phase no longer makes the recorded call at ``position``: it and
        every later entry leave the journal (kept in the try's record), and the phase runs
        on anew from there."""
        record = self._require_record()
        dropped = [e for e in record.journal if e.position >= position]
        record.journal = [e for e in record.journal if e.position < position]
        record.reopened = False
        if record.tries:
            record.tries[-1]["dropped"] = [
                {
                    "position": e.position,
                    "kind": e.kind,
                    "fingerprint": e.fingerprint,
                    "request_ids": e.request_ids,
                }
                for e in dropped
            ]
            record.tries[-1]["from_position"] = position
            record.tries[-1]["because"] = because

    def sleep_until(self, wake: str) -> None:
        """Pause the run (no request: a timer) unless ``wake`` has come."""
        record = self._require_record()
        if self.clock.now() < parse_time(wake):
            record.waiting_until = wake
            raise Pause()
        record.waiting_until = None

    def keep_artifact(
        self, spec: PhaseSpec, position: int, document: dict[str, Any], data: bytes
    ) -> str:
        """Write a phase's artifact now (a replay writes the same file again), then journal
        it; the recorder queues its ``artifact.written``."""
        facts = self.recorder.artifact(spec.number, spec.name, document, data)
        self.record_entry(
            JournalEntry(
                position=position, kind="artifact", fingerprint=[document["path"]], result=facts
            )
        )
        return str(facts["x_location"])

    # -- what the recorder is told ------------------------------------------------------

    def _tell_pause(self) -> None:
        waiting = [r.request_id for r in self._pending()]
        self.recorder.pause(
            waiting, until=None if waiting else self._require_record().waiting_until
        )

    def _close_phase(self, spec: PhaseSpec, *, status: str, summary: str) -> None:
        """Tell the recorder how the phase ended, with what its journal says it did."""
        request_ids: list[str] = []
        artifacts: list[dict[str, Any]] = []
        steps = 0
        for entry in self._require_record().journal:
            if entry.kind == "artifact":
                artifacts.append(
                    {
                        k: entry.result[k]
                        for k in ("name", "path", "media_type", "metadata")
                        if entry.result.get(k) is not None
                    }
                )
            elif entry.kind == "step":
                steps += 1
            elif entry.kind in ("ask", "ask_all"):
                request_ids += entry.request_ids
        tally = PhaseTally(
            request_ids=tuple(request_ids),
            steps=steps,
            artifacts=tuple(artifacts),
            journal=tuple(unstructure(entry) for entry in self._require_record().journal),
        )
        self.recorder.close_phase(
            spec.number, spec.name, status=status, summary=summary, tally=tally
        )


def check_phases(state: CheckpointState, workflow_cls: type[Workflow], *, source: str) -> None:
    """Refuse, as damaged, a state whose ``phase`` and ``phase_name`` are not one phase
    of the workflow, or that lists a completed phase the workflow does not have (by that
    number and name) or that comes after the current one. Such a state was edited, or the
    workflow's phases changed under the run; resuming it would run the wrong phase."""
    phases = ", ".join(f"{p.number} {p.name}" for p in workflow_cls.phases)
    why = (
        f"(the phases of {workflow_cls.name}: {phases}): the state was edited, or the "
        "workflow's phases changed under this run (put them back to go on)"
    )
    numbers = {p.name: p.number for p in workflow_cls.phases}
    if state.phase_name not in numbers:
        raise StateDamagedError(
            f"phase_name {state.phase_name!r} is not a phase of the workflow {why}",
            source=source,
            json_path="$.phase_name",
            rule="consistency",
        )
    if numbers[state.phase_name] != state.phase:
        raise StateDamagedError(
            f"phase is {state.phase}, but phase_name {state.phase_name!r} is phase "
            f"{numbers[state.phase_name]} {why}",
            source=source,
            json_path="$.phase",
            rule="consistency",
        )
    for index, done in enumerate(state.completed_phases):
        if numbers.get(done.phase_name) != done.phase or done.phase > state.phase:
            raise StateDamagedError(
                f"completed phase {done.phase} {done.phase_name!r} is not a phase of the "
                f"workflow before or at the current one ({state.phase} {state.phase_name}) "
                f"{why}",
                source=source,
                json_path=f"$.completed_phases[{index}]",
                rule="consistency",
            )


def _describe_pending(pending_ids: list[str]) -> str:
    if not pending_ids:
        return "no request is pending"
    if len(pending_ids) == 1:
        return f"the pending request is {pending_ids[0]}"
    return f"pending requests: {', '.join(pending_ids)}"


def _metadata_of(text: str) -> ResponseMetadata | None:
    """What an invoker's :class:`AgentAnswer` knows about the call, as response metadata
    (extra facts under ``x_`` keys)."""
    if not isinstance(text, AgentAnswer):
        return None
    extra = {f"x_{key}": value for key, value in text.facts.items()}
    if text.model is None and text.tokens_used is None and not extra:
        return None
    return ResponseMetadata(model=text.model, tokens_used=text.tokens_used, extra=extra)


def _all_phases(count: int) -> str:
    """``all 3 phases``; a workflow of one phase has ``its 1 phase``."""
    return f"its {plural(count, 'phase')}" if count == 1 else f"all {plural(count, 'phase')}"


def _random_uuid() -> str:
    """A random (version 4) UUID, made from ``os.urandom`` as the ``uuid`` module makes
    it; importing that module costs a new process about a millisecond."""
    import os

    data = bytearray(os.urandom(16))
    data[6] = (data[6] & 0x0F) | 0x40  # version 4
    data[8] = (data[8] & 0x3F) | 0x80  # the RFC 4122 variant
    text = data.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


# Every field of a journal entry, as a tuple (one attrgetter: the cache checks each save).
@attrs.define(eq=False)
class _Paused:
    """What a clean pause left for the next resume in this process."""

    token: object  # the bridge's token of the state it saved
    state: CheckpointState
    record: EngineRecord
    workflow_cls: type[Workflow]
    bridge: Bridge
    journal_kept: _JournalKept | None
    published: int  # the recorder's: the last event known to be in the run's log
    record_index: RecordIndex  # of the state's agent_requests, kept as they grow
    replay_rows: ReplayRows  # the current phase's asks answered before
    settled: tuple[Any, int]  # the requests, and how many of the first are settled


# bridge location -> the state its last clean pause left (see Engine._leave_paused); a few
# instances at most, the most recent ones.
_paused: dict[str, _Paused] = {}
_paused_lock = threading.Lock()  # a worker advances several runs at once
_PAUSED_KEPT = 8


def forget_paused() -> None:
    """Drop what pauses in this process left for the next resume (see
    ``Engine._leave_paused``): the next engine reads its state from the file, as an engine
    of a new process does."""
    with _paused_lock:
        _paused.clear()


_status_of = operator.attrgetter("status")
# The journal's entries, and their JSON forms.
_JournalKept = tuple[list[JournalEntry], list[Any]]
