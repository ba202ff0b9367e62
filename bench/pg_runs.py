"""PostgreSQL runs benchmark: runs advanced per second by 1, 2 and 4 workers, and the
single-run cycle of a host, each beside its floor measured in the same run.

Run it from the repository root with the project's virtualenv (PostgreSQL must answer)::

    .venv/bin/python bench/pg_runs.py [--server DSN] [--runs N] [--workers 1,2,4] [--cycles N]

1.  Throughput: ``--runs`` runs of ``Brief`` (``bench/pg_runs_workflow.py``: three phases,
    each a step and an ask answered in-process by ``--agent subprocess:cat``) are queued in
    one transaction while K ``orchestrate worker`` processes wait on LISTEN; the figure is
    runs completed per second, from the commit to the last run's end. Floor: the same
    number of runs written as bare commits by K connections at once: one run of the same
    workflow is first advanced in this process with its connection recorded, and each
    of its write transactions (one per checkpoint: the run's row, its requests, its events
    and files; then the end) is committed again per run with the same statements and the
    same bytes, and no engine, no worker, no agent.
2.  The single-run cycle a host sees, each command a new process: ``orchestrate run``
    of ``Single`` (it pauses, exit 42), ``orchestrate respond``, ``orchestrate resume``
    to the end; on a PostgreSQL store and, interleaved, on files (the floor beside it).
    Median and p90 (nearest rank) of ``--cycles`` samples, wall-clock milliseconds.

Each store lives in a schema of its own (``bench_pg_...``), dropped at the end; the work
directories go under ``--dir``. Nothing is an assertion on timing: the exit status is 1
only if a run does not behave (a worker exits with an error, a run does not complete, a
command exits with another code than the cycle's).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import platform
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from _machine import load_average

HERE = Path(__file__).resolve().parent
WORKFLOW_FILE = HERE / "pg_runs_workflow.py"
BRIEF = f"{WORKFLOW_FILE}:Brief"
SINGLE = f"{WORKFLOW_FILE}:Single"
AGENT = "subprocess:cat"
ANSWER = "One plain line that sums the note up."
PATIENCE = 600.0  # seconds before a bench that makes no progress gives up


class BenchFailure(Exception):
    """The workflow or a worker did not behave: the figures would mean nothing."""


def with_schema(server: str, schema: str) -> str:
    joiner = "&" if "?" in server else "?"
    return f"{server}{joiner}options={quote(f'-csearch_path={schema}')}"


class Schemas:
    """Stores of this run, each a schema of its own, all dropped at the end."""

    def __init__(self, server: str, prefix: str = "bench_pg_") -> None:
        self.server = server
        self.prefix = prefix
        self.made: list[str] = []

    def new(self) -> str:
        from orchestrator.adapters.postgres.migrations import upgrade

        schema = f"{self.prefix}{secrets.token_hex(5)}"
        self.made.append(schema)
        dsn = with_schema(self.server, schema)
        upgrade(dsn)
        return dsn

    def drop(self) -> None:
        import psycopg

        with psycopg.connect(self.server, autocommit=True) as conn:
            for schema in self.made:
                conn.execute(f'drop schema if exists "{schema}" cascade')


def queue_all(dsn: str, count: int, workdir: Path) -> list[str]:
    """Queue ``count`` Brief runs in one transaction (workers wake at its commit)."""
    from orchestrator.adapters.postgres.store import PostgresStore

    ids = [str(uuid.uuid4()) for _ in range(count)]
    with PostgresStore(dsn, migrate=False) as store, store.conn.transaction():
        for run_id in ids:
            store.queue_run(
                run_id=run_id,
                workflow_name="bench-brief",
                workflow_ref=BRIEF,
                start_args={
                    "inputs": {"tag": run_id},
                    "output_path": None,
                    "workdir": str(workdir),
                },
            )
    return ids


def completed(conn: Any) -> int:
    return int(conn.execute("select count(*) from runs where status = 'completed'").fetchone()[0])


# -- 1. throughput -------------------------------------------------------------------------


def workers_rate(dsn: str, workers: int, runs: int, workdir: Path) -> float:
    """Runs completed per second by ``workers`` worker processes, from the queue's commit."""
    import psycopg

    logs = [workdir / f"worker-{workers}-{n}.err" for n in range(workers)]
    command = [sys.executable, "-m", "orchestrator", "worker", "--store", dsn, "--agent", AGENT]
    processes = []
    for log in logs:
        with log.open("wb") as sink:
            processes.append(
                subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink)
            )
    try:
        wait_until(lambda: all(b"serving" in log.read_bytes() for log in logs), processes, logs)
        time.sleep(0.5)  # each slot connected and listening
        with psycopg.connect(dsn, autocommit=True) as conn:
            queue_all(dsn, runs, workdir)
            started = time.perf_counter()
            wait_until(lambda: completed(conn) >= runs, processes, logs, poll=0.005)
            elapsed = time.perf_counter() - started
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        codes = [process.wait(timeout=60) for process in processes]
    if any(codes):
        raise BenchFailure(f"a worker exited {codes}: {logs[0].read_text()[-2000:]}")
    for log in logs:
        log.unlink()
    return runs / elapsed


def wait_until(
    condition: Any,
    processes: Sequence[subprocess.Popen[bytes]],
    logs: list[Path],
    poll: float = 0.02,
) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        for process, log in zip(processes, logs, strict=True):
            if process.poll() is not None:
                raise BenchFailure(
                    f"a worker exited {process.returncode}: {log.read_text()[-2000:]}"
                )
        if time.monotonic() > deadline:
            raise BenchFailure(f"no progress in {PATIENCE:.0f} s")
        time.sleep(poll)


class Recording:
    """A connection that notes every write it makes, grouped by transaction (a statement
    outside a transaction block is a transaction of its own, as in autocommit)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.groups: list[list[tuple[str, Any, bool]]] = []
        self._open: list[tuple[str, Any, bool]] | None = None

    @property
    def closed(self) -> bool:
        return bool(self.conn.closed)

    @property
    def broken(self) -> bool:
        return bool(self.conn.broken)

    def execute(self, sql: str, params: Any = None) -> Any:
        self.note(sql, params, many=False)
        return self.conn.execute(sql, params)

    def cursor(self) -> RecordingCursor:
        return RecordingCursor(self, self.conn.cursor())

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        outer = self._open is None
        if outer:
            self._open = []
        try:
            with self.conn.transaction():
                yield
        finally:
            if outer:
                group, self._open = self._open, None
                if group:
                    self.groups.append(group)

    def note(self, sql: str, params: Any, *, many: bool) -> None:
        if not sql.lstrip().lower().startswith(("insert", "update", "delete")):
            return
        entry = (sql, params, many)
        if self._open is not None:
            self._open.append(entry)
        else:
            self.groups.append([entry])


class RecordingCursor:
    def __init__(self, recording: Recording, cursor: Any) -> None:
        self.recording = recording
        self.cursor = cursor

    def __enter__(self) -> RecordingCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cursor.close()

    def executemany(self, sql: str, rows: Any) -> None:
        rows = list(rows)
        self.recording.note(sql, rows, many=True)
        self.cursor.executemany(sql, rows)


def record_one_run(dsn: str, workdir: Path) -> tuple[str, list[list[tuple[str, Any, bool]]]]:
    """Advance one Brief run in this process, as a worker does; its write transactions."""
    from orchestrator.adapters.postgres.bridge import PostgresBridge
    from orchestrator.adapters.postgres.store import PostgresStore
    from orchestrator.adapters.subprocess_agent import SubprocessInvoker
    from orchestrator.engine.engine import Engine
    from orchestrator.engine.loader import load_workflow

    (run_id,) = queue_all(dsn, 1, workdir)
    with PostgresStore(dsn, migrate=False) as store:
        recording = Recording(store.conn)
        bridge = PostgresBridge(
            recording, run_id=run_id, store_name=store.name, schema=store.schema
        )
        engine = Engine(load_workflow(BRIEF), bridge=bridge, invoker=SubprocessInvoker("cat"))
        engine.recorder.worker = f"{platform.node()}:{os.getpid()}"
        outcome = engine.start(
            workflow_ref=BRIEF, workdir=workdir, inputs={"tag": run_id}, run_id=run_id
        )
        if outcome.status != "completed":
            raise BenchFailure(f"the recorded run ended {outcome.status}: {outcome.message}")
    return run_id, recording.groups


def replay(
    dsn: str, recorded_id: str, groups: list[list[tuple[str, Any, bool]]], ids: list[str]
) -> None:
    """Commit ``groups`` once per run of ``ids``, the recorded run's id swapped for each."""
    import psycopg

    def swap(params: Any, run_id: str) -> Any:
        return tuple(run_id if value == recorded_id else value for value in params)

    with psycopg.connect(dsn, autocommit=True) as conn:
        for run_id in ids:
            for group in groups:
                with conn.transaction():
                    for sql, params, many in group:
                        if many:
                            with conn.cursor() as cursor:
                                cursor.executemany(sql, [swap(row, run_id) for row in params])
                        else:
                            conn.execute(sql, swap(params or (), run_id))


def floor_rate(dsn: str, connections: int, runs: int, workdir: Path, recorded: Any) -> float:
    """Runs per second as bare commits of the recorded transactions on ``connections``."""
    recorded_id, groups = recorded
    ids = queue_all(dsn, runs, workdir)
    shares = [ids[n::connections] for n in range(connections)]
    failures: list[BaseException] = []

    def one(share: list[str]) -> None:
        try:
            replay(dsn, recorded_id, groups, share)
        except BaseException as exc:  # reported below: a floor that failed is no floor
            failures.append(exc)

    threads = [threading.Thread(target=one, args=(share,)) for share in shares]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if failures:
        raise BenchFailure(f"the floor's commits failed: {failures[0]}")
    return runs / elapsed


# -- 2. the single-run cycle ---------------------------------------------------------------


def command(*args: str, cwd: Path, expect: int) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=PATIENCE,
    )
    if result.returncode != expect:
        said = result.stderr[-1500:]
        raise BenchFailure(
            f"orchestrate {args[0]} exited {result.returncode}, not {expect}: {said}"
        )
    return result.stdout.strip()


def pg_cycle(dsn: str, workdir: Path) -> float:
    started = time.perf_counter()
    run_id = command("run", SINGLE, "--store", dsn, cwd=workdir, expect=42)
    command("respond", "--store", dsn, "--run", run_id, "--text", ANSWER, cwd=workdir, expect=0)
    command("resume", "--store", dsn, "--run", run_id, cwd=workdir, expect=0)
    return (time.perf_counter() - started) * 1000


def file_cycle(root: Path, number: int) -> float:
    workdir = root / f"cycle-{number}"
    workdir.mkdir()
    started = time.perf_counter()
    command("run", SINGLE, "--workdir", str(workdir), cwd=workdir, expect=42)
    command("respond", "--workdir", str(workdir), "--text", ANSWER, cwd=workdir, expect=0)
    command("resume", "--workdir", str(workdir), cwd=workdir, expect=0)
    elapsed = (time.perf_counter() - started) * 1000
    shutil.rmtree(workdir)
    return elapsed


def p90(samples: Sequence[float]) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


# -- the table -----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--server",
        default=os.environ.get("ORCHESTRATOR_TEST_PG") or "postgresql:///test",
        help="the PostgreSQL server (default: $ORCHESTRATOR_TEST_PG or postgresql:///test)",
    )
    parser.add_argument("--runs", type=int, default=200, help="runs per throughput figure")
    parser.add_argument("--workers", default="1,2,4", help="worker counts, comma-separated")
    parser.add_argument("--cycles", type=int, default=10, help="single-run cycles per store")
    parser.add_argument("--dir", type=Path, default=None, help="where work directories go")
    parser.add_argument(
        "--schema-prefix",
        default="bench_pg_",
        help="how the schemas of its stores are named (lower-case letters, digits, _)",
    )
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.workers.split(",") if n.strip()]
    if args.runs < 1 or args.cycles < 1 or not counts or min(counts) < 1:
        parser.error("--runs, --cycles and every --workers count must be at least 1")
    root = Path(tempfile.mkdtemp(prefix="pg-runs-bench-", dir=args.dir))
    schemas = Schemas(args.server, args.schema_prefix)
    try:
        return run(args, counts, root, schemas)
    except BenchFailure as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        return 1
    finally:
        schemas.drop()
        shutil.rmtree(root, ignore_errors=True)


def run(args: argparse.Namespace, counts: list[int], root: Path, schemas: Schemas) -> int:
    import psycopg

    with psycopg.connect(args.server) as conn:
        version = conn.execute("show server_version").fetchone()[0]
        sync = conn.execute("show synchronous_commit").fetchone()[0]
    before = load_average()
    print(
        f"== PostgreSQL runs: {platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} cores, PostgreSQL {version} (synchronous_commit {sync}), "
        f"load {before:.2f}"
    )
    recorded = record_one_run(schemas.new(), root)
    commits = len(recorded[1])
    print(
        f"1. runs advanced per second: {args.runs} runs of 3 phases (a step and an in-process "
        f"ask each, --agent {AGENT}); floor: {commits} bare commits per run of the same rows"
    )
    for workers in counts:
        rate = workers_rate(schemas.new(), workers, args.runs, root)
        floor = floor_rate(schemas.new(), workers, args.runs, root, recorded)
        print(
            f"   {workers} worker(s): {rate:8.1f} runs/s   floor, {workers} connection(s): "
            f"{floor:8.1f} runs/s   ({floor / rate:.1f}x the floor's time)"
        )
    dsn = schemas.new()
    pg: list[float] = []
    files: list[float] = []
    for number in range(args.cycles):
        pg.append(pg_cycle(dsn, root))
        files.append(file_cycle(root, number))
    print(
        f"2. single-run cycle (run, pause, respond, resume to the end; 3 processes), "
        f"n={args.cycles}, ms"
    )
    print(
        f"   PostgreSQL store: med {statistics.median(pg):7.1f}  p90 {p90(pg):7.1f}   "
        f"floor, file store: med {statistics.median(files):7.1f}  p90 {p90(files):7.1f}   "
        f"({statistics.median(pg) / statistics.median(files):.2f}x)"
    )
    print(f"load average after: {load_average():.2f} (before {before:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
