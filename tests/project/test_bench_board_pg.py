"""``bench/board_pg.py`` runs end to end at tiny sizes on PostgreSQL and prints every
figure beside its floor. Only that the benchmark works is checked (exit 0, each figure's
line, its schema dropped); the values are never looked at.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from support.pg_support import server_dsn

BENCH = Path(__file__).resolve().parents[2] / "bench" / "board_pg.py"
FIGURES = (
    "1a board deltas/s, 2 writers",
    "1b floor: bare INSERT+COMMIT of the same rows, 2 writers",
    "1c board append latency",
    "1d floor: bare INSERT+COMMIT latency",
)


pytestmark = pytest.mark.slow


def test_board_pg_bench_prints_every_figure_at_tiny_sizes(pg_dsn: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_CRASH")}
    command = [sys.executable, str(BENCH), "--store", server_dsn()]
    prefix = f"bench_board_test_{secrets.token_hex(4)}_"  # this test's own: others may run
    command += ["--writers", "2", "--deltas", "10", "--rounds", "1", "--schema-prefix", prefix]
    result = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    missing = [f for f in FIGURES if not any(line.startswith(f) for line in lines)]
    assert not missing, f"figures not printed: {missing}\n{result.stdout}"
    import psycopg

    with psycopg.connect(server_dsn()) as conn:
        left = conn.execute(
            "select count(*) from pg_namespace where starts_with(nspname, %s)", (prefix,)
        ).fetchone()
    assert left == (0,), "the bench left its schema behind"
