"""Workers killed with SIGKILL at random points lose nothing (issue 16, what must show 2).

Real ``orchestrate worker`` processes advance ``pg_flows.Relay`` runs (a step with a side
effect and an in-process ask in each of three phases, answered by a fast subprocess
agent); three at a time, each killed outright a random while after it starts serving,
until 200 have been killed, with runs queued as the backlog runs low so that kills land
on work. A last worker with ``--until-idle`` then finishes what is left. From the store,
the step log and the agent's log (``tests/pg_fleet.py`` has the checks):

- every run completed, its events one ordered history (``x_seq`` 1..N, ``run.end`` last);
- no answer lost: each output is an answer the agent gave to that very prompt, and an
  answer that is in no run was given to a worker that was then killed;
- no step ran twice outside its window: a step runs again only where the worker that
  ran it first was killed before the step's checkpoint.
"""

from __future__ import annotations

import random
import signal
import subprocess
import time
from pathlib import Path

import pg_fleet
import pytest

pytestmark = pytest.mark.slow

KILLS = 200
AT_ONCE = 3
#: the longest a worker serves before it is killed (seconds after it says it serves)
LONGEST_LIFE = 0.35
BACKLOG = 8  # fewer unfinished runs than this: queue another batch
BATCH = 16


def serving(stderr: Path) -> bool:
    return b"serving" in stderr.read_bytes() if stderr.exists() else False


def test_workers_killed_at_random_points_lose_nothing(pg_fresh_dsn: str, tmp_path: Path) -> None:
    from orchestrator.adapters.postgres.migrations import upgrade

    dsn = pg_fresh_dsn
    upgrade(dsn)
    env = pg_fleet.fleet_env(tmp_path)
    logs = tmp_path / "workers"
    logs.mkdir()
    rng = random.Random()
    pg_fleet.queue(dsn, BATCH * 2, workdir=tmp_path)
    killed: list[int] = []
    started = 0
    live: dict[
        int, tuple[subprocess.Popen[bytes], Path, float | None]
    ] = {}  # pid -> (process, log, kill at)

    while len(killed) < KILLS:
        while len(live) < AT_ONCE and started < KILLS + AT_ONCE:
            if pg_fleet.unfinished(dsn) < BACKLOG:
                pg_fleet.queue(dsn, BATCH, workdir=tmp_path)
            log = logs / f"{started}.err"
            extra = ("--orphan-check", "0.2", "--concurrency", str(1 + started % 2))
            process = pg_fleet.start_worker(dsn, env, log, *extra)
            live[process.pid] = (process, log, None)
            started += 1
        time.sleep(0.01)
        now = time.monotonic()
        for pid, (process, log, kill_at) in list(live.items()):
            assert process.poll() is None, f"worker {pid} exited by itself: {log.read_text()}"
            if kill_at is None:
                if serving(log):
                    live[pid] = (process, log, now + rng.uniform(0, LONGEST_LIFE))
                continue
            if now >= kill_at:
                process.send_signal(signal.SIGKILL)
                process.wait()
                killed.append(pid)
                del live[pid]
                if len(killed) >= KILLS:
                    break
    for pid, (process, _, _) in live.items():
        process.send_signal(signal.SIGKILL)
        process.wait()
        killed.append(pid)

    before = pg_fleet.read_runs(dsn)
    taken_over = [
        run_id
        for run_id, run in before.items()
        if len({line.get("x_worker") for _, line in run["events"]}) > 1
    ]
    assert taken_over, "no run was left part-way by a killed worker: the kills hit no work"

    last = tmp_path / "last.err"
    process = pg_fleet.start_worker(dsn, env, last, "--until-idle", "--orphan-check", "0.2")
    assert process.wait(timeout=600) == 0, last.read_text()
    assert "not advanced" not in last.read_text(), last.read_text()

    runs = pg_fleet.read_runs(dsn)
    assert len(killed) >= KILLS
    assert len(runs) >= BATCH * 2
    problems = pg_fleet.all_problems(runs, tmp_path, killed)
    print(pg_fleet.summary(runs, tmp_path, killed))
    assert not problems, "\n".join(problems[:40])
