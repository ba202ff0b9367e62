"""Workflows of the lifecycle tests: one survey in two versions, and a phase that changed
in flight (``ctx.patched``)."""

from __future__ import annotations

from typing import Any, ClassVar

from orchestrator import Workflow, phase

LONG = "Say what you think of the topic below, in two short paragraphs, plainly. " * 2


class SurveyV1(Workflow):
    """Version 1: ``collect`` stores ``answers`` and ``count``."""

    name = "survey"
    agents = ("analyst",)

    @phase(1)
    def collect(self, ctx: Any) -> dict[str, Any]:
        return {"answers": ["yes", "no", "yes"], "count": 3}

    @phase(2)
    def summarise(self, ctx: Any) -> str:
        return str(
            ctx.ask("analyst", LONG + "Topic: " + ", ".join(ctx.output("collect")["answers"]))
        )

    @phase(3)
    def report(self, ctx: Any) -> str:
        return f"{ctx.output('collect')['count']} answers: {ctx.output('summarise')}"


class SurveyV2NoHook(Workflow):
    """Version 2 without its migration: ``collect`` now stores ``responses`` and ``total``."""

    name = "survey"
    agents = ("analyst",)
    version = 2

    @phase(1)
    def collect(self, ctx: Any) -> dict[str, Any]:
        return {"responses": ["yes", "no", "yes"], "total": 3}

    @phase(2)
    def summarise(self, ctx: Any) -> str:
        return str(
            ctx.ask("analyst", LONG + "Topic: " + ", ".join(ctx.output("collect")["responses"]))
        )

    @phase(3)
    def report(self, ctx: Any) -> str:
        return f"{ctx.output('collect')['total']} responses: {ctx.output('summarise')}"


class SurveyV2(SurveyV2NoHook):
    """Version 2 with the hook that brings a version 1 run's outputs over."""

    def migrate_v1_to_v2(self, outputs: dict[str, Any]) -> dict[str, Any]:
        collected = outputs["collect"]
        outputs["collect"] = {"responses": collected["answers"], "total": collected["count"]}
        return outputs


class Patchy(Workflow):
    """A phase whose scoring became a critic's review while runs were in flight."""

    name = "patchy"
    agents = ("writer", "critic")
    new_code: ClassVar[bool] = False

    @phase(1)
    def draft(self, ctx: Any) -> dict[str, Any]:
        if Patchy.new_code and ctx.patched("critic-review"):
            review = ctx.ask("critic", LONG + "Topic: review")
        else:
            review = ctx.step("score", lambda: "scored")
        text = ctx.ask("writer", LONG + "Topic: draft")
        return {"review": review, "text": text}

    @phase(2)
    def polish(self, ctx: Any) -> str:
        if Patchy.new_code and ctx.patched("critic-review"):
            return "polished after a review"
        return "polished"
