"""Pause-and-resume cycle benchmark: in-process, cross-process, and the floors beside them.

Run it from the repository root with the project's virtualenv::

    .venv/bin/python bench/resume_cycle.py [--cycles N] [--phases N] [--profile] [--peers]

One run prints one table. Every figure is a median and a p90 (nearest rank) over ``n``
samples of wall-clock time, in milliseconds, with the median CPU time beside it (this
process's for in-process lines, the child's for subprocess lines: less disturbed when the
machine is busy), all measured in the same run so that they can be compared:

1.  in-process: respond + ``Engine.resume()`` until the next pause, real ``FileBridge``
    in a temporary directory, ``invoker=None`` (every ask pauses, state written durably).
1b. in-process with ``MockAgentInvoker``: time from one ask to the next (answer recorded
    durably, phase completed, next phase run up to its ask).
2.  cross-process: respond + ``orchestrate resume`` as a real subprocess (exit 42), with
    the console script and with ``python -m orchestrator``, interleaved; with bytecode
    cached (as installed) and, when the environment sets PYTHONDONTWRITEBYTECODE, also as
    inherited (every process then compiles the editable checkout's sources).
3.  floors: the atomic durable write of the same state bytes, one pause's whole durable
    I/O, ``python -c pass``, and the imports ``resume`` needs, each in a fresh process;
    then ``-X importtime`` of one real ``resume`` (top 10 cumulative).

``--peers`` also measures the same workflow on LangGraph (``bench/peers/``), right after
ours, and prints its lines with the ratios; without its requirements it says how to install.

Targets are printed beside the figures; a missed target never changes the exit status.
The exit status is 1 only if the benchmark workflow itself does not behave (a resume
that fails, an unexpected exit code, a run that does not complete with every output).
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import io
import itertools
import json
import math
import os
import platform
import pstats
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import Any

from _group_floor import Capture, GroupFloor, Operation
from _machine import Series, fs_type, load_average
from peers import measure_peers, peer_lines

from orchestrator import Engine
from orchestrator.adapters.file_bridge import FileBridge
from orchestrator.testing import MockAgentInvoker

IN_PROCESS_TARGET_MS = 1.0
CROSS_PROCESS_TARGET_MS = 80.0
GROUP_FLOOR_RATIO = 1.5
IMPORT_FLOOR_RATIO = 1.1
EXIT_PAUSED = 42
RESPONSE_FILE = ".agent-response.json"
REQUEST_FILE = ".agent-request.json"
ANSWER = (
    "Done. The benchmark agent read the prompt, did nothing of substance, and answers with "
    "this fixed paragraph of about two hundred characters so that every response is alike."
)

# The workflow under test. It is written to a temporary file so that the CLI can load it by
# path (``/tmp/.../wf.py:Bench``); the in-process figures import that same file.
WORKFLOW_SOURCE = '''\
"""Benchmark workflow written by bench/resume_cycle.py: @PHASES@ phases, one ask each."""

from orchestrator import Workflow, phase

PHASES = @PHASES@
AGENT = "bench-agent"


def _prompt(number):
    text = (
        f"Phase {number} of {PHASES} of the resume-cycle benchmark. Read the notes of the "
        "earlier phases, then answer with one short paragraph that the next phase can use. "
    )
    return text * 2  # about 300 characters; the contract asks for at least 100


def _make_phase(number):
    prompt = _prompt(number)

    def run(self, ctx):
        answer = ctx.ask(AGENT, prompt)
        return {"phase": number, "answer_chars": len(answer)}

    return run


_namespace = {
    "__module__": __name__,
    "__qualname__": "Bench",
    "name": "bench-resume",
    "agents": (AGENT,),
    "purpose": "resume-cycle benchmark",
}
for _number in range(1, PHASES + 1):
    _namespace[f"phase_{_number:03d}"] = phase(_number, name=f"phase_{_number:03d}")(
        _make_phase(_number)
    )
Bench = type("Bench", (Workflow,), _namespace)
'''


class BenchFailure(Exception):
    """The workflow did not behave: the benchmark's numbers would mean nothing."""


# -- small helpers -----------------------------------------------------------------------


def now_text() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def ms(ns: int) -> float:
    return ns / 1e6


def children_cpu_ms() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1000


def p90(samples: Sequence[float]) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def write_response(workdir: Path, request_id: str) -> None:
    """What a host of the agent bridge files does: write ``.agent-response.json`` (shape of
    WorkflowHarness.respond)."""
    document = {
        "request_id": request_id,
        "version": "1.0",
        "status": "success",
        "created_at": now_text(),
        "response": ANSWER,
    }
    (workdir / RESPONSE_FILE).write_text(json.dumps(document), encoding="utf-8")


def pending_request_id(workdir: Path) -> str:
    data = json.loads((workdir / REQUEST_FILE).read_text(encoding="utf-8"))
    return str(data["request_id"])


def state_path(workdir: Path) -> Path:
    return workdir / ".bench-resume-state.json"


def load_workflow_file(path: Path) -> type[Any]:
    spec = importlib.util.spec_from_file_location("_resume_cycle_workflow", path)
    if spec is None or spec.loader is None:
        raise BenchFailure(f"cannot load {path}")
    module: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Bench  # type: ignore[no-any-return]


def new_engine(workflow: type[Any], workdir: Path, invoker: Any = None) -> Engine:
    return Engine(workflow, bridge=FileBridge(workdir, workflow.name), invoker=invoker)


def check_completed(outcome: Any, phases: int, where: str) -> None:
    if outcome.status != "completed" or outcome.exit_code != 0:
        raise BenchFailure(f"{where}: expected completion, got {outcome.status}: {outcome.message}")
    for number in range(1, phases + 1):
        output = outcome.outputs.get(f"phase_{number:03d}")
        if output != {"phase": number, "answer_chars": len(ANSWER)}:
            raise BenchFailure(f"{where}: phase {number} output is {output!r}")


def check_history(workdir: Path, phases: int, where: str) -> None:
    """After a CLI run exits 0: state file gone, history holds every completed phase."""
    if state_path(workdir).exists():
        raise BenchFailure(f"{where}: the state file is still there after exit 0")
    histories = list((workdir / ".orchestrator" / "runs").glob("*/state.json"))
    if len(histories) != 1:
        raise BenchFailure(f"{where}: expected one run history, found {len(histories)}")
    state = json.loads(histories[0].read_text(encoding="utf-8"))
    if len(state.get("completed_phases", [])) != phases:
        raise BenchFailure(f"{where}: history lists {len(state['completed_phases'])} phases")


def fresh_dir(root: Path, name: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))
    return path


# -- 1. in-process ---------------------------------------------------------------------


def in_process_cycles(
    workflow: type[Any],
    ref: str,
    root: Path,
    phases: int,
    wanted: int,
    *,
    one_engine: bool,
) -> tuple[Series, list[bytes]]:
    """Respond + resume until the next pause, in-process; also the state bytes of each pause.

    ``one_engine``: the same ``Engine`` resumes every time, as an in-process host keeps it
    (it re-reads the state only when something else changed it); otherwise a fresh one
    per cycle, which reads the state from disk as a new ``orchestrate`` process does.
    """
    samples = Series()
    states: list[bytes] = []
    while len(samples) < wanted:
        workdir = fresh_dir(root, "inproc")
        engine = new_engine(workflow, workdir)
        outcome = engine.start(workflow_ref=ref, workdir=workdir)
        while outcome.status == "paused":
            if outcome.exit_code != EXIT_PAUSED:
                raise BenchFailure(f"in-process: paused with exit code {outcome.exit_code}")
            states.append(state_path(workdir).read_bytes())
            request_id = outcome.pending[0].request_id
            start, cpu = time.perf_counter_ns(), time.process_time_ns()
            write_response(workdir, request_id)
            if not one_engine:
                engine = new_engine(workflow, workdir)  # a new process: nothing handed over
            outcome = engine.resume()
            elapsed, cpu = time.perf_counter_ns() - start, time.process_time_ns() - cpu
            if outcome.status == "paused" and len(samples) < wanted:
                samples.add(ms(elapsed), ms(cpu))  # the last cycle completes: not a pause
        check_completed(outcome, phases, "in-process run")
        shutil.rmtree(workdir)
    return samples, states


def in_process_invoker_asks(
    workflow: type[Any], ref: str, root: Path, phases: int, wanted: int
) -> Series:
    """Time from one in-process ask to the next (durable record, next phase, next ask)."""
    samples = Series()
    while len(samples) < wanted:
        stamps: list[tuple[int, int]] = []

        def answer(prompt: str, stamps: list[tuple[int, int]] = stamps) -> str:
            stamps.append((time.perf_counter_ns(), time.process_time_ns()))
            return ANSWER

        workdir = fresh_dir(root, "invoker")
        engine = new_engine(workflow, workdir, MockAgentInvoker({"bench-agent": answer}))
        outcome = engine.start(workflow_ref=ref, workdir=workdir)
        check_completed(outcome, phases, "in-process invoker run")
        if len(stamps) != phases:
            raise BenchFailure(f"in-process invoker: {len(stamps)} asks for {phases} phases")
        for a, b in itertools.pairwise(stamps):
            if len(samples) < wanted:
                samples.add(ms(b[0] - a[0]), ms(b[1] - a[1]))
        shutil.rmtree(workdir)
    return samples


def profile_one_resume(workflow: type[Any], ref: str, root: Path, phases: int) -> str:
    """cProfile of one in-process ``Engine.resume`` half-way through a run (top 15, cumulative)."""
    workdir = fresh_dir(root, "profile")
    outcome = new_engine(workflow, workdir).start(workflow_ref=ref, workdir=workdir)
    for _ in range(max(0, phases // 2 - 1)):
        write_response(workdir, outcome.pending[0].request_id)
        outcome = new_engine(workflow, workdir).resume()
    write_response(workdir, outcome.pending[0].request_id)
    engine = new_engine(workflow, workdir)
    profiler = cProfile.Profile()
    profiler.enable()
    outcome = engine.resume()
    profiler.disable()
    if outcome.status != "paused":
        raise BenchFailure(f"profiled resume: expected a pause, got {outcome.status}")
    size = state_path(workdir).stat().st_size
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(15)
    shutil.rmtree(workdir)
    return f"cProfile of one Engine.resume at phase {outcome.pending[0].phase} " + (
        f"(state {size / 1024:.0f} KiB), top 15 by cumulative time:\n{out.getvalue()}"
    )


# -- 2. cross-process ------------------------------------------------------------------


def clean_env() -> dict[str, str]:
    env = dict(os.environ)
    for key in ("ORCHESTRATOR_CRASH_AT", "ORCHESTRATOR_CRASH_LOG", "PYTHONPROFILEIMPORTTIME"):
        env.pop(key, None)
    return env


def run_process(
    command: list[str], cwd: Path, env: dict[str, str]
) -> tuple[int, float, float, str]:
    """Exit code, wall ms, the child's CPU ms (user + system), standard error."""
    cpu = children_cpu_ms()
    start = time.perf_counter_ns()
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter_ns() - start
    cpu = children_cpu_ms() - cpu
    return result.returncode, ms(elapsed), cpu, result.stderr.decode("utf-8", "replace")


def cli_start(cli: list[str], ref: str, root: Path, env: dict[str, str], name: str) -> Path:
    workdir = fresh_dir(root, name)
    code, _, _, err = run_process([*cli, "run", ref, "--workdir", str(workdir)], workdir, env)
    if code != EXIT_PAUSED:
        raise BenchFailure(f"{name}: 'orchestrate run' exited {code}, not 42:\n{err}")
    return workdir


def cross_process_cycles(
    variants: dict[str, tuple[list[str], dict[str, str]]],
    workflow: type[Any],
    ref: str,
    root: Path,
    phases: int,
    wanted: int,
    floors: dict[str, tuple[list[str], dict[str, str]]],
) -> tuple[dict[str, Series], dict[str, Series]]:
    """Respond + ``orchestrate resume`` until the next pause (exit 42), each variant its own
    instance, variants interleaved cycle by cycle so that all see the same machine load;
    after each round, one process of each of ``floors`` (their samples come second)."""
    samples = {name: Series() for name in variants}
    floor_samples = {name: Series() for name in floors}
    while any(len(s) < wanted for s in samples.values()):
        workdirs = {
            name: cli_start(cli, ref, root, env, f"cli{index}")
            for index, (name, (cli, env)) in enumerate(variants.items())
        }
        done: set[str] = set()
        while len(done) < len(variants):
            for name, (cli, env) in variants.items():
                if name in done:
                    continue
                workdir = workdirs[name]
                if len(samples[name]) >= wanted:
                    finish_in_process(workflow, workdir, phases, name)
                    done.add(name)
                    continue
                request_id = pending_request_id(workdir)
                start = time.perf_counter_ns()
                write_response(workdir, request_id)
                command = [*cli, "resume", "--workdir", str(workdir)]
                code, _, cpu, err = run_process(command, workdir, env)
                elapsed = time.perf_counter_ns() - start
                if code == EXIT_PAUSED:
                    samples[name].add(ms(elapsed), cpu)
                elif code == 0:
                    check_history(workdir, phases, name)
                    done.add(name)
                else:
                    raise BenchFailure(f"{name}: 'orchestrate resume' exited {code}:\n{err}")
            for name, (command, env) in floors.items():
                if len(floor_samples[name]) < wanted:
                    floor_samples[name].extend_from(floor_processes(command, 1, root, env))
        for workdir in workdirs.values():
            shutil.rmtree(workdir)
    return samples, floor_samples


def finish_in_process(workflow: type[Any], workdir: Path, phases: int, where: str) -> None:
    """Enough cycles measured: drive the rest of a CLI instance in-process, to check it ends."""
    outcome = None
    while outcome is None or outcome.status == "paused":
        write_response(workdir, pending_request_id(workdir))
        outcome = new_engine(workflow, workdir).resume()
    check_completed(outcome, phases, f"{where} (finished in-process)")


# -- 3. floors -------------------------------------------------------------------------


def raw_atomic_write(directory: Path, name: str, data: bytes) -> None:
    """Write, fsync, rename, fsync the directory: the least a durable state write costs."""
    target = directory / name
    tmp = directory / f".{name}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, target)
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def floor_atomic_writes(root: Path, states: list[bytes]) -> Series:
    directory = fresh_dir(root, "floor-write")
    samples = Series()
    for data in states:
        start, cpu = time.perf_counter_ns(), time.process_time_ns()
        raw_atomic_write(directory, ".bench-resume-state.json", data)
        samples.add(ms(time.perf_counter_ns() - start), ms(time.process_time_ns() - cpu))
    shutil.rmtree(directory)
    return samples


def captured_cycles(workflow: type[Any], ref: str, root: Path) -> list[list[Operation]]:
    """One in-process run (one engine), recording what each cycle hands to the durable
    layer: the same files, bytes and order as the timed runs, for the group floor."""
    workdir = fresh_dir(root, "capture")
    capture = Capture(workdir)
    with capture.installed():
        engine = new_engine(workflow, workdir)
        outcome = engine.start(workflow_ref=ref, workdir=workdir)
        while outcome.status == "paused":
            write_response(workdir, outcome.pending[0].request_id)
            capture.next_cycle()
            outcome = engine.resume()
        capture.cycles.pop()  # the last one completes the run
    shutil.rmtree(workdir)
    return capture.cycles


def floor_processes(command: list[str], count: int, cwd: Path, env: dict[str, str]) -> Series:
    samples = Series()
    for _ in range(count):
        code, elapsed, cpu, err = run_process(command, cwd, env)
        if code != 0:
            raise BenchFailure(f"{' '.join(command)} exited {code}:\n{err}")
        samples.add(elapsed, cpu)
    return samples


#: The package's folders by role (``docs/architecture.md``): each one's ``__init__`` is a
#: module that resume imports on its way to the modules inside.
WING_PACKAGES = frozenset(
    f"orchestrator.{wing}" for wing in ("board", "cli", "engine", "evidence", "formats", "storage")
)


def importtime_of_resume(
    workflow: type[Any], ref: str, root: Path, env: dict[str, str]
) -> tuple[list[tuple[float, float, str]], float, set[str]]:
    """``python -X importtime -m orchestrator resume`` on a real pause: (cumulative ms,
    self ms, name) of every import, the total of self times, and the modules imported."""
    workdir = fresh_dir(root, "importtime")
    outcome = new_engine(workflow, workdir).start(workflow_ref=ref, workdir=workdir)
    write_response(workdir, outcome.pending[0].request_id)
    command = [sys.executable, "-X", "importtime", "-m", "orchestrator", "resume"]
    code, _, _, err = run_process([*command, "--workdir", str(workdir)], workdir, env)
    if code != EXIT_PAUSED:
        raise BenchFailure(f"importtime resume exited {code}:\n{err}")
    rows = []
    for line in err.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        self_us, cumulative_us, name = line.split(":", 1)[1].split("|", 2)
        name = name.rstrip()[1:]  # one space after the bar, then two per nesting level
        rows.append((int(cumulative_us) / 1000, int(self_us) / 1000, name))
    total = sum(row[1] for row in rows)
    modules = {row[2].strip() for row in rows}
    shutil.rmtree(workdir)
    return rows, total, modules


# -- report ----------------------------------------------------------------------------


def row(label: str, samples: Series, target: float | None = None) -> str:
    median = statistics.median(samples)
    high = p90(samples)
    cpu = statistics.median(samples.cpu)
    if target is None:
        verdict = ""
        target_text = "-"
    else:
        target_text = f"<= {target:g}"
        verdict = "met" if median <= target else f"MISSED x{median / target:.1f}"
    return (
        f"{label:<66} {len(samples):>4} {median:>8.2f} {high:>8.2f} {cpu:>8.2f}  "
        f"{target_text:>6}  {verdict}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--cycles",
        type=int,
        default=49,
        help="cycles measured per figure (default 49: every pause of one 50-phase run; "
        "spawn floors use max(N, 30))",
    )
    parser.add_argument("--phases", type=int, default=50, help="phases of the workflow (50)")
    parser.add_argument(
        "--profile", action="store_true", help="also print a cProfile of one in-process resume"
    )
    parser.add_argument(
        "--dir", type=Path, default=None, help="where the temporary work directories go (TMPDIR)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument(
        "--peers",
        action="store_true",
        help="also measure the same workflow on LangGraph (pip install -r "
        "bench/peers/requirements.txt), right after ours, and print the ratios",
    )
    args = parser.parse_args(argv)
    if args.phases < 2 or args.cycles < 1:
        parser.error("--phases must be >= 2 and --cycles >= 1")

    root = Path(tempfile.mkdtemp(prefix="resume-cycle-", dir=args.dir))
    try:
        return run(args, root)
    except BenchFailure as exc:
        print(f"resume_cycle: the workflow failed: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"(kept {root})", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)


def run(args: argparse.Namespace, root: Path) -> int:
    phases, cycles = args.phases, args.cycles
    spawns = max(cycles, 30)
    load_before = load_average()
    workflow_file = root / "wf.py"
    workflow_file.write_text(WORKFLOW_SOURCE.replace("@PHASES@", str(phases)), encoding="utf-8")
    ref = f"{workflow_file}:Bench"
    workflow = load_workflow_file(workflow_file)
    progress: Callable[[str], None] = lambda text: print(f"... {text}", file=sys.stderr)  # noqa: E731

    # Two start-up conditions for the subprocesses. "cached": bytecode compiled once into
    # a prefix in the temporary directory, as after a regular 'pip install' (which
    # compiles it); nothing is written into the source tree. "inherited": the environment
    # as it is; with PYTHONDONTWRITEBYTECODE set, an editable checkout has no __pycache__
    # and every process compiles orchestrator/*.py from source.
    inherited = clean_env()
    cached = {**inherited, "PYTHONPYCACHEPREFIX": str(root / "pycache")}
    cached.pop("PYTHONDONTWRITEBYTECODE", None)
    no_bytecode = bool(inherited.get("PYTHONDONTWRITEBYTECODE")) or sys.flags.dont_write_bytecode
    envs = {"cached": cached}
    if no_bytecode:
        envs["inherited"] = inherited

    # Warm-up: the converter builds its hooks on first use; a long-lived host pays it once.
    warm = fresh_dir(root, "warm")
    outcome = new_engine(workflow, warm).start(workflow_ref=ref, workdir=warm)
    write_response(warm, outcome.pending[0].request_id)
    new_engine(workflow, warm).resume()
    shutil.rmtree(warm)

    progress(f"1. in-process pause/resume, {cycles} cycles of a {phases}-phase workflow")
    inproc, states = in_process_cycles(workflow, ref, root, phases, cycles, one_engine=True)
    # Right after line 1, not interleaved with it: each cycle's syncs would then also flush
    # the other's unsynced appends, and both would pay for two.
    group_floor = GroupFloor(root, captured_cycles(workflow, ref, root))
    for _ in inproc:
        group_floor.replay()
    group_floor_samples = group_floor.close()
    inproc_fresh, _ = in_process_cycles(workflow, ref, root, phases, cycles, one_engine=False)
    progress("1b. in-process invoker")
    invoker = in_process_invoker_asks(workflow, ref, root, phases, cycles)

    console = Path(sys.executable).parent / "orchestrate"
    entry_points: dict[str, list[str]] = {}
    if console.exists():
        entry_points[f"{console.parent.parent.name}/bin/orchestrate"] = [str(console)]
    entry_points["python -m orchestrator"] = [sys.executable, "-m", "orchestrator"]
    variants = {
        f"{entry} resume ({label})": (cli, env)
        for label, env in envs.items()
        for entry, cli in entry_points.items()
    }
    importtimes = {
        label: importtime_of_resume(workflow, ref, root, env) for label, env in envs.items()
    }
    ours = sorted(m for m in importtimes["cached"][2] if m.startswith("orchestrator."))
    import_floors = {
        label: ([sys.executable, "-c", "import " + ", ".join(ours)], env)
        for label, env in envs.items()
    }
    progress(
        f"2. cross-process, {cycles} cycles per variant: {', '.join(variants)}; each round "
        "followed by the import floor (3c')"
    )
    cross, resume_imports = cross_process_cycles(
        variants, workflow, ref, root, phases, cycles, import_floors
    )

    progress(f"3. floors ({spawns} spawns each)")
    write_floor = floor_atomic_writes(root, states)
    bare = floor_processes([sys.executable, "-c", "pass"], spawns, root, cached)
    cli_import = floor_processes(
        [sys.executable, "-c", "import orchestrator.cli.main"], spawns, root, cached
    )

    sizes = sorted(len(s) for s in states)
    # -- --peers: the same workflow on LangGraph (bench/peers/), right after ours --------
    peers = None
    if args.peers:
        peers = measure_peers(
            root=root, phases=phases, cycles=cycles, env=cached, progress=progress
        )
    # -- end --peers ---------------------------------------------------------------------
    load_after = load_average()
    print()
    print(
        f"resume_cycle: {phases}-phase workflow, 1 ask per phase; Python "
        f"{platform.python_version()} ({sys.executable}); {os.cpu_count()} CPUs; "
        f"1-min load avg {load_before:.2f} before, {load_after:.2f} after"
    )
    if max(load_before, load_after) > 0.5 * (os.cpu_count() or 1):
        print(
            "NOTE: the machine was busy with other work during this run: every figure is "
            "inflated; run again when it is idle"
        )
    print(
        f"work directories under {root.parent} ({fs_type(root)}); state file "
        f"{sizes[0] / 1024:.1f}..{sizes[-1] / 1024:.1f} KiB (median "
        f"{statistics.median(sizes) / 1024:.1f} KiB) across the pauses"
    )
    print("cached = bytecode compiled once (PYTHONPYCACHEPREFIX in the temp dir), as installed")
    if no_bytecode:
        print(
            "inherited = this environment as is: PYTHONDONTWRITEBYTECODE is set, so each "
            "process compiles orchestrator/*.py (editable checkout, no __pycache__)"
        )
    print()
    header = (
        f"{'figure (per cycle, ms)':<66} {'n':>4} {'median':>8} {'p90':>8} {'cpu med':>8}  "
        f"{'target':>6}"
    )
    print(header)
    print("-" * (len(header) + 14))
    target = IN_PROCESS_TARGET_MS
    print(row("1  in-process: respond + Engine.resume (FileBridge, fsync)", inproc, target))
    print(row("1' the same with a fresh Engine per cycle (re-reads the state)", inproc_fresh))
    print(row("1b in-process invoker, per ask (MockAgentInvoker, fsync)", invoker, target))
    for name, samples in cross.items():
        print(row(f"2  respond + {name}", samples, CROSS_PROCESS_TARGET_MS))
    print(row("3a floor: write+fsync+rename+dir fsync of the state bytes", write_floor))
    print(
        row("3a' floor: a cycle's durable I/O as one group, raw (see README)", group_floor_samples)
    )
    print(row("3b floor: python -c pass", bare))
    print(row("3c floor: python -c 'import orchestrator.cli.main' (cached)", cli_import))
    for label, samples in resume_imports.items():
        print(row(f"3c' floor: python -c 'import <what resume imports>' ({label})", samples))
    print()
    floor_median = statistics.median(group_floor_samples)
    print(
        f"in-process cycle (1) / its group floor (3a'): {statistics.median(inproc):.2f} / "
        f"{floor_median:.2f} ms = {statistics.median(inproc) / floor_median:.2f}x (target "
        f"<= {GROUP_FLOOR_RATIO:g}x)"
    )
    for label, samples in resume_imports.items():
        name = next(n for n in cross if n.endswith(f"({label})"))
        print(
            f"cross-process cycle ({name}) / its import floor (3c', {label}): "
            f"{statistics.median(cross[name]) / statistics.median(samples):.2f}x (target <= "
            f"{IMPORT_FLOOR_RATIO:g}x)"
        )
    bare_median = statistics.median(bare)
    for label in envs:
        name = next(n for n in cross if n.endswith(f"({label})"))
        cross_median = statistics.median(cross[name])
        imports = statistics.median(resume_imports[label]) - bare_median
        print(
            f"budget, {name}: {cross_median:.1f} ms = interpreter start {bare_median:.1f} + "
            f"imports {imports:.1f} + the rest {cross_median - bare_median - imports:.1f}"
        )
    print(
        "  the rest = the cycle's own work (in-process "
        f"{statistics.median(inproc):.1f} ms warm) + first-use costs of a fresh process "
        "(argparse, workflow file load) + exit"
    )
    print(f"  what resume imports from orchestrator: {', '.join(ours)}")
    per_run = min(cycles, phases - 1)
    fifth = max(1, per_run // 5)
    first_cross = cross[next(iter(cross))]
    print(
        f"growth with the state (first vs last {fifth} of the {per_run} cycles of a run, median "
        f"wall/cpu): in-process {_span(inproc, per_run, fifth, head=True)} -> "
        f"{_span(inproc, per_run, fifth, head=False)}; cross-process "
        f"{_span(first_cross, per_run, fifth, head=True)} -> "
        f"{_span(first_cross, per_run, fifth, head=False)}"
    )
    for label, (rows, total, modules) in importtimes.items():
        wings = sorted(m for m in modules if m.count(".") == 1 and m in WING_PACKAGES)
        print()
        print(
            f"3c'' python -X importtime -m orchestrator resume, one real cycle ({label}): "
            f"{len(rows)} imports, {total:.1f} ms (sum of self); top 10 by cumulative:"
        )
        print(
            f"  {len(modules)} distinct modules, {len(wings)} of them the wings' own packages "
            f"({', '.join(wings)}): a folder costs one module"
        )
        print(f"  {'cumulative ms':>13} {'self ms':>8}  module (indent = nesting)")
        for cumulative, own, module in sorted(rows, key=lambda r: -r[0])[:10]:
            print(f"  {cumulative:>13.1f} {own:>8.2f}  {module}")
    print()
    print(
        f"targets: in-process <= {IN_PROCESS_TARGET_MS:g} ms per cycle, cross-process <= "
        f"{CROSS_PROCESS_TARGET_MS:g} ms per cycle (2-core machine); a miss is reported, "
        "never an error"
    )
    # -- --peers ---------------------------------------------------------------------------
    if args.peers:
        print()
        first_cross = next(iter(cross.values()))
        for line in peer_lines(
            peers,
            row=row,
            ours_in_process=inproc,
            ours_cross_process=first_cross,
            group_floor=group_floor_samples,
        ):
            print(line)
    # -- end --peers -----------------------------------------------------------------------
    if args.profile:
        print()
        print(profile_one_resume(workflow, ref, root, phases))
    return 0


def _span(samples: Series, run: int, count: int, *, head: bool) -> str:
    """Median wall/cpu of the first or last ``count`` of the ``run`` cycles of the first run."""
    pick = slice(0, count) if head else slice(run - count, run)
    wall, cpu = samples[pick], samples.cpu[pick]
    return f"{statistics.median(wall):.1f}/{statistics.median(cpu):.1f} ms"


if __name__ == "__main__":
    raise SystemExit(main())
