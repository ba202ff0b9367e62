"""Workflows of the routing tests: a draft reviewed and revised until the critic approves
it (a loop between phases), a triage that skips ahead, and routes that go wrong."""

from __future__ import annotations

from typing import Any, ClassVar

from orchestrator import Goto, Workflow, phase

LONG = "Say what you think of the topic below, in two short paragraphs, plainly. " * 2


def critic_answer(prompt: str) -> str:
    """The critic approves the third review; before it, it asks for changes."""
    visit = int(prompt.rsplit("Topic: review ", 1)[1].split()[0])
    return "approved" if visit >= 3 else f"changes {visit}"


def writer_answer(prompt: str) -> str:
    """The writer's text names what it was asked for: ``draft``, ``revised 1``, ..."""
    topic = prompt.rsplit("Topic: ", 1)[1]
    return "draft" if topic == "draft" else f"revised {topic.split()[1]}"


def answer(request: dict[str, Any]) -> str:
    """A host's answer to a request of :class:`ReviewLoop` (a request as JSON data)."""
    if request["agent_name"] == "critic":
        return critic_answer(request["prompt"])
    return writer_answer(request["prompt"])


def polish(text: str, visit: int) -> str:
    """A step of ``revise``; it raises in the second visit while ``ReviewLoop.broken``."""
    if ReviewLoop.broken and visit == 2:
        raise RuntimeError("the polisher is out of order")
    return text + "."


class ReviewLoop(Workflow):
    """draft, then review and revise in turn until the critic approves, then publish."""

    name = "review-loop"
    agents = ("writer", "critic")
    broken: ClassVar[bool] = False

    @phase(1)
    def draft(self, ctx: Any) -> str:
        return str(ctx.ask("writer", LONG + "Topic: draft"))

    @phase(2, routes=("revise", "publish"))
    def review(self, ctx: Any) -> Goto:
        verdict = str(ctx.ask("critic", LONG + f"Topic: review {ctx.visit}"))
        if verdict == "approved":
            return Goto("publish", output=verdict, summary=f"approved at review {ctx.visit}")
        return Goto("revise", output=verdict)

    @phase(3, routes=("review",))
    def revise(self, ctx: Any) -> Goto:
        asked = f"Topic: revise {ctx.visit} after {ctx.output('review')}"
        text = str(ctx.ask("writer", LONG + asked))
        return Goto("review", output=ctx.step("polish", polish, text, ctx.visit))

    @phase(4)
    def publish(self, ctx: Any) -> dict[str, Any]:
        return {"text": ctx.output("revise"), "verdict": ctx.output("review")}


class HastyReviewLoop(ReviewLoop):
    """A change of the code: the critic's first verdict is the last (it publishes)."""

    @phase(2, routes=("revise", "publish"))
    def review(self, ctx: Any) -> Goto:
        verdict = str(ctx.ask("critic", LONG + f"Topic: review {ctx.visit}"))
        return Goto("publish", output=verdict)


class EndlessReview(Workflow):
    """A critic that never approves, and a review that may run three times at most."""

    name = "endless-review"
    agents = ("critic",)

    @phase(1, routes=("revise",), max_visits=3)
    def review(self, ctx: Any) -> Goto:
        return Goto("revise", output=str(ctx.ask("critic", LONG + f"Topic: review {ctx.visit}")))

    @phase(2)
    def revise(self, ctx: Any) -> Goto:
        return Goto("review", output=ctx.visit)


class Triage(Workflow):
    """A triage that skips the long investigation when the input says it is simple."""

    name = "triage"

    @phase(1)
    def triage(self, ctx: Any) -> Any:
        if ctx.inputs.get("kind") == "simple":
            return Goto("answer", output="simple", summary="simple: no investigation")
        return "complex"

    @phase(2)
    def investigate(self, ctx: Any) -> str:
        return "investigated"

    @phase(3)
    def answer(self, ctx: Any) -> dict[str, Any]:
        try:
            found = ctx.output("investigate")
        except KeyError:
            found = None
        return {"triage": ctx.output("triage"), "investigation": found}


class LostRoute(Workflow):
    """Goes to a phase the workflow does not have."""

    name = "lost-route"

    @phase(1)
    def start(self, ctx: Any) -> Goto:
        return Goto(str(ctx.inputs.get("to", "nowhere")))

    @phase(2, routes=("finish",))
    def middle(self, ctx: Any) -> Goto:
        return Goto("start")

    @phase(3)
    def finish(self, ctx: Any) -> str:
        return "done"
