"""In process, what a pause hands the next resume is worth: a phase asking N times.

Run it from the repository root with the project's virtualenv::

    .venv/bin/python bench/sticky_runs.py [--asks 300]

One workflow whose single phase asks N times in a loop (~300-character prompts), driven
by ``WorkflowHarness`` with ``invoker=None`` (a fresh ``Engine`` per resume, as a worker
builds one) two ways, one after the other:

- kept: the harness's pause handoff is left alone, so each resume adopts the state, the
  request index and the journal's rows the last pause left (no read, no parse, no
  signature check);
- cleared: ``harness.handoff.clear()`` before each resume, so each resume reads, verifies
  and parses the state as a new process does (the work of the process itself aside).

Both replay the phase's code from its top at each resume: every earlier ask returns its
recorded answer by position. That replay is printed beside them as the floor: the
workflow's loop run once per earlier ask against the journal, with no engine. A phase
that continued without replay (its frame kept alive across the pause) would save what
the engine spends replaying the phase (``Engine.run_phase``, timed in the kept run); the
last line says how much that is at the last tenth.

Each figure is the median milliseconds of a cycle (respond + resume) over the first and
the last tenth of the run. Nothing is asserted on timings.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator import PhaseContext, Workflow, phase
from orchestrator.testing import WorkflowHarness

ANSWER = "A short answer of about two hundred characters, " * 4
PROMPT = "You are the counter of a benchmark; answer with one line about item number "


def asking_workflow(asks: int) -> type[Workflow]:
    class Asking(Workflow):
        name = "sticky-bench"
        agents = ("counter",)

        @phase(1)
        def loop(self, ctx: PhaseContext) -> int:
            total = 0
            for number in range(asks):
                total += len(ctx.ask("counter", PROMPT + f"{number} " + "x" * 220))
            return total

    Asking.__module__ = __name__
    return Asking


#: Milliseconds the engine spent replaying the phase (``Engine.run_phase``), per cycle.
REPLAYING: list[float] = []


def timed_replay() -> None:
    """Time ``Engine.run_phase``: the phase's code with every earlier ask replayed from
    the journal by the engine (fingerprints checked), up to the pause."""
    from orchestrator.engine.engine import Engine

    plain = Engine.run_phase

    def run_phase(self: Engine, workflow: Any, spec: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            return plain(self, workflow, spec)
        finally:
            REPLAYING.append((time.perf_counter_ns() - start) / 1e6)

    Engine.run_phase = run_phase  # type: ignore[method-assign]


def drive(workflow: type[Workflow], root: Path, *, keep: bool) -> list[float]:
    """Milliseconds of every cycle that ends in a pause, in order."""
    workdir = Path(tempfile.mkdtemp(dir=root))
    harness = WorkflowHarness(workflow, workdir)
    outcome = harness.run()
    samples: list[float] = []
    REPLAYING.clear()
    while outcome.status == "paused":
        start = time.perf_counter_ns()
        for request in outcome.pending:
            harness.respond(request.request_id, ANSWER)
        if not keep:
            harness.handoff.clear()
        outcome = harness.resume()
        if outcome.status == "paused":
            samples.append((time.perf_counter_ns() - start) / 1e6)
    if outcome.status != "completed":
        raise SystemExit(f"the run did not complete: {outcome.message}")
    return samples


def replay_floor(asks: int, at: int) -> float:
    """Milliseconds of the workflow's loop replaying ``at`` recorded asks, no engine."""
    import hashlib

    recorded = {
        hashlib.sha256((PROMPT + f"{n} " + "x" * 220).encode()).hexdigest(): ANSWER
        for n in range(at)
    }
    runs = []
    for _ in range(5):
        start = time.perf_counter_ns()
        total = 0
        for number in range(at):
            prompt = PROMPT + f"{number} " + "x" * 220
            total += len(recorded[hashlib.sha256(prompt.encode()).hexdigest()])
        runs.append((time.perf_counter_ns() - start) / 1e6)
    return statistics.median(runs)


def tenths(samples: list[float]) -> tuple[float, float]:
    tenth = max(1, len(samples) // 10)
    return statistics.median(samples[:tenth]), statistics.median(samples[-tenth:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--asks", type=int, default=300, help="asks of the phase")
    args = parser.parse_args(argv)
    workflow: Any = asking_workflow(args.asks)
    timed_replay()
    with tempfile.TemporaryDirectory() as root:
        kept = tenths(drive(workflow, Path(root), keep=True))
        replaying = tenths(REPLAYING)
        cleared = tenths(drive(workflow, Path(root), keep=False))
    floor = replay_floor(args.asks, args.asks * 95 // 100)
    print(f"in process, a phase asking {args.asks} times: median ms per cycle")
    print(f"  handoff kept     first tenth {kept[0]:8.2f}   last tenth {kept[1]:8.2f}")
    print(f"  handoff cleared  first tenth {cleared[0]:8.2f}   last tenth {cleared[1]:8.2f}")
    print(
        f"  the phase replayed by the engine, kept  first tenth {replaying[0]:8.2f}"
        f"   last tenth {replaying[1]:8.2f}"
    )
    print(f"  replay floor at the last tenth (the loop alone, no engine): {floor:8.2f}")
    print(
        f"  kept vs cleared at the last tenth: {cleared[1] / kept[1]:.2f}x; a phase kept "
        f"alive (no replay) would save at most {replaying[1]:.2f} ms of {kept[1]:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
