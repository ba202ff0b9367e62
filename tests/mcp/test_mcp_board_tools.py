"""A subagent does a task of the task-board example through ``orchestrate mcp`` alone:
task_packet, heartbeat, worklog_append, submit (through the board's gateway); a result
that edits outside the task's lock scope comes back as a tool error with the gateway's
code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from support.mcp_support import call, mcp_session

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "task_board"
WORKFLOW = f"{EXAMPLE / 'workflow.py'}:TaskBoardDemo"


def result_of(packet: dict[str, Any], changed: list[str]) -> dict[str, Any]:
    """The subagent result a subagent hands in for its packet, having changed ``changed``."""
    task = packet["task"]
    return {
        "schema_version": "1.0.0",
        "run_id": packet["run_id"],
        "task_id": task["task_id"],
        "status": "done",
        "changes": [
            {"resource": name, "action": "edit", "evidence": f"wrote {name}"} for name in changed
        ],
        "acceptance_check": [
            {"criterion": criterion, "status": "pass", "evidence": f"see {', '.join(changed)}"}
            for criterion in task["acceptance_criteria"]
        ],
        "worklog_path": task["worklog_path"],
        "notes_for_orchestrator": [f"{task['task_id']} finished"],
    }


async def do_task(
    session: Any, task_id: str, workspace: Path, edits: dict[str, str]
) -> dict[str, Any]:
    """packet -> heartbeat -> worklog_append -> submit, editing ``edits`` in between;
    the submit's structured content (a tool error's, too)."""
    packet = (await call(session, "task_packet", {"task_id": task_id}))["packet"]
    beat = await call(session, "heartbeat", {"task_id": task_id})
    assert beat["heartbeat_at"]
    for relative, text in edits.items():
        (workspace / relative).write_text(text, encoding="utf-8")
    entry = {
        "actor": "coder",
        "action": "edit",
        "files_touched": sorted(edits),
        "decision": f"edit {', '.join(sorted(edits))}",
        "result": "files written",
        "next_step": "hand in the result",
    }
    logged = await call(session, "worklog_append", {"task_id": task_id, "entry": entry})
    assert logged["entry"]["action"] == "edit"
    result = await session.call_tool(
        "submit", {"task_id": task_id, "result": result_of(packet, sorted(edits))}
    )
    assert isinstance(result.structured_content, dict)
    return {"is_error": bool(result.is_error), "packet": packet, **result.structured_content}


def test_a_subagent_does_its_task_through_the_board_tools(tmp_path: Path) -> None:
    anyio.run(lambda: board_scenario(tmp_path, board_dir=tmp_path / ".board"))


@pytest.mark.slow
def test_the_board_tools_on_postgresql(tmp_path: Path, pg_dsn: str) -> None:
    anyio.run(lambda: board_scenario(tmp_path, "--store", pg_dsn, board_dir=None))


async def board_scenario(tmp_path: Path, *store: object, board_dir: Path | None) -> None:
    async with mcp_session("--workflow", WORKFLOW, "--workdir", tmp_path, *store) as session:
        started = await call(session, "start_run", {"workflow": WORKFLOW})
        assert started["status"] == "paused", started
        pending = (await call(session, "list_pending", {"run_id": started["run_id"]}))["pending"]
        assigned = {p["context"].get("x_task_id") for p in pending}
        assert {"T-1", "T-5"} <= assigned, assigned
        workspace = tmp_path / "repo"

        done = await do_task(
            session, "T-1", workspace, {"src/api.py": "def put(key, value):\n    pass\n"}
        )
        assert not done["is_error"], done
        assert done["verdict"]["verdict"] == "PASS"
        assert done["packet"]["task"]["lock_scope"] == ["src/api.py"]
        if board_dir is not None:
            worklog = (board_dir / "worklogs" / "T-1.jsonl").read_text(encoding="utf-8")
            assert json.loads(worklog.splitlines()[-1])["decision"] == "edit src/api.py"

        strayed = await do_task(
            session,
            "T-5",
            workspace,
            {"CHANGELOG.md": "# Changelog\n", "README.md": "# strayed\n"},
        )
        assert strayed["is_error"], strayed
        assert strayed["code"] == "SCOPE_VIOLATION", strayed
        assert strayed["verdict"]["verdict"] == "FAIL"
        assert "README.md" in strayed["message"]

        resumed = await call(session, "resume", {"run_id": started["run_id"]})
        assert resumed["status"] == "paused", resumed
        after = (await call(session, "list_pending", {"run_id": started["run_id"]}))["pending"]
        attempts = {p["context"]["x_task_id"]: p["context"]["x_attempt"] for p in after}
        assert "T-1" not in attempts and attempts["T-5"] == 2, attempts
