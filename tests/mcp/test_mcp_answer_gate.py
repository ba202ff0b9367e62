"""An answer through ``respond`` passes the answer gate: a malformed one is a tool error
naming the field, and nothing is written."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from support.evidence_support import EXAMPLE
from support.mcp_support import call, mcp_session

WORKFLOW = f"{EXAMPLE / 'workflow.py'}:TemplateCreate"
INPUTS = {"project_path": str(EXAMPLE / "sample_project"), "template_name": "demo"}


def mailbox(workdir: Path) -> list[str]:
    """The answers the host's side of the work directory holds."""
    return sorted(p.name for p in workdir.rglob("*") if "response" in p.name)


@pytest.mark.slow
def test_a_malformed_answer_is_a_tool_error_naming_the_field(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with mcp_session("--workflow", WORKFLOW, "--workdir", tmp_path) as session:
            started = await call(session, "start_run", {"workflow": WORKFLOW, "inputs": INPUTS})
            run_id = started["run_id"]
            [item] = (await call(session, "list_pending", {"run_id": run_id}))["pending"]
            before = mailbox(tmp_path)
            wrong = {
                "technology_stack": {
                    "primary_language": "Python",
                    "frameworks": "FastAPI",
                    "confidence": 0.9,
                },
                "architecture_pattern": "Layered",
                "layers": [],
                "patterns": [],
                "overall_confidence": 0.9,
            }
            refused = await call(
                session,
                "respond",
                {"run_id": run_id, "request_id": item["request_id"], "answer": wrong},
                error=True,
            )
            assert refused["reason"] == "shape"
            assert refused["field"] == "response.technology_stack.frameworks"
            assert "technology_stack.frameworks" in refused["message"]
            assert mailbox(tmp_path) == before
            still = (await call(session, "list_pending", {"run_id": run_id}))["pending"]
            assert [p["request_id"] for p in still] == [item["request_id"]]
            resumed = await call(session, "resume", {"run_id": run_id})
            assert resumed["status"] == "paused" and resumed["pending"] == [item["request_id"]]
            # A tool's own arguments are checked too: the field is named, nothing is done.
            bad = await call(
                session, "respond", {"run_id": run_id, "answer": 1, "extra": 2}, error=True
            )
            assert "arguments.extra" in bad["message"]

    anyio.run(scenario)


def test_errors_documents_and_resume_true_go_through_the_same_gate(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with mcp_session("--workflow", WORKFLOW, "--workdir", tmp_path) as session:
            outside = await call(
                session,
                "start_run",
                {"workflow": WORKFLOW, "inputs": INPUTS, "output": str(tmp_path.parent / "x")},
                error=True,
            )
            assert "outside the work directory" in outside["message"]
            started = await call(session, "start_run", {"workflow": WORKFLOW, "inputs": INPUTS})
            run_id = started["run_id"]
            [item] = (await call(session, "list_pending", {"run_id": run_id}))["pending"]
            broken = {"request_id": item["request_id"], "version": "1.0", "status": "success"}
            refused = await call(
                session, "respond", {"run_id": run_id, "document": broken}, error=True
            )
            assert "nothing was written" in refused["message"]
            error = {"type": "TIMEOUT", "message": "the agent did not answer in time"}
            answered = await call(
                session,
                "respond",
                {
                    "run_id": run_id,
                    "request_id": item["request_id"],
                    "error": error,
                    "resume": True,
                },
            )
            assert answered["still_pending"] == []
            resumed = answered["resumed"]
            assert resumed["status"] == "paused", resumed
            [again] = (await call(session, "list_pending", {"run_id": run_id}))["pending"]
            assert again["request_id"] != item["request_id"] and again["attempt"] == 2

    anyio.run(scenario)
