"""``bench/pg_runs.py`` runs end to end at tiny sizes and prints every figure beside its
floor. Only that the benchmark works is checked: it exits 0, prints each line, and leaves
no work directory and no schema behind; the values are never looked at (timings depend on
the machine, see ``bench/README.md``)."""

from __future__ import annotations

import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from support.pg_support import server_dsn, unavailable_reason

BENCH = Path(__file__).resolve().parents[2] / "bench" / "pg_runs.py"


pytestmark = pytest.mark.slow


def bench_schemas(prefix: str) -> set[str]:
    import psycopg

    with psycopg.connect(server_dsn()) as conn:
        rows = conn.execute(
            "select nspname from pg_namespace where starts_with(nspname, %s)", (prefix,)
        ).fetchall()
    return {row[0] for row in rows}


def test_pg_runs_bench_prints_each_figure_beside_its_floor(tmp_path: Path) -> None:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    prefix = f"bench_pg_test_{secrets.token_hex(4)}_"  # this test's own: others may run
    command = [sys.executable, str(BENCH), "--server", server_dsn(), "--runs", "4"]
    command += ["--schema-prefix", prefix]
    command += ["--workers", "1,2", "--cycles", "1", "--dir", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("== PostgreSQL runs: ")
    assert lines[1].startswith("1. runs advanced per second: 4 runs of 3 phases")
    for workers in (1, 2):
        assert any(
            line.startswith(f"   {workers} worker(s): ")
            and f" runs/s   floor, {workers} connection(s): " in line
            for line in lines
        ), "\n".join(lines)
    assert any(line.startswith("2. single-run cycle") for line in lines)
    assert any(
        line.startswith("   PostgreSQL store: med ") and "floor, file store: med " in line
        for line in lines
    ), "\n".join(lines)
    assert list(tmp_path.iterdir()) == [], "the bench left its work directories behind"
    assert bench_schemas(prefix) == set(), "the bench left its schemas behind"
