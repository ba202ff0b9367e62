"""Signals on a PostgreSQL store (``--store``): ``orchestrate signal --store DSN --run ID``
keeps a signal in the store's ``signals`` table through the answer gate, and a worker,
woken by the notification the signal sends, resumes the run waiting for it. Real
processes against a real server, in this session's own schema."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.cli import child_env, command, orchestrate

pytestmark = pytest.mark.slow

FLOWS = Path(__file__).resolve().parents[1] / "support" / "signal_flows.py"
APPROVALS = f"{FLOWS}:Approvals"
TYPED = f"{FLOWS}:TypedApproval"
PATIENCE = 120.0  # a guard against a hang, never a measure


def status_of(dsn: str, run_id: str) -> dict[str, Any]:
    result = orchestrate("status", "--store", dsn, "--run", run_id, "--json")
    assert result.returncode == 0, result.stderr
    summary: dict[str, Any] = json.loads(result.stdout)
    return summary


def signal_rows(dsn: str, run_id: str) -> list[tuple[str, str]]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "select signal_id, name from signals where run_id = %s order by seq", (run_id,)
        ).fetchall()
    return [(str(a), str(b)) for a, b in rows]


def until(what: str, check: Any, worker: subprocess.Popen[bytes], log: Path) -> Any:
    """Wait until ``check()`` gives something true (a worker at work); fail on a hang."""
    deadline = time.monotonic() + PATIENCE
    while True:
        found = check()
        if found:
            return found
        assert worker.poll() is None, f"the worker exited: {log.read_text()}"
        assert time.monotonic() < deadline, f"{what}: not after {PATIENCE:.0f} s"
        time.sleep(0.1)


@pytest.fixture
def signal_dsn(pg_fresh_dsn: str) -> str:
    """A store of this test's own: the session's holds other tests' queued runs, which
    this test's worker would claim."""
    from orchestrator.adapters.postgres.migrations import upgrade

    upgrade(pg_fresh_dsn)
    return pg_fresh_dsn


@pytest.fixture
def worker(signal_dsn: str, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    log = tmp_path / "worker.err"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            command("worker", "--store", signal_dsn),
            env=child_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
    try:
        yield process, log
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def test_a_worker_resumes_a_run_when_its_signal_arrives(
    signal_dsn: str, tmp_path: Path, worker: tuple[subprocess.Popen[bytes], Path]
) -> None:
    process, log = worker
    started = orchestrate("run", TYPED, "--store", signal_dsn, "--workdir", tmp_path)
    assert started.returncode == 42, started.stderr
    run_id = started.stdout.strip()
    assert "waiting for signal approve" in started.stderr
    summary = status_of(signal_dsn, run_id)
    assert summary["waiting_for_signal"] == "approve"
    assert "'orchestrate signal approve --store" in summary["next"]

    # A payload that does not fit: refused at the door, nothing kept, the run waits.
    refused = orchestrate(
        "signal", "approve", "--store", signal_dsn, "--run", run_id, "--data", '{"approved": "y"}'
    )
    assert refused.returncode == 2
    assert "payload.by: expected a string (a required field)" in refused.stderr
    assert signal_rows(signal_dsn, run_id) == []
    assert status_of(signal_dsn, run_id)["waiting_for_signal"] == "approve"

    good = '{"approved": true, "by": "ann"}'
    sent = orchestrate("signal", "approve", "--store", signal_dsn, "--run", run_id, "--data", good)
    assert sent.returncode == 0, sent.stderr
    until(
        "the worker takes the signal and waits for the next",
        lambda: status_of(signal_dsn, run_id).get("waiting_for_signal") == "go",
        process,
        log,
    )
    sent = orchestrate("signal", "go", "--store", signal_dsn, "--run", run_id, "--data", "3")
    assert sent.returncode == 0, sent.stderr
    until(
        "the worker completes the run",
        lambda: status_of(signal_dsn, run_id)["status"] == "completed",
        process,
        log,
    )
    outputs = orchestrate("output", "--store", signal_dsn, "--run", run_id, "--json")
    assert outputs.returncode == 0, outputs.stderr
    assert json.loads(outputs.stdout)["decide"] == {
        "notes": [],
        "approval": {"approved": True, "by": "ann"},
        "go": 3,
    }
    ended = orchestrate("signal", "go", "--store", signal_dsn, "--run", run_id, "--data", "4")
    assert ended.returncode == 2
    assert "takes no more signals" in ended.stderr


def test_signals_before_and_after_the_wait_are_delivered_once_in_order_and_replay_clean(
    signal_dsn: str, tmp_path: Path, worker: tuple[subprocess.Popen[bytes], Path]
) -> None:
    process, log = worker
    started = orchestrate("run", APPROVALS, "--store", signal_dsn, "--workdir", tmp_path)
    assert started.returncode == 42, started.stderr
    run_id = started.stdout.strip()
    on_run = ("--store", signal_dsn, "--run", run_id)
    for _ in range(2):  # sent twice with its id: kept once
        kept = orchestrate("signal", "approve", *on_run, "--data", '{"n": 1}', "--id", "s1")
        assert kept.returncode == 0, kept.stderr
    (item,) = json.loads(orchestrate("pending", *on_run, "--json").stdout)
    answer = ("--request", item["request"]["request_id"], "--text", "It is sunny.")
    assert orchestrate("respond", *on_run, *answer).returncode == 0
    until(
        "the worker takes the first signal",
        lambda: (
            (tmp_path / "steps.log").exists() and "first-1" in (tmp_path / "steps.log").read_text()
        ),
        process,
        log,
    )
    kept = orchestrate("signal", "approve", *on_run, "--data", '{"n": 2}', "--id", "s2")
    assert kept.returncode == 0, kept.stderr
    until(
        "the worker completes the run",
        lambda: status_of(signal_dsn, run_id)["status"] == "completed",
        process,
        log,
    )
    assert signal_rows(signal_dsn, run_id) == [("s1", "approve"), ("s2", "approve")]
    outputs = json.loads(orchestrate("output", *on_run, "--json").stdout)
    assert outputs["approve"] == {"first": {"n": 1}, "second": {"n": 2}, "rest": []}
    assert (tmp_path / "steps.log").read_text().split() == ["drafted", "first-1", "second-2"]

    exported = tmp_path / "exported"
    done = orchestrate("export", *on_run, "--to", exported)
    assert done.returncode == 0, done.stderr
    (run_dir,) = (exported / ".orchestrator" / "runs").glob("*/")
    replayed = orchestrate("replay", APPROVALS, "--run", run_dir)
    assert replayed.returncode == 0, replayed.stderr
    assert "replays clean" in replayed.stderr
