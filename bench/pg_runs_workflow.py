"""The workflows ``bench/pg_runs.py`` measures on PostgreSQL and on files.

``Brief``: three phases, each a step (a small pure computation) and an ask; answered
in-process by the worker's ``--agent``. ``Single``: a step, one ask (the run's one pause
when a host answers), and a last step.
"""

from __future__ import annotations

from typing import Any

from orchestrator import Workflow, phase

PROMPT = (
    "You are the {agent} of a short benchmark run. Read the note and answer with one "
    "plain line that sums it up. The note: {note}."
)


def note(tag: str, number: int) -> dict[str, Any]:
    return {"tag": tag, "phase": number, "words": [f"w{number}-{i}" for i in range(8)]}


class Brief(Workflow):
    """Three phases of a step and an ask."""

    name = "bench-brief"
    agents = ("writer", "critic")

    def _leg(self, ctx: Any, number: int, agent: str) -> str:
        made = ctx.step(f"note-{number}", note, str(self.inputs.get("tag", "")), number)
        return str(ctx.ask(agent, PROMPT.format(agent=agent, note=made)))

    @phase(1)
    def draft(self, ctx: Any) -> str:
        return self._leg(ctx, 1, "writer")

    @phase(2)
    def review(self, ctx: Any) -> str:
        return self._leg(ctx, 2, "critic")

    @phase(3)
    def settle(self, ctx: Any) -> dict[str, Any]:
        return {"last": self._leg(ctx, 3, "writer"), "first": ctx.output("draft")}


class Single(Workflow):
    """A step, one ask, a step: one pause when a host answers."""

    name = "bench-single"
    agents = ("writer",)

    @phase(1)
    def ask(self, ctx: Any) -> str:
        made = ctx.step("note", note, "single", 1)
        return str(ctx.ask("writer", PROMPT.format(agent="writer", note=made)))

    @phase(2)
    def settle(self, ctx: Any) -> dict[str, Any]:
        return ctx.step("wrap", lambda: {"answer": ctx.output("ask")})  # type: ignore[no-any-return]
