"""What ``orchestrate mcp`` offers besides tools: each run's summary and evidence files as
resources (nothing outside the run's directory), the "host loop" prompt, and a
notification when a tool changed a run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import MCPError

from orchestrator.cli.mcp.tool_schemas import RUN_TOOLS
from support.evidence_support import EXAMPLE
from support.mcp_support import call, mcp_session

WORKFLOW = f"{EXAMPLE / 'workflow.py'}:TemplateCreate"
INPUTS = {"project_path": str(EXAMPLE / "sample_project"), "template_name": "demo"}


def test_runs_are_resources_and_changes_are_told(tmp_path: Path) -> None:
    heard: list[Any] = []
    (tmp_path / "secret.txt").write_text("not evidence\n", encoding="utf-8")

    async def scenario() -> None:
        async with mcp_session(
            "--workflow", WORKFLOW, "--workdir", tmp_path, heard=heard
        ) as session:
            started = await call(session, "start_run", {"workflow": WORKFLOW, "inputs": INPUTS})
            run_id = started["run_id"]
            await call(session, "status", {})  # the notifications came before this answer
            kinds = {type(h) for h in heard}
            assert mcp_types.ResourceListChangedNotification in kinds, heard
            updated = [h for h in heard if isinstance(h, mcp_types.ResourceUpdatedNotification)]
            assert [str(u.params.uri) for u in updated] == [f"orchestrator://runs/{run_id}/summary"]

            uris = [str(r.uri) for r in (await session.list_resources()).resources]
            assert f"orchestrator://runs/{run_id}/summary" in uris
            assert f"orchestrator://runs/{run_id}/files/events.ndjson" in uris
            summary = await session.read_resource(f"orchestrator://runs/{run_id}/summary")
            assert json.loads(summary.contents[0].text)["run_id"] == run_id
            events = await session.read_resource(
                f"orchestrator://runs/{run_id}/files/events.ndjson"
            )
            assert json.loads(events.contents[0].text.splitlines()[0])["event"] == "run.start"
            for outside in ("..%2F..%2F..%2Fsecret.txt", "../../../secret.txt"):
                with pytest.raises(MCPError, match="has no file"):
                    await session.read_resource(f"orchestrator://runs/{run_id}/files/{outside}")

            with pytest.raises(MCPError, match="no such run"):
                await session.read_resource("orchestrator://runs/no-such-run/summary")

            prompts = (await session.list_prompts()).prompts
            assert [p.name for p in prompts] == ["host loop"]
            loop = (await session.get_prompt("host loop")).messages[0].content.text
            for tool in ("start_run", "list_pending", "respond", "resume"):
                assert f"`{tool}`" in loop and tool in RUN_TOOLS

    anyio.run(scenario)
