"""The LangGraph peer of ``bench/long_runs.py``: the same long runs, cycle by cycle.

For one shape (``phases``: N nodes with one ``interrupt()`` each; ``loop``: one node that
calls ``interrupt()`` N times, see ``langgraph_workflow.py``):

- in process: one compiled graph and ``SqliteSaver`` for the run; a cycle is one
  ``graph.invoke(Command(resume=ANSWER), config)`` from one interrupt to the next, every
  one of the run's cycles that ends at an interrupt is timed, and the whole run (start to
  end) too;
- across processes: the first ``samples`` cycles of one more run and the last ``samples``
  cycles of another, driven in this process to them (unmeasured), taken in turns, each
  one the answer written to a file and a fresh ``python langgraph_resume.py resume`` (as
  ``bench/resume_cycle.py``'s P2).

Durability as shipped, as in ``langgraph_cycle.py``: ``invoke``'s default ``"async"``
durability and ``SqliteSaver.from_conn_string``'s connection.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _machine import Series
from langgraph.types import Command

from peers.langgraph_cycle import CHILD, PeerFailure, run_child, warm_up
from peers.langgraph_workflow import (
    ANSWER,
    ANSWER_FILE,
    EXIT_PAUSED,
    THREAD,
    open_graph,
    pending_prompt,
    phase_name,
    prompt_of,
    thread_config,
)

__all__ = ["LongFigures", "PeerFailure", "measure", "storage_settings"]


@dataclass(frozen=True)
class LongFigures:
    """One shape's figures: every in-process cycle that ends at an interrupt, in order;
    the in-process run's whole time (s); the sampled first and last cross-process cycles."""

    in_process: Series
    whole_run_s: float
    first_processes: Series
    last_processes: Series


def measure(
    *,
    shape: str,
    size: int,
    samples: int,
    root: Path,
    env: dict[str, str],
    progress: Callable[[str], None],
) -> LongFigures:
    """In-process and cross-process figures of a run of ``shape`` with ``size`` pauses;
    ``samples`` processes at each end of the cross-process run (0: none)."""
    directory = Path(tempfile.mkdtemp(prefix=f"langgraph-{shape}-{size}-", dir=root))
    progress(f"peers: LangGraph {shape} x{size}, in process")
    in_process, whole = in_process_run(directory / "in-process.sqlite", shape, size)
    first, last = Series(), Series()
    if samples:
        progress(f"peers: LangGraph {shape} x{size}, {samples} + {samples} processes")
        first, last = cross_process_run(directory, shape, size, samples, env)
    return LongFigures(in_process, whole, first, last)


def storage_settings(root: Path) -> tuple[str, int]:
    """How the saver's connection is set up and the SQLite commits of one cycle (measured
    on a throwaway two-phase run)."""
    directory = Path(tempfile.mkdtemp(prefix="langgraph-settings-", dir=root))
    with open_graph(directory / "settings.sqlite", 2) as graph:
        return warm_up(graph)


# -- in process ------------------------------------------------------------------------------


def in_process_run(database: Path, shape: str, size: int) -> tuple[Series, float]:
    samples = Series()
    with open_graph(database, size, shape) as graph:
        warm = thread_config("warm-up")  # first-use costs paid once, as ours warms up
        graph.invoke({"outputs": {}}, warm)
        graph.invoke(Command(resume=ANSWER), warm)
        config = thread_config("run")
        began = time.perf_counter_ns()
        result = graph.invoke({"outputs": {}}, config)
        for number in range(2, size + 1):
            expect_prompt(pending_prompt(result), shape, number - 1, size, "in process")
            start, cpu = time.perf_counter_ns(), time.process_time_ns()
            result = graph.invoke(Command(resume=ANSWER), config)
            samples.add(
                (time.perf_counter_ns() - start) / 1e6, (time.process_time_ns() - cpu) / 1e6
            )
        expect_prompt(pending_prompt(result), shape, size, size, "in process")
        result = graph.invoke(Command(resume=ANSWER), config)
        whole = (time.perf_counter_ns() - began) / 1e9
    check_completed(result, shape, size, "in process")
    return samples, whole


def expect_prompt(prompt: str | None, shape: str, number: int, size: int, where: str) -> None:
    if prompt != prompt_of(shape, number, size):
        raise PeerFailure(f"LangGraph {shape} x{size} {where}: expected interrupt {number}")


def check_completed(result: dict[str, Any], shape: str, size: int, where: str) -> None:
    if shape == "loop":
        expected = {"loop": {"asks": size, "answer_chars": size * len(ANSWER)}}
    else:
        expected = {
            phase_name(n): {"phase": n, "answer_chars": len(ANSWER)} for n in range(1, size + 1)
        }
    if pending_prompt(result) is not None or result.get("outputs") != expected:
        raise PeerFailure(
            f"LangGraph {shape} x{size} {where}: the run did not end with its outputs"
        )


# -- across processes ------------------------------------------------------------------------


def cross_process_run(
    directory: Path, shape: str, size: int, samples: int, env: dict[str, str]
) -> tuple[Series, Series]:
    """The first and the last ``samples`` cycles as fresh processes, in turns, as ours are
    measured: two databases, one at its start and one driven here to its last cycles,
    each advanced one cycle at a time. The late one's run is ended here (checked)."""
    runs = []
    for name in ("early", "late"):
        workdir = directory / f"cross-process-{name}"
        workdir.mkdir()
        database = workdir / "checkpoints.sqlite"
        with open_graph(database, size, shape) as graph:
            result = graph.invoke({"outputs": {}}, thread_config(THREAD))
        expect_prompt(pending_prompt(result), shape, 1, size, "across processes")
        runs.append((workdir, database))
    (early_dir, early), (late_dir, late) = runs
    # Unmeasured: a first process on a throwaway database compiles LangGraph's bytecode
    # into the cache of ``env`` (ours' first process is warmed the same way).
    warm = directory / "warm.sqlite"
    child(["start", str(warm), str(size), shape], early_dir, env, shape, 1, size)
    cycles = size - 1  # the cycles that end at an interrupt
    count = min(samples, cycles)
    in_process_cycles(late, shape, size, 0, cycles - count)
    first, last = Series(), Series()
    for turn in range(count):
        ends = [
            (early_dir, early, turn + 1, first),
            (late_dir, late, cycles - count + turn + 1, last),
        ]
        for workdir, database, cycle, series in ends if turn % 2 == 0 else ends[::-1]:
            series.add(*process_cycle(workdir, database, shape, size, cycle, env))
    with open_graph(late, size, shape) as graph:
        result = graph.invoke(Command(resume=ANSWER), thread_config(THREAD))
    check_completed(result, shape, size, "across processes")
    return first, last


def process_cycle(
    workdir: Path, database: Path, shape: str, size: int, cycle: int, env: dict[str, str]
) -> tuple[float, float]:
    """Cycle ``cycle``: write the answer, a fresh process resumes to interrupt cycle + 1;
    wall ms and the child's CPU ms."""
    start = time.perf_counter_ns()
    (workdir / ANSWER_FILE).write_text(ANSWER, encoding="utf-8")
    cpu = child(["resume", str(database), str(size), shape], workdir, env, shape, cycle + 1, size)
    return (time.perf_counter_ns() - start) / 1e6, cpu


def in_process_cycles(database: Path, shape: str, size: int, done: int, until: int) -> None:
    """Drive cycles ``done + 1 .. until`` here (unmeasured), on the same database file the
    processes use, with the graph closed again afterwards."""
    if until <= done:
        return
    with open_graph(database, size, shape) as graph:
        for cycle in range(done + 1, until + 1):
            result = graph.invoke(Command(resume=ANSWER), thread_config(THREAD))
            expect_prompt(pending_prompt(result), shape, cycle + 1, size, "across processes")


def child(
    arguments: list[str],
    workdir: Path,
    env: dict[str, str],
    shape: str,
    expect: int,
    size: int,
) -> float:
    """One ``langgraph_resume.py`` process that must stop at interrupt ``expect``."""
    code, cpu, out, err = run_child([sys.executable, str(CHILD), *arguments], workdir, env)
    if code != EXIT_PAUSED:
        raise PeerFailure(
            f"LangGraph child {arguments[0]} ({shape} x{size}) exited {code}, not "
            f"{EXIT_PAUSED}:\n{err}"
        )
    expect_prompt(json.loads(out).get("prompt"), shape, expect, size, "child process")
    return cpu
