"""The engine's semantics, in-process: replay, steps once, ask_all, the response policy.

Each test runs a small workflow through the real file bridge in a temporary directory,
with the fake clock and sequential ids from the pytest plugin.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest

from orchestrator import (
    AgentInvocationError,
    Ask,
    NonDeterminismError,
    PhaseResult,
    Workflow,
    phase,
)
from orchestrator._errors import StateDamagedError
from orchestrator.testing import FakeClock, MockAgentInvoker, WorkflowHarness
from support.signing_support import edit_state

LONG = (
    "Please answer carefully and completely; "
    "this sentence pads the prompt past the contract's minimum. "
)


def prompt(topic: str) -> str:
    return f"{LONG}Topic: {topic}"


@attrs.frozen
class Verdict:
    score: int
    label: str


class Counting(Workflow):
    """Two phases; phase 1 steps, asks, steps again; phase 2 asks twice at once."""

    name = "counting"
    agents = ("writer", "critic")
    calls: list[str] = []
    answer_within: timedelta | None = None

    @phase(1)
    def draft(self, ctx: Any) -> PhaseResult:
        before = ctx.step("before", self._count, "before")
        text = ctx.ask("writer", prompt(self.inputs["topic"]), answer_within=self.answer_within)
        after = ctx.step("after", self._count, "after")
        return PhaseResult(output={"text": text, "steps": [before, after]}, summary="drafted")

    @phase(2)
    def critique(self, ctx: Any) -> dict[str, Any]:
        text = ctx.output("draft")["text"]
        first, second = ctx.ask_all(
            [
                Ask(agent="critic", prompt=prompt("style " + text)),
                Ask(agent="critic", prompt=prompt("facts " + text), output_type=Verdict),
            ]
        )
        return {"style": first, "facts": attrs.asdict(second)}

    def _count(self, label: str) -> str:
        Counting.calls.append(label)
        return f"{label}-{len(Counting.calls)}"


@pytest.fixture(autouse=True)
def _reset_calls() -> None:
    Counting.calls = []


def pending_ids(harness: WorkflowHarness) -> list[str]:
    outcome_files = sorted((harness.workdir / ".agent-requests").glob("*.json"))
    if outcome_files:
        return [json.loads(p.read_text())["request_id"] for p in outcome_files]
    single = harness.workdir / ".agent-request.json"
    return [json.loads(single.read_text())["request_id"]] if single.exists() else []


def state_of(harness: WorkflowHarness) -> dict[str, Any]:
    return json.loads((harness.workdir / ".counting-state.json").read_text())


def test_pause_answer_resume_completes_with_steps_run_once(workflow_harness: Any) -> None:
    harness = workflow_harness(Counting)
    outcome = harness.run({"topic": "tides"})
    assert (outcome.status, outcome.exit_code) == ("paused", 42)
    assert Counting.calls == ["before"]
    (request,) = outcome.pending
    assert request.agent_name == "writer" and request.phase_name == "draft"

    # Resuming with no answer changes nothing and pauses again.
    before = (harness.workdir / ".counting-state.json").read_bytes()
    assert harness.resume().exit_code == 42
    assert (harness.workdir / ".counting-state.json").read_bytes() == before

    harness.respond(request.request_id, "a draft about tides")
    outcome = harness.resume()
    assert outcome.status == "paused" and len(outcome.pending) == 2
    assert Counting.calls == ["before", "after"]  # the replayed step did not run again
    assert len(pending_ids(harness)) == 2
    style, facts = outcome.pending
    harness.respond(facts.request_id, json.dumps({"score": 4, "label": "sound"}))
    assert harness.resume().exit_code == 42  # one answer of two: still waiting
    harness.respond(style.request_id, "crisp")
    outcome = harness.resume()
    assert (outcome.status, outcome.exit_code) == ("completed", 0)
    assert outcome.outputs["draft"] == {
        "text": "a draft about tides",
        "steps": ["before-1", "after-2"],
    }
    assert outcome.outputs["critique"] == {
        "style": "crisp",
        "facts": {"score": 4, "label": "sound"},
    }
    assert Counting.calls == ["before", "after"]
    leftovers = {p.name for p in harness.workdir.iterdir()}
    assert leftovers == {".orchestrator"}
    history = json.loads(Path(outcome.history_path).read_text())
    assert [p["phase_name"] for p in history["completed_phases"]] == ["draft", "critique"]
    assert [r["status"] for r in history["agent_requests"]] == ["completed"] * 3


def test_in_process_invoker_runs_to_the_end_without_pausing(workflow_harness: Any) -> None:
    mock = MockAgentInvoker()
    mock.add_response("writer", "in-process draft")
    mock.add_response(
        "critic", lambda p: json.dumps({"score": 5, "label": "ok"}) if "facts" in p else "fine"
    )
    outcome = workflow_harness(Counting, invoker=mock).run({"topic": "moons"})
    assert outcome.exit_code == 0
    assert outcome.outputs["critique"]["facts"] == {"score": 5, "label": "ok"}
    assert len(mock.get_invocations("critic")) == 2
    assert len(mock.get_invocations("writer")) == 1
    assert mock.get_invocations("writer")[0]["prompt"] == prompt("moons")


def test_timeout_is_retried_as_a_new_request_up_to_the_limit(workflow_harness: Any) -> None:
    harness = workflow_harness(Counting)
    first = harness.run({"topic": "x"}).pending[0]
    harness.respond(
        first.request_id, "", status="timeout", error_type="TIMEOUT", error_message="slow"
    )
    retry = harness.resume().pending[0]
    assert retry.request_id != first.request_id
    assert (retry.retry_count, retry.prompt) == (1, first.prompt)
    harness.respond(
        retry.request_id, "", status="error", error_type="INVOCATION_FAILED", error_message="boom"
    )
    second = harness.resume().pending[0]
    assert second.retry_count == 2
    harness.respond(
        second.request_id, "", status="timeout", error_type="TIMEOUT", error_message="slow"
    )
    outcome = harness.resume()  # max_retries (2) used up, no fallback: the run fails
    assert (outcome.status, outcome.exit_code) == ("failed", 1)
    assert "TIMEOUT" in outcome.message
    statuses = [r["status"] for r in state_of(harness)["agent_requests"]]
    assert statuses == ["retried", "retried", "failed"]
    assert harness.resume().exit_code == 1  # a failed run stays failed; state kept


class CountingWithDeadline(Counting):
    """The same workflow, whose first ask is answered within five minutes or not at all."""

    answer_within = timedelta(minutes=5)


def test_a_pending_request_never_expires_by_the_clock_alone(
    workflow_harness: Any, fake_clock: FakeClock
) -> None:
    """``timeout_seconds`` is the host's budget for one invocation; a person may answer
    days later, and the run waits for them."""
    harness = workflow_harness(Counting)
    first = harness.run({"topic": "x"}).pending[0]
    before = (harness.workdir / ".counting-state.json").read_bytes()
    fake_clock.advance(3 * 24 * 3600)
    again = harness.resume()
    assert again.status == "paused" and [r.request_id for r in again.pending] == [first.request_id]
    assert (harness.workdir / ".counting-state.json").read_bytes() == before
    harness.respond(first.request_id, "three days later")
    assert harness.resume().pending[0].phase_name == "critique"
    assert state_of(harness)["phase_data"]["draft"]["text"] == "three days later"


def test_a_request_past_its_answer_within_counts_as_a_timeout(
    workflow_harness: Any, fake_clock: FakeClock
) -> None:
    harness = workflow_harness(CountingWithDeadline)
    first = harness.run({"topic": "x"}).pending[0]
    fake_clock.advance(300)  # exactly answer_within: not past it yet
    assert harness.resume().pending[0].request_id == first.request_id
    fake_clock.advance(1)
    retry = harness.resume().pending[0]
    assert retry.retry_count == 1 and retry.request_id != first.request_id
    record = state_of(harness)["agent_requests"][0]
    assert record["status"] == "retried"
    assert record["x_response"]["error_type"] == "TIMEOUT"
    assert record["x_response"]["error_message"] == (
        "no answer within 5 min (the ask's answer_within)"
    )
    # The retry has the same deadline, counted from when it was asked.
    fake_clock.advance(299)
    assert harness.resume().pending[0].request_id == retry.request_id
    fake_clock.advance(2)
    assert harness.resume().pending[0].retry_count == 2


class WithFallback(Workflow):
    name = "with-fallback"
    agents = ("analyst",)

    @phase(1, fallback="heuristic")
    def analyse(self, ctx: Any) -> Any:
        return attrs.asdict(ctx.ask("analyst", prompt("numbers"), output_type=Verdict))

    def heuristic(self, ctx: Any, error: Exception) -> Any:
        return {"score": 0, "label": "heuristic", "why": type(error).__name__}


@pytest.mark.parametrize(
    ("answer", "fields"),
    [
        ("not json at all", {}),  # PARSE_ERROR raised by the engine's own parse
        (json.dumps({"score": "high"}), {}),  # VALIDATION_ERROR: does not structure
        ("", {"status": "error", "error_type": "PARSE_ERROR", "error_message": "bad"}),
        ("", {"status": "error", "error_type": "VALIDATION_ERROR", "error_message": "bad"}),
    ],
)
def test_parse_and_validation_errors_go_to_the_fallback(
    workflow_harness: Any, answer: str, fields: dict[str, Any]
) -> None:
    """An error answer goes to the fallback at once; a wrong-shaped answer is refused at
    the gate and asked again, within the policy's three attempts, then the fallback."""
    harness = workflow_harness(WithFallback)
    outcome = harness.run()
    refused = not fields
    for attempt in range(3 if refused else 1):
        request = outcome.pending[0]
        assert request.retry_count == attempt
        if attempt:
            previous = (request.context or {})["x_previous_error"]
            assert previous["error_type"] in ("PARSE_ERROR", "VALIDATION_ERROR")
            assert previous["field"].startswith("response")
        harness.respond(request.request_id, answer, **fields)
        outcome = harness.resume()
    assert outcome.exit_code == 0
    assert outcome.outputs["analyse"]["label"] == "heuristic"


def test_agent_not_found_fails_the_run_even_with_a_fallback(workflow_harness: Any) -> None:
    harness = workflow_harness(WithFallback)
    request = harness.run().pending[0]
    harness.respond(
        request.request_id, "", status="error", error_type="AGENT_NOT_FOUND", error_message="who?"
    )
    outcome = harness.resume()
    assert (outcome.status, outcome.exit_code) == ("failed", 1)
    assert "AGENT_NOT_FOUND" in outcome.message


def test_cancelled_answer_fails_the_run(workflow_harness: Any) -> None:
    harness = workflow_harness(WithFallback)
    request = harness.run().pending[0]
    harness.respond(request.request_id, "", status="cancelled")
    outcome = harness.resume()
    assert outcome.exit_code == 1 and "cancelled" in outcome.message


def test_in_process_invocation_error_follows_the_same_policy(workflow_harness: Any) -> None:
    mock = MockAgentInvoker()
    mock.add_response("analyst", AgentInvocationError("down", error_type="INVOCATION_FAILED"))
    outcome = workflow_harness(WithFallback, invoker=mock).run()
    assert outcome.exit_code == 0  # 1 try + 2 retries, then the fallback
    assert len(mock.get_invocations()) == 3
    assert outcome.outputs["analyse"]["label"] == "heuristic"


class Confident(Workflow):
    name = "confident"
    agents = ("analyst",)

    @phase(1)
    def analyse(self, ctx: Any) -> str:
        return str(ctx.ask("analyst", prompt("sure?"), min_confidence=0.8))


@pytest.mark.parametrize(("confidence", "code"), [(0.9, 0), (0.5, 1)])
def test_min_confidence_is_checked_against_the_response_metadata(
    workflow_harness: Any, confidence: float, code: int
) -> None:
    """Too low a confidence is refused and asked again; three times, and the run fails."""
    harness = workflow_harness(Confident)
    outcome = harness.run()
    asked = 0
    while outcome.exit_code == 42:
        asked += 1
        request = outcome.pending[0]
        harness.respond(request.request_id, "yes", metadata={"confidence": confidence})
        outcome = harness.resume()
    assert (outcome.exit_code, asked) == (code, 3 if code else 1)
    if code:
        assert "VALIDATION_ERROR" in outcome.message
        assert "metadata.confidence: expected at least 0.8, got 0.5" in outcome.message


class Swallower(Workflow):
    name = "swallower"
    agents = ("writer",)

    @phase(1)
    def greedy(self, ctx: Any) -> str:
        try:
            return str(ctx.ask("writer", prompt("swallow")))
        except Exception:  # a user's broad except must not swallow the pause
            return "swallowed"


def test_the_pause_cannot_be_swallowed_by_except_exception(workflow_harness: Any) -> None:
    assert workflow_harness(Swallower).run().exit_code == 42


def test_replay_detects_a_changed_prompt(workflow_harness: Any) -> None:
    harness = workflow_harness(Counting)
    request = harness.run({"topic": "tides"}).pending[0]
    harness.respond(request.request_id, "draft")
    engine = harness.engine()
    engine.workflow_cls = type("Changed", (Counting,), {"name": "counting"})
    edit_state(
        harness.workdir / ".counting-state.json",
        lambda state: state["phase_data"]["x_orchestrator"]["inputs"].update(topic="storms"),
    )
    outcome = engine.resume()
    assert outcome.exit_code == 1
    assert "phase 'draft'" in outcome.message and "position 1" in outcome.message
    assert "prompt changed" in outcome.message
    with pytest.raises(NonDeterminismError):
        raise NonDeterminismError("x", phase_name="draft", position=1)


def test_a_second_run_in_the_same_directory_is_refused(workflow_harness: Any) -> None:
    from orchestrator._errors import InstanceExistsError

    harness = workflow_harness(Counting)
    harness.run({"topic": "a"})
    with pytest.raises(InstanceExistsError, match="already lives here"):
        harness.run({"topic": "b"})


class Mutating(Workflow):
    name = "mutating"
    agents = ("writer",)

    @phase(1)
    def gather(self, ctx: Any) -> list[int]:
        items: list[int] = ctx.step("list", lambda: [1])
        items.append(99)  # the phase changes what the step returned ...
        ctx.ask("writer", prompt("lists"))
        return items


def test_what_a_phase_does_to_a_step_result_does_not_change_the_record(
    workflow_harness: Any,
) -> None:
    harness = workflow_harness(Mutating)
    request = harness.run().pending[0]
    harness.respond(request.request_id, "ok")
    outcome = harness.resume()
    assert outcome.outputs["gather"] == [1, 99]  # ... and on replay it starts from [1] again


class CatchesFatal(Workflow):
    name = "catches-fatal"
    agents = ("helper", "other")

    @phase(1)
    def stubborn(self, ctx: Any) -> str:
        try:
            return str(ctx.ask("helper", prompt("first")))
        except Exception:  # swallows AGENT_NOT_FOUND and cancellation alike
            return str(ctx.ask("other", prompt("second")))


@pytest.mark.parametrize(
    "fields",
    [
        {"status": "error", "error_type": "AGENT_NOT_FOUND", "error_message": "who?"},
        {"status": "cancelled"},
    ],
    ids=["agent-not-found", "cancelled"],
)
def test_a_fatal_answer_fails_at_once_even_when_the_phase_catches_it(
    workflow_harness: Any, fields: dict[str, Any]
) -> None:
    harness = workflow_harness(CatchesFatal)
    request = harness.run().pending[0]
    harness.respond(request.request_id, "", **fields)
    outcome = harness.resume()
    assert (outcome.status, outcome.exit_code) == ("failed", 1)  # no pause for "other"


class RenamedCounting(Workflow):
    """``Counting`` with its first phase renamed, as a change of code under a paused run."""

    name = "counting"
    agents = ("writer", "critic")

    @phase(1)
    def drafting(self, ctx: Any) -> str:
        return "new"

    @phase(2)
    def critique(self, ctx: Any) -> str:
        return "new"


def test_a_phase_renamed_between_pause_and_resume_is_refused_before_the_answer_is_used(
    workflow_harness: Any,
) -> None:
    harness = workflow_harness(Counting)
    request = harness.run({"topic": "x"}).pending[0]
    harness.respond(request.request_id, "draft")
    state_file = harness.workdir / ".counting-state.json"
    before = state_file.read_bytes()
    engine = harness.engine()
    engine.workflow_cls = RenamedCounting
    with pytest.raises(StateDamagedError) as refused:
        engine.resume()
    assert refused.value.json_path == "$.phase_name"
    assert "phase_name 'draft' is not a phase of the workflow" in str(refused.value)
    assert "1 drafting, 2 critique" in str(refused.value)
    assert "the workflow's phases changed under this run" in str(refused.value)
    assert state_file.read_bytes() == before
    assert len(list((harness.workdir / ".agent-responses").iterdir())) == 1  # not used up


class NotJson(Workflow):
    name = "not-json"
    agents = ("writer",)

    @phase(1)
    def odd(self, ctx: Any) -> object:
        return {1, 2}  # a set: JSON has no such thing


def test_a_phase_output_json_cannot_hold_fails_the_run_and_is_recorded(
    workflow_harness: Any,
) -> None:
    harness = workflow_harness(NotJson)
    outcome = harness.run()
    assert outcome.exit_code == 1 and "cannot be stored as JSON" in outcome.message
    assert state_of_named(harness, "not-json")["phase_data"]["x_orchestrator"]["status"] == "failed"
    assert harness.resume().exit_code == 1  # stays failed; the phase does not run again


def state_of_named(harness: WorkflowHarness, name: str) -> dict[str, Any]:
    return json.loads((harness.workdir / f".{name}-state.json").read_text())


def test_a_late_answer_to_a_timed_out_request_is_used_and_its_retry_withdrawn(
    workflow_harness: Any, fake_clock: FakeClock
) -> None:
    harness = workflow_harness(CountingWithDeadline)
    first = harness.run({"topic": "x"}).pending[0]
    fake_clock.advance(301)
    retry = harness.resume().pending[0]  # overdue: retried as a new request
    assert retry.request_id != first.request_id
    harness.respond(first.request_id, "slow but sure")  # the host answers the first one
    outcome = harness.resume()
    assert outcome.status == "paused" and outcome.pending[0].phase_name == "critique"
    records = {r["request_id"]: r for r in state_of(harness)["agent_requests"]}
    assert records[first.request_id]["status"] == "completed"
    assert records[retry.request_id]["status"] == "superseded"
    assert not (harness.workdir / ".agent-requests" / f"{retry.request_id}.json").exists()
    # an answer to the withdrawn retry is now stale, and refused without harm
    harness.respond(retry.request_id, "too late")
    from orchestrator import ResponseRejectedError

    with pytest.raises(ResponseRejectedError, match="stale"):
        harness.resume()


def test_request_ids_are_random_version_4_uuids() -> None:
    """Made from ``os.urandom`` without the ``uuid`` module: the same form it makes."""
    import uuid

    from orchestrator.engine.engine import _random_uuid

    made = [_random_uuid() for _ in range(2000)]
    assert len(set(made)) == len(made)
    for text in made:
        value = uuid.UUID(text)
        assert (value.version, value.variant, str(value)) == (4, uuid.RFC_4122, text)


def test_the_record_index_follows_appends_and_a_new_list() -> None:
    """Looking a request up by id stays right as the engine appends records, replaces
    the list, or is handed a shorter one."""
    from orchestrator.formats.bridge import (
        AgentRequestRecord,
        HistoryStatus,
        RecordIndex,
    )

    def record(request_id: str) -> AgentRequestRecord:
        return AgentRequestRecord(
            request_id=request_id, agent_name="a", phase=1, status=HistoryStatus.PENDING
        )

    index = RecordIndex()
    items = [record("r1"), record("r2")]
    assert list(index.of(items)) == ["r1", "r2"]
    items.append(record("r3"))
    assert index.of(items)["r3"] is items[2]
    replaced = [record("r1")]
    assert index.of(replaced) == {"r1": replaced[0]}
    del replaced[0]
    assert index.of(replaced) == {}
