"""A workflow's token or cost budget: real ``orchestrate`` processes.

An ask that would start once the run's answers have used ``budget_tokens`` (or, priced by
the workflow's ``prices``, ``budget_usd``) fails its phase with BUDGET_EXCEEDED before it
is asked, even when the phase catches the error; ``retry`` with a raised budget goes on.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from orchestrator import Workflow, phase
from orchestrator._errors import WorkflowDefinitionError
from support.cli import orchestrate

pytestmark = pytest.mark.slow

FLOW = """
from orchestrator import Workflow, phase

ROLE = (
    "You are the writer of a small test workflow about the sea. Answer in one plain "
    "sentence, with no preamble and no list. "
)


class Thrifty(Workflow):
    name = "thrifty"
    agents = ("writer",)
    BUDGET

    @phase(1)
    def draft(self, ctx):
        return ctx.ask("writer", ROLE + "Write one sentence about the tides.")

    @phase(2)
    def again(self, ctx):
        try:
            return ctx.ask("writer", ROLE + "Write the sentence again, shorter.")
        except Exception:  # a budget refusal is not the phase's to swallow
            return "swallowed"
"""


def write_flow(path: Path, budget: str) -> None:
    path.write_text(FLOW.replace("BUDGET", budget))


def answer(workdir: Path, tmp_path: Path, metadata: dict[str, Any]) -> None:
    listed = orchestrate("pending", "--workdir", workdir, "--json")
    (item,) = json.loads(listed.stdout)
    document = {
        "version": "1.0",
        "request_id": item["request"]["request_id"],
        "status": "success",
        "response": "The tides rise twice a day.",
        "created_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "metadata": metadata,
    }
    path = tmp_path / "answer.json"
    path.write_text(json.dumps(document))
    given = orchestrate("respond", "--workdir", workdir, "--document", path)
    assert given.returncode == 0, given.stderr


@pytest.mark.parametrize(
    ("budget", "raised", "metadata", "said"),
    [
        ("budget_tokens = 1000", "budget_tokens = 5000", {"tokens_used": 1200}, "1200 tokens"),
        (
            'budget_usd = 0.01\n    prices = {"m": {"input": 3.0, "output": 15.0}}',
            'budget_usd = 0.05\n    prices = {"m": {"input": 3.0, "output": 15.0}}',
            {"model": "m", "x_input_tokens": 1000, "x_output_tokens": 1000},
            "$0.0180",
        ),
    ],
    ids=["tokens", "usd"],
)
def test_an_ask_past_the_budget_fails_and_retry_with_a_raised_one_goes_on(
    tmp_path: Path, budget: str, raised: str, metadata: dict[str, Any], said: str
) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    flow = tmp_path / "thrifty.py"
    write_flow(flow, budget)
    started = orchestrate("run", f"{flow}:Thrifty", "--workdir", workdir)
    assert started.returncode == 42, started.stderr
    answer(workdir, tmp_path, metadata)

    refused = orchestrate("resume", "--workdir", workdir)
    assert refused.returncode == 1, refused.stderr
    assert "BUDGET_EXCEEDED" in refused.stderr and said in refused.stderr
    summary = json.loads(orchestrate("status", "--workdir", workdir, "--json").stdout)
    assert summary["status"] == "failed" and summary["phase_name"] == "again"
    assert summary["failure"].startswith("phase 2 (again): BUDGET_EXCEEDED")
    assert summary["failure_trace"]["error_type"] == "BUDGET_EXCEEDED"
    assert summary["pending"] == [] and summary["request_counts"] == {"completed": 1}
    (log,) = (workdir / ".orchestrator" / "runs").glob("*/events.ndjson")
    errors = [
        json.loads(line)["data"]
        for line in log.read_text().splitlines()
        if json.loads(line)["event"] == "error"
    ]
    assert [e.get("error_type") for e in errors] == ["BUDGET_EXCEEDED"]

    # The same budget: the retry is refused again, before any ask.
    again = orchestrate("retry", "--workdir", workdir)
    assert again.returncode == 1 and "BUDGET_EXCEEDED" in again.stderr

    write_flow(flow, raised)
    retried = orchestrate("retry", "--workdir", workdir)
    assert retried.returncode == 42, retried.stderr
    answer(workdir, tmp_path, metadata)
    done = orchestrate("resume", "--workdir", workdir)
    assert done.returncode == 0, done.stderr
    outputs = json.loads(orchestrate("output", "--workdir", workdir).stdout)
    assert outputs["again"] == "The tides rise twice a day."


def test_a_cost_budget_needs_prices_and_budgets_are_checked_when_defined() -> None:
    with pytest.raises(WorkflowDefinitionError, match="'budget_usd' needs 'prices'"):

        class NoPrices(Workflow):
            name = "no-prices"
            budget_usd = 1.0

            @phase(1)
            def only(self, ctx: Any) -> None:
                return None

    with pytest.raises(WorkflowDefinitionError, match="'budget_tokens' must be an integer"):

        class Negative(Workflow):
            name = "negative"
            budget_tokens = -1

            @phase(1)
            def only(self, ctx: Any) -> None:
                return None

    with pytest.raises(WorkflowDefinitionError, match=r"'m'\.output must be a number"):

        class BadPrice(Workflow):
            name = "bad-price"
            prices = {"m": {"input": 1.0}}

            @phase(1)
            def only(self, ctx: Any) -> None:
                return None
