"""Long-run benchmark: does the thousandth pause cost what the first did?

Run it from the repository root with the project's virtualenv::

    .venv/bin/python bench/long_runs.py [--peers] [--quick] [--shapes phases:1000,loop:500]
    .venv/bin/python bench/long_runs.py --peers --asks 5000   # issue 39's two shapes

Four shapes by default, each one run: 100 phases with one ask each, 1,000 phases, one
phase asking 100 times in a loop, one phase asking 500 times (~300-character prompts,
~200-character answers, as ``bench/resume_cycle.py``). A cycle is what a host does from one
pause to the next: answer every pending request, resume, run to the next pause.

- in process: ``WorkflowHarness(cls, workdir)`` with ``invoker=None``: ``run()``, then
  ``respond()`` to every pending request + ``resume()`` (a fresh ``Engine`` each time,
  which takes the state the last pause left, unless the file changed) until the run
  completes; every cycle that ends in a
  pause is timed, respond included. Printed: the first and the last tenth of them.
- across processes: two more runs of the same shape, started in process; one stays at its
  start, the other is driven in process, unmeasured, to its last K cycles (the same state
  file a process reads). Then, in turns, one cycle of each is ``respond()`` +
  ``orchestrate resume --workdir D`` as a fresh process (until it exits 42), K times: the
  first K and the last K cycles are measured side by side, so a machine that drifts
  during the bench weighs on both alike. After each process, one ``python -c 'import
  orchestrator.cli.main'`` (its floor, to tell a slower cycle from a busier machine).
- floors beside them: the state file of the first and of the last tenth written durably
  alone; for a loop, replaying the asks before with no engine; and the group floor, each
  cycle of the first and of the last tenth of another run done again raw, its durable I/O
  alone (``bench/_group_floor.py``, as ``bench/resume_cycle.py`` line 3a').
- ``--peers``: the same shapes on LangGraph + ``SqliteSaver`` right after each of ours
  (``bench/peers/langgraph_long.py``); without its requirements, one line says how to
  install them.

Every figure is a median and a p90 (nearest rank) of wall-clock milliseconds over ``n``
cycles, with the median CPU time (this process's in process, the child's for a process).
``--asks N`` runs the two shapes of issue 39 at size N: N phases, and one phase asking N
times (``--asks 5000`` as the issue says; a smaller N for a quick look). The state file's
largest size at any pause of the in-process run is printed for every shape.

The targets of issues 18 and 39 are printed at the end, each met or missed; a missed target
never changes the exit status, which is 1 only when a workflow does not behave.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import math
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _group_floor import Capture, GroupFloor, Operation
from _machine import Series, fs_type, load_average
from peers import INSTALL_HINT, langgraph_installed

from orchestrator.testing import WorkflowHarness

#: The issues' targets: the last tenth of a long run's cycles in process, and the last
#: cycles across processes, against the first (issue 39: plus the phase's replay floor);
#: ours against LangGraph's; the state file's largest size at any pause.
IN_PROCESS_GROWTH_TARGET = 1.25
PROCESS_GROWTH_TARGET = 1.15
STATE_SIZE_TARGET = 64 * 1024
PEER_TARGET = 2.0
EXIT_PAUSED = 42
PROCESS_SAMPLES = 10
WRITE_FLOOR_SAMPLES = 30
DEFAULT_SHAPES = "phases:100,phases:1000,loop:100,loop:500"
QUICK_SHAPES = "phases:50,phases:200,loop:50,loop:100"
REQUEST_FILE = ".agent-request.json"
REQUESTS_DIR = ".agent-requests"
#: The answer of every ask, the same text as resume_cycle.py's and the LangGraph peer's.
ANSWER = (
    "Done. The benchmark agent read the prompt, did nothing of substance, and answers with "
    "this fixed paragraph of about two hundred characters so that every response is alike."
)

# The workflows under test, written to temporary files that both this process and the
# ``orchestrate`` processes import by module name (the directory is on PYTHONPATH).
PHASES_SOURCE = '''\
"""Benchmark workflow written by bench/long_runs.py: @SIZE@ phases, one ask each."""

from orchestrator import Workflow, phase

PHASES = @SIZE@
AGENT = "bench-agent"


def _prompt(number):
    text = (
        f"Phase {number} of {PHASES} of the resume-cycle benchmark. Read the notes of the "
        "earlier phases, then answer with one short paragraph that the next phase can use. "
    )
    return text * 2  # about 300 characters


def _make_phase(number):
    prompt = _prompt(number)

    def run(self, ctx):
        answer = ctx.ask(AGENT, prompt)
        return {"phase": number, "answer_chars": len(answer)}

    return run


_namespace = {
    "__module__": __name__,
    "__qualname__": "Bench",
    "name": "bench-phases",
    "agents": (AGENT,),
    "purpose": "long-run benchmark, phases",
}
for _number in range(1, PHASES + 1):
    _namespace[f"phase_{_number:03d}"] = phase(_number, name=f"phase_{_number:03d}")(
        _make_phase(_number)
    )
Bench = type("Bench", (Workflow,), _namespace)
'''

LOOP_SOURCE = '''\
"""Benchmark workflow written by bench/long_runs.py: one phase asking @SIZE@ times."""

from orchestrator import Workflow, phase

ASKS = @SIZE@
AGENT = "bench-agent"


def _prompt(number):
    text = (
        f"Ask {number} of {ASKS} of the long-run benchmark's loop. Read the answers to the "
        "earlier asks, then answer with one short paragraph that the next ask can use. "
    )
    return text * 2  # about 300 characters


class Bench(Workflow):
    name = "bench-loop"
    agents = (AGENT,)
    purpose = "long-run benchmark, one phase asking in a loop"

    @phase(1, name="loop")
    def loop(self, ctx):
        total = 0
        for number in range(1, ASKS + 1):
            total += len(ctx.ask(AGENT, _prompt(number)))
        return {"asks": ASKS, "answer_chars": total}
'''


class BenchFailure(Exception):
    """A workflow did not behave: the benchmark's numbers would mean nothing."""


@dataclass(frozen=True)
class Shape:
    """A run's shape: ``phases`` (N phases, one ask each) or ``loop`` (one phase, N asks)."""

    kind: str
    size: int

    @property
    def title(self) -> str:
        if self.kind == "loop":
            return f"one phase asking {self.size:,} times in a loop"
        return f"{self.size:,} phases, one ask each"

    @property
    def short(self) -> str:
        return f"{self.size:,} asks in a loop" if self.kind == "loop" else f"{self.size:,} phases"

    @property
    def module(self) -> str:
        return f"long_runs_{self.kind}_{self.size}"

    @property
    def cycles(self) -> int:
        """The cycles that end in a pause (the last one completes the run)."""
        return self.size - 1

    @property
    def tenth(self) -> int:
        return max(1, self.cycles // 10)

    @property
    def middles(self) -> tuple[int, int]:
        """The cycles at the middle of the first and of the last tenth."""
        return self.tenth // 2, self.cycles - self.tenth // 2


@dataclass
class Figures:
    """One shape's figures: ours, and LangGraph's (or the line printed instead)."""

    in_process: Series
    whole_run_s: float
    first_processes: Series
    last_processes: Series
    first_floor: Series
    last_floor: Series
    # The I/O floor of the growth: the state file's bytes at the middle of the first and
    # of the last tenth, each written durably alone (write_together: written, synced,
    # renamed, synced), as a save writes it; and their sizes.
    first_write: Series = field(default_factory=Series)
    last_write: Series = field(default_factory=Series)
    state_sizes: tuple[int, int] = (0, 0)
    # The state file's largest size at any pause of the in-process run, and the pause.
    largest_state: tuple[int, int] = (0, 0)
    # The replay floor of a loop: at the same two cycles, the phase's own code making
    # each earlier prompt and one compare of each with the recorded one, with no engine; and
    # how many asks that is.
    first_replay: Series = field(default_factory=Series)
    last_replay: Series = field(default_factory=Series)
    replayed: tuple[int, int] = (0, 0)
    # The same floor at the middle of the first and of the last cycles run as processes
    # (issue 39's target for processes: 1.15x the first plus the growth of this floor).
    process_replay: tuple[Series, Series] | None = None
    # The group floor: each cycle of the first and of the last tenth, its durable I/O (the
    # same files, bytes and order, recorded from another run) done raw, with no Python work.
    first_group: Series = field(default_factory=Series)
    last_group: Series = field(default_factory=Series)
    peer: Any = None


def parse_shapes(text: str) -> list[Shape]:
    shapes: list[Shape] = []
    for item in text.split(","):
        kind, _, size = item.strip().partition(":")
        if kind not in ("phases", "loop") or not size.isdigit() or int(size) < 3:
            raise ValueError(f"{item.strip()!r}: give phases:N or loop:N with N >= 3")
        shape = Shape(kind, int(size))
        if shape not in shapes:
            shapes.append(shape)
    return shapes


# -- small helpers -----------------------------------------------------------------------


def ms(ns: int) -> float:
    return ns / 1e6


def p90(samples: Sequence[float]) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def children_cpu_ms() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1000


def fresh_dir(root: Path, name: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))


def write_workflows(root: Path, shapes: list[Shape]) -> tuple[Path, dict[Shape, type[Any]]]:
    """Each shape's workflow file, in one directory put on ``sys.path`` (and on the
    processes' PYTHONPATH), and its class imported from there by module name."""
    directory = root / "workflows"
    directory.mkdir()
    classes: dict[Shape, type[Any]] = {}
    for shape in shapes:
        source = LOOP_SOURCE if shape.kind == "loop" else PHASES_SOURCE
        path = directory / f"{shape.module}.py"
        path.write_text(source.replace("@SIZE@", str(shape.size)), encoding="utf-8")
    sys.path.insert(0, str(directory))
    for shape in shapes:
        classes[shape] = importlib.import_module(shape.module).Bench
    return directory, classes


def expect_pause(outcome: Any, where: str) -> None:
    if outcome.status != "paused" or outcome.exit_code != EXIT_PAUSED or len(outcome.pending) != 1:
        raise BenchFailure(
            f"{where}: expected a pause with one request, got {outcome.status} "
            f"(exit {outcome.exit_code}, {len(outcome.pending)} pending): {outcome.message}"
        )


def check_completed(outcome: Any, shape: Shape, where: str) -> None:
    if outcome.status != "completed" or outcome.exit_code != 0:
        raise BenchFailure(f"{where}: expected completion, got {outcome.status}: {outcome.message}")
    if shape.kind == "loop":
        expected = {"loop": {"asks": shape.size, "answer_chars": shape.size * len(ANSWER)}}
    else:
        expected = {
            f"phase_{n:03d}": {"phase": n, "answer_chars": len(ANSWER)}
            for n in range(1, shape.size + 1)
        }
    if outcome.outputs != expected:
        raise BenchFailure(f"{where}: the run completed without every output it should have")


def pending_request_ids(workdir: Path) -> list[str]:
    """The requests a host finds on disk (one request file, or a directory of them)."""
    many = workdir / REQUESTS_DIR
    files = sorted(many.glob("*.json")) if many.is_dir() else []
    if not files and (workdir / REQUEST_FILE).exists():
        files = [workdir / REQUEST_FILE]
    if not files:
        raise BenchFailure(f"{workdir}: no pending request to answer")
    return [str(json.loads(f.read_text(encoding="utf-8"))["request_id"]) for f in files]


def run_process(command: list[str], env: dict[str, str]) -> tuple[int, float, str]:
    """Exit code, the child's CPU ms (user + system), standard error."""
    cpu = children_cpu_ms()
    result = subprocess.run(command, env=env, capture_output=True, check=False)
    return result.returncode, children_cpu_ms() - cpu, result.stderr.decode("utf-8", "replace")


# -- in process --------------------------------------------------------------------------


def in_process_run(
    shape: Shape, workflow: type[Any], root: Path
) -> tuple[Series, float, tuple[bytes, bytes], tuple[int, int]]:
    """Every cycle of one run that ends in a pause, respond + ``resume()`` (a fresh Engine),
    in order; the whole run's seconds, from ``run()`` to completion; the state file's
    bytes at the middle of the first and of the last tenth; and its largest size at any
    pause, with that pause's number (its size read after the cycle's timing)."""
    workdir = fresh_dir(root, f"inproc-{shape.kind}-{shape.size}")
    harness = WorkflowHarness(workflow, workdir)
    samples = Series()
    middles = shape.middles
    states: list[bytes] = []
    largest = (0, 0)
    began = time.perf_counter_ns()
    outcome = harness.run()
    while outcome.status == "paused":
        size = state_size(workdir)
        if size > largest[0]:
            largest = (size, len(samples) + 1)
        expect_pause(outcome, f"{shape.title}, in process")
        start, cpu = time.perf_counter_ns(), time.process_time_ns()
        for request in outcome.pending:
            harness.respond(request.request_id, ANSWER)
        outcome = harness.resume()
        elapsed, cpu = time.perf_counter_ns() - start, time.process_time_ns() - cpu
        if outcome.status == "paused":
            samples.add(ms(elapsed), ms(cpu))
            if len(samples) in middles:
                states.append(state_bytes(workdir))
    whole = (time.perf_counter_ns() - began) / 1e9
    check_completed(outcome, shape, f"{shape.title}, in process")
    if len(samples) != shape.cycles:
        raise BenchFailure(f"{shape.title}: {len(samples)} pauses, not {shape.cycles}")
    shutil.rmtree(workdir)
    return samples, whole, (states[0], states[-1]), largest


def captured_tenths(
    shape: Shape, workflow: type[Any], root: Path
) -> tuple[list[list[Operation]], list[list[Operation]]]:
    """Another in-process run of the shape, as the timed one runs, recording what each
    cycle of its first and last tenth hands to the durable layer."""
    workdir = fresh_dir(root, f"capture-{shape.kind}-{shape.size}")
    capture = Capture(workdir)
    harness = WorkflowHarness(workflow, workdir)
    with capture.installed():
        outcome = harness.run()
        while outcome.status == "paused":
            capture.next_cycle()
            for request in outcome.pending:
                harness.respond(request.request_id, ANSWER)
            outcome = harness.resume()
    check_completed(outcome, shape, f"{shape.title}, captured")
    capture.cycles.pop()  # the last one completes the run
    shutil.rmtree(workdir)
    return capture.cycles[: shape.tenth], capture.cycles[-shape.tenth :]


def group_floor(root: Path, cycles: list[list[Operation]]) -> Series:
    """Each of ``cycles`` done raw once, in order, in a directory of its own."""
    floor = GroupFloor(root, cycles)
    for _ in cycles:
        floor.replay()
    return floor.close()


def state_bytes(workdir: Path) -> bytes:
    (state,) = workdir.glob(".*-state.json")
    return state.read_bytes()


def state_size(workdir: Path) -> int:
    (state,) = workdir.glob(".*-state.json")
    return state.stat().st_size


def write_floor(root: Path, states: tuple[bytes, bytes], samples: int) -> tuple[Series, Series]:
    """The durable write of each of two states' bytes alone, as a save writes a state
    (``write_together``: written, synced, renamed, synced), alternately: what the state's
    growth alone costs a cycle, with no Python work."""
    from orchestrator.storage.durable import write_together

    directory = fresh_dir(root, "write-floor")
    target = directory / ".floor-state.json"
    first, last = Series(), Series()
    for _ in range(samples):
        for data, series in ((states[0], first), (states[1], last)):
            start, cpu = time.perf_counter_ns(), time.process_time_ns()
            write_together([(target, data)])
            series.add(ms(time.perf_counter_ns() - start), ms(time.process_time_ns() - cpu))
    shutil.rmtree(directory)
    return first, last


def replay_floor(
    shape: Shape, workflow: type[Any], samples: int, at: tuple[int, int] | None = None
) -> tuple[Series, Series]:
    """What replaying a loop's earlier asks costs at least, at the middle of the first and
    of the last tenth (or at the cycles ``at``; cycle c replays the c asks answered so
    far): the phase's own code making each prompt and one compare of it with the recorded
    prompt (what a replay must check), with no engine, alternately."""
    prompt = sys.modules[workflow.__module__]._prompt
    middles = at or shape.middles
    recorded = [""] + [prompt(number) for number in range(1, max(middles) + 1)]
    first, last = Series(), Series()
    for _ in range(samples):
        for asks, series in zip(middles, (first, last), strict=True):
            start, cpu = time.perf_counter_ns(), time.process_time_ns()
            for number in range(1, asks + 1):
                if prompt(number) != recorded[number]:
                    raise BenchFailure(f"the loop's prompt {number} is not what it was")
            series.add(ms(time.perf_counter_ns() - start), ms(time.process_time_ns() - cpu))
    return first, last


# -- across processes --------------------------------------------------------------------


def cross_process_run(
    shape: Shape,
    workflow: type[Any],
    root: Path,
    samples: int,
    cli: list[str],
    env: dict[str, str],
) -> tuple[Series, Series, Series, Series]:
    """The first and the last ``samples`` cycles of the shape as fresh processes, each
    followed by one import floor, taken in turns: two runs, one at its start and one
    driven in process (unmeasured) to its last cycles, each advanced one cycle at a time,
    so that a machine that slows down or speeds up during the bench weighs on both ends
    alike. The late run is ended in process (checked); the early one is dropped."""
    where = f"{shape.title}, across processes"
    early = WorkflowHarness(workflow, fresh_dir(root, f"cross-early-{shape.kind}-{shape.size}"))
    late = WorkflowHarness(workflow, fresh_dir(root, f"cross-late-{shape.kind}-{shape.size}"))
    count = min(samples, shape.cycles)
    for harness in (early, late):
        expect_pause(harness.run(), where)
    for _ in range(shape.cycles - count):
        advance(late, where)
    first, last, first_floor, last_floor = Series(), Series(), Series(), Series()
    floor_command = [sys.executable, "-c", "import orchestrator.cli.main"]
    for turn in range(count):
        ends = [(early, first, first_floor), (late, last, last_floor)]
        for harness, cycles, floors in ends if turn % 2 == 0 else ends[::-1]:
            cycles.add(*process_cycle(harness, cli, env, where))
            floors.add(*floor_process(floor_command, env))
    for request_id in pending_request_ids(late.workdir):
        late.respond(request_id, ANSWER)
    check_completed(late.resume(), shape, where)
    for harness in (early, late):
        shutil.rmtree(harness.workdir)
    return first, last, first_floor, last_floor


def advance(harness: WorkflowHarness, where: str) -> None:
    """One cycle in process, unmeasured: respond to what is pending, resume to a pause."""
    for request_id in pending_request_ids(harness.workdir):
        harness.respond(request_id, ANSWER)
    expect_pause(harness.resume(), where)


def process_cycle(
    harness: WorkflowHarness, cli: list[str], env: dict[str, str], where: str
) -> tuple[float, float]:
    """Respond to what is pending, then ``orchestrate resume`` until it exits 42: wall ms
    and the child's CPU ms."""
    request_ids = pending_request_ids(harness.workdir)
    start = time.perf_counter_ns()
    for request_id in request_ids:
        harness.respond(request_id, ANSWER)
    code, cpu, err = run_process([*cli, "resume", "--workdir", str(harness.workdir)], env)
    elapsed = time.perf_counter_ns() - start
    if code != EXIT_PAUSED:
        raise BenchFailure(f"{where}: 'orchestrate resume' exited {code}, not 42:\n{err}")
    return ms(elapsed), cpu


def floor_process(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    start = time.perf_counter_ns()
    code, cpu, err = run_process(command, env)
    if code != 0:
        raise BenchFailure(f"{' '.join(command)} exited {code}:\n{err}")
    return ms(time.perf_counter_ns() - start), cpu


def warm_up(
    shapes: list[Shape],
    workflows: dict[Shape, type[Any]],
    root: Path,
    cli: list[str],
    env: dict[str, str],
) -> None:
    """First-use costs, paid before anything is timed: in process, the converter's hooks
    (a long-lived host pays them once); for processes, the bytecode of the package and of
    each workflow module, compiled into the cache once (as an installed package has it)."""
    for shape in shapes:
        workdir = fresh_dir(root, "warm")
        harness = WorkflowHarness(workflows[shape], workdir)
        outcome = harness.run()
        expect_pause(outcome, f"{shape.title}, warm-up")
        harness.respond(outcome.pending[0].request_id, ANSWER)
        expect_pause(harness.resume(), f"{shape.title}, warm-up")
        process_cycle(harness, cli, env, f"{shape.title}, warm-up")
        shutil.rmtree(workdir)


# -- the peer ----------------------------------------------------------------------------


def measure_peer(
    shape: Shape, samples: int, root: Path, env: dict[str, str], progress: Callable[[str], None]
) -> Any:
    """LangGraph's figures for ``shape``, or the line to print instead (its workflow
    failed: ours are judged alone, the exit status stays)."""
    from peers import langgraph_long  # imported only now: it imports langgraph

    try:
        return langgraph_long.measure(
            shape=shape.kind,
            size=shape.size,
            samples=samples,
            root=root,
            env=env,
            progress=progress,
        )
    except langgraph_long.PeerFailure as exc:
        return f"LangGraph: no figures, its workflow failed: {exc}"


def peer_header(root: Path) -> str:
    from peers import langgraph_cycle, langgraph_long

    storage, commits = langgraph_long.storage_settings(root)
    versions = ", ".join(
        f"{name} {importlib.metadata.version(name)}" for name in langgraph_cycle.PACKAGES
    )
    return (
        f"peer: {versions}; SqliteSaver on a file as shipped ({storage}), {commits} commits "
        "per cycle, durability 'async' (the default); in process one compiled graph, a cycle "
        "is invoke(Command(resume=answer)); across processes answer file + a fresh 'python "
        "bench/peers/langgraph_resume.py resume'; each shape measured right after ours"
    )


# -- report ------------------------------------------------------------------------------

LABEL_WIDTH = 58


def row(label: str, samples: Series) -> str:
    if not samples:
        return f"{label:<{LABEL_WIDTH}} {0:>5}        -        -        -"
    return (
        f"{label:<{LABEL_WIDTH}} {len(samples):>5} {statistics.median(samples):>8.2f} "
        f"{p90(samples):>8.2f} {statistics.median(samples.cpu):>8.2f}"
    )


def head(samples: Series, count: int) -> Series:
    part = Series()
    for wall, cpu in zip(samples[:count], samples.cpu[:count], strict=True):
        part.add(wall, cpu)
    return part


def tail(samples: Series, count: int) -> Series:
    part = Series()
    for wall, cpu in zip(samples[-count:], samples.cpu[-count:], strict=True):
        part.add(wall, cpu)
    return part


def ratio(top: Series, bottom: Series) -> float:
    if not top or not bottom:
        return math.nan
    return statistics.median(top) / statistics.median(bottom)


def verdict(value: float, target: float, *, at_most: bool) -> str:
    if math.isnan(value):
        return "not measured"
    met = value <= target if at_most else value >= target
    return "met" if met else "MISSED"


def shape_section(shape: Shape, figures: Figures, judged: bool) -> list[str]:
    tenth = shape.tenth
    k_first, k_last = len(figures.first_processes), len(figures.last_processes)
    lines = [
        f"== {shape.title}: {shape.cycles:,} cycles end in a pause; a tenth is {tenth} "
        f"cycles; processes: cycles 1-{k_first} and {shape.cycles - k_last + 1}-{shape.cycles}",
        f"{'figure (per cycle, ms)':<{LABEL_WIDTH}} {'n':>5} {'median':>8} {'p90':>8} "
        f"{'cpu med':>8}",
    ]
    lines.append("-" * len(lines[-1]))
    ours_first, ours_last = head(figures.in_process, tenth), tail(figures.in_process, tenth)
    lines += [
        row(f"ours in process, first tenth (cycles 1-{tenth})", ours_first),
        row(
            f"ours in process, last tenth (cycles {shape.cycles - tenth + 1}-{shape.cycles})",
            ours_last,
        ),
        row(f"ours processes, first {k_first}", figures.first_processes),
        row(f"ours processes, last {k_last}", figures.last_processes),
        row(
            f"floor: python -c 'import orchestrator.cli.main', first {k_first}", figures.first_floor
        ),
        row(f"floor: the same, beside the last {k_last}", figures.last_floor),
        row(
            f"floor: the state alone written durably, first tenth "
            f"({figures.state_sizes[0] / 1024:,.0f} KiB)",
            figures.first_write,
        ),
        row(
            f"floor: the same, last tenth ({figures.state_sizes[1] / 1024:,.0f} KiB)",
            figures.last_write,
        ),
        row("floor: a cycle's durable I/O as one group, raw, first tenth", figures.first_group),
        row("floor: the same, last tenth", figures.last_group),
    ]
    if figures.first_replay:
        lines += [
            row(
                f"floor: replaying the asks before, first tenth ({figures.replayed[0]} asks)",
                figures.first_replay,
            ),
            row(f"floor: the same, last tenth ({figures.replayed[1]} asks)", figures.last_replay),
        ]
    if figures.process_replay is not None:
        lines += [
            row(
                f"floor: replaying the asks before, first {k_first} processes (middle)",
                figures.process_replay[0],
            ),
            row(f"floor: the same, last {k_last} processes", figures.process_replay[1]),
        ]
    peer = figures.peer
    if peer is not None and not isinstance(peer, str):
        lines += [
            row("LangGraph in process, first tenth", head(peer.in_process, tenth)),
            row("LangGraph in process, last tenth", tail(peer.in_process, tenth)),
            row(f"LangGraph processes, first {len(peer.first_processes)}", peer.first_processes),
            row(f"LangGraph processes, last {len(peer.last_processes)}", peer.last_processes),
        ]
    elif isinstance(peer, str):
        lines.append(peer)
    size, at = figures.largest_state
    lines.append(
        f"the state file's largest size at any pause: {size / 1024:,.1f} KiB (pause {at}; "
        f"target <= {STATE_SIZE_TARGET // 1024} KiB: "
        f"{verdict(size, STATE_SIZE_TARGET, at_most=True)})"
    )
    whole = f"whole run in process (run() to completion): ours {figures.whole_run_s:.1f} s"
    if peer is not None and not isinstance(peer, str):
        whole += f", LangGraph {peer.whole_run_s:.1f} s"
    lines.append(whole)
    in_target = IN_PROCESS_GROWTH_TARGET if judged else None
    out_target = process_target(figures)[0] if judged else None
    line = (
        f"last / first (medians, wall and cpu): ours in process "
        f"{growth(ours_last, ours_first, in_target)}, processes "
        f"{growth(figures.last_processes, figures.first_processes, out_target)}, their import "
        f"floor {growth(figures.last_floor, figures.first_floor, None)}"
    )
    if peer is not None and not isinstance(peer, str):
        line += (
            f"; LangGraph in process "
            f"{growth(tail(peer.in_process, tenth), head(peer.in_process, tenth), None)}, "
            f"processes {growth(peer.last_processes, peer.first_processes, None)}"
        )
    lines.append(line)
    forced = statistics.median(figures.last_write) - statistics.median(figures.first_write)
    base = statistics.median(ours_first)
    lines.append(
        f"what the state's growth alone adds to a cycle (its write floor, last - first): "
        f"{forced:+.2f} ms, so a last tenth of at least {(base + forced) / base:.2f}x the first"
    )
    if figures.first_replay:
        replay = statistics.median(figures.last_replay) - statistics.median(figures.first_replay)
        lines.append(
            f"with the replay of the asks before (its floor, last - first: {replay:+.2f} ms), "
            f"at least {(base + forced + replay) / base:.2f}x the first"
        )
    group_first = statistics.median(figures.first_group)
    group_last = statistics.median(figures.last_group)
    lines.append(
        f"ours in process / its group floor: first tenth {base / group_first:.2f}x, last tenth "
        f"{statistics.median(ours_last) / group_last:.2f}x"
    )
    if peer is not None and not isinstance(peer, str):
        lines.append(
            "LangGraph / ours (medians; target >= 2x): "
            + ", ".join(f"{name} {value:.2f}x" for name, value in peer_ratios(shape, figures))
        )
        halves = [
            statistics.median(head(peer.in_process, tenth)) / PEER_TARGET,
            statistics.median(tail(peer.in_process, tenth)) / PEER_TARGET,
        ]
        lines.append(
            f"in process, {PEER_TARGET:g}x as fast as LangGraph is a cycle of at most "
            f"{halves[0]:.2f} ms (first tenth) and {halves[1]:.2f} ms (last tenth); the same "
            f"files made durable as one group with no Python work take {group_first:.2f} and "
            f"{group_last:.2f} ms: "
            + ", ".join(
                f"{name} {beneath_floor(half, floor)}"
                for name, half, floor in (
                    ("first", halves[0], group_first),
                    ("last", halves[1], group_last),
                )
            )
        )
    return lines


def beneath_floor(target: float, floor: float) -> str:
    """Where a target cycle lies against the floor of its own durable I/O."""
    if target < floor:
        return f"beneath that floor (the I/O alone takes {floor / target:.2f}x it)"
    return f"{target / floor:.2f}x that floor"


def growth(last: Series, first: Series, target: float | None) -> str:
    """Last over first, wall (judged against ``target`` when there is one) and CPU: on a
    busy machine the CPU ratio tells growth from noise."""
    wall = ratio(last, first)
    cpu = ratio(cpu_series(last), cpu_series(first))
    text = f"{wall:.2f}x/{cpu:.2f}x"
    if target is None:
        return text
    return f"{text} (target <= {target:.3g}x: {verdict(wall, target, at_most=True)})"


def process_target(figures: Figures) -> tuple[float, str]:
    """Issue 39's target for the last cycles run as processes over the first: 1.15x, plus
    what the phase's replay floor grows by between them (its own code run once per earlier
    ask), over the first cycles' median; and how it was made, for the line."""
    if figures.process_replay is None:
        return PROCESS_GROWTH_TARGET, ""
    first, last = figures.process_replay
    grown = statistics.median(last) - statistics.median(first)
    base = statistics.median(figures.first_processes)
    return (
        PROCESS_GROWTH_TARGET + grown / base,
        f" = {PROCESS_GROWTH_TARGET:g}x + replay floor {statistics.median(first):.2f} -> "
        f"{statistics.median(last):.2f} ms",
    )


def cpu_series(samples: Series) -> Series:
    """The CPU times of ``samples`` as a series of their own (for their ratios)."""
    part = Series()
    for cpu in samples.cpu:
        part.add(cpu, cpu)
    return part


def peer_ratios(shape: Shape, figures: Figures) -> list[tuple[str, float]]:
    """LangGraph's median over ours: in process first and last tenth, processes first
    and last."""
    peer, tenth = figures.peer, shape.tenth
    return [
        (
            "in process first tenth",
            ratio(head(peer.in_process, tenth), head(figures.in_process, tenth)),
        ),
        ("last tenth", ratio(tail(peer.in_process, tenth), tail(figures.in_process, tenth))),
        ("processes first", ratio(peer.first_processes, figures.first_processes)),
        ("last", ratio(peer.last_processes, figures.last_processes)),
    ]


def targets_section(
    shapes: list[Shape], results: dict[Shape, Figures], judged: list[Shape], no_peer: str | None
) -> list[str]:
    """Each target of the issue with its figures; ``no_peer``: why LangGraph was not
    measured (None when it was)."""
    lines = [
        "targets (issues 18 and 39; wall-clock medians of this run; a miss is reported, "
        "never an error):"
    ]
    growth_in, growth_out = [], []
    for shape in judged:
        figures = results[shape]
        value = ratio(tail(figures.in_process, shape.tenth), head(figures.in_process, shape.tenth))
        growth_in.append(
            f"{shape.short} {value:.2f}x {verdict(value, IN_PROCESS_GROWTH_TARGET, at_most=True)}"
        )
        value = ratio(figures.last_processes, figures.first_processes)
        target, floor = process_target(figures)
        growth_out.append(
            f"{shape.short} {value:.2f}x (its target {target:.2f}x{floor}) "
            f"{verdict(value, target, at_most=True)}"
        )
    lines.append(
        f"  1. in process, last tenth <= {IN_PROCESS_GROWTH_TARGET:g}x the first tenth: "
        + "; ".join(growth_in)
    )
    lines.append(
        f"     across processes, last cycles <= {PROCESS_GROWTH_TARGET:g}x the first plus the "
        "phase's replay floor: " + "; ".join(growth_out)
    )
    sizes = []
    for shape in shapes:
        size, at = results[shape].largest_state
        sizes.append(
            f"{shape.short} {size / 1024:,.1f} KiB (pause {at}) "
            f"{verdict(size, STATE_SIZE_TARGET, at_most=True)}"
        )
    lines.append(
        f"     the state file at most {STATE_SIZE_TARGET // 1024} KiB at every pause "
        "(issue 39): " + "; ".join(sizes)
    )
    if no_peer is not None:
        lines.append(
            f"  2. ours >= {PEER_TARGET:g}x faster than LangGraph: not measured ({no_peer})"
        )
        return lines
    lines.append(
        f"  2. ours >= {PEER_TARGET:g}x faster than LangGraph (its median / ours), every shape:"
    )
    for shape in shapes:
        peer = results[shape].peer
        if peer is None or isinstance(peer, str):
            lines.append(f"     {shape.short}: not measured ({peer or 'no peer'})")
            continue
        lines.append(
            f"     {shape.short}: "
            + ", ".join(
                f"{name} {value:.2f}x {verdict(value, PEER_TARGET, at_most=False)}"
                for name, value in peer_ratios(shape, results[shape])
            )
        )
    return lines


# -- main --------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument(
        "--shapes",
        default=None,
        help=f"comma-separated phases:N and loop:N (default {DEFAULT_SHAPES}; with --quick "
        f"{QUICK_SHAPES})",
    )
    parser.add_argument(
        "--asks",
        type=int,
        default=None,
        help="issue 39's two shapes at this size: N phases and one phase asking N times "
        "(5000 as the issue says; smaller for a quick look); instead of --shapes",
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"smaller runs for a smoke run ({QUICK_SHAPES})"
    )
    parser.add_argument(
        "--process-samples",
        type=int,
        default=None,
        help=f"cycles run as processes at each end of a run ({PROCESS_SAMPLES}; at most a "
        "tenth of the run's cycles; with --quick 5)",
    )
    parser.add_argument(
        "--dir", type=Path, default=None, help="where the temporary work directories go (TMPDIR)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument(
        "--peers",
        action="store_true",
        help="also measure the same shapes on LangGraph (pip install -r "
        "bench/peers/requirements.txt), each right after ours",
    )
    args = parser.parse_args(argv)
    if args.asks is not None and args.shapes is not None:
        parser.error("give --asks N or --shapes, not both")
    if args.asks is not None and args.asks < 3:
        parser.error(f"--asks {args.asks}: give N >= 3")
    chosen = args.shapes
    if args.asks is not None:
        chosen = f"phases:{args.asks},loop:{args.asks}"
    try:
        shapes = parse_shapes(chosen or (QUICK_SHAPES if args.quick else DEFAULT_SHAPES))
    except ValueError as exc:
        parser.error(f"--shapes: {exc}")
    if args.process_samples is not None and args.process_samples < 0:
        parser.error("--process-samples must be >= 0")

    root = Path(tempfile.mkdtemp(prefix="long-runs-", dir=args.dir))
    try:
        return run(args, shapes, root)
    except BenchFailure as exc:
        print(f"long_runs: a workflow failed: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"(kept {root})", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)


def process_env(root: Path, workflows: Path) -> dict[str, str]:
    """The processes' environment: bytecode compiled once into a prefix in the temporary
    directory (as after a regular install, nothing written into the source tree), and
    the workflow files' directory on PYTHONPATH."""
    env = dict(os.environ)
    for key in ("ORCHESTRATOR_CRASH_AT", "ORCHESTRATOR_CRASH_LOG", "PYTHONPROFILEIMPORTTIME"):
        env.pop(key, None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(workflows), env.get("PYTHONPATH")) if p)
    return env


def run(args: argparse.Namespace, shapes: list[Shape], root: Path) -> int:
    began = time.perf_counter()
    load_before = load_average()
    progress: Callable[[str], None] = lambda text: print(f"... {text}", file=sys.stderr)  # noqa: E731
    wanted = args.process_samples
    if wanted is None:
        wanted = 5 if args.quick else PROCESS_SAMPLES
    directory, workflows = write_workflows(root, shapes)
    env = process_env(root, directory)
    console = Path(sys.executable).parent / "orchestrate"
    cli = [str(console)] if console.exists() else [sys.executable, "-m", "orchestrator"]
    peers = args.peers and langgraph_installed()
    progress("warm-up: one in-process cycle and one process per shape")
    warm_up(shapes, workflows, root, cli, env)
    header_peer = peer_header(root) if peers else (INSTALL_HINT if args.peers else None)

    results: dict[Shape, Figures] = {}
    for shape in shapes:
        samples = min(wanted, shape.tenth)
        progress(f"{shape.title}: in process, {shape.cycles} cycles")
        in_process, whole, states, largest = in_process_run(shape, workflows[shape], root)
        first_write, last_write = write_floor(root, states, WRITE_FLOOR_SAMPLES)
        first_cycles, last_cycles = captured_tenths(shape, workflows[shape], root)
        first_group, last_group = group_floor(root, first_cycles), group_floor(root, last_cycles)
        progress(f"{shape.title}: {samples} + {samples} cycles as processes")
        first, last, first_floor, last_floor = cross_process_run(
            shape, workflows[shape], root, samples, cli, env
        )
        figures = Figures(in_process, whole, first, last, first_floor, last_floor)
        figures.first_write, figures.last_write = first_write, last_write
        figures.first_group, figures.last_group = first_group, last_group
        figures.state_sizes = (len(states[0]), len(states[1]))
        figures.largest_state = largest
        if shape.kind == "loop":
            figures.first_replay, figures.last_replay = replay_floor(
                shape, workflows[shape], WRITE_FLOOR_SAMPLES
            )
            figures.replayed = shape.middles
            count = len(first)
            figures.process_replay = (
                None
                if count == 0
                else replay_floor(
                    shape,
                    workflows[shape],
                    WRITE_FLOOR_SAMPLES,
                    at=(max(1, count // 2), shape.cycles - count // 2),
                )
            )
        if peers:
            figures.peer = measure_peer(shape, samples, root, env, progress)
        results[shape] = figures

    load_after = load_average()
    judged = [
        max((s for s in shapes if s.kind == kind), key=lambda s: s.size)
        for kind in ("phases", "loop")
        if any(s.kind == kind for s in shapes)
    ]
    print()
    print(
        f"long_runs: {len(shapes)} shapes; Python {platform.python_version()} "
        f"({sys.executable}); {os.cpu_count()} CPUs; 1-min load avg {load_before:.2f} before, "
        f"{load_after:.2f} after; the bench took {time.perf_counter() - began:.0f} s"
    )
    if max(load_before, load_after) > 0.5 * (os.cpu_count() or 1):
        print(
            "NOTE: the machine was busy with other work during this run: every figure is "
            "inflated; run again when it is idle"
        )
    print(f"work directories under {root.parent} ({fs_type(root)})")
    print(
        "a cycle: respond to the pending request, then resume until the next pause (or the "
        "end); only cycles that end in a pause are counted. In process: "
        "WorkflowHarness.respond + WorkflowHarness.resume (a fresh Engine, which takes the "
        "state the last pause left while the file holds it). Processes: respond + "
        f"'{' '.join(cli)} resume --workdir D' until it exits 42, bytecode cached "
        "(PYTHONPYCACHEPREFIX in the temp dir), as installed."
    )
    if header_peer:
        print(header_peer)
    for shape in shapes:
        print()
        for line in shape_section(shape, results[shape], shape in judged):
            print(line)
    print()
    no_peer = None
    if not peers:
        no_peer = "LangGraph is not installed" if args.peers else "run with --peers"
    for line in targets_section(shapes, results, judged, no_peer):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
