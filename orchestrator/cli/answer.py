"""The commands of a host that answers requests by hand: ``respond`` files an answer for a
pending request, ``pending`` lists the requests waiting (of the work directory's instance,
or of every run in a store)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .._errors import UsageError
from . import common
from .common import EXIT_OK, Command


def _declare_respond(respond: argparse.ArgumentParser) -> None:
    common.add_workdir(respond)
    common.add_instance(respond)
    respond.add_argument(
        "--request-id",
        "--request",
        dest="request_id",
        default=None,
        help="the request answered; needed when several are pending",
    )
    common.add_store(respond)
    source = respond.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", default=None, help="the answer text")
    source.add_argument("--file", type=Path, default=None, help="read the answer text from a file")
    source.add_argument(
        "--stdin", action="store_true", help="read the answer text from standard input"
    )
    source.add_argument(
        "--document",
        default=None,
        metavar="FILE",
        help="a whole response document, the JSON a host writes to .agent-response.json "
        "('-': standard input); checked as resume checks it, then filed for its request",
    )
    respond.add_argument(
        "--status",
        default="success",
        choices=["success", "error", "timeout", "cancelled"],
        help="how the agent's work ended (default: success; the others need --error-type "
        "or carry the text as the error message)",
    )
    respond.add_argument(
        "--error-type",
        default=None,
        help="with --status error: what went wrong",
        choices=[
            "AGENT_NOT_FOUND",
            "INVOCATION_FAILED",
            "TIMEOUT",
            "PARSE_ERROR",
            "VALIDATION_ERROR",
            "UNKNOWN",
        ],
    )
    respond.add_argument("--model", default=None, help="the model that answered (metadata)")
    respond.add_argument(
        "--tokens-used", type=int, default=None, help="tokens the answer took (metadata)"
    )
    respond.add_argument(
        "--confidence",
        type=float,
        default=None,
        help="the agent's confidence, 0 to 1 (metadata; checked by an ask's min_confidence)",
    )


def _declare_pending(pending: argparse.ArgumentParser) -> None:
    common.add_workdir(pending)
    common.add_store(pending)
    pending.add_argument(
        "--json",
        action="store_true",
        help="print a JSON array of {run_id, request} (the request document as a host reads it)",
    )


def _cmd_respond(args: argparse.Namespace) -> int:
    from .instance import read_response_document

    document = read_response_document(args.document) if args.document else None
    text = "" if document is not None else _answer_text(args)
    dsn = common.on_store(args)
    if dsn is not None:
        from .store_runs import cmd_respond

        return cmd_respond(args, dsn, text, document)
    from .instance import answer_options, write_response

    workdir = common.workdir(args)
    target = write_response(
        common.state_path(workdir, args.workflow),
        request_id=args.request_id,
        text=text,
        document=document,
        **answer_options(args),
    )
    print(target)
    return EXIT_OK


def _answer_text(args: argparse.Namespace) -> str:
    """The answer ``respond`` was given: --text, --file or standard input, as UTF-8."""
    if args.stdin:
        try:
            text = sys.stdin.buffer.read().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UsageError(f"standard input is not UTF-8 text ({exc})") from None
    elif args.file is not None:
        try:
            text = args.file.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--file {args.file}: cannot read it as UTF-8 text ({exc})") from None
    else:
        text = args.text
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:  # bytes the locale could not decode
            raise UsageError(
                f"--text is not UTF-8 text (position {exc.start}); pass UTF-8, or the answer "
                "in a file with --file"
            ) from None
    return str(text)


def _cmd_pending(args: argparse.Namespace) -> int:
    dsn = common.on_store(args)
    if dsn is not None:
        from .store_runs import cmd_pending

        return cmd_pending(args, dsn)
    from .instance import pending_of
    from .store_runs import print_pending

    print_pending(pending_of(common.workdir(args)), as_json=args.json)
    return EXIT_OK


COMMANDS = {
    "respond": Command(
        "Write a valid response for a pending request.", _declare_respond, _cmd_respond
    ),
    "pending": Command(
        "List the requests waiting for a host: of the work directory's instance, or of "
        "every run in a store (--store), each with its run's id.",
        _declare_pending,
        _cmd_pending,
    ),
}
