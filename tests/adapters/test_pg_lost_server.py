"""Workers outlive their connection to the store (issue 16, what must show 2).

A worker whose connection dies (the server restarted, or its backend ended) lets go of
the run at hand (its advisory lock died with the connection), reconnects with backoff
and serves on; the run is taken on from its last checkpoint, by it or another worker.

- The backends of a worker are ended with ``pg_terminate_backend`` several times while it
  advances runs: only this test's connections are touched, so it is safe beside others.
- PostgreSQL itself restarts (``pg_ctlcluster VERSION CLUSTER restart``) in the middle of
  runs being advanced by two workers (slow: it interrupts every session on the server,
  and waits until the server answers again; restarts of concurrent test sessions are
  taken one at a time, and never while another test uses the server: ``pg_support.server_turn``).

Then every run completed, no answer was lost, a step ran again only in a worker that lost
its connection before the step's checkpoint, every event log is one ordered history.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from support import pg_fleet
from support.pg_support import server_dsn

LOST = "lost its connection"
#: how long a test waits for what must come (a guard against a hang, never a measure)
PATIENCE = 300.0


pytestmark = pytest.mark.slow


def wait_for(condition: object, what: str, workers: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():  # type: ignore[operator]
        for worker in workers:
            assert worker.poll() is None, f"a worker exited ({worker.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} after {PATIENCE:.0f} s"
        time.sleep(0.05)


def stop(workers: list[subprocess.Popen[bytes]]) -> None:
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(timeout=60) == 0


def check(dsn: str, tmp: Path, workers: list[subprocess.Popen[bytes]], logs: list[Path]) -> None:
    said = [log.read_text() for log in logs]
    lost = [w.pid for w, text in zip(workers, said, strict=True) if LOST in text]
    assert lost, "no worker lost its connection:\n" + "\n".join(said)
    assert not any("Traceback" in text for text in said), "\n".join(said)
    runs = pg_fleet.read_runs(dsn)
    problems = pg_fleet.all_problems(runs, tmp, lost)
    print(pg_fleet.summary(runs, tmp, lost))
    print("\n".join(said))
    assert not problems, "\n".join(problems[:40])


def test_a_worker_whose_backend_is_ended_reconnects_and_finishes(
    pg_fresh_dsn: str, tmp_path: Path
) -> None:
    with pg_fleet.server_turn():
        ending_backends(pg_fresh_dsn, tmp_path)


def ending_backends(pg_fresh_dsn: str, tmp_path: Path) -> None:
    from orchestrator.adapters.postgres.migrations import upgrade

    upgrade(pg_fresh_dsn)
    app = f"pgw_{uuid.uuid4().hex[:10]}"
    worker_dsn = f"{pg_fresh_dsn}&application_name={app}"
    runs = pg_fleet.queue(pg_fresh_dsn, 24, nap=0.2, workdir=tmp_path)
    log = tmp_path / "worker.err"
    worker = pg_fleet.start_worker(
        worker_dsn, pg_fleet.fleet_env(tmp_path), log, "--concurrency", "2", "--orphan-check", "0.2"
    )
    import psycopg

    with psycopg.connect(server_dsn(), autocommit=True) as admin:
        for _ in range(6):
            wait_for(lambda: app_backends(admin, app) >= 2, "connected worker", [worker])
            time.sleep(0.3)
            admin.execute(
                "select pg_terminate_backend(pid) from pg_stat_activity "
                "where application_name = %s",
                (app,),
            )
    wait_for(lambda: pg_fleet.unfinished(pg_fresh_dsn) == 0, "end of every run", [worker])
    stop([worker])
    assert len(runs) == 24
    check(pg_fresh_dsn, tmp_path, [worker], [log])


def app_backends(admin: object, app: str) -> int:
    row = admin.execute(  # type: ignore[attr-defined]
        "select count(*) from pg_stat_activity where application_name = %s", (app,)
    ).fetchone()
    return int(row[0])


# -- a restart of the server ---------------------------------------------------------------


def local_cluster() -> tuple[str, str] | None:
    """The ``(version, name)`` of the local cluster the test server is, if this process
    may restart it."""
    if os.geteuid() != 0 or not shutil.which("pg_ctlcluster") or not shutil.which("pg_lsclusters"):
        return None
    import psycopg

    with psycopg.connect(server_dsn()) as conn:
        row = conn.execute("select current_setting('data_directory')").fetchone()
    listed = subprocess.run(
        ["pg_lsclusters", "--no-header"], capture_output=True, text=True, check=True
    ).stdout
    for line in listed.splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[5] == row[0]:
            return fields[0], fields[1]
    return None


def server_started_at() -> object:
    import psycopg

    deadline = time.monotonic() + PATIENCE
    while True:
        try:
            with psycopg.connect(server_dsn(), connect_timeout=5) as conn:
                return conn.execute("select pg_postmaster_start_time()").fetchone()[0]  # type: ignore[index]
        except psycopg.OperationalError:
            assert time.monotonic() < deadline, "the server does not answer again"
            time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.pg_restart
def test_workers_outlive_a_restart_of_postgresql(pg_fresh_dsn: str, tmp_path: Path) -> None:
    cluster = local_cluster()
    if cluster is None:
        pytest.skip(
            "cannot restart the test server here: needs root, pg_ctlcluster and "
            "ORCHESTRATOR_TEST_PG naming a local cluster"
        )
    from orchestrator.adapters.postgres.migrations import upgrade

    upgrade(pg_fresh_dsn)
    runs = pg_fleet.queue(pg_fresh_dsn, 40, workdir=tmp_path)
    runs += pg_fleet.queue(pg_fresh_dsn, 40, nap=0.3, workdir=tmp_path)
    env = pg_fleet.fleet_env(tmp_path)
    logs = [tmp_path / f"worker-{n}.err" for n in range(2)]
    extra = ("--concurrency", "2", "--orphan-check", "0.2")
    with pg_fleet.server_turn(restart=True):
        before = server_started_at()
        workers = [pg_fleet.start_worker(pg_fresh_dsn, env, log, *extra) for log in logs]
        wait_for(
            lambda: pg_fleet.statuses(pg_fresh_dsn)["completed"] >= 10, "runs completed", workers
        )
        version, name = cluster
        subprocess.run(["pg_ctlcluster", version, name, "restart"], check=True, timeout=PATIENCE)
        assert server_started_at() != before, "the server did not restart"
    wait_for(lambda: pg_fleet.unfinished(pg_fresh_dsn) == 0, "end of every run", workers)
    stop(workers)
    assert len(runs) == 80
    check(pg_fresh_dsn, tmp_path, workers, logs)
