"""``orchestrate mcp``: serve the MCP tools over stdio (or streamable HTTP on loopback)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..._errors import UsageError
from ..common import Command

if TYPE_CHECKING:
    from ..._ports import RunStore


def add_mcp_arguments(sub: Any) -> None:
    sub.add_argument(
        "--workdir",
        dest="workdirs",
        action="append",
        type=Path,
        default=[],
        metavar="DIR",
        help="a work directory whose runs to serve (repeatable; new runs work in the first; "
        "default: the current one)",
    )
    sub.add_argument(
        "--workflow",
        dest="workflows",
        action="append",
        default=[],
        metavar="REF",
        help="a workflow start_run may start, as 'run' takes it (repeatable; the installed "
        "entry points are offered too)",
    )
    sub.add_argument(
        "--http",
        type=int,
        default=None,
        metavar="PORT",
        help="serve streamable HTTP on 127.0.0.1:PORT under an access token instead of stdio "
        "(0: a free port); prints the URL",
    )
    from ..common import add_otlp, add_store_argument

    add_store_argument(sub, run=False)
    add_otlp(sub)


def cmd_mcp(args: argparse.Namespace) -> int:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise UsageError(
            "orchestrate mcp needs its extra: pip install 'checkpoint-orchestrator[mcp]'"
        ) from None
    import anyio

    from .board_tools import BoardTools
    from .server import build_server, serve_http, serve_stdio

    runs = open_tools(args)
    try:
        server = build_server(runs, BoardTools(runs))
        if args.http is None:
            anyio.run(serve_stdio, server)
        else:
            serve_http(server, args.http)
    finally:
        runs.close()
    return 0


def open_tools(args: argparse.Namespace) -> Any:
    """The run tools over the stores ``--workdir`` and ``--store`` name: new runs go to
    the PostgreSQL store when there is one, else to the first work directory."""
    from ...storage.beneath import guard as guard_directory
    from ..run_store import directory_store, store_at, store_dsn
    from .run_tools import RunTools

    dsn = store_dsn(args, starts_run=True)
    given = args.workdirs or [Path.cwd()]
    workdirs = [d.resolve() for d in given]
    for directory in workdirs:
        if not directory.is_dir():
            raise UsageError(f"--workdir {directory}: no such directory")
        guard_directory(directory)  # nothing under it is reached through a link
    # With --store, --workdir is the directory new runs work in (as for 'run').
    stores: list[RunStore] = (
        [store_at(dsn, workdirs[0])] if dsn else [directory_store(w) for w in workdirs]
    )
    print(
        f"orchestrate: serving MCP over {', '.join(s.name for s in stores)}",
        file=sys.stderr,
        flush=True,
    )
    return RunTools(stores, workdir=workdirs[0], workflows=list(args.workflows))


COMMANDS = {
    "mcp": Command(
        "An MCP server over the runs and task boards of the work directories or the store "
        "named: start runs, list and answer pending requests, resume; a subagent's packet, "
        "heartbeat, worklog and submit (stdio, or --http on 127.0.0.1).",
        add_mcp_arguments,
        cmd_mcp,
    ),
}
