"""Task-board benchmark: ledger appends under concurrent writers, ledger loading, lock latency.

Run it from the repository root with the project's virtualenv::

    .venv/bin/python bench/board.py [--writers N] [--deltas N] [--dir PATH] [--profile]

One run prints one table. Every figure is a median and a p90 (nearest rank) over ``n``
samples, with a floor measured in the same run beside it and the figure's multiple of
that floor:

1.  ledger appends by ``--writers`` processes at once, each moving its own tasks through
    todo -> in_progress -> blocked -> todo with ``Ledger.locked()`` + ``Ledger.append``
    (the board's writer lock, the judge, the fsynced append, the periodic snapshot), so
    no append meets a CONCURRENCY_CONFLICT: throughput per round and latency per append;
    floor: the same bytes appended by as many processes with nothing but
    ``flock`` + ``write`` + ``fdatasync``.
2.  loading a ``--deltas`` ledger of tasks living their lives (built once, every delta
    judged): a fresh ``Ledger(...).read()`` with its snapshot, and without it (a full
    fold); floor: ``json.loads`` of every line of the same file.
3.  lock acquire and release: ``Board.assign`` (enter in_progress: packet written, locks
    taken by the ledger delta) and ``Board.fail_attempt`` (leave it: locks released, the
    worklog's final entry appended); floor: one raw locked append of the same line, and
    each operation's own durable I/O done raw.

Nothing here is an assertion on timing. The exit status is 1 only if the board does not
behave (an append refused, a ledger that does not load to the head it was built to).
"""

from __future__ import annotations

import argparse
import cProfile
import fcntl
import io
import json
import math
import multiprocessing
import os
import platform
import pstats
import queue
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import attrs
from _machine import fs_type, load_average

from orchestrator import Board, BoardError, ErrorCode, Task, TaskStatus, TaskType
from orchestrator.board.ledger import (
    LEDGER_FILE,
    SNAPSHOT_EVERY,
    SNAPSHOT_FILE,
    Ledger,
    LedgerState,
    TaskRow,
    encode_delta,
)
from orchestrator.formats.board_documents import LedgerDelta

RUN_ID = "b0a4d000-0000-4000-8000-00000000b0a4"
ROUNDS = 5  # append rounds: throughput is one sample per round
TASKS_PER_WRITER = 4
LIVE_TASKS = 16  # tasks in play at once in the built ledger; the rest are done or not yet created
ATTEMPTS_TO_DONE = 33  # attempts a built task takes: create + 32 x 3 steps + 2 = 99 deltas
WITH_SNAPSHOT_SAMPLES = 5
FULL_FOLD_SAMPLES = 3
BUILD_START = datetime(2025, 1, 6, 9, 0, tzinfo=timezone.utc)


class BenchFailure(Exception):
    """The board did not behave: the benchmark's numbers would mean nothing."""


# -- small helpers -----------------------------------------------------------------------


class Series(list[float]):
    """Samples of one figure, and the unit they are in."""

    def __init__(self, unit: str, samples: Sequence[float] = ()) -> None:
        super().__init__(samples)
        self.unit = unit


def ms(ns: int) -> float:
    return ns / 1e6


def p90(samples: Sequence[float], *, rate: bool = False) -> float:
    """Nearest-rank 90th percentile on the slow side: the high end of times, the low end
    of rates (90% of the rounds were at least this fast)."""
    ordered = sorted(samples, reverse=rate)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def format_time(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def progress(text: str) -> None:
    print(f"... {text}", file=sys.stderr, flush=True)


# -- realistic tasks and deltas ------------------------------------------------------------


def bench_task(number: int) -> Task:
    """Task ``T-<number>``, locking a package and its tests of its own (no two conflict)."""
    return Task(
        task_id=f"T-{number}",
        title=f"Move module {number} of the benchmark project onto the new storage API",
        type=TaskType.PARALLELIZABLE,
        dependencies=[],
        lock_scope=[f"src/pkg{number}/", f"tests/pkg{number}/"],
        forbidden_scope=["src/shared/"],
        acceptance_criteria=["the package's tests pass", "no public name changes"],
        worklog_path=f"worklogs/T-{number}.jsonl",
        timeout_seconds=600,
        heartbeat_interval_seconds=60,
    )


def next_delta(
    task: Task, row: TaskRow | None, *, owner: str, attempts_to_done: int | None
) -> LedgerDelta | None:
    """The next step of ``task``'s life, shaped like the board's own deltas (their ids,
    reasons and ``x_`` fields): created; then todo -> in_progress -> blocked (timed out,
    locks released) -> todo (requeued) ...; on attempt ``attempts_to_done`` in_progress ->
    done. None once the task is done."""
    task_id = task.task_id
    if row is None:
        return LedgerDelta(
            task_id=task_id,
            status=TaskStatus.TODO,
            owner="",
            reason=f"created: {task.title}",
            delta_id=f"{task_id}/create",
            x_base_version=0,
            x_create=task,
        )
    attempt = row.attempts
    if row.status is TaskStatus.TODO:
        return LedgerDelta(
            task_id=task_id,
            status=TaskStatus.IN_PROGRESS,
            owner=owner,
            reason=f"assigned to {owner} (attempt {attempt + 1})",
            delta_id=f"{task_id}/{attempt + 1}/in_progress",
            x_base_version=row.version,
            x_attempt=attempt + 1,
        )
    if row.status is TaskStatus.IN_PROGRESS and attempt == attempts_to_done:
        verdict = f"verdicts/{task_id}.{attempt}.json"
        return LedgerDelta(
            task_id=task_id,
            status=TaskStatus.DONE,
            owner=row.owner,
            reason=f"verdict PASS ({verdict})",
            delta_id=f"{task_id}/{attempt}/done",
            x_base_version=row.version,
            x_verdict=verdict,
        )
    if row.status is TaskStatus.IN_PROGRESS:
        return LedgerDelta(
            task_id=task_id,
            status=TaskStatus.BLOCKED,
            owner=row.owner,
            reason=f"no heartbeat since {row.updated_at} (timeout {task.timeout_seconds} s); "
            "locks released",
            delta_id=f"{task_id}/{attempt}/blocked",
            x_base_version=row.version,
            x_code=ErrorCode.TASK_TIMEOUT,
            timed_out=True,
            last_heartbeat_at=row.updated_at,
        )
    if row.status is TaskStatus.BLOCKED:
        return LedgerDelta(
            task_id=task_id,
            status=TaskStatus.TODO,
            owner="",
            reason=f"requeued after TASK_TIMEOUT (attempt {attempt} of {attempts_to_done})",
            delta_id=f"{task_id}/{attempt}/requeue",
            x_base_version=row.version,
            retry_after_ms=30_000,
        )
    return None


def raw_locked_append(path: Path, data: bytes) -> None:
    """The least a shared durable append costs: open, flock, write, fdatasync, close."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, data)
        os.fdatasync(fd)
    finally:
        os.close(fd)  # drops the flock


def raw_atomic_write(path: Path, data: bytes) -> None:
    """Write, fsync, rename, fsync the directory: the least a durable packet write costs."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def last_line(path: Path) -> bytes:
    with open(path, "rb") as file:
        file.seek(max(0, file.seek(0, os.SEEK_END) - 65536))
        return file.read().splitlines(keepends=True)[-1]


# -- 1. appends by concurrent writers ------------------------------------------------------


@attrs.define
class WriterRound:
    """One writer's share of one round: its latencies and when it started and ended."""

    ledger_ms: list[float]
    ledger_window: tuple[int, int]
    floor_ms: list[float]
    floor_window: tuple[int, int]


def writer_process(
    board_dir: str,
    floor_file: str,
    task_numbers: list[int],
    owner: str,
    appends_per_round: int,
    barrier: Any,
    results: Any,
) -> None:
    """One writer (a process of its own): per round, its appends through the board's
    ledger, then the same bytes appended raw; the barrier starts every writer together."""
    try:
        rounds = run_writer(
            Path(board_dir), Path(floor_file), task_numbers, owner, appends_per_round, barrier
        )
        results.put((owner, rounds, None))
    except BaseException as exc:
        barrier.abort()  # the other writers must not wait for this one forever
        results.put((owner, [], f"{type(exc).__name__}: {exc}"))


def run_writer(
    board_dir: Path,
    floor_file: Path,
    task_numbers: list[int],
    owner: str,
    appends_per_round: int,
    barrier: Any,
) -> list[WriterRound]:
    board = Board(board_dir)
    ledger = board.ledger
    tasks = [bench_task(number) for number in task_numbers]
    step = 0

    def append_next() -> list[LedgerDelta]:
        nonlocal step
        task = tasks[step % len(tasks)]
        step += 1
        with ledger.locked() as state:
            delta = next_delta(task, state.rows[task.task_id], owner=owner, attempts_to_done=None)
            assert delta is not None  # with no attempts_to_done a task is never done
            return ledger.append([delta], at=board.now())

    for _ in range(len(tasks)):
        append_next()  # warm-up: the first fold of the ledger, converter hooks built
    rounds = []
    for _ in range(ROUNDS):
        barrier.wait()
        ledger_ms, appended, start = [], [], time.monotonic_ns()
        for _ in range(appends_per_round):
            before = time.perf_counter_ns()
            appended += append_next()
            ledger_ms.append(ms(time.perf_counter_ns() - before))
        ledger_window = (start, time.monotonic_ns())
        lines = [encode_delta(delta) for delta in appended]  # the bytes Ledger.append wrote
        barrier.wait()
        floor_ms, start = [], time.monotonic_ns()
        for line in lines:
            before = time.perf_counter_ns()
            raw_locked_append(floor_file, line)
            floor_ms.append(ms(time.perf_counter_ns() - before))
        rounds.append(WriterRound(ledger_ms, ledger_window, floor_ms, (start, time.monotonic_ns())))
    return rounds


def concurrent_appends(
    root: Path, writers: int, appends: int
) -> tuple[dict[str, Series], Board, int]:
    """Figures of part 1, the board the writers used, and how many deltas it holds."""
    board = Board.create(root / "writers-board", run_id=RUN_ID, objective="append benchmark")
    numbers = list(range(1, writers * TASKS_PER_WRITER + 1))
    board.create_tasks([bench_task(number) for number in numbers])
    floor_file = root / "floor-appends.ndjson"
    context = multiprocessing.get_context("spawn")  # a fresh interpreter each, on any OS
    barrier = context.Barrier(writers)
    results = context.Queue()
    per_round = max(1, appends // ROUNDS)
    processes = [
        context.Process(
            target=writer_process,
            args=(
                str(board.directory),
                str(floor_file),
                numbers[w * TASKS_PER_WRITER : (w + 1) * TASKS_PER_WRITER],
                f"agent-{w + 1}",
                per_round,
                barrier,
                results,
            ),
        )
        for w in range(writers)
    ]
    for process in processes:
        process.start()
    reports = collect(results, processes)
    errors = [f"{owner}: {error}" for owner, _, error in reports if error is not None]
    if errors:
        raise BenchFailure("a writer failed: " + "; ".join(errors))
    rounds_by_writer = [rounds for _, rounds, _ in reports]
    expected = len(numbers) * 2 + writers * ROUNDS * per_round  # creates, warm-ups, rounds
    return _append_figures(rounds_by_writer), board, expected


def collect(results: Any, processes: list[Any]) -> list[tuple[str, list[WriterRound], str | None]]:
    """Every writer's report; a writer that died without one (killed, out of memory) fails
    the run instead of leaving it waiting."""
    reports: list[tuple[str, list[WriterRound], str | None]] = []
    while len(reports) < len(processes):
        try:
            reports.append(results.get(timeout=1))
        except queue.Empty:
            if not any(process.is_alive() for process in processes):
                codes = [process.exitcode for process in processes]
                raise BenchFailure(f"a writer died without a report (exit codes {codes})") from None
    for process in processes:
        process.join()
    return reports


def _append_figures(rounds_by_writer: list[list[WriterRound]]) -> dict[str, Series]:
    figures = {
        "ledger rate": Series("deltas/s"),
        "floor rate": Series("deltas/s"),
        "ledger latency": Series("ms"),
        "floor latency": Series("ms"),
    }
    for shares in zip(*rounds_by_writer, strict=True):  # one round, every writer's share
        for kind, window, latencies in (
            ("ledger", "ledger_window", "ledger_ms"),
            ("floor", "floor_window", "floor_ms"),
        ):
            start = min(getattr(share, window)[0] for share in shares)
            end = max(getattr(share, window)[1] for share in shares)
            count = sum(len(getattr(share, latencies)) for share in shares)
            figures[f"{kind} rate"].append(count / ((end - start) / 1e9))
            for share in shares:
                figures[f"{kind} latency"] += getattr(share, latencies)
    return figures


# -- 2. loading a long ledger ----------------------------------------------------------------


@attrs.define
class BuiltLedger:
    directory: Path
    deltas: int
    tasks: int
    ledger_bytes: int
    snapshot_bytes: int
    tail: int  # lines after the snapshot: what a load with the snapshot folds


def build_ledger(directory: Path, total: int) -> BuiltLedger:
    """Write a ``total``-delta ledger of tasks living their lives, LIVE_TASKS at a time,
    and its snapshot half a snapshot interval before the end (the board writes one every
    SNAPSHOT_EVERY deltas, so a loader folds that many lines on average).

    The lines are ``encode_delta``'s, numbered and folded here by ``LedgerState.apply``
    alone; ``Ledger`` judges every one of them the board's way when it folds them for the
    snapshot and when the finished file is loaded, so the file is one the board could have
    written. Appending them one fsync at a time would take minutes, and judging them
    twice a full fold more: neither is what is measured here.
    """
    directory.mkdir(parents=True)
    state, created, cursor = LedgerState(), 0, 0
    live: list[Task] = []
    snapshot_at = max(1, total - SNAPSHOT_EVERY // 2)
    with open(directory / LEDGER_FILE, "wb") as out:
        while state.seq < total:
            if len(live) < LIVE_TASKS:
                created += 1
                task = bench_task(created)
                live.append(task)
                delta = next_delta(task, None, owner="", attempts_to_done=ATTEMPTS_TO_DONE)
            else:
                task = live[cursor % len(live)]
                cursor += 1
                row = state.rows[task.task_id]
                owner = f"agent-{cursor % 4 + 1}"
                delta = next_delta(task, row, owner=owner, attempts_to_done=ATTEMPTS_TO_DONE)
                if delta is None:
                    live.remove(task)
                    continue
            assert delta is not None
            at = format_time(BUILD_START + timedelta(milliseconds=1500 * state.seq))
            numbered = attrs.evolve(delta, x_seq=state.seq + 1, x_at=at)
            state.apply(numbered)
            out.write(encode_delta(numbered))
            if state.seq == snapshot_at:
                out.flush()
                snapshotting = Ledger(directory)
                snapshotting.read()  # a full fold, every line judged
                snapshotting.write_snapshot()
    loaded = Ledger(directory).read()  # the lines after the snapshot judged
    if loaded.seq != total:
        raise BenchFailure(f"the built ledger loads to x_seq {loaded.seq}, not {total}")
    return BuiltLedger(
        directory=directory,
        deltas=total,
        tasks=created,
        ledger_bytes=(directory / LEDGER_FILE).stat().st_size,
        snapshot_bytes=(directory / SNAPSHOT_FILE).stat().st_size,
        tail=total - snapshot_at,
    )


def load_figures(built: BuiltLedger) -> dict[str, Series]:
    """Load the ledger with its snapshot, without it, and parse it raw, interleaved so that
    a change of machine load touches all three."""
    figures = {name: Series("ms") for name in ("with snapshot", "full fold", "json floor")}
    snapshot = built.directory / SNAPSHOT_FILE
    aside = built.directory / "snapshot.aside"
    for sample in range(max(WITH_SNAPSHOT_SAMPLES, FULL_FOLD_SAMPLES)):
        if sample < WITH_SNAPSHOT_SAMPLES:
            figures["with snapshot"].append(timed_load(built))
            figures["json floor"].append(timed_json_parse(built.directory / LEDGER_FILE))
        if sample < FULL_FOLD_SAMPLES:
            os.replace(snapshot, aside)
            try:
                figures["full fold"].append(timed_load(built))
            finally:
                os.replace(aside, snapshot)
    return figures


def timed_load(built: BuiltLedger) -> float:
    start = time.perf_counter_ns()
    state = Ledger(built.directory).read()
    elapsed = ms(time.perf_counter_ns() - start)
    if state.seq != built.deltas or len(state.rows) != built.tasks:
        raise BenchFailure(f"the ledger loaded to x_seq {state.seq}, not {built.deltas}")
    return elapsed


def timed_json_parse(path: Path) -> float:
    start = time.perf_counter_ns()
    for line in path.read_bytes().splitlines():
        json.loads(line)
    return ms(time.perf_counter_ns() - start)


# -- 3. lock acquire and release -------------------------------------------------------------


def lock_cycles(board: Board, cycles: int) -> dict[str, Series]:
    """Assign one task (locks taken) and release it (``fail_attempt``: locks released), on
    the writers' board as they left it; after each pair, the floors of the same I/O."""
    number = 1_000_000  # a task no writer touched
    task = bench_task(number)
    board.create_tasks([task])
    ledger_path = board.directory / LEDGER_FILE
    floor_dir = board.directory.parent / "floor-locks"
    floor_dir.mkdir()
    figures = {
        name: Series("ms")
        for name in ("assign", "release", "raw append", "assign floor", "release floor")
    }
    warm_up = 5
    for cycle in range(warm_up + cycles):
        start = time.perf_counter_ns()
        board.assign([task.task_id], owner="agent-locks")
        assigned = time.perf_counter_ns()
        assign_line = last_line(ledger_path)  # outside the timing: nobody else writes now
        attempt = board.state().row(task.task_id).attempts
        release_start = time.perf_counter_ns()
        released = board.fail_attempt(
            task.task_id, attempt, code=ErrorCode.TASK_TIMEOUT, reason="benchmark release"
        )
        end = time.perf_counter_ns()
        if released is None:
            raise BenchFailure(f"fail_attempt did not release {task.task_id} (attempt {attempt})")
        if cycle < warm_up:
            continue
        figures["assign"].append(ms(assigned - start))
        figures["release"].append(ms(end - release_start))
        timed_floors(
            figures,
            floor_dir,
            packet=board.packet_path(task.task_id, attempt).read_bytes(),
            assign_line=assign_line,
            release_line=last_line(ledger_path),
            worklog_line=last_line(board.worklog_path(task)),
        )
    return figures


def timed_floors(
    figures: dict[str, Series],
    floor_dir: Path,
    *,
    packet: bytes,
    assign_line: bytes,
    release_line: bytes,
    worklog_line: bytes,
) -> None:
    ledger, worklog = floor_dir / LEDGER_FILE, floor_dir / "worklog.jsonl"
    start = time.perf_counter_ns()
    raw_locked_append(ledger, release_line)
    figures["raw append"].append(ms(time.perf_counter_ns() - start))
    start = time.perf_counter_ns()
    raw_atomic_write(floor_dir / "packet.json", packet)
    raw_locked_append(ledger, assign_line)
    figures["assign floor"].append(ms(time.perf_counter_ns() - start))
    start = time.perf_counter_ns()
    raw_locked_append(ledger, release_line)
    raw_locked_append(worklog, worklog_line)
    figures["release floor"].append(ms(time.perf_counter_ns() - start))


# -- profiles (--profile) --------------------------------------------------------------------


def profiled(title: str, action: Callable[[], object]) -> str:
    """cProfile of ``action``: the top 15 functions by cumulative time."""
    profiler = cProfile.Profile()
    profiler.enable()
    action()
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(15)
    return f"cProfile of {title}, top 15 by cumulative time:\n{out.getvalue()}"


def profiles(built: BuiltLedger, board: Board) -> list[str]:
    snapshot = built.directory / SNAPSHOT_FILE
    aside = built.directory / "snapshot.aside"
    os.replace(snapshot, aside)
    try:
        fold = profiled(
            f"one load of the {built.deltas}-delta ledger without its snapshot (full fold)",
            lambda: Ledger(built.directory).read(),
        )
    finally:
        os.replace(aside, snapshot)
    load = profiled(
        f"one load with the snapshot ({built.tail} lines folded after it)",
        lambda: Ledger(built.directory).read(),
    )
    task = bench_task(2_000_000)
    board.create_tasks([task])

    def appends() -> None:
        for _ in range(200):
            with board.ledger.locked() as state:
                row = state.rows[task.task_id]
                delta = next_delta(task, row, owner="agent-profile", attempts_to_done=None)
                assert delta is not None
                board.ledger.append([delta], at=board.now())

    append = profiled("200 appends by one writer through Ledger.locked + append", appends)
    return [fold, load, append]


# -- report ----------------------------------------------------------------------------------


def row(label: str, samples: Series, floor: Series | None = None) -> str:
    rate = samples.unit.endswith("/s")
    median = statistics.median(samples)
    high = p90(samples, rate=rate)
    multiple = ""
    if floor is not None:
        floor_median = statistics.median(floor)
        times = floor_median / median if rate else median / floor_median
        multiple = f"x{times:.1f}"
    return (
        f"{label:<72} {len(samples):>5} {median:>10.2f} {high:>10.2f} {samples.unit:<9}"
        f"{multiple:>7}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--writers", type=int, default=4, help="writer processes (4)")
    parser.add_argument(
        "--deltas", type=int, default=100_000, help="deltas in the ledger that is loaded (100000)"
    )
    parser.add_argument(
        "--appends", type=int, default=500, help="appends per writer, in 5 rounds (500)"
    )
    parser.add_argument("--cycles", type=int, default=200, help="assign/release cycles (200)")
    parser.add_argument(
        "--dir", type=Path, default=None, help="where the temporary boards go (TMPDIR)"
    )
    parser.add_argument(
        "--profile", action="store_true", help="also print cProfiles of a load and of appends"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args(argv)
    if min(args.writers, args.deltas, args.appends, args.cycles) < 1:
        parser.error("--writers, --deltas, --appends and --cycles must be >= 1")

    root = Path(tempfile.mkdtemp(prefix="board-bench-", dir=args.dir))
    try:
        return run(args, root)
    except (BenchFailure, BoardError) as exc:
        print(f"board bench: the board failed: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"(kept {root})", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)


def run(args: argparse.Namespace, root: Path) -> int:
    load_before = load_average()
    progress(f"1. {args.writers} writers, {args.appends} appends each, and the raw floor")
    appends, board, expected = concurrent_appends(root, args.writers, args.appends)
    head = Ledger(board.directory).read().seq
    if head != expected:
        raise BenchFailure(f"the writers' ledger holds {head} deltas, {expected} expected")
    progress(f"2. building a {args.deltas}-delta ledger")
    start = time.perf_counter()
    built = build_ledger(root / "long-ledger", args.deltas)
    build_seconds = time.perf_counter() - start
    progress("2. loading it")
    loads = load_figures(built)
    progress(f"3. {args.cycles} assign/release cycles")
    locks = lock_cycles(board, args.cycles)
    load_after = load_average()

    cpus = os.cpu_count() or 1
    print()
    print(
        f"board bench: Python {platform.python_version()} ({sys.executable}); {cpus} CPUs; "
        f"1-min load avg {load_before:.2f} before, {load_after:.2f} after"
    )
    if max(load_before, load_after) > 0.5 * cpus:
        print(
            "NOTE: the machine was busy with other work during this run: every figure is "
            "inflated; run again when it is idle"
        )
    print(f"boards under {root} ({fs_type(root)})")
    print(
        f"1: {args.writers} writer processes x {TASKS_PER_WRITER} tasks of their own, "
        f"{ROUNDS} rounds of {max(1, args.appends // ROUNDS)} appends each; the writers' "
        f"ledger ended at {head} deltas"
    )
    mib = 1024 * 1024
    print(
        f"2: ledger of {built.deltas} deltas, {built.tasks} tasks ({LIVE_TASKS} live at once, "
        f"{ATTEMPTS_TO_DONE} attempts each), {built.ledger_bytes / mib:.1f} MiB "
        f"({built.ledger_bytes / built.deltas:.0f} B/delta); snapshot "
        f"{built.snapshot_bytes / mib:.2f} MiB, {built.tail} lines after it; built in "
        f"{build_seconds:.1f} s"
    )
    print(f"3: one task assigned and released on the writers' board ({head + 1} deltas and up)")
    print()
    header = f"{'figure':<72} {'n':>5} {'median':>10} {'p90':>10} {'unit':<9}{'/floor':>7}"
    print(header)
    print("-" * len(header))
    w = args.writers
    print(
        row(
            f"1a ledger appends, {w} writers (locked+append, fsync): rate",
            appends["ledger rate"],
            appends["floor rate"],
        )
    )
    print(
        row(
            f"1b floor: raw flock+write+fdatasync, same bytes, {w} processes: rate",
            appends["floor rate"],
        )
    )
    print(
        row(
            "1c ledger append latency (lock wait, fold, judge, append, fsync)",
            appends["ledger latency"],
            appends["floor latency"],
        )
    )
    print(row("1d floor: raw locked append latency", appends["floor latency"]))
    print(
        row(
            "2a load with the snapshot: fresh Ledger(...).read()",
            loads["with snapshot"],
            loads["json floor"],
        )
    )
    print(
        row(
            "2b load without it (snapshot removed): full fold",
            loads["full fold"],
            loads["json floor"],
        )
    )
    print(row("2c floor: json.loads of every line of the same file", loads["json floor"]))
    print(
        row(
            "3a assign: enter in_progress (packet written, locks taken)",
            locks["assign"],
            locks["raw append"],
        )
    )
    print(
        row(
            "3b release: fail_attempt (locks released, worklog entry)",
            locks["release"],
            locks["raw append"],
        )
    )
    print(row("3c floor: one raw locked append of the same ledger line", locks["raw append"]))
    print(row("3d floor: assign's durable I/O raw (packet write + append)", locks["assign floor"]))
    print(row("3e floor: release's durable I/O raw (two appends)", locks["release floor"]))
    print()
    print(
        "rates are per round (deltas appended by all writers / the round's wall time); their "
        "p90 is the slow side: 90% of the rounds were at least that fast. /floor: how many "
        "times the floor (1a, 1c against 1b, 1d; 2a, 2b against 2c; 3a, 3b against 3c)"
    )
    if args.profile:
        for text in profiles(built, board):
            print()
            print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
