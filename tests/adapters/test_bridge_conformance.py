"""One conformance suite for the ``Bridge`` port, run against every adapter.

The file bridge (the agent bridge files in a directory) and the in-memory bridge must behave
alike: state round trips, the host's mailbox, refusals that consume nothing, the
exclusive lock, the end of a run, and a whole workflow driven through them.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator import (
    CheckpointState,
    Engine,
    InstanceBusyError,
    ResponseRejectedError,
    Workflow,
    phase,
)
from orchestrator._errors import NoInstanceError
from orchestrator._ports import (
    ConsumeInput,
    FinishInput,
    PublishInput,
    ReadSignalsInput,
    SaveStateInput,
)
from orchestrator.adapters.file_bridge import FileBridge
from orchestrator.adapters.memory import MemoryBridge
from orchestrator.testing import FakeClock, SequentialIds

REQUEST_ID = "00000000-0000-4000-8000-000000000001"


class Adapter:
    """A bridge under test and how a host leaves an answer for it."""

    def __init__(
        self,
        bridge: Any,
        answer: Callable[[str, bytes], None],
        run_id: str | None = None,
        reopen: Callable[[], Any] | None = None,
    ) -> None:
        self.bridge = bridge
        self.answer = answer
        self.run_id = run_id  # the id a run must have: a database store keys the bridge by it
        # A new bridge on the same store, as the next process would open (the memory
        # bridge is its own store: the same one).
        self.reopen = reopen or (lambda: bridge)


@pytest.fixture(params=["file", "memory", "postgres"])
def new_adapter(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Adapter]]:
    """Makes an adapter of one kind, each on an empty store of its own."""
    made: list[Iterator[Adapter]] = []

    def make() -> Adapter:
        if request.param == "postgres":
            maker = postgres_adapter(request.getfixturevalue("pg_dsn"))
        elif request.param == "file":
            maker = file_adapter(tmp_path / f"store-{len(made)}")
        else:
            maker = memory_adapter()
        made.append(maker)
        return next(maker)

    yield make
    for maker in made:
        next(maker, None)  # its clean-up


@pytest.fixture
def adapter(new_adapter: Callable[[], Adapter]) -> Adapter:
    return new_adapter()


def file_adapter(workdir: Path) -> Iterator[Adapter]:
    workdir.mkdir()

    def answer_file(request_id: str, raw: bytes) -> None:
        target = workdir / ".agent-responses" / f"{request_id}.json"
        target.parent.mkdir(exist_ok=True)
        target.write_bytes(raw)

    bridge = FileBridge(workdir, "conformance")
    yield Adapter(bridge, answer_file, reopen=lambda: FileBridge(workdir, "conformance"))


def memory_adapter() -> Iterator[Adapter]:
    memory = MemoryBridge("conformance")
    yield Adapter(memory, lambda request_id, raw: memory.answer(raw, source=request_id))


def postgres_adapter(dsn: str) -> Iterator[Adapter]:
    """A run of its own in the session's store; a host answers by leaving a row, as raw
    as a file (the bridge judges it), which counts up the run's inbox."""
    from orchestrator.adapters.postgres.store import PostgresStore

    run_id = uuid.uuid4().hex
    store = PostgresStore(dsn)

    def answer_row(request_id: str, raw: bytes) -> None:
        with store.conn.transaction():
            store.conn.execute(
                "insert into runs (run_id, workflow_name, workflow_ref, status) "
                "values (%s, 'conformance', 'tests:Tides', 'queued') on conflict do nothing",
                (run_id,),
            )
            store.conn.execute(
                "insert into responses (run_id, request_id, document, sha256) "
                "values (%s, %s, %s, %s)",
                (run_id, request_id, raw, hashlib.sha256(raw).hexdigest()),
            )
            store.conn.execute("update runs set inbox = inbox + 1 where run_id = %s", (run_id,))

    try:
        yield Adapter(store.bridge(run_id), answer_row, run_id, lambda: store.bridge(run_id))
    finally:
        store.close()


def a_state() -> CheckpointState:
    return CheckpointState(
        phase=1,
        phase_name="only",
        checkpoint_name="started",
        created_at="2025-11-18T10:30:00Z",
        output_path="/out",
        phase_data={"x_orchestrator": {"note": "kept"}, "only": [1, 2, 3]},
    )


def response_bytes(request_id: str = REQUEST_ID, **fields: Any) -> bytes:
    document = {
        "request_id": request_id,
        "version": "1.0",
        "status": "success",
        "response": "an answer",
        "created_at": "2025-11-18T10:31:45Z",
        **fields,
    }
    return json.dumps(document).encode()


def test_no_instance_until_saved(adapter: Adapter) -> None:
    assert not adapter.bridge.exists()
    with pytest.raises(NoInstanceError):
        adapter.bridge.load_state()


def test_a_run_with_no_signal_reads_an_empty_inbox(adapter: Adapter) -> None:
    run_id = adapter.run_id or uuid.uuid4().hex
    assert adapter.bridge.read_signals(ReadSignalsInput(run_id=run_id)) == []


def test_state_round_trips(adapter: Adapter) -> None:
    adapter.bridge.save_state(SaveStateInput(state=a_state()))
    assert adapter.bridge.exists()
    assert adapter.bridge.load_state() == a_state()


def test_responses_are_read_then_consumed(adapter: Adapter) -> None:
    assert adapter.bridge.read_responses() == []
    raw = response_bytes()
    adapter.answer(REQUEST_ID, raw)
    (received,) = adapter.bridge.read_responses()
    assert received.response.request_id == REQUEST_ID
    assert received.response.response == "an answer"
    assert received.sha256 == hashlib.sha256(raw).hexdigest()
    assert adapter.bridge.read_responses() == [received]  # reading consumes nothing
    adapter.bridge.consume(ConsumeInput(consumed=[received]))
    assert adapter.bridge.read_responses() == []


@pytest.mark.parametrize(
    "raw",
    [b"{not json", response_bytes(status="maybe"), response_bytes(version="2.0")],
    ids=["syntax", "enum", "major-version"],
)
def test_a_bad_response_is_refused_and_left_in_place(adapter: Adapter, raw: bytes) -> None:
    adapter.answer(REQUEST_ID, raw)
    with pytest.raises(ResponseRejectedError):
        adapter.bridge.read_responses()
    with pytest.raises(ResponseRejectedError):
        adapter.bridge.read_responses()  # still there, still refused


def test_the_lock_is_exclusive(adapter: Adapter) -> None:
    with adapter.bridge.lock(), pytest.raises(InstanceBusyError), adapter.bridge.lock():
        pass  # pragma: no cover
    with adapter.bridge.lock():
        pass  # released: can be taken again


def test_finish_keeps_history_and_clears_the_instance(adapter: Adapter) -> None:
    adapter.bridge.save_state(SaveStateInput(state=a_state()))
    adapter.bridge.publish(PublishInput(pending=()))
    adapter.answer(REQUEST_ID, response_bytes())
    where = adapter.bridge.finish(FinishInput(state=a_state(), outcome="completed", run_id="run-1"))
    assert "run-1" in where
    assert not adapter.bridge.exists()
    assert adapter.bridge.read_responses() == []


LONG = "Explain in a paragraph, with one example, how tides follow the moon across a day. " * 2


class Tides(Workflow):
    name = "conformance"
    agents = ("explainer",)

    @phase(1)
    def explain(self, ctx: Any) -> dict[str, Any]:
        first, second = ctx.ask("explainer", LONG), ctx.ask("explainer", LONG + "Again.")
        return {"answers": [first, second]}


def test_a_workflow_runs_to_the_end_through_the_bridge(adapter: Adapter) -> None:
    def engine() -> Engine:
        return Engine(Tides, bridge=adapter.bridge, clock=FakeClock(), new_id=ids)

    ids = SequentialIds()
    outcome = engine().start(
        workflow_ref="tests:Tides", workdir=Path("/unused"), run_id=adapter.run_id
    )
    answers = 0
    while outcome.status == "paused":
        for request in outcome.pending:
            answers += 1
            raw = response_bytes(request.request_id, response=f"answer {answers}")
            adapter.answer(request.request_id, raw)
        outcome = engine().resume()
    assert outcome.status == "completed", outcome.message
    assert outcome.outputs == {"explain": {"answers": ["answer 1", "answer 2"]}}
    assert not adapter.bridge.exists()


def answer_for(request_id: str, prompt: str) -> bytes:
    return response_bytes(request_id, response=f"answer to {prompt[-12:]}")


EXPECTED = {
    "explain": {"answers": [f"answer to {LONG[-12:]}", f"answer to {(LONG + 'Again.')[-12:]}"]}
}


class Crash(BaseException):
    """The process dies here (a ``BaseException``: nothing in the engine catches it)."""


class WriteCounter:
    """Counts the bridge writes of a whole run, across the processes that make it, and
    kills the process that is about to make write number ``crash_at``."""

    WRITES = ("save_state", "publish", "consume", "archive", "write_evidence", "finish")

    def __init__(self, crash_at: int = 0) -> None:
        self.crash_at = crash_at
        self.writes = 0

    def wrap(self, bridge: Any) -> Any:
        counter = self

        class Dying:
            def __getattr__(self, name: str) -> Any:
                method = getattr(bridge, name)
                if name not in WriteCounter.WRITES:
                    return method

                def write(*args: Any, **kwargs: Any) -> Any:
                    counter.writes += 1
                    if counter.writes == counter.crash_at:
                        raise Crash(f"before write {counter.crash_at} ({name})")
                    return method(*args, **kwargs)

                return write

        return Dying()


def run_with_crash(adapter: Adapter, counter: WriteCounter) -> Any:
    """Start the run and take it to its end as hosts and new processes would: each
    process a fresh engine on a fresh bridge of the same store; one of them dies before
    the write ``counter`` names, and the next goes on from what the store holds."""
    ids = SequentialIds()

    def engine() -> Engine:
        return Engine(Tides, bridge=counter.wrap(adapter.reopen()), clock=FakeClock(), new_id=ids)

    def start() -> Any:
        try:
            return engine().start(
                workflow_ref="tests:Tides", workdir=Path("/unused"), run_id=adapter.run_id
            )
        except Crash:
            return None

    outcome = start()
    if outcome is None and not adapter.reopen().exists():
        outcome = start()  # it died before the run was: the host starts it again
    for _ in range(20):
        if outcome is not None and outcome.status != "paused":
            return outcome
        for request in outcome.pending if outcome is not None else ():
            adapter.answer(request.request_id, answer_for(request.request_id, request.prompt))
        try:
            outcome = engine().resume()
        except Crash:
            outcome = None
    raise AssertionError("the run did not end")


@pytest.mark.slow
def test_a_crash_before_any_write_is_repaired_and_no_answer_is_lost(
    new_adapter: Callable[[], Adapter],
) -> None:
    counted = WriteCounter()
    clean = run_with_crash(new_adapter(), counted)
    assert clean.status == "completed" and clean.outputs == EXPECTED
    assert counted.writes >= 8
    for crash_at in range(1, counted.writes + 1):
        outcome = run_with_crash(new_adapter(), WriteCounter(crash_at))
        assert outcome.status == "completed", (crash_at, outcome.message)
        assert outcome.outputs == EXPECTED, crash_at


def test_a_stale_answer_is_refused_and_left_for_the_host(adapter: Adapter) -> None:
    ids = SequentialIds()
    first = Engine(Tides, bridge=adapter.bridge, clock=FakeClock(), new_id=ids).start(
        workflow_ref="tests:Tides", workdir=Path("/unused"), run_id=adapter.run_id
    )
    (asked,) = first.pending
    adapter.answer(asked.request_id, answer_for(asked.request_id, asked.prompt))
    second = Engine(Tides, bridge=adapter.reopen(), clock=FakeClock(), new_id=ids).resume()
    assert second.status == "paused" and second.pending[0].request_id != asked.request_id
    stale = response_bytes(asked.request_id, response="a second answer to the first question")
    adapter.answer(asked.request_id, stale)
    bridge = adapter.reopen()
    before = bridge.load_state()
    with pytest.raises(ResponseRejectedError, match="stale"):
        Engine(Tides, bridge=bridge, clock=FakeClock(), new_id=ids).resume()
    after = adapter.reopen()
    assert after.load_state() == before
    assert [r.sha256 for r in after.read_responses()] == [hashlib.sha256(stale).hexdigest()]
