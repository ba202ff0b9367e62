"""The commands that look at a run and change nothing: ``status``, ``history`` and
``output``, on whichever store the command names, through the ``RunStore`` port
(:mod:`.run_commands`)."""

from __future__ import annotations

import argparse

from . import common
from .common import Command


def _declare_status(status: argparse.ArgumentParser) -> None:
    common.add_workdir(status)
    common.add_instance(status)
    status.add_argument("--json", action="store_true", help="print machine-readable JSON")
    common.add_prices(status)
    common.add_store(status)


def _declare_history(history: argparse.ArgumentParser) -> None:
    common.add_workdir(history)
    history.add_argument(
        "--run",
        default=None,
        help="a finished run's id (default: the live instance, else the latest run)",
    )
    common.add_prices(history)
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
    common.add_prices(output)
    output.add_argument(
        "--json",
        action="store_true",
        help="print JSON even for a phase whose output is text (default: text as it is); "
        "without PHASE, the run's facts go beside the outputs under 'x_run' (status, "
        "failure and where it was raised, tokens and cost)",
    )


def _cmd_status(args: argparse.Namespace) -> int:
    from .run_commands import cmd_status

    return cmd_status(args)


def _cmd_history(args: argparse.Namespace) -> int:
    from .run_commands import cmd_history

    return cmd_history(args)


def _cmd_output(args: argparse.Namespace) -> int:
    from .run_commands import cmd_output

    return cmd_output(args)


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
