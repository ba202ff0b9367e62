"""``orchestrate check KIND``: judge one task board document, as the board would, or a
run's evidence.

It reads the document on standard input (``check ledger --board`` folds a board's own
ledger instead; ``check evidence --run DIR`` reads the run's directory) and prints one
line of compact JSON, ``{"allow": .., "code": .., "reason": .., "details": ..}``, exiting
0 only when allowed: a gate for hosts and subagents in any language.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .._errors import BoardError, ContractError, UsageError
from .._text import plural
from .board import add_board_arguments, board_of, ledger_lines
from .common import Command
from .run_store import close_board_stores

EXIT_OK, EXIT_REFUSED = 0, 1
# The validators' short names, and the document kind each one reads.
CHECK_KINDS = {
    "task": "task",
    "packet": "assignment-packet",
    "result": "subagent-result",
    "locks": "locks",
    "ledger": "ledger",
    "submit": "submit",
    "verdict": "verdict",
    "task-input": "task-input",
    "worklog": "worklog-entry",
    "handoff": "handoff-bundle",
    "output": "orchestrator-output",
    "delta": "ledger-delta",
    "evidence": "step evidence",
}


def _declare_check(check: argparse.ArgumentParser) -> None:
    check.add_argument(
        "kind",
        choices=list(CHECK_KINDS),
        help="which document is on stdin (evidence: a run's, named by --run)",
    )
    check.add_argument(
        "--run",
        type=Path,
        default=None,
        metavar="DIR",
        help="evidence: the run's directory (.orchestrator/runs/<run_id>, or a copy of one)",
    )
    add_board_arguments(
        check,
        board_help="ledger: fold this board's ledger instead of stdin (a directory, or with "
        "--store the board's id)",
    )
    check.add_argument(
        "--strict", action="store_true", help="refuse unknown fields without the x_ prefix"
    )
    check.add_argument(
        "--packet",
        type=Path,
        default=None,
        help="result/submit: also judge it against this assignment packet (scope, criteria)",
    )


def _cmd_check(args: argparse.Namespace) -> int:
    """Judge one document from standard input; one line of JSON; exit 0 only if allowed."""
    try:
        verdict = _check(args)
    except BoardError as exc:
        verdict = {"allow": False, "code": exc.code, "reason": exc.reason, "details": exc.details}
    except OSError as exc:
        verdict = {
            "allow": False,
            "code": "MISSING_REQUIRED_INPUT",
            "reason": f"{exc.filename}: {exc.strerror}",
        }
    except ContractError as exc:
        from ..formats.board_rules import error_code_for

        verdict = {
            "allow": False,
            "code": error_code_for(exc).value,
            "reason": str(exc),
            "details": {"json_path": exc.json_path, "rule": exc.rule},
        }
    if not verdict.get("details"):
        verdict.pop("details", None)
    print(json.dumps(verdict, separators=(",", ":")))
    return EXIT_OK if verdict["allow"] else EXIT_REFUSED


def _check(args: argparse.Namespace) -> dict[str, Any]:
    from ..formats.strict_json import loads_strict

    kind = args.kind
    if (kind == "evidence") != (args.run is not None):
        raise UsageError(
            "'check evidence' needs --run DIR (a run's directory), and --run goes only with "
            "'check evidence'"
        )
    if kind == "evidence":
        from ..evidence.verify import verify_run_evidence

        found = verify_run_evidence(args.run)
        return {
            "allow": True,
            "code": "OK",
            "reason": f"{args.run}: the run's evidence is whole "
            f"({plural(found['events'], 'event')}, {plural(found['results'], 'results file')}, "
            f"{plural(found['journals'], 'journal')} checked)",
            "details": found,
        }
    if getattr(args, "board", None) and kind != "ledger":
        raise UsageError(
            f"--board names the board whose ledger 'check ledger' folds; 'check "
            f"{kind}' reads its document on stdin"
        )
    if kind == "ledger" and getattr(args, "board", None):
        try:
            board = board_of(args)
            whole = b"".join(line + b"\n" for line in ledger_lines(board))
            return _check_ledger(whole, source=board.ledger.location)
        finally:
            close_board_stores()
    raw = sys.stdin.buffer.read()
    source = "<stdin>"
    if kind == "ledger":
        return _check_ledger(raw)
    data = loads_strict(raw, source=source)
    if kind == "locks":
        return _check_locks(data, strict=args.strict)
    from ..formats.board_rules import parse_board_document, parse_task, refuse_untrusted_secret

    if kind == "task":
        document = parse_task(data, source=source, strict=args.strict)
    else:
        document = parse_board_document(CHECK_KINDS[kind], data, source=source, strict=args.strict)
    if args.packet is not None and kind in ("result", "submit"):
        return _check_against_packet(raw, args.packet)
    # a secret in an untrusted field, refused as the board refuses it
    refuse_untrusted_secret(document, source=source)
    return {"allow": True, "code": "OK", "reason": f"a valid {kind} document"}


def _check_against_packet(raw: bytes, packet_path: Path) -> dict[str, Any]:
    from ..board.gateway import evaluate
    from ..formats.board_rules import parse_packet
    from ..formats.times import SystemClock, format_time
    from ..storage.files import read_json_file

    packet = parse_packet(read_json_file(packet_path), source=str(packet_path))
    now = format_time(SystemClock().now())
    judgement = evaluate(
        raw,
        task=packet.task,
        run_id=packet.run_id,
        source="<stdin>",
        submitted_at=now,
        evaluated_at=now,
        result_link="<stdin>",
        workspace=Path.cwd(),
    )
    if judgement.problem is None:
        return {"allow": True, "code": "OK", "reason": "the result passes the gateway"}
    from ..formats.convert import unstructure

    return {
        "allow": False,
        "code": judgement.problem.code.value,
        "reason": judgement.problem.message,
        "details": {"verdict": unstructure(judgement.verdict)},
    }


def _check_locks(data: Any, *, strict: bool) -> dict[str, Any]:
    from ..formats.board_rules import parse_lock_table
    from ..formats.scope import ScopeError, check_lock_table

    locks = parse_lock_table(data, source="<stdin>", strict=strict)
    try:
        conflicts = check_lock_table((lock.task_id, lock.resource, lock.active) for lock in locks)
    except ScopeError as exc:
        return {"allow": False, "code": "SCHEMA_INVALID", "reason": str(exc)}
    if conflicts:
        return {
            "allow": False,
            "code": "LOCK_CONFLICT",
            "reason": "active locks of different tasks conflict "
            f"({plural(len(conflicts), 'pair')})",
            "details": {"conflicts": [list(map(str, c)) for c in conflicts]},
        }
    return {"allow": True, "code": "OK", "reason": f"{plural(len(locks), 'lock')}, no conflict"}


def _check_ledger(raw: bytes, *, source: str = "<stdin>") -> dict[str, Any]:
    """Fold the deltas (NDJSON) as the board reads its ledger: every rule of D1-D5 and
    the lock table. A torn last line after whole lines is left out, as the board leaves
    it, and named in ``details.torn_tail``; input without one whole delta is refused."""
    from ..board.ledger import LedgerState, fold_ledger

    state = LedgerState()
    fold = fold_ledger(state, raw, source=source, first_line=1)
    tail = raw[fold.consumed :]
    torn = {"line": raw.count(b"\n", 0, fold.consumed) + 1, "bytes": len(tail)}
    if not fold.applied and not fold.duplicates and fold.snapshot is None:
        return _no_delta(raw, source, torn if tail.strip() else None)
    details: dict[str, Any] = {"torn_tail": torn} if tail.strip() else {}
    left_out = f" (line {torn['line']}, a torn last line of {plural(len(tail), 'byte')}, left out)"
    compacted = ""
    if fold.snapshot is not None:  # a compacted ledger: its first line folds the earlier ones
        head = fold.snapshot
        compacted = f" after a snapshot of {plural(head.deltas, 'delta')} (to x_seq {head.seq})"
        details["snapshot"] = {
            "seq": head.seq,
            "deltas": head.deltas,
            "deltas_sha256": head.deltas_sha256,
        }
    return {
        "allow": True,
        "code": "OK",
        "reason": f"{plural(fold.applied, 'delta')} apply cleanly{compacted} "
        f"({plural(fold.duplicates, 'duplicate')} ignored){left_out if tail.strip() else ''}; "
        f"{plural(len(state.rows), 'task')}, {plural(len(state.active_locks()), 'lock')} held",
        "details": details,
    }


def _no_delta(raw: bytes, source: str, torn: dict[str, int] | None) -> dict[str, Any]:
    """The refusal of a ledger that holds no whole delta: there is nothing to allow."""
    if torn is not None:
        reason = (
            f"{source} line {torn['line']}: {plural(torn['bytes'], 'byte')} without a newline "
            "and no whole delta before them; a ledger holds one delta per line, each line "
            "ending in a newline"
        )
        details: dict[str, Any] = {"line": torn["line"]}
    else:
        what = "is empty" if not raw else "holds only blank lines"
        reason = f"{source} {what}: a ledger holds one delta per line; give the whole ledger"
        details = {}
    return {
        "allow": False,
        "code": "MISSING_REQUIRED_INPUT",
        "reason": reason,
        "details": details,
    }


COMMANDS = {
    "check": Command(
        "Validate a board document on stdin, or a run's evidence (--run DIR): one line of "
        "JSON; exit 0 only if allowed.",
        _declare_check,
        _cmd_check,
    ),
}
