"""The workflow engine: run phases, pause for agents, record answers, replay on resume.

The state file is the source of truth. Phases that completed are skipped; the current
phase runs again from its top, and every ``ctx.ask``/``ctx.step`` it already made returns
its recorded result, matched by position and checked against a fingerprint.

Response files are consumed only after what they said is durably in the state, and a
response whose digest is already recorded is recognised as a crash leftover, so no
answer is ever applied twice.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from .._errors import (
    AgentFailedError,
    AgentInvocationError,
    ContractError,
    InstanceExistsError,
    NonDeterminismError,
    OrchestratorError,
    ResponseRejectedError,
    RunFailedError,
    StateDamagedError,
    StepFailedError,
)
from .._ports import (
    AgentAnswer,
    AgentInvoker,
    ArchiveInput,
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
from ..evidence.documents import (
    EVENT_AGENT_LATE_ANSWER,
    EVENT_RUN_END,
    EVENT_RUN_PAUSE,
    EVENT_RUN_START,
    RESERVED_NAMES,
    RESERVED_PREFIXES,
    agent_dir,
    agent_files,
    agent_outcome,
    answer_facts,
    check_artifact,
    event_line,
    event_name_ok,
    phase_dir,
    results_document,
)
from ..formats.bridge import (
    AgentRequest,
    AgentRequestRecord,
    AgentResponse,
    CheckpointState,
    CompletedPhase,
    ErrorType,
    HistoryStatus,
    RequestStatus,
    ResponseMetadata,
)
from ..formats.bridge_codec import PROMPT_MIN_LENGTH, TIMEOUT_RANGE, error_type_of
from ..formats.convert import structure, unstructure
from ..formats.step_names import (
    EVENT_AGENT_END,
    EVENT_AGENT_START,
    EVENT_ARTIFACT_WRITTEN,
    EVENT_DECISION,
    EVENT_ERROR,
    EVENT_SKILL_END,
    EVENT_SKILL_START,
    EVENT_TOOL_CALL,
    EVENT_TOOL_RESULT,
    RESULTS_FILE,
    STATUS_ERROR,
    STATUS_PASS,
)
from ..formats.strict_json import dumps_canonical
from ..formats.times import SystemClock, format_time, parse_time
from ..storage import durable as _durable
from ..storage.runs import ENGINE_KEY
from .workflow import Ask, PhaseResult, PhaseSpec, Workflow

if TYPE_CHECKING:
    from ..board.dispatch import DispatchReport
    from ..formats.board import Task

T = TypeVar("T")

RETRYABLE = frozenset({ErrorType.TIMEOUT, ErrorType.INVOCATION_FAILED})
FALLBACK_ERRORS = (
    frozenset({ErrorType.PARSE_ERROR, ErrorType.VALIDATION_ERROR, ErrorType.UNKNOWN}) | RETRYABLE
)


class Pause(BaseException):
    """Unwinds a phase to the engine when it must wait for the host.

    A ``BaseException`` so that a user's ``except Exception:`` cannot swallow it.
    """


def prompt_digest(prompt: str) -> str:
    return _durable.sha256_hex(prompt.encode("utf-8"))


# -- the engine's own bookkeeping, kept in phase_data["x_orchestrator"] ------------------


@attrs.define(kw_only=True)
class JournalEntry:
    """One ``ask``/``ask_all``/``step`` call of the current phase, by position."""

    position: int
    kind: str  # "ask" | "ask_all" | "step"
    fingerprint: list[str]  # ask: "agent sha256(prompt)" per request; step: [name]
    request_ids: list[str] = attrs.field(factory=list)
    result: Any = None
    # A step that raised: {"type": "module:qualname", "message": ...}, raised again on replay.
    error: dict[str, Any] | None = None


@attrs.define(kw_only=True)
class OutboxEvent:
    """An event of the run, queued in the record until the log is known to hold it.

    ``request_id`` names the agent request whose output directory the event (re)writes;
    ``results`` is a phase's ``results.json``, written in ``data["output_dir"]``.
    """

    seq: int
    ts: str
    event: str
    data: dict[str, Any]
    request_id: str | None = None
    results: dict[str, Any] | None = None


@attrs.define(kw_only=True)
class EngineRecord:
    """Everything the engine needs to resume that the seed's state has no field for."""

    run_id: str
    workflow: str
    workflow_name: str
    workdir: str
    started_at: str
    inputs: dict[str, Any] = attrs.field(factory=dict)
    status: str = "running"  # running | paused | failed | completed | cancelled
    failure: str | None = None
    revision: int = 0
    journal: list[JournalEntry] = attrs.field(factory=list)
    # Whether this run writes evidence: a run started by a version without it does not.
    evidence: bool = False
    # The event outbox (see ``_publish_evidence``) and the next event's number.
    events: list[OutboxEvent] = attrs.field(factory=list)
    next_seq: int = 1
    # Facts of the current phase told once (its start, a fallback, ...); cleared with it.
    marks: list[str] = attrs.field(factory=list)
    phase_started_at: str | None = None


@attrs.frozen(kw_only=True)
class Outcome:
    """How a ``run``/``resume`` ended, with the exit code the CLI should use."""

    status: str  # "completed" | "paused" | "failed"
    exit_code: int
    message: str
    pending: tuple[AgentRequest, ...] = ()
    outputs: dict[str, Any] = attrs.field(factory=dict)
    history_path: str | None = None


EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_PAUSED = 0, 1, 2, 42


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
        # The bridge's token of the state this engine left at its last clean pause: while
        # the stored state still has it, a later resume needs no re-read.
        self._paused_token: object | None = None
        # The highest event number known to be in the run's log.
        self._published = 0

    # -- entry points -------------------------------------------------------------------

    def start(
        self,
        *,
        workflow_ref: str,
        workdir: Path,
        inputs: dict[str, Any] | None = None,
        output_path: str | None = None,
    ) -> Outcome:
        """Create the instance and run until it pauses, fails or completes."""
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
                run_id=self.new_id(),
                workflow=workflow_ref,
                workflow_name=self.workflow_cls.name,
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
            self._published = 0
            self._emit(
                EVENT_RUN_START,
                {
                    "workflow": self.workflow_cls.name,
                    "ref": workflow_ref,
                    "run_id": record.run_id,
                    "phases": [p.name for p in self.workflow_cls.phases],
                    "inputs": sorted(inputs),
                },
            )
            self._save("started")
            return self._advance()

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
            token, self._paused_token = self._paused_token, None
            if token is None or self._state is None or self.bridge.state_token() != token:
                state = self.bridge.load_state()
                self._attach(state, load_record(state, source=self.bridge.location))
                self._published = 0
                self._publish_evidence()  # a crash may have cut the last publication
            record = self._require_record()
            if record.status == "cancelled":  # a crash cut the cancel short: finish it
                return self._finish_cancel()
            if record.status == "failed":
                return Outcome(
                    status="failed",
                    exit_code=EXIT_ERROR,
                    message=f"the run already failed: {record.failure}; the state is kept "
                    "for inspection ('orchestrate cancel' removes it)",
                )
            received = self.bridge.read_responses()
            changed = self._accept_responses(received)
            if record.status == "completed":  # every phase ran; a crash cut the cleanup
                return self._finish()
            changed |= self._expire_overdue()
            if self._pending():
                if changed:
                    self._emit_pause()
                    self._save("before_agent_invocation")
                return self._pause_now()
            return self._advance()

    def cancel(self) -> str:
        """End the instance on purpose: keep its history, remove state and request files."""
        with self.bridge.lock():
            state = self.bridge.load_state()
            self._attach(state, load_record(state, source=self.bridge.location))
            self._published = 0
            record = self._require_record()
            if record.status not in ("failed", "completed", "cancelled"):
                self._withdraw_pending("the run was cancelled")
                self._emit_run_end("cancelled")
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
            self._publish_evidence()
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
        expected = _describe_pending([r.request_id for r in self._pending()])
        fresh: dict[str, tuple[AgentRequestRecord, ReceivedResponse]] = {}
        late: dict[str, AgentRequestRecord] = {}  # answered request id -> its pending retry
        for item in received:
            record = records.get(item.response.request_id)
            if record is None:
                raise ResponseRejectedError(
                    f"{item.source}: request_id {item.response.request_id} matches no request "
                    f"of this instance ({expected}); the file was left as it is",
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
                    "was left as it is",
                    path=item.source,
                    reason="stale",
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
        order = {
            r.request_id: index for index, r in enumerate(self._require_state().agent_requests)
        }
        for record, item in sorted(fresh.values(), key=lambda pair: order[pair[0].request_id]):
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
        self._emit_agent_end(retry)

    def _apply_response(
        self, record: AgentRequestRecord, response: AgentResponse, *, digest: str | None
    ) -> AgentRequestRecord | None:
        """Record ``response`` for ``record``; return the retry request if one was made."""
        late = record.status is HistoryStatus.RETRIED  # it ended once already
        record.x_response = response
        record.x_response_sha256 = digest
        record.status = self._settled_status(record, response)
        if late:
            self._emit_agent_end(record, late=True)
            return None
        if record.status is not HistoryStatus.RETRIED:
            self._emit_agent_end(record)
            return None
        retry_id = self.new_id()
        record.x_note = f"retried as {retry_id}"
        self._emit_agent_end(record)  # before the retry's start, as it happened
        return self._retry(record, retry_id)

    def _settled_status(self, record: AgentRequestRecord, response: AgentResponse) -> HistoryStatus:
        error = error_type_of(response)
        if error is None:
            return HistoryStatus.COMPLETED
        if response.status is RequestStatus.CANCELLED:
            return HistoryStatus.CANCELLED
        limit = (
            self.workflow_cls.max_retries if record.x_max_retries is None else record.x_max_retries
        )
        if error in RETRYABLE and record.request().retry_count < limit:
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
            request, position=record.x_position or 0, max_retries=record.x_max_retries
        )
        self._repoint_journal(record.request_id, request.request_id)
        return retry

    def _repoint_journal(self, old_id: str, new_id: str) -> None:
        """The journal slot that waited for ``old_id`` now waits for ``new_id``."""
        for entry in self._require_record().journal:
            entry.request_ids = [new_id if rid == old_id else rid for rid in entry.request_ids]

    def _expire_overdue(self) -> bool:
        """A pending request older than its timeout counts as a TIMEOUT answer."""
        now = self.clock.now()
        expired = False
        for record in self._pending():
            request = record.request()
            deadline = parse_time(request.created_at) + timedelta(seconds=request.timeout_seconds)
            if now > deadline:
                timeout = AgentResponse(
                    request_id=record.request_id,
                    status=RequestStatus.TIMEOUT,
                    created_at=format_time(now),
                    error_type=ErrorType.TIMEOUT,
                    error_message=f"no response within {request.timeout_seconds} s",
                )
                self._apply_response(record, timeout, digest=None)
                expired = True
        return expired

    # -- running phases -----------------------------------------------------------------

    def _advance(self) -> Outcome:
        state = self._require_state()
        workflow = self.workflow_cls(_copy(self._require_record().inputs))
        while True:
            try:
                spec = self.workflow_cls.phase_named(state.phase_name)
            except KeyError:
                return self._fail_unknown_phase(state.phase_name)
            self._open_phase(spec)
            try:
                result = self._run_phase(workflow, spec)
                next_spec = self._complete_phase(spec, result)
            except Pause:
                self._emit_pause()
                self._save("before_agent_invocation")
                return self._pause_now()
            except OrchestratorError as exc:
                return self._fail(f"phase {spec.number} ({spec.name}): {exc}", spec=spec)
            except Exception as exc:  # the user's phase raised: fail with its words
                return self._fail(
                    f"phase {spec.number} ({spec.name}): {type(exc).__name__}: {exc}", spec=spec
                )
            if next_spec is None:
                return self._finish()
            state.phase, state.phase_name = next_spec.number, next_spec.name

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
                if self._mark(f"fallback {exc.request_id}"):
                    self._emit(
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
        phases = self.workflow_cls.phases
        index = phases.index(spec)
        return phases[index + 1] if index + 1 < len(phases) else None

    def _finish(self) -> Outcome:
        state = self._require_state()
        record = self._require_record()
        if record.status != "completed":
            record.status = "completed"
            self._emit_run_end("completed")
        if self._consumed or self._unpublished():
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
            message=f"{self.workflow_cls.name}: all {len(self.workflow_cls.phases)} phases "
            f"completed; history kept in {history}",
            outputs=outputs,
            history_path=history,
        )

    def _fail(self, failure: str, *, spec: PhaseSpec | None = None) -> Outcome:
        """Record the run as failed, durably, and withdraw its requests."""
        record = self._require_record()
        self._withdraw_pending("the run failed")
        self._emit(
            EVENT_ERROR,
            {"skill": None if spec is None else spec.name, "message": failure, "fatal": True},
        )
        if spec is not None:
            self._close_phase(spec, status=STATUS_ERROR, summary=failure)
        record.status = "failed"
        record.failure = failure
        self._emit_run_end("failed", failure=failure)
        self._save("run_failed")
        self._flush_consumed()
        self.bridge.publish(PublishInput(pending=()))
        return Outcome(
            status="failed",
            exit_code=EXIT_ERROR,
            message=f"run failed: {record.failure}; state kept for inspection",
        )

    def _pause_now(self) -> Outcome:
        pending = tuple(r.request() for r in self._pending())
        self._require_record().status = "paused"
        # Consumed answers go first: a fast host may answer the new request at once.
        self._flush_consumed()
        self.bridge.publish(PublishInput(pending=pending))
        self._paused_token = self.bridge.state_token()
        names = ", ".join(f"{r.agent_name} ({r.request_id})" for r in pending)
        return Outcome(
            status="paused",
            exit_code=EXIT_PAUSED,
            message=f"paused in phase {self._require_state().phase} "
            f"({self._require_state().phase_name}): waiting for {names}",
            pending=pending,
        )

    def _flush_consumed(self) -> None:
        if self._consumed:
            self.bridge.consume(ConsumeInput(consumed=tuple(self._consumed)))
            self._consumed = []

    # -- state --------------------------------------------------------------------------

    def _attach(self, state: CheckpointState, record: EngineRecord) -> None:
        self._state, self._record = state, record

    def _require_state(self) -> CheckpointState:
        assert self._state is not None, "engine has no state attached"
        return self._state

    def _require_record(self) -> EngineRecord:
        assert self._record is not None, "engine has no record attached"
        return self._record

    def _store_record(self) -> None:
        self._require_state().phase_data[ENGINE_KEY] = unstructure(self._require_record())

    def _save(self, checkpoint_name: str, *, publish: bool = True) -> None:
        state, record = self._require_state(), self._require_record()
        record.events = [e for e in record.events if e.seq > self._published]
        self._archive_finished()
        record.revision += 1
        if record.status not in ("failed", "completed", "cancelled"):
            record.status = "paused" if self._pending() else "running"
        state.checkpoint_name = checkpoint_name
        state.created_at = format_time(self.clock.now())
        self._store_record()
        self.bridge.save_state(SaveStateInput(state=state))
        if publish:
            self._publish_evidence()

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

    def _pending(self) -> list[AgentRequestRecord]:
        return [
            r for r in self._require_state().agent_requests if r.status is HistoryStatus.PENDING
        ]

    def _records_by_id(self) -> dict[str, AgentRequestRecord]:
        return {r.request_id: r for r in self._require_state().agent_requests}

    def _new_record(
        self, request: AgentRequest, *, position: int, max_retries: int | None = None
    ) -> AgentRequestRecord:
        run = self._require_record()
        output_dir = agent_dir(run.next_seq, request.agent_name) if run.evidence else None
        record = AgentRequestRecord(
            request_id=request.request_id,
            agent_name=request.agent_name,
            phase=request.phase,
            status=HistoryStatus.PENDING,
            x_request=request,
            x_position=position,
            x_max_retries=max_retries,
            x_output_dir=output_dir,
        )
        self._require_state().agent_requests.append(record)
        context = request.context or {}
        self._emit(
            EVENT_AGENT_START,
            {
                "step": (output_dir or "").rsplit("/", 1)[-1],
                "agent": request.agent_name,
                "request_id": request.request_id,
                "skill": request.phase_name,
                "attempt": request.retry_count + 1,
                "timeout_seconds": request.timeout_seconds,
                "prompt_chars": len(request.prompt),
                "task": context.get("x_task_id"),
                "output_dir": output_dir,
            },
            request_id=request.request_id,
        )
        return record

    # -- called by PhaseContext ---------------------------------------------------------

    def journal_entry(self, position: int) -> JournalEntry | None:
        """The recorded call at ``position``."""
        journal = self._require_record().journal
        if position < len(journal) and journal[position].position == position:
            return journal[position]
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
            records.append(self._new_record(request, position=position, max_retries=ask.retries))
            entry.request_ids.append(request.request_id)
        self._require_record().journal.append(entry)
        if self.invoker is not None and self._invoke_in_process(records):
            self._save("after_agent_invocation")
        return entry

    def _invoke_in_process(self, records: list[AgentRequestRecord]) -> bool:
        """Answer ``records`` through the in-process invoker; False if it defers to the host."""
        assert self.invoker is not None
        answered = False
        for record in records:
            current: AgentRequestRecord | None = record
            while current is not None:
                request = current.request()
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
                        duration_seconds=_seconds_since(started, self.clock.now()),
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
                        duration_seconds=_seconds_since(started, self.clock.now()),
                    )
                answered = True
                current = self._apply_response(current, response, digest=None)
        return answered

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

    def record_entry(self, entry: JournalEntry) -> None:
        """Journal an ``event`` or ``artifact`` call; the next checkpoint saves it."""
        self._require_record().journal.append(entry)

    def tell(self, event: str, data: dict[str, Any], *, request_id: str | None = None) -> None:
        """Queue an event for the run's log (published with the next checkpoint)."""
        self._emit(event, data, request_id=request_id)

    def tell_step(self, name: str, started: datetime, *, error: str | None) -> None:
        skill = self._require_state().phase_name
        self._emit(EVENT_TOOL_CALL, {"tool": name, "skill": skill}, ts=format_time(started))
        self._emit(
            EVENT_TOOL_RESULT,
            {
                "tool": name,
                "skill": skill,
                "status": "ok" if error is None else "error",
                "duration_ms": round(_seconds_since(started, self.clock.now()) * 1000),
                "error": error,
            },
        )

    def keep_artifact(
        self, spec: PhaseSpec, position: int, document: dict[str, Any], data: bytes
    ) -> str:
        """Write a phase's artifact now (a replay writes the same file again), then journal
        it and queue its ``artifact.written``."""
        output_dir = phase_dir(spec.number, spec.name)
        location = f"{output_dir}/{document['path']}"
        record = self._require_record()
        self.bridge.write_evidence(EvidenceInput(run_id=record.run_id, files=[(location, data)]))
        facts = {**document, "bytes": len(data), "sha256": _durable.sha256_hex(data)}
        self.record_entry(
            JournalEntry(
                position=position,
                kind="artifact",
                fingerprint=[document["path"]],
                result={**facts, "x_location": location},
            )
        )
        self._emit(EVENT_ARTIFACT_WRITTEN, {**facts, "skill": spec.name, "output_dir": output_dir})
        return location

    # -- evidence (see ``_evidence``) -----------------------------------------------------

    def _emit(
        self,
        event: str,
        data: dict[str, Any],
        *,
        ts: str | None = None,
        request_id: str | None = None,
        results: dict[str, Any] | None = None,
    ) -> int:
        """Queue an event in the outbox; the checkpoint that saves it publishes it."""
        record = self._require_record()
        if not record.evidence:
            return 0
        sequence = record.next_seq
        record.next_seq += 1
        record.events.append(
            OutboxEvent(
                seq=sequence,
                ts=ts or format_time(self.clock.now()),
                event=event,
                data={k: v for k, v in data.items() if v is not None},
                request_id=request_id,
                results=results,
            )
        )
        return sequence

    def _mark(self, fact: str) -> bool:
        """True the first time ``fact`` is told in the current phase (replays included)."""
        marks = self._require_record().marks
        if fact in marks:
            return False
        marks.append(fact)
        return True

    def _unpublished(self) -> bool:
        return any(e.seq > self._published for e in self._require_record().events)

    def _publish_evidence(self) -> None:
        """Write the outbox's events that the log lacks, with their output directories.

        Called only with the state that holds them durable, so the log holds exactly the
        events of durable states: a replay after a crash makes the same events again,
        under the same numbers, and the log's last number tells which it already has.
        Files go first, so an event in the log always has its files.
        """
        record = self._require_record()
        if not record.events or record.events[-1].seq <= self._published:
            return
        # Only this engine appends (it holds the instance): once it has published, it
        # knows the log's last number; after loading a state it asks the log.
        mark = self._published or self.bridge.evidence_mark(record.run_id)
        new = [e for e in record.events if e.seq > mark]
        if new:
            self.bridge.write_evidence(
                EvidenceInput(
                    run_id=record.run_id,
                    files=self._evidence_files(new),
                    lines=b"".join(event_line(e.seq, e.ts, e.event, e.data) for e in new),
                )
            )
        self._published = record.events[-1].seq

    def _evidence_files(self, events: list[OutboxEvent]) -> list[tuple[str, bytes]]:
        """The files of ``events``: phases' results, and each agent request's directory as
        its record is now (its prompt from the start; its answer and results once ended)."""
        files: list[tuple[str, bytes]] = []
        ended: dict[str, None] = {}  # requests whose directory is (re)written, in order
        for event in events:
            if event.results is not None:
                where = f"{event.data['output_dir']}/{RESULTS_FILE}"
                files.append((where, dumps_canonical(event.results)))
            if event.request_id is not None and event.event != EVENT_AGENT_START:
                ended[event.request_id] = None
        records = self._records_by_id()
        for request_id in ended:
            item = records.get(request_id)
            if item is None or item.x_request is None or item.x_output_dir is None:
                continue
            files += agent_files(
                item,
                confidence=_usable_confidence(item.x_response),
                phase_name=item.x_request.phase_name,
            )
        return files

    def _emit_agent_end(self, record: AgentRequestRecord, *, late: bool = False) -> None:
        """Tell how a request ended; ``late``: a request that ended already (timed out,
        retried) was answered after all, told once as ``agent.late_answer``, and its
        output directory is written again with the answer."""
        status, summary = agent_outcome(record)
        response = record.x_response
        confidence = _usable_confidence(response)
        request = record.request()
        took = None
        if response is not None and response.duration_seconds is not None:
            took = round(response.duration_seconds * 1000)
        self._emit(
            EVENT_AGENT_LATE_ANSWER if late else EVENT_AGENT_END,
            {
                "step": (record.x_output_dir or "").rsplit("/", 1)[-1],
                "agent": record.agent_name,
                "request_id": record.request_id,
                "skill": request.phase_name,
                "status": status,
                "confidence": 0.0 if confidence is None else confidence,
                "confidence_reported": confidence is not None,
                "duration_ms": took,
                **answer_facts(record),
                "summary": summary,
                "output_dir": record.x_output_dir,
            },
            request_id=record.request_id,
        )

    def _withdraw_pending(self, why: str) -> None:
        """Close the story of requests no answer will reach (the run ends without them)."""
        for record in self._pending():
            if record.x_note is None:
                record.x_note = why
            self._emit_agent_end(record)

    def _emit_pause(self) -> None:
        state = self._require_state()
        self._emit(
            EVENT_RUN_PAUSE,
            {
                "phase": state.phase,
                "skill": state.phase_name,
                "waiting": [r.request_id for r in self._pending()],
            },
        )

    def _emit_run_end(self, status: str, *, failure: str | None = None) -> None:
        record, state = self._require_record(), self._require_state()
        self._emit(
            EVENT_RUN_END,
            {
                "status": status,
                "duration_ms": _milliseconds_since(record.started_at, self.clock.now()),
                "phases_completed": len(state.completed_phases),
                "failure": failure,
            },
        )

    def _open_phase(self, spec: PhaseSpec) -> None:
        if self._mark("start"):
            record = self._require_record()
            record.phase_started_at = format_time(self.clock.now())
            self._emit(
                EVENT_SKILL_START,
                {
                    "skill": spec.name,
                    "phase": spec.number,
                    "output_dir": phase_dir(spec.number, spec.name),
                },
                ts=record.phase_started_at,
            )

    def _close_phase(self, spec: PhaseSpec, *, status: str, summary: str) -> None:
        """Tell the phase's end, with its ``results.json``; forget its marks."""
        record = self._require_record()
        records = self._records_by_id()
        confidences: list[float] = []
        artifacts: list[dict[str, Any]] = []
        asks = steps = 0
        for entry in record.journal:
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
                for request_id in entry.request_ids:
                    asks += 1
                    item = records.get(request_id)
                    response = None if item is None else item.x_response
                    usable = item is not None and item.status is HistoryStatus.COMPLETED
                    found = _usable_confidence(response) if usable else None
                    confidences.append(0.0 if found is None else found)
        took = _milliseconds_since(record.phase_started_at, self.clock.now())
        output_dir = phase_dir(spec.number, spec.name)
        confidence = min(confidences, default=1.0) if status == STATUS_PASS else 0.0
        results = results_document(
            status=status,
            confidence=confidence,
            summary=summary,
            artifacts=artifacts,
            metadata={
                "skill": spec.name,
                "phase": spec.number,
                "asks": asks,
                "steps": steps,
                "duration_ms": took,
            },
        )
        self._emit(
            EVENT_SKILL_END,
            {
                "skill": spec.name,
                "phase": spec.number,
                "status": status,
                "confidence": confidence,
                "duration_ms": took,
                "summary": summary,
                "output_dir": output_dir,
            },
            results=results,
        )
        record.marks = []
        record.phase_started_at = None


class PhaseContext:
    """What a phase sees: ``ask``, ``ask_all``, ``step``, earlier outputs and inputs."""

    def __init__(self, engine: Engine, spec: PhaseSpec) -> None:
        self._engine = engine
        self._spec = spec
        self._position = 0
        state = engine._require_state()
        record = engine._require_record()
        self.phase: int = spec.number
        self.phase_name: str = spec.name
        self.run_id: str = record.run_id
        self.clock: Clock = engine.clock
        self.inputs: dict[str, Any] = _copy(record.inputs)
        self.workdir = Path(record.workdir)
        self.output_path = Path(state.output_path)

    def output(self, phase_name: str, output_type: type[T] | None = None) -> Any:
        """The recorded output of an earlier phase, structured into ``output_type`` if given."""
        data = self._engine._require_state().phase_data
        if phase_name not in data or phase_name == ENGINE_KEY:
            raise KeyError(f"phase {phase_name!r} has no recorded output (yet)")
        value = _copy(data[phase_name])
        return (
            structure(value, output_type, source=f"phase_data.{phase_name}")
            if output_type
            else value
        )

    def ask(
        self,
        agent: str,
        prompt: str,
        *,
        output_type: type[T] | None = None,
        min_confidence: float | None = None,
        timeout_seconds: int = 120,
        context: dict[str, Any] | None = None,
    ) -> Any:
        """Ask one agent; returns its answer text, or the answer structured into ``output_type``.

        Pauses the workflow (exit 42) when the host must answer. Raises
        :class:`AgentFailedError` when the answer is an error the policy does not retry.
        """
        spec = Ask(
            agent=agent,
            prompt=prompt,
            output_type=output_type,
            min_confidence=min_confidence,
            timeout_seconds=timeout_seconds,
            context=context,
        )
        return self._ask_group([spec], kind="ask")[0]

    def ask_all(self, asks: Sequence[Ask], *, return_failures: bool = False) -> list[Any]:
        """Ask several agents at once: one pause, answers in any order, results in order.

        With ``return_failures``, an ask whose answer is an error the policy does not
        retry gives its :class:`AgentFailedError` in the list instead of raising it, so
        one failure does not hide the other answers (AGENT_NOT_FOUND and a cancelled
        request still fail the run).
        """
        if not asks:
            return []
        return self._ask_group(list(asks), kind="ask_all", return_failures=return_failures)

    def dispatch(
        self,
        tasks: Sequence[Task],
        *,
        agent: str | Callable[[Task], str],
        objective: str,
        constraints: Sequence[str] = (),
        max_attempts: int = 3,
        retry_after_ms: int = 0,
        workspace: Path | None = None,
        board_dir: Path | None = None,
    ) -> DispatchReport:
        """Hand ``tasks`` (seed 003 tasks) to subagents on the task board, in waves, until
        every task is done, failed or canceled; see ``docs/board.md``.

        Each wave starts the ready tasks whose locks are free, asks ``agent`` (or
        ``agent(task)``) once per task with the assignment packet, pauses until every
        answer is in, and judges each through the gateway: PASS makes a task done,
        anything else blocks it; blocked tasks are retried up to ``max_attempts``.
        """
        from ..board.dispatch import run_dispatch

        return run_dispatch(
            self,
            tasks,
            agent=agent,
            objective=objective,
            constraints=constraints,
            max_attempts=max_attempts,
            retry_after_ms=retry_after_ms,
            workspace=workspace,
            board_dir=board_dir,
        )

    def step(self, name: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` once; on replay return its recorded (JSON) result.

        The result must be JSON-serialisable (or an attrs instance, stored unstructured
        and returned as plain JSON data on replay).
        """
        position = self._next_position()
        entry = self._engine.journal_entry(position)
        if entry is not None:
            self._expect(entry, kind="step", fingerprint=[name], what=f"step {name!r}")
            if entry.error is not None:
                raise _recorded_failure(name, entry.error)
            return _copy(entry.result)  # type: ignore[no-any-return]
        engine = self._engine
        started = engine.clock.now()
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            # A failure is an outcome too: recorded, and raised again on replay, so the
            # phase takes the same path (a step is not run again because it failed once).
            engine.tell_step(name, started, error=f"{type(exc).__name__}: {exc}")
            engine.record_step(position, name, None, error=_failure_record(exc))
            raise
        _durable.crash_point(f"after-step-run {name}")
        # A copy: what the phase does to ``result`` later must not change the record.
        stored = _copy(to_json_value(result, where=f"step {name!r} result"))
        engine.tell_step(name, started, error=None)
        engine.record_step(position, name, stored)
        return result

    def event(self, name: str, data: dict[str, Any] | None = None) -> None:
        """Add an event of your own (``review.file_analyzed``, ``decision``) to the run's
        ``events.ndjson``: once, even when the phase is replayed.

        ``data`` is a JSON object. The engine's own namespaces (``run.``, ``agent.``,
        ``skill.``, ``tool.``) and ``artifact.written`` are refused: use ``ctx.step`` and
        ``ctx.artifact``, which tell them.
        """
        payload = self._event_payload(name, data)
        position = self._next_position()
        entry = self._engine.journal_entry(position)
        if entry is not None:
            self._expect(entry, kind="event", fingerprint=[name], what=f"event {name!r}")
            return
        self._engine.record_entry(JournalEntry(position=position, kind="event", fingerprint=[name]))
        self._engine.tell(name, payload)

    def artifact(
        self,
        name: str,
        path: str,
        content: str | bytes,
        *,
        media_type: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        """Keep ``content`` as an artifact of this phase: a file at ``path`` in the phase's
        output directory, listed in its ``results.json`` and told by ``artifact.written``.
        Written once, even when the phase is replayed; returns where it is, relative to
        the run's directory. ``media_type`` defaults to a guess from the file name.
        """
        document = self._artifact_document(name, path, content, media_type, metadata)
        position = self._next_position()
        entry = self._engine.journal_entry(position)
        if entry is not None:
            self._expect(entry, kind="artifact", fingerprint=[path], what=f"artifact {path!r}")
            return str(entry.result["x_location"])
        data = content.encode() if isinstance(content, str) else bytes(content)
        return self._engine.keep_artifact(self._spec, position, document, data)

    def _event_payload(self, name: str, data: dict[str, Any] | None) -> dict[str, Any]:
        where = f"phase {self._spec.name!r}: ctx.event({name!r})"
        if not event_name_ok(name):
            raise RunFailedError(
                f"{where}: the name must be lower-case dot-separated words of [a-z0-9_], "
                "with your step type first (like 'review.file_analyzed')"
            )
        if name in RESERVED_NAMES or name.startswith(RESERVED_PREFIXES):
            raise RunFailedError(
                f"{where}: {name!r} is the engine's own (run., agent., skill., tool., "
                "artifact.written); ctx.step and ctx.artifact tell those, pick another name"
            )
        payload = {} if data is None else data
        if not isinstance(payload, dict):
            raise RunFailedError(f"{where}: data must be a dict (a JSON object)")
        return _copy(to_json_value(payload, where=f"{where} data"))  # type: ignore[no-any-return]

    def _artifact_document(
        self,
        name: str,
        path: str,
        content: str | bytes,
        media_type: str | None,
        metadata: dict[str, Any] | None,
    ) -> dict[str, Any]:
        where = f"phase {self._spec.name!r}: ctx.artifact({name!r}, {path!r})"
        if not isinstance(content, (str, bytes, bytearray)):
            raise RunFailedError(f"{where}: content must be str or bytes")
        if path == RESULTS_FILE:
            raise RunFailedError(f"{where}: {RESULTS_FILE} is the phase's own; pick another path")
        if media_type is None:
            import mimetypes

            media_type = mimetypes.guess_type(path)[0] or "application/octet-stream"
        document: dict[str, Any] = {"name": name, "path": path, "media_type": media_type}
        if metadata is not None:
            document["metadata"] = _copy(to_json_value(metadata, where=f"{where} metadata"))
        try:
            check_artifact(document, source=where)
        except ContractError as exc:
            raise RunFailedError(f"{where}: {exc.detail} ({exc.json_path})") from None
        return document

    def check_all_replayed(self) -> None:
        record = self._engine._require_record()
        later = [e for e in record.journal if e.position >= self._position]
        if later:
            entry = later[0]
            raise NonDeterminismError(
                f"phase {self._spec.name!r} (phase {self._spec.number}) finished at position "
                f"{self._position}, but the recorded run went on to {_describe(entry)}; a phase "
                "must make the same asks and steps, in the same order, on replay",
                phase_name=self._spec.name,
                position=self._position,
            )

    # -- internals ----------------------------------------------------------------------

    def _next_position(self) -> int:
        position = self._position
        self._position += 1
        return position

    def _ask_group(self, asks: list[Ask], *, kind: str, return_failures: bool = False) -> list[Any]:
        engine = self._engine
        for ask in asks:
            self._check_ask(ask)
        position = self._next_position()
        entry = engine.journal_entry(position)
        fingerprint = [_ask_fingerprint(a) for a in asks]
        if entry is None:
            entry = engine.open_requests(
                self._spec, position, asks, kind=kind, fingerprint=fingerprint
            )
        else:
            self._expect(entry, kind=kind, fingerprint=fingerprint, what=_describe_asks(kind, asks))
        records = [engine.record_by_id(rid) for rid in entry.request_ids]
        if any(r.status is HistoryStatus.PENDING for r in records):
            raise Pause()
        if not return_failures:
            return [self._answer(record, ask) for record, ask in zip(records, asks, strict=True)]
        answers: list[Any] = []
        for record, ask in zip(records, asks, strict=True):
            try:
                answers.append(self._answer(record, ask))
            except AgentFailedError as failure:
                if engine._fatal is not None:
                    raise
                answers.append(failure)
        return answers

    def _check_ask(self, ask: Ask) -> None:
        where = f"phase {self._spec.name!r}"
        if ask.agent not in self._engine.workflow_cls.agents:
            raise RunFailedError(
                f"{where} asks agent {ask.agent!r}, which the workflow does not declare in "
                f"'agents' {list(self._engine.workflow_cls.agents)}"
            )
        if self._spec not in self._engine.workflow_cls.asking_phases():
            raise RunFailedError(
                f"{where} asks an agent but is not marked @phase(..., asks_agents=True) "
                "while other phases are; mark it so the request schema lists it"
            )
        if len(ask.prompt) < PROMPT_MIN_LENGTH:
            raise RunFailedError(
                f"{where} asks {ask.agent!r} with a prompt of {len(ask.prompt)} characters; "
                f"the request contract needs at least {PROMPT_MIN_LENGTH}: say more"
            )
        low, high = TIMEOUT_RANGE
        if not low <= ask.timeout_seconds <= high:
            raise RunFailedError(f"{where}: timeout_seconds must be within {low}..{high}")

    def _answer(self, record: AgentRequestRecord, ask: Ask) -> Any:
        response = record.x_response
        assert response is not None
        error = error_type_of(response)
        if response.status is RequestStatus.CANCELLED:
            cancelled = RunFailedError(
                f"the host cancelled request {record.request_id} to {record.agent_name}"
            )
            self._engine.mark_fatal(cancelled)
            raise cancelled
        if error is not None:
            raise self._failure(record, error, response.error_message or error.value)
        if ask.min_confidence is not None:
            confidence = confidence_of(response)
            if confidence is None:
                raise self._failure(
                    record,
                    ErrorType.VALIDATION_ERROR,
                    "no confidence reported (metadata.confidence, or a numeric "
                    "overall_confidence or confidence in the JSON answer)",
                )
            if confidence < ask.min_confidence:
                raise self._failure(
                    record,
                    ErrorType.VALIDATION_ERROR,
                    f"confidence {confidence} is below the required {ask.min_confidence}",
                )
        text = response.response or ""
        if ask.output_type is None:
            return text
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise self._failure(
                record, ErrorType.PARSE_ERROR, f"the answer is not JSON: {exc}"
            ) from None
        try:
            return structure(data, ask.output_type, source=f"response to {record.request_id}")
        except ContractError as exc:
            raise self._failure(
                record, ErrorType.VALIDATION_ERROR, exc.detail + f" at {exc.json_path}"
            ) from None

    def _failure(
        self, record: AgentRequestRecord, error: ErrorType, message: str
    ) -> AgentFailedError:
        if record.status is not HistoryStatus.FAILED:  # once: the status is saved with it
            record.status = HistoryStatus.FAILED
            record.x_note = f"{error.value}: {message}"
            self._engine.tell(
                EVENT_ERROR,
                {
                    "skill": self._spec.name,
                    "agent": record.agent_name,
                    "request_id": record.request_id,
                    "error_type": error.value,
                    "message": message,
                },
                request_id=record.request_id,
            )
        failure = AgentFailedError(
            f"agent {record.agent_name} (request {record.request_id}) failed with "
            f"{error.value}: {message}",
            request_id=record.request_id,
            agent_name=record.agent_name,
            error_type=error.value,
        )
        if error is ErrorType.AGENT_NOT_FOUND:
            self._engine.mark_fatal(failure)
        return failure

    def _expect(self, entry: JournalEntry, *, kind: str, fingerprint: list[str], what: str) -> None:
        if entry.kind == kind and entry.fingerprint == fingerprint:
            return
        if entry.kind != kind:
            changed = "the call changed"
        elif kind == "step":
            changed = f"step {entry.fingerprint[0]!r} became {fingerprint[0]!r}"
        else:
            changed = _fingerprint_change(entry.fingerprint, fingerprint)
        raise NonDeterminismError(
            f"phase {self._spec.name!r} (phase {self._spec.number}), position {entry.position}: "
            f"the recorded run made {_describe(entry)}, this run makes {what} ({changed}); a "
            "phase must make the same asks and steps, in the same order, on replay; put "
            "anything that varies inside ctx.step, or 'orchestrate cancel' and run again",
            phase_name=self._spec.name,
            position=entry.position,
        )


def _failure_record(exc: BaseException) -> dict[str, str]:
    kind = type(exc)
    return {"type": f"{kind.__module__}:{kind.__qualname__}", "message": str(exc)}


def _recorded_failure(name: str, error: dict[str, str]) -> Exception:
    """The exception a step raised, made again from its record: its class with the
    recorded message when that class can be found and built from one string, else a
    :class:`StepFailedError` that says what it was."""
    import importlib

    module_name, _, qualname = error["type"].partition(":")
    message = error["message"]
    try:
        found: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
        if isinstance(found, type) and issubclass(found, Exception):
            rebuilt = found(message)
            if str(rebuilt) == message:
                return rebuilt
    except Exception:  # any failure to rebuild it falls back to StepFailedError
        pass
    return StepFailedError(
        f"step {name!r} failed when it ran: {error['type']}: {message}",
        step=name,
        error_type=error["type"],
    )


def _describe_pending(pending_ids: list[str]) -> str:
    if not pending_ids:
        return "no request is pending"
    if len(pending_ids) == 1:
        return f"the pending request is {pending_ids[0]}"
    return f"pending requests: {', '.join(pending_ids)}"


def _ask_fingerprint(ask: Ask) -> str:
    return f"{ask.agent} {prompt_digest(ask.prompt)}"


def _describe(entry: JournalEntry) -> str:
    if entry.kind == "step":
        return f"step {entry.fingerprint[0]!r}"
    agents = ", ".join(f.split(" ")[0] for f in entry.fingerprint)
    return f"{entry.kind} of {agents}"


def _describe_asks(kind: str, asks: Sequence[Ask]) -> str:
    return f"{kind} of {', '.join(a.agent for a in asks)}"


def _fingerprint_change(old: list[str], new: list[str]) -> str:
    if len(old) != len(new):
        return f"{len(old)} requests recorded, {len(new)} now"
    for index, (a, b) in enumerate(zip(old, new, strict=True)):
        if a != b:
            old_agent, old_hash = a.split(" ")
            new_agent, new_hash = b.split(" ")
            if old_agent != new_agent:
                return f"request {index}: agent {old_agent} became {new_agent}"
            return (
                f"request {index}: the prompt changed (sha256 {old_hash[:12]}... became "
                f"{new_hash[:12]}...)"
            )
    return "unchanged"


def confidence_of(response: AgentResponse) -> float | None:
    """The answer's confidence: the response metadata's, else the answer's own.

    The seed describes ``metadata.confidence`` as the "overall confidence score from
    response": a host may copy it out of the answer, or leave it there. An in-process
    invoker returns text only, so the answer's top-level ``overall_confidence`` (or
    ``confidence``) counts too. ``None`` when neither says.
    """
    if response.metadata is not None and response.metadata.confidence is not None:
        return response.metadata.confidence
    try:
        data = json.loads(response.response or "")
    except ValueError:
        return None
    if isinstance(data, dict):
        for key in ("overall_confidence", "confidence"):
            value = data.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
    return None


def _usable_confidence(response: AgentResponse | None) -> float | None:
    """The confidence an answer reported, for evidence: ``None`` for an error answer, or
    when it reported none, or one outside [0, 1] (not a confidence the seed can hold)."""
    if response is None or error_type_of(response) is not None:
        return None
    found = confidence_of(response)
    if found is None or not 0.0 <= found <= 1.0:  # NaN fails both comparisons
        return None
    return found


def _metadata_of(text: str) -> ResponseMetadata | None:
    """What an invoker's :class:`AgentAnswer` knows about the call, as response metadata
    (extra facts under ``x_`` keys)."""
    if not isinstance(text, AgentAnswer):
        return None
    extra = {f"x_{key}": value for key, value in text.facts.items()}
    if text.model is None and text.tokens_used is None and not extra:
        return None
    return ResponseMetadata(model=text.model, tokens_used=text.tokens_used, extra=extra)


def _copy(data: Any) -> Any:
    """A deep copy of JSON data, so recorded values never alias what user code holds."""
    if isinstance(data, (dict, list)):
        return json.loads(json.dumps(data))
    return data


def _random_uuid() -> str:
    import uuid  # only when an id is made: uuid's import is not free

    return str(uuid.uuid4())


def _seconds_since(start: datetime, end: datetime) -> float:
    return max(0.0, (end - start).total_seconds())


def _milliseconds_since(start: str | None, end: datetime) -> int | None:
    if start is None:
        return None
    return round(_seconds_since(parse_time(start), end) * 1000)


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


def to_json_value(value: Any, *, where: str) -> Any:
    """``value`` as plain JSON data (attrs instances unstructured); refuses what JSON can't hold."""
    data = unstructure(value) if attrs.has(type(value)) else value
    try:
        json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise RunFailedError(f"{where} cannot be stored as JSON: {exc}") from None
    return data


def load_record(state: CheckpointState, *, source: str) -> EngineRecord:
    """The engine's bookkeeping from a loaded state; a state it cannot resume is damaged."""
    raw = state.phase_data.get(ENGINE_KEY)
    if raw is None:
        raise StateDamagedError(
            f"there is no phase_data.{ENGINE_KEY}, so orchestrate did not write it",
            source=source,
            json_path=f"$.phase_data.{ENGINE_KEY}",
            rule="required",
        )
    for index, item in enumerate(state.agent_requests):
        if not item.x_archived and (item.x_request is None or item.x_position is None):
            raise StateDamagedError(
                "an agent_requests item lacks the engine's x_request/x_position",
                source=source,
                json_path=f"$.agent_requests[{index}]",
                rule="required",
            )
    try:
        return structure(raw, EngineRecord, source=source)
    except ContractError as exc:
        raise StateDamagedError.wrap(exc, path_prefix=f"$.phase_data.{ENGINE_KEY}") from None
