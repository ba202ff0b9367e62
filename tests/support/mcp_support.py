"""``orchestrate mcp`` as a host reaches it: a real server process over stdio, driven by
the official MCP client (``ClientSession``).

- :func:`mcp_session`: a session with ``orchestrate mcp ARGS``, initialised;
- :func:`call`: one tool call, its structured content (a tool error fails the test,
  unless ``error=True`` asks for one);
- :func:`answer_until_done`: the host loop (list_pending, respond, resume) with the
  template-create example's offline agent, until the run ends.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from support.cli import child_env
from support.process_support import example_answer


@asynccontextmanager
async def mcp_session(
    *args: object, heard: list[Any] | None = None
) -> AsyncIterator[ClientSession]:
    """A client session with a fresh ``orchestrate mcp ARGS`` process over stdio; the
    server's notifications are appended to ``heard``."""

    async def listen(message: Any) -> None:
        if heard is not None:
            heard.append(message)

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "orchestrator", "mcp", *map(str, args)],
        env=child_env(),
    )
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, message_handler=listen) as session,
    ):
        await session.initialize()
        yield session


async def call(
    session: ClientSession,
    tool: str,
    arguments: dict[str, Any] | None = None,
    *,
    error: bool = False,
) -> dict[str, Any]:
    """The tool's structured content; asserts it is (``error``) or is not a tool error."""
    result = await session.call_tool(tool, arguments or {})
    text = " ".join(c.text for c in result.content if hasattr(c, "text"))
    assert bool(result.is_error) is error, f"{tool}: {text}"
    content = result.structured_content
    assert isinstance(content, dict), f"{tool} gave no structured content: {text}"
    return content


async def answer_until_done(session: ClientSession, run_id: str) -> dict[str, Any]:
    """Answer every pending request with the example's offline agent, resume, until the
    run ends; returns the last resume's outcome."""
    outcome: dict[str, Any] = {"status": "paused"}
    rounds = 0
    while outcome["status"] == "paused":
        rounds += 1
        assert rounds < 50, "the run never ended"
        pending = (await call(session, "list_pending", {"run_id": run_id}))["pending"]
        assert pending, f"run {run_id} is paused with nothing pending"
        for item in pending:
            request = {
                "request_id": item["request_id"],
                "agent_name": item["agent"],
                "prompt": item["prompt"],
            }
            await call(
                session,
                "respond",
                {
                    "run_id": run_id,
                    "request_id": item["request_id"],
                    "answer": json.loads(example_answer(request)),
                    "metadata": {"model": "offline-fake-agent", "confidence": 0.92},
                },
            )
        outcome = await call(session, "resume", {"run_id": run_id})
    return outcome
