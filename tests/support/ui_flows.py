"""A workflow whose ask expects a shaped answer (``output_type``), for the page's check."""

from __future__ import annotations

from typing import Any

import attrs

from orchestrator import Workflow, phase


@attrs.define
class Verdict:
    verdict: str
    score: int
    notes: list[str] = attrs.field(factory=list)


PROMPT = (
    "You are the reviewer. Read the change and answer with JSON: a verdict (text), a score "
    "from 0 to 10, and notes (a list of short texts) if you have any."
)


class Review(Workflow):
    name = "review"
    agents = ("reviewer",)

    @phase(1)
    def review(self, ctx: Any) -> dict[str, Any]:
        verdict = ctx.ask("reviewer", PROMPT, output_type=Verdict)
        return {"verdict": verdict.verdict, "score": verdict.score}


class Nap(Workflow):
    """Sleeps on a durable timer (``ORCHESTRATOR_TEST_NAP`` seconds, default 3), then ends."""

    name = "nap"

    @phase(1)
    def nap(self, ctx: Any) -> dict[str, Any]:
        import os

        ctx.sleep(float(os.environ.get("ORCHESTRATOR_TEST_NAP", "3")))
        return {"slept": True}

    @phase(2)
    def wake(self, ctx: Any) -> dict[str, Any]:
        return {"awake": True}
