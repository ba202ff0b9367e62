"""Workflows for the child run tests: a parent that starts two children at once, one of
which asks an agent and one of which runs a step (each step run is appended to the file
``CHILD_STEP_LOG`` names, so a test can tell that no child ran twice)."""

from __future__ import annotations

import os
from typing import Any

from orchestrator import Child, PhaseContext, Workflow, phase

PROMPT = (
    "You are the writer of a test of child runs. Answer with one short line of plain "
    "text, no quotes, about the topic that follows: "
)


def logged(name: str, value: Any) -> Any:
    """``value``, with the step's run written to the step log."""
    path = os.environ.get("CHILD_STEP_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write(f"{name}\n")
    return value


class Asker(Workflow):
    name = "child-asker"
    agents = ("writer",)

    @phase(1)
    def write(self, ctx: PhaseContext) -> dict[str, Any]:
        line = ctx.ask("writer", PROMPT + str(self.inputs["topic"]))
        return {"line": line, "topic": self.inputs["topic"]}


class Counter(Workflow):
    name = "child-counter"
    agents = ()

    @phase(1)
    def count(self, ctx: PhaseContext) -> int:
        topic = str(self.inputs["topic"])
        return ctx.step("count", lambda: logged(f"count {topic}", len(topic)))


class Family(Workflow):
    """Two children at once (one asks), then one more child by its id."""

    name = "child-family"
    agents = ()

    @phase(1)
    def fan_out(self, ctx: PhaseContext) -> dict[str, Any]:
        asked, counted = ctx.children_all(
            [
                Child(workflow=Asker, inputs={"topic": "rivers"}, id="asker"),
                (Counter, {"topic": "lakes"}),
            ]
        )
        return {"asked": asked, "counted": counted}

    @phase(2)
    def again(self, ctx: PhaseContext) -> dict[str, Any]:
        # the same id in the same run is the same child: its outputs, not a new run
        same = ctx.child(Asker, {"topic": "rivers"}, id="asker")
        total = ctx.step(
            "total", lambda: logged("total", ctx.output("fan_out")["counted"]["count"] + 1)
        )
        return {"same": same == ctx.output("fan_out")["asked"], "total": total}


class Failing(Workflow):
    name = "child-failing"
    agents = ()

    @phase(1)
    def boom(self, ctx: PhaseContext) -> None:
        ctx.step("boom", lambda: logged("boom", None))
        if not os.environ.get("CHILD_FIXED"):
            raise RuntimeError("the child broke")


class Caught(Workflow):
    """A parent whose child fails: the failure is raised into its phase."""

    name = "child-caught"
    agents = ()

    @phase(1)
    def run_child(self, ctx: PhaseContext) -> dict[str, Any]:
        return ctx.child(Failing, {})  # type: ignore[no-any-return]


class Approval(Workflow):
    """A child that waits for the signal ``approve``."""

    name = "child-approval"
    agents = ()

    @phase(1)
    def wait(self, ctx: PhaseContext) -> Any:
        return ctx.wait_for_signal("approve")


class AwaitsApproval(Workflow):
    """A parent whose one child waits for a signal."""

    name = "child-awaits-approval"
    agents = ()

    @phase(1)
    def spawn(self, ctx: PhaseContext) -> Any:
        return ctx.child(Approval, {}, id="approval")
