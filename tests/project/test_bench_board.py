"""``bench/board.py`` runs end to end at tiny sizes and prints every figure.

Only that the benchmark works is checked: it exits 0 and prints each figure's line. The
values are never looked at (timings depend on the machine, see ``bench/README.md``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "board.py"
FIGURES = (
    "1a ledger appends, 2 writers",
    "1b floor: raw flock+write+fdatasync",
    "1c ledger append latency",
    "1d floor: raw locked append latency",
    "2a load with the snapshot",
    "2b load without it",
    "2c floor: json.loads of every line",
    "3a assign",
    "3b release",
    "3c floor: one raw locked append",
    "3d floor: assign's durable I/O",
    "3e floor: release's durable I/O",
)


pytestmark = pytest.mark.slow


def test_board_bench_prints_every_figure_at_tiny_sizes(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_CRASH")}
    command = [sys.executable, str(BENCH), "--deltas", "200", "--writers", "2"]
    command += ["--appends", "10", "--cycles", "5", "--dir", str(tmp_path)]
    result = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=120, check=False
    )

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    missing = [f for f in FIGURES if not any(line.startswith(f) for line in lines)]
    assert not missing, f"figures not printed: {missing}\n{result.stdout}"
    assert list(tmp_path.iterdir()) == [], "the bench left its temporary boards behind"
