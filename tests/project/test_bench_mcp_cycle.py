"""``bench/mcp_cycle.py`` runs end to end at a tiny size and prints every figure; the
values are never looked at (timings depend on the machine)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from support.cli import child_env

BENCH = Path(__file__).resolve().parents[2] / "bench" / "mcp_cycle.py"
LINES = (
    "MCP over stdio: list_pending -> respond -> resume ",
    "command line: pending, respond, resume (3 processes) ",
    "command line: response file, resume (1 process) ",
    "command line (3 processes) / MCP: ",
)


@pytest.mark.slow
def test_the_mcp_cycle_benchmark_runs_and_prints_each_figure() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--cycles", "2"],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for start in LINES:
        assert any(line.startswith(start) for line in done.stdout.splitlines()), start
    assert "n=2" in done.stdout
