"""``orchestrate board ...`` and ``orchestrate check ledger`` against ``--store``: the
same commands, run as real processes, on a board directory and on a board in PostgreSQL,
print the same things and refuse the same things (apart from times and where the board
is); the store comes from ``$ORCHESTRATOR_STORE`` too, and a store without ``--board`` or
a store that cannot be reached is a one-line error.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from test_board_cli import RUN_ID, TASKS, refused, result_for

from support.cli import orchestrate

A_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")
TIMES = ("x_at", "last_heartbeat_at", "timestamp", "created_at", "timestamps")


pytestmark = pytest.mark.slow


def timeless(value: Any) -> Any:
    """``value`` with every time left out (two boards are made at different moments)."""
    if isinstance(value, dict):
        return {k: timeless(v) for k, v in value.items() if k not in TIMES}
    if isinstance(value, list):
        return [timeless(v) for v in value]
    if isinstance(value, str):
        return A_TIME.sub("<time>", value)
    return value


def packet_of(task_id: str) -> dict[str, Any]:
    task = next(t for t in TASKS if t["task_id"] == task_id)
    return {"run_id": RUN_ID, "task": task}


def session(board: list[str], tmp_path: Path) -> dict[str, Any]:
    """One board's life through the CLI; what each command printed (times left out)."""
    seen: dict[str, Any] = {}
    init = orchestrate("board", "init", *board, "--run-id", RUN_ID, "--objective", "Ship it")
    assert init.returncode == 0, init.stderr
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps(TASKS))
    created = orchestrate("board", "create", *board, "--file", tasks)
    assert created.returncode == 0 and "3 tasks created" in created.stderr, created.stderr
    seen["created"] = timeless([json.loads(line) for line in created.stdout.splitlines()])
    assign = orchestrate("board", "assign", *board, "--task", "T-1", "--owner", "agent-a")
    assert assign.returncode == 0 and assign.stdout.strip().endswith("T-1.1.json"), assign
    packet = orchestrate("board", "packet", *board, "--task", "T-1")
    assert packet.returncode == 0, packet.stderr
    seen["packet"] = json.loads(packet.stdout)
    seen["no packet"] = refused(
        orchestrate("board", "packet", *board, "--task", "T-2", "--attempt", "1"),
        "MISSING_REQUIRED_INPUT",
    )
    beat = orchestrate("board", "heartbeat", *board, "--task", "T-1", "--attempt", "1")
    assert beat.returncode == 0 and beat.stdout.strip().endswith("Z")
    seen["stale beat"] = refused(
        orchestrate("board", "heartbeat", *board, "--task", "T-1", "--attempt", "2"),
        "CONCURRENCY_CONFLICT",
    )
    log = orchestrate(
        "board", "worklog", *board, "--task", "T-1", "--action", "edit", "--result", "ok"
    )
    assert log.returncode == 0, log.stderr
    seen["conflict"] = refused(
        orchestrate("board", "assign", *board, "--task", "T-2", "--owner", "agent-b"),
        "LOCK_CONFLICT",
        "T-1",
    )
    submit = orchestrate(
        "board", "submit", *board, "--task", "T-1", stdin=json.dumps(result_for(packet_of("T-1")))
    )
    assert submit.returncode == 0, (submit.stdout, submit.stderr)
    verdict = json.loads(submit.stdout)
    assert verdict["verdict"] == "PASS"
    seen["verdict"] = timeless({k: v for k, v in verdict.items() if k != "links"})
    stale = ["--task", "T-2", "--status", "blocked", "--reason", "waiting", "--base-version", "1"]
    seen["stale version"] = refused(
        orchestrate("board", "set-status", *board, *stale), "CONCURRENCY_CONFLICT"
    )
    assert orchestrate("board", "assign", *board, "--task", "T-2", "--owner", "b").returncode == 0
    watchdog = orchestrate("board", "watchdog", *board, "--now", "2099-01-01T00:00:00Z")
    assert watchdog.returncode == 0 and "1 task timed out" in watchdog.stderr
    ledger = orchestrate("board", "ledger", *board)
    seen["ledger"] = timeless([json.loads(line) for line in ledger.stdout.splitlines()])
    table = orchestrate("board", "ledger", *board, "--table", "--task", "T-2")
    seen["table"] = timeless(table.stdout)
    seen["locks"] = json.loads(orchestrate("board", "locks", *board, "--history").stdout)
    seen["status"] = timeless(json.loads(orchestrate("board", "status", *board, "--json").stdout))
    check = orchestrate("check", "ledger", *board)
    seen["check"] = json.loads(check.stdout)
    assert check.returncode == 0 and seen["check"]["allow"], check.stdout
    handoff = orchestrate("board", "handoff", *board)
    assert handoff.returncode == 0
    seen["handoff"] = timeless(json.loads(handoff.stdout))
    return seen


@pytest.fixture
def store_board(pg_dsn: str) -> list[str]:
    return ["--store", pg_dsn, "--board", f"cli-{uuid.uuid4()}"]


def test_the_board_commands_do_the_same_on_files_and_in_a_store(
    tmp_path: Path, store_board: list[str]
) -> None:
    (tmp_path / "files").mkdir()
    (tmp_path / "store").mkdir()
    on_files = session(["--board", str(tmp_path / "files" / ".board")], tmp_path / "files")
    in_store = session(store_board, tmp_path / "store")
    assert on_files.keys() == in_store.keys()
    for key in on_files:
        assert on_files[key] == in_store[key], key
    assert [d["status"] for d in in_store["ledger"]][-3:] == ["done", "in_progress", "blocked"]


def test_adopt_and_handoff_in_a_store(store_board: list[str], pg_dsn: str, tmp_path: Path) -> None:
    session(store_board, tmp_path)
    handoff = orchestrate("board", "handoff", *store_board)
    written = orchestrate("board", "handoff", *store_board, "--write")
    assert written.returncode == 2 and "redirect the output" in written.stderr
    other = ["--store", pg_dsn, "--board", f"adopted-{uuid.uuid4()}"]
    adopted = orchestrate("board", "adopt", *other, stdin=handoff.stdout)
    assert adopted.returncode == 0, adopted.stderr
    assert other[-1] in adopted.stdout
    status = json.loads(orchestrate("board", "status", *other, "--json").stdout)
    assert [(t["task_id"], t["status"]) for t in status["tasks"]] == [
        ("T-1", "done"),
        ("T-2", "blocked"),
        ("T-3", "todo"),
    ]


def test_the_store_comes_from_the_environment_too(store_board: list[str], pg_dsn: str) -> None:
    board_id = store_board[-1]
    init = orchestrate(
        "board", "init", "--board", board_id, "--run-id", RUN_ID, "--objective", "Ship it",
        env={"ORCHESTRATOR_STORE": pg_dsn},
    )  # fmt: skip
    assert init.returncode == 0, init.stderr
    status = orchestrate("board", "status", "--board", board_id, env={"ORCHESTRATOR_STORE": pg_dsn})
    assert status.returncode == 0 and f"board {board_id} in " in status.stdout
    assert orchestrate("board", "status", *store_board).stdout == status.stdout


def test_a_store_without_a_board_or_without_a_server_is_a_one_line_error(
    pg_dsn: str, tmp_path: Path
) -> None:
    nameless = orchestrate("board", "status", "--store", pg_dsn)
    assert nameless.returncode == 2
    assert len(nameless.stderr.splitlines()) == 1 and "--board ID" in nameless.stderr
    missing = orchestrate("board", "status", "--store", pg_dsn, "--board", "no-such-board")
    assert missing.returncode == 1 and "no task board here" in missing.stderr
    assert len(missing.stderr.splitlines()) == 1
    nowhere = orchestrate(
        "board", "status", "--store", "postgresql://nobody@127.0.0.1:1/none", "--board", "b"
    )
    assert nowhere.returncode != 0 and len(nowhere.stderr.splitlines()) == 1
    assert "cannot connect" in nowhere.stderr
    not_a_store = orchestrate("board", "status", "--store", str(tmp_path), "--board", "b")
    assert not_a_store.returncode == 2 and "postgresql://" in not_a_store.stderr
    wrong_kind = orchestrate("check", "task", "--store", pg_dsn, "--board", "b", stdin="{}")
    assert wrong_kind.returncode == 2 and "'check ledger'" in wrong_kind.stderr
