"""``orchestrate ui``: serve the app on loopback and print the link that opens it.

Another address than this machine's own (``--host``) needs ``--allow-remote``: the page
is plain HTTP, so its token and every answer then cross the network unencrypted.
"""

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
        help="the address to listen on (default 127.0.0.1: this machine only); another "
        "than a loopback address needs --allow-remote",
    )
    sub.add_argument(
        "--allow-remote",
        action="store_true",
        help="listen on a --host other machines reach: the page is plain HTTP, so the "
        "access token and every answer cross the network unencrypted",
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
    from .guard import Guard, is_loopback
    from .places import Place

    remote = not is_loopback(args.host)
    if remote and not args.allow_remote:
        raise UsageError(
            f"--host {args.host} is reached from other machines, and the page is plain "
            "HTTP: its access token and every answer would cross the network "
            "unencrypted; leave --host out (127.0.0.1), or add --allow-remote to accept that"
        )
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
    import socket

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}") from None
    sock.listen(128)  # a browser that comes at once waits in the backlog, not refused
    port = sock.getsockname()[1]
    guard = Guard(port=port, address=args.host)
    app = make_app(places, guard)
    config = uvicorn.Config(app, host=args.host, port=port, log_level="warning")
    server = uvicorn.Server(config)
    url = f"http://{args.host}:{port}/?token={guard.token}"
    print(url, flush=True)
    if remote:
        print(
            f"orchestrate: WARNING: listening on {args.host}, reached from other machines, "
            "over plain HTTP: the access token in this link, and every page and answer, "
            "cross the network unencrypted; anyone who sees the token can answer your runs",
            file=sys.stderr,
            flush=True,
        )
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
        "(127.0.0.1, with an access token) and serves until Ctrl-C; another address "
        "needs --allow-remote.",
        add_ui_arguments,
        cmd_ui,
    ),
}
