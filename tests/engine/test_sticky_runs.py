"""What a clean pause hands the next resume in the same process (``PauseHandoff``) changes
nothing a run does: driven with the handoff kept and with it cleared before every resume
(as a new process), a run asks the same, records the same journal, ends with the same
outputs and tells the same evidence events; and engines of several runs sharing one
handoff from several threads each go on with their own run."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from orchestrator import Ask, PhaseContext, Workflow, phase
from orchestrator.engine.lifecycle import PauseHandoff
from orchestrator.testing import WorkflowHarness
from support.lineage_workflows import Rounds

PROMPT = (
    "You are the counter of a test of pauses kept in memory between resumes. Answer with "
    "one short line of plain text about the item: "
)


class Looping(Workflow):
    """A phase that asks several times, a step between, then a phase that asks twice."""

    name = "sticky-looping"
    agents = ("counter",)

    @phase(1)
    def loop(self, ctx: PhaseContext) -> list[str]:
        said = []
        for number in range(int(self.inputs.get("asks", 5))):
            said.append(ctx.ask("counter", PROMPT + str(number)))
            ctx.step(f"note {number}", lambda n=number: n * n)
        return said

    @phase(2)
    def pair(self, ctx: PhaseContext) -> list[Any]:
        return ctx.ask_all(
            [Ask(agent="counter", prompt=PROMPT + "a"), Ask(agent="counter", prompt=PROMPT + "b")]
        )


def answer_of(prompt: str) -> str:
    return f"heard {prompt.rsplit(' ', 1)[-1]}"


def drive(harness: WorkflowHarness, inputs: dict[str, Any], *, keep: bool) -> list[str]:
    """Run to the end, answering every request; what each pause asked, in order."""
    asked: list[str] = []
    outcome = harness.run(inputs)
    while outcome.status == "paused":
        for request in outcome.pending:
            asked.append(request.prompt)
            harness.respond(request.request_id, answer_of(request.prompt))
        if not keep:
            harness.handoff.clear()
        outcome = harness.resume()
    assert outcome.status == "completed", outcome.message
    return asked


def what_it_left(workdir: Path) -> dict[str, Any]:
    """Each ended run's outputs, the journals of its phases and its event kinds, by
    order of the runs' start (run ids differ from one drive to the other)."""
    runs = sorted(
        (workdir / ".orchestrator" / "runs").glob("*/state.json"),
        key=lambda p: json.loads(p.read_text())["phase_data"]["x_orchestrator"]["started_at"],
    )
    left = []
    for state_file in runs:
        state = json.loads(state_file.read_text())
        outputs = {k: v for k, v in state["phase_data"].items() if k != "x_orchestrator"}
        events = [
            json.loads(line)["event"]
            for line in (state_file.parent / "events.ndjson").read_text().splitlines()
        ]
        journals = [
            [
                {k: e[k] for k in ("position", "kind", "fingerprint", "result") if k in e}
                for e in json.loads(path.read_text())["entries"]
            ]
            for path in sorted(state_file.parent.glob("phases/*/journal.json"))
        ]
        left.append({"outputs": outputs, "events": events, "journals": journals})
    return left


@pytest.mark.parametrize(
    ("workflow", "inputs"),
    [(Looping, {"asks": 6}), (Rounds, {"rounds": 3})],
    ids=["asking-loop", "continue-as-new"],
)
def test_a_run_is_the_same_with_the_handoff_kept_or_cleared(
    tmp_path: Path, workflow: type[Workflow], inputs: dict[str, Any]
) -> None:
    kept_dir, cleared_dir = tmp_path / "kept", tmp_path / "cleared"
    kept_dir.mkdir()
    cleared_dir.mkdir()
    kept = WorkflowHarness(workflow, kept_dir)
    asked_kept = drive(kept, inputs, keep=True)
    asked_cleared = drive(WorkflowHarness(workflow, cleared_dir), inputs, keep=False)
    assert asked_kept == asked_cleared
    assert len(asked_kept) >= 3
    left = what_it_left(kept_dir)
    assert left == what_it_left(cleared_dir)
    assert left and all(run["journals"] for run in left)


def test_runs_sharing_one_handoff_from_threads_each_go_on_with_their_own(
    tmp_path: Path,
) -> None:
    shared = PauseHandoff()
    results: dict[int, list[str]] = {}
    failures: list[BaseException] = []
    start = threading.Barrier(6)

    def one(index: int) -> None:
        try:
            workdir = tmp_path / f"run{index}"
            workdir.mkdir()
            harness = WorkflowHarness(Looping, workdir)
            harness.handoff = shared  # as a worker gives every engine it builds
            start.wait()
            drive(harness, {"asks": 4 + index % 3}, keep=True)
            state = next((workdir / ".orchestrator" / "runs").glob("*/state.json"))
            results[index] = json.loads(state.read_text())["phase_data"]["loop"]
        except BaseException as exc:  # reported below, in the test's thread
            failures.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    for index in range(6):
        asks = 4 + index % 3
        assert results[index] == [answer_of(PROMPT + str(n)) for n in range(asks)]
