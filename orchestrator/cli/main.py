"""``orchestrate``: the entry point. Builds the parser from what each command module
declares, runs the command and maps its outcome to an exit code (0 done, 1 error with
state kept, 2 usage, 42 paused, 75 instance busy).

Only what a command needs is imported, and only when it runs: a host spawns this once
per pause, so start-up time is the product. The parser of a named command is built
alone, from the one module that declares it.
"""

from __future__ import annotations

import argparse
import sys

from .._errors import (
    InstanceBusyError,
    InstanceExistsError,
    NoInstanceError,
    OrchestratorError,
    StorageError,
    UsageError,
    WorkflowDefinitionError,
    WorkflowNotFoundError,
)
from .._text import printable
from . import common
from .common import EXIT_BUSY, EXIT_ERROR, EXIT_OK, EXIT_USAGE, Command, Formatter


def entry() -> None:
    """The console script: :func:`main`, then leave at once.

    A process that lives for one command gains nothing from garbage collection during
    imports or from tearing the interpreter down at exit (together about 15 ms, more
    than a fifth of a resume). Every file is closed before ``main`` returns and the
    output streams are flushed here; ``drive``, which lives long, turns collection on.
    """
    import contextlib
    import gc
    import os

    gc.disable()
    try:
        try:
            code = main()
        finally:  # argparse's --help leaves by SystemExit: its text is flushed here too
            sys.stdout.flush()
    except BrokenPipeError:
        code = common.reader_closed()
    with contextlib.suppress(BrokenPipeError):  # no one reads the errors: the code says it
        sys.stderr.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    """Run one ``orchestrate`` command; returns its exit code."""
    if argv is None:
        argv = sys.argv[1:]
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    if getattr(args, "version", False):
        from importlib.metadata import version

        print(f"orchestrate (checkpoint-orchestrator) {version('checkpoint-orchestrator')}")
        return EXIT_OK
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    from ..storage.durable import live_briefly

    live_briefly()  # one command: no OpenSSL load for a short state's hashes (drive says no)
    if hasattr(args, "workdir"):  # nothing under it is reached through a link
        import os

        from ..storage.beneath import guard

        guard(args.workdir or os.getcwd())
    if getattr(args, "otlp_live", None):
        from .telemetry import send_to

        try:
            send_to(args.otlp_live)
        except UsageError as exc:
            return _error(exc, EXIT_USAGE)
    try:
        return _command(args)
    finally:
        if "orchestrator.cli.telemetry" in sys.modules:  # spans were sent: none left behind
            from .telemetry import flush

            flush()


def _command(args: argparse.Namespace) -> int:
    """Run the command ``args`` name; map its errors to exit codes."""
    try:
        code: int = args.run_command(args)
        return code
    except BrokenPipeError as exc:
        if common.stdout_reader_gone():  # the reader left (``| head -n1``): it has enough
            return common.reader_closed()
        return _error(_os_error_line(exc, args), EXIT_ERROR)
    except InstanceBusyError as exc:
        return _error(exc, EXIT_BUSY)
    except (
        NoInstanceError,
        InstanceExistsError,
        WorkflowNotFoundError,
        WorkflowDefinitionError,
        UsageError,
    ) as exc:
        return _error(exc, EXIT_USAGE)
    except StorageError as exc:
        return _error(f"{exc}, then {_again(args)}", EXIT_ERROR)
    except OrchestratorError as exc:
        return _error(exc, EXIT_ERROR)
    except OSError as exc:  # a file the command needed: say which, and what to do
        return _error(_os_error_line(exc, args), EXIT_ERROR)
    except Exception as exc:
        if type(exc).__module__.split(".")[0] != "psycopg":
            raise
        # The PostgreSQL store failed mid-command (the server went away, a statement was
        # cancelled): every change is a transaction, so the run is as its last one left it.
        reason = " ".join(str(exc).split()) or type(exc).__name__
        return _error(
            f"the PostgreSQL store failed: {reason}; the run is as its last completed "
            "checkpoint left it: run the command again once the server answers",
            EXIT_ERROR,
        )


def _error(exc: BaseException | str, code: int) -> int:
    print(f"orchestrate: error: {printable(str(exc), lines=True)}", file=sys.stderr)
    return code


# Commands that only read: an error in them changed nothing.
_READ_ONLY = {
    "status",
    "validate",
    "schema",
    "graph",
    "replay",
    "history",
    "events",
    "output",
    "check",
}


def _os_error_line(exc: OSError, args: argparse.Namespace) -> str:
    """An operating system error that no bridge named (a StorageError says all of this
    itself): the file, whether anything was lost, what to do."""
    from .._errors import describe_os_error, os_error_remedy

    if exc.filename is None:
        where = "a file it needed (the system did not say which)"
    elif exc.filename2 is None:
        where = str(exc.filename)
    else:
        where = f"{exc.filename} -> {exc.filename2}"
    if args.command in _READ_ONLY:
        kept = "nothing was changed"
    elif args.command == "board":
        kept = "the board is intact (its writes are atomic or whole appended lines)"
    else:
        kept = "the instance is intact (every write is atomic, so nothing was half-written)"
    reason = describe_os_error(exc.errno, exc.strerror) if exc.strerror else str(exc)
    return f"{where}: {reason}; {kept}: {os_error_remedy(exc.errno)}, then {_again(args)}"


def _again(args: argparse.Namespace) -> str:
    """The command that goes on once the cause of an operating system error is fixed."""
    command = args.command
    if command == "run":
        try:  # a run that saved its first checkpoint is an instance: it resumes
            common.state_path(common.workdir(args), None)
        except (OrchestratorError, OSError):
            return "'orchestrate run' again (no instance was made)"
        command = "resume"
    if command == "resume":
        return "'orchestrate resume' goes on from the last checkpoint"
    if command == "board":
        return f"'orchestrate board {getattr(args, 'board_command', '')}' again"
    return f"'orchestrate {command}' again"


# -- the parser ---------------------------------------------------------------------------

# Every command, in the order of the reference, and the module that declares and runs it
# (its ``COMMANDS`` table: help, arguments, handler).
COMMANDS = {
    "init": "scaffold",
    "run": "run",
    "resume": "run",
    "retry": "run",
    "rewind": "run",
    "fork": "run",
    "replay": "run",
    "status": "inspect",
    "respond": "answer",
    "drive": "run",
    "validate": "validate",
    "schema": "validate",
    "graph": "graph",
    "cancel": "run",
    "board": "board",
    "check": "check",
    "history": "inspect",
    "events": "events",
    "output": "inspect",
    "trust": "trust",
    "eval": "evals",
    "pending": "answer",
    "signal": "signal_command",
    "worker": "worker",
    "db": "store",
    "export": "store",
    "prune": "retention",
    "ui": "ui.serve",
    "mcp": "mcp.command",
}


def build_parser(first_word: str | None = None) -> argparse.ArgumentParser:
    """The argument parser; when ``first_word`` names a command, only that one is built
    (building them all costs milliseconds on every start)."""
    parser = argparse.ArgumentParser(
        prog="orchestrate",
        formatter_class=Formatter,
        description="Run agent workflows that pause with exit 42 and resume where they stopped.",
        epilog="exit codes: 0 done, 1 error (state kept), 2 usage, 42 paused for an agent, "
        "75 another process holds the instance",
    )
    parser.add_argument(
        "--version", action="store_true", help="print the version of checkpoint-orchestrator"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    only = first_word if first_word in COMMANDS else None
    for name in COMMANDS:
        if only is not None and name != only:
            continue
        command = declared(name)
        sub = commands.add_parser(
            name, help=command.help, description=command.help, formatter_class=Formatter
        )
        sub.set_defaults(run_command=command.run)
        command.declare(sub)
    return parser


def declared(name: str) -> Command:
    """Command ``name`` as its module declares it."""
    from importlib import import_module

    table: dict[str, Command] = import_module(f"{__package__}.{COMMANDS[name]}").COMMANDS
    return table[name]


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main(sys.argv[1:]))
