"""The recorder: the engine tells it what happened, it writes the run's evidence.

Events wait in an outbox kept in the engine's record (``phase_data.x_orchestrator``),
which every checkpoint saves. Once the state that holds them is durable, :meth:`publish`
writes the events the log lacks: their files first (a phase's ``results.json``, an agent
request's directory), then their lines in one durable append. So the log holds only
events of durable states, a replay after a crash makes the same events under the same
numbers, and an event in the log always has its files.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

import attrs

from .._ports import Bridge, Clock, EvidenceInput
from ..formats.bridge import (
    AgentRequest,
    AgentRequestRecord,
    CheckpointState,
    HistoryStatus,
    RecordIndex,
)
from ..formats.step_names import (
    EVENT_AGENT_END,
    EVENT_AGENT_START,
    EVENT_ARTIFACT_WRITTEN,
    EVENT_SKILL_END,
    EVENT_SKILL_START,
    EVENT_TOOL_CALL,
    EVENT_TOOL_RESULT,
    RESULTS_FILE,
    STATUS_PASS,
)
from ..formats.strict_json import dumps_canonical
from ..formats.times import format_time, parse_time
from ..storage.durable import sha256_hex
from .documents import (
    EVENT_AGENT_LATE_ANSWER,
    EVENT_RUN_END,
    EVENT_RUN_PAUSE,
    JOURNAL_FILE,
    agent_dir,
    agent_files,
    agent_outcome,
    answer_facts,
    event_line,
    phase_dir,
    results_document,
    usable_confidence,
)


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
    # A phase's journal, written as its ``journal.json`` with its ``results.json``.
    journal: list[dict[str, Any]] | None = None
    # The worker advancing the run when the event happened (a store's worker fleet).
    worker: str | None = None


class RunBook(Protocol):
    """The part of the engine's record the recorder keeps (saved with each checkpoint)."""

    run_id: str
    started_at: str
    # Whether this run writes evidence: a run started by a version without it does not.
    evidence: bool
    events: list[OutboxEvent]
    next_seq: int
    # Facts of the current phase told once (its start, a fallback, ...); cleared with it.
    marks: list[str]
    phase_started_at: str | None
    # The SHA-256 of each phase's ``journal.json``, by the phase's evidence directory.
    journals: dict[str, Any]
    # The run's trace context (``evidence.otel.new_trace_context``); None for older runs.
    trace: dict[str, Any] | None


class EventObserver(Protocol):
    """Told the events of a run once its log holds them, in order, each as its line reads
    (``x_seq``, ``ts``, ``event``, ``data``), with the run's trace context."""

    def published(
        self,
        run_id: str,
        records: Sequence[dict[str, Any]],
        *,
        trace: dict[str, Any] | None = None,
    ) -> None: ...


@attrs.frozen(kw_only=True)
class PhaseTally:
    """What a phase did, as the engine's journal says: the facts of its ``results.json``."""

    request_ids: tuple[str, ...] = ()
    steps: int = 0
    artifacts: tuple[dict[str, Any], ...] = ()
    journal: tuple[dict[str, Any], ...] = ()


class Recorder:
    """Queues the events of one run and publishes them once their state is durable."""

    def __init__(
        self, *, bridge: Bridge, clock: Clock, record_index: RecordIndex | None = None
    ) -> None:
        self.bridge = bridge
        self.clock = clock
        self._state: CheckpointState | None = None
        self._book: RunBook | None = None
        # The highest event number known to be in the run's log.
        self._published = 0
        # Of the state's requests by id: the engine's own, when it shares it.
        self._record_index = RecordIndex() if record_index is None else record_index
        #: The worker advancing the run (``orchestrate worker``): its events name it.
        self.worker: str | None = None
        #: Told each batch of events once the log holds them (live spans, see
        #: ``orchestrator.evidence.live_spans``); the CLI gives it when asked to.
        self.observer: EventObserver | None = None
        self._going: list[OutboxEvent] = []

    def attach(
        self,
        state: CheckpointState,
        book: RunBook,
        *,
        published: int = 0,
        record_index: RecordIndex | None = None,
    ) -> None:
        """Record for a state just made or loaded; what its log holds is asked on publish,
        unless ``published`` says (the :attr:`published` of a recorder of this process
        that had the same state). ``record_index``: the index of its requests that
        recorder kept, to go on with."""
        self._state, self._book = state, book
        self._published = published
        if record_index is not None:
            self._record_index = record_index

    @property
    def published(self) -> int:
        """The highest event number known to be in the run's log (0: not known)."""
        return self._published

    # -- the outbox -----------------------------------------------------------------------

    def emit(
        self,
        event: str,
        data: dict[str, Any],
        *,
        ts: str | None = None,
        request_id: str | None = None,
        results: dict[str, Any] | None = None,
        journal: list[dict[str, Any]] | None = None,
    ) -> int:
        """Queue an event in the outbox; the checkpoint that saves it publishes it."""
        book = self._require_book()
        if not book.evidence:
            return 0
        sequence = book.next_seq
        book.next_seq += 1
        book.events.append(
            OutboxEvent(
                seq=sequence,
                ts=ts or format_time(self.clock.now()),
                event=event,
                data={k: v for k, v in data.items() if v is not None},
                request_id=request_id,
                results=results,
                journal=journal,
                worker=self.worker,
            )
        )
        return sequence

    def mark(self, fact: str) -> bool:
        """True the first time ``fact`` is told in the current phase (replays included)."""
        marks = self._require_book().marks
        if fact in marks:
            return False
        marks.append(fact)
        return True

    def drop_published(self) -> None:
        """Before a checkpoint: the events the log already holds leave the outbox."""
        book = self._require_book()
        book.events = [e for e in book.events if e.seq > self._published]

    def unpublished(self) -> bool:
        return any(e.seq > self._published for e in self._require_book().events)

    def publish(self) -> None:
        """Write the outbox's events that the log lacks, with their output directories.

        Called only with the state that holds them durable, so the log holds exactly the
        events of durable states: a replay after a crash makes the same events again,
        under the same numbers, and the log's last number tells which it already has.
        Files go first, so an event in the log always has its files.
        """
        evidence = self.outgoing()
        if evidence is not None:
            self.bridge.write_evidence(evidence)
        self.sent()

    def outgoing(self) -> EvidenceInput | None:
        """What the log lacks of the outbox, as the bridge writes it: with the checkpoint
        that saves the outbox (:class:`SaveStateInput`), or by :meth:`publish`. Call
        :meth:`sent` once it is written."""
        book = self._require_book()
        if not book.events or book.events[-1].seq <= self._published:
            return None
        # Only this engine appends (it holds the instance): once it has published, it
        # knows the log's last number; after loading a state it asks the log.
        mark = self._published or self.bridge.evidence_mark(book.run_id)
        new = [e for e in book.events if e.seq > mark]
        if not new:
            return None
        self._going = new
        return EvidenceInput(
            run_id=book.run_id,
            files=self._evidence_files(new),
            lines=b"".join(event_line(e.seq, e.ts, e.event, e.data, e.worker) for e in new),
        )

    def sent(self) -> None:
        """The outbox's events are in the log (or on their way with a durable state)."""
        book = self._require_book()
        if book.events:
            self._published = max(self._published, book.events[-1].seq)
        going, self._going = self._going, []
        if self.observer is not None and going:
            self.observer.published(
                book.run_id,
                [{"x_seq": e.seq, "ts": e.ts, "event": e.event, "data": e.data} for e in going],
                trace=book.trace,
            )

    def _evidence_files(self, events: list[OutboxEvent]) -> list[tuple[str, bytes]]:
        """The files of ``events``: phases' results, and each agent request's directory as
        its record is now (its prompt from the start; its answer and results once ended)."""
        files: list[tuple[str, bytes]] = []
        ended: dict[str, None] = {}  # requests whose directory is (re)written, in order
        for event in events:
            if event.results is not None:
                where = f"{event.data['output_dir']}/{RESULTS_FILE}"
                files.append((where, dumps_canonical(event.results)))
            if event.journal is not None:
                where = f"{event.data['output_dir']}/{JOURNAL_FILE}"
                files.append((where, dumps_canonical({"entries": event.journal})))
            if event.request_id is not None and event.event != EVENT_AGENT_START:
                ended[event.request_id] = None
        records = self._records_by_id()
        for request_id in ended:
            item = records.get(request_id)
            if item is None or item.x_request is None or item.x_output_dir is None:
                continue
            files += agent_files(
                item,
                confidence=usable_confidence(item.x_response),
                phase_name=item.x_request.phase_name,
            )
        return files

    # -- what the engine tells --------------------------------------------------------------

    def agent_output_dir(self, agent_name: str) -> str | None:
        """Where a request about to be made keeps its files (none for a run without evidence)."""
        book = self._require_book()
        return agent_dir(book.next_seq, agent_name) if book.evidence else None

    def agent_start(self, request: AgentRequest, output_dir: str | None) -> None:
        context = request.context or {}
        self.emit(
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

    def agent_end(self, record: AgentRequestRecord, *, late: bool = False) -> None:
        """Tell how a request ended; ``late``: a request that ended already (timed out,
        retried) was answered after all, told once as ``agent.late_answer``, and its
        output directory is written again with the answer."""
        status, summary = agent_outcome(record)
        response = record.x_response
        confidence = usable_confidence(response)
        request = record.request()
        took = None
        if response is not None and response.duration_seconds is not None:
            took = round(response.duration_seconds * 1000)
        self.emit(
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

    def withdraw(self, records: Sequence[AgentRequestRecord], why: str) -> None:
        """Close the story of requests no answer will reach (the run ends without them)."""
        for record in records:
            if record.x_note is None:
                record.x_note = why
            self.agent_end(record)

    def pause(self, waiting: Sequence[str], *, until: str | None = None) -> None:
        """The run pauses for ``waiting`` requests, or (none) for a timer due ``until``."""
        state = self._require_state()
        self.emit(
            EVENT_RUN_PAUSE,
            {
                "phase": state.phase,
                "skill": state.phase_name,
                "waiting": list(waiting),
                "until": until,
            },
        )

    def run_end(
        self, status: str, *, failure: str | None = None, trace: dict[str, Any] | None = None
    ) -> None:
        book, state = self._require_book(), self._require_state()
        self.emit(
            EVENT_RUN_END,
            {
                "status": status,
                "duration_ms": milliseconds_since(book.started_at, self.clock.now()),
                "phases_completed": len(state.completed_phases),
                "failure": failure,
                "trace": trace,
            },
        )

    def open_phase(self, number: int, name: str, *, visit: int = 1) -> None:
        """Tell the phase's start (once per visit); ``visit``: 1 unless a route entered
        the phase again."""
        if self.mark("start"):
            book = self._require_book()
            book.phase_started_at = format_time(self.clock.now())
            data: dict[str, Any] = {
                "skill": name,
                "phase": number,
                "output_dir": phase_dir(number, name, visit),
            }
            if visit > 1:
                data["visit"] = visit
            self.emit(EVENT_SKILL_START, data, ts=book.phase_started_at)

    def close_phase(
        self,
        number: int,
        name: str,
        *,
        status: str,
        summary: str,
        tally: PhaseTally,
        visit: int = 1,
    ) -> None:
        """Tell the phase's end, with its ``results.json``; forget its marks."""
        book = self._require_book()
        records = self._records_by_id()
        confidences: list[float] = []
        for request_id in tally.request_ids:
            item = records.get(request_id)
            response = None if item is None else item.x_response
            usable = item is not None and item.status is HistoryStatus.COMPLETED
            found = usable_confidence(response) if usable else None
            confidences.append(0.0 if found is None else found)
        took = milliseconds_since(book.phase_started_at, self.clock.now())
        output_dir = phase_dir(number, name, visit)
        confidence = min(confidences, default=1.0) if status == STATUS_PASS else 0.0
        results = results_document(
            status=status,
            confidence=confidence,
            summary=summary,
            artifacts=list(tally.artifacts),
            metadata={
                "skill": name,
                "phase": number,
                "asks": len(tally.request_ids),
                "steps": tally.steps,
                "duration_ms": took,
            },
        )
        journal = list(tally.journal)
        self.emit(
            EVENT_SKILL_END,
            {
                "skill": name,
                "phase": number,
                "status": status,
                "confidence": confidence,
                "duration_ms": took,
                "summary": summary,
                "output_dir": output_dir,
            },
            results=results,
            journal=journal,
        )
        if book.evidence:  # the journal's file as it will be written, vouched for by the state
            book.journals[output_dir] = sha256_hex(dumps_canonical({"entries": journal}))
        book.marks = []
        book.phase_started_at = None

    def step(
        self,
        name: str,
        started: datetime,
        *,
        error: str | None,
        attempt: dict[str, Any] | None = None,
    ) -> None:
        """Tell a step's run (one attempt of it, when ``attempt`` gives its facts: its
        number, and what follows it) as ``tool.call`` and ``tool.result``."""
        skill = self._require_state().phase_name
        call: dict[str, Any] = {"tool": name, "skill": skill}
        if attempt is not None:
            call["attempt"] = attempt["attempt"]
        self.emit(EVENT_TOOL_CALL, call, ts=format_time(started))
        self.emit(
            EVENT_TOOL_RESULT,
            {
                "tool": name,
                "skill": skill,
                "status": "ok" if error is None else "error",
                "duration_ms": round(seconds_since(started, self.clock.now()) * 1000),
                "error": error,
                **(attempt or {}),
            },
        )

    def artifact(
        self, number: int, name: str, document: dict[str, Any], data: bytes, *, visit: int = 1
    ) -> dict[str, Any]:
        """Write a phase's artifact now (a replay writes the same file again) and queue its
        ``artifact.written``; returns its facts, with ``x_location`` relative to the run."""
        output_dir = phase_dir(number, name, visit)
        location = f"{output_dir}/{document['path']}"
        book = self._require_book()
        self.bridge.write_evidence(EvidenceInput(run_id=book.run_id, files=[(location, data)]))
        facts = {**document, "bytes": len(data), "sha256": sha256_hex(data)}
        self.emit(EVENT_ARTIFACT_WRITTEN, {**facts, "skill": name, "output_dir": output_dir})
        return {**facts, "x_location": location}

    # -- internals ----------------------------------------------------------------------

    def _require_book(self) -> RunBook:
        assert self._book is not None, "recorder has no run attached"
        return self._book

    def _require_state(self) -> CheckpointState:
        assert self._state is not None, "recorder has no state attached"
        return self._state

    def _records_by_id(self) -> dict[str, AgentRequestRecord]:
        return self._record_index.of(self._require_state().agent_requests)


def seconds_since(start: datetime, end: datetime) -> float:
    return max(0.0, (end - start).total_seconds())


def milliseconds_since(start: str | None, end: datetime) -> int | None:
    if start is None:
        return None
    return round(seconds_since(parse_time(start), end) * 1000)


def describe_duration(span: timedelta) -> str:
    """``90 s``, ``15 min``, ``3 h``, ``2 d 4 h``: a duration for a person."""
    seconds = round(span.total_seconds())
    if seconds < 120:
        return f"{seconds} s"
    minutes, _ = divmod(seconds, 60)
    if minutes < 120:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h" + (f" {minutes} min" if minutes else "")
    days, hours = divmod(hours, 24)
    return f"{days} d" + (f" {hours} h" if hours else "")
