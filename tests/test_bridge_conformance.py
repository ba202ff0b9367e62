"""One conformance suite for the ``Bridge`` port, run against every adapter.

The file bridge (seed 004's files in a directory) and the in-memory bridge must behave
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
from orchestrator.adapters.file_bridge import FileBridge
from orchestrator.adapters.memory import MemoryBridge

from orchestrator import (
    CheckpointState,
    Engine,
    InstanceBusyError,
    ResponseRejectedError,
    Workflow,
    phase,
)
from orchestrator._errors import NoInstanceError
from orchestrator._ports import ConsumeInput, FinishInput, PublishInput, SaveStateInput
from orchestrator.testing import FakeClock, SequentialIds

REQUEST_ID = "00000000-0000-4000-8000-000000000001"


class Adapter:
    """A bridge under test and how a host leaves an answer for it."""

    def __init__(
        self, bridge: Any, answer: Callable[[str, bytes], None], run_id: str | None = None
    ) -> None:
        self.bridge = bridge
        self.answer = answer
        self.run_id = run_id  # the id a run must have: a database store keys the bridge by it


@pytest.fixture(params=["file", "memory", "postgres"])
def adapter(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Adapter]:
    if request.param == "postgres":
        yield from postgres_adapter(request.getfixturevalue("pg_dsn"))
    elif request.param == "file":
        bridge = FileBridge(tmp_path, "conformance")

        def answer_file(request_id: str, raw: bytes) -> None:
            target = tmp_path / ".agent-responses" / f"{request_id}.json"
            target.parent.mkdir(exist_ok=True)
            target.write_bytes(raw)

        yield Adapter(bridge, answer_file)
    else:
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
        yield Adapter(store.bridge(run_id), answer_row, run_id)
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
