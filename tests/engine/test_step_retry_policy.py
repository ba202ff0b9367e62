"""Steps are retried as their ``RetryPolicy`` says, and abandoned past their timeout.

Every attempt (its error, its duration) is in the step's evidence: a ``tool.call`` and a
``tool.result`` each in ``events.ndjson``, and the attempts in the phase's journal. A
failed attempt is durable before the next one starts, so a ``kill -9`` between two
attempts loses no count: the resumed process goes on with the next attempt. A timeout
is a failed attempt (a ``StepTimeoutError``); ``ctx.run_command`` past its timeout ends
the command's whole process group. In process on a fake clock, and through real
``orchestrate`` processes.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator import (
    CommandFailedError,
    CommandResult,
    RetryPolicy,
    StepTimeoutError,
    Workflow,
    WorkflowDefinitionError,
    phase,
)
from orchestrator.engine.replay import replay_run
from orchestrator.testing import FakeClock, WorkflowHarness
from support import sweeps
from support.cli import orchestrate

NOW = RetryPolicy(attempts=3, initial_delay=0, max_delay=0, jitter=0)


def calls(workdir: Path) -> list[str]:
    path = workdir / "attempts.log"
    return path.read_text().split() if path.exists() else []


def flaky(workdir: str, fail_times: int) -> dict[str, int]:
    """Fails (ConnectionError) on its first ``fail_times`` calls, counted in a file."""
    number = len(calls(Path(workdir))) + 1
    with open(Path(workdir) / "attempts.log", "a") as log:
        log.write(f"{number}\n")
    if number <= fail_times:
        raise ConnectionError(f"call {number} failed")
    return {"calls": number}


class Timed(FakeClock):
    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        super().sleep(seconds)


def run_dir(workdir: Path) -> Path:
    (found,) = (workdir / ".orchestrator" / "runs").glob("*")
    return found


def live_journal(workdir: Path) -> list[dict[str, Any]]:
    (path,) = workdir.glob(".*-state.json")
    return list(json.loads(path.read_text())["phase_data"]["x_orchestrator"]["journal"])


def step_results(workdir: Path, tool: str) -> list[dict[str, Any]]:
    lines = (run_dir(workdir) / "events.ndjson").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    return [e["data"] for e in events if e["event"] == "tool.result" and e["data"]["tool"] == tool]


def phase_journal(workdir: Path, phase_dir: str) -> list[dict[str, Any]]:
    path = run_dir(workdir) / "phases" / phase_dir / "journal.json"
    return list(json.loads(path.read_text())["entries"])


# -- in process, on a fake clock ------------------------------------------------------------


class Backoff(Workflow):
    name = "backoff"

    @phase(1)
    def fetch(self, ctx: Any) -> Any:
        policy = RetryPolicy(attempts=4, initial_delay=2, max_delay=5, jitter=0)
        return ctx.step("fetch", flaky, str(ctx.workdir), 3, retry=policy)


def test_waits_between_attempts_grow_on_the_engine_clock(tmp_path: Path) -> None:
    clock = Timed()
    outcome = WorkflowHarness(Backoff, tmp_path, clock=clock).run({})
    assert outcome.status == "completed", outcome.message
    assert outcome.outputs == {"fetch": {"calls": 4}}
    assert clock.waits == [2.0, 4.0, 5.0]  # 2, then doubled, then capped at max_delay
    (entry,) = phase_journal(tmp_path, "01-fetch")
    assert [a["attempt"] for a in entry["attempts"]] == [1, 2, 3, 4]
    assert [a.get("error", {}).get("type") for a in entry["attempts"]] == [
        "builtins:ConnectionError"
    ] * 3 + [None]


class Slow(Workflow):
    name = "slow"

    @phase(1)
    def fetch(self, ctx: Any) -> Any:
        policy = RetryPolicy(attempts=2, initial_delay=3600, max_delay=3600, jitter=0)
        return ctx.step("fetch", flaky, str(ctx.workdir), 1, retry=policy)


def test_a_long_wait_between_attempts_is_a_durable_timer(tmp_path: Path) -> None:
    clock = FakeClock()
    harness = WorkflowHarness(Slow, tmp_path, clock=clock)
    first = harness.run({})
    assert (first.status, first.exit_code, first.pending) == ("paused", 42, ())
    assert first.wake_at == "2025-11-18T11:30:00.000Z"
    assert calls(tmp_path) == ["1"]
    (entry,) = live_journal(tmp_path)
    assert entry["next_attempt_at"] == first.wake_at and len(entry["attempts"]) == 1
    waiting = replay_run(tmp_path / ".slow-state.json", Slow)  # replays up to the wait
    assert waiting.ok and calls(tmp_path) == ["1"]
    clock.advance(3599)
    assert harness.resume().wake_at == first.wake_at
    assert calls(tmp_path) == ["1"]
    clock.advance(1)
    done = harness.resume()
    assert done.status == "completed" and done.outputs == {"fetch": {"calls": 2}}
    assert calls(tmp_path) == ["1", "2"]


class Stubborn(Workflow):
    name = "stubborn"

    @phase(1)
    def fetch(self, ctx: Any) -> Any:
        policy = RetryPolicy(attempts=2, initial_delay=0, max_delay=0, jitter=0)
        return ctx.step("fetch", flaky, str(ctx.workdir), 3, retry=policy)


def test_orchestrate_retry_of_a_run_whose_tries_ran_out_counts_afresh(tmp_path: Path) -> None:
    harness = WorkflowHarness(Stubborn, tmp_path, clock=Timed())
    failed = harness.run({})
    assert failed.status == "failed" and "call 2 failed" in failed.message
    assert calls(tmp_path) == ["1", "2"]
    done = harness.retry()  # the network is back for the try after next
    assert done.status == "completed" and done.outputs == {"fetch": {"calls": 4}}
    (entry,) = phase_journal(tmp_path, "01-fetch")
    assert [a["attempt"] for a in entry["attempts"]] == [1, 2]  # calls 3 and 4


def picky(workdir: str) -> str:
    flaky(workdir, 0)
    raise ValueError("not a connection problem")


class Picky(Workflow):
    name = "picky"

    @phase(1)
    def fetch(self, ctx: Any) -> str:
        policy = RetryPolicy(attempts=3, initial_delay=0, max_delay=0, jitter=0, retry_on=OSError)
        try:
            return str(ctx.step("fetch", picky, str(ctx.workdir), retry=policy))
        except ValueError as exc:
            return f"gave up: {exc}"


def test_an_exception_retry_on_does_not_name_is_not_retried(tmp_path: Path) -> None:
    outcome = WorkflowHarness(Picky, tmp_path, clock=Timed()).run({})
    assert outcome.outputs == {"fetch": "gave up: not a connection problem"}
    assert calls(tmp_path) == ["1"]
    (entry,) = phase_journal(tmp_path, "01-fetch")
    assert len(entry["attempts"]) == 1 and entry["error"]["type"] == "builtins:ValueError"


def test_one_policy_serves_agent_errors_and_step_exceptions() -> None:
    both = RetryPolicy(retry_on={"TIMEOUT", ConnectionError})
    assert both.retry_on == frozenset({"TIMEOUT", ConnectionError})
    assert both.retries(ConnectionResetError()) and not both.retries(ValueError())
    default = RetryPolicy()  # agent error types only: a step retries any Exception
    assert default.retries(ValueError()) and default.retries(StepTimeoutError("late"))
    assert not default.retries(KeyboardInterrupt())
    with pytest.raises(WorkflowDefinitionError, match="retry_on holds 42"):
        RetryPolicy(retry_on={42})


def sleepy(workdir: str) -> str:
    number = len(calls(Path(workdir))) + 1
    flaky(workdir, 0)
    if number <= 2:
        time.sleep(30)  # abandoned: the step goes on without it
        return "late"
    return "in time"


class Deadline(Workflow):
    name = "deadline"

    @phase(1)
    def fetch(self, ctx: Any) -> Any:
        try:
            return ctx.step("fetch", sleepy, str(ctx.workdir), timeout=0.3)
        except StepTimeoutError as exc:
            caught = [type(exc).__name__, exc.step, exc.seconds, str(exc)]
        ctx.sleep(60)  # a pause: the resume replays the phase, and the step's record
        return caught


def test_the_last_error_is_raised_into_the_phase_and_again_on_replay(tmp_path: Path) -> None:
    clock = Timed()
    harness = WorkflowHarness(Deadline, tmp_path, clock=clock)
    assert harness.run({}).status == "paused"
    assert calls(tmp_path) == ["1"]  # no policy: one attempt
    (entry, _) = live_journal(tmp_path)
    assert entry["attempts"][0]["timed_out"] is True
    assert entry["error"]["type"] == "orchestrator._errors:StepTimeoutError"
    clock.advance(60)
    done = harness.resume()
    message = "step 'fetch' ran past its timeout of 0.3 s and was abandoned"
    assert done.outputs == {"fetch": ["StepTimeoutError", "fetch", 0.3, message]}
    assert calls(tmp_path) == ["1"]  # raised again from the record, not run again


class Commands(Workflow):
    name = "commands"

    @phase(1)
    def shell(self, ctx: Any) -> Any:
        said = ctx.run_command("say", ["sh", "-c", "echo hi; echo oops >&2; exit 3"], check=False)
        try:
            ctx.run_command("fail", ["sh", "-c", "echo broken >&2; exit 4"])
        except CommandFailedError as exc:
            return {"said": [said.returncode, said.stdout, said.stderr], "failed": exc.returncode}
        return "not reached"


def test_run_command_records_its_result_and_fails_on_a_bad_exit(tmp_path: Path) -> None:
    outcome = WorkflowHarness(Commands, tmp_path, clock=Timed()).run({})
    assert outcome.status == "completed", outcome.message
    assert outcome.outputs == {"shell": {"said": [3, "hi\n", "oops\n"], "failed": 4}}
    say, fail = phase_journal(tmp_path, "01-shell")
    assert say["result"] == {"returncode": 3, "stdout": "hi\n", "stderr": "oops\n"}
    assert fail["error"]["type"] == "orchestrator._errors:CommandFailedError"
    assert fail["error"]["facts"]["returncode"] == 4
    assert replay_run(run_dir(tmp_path), Commands).ok
    assert CommandResult(returncode=0).stdout == ""


# -- real processes -------------------------------------------------------------------------

FLOW = """
import time
from datetime import timedelta
from pathlib import Path
from orchestrator import RetryPolicy, StepTimeoutError, Workflow, phase

NOW = RetryPolicy(attempts=3, initial_delay=0, max_delay=0, jitter=0)


def count(workdir):
    path = Path(workdir) / "attempts.log"
    number = len(path.read_text().split()) + 1 if path.exists() else 1
    with open(path, "a") as log:
        log.write(f"{number}\\n")
    return number


def flaky(workdir, fail_times):
    number = count(workdir)
    if number <= fail_times:
        raise ConnectionError(f"call {number} failed")
    return {"calls": number}


def sleepy(workdir):
    if count(workdir) <= 2:
        time.sleep(60)
        return "late"
    return "in time"


class Flaky(Workflow):
    name = "flaky"

    @phase(1)
    def fetch(self, ctx):
        return ctx.step("fetch", flaky, str(ctx.workdir), 2, retry=NOW)


class Hopeless(Workflow):
    name = "hopeless"

    @phase(1)
    def fetch(self, ctx):
        try:
            return ctx.step("fetch", flaky, str(ctx.workdir), 99, retry=NOW)
        except ConnectionError as exc:
            return f"gave up: {exc}"


class Sleepy(Workflow):
    name = "sleepy"

    @phase(1)
    def fetch(self, ctx):
        limit = timedelta(seconds=0.5)
        return ctx.step("fetch", sleepy, str(ctx.workdir), retry=NOW, timeout=limit)


class Spawner(Workflow):
    name = "spawner"

    @phase(1)
    def spawn(self, ctx):
        script = "sleep 300 & echo $! > grandchild.pid; sleep 300"
        try:
            ctx.run_command("spawn", ["sh", "-c", script], timeout=timedelta(seconds=1))
        except StepTimeoutError as exc:
            return f"timed out: {exc}"
        return "finished"
"""


@pytest.fixture
def flow(tmp_path: Path) -> Path:
    path = tmp_path / "flows.py"
    path.write_text(FLOW)
    return path


def fresh(workdir: Path) -> Path:
    workdir.mkdir()
    return workdir


def outputs(workdir: Path) -> dict[str, Any]:
    state = json.loads((run_dir(workdir) / "state.json").read_text())
    return {k: v for k, v in state["phase_data"].items() if k != "x_orchestrator"}


@pytest.mark.slow
def test_a_step_failing_twice_then_succeeding_shows_three_attempts(
    tmp_path: Path, flow: Path
) -> None:
    workdir = fresh(tmp_path / "run")
    done = orchestrate("run", f"{flow}:Flaky", "--workdir", workdir)
    assert done.returncode == 0, done.stderr
    assert outputs(workdir) == {"fetch": {"calls": 3}}
    results = step_results(workdir, "fetch")
    assert [(r["attempt"], r["status"]) for r in results] == [(1, "error"), (2, "error"), (3, "ok")]
    assert [r.get("error") for r in results] == [
        "ConnectionError: call 1 failed",
        "ConnectionError: call 2 failed",
        None,
    ]
    assert all(isinstance(r["duration_ms"], int) for r in results)
    (entry,) = phase_journal(workdir, "01-fetch")
    assert [a["attempt"] for a in entry["attempts"]] == [1, 2, 3]
    assert entry["result"] == {"calls": 3} and "next_attempt_at" not in entry
    replay = orchestrate("replay", f"{flow}:Flaky", "--run", run_dir(workdir))
    assert replay.returncode == 0, replay.stderr
    assert "replays clean" in replay.stdout + replay.stderr
    assert calls(workdir) == ["1", "2", "3"]  # the replay ran no step
    shown = orchestrate("events", "--workdir", workdir, "--type", "tool.result")
    assert "fetch  try 2/3  error" in shown.stdout and "fetch  try 3/3  ok" in shown.stdout


@pytest.mark.slow
def test_a_step_past_its_timeout_is_recorded_as_a_timeout_and_retried(
    tmp_path: Path, flow: Path
) -> None:
    workdir = fresh(tmp_path / "run")
    done = orchestrate("run", f"{flow}:Sleepy", "--workdir", workdir)
    assert done.returncode == 0, done.stderr
    assert outputs(workdir) == {"fetch": "in time"}
    results = step_results(workdir, "fetch")
    assert [(r["attempt"], r["status"], r.get("timed_out")) for r in results] == [
        (1, "error", True),
        (2, "error", True),
        (3, "ok", None),
    ]
    assert results[0]["error_type"] == "StepTimeoutError"
    (entry,) = phase_journal(workdir, "01-fetch")
    assert [a.get("timed_out") for a in entry["attempts"]] == [True, True, None]
    assert entry["attempts"][0]["error"]["type"] == "orchestrator._errors:StepTimeoutError"


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended: no such process, or a zombie no one reaped yet
    (a process whose parent died is reaped by PID 1, which here may never do it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


@pytest.mark.slow
def test_run_command_past_its_timeout_ends_its_whole_process_group(
    tmp_path: Path, flow: Path
) -> None:
    workdir = fresh(tmp_path / "run")
    done = orchestrate("run", f"{flow}:Spawner", "--workdir", workdir)
    assert done.returncode == 0, done.stderr
    assert outputs(workdir)["spawn"].startswith("timed out: step 'spawn': command 'sh' ran past")
    grandchild = int((workdir / "grandchild.pid").read_text())
    for _ in range(100):  # SIGKILL was sent before the run ended; its delivery is quick
        if gone(grandchild):
            break
        time.sleep(0.1)
    else:
        os.kill(grandchild, signal.SIGKILL)
        pytest.fail(f"the command's grandchild {grandchild} outlived the timeout")
    (result,) = step_results(workdir, "spawn")
    assert (result["status"], result["timed_out"], result["attempt"]) == ("error", True, 1)


@pytest.mark.slow
def test_kill_9_between_attempts_loses_no_count(tmp_path: Path, flow: Path) -> None:
    probe = fresh(tmp_path / "probe")
    log = tmp_path / "points.log"
    counting = {"ORCHESTRATOR_CRASH_AT": "count", "ORCHESTRATOR_CRASH_LOG": str(log)}
    probed = orchestrate("run", f"{flow}:Hopeless", "--workdir", probe, env=counting)
    assert probed.returncode == 0, probed.stderr
    points = [line.split(" ", 1) for line in log.read_text().splitlines()]
    between = [int(n) for n, label in points if label == "after-step-attempt fetch"]
    assert len(between) == 2  # after attempts 1 and 2; attempt 3 is the last

    workdir = fresh(tmp_path / "run")
    crash = {"ORCHESTRATOR_CRASH_AT": str(between[1]), "ORCHESTRATOR_CRASH_LOG": str(log)}
    killed = orchestrate("run", f"{flow}:Hopeless", "--workdir", workdir, env=crash)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert calls(workdir) == ["1", "2"]
    (entry,) = live_journal(workdir)
    assert [a["attempt"] for a in entry["attempts"]] == [1, 2] and entry["next_attempt_at"]

    resumed = orchestrate("resume", "--workdir", workdir)
    assert resumed.returncode == 0, resumed.stderr
    assert calls(workdir) == ["1", "2", "3"]  # attempt 3, then the policy's end
    assert outputs(workdir) == {"fetch": "gave up: call 3 failed"}
    (entry,) = phase_journal(workdir, "01-fetch")
    assert [a["attempt"] for a in entry["attempts"]] == [1, 2, 3]
    assert entry["error"]["message"] == "call 3 failed"
    results = step_results(workdir, "fetch")
    assert [(r["attempt"], r["status"]) for r in results] == [
        (1, "error"),
        (2, "error"),
        (3, "error"),
    ]
    replay = orchestrate("replay", f"{flow}:Hopeless", "--run", run_dir(workdir))
    assert replay.returncode == 0, replay.stderr


@pytest.mark.slow
@pytest.mark.parametrize("sweep", sweeps.SWEEPS)
def test_kill_9_at_each_durable_write_of_a_retried_step_tells_each_try_once(
    tmp_path: Path, flow: Path, sweep: str
) -> None:
    """Killed at its crash points in turn, a run whose step fails twice then succeeds
    resumes to the end: its tries are numbered 1, 2, ... with none lost or told twice
    (journal and events agree), and a try runs again only when the kill came before its
    record was durable (so at most one more call than recorded tries)."""
    probe = fresh(tmp_path / "probe")
    log = tmp_path / "points.log"
    counting = {"ORCHESTRATOR_CRASH_AT": "count", "ORCHESTRATOR_CRASH_LOG": str(log)}
    assert orchestrate("run", f"{flow}:Flaky", "--workdir", probe, env=counting).returncode == 0
    labels = [line.partition(" ")[2] for line in log.read_text().splitlines()]
    between = [n for n, label in enumerate(labels, 1) if label == "after-step-attempt fetch"]
    assert len(between) == 2
    for number in sweeps.chosen(sweep, labels, also=between):
        label = labels[number - 1]
        workdir = fresh(tmp_path / f"kill-{number}")
        crash = {"ORCHESTRATOR_CRASH_AT": str(number), "ORCHESTRATOR_CRASH_LOG": str(log)}
        killed = orchestrate("run", f"{flow}:Flaky", "--workdir", workdir, env=crash)
        assert killed.returncode == -signal.SIGKILL, (label, killed.stderr)
        if list(workdir.glob(".*-state.json")):  # killed after the run's first state
            resumed = orchestrate("resume", "--workdir", workdir)
        else:
            resumed = orchestrate("run", f"{flow}:Flaky", "--workdir", workdir)
        assert resumed.returncode == 0, (label, resumed.stderr)
        (entry,) = phase_journal(workdir, "01-fetch")
        tries = [a["attempt"] for a in entry["attempts"]]
        assert tries == list(range(1, len(tries) + 1)), (label, tries)
        assert [r["attempt"] for r in step_results(workdir, "fetch")] == tries, label
        made = len(calls(workdir))
        assert outputs(workdir) == {"fetch": {"calls": made}}, label
        assert made - len(tries) in ((0,) if label == "after-step-attempt fetch" else (0, 1))


@pytest.mark.slow
def test_on_postgresql_a_worker_killed_between_tries_loses_no_count(
    pg_fresh_dsn: str, tmp_path: Path, flow: Path
) -> None:
    """The same on a PostgreSQL store: a worker killed after try 2 was committed, and
    another worker goes on with try 3."""
    dsn, log = pg_fresh_dsn, tmp_path / "points.log"

    def queue(workdir: Path) -> str:
        queued = orchestrate(
            "run", f"{flow}:Hopeless", "--workdir", workdir, "--store", dsn, "--queue"
        )
        assert queued.returncode == 0, queued.stderr
        return queued.stdout.strip()

    def work(env: dict[str, str] | None = None) -> Any:
        return orchestrate("worker", "--store", dsn, "--until-idle", env=env)

    queue(fresh(tmp_path / "probe"))
    counting = {"ORCHESTRATOR_CRASH_AT": "count", "ORCHESTRATOR_CRASH_LOG": str(log)}
    assert work(counting).returncode == 0
    labels = [line.partition(" ")[2] for line in log.read_text().splitlines()]
    second = [n for n, label in enumerate(labels, 1) if label == "after-step-attempt fetch"][1]

    workdir = fresh(tmp_path / "run")
    run_id = queue(workdir)
    killed = work({"ORCHESTRATOR_CRASH_AT": str(second), "ORCHESTRATOR_CRASH_LOG": str(log)})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert calls(workdir) == ["1", "2"]
    finished = work()
    assert finished.returncode == 0, finished.stderr
    assert calls(workdir) == ["1", "2", "3"]
    output = orchestrate("output", "--store", dsn, "--run", run_id)
    assert json.loads(output.stdout) == {"fetch": "gave up: call 3 failed"}, output.stderr
