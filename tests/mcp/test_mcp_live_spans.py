"""The MCP server sends a run's spans live: each tool call that starts or resumes a run
sends what ended before it answers, while the server lives on."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from support import needs
from support.mcp_support import call, mcp_session
from support.otlp_receiver import PROXY_VARIABLES, WORKFLOW, Receiver, attributes_of


async def start_answer_resume(receiver: Receiver, workflow: str, workdir: Path) -> None:
    async with mcp_session("--workflow", workflow, "--workdir", workdir) as session:
        started = await call(session, "start_run", {"workflow": workflow})
        assert started["status"] == "paused", started
        # The server is still up: the paused run's spans are in already.
        assert sorted(receiver.names()) == ["start traced", "tool outline"]
        (item,) = (await call(session, "list_pending", {"run_id": started["run_id"]}))["pending"]
        await call(
            session,
            "respond",
            {
                "run_id": started["run_id"],
                "request_id": item["request_id"],
                "answer": "fine",
                "metadata": {"model": "claude-test-2", "tokens_used": 77},
            },
        )
        outcome = await call(session, "resume", {"run_id": started["run_id"]})
        assert outcome["status"] == "completed", outcome
        assert "run traced" in receiver.names()  # before the server stops


@pytest.mark.slow
def test_the_mcp_server_sends_spans_as_each_tool_call_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    needs.extra("opentelemetry.exporter.otlp.proto.http", "otel")
    (tmp_path / "wf.py").write_text(WORKFLOW)
    workdir = tmp_path / "work"
    workdir.mkdir()
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with Receiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        workflow = f"{tmp_path / 'wf.py'}:Traced"
        anyio.run(start_answer_resume, receiver, workflow, workdir)
    assert len({span.trace_id for span in receiver.spans}) == 1
    ask = attributes_of(receiver.named("agent critic"))
    assert ask["gen_ai.request.model"] == "claude-test-2"
