"""Signals into a running workflow, on a work directory's files.

``ctx.wait_for_signal`` pauses the run (exit 42, no agent request) until ``orchestrate
signal`` keeps one in the run's inbox; signals sent before the wait are kept in order and
taken first; ``ctx.signals`` drains them. Each is delivered once, also when a process is
killed (``kill -9``) at every durable write of the commands that send and take them; a
payload that does not fit the wait's ``output_type`` is refused at the door; a replay of
a run that took signals is clean. Through real ``orchestrate`` processes.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from orchestrator import Workflow, phase
from orchestrator.testing import FakeClock
from support import sweeps
from support.cli import child_env, command, orchestrate

FLOWS = Path(__file__).resolve().parents[1] / "support" / "signal_flows.py"
APPROVALS = f"{FLOWS}:Approvals"
TYPED = f"{FLOWS}:TypedApproval"
DAY = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)


def at(moment: datetime) -> dict[str, str]:
    return {"ORCHESTRATOR_NOW": moment.isoformat().replace("+00:00", "Z")}


def fresh(workdir: Path) -> Path:
    workdir.mkdir()
    return workdir


def steps_log(workdir: Path) -> list[str]:
    path = workdir / "steps.log"
    return path.read_text().split() if path.exists() else []


def finished(workdir: Path) -> dict[str, Any]:
    (path,) = (workdir / ".orchestrator" / "runs").glob("*/state.json")
    return dict(json.loads(path.read_text()))


def live_record(workdir: Path, name: str) -> dict[str, Any]:
    state = json.loads((workdir / f".{name}-state.json").read_text())
    return dict(state["phase_data"]["x_orchestrator"])


def inbox(workdir: Path) -> list[dict[str, Any]]:
    (path,) = (workdir / ".orchestrator" / "runs").glob("*/signals.ndjson")
    return [json.loads(line) for line in path.read_text().splitlines()]


# -- the scenario: one signal sent before the wait, one after -------------------------------

#: The commands of the scenario, in order: (what, argv after the work directory's options).
SCENARIO: list[tuple[str, list[str]]] = [
    ("run", ["run", APPROVALS]),
    ("signal-before", ["signal", "approve", "--data", '{"n": 1}', "--id", "sig-1"]),
    ("respond", ["respond", "--text", "It is sunny."]),
    ("resume-takes-first", ["resume"]),
    ("signal-after", ["signal", "approve", "--data", '{"n": 2}', "--id", "sig-2"]),
    ("resume-takes-second", ["resume"]),
]
EXPECTED_RC = {
    "run": 42,
    "signal-before": 0,
    "respond": 0,
    "resume-takes-first": 42,
    "signal-after": 0,
    "resume-takes-second": 0,
}


def play(
    workdir: Path, index: int, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    _, argv = SCENARIO[index]
    return orchestrate(*argv, "--workdir", workdir, env=env)


def check_delivered_once(workdir: Path, where: Any) -> None:
    """The run ended with each signal taken once, in the order sent, and nothing left."""
    done = finished(workdir)
    assert done["phase_data"]["approve"] == {
        "first": {"n": 1},
        "second": {"n": 2},
        "rest": [],
    }, where
    assert done["phase_data"]["x_orchestrator"]["signals_consumed"] == ["sig-1", "sig-2"], where
    assert [s["signal_id"] for s in inbox(workdir)] == ["sig-1", "sig-2"], where


def test_a_signal_sent_before_the_wait_and_one_after_are_each_delivered_once_in_order(
    tmp_path: Path,
) -> None:
    workdir = fresh(tmp_path / "run")
    for index, (what, _) in enumerate(SCENARIO):
        done = play(workdir, index)
        assert done.returncode == EXPECTED_RC[what], (what, done.stderr)
        if what == "signal-before":
            assert "signal approve kept (sig-1)" in done.stdout
        if what == "resume-takes-first":
            assert "waiting for signal approve" in done.stderr, done.stderr
            assert not (workdir / ".agent-request.json").exists()
            status = orchestrate("status", "--workdir", workdir)
            assert "status     paused (waiting for signal approve)" in status.stdout
            assert "orchestrate signal approve" in status.stdout
            shown = orchestrate("status", "--workdir", workdir, "--json")
            assert json.loads(shown.stdout)["waiting_for_signal"] == "approve"
            assert live_record(workdir, "approvals")["waiting_for_signal"] == {
                "name": "approve",
                "schema": None,
            }
            # A resume with no new signal writes nothing and still waits.
            lock = workdir / ".orchestrator" / "approvals.lock"
            files = {p: p.read_bytes() for p in workdir.rglob("*") if p.is_file() and p != lock}
            again = orchestrate("resume", "--workdir", workdir)
            assert again.returncode == 42
            after = {p: p.read_bytes() for p in workdir.rglob("*") if p.is_file() and p != lock}
            assert after == files
    check_delivered_once(workdir, "uninterrupted")
    assert steps_log(workdir) == ["drafted", "first-1", "second-2"]
    (run_dir,) = (workdir / ".orchestrator" / "runs").glob("*/")
    replayed = orchestrate("replay", APPROVALS, "--run", run_dir)
    assert replayed.returncode == 0, replayed.stderr
    assert "replays clean" in replayed.stderr


def test_sending_again_with_the_same_id_keeps_the_signal_once(tmp_path: Path) -> None:
    workdir = fresh(tmp_path / "run")
    assert play(workdir, 0).returncode == 42
    for _ in range(2):
        sent = play(workdir, 1)
        assert sent.returncode == 0, sent.stderr
    assert [s["signal_id"] for s in inbox(workdir)] == ["sig-1"]


def test_a_signal_to_no_live_run_is_refused(tmp_path: Path) -> None:
    workdir = fresh(tmp_path / "none")
    refused = orchestrate("signal", "approve", "--workdir", workdir, "--data", "1")
    assert refused.returncode == 2, refused.stderr
    assert "no workflow instance here" in refused.stderr
    bad = orchestrate("signal", "approve", "--workdir", workdir, "--data", "{nope")
    assert bad.returncode == 2
    assert "--data: the payload is not JSON" in bad.stderr


# -- the kill -9 sweep ----------------------------------------------------------------------

#: The commands the sweep kills, each at its own crash points: the sends and the resumes
#: that take the signals.
KILLED = ("signal-before", "resume-takes-first", "signal-after", "resume-takes-second")


def crash_points(tmp_path: Path, killed: str) -> list[str]:
    """The crash points of command ``killed`` in the scenario, as logged in count mode."""
    workdir = fresh(tmp_path / f"count-{killed}")
    log = tmp_path / f"count-{killed}.log"
    for index, (what, _) in enumerate(SCENARIO):
        env = None
        if what == killed:
            env = {"ORCHESTRATOR_CRASH_AT": "count", "ORCHESTRATOR_CRASH_LOG": str(log)}
        assert play(workdir, index, env).returncode == EXPECTED_RC[what], what
    return [line.partition(" ")[2] for line in log.read_text().splitlines()]


def finish_after_kill(workdir: Path, killed_index: int) -> None:
    """Go on after the command at ``killed_index`` was killed: a send is sent again with
    its id (its sender was never told it was kept), a resume is run again; then the rest."""
    what, _ = SCENARIO[killed_index]
    redo = play(workdir, killed_index)
    assert redo.returncode == EXPECTED_RC[what], (what, redo.stderr)
    for index in range(killed_index + 1, len(SCENARIO)):
        later, _ = SCENARIO[index]
        done = play(workdir, index)
        assert done.returncode == EXPECTED_RC[later], (later, done.stderr)


@pytest.mark.slow
@pytest.mark.parametrize("sweep", sweeps.SWEEPS)
def test_kill_9_at_every_durable_write_delivers_each_signal_once_in_order(
    tmp_path: Path, sweep: str
) -> None:
    killed_runs = 0
    for killed in KILLED:
        labels = crash_points(tmp_path, killed)
        assert labels, killed
        killed_index = [what for what, _ in SCENARIO].index(killed)
        for point in sweeps.chosen(sweep, labels):
            where = (killed, point, labels[point - 1])
            workdir = fresh(tmp_path / f"kill-{killed}-{point}")
            for index in range(killed_index):
                what, _ = SCENARIO[index]
                assert play(workdir, index).returncode == EXPECTED_RC[what], (where, what)
            crash = {"ORCHESTRATOR_CRASH_AT": str(point)}
            died = play(workdir, killed_index, crash)
            assert died.returncode == -signal.SIGKILL, (where, died.stderr)
            killed_runs += 1
            finish_after_kill(workdir, killed_index)
            check_delivered_once(workdir, where)
            ran = steps_log(workdir)
            assert ran.count("drafted") == 1, (where, ran)
            for step in ("first-1", "second-2"):
                # Once; twice only when the kill fell between the step's return and the
                # state that records it (the documented window of ctx.step).
                window = labels[point - 1] in (
                    f"after-step-run {step.partition('-')[0]}",
                    "before-write .approvals-state.json",
                    "before-rename .approvals-state.json",
                )
                assert ran.count(step) == 1 or (ran.count(step) == 2 and window), (where, ran)
    assert killed_runs >= len(KILLED)


# -- the answer gate at the door, timeouts, drains -----------------------------------------


def test_a_payload_that_does_not_fit_is_refused_at_the_door_and_the_run_still_waits(
    tmp_path: Path,
) -> None:
    workdir = fresh(tmp_path / "run")
    env = at(DAY)
    assert orchestrate("run", TYPED, "--workdir", workdir, env=env).returncode == 42
    assert live_record(workdir, "typed-approval")["waiting_for_signal"]["schema"]["required"] == [
        "approved",
        "by",
    ]
    refused = orchestrate(
        "signal", "approve", "--workdir", workdir, "--data", '{"approved": true}', env=env
    )
    assert refused.returncode == 2
    assert "payload.by: expected a string (a required field), got nothing" in refused.stderr
    assert "nothing was kept" in refused.stderr
    assert not list((workdir / ".orchestrator" / "runs").glob("*/signals.ndjson"))
    as_json = orchestrate(
        "signal",
        "approve",
        "--workdir",
        workdir,
        "--data",
        '{"approved": 1, "by": "x"}',
        "--json",
        env=env,
    )
    assert as_json.returncode == 2
    assert json.loads(as_json.stdout)["refusal"]["field"] == "payload.approved"
    still = orchestrate("resume", "--workdir", workdir, env=env)
    assert still.returncode == 42
    assert "waiting for signal approve" in still.stderr
    good = '{"approved": true, "by": "ann"}'
    assert orchestrate("signal", "approve", "--workdir", workdir, "--data", good).returncode == 0
    waits = orchestrate("resume", "--workdir", workdir, env=env)
    assert waits.returncode == 42
    assert "waiting for signal go until 2026-03-02T10:00:00.000Z" in waits.stderr
    status = orchestrate("status", "--workdir", workdir, env=env)
    assert "(the signal's deadline)" in status.stdout
    # No signal within the hour: the wait returns None.
    late = orchestrate("resume", "--workdir", workdir, env=at(DAY + timedelta(hours=1)))
    assert late.returncode == 0, late.stderr
    assert finished(workdir)["phase_data"]["decide"] == {
        "notes": [],
        "approval": {"approved": True, "by": "ann"},
        "go": None,
    }


class Drains(Workflow):
    name = "drains"
    agents = ()

    @phase(1)
    def gather(self, ctx: Any) -> dict[str, Any]:
        early = ctx.signals("note")
        ctx.sleep(timedelta(hours=1))
        later = ctx.signals("note")
        return {"early": early, "later": later, "go": ctx.wait_for_signal("go", timeout=None)}


def send(workdir: Path, name: str, payload: Any) -> str:
    from orchestrator._ports import RunInput, SendSignalInput
    from orchestrator.adapters.file_runs import FileRunStore

    with FileRunStore(workdir) as store:
        return store.send_signal(SendSignalInput(run=RunInput(), name=name, payload=payload))


def test_signals_drains_in_order_once_and_replays_the_same(
    workflow_harness: Any, fake_clock: FakeClock
) -> None:
    fake_clock.current = DAY
    harness = workflow_harness(Drains)
    assert harness.run({}).exit_code == 42  # asleep, after an empty drain
    for text in ("a", "b", "c"):
        send(harness.workdir, "note", text)
    send(harness.workdir, "go", {"ok": True})
    fake_clock.advance(3600)
    done = harness.resume()
    assert done.exit_code == 0, done.message
    assert done.outputs["gather"] == {"early": [], "later": ["a", "b", "c"], "go": {"ok": True}}


class WrongOrder(Workflow):
    name = "drains"
    agents = ()

    @phase(1)
    def gather(self, ctx: Any) -> dict[str, Any]:
        ctx.sleep(timedelta(hours=1))
        return {}


def test_a_phase_that_no_longer_waits_where_it_waited_is_a_non_determinism(
    workflow_harness: Any, fake_clock: FakeClock
) -> None:
    fake_clock.current = DAY
    harness = workflow_harness(Drains)
    assert harness.run({}).exit_code == 42
    fake_clock.advance(3600)
    changed = workflow_harness(WrongOrder)
    failed = changed.resume()
    assert failed.exit_code == 1
    assert "ctx.signals('note')" in failed.message
    assert "NonDeterminismError" in json.dumps(
        live_record(changed.workdir, "drains")["failure_trace"]
    )


@pytest.mark.slow
def test_drive_keeps_waiting_for_a_signal_and_goes_on_when_it_comes(tmp_path: Path) -> None:
    workdir = fresh(tmp_path / "run")
    drive = subprocess.Popen(
        command("drive", TYPED, "--workdir", workdir, "--handler", "true"),
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        state = workdir / ".typed-approval-state.json"
        for _ in range(600):  # until the run waits for its signal
            if state.exists() and b"waiting_for_signal" in state.read_bytes():
                break
            time.sleep(0.1)
        good = '{"approved": false, "by": "bo"}'
        assert (
            orchestrate("signal", "approve", "--workdir", workdir, "--data", good).returncode == 0
        )
        assert orchestrate("signal", "go", "--workdir", workdir, "--data", '"now"').returncode == 0
        _, err = drive.communicate(timeout=120)
    finally:
        if drive.poll() is None:
            drive.kill()
            drive.wait()
    assert drive.returncode == 0, err.decode()
    assert b"waiting for signal approve" in err
    assert finished(workdir)["phase_data"]["decide"]["go"] == "now"


def test_an_id_kept_twice_is_one_signal(workflow_harness: Any, fake_clock: FakeClock) -> None:
    """Two senders of one id at once may both append it: the run takes it once."""
    fake_clock.current = DAY
    harness = workflow_harness(Drains)
    assert harness.run({}).exit_code == 42
    (run_dir,) = (harness.workdir / ".orchestrator" / "runs").glob("*/")
    line = json.dumps({"signal_id": "twice", "name": "note", "payload": 1, "sent_at": "x"})
    (run_dir / "signals.ndjson").write_text(f"{line}\n{line}\n")
    send(harness.workdir, "go", None)
    fake_clock.advance(3600)
    done = harness.resume()
    assert done.exit_code == 0, done.message
    assert done.outputs["gather"] == {"early": [], "later": [1], "go": None}
