"""``orchestrate mcp --http PORT``: streamable HTTP on 127.0.0.1 under an access token, with
the browser page's rules for Host and Origin; the official client reaches the tools."""

from __future__ import annotations

import http.client
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from support.cli import child_env, command
from support.evidence_support import EXAMPLE

WORKFLOW = f"{EXAMPLE / 'workflow.py'}:TemplateCreate"
INITIALIZE = (
    b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
    b'"capabilities":{},"clientInfo":{"name":"test","version":"1"}}}'
)


@contextmanager
def serving(workdir: Path) -> Iterator[str]:
    """``orchestrate mcp --http 0``; the URL it prints (with its token)."""
    process = subprocess.Popen(
        command("mcp", "--http", "0", "--workdir", workdir, "--workflow", WORKFLOW),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), process.stderr.read() if process.stderr else ""
        yield url
    finally:
        process.terminate()
        process.communicate(timeout=30)


def post(url: str, *, path: str, headers: dict[str, str]) -> int:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    base = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    connection.request("POST", path, body=INITIALIZE, headers={**base, **headers})
    status = connection.getresponse().status
    connection.close()
    return status


def test_http_serves_the_tools_under_the_token_host_and_origin_rules(tmp_path: Path) -> None:
    with serving(tmp_path) as url:
        parts = urlsplit(url)
        token = parts.query.removeprefix("token=")
        host = f"127.0.0.1:{parts.port}"
        assert post(url, path=f"/mcp?{parts.query}", headers={}) == 200
        assert post(url, path="/mcp", headers={"authorization": f"Bearer {token}"}) == 200
        assert post(url, path="/mcp", headers={}) == 403
        assert post(url, path="/mcp?token=wrong", headers={}) == 403
        assert (
            post(url, path=f"/mcp?{parts.query}", headers={"host": f"evil.example:{parts.port}"})
            == 403
        )
        assert (
            post(url, path=f"/mcp?{parts.query}", headers={"origin": "http://evil.example"}) == 403
        )
        assert post(url, path=f"/mcp?{parts.query}", headers={"origin": f"http://{host}"}) == 200

        async def listed() -> list[str]:
            async with (
                streamable_http_client(url) as (read, write, *_),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                result = await session.call_tool("list_workflows", {})
                assert not result.is_error
                assert isinstance(result.structured_content, dict)
                return [w["name"] for w in result.structured_content["workflows"]]

        assert anyio.run(listed) == ["template-create"]
