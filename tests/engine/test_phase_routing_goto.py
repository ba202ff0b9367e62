"""Routing between phases: a phase returns ``Goto`` to go back (a loop) or ahead (a skip).

A review loop runs until the critic approves, each visit of a phase with its own
evidence; the route is in the state, so a replay, a rewind, a fork, a retry and a
resume in a new process all follow it; ``max_visits`` ends a loop that would not end, and
a route to a phase the workflow lacks fails clearly.
"""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator import Goto, Workflow, WorkflowDefinitionError, phase
from orchestrator.engine.replay import load_recorded_run, replay_outputs, replay_run
from orchestrator.testing import MockAgentInvoker, WorkflowHarness
from support import sweeps
from support.cli import PATIENCE, child_env, command, orchestrate
from support.evidence_support import check_run_evidence, run_dir_of
from support.routing_flows import (
    LONG,
    EndlessReview,
    HastyReviewLoop,
    LostRoute,
    ReviewLoop,
    Triage,
    answer,
    critic_answer,
    polish,
    writer_answer,
)

TESTS = Path(__file__).resolve().parents[1]
FLOWS = TESTS / "support" / "routing_flows.py"
# The runs made in this process name their workflow ``support.routing_flows:...``.
IMPORTABLE = {"PYTHONPATH": str(TESTS)}
ROUTE = ["draft", "review", "revise", "review", "revise", "review", "publish"]


def invoker() -> MockAgentInvoker:
    return MockAgentInvoker({"writer": writer_answer, "critic": critic_answer})


def topics(mock: MockAgentInvoker) -> list[str]:
    """What each agent was asked, in order: ``critic review 2``, ``writer draft``, ..."""
    return [
        f"{call['agent_name']} {call['prompt'].rsplit('Topic: ', 1)[1]}"
        for call in mock.invocations
    ]


def state_of(workdir: Path) -> dict[str, Any]:
    """The run's last state: the live instance's, else its history's."""
    live = workdir / ".review-loop-state.json"
    path = live if live.exists() else run_dir_of(workdir) / "state.json"
    return dict(json.loads(path.read_text()))


@pytest.fixture
def looped(tmp_path: Path) -> tuple[WorkflowHarness, MockAgentInvoker]:
    """The review loop, run in process to its end (three reviews, two revisions)."""
    ReviewLoop.broken = False
    mock = invoker()
    harness = WorkflowHarness(ReviewLoop, tmp_path / "work", invoker=mock)
    harness.workdir.mkdir()
    outcome = harness.run()
    assert outcome.status == "completed", outcome.message
    return harness, mock


def test_a_review_loop_runs_until_the_critic_approves(
    looped: tuple[WorkflowHarness, MockAgentInvoker],
) -> None:
    harness, mock = looped
    assert topics(mock) == [
        "writer draft",
        "critic review 1",
        "writer revise 1 after changes 1",
        "critic review 2",
        "writer revise 2 after changes 2",
        "critic review 3",
    ]
    state = state_of(harness.workdir)
    assert [p["phase_name"] for p in state["completed_phases"]] == ROUTE
    assert state["completed_phases"][5]["result_summary"] == "approved at review 3"
    assert state["completed_phases"][2]["result_summary"] == "Completed revise; goes to review"
    # The latest visit's output is the phase's output; the earlier ones are kept apart.
    outputs = {k: v for k, v in state["phase_data"].items() if k != "x_orchestrator"}
    assert outputs == {
        "draft": "draft",
        "review": "approved",
        "revise": "revised 2.",
        "publish": {"text": "revised 2.", "verdict": "approved"},
    }
    record = state["phase_data"]["x_orchestrator"]
    assert [(r["from"], r["visit"], r["to"], r["index"]) for r in record["route"]] == [
        ("review", 1, "revise", 1),
        ("revise", 1, "review", 2),
        ("review", 2, "revise", 3),
        ("revise", 2, "review", 4),
        ("review", 3, "publish", 5),
    ]
    assert [(e["phase"], e["visit"], e["output"]) for e in record["earlier_visits"]] == [
        ("review", 1, "changes 1"),
        ("revise", 1, "revised 1."),
        ("review", 2, "changes 2"),
    ]
    # Each visit has its own evidence: results and journal.
    run_dir = run_dir_of(harness.workdir)
    phases = sorted(p.name for p in (run_dir / "phases").iterdir())
    assert phases == [
        "01-draft",
        "02-review",
        "02-review.2",
        "02-review.3",
        "03-revise",
        "03-revise.2",
        "04-publish",
    ]
    for name in phases:
        assert json.loads((run_dir / "phases" / name / "results.json").read_text())["status"] == (
            "pass"
        )
        assert (run_dir / "phases" / name / "journal.json").is_file()
    events = check_run_evidence(run_dir)
    gotos = [
        (e["data"]["skill"], e["data"]["visit"], e["data"]["to"])
        for e in events
        if e["event"] == "decision" and e["data"]["decision"] == "goto"
    ]
    assert gotos == [
        ("review", 1, "revise"),
        ("revise", 1, "review"),
        ("review", 2, "revise"),
        ("revise", 2, "review"),
        ("review", 3, "publish"),
    ]
    starts = [
        (e["data"]["output_dir"], e["data"].get("visit", 1))
        for e in events
        if e["event"] == "skill.start"
    ]
    assert starts[3] == ("phases/02-review.2", 2)


def test_a_phase_may_skip_ahead(tmp_path: Path) -> None:
    simple = WorkflowHarness(Triage, tmp_path / "simple")
    simple.workdir.mkdir()
    outcome = simple.run({"kind": "simple"})
    assert outcome.status == "completed", outcome.message
    assert outcome.outputs == {
        "triage": "simple",
        "answer": {"triage": "simple", "investigation": None},
    }
    state = json.loads((run_dir_of(simple.workdir) / "state.json").read_text())
    assert [p["phase_name"] for p in state["completed_phases"]] == ["triage", "answer"]
    assert not (run_dir_of(simple.workdir) / "phases" / "02-investigate").exists()
    check_run_evidence(run_dir_of(simple.workdir))
    # Without the skip, the phases run in order.
    full = WorkflowHarness(Triage, tmp_path / "full")
    full.workdir.mkdir()
    outcome = full.run({"kind": "hard"})
    assert outcome.outputs["answer"] == {"triage": "complex", "investigation": "investigated"}
    assert replay_run(run_dir_of(simple.workdir), Triage).replayed == ("triage", "answer")


def test_a_routed_run_replays_clean_and_a_changed_route_is_named(
    looped: tuple[WorkflowHarness, MockAgentInvoker],
) -> None:
    harness, _ = looped
    run_dir = run_dir_of(harness.workdir)
    replayed = orchestrate("replay", f"{FLOWS}:ReviewLoop", "--run", run_dir)
    assert replayed.returncode == 0, replayed.stderr
    assert "replays clean (7 phases: " + ", ".join(ROUTE) + ")" in replayed.stderr
    # Code whose critic's first verdict is the last would go elsewhere: the replay says so.
    report = replay_run(run_dir, HastyReviewLoop)
    assert not report.ok
    assert report.problem == (
        "phase 'review' (visit 1) now goes to phase 'publish'; the recorded run went to "
        "phase 'revise'"
    )
    assert report.replayed == ("draft",)
    hasty = orchestrate("replay", f"{FLOWS}:HastyReviewLoop", "--run", run_dir)
    assert hasty.returncode == 1
    assert "now goes to phase 'publish'" in hasty.stderr


def test_a_rewind_goes_back_to_the_latest_visit_and_the_run_follows_the_route(
    looped: tuple[WorkflowHarness, MockAgentInvoker],
) -> None:
    harness, mock = looped
    rewound = orchestrate("rewind", "--to", "revise", "--workdir", harness.workdir, env=IMPORTABLE)
    assert rewound.returncode == 0, rewound.stderr
    state = state_of(harness.workdir)
    assert (state["phase"], state["phase_name"]) == (3, "revise")
    assert [p["phase_name"] for p in state["completed_phases"]] == ROUTE[:4]
    record = state["phase_data"]["x_orchestrator"]
    assert record["visit"] == 2
    # Each phase has the output of its latest visit before the second revision.
    outputs = {k: v for k, v in state["phase_data"].items() if k != "x_orchestrator"}
    assert outputs == {"draft": "draft", "review": "changes 2", "revise": "revised 1."}
    (rewind,) = record["rewinds"]
    assert rewind["outputs"] == {
        "revise": "revised 2.",
        "review": "approved",
        "publish": {"text": "revised 2.", "verdict": "approved"},
    }
    assert [r["from"] for r in rewind["route"]] == ["revise", "review"]
    mock.reset()
    outcome = harness.resume()
    assert outcome.status == "completed", outcome.message
    # Only the second revision and the third review were asked again.
    assert topics(mock) == ["writer revise 2 after changes 2", "critic review 3"]
    state = state_of(harness.workdir)
    assert [p["phase_name"] for p in state["completed_phases"]] == ROUTE
    assert state["phase_data"]["publish"] == {"text": "revised 2.", "verdict": "approved"}
    check_run_evidence(run_dir_of(harness.workdir))
    assert replay_run(run_dir_of(harness.workdir), ReviewLoop).ok


def test_a_rewind_to_a_phase_the_route_skipped_is_refused(tmp_path: Path) -> None:
    harness = WorkflowHarness(Triage, tmp_path / "work")
    harness.workdir.mkdir()
    assert harness.run({"kind": "simple"}).status == "completed"
    refused = orchestrate(
        "rewind", "--to", "investigate", "--workdir", harness.workdir, env=IMPORTABLE
    )
    assert refused.returncode == 2
    assert "never entered that phase (its route went past it)" in refused.stderr


def test_a_fork_of_a_routed_run_starts_at_the_latest_visit(
    looped: tuple[WorkflowHarness, MockAgentInvoker], tmp_path: Path
) -> None:
    harness, _ = looped
    _, source = load_recorded_run(run_dir_of(harness.workdir))
    mock = invoker()
    fork = WorkflowHarness(ReviewLoop, tmp_path / "fork", invoker=mock)
    fork.workdir.mkdir()
    said = fork.engine().fork(
        source, from_phase="review", workdir=fork.workdir, output_path=str(fork.workdir)
    )
    assert "at phase 2 (review)" in said
    state = json.loads((fork.workdir / ".review-loop-state.json").read_text())
    assert [p["phase_name"] for p in state["completed_phases"]] == ROUTE[:5]
    assert state["phase_data"]["x_orchestrator"]["visit"] == 3
    assert {k: v for k, v in state["phase_data"].items() if k != "x_orchestrator"} == {
        "draft": "draft",
        "review": "changes 2",
        "revise": "revised 2.",
    }
    outcome = fork.resume()
    assert outcome.status == "completed", outcome.message
    assert topics(mock) == ["critic review 3"]  # the third review only
    assert outcome.outputs["publish"] == {"text": "revised 2.", "verdict": "approved"}
    fork_dir = run_dir_of(fork.workdir)
    assert sorted(p.name for p in (fork_dir / "phases").iterdir()) == ["02-review.3", "04-publish"]
    check_run_evidence(fork_dir)


def test_a_failure_in_a_looped_phase_is_retried_in_its_visit(tmp_path: Path) -> None:
    ReviewLoop.broken = True
    mock = invoker()
    harness = WorkflowHarness(ReviewLoop, tmp_path / "work", invoker=mock)
    harness.workdir.mkdir()
    try:
        failed = harness.run()
        assert failed.status == "failed"
        assert "phase 3 (revise): RuntimeError: the polisher is out of order" in failed.message
        run_dir = run_dir_of(harness.workdir)
        second = run_dir / "phases" / "03-revise.2" / "results.json"
        assert json.loads(second.read_text())["status"] == "error"
        assert json.loads((run_dir / "phases/03-revise/results.json").read_text())["status"] == (
            "pass"
        )
    finally:
        ReviewLoop.broken = False
    mock.reset()
    outcome = harness.retry()
    assert outcome.status == "completed", outcome.message
    # The second revision's answer was recorded: only the last review is asked.
    assert topics(mock) == ["critic review 3"]
    assert json.loads(second.read_text())["status"] == "pass"
    assert outcome.outputs["publish"] == {"text": "revised 2.", "verdict": "approved"}
    check_run_evidence(run_dir)
    assert replay_run(run_dir, ReviewLoop).ok


def test_max_visits_ends_a_loop_that_does_not_end(tmp_path: Path) -> None:
    mock = MockAgentInvoker({"critic": "changes"})
    harness = WorkflowHarness(EndlessReview, tmp_path / "work", invoker=mock)
    harness.workdir.mkdir()
    outcome = harness.run()
    assert outcome.status == "failed"
    assert (
        "phase 2 (revise): phase 'review' would be entered a 4th time, past its max_visits "
        "of 3: the route does not end; make the loop end, or raise @phase(1, max_visits=...)"
    ) in outcome.message
    assert len(mock.invocations) == 3  # three reviews, not a fourth
    state = json.loads((harness.workdir / ".endless-review-state.json").read_text())
    assert [p["phase_name"] for p in state["completed_phases"]] == [
        "review",
        "revise",
        "review",
        "revise",
        "review",
    ]
    assert state["phase_data"]["x_orchestrator"]["status"] == "failed"


def test_a_run_resumed_by_new_processes_in_the_middle_of_a_loop_goes_on(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    started = orchestrate("run", f"{FLOWS}:ReviewLoop", "--workdir", workdir)
    asked: list[str] = []
    result = started
    while result.returncode == 42:
        request = json.loads((workdir / ".agent-request.json").read_text())
        asked.append(f"{request['phase_name']}: {request['prompt'].rsplit('Topic: ', 1)[1]}")
        if len(asked) == 4:  # paused on the second review: the state says where it is
            status = orchestrate("status", "--workdir", workdir)
            assert "phase      2 review" in status.stdout, status.stdout
            state = state_of(workdir)
            assert state["phase_data"]["x_orchestrator"]["visit"] == 2
            assert state["phase_data"]["review"] == "changes 1"
        responded = orchestrate(
            "respond", "--workdir", workdir, "--request-id", request["request_id"], "--stdin",
            stdin=answer(request),
        )  # fmt: skip
        assert responded.returncode == 0, responded.stderr
        result = orchestrate("resume", "--workdir", workdir)
    assert result.returncode == 0, result.stderr
    assert asked == [
        "draft: draft",
        "review: review 1",
        "revise: revise 1 after changes 1",
        "review: review 2",
        "revise: revise 2 after changes 2",
        "review: review 3",
    ]
    output = json.loads(orchestrate("output", "--workdir", workdir).stdout)
    assert output["publish"] == {"text": "revised 2.", "verdict": "approved"}
    check_run_evidence(run_dir_of(workdir))


def test_a_route_to_a_phase_the_workflow_lacks_fails_clearly(tmp_path: Path) -> None:
    harness = WorkflowHarness(LostRoute, tmp_path / "lost")
    harness.workdir.mkdir()
    outcome = harness.run()
    assert outcome.status == "failed"
    assert (
        "phase 1 (start): phase 'start' returned Goto('nowhere'), and the workflow has no "
        "such phase (its phases: start, middle, finish); name one of them"
    ) in outcome.message
    undeclared = WorkflowHarness(LostRoute, tmp_path / "undeclared")
    undeclared.workdir.mkdir()
    outcome = undeclared.run({"to": "middle"})
    assert outcome.status == "failed"
    assert (
        "phase 2 (middle): phase 'middle' returned Goto('start'), which is not one of the "
        "routes it declares (finish)"
    ) in outcome.message


def test_routes_are_checked_when_the_class_is_made() -> None:
    with pytest.raises(WorkflowDefinitionError, match=r"routes name 'nope', which is not a phase"):

        class Unknown(Workflow):
            name = "unknown-route"

            @phase(1, routes=("nope",))
            def first(self, ctx: Any) -> Goto:
                return Goto("first")

    with pytest.raises(WorkflowDefinitionError, match=r"routes must be a tuple of phase names"):

        class Text(Workflow):
            name = "text-route"

            @phase(1, routes="first")  # type: ignore[arg-type]
            def first(self, ctx: Any) -> Goto:
                return Goto("first")

    with pytest.raises(WorkflowDefinitionError, match=r"max_visits must be an integer >= 1"):

        class Zero(Workflow):
            name = "zero-visits"

            @phase(1, max_visits=0)
            def first(self, ctx: Any) -> str:
                return "x"


def test_a_review_loop_on_postgresql_runs_until_approved(pg_dsn: str, tmp_path: Path) -> None:
    handler = shlex.join(
        [
            sys.executable,
            "-c",
            "import json, sys; sys.path.insert(0, sys.argv[1]); "
            "from support.routing_flows import answer; "
            "sys.stdout.write(answer(json.load(sys.stdin)))",
            str(TESTS),
        ]
    )
    done = orchestrate(
        "drive", f"{FLOWS}:ReviewLoop", "--workdir", tmp_path, "--handler", handler,
        "--store", pg_dsn,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    status = orchestrate("status", "--store", pg_dsn, "--run", run_id, "--json")
    assert json.loads(status.stdout)["status"] == "completed", status.stdout
    history = orchestrate("history", "--store", pg_dsn, "--run", run_id)
    assert history.returncode == 0, history.stderr
    assert history.stdout.count("Completed review; goes to revise") == 2
    assert history.stdout.count("Completed revise; goes to review") == 2
    assert "approved at review 3" in history.stdout


def drive_handler() -> str:
    """A ``drive`` handler that answers as :func:`answer` does."""
    return shlex.join(
        [
            sys.executable,
            "-c",
            "import json, sys; sys.path.insert(0, sys.argv[1]); "
            "from support.routing_flows import answer; "
            "sys.stdout.write(answer(json.load(sys.stdin)))",
            str(TESTS),
        ]
    )


def drive_loop(workdir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command("drive", f"{FLOWS}:ReviewLoop", "--workdir", workdir, "--handler", drive_handler()),
        env=child_env(env),
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.parametrize("sweep", sweeps.SWEEPS)
def test_a_loop_killed_at_any_durable_write_resumes_on_its_route(
    sweep: str, tmp_path: Path
) -> None:
    counted = tmp_path / "count"
    counted.mkdir()
    log = tmp_path / "points.log"
    listed = drive_loop(counted, ORCHESTRATOR_CRASH_AT="count", ORCHESTRATOR_CRASH_LOG=str(log))
    assert listed.returncode == 0, listed.stderr
    labels = [line.partition(" ")[2] for line in log.read_text().splitlines()]
    baseline = state_of(counted)
    for point in sweeps.chosen(sweep, labels):
        workdir = tmp_path / f"kill-{point}"
        workdir.mkdir()
        killed = drive_loop(
            workdir,
            ORCHESTRATOR_CRASH_AT=str(point),
            ORCHESTRATOR_CRASH_LOG=str(tmp_path / f"kill-{point}.log"),
        )
        assert killed.returncode == -signal.SIGKILL, (point, labels[point - 1], killed.stderr)
        again = drive_loop(workdir)
        assert again.returncode == 0, (point, labels[point - 1], again.stderr)
        state = state_of(workdir)
        assert [p["phase_name"] for p in state["completed_phases"]] == ROUTE, point
        assert {k: v for k, v in state["phase_data"].items() if k != "x_orchestrator"} == {
            k: v for k, v in baseline["phase_data"].items() if k != "x_orchestrator"
        }, point
        route = state["phase_data"]["x_orchestrator"]["route"]
        assert [(r["from"], r["visit"], r["to"]) for r in route] == [
            (r["from"], r["visit"], r["to"])
            for r in baseline["phase_data"]["x_orchestrator"]["route"]
        ], point
        check_run_evidence(run_dir_of(workdir))


class ArchivingReviewLoop(ReviewLoop):
    """The review loop, moving each finished request to the run's history at once."""

    archive_after = 1


def test_a_loop_back_moves_the_later_phase_s_requests_to_the_history(tmp_path: Path) -> None:
    harness = WorkflowHarness(ArchivingReviewLoop, tmp_path / "work")
    harness.workdir.mkdir()
    outcome = harness.run()
    while outcome.status == "paused":
        (request,) = outcome.pending
        if request.phase_name == "review" and request.prompt.endswith("Topic: review 3"):
            break
        harness.respond(
            request.request_id,
            critic_answer(request.prompt)
            if (request.agent_name == "critic")
            else writer_answer(request.prompt),
        )
        outcome = harness.resume()
    # Paused in the third review (phase 2): the revisions' requests (phase 3) are done
    # with, and kept in the run's history rather than in the state.
    state = state_of(harness.workdir)
    kept = {(r["phase"], r.get("x_archived", False)) for r in state["agent_requests"]}
    assert (3, True) in kept and (3, False) not in kept, kept
    harness.handoff.clear()  # the next engine reads the state back, as a new process does
    harness.respond(request.request_id, "approved")
    done = harness.resume()
    assert done.status == "completed", done.message
    assert done.outputs["publish"] == {"text": "revised 2.", "verdict": "approved"}
    assert replay_run(run_dir_of(harness.workdir), ArchivingReviewLoop).ok


class _LouderPolish(ReviewLoop):
    """A change of the code: the revision's step adds '!' in the second visit only."""

    @phase(3, routes=("review",))
    def revise(self, ctx: Any) -> Goto:
        asked = f"Topic: revise {ctx.visit} after {ctx.output('review')}"
        text = str(ctx.ask("writer", LONG + asked))
        polished = ctx.step("polish", polish, text, ctx.visit)
        return Goto("review", output=polished + ("!" if ctx.visit == 2 else ""))


def test_a_corpus_replay_of_a_routed_run_compares_each_visit(
    looped: tuple[WorkflowHarness, MockAgentInvoker],
) -> None:
    harness, _ = looped
    run_dir = run_dir_of(harness.workdir)
    same = replay_outputs(run_dir, ReviewLoop)
    assert (same.divergence, same.failure) == (None, None)
    assert [p.name for p in same.phases] == ROUTE
    assert [p.recorded for p in same.phases] == [p.now for p in same.phases]
    revisions = [p.recorded for p in same.phases if p.name == "revise"]
    assert revisions == ["revised 1.", "revised 2."]
    changed = replay_outputs(run_dir, _LouderPolish)
    assert (changed.divergence, changed.failure) == (None, None)
    differing = [(p.name, p.recorded, p.now) for p in changed.phases if p.recorded != p.now]
    # The second revision changed, and the publish phase built from it.
    assert differing == [
        ("revise", "revised 2.", "revised 2.!"),
        (
            "publish",
            {"text": "revised 2.", "verdict": "approved"},
            {"text": "revised 2.!", "verdict": "approved"},
        ),
    ]
