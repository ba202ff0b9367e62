"""One conformance suite for the ``RunStore`` port, run against every adapter.

The work directory's files and the PostgreSQL store (in a schema of this session's own)
must keep the same promises to the faces: a run that pauses lists as paused with its
pending requests; an answer is seen as answered and reaches the run; a request not
pending is refused and nothing is written; a run ends, is cancelled, is read back; a run
the store does not hold is an error naming the store and the run. Where the two differ
today (a second answer to one request; queued runs), each adapter states what it does.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from orchestrator import Engine, Workflow, phase
from orchestrator._errors import AnswerRefusedError, NoInstanceError, UsageError
from orchestrator._ports import (
    ListRunsInput,
    OpenRunInput,
    PendingInput,
    QueueRunInput,
    ReadEventsInput,
    ReadSignalsInput,
    RespondInput,
    RunFileInput,
    RunInput,
    RunStore,
    SendSignalInput,
)
from orchestrator.formats.bridge_codec import parse_response
from orchestrator.testing import FakeClock

PROMPT = (
    "You are a writer of short lines. Write one line about the sea, in plain words, and "
    "answer with that line alone."
)


class Question(Workflow):
    name = "run-store-conformance"
    agents = ("writer",)

    @phase(1)
    def write(self, ctx: Any) -> dict[str, Any]:
        return {"text": ctx.ask("writer", PROMPT)}


@attrs.define
class Subject:
    """A store under test, the work directory its runs start in, and what it does where
    the adapters differ today."""

    store: RunStore
    workdir: Path
    #: whether runs can be left for a worker (``run --queue``)
    queues: bool


@pytest.fixture(params=["files", "postgres"])
def subject(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Subject]:
    if request.param == "files":
        from orchestrator.adapters.file_runs import FileRunStore

        yield Subject(
            store=FileRunStore(tmp_path),
            workdir=tmp_path,
            queues=False,
        )
        return
    from orchestrator.adapters.postgres.runs import PostgresRunStore

    store = PostgresRunStore(request.getfixturevalue("pg_dsn"))
    try:
        yield Subject(store=store, workdir=tmp_path, queues=True)
    finally:
        store.close()


def engine(subject: Subject, run_id: str) -> Engine:
    bridge = subject.store.bridge(OpenRunInput(run_id=run_id, workflow_name=Question.name))
    return Engine(Question, bridge=bridge, clock=FakeClock())


def started(subject: Subject) -> tuple[str, str]:
    """A run started and paused on its one request: its id and the request's."""
    run_id = str(uuid.uuid4())
    outcome = engine(subject, run_id).start(
        workflow_ref="tests:Question", workdir=subject.workdir, run_id=run_id
    )
    assert outcome.status == "paused", outcome.message
    (request,) = outcome.pending
    return run_id, request.request_id


def answer(request_id: str, text: str) -> Any:
    document = {
        "request_id": request_id,
        "version": "1.0",
        "status": "success",
        "response": text,
        "created_at": "2025-11-18T10:31:45Z",
    }
    return parse_response(document, source="test")


def test_a_paused_run_lists_as_paused_with_its_pending_request(subject: Subject) -> None:
    run_id, request_id = started(subject)
    (listed,) = [r for r in subject.store.list_runs(ListRunsInput()) if r.run_id == run_id]
    assert (listed.workflow, listed.status, listed.pending) == (Question.name, "paused", 1)
    assert listed.updated_at.tzinfo is not None
    (waiting,) = subject.store.pending(PendingInput(run_id=run_id))
    assert (waiting.run_id, waiting.request_id) == (run_id, request_id)
    assert b"Write one line about the sea" in waiting.document
    every = subject.store.pending(PendingInput())
    assert request_id in {p.request_id for p in every}
    paused = subject.store.list_runs(ListRunsInput(status=("paused",)))
    assert run_id in {r.run_id for r in paused}
    assert run_id not in {r.run_id for r in subject.store.list_runs(ListRunsInput(status=("x",)))}


def test_a_live_run_reads_back_with_its_state_and_workflow(subject: Subject) -> None:
    run_id, request_id = started(subject)
    run = subject.store.read_run(RunInput(run_id=run_id))
    assert (run.run_id, run.workflow_name, run.status, run.live) == (
        run_id,
        Question.name,
        "paused",
        True,
    )
    assert run.state is not None and run.state.phase_name == "write"
    assert [r.request_id for r in run.state.agent_requests] == [request_id]
    assert subject.store.workflow_of(RunInput(run_id=run_id)) == "tests:Question"
    assert subject.store.answered(RunInput(run_id=run_id)) == frozenset()


def test_an_answer_is_seen_as_answered_then_reaches_the_run(subject: Subject) -> None:
    run_id, request_id = started(subject)
    receipt = subject.store.respond(
        RespondInput(run=RunInput(run_id=run_id), response=answer(request_id, "Waves."))
    )
    assert receipt
    assert subject.store.answered(RunInput(run_id=run_id)) == {request_id}
    outcome = engine(subject, run_id).resume()
    assert outcome.status == "completed", outcome.message
    assert outcome.outputs == {"write": {"text": "Waves."}}
    run = subject.store.read_run(RunInput(run_id=run_id))
    assert (run.status, run.live) == ("completed", False)
    assert run.state is not None and run.state.phase_data["write"] == {"text": "Waves."}
    assert subject.store.pending(PendingInput(run_id=run_id)) == []
    (listed,) = [r for r in subject.store.list_runs(ListRunsInput()) if r.run_id == run_id]
    assert (listed.status, listed.pending) == ("completed", 0)


def test_the_first_answer_wins_on_every_store(subject: Subject) -> None:
    run_id, request_id = started(subject)
    run = RunInput(run_id=run_id)
    subject.store.respond(RespondInput(run=run, response=answer(request_id, "First.")))
    with pytest.raises(AnswerRefusedError, match="has an answer already") as refused:
        subject.store.respond(RespondInput(run=run, response=answer(request_id, "Second.")))
    assert refused.value.reason == "answered" and len(refused.value.details["sha256"]) == 64
    assert subject.store.answered(run) == {request_id}
    outcome = engine(subject, run_id).resume()
    assert outcome.outputs == {"write": {"text": "First."}}


def test_an_answer_to_a_request_not_pending_is_refused_and_nothing_is_written(
    subject: Subject,
) -> None:
    run_id, request_id = started(subject)
    other = "00000000-0000-4000-8000-0000000000ff"
    with pytest.raises(UsageError, match=f"{other} is not pending"):
        subject.store.respond(
            RespondInput(run=RunInput(run_id=run_id), response=answer(other, "Lost."))
        )
    assert subject.store.answered(RunInput(run_id=run_id)) == frozenset()
    assert [p.request_id for p in subject.store.pending(PendingInput(run_id=run_id))] == [
        request_id
    ]


def test_a_started_run_is_cancelled_by_its_engine_and_reads_as_cancelled(
    subject: Subject,
) -> None:
    run_id, _ = started(subject)
    assert subject.store.cancel_queued(RunInput(run_id=run_id)) is False  # it has started
    engine(subject, run_id).cancel()
    run = subject.store.read_run(RunInput(run_id=run_id))
    assert (run.status, run.live) == ("cancelled", False)
    assert subject.store.pending(PendingInput(run_id=run_id)) == []


def test_a_queued_run_is_cancelled_by_the_store_or_queueing_is_refused(subject: Subject) -> None:
    run_id = str(uuid.uuid4())
    queued = QueueRunInput(
        run_id=run_id,
        workflow_name=Question.name,
        workflow_ref="tests:Question",
        start_args={"inputs": {}, "output_path": None, "workdir": str(subject.workdir)},
    )
    if not subject.queues:
        with pytest.raises(UsageError, match="--store"):
            subject.store.queue_run(queued)
        return
    subject.store.queue_run(queued)
    run = subject.store.read_run(RunInput(run_id=run_id))
    assert (run.status, run.state, run.workflow_ref) == ("queued", None, "tests:Question")
    assert run.start_args == queued.start_args
    assert subject.store.workflow_of(RunInput(run_id=run_id)) == "tests:Question"
    assert subject.store.cancel_queued(RunInput(run_id=run_id)) is True
    (listed,) = [r for r in subject.store.list_runs(ListRunsInput()) if r.run_id == run_id]
    assert listed.status == "cancelled"


@pytest.mark.parametrize(
    "read",
    [
        lambda store, run_id: store.read_run(RunInput(run_id=run_id)),
        lambda store, run_id: store.pending(PendingInput(run_id=run_id)),
        lambda store, run_id: store.respond(
            RespondInput(
                run=RunInput(run_id=run_id),
                response=answer("00000000-0000-4000-8000-000000000001", "x"),
            )
        ),
    ],
    ids=["read", "pending", "respond"],
)
def test_a_run_the_store_does_not_hold_is_an_error_naming_the_store_and_the_run(
    subject: Subject, read: Any
) -> None:
    missing = "no-such-run-0123"
    with pytest.raises(NoInstanceError) as caught:
        read(subject.store, missing)
    assert subject.store.name in str(caught.value)
    assert missing in str(caught.value)


def test_events_and_evidence_files_read_back(subject: Subject) -> None:
    run_id, request_id = started(subject)
    subject.store.respond(
        RespondInput(run=RunInput(run_id=run_id), response=answer(request_id, "Foam."))
    )
    engine(subject, run_id).resume()
    events = subject.store.events(ReadEventsInput(run_id=run_id))
    seqs = [seq for seq, _ in events]
    assert seqs and seqs == sorted(seqs) and all(line.endswith(b"\n") for _, line in events)
    assert b"run.end" in events[-1][1]
    later = subject.store.events(ReadEventsInput(run_id=run_id, after=seqs[0]))
    assert later == events[1:]
    files = subject.store.run_files(RunInput(run_id=run_id))
    assert "events.ndjson" in files
    logged = subject.store.read_run_file(RunFileInput(run_id=run_id, path="events.ndjson"))
    assert logged == b"".join(line for _, line in events)
    assert subject.store.read_run_file(RunFileInput(run_id=run_id, path="../x")) is None
    assert subject.store.read_run_file(RunFileInput(run_id=run_id, path="absent.json")) is None


def test_the_store_names_a_run_to_the_commands(subject: Subject) -> None:
    run_id, _ = started(subject)
    arguments = subject.store.command_arguments(run_id)
    assert arguments[0] in ("--workdir", "--store")
    assert subject.store.name


class Signalled(Workflow):
    name = "run-store-signals"
    agents = ()

    @phase(1)
    def wait(self, ctx: Any) -> dict[str, Any]:
        return {"first": ctx.wait_for_signal("go"), "rest": ctx.signals("go")}


def test_signals_are_kept_in_order_once_each_and_reach_the_run(subject: Subject) -> None:
    run_id = str(uuid.uuid4())
    opened = OpenRunInput(run_id=run_id, workflow_name=Signalled.name)
    outcome = Engine(Signalled, bridge=subject.store.bridge(opened), clock=FakeClock()).start(
        workflow_ref="tests:Signalled", workdir=subject.workdir, run_id=run_id
    )
    assert (outcome.status, outcome.signal, outcome.pending) == ("paused", "go", ())
    run = RunInput(run_id=run_id)

    def send(payload: Any, signal_id: str | None) -> str:
        sent = SendSignalInput(run=run, name="go", payload=payload, signal_id=signal_id)
        return subject.store.send_signal(sent)

    assert send(1, "first") == "first"
    assert send(1, "first") == "first"  # sent again: kept once
    assert send(2, "second") == "second"
    made = send({"x": 3}, None)
    kept = subject.store.bridge(opened).read_signals(ReadSignalsInput(run_id=run_id))
    assert [(s.signal_id, s.payload) for s in kept] == [
        ("first", 1),
        ("second", 2),
        (made, {"x": 3}),
    ]
    done = Engine(Signalled, bridge=subject.store.bridge(opened), clock=FakeClock()).resume()
    assert done.status == "completed", done.message
    assert done.outputs == {"wait": {"first": 1, "rest": [2, {"x": 3}]}}
    with pytest.raises(NoInstanceError):
        send(4, None)
