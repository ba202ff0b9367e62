"""The task board through its Python API: a FakeClock, temporary directories, no sleeping.

Creating tasks, assigning them (packets, locks), heartbeats and the watchdog, requeueing,
results through the gateway, bad input with its code (acceptance criterion 6), worklogs
written by several processes at once, and the handoff bundle and its adoption.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest
from jsonschema import Draft7Validator, FormatChecker

from orchestrator._errors import BoardError
from orchestrator.board.board import (
    HANDOFF_MAX_BYTES,
    Board,
    adopt_handoff,
    cap_handoff,
    handoff_markdown,
)
from orchestrator.board.ledger import LEDGER_FILE
from orchestrator.formats.board_documents import (
    ErrorCode,
    LedgerDelta,
    Priority,
    Task,
    TaskStatus,
    TaskType,
    WorklogEntry,
    dump_board_document,
)
from orchestrator.formats.board_rules import (
    board_schema,
    parse_handoff,
    parse_packet,
    parse_verdict,
    parse_worklog_entry,
)
from orchestrator.testing import FakeClock

RUN = "3f56dc4d-35cf-4f97-925c-0b04a6fe8bf4"
OTHER_RUN = "0b8e2c1a-7d4f-4e0a-9c3b-5a6d7e8f9a0b"
FORMATS = FormatChecker()
WORKLOG_WRITER = Path(__file__).parents[1] / "fixtures" / "board" / "worklog_writer.py"
AWS_KEY = "AKIAQ3EGTV7XKZ4MB2PN"
GITHUB_TOKEN = "ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
TODO, IN_PROGRESS, BLOCKED = TaskStatus.TODO, TaskStatus.IN_PROGRESS, TaskStatus.BLOCKED
DONE, FAILED, CANCELED = TaskStatus.DONE, TaskStatus.FAILED, TaskStatus.CANCELED


def validator(kind: str) -> Draft7Validator:
    return Draft7Validator(board_schema(kind), format_checker=FORMATS)


def schema_errors(kind: str, document: Any) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator(kind).iter_errors(document)]


def make_task(
    task_id: str,
    *,
    dependencies: tuple[str, ...] = (),
    scope: tuple[str, ...] = (),
    forbidden: tuple[str, ...] = (),
    criteria: tuple[str, ...] = ("the tests pass",),
    timeout: int = 120,
    priority: Priority = Priority.NORMAL,
    title: str = "",
) -> Task:
    return Task(
        task_id=task_id,
        title=title or f"task {task_id}",
        type=TaskType.PARALLELIZABLE,
        dependencies=list(dependencies),
        lock_scope=list(scope or (f"src/{task_id}.py",)),
        forbidden_scope=list(forbidden),
        acceptance_criteria=list(criteria),
        worklog_path=f"worklogs/{task_id}.jsonl",
        timeout_seconds=timeout,
        heartbeat_interval_seconds=30,
        priority=priority,
    )


def subagent_result(
    task_id: str,
    changed: tuple[str, ...],
    *,
    criteria: tuple[str, ...] = ("the tests pass",),
    notes: tuple[str, ...] = (),
    run_id: str = RUN,
    status: str = "done",
) -> bytes:
    return json.dumps(
        {
            "schema_version": "1.0.0",
            "run_id": run_id,
            "task_id": task_id,
            "status": status,
            "changes": [{"resource": path, "action": "edit"} for path in changed],
            "acceptance_check": [
                {"criterion": c, "status": "pass", "evidence": "pytest -q: 12 passed"}
                for c in criteria
            ],
            "worklog_path": f"worklogs/{task_id}.jsonl",
            "notes_for_orchestrator": list(notes),
        }
    ).encode()


ARTIFACTS = {
    "report_md": "out/report.md",
    "selftest_log": "out/selftest.log",
    "evidence_dir": "out/evidence",
    "patch_diff": "out/patch.diff",
    "submit_json": "out/submit.json",
}


def submit_json(task_id: str, changed: tuple[str, ...], *, passed: bool = True) -> bytes:
    """A ``submit.json`` (task IO with pins)."""
    return json.dumps(
        {
            "schema_version": "scc.submit.v1",
            "task_id": task_id,
            "status": "DONE",
            "changed_files": list(changed),
            "new_files": [],
            "tests": {
                "commands": ["pytest -q"],
                "passed": passed,
                "summary": "12 passed" if passed else "3 failed, 9 passed",
            },
            "artifacts": ARTIFACTS,
            "exit_code": 0,
            "needs_input": [],
        }
    ).encode()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    (root / "out" / "evidence").mkdir(parents=True)
    for name, path in ARTIFACTS.items():
        if name != "evidence_dir":
            (root / path).write_text(f"{name}\n")
    return root


@pytest.fixture
def board(tmp_path: Path, clock: FakeClock, workspace: Path) -> Board:
    return Board.create(
        tmp_path / ".board",
        run_id=RUN,
        objective="Add endpoint tests",
        constraints=["Do not edit vendor/"],
        workspace=workspace,
        clock=clock,
    )


def ledger_lines(board: Board) -> list[dict[str, Any]]:
    path = board.directory / LEDGER_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def ledger_bytes(board: Board) -> bytes:
    path = board.directory / LEDGER_FILE
    return path.read_bytes() if path.exists() else b""


def files_under(board: Board, sub: str) -> list[str]:
    return sorted(p.name for p in (board.directory / sub).iterdir())


def status_of(board: Board, task_id: str) -> TaskStatus:
    return board.state().rows[task_id].status


def refused(call: Any, *args: Any, **kwargs: Any) -> BoardError:
    with pytest.raises(BoardError) as caught:
        call(*args, **kwargs)
    return caught.value


# -- creating tasks ---------------------------------------------------------------------


def test_tasks_are_created_in_dependency_order(board: Board) -> None:
    tasks = [
        make_task("T-3", dependencies=("T-2", "T-1")),
        make_task("T-2", dependencies=("T-1",)),
        make_task("T-1"),
        make_task("T-4"),
    ]
    created = board.create_tasks(tasks)
    assert [d.task_id for d in created] == ["T-1", "T-2", "T-3", "T-4"]
    assert [line["task_id"] for line in ledger_lines(board)] == ["T-1", "T-2", "T-3", "T-4"]
    for line in ledger_lines(board):
        assert schema_errors("ledger-delta", line) == []
        assert line["status"] == "todo" and line["x_base_version"] == 0
    state = board.state()
    assert {t: r.status for t, r in state.rows.items()} == dict.fromkeys(
        ["T-1", "T-2", "T-3", "T-4"], TODO
    )
    assert [row.task_id for row in board.ready()] == ["T-1", "T-4"]
    assert board.create_tasks(tasks) == []  # the same tasks again: nothing new


@pytest.mark.parametrize(
    ("dependencies", "cycle"),
    [
        ({"T-1": ("T-3",), "T-2": ("T-1",), "T-3": ("T-2",)}, ["T-1", "T-3", "T-2", "T-1"]),
        ({"T-1": ("T-1",)}, ["T-1", "T-1"]),
        ({"T-1": ("T-2",), "T-2": ("T-1",)}, ["T-1", "T-2", "T-1"]),
    ],
    ids=["three", "self", "two"],
)
def test_a_cycle_is_refused_naming_it_and_nothing_is_written(
    board: Board, dependencies: dict[str, tuple[str, ...]], cycle: list[str]
) -> None:
    tasks = [make_task("T-9")] + [
        make_task(task_id, dependencies=deps) for task_id, deps in dependencies.items()
    ]
    error = refused(board.create_tasks, tasks)
    assert error.code == "DEPENDENCY_NOT_MET"
    assert error.details["cycle"] == cycle
    assert " -> ".join(cycle) in str(error)
    assert ledger_bytes(board) == b"" and board.state().rows == {}


def test_duplicate_task_ids_are_refused_and_nothing_is_written(board: Board) -> None:
    error = refused(board.create_tasks, [make_task("T-1"), make_task("T-2"), make_task("T-1")])
    assert error.code == "SCHEMA_INVALID" and error.task_id == "T-1"
    assert ledger_bytes(board) == b""

    board.create_tasks([make_task("T-1")])
    before = ledger_bytes(board)
    other = make_task("T-1", title="another task under the same id")
    error = refused(board.create_tasks, [make_task("T-2"), other])
    assert error.code == "LEDGER_INCONSISTENT" and error.task_id == "T-1"
    assert ledger_bytes(board) == before
    assert set(board.state().rows) == {"T-1"}


def test_a_dependency_on_a_task_not_on_the_board_is_refused(board: Board) -> None:
    error = refused(board.create_tasks, [make_task("T-2", dependencies=("T-7",))])
    assert error.code == "DEPENDENCY_NOT_MET" and "T-7" in str(error)
    assert ledger_bytes(board) == b""


UNREADABLE_TASKS = [
    pytest.param({"timeout_seconds": 1, "heartbeat_interval_seconds": 1}, id="timeout-below-30"),
    pytest.param({"title": ""}, id="empty-title"),
    pytest.param({"acceptance_criteria": []}, id="no-acceptance-criteria"),
    pytest.param({"task_id": "task-1", "worklog_path": "worklogs/x.jsonl"}, id="bad-task-id"),
]


@pytest.mark.parametrize("fields", UNREADABLE_TASKS)
def test_a_task_the_seed_contract_refuses_is_not_created(
    board: Board, fields: dict[str, Any]
) -> None:
    task = attrs.evolve(make_task("T-1"), **fields)
    error = refused(board.create_tasks, [task])
    assert error.code == "SCHEMA_INVALID"
    assert ledger_bytes(board) == b""
    assert Board(board.directory).state().rows == {}


def test_a_worklog_path_outside_the_board_never_stops_the_watchdog(
    board: Board, clock: FakeClock
) -> None:
    escaping = attrs.evolve(make_task("T-1"), worklog_path="../../escape.jsonl")
    try:
        board.create_tasks([escaping, make_task("T-2")])
    except BoardError as error:  # refusing it at creation is one right answer
        assert error.code == "SCHEMA_INVALID"
        return
    board.assign(["T-1", "T-2"], owner="agent-a")
    clock.advance(121)
    assert [d.task_id for d in board.watchdog()] == ["T-1", "T-2"]  # the other right answer


# -- assigning --------------------------------------------------------------------------


def test_assign_writes_a_valid_packet_and_takes_the_locks(board: Board) -> None:
    board.create_tasks([make_task("T-1", scope=("src/api.py",)), make_task("T-2")])
    (packet,) = board.assign(["T-1"], owner="agent-a")
    path = board.packet_path("T-1", 1)
    document = json.loads(path.read_bytes())
    assert schema_errors("assignment-packet", document) == []
    assert parse_packet(document, source=str(path), strict=True) == packet
    assert packet.run_id == RUN and packet.global_objective == "Add endpoint tests"
    assert packet.task == board.state().rows["T-1"].task
    assert [(lock.task_id, lock.resource, lock.active) for lock in packet.active_locks] == [
        ("T-1", "src/api.py", True)
    ]
    assert [item.value for item in packet.context_package] == ["Do not edit vendor/"]

    row = board.state().rows["T-1"]
    assert (row.status, row.owner, row.attempts) == (IN_PROGRESS, "agent-a", 1)
    assert [(lock.task_id, lock.resource) for lock in board.lock_table()] == [("T-1", "src/api.py")]
    line = ledger_lines(board)[-1]
    assert (line["delta_id"], line["x_attempt"], line["x_base_version"]) == (
        "T-1/1/in_progress",
        1,
        1,
    )


def test_a_lock_conflict_refuses_the_whole_assignment_and_writes_nothing(board: Board) -> None:
    board.create_tasks(
        [
            make_task("T-1", scope=("src",)),
            make_task("T-2", scope=("src/api.py",)),
            make_task("T-3", scope=("src2",)),
        ]
    )
    board.assign(["T-1"], owner="agent-a")
    before = ledger_bytes(board)
    error = refused(board.assign, ["T-3", "T-2"], owner="agent-b")  # T-3 alone would start
    assert error.code == "LOCK_CONFLICT" and error.task_id == "T-2"
    assert error.details["conflicts"] == [
        {"task_id": "T-1", "resource": "src", "wanted": "src/api.py"}
    ]
    assert ledger_bytes(board) == before
    assert files_under(board, "packets") == ["T-1.1.json"]
    assert status_of(board, "T-3") is TODO

    board.assign(["T-3"], owner="agent-b")  # src2 is not under src
    assert status_of(board, "T-3") is IN_PROGRESS


def test_two_tasks_of_one_assignment_may_not_conflict_with_each_other(board: Board) -> None:
    board.create_tasks([make_task("T-1", scope=("docs",)), make_task("T-2", scope=("docs/a",))])
    error = refused(board.assign, ["T-1", "T-2"], owner="agent-a")
    assert error.code == "LOCK_CONFLICT"
    assert ledger_lines(board)[-1]["task_id"] == "T-2" and len(ledger_lines(board)) == 2
    assert files_under(board, "packets") == []


def test_dependency_not_met_refuses_and_writes_nothing(board: Board) -> None:
    board.create_tasks([make_task("T-1"), make_task("T-2", dependencies=("T-1",))])
    before = ledger_bytes(board)
    error = refused(board.assign, ["T-2"], owner="agent-a")
    assert error.code == "DEPENDENCY_NOT_MET" and error.details["waiting_for"] == ["T-1"]
    board.assign(["T-1"], owner="agent-a")
    error = refused(board.assign, ["T-2"], owner="agent-a")  # in progress is not done
    assert error.code == "DEPENDENCY_NOT_MET"
    assert files_under(board, "packets") == ["T-1.1.json"]
    assert ledger_bytes(board).startswith(before) and len(ledger_lines(board)) == 3


def test_assign_without_an_owner_or_of_an_unknown_task_is_refused(board: Board) -> None:
    board.create_tasks([make_task("T-1")])
    assert refused(board.assign, ["T-1"], owner=" ").code == "MISSING_REQUIRED_INPUT"
    assert refused(board.assign, ["T-8"], owner="agent-a").code == "LEDGER_INCONSISTENT"
    assert files_under(board, "packets") == [] and len(ledger_lines(board)) == 1


def test_assign_repeated_after_a_crash_returns_the_same_packet(board: Board) -> None:
    board.create_tasks([make_task("T-1")])
    (first,) = board.assign(["T-1"], owner="agent-a")
    (again,) = board.assign(["T-1"], owner="agent-a")
    assert again == first and len(ledger_lines(board)) == 2


# -- heartbeats and the watchdog ----------------------------------------------------------


def test_heartbeats_are_taken_only_from_the_current_attempt_in_progress(
    board: Board, clock: FakeClock
) -> None:
    board.create_tasks([make_task("T-1")])
    assert refused(board.heartbeat, "T-1").code == "INVALID_TRANSITION"  # todo
    assert refused(board.heartbeat, "T-5").code == "LEDGER_INCONSISTENT"
    board.assign(["T-1"], owner="agent-a")
    clock.advance(10)
    assert board.heartbeat("T-1", attempt=1) == "2025-11-18T10:30:10.000Z"
    beat = (board.directory / "heartbeats" / "T-1").read_text().strip()
    assert beat == "2025-11-18T10:30:10.000Z"
    error = refused(board.heartbeat, "T-1", attempt=2)  # not this attempt's subagent
    assert error.code == "CONCURRENCY_CONFLICT"
    board.fail_attempt("T-1", 1, code=ErrorCode.NON_COMPLIANT, reason="gave up")
    assert refused(board.heartbeat, "T-1", attempt=1).code == "INVALID_TRANSITION"


def test_the_watchdog_blocks_a_silent_task_and_releases_its_locks_in_the_same_delta(
    board: Board, clock: FakeClock
) -> None:
    board.create_tasks(
        [make_task("T-1", scope=("src",), timeout=120), make_task("T-2", scope=("src/a.py",))]
    )
    board.assign(["T-1"], owner="agent-a")
    clock.advance(60)
    last = board.heartbeat("T-1")
    clock.advance(120)  # exactly timeout_seconds: not older than it yet
    assert board.watchdog() == []
    assert status_of(board, "T-1") is IN_PROGRESS
    lines_before = len(ledger_lines(board))

    clock.advance(1)
    (delta,) = board.watchdog()
    assert (delta.task_id, delta.status, delta.x_code) == ("T-1", BLOCKED, ErrorCode.TASK_TIMEOUT)
    assert delta.timed_out is True and delta.last_heartbeat_at == last
    assert last in delta.reason and "120" in delta.reason
    lines = ledger_lines(board)
    assert len(lines) == lines_before + 1  # one delta: blocked, and the locks with it
    assert lines[-1]["timed_out"] is True and lines[-1]["last_heartbeat_at"] == last
    assert lines[-1]["x_code"] == "TASK_TIMEOUT"
    assert board.lock_table() == []
    assert [(lock.task_id, lock.active) for lock in board.lock_table(history=True)] == [
        ("T-1", False)
    ]
    row = board.state().rows["T-1"]
    assert (row.status, row.code, row.last_heartbeat_at) == (BLOCKED, ErrorCode.TASK_TIMEOUT, last)

    final = board.worklog("T-1")[-1]
    assert schema_errors("worklog-entry", final) == []
    assert final["code"] == "TASK_TIMEOUT" and final["next_step"]
    assert final["x_delta_id"] == delta.delta_id
    assert board.watchdog() == []  # nothing more to do
    board.assign(["T-2"], owner="agent-b")  # the lock on src is free again


def test_fresh_heartbeats_keep_a_task_alive(board: Board, clock: FakeClock) -> None:
    board.create_tasks([make_task("T-1", timeout=120)])
    board.assign(["T-1"], owner="agent-a")
    for _ in range(20):  # 20 minutes, a beat every minute
        clock.advance(60)
        board.heartbeat("T-1", attempt=1)
        assert board.watchdog() == []
    assert status_of(board, "T-1") is IN_PROGRESS
    assert board.watchdog(now=clock.now()) == []
    (delta,) = board.watchdog(now=clock.now() + timedelta(seconds=121))
    assert delta.x_code is ErrorCode.TASK_TIMEOUT


def test_a_task_that_never_beat_times_out_from_its_assignment(
    board: Board, clock: FakeClock
) -> None:
    board.create_tasks([make_task("T-1", timeout=300)])
    board.assign(["T-1"], owner="agent-a")
    assigned = board.state().rows["T-1"].updated_at
    clock.advance(300)
    assert board.watchdog() == []
    clock.advance(1)
    (delta,) = board.watchdog()
    assert delta.last_heartbeat_at == assigned


# -- requeue or fail ----------------------------------------------------------------------


def test_requeue_while_attempts_remain_then_fail_and_cancel_the_dependents(
    board: Board, clock: FakeClock
) -> None:
    board.create_tasks(
        [
            make_task("T-1"),
            make_task("T-2", dependencies=("T-1",)),
            make_task("T-3", dependencies=("T-2",)),
            make_task("T-4"),
        ]
    )
    board.assign(["T-1"], owner="agent-a")
    clock.advance(121)
    board.watchdog()
    (requeued,) = board.requeue_or_fail(max_attempts=2, retry_after_ms=5000)
    assert (requeued.task_id, requeued.status, requeued.retry_after_ms) == ("T-1", TODO, 5000)
    row = board.state().rows["T-1"]
    assert (row.status, row.owner, row.attempts, row.code) == (TODO, "", 1, None)

    board.assign(["T-1"], owner="agent-b")
    assert board.state().rows["T-1"].attempts == 2
    assert files_under(board, "packets") == ["T-1.1.json", "T-1.2.json"]
    board.fail_attempt("T-1", 2, code=ErrorCode.NON_COMPLIANT, reason="the agent crashed")
    changed = board.requeue_or_fail(max_attempts=2)
    assert [(d.task_id, d.status) for d in changed] == [
        ("T-1", FAILED),
        ("T-2", CANCELED),
        ("T-3", CANCELED),
    ]
    state = board.state()
    assert state.rows["T-1"].code is ErrorCode.NON_COMPLIANT
    for task_id in ("T-2", "T-3"):
        assert state.rows[task_id].code is ErrorCode.DEPENDENCY_NOT_MET
        final = board.worklog(task_id)[-1]
        assert final["code"] == "DEPENDENCY_NOT_MET" and final["decision"] == "canceled"
    assert state.rows["T-4"].status is TODO
    lines = len(ledger_lines(board))
    assert board.requeue_or_fail(max_attempts=2) == []  # nothing left to decide
    assert len(ledger_lines(board)) == lines


def test_a_task_blocked_twice_at_one_attempt_is_requeued_twice(board: Board) -> None:
    board.create_tasks([make_task("T-1"), make_task("T-2")])
    for _ in range(2):
        board.set_status("T-1", BLOCKED, reason="waiting for input", code=ErrorCode.NON_COMPLIANT)
        board.set_status("T-2", BLOCKED, reason="waiting for input", code=ErrorCode.NON_COMPLIANT)
        changed = board.requeue_or_fail(max_attempts=3)
        assert [(d.task_id, d.status) for d in changed] == [("T-1", TODO), ("T-2", TODO)]


# -- results through the gateway ----------------------------------------------------------


def test_a_passing_result_makes_the_task_done_with_a_valid_verdict(board: Board) -> None:
    board.create_tasks([make_task("T-1", scope=("src",)), make_task("T-2", dependencies=("T-1",))])
    board.assign(["T-1"], owner="agent-a")
    judgement = board.submit("T-1", subagent_result("T-1", ("src/api.py", "./src/util.py")))
    assert judgement.passed and judgement.verdict.verdict.value == "PASS"

    verdict_path = board.directory / "verdicts" / "T-1.1.json"
    document = json.loads(verdict_path.read_bytes())
    assert schema_errors("verdict", document) == []
    assert parse_verdict(document, source=str(verdict_path), strict=True) == judgement.verdict
    assert document["checks"] == dict.fromkeys(
        ["schema_valid", "scope_valid", "tests_passed", "evidence_present"], True
    )
    assert document["links"]["submit_json"] == "results/T-1.1.json"
    assert (board.directory / "results" / "T-1.1.json").read_bytes() == subagent_result(
        "T-1", ("src/api.py", "./src/util.py")
    )
    row = board.state().rows["T-1"]
    assert (row.status, row.verdict) == (DONE, "verdicts/T-1.1.json")
    assert ledger_lines(board)[-1]["x_verdict"] == "verdicts/T-1.1.json"
    assert board.lock_table() == []
    assert [r.task_id for r in board.ready()] == ["T-2"]


def test_submitting_again_after_the_attempt_was_settled_returns_the_recorded_verdict(
    board: Board, clock: FakeClock
) -> None:
    board.create_tasks([make_task("T-1"), make_task("T-2")])
    board.assign(["T-1", "T-2"], owner="agent-a")
    first = board.submit("T-1", subagent_result("T-1", ("src/T-1.py",)))
    failed = board.submit("T-2", subagent_result("T-2", ("elsewhere.py",)))
    before = ledger_bytes(board)
    clock.advance(30)
    again = board.submit("T-1", subagent_result("T-1", ("src/T-1.py",)))
    assert again.verdict == first.verdict and again.passed
    failed_again = board.submit("T-2", subagent_result("T-2", ("elsewhere.py",)))
    assert failed_again.verdict == failed.verdict and not failed_again.passed
    assert failed_again.problem is not None
    assert failed_again.problem.code is ErrorCode.SCOPE_VIOLATION
    assert ledger_bytes(board) == before  # no second delta


def test_a_recorded_fail_stays_a_fail_after_the_task_was_requeued(board: Board) -> None:
    board.create_tasks([make_task("T-1")])
    board.assign(["T-1"], owner="agent-a")
    failed = board.submit("T-1", subagent_result("T-1", ("elsewhere.py",)))
    board.requeue_or_fail(max_attempts=3)
    again = board.submit("T-1", subagent_result("T-1", ("elsewhere.py",)), attempt=1)
    assert again.verdict == failed.verdict
    assert not again.passed


@pytest.mark.slow
def test_the_watchdog_cannot_settle_an_attempt_while_its_result_is_judged(
    board: Board, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Judging and recording a result happen under the board's lock: a watchdog that
    starts in between waits, then finds the task done (nothing to time out)."""
    import threading

    import orchestrator.board.results as board_module

    board.create_tasks([make_task("T-1", timeout=120)])
    board.assign(["T-1"], owner="agent-a")
    judge = board_module.evaluate
    timed_out: list[Any] = []
    watchdog = threading.Thread(
        target=lambda: timed_out.append(Board(board.directory, clock=clock).watchdog())
    )

    def judged_while_the_watchdog_runs(*args: Any, **kwargs: Any) -> Any:
        clock.advance(121)  # the heartbeat is stale from here on
        watchdog.start()
        watchdog.join(0.5)  # time enough to do its harm, were it not waiting for the lock
        return judge(*args, **kwargs)

    monkeypatch.setattr(board_module, "evaluate", judged_while_the_watchdog_runs)
    judgement = board.submit("T-1", subagent_result("T-1", ("src/T-1.py",)))
    watchdog.join(10)
    assert judgement.passed
    assert status_of(board, "T-1") is DONE
    assert timed_out == [[]]


# -- bad input, each with its code (acceptance criterion 6) --------------------------------


def test_invalid_transitions_are_refused(board: Board) -> None:
    board.create_tasks([make_task("T-1"), make_task("T-2")])
    board.assign(["T-1"], owner="agent-a")
    board.submit("T-1", subagent_result("T-1", ("src/T-1.py",)))
    before = ledger_bytes(board)
    for task_id, status in [("T-1", TODO), ("T-1", BLOCKED), ("T-2", TODO)]:
        error = refused(board.set_status, task_id, status, reason="why not")
        assert error.code == "INVALID_TRANSITION", (task_id, status)
        assert error.task_id == task_id
    assert refused(board.set_status, "T-2", IN_PROGRESS, reason="x").code == "INVALID_TRANSITION"
    assert refused(board.set_status, "T-2", DONE, reason="x").code == "ACCEPTANCE_FAILED"
    assert ledger_bytes(board) == before


def test_a_terminal_state_may_be_reasserted_without_changing_owner_or_locks(
    board: Board,
) -> None:
    board.create_tasks([make_task("T-1")])
    board.set_status("T-1", CANCELED, reason="not needed", owner="alice")
    delta = board.set_status("T-1", CANCELED, reason="still not needed", owner="bob")
    assert delta is not None
    row = board.state().rows["T-1"]
    assert (row.status, row.owner) == (CANCELED, "alice")
    assert board.lock_table() == []


def test_unknown_task_ids_are_refused_everywhere(board: Board) -> None:
    board.create_tasks([make_task("T-1")])
    before = ledger_bytes(board)
    calls = [
        (board.assign, (["T-9"],), {"owner": "agent-a"}),
        (board.heartbeat, ("T-9",), {}),
        (board.submit, ("T-9", subagent_result("T-9", ("src/x.py",))), {}),
        (board.set_status, ("T-9", BLOCKED), {"reason": "x"}),
        (board.fail_attempt, ("T-9", 1), {"code": ErrorCode.NON_COMPLIANT, "reason": "x"}),
        (board.worklog, ("T-9",), {}),
    ]
    for call, args, kwargs in calls:
        error = refused(call, *args, **kwargs)
        assert error.code == "LEDGER_INCONSISTENT", call.__name__
        assert "T-9" in str(error)
    assert ledger_bytes(board) == before
    assert files_under(board, "results") == [] and files_under(board, "verdicts") == []


def test_a_result_for_a_task_not_in_progress_is_refused(board: Board) -> None:
    board.create_tasks([make_task("T-1")])
    error = refused(board.submit, "T-1", subagent_result("T-1", ("src/T-1.py",)))
    assert error.code == "INVALID_TRANSITION"
    assert files_under(board, "results") == [] and files_under(board, "verdicts") == []
    assert status_of(board, "T-1") is TODO


def judged(board: Board, task: Task, raw: bytes) -> tuple[Any, dict[str, Any]]:
    board.create_tasks([task])
    board.assign([task.task_id], owner="agent-a")
    judgement = board.submit(task.task_id, raw)
    verdict_path = board.directory / "verdicts" / f"{task.task_id}.1.json"
    verdict = json.loads(verdict_path.read_bytes())
    assert schema_errors("verdict", verdict) == []
    return judgement, verdict


BAD_RESULTS = [
    pytest.param(
        make_task("T-1", scope=("src/api",)),
        subagent_result("T-1", ("src/api/x.py", "src/apiary.py")),
        "SCOPE_VIOLATION",
        "SCOPE_CONFLICT",
        "scope_valid",
        "src/apiary.py (outside lock_scope",
        id="changed-file-outside-scope",
    ),
    pytest.param(
        make_task("T-1", scope=("src",), forbidden=("vendor",)),
        subagent_result("T-1", ("src/a.py", "vendor/lib.py")),
        "SCOPE_VIOLATION",
        "SCOPE_CONFLICT",
        "scope_valid",
        "vendor/lib.py (in forbidden_scope)",
        id="changed-file-in-forbidden-scope",
    ),
    pytest.param(
        make_task("T-1", scope=("src",)),
        subagent_result("T-1", ("../etc/passwd",)),
        "SCOPE_VIOLATION",
        "SCOPE_CONFLICT",
        "scope_valid",
        "../etc/passwd",
        id="path-escaping-the-root",
    ),
    pytest.param(
        make_task("T-1"),
        subagent_result("T-1", ("src/T-1.py",), notes=("fine", f"deploy with {AWS_KEY}")),
        "UNTRUSTED_CONTEXT_BLOCK",
        "POLICY_VIOLATION",
        None,
        "notes_for_orchestrator[1] holds a secret (aws_access_key_id)",
        id="secret-in-notes",
    ),
    pytest.param(
        make_task("T-1"),
        subagent_result("T-2", ("src/T-1.py",)),
        "SCHEMA_INVALID",
        "SCHEMA_VIOLATION",
        "schema_valid",
        "task_id is T-2, the assignment was T-1",
        id="result-for-another-task",
    ),
    pytest.param(
        make_task("T-1"),
        subagent_result("T-1", ("src/T-1.py",), run_id=OTHER_RUN),
        "SCHEMA_INVALID",
        "SCHEMA_VIOLATION",
        "schema_valid",
        f"run_id is {OTHER_RUN}",
        id="result-for-another-run",
    ),
    pytest.param(
        make_task("T-1", criteria=("the tests pass", "the docs build")),
        subagent_result("T-1", ("src/T-1.py",)),
        "ACCEPTANCE_FAILED",
        "CI_FAILED",
        "tests_passed",
        "criteria not checked: the docs build",
        id="criterion-not-checked",
    ),
    pytest.param(
        make_task("T-1"),
        b'{"schema_version": "1.0.0", "run_id": ',
        "SCHEMA_INVALID",
        "SCHEMA_VIOLATION",
        "schema_valid",
        "results/T-1.1.json",
        id="not-json",
    ),
    pytest.param(
        make_task("T-1"),
        subagent_result("T-1", ("src/T-1.py",)).replace(b'"1.0.0"', b'"2.0.0"'),
        "UNKNOWN_SCHEMA_VERSION",
        "SCHEMA_VIOLATION",
        "schema_valid",
        "major 2",
        id="unknown-major-version",
    ),
    pytest.param(
        make_task("T-1", scope=("src",)),
        submit_json("T-1", ("src/a.py",), passed=False),
        "ACCEPTANCE_FAILED",
        "CI_FAILED",
        "tests_passed",
        "3 failed, 9 passed",
        id="submit-tests-failed",
    ),
]


@pytest.mark.parametrize(("task", "raw", "code", "fail_code", "check", "words"), BAD_RESULTS)
def test_a_bad_result_blocks_the_task_with_its_code(
    board: Board,
    task: Task,
    raw: bytes,
    code: str,
    fail_code: str,
    check: str | None,
    words: str,
) -> None:
    judgement, verdict = judged(board, task, raw)
    assert not judgement.passed
    assert verdict["verdict"] == "FAIL" and verdict["reason_code"] == fail_code
    if check is not None:
        assert verdict["checks"][check] is False
    assert any(words in message for message in verdict["messages"]), verdict["messages"]
    row = board.state().rows["T-1"]
    assert (row.status, row.code) == (BLOCKED, ErrorCode(code))
    assert board.lock_table() == []  # blocked: its locks are released
    final = board.worklog("T-1")[-1]
    assert final["code"] == code and final["decision"] == "blocked"
    everything = ledger_bytes(board) + json.dumps(verdict).encode()
    everything += (board.directory / "worklogs" / "T-1.jsonl").read_bytes()
    assert AWS_KEY.encode() not in everything  # a secret is never repeated by the board


def test_a_submit_with_a_missing_artifact_lacks_evidence(board: Board, workspace: Path) -> None:
    (workspace / ARTIFACTS["selftest_log"]).unlink()
    judgement, verdict = judged(
        board, make_task("T-1", scope=("src",)), submit_json("T-1", ("src/a.py",))
    )
    assert not judgement.passed and verdict["reason_code"] == "EVIDENCE_MISSING"
    assert verdict["checks"]["evidence_present"] is False
    assert verdict["checks"]["tests_passed"] is True
    assert any("selftest_log 'out/selftest.log'" in m for m in verdict["messages"])
    assert status_of(board, "T-1") is BLOCKED
    assert board.state().rows["T-1"].code is ErrorCode.ACCEPTANCE_FAILED


def test_a_submit_with_every_artifact_passes(board: Board) -> None:
    judgement, verdict = judged(
        board, make_task("T-1", scope=("src",)), submit_json("T-1", ("src/a.py",))
    )
    assert judgement.passed and verdict["verdict"] == "PASS"
    assert verdict["links"]["report_md"] == "out/report.md"
    assert status_of(board, "T-1") is DONE


def test_forged_deltas_are_refused(board: Board) -> None:
    board.create_tasks([make_task("T-1")])
    board.assign(["T-1"], owner="agent-a")
    before = ledger_bytes(board)
    row = board.state().rows["T-1"]
    forged = LedgerDelta(
        task_id="T-1",
        status=IN_PROGRESS,
        owner="mallory",  # the assignment's delta_id, other content
        reason="assigned to mallory (attempt 1)",
        delta_id="T-1/1/in_progress",
        x_base_version=1,
        x_attempt=1,
    )
    unproven = LedgerDelta(
        task_id="T-1",
        status=DONE,
        owner="agent-a",
        reason="trust me",
        delta_id="T-1/1/done",
        x_base_version=row.version,
    )
    with board.ledger.locked():
        assert refused(board.ledger.append, [forged], at=board.now()).code == (
            "LEDGER_INCONSISTENT"
        )
        assert refused(board.ledger.append, [unproven], at=board.now()).code == (
            "ACCEPTANCE_FAILED"
        )
    assert ledger_bytes(board) == before
    assert status_of(board, "T-1") is IN_PROGRESS


def test_a_stale_writer_conflicts(board: Board) -> None:
    board.create_tasks([make_task("T-1")])
    seen = board.state().rows["T-1"].version
    board.set_status("T-1", BLOCKED, reason="first")
    error = refused(board.set_status, "T-1", CANCELED, reason="second", base_version=seen)
    assert error.code == "CONCURRENCY_CONFLICT"
    assert status_of(board, "T-1") is BLOCKED


# -- worklogs ---------------------------------------------------------------------------


def worklog_entry(**fields: Any) -> WorklogEntry:
    values = {
        "timestamp": "2025-11-18T10:30:00.000Z",
        "run_id": RUN,
        "task_id": "T-1",
        "actor": "agent-a",
        "action": "edit",
        "files_touched": ["src/T-1.py"],
        "decision": "use the existing client",
        "result": "two tests added",
        "next_step": "run the suite",
    }
    return WorklogEntry(**{**values, **fields})


@pytest.mark.parametrize("field", ["decision", "result"])
@pytest.mark.parametrize("secret", [AWS_KEY, GITHUB_TOKEN])
def test_a_secret_in_an_untrusted_worklog_field_refuses_the_entry(
    board: Board, field: str, secret: str
) -> None:
    board.create_tasks([make_task("T-1")])
    board.append_worklog(worklog_entry())
    before = (board.directory / "worklogs" / "T-1.jsonl").read_bytes()
    error = refused(board.append_worklog, worklog_entry(**{field: f"used {secret} to log in"}))
    assert error.code == "UNTRUSTED_CONTEXT_BLOCK" and field in str(error)
    assert secret not in str(error)
    assert (board.directory / "worklogs" / "T-1.jsonl").read_bytes() == before


def test_a_secret_in_another_worklog_field_is_redacted(board: Board) -> None:
    board.create_tasks([make_task("T-1")])
    written = board.append_worklog(
        worklog_entry(
            actor=f"agent {GITHUB_TOKEN}",
            action=f"export AWS_ACCESS_KEY_ID={AWS_KEY}",
            files_touched=[f"src/{AWS_KEY}.txt"],
            next_step=f"rotate {GITHUB_TOKEN}",
            evidence=f"curl -u {AWS_KEY}",
        )
    )
    (line,) = board.worklog("T-1")
    raw = (board.directory / "worklogs" / "T-1.jsonl").read_text()
    assert AWS_KEY not in raw and GITHUB_TOKEN not in raw
    assert line["action"] == "export AWS_ACCESS_KEY_ID=[REDACTED:aws_access_key_id]"
    assert line["actor"] == "agent [REDACTED:github_token]"
    assert line["files_touched"] == ["src/[REDACTED:aws_access_key_id].txt"]
    assert line["evidence"] == "curl -u [REDACTED:aws_access_key_id]"
    assert parse_worklog_entry(line, source="worklog", strict=True) == written
    assert schema_errors("worklog-entry", line) == []


def test_a_secret_in_a_status_reason_is_redacted_in_the_ledger(board: Board) -> None:
    board.create_tasks([make_task("T-1")])
    board.set_status(
        "T-1", BLOCKED, reason=f"the key {AWS_KEY} leaked", code=ErrorCode.NON_COMPLIANT
    )
    assert AWS_KEY.encode() not in ledger_bytes(board)
    assert board.state().rows["T-1"].reason == "the key [REDACTED:aws_access_key_id] leaked"


def test_a_worklog_entry_of_another_run_is_refused(board: Board) -> None:
    board.create_tasks([make_task("T-1")])
    assert refused(board.append_worklog, worklog_entry(run_id=OTHER_RUN)).code == "SCHEMA_INVALID"
    assert not (board.directory / "worklogs" / "T-1.jsonl").exists()


@pytest.mark.slow
def test_worklog_appends_from_four_processes_at_once_stay_whole(
    board: Board, tmp_path: Path
) -> None:
    board.create_tasks([make_task("T-1")])
    ready = tmp_path / "go"
    count = 40
    writers = [
        subprocess.Popen(
            [
                *(sys.executable, str(WORKLOG_WRITER), str(board.directory), "T-1"),
                *(str(writer), str(count), "--ready-file", str(ready)),
            ],
            stderr=subprocess.PIPE,
        )
        for writer in range(4)
    ]
    ready.touch()
    for process in writers:
        _, error = process.communicate(timeout=120)
        assert process.returncode == 0, error
    raw = (board.directory / "worklogs" / "T-1.jsonl").read_bytes()
    assert raw.endswith(b"\n")
    entries = [json.loads(line) for line in raw.splitlines()]  # every line is whole JSON
    assert len(entries) == 4 * count
    for writer in range(4):
        actions = [e["action"] for e in entries if e["actor"] == f"writer-{writer}"]
        assert actions == [f"step {writer}.{n}" for n in range(count)]
        for e in entries:
            if e["actor"] == f"writer-{writer}":
                number = int(e["action"].rsplit(".", 1)[1])
                assert e["decision"].startswith(f"w{writer}n{number} ")
    assert all(schema_errors("worklog-entry", e) == [] for e in entries)


# -- handoff ----------------------------------------------------------------------------


def busy_board(board: Board, clock: FakeClock) -> Board:
    """A board with a task in every state: T-1 done, T-2 in progress, T-3 blocked, T-4 todo
    (waiting for T-2), T-5 failed, T-6 canceled, T-7 todo."""
    board.create_tasks(
        [
            make_task("T-1", scope=("src/a",)),
            make_task("T-2", scope=("src/b",), priority=Priority.HIGH),
            make_task("T-3", scope=("src/c",)),
            make_task("T-4", dependencies=("T-1", "T-2"), scope=("docs",)),
            make_task("T-5", criteria=("fast", "correct")),
            make_task("T-6"),
            make_task("T-7", priority=Priority.LOW),
        ]
    )
    board.assign(["T-1", "T-2", "T-3"], owner="agent-a")
    board.submit("T-1", subagent_result("T-1", ("src/a/x.py",)))
    clock.advance(10)
    board.heartbeat("T-2")
    board.submit("T-3", subagent_result("T-3", ("src/z.py",)))
    board.set_status("T-5", FAILED, reason="impossible", code=ErrorCode.NON_COMPLIANT)
    board.set_status("T-6", CANCELED, reason="not needed")
    return board


def test_the_handoff_is_deterministic_valid_and_lists_every_open_task(
    board: Board, clock: FakeClock
) -> None:
    busy_board(board, clock)
    first, second = board.handoff(), board.handoff()
    data = dump_board_document(first)
    assert data == dump_board_document(second)
    assert handoff_markdown(first) == handoff_markdown(second)
    document = json.loads(data)
    assert schema_errors("handoff-bundle", document) == []
    assert parse_handoff(document, source="handoff.json", strict=True) == first
    assert len(data) <= HANDOFF_MAX_BYTES

    rows = {row.task_id: row for row in first.ledger}
    assert {t: r.status.value for t, r in rows.items()} == {
        "T-1": "done",
        "T-2": "in_progress",
        "T-3": "blocked",
        "T-4": "todo",
        "T-5": "failed",
        "T-6": "canceled",
        "T-7": "todo",
    }
    assert rows["T-2"].last_heartbeat_at == "2025-11-18T10:30:10.000Z"
    assert [(lock.task_id, lock.resource) for lock in first.active_locks] == [("T-2", "src/b")]
    assert {b.task_id: b.code.value for b in first.open_blockers} == {
        "T-3": "SCOPE_VIOLATION",
        "T-5": "NON_COMPLIANT",
    }
    assert [(d.task_id, d.depends_on) for d in first.dependencies] == [("T-4", ["T-1", "T-2"])]

    markdown = handoff_markdown(first)
    for task_id, status in [("T-2", "in_progress"), ("T-3", "blocked"), ("T-4", "todo")]:
        assert f"| {task_id} | {status} |" in markdown
    assert "| T-7 | todo |" in markdown
    assert "- src/b (T-2)" in markdown


@pytest.mark.slow
def test_a_large_board_keeps_its_open_tasks_under_the_cap(board: Board) -> None:
    finished, still_open = 2000, 30
    board.create_tasks(
        [
            make_task(f"T-{n}", title=f"finished task number {n} " + "x" * 150)
            for n in range(1, finished + 1)
        ]
        + [make_task(f"T-{n}") for n in range(finished + 1, finished + still_open + 1)]
    )
    with board.ledger.locked() as state:
        board.ledger.append(
            [
                LedgerDelta(
                    task_id=f"T-{n}",
                    status=CANCELED,
                    owner="",
                    reason="superseded",
                    delta_id=f"T-{n}/cancel",
                    x_base_version=state.version(f"T-{n}"),
                )
                for n in range(1, finished + 1)
            ],
            at=board.now(),
        )
    bundle = board.handoff()
    data = dump_board_document(bundle)
    assert len(data) <= HANDOFF_MAX_BYTES
    assert schema_errors("handoff-bundle", json.loads(data)) == []
    kept = {row.task_id for row in bundle.ledger}
    assert {f"T-{n}" for n in range(finished + 1, finished + still_open + 1)} <= kept
    assert any("left out of this bundle" in c for c in bundle.constraints)
    markdown = handoff_markdown(bundle)
    for n in range(finished + 1, finished + still_open + 1):
        assert f"| T-{n} | todo |" in markdown
    assert cap_handoff(bundle) == bundle  # capping twice changes nothing


def many_finished_tasks_with_long_criteria(board: Board, count: int) -> None:
    criteria = tuple(
        f"criterion {k}: " + "the endpoint answers within budget " * 3 for k in range(2)
    )
    board.create_tasks(
        [make_task(f"T-{n}", criteria=criteria) for n in range(1, count + 1)]
        + [make_task(f"T-{count + 1}", dependencies=("T-1",))]
    )
    board.assign(["T-1"], owner="agent-a")
    board.submit("T-1", subagent_result("T-1", ("src/T-1.py",), criteria=criteria))
    with board.ledger.locked() as state:
        board.ledger.append(
            [
                LedgerDelta(
                    task_id=f"T-{n}",
                    status=CANCELED,
                    owner="",
                    reason="superseded",
                    delta_id=f"T-{n}/cancel",
                    x_base_version=state.version(f"T-{n}"),
                )
                for n in range(2, count + 1)
            ],
            at=board.now(),
        )


@pytest.mark.slow
def test_a_board_with_many_finished_tasks_and_long_criteria_stays_under_the_cap(
    board: Board,
) -> None:
    many_finished_tasks_with_long_criteria(board, 2000)
    data = dump_board_document(board.handoff())
    assert len(data) <= HANDOFF_MAX_BYTES


@pytest.mark.slow
def test_a_capped_handoff_can_be_adopted(board: Board, tmp_path: Path) -> None:
    many_finished_tasks_with_long_criteria(board, 2000)
    bundle = board.handoff()
    adopted = adopt_handoff(tmp_path / "adopted", bundle, clock=FakeClock())
    assert adopted.state().rows["T-2001"].status is TODO


def test_adopting_a_handoff_keeps_every_status_and_the_board_continues(
    board: Board, clock: FakeClock, tmp_path: Path
) -> None:
    busy_board(board, clock)
    bundle = board.handoff()
    adopted = adopt_handoff(tmp_path / "adopted", bundle, clock=clock)
    assert adopted.run_id == RUN and adopted.info.objective == "Add endpoint tests"
    old, new = board.state().rows, adopted.state().rows
    assert set(new) == set(old)
    for task_id, row in old.items():
        expected = BLOCKED if row.status is IN_PROGRESS else row.status  # to be reassigned
        assert new[task_id].status is expected, task_id
        assert new[task_id].task.lock_scope == row.task.lock_scope
        assert new[task_id].task.dependencies == row.task.dependencies
        assert new[task_id].task.acceptance_criteria == row.task.acceptance_criteria
    assert adopted.lock_table() == []

    assert [r.task_id for r in adopted.ready()] == ["T-7"]
    (packet,) = adopted.assign(["T-7"], owner="agent-b")
    assert packet.task.task_id == "T-7" and packet.run_id == RUN
    assert (
        schema_errors("assignment-packet", json.loads(adopted.packet_path("T-7", 1).read_bytes()))
        == []
    )
    adopted.requeue_or_fail(max_attempts=3)  # T-2 and T-3 back to todo
    adopted.assign(["T-2"], owner="agent-b")
    adopted.submit("T-2", subagent_result("T-2", ("src/b/y.py",)))
    adopted.assign(["T-4"], owner="agent-b")  # T-1 and T-2 are done now
    assert adopted.state().rows["T-4"].status is IN_PROGRESS
