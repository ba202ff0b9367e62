"""The LangGraph peer's figures, measured as ``bench/resume_cycle.py`` measures ours.

P1  in-process: one ``graph.invoke(Command(resume=ANSWER), config)`` from one interrupt to
    the next, the same compiled graph and ``SqliteSaver`` for the whole run (as line 1 of
    ours keeps one ``Engine``); wall time and this process's CPU time.
P2  cross-process: the host writes the answer to a file, then a fresh ``python
    langgraph_resume.py resume`` imports LangGraph, opens the saver, compiles the graph and
    resumes once until the next interrupt (exit 42), as line 2 of ours; the child's CPU.
P3  floor: a fresh process that only imports what P2 imports from LangGraph; one sample
    after each of P2's, so that both see the same machine load.

Durability as shipped: the default ``durability="async"`` (``invoke`` returns only after
the background checkpoint writes have committed) and ``SqliteSaver.from_conn_string``'s
connection, whose journal mode and ``synchronous`` level are read back and printed.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _machine import Series
from langgraph.types import Command

from peers.langgraph_workflow import (
    ANSWER,
    ANSWER_FILE,
    EXIT_PAUSED,
    THREAD,
    open_graph,
    pending_prompt,
    phase_name,
    phase_prompt,
    thread_config,
)

CHILD = Path(__file__).with_name("langgraph_resume.py")
PACKAGES = ("langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite")
SYNCHRONOUS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
IMPORTS = "import langgraph.graph, langgraph.types, langgraph.checkpoint.sqlite"


class PeerFailure(Exception):
    """The peer's workflow did not behave: its numbers would mean nothing."""


@dataclass(frozen=True)
class Figures:
    versions: str
    storage: str
    commits_per_cycle: int
    load: tuple[float, float]
    in_process: Series
    cross_process: Series
    imports: Series


def measure(
    *, root: Path, phases: int, cycles: int, env: dict[str, str], progress: Callable[[str], None]
) -> Figures:
    """P1, P2 and P3 for a ``phases``-phase workflow, ``cycles`` samples each."""
    load_before = os.getloadavg()[0]
    directory = Path(tempfile.mkdtemp(prefix="langgraph-", dir=root))
    progress(f"peers: LangGraph in-process, {cycles} cycles of a {phases}-phase workflow")
    storage, commits, in_process = in_process_cycles(directory, phases, cycles)
    progress(f"peers: LangGraph cross-process, {cycles} cycles")
    cross_process, imports = cross_process_cycles(directory, phases, cycles, env)
    versions = ", ".join(f"{name} {importlib.metadata.version(name)}" for name in PACKAGES)
    load = (load_before, os.getloadavg()[0])
    return Figures(versions, storage, commits, load, in_process, cross_process, imports)


# -- P1 ------------------------------------------------------------------------------------


def in_process_cycles(directory: Path, phases: int, wanted: int) -> tuple[str, int, Series]:
    """The storage settings, the SQLite commits of one cycle, and P1's samples."""
    samples = Series()
    with open_graph(directory / "in-process.sqlite", phases) as graph:
        storage, commits = warm_up(graph)
        run = 0
        while len(samples) < wanted:
            run += 1
            config = thread_config(f"run-{run}")
            result = graph.invoke({"outputs": {}}, config)
            for number in range(2, phases + 1):
                expect_prompt(pending_prompt(result), number - 1, phases, "in-process")
                start, cpu = time.perf_counter_ns(), time.process_time_ns()
                result = graph.invoke(Command(resume=ANSWER), config)
                elapsed, cpu = time.perf_counter_ns() - start, time.process_time_ns() - cpu
                if len(samples) < wanted:
                    samples.add(elapsed / 1e6, cpu / 1e6)
            expect_prompt(pending_prompt(result), phases, phases, "in-process")
            check_completed(graph.invoke(Command(resume=ANSWER), config), phases, "in-process")
    return storage, commits, samples


def warm_up(graph: Any) -> tuple[str, int]:
    """One start and one resume, unmeasured (first-use costs, as ours warms up); the
    connection's journal mode and ``synchronous`` level; the commits of that resume."""
    config = thread_config("warm-up")
    graph.invoke({"outputs": {}}, config)
    connection: sqlite3.Connection = graph.checkpointer.conn
    statements: list[str] = []
    connection.set_trace_callback(statements.append)
    try:
        graph.invoke(Command(resume=ANSWER), config)
    finally:
        connection.set_trace_callback(None)
    commits = sum(1 for statement in statements if statement.strip().upper() == "COMMIT")
    journal = connection.execute("PRAGMA journal_mode").fetchone()[0]
    level = connection.execute("PRAGMA synchronous").fetchone()[0]
    storage = (
        f"SQLite {sqlite3.sqlite_version}, journal_mode={journal}, "
        f"synchronous={SYNCHRONOUS.get(level, level)}"
    )
    return storage, commits


def expect_prompt(prompt: str | None, number: int, phases: int, where: str) -> None:
    if prompt != phase_prompt(number, phases):
        raise PeerFailure(f"LangGraph {where}: expected the interrupt of phase {number}")


def check_completed(result: dict[str, Any], phases: int, where: str) -> None:
    expected = {
        phase_name(n): {"phase": n, "answer_chars": len(ANSWER)} for n in range(1, phases + 1)
    }
    if pending_prompt(result) is not None or result.get("outputs") != expected:
        raise PeerFailure(f"LangGraph {where}: the run did not end with every phase's output")


# -- P2 and P3 -------------------------------------------------------------------------------


def run_child(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, float, str, str]:
    """Exit code, the child's CPU ms (user + system), standard output, standard error."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000
    return result.returncode, cpu, result.stdout.decode(), result.stderr.decode("utf-8", "replace")


def cross_process_cycles(
    directory: Path, phases: int, wanted: int, env: dict[str, str]
) -> tuple[Series, Series]:
    """P2 and, after each of its samples, one of P3 (so both see the same machine load).

    P2: write the answer, one fresh process resumes to the next interrupt. The start of
    each run is a process too, unmeasured (the first one compiles LangGraph's bytecode
    into the cache of ``env``, as ours' first ``orchestrate run`` does)."""
    samples, floor = Series(), Series()
    run = 0
    while len(samples) < wanted:
        run += 1
        workdir = directory / f"cross-process-{run}"
        workdir.mkdir()
        database = workdir / "checkpoints.sqlite"
        step(["start", str(database), str(phases)], workdir, env, 1, phases)
        for number in range(2, phases + 1):
            if len(samples) >= wanted:
                finish_in_process(database, phases)
                break
            start = time.perf_counter_ns()
            (workdir / ANSWER_FILE).write_text(ANSWER, encoding="utf-8")
            cpu = step(["resume", str(database), str(phases)], workdir, env, number, phases)
            samples.add((time.perf_counter_ns() - start) / 1e6, cpu)
            floor.add(*import_floor(workdir, env))
        else:
            (workdir / ANSWER_FILE).write_text(ANSWER, encoding="utf-8")
            step(["resume", str(database), str(phases)], workdir, env, None, phases)
    return samples, floor


def step(
    arguments: list[str], workdir: Path, env: dict[str, str], expect: int | None, phases: int
) -> float:
    """One child process; it must stop at phase ``expect``'s interrupt (None: the end)."""
    code, cpu, out, err = run_child([sys.executable, str(CHILD), *arguments], workdir, env)
    wanted_code = 0 if expect is None else EXIT_PAUSED
    if code != wanted_code:
        raise PeerFailure(
            f"LangGraph child {arguments[0]} exited {code}, not {wanted_code}:\n{err}"
        )
    printed = json.loads(out)
    if expect is None:
        check_completed(printed, phases, "cross-process")
    else:
        expect_prompt(printed.get("prompt"), expect, phases, "cross-process")
    return cpu


def finish_in_process(database: Path, phases: int) -> None:
    """Enough cycles measured: drive the rest of a cross-process run here, to check it ends."""
    with open_graph(database, phases) as graph:
        result = graph.invoke(Command(resume=ANSWER), thread_config(THREAD))
        while pending_prompt(result) is not None:
            result = graph.invoke(Command(resume=ANSWER), thread_config(THREAD))
    check_completed(result, phases, "cross-process (finished in-process)")


def import_floor(cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """One P3 sample, wall and CPU ms: ``python -c 'import <what the child imports from
    LangGraph>'``."""
    start = time.perf_counter_ns()
    code, cpu, _, err = run_child([sys.executable, "-c", IMPORTS], cwd, env)
    if code != 0:
        raise PeerFailure(f"{IMPORTS!r} exited {code}:\n{err}")
    return (time.perf_counter_ns() - start) / 1e6, cpu


# -- report ----------------------------------------------------------------------------------


def report(
    figures: Figures,
    *,
    row: Callable[[str, Sequence[float]], str],
    ours_in_process: Series,
    ours_cross_process: Series,
    group_floor: Series | None = None,
) -> list[str]:
    """The peer lines in the table's columns, then each figure's ratio to ours (``ours_*``:
    line 1 and the first line 2 of the table, lists of wall ms with ``.cpu`` beside);
    with ``group_floor`` (line 3a'), where a cycle twice as fast as LangGraph's lies
    against that floor."""
    floor = statistics.median(figures.imports)
    cross_process = statistics.median(figures.cross_process)
    against_floor = []
    if group_floor is not None:
        half, durable = statistics.median(figures.in_process) / 2, statistics.median(group_floor)
        where = (
            f"below that floor: the durable I/O alone takes {durable / half:.2f}x that"
            if half < durable
            else f"{half / durable:.2f}x that floor"
        )
        against_floor.append(
            f"in-process, twice as fast as P1 is a cycle of at most {half:.2f} ms; the same "
            f"files made durable as one group with no Python work (3a') take {durable:.2f} "
            f"ms: that target is {where}"
        )
    return [
        f"peers: the same workflow on {figures.versions}; SqliteSaver on a file as "
        f"shipped ({figures.storage}), {figures.commits_per_cycle} commits per cycle, "
        f"durability 'async' (the default); measured right after ours, 1-min load avg "
        f"{figures.load[0]:.2f} before, {figures.load[1]:.2f} after",
        row("P1 LangGraph in-process: invoke(Command(resume)), same graph", figures.in_process),
        row(
            "P2 LangGraph cross-process: answer file + fresh python, 1 resume",
            figures.cross_process,
        ),
        row("P3 floor: python -c 'import langgraph.graph, ...checkpoint.sqlite'", figures.imports),
        "in-process, line 1 vs P1: " + _compare(ours_in_process, figures.in_process),
        *against_floor,
        "cross-process, line 2 (first) vs P2: "
        + _compare(ours_cross_process, figures.cross_process),
        f"budget, P2: {cross_process:.1f} ms = interpreter start and LangGraph's imports "
        f"{floor:.1f} (P3) + the rest {cross_process - floor:.1f}",
    ]


def _compare(ours: Series, peer: Series) -> str:
    wall = _ratio(statistics.median(peer), statistics.median(ours))
    cpu = _ratio(statistics.median(peer.cpu), statistics.median(ours.cpu))
    return (
        f"median wall ours {statistics.median(ours):.2f} ms, LangGraph "
        f"{statistics.median(peer):.2f} ms: {wall}; median CPU ours "
        f"{statistics.median(ours.cpu):.2f} ms, LangGraph {statistics.median(peer.cpu):.2f} ms: "
        f"{cpu}"
    )


def _ratio(peer: float, ours: float) -> str:
    """LangGraph's median over ours, said the way round that reads as more than 1."""
    if ours <= 0 or math.isnan(peer):
        return "no ratio"
    ratio = peer / ours
    if ratio >= 1:
        return f"ours {ratio:.1f}x faster than LangGraph (LangGraph / ours)"
    return f"ours {1 / ratio:.1f}x slower than LangGraph (ours / LangGraph)"
