"""The commands of a host that answers requests by hand: ``respond`` files an answer for a
pending request, ``pending`` lists the requests waiting (of the work directory's instance,
or of every run in a store), both through the ``RunStore`` port (:mod:`.run_commands`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from . import common
from .common import Command


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
        "--json",
        action="store_true",
        help="on a refusal, print it as JSON on stdout: the reason, the field, what was "
        "expected and what came, and the answer's schema (exit code 2 as without it)",
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
    from .run_commands import cmd_respond

    return cmd_respond(args)


def _cmd_pending(args: argparse.Namespace) -> int:
    from .run_commands import cmd_pending

    return cmd_pending(args)


COMMANDS = {
    "respond": Command(
        "Answer a pending request, through the answer gate: the request must be pending "
        "and unanswered (the first answer wins), and the answer of the shape it asks for; "
        "a refusal exits 2 in one line naming the field, and writes nothing.",
        _declare_respond,
        _cmd_respond,
    ),
    "pending": Command(
        "List the requests waiting for a host: of the work directory's instance, or of "
        "every run in a store (--store), each with its run's id.",
        _declare_pending,
        _cmd_pending,
    ),
}
