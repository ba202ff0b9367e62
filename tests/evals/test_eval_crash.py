"""``kill -9`` of ``orchestrate eval run`` at random points, then resume: the finished run
is the same as one never interrupted, and no case recorded before a kill is asked again.

The runner is a real process killed with a real SIGKILL once the agent (a loopback
server in this process) has seen a random number of requests. What the run had recorded
at that instant is read from its state file, the engine's source of truth; every later
request is checked against it. Fields that hold wall-clock time or a run's identity
differ between any two runs and are left out of the comparison: ``run_id``,
``generated_at``, ``x_started_at`` and ``stats.duration_ms`` (run.json), ``generated_at``
(manifest), ``started_at`` and ``latency_ms`` of each attempt, ``runner_failure.latency_ms``,
and the server's ``Date`` header kept in a failure meta file (so also that file's size and
hash in the manifest).
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from support import cli
from support.cli import orchestrate
from support.eval_agent_server import AgentServer, CutJSON, Good, Reply

pytestmark = pytest.mark.slow

CASE_IDS = [f"case-{n:02d}" for n in range(24)]
SCRIPT: dict[str, Any] = {cid: [Good(delay=0.03)] for cid in CASE_IDS}
SCRIPT["case-05"] = [Reply(500, b"down", {"Content-Type": "text/plain"}, delay=0.03)]
SCRIPT["case-11"] = [CutJSON()]
SCRIPT["case-17"] = [Good(delay=0.03, payload_bytes=30_000)]


def command(cases: Path, server: AgentServer, out: Path) -> list[str]:
    return [
        "eval", "run", "--cases", str(cases), "--base-url", server.base_url,
        "--version", "new", "--out", str(out), "--concurrency", "3", "--backoff-ms", "1",
    ]  # fmt: skip


def start(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        cli.command(*args),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        env=cli.child_env(),
    )


def recorded_cases(workdir: Path) -> set[str]:
    """The cases the run's state holds a record of (none before it exists)."""
    state_file = workdir / ".eval-run-state.json"
    if not state_file.exists():
        return set()
    state = json.loads(state_file.read_text(encoding="utf-8"))
    data = state["phase_data"]
    found = {r["case_id"] for r in data.get("cases", {}).get("records", [])}
    for entry in data["x_orchestrator"].get("journal", []):
        if entry["kind"] == "step" and entry["fingerprint"] == ["case"]:
            found.add(entry["result"]["case_id"])
    return found


def normalized(run_dir: Path) -> dict[str, Any]:
    """Every file of a run directory, wall-clock and identity fields left out."""
    files: dict[str, Any] = {}
    for path in sorted(run_dir.rglob("*")):
        if path.is_dir():
            continue
        name = path.relative_to(run_dir).as_posix()
        assert not (path.name.startswith(".") and path.name.endswith(".tmp")), name
        data = path.read_bytes()
        if not name.endswith(".json") or name.endswith(".full_body.txt"):
            files[name] = data
            continue
        document = json.loads(data)
        if name == "run.json":
            for key in ("run_id", "generated_at", "x_started_at"):
                document.pop(key)
            document["stats"].pop("duration_ms")
        elif name == "assets/manifest.json":
            document.pop("generated_at")
            for item in document["items"]:
                if item["kind"] == "failure_meta":  # it holds the server's Date header
                    item.pop("size_bytes")
                    item.pop("sha256")
        elif isinstance(document, dict) and document.get("schema_version") == "failure-meta.v1":
            document["headers"].pop("date")
        elif isinstance(document, dict) and document.get("schema_version") == "case.v1":
            for attempt in document["attempts"]:
                attempt.pop("started_at")
                attempt.pop("latency_ms")
            document.get("runner_failure", {}).pop("latency_ms", None)
        files[name] = document
    return files


def run_dir_of(workdir: Path) -> Path:
    (run_dir,) = [p for p in workdir.iterdir() if not p.name.startswith(".")]
    return run_dir


def test_kill_9_at_random_points_then_resume_is_an_uninterrupted_run(tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    chance = random.Random(seed)
    cases = tmp_path / "cases.json"
    cases.write_text(
        json.dumps([{"id": c, "input": {"user": f"do {c}"}} for c in CASE_IDS]), encoding="utf-8"
    )
    with AgentServer(SCRIPT) as server:
        reference = orchestrate(*command(cases, server, tmp_path / "reference"))
        assert reference.returncode == 0, reference.stderr
        expected = normalized(run_dir_of(tmp_path / "reference" / "new"))
        server.log.clear()

        out = tmp_path / "interrupted"
        workdir = out / "new"
        kills = 0
        for round_number in range(3):
            before = len(server.log)
            target = before + chance.randint(1, len(CASE_IDS) // 3)
            child = start(command(cases, server, out))
            while len(server.log) < target and child.poll() is None:
                time.sleep(0.002)
            if child.poll() is None:
                child.send_signal(signal.SIGKILL)
                kills += 1
            child.wait(timeout=60)
            asked_by_now = len(server.log)
            done = recorded_cases(workdir)
            # Carry on by either door: the same command again, or 'orchestrate resume'.
            if round_number % 2 == 0:
                finish = orchestrate(*command(cases, server, out))
            else:
                finish = orchestrate("resume", "--workdir", workdir)
            assert finish.returncode == 0, (seed, finish.stderr)
            asked_again = set(server.log[asked_by_now:]) & done
            assert asked_again == set(), (seed, asked_again)
            assert normalized(run_dir_of(workdir)) == expected, seed
            # The next round starts a fresh run in a fresh place.
            out = tmp_path / f"interrupted-{round_number}"
            workdir = out / "new"
        assert kills >= 1, seed
