"""``orchestrate retry``: a failed run goes on from its failed phase with the fixed code.

For each kind of failure (a failed step, an agent's error, a prompt too short, a phase
that changed under a paused run): the run fails, the code (or the host) is fixed,
``orchestrate retry`` re-opens the run, and it completes. The handler's log shows that
no ask that still matched was asked again, and ``history`` shows the failed try.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator import Workflow, phase
from orchestrator.testing import MockAgentInvoker
from support import sweeps
from support.cli import orchestrate

LONG = "Say what you think of the topic below, in two short paragraphs, plainly. " * 2

FLOW = """
from orchestrator import Workflow, phase

LONG = {long!r}


def parse(text):
    {parse}
    return text.upper()


class Review(Workflow):
    name = "review"
    agents = ("writer", "critic")
    max_retries = 0

    @phase(1)
    def gather(self, ctx):
        return ctx.ask("writer", LONG + "Topic: gather")

    @phase(2)
    def judge(self, ctx):
        first = ctx.ask("writer", {first_prompt})
        parsed = ctx.step("parse", parse, first)
        second = ctx.ask("critic", {second_prompt})
        return {{"first": parsed, "second": second}}
"""

GOOD = {
    "parse": "pass",
    "first_prompt": 'LONG + "Topic: first"',
    "second_prompt": 'LONG + "Topic: second"',
}

# Answers each request with "ok <topic>" and logs "<agent> <topic>"; a file beside the log
# can make it answer a topic AGENT_NOT_FOUND, or rewrite the workflow file when asked one.
HANDLER = """
import json, pathlib, sys
request = json.load(sys.stdin)
topic = request["prompt"].rsplit("Topic: ", 1)[-1]
here = pathlib.Path(sys.argv[1])
with open(here / "asked.log", "a") as log:
    log.write(request["agent_name"] + " " + topic + "\\n")
broken = here / "broken-topic"
if broken.exists() and broken.read_text() == topic:
    print(json.dumps({"version": "1.0", "request_id": request["request_id"],
                      "status": "error", "created_at": request["created_at"],
                      "error_type": "AGENT_NOT_FOUND", "error_message": "no such agent today"}))
    sys.exit(0)
edit = here / "edit-on-topic"
if edit.exists() and edit.read_text().split("\\n", 1)[0] == topic:
    (here / "flow.py").write_text(edit.read_text().split("\\n", 1)[1])
sys.stdout.write("ok " + topic)
"""


def flow(**changes: str) -> str:
    return FLOW.format(long=LONG, **{**GOOD, **changes})


class Run:
    def __init__(self, root: Path, source: str) -> None:
        self.root = root
        self.workdir = root / "work"
        self.workdir.mkdir(parents=True)
        (root / "flow.py").write_text(source)
        (root / "handler.py").write_text(HANDLER)
        self.handler = f"{sys.executable} {root / 'handler.py'} {root}"

    def drive(self) -> subprocess.CompletedProcess[str]:
        return orchestrate(
            "drive", f"{self.root / 'flow.py'}:Review", "--workdir", self.workdir,
            "--handler", self.handler,
        )  # fmt: skip

    def by_hand(self, first: str = "run") -> subprocess.CompletedProcess[str]:
        """The host loop as separate processes (each resume loads the workflow file anew):
        every pending request to the handler, its answer through ``orchestrate respond``."""
        if first == "run":
            result = orchestrate(
                "run", f"{self.root / 'flow.py'}:Review", "--workdir", self.workdir
            )
        else:
            result = orchestrate("resume", "--workdir", self.workdir)
        while result.returncode == 42:
            request = json.loads((self.workdir / ".agent-request.json").read_text())
            answer = subprocess.run(
                self.handler.split(), input=json.dumps(request), capture_output=True,
                text=True, check=True,
            ).stdout  # fmt: skip
            responded = orchestrate(
                "respond", "--workdir", self.workdir, "--request-id", request["request_id"],
                "--text", answer,
            )  # fmt: skip
            assert responded.returncode == 0, responded.stderr
            result = orchestrate("resume", "--workdir", self.workdir)
        return result

    def fix(self, source: str) -> None:
        (self.root / "flow.py").write_text(source)

    def asked(self) -> list[str]:
        return (self.root / "asked.log").read_text().splitlines()

    def finished(self) -> dict[str, Any]:
        (path,) = (self.workdir / ".orchestrator" / "runs").glob("*/state.json")
        return dict(json.loads(path.read_text()))

    def retried(self) -> subprocess.CompletedProcess[str]:
        retried = orchestrate("retry", "--workdir", self.workdir)
        assert retried.returncode in (0, 42), retried.stderr
        return retried


def check_history(run: Run, *words: str) -> None:
    shown = orchestrate("history", "--workdir", run.workdir)
    assert shown.returncode == 0, shown.stderr
    (line,) = [line for line in shown.stdout.splitlines() if "retry (try 2) of phase" in line]
    for word in words:
        assert word in line, (word, line)


@pytest.mark.slow
def test_a_failed_step_runs_again_with_the_fixed_code(tmp_path: Path) -> None:
    run = Run(tmp_path, flow(parse="raise ValueError('cannot parse ' + text)"))
    failed = run.drive()
    assert failed.returncode == 1 and "ValueError: cannot parse ok first" in failed.stderr
    run.fix(flow())
    assert run.retried().returncode == 42  # the new step ran; the critic is asked
    assert run.drive().returncode == 0
    assert run.finished()["phase_data"]["judge"] == {"first": "OK FIRST", "second": "ok second"}
    assert run.asked() == ["writer gather", "writer first", "critic second"]
    check_history(run, "ValueError: cannot parse ok first", "step 'parse' failed")


@pytest.mark.slow
def test_an_agent_error_asks_that_agent_again_and_no_other(tmp_path: Path) -> None:
    run = Run(tmp_path, flow())
    (tmp_path / "broken-topic").write_text("first")
    failed = run.drive()
    assert failed.returncode == 1 and "AGENT_NOT_FOUND" in failed.stderr
    (tmp_path / "broken-topic").unlink()  # the host is fixed
    run.retried()
    assert run.drive().returncode == 0
    assert run.asked() == ["writer gather", "writer first", "writer first", "critic second"]
    requests = run.finished()["agent_requests"]
    assert [r["status"] for r in requests] == ["completed", "failed", "completed", "completed"]
    check_history(run, "AGENT_NOT_FOUND", "ask of writer failed")


@pytest.mark.slow
def test_a_prompt_too_short_is_asked_once_it_is_long_enough(tmp_path: Path) -> None:
    run = Run(tmp_path, flow(second_prompt='"Topic: second"'))
    failed = run.drive()
    assert failed.returncode == 1
    assert "prompt of 13 characters" in failed.stderr and "at least 100" in failed.stderr
    run.fix(flow())
    run.retried()
    assert run.drive().returncode == 0
    assert run.asked() == ["writer gather", "writer first", "critic second"]
    check_history(run, "prompt of 13 characters")


@pytest.mark.slow
def test_a_phase_changed_under_a_paused_run_goes_on_with_the_new_code(tmp_path: Path) -> None:
    """The code changes while the run waits for the critic: the resume finds the first
    ask's prompt changed (non-determinism) and fails; retry keeps the new code, asks from
    the changed ask on, and never asks the unchanged first phase again."""
    changed = flow(first_prompt='LONG + "Topic: first, reworded"')
    run = Run(tmp_path, flow())
    (tmp_path / "edit-on-topic").write_text("second\n" + changed)
    failed = run.by_hand()
    assert failed.returncode == 1 and "the prompt changed" in failed.stderr
    (tmp_path / "edit-on-topic").unlink()
    run.retried()
    assert run.by_hand(first="resume").returncode == 0
    assert run.asked() == [
        "writer gather",
        "writer first",
        "critic second",
        "writer first, reworded",
        "critic second",
    ]
    assert run.finished()["phase_data"]["judge"]["first"] == "OK FIRST, REWORDED"
    check_history(run, "the prompt changed", "dropped from position 0")


@pytest.mark.slow
def test_retry_of_a_run_that_did_not_fail_is_a_usage_error(tmp_path: Path) -> None:
    run = Run(tmp_path, flow())
    assert (
        orchestrate("run", f"{tmp_path / 'flow.py'}:Review", "--workdir", run.workdir).returncode
        == 42
    )
    state = (run.workdir / ".review-state.json").read_bytes()
    refused = orchestrate("retry", "--workdir", run.workdir)
    assert refused.returncode == 2 and "is paused, not failed" in refused.stderr
    assert (run.workdir / ".review-state.json").read_bytes() == state
    other = orchestrate("retry", "--workdir", run.workdir, "--run", "another-run")
    assert other.returncode == 2 and "not another-run" in other.stderr


# -- in process: the run's log tells the retry ---------------------------------------------


class Flaky(Workflow):
    name = "flaky"
    agents = ("writer",)
    fixed = False

    @phase(1)
    def write(self, ctx: Any) -> str:
        text = str(ctx.ask("writer", LONG + "Topic: a"))
        if not Flaky.fixed:
            raise RuntimeError("a bug in the phase")
        return text


def test_the_run_log_tells_the_failed_try_and_the_retry(workflow_harness: Any) -> None:
    from support.evidence_support import check_run_evidence

    Flaky.fixed = False
    invoker = MockAgentInvoker({"writer": "an answer"})
    harness = workflow_harness(Flaky, invoker=invoker)
    assert harness.run({}).status == "failed"
    Flaky.fixed = True
    outcome = harness.retry()
    assert outcome.status == "completed" and outcome.outputs == {"write": "an answer"}
    assert len(invoker.invocations) == 1  # the recorded answer was used again
    (run_dir,) = (harness.workdir / ".orchestrator" / "runs").iterdir()
    events = check_run_evidence(run_dir)
    names = [e["event"] for e in events]
    assert names.count("run.end") == 2 and names.count("run.retry") == 1
    retry = events[names.index("run.retry")]["data"]
    assert retry["try"] == 2 and "a bug in the phase" in retry["failure"]
    assert events[-1]["data"]["status"] == "completed"


def test_an_ended_run_cannot_be_retried(workflow_harness: Any) -> None:
    harness = workflow_harness(Flaky, invoker=MockAgentInvoker({"writer": "x"}))
    Flaky.fixed = True
    assert harness.run({}).status == "completed"
    from orchestrator import OrchestratorError

    with pytest.raises(OrchestratorError, match="no flaky instance here"):
        harness.retry()


@pytest.mark.slow
@pytest.mark.parametrize("sweep", sweeps.SWEEPS)
def test_kill_9_at_every_durable_write_of_a_retry_loses_nothing(tmp_path: Path, sweep: str) -> None:
    """A retry killed at each of its crash points in turn: running ``retry`` again (or
    ``resume``, which it becomes once the run is re-opened) completes the run, the step
    that had failed ran again at most as its window allows, and no answer is lost."""
    import signal

    def failed_run(name: str) -> Run:
        run = Run(tmp_path / name, flow(parse="raise ValueError('cannot parse ' + text)"))
        assert run.drive().returncode == 1
        run.fix(flow())
        return run

    (tmp_path / "count").mkdir()
    probe = failed_run("count/run")
    log = tmp_path / "points.log"
    counting = {"ORCHESTRATOR_CRASH_AT": "count", "ORCHESTRATOR_CRASH_LOG": str(log)}
    assert orchestrate("retry", "--workdir", probe.workdir, env=counting).returncode == 42
    points = log.read_text().splitlines()
    assert len(points) >= 5
    labels = [point.partition(" ")[2] for point in points]
    for number in sweeps.chosen(sweep, labels):
        point = points[number - 1]
        (tmp_path / f"k{number}").mkdir()
        run = failed_run(f"k{number}/run")
        crash = {"ORCHESTRATOR_CRASH_AT": str(number), "ORCHESTRATOR_CRASH_LOG": str(log)}
        killed = orchestrate("retry", "--workdir", run.workdir, env=crash)
        assert killed.returncode == -signal.SIGKILL, (point, killed.stderr)
        again = orchestrate("retry", "--workdir", run.workdir)
        if again.returncode == 2:  # the retry had re-opened the run and paused: as it says,
            assert "'orchestrate resume' goes on" in again.stderr, (point, again.stderr)
            again = orchestrate("resume", "--workdir", run.workdir)
        assert again.returncode == 42, (point, again.stderr)
        assert run.drive().returncode == 0, point
        assert run.finished()["phase_data"]["judge"] == {
            "first": "OK FIRST",
            "second": "ok second",
        }, point
        assert run.asked() == ["writer gather", "writer first", "critic second"], point
        statuses = [r["status"] for r in run.finished()["agent_requests"]]
        assert statuses == ["completed", "completed", "completed"], point
