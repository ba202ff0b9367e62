"""Crash safety of a long run under real SIGKILLs: a phase asking in a loop, then phases
that ask once each (their requests moved to the run's history in batches).

This is the shape whose saves take what they can from the last save: the requests' and
outputs' lines kept, the journal's entries cut from the record's line a new process read,
the file's long segments hashed on from where they agree with the last save's, a second
mark sought only in what changed. Each kill below leaves a new process to pick those up
from a state some other process wrote.

A baseline run of ``orchestrate drive`` (the handler answers each prompt with a text
made from it, so every run's answers are the same) lists the crash points
(``ORCHESTRATOR_CRASH_AT=count``). Then, for points spread over the whole run, one drive
dies by SIGKILL at the point, and a host finishes the run as a new process per pause
(``orchestrate respond``, then ``orchestrate resume``), so that every state after the
kill is read back by a process that did not write it. The run must end with the
baseline's outputs, every request answered once (none asked again after its answer was
durable, none answered twice), the event log telling the baseline's story, and no file
left over.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from support import sweeps
from support.cli import orchestrate
from support.evidence_support import check_run_evidence, story, without_retries
from support.long_run_support import answer_for, long_workflow

ASKS = 24  # the loop's asks: more than enough for every long-run path of a save
PHASES = 6  # single-ask phases after the loop
POINTS = 36  # crash points killed at, spread over the run
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

HANDLER = """
import json, sys

sys.path.insert(0, @TESTS@)
from support.long_run_support import answer_for

request = json.load(sys.stdin)
print(json.dumps({
    "request_id": request["request_id"],
    "version": "1.0",
    "status": "success",
    "response": answer_for(request["prompt"]),
    "created_at": "2026-01-01T00:00:00Z",
}))
"""


def write_subject(base: Path) -> tuple[str, str]:
    """The workflow file and the handler script; (workflow reference, handler command)."""
    (base / "long.py").write_text(long_workflow(ASKS, PHASES), encoding="utf-8")
    tests = repr(str(Path(__file__).resolve().parents[1]))
    (base / "handler.py").write_text(HANDLER.replace("@TESTS@", tests), encoding="utf-8")
    return f"{base / 'long.py'}:Long", f"{sys.executable} {base / 'handler.py'}"


def drive(
    workdir: Path, subject: tuple[str, str], *, crash_at: str | int | None = None, log: Path
) -> subprocess.CompletedProcess[str]:
    """``orchestrate drive``; with ``crash_at``, killed there (or, with ``count``, listing
    its crash points in ``log``)."""
    reference, handler = subject
    crash = {}
    if crash_at is not None:
        crash = {"ORCHESTRATOR_CRASH_AT": str(crash_at), "ORCHESTRATOR_CRASH_LOG": str(log)}
    return orchestrate(
        "drive", reference, "--workdir", str(workdir), "--handler", handler, env=crash
    )  # fmt: skip


def host_finish(workdir: Path, subject: tuple[str, str]) -> str | None:
    """Finish the run as a host does, a new process per pause; what went wrong, if any."""
    proc = orchestrate("resume", "--workdir", str(workdir))
    if proc.returncode == 2 and not (workdir / ".orchestrator" / "runs").is_dir():
        proc = orchestrate("run", subject[0], "--workdir", str(workdir))  # never started
    for _ in range(4 * (ASKS + PHASES)):
        if proc.returncode == 0:
            return None
        if proc.returncode != 42:
            return f"exit {proc.returncode}: {proc.stderr[-800:]}"
        requests = [workdir / ".agent-request.json"]
        requests += sorted((workdir / ".agent-requests").glob("*.json"))
        for path in filter(Path.is_file, requests):
            request = json.loads(path.read_bytes())
            answered = orchestrate(
                "respond", "--workdir", str(workdir), "--request-id", request["request_id"],
                "--text", answer_for(request["prompt"]),
            )  # fmt: skip
            if answered.returncode != 0:
                return f"respond: exit {answered.returncode}: {answered.stderr[-800:]}"
        proc = orchestrate("resume", "--workdir", str(workdir))
    return "still paused after every round"


def crash_labels(log: Path) -> list[str]:
    """The points a run passed, each with its request and run ids (new in every run)
    replaced by one name."""
    lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    return [UUID.sub("<id>", line.split(" ", 1)[1]) for line in lines]


def finished(workdir: Path) -> dict[str, Any]:
    """What a finished run left: its outputs, its requests, its story, what else is left."""
    runs = sorted((workdir / ".orchestrator" / "runs").iterdir())
    assert len(runs) == 1, [run.name for run in runs]
    history = json.loads((runs[0] / "state.json").read_bytes())
    kept = f".orchestrator/runs/{runs[0].name}/"
    leftovers = sorted(
        path.relative_to(workdir).as_posix()
        for path in workdir.rglob("*")
        if path.is_file()
        and not path.relative_to(workdir).as_posix().startswith(kept)
        and path.name != "long.lock"
    )
    requests = history["agent_requests"]
    return {
        "outputs": {k: v for k, v in history["phase_data"].items() if k != "x_orchestrator"},
        "status": history["phase_data"]["x_orchestrator"]["status"],
        "answered": Counter(
            (r["x_request"]["prompt"], r["x_response"]["response"])
            for r in requests
            if r["status"] == "completed"
        ),
        "unanswered": [r["status"] for r in requests if r["status"] != "completed"],
        "story": story(without_retries(check_run_evidence(runs[0]))),
        "leftovers": leftovers,
    }


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> tuple[tuple[str, str], Path, list[str]]:
    base = tmp_path_factory.mktemp("long-run")
    subject = write_subject(base)
    workdir = base / "baseline"
    workdir.mkdir()
    log = base / "baseline.log"
    proc = drive(workdir, subject, crash_at="count", log=log)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return subject, workdir, crash_labels(log)


def spread(total: int, count: int) -> list[int]:
    return sorted({1 + round(k * (total - 1) / (count - 1)) for k in range(count)})


def killed_then_finished(
    base: Path, subject: tuple[str, str], point: int, label: str
) -> dict[str, Any] | str:
    workdir = base / f"n{point:04d}"
    workdir.mkdir()
    log = base / f"n{point:04d}.log"
    proc = drive(workdir, subject, crash_at=point, log=log)
    if proc.returncode != -signal.SIGKILL:
        return f"point {point} ({label}): exit {proc.returncode}, not killed: {proc.stderr[-500:]}"
    if crash_labels(log) != [label]:
        return f"point {point}: killed at {crash_labels(log)}, not at {label!r}"
    problem = host_finish(workdir, subject)
    if problem is not None:
        return f"after a kill at {point} ({label}): {problem}"
    return finished(workdir)


@pytest.mark.slow
@pytest.mark.parametrize("sweep", sweeps.SWEEPS)
def test_sigkill_across_a_long_run_resumes_to_the_same_outputs(
    baseline: tuple[tuple[str, str], Path, list[str]], tmp_path: Path, sweep: str
) -> None:
    subject, workdir, labels = baseline
    want = finished(workdir)
    asks = ASKS + PHASES
    assert want["status"] == "completed" and want["leftovers"] == []
    assert sum(want["answered"].values()) == asks and want["unanswered"] == []
    assert len(labels) > 8 * asks, f"{len(labels)} crash points over {asks} asks"
    points = spread(len(labels), POINTS)
    if sweep == sweeps.EACH_KIND:
        # The default run: of those, the last (where the run is longest) of each kind of
        # point of a save: the state file's write, rename and removal, the history's append.
        saves = [p for p in points if ".long-state.json" in labels[p - 1]]
        saves += [p for p in points if "requests.ndjson" in labels[p - 1]]
        last = {sweeps.kind(labels[p - 1]): p for p in sorted(saves)}
        points = sorted(last.values())
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(
            pool.map(lambda p: killed_then_finished(tmp_path, subject, p, labels[p - 1]), points)
        )
    failures = [r for r in results if isinstance(r, str)]
    assert not failures, "\n".join(failures)
    for point, got in zip(points, results, strict=True):
        assert isinstance(got, dict)
        where = f"after a kill at {point} ({labels[point - 1]})"
        assert got["outputs"] == want["outputs"], where
        assert got["status"] == "completed", where
        # Every ask answered once, with its own answer; a request the kill left waiting
        # may have been withdrawn and asked again, never answered twice.
        assert got["answered"] == want["answered"], where
        assert got["story"] == want["story"], where
        assert got["leftovers"] == [], where
