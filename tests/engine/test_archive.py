"""Finished requests move from the state to the run's history, and nothing is lost.

The state is rewritten at every checkpoint, so the engine keeps it small: once enough
requests of completed phases have gathered (``archive_after``), they are appended whole,
durably, to ``.orchestrator/runs/<run_id>/requests.ndjson`` and leave only the agent bridge
format's keys and their digest behind. The final history has every record whole again, also when the
process was killed with SIGKILL at any point of the run, the archive appends included.
A long-lived engine reuses the state it left at its last pause, unless it changed.
"""

from __future__ import annotations

import json
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from orchestrator import Engine
from orchestrator.adapters.file_bridge import FileBridge
from orchestrator.testing import WorkflowHarness
from support import sweeps
from support.cli import orchestrate

FIXTURE = Path(__file__).parents[1] / "fixtures" / "archive" / "many_asks.py"
REFERENCE = f"{FIXTURE}:ManyAsks"
HANDLER = (
    f'{sys.executable} -c "import json, sys; r = json.load(sys.stdin); '
    "print('fact about ' + r['prompt'].split()[-1])\""
)


def load_workflow() -> Any:
    from orchestrator.engine.loader import load_workflow as load

    return load(REFERENCE)


def answer(request: Any) -> str:
    return "fact about " + request.prompt.split()[-1]


def final_history(workdir: Path) -> dict[str, Any]:
    (history,) = (workdir / ".orchestrator" / "runs").glob("*/state.json")
    return json.loads(history.read_text())


def test_the_state_stays_small_and_the_history_is_whole(tmp_path: Path) -> None:
    workflow = load_workflow()
    harness = WorkflowHarness(workflow, tmp_path)
    state_file = tmp_path / ".many-asks-state.json"
    outcome = harness.run()
    kept_whole = []
    while outcome.status == "paused":
        state = json.loads(state_file.read_text())
        kept_whole.append(sum(1 for r in state["agent_requests"] if not r.get("x_archived")))
        harness.respond(outcome.pending[0].request_id, answer(outcome.pending[0]))
        outcome = harness.resume()
    assert outcome.status == "completed", outcome.message
    # never more than archive_after finished ones, plus the pending one
    assert max(kept_whole) <= workflow.archive_after + 1
    history = final_history(tmp_path)
    records = history["agent_requests"]
    assert [r["phase"] for r in records] == list(range(1, 13))
    assert all(r["status"] == "completed" and "x_archived" not in r for r in records)
    assert [json.loads(json.dumps(r["x_response"]))["response"] for r in records] == [
        f"fact about {n}" for n in range(1, 13)
    ]
    archive = next((tmp_path / ".orchestrator" / "runs").glob("*/requests.ndjson"))
    assert len(archive.read_bytes().splitlines()) >= 10


class CountingBridge(FileBridge):
    loads = 0

    def load_state(self) -> Any:
        CountingBridge.loads += 1
        return super().load_state()


def test_a_long_lived_engine_rereads_the_state_only_when_it_changed(tmp_path: Path) -> None:
    workflow = load_workflow()
    engine = Engine(workflow, bridge=CountingBridge(tmp_path, workflow.name))
    outcome = engine.start(workflow_ref=REFERENCE, workdir=tmp_path)
    harness = WorkflowHarness(workflow, tmp_path)
    for _ in range(3):
        harness.respond(outcome.pending[0].request_id, answer(outcome.pending[0]))
        outcome = engine.resume()
    assert CountingBridge.loads == 0  # its own pauses: nothing to re-read
    # Another engine (another process, say) moves the instance on ...
    harness.respond(outcome.pending[0].request_id, answer(outcome.pending[0]))
    other = harness.resume()  # its engine hands nothing to the first one
    # ... so the first one must read the state again, not act on what it remembers.
    harness.respond(other.pending[0].request_id, answer(other.pending[0]))
    outcome = engine.resume()
    assert CountingBridge.loads == 1
    assert outcome.pending[0].phase == other.pending[0].phase + 1


def drive(workdir: Path, crash_at: str | None = None, log: Path | None = None) -> int:
    env = {}
    if crash_at is not None and log is not None:
        env = {"ORCHESTRATOR_CRASH_AT": crash_at, "ORCHESTRATOR_CRASH_LOG": str(log)}
    driven = orchestrate("drive", REFERENCE, "--workdir", workdir, "--handler", HANDLER, env=env)
    return driven.returncode


def essence(history: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [
        (r["phase"], r["status"], r["x_request"]["prompt"], r["x_response"]["response"])
        for r in history["agent_requests"]
    ]


@pytest.mark.slow
@pytest.mark.parametrize("sweep", sweeps.SWEEPS)
def test_kill_9_at_every_point_loses_no_archived_request(tmp_path: Path, sweep: str) -> None:
    baseline_dir = tmp_path / "baseline"
    baseline_dir.mkdir()
    log = tmp_path / "points.log"
    assert drive(baseline_dir, "count", log) == 0
    labels = [line.partition(" ")[2] for line in log.read_text().splitlines()]
    assert "before-append requests.ndjson" in labels and "before-fsync requests.ndjson" in labels
    expected = essence(final_history(baseline_dir))

    def killed_and_resumed(point: int) -> tuple[int, list[tuple[Any, ...]]]:
        workdir = tmp_path / f"kill-{point}"
        workdir.mkdir()
        first = drive(workdir, str(point), tmp_path / f"kill-{point}.log")
        assert first == -signal.SIGKILL, f"point {point}: exit {first}"
        assert drive(workdir) == 0, f"point {point}: the resumed run did not finish"
        return point, essence(final_history(workdir))

    points = sweeps.chosen(sweep, labels)
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(killed_and_resumed, points))
    for point, got in results:
        assert got == expected, f"kill at point {point} changed the history"
    assert len(results) == len(points)
