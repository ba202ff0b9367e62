"""What a lock costs a new process: importing filelock, against the bare ``fcntl`` the
resume path uses, beside the floor of starting Python at all.

``orchestrate resume`` runs once per pause in a new process, so every import it makes is
paid at every pause. This prints, for fresh processes of the same interpreter, the
median and p90 wall time of ``python -c pass`` (the floor), of importing ``fcntl`` and
taking a flock, and of importing ``filelock`` and taking a ``FileLock``, each beside the
floor, and the same beside ``orchestrator.cli.main`` and what ``resume`` imports.

    .venv/bin/python bench/lock_import.py [--runs 40]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _machine import load_average

CASES = {
    "python -c pass (floor)": "pass",
    "import fcntl; flock": (
        "import fcntl, os; fd = os.open({lock!r}, os.O_RDWR | os.O_CREAT); "
        "fcntl.flock(fd, fcntl.LOCK_EX)"
    ),
    "import filelock; FileLock": ("import filelock; filelock.FileLock({lock!r}).acquire()"),
    "import orchestrator.cli.main": "import orchestrator.cli.main",
    "what resume imports": (
        "import orchestrator.cli.main, orchestrator.engine.engine, "
        "orchestrator.engine.loader, orchestrator.adapters.file_bridge"
    ),
}


def sample(code: str, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        times.append((time.perf_counter() - start) * 1000)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=40, help="processes per line (default 40)")
    args = parser.parse_args(argv)
    print(f"python {sys.version.split()[0]}, load average {load_average():.2f} before")
    with tempfile.TemporaryDirectory() as scratch:
        lock = str(Path(scratch) / "bench.lock")
        results = {name: sample(code.format(lock=lock), args.runs) for name, code in CASES.items()}
    floor = statistics.median(results["python -c pass (floor)"])
    print(f"{'fresh process':32} {'median ms':>10} {'p90 ms':>8} {'above floor':>12}")
    for name, times in results.items():
        median = statistics.median(times)
        p90 = sorted(times)[max(0, round(0.9 * len(times)) - 1)]
        print(f"{name:32} {median:10.1f} {p90:8.1f} {median - floor:+12.1f}")
    print(f"load average {load_average():.2f} after")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
