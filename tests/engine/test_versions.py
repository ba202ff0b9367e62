"""Changing a workflow while runs are in flight: versions with migrations, ``ctx.patched``.

A state written by version 1 of a workflow (a fixture) resumes under version 2 through its
migration hook, the state before it kept in the run's history; without the hook, or under
an older version of the code, the resume is refused in one line with the state unchanged
byte for byte. A ``kill -9`` at every durable write of a migration never leaves a
half-migrated state. ``ctx.patched`` keeps a run that already passed a change on its old
path, and takes new runs, and runs that had not reached it, on the new one.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from orchestrator import OrchestratorError
from orchestrator.formats.state_signature import with_signature
from orchestrator.formats.strict_json import dumps_canonical
from orchestrator.testing import MockAgentInvoker, WorkflowHarness
from support.cli import orchestrate
from support.lifecycle_flows import Patchy, SurveyV1, SurveyV2, SurveyV2NoHook
from support.signing_support import signature_holds, signed_copy

FIXTURE = Path(__file__).parents[1] / "fixtures" / "lifecycle" / "survey-v1-state.json"
REQUEST = "00000000-0000-4000-8000-000000000002"  # the analyst's, pending in the fixture


def from_fixture(tmp_path: Path) -> Path:
    """A work directory holding the version 1 state, signed (as 'orchestrate trust' signs
    a run begun elsewhere)."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    signed_copy(FIXTURE, workdir / ".survey-state.json")
    return workdir


def test_a_version_1_state_resumes_under_version_2_through_its_migration(
    tmp_path: Path,
) -> None:
    workdir = from_fixture(tmp_path)
    harness = WorkflowHarness(SurveyV2, workdir=workdir)
    paused = harness.resume()
    assert [r.request_id for r in paused.pending] == [REQUEST]
    assert signature_holds(workdir / ".survey-state.json"), "the migrated state is signed again"
    state = json.loads((workdir / ".survey-state.json").read_text())
    assert state["phase_data"]["collect"] == {"responses": ["yes", "no", "yes"], "total": 3}
    record = state["phase_data"]["x_orchestrator"]
    assert record["workflow_version"] == 2
    (migration,) = record["migrations"]
    assert (migration["from"], migration["to"], migration["kept"]) == (1, 2, "state.v1.json")
    kept = workdir / ".orchestrator" / "runs" / record["run_id"] / "state.v1.json"
    assert kept.read_bytes() == FIXTURE.read_bytes()  # the state before, as it was
    from orchestrator.evidence.history import load_run, timeline

    lines = timeline(load_run(workdir)[0])
    assert any(
        "migrated from version 1 to 2 (the state before kept as state.v1.json)" in line
        for line in lines
    )
    harness.respond(REQUEST, "mostly yes")
    done = harness.resume()
    assert done.status == "completed"
    assert done.outputs["report"] == "3 responses: mostly yes"


def test_without_the_hook_the_resume_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    workdir = from_fixture(tmp_path)
    signed_v1 = (workdir / ".survey-state.json").read_bytes()
    with pytest.raises(OrchestratorError) as refused:
        WorkflowHarness(SurveyV2NoHook, workdir=workdir).resume()
    message = str(refused.value)
    assert "\n" not in message
    assert "written by version 1 of survey" in message and "has no migrate_v1_to_v2" in message
    assert (workdir / ".survey-state.json").read_bytes() == signed_v1
    assert not (workdir / ".orchestrator" / "runs").exists()


def test_older_code_refuses_a_newer_state(tmp_path: Path) -> None:
    workdir = from_fixture(tmp_path)
    WorkflowHarness(SurveyV2, workdir=workdir).resume()
    migrated = (workdir / ".survey-state.json").read_bytes()
    with pytest.raises(OrchestratorError, match="written by version 2 of survey, and this code"):
        WorkflowHarness(SurveyV1, workdir=workdir).resume()
    assert (workdir / ".survey-state.json").read_bytes() == migrated


def test_a_hook_that_fails_changes_nothing(tmp_path: Path) -> None:
    class Broken(SurveyV2NoHook):
        def migrate_v1_to_v2(self, outputs: dict[str, Any]) -> dict[str, Any]:
            raise KeyError("answers")

    workdir = from_fixture(tmp_path)
    signed_v1 = (workdir / ".survey-state.json").read_bytes()
    with pytest.raises(OrchestratorError, match="migrate_v1_to_v2 raised KeyError"):
        WorkflowHarness(Broken, workdir=workdir).resume()
    assert (workdir / ".survey-state.json").read_bytes() == signed_v1


# -- through real processes, with kill -9 at every durable write of the migration ----------

FLOW_V1 = """
from orchestrator import Workflow, phase


class Survey(Workflow):
    name = "survey"

    @phase(1)
    def collect(self, ctx):
        return {"answers": ["yes", "no"], "count": 2}

    @phase(2)
    def wait(self, ctx):
        ctx.sleep(3600)
        return "waited"

    @phase(3)
    def report(self, ctx):
        return str(ctx.output("collect")["count"])
"""

FLOW_V2 = """
from orchestrator import Workflow, phase


class Survey(Workflow):
    name = "survey"
    version = 2

    def migrate_v1_to_v2(self, outputs):
        outputs["collect"] = {"total": outputs["collect"]["count"]}
        return outputs

    @phase(1)
    def collect(self, ctx):
        return {"total": 2}

    @phase(2)
    def wait(self, ctx):
        ctx.sleep(3600)
        return "waited"

    @phase(3)
    def report(self, ctx):
        return str(ctx.output("collect")["total"])
"""

START, LATER = "2026-03-02T09:00:00Z", "2026-03-02T11:00:00Z"


def paused_v1(root: Path) -> Path:
    root.mkdir()
    flow = root / "flow.py"
    flow.write_text(FLOW_V1)
    workdir = root / "work"
    workdir.mkdir()
    started = orchestrate(
        "run", f"{flow}:Survey", "--workdir", workdir, env={"ORCHESTRATOR_NOW": START}
    )
    assert started.returncode == 42, started.stderr
    flow.write_text(FLOW_V2)
    return workdir


def test_the_cli_refuses_in_one_line_without_the_hook(tmp_path: Path) -> None:
    workdir = paused_v1(tmp_path / "run")
    (tmp_path / "run" / "flow.py").write_text(FLOW_V2.replace("def migrate_v1_to_v2", "def _x"))
    before = (workdir / ".survey-state.json").read_bytes()
    refused = orchestrate("resume", "--workdir", workdir, env={"ORCHESTRATOR_NOW": LATER})
    assert refused.returncode == 2
    (line,) = refused.stderr.splitlines()
    assert "has no migrate_v1_to_v2" in line
    assert (workdir / ".survey-state.json").read_bytes() == before


@pytest.mark.slow
def test_kill_9_at_every_write_of_a_migration_never_leaves_it_half_done(tmp_path: Path) -> None:
    later = {"ORCHESTRATOR_NOW": LATER}
    probe = paused_v1(tmp_path / "probe")
    log = tmp_path / "points.log"
    counting = {**later, "ORCHESTRATOR_CRASH_AT": "count", "ORCHESTRATOR_CRASH_LOG": str(log)}
    assert orchestrate("resume", "--workdir", probe, env=counting).returncode == 0
    points = log.read_text().splitlines()
    migration_points = [p for p in points if "state.v1.json" in p or "migrat" in p]
    assert migration_points, points
    # Every point up to the end of the migration's own state write, and one beyond.
    last = next(i for i, p in enumerate(points) if "after-rename .survey-state.json" in p)
    for number in range(1, last + 3):
        workdir = paused_v1(tmp_path / f"k{number}")
        v1_state = (workdir / ".survey-state.json").read_bytes()
        crash = {**later, "ORCHESTRATOR_CRASH_AT": str(number), "ORCHESTRATOR_CRASH_LOG": str(log)}
        killed = orchestrate("resume", "--workdir", workdir, env=crash)
        assert killed.returncode == -signal.SIGKILL, (number, killed.stderr)
        now = (workdir / ".survey-state.json").read_bytes()
        if now != v1_state:  # migrated whole, or not at all
            record = json.loads(now)["phase_data"]
            assert record["collect"] == {"total": 2}, number
            assert record["x_orchestrator"]["workflow_version"] == 2, number
        again = orchestrate("resume", "--workdir", workdir, env=later)
        assert again.returncode == 0, (number, again.stderr)
        (final,) = (workdir / ".orchestrator" / "runs").glob("*/state.json")
        assert json.loads(final.read_text())["phase_data"]["report"] == "2", number
        (kept,) = (workdir / ".orchestrator" / "runs").glob("*/state.v1.json")
        # the state before, as the engine read it: without the live file's signature
        unsigned = dumps_canonical(with_signature(json.loads(v1_state), None))
        assert kept.read_bytes() == unsigned, number


# -- ctx.patched -----------------------------------------------------------------------


def answer_all(harness: WorkflowHarness, outcome: Any) -> Any:
    while outcome.status == "paused":
        for request in outcome.pending:
            harness.respond(request.request_id, f"{request.agent_name} says fine")
        outcome = harness.resume()
    return outcome


def test_a_run_past_the_change_keeps_its_old_path(workflow_harness: Any) -> None:
    Patchy.new_code = False
    harness = workflow_harness(Patchy)
    paused = harness.run({})  # the old code scored, then asked the writer
    assert [r.agent_name for r in paused.pending] == ["writer"]
    Patchy.new_code = True  # deployed while the run waits
    done = answer_all(harness, paused)
    assert done.status == "completed", done.message
    assert done.outputs["draft"]["review"] == "scored"
    assert done.outputs["polish"] == "polished after a review"  # it had not reached this one


def test_a_new_run_takes_the_new_path(workflow_harness: Any) -> None:
    Patchy.new_code = True
    harness = workflow_harness(Patchy)
    paused = harness.run({})
    assert [r.agent_name for r in paused.pending] == ["critic"]
    done = answer_all(harness, paused)
    assert done.outputs == {
        "draft": {"review": "critic says fine", "text": "writer says fine"},
        "polish": "polished after a review",
    }


def test_the_new_path_asks_each_agent_once(workflow_harness: Any) -> None:
    """Answered in-process: the marker of the change takes a position of the journal like
    any call, and the asks after it are made once each."""
    Patchy.new_code = True
    invoker = MockAgentInvoker({"critic": "a review", "writer": "a draft"})
    outcome = workflow_harness(Patchy, invoker=invoker).run({})
    assert outcome.outputs["draft"] == {"review": "a review", "text": "a draft"}
    assert [i["agent_name"] for i in invoker.invocations] == ["critic", "writer"]
