"""A step returns the same value, of the same types, before and after a pause.

Plain JSON data comes back as it is; attrs instances, alone or in lists and dicts, come
back structured into the step function's return annotation or ``output_type``. A value
that would come back different is refused when the step first returns, not after a
pause, where the phase would meet a ``dict`` it did not expect.
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar

import attrs
import pytest

from orchestrator import Workflow, phase

LONG = "Say what you think of the topic below, in two short paragraphs, plainly. " * 2


class Severity(enum.Enum):
    LOW = "low"
    HIGH = "high"


@attrs.frozen
class Finding:
    path: str
    score: int
    severity: Severity = Severity.LOW
    tags: list[str] = attrs.field(factory=list)


@attrs.frozen
class Review:
    findings: list[Finding]
    by_file: dict[str, Finding]
    lead: Finding | None = None


def one() -> Finding:
    return Finding("a.py", 3, Severity.HIGH, ["style"])


def many() -> list[Finding]:
    return [Finding("a.py", 1), Finding("b.py", 2, tags=["x", "y"])]


def nested() -> Review:
    first = Finding("a.py", 1)
    return Review(findings=[first, Finding("c.py", 9)], by_file={"a.py": first}, lead=first)


def by_file() -> dict[str, list[Finding]]:
    return {"a.py": [Finding("a.py", 1)], "b.py": []}


def unannotated():  # type: ignore[no-untyped-def]
    return Finding("d.py", 4)


def plain() -> dict[str, Any]:
    return {"files": ["a.py"], "count": 1, "ok": True, "none": None}


class Typed(Workflow):
    name = "typed"
    agents = ("writer",)
    seen: ClassVar[list[tuple[Any, ...]]] = []

    @phase(1)
    def review(self, ctx: Any) -> str:
        values = (
            ctx.step("one", one),
            ctx.step("many", many),
            ctx.step("nested", nested),
            ctx.step("by_file", by_file),
            ctx.step("explicit", unannotated, output_type=Finding),
            ctx.step("plain", plain),
        )
        Typed.seen.append(values)
        return str(ctx.ask("writer", LONG + "Topic: the findings"))


def test_typed_steps_are_equal_before_and_after_a_pause(workflow_harness: Any) -> None:
    Typed.seen = []
    harness = workflow_harness(Typed)
    (request,) = harness.run({}).pending
    harness.respond(request.request_id, "fine")
    assert harness.resume().status == "completed"
    first, replayed = Typed.seen
    assert first == replayed
    for before, after in zip(first, replayed, strict=True):
        assert type(before) is type(after)
    assert isinstance(replayed[1][0], Finding) and replayed[1][0].severity is Severity.LOW
    assert isinstance(replayed[2].by_file["a.py"], Finding)
    assert replayed[0].severity is Severity.HIGH
    assert isinstance(replayed[3]["a.py"][0], Finding)


@pytest.mark.parametrize(
    ("returned", "words"),
    [
        ("Finding('d.py', 4)", "would come back as dict after a pause, not as the Finding"),
        ("(1, 2)", "would come back as list after a pause, not as the tuple"),
        ("{1: 'a'}", "would come back as dict"),
        ("float('nan')", "cannot be stored as JSON"),
        ("object()", "cannot be stored as JSON"),
    ],
)
def test_a_value_that_would_come_back_different_is_refused_at_once(
    workflow_harness: Any, returned: str, words: str
) -> None:
    class Unfaithful(Workflow):
        name = "unfaithful"

        @phase(1)
        def go(self, ctx: Any) -> Any:
            return ctx.step("make", lambda: eval(returned, {"Finding": Finding}))

    outcome = workflow_harness(Unfaithful).run({})
    assert outcome.status == "failed"
    assert "step 'make' result" in outcome.message and words in outcome.message, outcome.message


def test_a_value_that_does_not_match_its_annotation_is_refused(workflow_harness: Any) -> None:
    def wrong() -> Finding:
        return {"path": "a.py"}  # type: ignore[return-value]

    class Mismatched(Workflow):
        name = "mismatched"

        @phase(1)
        def go(self, ctx: Any) -> Any:
            return ctx.step("wrong", wrong)

    outcome = workflow_harness(Mismatched).run({})
    assert outcome.status == "failed"
    assert "does not come back as Finding" in outcome.message, outcome.message


def test_typed_outputs_of_earlier_phases(workflow_harness: Any) -> None:
    class Outputs(Workflow):
        name = "outputs"

        @phase(1)
        def make(self, ctx: Any) -> Review:
            return nested()

        @phase(2)
        def read(self, ctx: Any) -> bool:
            review = ctx.output("make", Review)
            return bool(review == nested() and isinstance(review.lead, Finding))

    outcome = workflow_harness(Outputs).run({})
    assert outcome.status == "completed" and outcome.outputs["read"] is True
