"""Power cuts, simulated (``tests/powercut.py``): every disk a cut could leave is checked.

Two subjects are recorded under the simulator's shim, in this interpreter:

* the template-create example, run as a host runs it: ``orchestrate run``, then at every
  pause the example's offline ``fake_agent.py`` answers each pending request (the way
  ``orchestrate drive --handler`` feeds it the request on stdin) and ``orchestrate
  respond`` writes its answer, then ``orchestrate resume``, until it completes;
* the task board: a script of board operations (create tasks, assign, heartbeat, submit
  results that pass and fail, fail an attempt, requeue) on a fake clock.

Each distinct disk of the crash points is materialised at the recorded root (the state
holds absolute paths: the work directory and the output) and recovered as a host would
after a reboot, then judged against the crash-free reference run. A subject's disks are
checked in a worker process of their own, the two subjects side by side (two cores).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import multiprocessing
import os
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the spawned workers import us

import powercut  # noqa: E402
from evidence_support import VOLATILE, check_run_evidence, story, without_retries  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_DIR = ROOT / "examples" / "template_create"
EXAMPLE_REF = f"{EXAMPLE_DIR / 'workflow.py'}:TemplateCreate"
STATE_FILE = ".template-create-state.json"
LOCK_FILE = ".orchestrator/template-create.lock"
SEED = 14
# Distinct disks checked per subject; together they must reach MIN_DISKS.
TEMPLATE_DISKS = int(os.environ.get("POWER_CUT_TEMPLATE_DISKS", "650"))
BOARD_DISKS = int(os.environ.get("POWER_CUT_BOARD_DISKS", "450"))
MIN_DISKS = 1000
HOST_ROUNDS = 40  # resumes a recovery may take before it counts as stuck


@dataclass
class Report:
    """What exploring one subject found."""

    subject: str
    operations: int = 0
    crash_points: int = 0
    disks: int = 0
    seconds: float = 0.0
    bad: list[str] = field(default_factory=list)  # one line per bad disk: what and where
    kinds: Counter[str] = field(default_factory=Counter)


# -- the template-create host ------------------------------------------------------------------


def _fake_agent() -> Any:
    spec = importlib.util.spec_from_file_location("fake_agent", EXAMPLE_DIR / "fake_agent.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FAKE_AGENT = _fake_agent()


def orchestrate(*argv: str) -> tuple[int, str]:
    """``orchestrate ARGV`` in this process: its exit code and standard error."""
    from orchestrator.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, err.getvalue()


def fake_answer(request: dict[str, Any]) -> dict[str, Any]:
    """The example's fake agent on ``request``, as ``drive --handler`` runs it: the
    request document on stdin, its response document from stdout."""
    out, stdin = io.StringIO(), sys.stdin
    sys.stdin = io.StringIO(json.dumps(request))
    try:
        with contextlib.redirect_stdout(out):
            assert FAKE_AGENT.main() == 0
    finally:
        sys.stdin = stdin
    return json.loads(out.getvalue())  # type: ignore[no-any-return]


def pending_requests(workdir: Path) -> dict[str, dict[str, Any]]:
    """The request files of a pause: one per request with several, else the one."""
    files = sorted((workdir / ".agent-requests").glob("*.json"))
    files.append(workdir / ".agent-request.json")
    requests = {}
    for path in files:
        if path.is_file():
            document = json.loads(path.read_bytes())
            requests[document["request_id"]] = document
    return requests


def start(workdir: Path) -> tuple[int, str]:
    return orchestrate(
        "run", EXAMPLE_REF, "--workdir", str(workdir), "--output", str(workdir / "template"),
        "--input", f"project_path={EXAMPLE_DIR / 'sample_project'}",
        "--input", "template_name=task-tracker",
    )  # fmt: skip


def answer_pending(workdir: Path) -> list[str]:
    """Answer every pending request with ``orchestrate respond``; the ids answered."""
    answered = []
    for request_id, request in pending_requests(workdir).items():
        document = fake_answer(request)
        meta = document["metadata"]
        code, err = orchestrate(
            "respond", "--workdir", str(workdir), "--request-id", request_id,
            "--text", document["response"], "--model", meta["model"],
            "--tokens-used", str(meta["tokens_used"]), "--confidence", str(meta["confidence"]),
        )  # fmt: skip
        assert code == 0, f"respond to {request_id}: exit {code}: {err}"
        answered.append(request_id)
    return answered


def host(workdir: Path, *, fresh: bool) -> tuple[int, list[str], str]:
    """Run the example to its end as a host: start it (``fresh``) or resume it after a
    reboot, answer every pause, resume again. Exit codes as docs/formats/agent-bridge.md
    gives them: 0 done, 42 paused, 2 no instance (never started, or already over: a
    finished run's history says which), 75 busy (never here: the lock died with the
    process), 1 failed. Returns the last code, the request ids answered and stderr."""
    answered: list[str] = []
    code, err = start(workdir) if fresh else orchestrate("resume", "--workdir", str(workdir))
    for _ in range(HOST_ROUNDS):
        if code == 2 and not fresh:
            if list((workdir / ".orchestrator" / "runs").glob("*/state.json")):
                return 0, answered, err  # it had completed before the cut
            fresh = True  # no durable instance: the host starts the run again
            code, err = start(workdir)
            continue
        if code != 42:
            return code, answered, err
        answered += answer_pending(workdir)
        code, err = orchestrate("resume", "--workdir", str(workdir))
    return code, answered, err + "\n(still paused after every round)"


# -- judging a recovered template-create run -------------------------------------------------


def normalised(value: Any) -> Any:
    """``value`` without what legitimately varies between two runs (evidence_support's
    VOLATILE: times, durations, run and request ids, token counts, numbered directories;
    and ``created_at``/``completed_at``, the wall-clock times of a state and a phase)."""
    if isinstance(value, dict):
        drop = VOLATILE | {"created_at", "completed_at", "x_response_sha256", "x_output_dir"}
        return {k: normalised(v) for k, v in value.items() if k not in drop}
    if isinstance(value, list):
        return [normalised(v) for v in value]
    return value


@dataclass
class Outcome:
    """What a finished run left, normalised to compare with the reference's."""

    outputs: dict[str, Any]  # phase_data without the engine's x_orchestrator record
    phases: list[Any]
    requests: list[Any]
    results: dict[str, Any]  # results.json of each phase and agent, by directory
    template: dict[str, bytes]
    story: list[tuple[str, str]]
    leftovers: list[str]
    history: dict[str, Any]


def read_tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def outcome_of(workdir: Path) -> Outcome:
    runs = sorted((workdir / ".orchestrator" / "runs").iterdir())
    assert len(runs) == 1, f"{len(runs)} run directories: {[r.name for r in runs]}"
    run = runs[0]
    history = json.loads((run / "state.json").read_bytes())
    events = check_run_evidence(run)  # x_seq 1..n, one story, every event's files there
    results = {
        p.parent.relative_to(run).as_posix().split("-", 1)[-1]: normalised(json.loads(p.read_bytes()))
        for p in sorted(run.rglob("results.json"))
    }
    kept = f".orchestrator/runs/{run.name}/"
    leftovers = [
        p for p in read_tree(workdir) if not p.startswith(("template/", kept)) and p != LOCK_FILE
    ]
    leftovers += [p for p in read_tree(workdir) if ".tmp" in p]
    return Outcome(
        outputs={k: v for k, v in history["phase_data"].items() if k != "x_orchestrator"},
        phases=normalised(history["completed_phases"]),
        requests=normalised(history["agent_requests"]),
        results=results,
        template=read_tree(workdir / "template"),
        story=story(without_retries(events)),
        leftovers=sorted(leftovers),
        history=history,
    )


def answers_on_disk(workdir: Path) -> dict[str, str]:
    """Request id -> response digest (or "file") of every answer the disk holds: those a
    readable state records, and response files a host wrote. None may be asked again."""
    answers: dict[str, str] = {}
    states = [workdir / STATE_FILE, *(workdir / ".orchestrator" / "runs").glob("*/state.json")]
    for path in states:
        try:
            state = json.loads(path.read_bytes())
        except (OSError, ValueError):
            continue  # a state that does not load is judged by the recovery
        for record in state.get("agent_requests", []):
            if record.get("status") == "completed":
                answers[record["request_id"]] = record["x_response_sha256"]
    for path in [workdir / ".agent-response.json", *(workdir / ".agent-responses").glob("*")]:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            answers.setdefault(json.loads(path.read_bytes())["request_id"], "file")
    return answers


def judge_template(workdir: Path, reference: Outcome) -> list[tuple[str, str]]:
    """Recover the disk at ``workdir`` and judge it: (kind, what) of each problem."""
    before = answers_on_disk(workdir)
    code, asked, err = host(workdir, fresh=False)
    if code != 0:
        last = err.strip().splitlines()[-1:] or ["(nothing on stderr)"]
        return [("does not complete", f"exit {code}: {last[0][:300]}")]
    try:
        got = outcome_of(workdir)
    except AssertionError as exc:
        return [("evidence", str(exc).splitlines()[0][:300])]
    problems = []
    again = sorted(set(asked) & set(before))
    if again:
        problems.append(("answer asked again", f"{again} were answered on the disk"))
    recorded = {r["request_id"]: r for r in got.history["agent_requests"]}
    for request_id, digest in before.items():
        record = recorded.get(request_id)
        if record is None or record["status"] != "completed":
            problems.append(("answer lost", f"{request_id} answered on the disk, not in the end"))
        elif digest != "file" and record["x_response_sha256"] != digest:
            problems.append(("answer lost", f"{request_id} ends with another answer"))
    digests = Counter(r["x_response_sha256"] for r in recorded.values() if r["x_response_sha256"])
    if any(n > 1 for n in digests.values()):
        problems.append(("answer used twice", "one response recorded twice"))
    for name in ("outputs", "phases", "requests", "results", "story", "template"):
        if getattr(got, name) != getattr(reference, name):
            problems.append((f"{name} differ", _difference(getattr(got, name), getattr(reference, name))))
    if got.leftovers:
        problems.append(("files left over", str(got.leftovers[:5])))
    return problems


def _difference(got: Any, want: Any) -> str:
    if isinstance(got, dict) and isinstance(want, dict):
        keys = sorted(k for k in got.keys() | want.keys() if got.get(k) != want.get(k))
        detail = {k: (_short(got.get(k)), _short(want.get(k))) for k in keys[:3]}
        return f"{len(keys)} differ, e.g. (got, want): {detail}"
    if isinstance(got, list) and isinstance(want, list):
        first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        return f"lengths {len(got)}/{len(want)}, first difference at {first}"
    return f"{_short(got)} != {_short(want)}"


def _short(value: Any) -> str:
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else repr(value)
    return text if len(text) <= 60 else f"{text[:57]}... ({len(text)} chars)"


def record_template(workdir: Path) -> tuple[powercut.Recording, Outcome]:
    workdir.mkdir(parents=True)
    with powercut.recording(workdir) as rec:
        code, _, err = host(workdir, fresh=True)
    assert code == 0, err
    reference = outcome_of(workdir)
    assert reference.leftovers == []
    return rec, reference


def explore_template(base: Path, budget: int, swap: Callable[[], Any] | None = None) -> Report:
    """Record the example (with ``swap`` in force, if given), then judge ``budget`` disks."""
    started = time.monotonic()
    workdir = base / "work"
    with swap() if swap is not None else contextlib.nullcontext():
        rec, reference = record_template(workdir)
    report = Report("template-create", operations=len(rec.log))
    report.crash_points = len(powercut.crash_points(rec.log))
    disks = powercut.explore(rec, seed=SEED, budget=budget)
    for crash in disks:
        powercut.materialise(crash.disk, workdir)
        try:
            with powercut.syncs_skipped():
                problems = judge_template(workdir, reference)
        except Exception as exc:  # a judge's own failure is a finding too, never lost
            problems = [("recovery raised", f"{type(exc).__name__}: {exc}"[:300])]
            traceback.print_exc()
        for kind, what in problems:
            report.kinds[kind] += 1
            report.bad.append(f"{kind}: {what}; {crash.describe(rec.log)}")
    report.disks = len(disks)
    report.seconds = time.monotonic() - started
    return report
