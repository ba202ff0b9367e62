"""``orchestrate ui`` with a thousand runs and a 10,000-delta board: how soon the first page
is there, and how long each page takes.

Run it from the repository root with the project's virtualenv::

    .venv/bin/python bench/ui_pages.py [--runs 1000] [--deltas 10000] [--samples 20]

It makes a work directory with one real finished run (the tests' three-phase workflow,
answered in-process) and ``--runs`` finished runs beside it (copies of its history under
other ids), and a task board whose ledger holds ``--deltas`` deltas (built as
``bench/board.py`` builds one). Then, as a person would: it starts ``orchestrate ui``,
opens the printed link, and times each page. Every figure is a median and a p90 over
``--samples`` requests, beside its floor from the same run:

- start: from spawning ``orchestrate ui`` to the printed link, and to the first page
  served; floor: ``python -c pass``;
- each page (runs list, the list filtered, a run, the board, the board's live refresh);
  floor: the server's round trip for its smallest file (``/static/ui.css``).

Nothing here is an assertion on timing.
"""

from __future__ import annotations

import argparse
import http.client
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlencode, urlsplit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))


def finished_run(workdir: Path) -> str:
    """One real run of the tests' Chatter workflow, answered in-process: its id."""
    from orchestrator.adapters.file_bridge import FileBridge
    from orchestrator.engine.engine import Engine
    from orchestrator.testing import MockAgentInvoker
    from support.store_flows import Chatter, echo_answer

    invoker = MockAgentInvoker({"echo": echo_answer})
    engine = Engine(Chatter, bridge=FileBridge(workdir, Chatter.name), invoker=invoker)
    outcome = engine.start(
        workflow_ref=f"{REPO / 'tests' / 'support' / 'store_flows.py'}:Chatter", workdir=workdir
    )
    assert outcome.status == "completed", outcome.message
    (run,) = (workdir / ".orchestrator" / "runs").iterdir()
    return run.name


def many_runs(workdir: Path, original: str, count: int) -> None:
    runs = workdir / ".orchestrator" / "runs"
    state = (runs / original / "state.json").read_bytes()
    for number in range(count):
        copy = runs / f"copy-{number:05d}"
        copy.mkdir()
        (copy / "state.json").write_bytes(state)


def big_board(workdir: Path, deltas: int) -> None:
    from orchestrator.board.board import Board

    spec = importlib.util.spec_from_file_location("bench_board", REPO / "bench" / "board.py")
    assert spec is not None and spec.loader is not None
    bench_board = importlib.util.module_from_spec(spec)
    sys.modules["bench_board"] = bench_board
    spec.loader.exec_module(bench_board)
    built = workdir / "built"
    bench_board.build_ledger(built, deltas)
    Board.create(workdir / ".board", run_id=str(uuid.uuid4()), objective="a long-lived board")
    for name in ("ledger.ndjson", "ledger.snapshot.json"):
        shutil.copyfile(built / name, workdir / ".board" / name)
    shutil.rmtree(built)


def timed_get(host: str, port: int, target: str, cookie: str) -> float:
    started = time.perf_counter()
    connection = http.client.HTTPConnection(host, port, timeout=60)
    connection.request("GET", target, headers={"Cookie": cookie})
    reply = connection.getresponse()
    reply.read()
    connection.close()
    if reply.status != 200:
        raise SystemExit(f"GET {target}: {reply.status}")
    return (time.perf_counter() - started) * 1000


def summary(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[max(0, int(len(ordered) * 0.9 + 0.5) - 1)]


def line(label: str, samples: list[float], floor: list[float]) -> str:
    median, p90 = summary(samples)
    floor_median, _ = summary(floor)
    times = median / floor_median if floor_median else float("nan")
    return f"{label:<34} {median:9.1f} {p90:9.1f}   floor {floor_median:7.1f}   {times:6.1f}x"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--deltas", type=int, default=10000)
    parser.add_argument("--samples", type=int, default=20)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-ui-"))
    os.environ.setdefault("ORCHESTRATOR_KEY_FILE", str(root / "key" / "state.key"))
    try:
        workdir = root / "work"
        workdir.mkdir()
        original = finished_run(workdir)
        many_runs(workdir, original, args.runs)
        big_board(workdir, args.deltas)
        print(
            f"orchestrate ui: {args.runs + 1} runs, a {args.deltas}-delta board; "
            f"load {os.getloadavg()[0]:.2f}; ms: median, p90"
        )
        starts, firsts, spawns = [], [], []
        for _ in range(max(3, args.samples // 4)):
            began = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            spawns.append((time.perf_counter() - began) * 1000)
            began = time.perf_counter()
            server = subprocess.Popen(
                [sys.executable, "-m", "orchestrator", "ui", "--workdir", str(workdir)],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            assert server.stdout is not None
            url = server.stdout.readline().strip()
            starts.append((time.perf_counter() - began) * 1000)
            parts = urlsplit(url)
            host, port = str(parts.hostname), int(parts.port or 80)
            cookie = f"orchestrator_ui={parts.query.removeprefix('token=')}"
            timed_get(host, port, "/", cookie)
            firsts.append((time.perf_counter() - began) * 1000)
            server.terminate()
            server.wait()
        server = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "ui", "--workdir", str(workdir)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert server.stdout is not None
            parts = urlsplit(server.stdout.readline().strip())
            host, port = str(parts.hostname), int(parts.port or 80)
            cookie = f"orchestrator_ui={parts.query.removeprefix('token=')}"
            pages = {
                "runs list (warm)": "/",
                "runs list, completed, page 3": "/?"
                + urlencode({"status": "completed", "page": 2}),
                "a run": "/run?" + urlencode({"dir": 0, "run": original}),
                "the board": "/board?dir=0",
                "the board's refresh (JSON)": "/board?dir=0&view=json",
            }
            floor = [timed_get(host, port, "/static/ui.css", cookie) for _ in range(args.samples)]
            print(line("start: the link printed", starts, spawns))
            print(line("start: the first page served", firsts, spawns))
            for label, target in pages.items():
                samples = [timed_get(host, port, target, cookie) for _ in range(args.samples)]
                print(line(label, samples, floor))
        finally:
            server.terminate()
            server.wait()
        return 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
