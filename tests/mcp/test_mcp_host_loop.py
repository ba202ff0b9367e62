"""A host drives the template-create example through ``orchestrate mcp`` alone, over
stdio with the official MCP client: start_run, then list_pending, respond and resume
until the run completes; on a work directory's files and on PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from support.cli import orchestrate
from support.evidence_support import EXAMPLE, check_run_evidence, run_dir_of
from support.mcp_support import answer_until_done, call, mcp_session

WORKFLOW = f"{EXAMPLE / 'workflow.py'}:TemplateCreate"
INPUTS = {"project_path": str(EXAMPLE / "sample_project"), "template_name": "demo"}


async def drive_example(*server_args: object, output: Path) -> dict[str, Any]:
    async with mcp_session("--workflow", WORKFLOW, *server_args) as session:
        tools = {t.name for t in (await session.list_tools()).tools}
        assert {"list_workflows", "start_run", "list_pending", "respond", "resume"} <= tools
        listed = (await call(session, "list_workflows"))["workflows"]
        assert [w["name"] for w in listed] == ["template-create"]
        assert {"name": "project_path", "required": True} in listed[0]["inputs"]
        started = await call(
            session,
            "start_run",
            {"workflow": WORKFLOW, "inputs": INPUTS, "output": str(output)},
        )
        assert started["status"] == "paused" and started["pending"], started
        pending = (await call(session, "list_pending", {"run_id": started["run_id"]}))["pending"]
        first = pending[0]
        assert first["agent"] == "architectural-reviewer"
        assert first["x_answer_schema"]["type"] == "object" and first["attempt"] == 1
        outcome = await answer_until_done(session, started["run_id"])
        assert outcome["status"] == "completed", outcome
        status = await call(session, "status", {"run_id": started["run_id"]})
        outputs = (await call(session, "output", {"run_id": started["run_id"]}))["outputs"]
        events = (await call(session, "events", {"run_id": started["run_id"]}))["events"]
        assert events[-1]["event"] == "run.end"
        return {"run_id": started["run_id"], "status": status, "outputs": outputs}


@pytest.mark.slow
def passes_orchestrate_check(run_dir: Path) -> None:
    checked = orchestrate("check", "evidence", "--run", run_dir)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    verdict = json.loads(checked.stdout)
    assert verdict["allow"] is True and verdict["details"]["events"] > 10, verdict


def test_a_host_drives_a_run_to_completion_over_stdio(tmp_path: Path) -> None:
    done = anyio.run(lambda: drive_example("--workdir", tmp_path, output=tmp_path / "template"))
    assert done["outputs"]
    assert (tmp_path / "template").is_dir()
    check_run_evidence(run_dir_of(tmp_path))
    passes_orchestrate_check(run_dir_of(tmp_path))
    shown = orchestrate("status", "--workdir", tmp_path, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["run_id"] == done["run_id"]


@pytest.mark.slow
def test_a_host_drives_a_run_to_completion_on_postgresql(tmp_path: Path, pg_dsn: str) -> None:
    done = anyio.run(
        lambda: drive_example(
            "--store", pg_dsn, "--workdir", tmp_path, output=tmp_path / "template"
        )
    )
    assert (tmp_path / "template").is_dir()
    exported = orchestrate(
        "export", "--store", pg_dsn, "--run", done["run_id"], "--to", tmp_path / "export"
    )
    assert exported.returncode == 0, exported.stderr
    check_run_evidence(tmp_path / "export" / ".orchestrator" / "runs" / done["run_id"])
    passes_orchestrate_check(tmp_path / "export" / ".orchestrator" / "runs" / done["run_id"])
