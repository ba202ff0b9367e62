"""Child runs on PostgreSQL with two ``orchestrate worker`` processes: a queued parent
starts two children (each a run of the store, claimable by any worker), one of which asks
an agent; the host answers it from the parent's pending list; the child's end wakes the
parent, and it completes with both children's outputs, each child run once. A cancel of
a waiting parent cancels its children."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections import Counter as Tally
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support import pg_fleet
from support.cli import child_env, command, orchestrate

pytestmark = pytest.mark.slow

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
PATIENCE = 120.0  # a guard against a hang, never a measure


@pytest.fixture(autouse=True)
def _no_server_restart_meanwhile() -> Iterator[None]:
    with pg_fleet.server_turn():
        yield


def start_workers(dsn: str, tmp: Path, steps: Path, count: int) -> list[subprocess.Popen[bytes]]:
    workers = []
    for n in range(count):
        with (tmp / f"worker-{n}.err").open("wb") as sink:
            workers.append(
                subprocess.Popen(
                    command("worker", "--store", dsn, "--agent", "host"),
                    env=child_env({"CHILD_STEP_LOG": str(steps)}),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=sink,
                )
            )
    # Serving: its SIGTERM handler is in place (a SIGTERM before would end it with -15).
    for n, worker in enumerate(workers):
        log = tmp / f"worker-{n}.err"
        wait_for(f"worker {n} serving", lambda at=log: b"serving" in at.read_bytes(), [worker], tmp)
    return workers


def stop_workers(workers: list[subprocess.Popen[bytes]], tmp: Path) -> list[str]:
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
    codes = []
    for worker in workers:
        try:
            codes.append(worker.wait(timeout=60))
        except subprocess.TimeoutExpired:
            worker.kill()  # no worker outlives its test
            codes.append(worker.wait())
    said = [(tmp / f"worker-{n}.err").read_text() for n in range(len(workers))]
    assert codes == [0] * len(workers), said
    return said


def wait_for(what: str, check: Any, workers: list[subprocess.Popen[bytes]], tmp: Path) -> Any:
    deadline = time.monotonic() + PATIENCE
    while True:
        found = check()
        if found:
            return found
        for n, worker in enumerate(workers):
            assert worker.poll() is None, (tmp / f"worker-{n}.err").read_text()
        assert time.monotonic() < deadline, f"no {what} after {PATIENCE:.0f} s"
        time.sleep(0.1)


def queue_parent(dsn: str, work: Path) -> str:
    queued = orchestrate("run", "--queue", FAMILY, "--store", dsn, "--workdir", work)
    assert queued.returncode == 0, queued.stderr
    return queued.stdout.strip()


def pending_of(dsn: str, run_id: str) -> list[dict[str, Any]]:
    done = orchestrate("pending", "--json", "--store", dsn, "--run", run_id)
    assert done.returncode == 0, done.stderr
    listed: list[dict[str, Any]] = json.loads(done.stdout)
    return listed


def history_record(run: dict[str, Any]) -> dict[str, Any]:
    record: dict[str, Any] = run["history"]["phase_data"]["x_orchestrator"]
    return record


def test_two_workers_advance_a_parent_and_its_children(pg_fresh_dsn: str, tmp_path: Path) -> None:
    from orchestrator.adapters.postgres.migrations import upgrade

    dsn, steps = pg_fresh_dsn, tmp_path / "steps.log"
    upgrade(dsn)
    parent_id = queue_parent(dsn, tmp_path)
    workers = start_workers(dsn, tmp_path, steps, 2)
    listed = wait_for("request of the child", lambda: pending_of(dsn, parent_id), workers, tmp_path)
    asker_id = f"{parent_id}.asker"
    assert [(item["run_id"], item["request"]["agent_name"]) for item in listed] == [
        (asker_id, "writer")
    ]
    status = orchestrate("status", "--store", dsn, "--run", parent_id)
    assert f"waiting    for child run {asker_id}" in status.stdout, status.stdout

    # Answered from the parent: the answer goes to the child's run.
    answered = orchestrate(
        "respond", "--store", dsn, "--run", parent_id,
        "--request-id", listed[0]["request"]["request_id"], "--text", ANSWER,
    )  # fmt: skip
    assert answered.returncode == 0, answered.stderr
    assert f"run {asker_id}" in answered.stdout

    wait_for(
        "completed parent",
        lambda: pg_fleet.statuses(dsn) == Tally({"completed": 3}),
        workers,
        tmp_path,
    )
    said = stop_workers(workers, tmp_path)
    assert not any("not advanced" in s or "Traceback" in s for s in said), said

    output = orchestrate("output", "--store", dsn, "--run", parent_id)
    assert json.loads(output.stdout) == EXPECTED
    runs = pg_fleet.read_runs(dsn)
    parent = history_record(runs[parent_id])
    assert set(runs) == {parent_id, *parent["children"]}
    assert asker_id in parent["children"]
    for child in parent["children"]:
        assert history_record(runs[child])["parent_run_id"] == parent_id
        # each child was advanced by workers: its own events, one start, one end
        names = [line["event"] for _, line in runs[child]["events"]]
        assert names.count("run.start") == 1 and names[-1] == "run.end", names
        assert all(line.get("x_worker") for _, line in runs[child]["events"])
    assert Tally(steps.read_text().splitlines()) == Tally({"count lakes": 1, "total": 1})


def test_a_cancel_of_a_waiting_parent_cancels_its_children(
    pg_fresh_dsn: str, tmp_path: Path
) -> None:
    from orchestrator.adapters.postgres.migrations import upgrade

    dsn, steps = pg_fresh_dsn, tmp_path / "steps.log"
    upgrade(dsn)
    parent_id = queue_parent(dsn, tmp_path)
    workers = start_workers(dsn, tmp_path, steps, 2)
    wait_for("request of the child", lambda: pending_of(dsn, parent_id), workers, tmp_path)
    stop_workers(workers, tmp_path)
    cancelled = orchestrate("cancel", "--store", dsn, "--run", parent_id)
    assert cancelled.returncode == 0, cancelled.stderr
    runs = pg_fleet.read_runs(dsn)
    asker_id = f"{parent_id}.asker"
    assert runs[parent_id]["status"] == "cancelled"
    assert runs[asker_id]["status"] == "cancelled"
    others = {r["status"] for run_id, r in runs.items() if run_id not in (parent_id, asker_id)}
    assert others == {"completed"}  # the counter had ended: left as it was
    assert pending_of(dsn, parent_id) == []


def test_a_worker_killed_in_a_child_loses_nothing(pg_fresh_dsn: str, tmp_path: Path) -> None:
    """A worker killed (kill -9, at its first crash point: right after the counting
    child's step ran, before its checkpoint) loses nothing: two other workers take the
    parent and its children on, the step runs again (its at-least-once window), and the
    parent completes with both children's outputs, each child one run."""
    from orchestrator.adapters.postgres.migrations import upgrade

    dsn, steps = pg_fresh_dsn, tmp_path / "steps.log"
    upgrade(dsn)
    parent_id = queue_parent(dsn, tmp_path)
    with (tmp_path / "doomed.err").open("wb") as sink:
        doomed = subprocess.Popen(
            command("worker", "--store", dsn, "--agent", "host"),
            env=child_env({"CHILD_STEP_LOG": str(steps), "ORCHESTRATOR_CRASH_AT": "1"}),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
    assert doomed.wait(timeout=PATIENCE) == -signal.SIGKILL, (tmp_path / "doomed.err").read_text()
    assert Tally(steps.read_text().splitlines()) == Tally({"count lakes": 1})

    workers = start_workers(dsn, tmp_path, steps, 2)
    listed = wait_for("request of the child", lambda: pending_of(dsn, parent_id), workers, tmp_path)
    answered = orchestrate(
        "respond", "--store", dsn, "--run", parent_id,
        "--request-id", listed[0]["request"]["request_id"], "--text", ANSWER,
    )  # fmt: skip
    assert answered.returncode == 0, answered.stderr
    wait_for(
        "completed parent",
        lambda: pg_fleet.statuses(dsn) == Tally({"completed": 3}),
        workers,
        tmp_path,
    )
    stop_workers(workers, tmp_path)
    output = orchestrate("output", "--store", dsn, "--run", parent_id)
    assert json.loads(output.stdout) == EXPECTED
    runs = pg_fleet.read_runs(dsn)
    assert set(runs) == {parent_id, *history_record(runs[parent_id])["children"]}
    for run_id, run in runs.items():
        names = [line["event"] for _, line in run["events"]]
        assert names.count("run.start") == 1 and names[-1] == "run.end", (run_id, names)
    # the killed worker's run of the step, then the one that counted
    assert Tally(steps.read_text().splitlines()) == Tally({"count lakes": 2, "total": 1})


def test_a_resume_of_the_parent_goes_on_with_its_children_in_process(
    pg_fresh_dsn: str, tmp_path: Path
) -> None:
    """Without a worker: ``orchestrate resume --run PARENT`` advances the child that was
    answered in that process, then the parent."""
    from orchestrator.adapters.postgres.migrations import upgrade

    dsn, steps = pg_fresh_dsn, tmp_path / "steps.log"
    upgrade(dsn)
    started = orchestrate(
        "run", FAMILY, "--store", dsn, "--workdir", tmp_path,
        env={"CHILD_STEP_LOG": str(steps)},
    )  # fmt: skip
    assert started.returncode == 42, started.stderr
    parent_id = started.stdout.strip()
    (item,) = pending_of(dsn, parent_id)
    answered = orchestrate(
        "respond", "--store", dsn, "--run", parent_id,
        "--request-id", item["request"]["request_id"], "--text", ANSWER,
    )  # fmt: skip
    assert answered.returncode == 0, answered.stderr
    resumed = orchestrate(
        "resume", "--store", dsn, "--run", parent_id, env={"CHILD_STEP_LOG": str(steps)}
    )
    assert resumed.returncode == 0, resumed.stderr
    output = orchestrate("output", "--store", dsn, "--run", parent_id)
    assert json.loads(output.stdout) == EXPECTED
    assert pg_fleet.statuses(dsn) == Tally({"completed": 3})
    assert Tally(steps.read_text().splitlines()) == Tally({"count lakes": 1, "total": 1})


def test_prune_keeps_the_ended_children_of_a_waiting_parent(
    pg_fresh_dsn: str, tmp_path: Path
) -> None:
    """A child that completed while its parent waits for the other is not pruned: the
    parent reads its outputs when it goes on."""
    from orchestrator.adapters.postgres.migrations import upgrade

    dsn, steps = pg_fresh_dsn, tmp_path / "steps.log"
    upgrade(dsn)
    started = orchestrate(
        "run", FAMILY, "--store", dsn, "--workdir", tmp_path,
        env={"CHILD_STEP_LOG": str(steps)},
    )  # fmt: skip
    assert started.returncode == 42, started.stderr
    parent_id = started.stdout.strip()
    assert pg_fleet.statuses(dsn)["completed"] == 1  # the counting child ended
    pruned = orchestrate("prune", "--keep-last", "0", "--json", "--store", dsn)
    assert pruned.returncode == 0, pruned.stderr
    assert pg_fleet.statuses(dsn)["completed"] == 1, pruned.stdout
    (item,) = pending_of(dsn, parent_id)
    answered = orchestrate(
        "respond", "--store", dsn, "--run", parent_id,
        "--request-id", item["request"]["request_id"], "--text", ANSWER,
    )  # fmt: skip
    assert answered.returncode == 0, answered.stderr
    resumed = orchestrate(
        "resume", "--store", dsn, "--run", parent_id, env={"CHILD_STEP_LOG": str(steps)}
    )
    assert resumed.returncode == 0, resumed.stderr
    output = orchestrate("output", "--store", dsn, "--run", parent_id)
    assert json.loads(output.stdout) == EXPECTED
    # Once the parent has ended, the family goes whole.
    again = orchestrate("prune", "--keep-last", "0", "--store", dsn)
    assert again.returncode == 0, again.stderr
    assert pg_fleet.statuses(dsn) == Tally()
