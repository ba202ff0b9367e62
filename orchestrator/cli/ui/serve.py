"""``orchestrate ui``: serve the app on loopback and print the link that opens it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..._errors import UsageError
from ..common import Command


def add_ui_arguments(sub: Any) -> None:
    sub.add_argument(
        "--workdir",
        dest="workdirs",
        action="append",
        type=Path,
        default=[],
        metavar="DIR",
        help="a work directory whose runs to show (repeatable; default: the current one)",
    )
    sub.add_argument(
        "--port", type=int, default=0, help="the port on 127.0.0.1 (default: a free one)"
    )
    sub.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to listen on (default 127.0.0.1: this machine only)",
    )
    sub.add_argument("--open", action="store_true", help="open the link in a browser")
    from ..common import add_store_argument

    add_store_argument(sub, run=False)


def cmd_ui(args: argparse.Namespace) -> int:
    try:
        import uvicorn
    except ImportError:
        raise UsageError(
            "orchestrate ui needs its extra: pip install 'checkpoint-orchestrator[ui]'"
        ) from None
    from ...storage.beneath import guard as guard_directory
    from ..run_store import directory_store, page_store, store_dsn
    from .app import make_app
    from .guard import Guard
    from .places import Place

    dsn = store_dsn(args)
    given = args.workdirs or ([] if dsn else [Path.cwd()])
    workdirs = [d.resolve() for d in given]
    for directory in workdirs:
        if not directory.is_dir():
            raise UsageError(f"--workdir {directory}: no such directory")
        guard_directory(directory)  # nothing under it is reached through a link
    places = [Place(directory_store(w), workdir=w) for w in workdirs]
    if dsn is not None:
        places.append(Place(page_store(dsn)))  # it answers, its schema is current: said now
    guard = Guard()
    app = make_app(places, guard)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning")
    server = uvicorn.Server(config)

    import socket

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}") from None
    sock.listen(128)  # a browser that comes at once waits in the backlog, not refused
    port = sock.getsockname()[1]
    url = f"http://{args.host}:{port}/?token={guard.token}"
    print(url, flush=True)
    print(
        f"orchestrate: serving {', '.join(p.label for p in places)} until Ctrl-C; the link "
        "above carries the access token",
        file=sys.stderr,
        flush=True,
    )
    if args.open:
        import webbrowser

        webbrowser.open(url)
    server.run(sockets=[sock])
    return 0


COMMANDS = {
    "ui": Command(
        "A local web page to watch runs and answer their requests: prints a link "
        "(127.0.0.1, with an access token) and serves until Ctrl-C.",
        add_ui_arguments,
        cmd_ui,
    ),
}
