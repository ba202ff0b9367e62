"""``bench/long_runs.py`` runs end to end at tiny sizes and prints every figure.

Only that the benchmark works is checked: it exits 0, prints each figure's line and the
targets, and leaves nothing behind. The values are never looked at (timings depend on
the machine, see ``bench/README.md``).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "long_runs.py"
OURS = (
    "ours in process, first tenth (cycles 1-",
    "ours in process, last tenth (cycles ",
    "ours processes, first 1",
    "ours processes, last 1",
    "floor: python -c 'import orchestrator.cli.main', first 1",
    "floor: the same, beside the last 1",
    "whole run in process (run() to completion): ours ",
    "last / first (medians, wall and cpu): ours in process ",
    "floor: a cycle's durable I/O as one group, raw, first tenth",
    "floor: the same, last tenth  ",
    "ours in process / its group floor: first tenth ",
)
REPLAY = (
    "floor: replaying the asks before, first tenth (",
    "with the replay of the asks before (its floor, last - first: ",
)
PEER = (
    "LangGraph in process, first tenth",
    "LangGraph in process, last tenth",
    "LangGraph processes, first 1",
    "LangGraph processes, last 1",
    "LangGraph / ours (medians; target >= 2x): ",
    "in process, 2x as fast as LangGraph is a cycle of at most ",
)


pytestmark = pytest.mark.slow


def run_bench(tmp_path: Path, *extra: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_CRASH")}
    command = [sys.executable, str(BENCH), "--shapes", "phases:5,loop:4"]
    command += ["--process-samples", "1", "--dir", str(tmp_path), *extra]
    result = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr
    assert list(tmp_path.iterdir()) == [], "the bench left its work directories behind"
    return result.stdout.splitlines()


def missing(lines: list[str], wanted: tuple[str, ...], times: int) -> list[str]:
    return [w for w in wanted if sum(line.startswith(w) for line in lines) != times]


def test_long_runs_bench_prints_every_figure_of_each_shape(tmp_path: Path) -> None:
    lines = run_bench(tmp_path)

    assert any(line.startswith("== 5 phases, one ask each: 4 cycles") for line in lines)
    assert any(line.startswith("== one phase asking 4 times in a loop: 3 cycles") for line in lines)
    assert not missing(lines, OURS, 2), "\n".join(lines)
    # The loop's replay floor, beside its write floor: for the loop alone.
    assert not missing(lines, REPLAY, 1), "\n".join(lines)
    assert not any(line.startswith("LangGraph") for line in lines)
    # The state file's largest size at any pause, for each shape.
    assert not missing(lines, ("the state file's largest size at any pause: ",), 2)
    start = next(i for i, line in enumerate(lines) if line.startswith("targets (issues 18 and 39;"))
    targets = lines[start:]
    assert targets[1].startswith("  1. in process, last tenth <= 1.25x the first tenth: 5 phases ")
    assert "; 4 asks in a loop " in targets[1]
    assert targets[2].startswith("     across processes, last cycles <= 1.15x the first plus ")
    assert "replay floor" in targets[2].split("; 4 asks in a loop ")[1]
    assert targets[3].startswith("     the state file at most 64 KiB at every pause (issue 39): ")
    assert targets[4] == "  2. ours >= 2x faster than LangGraph: not measured (run with --peers)"


def test_long_runs_bench_asks_runs_the_two_shapes_of_issue_39(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_CRASH")}
    command = [sys.executable, str(BENCH), "--asks", "4", "--process-samples", "0"]
    result = subprocess.run(
        [*command, "--dir", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("== 4 phases, one ask each: 3 cycles") for line in lines)
    assert any(line.startswith("== one phase asking 4 times in a loop: 3 cycles") for line in lines)
    refused = subprocess.run(
        [*command, "--shapes", "loop:4"], capture_output=True, text=True, check=False
    )
    assert refused.returncode == 2
    assert "give --asks N or --shapes, not both" in refused.stderr


@pytest.mark.slow
def test_long_runs_bench_puts_langgraph_beside_each_shape_or_says_how_to_install(
    tmp_path: Path,
) -> None:
    lines = run_bench(tmp_path, "--peers")

    assert not missing(lines, OURS, 2), "\n".join(lines)
    if importlib.util.find_spec("langgraph") is None:
        assert any(line.startswith("peers: LangGraph is not installed") for line in lines)
        assert not missing(lines, PEER, 0)
    else:
        assert not missing(lines, PEER, 2), "\n".join(lines)
        assert any(line.startswith("     5 phases: in process first tenth ") for line in lines)
        assert any(line.startswith("     4 asks in a loop: in process first ") for line in lines)
