"""The mailbox: the requests a run makes of agents, and the answers that come back.

A phase's ``ctx.ask`` opens requests here (:meth:`Mailbox.open_requests`); an answer
comes back from one of three places, the host's response files
(:meth:`Mailbox.accept_responses`), the in-process invoker, or the clock (a request
past its ``answer_within``), and each is recorded by one method,
:meth:`Mailbox.record_answer`, which settles the request (completed, failed, retried,
cancelled) and tells the recorder. ``ctx.ask`` reads every answer from the request
record that method settled: a replay reads the same records (see ``journal``).

Response files are consumed only after what they said is durably in the state, and a
response whose digest is already recorded is recognised as a crash leftover, so no
answer is ever applied twice.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from datetime import timedelta
from itertools import compress, repeat
from itertools import count as count_from
from typing import TYPE_CHECKING, Any

import attrs

from .._errors import AgentInvocationError, ResponseRejectedError
from .._ports import AgentAnswer, ConsumeInput, HostRequired, ReceivedResponse
from ..evidence.recorder import describe_duration, seconds_since
from ..formats.answer_gate import (
    MIN_CONFIDENCE_KEY,
    PREVIOUS_ERROR_KEY,
    SCHEMA_KEY,
    Refusal,
    check_answer,
)
from ..formats.answer_schema import answer_schema
from ..formats.bridge import (
    AgentRequest,
    AgentRequestRecord,
    AgentResponse,
    ErrorType,
    HistoryStatus,
    RecordIndex,
    RequestStatus,
    ResponseMetadata,
    record_edits,
)
from ..formats.bridge_codec import error_type_of
from ..formats.step_names import EVENT_ERROR
from ..formats.times import format_time, parse_time
from .record import JournalEntry
from .workflow import Ask, PhaseSpec

if TYPE_CHECKING:
    from .engine import Engine

#: What the mailbox learnt of a run, handed to the next engine: the index of its
#: requests by id, and (the requests, how many of the first are settled).
MailboxMemo = tuple[RecordIndex, tuple[Any, int]]


class Mailbox:
    """The engine's part that opens requests and records their answers.

    Reads the attached run through the engine's public ``state``, ``record``,
    ``journal``, ``recorder`` and ``save``; nothing else of the engine."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        #: The state's requests by id, kept as the list grows (shared with the recorder).
        self.record_index = RecordIndex()
        self._consumed: list[ReceivedResponse] = []
        #: response files refused at the gate, with why: set aside, never deleted
        self._rejected: list[tuple[ReceivedResponse, str]] = []
        #: what a person is told of the answers refused in this process, one line each
        self.refusals: list[str] = []
        # pending()'s last answer: (requests, their count, edit log, its length, pending)
        self._pending_kept: tuple[Any, int, list[Any], int, list[AgentRequestRecord]] | None = None
        # (requests, how many of the first are settled): see pending()
        self._settled: tuple[Any, int] = (None, 0)

    # -- what is waiting ------------------------------------------------------------------

    def pending(self) -> list[AgentRequestRecord]:
        """The requests still waiting for an answer, in the order they were made.

        Asked several times a cycle; the answer is kept while the list has the same
        items and no request was edited since (the engine appends requests and assigns
        their fields, see ``record_edits``), and otherwise found at C speed from the
        first request that waited last time: the engine only appends to the list, and a
        request answered, failed or withdrawn never waits again, so a long run's
        thousand settled requests are not looked at again."""
        requests = self._engine.state.agent_requests
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

    def records_by_id(self) -> dict[str, AgentRequestRecord]:
        """The state's requests by id (do not change the map)."""
        return self.record_index.of(self._engine.state.agent_requests)

    def records_of(self, entry: JournalEntry) -> list[AgentRequestRecord]:
        """The requests of a journaled ask, in the order it made them: what ``ctx.ask``
        reads its answers from."""
        by_id = self.records_by_id()
        return [by_id[request_id] for request_id in entry.request_ids]

    # -- asking ---------------------------------------------------------------------------

    def open_requests(
        self,
        spec: PhaseSpec,
        position: int,
        asks: Sequence[Ask],
        *,
        kind: str,
        fingerprint: list[str],
    ) -> JournalEntry:
        """Make one request per ask, journal them at ``position``, and ask the in-process
        invoker, if any; returns the journal entry (a retry may have replaced it)."""
        engine = self._engine
        now = format_time(engine.clock.now())
        entry = JournalEntry(position=position, kind=kind, fingerprint=fingerprint)
        records = []
        for ask in asks:
            request = self._request_of(spec, ask, now)
            within = None if ask.answer_within is None else ask.answer_within.total_seconds()
            records.append(
                self._new_record(
                    request, position=position, max_retries=ask.retries, answer_within=within
                )
            )
            entry.request_ids.append(request.request_id)
        engine.journal.append(entry)
        if engine.invoker is not None and self._invoke_in_process(records):
            engine.save("after_agent_invocation")
            engine.stop_if_requested()
            return engine.journal.entry(position) or entry  # a retry put a new one in its place
        return entry

    def _request_of(self, spec: PhaseSpec, ask: Ask, now: str) -> AgentRequest:
        state, record = self._engine.state, self._engine.record
        context = dict(ask.context or {})
        context.setdefault("output_path", state.output_path)
        if state.project_path is not None:
            context.setdefault("project_path", state.project_path)
        if state.template_name is not None:
            context.setdefault("template_name", state.template_name)
        context["x_run_id"] = record.run_id
        if ask.output_type is not None:
            schema = answer_schema(ask.output_type)
            if schema is not None:  # what shape the answer must have, for hosts to check
                context.setdefault(SCHEMA_KEY, schema)
        if ask.min_confidence is not None:
            context.setdefault(MIN_CONFIDENCE_KEY, ask.min_confidence)
        return AgentRequest(
            request_id=self._engine.new_id(),
            phase=spec.number,
            phase_name=spec.name,
            agent_name=ask.agent,
            prompt=ask.prompt,
            created_at=now,
            context=context,
            timeout_seconds=ask.timeout_seconds,
        )

    def _new_record(
        self,
        request: AgentRequest,
        *,
        position: int,
        max_retries: int | None = None,
        answer_within: float | None = None,
    ) -> AgentRequestRecord:
        recorder = self._engine.recorder
        output_dir = recorder.agent_output_dir(request.agent_name)
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
        self._engine.state.agent_requests.append(record)
        recorder.agent_start(request, output_dir)
        return record

    def _invoke_in_process(self, records: list[AgentRequestRecord]) -> bool:
        """Answer ``records`` through the in-process invoker; False if it defers to the host."""
        answered = False
        for record in records:
            current: AgentRequestRecord | None = record
            while current is not None:
                request = current.request()
                refused = PREVIOUS_ERROR_KEY in (request.context or {})
                if request.retry_count and not refused:  # a retry: wait as the policy says
                    self._wait(self._engine.workflow_cls.policy().delay(request.retry_count))
                try:
                    response = self._invoke(request)
                except HostRequired:
                    return answered
                answered = True
                current = self.record_answer(current, response, digest=None)
        return answered

    def _invoke(self, request: AgentRequest) -> AgentResponse:
        """The invoker's answer to ``request`` (an error answer when it fails)."""
        invoker, clock = self._engine.invoker, self._engine.clock
        assert invoker is not None
        started = clock.now()
        try:
            text = invoker.invoke(
                request.agent_name,
                request.prompt,
                request.timeout_seconds,
                context=request.context,
            )
        except AgentInvocationError as exc:
            return AgentResponse(
                request_id=request.request_id,
                status=RequestStatus.TIMEOUT
                if exc.error_type == ErrorType.TIMEOUT.value
                else RequestStatus.ERROR,
                created_at=format_time(clock.now()),
                error_type=ErrorType(exc.error_type),
                error_message=str(exc),
                duration_seconds=seconds_since(started, clock.now()),
            )
        return AgentResponse(
            request_id=request.request_id,
            status=RequestStatus.SUCCESS,
            created_at=format_time(clock.now()),
            response=str(text),
            duration_seconds=seconds_since(started, clock.now()),
            metadata=_metadata_of(text),
        )

    def _wait(self, seconds: float) -> None:
        """Wait on the engine's clock (a test's clock moves at once)."""
        sleep = getattr(self._engine.clock, "sleep", None)
        if sleep is None:
            import time

            sleep = time.sleep
        sleep(seconds)

    # -- answers from the host ------------------------------------------------------------

    def accept_responses(self, received: Sequence[ReceivedResponse]) -> bool:
        """Judge every response before changing anything, then record them all."""
        fresh: dict[str, tuple[AgentRequestRecord, ReceivedResponse]] = {}
        late: dict[str, AgentRequestRecord] = {}  # answered request id -> its pending retry
        pending_ids = [r.request_id for r in self.pending()]
        records = self.records_by_id()
        for item in received:
            record = records.get(item.response.request_id)
            if record is None:
                raise ResponseRejectedError(
                    f"{item.source}: request_id {item.response.request_id} matches no request "
                    f"of this instance ({_describe_pending(pending_ids)}); the file was left "
                    "as it is: remove it, or correct its request_id, then resume",
                    path=item.source,
                    reason="foreign",
                )
            if record.status is not HistoryStatus.PENDING:
                self._judge_answered(record, item, fresh, late, pending_ids)
            else:
                self._judge_pending(record, item, fresh, pending_ids)
        # In the order the requests were made, not the order the files were found: the
        # story (and the ids of retries) must not depend on what the host named its files.
        answered = list(fresh.values())
        if len(answered) > 1:
            requests = self._engine.state.agent_requests
            order = {r.request_id: index for index, r in enumerate(requests)}
            answered.sort(key=lambda pair: order[pair[0].request_id])
        for record, item in answered:
            retry = late.get(record.request_id)
            if retry is not None:
                self._supersede(retry, answered=record)
            again = self.record_answer(record, item.response, digest=item.sha256)
            if record.x_refused is None:
                self._consumed.append(item)
                continue
            self._rejected.append((item, record.x_refused["message"]))
            then = f"asked again as {again.request_id}" if again else "no attempt is left"
            self.refusals.append(
                f"{item.source}: the answer to {record.request_id} was refused, "
                f"{record.x_refused['message']}; the file was set aside; {then}"
            )
        return bool(fresh)

    def _judge_answered(
        self,
        record: AgentRequestRecord,
        item: ReceivedResponse,
        fresh: dict[str, tuple[AgentRequestRecord, ReceivedResponse]],
        late: dict[str, AgentRequestRecord],
        pending_ids: list[str],
    ) -> None:
        """A response to a request that is no longer pending: a crash's leftover, a late
        answer to a retried request, or a stale one (refused)."""
        if record.x_response_sha256 == item.sha256:  # left behind by a crash after recording
            if record.x_refused is None:
                self._consumed.append(item)
            else:
                self._rejected.append((item, record.x_refused["message"]))
            return
        retry = self._pending_retry_of(record, item.response)
        refusal = None if retry is None else check_answer(record.request(), item.response)
        if retry is not None and refusal is not None:  # wrong again: aside, the retry waits
            self._rejected.append((item, refusal.line()))
            self.refusals.append(
                f"{item.source}: the answer to {record.request_id} was refused, "
                f"{refusal.line()}; the file was set aside; {retry.request_id} still waits"
            )
            return
        taken = {r.request_id for r in late.values()}
        if retry is not None and retry.request_id not in taken:
            late[record.request_id] = retry
            fresh[record.request_id] = (record, item)
            return
        raise ResponseRejectedError(
            f"{item.source}: request {record.request_id} was already answered "
            f"({record.status.value}); this response is stale "
            f"({_describe_pending(pending_ids)}); the file was left as it is: remove it (or "
            "answer a pending request), then resume",
            path=item.source,
            reason="stale",
        )

    def _judge_pending(
        self,
        record: AgentRequestRecord,
        item: ReceivedResponse,
        fresh: dict[str, tuple[AgentRequestRecord, ReceivedResponse]],
        pending_ids: list[str],
    ) -> None:
        """A response to a pending request: taken, unless misaddressed or in conflict
        with another response to the same request."""
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
        if earlier is None:
            fresh[record.request_id] = (record, item)
            return
        if earlier[1].sha256 == item.sha256:
            self._consumed.append(item)  # the same answer in both places
            return
        raise ResponseRejectedError(
            f"{item.source} and {earlier[1].source} give two different answers to "
            f"request {record.request_id}; remove the wrong one, then resume",
            path=item.source,
            reason="conflicting",
        )

    def _pending_retry_of(
        self, record: AgentRequestRecord, response: AgentResponse
    ) -> AgentRequestRecord | None:
        """The still-pending retry of ``record``, when a successful answer to ``record``
        arrives late (after it timed out and was retried); ``None`` otherwise."""
        if record.status is not HistoryStatus.RETRIED or error_type_of(response) is not None:
            return None
        asked = record.request()
        for candidate in self.pending():
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
        self._engine.journal.repoint(retry.request_id, answered.request_id)
        self._engine.recorder.agent_end(retry)

    def expire_overdue(self) -> bool:
        """A pending request past the ``answer_within`` its ask set counts as a TIMEOUT
        answer. Without one, a request waits for its host as long as it takes."""
        now = self._engine.clock.now()
        expired = False
        for record in self.pending():
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
                self.record_answer(record, timeout, digest=None)
                expired = True
        return expired

    # -- the one way an answer is recorded --------------------------------------------------

    def record_answer(
        self, record: AgentRequestRecord, response: AgentResponse, *, digest: str | None
    ) -> AgentRequestRecord | None:
        """Record ``response`` for ``record`` (from the host, the invoker or the clock);
        return the retry request if the policy made one."""
        late = record.status is HistoryStatus.RETRIED  # it ended once already
        refusal = None if late else check_answer(record.request(), response)
        record.x_response = response
        record.x_response_sha256 = digest
        record.status = self._settled_status(record, response, refusal)
        recorder = self._engine.recorder
        if late:  # an answer that passed the gate (a corrected one, after a refusal)
            record.x_refused = None
            recorder.agent_end(record, late=True)
            return None
        if refusal is not None:  # the answer stays recorded, with why it was refused
            record.x_refused = refusal.as_json()
            record.x_note = f"{refusal.error_type}: the answer was refused: {refusal.line()}"
        if record.status is not HistoryStatus.RETRIED:
            recorder.agent_end(record)
            self._tell_refusal(record, refusal)
            return None
        retry_id = self._engine.new_id()
        record.x_note = (
            f"retried as {retry_id}"
            if refusal is None
            else f"the answer was refused ({refusal.line()}); asked again as {retry_id}"
        )
        recorder.agent_end(record)  # before the retry's start, as it happened
        self._tell_refusal(record, refusal)
        return self._retry(record, retry_id, refusal)

    def _tell_refusal(self, record: AgentRequestRecord, refusal: Refusal | None) -> None:
        """An ``error`` event for an answer refused at the gate: the answer came (its
        ``agent.end`` says so) and could not be used."""
        if refusal is None:
            return
        self._engine.recorder.emit(
            EVENT_ERROR,
            {
                "skill": record.request().phase_name,
                "agent": record.agent_name,
                "request_id": record.request_id,
                "error_type": refusal.error_type,
                "message": refusal.line(),
            },
            request_id=record.request_id,
        )

    def _settled_status(
        self, record: AgentRequestRecord, response: AgentResponse, refusal: Refusal | None
    ) -> HistoryStatus:
        """Completed, cancelled, retried or failed. An answer refused at the gate is
        asked again within the policy's attempts whatever its ``retry_on``: a wrong shape
        is the answerer's slip, told back to it, as structured-output retries do."""
        error = error_type_of(response)
        if error is None and refusal is None:
            return HistoryStatus.COMPLETED
        if response.status is RequestStatus.CANCELLED:
            return HistoryStatus.CANCELLED
        policy = self._engine.workflow_cls.policy()
        limit = policy.attempts - 1 if record.x_max_retries is None else record.x_max_retries
        again = refusal is not None or (error is not None and error.value in policy.retry_on)
        if again and record.request().retry_count < limit:
            return HistoryStatus.RETRIED
        return HistoryStatus.FAILED

    def _retry(
        self, record: AgentRequestRecord, request_id: str, refusal: Refusal | None
    ) -> AgentRequestRecord:
        old = record.request()
        context = dict(old.context or {})
        context.pop(PREVIOUS_ERROR_KEY, None)
        if refusal is not None:  # the answerer is told what was wrong with its answer
            context[PREVIOUS_ERROR_KEY] = refusal.as_json()
        request = attrs.evolve(
            old,
            request_id=request_id,
            created_at=format_time(self._engine.clock.now()),
            retry_count=old.retry_count + 1,
            context=context if context or old.context is not None else None,
        )
        retry = self._new_record(
            request,
            position=record.x_position or 0,
            max_retries=record.x_max_retries,
            answer_within=record.x_answer_within,
        )
        self._engine.journal.repoint(record.request_id, request.request_id)
        return retry

    # -- response files ---------------------------------------------------------------------

    @property
    def consumed_any(self) -> bool:
        """Whether answers were recorded whose response files are still to be removed
        (or, refused, set aside)."""
        return bool(self._consumed or self._rejected)

    def flush_consumed(self) -> None:
        """Remove the response files whose answers the saved state holds; set aside those
        it holds as refused."""
        if self._consumed or self._rejected:
            self._engine.bridge.consume(
                ConsumeInput(consumed=tuple(self._consumed), rejected=tuple(self._rejected))
            )
            self._consumed = []
            self._rejected = []

    def forget_consumed(self) -> None:
        """The run ended and its files went with it: nothing left to remove."""
        self._consumed = []
        self._rejected = []

    # -- handed from one engine to the next ------------------------------------------------

    def memo(self) -> MailboxMemo:
        """What this part learnt of the run, for the next engine (``PauseHandoff``)."""
        return self.record_index, self._settled

    def take_memo(self, memo: MailboxMemo) -> None:
        self.record_index, self._settled = memo


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


_status_of = operator.attrgetter("status")
