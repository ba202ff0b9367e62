"""Workflows and host steps that the tests of a run's facts share (where a failed phase
raised; the tokens and cost of its answers), each made of real ``orchestrate`` processes."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from support.cli import orchestrate

FAILING_FLOW = """
from orchestrator import Workflow, phase


def check_count(items):
    if len(items) != 3:
        raise ValueError("the count is off; token=" + "Zx8qL2vN9rT4wY6pK3mB7cJ5")
    return len(items)


class Counter(Workflow):
    name = "counter"

    @phase(1)
    def count(self, ctx):
        return check_count(COUNT)
"""

RAISE_LINE = 7  # the line of the raise in FAILING_FLOW (its first line is empty)


def write_failing_flow(workdir: Path, items: list[int]) -> Path:
    flows = workdir / "flows"
    flows.mkdir(exist_ok=True)
    path = flows / "counting.py"
    path.write_text(FAILING_FLOW + f"\n\nCOUNT = {items!r}\n")
    return path


CREW_FLOW = """
from orchestrator import Workflow, phase


ROLE = (
    "You are the writer or the critic of a small test workflow about the sea. Answer in "
    "one plain sentence, with no preamble and no list. "
)


class Crew(Workflow):
    name = "crew"
    agents = ("writer", "critic")

    @phase(1)
    def draft(self, ctx):
        return ctx.ask("writer", ROLE + "Write one plain sentence about the tides, no preamble.")

    @phase(2)
    def review(self, ctx):
        verdict = ctx.ask("critic", ROLE + "Say in one word whether this sentence is clear: tides.")
        again = ctx.ask("writer", ROLE + "Write the sentence about the tides again, shorter.")
        return [verdict, again]
"""


def pending_one(workdir: Path) -> dict[str, Any]:
    listed = orchestrate("pending", "--workdir", workdir, "--json")
    assert listed.returncode == 0, listed.stderr
    (item,) = json.loads(listed.stdout)
    return dict(item["request"])


def answer(workdir: Path, text: str, metadata: dict[str, Any]) -> None:
    request = pending_one(workdir)
    document = {
        "version": "1.0",
        "request_id": request["request_id"],
        "status": "success",
        "response": text,
        "created_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "metadata": metadata,
    }
    path = workdir.parent / f"answer-{request['request_id']}.json"
    path.write_text(json.dumps(document))
    given = orchestrate("respond", "--workdir", workdir, "--document", path)
    assert given.returncode == 0, given.stderr
    resumed = orchestrate("resume", "--workdir", workdir)
    assert resumed.returncode in (0, 42), resumed.stderr
