"""The MCP server itself, on the official MCP Python SDK's low-level ``Server``: the
tools of :mod:`.tool_schemas` served by :mod:`.run_tools` and :mod:`.board_tools`, each
run's summary and evidence files as resources, the "host loop" prompt, and notifications
when a tool changed a run. Imported only by ``orchestrate mcp`` once it runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, unquote

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server.lowlevel import NotificationOptions, Server

from ..._errors import AnswerRefusedError, OrchestratorError
from ..._text import printable
from .board_tools import BoardTools
from .run_tools import RunTools
from .tool_schemas import BOARD_TOOLS, RUN_TOOLS

SCHEME = "orchestrator"
#: JSON-RPC's "invalid params": a resource or prompt not served here
INVALID_PARAMS = -32602
#: Tools after which the runs (their list, a run's summary) may have changed.
CHANGING = {"start_run", "respond", "signal", "resume", "cancel", "retry", "rewind"}

HOST_LOOP = """\
You drive workflow runs of checkpoint-orchestrator through this server's tools.

1. Start the run: `start_run` with the workflow (see `list_workflows`) and its inputs.
2. `list_pending` with the run's id: each pending request has an agent, a prompt, the
   answer's JSON Schema (`x_answer_schema`) and, when an answer before was refused, why
   (`x_previous_error`).
3. Answer each request by delegating its prompt to the subagent it names (the `agent`
   field), then `respond` with the run id, the request id and the answer (JSON of the
   answer's schema, or text). A refused answer is a tool error naming the field: fix
   that and respond again. An agent that cannot answer: `respond` with an `error`.
4. When every request is answered, `resume` (or pass `resume: true` to the last
   `respond`).
5. Repeat from 2 until the run's status is `completed` or `failed`; then report the
   outcome (`status`, `output`).
"""


class ChangingServer(Server[Any]):
    """The SDK's server, saying in its capabilities that the list of resources changes
    (a run started, paused or ended: see :func:`notify_changed`)."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> Any:
        options = notification_options or NotificationOptions(resources_changed=True)
        return super().create_initialization_options(options, experimental_capabilities, extensions)


def tool_list() -> list[types.Tool]:
    return [
        types.Tool(name=name, description=description, input_schema=schema)
        for name, (description, schema) in {**RUN_TOOLS, **BOARD_TOOLS}.items()
    ]


def build_server(runs: RunTools, board: BoardTools) -> Server[Any]:
    """The server over ``runs`` and ``board``: every tool runs in a worker thread, one at
    a time (the engine and the stores are not shared between threads)."""
    handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
        **{name: getattr(runs, name) for name in RUN_TOOLS},
        **{name: getattr(board, name) for name in BOARD_TOOLS},
    }
    schemas = {name: schema for name, (_, schema) in {**RUN_TOOLS, **BOARD_TOOLS}.items()}

    def call_locked(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        with runs.lock:
            return handlers[name](arguments)

    async def list_tools(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tool_list())

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        name, arguments = params.name, dict(params.arguments or {})
        if name not in handlers:
            return tool_error(f"no tool {name!r}; tools: {', '.join(handlers)}", {})
        problem = argument_problem(arguments, schemas[name])
        if problem is not None:
            return tool_error(f"{name}: {problem}; nothing was done", {"problem": problem})
        try:
            result = await anyio.to_thread.run_sync(call_locked, name, arguments)
        except AnswerRefusedError as refused:
            facts = {"refused": True, "reason": refused.reason, **refused.details}
            field = (refused.details.get("refusal") or {}).get("field")
            if field is not None:  # the one thing a host must fix, at the top
                facts["field"] = field
            return tool_error(str(refused), facts)
        except board.refusals as refused:
            return tool_error(str(refused), board.refusal_facts(refused))
        except (OrchestratorError, OSError) as exc:
            return tool_error(str(exc), {"error": type(exc).__name__})
        if name in CHANGING:
            await notify_changed(ctx, result)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(result, ensure_ascii=False))],
            structured_content=result,
        )

    list_resources, read_resource = resource_handlers(runs)
    return ChangingServer(
        "checkpoint-orchestrator",
        instructions=HOST_LOOP,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
    )


def resource_handlers(runs: RunTools) -> tuple[Any, Any]:
    """The handlers of ``resources/list`` and ``resources/read``."""

    async def list_resources(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        listed = await anyio.to_thread.run_sync(lambda: resource_list(runs))
        return types.ListResourcesResult(resources=listed)

    async def read_resource(
        ctx: Any, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        try:
            text, mime = await anyio.to_thread.run_sync(lambda: read_uri(runs, uri))
        except (OrchestratorError, OSError) as exc:
            raise MCPError(INVALID_PARAMS, f"{uri}: {printable(str(exc))}") from None
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type=mime, text=text)]
        )

    return list_resources, read_resource


async def list_prompts(
    ctx: Any, params: types.PaginatedRequestParams | None
) -> types.ListPromptsResult:
    return types.ListPromptsResult(
        prompts=[types.Prompt(name="host loop", description="How to drive runs with these tools")]
    )


async def get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
    if params.name != "host loop":
        raise MCPError(INVALID_PARAMS, f"no prompt {params.name!r}; prompts: host loop")
    message = types.PromptMessage(
        role="user", content=types.TextContent(type="text", text=HOST_LOOP)
    )
    return types.GetPromptResult(description="the host loop", messages=[message])


def argument_problem(arguments: dict[str, Any], schema: dict[str, Any]) -> str | None:
    """What is wrong with a tool's arguments against its input schema: the field and why
    (judged as the answer gate judges an answer's shape)."""
    from ...formats.answer_gate import schema_mismatch

    refusal = schema_mismatch(arguments, schema, "arguments")
    return None if refusal is None else refusal.line()


def tool_error(message: str, facts: dict[str, Any]) -> types.CallToolResult:
    """A refusal as a tool error: one line a person reads, the facts as structured content."""
    line = printable(" ".join(message.split()))
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=line)],
        structured_content={"message": line, **facts},
        is_error=True,
    )


async def notify_changed(ctx: Any, result: dict[str, Any]) -> None:
    """A run paused, ended or got a new request: its summary changed, and the list of
    resources (its evidence files) with it."""
    run_id = result.get("run_id")
    try:
        if run_id:
            await ctx.session.send_resource_updated(summary_uri(str(run_id)))
        await ctx.session.send_resource_list_changed()
    except Exception:  # a client that went away misses a notification, nothing more
        return


def summary_uri(run_id: str) -> str:
    return f"{SCHEME}://runs/{quote(run_id, safe='')}/summary"


def file_uri(run_id: str, path: str) -> str:
    return f"{SCHEME}://runs/{quote(run_id, safe='')}/files/{quote(path)}"


def resource_list(runs: RunTools) -> list[types.Resource]:
    listed = []
    for run in runs.status({})["runs"]:
        run_id = run["run_id"]
        listed.append(
            types.Resource(
                name=f"run {run_id}",
                uri=summary_uri(run_id),
                description=f"{run['workflow']}: {run['status']}",
                mime_type="application/json",
            )
        )
        for path in runs.run_files(run_id):
            listed.append(types.Resource(name=f"run {run_id}: {path}", uri=file_uri(run_id, path)))
    return listed


def read_uri(runs: RunTools, uri: str) -> tuple[str, str]:
    """A resource's text and type: a run's summary (``status``), or a file of its evidence
    read by its store (nothing outside the run's directory)."""
    prefix = f"{SCHEME}://runs/"
    if not uri.startswith(prefix):
        raise MCPError(INVALID_PARAMS, f"{uri}: not a resource of this server ({prefix}...)")
    run_part, _, rest = uri.removeprefix(prefix).partition("/")
    run_id = unquote(run_part)
    with runs.lock:
        if rest == "summary":
            return json.dumps(runs.status({"run_id": run_id}), indent=2), "application/json"
        if rest.startswith("files/"):
            path = unquote(rest.removeprefix("files/"))
            data = runs.run_file(run_id, path)
            if data is None:
                raise MCPError(INVALID_PARAMS, f"{uri}: run {run_id} has no file {path}")
            return data.decode("utf-8", errors="replace"), "text/plain"
    raise MCPError(INVALID_PARAMS, f"{uri}: name a run's summary or one of its files")


async def serve_stdio(server: Server[Any]) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def serve_http(server: Server[Any], port: int) -> None:
    """Streamable HTTP on 127.0.0.1:``port`` (0: a free one) under an access token, with
    the browser page's rules: the token on every request (``Authorization: Bearer``, or
    ``?token=`` in the URL printed), the Host this server listens as, and no Origin but
    its own. Prints the URL (with the token) and serves until interrupted."""
    import socket

    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    from ..._errors import UsageError
    from ..ui.guard import Guard

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as exc:
        raise UsageError(
            f"--http {port}: cannot listen on 127.0.0.1:{port}: {exc.strerror}"
        ) from None
    sock.listen(128)
    bound = sock.getsockname()[1]
    hosts = [f"127.0.0.1:{bound}", f"localhost:{bound}"]
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=[f"http://{h}" for h in hosts],
    )
    inner = server.streamable_http_app(transport_security=security, host="127.0.0.1")
    guard = Guard(port=bound)
    app = guarded(inner, guard, hosts)
    print(f"http://127.0.0.1:{bound}/mcp?token={guard.token}", flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


def guarded(app: Any, guard: Any, hosts: list[str]) -> Any:
    """``app`` behind the access token, the Host and the Origin rules (403 otherwise)."""
    from urllib.parse import parse_qs

    async def refuse(send: Any, status: int, why: str) -> None:
        body = json.dumps({"error": why}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if headers.get("host") not in hosts:
            await refuse(send, 403, "the Host is not this server's")
            return
        origin = headers.get("origin")
        if origin is not None and origin not in {f"http://{h}" for h in hosts}:
            await refuse(send, 403, "requests from another origin are refused")
            return
        bearer = headers.get("authorization", "").removeprefix("Bearer ").strip() or None
        query = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", [None])[0]
        if not guard.admits(bearer, query):
            await refuse(send, 403, "the access token is missing or wrong")
            return
        await app(scope, receive, send)

    return asgi
