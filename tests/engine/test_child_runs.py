"""Child runs on a work directory's files, with real ``orchestrate`` processes: a parent
starts two children at once (one asks an agent through the file bridge), the host answers
the child's request from the parent's pending list, and the parent completes with both
children's outputs; a cancel and a retry of the parent reach its children; a kill -9 at
every durable write of the cycle loses nothing and runs no child twice."""

from __future__ import annotations

import json
from collections import Counter as Tally
from pathlib import Path
from typing import Any

import pytest

from support.cli import orchestrate
from support.sweeps import SWEEPS, chosen

SUPPORT = Path(__file__).resolve().parents[1] / "support" / "child_runs_workflows.py"
FAMILY = f"{SUPPORT}:Family"
ANSWER = "Rivers run to the sea."
EXPECTED = {
    "fan_out": {
        "asked": {"write": {"line": ANSWER, "topic": "rivers"}},
        "counted": {"count": 5},
    },
    "again": {"same": True, "total": 6},
}


def env_for(steps: Path, **more: str) -> dict[str, str]:
    return {"CHILD_STEP_LOG": str(steps), **more}


def pending_of(workdir: Path, steps: Path) -> list[dict[str, Any]]:
    done = orchestrate("pending", "--json", "--workdir", workdir, env=env_for(steps))
    assert done.returncode == 0, done.stderr
    listed: list[dict[str, Any]] = json.loads(done.stdout)
    return listed


def record_of(state_file: Path) -> dict[str, Any]:
    data = json.loads(state_file.read_text(encoding="utf-8"))
    record: dict[str, Any] = data["phase_data"]["x_orchestrator"]
    return record


def kept_runs(workdir: Path) -> dict[str, Path]:
    """Every ended run under ``workdir`` (its own and its children's), by run id."""
    return {p.parent.name: p for p in workdir.rglob(".orchestrator/runs/*/state.json")}


def step_log(steps: Path) -> Tally[str]:
    if not steps.exists():
        return Tally()
    return Tally(steps.read_text(encoding="utf-8").splitlines())


def test_the_host_answers_a_child_from_the_parents_pending_list(tmp_path: Path) -> None:
    work, steps = tmp_path / "work", tmp_path / "steps.log"
    work.mkdir()
    ran = orchestrate("run", FAMILY, "--workdir", work, env=env_for(steps))
    assert ran.returncode == 42, ran.stderr
    assert "waiting for child run" in ran.stderr

    parent = record_of(work / ".child-family-state.json")
    assert len(parent["children"]) == 2
    assert parent["waiting_children"] == [f"{parent['run_id']}.asker"]
    asker_id = f"{parent['run_id']}.asker"

    listed = pending_of(work, steps)
    assert [(item["run_id"], item["request"]["agent_name"]) for item in listed] == [
        (asker_id, "writer")
    ]
    status = orchestrate("status", "--workdir", work, env=env_for(steps))
    assert f"waiting    for child run {asker_id}" in status.stdout
    request_id = listed[0]["request"]["request_id"]
    assert request_id in status.stdout

    answered = orchestrate(
        "respond", "--request-id", request_id, "--text", ANSWER, "--workdir", work,
        env=env_for(steps),
    )  # fmt: skip
    assert answered.returncode == 0, answered.stderr
    assert f"children/{asker_id}/" in answered.stdout  # the child's own place

    resumed = orchestrate("resume", "--workdir", work, env=env_for(steps))
    assert resumed.returncode == 0, resumed.stderr
    output = orchestrate("output", "--workdir", work, env=env_for(steps))
    assert json.loads(output.stdout) == EXPECTED

    runs = kept_runs(work)
    assert set(runs) == {parent["run_id"], *parent["children"]}
    for child in parent["children"]:
        child_record = record_of(runs[child])
        assert child_record["parent_run_id"] == parent["run_id"]
        assert child_record["status"] == "completed"
    assert record_of(runs[parent["run_id"]])["children"] == parent["children"]
    assert step_log(steps) == Tally({"count lakes": 1, "total": 1})

    # A replay of the parent uses the children's recorded outputs: it runs none of them.
    replayed = orchestrate(
        "replay", FAMILY, "--run", runs[parent["run_id"]].parent, env=env_for(steps)
    )
    assert replayed.returncode == 0, replayed.stderr
    assert step_log(steps) == Tally({"count lakes": 1, "total": 1})


def test_a_cancel_of_the_parent_cancels_its_children(tmp_path: Path) -> None:
    work, steps = tmp_path / "work", tmp_path / "steps.log"
    work.mkdir()
    assert orchestrate("run", FAMILY, "--workdir", work, env=env_for(steps)).returncode == 42
    parent = record_of(work / ".child-family-state.json")
    cancelled = orchestrate("cancel", "--workdir", work, env=env_for(steps))
    assert cancelled.returncode == 0, cancelled.stderr
    runs = kept_runs(work)
    statuses = {run_id: record_of(path)["status"] for run_id, path in runs.items()}
    asker_id = f"{parent['run_id']}.asker"
    counter_id = next(c for c in parent["children"] if c != asker_id)
    assert statuses == {
        parent["run_id"]: "cancelled",
        asker_id: "cancelled",  # it waited for its answer: cancelled with its parent
        counter_id: "completed",  # it had ended: left as it was
    }
    assert pending_of(work, steps) == []
    assert not list(work.rglob(".*-state.json"))


def test_a_failed_child_fails_the_parent_and_a_retry_of_the_parent_reaches_it(
    tmp_path: Path,
) -> None:
    work, steps = tmp_path / "work", tmp_path / "steps.log"
    work.mkdir()
    caught = f"{SUPPORT}:Caught"
    ran = orchestrate("run", caught, "--workdir", work, env=env_for(steps))
    assert ran.returncode == 1, ran.stderr
    parent = record_of(work / ".child-caught-state.json")
    (child,) = parent["children"]
    assert f"child run {child} failed" in parent["failure"]
    assert "the child broke" in parent["failure"]
    child_state = work / ".orchestrator" / "children" / child / ".child-failing-state.json"
    assert record_of(child_state)["status"] == "failed"

    # A resume of the failed parent goes nowhere: the failure is recorded.
    resumed = orchestrate("resume", "--workdir", work, env=env_for(steps))
    assert resumed.returncode == 1 and "the run already failed" in resumed.stderr

    retried = orchestrate("retry", "--workdir", work, env=env_for(steps, CHILD_FIXED="1"))
    assert retried.returncode == 0, retried.stderr
    runs = kept_runs(work)
    assert set(runs) == {parent["run_id"], child}  # the same child, retried: no new one
    assert record_of(runs[child])["status"] == "completed"
    assert len(record_of(runs[child])["tries"]) == 1
    # the child's phase went on from its journal: its step, which succeeded, ran once
    assert step_log(steps) == Tally({"boom": 1})


def test_a_workflow_may_declare_no_agents(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    ran = orchestrate(
        "run", f"{SUPPORT}:Counter", "--input", "topic=ponds", "--workdir", work
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    output = orchestrate("output", "--workdir", work)
    assert json.loads(output.stdout) == {"count": 5}


# -- kill -9 at every durable write ----------------------------------------------------------


def host_until_done(work: Path, steps: Path) -> None:
    """What a host does with the work directory, whatever a crash left: start the run if
    nothing of it is there, answer what the parent's pending list shows, resume, until
    the run completes."""
    for _ in range(12):
        if not list(work.glob(".*-state.json")) and not kept_runs(work):
            done = orchestrate("run", FAMILY, "--workdir", work, env=env_for(steps))
        else:
            for item in pending_of(work, steps):
                answered = orchestrate(
                    "respond", "--request-id", item["request"]["request_id"], "--text",
                    ANSWER, "--workdir", work, env=env_for(steps), traceback_ok=False,
                )  # fmt: skip
                assert answered.returncode in (0, 2), answered.stderr  # 2: answered before
            done = orchestrate("resume", "--workdir", work, env=env_for(steps))
        if done.returncode == 0:
            return
        assert done.returncode == 42, done.stderr
    raise AssertionError(f"{work}: the run did not complete")


def crash_labels(tmp_path: Path, steps: Path) -> tuple[list[str], list[str]]:
    """The crash points of ``run`` and of the ``resume`` after the answer, in order."""
    work = tmp_path / "count"
    work.mkdir()
    logs = tmp_path / "run.points", tmp_path / "resume.points"
    count = {"ORCHESTRATOR_CRASH_AT": "count"}
    ran = orchestrate(
        "run", FAMILY, "--workdir", work,
        env=env_for(steps, **count, ORCHESTRATOR_CRASH_LOG=str(logs[0])),
    )  # fmt: skip
    assert ran.returncode == 42, ran.stderr
    (item,) = pending_of(work, steps)
    orchestrate(
        "respond", "--request-id", item["request"]["request_id"], "--text", ANSWER,
        "--workdir", work, check=True,
    )  # fmt: skip
    resumed = orchestrate(
        "resume", "--workdir", work,
        env=env_for(steps, **count, ORCHESTRATOR_CRASH_LOG=str(logs[1])),
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    return tuple(  # type: ignore[return-value]
        [line.partition(" ")[2] for line in log.read_text().splitlines()] for log in logs
    )


def in_step_window(labels: list[str], point: int, step: str, state_file: str) -> bool:
    """Whether a kill at ``point`` comes after ``step`` ran and before the state that
    records it is in place: the step runs again (at least once, as every step)."""
    ran = next((i for i, label in enumerate(labels, 1) if label == f"after-step-run {step}"), None)
    if ran is None or point < ran:
        return False
    placed = next(
        i for i, label in enumerate(labels, 1) if i > ran and label == f"after-rename {state_file}"
    )
    return point < placed


@pytest.mark.slow
@pytest.mark.parametrize("sweep", SWEEPS)
def test_kill_9_at_every_durable_write_of_the_cycle_loses_nothing(
    tmp_path: Path, sweep: str
) -> None:
    run_labels, resume_labels = crash_labels(tmp_path, tmp_path / "count-steps.log")
    assert "after-step-run count" in run_labels
    cases = [("run", p) for p in chosen(sweep, run_labels)]
    cases += [("resume", p) for p in chosen(sweep, resume_labels)]
    assert len(cases) >= 30
    for command_name, point in cases:
        work = tmp_path / f"{command_name}-{point}"
        work.mkdir()
        steps = tmp_path / f"{command_name}-{point}.steps"
        crash = {"ORCHESTRATOR_CRASH_AT": str(point)}
        if command_name == "resume":
            assert (
                orchestrate("run", FAMILY, "--workdir", work, env=env_for(steps)).returncode == 42
            )
            (item,) = pending_of(work, steps)
            orchestrate(
                "respond", "--request-id", item["request"]["request_id"], "--text", ANSWER,
                "--workdir", work, check=True,
            )  # fmt: skip
        workflow = [FAMILY] if command_name == "run" else []
        killed = orchestrate(
            command_name, *workflow, "--workdir", work, env=env_for(steps, **crash)
        )
        assert killed.returncode == -9, (command_name, point, killed.stderr)
        host_until_done(work, steps)
        output = orchestrate("output", "--workdir", work, env=env_for(steps))
        assert json.loads(output.stdout) == EXPECTED, (command_name, point)
        runs = kept_runs(work)
        assert len(runs) == 3, (command_name, point, sorted(runs))  # one parent, two children
        parent_id = next(r for r, p in runs.items() if record_of(p).get("parent_run_id") is None)
        assert sorted(record_of(runs[parent_id])["children"]) == sorted(set(runs) - {parent_id})
        counted = step_log(steps)
        labels = run_labels if command_name == "run" else resume_labels
        count = 2 if in_step_window(labels, point, "count", ".child-counter-state.json") else 1
        total = 2 if in_step_window(labels, point, "total", ".child-family-state.json") else 1
        assert counted == Tally({"count lakes": count, "total": total}), (
            command_name,
            point,
            labels[point - 1],
        )


def test_the_store_takes_a_childs_answer_given_to_the_parent(tmp_path: Path) -> None:
    """What the MCP server and the UI do: answer a request of the run they show (the
    parent) through the run store port; the store puts it in the child's place."""
    from orchestrator._ports import PendingInput, RespondInput, RunInput
    from orchestrator.adapters.file_runs import FileRunStore
    from orchestrator.cli.instance import response_document

    work, steps = tmp_path / "work", tmp_path / "steps.log"
    work.mkdir()
    assert orchestrate("run", FAMILY, "--workdir", work, env=env_for(steps)).returncode == 42
    parent = record_of(work / ".child-family-state.json")
    store = FileRunStore(work)
    (item,) = store.pending(PendingInput(run_id=parent["run_id"]))
    assert item.run_id == f"{parent['run_id']}.asker"
    where = store.respond(
        RespondInput(
            run=RunInput(run_id=parent["run_id"]),
            response=response_document(item.request_id, text=ANSWER),
        )
    )
    assert f"children/{item.run_id}/" in where
    resumed = orchestrate("resume", "--workdir", work, env=env_for(steps))
    assert resumed.returncode == 0, resumed.stderr
    output = orchestrate("output", "--workdir", work, env=env_for(steps))
    assert json.loads(output.stdout) == EXPECTED


def test_the_harness_runs_children_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.testing import MockAgentInvoker, WorkflowHarness
    from support.child_runs_workflows import Family

    steps = tmp_path / "steps.log"
    invoker = MockAgentInvoker({"writer": ANSWER})
    monkeypatch.setenv("CHILD_STEP_LOG", str(steps))
    outcome = WorkflowHarness(Family, tmp_path, invoker=invoker).run()
    assert outcome.status == "completed", outcome.message
    assert outcome.outputs == EXPECTED
    assert len(invoker.get_invocations("writer")) == 1
    assert step_log(steps) == Tally({"count lakes": 1, "total": 1})


def test_a_signal_sent_in_the_parents_place_reaches_the_child_that_waits_for_it(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    ran = orchestrate("run", f"{SUPPORT}:AwaitsApproval", "--workdir", work)
    assert ran.returncode == 42, ran.stderr
    (child_id,) = record_of(next(work.glob(".*-state.json")))["waiting_children"]
    status = orchestrate("status", "--workdir", work)
    assert (
        f"child run {child_id} waits for signal approve  -> "
        f"'orchestrate signal approve --run {child_id}'" in status.stdout
    ), status.stdout
    # The child's own status is read from the parent's place.
    child = orchestrate("status", "--run", child_id, "--json", "--workdir", work)
    assert json.loads(child.stdout)["waiting_for_signal"] == "approve", child.stderr
    sent = orchestrate("signal", "approve", "--data", '{"by": "ann"}', "--workdir", work)
    assert sent.returncode == 0, sent.stderr
    # Kept in the child's inbox, not the parent's (which waits for no signal).
    assert not list(work.glob(".orchestrator/runs/*/signals.ndjson"))
    resumed = orchestrate("resume", "--workdir", work)
    assert resumed.returncode == 0, resumed.stderr
    output = orchestrate("output", "--workdir", work)
    assert json.loads(output.stdout) == {"spawn": {"wait": {"by": "ann"}}}


def test_a_signal_may_name_the_child_run(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    assert orchestrate("run", f"{SUPPORT}:AwaitsApproval", "--workdir", work).returncode == 42
    (child_id,) = record_of(next(work.glob(".*-state.json")))["waiting_children"]
    sent = orchestrate(
        "signal", "approve", "--run", child_id, "--data", '"yes"', "--workdir", work
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    assert orchestrate("resume", "--workdir", work).returncode == 0
    output = orchestrate("output", "--workdir", work)
    assert json.loads(output.stdout) == {"spawn": {"wait": "yes"}}
