"""A run's state or history past the size its workflow allows warns once.

The warning is a ``run.size_warning`` event in the run's ``events.ndjson`` and a line on
stderr, each naming the largest items; a run that stays past the limit is not told again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator import Workflow, phase
from orchestrator.testing import WorkflowHarness

BIG = "A long answer that the state keeps while its phase runs. " * 100  # ~5.6 KiB
PROMPT = (
    "You are the writer. Answer the question below in full, with every detail you have, "
    "in plain words, and nothing else: "
)


class LargeAnswers(Workflow):
    name = "large-answers"
    agents = ("writer",)
    warn_state_bytes = 16 * 1024
    warn_history_bytes = 12 * 1024
    archive_after = 1

    @phase(1)
    def first(self, ctx: Any) -> dict[str, Any]:
        return {"answers": [len(ctx.ask("writer", f"{PROMPT} {n}")) for n in range(4)]}

    @phase(2)
    def second(self, ctx: Any) -> dict[str, Any]:
        return {"answers": [len(ctx.ask("writer", f"{PROMPT} again {n}")) for n in range(4)]}


class Quiet(LargeAnswers):
    name = "quiet-answers"
    warn_state_bytes = 1024 * 1024
    warn_history_bytes = 256 * 1024 * 1024


def drive(harness: WorkflowHarness) -> None:
    outcome = harness.run()
    while outcome.status == "paused":
        for request in outcome.pending:
            harness.respond(request.request_id, BIG)
        outcome = harness.resume()
    assert outcome.status == "completed", outcome.message


def warnings_of(workdir: Path) -> list[dict[str, Any]]:
    (log,) = (workdir / ".orchestrator" / "runs").glob("*/events.ndjson")
    events = [json.loads(line) for line in log.read_text().splitlines()]
    return [e["data"] for e in events if e["event"] == "run.size_warning"]


def test_a_state_and_a_history_past_their_sizes_warn_once_naming_the_largest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    drive(WorkflowHarness(LargeAnswers, tmp_path))

    warned = warnings_of(tmp_path)
    assert [w["what"] for w in warned] == ["state", "history"]
    state, history = warned
    assert state["bytes"] > state["limit"] == 16 * 1024
    assert history["bytes"] > history["limit"] == 12 * 1024
    # The largest items are named, largest first: the requests whose answers are big.
    assert len(state["largest"]) == 3
    assert all(item["item"].startswith("request ") for item in state["largest"][:2])
    sizes = [item["bytes"] for item in state["largest"]]
    assert sizes == sorted(sizes, reverse=True)
    assert all(item["bytes"] > len(BIG) for item in history["largest"])
    lines = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(lines) == 2, lines
    assert "its state is " in lines[0] and "warn_state_bytes" in lines[0]
    assert "its history is " in lines[1] and "warn_history_bytes" in lines[1]
    assert "largest: request " in lines[1]


def test_a_run_within_its_sizes_is_not_warned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    drive(WorkflowHarness(Quiet, tmp_path))

    assert warnings_of(tmp_path) == []
    assert "warning" not in capsys.readouterr().err
