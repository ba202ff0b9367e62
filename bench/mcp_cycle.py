"""The host's round trip through ``orchestrate mcp`` beside the command line's, in one run.

Run it from the repository root with the project's virtualenv (the ``mcp`` extra)::

    .venv/bin/python bench/mcp_cycle.py [--cycles N]

A workflow of N phases, one ask each, is driven to completion twice, each in a work
directory of its own:

1.  MCP over stdio: one ``orchestrate mcp`` process, the official client
    (``ClientSession``); a cycle is ``list_pending`` -> ``respond`` -> ``resume``, three
    tool calls, until the next pause.
2.  the command line, cross-process: a cycle is ``orchestrate pending --json``,
    ``orchestrate respond --text``, ``orchestrate resume``, three processes; and, as the
    cheapest host of the agent bridge files does it, ``.agent-response.json`` written,
    then ``orchestrate resume`` alone.

Every figure is a median and a p90 (nearest rank) over the cycles, in milliseconds of
wall-clock time. The target (the MCP cycle at most a fifth of the command line's
three-process cycle) is printed beside the figures; a missed target never changes the
exit status, which is 1 only when a run does not behave (a tool error, an exit code
other than 42 or 0, a run that does not complete).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

TARGET_RATIO = 5.0
ANSWER = "Done: the benchmark agent answers every ask with this one fixed sentence."

WORKFLOW_SOURCE = '''\
"""Benchmark workflow written by bench/mcp_cycle.py: @PHASES@ phases, one ask each."""

from orchestrator import Workflow, phase

AGENT = "bench-agent"


def _make_phase(number):
    prompt = (
        f"Phase {number} of the MCP cycle benchmark. You are the benchmark agent: read this "
        "prompt, do nothing of substance, and answer with one short sentence."
    )

    def run(self, ctx):
        return {"phase": number, "answer": ctx.ask(AGENT, prompt)}

    return run


_namespace = {
    "__module__": __name__,
    "__qualname__": "McpBench",
    "name": "bench-mcp",
    "agents": (AGENT,),
}
for _number in range(1, @PHASES@ + 1):
    _namespace[f"phase_{_number:03d}"] = phase(_number, name=f"phase_{_number:03d}")(
        _make_phase(_number)
    )
McpBench = type("McpBench", (Workflow,), _namespace)
'''


class BenchFailure(Exception):
    """A run did not behave: the figures would mean nothing."""


def p90(samples: Sequence[float]) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def line(label: str, samples: Sequence[float]) -> str:
    return (
        f"{label:<52} median {statistics.median(samples):8.2f} ms   "
        f"p90 {p90(samples):8.2f} ms   n={len(samples)}"
    )


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}


# -- MCP over stdio ----------------------------------------------------------------------


async def mcp_cycles(workflow: str, workdir: Path, phases: int) -> list[float]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "orchestrator", "mcp", "--workdir", str(workdir), "--workflow", workflow],
        env=environment(),
    )
    samples: list[float] = []
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        outcome = await tool(session, "start_run", {"workflow": workflow})
        run_id = outcome["run_id"]
        while outcome["status"] == "paused":
            started = time.perf_counter_ns()
            pending = (await tool(session, "list_pending", {"run_id": run_id}))["pending"]
            for item in pending:
                answer = {"run_id": run_id, "request_id": item["request_id"], "answer": ANSWER}
                await tool(session, "respond", answer)
            outcome = await tool(session, "resume", {"run_id": run_id})
            samples.append((time.perf_counter_ns() - started) / 1e6)
    if outcome["status"] != "completed" or len(samples) != phases:
        raise BenchFailure(f"MCP: the run ended after {len(samples)} cycles: {outcome}")
    return samples


async def tool(session: ClientSession, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await session.call_tool(name, arguments)
    if result.is_error or not isinstance(result.structured_content, dict):
        text = " ".join(getattr(c, "text", "") for c in result.content)
        raise BenchFailure(f"MCP: {name} failed: {text}")
    return result.structured_content


# -- the command line ----------------------------------------------------------------------


def orchestrate(*args: str, expect: Sequence[int] = (0,)) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        capture_output=True,
        text=True,
        env=environment(),
        check=False,
    )
    if done.returncode not in expect:
        raise BenchFailure(f"orchestrate {args[0]} exited {done.returncode}: {done.stderr.strip()}")
    return done


def cli_cycles(workflow: str, workdir: Path, phases: int, *, three: bool) -> list[float]:
    """Each cycle: ``pending``, ``respond``, ``resume`` (``three``), or the response file
    written and ``resume`` alone."""
    where = ["--workdir", str(workdir)]
    orchestrate("run", workflow, *where, expect=(42,))
    samples: list[float] = []
    code = 42
    while code == 42:
        started = time.perf_counter_ns()
        if three:
            listed = json.loads(orchestrate("pending", *where, "--json").stdout)
            for item in listed:
                request_id = item["request"]["request_id"]
                orchestrate("respond", *where, "--request-id", request_id, "--text", ANSWER)
        else:
            request = json.loads((workdir / ".agent-request.json").read_text(encoding="utf-8"))
            document = {
                "request_id": request["request_id"],
                "version": "1.0",
                "status": "success",
                "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "response": ANSWER,
            }
            (workdir / ".agent-response.json").write_text(json.dumps(document), encoding="utf-8")
        code = orchestrate("resume", *where, expect=(0, 42)).returncode
        samples.append((time.perf_counter_ns() - started) / 1e6)
    if len(samples) != phases:
        raise BenchFailure(f"command line: the run ended after {len(samples)} of {phases} cycles")
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=30, help="phases, one cycle each")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mcp-cycle-") as scratch:
        root = Path(scratch)
        source = root / "mcp_bench_workflow.py"
        source.write_text(WORKFLOW_SOURCE.replace("@PHASES@", str(args.cycles)), encoding="utf-8")
        workflow = f"{source}:McpBench"
        places = {name: root / name for name in ("mcp", "cli3", "cli1")}
        for place in places.values():
            place.mkdir()
        try:
            mcp = anyio.run(mcp_cycles, workflow, places["mcp"], args.cycles)
            three = cli_cycles(workflow, places["cli3"], args.cycles, three=True)
            one = cli_cycles(workflow, places["cli1"], args.cycles, three=False)
        except BenchFailure as failure:
            print(f"mcp_cycle: {failure}", file=sys.stderr)
            return 1
    print(f"mcp_cycle: {args.cycles} cycles each, {sys.version.split()[0]}, {os.cpu_count()} cpus")
    print(line("MCP over stdio: list_pending -> respond -> resume", mcp))
    print(line("command line: pending, respond, resume (3 processes)", three))
    print(line("command line: response file, resume (1 process)", one))
    ratio = statistics.median(three) / statistics.median(mcp)
    ratio_one = statistics.median(one) / statistics.median(mcp)
    met = "met" if ratio >= TARGET_RATIO else "MISSED"
    print(
        f"command line (3 processes) / MCP: {ratio:.1f}x (target: at least {TARGET_RATIO:.0f}x, "
        f"{met}); command line (1 process) / MCP: {ratio_one:.1f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
