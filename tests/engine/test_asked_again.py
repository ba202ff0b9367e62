"""An answer that reaches the engine and fails the gate is asked again, with why, never
the end of the run by itself: an in-process agent sees the refusal in its next request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs

from orchestrator import Workflow, phase
from orchestrator.testing import MockAgentInvoker

PROMPT = (
    "You are the reviewer. Read the change and answer with JSON: the severity of the worst "
    "problem (text) and a one-line summary of it (text)."
)


@attrs.frozen
class Finding:
    severity: str
    summary: str


class Triage(Workflow):
    name = "triage-in-process"
    agents = ("reviewer",)

    @phase(1)
    def triage(self, ctx: Any) -> dict[str, Any]:
        return attrs.asdict(ctx.ask("reviewer", PROMPT, output_type=Finding))


def test_an_agent_that_answers_badly_twice_completes_on_its_third_attempt(
    workflow_harness: Any,
) -> None:
    replies = iter(
        [
            "high: division by zero",  # not JSON
            json.dumps({"severity": "high"}),  # a field missing
            json.dumps({"severity": "high", "summary": "division by zero"}),
        ]
    )
    invoker = MockAgentInvoker({"reviewer": lambda prompt: next(replies)})
    harness = workflow_harness(Triage, invoker=invoker)
    outcome = harness.run()
    assert outcome.exit_code == 0, outcome.message
    assert outcome.outputs["triage"] == {"severity": "high", "summary": "division by zero"}
    calls = invoker.invocations
    assert len(calls) == 3
    contexts = [call["kwargs"]["context"] for call in calls]
    assert "x_previous_error" not in contexts[0]
    assert contexts[1]["x_previous_error"]["field"] == "response"
    assert contexts[1]["x_previous_error"]["error_type"] == "PARSE_ERROR"
    assert contexts[2]["x_previous_error"]["field"] == "response.summary"
    assert outcome.history_path is not None
    history = json.loads(Path(outcome.history_path).read_text(encoding="utf-8"))
    records = history["agent_requests"]
    assert [r["status"] for r in records] == ["retried", "retried", "completed"]
    assert [r["x_request"]["retry_count"] for r in records] == [0, 1, 2]
    # Each refused answer stays in the record, with why it was refused.
    assert records[0]["x_response"]["response"] == "high: division by zero"
    assert records[1]["x_refused"]["field"] == "response.summary"
