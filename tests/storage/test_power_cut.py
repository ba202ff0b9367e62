"""Power cuts, simulated (``tests/support/powercut.py``): every disk a cut could leave is checked.

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
import threading
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

from support import sweeps
from support.cli import in_process

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the spawned workers import us

from support import powercut
from support.evidence_support import VOLATILE, check_run_evidence, story, without_retries
from support.long_run_support import answer_for, long_workflow

ROOT = Path(__file__).resolve().parents[2]
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
    code, _, err = in_process(*argv)
    return code, err


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
    and ``created_at``/``completed_at``, the wall-clock times of a state and a phase;
    ``x_run_id`` in a request's context; ``x_response_sha256`` and ``x_output_dir``, a
    response's digest (its ``created_at`` is in it) and its numbered directory)."""
    if isinstance(value, dict):
        drop = VOLATILE | {
            "created_at", "completed_at", "x_run_id", "x_response_sha256", "x_output_dir"
        }  # fmt: skip
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
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def outcome_of(workdir: Path) -> Outcome:
    runs = sorted((workdir / ".orchestrator" / "runs").iterdir())
    assert len(runs) == 1, f"{len(runs)} run directories: {[r.name for r in runs]}"
    run = runs[0]
    history = json.loads((run / "state.json").read_bytes())
    events = check_run_evidence(run)  # x_seq 1..n, one story, every event's files there
    results = {
        p.parent.relative_to(run).as_posix().split("-", 1)[-1]: normalised(
            json.loads(p.read_bytes())
        )
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


def answers_on_disk(workdir: Path, state_file: str = STATE_FILE) -> dict[str, str]:
    """Request id -> response digest (or "file") of every answer the disk holds: those a
    readable state records, and response files a host wrote. None may be asked again."""
    answers: dict[str, str] = {}
    states = [workdir / state_file, *(workdir / ".orchestrator" / "runs").glob("*/state.json")]
    for path in states:
        try:
            state = json.loads(path.read_bytes())
        except (OSError, ValueError):
            continue  # a state that does not load is judged by the recovery
        for record in state.get("agent_requests", []):
            if record.get("status") == "completed":
                answers[record["request_id"]] = record["x_response_sha256"]
    # The files the engine reads as answers (a host's temporary is not one yet).
    answered = [p for p in (workdir / ".agent-responses").glob("*.json") if p.name[0] != "."]
    for path in [workdir / ".agent-response.json", *answered]:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            answers.setdefault(json.loads(path.read_bytes())["request_id"], "file")
    return answers


def answer_problems(
    before: dict[str, str], asked: list[str], history: dict[str, Any]
) -> list[tuple[str, str]]:
    """What a recovery did wrong with the answers the disk held (``before``, see
    :func:`answers_on_disk`), having asked ``asked``, and ending with ``history``."""
    problems = []
    again = sorted(set(asked) & set(before))
    if again:
        problems.append(("answer asked again", f"{again} were answered on the disk"))
    recorded = {r["request_id"]: r for r in history["agent_requests"]}
    for request_id, digest in before.items():
        record = recorded.get(request_id)
        if record is None or record["status"] != "completed":
            problems.append(("answer lost", f"{request_id} answered on the disk, not in the end"))
        elif digest != "file" and record["x_response_sha256"] != digest:
            problems.append(("answer lost", f"{request_id} ends with another answer"))
    digests = Counter(r["x_response_sha256"] for r in recorded.values() if r["x_response_sha256"])
    if any(n > 1 for n in digests.values()):
        problems.append(("answer used twice", "one response recorded twice"))
    return problems


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
    problems = answer_problems(before, asked, got.history)
    for name in ("outputs", "phases", "requests", "results", "story", "template"):
        if getattr(got, name) != getattr(reference, name):
            problems.append(
                (f"{name} differ", _difference(getattr(got, name), getattr(reference, name)))
            )
    if got.leftovers:
        problems.append(("files left over", str(got.leftovers[:5])))
    return problems


def _difference(got: Any, want: Any) -> str:
    if isinstance(got, dict) and isinstance(want, dict):
        keys = sorted(k for k in got.keys() | want.keys() if got.get(k) != want.get(k))
        detail = {k: (_short(got.get(k)), _short(want.get(k))) for k in keys[:3]}
        return f"{len(keys)} differ, e.g. (got, want): {detail}"
    if isinstance(got, list) and isinstance(want, list):
        first = next(
            (i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b),
            min(len(got), len(want)),
        )
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
    return judged("template-create", rec, workdir, budget, started, judge_template, reference)


def forget_checkpoints(workdir: Path) -> None:
    """The checkpoint register (beside the key, outside the simulated disk) as it would be
    at the power cut: it notes a checkpoint only once the state holding it is durable, so
    it never holds a later one than the disk's. The recording left its last one there:
    each disk starts without it, as after a lost register (which the engine accepts)."""
    from orchestrator.storage.checkpoints import home_for, register_entry

    for state_file in workdir.glob(".*-state.json"):
        try:
            record = json.loads(state_file.read_bytes())["phase_data"]["x_orchestrator"]
            entry = register_entry(
                record["run_id"], record["started_at"], home_for(record, workdir)
            )
        except (ValueError, KeyError, TypeError):
            continue  # a disk whose state is not whole: the recovery judges it
        entry.unlink(missing_ok=True)


def judged(
    subject: str,
    rec: powercut.Recording,
    workdir: Path,
    budget: int,
    started: float,
    judge: Callable[..., list[tuple[str, str]]],
    *args: Any,
) -> Report:
    """``budget`` disks of ``rec`` (0: one for each crash point), each materialised at
    ``workdir`` and judged by ``judge(workdir, *args)``, as a report."""
    report = Report(subject, operations=len(rec.log))
    report.crash_points = len(powercut.crash_points(rec.log))
    disks = powercut.explore(rec, seed=SEED, budget=budget or report.crash_points)
    for crash in disks:
        powercut.materialise(crash.disk, workdir)
        forget_checkpoints(workdir)
        try:
            with powercut.syncs_skipped():
                problems = judge(workdir, *args)
        except Exception as exc:  # a judge's own failure is a finding too, never lost
            problems = [("recovery raised", f"{type(exc).__name__}: {exc}"[:300])]
            traceback.print_exc()
        for kind, what in problems:
            report.kinds[kind] += 1
            report.bad.append(f"{kind}: {what}; {crash.describe(rec.log)}")
    report.disks = len(disks)
    report.seconds = time.monotonic() - started
    return report


# -- the task board --------------------------------------------------------------------------

BOARD_RUN = "3f56dc4d-35cf-4f97-925c-0b04a6fe8bf4"
CLOCK_START = datetime(2025, 11, 18, 10, 30, tzinfo=timezone.utc)
# Not compared at the end: the lock files (a pid), and heartbeats, which the board writes
# without syncing on purpose (a liveness hint; a lost one only makes the watchdog's view
# older, and a heartbeat refused after its attempt was settled writes none).
BOARD_UNCOMPARED = ("board.lock", "heartbeats/")


def board_task(task_id: str, *, scope: str, dependencies: tuple[str, ...] = ()) -> Any:
    from orchestrator.formats.board_documents import Task, TaskType

    return Task(
        task_id=task_id, title=f"task {task_id}", type=TaskType.PARALLELIZABLE,
        dependencies=list(dependencies), lock_scope=[scope], forbidden_scope=[],
        acceptance_criteria=["the tests pass"], worklog_path=f"worklogs/{task_id}.jsonl",
        timeout_seconds=120, heartbeat_interval_seconds=30,
    )  # fmt: skip


def board_result(task_id: str, changed: str) -> bytes:
    return json.dumps({
        "schema_version": "1.0.0", "run_id": BOARD_RUN, "task_id": task_id, "status": "done",
        "changes": [{"resource": changed, "action": "edit"}],
        "acceptance_check": [
            {"criterion": "the tests pass", "status": "pass", "evidence": "pytest -q: 3 passed"}
        ],
        "worklog_path": f"worklogs/{task_id}.jsonl", "notes_for_orchestrator": [],
    }).encode()  # fmt: skip


def board_script(root: Path) -> list[tuple[str, Callable[[Any], Any]]]:
    """The board operations, in order: (name, operation on a Board). T-2 needs T-1; T-3's
    first attempt is failed and its second passes; T-2's first result strays out of its
    scope (blocked), and the requeue gives it a second attempt that passes."""
    from orchestrator.board.board import Board
    from orchestrator.formats.board_documents import ErrorCode

    def create(board: Any) -> Any:
        return Board.create(root / ".board", run_id=BOARD_RUN, objective="Add endpoint tests",
                            workspace=root / "workspace", clock=board.clock)  # fmt: skip

    tasks = [
        board_task("T-1", scope="src/api"),
        board_task("T-2", scope="src/db", dependencies=("T-1",)),
        board_task("T-3", scope="src/ui"),
    ]
    more = [board_task("T-4", scope="src/cli"), board_task("T-5", scope="docs")]
    return [
        ("create board", create),
        ("create tasks", lambda b: b.create_tasks(tasks)),
        ("assign T-1 T-3", lambda b: b.assign(["T-1", "T-3"], owner="agent-a")),
        ("heartbeat T-1", lambda b: b.heartbeat("T-1", attempt=1)),
        ("submit T-1", lambda b: b.submit("T-1", board_result("T-1", "src/api/routes.py"))),
        ("fail T-3", lambda b: b.fail_attempt(
            "T-3", 1, code=ErrorCode.NON_COMPLIANT, reason="the subagent gave up")),
        ("assign T-2", lambda b: b.assign(["T-2"], owner="agent-b")),
        ("submit T-2 astray", lambda b: b.submit("T-2", board_result("T-2", "vendor/x.py"))),
        ("requeue", lambda b: b.requeue_or_fail(max_attempts=3)),
        ("assign T-2 T-3", lambda b: b.assign(["T-2", "T-3"], owner="agent-c")),
        ("submit T-3", lambda b: b.submit("T-3", board_result("T-3", "src/ui/page.py"))),
        ("submit T-2", lambda b: b.submit("T-2", board_result("T-2", "src/db/models.py"))),
        ("create T-4 T-5", lambda b: b.create_tasks(more)),
        ("assign T-4 T-5", lambda b: b.assign(["T-4", "T-5"], owner="agent-d")),
        ("fail T-5", lambda b: b.fail_attempt(
            "T-5", 1, code=ErrorCode.NON_COMPLIANT, reason="no result")),
        ("submit T-4", lambda b: b.submit("T-4", board_result("T-4", "src/cli/main.py"))),
    ]  # fmt: skip


def board_tree(root: Path) -> dict[str, bytes]:
    """The board's files to compare; a worklog entry's ``timestamp`` is normalised (an
    entry a recovery writes, settle_worklogs, is stamped at the recovery's time)."""
    tree = read_tree(root / ".board")
    for name in [k for k in tree if k.startswith("worklogs/")]:
        lines = [json.loads(line) for line in tree[name].splitlines() if line.strip()]
        tree[name] = json.dumps([{**e, "timestamp": "<time>"} for e in lines]).encode()
    return {k: v for k, v in tree.items() if not k.startswith(BOARD_UNCOMPARED)}


def ledger_ids(root: Path) -> set[str]:
    path = root / ".board" / "ledger.ndjson"
    raw = path.read_bytes() if path.is_file() else b""
    whole = raw[: raw.rfind(b"\n") + 1]  # a torn last line is no delta
    return {json.loads(line)["delta_id"] for line in whole.splitlines() if line.strip()}


@dataclass
class BoardRecording:
    rec: powercut.Recording
    ends: list[int]  # log length when each operation returned
    deltas: list[set[str]]  # the ledger deltas each operation appended
    final: dict[str, bytes]


def record_board(root: Path) -> BoardRecording:
    (root / "workspace").mkdir(parents=True)
    ends: list[int] = []
    deltas: list[set[str]] = []
    with powercut.recording(root) as rec:
        for number in range(len(board_script(root))):
            before = ledger_ids(root)
            run_board_operations_one(root, number)
            ends.append(len(rec.log))
            deltas.append(ledger_ids(root) - before)
    return BoardRecording(rec, ends, deltas, board_tree(root))


def run_board_operations_one(root: Path, number: int) -> None:
    from orchestrator.board.board import Board
    from orchestrator.testing import FakeClock

    _, operation = board_script(root)[number]
    operation(Board(root / ".board", clock=FakeClock(CLOCK_START + timedelta(minutes=number))))


def committed(recorded: BoardRecording, crash: powercut.CrashDisk) -> int:
    """How many operations, from the first, had returned and were durable at the crash:
    each of their operations meant to be durable (durable at the end of the log) is
    durable at the crash point."""
    log = recorded.rec.log
    meant = powercut.durable_operations(log, len(log))
    count, start = 0, 0
    for end in recorded.ends:
        span = set(range(start, end)) & meant
        if end > crash.point.k or not span <= crash.point.durable:
            break
        count, start = count + 1, end
    return count


def judge_board(
    root: Path, recorded: BoardRecording, crash: powercut.CrashDisk
) -> list[tuple[str, str]]:
    from orchestrator.board.board import Board
    from orchestrator.cli.check import _check_ledger
    from orchestrator.testing import FakeClock

    done = committed(recorded, crash)
    if (root / ".board").is_dir():  # a dispatcher's recovery (board/dispatch.py)
        Board(root / ".board").sweep()
    if (root / ".board" / "board.json").is_file():
        try:
            board = Board(root / ".board", clock=FakeClock(CLOCK_START))
            board.state()
            board.settle_worklogs()
            ledger = root / ".board" / "ledger.ndjson"
            if ledger.is_file():
                _check_ledger(ledger.read_bytes())  # what `orchestrate board check ledger` runs
        except Exception as exc:
            return [("board does not load", f"{type(exc).__name__}: {exc}"[:300])]
    elif done:
        return [("board lost", f"{done} operations had returned durably")]
    problems = []
    present = ledger_ids(root)
    for number in range(done):
        missing = recorded.deltas[number] - present
        if missing:
            name = board_script(root)[number][0]
            problems.append(("operation lost", f"{name!r} returned, {sorted(missing)} missing"))
    try:
        for number in range(done, len(recorded.ends)):
            run_board_operations_one(root, number)
    except Exception as exc:
        return [*problems, ("cannot finish", f"{type(exc).__name__}: {exc}"[:300])]
    final = board_tree(root)
    if final != recorded.final:
        problems.append(("final board differs", _difference(final, recorded.final)))
    return problems


def explore_board(base: Path, budget: int, swap: Callable[[], Any] | None = None) -> Report:
    """Record the board script (with ``swap`` in force, if given), judge ``budget`` disks."""
    started = time.monotonic()
    root = base / "board"
    with swap() if swap is not None else contextlib.nullcontext():
        recorded = record_board(root)
    report = Report("task board", operations=len(recorded.rec.log))
    report.crash_points = len(powercut.crash_points(recorded.rec.log))
    disks = powercut.explore(recorded.rec, seed=SEED, budget=budget or report.crash_points)
    for crash in disks:
        powercut.materialise(crash.disk, root)
        try:
            with powercut.syncs_skipped():
                problems = judge_board(root, recorded, crash)
        except Exception as exc:
            problems = [("judge raised", f"{type(exc).__name__}: {exc}"[:300])]
        for kind, what in problems:
            report.kinds[kind] += 1
            report.bad.append(f"{kind}: {what}; {crash.describe(recorded.rec.log)}")
    report.disks = len(disks)
    report.seconds = time.monotonic() - started
    return report


# -- wrong orderings, to show the judges catch them ----------------------------------------


@contextlib.contextmanager
def rename_before_data_sync() -> Any:
    """``atomic_write`` with two steps of its commit swapped: the temporary file is renamed
    into place (and its directory synced) before its data is synced. Every module that
    bound ``atomic_write`` at import gets it (those the board uses are loaded first)."""
    import orchestrator.board.board
    import orchestrator.board.ledger  # noqa: F401
    from orchestrator.storage import durable
    from orchestrator.storage.beneath import parent

    original = durable.atomic_write

    def swapped(path: Path, data: bytes, *, durable: bool = True) -> None:
        with parent(path) as (directory, name):
            tmp = f".{os.path.basename(name)}.{os.getpid()}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=directory)
            try:
                os.write(fd, data)
                os.replace(tmp, name, src_dir_fd=directory, dst_dir_fd=directory)
                if durable and directory is not None:
                    os.fsync(directory)
                if durable:
                    os.fsync(fd)  # too late: the name was durable before the bytes
            finally:
                os.close(fd)

    with replaced_everywhere(original, swapped):
        yield


@contextlib.contextmanager
def group_renamed_before_its_sync() -> Any:
    """``write_together`` (the group commit of a checkpoint) with two of its steps
    swapped: the temporaries are renamed into place before the sync that makes their data
    durable, so a state can be visible, and durable, before its bytes are."""
    # Loaded first: a module imported inside the block would bind the swapped function
    # for good (``from ... import`` copies the name once).
    import orchestrator.adapters.file_bridge  # noqa: F401
    from orchestrator.storage import durable

    original = durable.write_together

    def swapped(items: Any, *, directories: Any = (), make: Any = ()) -> None:
        if not items:
            return
        renamed = []
        for path, data in items:
            if path.parent in make and not path.parent.is_dir():
                os.mkdir(path.parent)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
            os.replace(tmp, path)  # swapped: before the sync below
            renamed.append(path)
        fd = os.open(renamed[0].parent, os.O_RDONLY)
        try:
            durable.sync_filesystem(fd)
            durable.sync_filesystem(fd)
        finally:
            os.close(fd)

    with replaced_everywhere(original, swapped):
        yield


@contextlib.contextmanager
def without_syncfs() -> Any:
    """The durable layer as on a system without ``syncfs``: each file, then each directory
    of a group synced by itself, and every append synced by itself."""
    from orchestrator.storage import durable

    saved = durable._syncfs_function
    durable._syncfs_function = None
    try:
        yield
    finally:
        durable._syncfs_function = saved


@contextlib.contextmanager
def in_two_lanes() -> Any:
    """The group commit writing each checkpoint's files in two lanes (two threads) always,
    as a long-lived host does while making files is slow; counts the commits that did."""
    from orchestrator.storage import durable

    saved, real_run = durable._lanes_forced, durable._Beside.run
    durable._lanes_forced = True

    def run(self: Any, mine: Any, theirs: Any) -> None:
        LANE_COMMITS.append(1)
        real_run(self, mine, theirs)

    durable._Beside.run = run  # type: ignore[method-assign]
    try:
        yield
    finally:
        durable._lanes_forced = saved
        durable._Beside.run = real_run  # type: ignore[method-assign]


LANE_COMMITS: list[int] = []


@contextlib.contextmanager
def replaced_everywhere(original: Any, replacement: Any) -> Any:
    """Replace ``original`` by ``replacement`` in every loaded orchestrator module that
    holds it (names bound with ``from ... import``), for the block."""
    holders = [
        (module, name)
        for module_name, module in list(sys.modules.items())
        if module_name.startswith(("orchestrator", "adapters")) and module is not None
        for name, value in list(vars(module).items())
        if value is original
    ]
    try:
        for module, name in holders:
            setattr(module, name, replacement)
        yield
    finally:
        for module, name in holders:
            setattr(module, name, original)


# -- a long run ------------------------------------------------------------------------------

LONG_ASKS, LONG_PHASES = 16, 4


def long_host(workdir: Path, reference: str, *, fresh: bool) -> tuple[int, list[str], str]:
    """The long run to its end as a host runs it (see :func:`host`), each command reading
    the state back as a new process does (nothing is taken from the last pause in this
    interpreter)."""

    def command(*argv: str) -> tuple[int, str]:
        return orchestrate(*argv)  # an engine of its own: nothing handed over

    answered: list[str] = []
    start_long = ("run", reference, "--workdir", str(workdir))
    code, err = command(*start_long) if fresh else command("resume", "--workdir", str(workdir))
    for _ in range(2 * (LONG_ASKS + LONG_PHASES) + HOST_ROUNDS):
        if code == 2 and not fresh:
            if list((workdir / ".orchestrator" / "runs").glob("*/state.json")):
                return 0, answered, err
            fresh = True
            code, err = command(*start_long)
            continue
        if code != 42:
            return code, answered, err
        for request_id, request in pending_requests(workdir).items():
            code, err = command(
                "respond", "--workdir", str(workdir), "--request-id", request_id,
                "--text", answer_for(request["prompt"]),
            )  # fmt: skip
            assert code == 0, f"respond to {request_id}: exit {code}: {err}"
            answered.append(request_id)
        code, err = command("resume", "--workdir", str(workdir))
    return code, answered, err + "\n(still paused after every round)"


def long_outcome(workdir: Path) -> dict[str, Any]:
    runs = sorted((workdir / ".orchestrator" / "runs").iterdir())
    assert len(runs) == 1, f"{len(runs)} run directories: {[r.name for r in runs]}"
    history = json.loads((runs[0] / "state.json").read_bytes())
    events = check_run_evidence(runs[0])
    kept = f".orchestrator/runs/{runs[0].name}/"
    tree = read_tree(workdir)
    return {
        "outputs": {k: v for k, v in history["phase_data"].items() if k != "x_orchestrator"},
        "phases": normalised(history["completed_phases"]),
        "requests": normalised(history["agent_requests"]),
        "story": story(without_retries(events)),
        "leftovers": sorted(
            p
            for p in tree
            if (not p.startswith(kept) and p != ".orchestrator/long.lock") or ".tmp" in p
        ),
        "history": history,
    }


def judge_long(workdir: Path, reference_ref: str, want: dict[str, Any]) -> list[tuple[str, str]]:
    before = answers_on_disk(workdir, ".long-state.json")
    code, asked, err = long_host(workdir, reference_ref, fresh=False)
    if code != 0:
        last = err.strip().splitlines()[-1:] or ["(nothing on stderr)"]
        return [("does not complete", f"exit {code}: {last[0][:300]}")]
    try:
        got = long_outcome(workdir)
    except AssertionError as exc:
        return [("evidence", str(exc).splitlines()[0][:300])]
    problems = answer_problems(before, asked, got["history"])
    for name in ("outputs", "phases", "requests", "story"):
        if got[name] != want[name]:
            problems.append((f"{name} differ", _difference(got[name], want[name])))
    if got["leftovers"]:
        problems.append(("files left over", str(got["leftovers"][:5])))
    return problems


def explore_long(base: Path, budget: int) -> Report:
    """Record the long run as a host runs it, then judge ``budget`` disks."""
    started = time.monotonic()
    base.mkdir(parents=True)
    (base / "long.py").write_text(long_workflow(LONG_ASKS, LONG_PHASES), encoding="utf-8")
    reference_ref = f"{base / 'long.py'}:Long"
    workdir = base / "work"
    workdir.mkdir()
    with powercut.recording(workdir) as rec:
        code, _, err = long_host(workdir, reference_ref, fresh=True)
    assert code == 0, err
    want = long_outcome(workdir)
    assert want["leftovers"] == []
    return judged("long run", rec, workdir, budget, started, judge_long, reference_ref, want)


# -- the tests -------------------------------------------------------------------------------


def scratch(tmp_path: Path) -> Path:
    """A directory on tmpfs when there is one (recoveries write a lot), else ``tmp_path``."""
    import tempfile

    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return Path(tempfile.mkdtemp(prefix="power-cut-", dir=shm))
    return tmp_path


def explore_subject(subject: str, base: str, budget: int) -> Report:
    """One subject in a worker process (importable by name: the workers are spawned)."""
    explore = explore_template if subject == "template" else explore_board
    return explore(Path(base) / subject, budget)


@pytest.fixture(scope="module", params=sweeps.SWEEPS)
def explored(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> dict[str, Report]:
    """Each subject's disks: in the soak run ``TEMPLATE_DISKS`` and ``BOARD_DISKS``, in
    the default run one disk per crash point (a budget of 0)."""
    import shutil

    base = scratch(tmp_path_factory.mktemp("power-cut"))
    soak = request.param == sweeps.EVERY_POINT
    jobs = {"template": TEMPLATE_DISKS if soak else 0, "board": BOARD_DISKS if soak else 0}
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {s: pool.submit(explore_subject, s, str(base), n) for s, n in jobs.items()}
        reports = {s: f.result() for s, f in futures.items()}
    shutil.rmtree(base, ignore_errors=True)
    for report in reports.values():
        print(
            f"\n[power-cut] {report.subject}: {report.operations} operations, "
            f"{report.crash_points} crash points, {report.disks} distinct disks, "
            f"{len(report.bad)} problems {dict(report.kinds)}, {report.seconds:.0f} s"
        )
    return reports


def disks(sweep: str, soak: int) -> int:
    """How many disks a test judges: ``soak`` in the soak run, else one per crash point."""
    return soak if sweep == sweeps.EVERY_POINT else 0


def _verdict(report: Report) -> str:
    kinds = {}
    for line in report.bad:  # the first disk of each kind, described whole
        kinds.setdefault(line.split(":", 1)[0], line)
    return "\n\n".join(kinds.values())


@pytest.mark.slow
def test_at_least_a_thousand_distinct_disks_are_explored(
    explored: dict[str, Report], request: pytest.FixtureRequest
) -> None:
    total = sum(report.disks for report in explored.values())
    print(f"\n[power-cut] {total} distinct post-crash disks over the two subjects")
    if request.node.callspec.params["explored"] == sweeps.EACH_KIND:
        # A disk for each crash point, less those that repeat a disk already judged.
        assert all(report.disks > 0.8 * report.crash_points for report in explored.values())
        return
    assert total >= MIN_DISKS
    assert all(report.disks > 100 for report in explored.values())


@pytest.mark.slow
def test_template_create_recovers_from_every_power_cut(explored: dict[str, Report]) -> None:
    report = explored["template"]
    assert not report.bad, f"{len(report.bad)} bad disks; one of each kind:\n{_verdict(report)}"


@pytest.mark.slow
def test_the_board_recovers_from_every_power_cut(explored: dict[str, Report]) -> None:
    report = explored["board"]
    assert not report.bad, f"{len(report.bad)} bad disks; one of each kind:\n{_verdict(report)}"


@pytest.mark.slow
@pytest.mark.parametrize("sweep", sweeps.SWEEPS)
def test_a_rename_before_the_data_sync_is_caught(tmp_path: Path, sweep: str) -> None:
    """With ``atomic_write``'s rename swapped before its data sync, some disk holds a
    board file that does not load: a kind of bad disk the real order never makes."""
    import shutil

    base = scratch(tmp_path)
    try:
        budget = disks(sweep, 300)
        kept = explore_board(base / "kept", budget)
        swapped = explore_board(base / "swapped", budget, rename_before_data_sync)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    unreadable = [
        line for line in swapped.bad if "document is empty" in line or "does not load" in line
    ]
    assert unreadable, f"the swap went unnoticed: {dict(swapped.kinds)}"
    assert not [line for line in kept.bad if "document is empty" in line or "does not load" in line]


@pytest.mark.slow
@pytest.mark.parametrize("sweep", sweeps.SWEEPS)
def test_a_checkpoint_renamed_before_its_group_sync_is_caught(tmp_path: Path, sweep: str) -> None:
    """With the group commit's renames swapped before its first sync, some disk holds a
    state whose name is durable and whose bytes are not: the example does not recover."""
    import shutil

    base = scratch(tmp_path)
    try:
        swapped = explore_template(
            base / "swapped", disks(sweep, 250), group_renamed_before_its_sync
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert swapped.bad, f"the swap went unnoticed over {swapped.disks} disks"


@pytest.mark.slow
@pytest.mark.parametrize("sweep", sweeps.SWEEPS)
def test_without_syncfs_the_example_recovers_from_every_power_cut(
    tmp_path: Path, sweep: str
) -> None:
    """The fallback where the system has no ``syncfs`` keeps the same promises."""
    import shutil

    base = scratch(tmp_path)
    try:
        report = explore_template(base / "fsync", disks(sweep, 200), without_syncfs)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert report.disks >= (150 if sweep == sweeps.EVERY_POINT else 0.8 * report.crash_points)
    assert not report.bad, f"{len(report.bad)} bad disks; one of each kind:\n{_verdict(report)}"


@pytest.mark.slow
@pytest.mark.parametrize("sweep", sweeps.SWEEPS)
def test_in_two_lanes_the_example_recovers_from_every_power_cut(tmp_path: Path, sweep: str) -> None:
    """Files written by two threads at once keep the same promises: the recorder logs both
    lanes' operations, and every disk a cut leaves recovers."""
    import shutil

    base = scratch(tmp_path)
    LANE_COMMITS.clear()
    try:
        report = explore_template(base / "lanes", disks(sweep, 200), in_two_lanes)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert len(LANE_COMMITS) >= 5, LANE_COMMITS  # the checkpoints did go in two lanes
    assert report.disks >= (150 if sweep == sweeps.EVERY_POINT else 0.8 * report.crash_points)
    assert not report.bad, f"{len(report.bad)} bad disks; one of each kind:\n{_verdict(report)}"


@pytest.mark.slow
@pytest.mark.parametrize("sweep", sweeps.SWEEPS)
def test_a_long_run_recovers_from_every_power_cut(tmp_path: Path, sweep: str) -> None:
    """A phase asking in a loop, then phases whose finished requests go to the history in
    batches: the saves that take what they can from the last one (kept lines, the
    journal cut from the record's line, hashes gone on from) recover from every disk a
    cut leaves, each recovery a host that reads the state back at every pause."""
    import shutil

    from orchestrator.storage import state_key

    base = scratch(tmp_path)
    try:
        # Short segments hashed on too, so this small run takes the paths a long one does.
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(state_key, "_HASHED_ON_FROM", 256)
            patch.setattr(state_key, "_AGREE_STEP", 64)
            report = explore_long(base / "long", 250 if sweep == sweeps.EVERY_POINT else 0)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(
        f"\n[power-cut] {report.subject}: {report.operations} operations, "
        f"{report.crash_points} crash points, {report.disks} distinct disks, {report.seconds:.0f} s"
    )
    assert report.disks >= (200 if sweep == sweeps.EVERY_POINT else 0.8 * report.crash_points)
    assert not report.bad, f"{len(report.bad)} bad disks; one of each kind:\n{_verdict(report)}"


def test_the_recorder_logs_an_atomic_write_and_an_append(tmp_path: Path) -> None:
    from orchestrator.storage import beneath
    from orchestrator.storage.durable import atomic_write
    from orchestrator.storage.ndjson import append_lines

    beneath.guard(tmp_path)
    (tmp_path / "old").write_bytes(b"before")
    with powercut.recording(tmp_path) as rec:
        (tmp_path / "d").mkdir()
        atomic_write(tmp_path / "d" / "f.json", b"{}")
        append_lines(tmp_path / "log.ndjson", [b"1\n"])
        append_lines(tmp_path / "log.ndjson", [b"2\n"])
        os.replace(tmp_path / "old", tmp_path / "new")
    kinds = [str(op) for op in rec.log]
    tmp = f"d/.f.json.{threading.get_native_id()}.{os.getpid()}.tmp"
    assert kinds == [
        "mkdir(d)", f"create({tmp}, fid 1)", "write(fid 1, offset 0, 2 bytes)", "fsync(fid 1)",
        f"rename({tmp} -> d/f.json)", "dirsync(d)",
        "create(log.ndjson, fid 2)", "write(fid 2, offset 0, 2 bytes)", "fdatasync(fid 2)",
        "dirsync()", "write(fid 2, offset 2, 2 bytes)", "fdatasync(fid 2)", "rename(old -> new)",
    ]  # fmt: skip


def test_the_model_keeps_what_syncs_cover_and_chooses_the_rest() -> None:
    """A write, a data sync, a rename without a directory sync: the file's bytes are kept
    whatever its name; the rename may or may not have happened; an unsynced second write
    is lost, kept, or torn."""
    Op = powercut.Op
    log = [
        Op("create", path="a.tmp", fid=1), Op("write", fid=1, data=b"abcd"), Op("fsync", fid=1),
        Op("rename", path="a.tmp", dst="a"), Op("write", fid=1, offset=4, data=b"efgh"),
    ]  # fmt: skip
    rec = powercut.Recording(root=Path("/nonexistent"), snapshot=powercut.Snapshot(), log=log)
    disks = {tuple(sorted(d.disk.items())) for d in powercut.explore(rec, seed=1)}
    assert (("a", b"abcd"),) in disks and (("a.tmp", b"abcd"),) in disks
    assert (("a", b"abcdefgh"),) in disks and (("a", b"abcdef"),) in disks
    assert ((),) not in disks and (("a.tmp", b""),) in disks  # before the fsync: empty
    assert all(content != b"efgh" for d in disks for _, content in d)
