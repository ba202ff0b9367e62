"""Task-board benchmark on PostgreSQL: board deltas per second with concurrent writers,
beside the floor measured in the same run.

Run it from the repository root with the project's virtualenv::

    .venv/bin/python bench/board_pg.py [--store DSN] [--writers 4] [--deltas 300] [--rounds 3]

The store defaults to ``$ORCHESTRATOR_TEST_PG`` or the local socket's database ``test``;
the benchmark works in a schema of its own and drops it at the end.

Each round, ``--writers`` processes start together and each appends ``--deltas`` deltas
to one board, one delta per transaction, as the board does: ``Ledger.locked()`` (a
transaction holding the board's advisory lock), the rows appended since the writer's
last read folded, the delta judged (D1-D5, ``x_base_version``), the row inserted,
commit. Each writer moves its own tasks between todo and blocked, so no append meets a
CONCURRENCY_CONFLICT and every one is a real change.

The floor: the same rows (the same documents, the same numbers), inserted by as many
processes into another board, each row its own bare ``INSERT`` + ``COMMIT`` with no lock
and no read. The figure's multiple of the floor is what the board's lock, fold and judge
cost over the database's own commit.

Nothing here is an assertion on timing. The exit status is 1 only if the board does not
behave (an append refused, a ledger that does not read back to the head it was built to).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import secrets
import statistics
import sys
import time
from typing import Any
from urllib.parse import quote

DEFAULT_STORE = "postgresql:///test"
TASKS_PER_WRITER = 8
AT = "2025-11-18T10:30:00.000Z"


def with_schema(dsn: str, schema: str) -> str:
    joiner = "&" if "?" in dsn else "?"
    return f"{dsn}{joiner}options={quote(f'-csearch_path={schema}')}"


def bench_task(task_id: str) -> Any:
    from orchestrator.formats.board_documents import Task, TaskType

    return Task(
        task_id=task_id,
        title=f"bench task {task_id}",
        type=TaskType.PARALLELIZABLE,
        dependencies=[],
        lock_scope=[f"src/{task_id}.py"],
        forbidden_scope=[],
        acceptance_criteria=["it works"],
        worklog_path=f"worklogs/{task_id}.jsonl",
        timeout_seconds=600,
        heartbeat_interval_seconds=60,
    )


def task_ids(writer: int) -> list[str]:
    return [f"T-{writer * TASKS_PER_WRITER + k + 1}" for k in range(TASKS_PER_WRITER)]


def board_writer(dsn: str, board_id: str, writer: int, deltas: int, start: Any, out: Any) -> None:
    """Append ``deltas`` deltas, one per transaction; put (seconds, latencies) on ``out``."""
    from orchestrator.adapters.postgres.task_board import PostgresBoardStore
    from orchestrator.board.ledger import Ledger
    from orchestrator.formats.board_documents import LedgerDelta, TaskStatus

    mine = task_ids(writer)
    with PostgresBoardStore(dsn, board_id, migrate=False) as store:
        ledger = Ledger(store)
        ledger.read()
        latencies = []
        start.wait()
        began = time.perf_counter()
        for number in range(deltas):
            task_id = mine[number % len(mine)]
            moment = time.perf_counter()
            with ledger.locked() as state:
                row = state.rows[task_id]
                status = TaskStatus.BLOCKED if row.status is TaskStatus.TODO else TaskStatus.TODO
                applied = ledger.append(
                    [
                        LedgerDelta(
                            task_id=task_id,
                            status=status,
                            owner=f"writer-{writer}",
                            reason=f"bench move {number}",
                            delta_id=f"{task_id}/v{row.version}/{status.value}",
                            x_base_version=row.version,
                        )
                    ],
                    at=AT,
                )
            if len(applied) != 1:
                raise SystemExit(f"writer {writer}: delta {number} was not appended")
            latencies.append(time.perf_counter() - moment)
        out.put((time.perf_counter() - began, latencies))


def floor_writer(dsn: str, rows: list[tuple[Any, ...]], start: Any, out: Any) -> None:
    """Insert ``rows``, each its own bare INSERT + COMMIT; put (seconds, latencies)."""
    from orchestrator.adapters.postgres.connection import connect

    conn = connect(dsn, autocommit=True)
    try:
        latencies = []
        start.wait()
        began = time.perf_counter()
        for row in rows:
            moment = time.perf_counter()
            conn.execute(
                "insert into board_ledger (board_id, seq, delta_id, task_id, document) "
                "values (%s, %s, %s, %s, %s)",
                row,
            )
            latencies.append(time.perf_counter() - moment)
        out.put((time.perf_counter() - began, latencies))
    finally:
        conn.close()


def concurrently(target: Any, argument_lists: list[tuple[Any, ...]]) -> tuple[float, list[float]]:
    """Run one process per argument list, started together; (wall seconds, latencies)."""
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(len(argument_lists) + 1)
    out = context.Queue()
    processes = [
        context.Process(target=target, args=(*arguments, start, out))
        for arguments in argument_lists
    ]
    for process in processes:
        process.start()
    start.wait()
    began = time.perf_counter()
    results = [out.get(timeout=600) for _ in processes]
    wall = time.perf_counter() - began
    for process in processes:
        process.join(timeout=60)
        if process.exitcode != 0:
            raise SystemExit(f"a writer failed (exit {process.exitcode})")
    return wall, [latency for _, latencies in results for latency in latencies]


def new_board(dsn: str, board_id: str, writers: int) -> None:
    from orchestrator.adapters.postgres.task_board import PostgresBoardStore
    from orchestrator.board.board import Board

    with PostgresBoardStore(dsn, board_id) as store:
        board = Board.create(
            run_id="3f56dc4d-35cf-4f97-925c-0b04a6fe8bf4", objective="bench", store=store
        )
        board.create_tasks([bench_task(t) for w in range(writers) for t in task_ids(w)])


def rows_of(dsn: str, board_id: str, floor_id: str, writers: int) -> list[list[tuple[Any, ...]]]:
    """The board's rows after its creates, split by the writer that appended each, as the
    floor inserts them under ``floor_id``."""
    from orchestrator.adapters.postgres.connection import connect

    owner = {t: w for w in range(writers) for t in task_ids(w)}
    split: list[list[tuple[Any, ...]]] = [[] for _ in range(writers)]
    with connect(dsn) as conn:
        found = conn.execute(
            "select seq, delta_id, task_id, document from board_ledger "
            "where board_id = %s and delta_id not like %s order by seq",
            (board_id, "%/create"),
        ).fetchall()
    for seq, delta_id, task_id, document in found:
        split[owner[task_id]].append((floor_id, seq, delta_id, task_id, bytes(document)))
    return split


def check_head(dsn: str, board_id: str, head: int) -> None:
    from orchestrator.adapters.postgres.task_board import PostgresBoardStore
    from orchestrator.board.ledger import Ledger

    with PostgresBoardStore(dsn, board_id, migrate=False) as store:
        seq = Ledger(store).read().seq
    if seq != head:
        raise SystemExit(f"the board reads back to head {seq}, not {head}")


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, int(0.9 * len(ordered) + 0.5) - 1)] if ordered else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--store",
        default=os.environ.get("ORCHESTRATOR_TEST_PG") or DEFAULT_STORE,
        help="the PostgreSQL server (default: $ORCHESTRATOR_TEST_PG or postgresql:///test)",
    )
    parser.add_argument("--writers", type=int, default=4, help="writer processes (default 4)")
    parser.add_argument("--deltas", type=int, default=300, help="deltas per writer per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    parser.add_argument(
        "--schema-prefix",
        default="bench_board_",
        help="how its schema is named (lower-case letters, digits, _)",
    )
    args = parser.parse_args(argv)

    from orchestrator.adapters.postgres.connection import connect
    from orchestrator.adapters.postgres.migrations import upgrade

    schema = f"{args.schema_prefix}{secrets.token_hex(4)}"
    dsn = with_schema(args.store, schema)
    upgrade(dsn)
    try:
        board_rates, floor_rates, board_lat, floor_lat = [], [], [], []
        for number in range(args.rounds):
            board_id, floor_id = f"bench-{number}", f"floor-{number}"
            new_board(dsn, board_id, args.writers)
            head = args.writers * TASKS_PER_WRITER
            wall, latencies = concurrently(
                board_writer,
                [(dsn, board_id, w, args.deltas) for w in range(args.writers)],
            )
            total = args.writers * args.deltas
            check_head(dsn, board_id, head + total)
            board_rates.append(total / wall)
            board_lat += latencies
            split = rows_of(dsn, board_id, floor_id, args.writers)
            wall, latencies = concurrently(floor_writer, [(dsn, rows) for rows in split])
            floor_rates.append(sum(map(len, split)) / wall)
            floor_lat += latencies
            print(
                f"... round {number + 1}: board {board_rates[-1]:.0f}/s, floor "
                f"{floor_rates[-1]:.0f}/s",
                file=sys.stderr,
                flush=True,
            )
    finally:
        with connect(args.store, autocommit=True) as conn:
            conn.execute(f'drop schema if exists "{schema}" cascade')

    with connect(args.store, autocommit=True) as conn:
        version = conn.execute("show server_version").fetchone()
    print(
        f"board deltas on PostgreSQL {version[0] if version else '?'}, {args.writers} writer "
        f"processes x {args.deltas} deltas, {args.rounds} rounds; "
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs"
    )
    header = f"{'figure':<58} {'median':>10} {'p90':>10}  {'x floor':>8}"
    print(header)
    print("-" * len(header))
    rate, floor = median(board_rates), median(floor_rates)
    print(
        f"{f'1a board deltas/s, {args.writers} writers (lock+fold+judge+insert)':<58} "
        f"{rate:>10.0f} {min(board_rates):>10.0f}  {floor / rate:>7.1f}x"
    )
    print(
        f"{f'1b floor: bare INSERT+COMMIT of the same rows, {args.writers} writers':<58} "
        f"{floor:>10.0f} {min(floor_rates):>10.0f}"
    )
    print(
        f"{'1c board append latency, ms':<58} {median(board_lat) * 1000:>10.2f} "
        f"{p90(board_lat) * 1000:>10.2f}  {median(board_lat) / median(floor_lat):>7.1f}x"
    )
    print(
        f"{'1d floor: bare INSERT+COMMIT latency, ms':<58} {median(floor_lat) * 1000:>10.2f} "
        f"{p90(floor_lat) * 1000:>10.2f}"
    )
    print("(rates: the p90 column is the slowest round; x floor: how many times slower)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
