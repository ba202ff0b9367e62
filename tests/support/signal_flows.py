"""Workflows that wait for signals, for the tests of signals (files and PostgreSQL).

Each step's effect outlives the process: one word appended to ``steps.log`` in the run's
work directory, so a test sees how often a step ran across kills and resumes.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs

from orchestrator import Workflow, phase

PROMPT = (
    "You are a writer. Write one short sentence about the weather today, plainly, and "
    "answer with that sentence alone."
)


def note(workdir: str, label: str) -> str:
    with open(Path(workdir) / "steps.log", "a") as log:
        log.write(label + "\n")
    return label


@attrs.define
class Approval:
    approved: bool
    by: str


class Approvals(Workflow):
    """Asks once, then waits twice for signal ``approve`` and drains what is left."""

    name = "approvals"
    agents = ("writer",)

    @phase(1)
    def draft(self, ctx: Any) -> str:
        ctx.step("drafted", note, str(ctx.workdir), "drafted")
        return str(ctx.ask("writer", PROMPT))

    @phase(2)
    def approve(self, ctx: Any) -> dict[str, Any]:
        first = ctx.wait_for_signal("approve")
        ctx.step("first", note, str(ctx.workdir), f"first-{first['n']}")
        second = ctx.wait_for_signal("approve")
        ctx.step("second", note, str(ctx.workdir), f"second-{second['n']}")
        return {"first": first, "second": second, "rest": ctx.signals("approve")}


class TypedApproval(Workflow):
    """Waits for an :class:`Approval`, then for signal ``go`` at most an hour."""

    name = "typed-approval"
    agents = ()

    @phase(1)
    def decide(self, ctx: Any) -> dict[str, Any]:
        notes = ctx.signals("note")
        approval = ctx.wait_for_signal("approve", output_type=Approval)
        go = ctx.wait_for_signal("go", timeout=timedelta(hours=1))
        return {"notes": notes, "approval": attrs.asdict(approval), "go": go}
