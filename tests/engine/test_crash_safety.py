"""Crash safety of the template-create example under real SIGKILLs.

The requirement: kill -9 at 200 or more points spread over the example's run, including
between the state write and the request write; every run resumes to the same outputs as
an uninterrupted one, no answer is consumed twice, no step runs twice.

How it is proved here, with real processes (``python -m orchestrator drive``, the
example's offline ``fake_agent.py`` as the handler):

* A baseline: the example run uninterrupted. Its template tree (relative path -> bytes)
  and its phase outputs (``phase_data`` of the history file, without the engine's own
  ``x_orchestrator`` record) are what every killed-and-resumed run must reproduce. The
  phase outputs hold no run ids, timestamps or absolute paths, so they are compared
  whole.
* ``ORCHESTRATOR_CRASH_AT=count`` lists the crash points of a run (see
  ``orchestrator.storage.durable.crash_point``). Layer 1 kills the first process at every one of
  them and resumes; layer 2 kills the first process at point N and the resuming process
  at a point M of its own (learned from layer 1's resume, run in count mode), then
  resumes to the end. Every killed process must die by SIGKILL (return code -9) at the
  point asked, and the final ``drive`` must exit 0.
* Genuinely external kills: ``os.kill(pid, SIGKILL)`` after a varied delay.
* Steps are counted by running ``tests/support/crash_counting_workflow.py:CountingTemplateCreate``,
  the example with every step execution appended to a log file; a first test checks
  that it is the example (same crash points, same outputs).

"No step runs twice" has one inherent exception, asserted exactly: a step's function
has run but its result is not durable until the state file that records it is renamed
into place. A kill at ``after-step-run <name>`` *or at the ``before-write``/
``before-rename`` of that state write* (three points per step, see ``step_windows``)
makes the resume run the step again: at-least-once for side effects outside the engine.
Such a run must show that step exactly twice and every other step once; any other kill
must show every step once.

"No answer consumed twice": see ``check_answers``.

Run with ``-s`` to see a summary: crash points, runs, labels hit, kills in the windows.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from support import sweeps
from support.cli import command
from support.evidence_support import check_run_evidence, story, without_retries

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_DIR = ROOT / "examples" / "template_create"
EXAMPLE_REF = f"{EXAMPLE_DIR / 'workflow.py'}:TemplateCreate"
COUNTING_FILE = Path(__file__).resolve().parents[1] / "support" / "crash_counting_workflow.py"
COUNTING_REF = f"{COUNTING_FILE}:CountingTemplateCreate"
SAMPLE_PROJECT = EXAMPLE_DIR / "sample_project"
HANDLER = f"{shlex.quote(sys.executable)} {shlex.quote(str(EXAMPLE_DIR / 'fake_agent.py'))}"

STATE_FILE = ".template-create-state.json"
REQUEST_FILE = ".agent-request.json"
STEPS = (
    "scan_project",
    "write_manifest",
    "write_settings",
    "copy_templates",
    "write_agents",
    "write_claude_md",
    "find_missing",
)
RETRYABLE_ERRORS = {"TIMEOUT", "INVOCATION_FAILED"}
# Two drives at a time (the machine has two cores); CRASH_SAFETY_WORKERS overrides it. A
# drive mostly waits (handlers, fsync), so more workers mainly make the file faster.
WORKERS = int(os.environ.get("CRASH_SAFETY_WORKERS", "2"))
# Layer 2 (a second kill in the resuming process) runs for this many first points, spread
# evenly over the run; with layer 1's one kill per point that makes >= 200 killed runs.
LAYER_TWO_RUNS = 100
RUN_TIMEOUT = 120  # seconds for one drive process; a hang is a failure, not a wait
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

# -- running drive ----------------------------------------------------------------------------


pytestmark = pytest.mark.slow


def drive_command(workdir: Path, workflow_ref: str) -> list[str]:
    return command(
        "drive", workflow_ref,
        "--workdir", str(workdir),
        "--output", str(workdir / "template"),
        "--input", f"project_path={SAMPLE_PROJECT}",
        "--input", "template_name=task-tracker",
        "--handler", HANDLER,
    )  # fmt: skip


def drive_env(
    *,
    crash_at: str | int | None = None,
    crash_log: Path | None = None,
    step_log: Path | None = None,
) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ORCHESTRATOR_CRASH_AT", "ORCHESTRATOR_CRASH_LOG", "CRASH_STEP_LOG")
    }
    if crash_at is not None:
        env["ORCHESTRATOR_CRASH_AT"] = str(crash_at)
        assert crash_log is not None
        env["ORCHESTRATOR_CRASH_LOG"] = str(crash_log)
    if step_log is not None:
        env["CRASH_STEP_LOG"] = str(step_log)
    return env


def run_drive(
    scenario: Path,
    workflow_ref: str,
    *,
    crash_at: str | int | None = None,
    crash_log: Path | None = None,
    step_log: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        drive_command(scenario / "work", workflow_ref),
        cwd=scenario,
        env=drive_env(crash_at=crash_at, crash_log=crash_log, step_log=step_log),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )


def new_scenario(base: Path, name: str) -> Path:
    scenario = base / name
    (scenario / "work").mkdir(parents=True)
    return scenario


def expect_rc(proc: subprocess.CompletedProcess[str], code: int, what: str) -> None:
    if proc.returncode != code:
        raise AssertionError(
            f"{what}: exit {proc.returncode}, expected {code}\nstderr:\n{proc.stderr[-3000:]}"
        )


# -- crash logs and labels ---------------------------------------------------------------------


def read_log(path: Path) -> list[tuple[int, str]]:
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [(int(n), label) for n, _, label in (line.partition(" ") for line in lines)]


def plain(label: str) -> str:
    """A label with request ids and pids replaced, so that runs of a scenario compare."""
    return re.sub(r"\.\d+\.tmp$", ".<pid>.tmp", UUID.sub("<id>", label))


def same_point(logged: str, expected: str) -> bool:
    """Whether a kill landed at the expected point of a (deterministic) run.

    The order in which a directory's files are unlinked follows ``iterdir``, which is
    unspecified, and a killed write can leave a temporary file there that is unlinked
    along with them: among such unlinks only the kind of point is compared.
    """
    if logged == expected:
        return True
    listed = re.compile(r"^before-unlink (<id>\.json|\.<id>\.json\.<pid>\.tmp)$")
    return bool(listed.match(logged) and listed.match(expected))


def annotate(labels: list[str]) -> list[str]:
    """Plain labels, and for writes of ``<id>.json`` whether it is a request or a response.

    Only for a complete log. Request files are written by the bridge's ``publish`` just
    before ``.agent-request.json``; response files by ``drive`` after a pause, and what
    follows them is the resume's own work, never a request-file write. So the first label
    after a run of ``<id>.json`` writes tells which they are. (Unlinks stay ``<id>.json``:
    stale requests and consumed responses are removed in the same way.)
    """
    names = [plain(label) for label in labels]
    out = []
    for index, name in enumerate(names):
        if "<id>.json" in name and not name.startswith("before-unlink"):
            following = next(
                (
                    n
                    for n in names[index + 1 :]
                    if "<id>.json" not in n or n.startswith("before-unlink")
                ),
                "",
            )
            kind = "<request-id>" if following.endswith(f" {REQUEST_FILE}") else "<response-id>"
            name = name.replace("<id>", kind)
        out.append(name)
    return out


def step_windows(labels: list[str]) -> dict[int, str]:
    """Crash point -> the step whose result is not yet durable there (1-based points).

    ``ctx.step`` runs the function, passes ``after-step-run <name>``, then records the
    result by an atomic state write. A kill at that point, or at the state write's
    ``before-write``/``before-rename`` that follow, leaves the step done but unrecorded:
    the resume runs it again (at-least-once for side effects the engine cannot see).
    """
    windows: dict[int, str] = {}
    current: str | None = None
    for point, label in enumerate(labels, 1):
        if label.startswith("after-step-run "):
            current = label.split(" ", 1)[1]
        elif label == f"after-rename {STATE_FILE}":
            current = None
        if current is not None:
            windows[point] = current
    return windows


def request_windows(labels: list[str], *, state_exists_at_start: bool) -> set[int]:
    """Points after the state (holding a pending request) is durable and before the
    request file is renamed into place: the "crash between the two" of the protocol."""
    found: set[int] = set()
    starts = [0] if state_exists_at_start else []
    starts += [p for p, label in enumerate(labels, 1) if label == f"after-rename {STATE_FILE}"]
    for start in starts:
        for point in range(start + 1, len(labels) + 1):
            label = labels[point - 1]
            if label.endswith(f" {STATE_FILE}"):
                break
            if label == f"after-rename {REQUEST_FILE}":
                found.update(range(max(start, 1), point))
                break
    return found


# -- what a finished run left ------------------------------------------------------------------


def read_tree(root: Path) -> dict[str, bytes]:
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


@dataclass
class Final:
    history: dict[str, Any]
    outputs: dict[str, Any]
    tree: dict[str, bytes]
    leftovers: list[str]
    events: list[dict[str, Any]]


def final_of(workdir: Path) -> Final:
    runs = sorted((workdir / ".orchestrator" / "runs").iterdir())
    assert len(runs) == 1, (
        f"expected one finished run in the history, found {[r.name for r in runs]}"
    )
    history = json.loads((runs[0] / "state.json").read_text(encoding="utf-8"))
    outputs = {k: v for k, v in history["phase_data"].items() if k != "x_orchestrator"}
    kept = f".orchestrator/runs/{runs[0].name}/"  # the run's history and evidence
    leftovers = sorted(
        rel
        for rel in read_tree(workdir)
        if not rel.startswith(("template/", kept)) and rel != ".orchestrator/template-create.lock"
    )
    # Every line and results.json valid, the story whole: see evidence_support.
    events = check_run_evidence(runs[0])
    return Final(history, outputs, read_tree(workdir / "template"), leftovers, events)


def answer_chains(history: dict[str, Any]) -> dict[tuple[int, int], list[list[dict[str, Any]]]]:
    """The agent requests of the history as retry chains, by (phase, position in phase).

    A retry is a new record; the old one says ``retried as <new id>``. One chain is one
    question the phase asked (``ask_all`` asks several at the same position).
    """
    records = {r["request_id"]: r for r in history["agent_requests"]}
    successor = {}
    for record in records.values():
        note = record.get("x_note") or ""
        if note.startswith("retried as "):
            successor[record["request_id"]] = note.removeprefix("retried as ")
    heads = set(records) - set(successor.values())
    chains: dict[tuple[int, int], list[list[dict[str, Any]]]] = {}
    for head in sorted(heads):
        chain, rid = [], head
        while rid is not None:
            chain.append(records[rid])
            rid = successor.get(rid)
        chains.setdefault((chain[0]["phase"], chain[0]["x_position"]), []).append(chain)
    return chains


def completed_by_slot(history: dict[str, Any]) -> dict[tuple[int, int], int]:
    return {slot: len(chains) for slot, chains in answer_chains(history).items()}


def check_answers(history: dict[str, Any], baseline: dict[str, Any]) -> int:
    """No answer consumed twice; return the number of retried records.

    * every recorded response document has its own digest: no response file was
      recorded twice (a leftover file whose digest is already recorded is dropped);
    * every question (retry chain) ended with exactly one ``completed`` record, every
      record before it is ``retried``, and the questions per (phase, position) and the
      number of completed records equal the baseline's.

    Retries: a kill of the *drive* process never produces one. The handler is a child of
    drive; when drive dies nobody records anything for the request it was running, so the
    request stays pending and the resumed drive asks again under the same request id. A
    retry is only legitimate when a living drive saw its handler fail (a kill that hit the
    handler, not drive): then the retried record must carry a retryable error answer
    (INVOCATION_FAILED or TIMEOUT), never a successful one. That is what is checked; the
    callers also report how many retries they saw (none are expected here).
    """
    digests = [
        r["x_response_sha256"] for r in history["agent_requests"] if r.get("x_response_sha256")
    ]
    duplicated = [d for d, n in Counter(digests).items() if n > 1]
    assert not duplicated, f"response documents recorded twice: {duplicated}"
    retried = 0
    for slot, chains in answer_chains(history).items():
        for chain in chains:
            statuses = [r["status"] for r in chain]
            assert statuses[-1] == "completed", f"question at {slot} ended {statuses}"
            assert set(statuses[:-1]) <= {"retried"}, f"question at {slot}: {statuses}"
            for record in chain[:-1]:
                retried += 1
                error = (record.get("x_response") or {}).get("error_type")
                assert error in RETRYABLE_ERRORS, f"{record['request_id']} retried after {error}"
    assert completed_by_slot(history) == completed_by_slot(baseline)
    completed = [r for r in history["agent_requests"] if r["status"] == "completed"]
    assert len(completed) == sum(r["status"] == "completed" for r in baseline["agent_requests"])
    return retried


def step_counts(step_log: Path) -> Counter[str]:
    if not step_log.exists():
        return Counter()
    return Counter(step_log.read_text(encoding="utf-8").splitlines())


# -- baseline ----------------------------------------------------------------------------------


@dataclass
class Baseline:
    final: Final
    labels: list[str]  # the crash points of an uninterrupted run, plain
    annotated: list[str]
    seconds: float


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Baseline:
    base = tmp_path_factory.mktemp("crash-baseline")
    # The example itself, uninterrupted and without any crash hook: the reference outputs.
    plain_run = new_scenario(base, "example")
    started = time.monotonic()
    expect_rc(run_drive(plain_run, EXAMPLE_REF), 0, "uninterrupted example")
    seconds = time.monotonic() - started
    reference = final_of(plain_run / "work")
    assert reference.leftovers == []
    assert sorted(reference.outputs) == [
        "agent_creation", "agent_enhancement", "agent_recommendation", "claude_md_generation",
        "codebase_analysis", "manifest_generation", "settings_generation", "template_files",
        "template_validation",
    ]  # fmt: skip
    assert "fallback_reason" not in reference.outputs["codebase_analysis"]
    # The example in count mode: the crash points of a whole run.
    counted = new_scenario(base, "example-count")
    expect_rc(
        run_drive(counted, EXAMPLE_REF, crash_at="count", crash_log=counted / "crash.log"),
        0,
        "example in count mode",
    )
    points = read_log(counted / "crash.log")
    assert [n for n, _ in points] == list(range(1, len(points) + 1))
    labels = [plain(label) for _, label in points]
    annotated = annotate([label for _, label in points])
    assert final_of(counted / "work").outputs == reference.outputs
    return Baseline(final=reference, labels=labels, annotated=annotated, seconds=seconds)


def test_counting_wrapper_is_the_example(baseline: Baseline, tmp_path: Path) -> None:
    """The step-counting subclass goes through the same crash points, gives the same
    outputs, and logs each of the example's steps once on an uninterrupted run."""
    scenario = new_scenario(tmp_path, "counting")
    proc = run_drive(
        scenario,
        COUNTING_REF,
        crash_at="count",
        crash_log=scenario / "crash.log",
        step_log=scenario / "steps.log",
    )
    expect_rc(proc, 0, "counting workflow, uninterrupted")
    assert [plain(label) for _, label in read_log(scenario / "crash.log")] == baseline.labels
    final = final_of(scenario / "work")
    assert final.outputs == baseline.final.outputs
    assert final.tree == baseline.final.tree
    assert final.leftovers == []
    assert step_counts(scenario / "steps.log") == Counter(STEPS)
    assert check_answers(final.history, baseline.final.history) == 0
    # Every step is followed by its after-step-run point, and the windows are where the
    # brief expects them: the step's point and the two points of the state write after it.
    windows = step_windows(baseline.labels)
    assert sorted(set(windows.values())) == sorted(STEPS)
    for name in STEPS:
        where = [baseline.labels[p - 1] for p, step in sorted(windows.items()) if step == name]
        assert where == [
            f"after-step-run {name}",
            f"before-write {STATE_FILE}",
            f"before-rename {STATE_FILE}",
        ]
    print(
        f"\n[crash-safety] baseline: {len(baseline.labels)} crash points, "
        f"{baseline.seconds:.2f} s per uninterrupted drive"
    )


def test_the_checks_catch_what_they_look_for(baseline: Baseline) -> None:
    """The judges used below fail on doctored histories, and the windows are where the
    protocol says: at the three pauses, from the state rename to the request rename."""
    import copy

    history = baseline.final.history
    assert check_answers(history, history) == 0
    twice = copy.deepcopy(history)
    twice["agent_requests"][2]["x_response_sha256"] = twice["agent_requests"][1][
        "x_response_sha256"
    ]
    with pytest.raises(AssertionError, match="recorded twice"):
        check_answers(twice, history)
    extra = copy.deepcopy(history)
    extra["agent_requests"].append({**extra["agent_requests"][0], "request_id": "extra"})
    extra["agent_requests"][-1]["x_response_sha256"] = "0" * 64
    with pytest.raises(AssertionError):
        check_answers(extra, history)
    retried_ok = copy.deepcopy(history)
    head = retried_ok["agent_requests"][0]
    retried_ok["agent_requests"].insert(0, {
        **head, "request_id": "first-try", "status": "retried",
        "x_note": f"retried as {head['request_id']}", "x_response_sha256": None,
        "x_response": {"status": "error", "error_type": "INVOCATION_FAILED"},
    })  # fmt: skip
    assert check_answers(retried_ok, history) == 1
    retried_bad = copy.deepcopy(retried_ok)
    retried_bad["agent_requests"][0]["x_response"] = {"status": "success"}
    with pytest.raises(AssertionError, match="retried after None"):
        check_answers(retried_bad, history)

    pauses = request_windows(baseline.annotated, state_exists_at_start=False)
    labels = [baseline.annotated[p - 1] for p in sorted(pauses)]
    assert labels.count(f"after-rename {STATE_FILE}") == 3  # one per pause
    assert labels.count(f"before-write {REQUEST_FILE}") == 3
    assert f"after-rename {REQUEST_FILE}" not in labels
    assert not any(label.endswith((" state.json", "<response-id>.json")) for label in labels)


# -- killed runs -------------------------------------------------------------------------------


@dataclass
class Outcome:
    name: str
    kills: list[str] = field(default_factory=list)  # annotated label of each kill
    in_request_window: int = 0  # kills between the state write and the request write
    step_window_hits: list[str] = field(default_factory=list)  # steps that had to run again
    retries: int = 0
    resume_labels: list[str] | None = None  # count log of layer 1's resume, plain
    resume_annotated: list[str] | None = None
    error: str | None = None


def kill_at(scenario: Path, point: int, expected: str, log_name: str, *, step_log: Path) -> None:
    """Run drive with CRASH_AT=point: it must die by SIGKILL there, at the expected label."""
    log = scenario / log_name
    proc = run_drive(scenario, COUNTING_REF, crash_at=point, crash_log=log, step_log=step_log)
    expect_rc(proc, -signal.SIGKILL, f"drive with ORCHESTRATOR_CRASH_AT={point}")
    logged = read_log(log)
    assert len(logged) == 1 and logged[0][0] == point, logged
    assert same_point(plain(logged[0][1]), expected), f"killed at {logged[0]}, not {expected!r}"


def finish_and_check(
    scenario: Path, baseline: Baseline, outcome: Outcome, expected_steps: Counter[str]
) -> None:
    final = final_of(scenario / "work")
    assert final.outputs == baseline.final.outputs, "phase outputs differ from the baseline"
    assert final.history["phase_data"]["x_orchestrator"]["status"] == "completed"
    assert final.history["phase_data"]["x_orchestrator"]["journal"] == []
    assert [p["phase_name"] for p in final.history["completed_phases"]] == [
        p["phase_name"] for p in baseline.final.history["completed_phases"]
    ]
    assert final.tree.keys() == baseline.final.tree.keys(), (
        f"template files differ: {sorted(final.tree.keys() ^ baseline.final.tree.keys())}"
    )
    assert final.tree == baseline.final.tree, "template file contents differ"
    outcome.retries = check_answers(final.history, baseline.final.history)
    # Cleanup protocol: state, request and response files are gone, and so are the
    # temporary files of writes a kill interrupted (the bridge sweeps dead writers' ones).
    assert final.leftovers == [], f"files left after the end: {final.leftovers}"
    # The event log tells the baseline's story: nothing lost, nothing told twice.
    expected_story = story(without_retries(baseline.final.events))
    assert story(without_retries(final.events)) == expected_story, "the event log differs"
    counts = step_counts(scenario / "steps.log")
    assert counts == expected_steps, (
        f"step executions {dict(counts)}, expected {dict(expected_steps)}"
    )


def layer_one(base: Path, baseline: Baseline, point: int) -> Outcome:
    outcome = Outcome(name=f"N={point}")
    scenario = new_scenario(base, f"n{point:03d}")
    steps = scenario / "steps.log"
    kill_at(scenario, point, baseline.labels[point - 1], "crash.log", step_log=steps)
    outcome.kills.append(baseline.annotated[point - 1])
    windows = request_windows(baseline.annotated, state_exists_at_start=False)
    outcome.in_request_window = int(point in windows)
    expected = Counter(STEPS)
    if point in step_windows(baseline.labels):
        outcome.step_window_hits.append(step_windows(baseline.labels)[point])
        expected[step_windows(baseline.labels)[point]] += 1
    # Resume in count mode (it only logs, never kills): layer 2 learns its points here.
    resume_log = scenario / "resume.log"
    proc = run_drive(scenario, COUNTING_REF, crash_at="count", crash_log=resume_log, step_log=steps)
    expect_rc(proc, 0, f"resume after a kill at point {point}")
    logged = read_log(resume_log)
    outcome.resume_labels = [plain(label) for _, label in logged]
    outcome.resume_annotated = annotate([label for _, label in logged])
    finish_and_check(scenario, baseline, outcome, expected)
    return outcome


def layer_two(
    base: Path,
    baseline: Baseline,
    first: int,
    resume_labels: list[str],
    resume_annotated: list[str],
    second: int,
) -> Outcome:
    outcome = Outcome(name=f"N={first},M={second}")
    scenario = new_scenario(base, f"n{first:03d}-m{second:03d}")
    steps = scenario / "steps.log"
    kill_at(scenario, first, baseline.labels[first - 1], "crash1.log", step_log=steps)
    kill_at(scenario, second, resume_labels[second - 1], "crash2.log", step_log=steps)
    outcome.kills += [baseline.annotated[first - 1], resume_annotated[second - 1]]
    # The state file exists when the second process starts unless the first died before
    # the instance's first state write (points 1 and 2).
    state_existed = f"after-rename {STATE_FILE}" in baseline.labels[:first]
    outcome.in_request_window = int(
        first in request_windows(baseline.annotated, state_exists_at_start=False)
    ) + int(second in request_windows(resume_annotated, state_exists_at_start=state_existed))
    expected = Counter(STEPS)
    for point, labels in ((first, baseline.labels), (second, resume_labels)):
        hit = step_windows(labels).get(point)
        if hit is not None:
            outcome.step_window_hits.append(hit)
            expected[hit] += 1
    expect_rc(
        run_drive(scenario, COUNTING_REF, step_log=steps),
        0,
        f"resume after kills at {first} then {second}",
    )
    finish_and_check(scenario, baseline, outcome, expected)
    return outcome


def run_all(jobs: Iterable[tuple[str, Callable[[], Outcome]]]) -> list[Outcome]:
    def guarded(name: str, job: Callable[[], Outcome]) -> Outcome:
        try:
            return job()
        except Exception as exc:  # collected: one report for all failing scenarios
            return Outcome(name=name, error=f"{type(exc).__name__}: {exc}")

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        futures = [pool.submit(guarded, name, job) for name, job in jobs]
        return [f.result() for f in futures]


def spread(total: int, count: int) -> set[int]:
    """``count`` distinct points of 1..total, evenly spaced, both ends included."""
    if count >= total:
        return set(range(1, total + 1))
    chosen = {1 + round(k * (total - 1) / (count - 1)) for k in range(count)}
    assert len(chosen) == count
    return chosen


def second_point(first: int, length: int) -> int:
    """A deterministic spread of points of the resuming process (1..length)."""
    return 1 + (first * 37 + 11) % length


def assert_no_errors(outcomes: list[Outcome]) -> None:
    failed = [o for o in outcomes if o.error]
    assert not failed, f"{len(failed)} scenarios failed:\n" + "\n\n".join(
        f"{o.name}: {o.error}" for o in failed[:8]
    )


def distribution(labels: Iterable[str]) -> str:
    counts = Counter(labels)
    return ", ".join(
        f"{label}: {n}" for label, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    )


@pytest.mark.slow
@pytest.mark.parametrize("sweep", sweeps.SWEEPS)
def test_sigkill_at_every_crash_point_resumes_to_the_same_outputs(
    baseline: Baseline, tmp_path: Path, sweep: str
) -> None:
    started = time.monotonic()
    # A kill between the state write and the request write is always among them.
    windows = request_windows(baseline.annotated, state_exists_at_start=False)
    points = sweeps.chosen(sweep, baseline.labels, also=[min(windows)])
    first = run_all((f"N={n}", partial(layer_one, tmp_path, baseline, n)) for n in points)
    assert_no_errors(first)

    jobs = []
    chosen = {points[i - 1] for i in spread(len(points), sweeps.fewer(sweep, LAYER_TWO_RUNS, 4))}
    for outcome, n in zip(first, points, strict=True):
        assert outcome.resume_labels is not None and outcome.resume_annotated is not None
        if n not in chosen:
            continue
        m = second_point(n, len(outcome.resume_labels))
        job = partial(
            layer_two, tmp_path, baseline, n, outcome.resume_labels, outcome.resume_annotated, m
        )
        jobs.append((f"N={n},M={m}", job))
    second = run_all(jobs)
    assert_no_errors(second)

    outcomes = first + second
    killed_processes = sum(len(o.kills) for o in outcomes)
    window_kills = sum(o.in_request_window for o in outcomes)
    step_hits = Counter(h for o in outcomes for h in o.step_window_hits)
    retries = sum(o.retries for o in outcomes)
    if sweep == sweeps.EVERY_POINT:
        assert len(outcomes) >= 200, "at least 200 killed-and-resumed runs"
    assert {sweeps.kind(baseline.labels[n - 1]) for n in points} == set(
        map(sweeps.kind, baseline.labels)
    ), "a kind of point was missed"
    assert window_kills >= 1, "no kill landed between the state write and the request write"
    # Both ways of landing there that the brief names were hit.
    hit = Counter(k for o in outcomes for k in o.kills)
    assert hit[f"after-rename {STATE_FILE}"] and hit[f"before-write {REQUEST_FILE}"]
    assert retries == 0, "a kill of drive itself never makes a retry (see check_answers)"
    print(
        f"\n[crash-safety] crash points per uninterrupted run: {len(baseline.labels)}; "
        f"killed-and-resumed runs: {len(outcomes)} ({len(first)} single kills, {len(second)} "
        f"double kills), SIGKILLed processes: {killed_processes}; kills between state write "
        f"and request write: {window_kills}; steps re-run in their after-step window: "
        f"{sum(step_hits.values())} runs {dict(step_hits)}; retries: {retries}; "
        f"{time.monotonic() - started:.0f} s"
    )
    print(f"[crash-safety] labels hit (all kills): {distribution(hit.elements())}")
    print(
        f"[crash-safety] second-kill labels (layer 2): {distribution(o.kills[1] for o in second)}"
    )


# -- external kills ----------------------------------------------------------------------------

# A fixed plan of delays. Start-up (interpreter, imports) takes a good part of a short run
# and has no crash point, so a delay counted from the spawn mostly lands there: four kills
# do. The others count their delay from the moment the process passed its first crash
# point (the test polls the count log), as fractions of an uninterrupted drive's duration
# measured by the baseline, so that they spread over the work itself. Drives run two at a
# time and are slower than the baseline; a run that ends before its kill is checked as an
# uninterrupted one.
EXTERNAL_PLAN: list[tuple[str, float]] = [("spawn", ms / 1000) for ms in (5, 60, 120, 200)] + [
    ("first-point", 0.06 * i)
    for i in range(16)  # 0 .. 0.9 of a run
]


def external_kill(base: Path, baseline: Baseline, index: int, start: str, delay_ms: int) -> Outcome:
    outcome = Outcome(name=f"external #{index}: {delay_ms} ms after the {start}")
    scenario = new_scenario(base, f"ext{index:02d}")
    steps, log = scenario / "steps.log", scenario / "crash.log"
    # Count mode only logs: the log says which crash point the process had passed last.
    process = subprocess.Popen(
        drive_command(scenario / "work", COUNTING_REF),
        cwd=scenario,
        env=drive_env(crash_at="count", crash_log=log, step_log=steps),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    if start == "first-point":
        deadline = time.monotonic() + RUN_TIMEOUT
        while process.poll() is None and not (log.exists() and log.stat().st_size):
            assert time.monotonic() < deadline, "drive passed no crash point"
            time.sleep(0.001)
    time.sleep(delay_ms / 1000)
    os.kill(process.pid, signal.SIGKILL)  # not reaped before wait(): at worst a zombie
    returncode = process.wait(timeout=RUN_TIMEOUT)
    passed = [plain(label) for _, label in read_log(log)]
    work = scenario / "work"
    runs = work / ".orchestrator" / "runs"
    finished = not (work / STATE_FILE).exists() and runs.is_dir() and any(runs.iterdir())
    if returncode == -signal.SIGKILL and finished:
        # Killed after the run's last file operation (history written, state removed) but
        # before the process exited. There is nothing to resume, and 'drive WORKFLOW' here
        # would start a second instance: a host must look at the history, not the exit code.
        outcome.kills.append("(after the last crash point)")
    elif returncode == -signal.SIGKILL:
        outcome.kills.append(passed[-1] if passed else "(before the first crash point)")
        expect_rc(
            run_drive(scenario, COUNTING_REF, step_log=steps), 0, "resume after an external kill"
        )
    else:  # it finished first: nothing to resume
        assert returncode == 0, f"drive exited {returncode} before the kill"
    # An external kill lands anywhere, also inside a step or between a step's end and its
    # crash point, so the window cannot be named exactly as for CRASH_AT kills: there is one
    # kill, so at most one step may run twice, and only one whose result the killed process
    # had not yet durably recorded (no state rename after its after-step-run point).
    counts = step_counts(steps)
    assert set(counts) == set(STEPS) and all(c in (1, 2) for c in counts.values()), counts
    twice = [name for name, c in counts.items() if c == 2]
    assert len(twice) <= 1, counts
    for name in twice:
        marker = f"after-step-run {name}"
        if marker in passed:
            after = passed[passed.index(marker) :]
            assert f"after-rename {STATE_FILE}" not in after, f"{name} ran twice though recorded"
        outcome.step_window_hits.append(name)
    # Conversely, a step that had run but was certainly not recorded must run again (at the
    # state write's before-rename point the rename may or may not have happened).
    unrecorded = step_windows(passed).get(len(passed)) if returncode else None
    if unrecorded is not None and passed[-1] != f"before-rename {STATE_FILE}":
        assert counts[unrecorded] == 2, f"{unrecorded} killed unrecorded but not run again"
    finish_and_check(scenario, baseline, outcome, counts)
    return outcome


@pytest.mark.slow
@pytest.mark.parametrize("sweep", sweeps.SWEEPS)
def test_external_sigkill_after_a_delay_resumes_to_the_same_outputs(
    baseline: Baseline, tmp_path: Path, sweep: str
) -> None:
    started = time.monotonic()
    plan = [
        (start, round(1000 * (value if start == "spawn" else value * baseline.seconds)))
        for start, value in EXTERNAL_PLAN
    ]
    taken = spread(len(plan), sweeps.fewer(sweep, len(plan), 6))
    plan = [kill for i, kill in enumerate(plan, start=1) if i in taken]
    outcomes = run_all(
        (f"external #{i}", partial(external_kill, tmp_path, baseline, i, start, ms))
        for i, (start, ms) in enumerate(plan)
    )
    assert_no_errors(outcomes)
    killed = [o for o in outcomes if o.kills]
    assert len(killed) >= len(outcomes) // 2, "most external kills must land before the end"
    retries = sum(o.retries for o in outcomes)
    assert retries == 0, "a kill of drive itself never makes a retry (see check_answers)"
    print(
        f"\n[crash-safety] external kills: {len(killed)} of {len(outcomes)} runs killed "
        f"(delays in ms after spawn or first crash point: {[ms for _, ms in plan]}); steps re-run: "
        f"{[h for o in outcomes for h in o.step_window_hits]}; "
        f"{time.monotonic() - started:.0f} s"
    )
    landed = distribution(k for o in killed for k in o.kills)
    print(f"[crash-safety] last crash point passed: {landed}")
