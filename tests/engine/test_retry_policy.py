"""In-process agents are retried as the workflow's ``retry_policy`` says: the error types
it names, up to its attempts, after waits that grow (exponential backoff, with jitter);
and the count lives in the state, so a resume goes on counting where the run was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator import AgentInvocationError, RetryPolicy, Workflow, WorkflowDefinitionError, phase
from orchestrator.testing import FakeClock, MockAgentInvoker, WorkflowHarness

LONG = "Say what you think of the topic below, in two short paragraphs, plainly. " * 2


class Patient(Workflow):
    name = "patient"
    agents = ("slow",)
    retry_policy = RetryPolicy(attempts=4, initial_delay=2, max_delay=5, jitter=0)

    @phase(1, fallback="without")
    def ask(self, ctx: Any) -> str:
        return str(ctx.ask("slow", LONG + "Topic: patience"))

    def without(self, ctx: Any, error: Exception) -> str:
        return f"gave up: {error}"


def flaky(failures: list[str]) -> Any:
    """An agent that fails with each error type of ``failures`` in turn, then answers."""

    def answer(prompt: str) -> str:
        if failures:
            raise AgentInvocationError("not now", error_type=failures.pop(0))
        return "at last"

    return answer


class Timed(FakeClock):
    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        super().sleep(seconds)


def test_retries_wait_longer_each_time_up_to_the_maximum(tmp_path: Path) -> None:
    clock = Timed()
    invoker = MockAgentInvoker({"slow": flaky(["TIMEOUT", "INVOCATION_FAILED", "TIMEOUT"])})
    outcome = WorkflowHarness(Patient, tmp_path, invoker=invoker, clock=clock).run({})
    assert outcome.status == "completed", outcome.message
    assert outcome.outputs["ask"] == "at last"
    assert len(invoker.invocations) == 4
    assert clock.waits == [2.0, 4.0, 5.0]  # 2, then doubled, then capped at max_delay


def test_jitter_spreads_the_waits() -> None:
    policy = RetryPolicy(attempts=5, initial_delay=1, max_delay=100, jitter=0.5)
    for retry in (1, 2, 3):
        base = 2.0 ** (retry - 1)
        assert all(base <= policy.delay(retry) <= base + 0.5 for _ in range(50))


def test_an_error_type_the_policy_does_not_name_is_not_retried(tmp_path: Path) -> None:
    invoker = MockAgentInvoker({"slow": flaky(["PARSE_ERROR"])})
    outcome = WorkflowHarness(Patient, tmp_path, invoker=invoker, clock=Timed()).run({})
    assert outcome.outputs["ask"].startswith("gave up:") and "PARSE_ERROR" in outcome.outputs["ask"]
    assert len(invoker.invocations) == 1


def test_attempts_run_out_then_the_fallback(tmp_path: Path) -> None:
    invoker = MockAgentInvoker({"slow": flaky(["TIMEOUT"] * 9)})
    outcome = WorkflowHarness(Patient, tmp_path, invoker=invoker, clock=Timed()).run({})
    assert "gave up" in outcome.outputs["ask"]
    assert len(invoker.invocations) == 4  # attempts=4: the first try and three retries


def test_a_resume_goes_on_counting(tmp_path: Path) -> None:
    """Two failures in process, then the host takes over: its error answer is the
    fourth attempt, so no fifth is asked."""
    from orchestrator import HostRequired

    failures = ["TIMEOUT", "TIMEOUT"]

    def then_the_host(prompt: str) -> str:
        if failures:
            raise AgentInvocationError("not now", error_type=failures.pop(0))
        raise HostRequired()

    invoker = MockAgentInvoker({"slow": then_the_host})
    harness = WorkflowHarness(Patient, tmp_path, invoker=invoker, clock=Timed())
    paused = harness.run({})
    (request,) = paused.pending
    assert request.retry_count == 2
    harness.respond(request.request_id, "", status="timeout", error_type="TIMEOUT")
    retried = harness.resume()  # the third retry, the last the policy allows
    (last,) = retried.pending
    assert last.retry_count == 3
    harness.respond(last.request_id, "", status="timeout", error_type="TIMEOUT")
    assert "gave up" in harness.resume().outputs["ask"]


def test_a_bad_policy_fails_when_the_class_is_made() -> None:
    with pytest.raises(WorkflowDefinitionError, match="retry_policy"):

        class Bad(Workflow):
            name = "bad"
            retry_policy = RetryPolicy(attempts=0)

            @phase(1)
            def go(self, ctx: Any) -> None:
                return None
