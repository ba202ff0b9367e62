"""A small workflow for the tests of runs on a PostgreSQL store: three phases, each with
two asks and a step, whose answers a test can predict (``expected_outputs``)."""

from __future__ import annotations

from typing import Any

from orchestrator import Workflow, phase

PROMPTS = {
    name: [
        f"You are the echo agent of phase {name}. Answer question {n} with one line of text "
        "that repeats this prompt, so the test can predict it."
        for n in (1, 2)
    ]
    for name in ("one", "two", "three")
}


def echo_answer(prompt: str) -> str:
    """What tests/support/echo_agent.py answers."""
    return f"answer to {prompt}"


class Chatter(Workflow):
    name = "chatter"
    agents = ("echo",)

    def _phase(self, ctx: Any, name: str) -> dict[str, Any]:
        answers = [ctx.ask("echo", prompt) for prompt in PROMPTS[name]]
        counted = ctx.step(f"count {name}", lambda: sum(len(a) for a in answers))
        return {"answers": answers, "length": counted}

    @phase(1)
    def one(self, ctx: Any) -> dict[str, Any]:
        return self._phase(ctx, "one")

    @phase(2)
    def two(self, ctx: Any) -> dict[str, Any]:
        return self._phase(ctx, "two")

    @phase(3)
    def three(self, ctx: Any) -> dict[str, Any]:
        return self._phase(ctx, "three")


def expected_outputs() -> dict[str, Any]:
    outputs = {}
    for name, prompts in PROMPTS.items():
        answers = [echo_answer(p) for p in prompts]
        outputs[name] = {"answers": answers, "length": sum(len(a) for a in answers)}
    return outputs


class Napper(Workflow):
    """Sleeps a second on a durable timer between its two phases."""

    name = "napper"

    @phase(1)
    def nap(self, ctx: Any) -> str:
        ctx.sleep(1)
        return "rested"

    @phase(2)
    def wake(self, ctx: Any) -> str:
        return "awake"
