"""Workers killed with SIGKILL at random points lose nothing (issue 16, what must show 2).

Real ``orchestrate worker`` processes advance ``pg_flows.Relay`` runs (a step with a side
effect and an in-process ask in each of three phases, answered by a fast subprocess
agent); three at a time, each killed outright a random while after it starts serving
(a quarter of them) or after it is first seen at work (a step or an ask of its in the
logs: so that kills land on work however busy the machine), until 200 have been killed,
with runs queued as the backlog runs low. A last worker with ``--until-idle`` then
finishes what is left. From the store, the step log and the agent's log
(``tests/support/pg_fleet.py`` has the checks):

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
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from support import pg_fleet, sweeps

pytestmark = pytest.mark.slow

KILLS = 200
AT_ONCE = 3
#: the share of workers killed a random while after they say they serve (the rest: a
#: random while after they are seen at work, a step or an ask of theirs in the logs)
ANY_TIME = 0.25
#: the longest a worker goes on before it is killed (seconds after it serves or works)
LONGEST_LIFE = 0.35
AFTER_WORK = 0.2
BACKLOG = 8  # fewer unfinished runs than this: queue another batch
BATCH = 16


@pytest.fixture(autouse=True)
def _no_server_restart_meanwhile() -> Iterator[None]:
    with pg_fleet.server_turn():
        yield


class Doings:
    """The processes seen at work so far: in the step log, or asking the agent."""

    def __init__(self, tmp: Path) -> None:
        self.paths = [tmp / "steps.log", tmp / "agent.log"]
        self.offsets = [0, 0]
        self.pids: set[int] = set()

    def update(self) -> set[int]:
        for n, path in enumerate(self.paths):
            if not path.exists():
                continue
            with path.open("rb") as log:
                log.seek(self.offsets[n])
                data = log.read()
            complete = data[: data.rfind(b"\n") + 1]
            self.offsets[n] += len(complete)
            for line in complete.decode().splitlines():
                who = line.split()[-1]
                self.pids.add(pg_fleet.LABELS.get(who) or int(who))
        return self.pids


@attrs.define
class Victim:
    process: subprocess.Popen[bytes]
    log: Path
    any_time: bool
    kill_at: float | None = None

    def serving(self) -> bool:
        return b"serving" in self.log.read_bytes() if self.log.exists() else False


@pytest.mark.parametrize("sweep", sweeps.SWEEPS)
def test_workers_killed_at_random_points_lose_nothing(
    pg_fresh_dsn: str, tmp_path: Path, sweep: str
) -> None:
    from orchestrator.adapters.postgres.migrations import upgrade

    dsn = pg_fresh_dsn
    upgrade(dsn)
    env = pg_fleet.fleet_env(tmp_path)
    logs = tmp_path / "workers"
    logs.mkdir()
    rng = random.Random()
    doings = Doings(tmp_path)
    pg_fleet.queue(dsn, BATCH * 2, workdir=tmp_path)
    killed: list[int] = []
    started = 0
    live: dict[int, Victim] = {}

    # The default run makes a fifth of the soak run's kills.
    while len(killed) < sweeps.fewer(sweep, KILLS, KILLS // 5):
        while len(live) < AT_ONCE:
            if pg_fleet.unfinished(dsn) < BACKLOG:
                pg_fleet.queue(dsn, BATCH, workdir=tmp_path)
            log = logs / f"{started}.err"
            extra = ("--orphan-check", "0.2", "--concurrency", str(1 + started % 2))
            process = pg_fleet.start_worker(dsn, env, log, *extra)
            live[process.pid] = Victim(process, log, any_time=rng.random() < ANY_TIME)
            started += 1
        time.sleep(0.01)
        at_work = doings.update()
        now = time.monotonic()
        for pid, victim in list(live.items()):
            said = victim.log.read_text()
            assert victim.process.poll() is None, f"worker {pid} exited by itself: {said}"
            if victim.kill_at is None:
                if victim.any_time and victim.serving():
                    victim.kill_at = now + rng.uniform(0, LONGEST_LIFE)
                elif not victim.any_time and pid in at_work:
                    victim.kill_at = now + rng.uniform(0, AFTER_WORK)
            elif now >= victim.kill_at:
                victim.process.send_signal(signal.SIGKILL)
                victim.process.wait()
                killed.append(pid)
                del live[pid]
    for pid, victim in live.items():
        victim.process.send_signal(signal.SIGKILL)
        victim.process.wait()
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
    assert len(killed) >= sweeps.fewer(sweep, KILLS, KILLS // 5)
    assert len(runs) >= BATCH * 2
    problems = pg_fleet.all_problems(runs, tmp_path, killed)
    print(pg_fleet.summary(runs, tmp_path, killed))
    assert not problems, "\n".join(problems[:40])
