"""Four workers in four processes on 200 runs (issue 16, what must show 3, for runs).

200 ``pg_flows.Relay`` runs are queued, half of them with a durable timer in their second
phase, so that they pause and whichever worker is free when the timer is due takes them
on. Four ``orchestrate worker`` processes serve until every run has completed, then stop
on SIGTERM. From the events and the logs (``tests/support/pg_fleet.py`` has the checks): each run
was advanced by one worker at a time (the stretches of its events each worker wrote never
overlap in time), its ``x_seq`` runs 1..N without a gap and ends in ``run.end``; every
run completed once, each step ran once, each answer the agent gave is in its run.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import pg_fleet

pytestmark = pytest.mark.slow

RUNS = 200
WORKERS = 4
PATIENCE = 600.0  # a guard against a hang, never a measure


@pytest.fixture(autouse=True)
def _no_server_restart_meanwhile() -> Iterator[None]:
    with pg_fleet.server_turn():
        yield


def test_four_workers_advance_each_run_one_at_a_time(pg_fresh_dsn: str, tmp_path: Path) -> None:
    from orchestrator.adapters.postgres.migrations import upgrade

    dsn = pg_fresh_dsn
    upgrade(dsn)
    queued = pg_fleet.queue(dsn, RUNS // 2, workdir=tmp_path)
    queued += pg_fleet.queue(dsn, RUNS - len(queued), nap=0.2, workdir=tmp_path)
    env = pg_fleet.fleet_env(tmp_path)
    logs = [tmp_path / f"worker-{n}.err" for n in range(WORKERS)]
    workers = [pg_fleet.start_worker(dsn, env, log, "--orphan-check", "0.5") for log in logs]

    deadline = time.monotonic() + PATIENCE
    while pg_fleet.unfinished(dsn):
        for worker, log in zip(workers, logs, strict=True):
            assert worker.poll() is None, f"a worker exited: {log.read_text()}"
        assert time.monotonic() < deadline, f"runs left after {PATIENCE:.0f} s"
        time.sleep(0.1)
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
    for worker, log in zip(workers, logs, strict=True):
        assert worker.wait(timeout=60) == 0, log.read_text()
        said = log.read_text()
        assert "not advanced" not in said and "Traceback" not in said, said

    runs = pg_fleet.read_runs(dsn)
    assert sorted(runs) == sorted(queued)
    problems = pg_fleet.all_problems(runs, tmp_path)
    print(pg_fleet.summary(runs, tmp_path))
    assert not problems, "\n".join(problems[:40])
    workers_seen = {line.get("x_worker") for run in runs.values() for _, line in run["events"]}
    assert len(workers_seen) == WORKERS, workers_seen
    handed_over = [
        run_id for run_id, run in runs.items() if len(pg_fleet.segments(run["events"])) > 1
    ]
    assert handed_over, "no run went from one worker to another: the test saw no hand-over"
