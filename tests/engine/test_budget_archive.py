"""A budget counts the answers whose requests moved to the run's history.

With ``archive_after = 1`` the first phase's answer leaves the state (its text goes to
``requests.ndjson``) before the third phase asks; the engine keeps its tokens by model in
its record, so the third ask still sees every token the run has used and is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator import Workflow, phase
from orchestrator.testing import WorkflowHarness

ROLE = (
    "You are the writer of a small test workflow about the sea. Answer in one plain "
    "sentence, with no preamble and no list. "
)


class Archiving(Workflow):
    name = "archiving"
    agents = ("writer",)
    archive_after = 1
    budget_tokens = 1500

    @phase(1)
    def first(self, ctx: Any) -> Any:
        return ctx.ask("writer", ROLE + "Write a sentence about the tides.")

    @phase(2)
    def second(self, ctx: Any) -> Any:
        return ctx.ask("writer", ROLE + "Write a sentence about the waves.")

    @phase(3)
    def third(self, ctx: Any) -> Any:
        return ctx.ask("writer", ROLE + "Write a sentence about the shore.")


def test_the_budget_counts_archived_answers(tmp_path: Path) -> None:
    harness = WorkflowHarness(Archiving, tmp_path)
    outcome = harness.run()
    for _ in range(2):
        assert outcome.status == "paused", outcome.message
        (request,) = outcome.pending
        harness.respond(
            request.request_id,
            "A sentence.",
            metadata={"model": "m", "tokens_used": 1000},
        )
        outcome = harness.resume()
    assert outcome.status == "failed"
    assert "BUDGET_EXCEEDED: the run's answers have used 2000 tokens" in outcome.message
    state = json.loads((tmp_path / ".archiving-state.json").read_text())
    archived = [r for r in state["agent_requests"] if r.get("x_archived")]
    assert [r["phase"] for r in archived] == [1]
    record = state["phase_data"]["x_orchestrator"]
    assert record["archived_usage"] == {
        "m": {"input": 0, "output": 0, "unsplit": 1000, "answers": 1}
    }
