"""``orchestrate signal``: push data into a running workflow, through the ``RunStore`` port.

The signal is kept in the run's inbox, durably and in order, for the run's
``ctx.wait_for_signal`` or ``ctx.signals``; a run that waits for it with an
``output_type`` refuses at the door a payload that does not fit (exit 2, naming the
field), and keeps nothing then."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from . import common
from .common import Command


def _declare_signal(signal: argparse.ArgumentParser) -> None:
    signal.add_argument("name", help="the signal's name, as the workflow waits for it")
    common.add_workdir(signal)
    common.add_instance(signal)
    common.add_store(signal)
    source = signal.add_mutually_exclusive_group()
    source.add_argument(
        "--data", default=None, metavar="JSON", help="the payload, a JSON value (default: null)"
    )
    source.add_argument(
        "--file", type=Path, default=None, help="read the payload, a JSON value, from a file"
    )
    signal.add_argument(
        "--id",
        dest="signal_id",
        default=None,
        help="the signal's id (default: a new one); sending again with the same id keeps "
        "it once, so a send that may not have finished can be repeated",
    )
    signal.add_argument(
        "--json",
        action="store_true",
        help="on a refusal, print it as JSON on stdout: the reason, the field, what was "
        "expected and what came, and the payload's schema (exit code 2 as without it)",
    )


def _cmd_signal(args: argparse.Namespace) -> int:
    import json
    from contextlib import closing

    from .._errors import AnswerRefusedError
    from .._ports import RunInput, SendSignalInput
    from .run_commands import refusal_document
    from .run_store import open_run_store

    payload = _payload(args)
    with closing(open_run_store(args)) as store:
        run = RunInput(run_id=args.run, workflow=args.workflow, signed_only=True, live_only=True)
        try:
            signal_id = store.send_signal(
                SendSignalInput(run=run, name=args.name, payload=payload, signal_id=args.signal_id)
            )
        except AnswerRefusedError as refused:
            if not args.json:
                raise
            print(json.dumps(refusal_document(refused), indent=2, ensure_ascii=False))
            return 2
    print(f"signal {args.name} kept ({signal_id})")
    return 0


def _payload(args: argparse.Namespace) -> Any:
    import json

    from .._errors import UsageError

    if args.file is not None:
        try:
            text = args.file.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--file {args.file}: cannot read it as UTF-8 text ({exc})") from None
        where = f"--file {args.file}"
    elif args.data is not None:
        text, where = args.data, "--data"
    else:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"{where}: the payload is not JSON ({exc.msg} at character {exc.pos}); a text "
            "is sent as a JSON string: --data '\"approved\"'"
        ) from None


COMMANDS = {
    "signal": Command(
        "Send a signal to a running workflow: kept durably and in order in the run's inbox "
        "for its ctx.wait_for_signal(NAME) or ctx.signals(NAME), each taken once. A run "
        "that waits for NAME with an output_type refuses a payload that does not fit (exit "
        "2, naming the field) and keeps nothing; a worker of a store resumes the run.",
        _declare_signal,
        _cmd_signal,
    ),
}
