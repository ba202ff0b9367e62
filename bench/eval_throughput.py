"""Regression-run throughput: cases per second of ``eval run`` beside a bare client.

Run it from the repository root with the project's virtualenv::

    .venv/bin/python bench/eval_throughput.py [--cases N] [--rounds N] [--dir DIR]

A fast local agent (a ``ThreadingHTTPServer`` in a process of its own, answering every
``POST /run-case`` at once with the same valid answer of about 1 KB) serves both sides.
At concurrency 1, 4 and 16, each round measures, back to back:

- ``eval run``: the regression run as ``orchestrate eval run`` makes it, in this process
  (an ``Engine`` with the real ``FileBridge`` in a temporary directory): each case asked,
  judged, written atomically and durably, and recorded as a step of the workflow (the
  state saved durably after each one);
- floor: the same requests made by a bare client, stdlib ``http.client``, one connection
  per request as the runner opens, the same number of threads, each answer read whole;
  nothing judged, nothing written.

Every line is the median of ``--rounds`` rounds, in cases per second, with the ratio
floor / run. Figures are printed, never judged: the exit status is 1 only if a run does
not complete with every case answered ok.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from _machine import fs_type, load_average

from orchestrator import Engine
from orchestrator.adapters.file_bridge import FileBridge
from orchestrator.evals.workflow import WORKFLOW_REFERENCE, RegressionRun, run_inputs

CONCURRENCIES = (1, 4, 16)

SERVER = r"""
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *args): pass
    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        case_id = request["case_id"]
        answer = {
            "case_id": case_id, "version": request["version"], "workflow_id": "bench",
            "proposed_actions": [{"action_id": "a1", "action_type": "write",
                "tool_name": "db.update", "params": {"id": case_id}, "risk_level": "low",
                "risk_tags": [], "evidence_refs": [{"kind": "tool_result", "call_id": "c1"}]}],
            "final_output": {"content_type": "text", "content": "done " + case_id},
            "events": [
                {"type": "tool_call", "ts": 1, "call_id": "c1", "tool": "db.query",
                 "args": {"q": "x" * 300}},
                {"type": "tool_result", "ts": 2, "call_id": "c1", "status": "ok",
                 "latency_ms": 1, "payload_summary": {"rows": ["y" * 300]}},
                {"type": "final_output", "ts": 3, "content_type": "text",
                 "content": "done " + case_id}],
        }
        body = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # 16 clients connecting at once must not find it full

server = Server(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=200, help="cases per run (200)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per figure (3)")
    parser.add_argument("--dir", type=Path, default=None, help="where the runs are written")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="eval-bench-", dir=args.dir))
    cases = base / "cases.json"
    ids = [f"case-{n:05d}" for n in range(args.cases)]
    cases.write_text(
        json.dumps([{"id": i, "input": {"user": f"do {i}"}} for i in ids]), encoding="utf-8"
    )
    agent = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    assert agent.stdout is not None
    port = int(agent.stdout.readline())
    print(
        f"eval_throughput: {args.cases} cases, median of {args.rounds} rounds; "
        f"runs on {fs_type(base)}; load average {load_average():.2f} before"
    )
    failed = False
    rows = []
    try:
        for concurrency in CONCURRENCIES:
            run_rates, floor_rates = [], []
            for round_number in range(args.rounds):
                floor_rates.append(bare_client(port, ids, concurrency))
                rate, ok = eval_run(
                    base / f"c{concurrency}-r{round_number}", cases, port, concurrency
                )
                run_rates.append(rate)
                failed |= not ok
            rows.append((concurrency, statistics.median(run_rates), statistics.median(floor_rates)))
    finally:
        agent.kill()
        agent.wait()
    print(f"{'concurrency':>11}  {'eval run':>10}  {'bare client':>11}  {'floor/run':>9}  cases/s")
    for concurrency, run_rate, floor_rate in rows:
        ratio = floor_rate / run_rate
        print(f"{concurrency:>11}  {run_rate:>10.1f}  {floor_rate:>11.1f}  {ratio:>8.1f}x")
    print(f"load average {load_average():.2f} after")
    return 1 if failed else 0


def bare_client(port: int, ids: list[str], concurrency: int) -> float:
    """Cases per second of the same requests made with ``http.client`` alone."""

    def ask(case_id: str) -> None:
        body = json.dumps(
            {
                "case_id": case_id,
                "version": "new",
                "input": {"user": f"do {case_id}"},
                "run_meta": {"run_id": "bench"},
            }
        ).encode()
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            connection.request(
                "POST", "/run-case", body=body, headers={"Content-Type": "application/json"}
            )
            response = connection.getresponse()
            response.read()
            assert response.status == 200
        finally:
            connection.close()

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(ask, ids))
    return len(ids) / (time.perf_counter() - started)


class QuietRun(RegressionRun):
    """The regression run without its progress line."""

    progress_stream: Any = staticmethod(lambda: open(os.devnull, "w"))  # noqa: SIM115


def eval_run(out: Path, cases: Path, port: int, concurrency: int) -> tuple[float, bool]:
    """Cases per second of a whole regression run, and whether every case answered ok."""
    workdir = out / "new"
    workdir.mkdir(parents=True)
    inputs = run_inputs(
        version="new",
        agent={"kind": "http", "base_url": f"http://127.0.0.1:{port}"},
        cases_file=cases,
        out_root=out,
        repo_dir=out,
        concurrency=concurrency,
    )
    engine = Engine(QuietRun, bridge=FileBridge(workdir, QuietRun.name))
    started = time.perf_counter()
    outcome = engine.start(workflow_ref=WORKFLOW_REFERENCE, workdir=workdir, inputs=inputs)
    elapsed = time.perf_counter() - started
    stats = outcome.outputs.get("finish", {})
    ok = outcome.status == "completed" and stats.get("cases_completed") == stats.get("cases_total")
    return stats.get("cases_total", 0) / elapsed, ok


if __name__ == "__main__":
    sys.exit(main())
