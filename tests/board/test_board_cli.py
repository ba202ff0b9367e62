"""``orchestrate board ...`` and ``orchestrate check ...`` as hosts and subagents run them.

Every case runs real ``python -m orchestrator`` processes and checks the exit code, what
was printed and the files left behind. It proves that:

- ``board init|create|status|ledger|locks|assign|heartbeat|worklog|submit|watchdog|
  set-status|handoff|adopt`` do what README.md and docs/board.md say, refuse what they
  must (a dependency cycle, a lock conflict, a replaced subagent's heartbeat, a secret in
  an untrusted worklog field, a stale version) in one line on stderr, without a
  traceback, and write nothing when they refuse;
- with a workflow paused on a task, ``board submit`` delivers the answer to that task's
  request (the engine judges it on resume) and ``board watchdog`` answers a stale task's
  request TIMEOUT, so the next resume reassigns it;
- ``check KIND`` (every kind) prints exactly one line of compact JSON ``{allow, code,
  reason[, details]}`` and exits 0 only when allowed: good documents pass, bad ones are
  refused with their task board error codes, ``--strict`` refuses an unknown field that the
  default accepts, and ``check result|submit --packet`` runs the gateway;
- the task-board example runs end to end offline (``run_offline.sh``, marked slow).
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft7Validator, FormatChecker

from orchestrator import Board, Task
from orchestrator.formats.board_rules import board_schema
from orchestrator.formats.convert import structure
from support.cli import orchestrate

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parents[1] / "fixtures"
SEED003 = FIXTURES / "seed003"
SEED002 = FIXTURES / "seed002"
EXAMPLE = ROOT / "examples" / "task_board" / "workflow.py"
FORMATS = FormatChecker()
RUN_ID = "3f56dc4d-35cf-4f97-925c-0b04a6fe8bf4"
UUID = "72c84e9c-0975-4c1a-b9a5-864c2725dc8a"
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"


def refused(result: subprocess.CompletedProcess[str], code: str, *fragments: str) -> str:
    """Exit 1 with one line on stderr naming ``code`` and ``fragments``; nothing on stdout."""
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"orchestrate: error: {code}: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def lines_of(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def task(
    task_id: str, scope: list[str], *, dependencies: tuple[str, ...] = (), priority: str = "normal"
) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "title": f"Do {task_id}",
        "type": "parallelizable",
        "dependencies": list(dependencies),
        "lock_scope": scope,
        "forbidden_scope": [],
        "acceptance_criteria": [f"{task_id} is finished"],
        "worklog_path": f"worklogs/{task_id}.jsonl",
        "timeout_seconds": 60,
        "heartbeat_interval_seconds": 10,
        "priority": priority,
    }


TASKS = [
    task("T-1", ["src/api.py"], priority="high"),
    task("T-2", ["src"]),
    task("T-3", ["docs/api.md"], dependencies=("T-1",)),
]


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A board (in WORKDIR/.board) with TASKS, made in-process; nothing started."""
    board = Board.create(
        tmp_path / ".board", run_id=RUN_ID, objective="Ship input validation", constraints=[]
    )
    board.create_tasks([structure(t, Task, source="TASKS") for t in TASKS])
    return tmp_path


def board_of(workdir: Path) -> Board:
    return Board(workdir / ".board")


def result_for(packet: dict[str, Any], *, changed: list[str] | None = None) -> dict[str, Any]:
    task = packet["task"]
    return {
        "schema_version": "1.0.0",
        "run_id": packet["run_id"],
        "task_id": task["task_id"],
        "status": "done",
        "changes": [
            {"resource": r, "action": "edit", "evidence": f"edited {r}"}
            for r in (task["lock_scope"] if changed is None else changed)
        ],
        "acceptance_check": [
            {"criterion": c, "status": "pass", "evidence": "pytest -q: 3 passed"}
            for c in task["acceptance_criteria"]
        ],
        "worklog_path": task["worklog_path"],
        "notes_for_orchestrator": [],
    }


# -- init and create -------------------------------------------------------------------


@pytest.mark.slow
def test_init_then_create_from_a_file(tmp_path: Path) -> None:
    made = orchestrate(
        "board", "init", "--workdir", tmp_path, "--run-id", RUN_ID,
        "--objective", "Ship input validation", "--constraint", "Keep put() compatible",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert made.stdout == f"{tmp_path / '.board'}\n"
    info = read(tmp_path / ".board" / "board.json")
    assert (info["run_id"], info["objective"]) == (RUN_ID, "Ship input validation")
    assert info["constraints"] == ["Keep put() compatible"]
    # Dependencies listed after their dependents: created in topological order anyway.
    tasks_file = tmp_path / "tasks.json"
    tasks_file.write_text(json.dumps({"tasks": [TASKS[2], TASKS[0], TASKS[1]]}))
    created = orchestrate("board", "create", "--workdir", tmp_path, "--file", tasks_file)
    assert created.returncode == 0, created.stderr
    assert created.stderr == "orchestrate: 3 tasks created\n"
    printed = [json.loads(line) for line in created.stdout.splitlines()]
    assert [d["task_id"] for d in printed] == ["T-1", "T-3", "T-2"]
    assert printed == lines_of(tmp_path / ".board" / "ledger.ndjson")
    assert all(d["status"] == "todo" and d["x_base_version"] == 0 for d in printed)
    assert printed[1]["x_create"] == TASKS[2]
    # The same tasks again, from stdin: nothing new.
    again = orchestrate("board", "create", "--workdir", tmp_path, stdin=json.dumps(TASKS))
    assert (again.returncode, again.stdout) == (0, "")
    assert again.stderr == "orchestrate: 0 tasks created\n"
    assert len(lines_of(tmp_path / ".board" / "ledger.ndjson")) == 3


def test_init_refuses_a_run_id_that_is_not_a_uuid(tmp_path: Path) -> None:
    """The task board documents' format requires a UUID in every packet's, result's and
    worklog entry's run_id: the refusal says so, and how to go on."""
    result = orchestrate(
        "board", "init", "--workdir", tmp_path, "--run-id", "run-1", "--objective", "x"
    )
    refused(result, "SCHEMA_INVALID", "'run-1' is not a UUID", "format requires one",
            "leave the run id out")  # fmt: skip
    assert not (tmp_path / ".board" / "board.json").exists()


def test_init_without_a_run_id_makes_one_and_opens_the_board_again(tmp_path: Path) -> None:
    made = orchestrate("board", "init", "--workdir", tmp_path, "--objective", "x")
    assert made.returncode == 0, made.stderr
    run_id = read(tmp_path / ".board" / "board.json")["run_id"]
    assert re.fullmatch(r"[0-9a-f-]{36}", run_id), run_id
    again = orchestrate("board", "init", "--workdir", tmp_path, "--objective", "x")
    assert again.returncode == 0, again.stderr
    assert read(tmp_path / ".board" / "board.json")["run_id"] == run_id


def test_create_refuses_a_cycle_naming_it_and_writes_nothing(workdir: Path) -> None:
    before = (workdir / ".board" / "ledger.ndjson").read_bytes()
    cycle = [
        task("T-7", ["a"], dependencies=("T-9",)),
        task("T-8", ["b"], dependencies=("T-7",)),
        task("T-9", ["c"], dependencies=("T-8",)),
    ]
    result = orchestrate("board", "create", "--workdir", workdir, stdin=json.dumps(cycle))
    refused(result, "DEPENDENCY_NOT_MET", "cycle: T-7 -> T-9 -> T-8 -> T-7")
    assert (workdir / ".board" / "ledger.ndjson").read_bytes() == before


def test_create_refuses_an_invalid_task_and_writes_nothing(workdir: Path) -> None:
    before = (workdir / ".board" / "ledger.ndjson").read_bytes()
    bad = {**task("T-8", ["b"]), "timeout_seconds": 10}
    result = orchestrate(
        "board", "create", "--workdir", workdir, stdin=json.dumps([task("T-7", ["a"]), bad])
    )
    assert result.returncode == 1 and result.stdout == ""
    assert "<tasks>[1]" in result.stderr and "timeout_seconds" in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert (workdir / ".board" / "ledger.ndjson").read_bytes() == before


def test_create_names_a_bad_enum_s_field_and_its_values(workdir: Path) -> None:
    bad = {**task("T-8", ["b"]), "type": "PARALLELIZABLE", "priority": "urgent"}
    result = orchestrate("board", "create", "--workdir", workdir, stdin=json.dumps([bad]))
    refused(
        result,
        "SCHEMA_INVALID",
        "type: 'PARALLELIZABLE' is not one of 'parallelizable', 'serial' (did you mean "
        "'parallelizable'?) at $.type",
        "priority: 'urgent' is not one of 'low', 'normal', 'high', 'critical' at $.priority",
    )


# -- status, ledger, locks, assign -----------------------------------------------------


def test_status_as_text_and_as_json(workdir: Path) -> None:
    board_of(workdir).assign(["T-1"], owner="coder")
    text = orchestrate("board", "status", "--workdir", workdir)
    assert text.returncode == 0, text.stderr
    header, *rows = text.stdout.splitlines()
    assert header == f"board {workdir / '.board'}  run {RUN_ID}  ledger head 4"
    assert [row.split()[:4] for row in rows] == [
        ["T-1", "in_progress", "attempt", "1"],
        ["T-2", "todo", "attempt", "0"],
        ["T-3", "todo", "attempt", "0"],
    ]
    assert "coder" in rows[0] and rows[0].endswith("Do T-1")
    data = json.loads(orchestrate("board", "status", "--json", "--workdir", workdir).stdout)
    assert (data["run_id"], data["seq"]) == (RUN_ID, 4)
    first = data["tasks"][0]
    assert first == {
        "task_id": "T-1",
        "title": "Do T-1",
        "status": "in_progress",
        "owner": "coder",
        "attempts": 1,
        "code": None,
        "reason": "assigned to coder (attempt 1)",
        "version": 4,
        "locks": ["src/api.py"],
    }
    assert [t["status"] for t in data["tasks"]] == ["in_progress", "todo", "todo"]


def test_status_of_a_directory_without_a_board(tmp_path: Path) -> None:
    result = orchestrate("board", "status", "--workdir", tmp_path)
    refused(result, "MISSING_REQUIRED_INPUT", "no task board here")


@pytest.mark.slow
def test_ledger_as_ndjson_for_one_task_and_as_a_table(workdir: Path) -> None:
    board = board_of(workdir)
    board.assign(["T-1"], owner="coder")
    board.set_status("T-1", _status("blocked"), reason="waiting", code=_code("LOCK_CONFLICT"))
    raw = orchestrate("board", "ledger", "--workdir", workdir)
    assert raw.returncode == 0
    assert raw.stdout == (workdir / ".board" / "ledger.ndjson").read_text()
    only = orchestrate("board", "ledger", "--task", "T-1", "--workdir", workdir)
    assert [json.loads(line)["status"] for line in only.stdout.splitlines()] == [
        "todo",
        "in_progress",
        "blocked",
    ]
    table = orchestrate("board", "ledger", "--table", "--workdir", workdir).stdout.splitlines()
    assert len(table) == 5
    assert table[0].split()[:3] == ["1", "T-1", "todo"]
    assert table[4].split()[:5] == ["5", "T-1", "blocked", "LOCK_CONFLICT", "waiting"]


@pytest.mark.slow
def test_assign_writes_a_valid_packet_and_refuses_what_cannot_start(workdir: Path) -> None:
    started = orchestrate(
        "board", "assign", "--task", "T-1", "--owner", "coder", "--workdir", workdir
    )
    assert started.returncode == 0, started.stderr
    packet_path = workdir / ".board" / "packets" / "T-1.1.json"
    assert started.stdout == f"{packet_path}\n"
    packet = read(packet_path)
    validator = Draft7Validator(board_schema("assignment-packet"), format_checker=FORMATS)
    assert list(validator.iter_errors(packet)) == []
    assert packet["task"] == TASKS[0]
    assert packet["active_locks"] == [{"task_id": "T-1", "resource": "src/api.py", "active": True}]
    before = (workdir / ".board" / "ledger.ndjson").read_bytes()
    conflict = orchestrate(
        "board", "assign", "--task", "T-2", "--owner", "coder", "--workdir", workdir
    )
    refused(conflict, "LOCK_CONFLICT", "T-2 wants src", "T-1 holds src/api.py")
    waiting = orchestrate(
        "board", "assign", "--task", "T-3", "--owner", "writer", "--workdir", workdir
    )
    refused(waiting, "DEPENDENCY_NOT_MET", "depends on T-1")
    nobody = orchestrate("board", "assign", "--task", "T-3", "--owner", " ", "--workdir", workdir)
    assert nobody.returncode == 1
    assert (workdir / ".board" / "ledger.ndjson").read_bytes() == before
    assert sorted(p.name for p in (workdir / ".board" / "packets").iterdir()) == ["T-1.1.json"]


@pytest.mark.slow
def test_locks_and_their_history(workdir: Path) -> None:
    board = board_of(workdir)
    board.assign(["T-1"], owner="coder")
    held = orchestrate("board", "locks", "--workdir", workdir)
    assert held.returncode == 0
    assert json.loads(held.stdout) == [{"task_id": "T-1", "resource": "src/api.py", "active": True}]
    board.set_status("T-1", _status("blocked"), reason="stuck")
    assert json.loads(orchestrate("board", "locks", "--workdir", workdir).stdout) == []
    history = orchestrate("board", "locks", "--history", "--workdir", workdir)
    assert json.loads(history.stdout) == [
        {"task_id": "T-1", "resource": "src/api.py", "active": False}
    ]


@pytest.mark.slow
def test_heartbeat_of_the_current_attempt_only(workdir: Path) -> None:
    board_of(workdir).assign(["T-1"], owner="coder")
    beat = orchestrate(
        "board", "heartbeat", "--task", "T-1", "--attempt", "1", "--workdir", workdir
    )
    assert beat.returncode == 0, beat.stderr
    written = (workdir / ".board" / "heartbeats" / "T-1").read_text()
    assert written == beat.stdout and written.endswith("Z\n")
    stale = orchestrate(
        "board", "heartbeat", "--task", "T-1", "--attempt", "2", "--workdir", workdir
    )
    refused(stale, "CONCURRENCY_CONFLICT", "attempt 1", "stop working")
    assert (workdir / ".board" / "heartbeats" / "T-1").read_text() == written
    idle = orchestrate("board", "heartbeat", "--task", "T-2", "--workdir", workdir)
    refused(idle, "INVALID_TRANSITION", "T-2 is todo")
    assert not (workdir / ".board" / "heartbeats" / "T-2").exists()


# -- worklog ---------------------------------------------------------------------------


def test_worklog_from_flags(workdir: Path) -> None:
    result = orchestrate(
        "board", "worklog", "--task", "T-1", "--workdir", workdir, "--actor", "coder-1",
        "--action", "edit", "--decision", "validate in put()", "--result", "2 files written",
        "--next-step", "run the tests", "--file", "src/api.py", "--file", "src/util.py",
        "--code", "ACCEPTANCE_FAILED", "--evidence", "pytest -q",
    )  # fmt: skip
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    (entry,) = lines_of(workdir / ".board" / "worklogs" / "T-1.jsonl")
    validator = Draft7Validator(board_schema("worklog-entry"), format_checker=FORMATS)
    assert list(validator.iter_errors(entry)) == []
    assert entry["run_id"] == RUN_ID and entry["actor"] == "coder-1"
    assert entry["files_touched"] == ["src/api.py", "src/util.py"]
    assert (entry["decision"], entry["next_step"]) == ("validate in put()", "run the tests")
    assert (entry["code"], entry["evidence"]) == ("ACCEPTANCE_FAILED", "pytest -q")
    missing = orchestrate("board", "worklog", "--task", "T-1", "--workdir", workdir)
    assert missing.returncode == 2 and "--action is required" in missing.stderr


def test_worklog_refuses_a_secret_in_the_decision_and_writes_nothing(workdir: Path) -> None:
    result = orchestrate(
        "board", "worklog", "--task", "T-1", "--workdir", workdir, "--action", "deploy",
        "--decision", f"use key {AWS_KEY}",
    )  # fmt: skip
    line = refused(result, "UNTRUSTED_CONTEXT_BLOCK", "decision", "aws_access_key_id")
    assert AWS_KEY not in line
    assert not (workdir / ".board" / "worklogs" / "T-1.jsonl").exists()


def test_worklog_redacts_a_secret_in_the_next_step(workdir: Path) -> None:
    result = orchestrate(
        "board", "worklog", "--task", "T-1", "--workdir", workdir, "--action", "deploy",
        "--next-step", f"rotate {AWS_KEY} tomorrow",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (entry,) = lines_of(workdir / ".board" / "worklogs" / "T-1.jsonl")
    assert entry["next_step"] == "rotate [REDACTED:aws_access_key_id] tomorrow"
    assert AWS_KEY not in (workdir / ".board" / "worklogs" / "T-1.jsonl").read_text()


WORKLOG_ENTRY = {
    "timestamp": "2025-11-18T10:40:00Z",
    "run_id": RUN_ID,
    "task_id": "T-1",
    "actor": "coder-1",
    "action": "run tests",
    "files_touched": ["src/api.py"],
    "decision": "keep the fixture",
    "result": "3 failures",
    "next_step": "ask for the API spec",
    "code": "ACCEPTANCE_FAILED",
    "evidence": "pytest output",
}


def test_worklog_takes_a_whole_entry_on_stdin(workdir: Path) -> None:
    result = orchestrate(
        "board", "worklog", "--task", "T-1", "--json-stdin", "--workdir", workdir,
        stdin=json.dumps(WORKLOG_ENTRY),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert lines_of(workdir / ".board" / "worklogs" / "T-1.jsonl") == [WORKLOG_ENTRY]


# -- submit ----------------------------------------------------------------------------


@pytest.mark.slow
def test_submit_without_a_workflow_records_the_verdict(workdir: Path) -> None:
    board = board_of(workdir)
    board.assign(["T-1"], owner="coder")
    packet = read(workdir / ".board" / "packets" / "T-1.1.json")
    passing = orchestrate(
        "board", "submit", "--task", "T-1", "--workdir", workdir,
        stdin=json.dumps(result_for(packet)),
    )  # fmt: skip
    assert passing.returncode == 0, passing.stderr
    verdict = json.loads(passing.stdout)
    assert (verdict["verdict"], verdict["task_id"]) == ("PASS", "T-1")
    assert verdict == read(workdir / ".board" / "verdicts" / "T-1.1.json")
    row = board.state().row("T-1")
    assert (row.status.value, row.verdict) == ("done", "verdicts/T-1.1.json")
    # T-2 strays out of its scope: FAIL, blocked, exit 1.
    board.assign(["T-2"], owner="coder")
    packet = read(workdir / ".board" / "packets" / "T-2.1.json")
    stray = workdir / "stray.json"
    stray.write_text(json.dumps(result_for(packet, changed=["src/x.py", "README.md"])))
    failing = orchestrate("board", "submit", "--task", "T-2", "--file", stray, "--workdir", workdir)
    assert failing.returncode == 1
    verdict = json.loads(failing.stdout)
    assert (verdict["verdict"], verdict["reason_code"]) == ("FAIL", "SCOPE_CONFLICT")
    assert failing.stderr == ""
    row = board.state().row("T-2")
    assert (row.status.value, row.code.value if row.code else None) == (
        "blocked",
        "SCOPE_VIOLATION",
    )
    assert (workdir / ".board" / "results" / "T-2.1.json").read_bytes() == stray.read_bytes()
    # A result for a task that is not in progress is not expected.
    late = orchestrate(
        "board", "submit", "--task", "T-3", "--workdir", workdir, stdin=stray.read_text()
    )
    refused(late, "INVALID_TRANSITION", "T-3 is todo")


def paused_example(tmp_path: Path) -> tuple[Path, dict[str, dict[str, Any]]]:
    """The task-board example run until its first pause; its requests by task id."""
    workdir = tmp_path / "run"
    workdir.mkdir()
    result = orchestrate("run", f"{EXAMPLE}:TaskBoardDemo", "--workdir", workdir)
    assert result.returncode == 42, result.stderr
    requests = [read(p) for p in sorted((workdir / ".agent-requests").glob("*.json"))]
    return workdir, {r["context"]["x_task_id"]: r for r in requests}


@pytest.mark.slow
def test_submit_delivers_to_the_paused_workflow_waiting_for_the_task(tmp_path: Path) -> None:
    workdir, requests = paused_example(tmp_path)
    assert sorted(requests) == ["T-1", "T-5"]
    ledger_before = (workdir / ".board" / "ledger.ndjson").read_bytes()
    packet = read(workdir / ".board" / "packets" / "T-1.1.json")
    answer = json.dumps(result_for(packet))
    result = orchestrate("board", "submit", "--task", "T-1", "--workdir", workdir, stdin=answer)
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    target = workdir / ".agent-responses" / f"{requests['T-1']['request_id']}.json"
    assert shown["delivered"] == str(target)
    assert (shown["preview"]["verdict"], shown["preview"]["task_id"]) == ("PASS", "T-1")
    response = read(target)
    assert (response["status"], response["response"]) == ("success", answer)
    # Only delivered: the engine judges it when it resumes.
    assert (workdir / ".board" / "ledger.ndjson").read_bytes() == ledger_before
    assert not (workdir / ".board" / "verdicts" / "T-1.1.json").exists()
    # T-5 strays: the preview says FAIL (exit 1), but the answer is delivered all the same.
    packet = read(workdir / ".board" / "packets" / "T-5.1.json")
    stray = json.dumps(result_for(packet, changed=["CHANGELOG.md", "README.md"]))
    result = orchestrate("board", "submit", "--task", "T-5", "--workdir", workdir, stdin=stray)
    assert result.returncode == 1
    assert json.loads(result.stdout)["preview"]["reason_code"] == "SCOPE_CONFLICT"
    assert (workdir / ".agent-responses" / f"{requests['T-5']['request_id']}.json").exists()
    resumed = orchestrate("resume", "--workdir", workdir)
    assert resumed.returncode == 42, resumed.stderr
    statuses = {d["delta_id"] for d in lines_of(workdir / ".board" / "ledger.ndjson")}
    assert {"T-1/1/done", "T-5/1/blocked", "T-5/2/in_progress"} <= statuses


@pytest.mark.slow
def test_watchdog_now_times_out_a_silent_task(workdir: Path) -> None:
    board = board_of(workdir)
    board.assign(["T-1"], owner="coder")
    started = board.state().row("T-1").updated_at
    assert started is not None
    early = orchestrate("board", "watchdog", "--now", started, "--workdir", workdir)
    assert (early.returncode, early.stdout) == (0, "")
    assert early.stderr == "orchestrate: 0 tasks timed out\n"
    late = orchestrate("board", "watchdog", "--now", "2100-01-01T00:00:00Z", "--workdir", workdir)
    assert late.returncode == 0, late.stderr
    (delta,) = [json.loads(line) for line in late.stdout.splitlines()]
    assert (delta["task_id"], delta["status"], delta["x_code"]) == (
        "T-1",
        "blocked",
        "TASK_TIMEOUT",
    )
    assert delta["timed_out"] is True and delta["last_heartbeat_at"] == started
    assert late.stderr == "orchestrate: 1 task timed out\n"
    assert board.lock_table() == []
    again = orchestrate("board", "watchdog", "--now", "2100-01-01T00:00:00Z", "--workdir", workdir)
    assert (again.returncode, again.stdout) == (0, "")


@pytest.mark.slow
def test_watchdog_answers_the_pending_requests_and_resume_reassigns(tmp_path: Path) -> None:
    workdir, requests = paused_example(tmp_path)
    result = orchestrate("board", "watchdog", "--now", "2100-01-01T00:00:00Z", "--workdir", workdir)
    assert result.returncode == 0, result.stderr
    assert sorted(json.loads(line)["task_id"] for line in result.stdout.splitlines()) == [
        "T-1",
        "T-5",
    ]
    for task_id, request in requests.items():
        response = read(workdir / ".agent-responses" / f"{request['request_id']}.json")
        assert (response["status"], response["error_type"]) == ("timeout", "TIMEOUT"), task_id
        assert "no heartbeat since" in response["error_message"]
    resumed = orchestrate("resume", "--workdir", workdir)
    assert resumed.returncode == 42, resumed.stderr
    again = [read(p) for p in (workdir / ".agent-requests").glob("*.json")]
    assert sorted((r["context"]["x_task_id"], r["context"]["x_attempt"]) for r in again) == [
        ("T-1", 2),
        ("T-5", 2),
    ]


@pytest.mark.slow
def test_watchdog_keeps_an_answer_already_delivered(tmp_path: Path) -> None:
    workdir, requests = paused_example(tmp_path)
    packet = read(workdir / ".board" / "packets" / "T-1.1.json")
    answer = json.dumps(result_for(packet))
    assert (
        orchestrate(
            "board", "submit", "--task", "T-1", "--workdir", workdir, stdin=answer
        ).returncode
        == 0
    )
    result = orchestrate("board", "watchdog", "--now", "2100-01-01T00:00:00Z", "--workdir", workdir)
    response = read(workdir / ".agent-responses" / f"{requests['T-1']['request_id']}.json")
    assert (response["status"], response.get("response")) == ("success", answer)
    assert [json.loads(line)["task_id"] for line in result.stdout.splitlines()] == ["T-5"]


def held_maintenance_lock(board_dir: Path) -> int:
    """Take the board's maintenance lock as another process's pass would; close to free it."""
    import fcntl

    fd = os.open(board_dir / "maintenance.lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


@pytest.mark.slow
def test_a_second_maintenance_pass_waits_then_says_busy(workdir: Path) -> None:
    board = board_of(workdir)
    board.assign(["T-1"], owner="coder")
    ledger = (workdir / ".board" / "ledger.ndjson").read_bytes()
    fd = held_maintenance_lock(workdir / ".board")
    try:
        busy = orchestrate(
            "board", "watchdog", "--now", "2100-01-01T00:00:00Z", "--wait", "0.2",
            "--workdir", workdir,
        )  # fmt: skip
    finally:
        os.close(fd)
    assert (busy.returncode, busy.stdout) == (75, "")
    (line,) = busy.stderr.splitlines()
    assert "another maintenance pass" in line and "maintenance.lock" in line, line
    assert (workdir / ".board" / "ledger.ndjson").read_bytes() == ledger
    free = orchestrate("board", "watchdog", "--now", "2100-01-01T00:00:00Z", "--workdir", workdir)
    assert free.returncode == 0 and free.stderr == "orchestrate: 1 task timed out\n"


def test_filelock_and_the_bare_flock_are_one_lock(tmp_path: Path) -> None:
    """The watchdog command locks through filelock, resume with a bare flock: each must
    keep the other out, or two passes would judge the same tasks at once."""
    from orchestrator._errors import InstanceBusyError
    from orchestrator.board.maintenance import maintenance, maintenance_if_free

    with maintenance(tmp_path, timeout=1), maintenance_if_free(tmp_path) as held:
        assert held is False
    with maintenance_if_free(tmp_path) as held:
        assert held is True
        with (
            pytest.raises(InstanceBusyError, match=r"maintenance\.lock"),
            maintenance(tmp_path, timeout=0.05),
        ):
            pass
    with maintenance(tmp_path, timeout=0.05):  # both released
        pass


def test_no_board_no_maintenance_lock(tmp_path: Path) -> None:
    result = orchestrate("board", "watchdog", "--workdir", tmp_path)
    assert result.returncode == 0, result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_resume_does_not_wait_for_a_maintenance_pass(tmp_path: Path) -> None:
    workdir, _ = paused_example(tmp_path)
    fd = held_maintenance_lock(workdir / ".board")
    try:
        resumed = orchestrate("resume", "--workdir", workdir)
    finally:
        os.close(fd)
    assert resumed.returncode == 42, resumed.stderr


# -- set-status, handoff, adopt --------------------------------------------------------


def _status(name: str) -> Any:
    from orchestrator import TaskStatus

    return TaskStatus(name)


def _code(name: str) -> Any:
    from orchestrator import ErrorCode

    return ErrorCode(name)


@pytest.mark.slow
def test_set_status_checks_each_transition_and_the_version_seen(workdir: Path) -> None:
    blocked = orchestrate(
        "board", "set-status", "--task", "T-2", "--status", "blocked", "--workdir", workdir,
        "--reason", f"waiting for credentials {AWS_KEY}", "--code", "LOCK_CONFLICT",
        "--base-version", "2",
    )  # fmt: skip
    assert blocked.returncode == 0, blocked.stderr
    delta = json.loads(blocked.stdout)
    assert (delta["status"], delta["x_code"], delta["x_base_version"]) == (
        "blocked",
        "LOCK_CONFLICT",
        2,
    )
    assert delta["reason"] == "waiting for credentials [REDACTED:aws_access_key_id]"
    assert AWS_KEY not in (workdir / ".board" / "ledger.ndjson").read_text()
    before = (workdir / ".board" / "ledger.ndjson").read_bytes()
    stale = orchestrate(
        "board", "set-status", "--task", "T-2", "--status", "todo", "--reason", "retry",
        "--base-version", "2", "--workdir", workdir,
    )  # fmt: skip
    refused(stale, "CONCURRENCY_CONFLICT", "version 4", "saw 2")
    assert (workdir / ".board" / "ledger.ndjson").read_bytes() == before
    canceled = orchestrate(
        "board", "set-status", "--task", "T-3", "--status", "canceled", "--reason", "dropped",
        "--workdir", workdir,
    )  # fmt: skip
    assert canceled.returncode == 0, canceled.stderr
    back = orchestrate(
        "board", "set-status", "--task", "T-3", "--status", "todo", "--reason", "revive",
        "--workdir", workdir,
    )  # fmt: skip
    refused(back, "INVALID_TRANSITION", "T-3 is canceled", "cannot go to todo")
    done = orchestrate(
        "board", "set-status", "--task", "T-1", "--status", "done", "--reason", "trust me",
        "--workdir", workdir,
    )  # fmt: skip
    assert done.returncode == 2 and "invalid choice: 'done'" in done.stderr
    statuses = [t["status"] for t in json.loads(
        orchestrate("board", "status", "--json", "--workdir", workdir).stdout
    )["tasks"]]  # fmt: skip
    assert statuses == ["todo", "blocked", "canceled"]


@pytest.mark.slow
def test_handoff_as_json_as_markdown_and_written(workdir: Path) -> None:
    board = board_of(workdir)
    board.assign(["T-1"], owner="coder")
    board.set_status("T-2", _status("blocked"), reason="needs T-1", code=_code("LOCK_CONFLICT"))
    shown = orchestrate("board", "handoff", "--workdir", workdir)
    assert shown.returncode == 0, shown.stderr
    bundle = json.loads(shown.stdout)
    validator = Draft7Validator(board_schema("handoff-bundle"), format_checker=FORMATS)
    assert list(validator.iter_errors(bundle)) == []
    assert [(r["task_id"], r["status"]) for r in bundle["ledger"]] == [
        ("T-1", "in_progress"),
        ("T-2", "blocked"),
        ("T-3", "todo"),
    ]
    assert bundle["active_locks"] == [{"task_id": "T-1", "resource": "src/api.py", "active": True}]
    assert bundle["open_blockers"] == [
        {"task_id": "T-2", "code": "LOCK_CONFLICT", "reason": "needs T-1"}
    ]
    assert bundle["dependencies"] == [{"task_id": "T-3", "depends_on": ["T-1"]}]
    page = orchestrate("board", "handoff", "--markdown", "--workdir", workdir).stdout
    assert page.startswith(f"# Handoff: run {RUN_ID}\n")
    assert "| T-1 | in_progress | coder | high | src/api.py | Do T-1 |" in page
    assert "- T-2: LOCK_CONFLICT: needs T-1" in page
    assert not (workdir / ".board" / "handoff.json").exists()
    written = orchestrate("board", "handoff", "--write", "--workdir", workdir)
    assert written.returncode == 0
    assert (workdir / ".board" / "handoff.json").read_text() == written.stdout == shown.stdout
    assert (workdir / ".board" / "handoff.md").read_text() == page


@pytest.mark.slow
def test_adopt_continues_a_run_on_a_new_board(workdir: Path, tmp_path: Path) -> None:
    board = board_of(workdir)
    board.assign(["T-1"], owner="coder")
    packet = read(workdir / ".board" / "packets" / "T-1.1.json")
    board.submit("T-1", json.dumps(result_for(packet)).encode())
    board.assign(["T-3"], owner="writer")
    bundle = tmp_path / "handoff.json"
    bundle.write_text(orchestrate("board", "handoff", "--workdir", workdir).stdout)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    adopted = orchestrate("board", "adopt", "--file", bundle, "--workdir", fresh)
    assert adopted.returncode == 0, adopted.stderr
    assert adopted.stdout == f"{fresh / '.board'}\n"
    data = json.loads(orchestrate("board", "status", "--json", "--workdir", fresh).stdout)
    assert data["run_id"] == RUN_ID
    # Done stays done; a task that was in progress is blocked, to be reassigned.
    assert [(t["task_id"], t["status"]) for t in data["tasks"]] == [
        ("T-1", "done"),
        ("T-2", "todo"),
        ("T-3", "blocked"),
    ]
    assert json.loads(orchestrate("board", "locks", "--workdir", fresh).stdout) == []
    check = orchestrate("check", "ledger", stdin=(fresh / ".board" / "ledger.ndjson").read_bytes())
    assert json.loads(check.stdout)["allow"] is True


@pytest.mark.slow
def test_adopting_the_same_bundle_again_changes_nothing(workdir: Path, tmp_path: Path) -> None:
    board = board_of(workdir)
    board.assign(["T-1"], owner="coder")
    packet = read(workdir / ".board" / "packets" / "T-1.1.json")
    board.submit("T-1", json.dumps(result_for(packet)).encode())
    bundle = tmp_path / "handoff.json"
    bundle.write_text(orchestrate("board", "handoff", "--workdir", workdir).stdout)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert orchestrate("board", "adopt", "--file", bundle, "--workdir", fresh).returncode == 0
    ledger = (fresh / ".board" / "ledger.ndjson").read_bytes()
    again = orchestrate("board", "adopt", "--file", bundle, "--workdir", fresh)
    assert again.returncode == 0, again.stderr
    assert (fresh / ".board" / "ledger.ndjson").read_bytes() == ledger


@pytest.mark.parametrize(
    "args",
    [
        ("worklog", "--task", "T-1", "--action", "edit", "--code", "NOPE"),
        ("set-status", "--task", "T-2", "--status", "blocked", "--reason", "r", "--code", "NOPE"),
        ("watchdog", "--now", "yesterday"),
        ("watchdog", "--now", "2100-01-01T00:00:00"),
    ],
    ids=["worklog-code", "set-status-code", "watchdog-now-words", "watchdog-now-naive"],
)
def test_a_bad_option_value_is_a_one_line_error(workdir: Path, args: tuple[str, ...]) -> None:
    board_of(workdir).assign(["T-1"], owner="coder")
    before = (workdir / ".board" / "ledger.ndjson").read_bytes()
    result = orchestrate("board", *args, "--workdir", workdir)
    assert result.returncode in (1, 2)
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert (workdir / ".board" / "ledger.ndjson").read_bytes() == before


# -- validators ------------------------------------------------------------------------

VALIDATOR_SCHEMA = Draft7Validator(board_schema("validator-output"), format_checker=FORMATS)


def check(kind: str, document: Any, *flags: str | Path) -> dict[str, Any]:
    """``orchestrate check KIND`` on ``document``: one line of compact JSON, exit 0 iff allowed."""
    stdin = document if isinstance(document, (bytes, str)) else json.dumps(document)
    result = orchestrate("check", kind, *flags, stdin=stdin)
    assert result.stdout.endswith("\n") and result.stdout.count("\n") == 1, result
    line = result.stdout[:-1]
    verdict = json.loads(line)
    assert line == json.dumps(verdict, separators=(",", ":")), "compact JSON"
    assert set(verdict) <= {"allow", "code", "reason", "details"}
    assert list(VALIDATOR_SCHEMA.iter_errors(verdict)) == []
    assert isinstance(verdict["allow"], bool)
    assert result.returncode == (0 if verdict["allow"] else 1)
    assert result.stderr == ""
    return verdict


def filled(shape: Any, values: dict[str, Any], prefix: str = "") -> Any:
    """The canonical ``shape`` of a task IO document, every leaf replaced by
    ``values[path]``."""
    if isinstance(shape, dict):
        return {k: filled(v, values, f"{prefix}{k}.") for k, v in shape.items()}
    return values[prefix[:-1]]


PACKET = read(SEED003 / "minimal-assignment-example.json")
RESULT = read(SEED003 / "minimal-result-example.json")
SUBMIT = filled(
    read(SEED002 / "submit-canonical-shape.json"),
    {
        "schema_version": "scc.submit.v1",
        "task_id": "T-12",
        "status": "DONE",
        "reason_code": "CI_FAILED",
        "changed_files": ["tests/test_api.py"],
        "new_files": [],
        "tests.commands": ["pytest -q tests/test_api.py"],
        "tests.passed": True,
        "tests.summary": "12 passed",
        "artifacts.report_md": "artifacts/report.md",
        "artifacts.selftest_log": "artifacts/selftest.log",
        "artifacts.evidence_dir": "artifacts/evidence",
        "artifacts.patch_diff": "artifacts/patch.diff",
        "artifacts.submit_json": "artifacts/submit.json",
        "exit_code": 0,
        "needs_input": [],
    },
)
VERDICT = filled(
    read(SEED002 / "verdict-canonical-shape.json"),
    {
        "schema_version": "scc.verdict.v1",
        "task_id": "T-12",
        "verdict": "PASS",
        "reason_code": "CI_FAILED",
        "messages": ["every check passed"],
        "checks.schema_valid": True,
        "checks.scope_valid": True,
        "checks.tests_passed": True,
        "checks.evidence_present": True,
        "timestamps.submitted_at": "2025-11-18T10:40:00Z",
        "timestamps.evaluated_at": "2025-11-18T10:40:02.5Z",
        "links.submit_json": "results/T-12.1.json",
        "links.report_md": "artifacts/report.md",
        "links.selftest_log": "artifacts/selftest.log",
        "links.patch_diff": "artifacts/patch.diff",
        "links.evidence_dir": "artifacts/evidence",
    },
)
TASK_INPUT_TEXT = (SEED002 / "task-input-example.json").read_text(encoding="utf-8")
# The format's printed example has one syntax error ('"files": [ ... }', README.md
# there); fixed here.
TASK_INPUT = json.loads(
    TASK_INPUT_TEXT.replace('evidence_spec.md"\n  },', 'evidence_spec.md"\n  ],')
)
CREATE = {
    "task_id": "T-12",
    "status": "todo",
    "owner": "",
    "reason": "created by the planner",
    "delta_id": "T-12/create",
    "x_seq": 1,
    "x_at": "2025-11-18T10:30:00Z",
    "x_base_version": 0,
    "x_create": PACKET["task"],
}
START = {
    "task_id": "T-12",
    "status": "in_progress",
    "owner": "subagent-1",
    "reason": "assigned",
    "delta_id": "T-12/1/in_progress",
    "x_seq": 2,
    "x_at": "2025-11-18T10:31:00Z",
    "x_base_version": 1,
    "x_attempt": 1,
}
BLOCKER = {"task_id": "T-12", "code": "LOCK_CONFLICT", "reason": "src/api.py is locked by T-9"}
HANDOFF = {
    "schema_version": "1.0.0",
    "run_id": RUN_ID,
    "objective": "Implement endpoint tests",
    "constraints": ["Do not edit src/api.py"],
    "ledger": [
        {
            "task_id": "T-12",
            "title": "Add endpoint tests",
            "status": "in_progress",
            "owner": "subagent-1",
            "lock_scope": ["tests/test_api.py"],
            "timeout_seconds": 1200,
            "heartbeat_interval_seconds": 120,
            "priority": "high",
            "last_heartbeat_at": "2025-11-18T10:31:00Z",
        }
    ],
    "active_locks": [{"task_id": "T-12", "resource": "tests/test_api.py", "active": True}],
    "dependencies": [],
    "open_blockers": [BLOCKER],
    "acceptance_targets": [{"task_id": "T-12", "acceptance_criteria": ["All endpoint tests pass"]}],
}
OUTPUT = {
    "schema_version": "1.0.0",
    "run_id": RUN_ID,
    "ledger_delta": [CREATE, START],
    "assignments": [PACKET],
    "active_locks": [{"task_id": "T-12", "resource": "tests/test_api.py", "active": True}],
    "blockers": [BLOCKER],
    "next_actions": ["wait for T-12"],
    "generated_at": "2025-11-18T10:31:00+00:00",
}
LOCKS = [
    {"task_id": "T-9", "resource": "src/api.py", "active": True},
    {"task_id": "T-12", "resource": "tests/test_api.py", "active": True},
    {"task_id": "T-13", "resource": "src", "active": False},
]


def ndjson(*deltas: dict[str, Any]) -> str:
    return "".join(json.dumps(d) + "\n" for d in deltas)


GOOD: dict[str, Any] = {
    "packet": PACKET,
    "result": RESULT,
    "locks": LOCKS,
    "ledger": ndjson(CREATE, START),
    "submit": SUBMIT,
    "verdict": VERDICT,
    "task-input": TASK_INPUT,
    "worklog": {**WORKLOG_ENTRY, "task_id": "T-12"},
    "handoff": HANDOFF,
    "output": OUTPUT,
    "delta": CREATE,
}


@pytest.mark.parametrize("kind", sorted(GOOD))
def test_a_good_document_is_allowed(kind: str) -> None:
    verdict = check(kind, GOOD[kind])
    assert (verdict["allow"], verdict["code"]) == (True, "OK"), verdict
    assert "details" not in verdict


@pytest.mark.slow
def test_the_validators_accept_what_the_board_writes(workdir: Path) -> None:
    board = board_of(workdir)
    board.assign(["T-1"], owner="coder")
    packet = read(workdir / ".board" / "packets" / "T-1.1.json")
    board.submit("T-1", json.dumps(result_for(packet)).encode())
    board.assign(["T-2", "T-3"], owner="coder")
    verdict = check("ledger", (workdir / ".board" / "ledger.ndjson").read_bytes())
    assert (
        verdict["reason"] == "7 deltas apply cleanly (0 duplicates ignored); 3 tasks, 2 locks held"
    )
    assert check("packet", read(workdir / ".board" / "packets" / "T-3.1.json"), "--strict")["allow"]
    assert check("verdict", read(workdir / ".board" / "verdicts" / "T-1.1.json"), "--strict")[
        "allow"
    ]
    locks = json.loads(orchestrate("board", "locks", "--history", "--workdir", workdir).stdout)
    assert check("locks", locks)["allow"]
    bundle = orchestrate("board", "handoff", "--workdir", workdir).stdout
    assert check("handoff", bundle, "--strict")["allow"]


DROP = object()


def changed(document: Any, path: str, value: Any) -> Any:
    """A deep copy of ``document`` with ``path`` (dotted; list items by index) set to
    ``value``, or deleted when ``value`` is ``DROP``."""
    copied = copy.deepcopy(document)
    *parents, last = path.split(".")
    target = copied
    for key in parents:
        target = target[int(key)] if isinstance(target, list) else target[key]
    if value is DROP:
        del target[last]
    elif isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return copied


STALE = {**START, "x_base_version": 0, "x_seq": 3}
FORGED = {**START, "owner": "intruder", "x_seq": 3}
REPLAYED = {**START, "x_seq": 3}
SKIPPED = {
    **START,
    "status": "done",
    "delta_id": "T-12/1/done",
    "x_base_version": 2,
    "x_seq": 3,
}
OTHER = {
    **CREATE,
    "task_id": "T-13",
    "delta_id": "T-13/create",
    "x_seq": 3,
    "x_create": {**PACKET["task"], "task_id": "T-13", "lock_scope": ["tests"]},
}
OTHER_START = {
    **START,
    "task_id": "T-13",
    "delta_id": "T-13/1/in_progress",
    "x_seq": 4,
    "x_base_version": 3,
}
NOT_CREATED = {**START, "task_id": "T-14", "delta_id": "T-14/1/in_progress", "x_seq": 1}

BAD = {
    # id: (kind, document, expected code, a fragment of the reason)
    "packet-no-task": ("packet", changed(PACKET, "task", DROP), "MISSING_REQUIRED_INPUT", "'task'"),
    "packet-no-type": (
        "packet",
        changed(PACKET, "packet_type", DROP),
        "MISSING_REQUIRED_INPUT",
        "packet_type",
    ),
    "packet-v2": (
        "packet",
        changed(PACKET, "schema_version", "2.0.0"),
        "UNKNOWN_SCHEMA_VERSION",
        "major 2",
    ),
    "packet-timeout": (
        "packet",
        changed(PACKET, "task.timeout_seconds", 10),
        "SCHEMA_INVALID",
        "$.task.timeout_seconds",
    ),
    "packet-lock-id": (
        "packet",
        changed(PACKET, "active_locks.0.task_id", "lock 9"),
        "SCHEMA_INVALID",
        "$.active_locks[0].task_id",
    ),
    "packet-array": ("packet", [PACKET], "SCHEMA_INVALID", "expected a JSON object"),
    "packet-empty": ("packet", "", "SCHEMA_INVALID", "empty"),
    "packet-not-utf8": ("packet", b'{"run_id": "\xff"}', "SCHEMA_INVALID", "UTF-8"),
    "result-v2": (
        "result",
        changed(RESULT, "schema_version", "2.0.0"),
        "UNKNOWN_SCHEMA_VERSION",
        "major 2",
    ),
    # A done result whose acceptance does not hold is well formed: its acceptance fails.
    "result-done-failing": (
        "result",
        changed(RESULT, "acceptance_check.0.status", "fail"),
        "ACCEPTANCE_FAILED",
        "report 'blocked' or 'failed'",
    ),
    "result-done-without-evidence": (
        "result",
        changed(RESULT, "acceptance_check.0.evidence", ""),
        "ACCEPTANCE_FAILED",
        "has no evidence",
    ),
    "result-done-unchecked": (
        "result",
        changed(RESULT, "acceptance_check", []),
        "ACCEPTANCE_FAILED",
        "acceptance_check is empty",
    ),
    "result-no-changes": (
        "result",
        changed(RESULT, "changes", DROP),
        "MISSING_REQUIRED_INPUT",
        "changes",
    ),
    "result-six-notes": (
        "result",
        changed(RESULT, "notes_for_orchestrator", ["n"] * 6),
        "SCHEMA_INVALID",
        "notes_for_orchestrator",
    ),
    "locks-conflict": (
        "locks",
        [*LOCKS, {"task_id": "T-14", "resource": "tests", "active": True}],
        "LOCK_CONFLICT",
        "conflict",
    ),
    "locks-escape": (
        "locks",
        [{"task_id": "T-1", "resource": "../etc", "active": True}],
        "SCHEMA_INVALID",
        "..",
    ),
    "locks-no-active": (
        "locks",
        [{"task_id": "T-1", "resource": "src"}],
        "MISSING_REQUIRED_INPUT",
        "'active'",
    ),
    "locks-object": ("locks", {"locks": LOCKS}, "SCHEMA_INVALID", "a list of locks"),
    "ledger-forged": (
        "ledger",
        ndjson(CREATE, START, FORGED),
        "LEDGER_INCONSISTENT",
        "already used for a different delta",
    ),
    "ledger-stale": (
        "ledger",
        ndjson(CREATE, START, STALE | {"delta_id": "T-12/again"}),
        "LEDGER_INCONSISTENT",
        "the writer saw 0",
    ),
    "ledger-todo-done": (
        "ledger",
        ndjson(CREATE, SKIPPED | {"x_base_version": 1, "x_seq": 2}),
        "LEDGER_INCONSISTENT",
        "cannot go to done",
    ),
    "ledger-locks": (
        "ledger",
        ndjson(CREATE, START, OTHER, OTHER_START),
        "LEDGER_INCONSISTENT",
        "T-12 holds tests/test_api.py",
    ),
    "ledger-not-created": (
        "ledger",
        ndjson(NOT_CREATED),
        "LEDGER_INCONSISTENT",
        "create the task first",
    ),
    "ledger-no-verdict": (
        "ledger",
        ndjson(CREATE, START, SKIPPED),
        "LEDGER_INCONSISTENT",
        "PASS verdict",
    ),
    "ledger-bad-line": ("ledger", ndjson(CREATE) + "{oops\n", "LEDGER_INCONSISTENT", "line 2"),
    "submit-v2": (
        "submit",
        changed(SUBMIT, "schema_version", "scc.submit.v2"),
        "UNKNOWN_SCHEMA_VERSION",
        "scc.submit.v1",
    ),
    "submit-no-tests": (
        "submit",
        changed(SUBMIT, "tests", DROP),
        "MISSING_REQUIRED_INPUT",
        "tests",
    ),
    "submit-done-exit-1": (
        "submit",
        changed(SUBMIT, "exit_code", 1),
        "SCHEMA_INVALID",
        "DONE means exit code 0",
    ),
    "verdict-v0": (
        "verdict",
        changed(VERDICT, "schema_version", "scc.verdict.v0"),
        "UNKNOWN_SCHEMA_VERSION",
        "scc.verdict.v1",
    ),
    "verdict-maybe": ("verdict", changed(VERDICT, "verdict", "MAYBE"), "SCHEMA_INVALID", "MAYBE"),
    "verdict-pass-unchecked": (
        "verdict",
        changed(VERDICT, "checks.scope_valid", False),
        "SCHEMA_INVALID",
        "a PASS needs every check",
    ),
    "task-input-verbatim": ("task-input", TASK_INPUT_TEXT, "SCHEMA_INVALID", "line 13, column 3"),
    "task-input-overlap": (
        "task-input",
        changed(TASK_INPUT, "pins.forbidden_paths", ["docs/prompt_os/io/"]),
        "SCHEMA_INVALID",
        "both allowed and forbidden",
    ),
    "worklog-time": (
        "worklog",
        changed(WORKLOG_ENTRY, "timestamp", "yesterday"),
        "SCHEMA_INVALID",
        "timestamp",
    ),
    "handoff-no-version": (
        "handoff",
        changed(HANDOFF, "schema_version", DROP),
        "MISSING_REQUIRED_INPUT",
        "schema_version",
    ),
    "output-v9": (
        "output",
        changed(OUTPUT, "schema_version", "9.0.0"),
        "UNKNOWN_SCHEMA_VERSION",
        "major 9",
    ),
    "delta-status": ("delta", changed(CREATE, "status", "finished"), "SCHEMA_INVALID", "finished"),
    "delta-no-id": (
        "delta",
        changed(CREATE, "delta_id", DROP),
        "MISSING_REQUIRED_INPUT",
        "delta_id",
    ),
}


@pytest.mark.parametrize("case", BAD)
def test_a_bad_document_is_refused_with_its_code(case: str) -> None:
    kind, document, code, fragment = BAD[case]
    verdict = check(kind, document)
    assert (verdict["allow"], verdict["code"]) == (False, code), verdict
    assert fragment in verdict["reason"], verdict


def test_a_replayed_delta_is_a_duplicate_not_a_conflict() -> None:
    verdict = check("ledger", ndjson(CREATE, START, REPLAYED))
    assert verdict["allow"] is True
    assert verdict["reason"].startswith("2 deltas apply cleanly (1 duplicate ignored)")


def test_a_lock_conflict_names_both_tasks() -> None:
    locks = [
        {"task_id": "T-1", "resource": "src", "active": True},
        {"task_id": "T-2", "resource": "src/api.py", "active": True},
    ]
    verdict = check("locks", locks)
    assert verdict["details"] == {"conflicts": [["T-1", "src", "T-2", "src/api.py"]]}


# Every kind read as one JSON object (locks and ledger have tests of their own below).
STRICT_KINDS = sorted(set(GOOD) - {"locks", "ledger"})


@pytest.mark.slow
@pytest.mark.parametrize("kind", STRICT_KINDS)
def test_strict_refuses_an_unknown_field_the_default_accepts(kind: str) -> None:
    document = {**GOOD[kind], "comment": "hand-written"}
    assert check(kind, document)["allow"] is True
    verdict = check(kind, document, "--strict")
    assert (verdict["allow"], verdict["code"]) == (False, "SCHEMA_INVALID")
    assert "unknown field 'comment'" in verdict["reason"]
    assert check(kind, {**GOOD[kind], "x_comment": "ours"}, "--strict")["allow"] is True


def test_strict_refuses_an_unknown_field_deep_inside() -> None:
    document = changed(PACKET, "task.owner_hint", "alice")
    assert check("packet", document)["allow"] is True
    verdict = check("packet", document, "--strict")
    assert verdict["code"] == "SCHEMA_INVALID" and "owner_hint" in verdict["reason"]


# A ledger holds only what the board appended: a line it would refuse is the ledger's.
LEDGER_CAUSES = {
    "ledger-forged": "LEDGER_INCONSISTENT",
    "ledger-stale": "CONCURRENCY_CONFLICT",
    "ledger-todo-done": "INVALID_TRANSITION",
    "ledger-locks": "LOCK_CONFLICT",
    "ledger-not-created": "LEDGER_INCONSISTENT",
    "ledger-no-verdict": "ACCEPTANCE_FAILED",
    "ledger-bad-line": "SCHEMA_INVALID",
}


@pytest.mark.parametrize("case", LEDGER_CAUSES)
def test_a_ledger_the_board_cannot_reconcile_names_the_rule_as_its_cause(case: str) -> None:
    verdict = check("ledger", BAD[case][1])
    assert verdict["code"] == "LEDGER_INCONSISTENT"
    assert verdict["details"]["cause"] == LEDGER_CAUSES[case]


@pytest.mark.parametrize("flags", [(), ("--strict",)])
def test_a_ledger_with_an_unknown_field_is_refused_as_the_board_refuses_it(
    flags: tuple[str, ...],
) -> None:
    verdict = check("ledger", ndjson({**CREATE, "comment": "x"}, START), *flags)
    assert (verdict["allow"], verdict["code"]) == (False, "LEDGER_INCONSISTENT")
    assert verdict["details"]["cause"] == "SCHEMA_INVALID"
    assert "unknown field 'comment'" in verdict["reason"]


@pytest.mark.parametrize("where", ["in a lock", "beside active_locks"])
def test_strict_locks_refuses_an_unknown_field_the_default_accepts(where: str) -> None:
    if where == "in a lock":
        document: Any = [{**LOCKS[0], "comment": "x"}]
    else:
        document = {"active_locks": LOCKS, "comment": "x"}
    assert check("locks", document)["allow"] is True
    assert check("locks", document, "--strict")["code"] == "SCHEMA_INVALID"


def test_a_lock_with_a_bad_task_id_is_refused() -> None:
    verdict = check("locks", [{"task_id": "lock 9", "resource": "src", "active": True}])
    assert (verdict["allow"], verdict["code"]) == (False, "SCHEMA_INVALID")


def test_a_ledger_out_of_sequence_is_refused() -> None:
    other = {**OTHER, "x_seq": 2}
    verdict = check("ledger", ndjson(CREATE, START | {"x_seq": 3}, other))
    assert (verdict["allow"], verdict["code"]) == (False, "LEDGER_INCONSISTENT")


# What check ledger is given is judged: a gate never allows a ledger it did not read.
NO_DELTA = {
    "garbage without a newline": (b"garbage", "line 1: 7 bytes without a newline"),
    "a delta without a newline": (ndjson(CREATE).encode()[:-1], "line 1: "),
    "empty": (b"", "<stdin> is empty"),
    "blank lines": (b"\n \n", "<stdin> holds only blank lines"),
    "a torn line after blank ones": (b"\n\n{oops", "line 3: 5 bytes without a newline"),
}


@pytest.mark.parametrize("case", NO_DELTA)
def test_a_ledger_without_a_whole_delta_is_refused(case: str) -> None:
    raw, fragment = NO_DELTA[case]
    verdict = check("ledger", raw)
    assert (verdict["allow"], verdict["code"]) == (False, "MISSING_REQUIRED_INPUT"), verdict
    assert fragment in verdict["reason"], verdict


def test_a_board_with_no_delta_yet_is_refused_by_its_ledgers_name(tmp_path: Path) -> None:
    board = Board.create(tmp_path / ".board", run_id=RUN_ID, objective="Nothing yet")
    verdict = check("ledger", b"", "--board", board.directory)
    assert (verdict["allow"], verdict["code"]) == (False, "MISSING_REQUIRED_INPUT"), verdict
    assert verdict["reason"].startswith(f"{board.directory / 'ledger.ndjson'} is empty")


def test_an_invalid_whole_line_is_refused_by_its_line_number() -> None:
    # Line 3 is a duplicate (no new sequence number), so only the line count names line 4.
    raw = ndjson(CREATE, START, REPLAYED) + "garbage\n" + ndjson(OTHER)
    verdict = check("ledger", raw)
    assert (verdict["allow"], verdict["code"]) == (False, "LEDGER_INCONSISTENT"), verdict
    assert verdict["reason"].startswith("<stdin> line 4: "), verdict


def test_a_torn_last_line_after_whole_deltas_is_allowed_and_named() -> None:
    raw = ndjson(CREATE, START) + '{"task_id": "T-12", "sta'
    verdict = check("ledger", raw)
    assert (verdict["allow"], verdict["code"]) == (True, "OK"), verdict
    assert verdict["details"] == {"torn_tail": {"line": 3, "bytes": 24}}
    assert "(line 3, a torn last line of 24 bytes, left out)" in verdict["reason"]


@pytest.mark.slow
def test_the_board_leaves_out_the_torn_tail_the_check_names(workdir: Path) -> None:
    board = board_of(workdir)
    board.assign(["T-1"], owner="coder")
    ledger = workdir / ".board" / "ledger.ndjson"
    whole = ledger.read_bytes()
    with ledger.open("ab") as file:
        file.write(b'{"task_id":"T-2","status":"in_pro')
    verdict = check("ledger", ledger.read_bytes())
    assert verdict["allow"] is True
    assert verdict["details"]["torn_tail"] == {"line": whole.count(b"\n") + 1, "bytes": 33}
    status = json.loads(orchestrate("board", "status", "--json", "--workdir", workdir).stdout)
    assert {t["task_id"]: t["status"] for t in status["tasks"]}["T-2"] == "todo"
    # the next writer cuts the tail; what it appended is whole lines again
    board_of(workdir).create_tasks([structure(task("T-4", ["tests"]), Task, source="T-4")])
    assert ledger.read_bytes().startswith(whole)
    assert "details" not in check("ledger", ledger.read_bytes())


# -- the gateway through check --packet ------------------------------------------------


@pytest.mark.slow
def test_check_result_against_its_packet(tmp_path: Path) -> None:
    packet = tmp_path / "packet.json"
    packet.write_text(json.dumps(PACKET))
    assert check("result", RESULT, "--packet", packet)["reason"] == "the result passes the gateway"
    forbidden = changed(RESULT, "changes.0.resource", "src/api.py")
    verdict = check("result", forbidden, "--packet", packet)
    assert (verdict["allow"], verdict["code"]) == (False, "SCOPE_VIOLATION")
    assert "src/api.py (in forbidden_scope)" in verdict["reason"]
    assert verdict["details"]["verdict"]["checks"]["scope_valid"] is False
    outside = changed(RESULT, "changes.0.resource", "README.md")
    verdict = check("result", outside, "--packet", packet)
    assert verdict["code"] == "SCOPE_VIOLATION" and "outside lock_scope" in verdict["reason"]
    secret = changed(RESULT, "notes_for_orchestrator", [f"key {AWS_KEY}"])
    assert check("result", secret, "--packet", packet)["code"] == "UNTRUSTED_CONTEXT_BLOCK"
    other = changed(RESULT, "task_id", "T-13")
    assert check("result", other, "--packet", packet)["code"] == "SCHEMA_INVALID"


def test_check_submit_against_its_packet(tmp_path: Path) -> None:
    packet = tmp_path / "packet.json"
    packet.write_text(json.dumps(PACKET))
    stray = changed(SUBMIT, "changed_files", ["src/api.py"])
    verdict = check("submit", stray, "--packet", packet)
    assert (verdict["allow"], verdict["code"]) == (False, "SCOPE_VIOLATION")
    assert verdict["details"]["verdict"]["reason_code"] == "SCOPE_CONFLICT"


def test_check_against_a_packet_that_is_not_one(tmp_path: Path) -> None:
    packet = tmp_path / "packet.json"
    packet.write_text(json.dumps(changed(PACKET, "packet_type", DROP)))
    verdict = check("result", RESULT, "--packet", packet)
    assert verdict["code"] == "MISSING_REQUIRED_INPUT" and str(packet) in verdict["reason"]


def test_check_against_a_missing_packet_is_one_line(tmp_path: Path) -> None:
    verdict = check("result", RESULT, "--packet", tmp_path / "missing.json")
    assert verdict["allow"] is False


# -- the example, end to end -----------------------------------------------------------


@pytest.mark.slow
def test_the_offline_example_runs_to_the_end(tmp_path: Path) -> None:
    workdir = tmp_path / "example"
    result = subprocess.run(
        ["bash", str(ROOT / "examples" / "task_board" / "run_offline.sh"), str(workdir)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    rows = {r.task_id: r for r in Board(workdir / ".board").state().rows.values()}
    assert {t: r.status.value for t, r in rows.items()} == dict.fromkeys(
        ["T-1", "T-2", "T-3", "T-4", "T-5", "T-6"], "done"
    )
    deltas = lines_of(workdir / ".board" / "ledger.ndjson")

    def story(task_id: str) -> list[tuple[str, Any, Any]]:
        return [
            (d["status"], d.get("x_code"), d.get("x_attempt"))
            for d in deltas
            if d["task_id"] == task_id
        ]

    assert rows["T-4"].attempts == 2
    assert story("T-4")[1:] == [
        ("in_progress", None, 1),
        ("blocked", "TASK_TIMEOUT", None),
        ("todo", None, None),
        ("in_progress", None, 2),
        ("done", None, None),
    ]
    assert rows["T-5"].attempts == 2
    assert story("T-5")[1:] == [
        ("in_progress", None, 1),
        ("blocked", "SCOPE_VIOLATION", None),
        ("todo", None, None),
        ("in_progress", None, 2),
        ("done", None, None),
    ]

    def in_progress(task_id: str) -> list[range]:
        """The x_seq ranges over which ``task_id`` held its locks."""
        spans, start = [], None
        for d in deltas:
            if d["task_id"] != task_id:
                continue
            if d["status"] == "in_progress":
                start = d["x_seq"]
            elif start is not None:
                spans.append(range(start, d["x_seq"]))
                start = None
        return spans

    for t1 in in_progress("T-1"):
        for t2 in in_progress("T-2"):
            assert not set(t1) & set(t2), "T-1 and T-2 held src/ at the same time"
    assert in_progress("T-1") and in_progress("T-2")
    assert (workdir / ".board" / "handoff.md").exists()
    assert "== the ledger, one line per delta" in result.stdout


@pytest.mark.slow
def test_check_result_refuses_a_secret_in_its_notes_with_or_without_a_packet(
    workdir: Path,
) -> None:
    """notes_for_orchestrator are untrusted: a secret there is UNTRUSTED_CONTEXT_BLOCK,
    alone as against the packet (the gateway's rule, from the same function)."""
    board = board_of(workdir)
    board.assign(["T-1"], owner="coder")
    packet_path = workdir / ".board" / "packets" / "T-1.1.json"
    result = result_for(read(packet_path))
    result["notes_for_orchestrator"] = [f"the deploy key is {AWS_KEY}"]
    alone = check("result", result)
    with_packet = check("result", result, "--packet", packet_path)
    for verdict in (alone, with_packet):
        assert (verdict["allow"], verdict["code"]) == (False, "UNTRUSTED_CONTEXT_BLOCK"), verdict
        assert "notes_for_orchestrator[0] holds a secret" in verdict["reason"]
        assert AWS_KEY not in json.dumps(verdict)
    assert alone["details"] == {
        "json_path": "$.notes_for_orchestrator[0]",
        "rule": "untrusted-secret",
    }
    result["notes_for_orchestrator"] = ["all done"]
    assert check("result", result)["allow"] is True


@pytest.mark.slow
@pytest.mark.parametrize(
    ("lock_scope", "forbidden_scope", "where"),
    [
        (["  "], [], "$.task.lock_scope[0]"),
        (["../etc"], [], "$.task.lock_scope[0]"),
        (["src/a.py"], ["src/"], "$.task.forbidden_scope[0]"),
    ],
)
def test_check_packet_and_board_create_judge_a_scope_alike(
    tmp_path: Path, lock_scope: list[str], forbidden_scope: list[str], where: str
) -> None:
    """The lock rules refuse these scopes: the packet validator and the board's create
    say so with the same code (one rule, in the formats, under both)."""
    packet = copy.deepcopy(PACKET)
    packet["task"]["lock_scope"] = lock_scope
    packet["task"]["forbidden_scope"] = forbidden_scope
    packet["active_locks"] = []
    verdict = check("packet", packet)
    assert (verdict["allow"], verdict["code"]) == (False, "SCHEMA_INVALID"), verdict
    assert verdict["details"]["json_path"] == where
    made = orchestrate(
        "board", "init", "--workdir", tmp_path, "--run-id", RUN_ID, "--objective", "o"
    )
    assert made.returncode == 0, made.stderr
    bad = {**task("T-1", lock_scope), "forbidden_scope": forbidden_scope}
    created = orchestrate("board", "create", "--workdir", tmp_path, stdin=json.dumps([bad]))
    refused(created, "SCHEMA_INVALID")


def test_check_packet_refuses_a_lock_another_task_holds(tmp_path: Path) -> None:
    packet = copy.deepcopy(PACKET)
    packet["task"]["lock_scope"] = ["src/a.py"]
    packet["task"]["forbidden_scope"] = []
    mine = packet["task"]["task_id"]
    packet["active_locks"] = [{"task_id": "T-99", "resource": "src", "active": True}]
    verdict = check("packet", packet)
    assert (verdict["allow"], verdict["code"]) == (False, "LOCK_CONFLICT"), verdict
    assert "locked by T-99" in verdict["reason"]
    packet["active_locks"] = [
        {"task_id": "T-99", "resource": "src", "active": False},  # released
        {"task_id": mine, "resource": "src/a.py", "active": True},  # its own
        {"task_id": "T-98", "resource": "src2", "active": True},  # not under src
    ]
    assert check("packet", packet)["allow"] is True
