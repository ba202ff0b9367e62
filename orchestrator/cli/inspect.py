"""The commands that look at a run and change nothing: ``status``, ``history`` and
``output``; on a store's run they ask :mod:`.store_runs`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .._errors import NoInstanceError, UsageError
from .._text import printable
from . import common
from .common import EXIT_OK, Command


def _declare_status(status: argparse.ArgumentParser) -> None:
    common.add_workdir(status)
    common.add_instance(status)
    status.add_argument("--json", action="store_true", help="print machine-readable JSON")
    common.add_store(status)


def _declare_history(history: argparse.ArgumentParser) -> None:
    common.add_workdir(history)
    history.add_argument(
        "--run",
        default=None,
        help="a finished run's id (default: the live instance, else the latest run)",
    )
    common.add_store(history, run=False)


def _declare_output(output: argparse.ArgumentParser) -> None:
    common.add_workdir(output)
    output.add_argument(
        "phase",
        nargs="?",
        default=None,
        metavar="PHASE",
        help="the phase whose output to print (default: every phase's, as one JSON object)",
    )
    output.add_argument(
        "--run",
        default=None,
        help="a run's id (default: the live instance, else the latest finished run)",
    )
    common.add_store(output, run=False)
    output.add_argument(
        "--json",
        action="store_true",
        help="print JSON even for a phase whose output is text (default: text as it is)",
    )


def _cmd_status(args: argparse.Namespace) -> int:
    import json

    from .instance import describe_instance, format_ended, format_status

    dsn = common.on_store(args)
    if dsn is not None:
        from .store_runs import cmd_status

        return cmd_status(args, dsn)
    workdir = common.workdir(args)
    try:
        path = common.state_path(workdir, args.workflow)
    except NoInstanceError as none_live:
        if args.workflow:
            raise
        from .instance import describe_ended_run

        try:
            summary = describe_ended_run(workdir)  # the last run, when none is live
        except NoInstanceError:
            raise none_live from None
        print(json.dumps(summary, indent=2) if args.json else format_ended(summary))
        return EXIT_OK
    summary = describe_instance(path)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(format_status(summary))
    return EXIT_OK


def _cmd_history(args: argparse.Namespace) -> int:
    from ..evidence.history import load_run, timeline

    state, source = _load_run(args, load_run)
    print(printable("\n".join(timeline(state)), lines=True))
    print(f"(from {source})", file=sys.stderr)
    return EXIT_OK


def _load_run(args: argparse.Namespace, load_from_files: Any) -> tuple[Any, str]:
    """The run ``history`` or ``output`` shows: from the store, or the work directory."""
    dsn = common.on_store(args)
    if dsn is None:
        state, source = load_from_files(common.workdir(args), args.run)
        return state, str(source)
    from .store_runs import load_run

    with common.open_store(dsn) as store:
        return load_run(store, common.required_run(args))


def _cmd_output(args: argparse.Namespace) -> int:
    import json

    from ..evidence.history import load_run
    from ..storage.runs import ENGINE_KEY

    state, source = _load_run(args, load_run)
    outputs = {k: v for k, v in state.phase_data.items() if k != ENGINE_KEY}
    if args.phase is None:
        print(json.dumps(outputs, indent=2, ensure_ascii=False))
    elif args.phase not in outputs:
        done = ", ".join(outputs) or "none yet"
        raise UsageError(f"{source}: phase {args.phase!r} has no output (phases with one: {done})")
    elif isinstance(outputs[args.phase], str) and not args.json:
        print(outputs[args.phase])
    else:
        print(json.dumps(outputs[args.phase], indent=2, ensure_ascii=False))
    print(f"(from {source})", file=sys.stderr)
    return EXIT_OK


COMMANDS = {
    "status": Command(
        "Show the instance: phase, pending requests, history.", _declare_status, _cmd_status
    ),
    "history": Command(
        "Show a run's timeline: phases, asks, answers, retries, with times.",
        _declare_history,
        _cmd_history,
    ),
    "output": Command(
        "Print a run's outputs: every phase's, or one phase's.", _declare_output, _cmd_output
    ),
}
