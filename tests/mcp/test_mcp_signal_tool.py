"""The MCP server's ``signal`` tool: a signal for a run waiting for one, through the
answer gate (a payload that does not fit is a tool error naming the field, and nothing
is kept); ``resume=true`` goes on with the run, which takes it."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from support.mcp_support import call, mcp_session

FLOWS = Path(__file__).resolve().parents[1] / "support" / "signal_flows.py"
TYPED = f"{FLOWS}:TypedApproval"


@pytest.mark.slow
def test_the_signal_tool_sends_through_the_gate_and_resumes(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with mcp_session("--workflow", TYPED, "--workdir", tmp_path) as session:
            started = await call(session, "start_run", {"workflow": TYPED})
            run_id = started["run_id"]
            assert started["status"] == "paused"
            assert started["waiting_for_signal"] == "approve"
            status = await call(session, "status", {"run_id": run_id})
            assert status["waiting_for_signal"] == "approve"
            refused = await call(
                session,
                "signal",
                {"run_id": run_id, "name": "approve", "payload": {"approved": "yes", "by": "x"}},
                error=True,
            )
            assert refused["reason"] == "shape"
            assert refused["field"] == "payload.approved"
            assert not list((tmp_path / ".orchestrator" / "runs").glob("*/signals.ndjson"))
            sent = await call(
                session,
                "signal",
                {
                    "run_id": run_id,
                    "name": "approve",
                    "payload": {"approved": True, "by": "ann"},
                    "signal_id": "from-mcp",
                    "resume": True,
                },
            )
            assert sent["signal_id"] == "from-mcp"
            assert sent["resumed"]["waiting_for_signal"] == "go"
            done = await call(
                session, "signal", {"run_id": run_id, "name": "go", "payload": 1, "resume": True}
            )
            assert done["resumed"]["status"] == "completed"
            output = await call(session, "output", {"run_id": run_id, "phase": "decide"})
            assert output["output"]["approval"] == {"approved": True, "by": "ann"}
            assert output["output"]["go"] == 1

    anyio.run(scenario)
