"""The step evidence every run leaves: events.ndjson and results.json, written by
the engine without the author doing anything.

Each test runs a small workflow through the real file bridge in a temporary directory
and judges the run's directory with ``evidence_support.check_run_evidence`` (every line
and document valid against the shipped schemas, the story whole), then looks at what
the test is about.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest

from orchestrator import AgentInvocationError, Ask, PhaseResult, RetryPolicy, Workflow, phase
from orchestrator.testing import MockAgentInvoker, WorkflowHarness
from support.cli import orchestrate
from support.evidence_support import check_run_evidence, run_dir_of
from support.signing_support import sign_state_file

LONG = (
    "Please answer carefully and completely; this sentence pads every prompt of these tests "
    "past the request contract's minimum length. "
)


def prompt(topic: str) -> str:
    return f"{LONG}Topic: {topic}"


@attrs.frozen
class Verdict:
    score: int


class Review(Workflow):
    """A step, an author's event, an artifact and an ask in phase 1; two asks in phase 2."""

    name = "review"
    agents = ("reviewer", "critic")

    @phase(1, asks_agents=True)
    def gather(self, ctx: Any) -> PhaseResult:
        files = ctx.step("list_files", lambda: ["a.py", "b.py"])
        for name in files:
            ctx.event("review.file_analyzed", {"file": name, "lines": 10})
        where = ctx.artifact("file-list", "files.txt", "\n".join(files) + "\n")
        answer = ctx.ask("reviewer", prompt("files " + " ".join(files)))
        return PhaseResult(output={"answer": answer, "where": where}, summary="gathered")

    @phase(2, asks_agents=True)
    def judge(self, ctx: Any) -> dict[str, Any]:
        first, second = ctx.ask_all(
            [Ask(agent="critic", prompt=prompt("one")), Ask(agent="critic", prompt=prompt("two"))]
        )
        return {"first": first, "second": second}


def names(events: list[dict[str, Any]]) -> list[str]:
    return [e["event"] for e in events]


def test_an_in_process_run_leaves_a_valid_run_directory(workflow_harness: Any) -> None:
    mock = MockAgentInvoker({"reviewer": json.dumps({"ok": True, "confidence": 0.8})})
    mock.add_response("critic", "fine")
    harness = workflow_harness(Review, invoker=mock)
    outcome = harness.run({})
    assert outcome.exit_code == 0
    run_dir = run_dir_of(harness.workdir)
    events = check_run_evidence(run_dir)
    assert names(events) == [
        "run.start",
        "skill.start", "tool.call", "tool.result",
        "review.file_analyzed", "review.file_analyzed", "artifact.written",
        "agent.start", "agent.end", "skill.end",
        "skill.start", "agent.start", "agent.start", "agent.end", "agent.end", "skill.end",
        "run.end",
    ]  # fmt: skip
    assert [e["data"]["file"] for e in events if e["event"] == "review.file_analyzed"] == [
        "a.py",
        "b.py",
    ]
    artifact = next(e["data"] for e in events if e["event"] == "artifact.written")
    assert artifact["path"] == "files.txt" and artifact["media_type"] == "text/plain"
    assert artifact["bytes"] == len(b"a.py\nb.py\n")
    assert outcome.outputs["gather"]["where"] == "phases/01-gather/files.txt"
    assert (run_dir / "phases/01-gather/files.txt").read_bytes() == b"a.py\nb.py\n"
    gather = json.loads((run_dir / "phases/01-gather/results.json").read_text())
    assert gather["status"] == "pass" and gather["summary"] == "gathered"
    assert gather["confidence"] == 0.8  # the least confident of the phase's answers
    assert gather["artifacts"] == [
        {"name": "file-list", "path": "files.txt", "media_type": "text/plain"}
    ]
    reviewer = next(e["data"] for e in events if e["event"] == "agent.end")
    document = json.loads((run_dir / reviewer["output_dir"] / "results.json").read_text())
    assert document["status"] == "pass" and document["confidence"] == 0.8
    assert document["metadata"]["confidence_reported"] is True
    assert (run_dir / reviewer["output_dir"] / "response.json").read_text() == json.dumps(
        {"ok": True, "confidence": 0.8}
    )
    assert (run_dir / reviewer["output_dir"] / "prompt.md").read_text().startswith(LONG)
    critic = [e["data"] for e in events if e["event"] == "agent.end"][1]
    document = json.loads((run_dir / critic["output_dir"] / "results.json").read_text())
    # No confidence reported: none is claimed.
    assert document["confidence"] == 0.0 and document["metadata"]["confidence_reported"] is False
    assert document["artifacts"][1] == {
        "name": "response",
        "path": "response.txt",
        "media_type": "text/plain",
    }
    judge = json.loads((run_dir / "phases/02-judge/results.json").read_text())
    assert judge["confidence"] == 0.0


def test_pauses_and_resumes_make_one_log_without_repeats(workflow_harness: Any) -> None:
    harness = workflow_harness(Review)
    outcome = harness.run({})
    run_dir = run_dir_of(harness.workdir)
    first = check_run_evidence(run_dir, finished=False)
    assert names(first)[-2:] == ["agent.start", "run.pause"]
    log = (run_dir / "events.ndjson").read_bytes()
    assert harness.resume().exit_code == 42  # nothing answered: nothing new to tell
    assert (run_dir / "events.ndjson").read_bytes() == log
    (request,) = outcome.pending
    harness.respond(request.request_id, "looks fine")
    outcome = harness.resume()
    assert outcome.exit_code == 42 and len(outcome.pending) == 2
    middle = check_run_evidence(run_dir, finished=False)
    assert middle[: len(first)] == first  # the log only grew
    # The replayed phase told its step, events and artifact once.
    assert names(middle).count("tool.call") == 1
    assert names(middle).count("review.file_analyzed") == 2
    assert names(middle).count("artifact.written") == 1
    one, two = outcome.pending
    harness.respond(two.request_id, "second")
    assert harness.resume().exit_code == 42
    after_one = check_run_evidence(run_dir, finished=False)
    assert names(after_one)[len(middle) :] == ["agent.end", "run.pause"]
    harness.respond(one.request_id, "first")
    assert harness.resume().exit_code == 0
    events = check_run_evidence(run_dir)
    assert events[: len(after_one)] == after_one
    assert names(events)[len(after_one) :] == ["agent.end", "skill.end", "run.end"]
    assert events[-1]["data"]["status"] == "completed"
    assert events[-1]["data"]["phases_completed"] == 2


class Retried(Workflow):
    name = "retried"
    agents = ("flaky",)

    @phase(1)
    def only(self, ctx: Any) -> str:
        return str(ctx.ask("flaky", prompt("again")))


def test_a_retried_attempt_ends_before_its_retry_starts(workflow_harness: Any) -> None:
    answers = iter([AgentInvocationError("boom", error_type="TIMEOUT"), "late but fine"])

    def flaky(_prompt: str) -> str:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    harness = workflow_harness(Retried, invoker=MockAgentInvoker({"flaky": flaky}))
    assert harness.run({}).exit_code == 0
    events = check_run_evidence(run_dir_of(harness.workdir))
    agent = [e for e in events if e["event"].startswith("agent.")]
    starts = [(e["event"], e["data"].get("attempt")) for e in agent][::2]
    assert starts == [("agent.start", 1), ("agent.start", 2)]
    first_end, second_end = agent[1]["data"], agent[3]["data"]
    assert first_end["status"] == "error" and first_end["error_type"] == "TIMEOUT"
    assert f"retried as {agent[2]['data']['request_id']}" in first_end["summary"]
    assert second_end["status"] == "pass"


class Fallback(Workflow):
    name = "fallback"
    agents = ("judge",)
    retry_policy = RetryPolicy(attempts=1)  # a refused answer is not asked again

    @phase(1, fallback="guess")
    def decide(self, ctx: Any) -> dict[str, Any]:
        verdict = ctx.ask("judge", prompt("score it"), output_type=Verdict)
        return {"score": verdict.score}

    def guess(self, ctx: Any, error: Exception) -> dict[str, Any]:
        return {"score": 0}


def test_an_unusable_answer_fails_its_step_and_the_fallback_is_a_decision(
    workflow_harness: Any,
) -> None:
    harness = workflow_harness(Fallback)
    (request,) = harness.run({}).pending
    harness.respond(request.request_id, "not json at all")
    outcome = harness.resume()
    assert outcome.exit_code == 0 and outcome.outputs["decide"] == {"score": 0}
    run_dir = run_dir_of(harness.workdir)
    events = check_run_evidence(run_dir)
    assert names(events) == [
        "run.start", "skill.start", "agent.start", "run.pause", "agent.end", "error",
        "decision", "skill.end", "run.end",
    ]  # fmt: skip
    end, error, decision = events[4]["data"], events[5]["data"], events[6]["data"]
    assert end["status"] == "fail"  # the answer came, was refused at the gate...
    assert error["error_type"] == "PARSE_ERROR"  # ...and could not be used
    assert decision == {
        "skill": "decide",
        "decision": "fallback",
        "method": "guess",
        "request_id": request.request_id,
        "because": decision["because"],
    }
    results = json.loads((run_dir / end["output_dir"] / "results.json").read_text())
    assert results["status"] == "fail" and "PARSE_ERROR" in results["summary"]


class Broken(Workflow):
    name = "broken"
    agents = ("a", "b")

    @phase(1)
    def both(self, ctx: Any) -> list[Any]:
        return list(
            ctx.ask_all([Ask(agent="a", prompt=prompt("a")), Ask(agent="b", prompt=prompt("b"))])
        )


def test_a_failed_run_closes_its_story(workflow_harness: Any) -> None:
    harness = workflow_harness(Broken)
    first, second = harness.run({}).pending
    harness.respond(
        first.request_id, "", status="error", error_type="AGENT_NOT_FOUND", error_message="no a"
    )
    harness.respond(second.request_id, "b answered")
    outcome = harness.resume()
    assert outcome.exit_code == 1
    run_dir = run_dir_of(harness.workdir)
    events = check_run_evidence(run_dir)
    assert names(events)[-5:] == ["agent.end", "agent.end", "error", "skill.end", "run.end"]
    ended = {e["data"]["request_id"]: e["data"]["status"] for e in events[-5:-3]}
    assert ended == {first.request_id: "error", second.request_id: "pass"}
    assert events[-3]["data"]["fatal"] is True
    assert events[-2]["data"]["status"] == "error"
    assert events[-1]["data"]["status"] == "failed"
    assert "AGENT_NOT_FOUND" in events[-1]["data"]["failure"]
    phase_results = json.loads((run_dir / "phases/01-both/results.json").read_text())
    assert (phase_results["status"], phase_results["confidence"]) == ("error", 0.0)
    assert harness.resume().exit_code == 1  # and stays told once
    assert check_run_evidence(run_dir) == events


def test_cancel_tells_the_end_and_withdraws_what_was_pending(workflow_harness: Any) -> None:
    harness = workflow_harness(Broken)
    harness.run({})
    harness.engine().cancel()
    events = check_run_evidence(run_dir_of(harness.workdir))
    assert names(events)[-3:] == ["agent.end", "agent.end", "run.end"]
    assert {e["data"]["status"] for e in events[-3:-1]} == {"abstain"}
    assert events[-1]["data"]["status"] == "cancelled"


class Caught(Workflow):
    """A step that fails is caught; the phase goes on, asks, and is replayed."""

    name = "caught"
    agents = ("a",)
    tries: list[int] = []

    @phase(1)
    def go(self, ctx: Any) -> dict[str, Any]:
        try:
            ctx.step("fragile", self.fragile)
            path = "fragile worked"
        except RuntimeError as exc:
            path = f"caught: {exc}"
        kept = ctx.step("sturdy", lambda: "kept")
        return {"answer": ctx.ask("a", prompt("go")), "kept": kept, "path": path}

    def fragile(self) -> str:
        Caught.tries.append(1)
        if len(Caught.tries) == 1:
            raise RuntimeError("first time")
        return "second time"


def test_a_caught_step_failure_is_recorded_and_raised_again_on_replay(
    workflow_harness: Any,
) -> None:
    """The failure is the step's outcome: on replay the same exception (class and
    message) is raised from the record, so the phase takes the same path and the step
    does not run again, though it would work now."""
    Caught.tries = []
    harness = workflow_harness(Caught)
    (request,) = harness.run({}).pending
    harness.respond(request.request_id, "answer")
    outcome = harness.resume()
    assert outcome.exit_code == 0, outcome.message
    assert outcome.outputs["go"] == {
        "answer": "answer",
        "kept": "kept",
        "path": "caught: first time",
    }
    assert Caught.tries == [1]
    events = check_run_evidence(run_dir_of(harness.workdir))
    tools = [
        (e["data"]["tool"], e["data"].get("status"))
        for e in events
        if e["event"].startswith("tool.")
    ]
    assert tools == [("fragile", None), ("fragile", "error"), ("sturdy", None), ("sturdy", "ok")]
    failed = next(e["data"] for e in events if e["data"].get("status") == "error")
    assert failed["error"] == "RuntimeError: first time"


class Picky(Exception):
    """An exception that cannot be made from one string."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"{code}: {reason}")


class Unrebuildable(Workflow):
    name = "unrebuildable"
    agents = ("a",)

    @phase(1)
    def go(self, ctx: Any) -> dict[str, Any]:
        try:
            ctx.step("picky", self.picky)
        except Exception as exc:
            caught = f"{type(exc).__name__}: {exc}"
        return {"caught": caught, "answer": ctx.ask("a", prompt("go"))}

    def picky(self) -> None:
        raise Picky(7, "no")


def test_a_failure_that_cannot_be_rebuilt_is_a_step_failed_error_on_replay(
    workflow_harness: Any,
) -> None:
    harness = workflow_harness(Unrebuildable)
    (request,) = harness.run({}).pending
    harness.respond(request.request_id, "fine")
    outcome = harness.resume()
    assert outcome.exit_code == 0, outcome.message
    caught = outcome.outputs["go"]["caught"]
    assert caught.startswith("StepFailedError: step 'picky' failed when it ran: ")
    assert caught.endswith("Picky: 7: no")


class Author(Workflow):
    name = "author"
    agents = ("a",)

    @phase(1)
    def go(self, ctx: Any) -> None:
        case = ctx.inputs["case"]
        if case == "reserved":
            ctx.event("agent.start", {})
        elif case == "bad-name":
            ctx.event("Review File", {})
        elif case == "not-object":
            ctx.event("review.x", ["a"])  # type: ignore[arg-type]
        elif case == "escape":
            ctx.artifact("x", "../outside.txt", "no")
        elif case == "results":
            ctx.artifact("x", "results.json", "{}")
        elif case == "absolute":
            ctx.artifact("x", "/etc/passwd", "no")


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("reserved", "engine's own"),
        ("bad-name", "lower-case dot-separated"),
        ("not-object", "must be a dict"),
        ("escape", "ctx.artifact('x', '../outside.txt')"),
        ("results", "the phase's own"),
        ("absolute", "/etc/passwd"),
    ],
)
def test_bad_events_and_artifacts_are_refused_with_words(
    workflow_harness: Any, case: str, words: str
) -> None:
    harness = workflow_harness(Author)
    outcome = harness.run({"case": case})
    assert outcome.exit_code == 1
    assert words in outcome.message
    run_dir = run_dir_of(harness.workdir)
    check_run_evidence(run_dir)
    assert not (run_dir.parent / "outside.txt").exists()
    assert not list(run_dir.rglob("passwd"))


class Long(Workflow):
    """Five phases that each ask once: archived records must keep their evidence."""

    name = "long"
    agents = ("a",)
    archive_after = 1

    @phase(1)
    def p1(self, ctx: Any) -> str:
        return str(ctx.ask("a", prompt("1")))

    @phase(2)
    def p2(self, ctx: Any) -> str:
        return str(ctx.ask("a", prompt("2")))

    @phase(3)
    def p3(self, ctx: Any) -> str:
        return str(ctx.ask("a", prompt("3")))


def test_archived_requests_still_get_their_evidence(workflow_harness: Any) -> None:
    harness: WorkflowHarness = workflow_harness(Long)
    outcome = harness.run_until_done({}, lambda request: f"answer to {request['phase']}")
    assert outcome.exit_code == 0
    run_dir = run_dir_of(harness.workdir)
    events = check_run_evidence(run_dir)
    ends = [e["data"] for e in events if e["event"] == "agent.end"]
    assert len(ends) == 3
    for number, end in enumerate(ends, start=1):
        assert (run_dir / end["output_dir"] / "response.txt").read_text() == f"answer to {number}"
    assert (run_dir / "requests.ndjson").exists()  # they were archived on the way


def test_the_event_log_path_is_in_the_run_directory(tmp_path: Path) -> None:
    """The run's directory is where the file bridge keeps the run's history."""
    harness = WorkflowHarness(Retried, tmp_path, invoker=MockAgentInvoker({"flaky": "ok"}))
    outcome = harness.run({})
    assert outcome.history_path is not None
    assert (Path(outcome.history_path).parent / "events.ndjson").is_file()


def test_a_confidence_out_of_range_is_not_claimed(workflow_harness: Any) -> None:
    """An answer that says confidence 7 is answered, but no confidence is claimed for it
    (results.json holds only [0, 1]), and the run goes on."""
    mock = MockAgentInvoker({"flaky": json.dumps({"answer": "yes", "confidence": 7})})
    harness = workflow_harness(Retried, invoker=mock)
    assert harness.run({}).exit_code == 0
    run_dir = run_dir_of(harness.workdir)
    events = check_run_evidence(run_dir)
    end = next(e["data"] for e in events if e["event"] == "agent.end")
    assert (end["status"], end["confidence"], end["confidence_reported"]) == ("pass", 0.0, False)


# -- found in review: each was a real failure before its fix ----------------------------


def test_a_late_answer_is_told_once_and_rewrites_its_results(workflow_harness: Any) -> None:
    """A request that timed out (and was retried) is answered after all: its retry is
    withdrawn, and the late answer is one ``agent.late_answer``, not a second end."""
    harness = workflow_harness(Retried)
    (first,) = harness.run({}).pending
    harness.respond(first.request_id, "", status="timeout", error_type="TIMEOUT")
    (retry,) = harness.resume().pending
    harness.respond(first.request_id, "late but good")
    outcome = harness.resume()
    assert outcome.exit_code == 0 and outcome.outputs["only"] == "late but good"
    run_dir = run_dir_of(harness.workdir)
    events = check_run_evidence(run_dir)
    agent = [
        (e["event"], e["data"]["request_id"], e["data"].get("status"))
        for e in events
        if e["event"].startswith("agent.")
    ]
    assert agent == [
        ("agent.start", first.request_id, None),
        ("agent.end", first.request_id, "error"),
        ("agent.start", retry.request_id, None),
        ("agent.end", retry.request_id, "abstain"),
        ("agent.late_answer", first.request_id, "pass"),
    ]
    late = events[[e["event"] for e in events].index("agent.late_answer")]["data"]
    results = json.loads((run_dir / late["output_dir"] / "results.json").read_text())
    assert results["status"] == "pass"
    assert (run_dir / late["output_dir"] / "response.txt").read_text() == "late but good"


def test_an_answer_with_a_lone_surrogate_does_not_jam_the_run(workflow_harness: Any) -> None:
    """An in-process agent may answer with a lone surrogate (a host's response file may
    not: the strict parser refuses it); the evidence writes it as an escape instead of
    failing (a failure there would repeat at every resume and cancel)."""
    harness = workflow_harness(
        Retried, invoker=MockAgentInvoker({"flaky": lambda _prompt: "caf\ud800e"})
    )
    outcome = harness.run({})
    assert outcome.exit_code == 0, outcome.message
    run_dir = run_dir_of(harness.workdir)
    events = check_run_evidence(run_dir)
    end = next(e["data"] for e in events if e["event"] == "agent.end")
    assert (run_dir / end["output_dir"] / "response.txt").read_bytes() == b"caf\\ud800e"


def test_a_run_started_before_evidence_existed_resumes_without_any(workflow_harness: Any) -> None:
    """A state written by a version without evidence (no outbox, no output directories)
    resumes to the end and writes no half story."""
    harness = workflow_harness(Review)
    harness.run({})
    state_path = harness.workdir / ".review-state.json"
    state = json.loads(state_path.read_text())
    record = state["phase_data"]["x_orchestrator"]
    for key in ("evidence", "events", "next_seq", "marks", "phase_started_at"):
        record.pop(key, None)
    for item in state["agent_requests"]:
        item.pop("x_output_dir", None)
    state_path.write_text(json.dumps(state))
    sign_state_file(state_path)  # as 'orchestrate trust' signs a run begun before signing
    run_dir = run_dir_of(harness.workdir)
    for path in sorted(run_dir.rglob("*"), reverse=True):  # as the old version left it
        path.rmdir() if path.is_dir() else path.unlink()
    outcome = harness.resume()
    while outcome.status == "paused":
        for pending in outcome.pending:
            harness.respond(pending.request_id, "ok")
        outcome = harness.resume()
    assert outcome.exit_code == 0, outcome.message
    assert sorted(p.name for p in run_dir.iterdir()) == ["state.json"]


CANCELLABLE = """
from pathlib import Path
from orchestrator import Workflow, phase

PAD = "Please answer with care; this sentence pads the prompt past the minimum length " * 2


class Cancellable(Workflow):
    name = "cancellable"
    agents = ("a",)

    @phase(1)
    def ask(self, ctx):
        return ctx.ask("a", PAD)

    @phase(2)
    def act(self, ctx):
        return ctx.step("side_effect", lambda: Path(ctx.workdir, "SIDE").write_text("ran"))
"""


@pytest.mark.slow
def test_a_cancel_cut_short_is_finished_never_run_on(tmp_path: Path) -> None:
    """Killed after the cancel is saved and before its cleanup: a resume (even with an
    answer waiting) finishes the cancel, the workflow does not run on, and the story ends
    once, cancelled."""
    import signal

    (tmp_path / "wf.py").write_text(CANCELLABLE)

    def in_workdir(workdir: Path, *args: str, crash: str | None = None) -> Any:
        env = {}
        if crash is not None:
            env = {"ORCHESTRATOR_CRASH_AT": crash, "ORCHESTRATOR_CRASH_LOG": str(workdir / "c.log")}
        return orchestrate(*args, "--workdir", workdir, env=env)

    def paused(name: str) -> Path:
        workdir = tmp_path / name
        workdir.mkdir()
        assert in_workdir(workdir, "run", f"{tmp_path / 'wf.py'}:Cancellable").returncode == 42
        return workdir

    counted = paused("counted")
    assert in_workdir(counted, "cancel", crash="count").returncode == 0
    labels = [line.split(" ", 1)[1] for line in (counted / "c.log").read_text().splitlines()]
    # The first point after the cancelled state is in place: the history's write.
    point = labels.index("before-write state.json") + 1
    for then in ("resume", "cancel"):
        workdir = paused(then)
        killed = in_workdir(workdir, "cancel", crash=str(point))
        assert killed.returncode == -signal.SIGKILL
        assert in_workdir(workdir, "respond", "--text", "an answer").returncode == 0
        finished = in_workdir(workdir, then)
        assert finished.returncode == (1 if then == "resume" else 0), finished.stderr
        assert not (workdir / "SIDE").exists()  # phase 2 never ran
        assert not (workdir / ".cancellable-state.json").exists()
        events = check_run_evidence(run_dir_of(workdir))
        ends = [e["data"]["status"] for e in events if e["event"] == "run.end"]
        assert ends == ["cancelled"]
        assert [e["event"] for e in events].count("agent.end") == 1


def test_a_killed_writers_temporary_is_swept_when_its_directory_is_written_again(
    tmp_path: Path,
) -> None:
    from orchestrator._ports import EvidenceInput
    from orchestrator.adapters.file_bridge import FileBridge

    bridge = FileBridge(tmp_path, "wf")
    bridge.write_evidence(EvidenceInput(run_id="r", files=[("agents/0001-a/prompt.md", b"p")]))
    directory = tmp_path / ".orchestrator" / "runs" / "r" / "agents" / "0001-a"
    dead = directory / ".results.json.4194303.tmp"  # a pid no process has
    dead.write_bytes(b"half")
    FileBridge(tmp_path, "wf").write_evidence(
        EvidenceInput(run_id="r", files=[("agents/0001-a/results.json", b"{}")])
    )
    assert sorted(p.name for p in directory.iterdir()) == ["prompt.md", "results.json"]


@pytest.mark.slow
def test_resume_with_evidence_does_not_import_cattrs(tmp_path: Path) -> None:
    """Start-up cost: the engine's record (with its outbox and journal) goes through the
    fast path, so a resume that records an answer, writes evidence and pauses again never
    imports cattrs (a type the fast path does not know would pull it in)."""
    import subprocess
    import sys

    (tmp_path / "wf.py").write_text(
        CANCELLABLE.replace("return ctx.step(", "ctx.ask('a', PAD + 'again'); return ctx.step(")
    )
    workdir = tmp_path / "work"
    workdir.mkdir()
    run = orchestrate("run", f"{tmp_path / 'wf.py'}:Cancellable", "--workdir", workdir)
    assert run.returncode == 42
    assert orchestrate("respond", "--workdir", workdir, "--text", "yes").returncode == 0
    code = (
        "import sys; from orchestrator.cli.main import main; "
        f"rc = main(['resume', '--workdir', {str(workdir)!r}]); "
        "print(rc, 'cattrs' in sys.modules)"
    )
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert shown.stdout.split()[-2:] == ["42", "False"], shown.stderr
    assert [e["event"] for e in check_run_evidence(run_dir_of(workdir), finished=False)][-4:] == [
        "skill.end", "skill.start", "agent.start", "run.pause",
    ]  # fmt: skip
