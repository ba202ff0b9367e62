"""``orchestrate board ...`` and ``orchestrate check ...``: the task board for hosts and
subagents in any language.

``board`` commands act on a board directory (``--board``, default ``.board`` in the work
directory), or with ``--store DSN`` (or ``$ORCHESTRATOR_STORE``) on the board of that
PostgreSQL store that ``--board ID`` names (a dispatch board's id is its run's id). When a
workflow waits for a task's answer (an instance in the work directory, or the run of a
store's board), ``board submit`` and ``board watchdog`` answer its pending request (the
engine judges the result on resume); on a board no workflow drives, they record the
outcome directly.

``check KIND`` reads one document on standard input and prints one line of compact JSON,
``{"allow": .., "code": .., "reason": .., "details": ..}``, exiting 0 only when allowed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import BoardError, ContractError, UsageError
from .._text import plural
from .board_handoff import time_out_stale_tasks
from .common import STORE_ENV, Command, Formatter, no_subcommand
from .run_store import close_board_stores, open_board_store

if TYPE_CHECKING:
    from ..board.board import Board

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
}


# -- parsers ---------------------------------------------------------------------------


def add_board_commands(board: Any, formatter: Any) -> None:
    """The ``board`` subcommands, on the ``board`` command's parser."""
    subs = board.add_subparsers(dest="board_command", metavar="SUBCOMMAND", required=True)

    def sub(name: str, handler: Callable[[argparse.Namespace], int], text: str) -> Any:
        parser = subs.add_parser(name, help=text, description=text, formatter_class=formatter)
        parser.set_defaults(run_command=_with_codes(handler))
        parser.add_argument("--workdir", type=Path, default=None, help="default: current directory")
        _add_board_arguments(parser)
        return parser

    init = sub("init", _cmd_init, "Make a board (for tasks no workflow dispatches).")
    init.add_argument(
        "--run-id",
        default=None,
        help="the run id every packet, result and worklog entry of the board carries: a "
        "UUID, as their format requires (default: the board's own if it is there, else a "
        "fresh one)",
    )
    init.add_argument("--objective", required=True, help="the run's objective, given to every task")
    init.add_argument("--constraint", action="append", default=[], help="repeatable")
    init.add_argument("--workspace", type=Path, default=None, help="where results' files live")

    create = sub(
        "create",
        _cmd_create,
        "Create tasks: a JSON list of task objects (as in an assignment packet).",
    )
    _add_input(create)

    status = sub("status", _cmd_status, "Show every task: status, owner, attempts, locks.")
    status.add_argument("--json", action="store_true", help="print machine-readable JSON")

    ledger = sub("ledger", _cmd_ledger, "Print the ledger's deltas (NDJSON).")
    ledger.add_argument("--task", default=None, help="only this task's deltas")
    ledger.add_argument("--table", action="store_true", help="one readable line per delta")

    locks = sub("locks", _cmd_locks, "Print the lock table (JSON).")
    locks.add_argument("--history", action="store_true", help="also released locks")

    assign = sub("assign", _cmd_assign, "Start a task: write its packet, take its locks.")
    assign.add_argument("--task", required=True, help="the task to start (T-<n>)")
    assign.add_argument("--owner", required=True, help="who works on it (a subagent's name)")

    packet = sub("packet", _cmd_packet, "Print the assignment packet of a task's attempt.")
    packet.add_argument("--task", required=True, help="the task whose packet to print")
    packet.add_argument(
        "--attempt", type=int, default=None, help="the attempt (default: the current one)"
    )

    beat = sub("heartbeat", _cmd_heartbeat, "Record that a task's subagent is alive.")
    beat.add_argument("--task", required=True, help="the task whose subagent is alive")
    beat.add_argument(
        "--attempt", type=int, default=None, help="the attempt (default: the current one)"
    )

    worklog = sub(
        "worklog",
        _cmd_worklog,
        "Append a worklog entry: from flags, or a whole JSON entry with --json-stdin.",
    )
    worklog.add_argument("--task", required=True, help="the task the entry is about")
    worklog.add_argument("--attempt", type=int, default=None, help="ignored; for symmetry")
    worklog.add_argument("--actor", default="subagent", help="who acted (default: subagent)")
    worklog.add_argument("--action", default=None, help="what was done, in a few words")
    worklog.add_argument("--decision", default="", help="what was decided, and why")
    worklog.add_argument("--result", default="", help="what came of it")
    worklog.add_argument("--next-step", default="", help="what comes next")
    worklog.add_argument(
        "--file",
        dest="touched",
        action="append",
        default=[],
        help="a file touched (repeatable)",
    )
    worklog.add_argument("--code", default=None, help="an error code, when something failed")
    worklog.add_argument("--evidence", default=None, help="where to see it (a path, a command)")
    worklog.add_argument("--json-stdin", action="store_true", help="read the entry as JSON")

    submit = sub("submit", _cmd_submit, "Hand in a task's result (subagent result or submit.json).")
    submit.add_argument("--task", required=True, help="the task the result answers")
    submit.add_argument(
        "--attempt", type=int, default=None, help="the attempt (default: the current one)"
    )
    _add_input(submit)

    watchdog = sub("watchdog", _cmd_watchdog, "Time out tasks whose heartbeat is stale.")
    watchdog.add_argument("--now", default=None, help="RFC 3339 time (default: now)")
    watchdog.add_argument(
        "--wait",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long to wait while another maintenance pass runs (default 30); then exit 75",
    )

    set_status = sub("set-status", _cmd_set_status, "Block, fail, cancel or requeue a task.")
    set_status.add_argument("--task", required=True, help="the task to move")
    set_status.add_argument(
        "--status",
        required=True,
        choices=["todo", "blocked", "failed", "canceled"],
        help="the task's new status",
    )
    set_status.add_argument("--reason", required=True, help="why, in one line")
    set_status.add_argument(
        "--code", default=None, help="the error code of a block or a failure (TASK_TIMEOUT, ...)"
    )
    set_status.add_argument(
        "--base-version",
        type=int,
        default=None,
        help="the task's version you read (refused if it changed since: CONCURRENCY_CONFLICT)",
    )

    handoff = sub("handoff", _cmd_handoff, "Print the fresh-context handoff bundle.")
    handoff.add_argument("--markdown", action="store_true", help="the Markdown page instead")
    handoff.add_argument(
        "--write", action="store_true", help="also write handoff.json and handoff.md"
    )

    adopt = sub("adopt", _cmd_adopt, "Make a new board from a handoff bundle and continue it.")
    _add_input(adopt)


def _with_codes(
    handler: Callable[[argparse.Namespace], int],
) -> Callable[[argparse.Namespace], int]:
    """``handler``, with a document it refuses reported under the code ``orchestrate
    check`` gives the same document."""

    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except ContractError as exc:
            from ..formats.board_rules import error_code_for

            raise BoardError(str(exc), code=error_code_for(exc).value) from None
        finally:
            close_board_stores()

    return run


def _add_board_arguments(parser: Any, *, board_help: str | None = None) -> None:
    parser.add_argument(
        "--board",
        default=None,
        metavar="BOARD",
        help=board_help
        or "the board: a directory (default: WORKDIR/.board), or with --store the board's "
        "id (a dispatch board's id is its run's id)",
    )
    parser.add_argument(
        "--store",
        default=None,
        metavar="DSN",
        help=f"a PostgreSQL store, postgresql://USER@HOST/DATABASE, whose board --board "
        f"names (default: ${STORE_ENV}; without either: a board directory)",
    )


def add_check_command(check: Any) -> None:
    check.add_argument("kind", choices=list(CHECK_KINDS), help="which document is on stdin")
    _add_board_arguments(
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


def _add_input(parser: Any) -> None:
    parser.add_argument("--file", type=Path, default=None, help="default: standard input")


# -- board commands --------------------------------------------------------------------


def _store_dsn(args: argparse.Namespace) -> str | None:
    """The PostgreSQL store named by ``--store`` or ``$ORCHESTRATOR_STORE``; ``None``: files
    (``--workdir`` names where the board's workflow runs, not a store, here)."""
    from .run_store import store_dsn

    return store_dsn(args, starts_run=True, workdir_beats_env=False)


def _board(args: argparse.Namespace) -> Board:
    from ..board.board import BOARD_DIR, Board

    dsn = _store_dsn(args)
    if dsn is not None:
        return Board(store=open_board_store(dsn, args.board))
    workdir = (getattr(args, "workdir", None) or Path.cwd()).resolve()
    directory = Path(args.board).resolve() if args.board else workdir / BOARD_DIR
    return Board(directory)


def _read_input(args: argparse.Namespace) -> bytes:
    if getattr(args, "file", None) is not None:
        try:
            return bytes(args.file.read_bytes())
        except OSError as exc:
            raise UsageError(f"--file {args.file}: {exc.strerror}") from None
    return sys.stdin.buffer.read()


def _json_input(args: argparse.Namespace, source: str) -> Any:
    from ..formats.strict_json import loads_strict

    name = str(args.file) if getattr(args, "file", None) else source
    return loads_strict(_read_input(args), source=name)


def _error_code(text: str | None) -> Any:
    """``--code``: one of the task board's error codes, or a usage error naming them."""
    if text is None:
        return None
    from ..formats.board import ErrorCode

    try:
        return ErrorCode(text)
    except ValueError:
        names = ", ".join(code.value for code in ErrorCode)
        raise UsageError(f"--code {text!r} is not an error code; use one of {names}") from None


def _moment(text: str) -> Any:
    """``--now``: an RFC 3339 time with its offset (2025-11-18T10:30:00Z)."""
    from ..formats.convert import check_date_time
    from ..formats.times import parse_time

    try:
        check_date_time(text, source="--now", json_path="$")
    except ContractError:
        raise UsageError(
            f"--now {text!r} is not an RFC 3339 time with an offset, like 2025-11-18T10:30:00Z"
        ) from None
    return parse_time(text)


def _print(data: Any) -> None:
    print(json.dumps(data, indent=2))


def _cmd_init(args: argparse.Namespace) -> int:
    from ..board.board import Board

    board = _board(args)
    Board.create(
        run_id=args.run_id,
        objective=args.objective,
        constraints=args.constraint,
        workspace=args.workspace.resolve() if args.workspace else None,
        store=board.store,
    )
    print(board.location)
    return EXIT_OK


def _cmd_create(args: argparse.Namespace) -> int:
    from ..formats.board_rules import parse_task
    from ..formats.convert import unstructure

    data = _json_input(args, "<stdin>")
    items = data.get("tasks") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise UsageError('give a JSON list of task objects (or {"tasks": [...]})')
    tasks = [parse_task(item, source=f"<tasks>[{i}]") for i, item in enumerate(items)]
    applied = _board(args).create_tasks(tasks)
    for delta in applied:
        print(json.dumps(unstructure(delta), separators=(",", ":")))
    print(f"orchestrate: {plural(len(applied), 'task')} created", file=sys.stderr)
    return EXIT_OK


def _cmd_status(args: argparse.Namespace) -> int:
    board = _board(args)
    state = board.state()
    rows = sorted(state.rows.values(), key=lambda r: r.created)
    if args.json:
        _print(
            {
                "run_id": board.run_id,
                "seq": state.seq,
                "tasks": [
                    {
                        "task_id": r.task_id,
                        "title": r.task.title,
                        "status": r.status.value,
                        "owner": r.owner,
                        "attempts": r.attempts,
                        "code": r.code.value if r.code else None,
                        "reason": r.reason,
                        "version": r.version,
                        "locks": r.locks,
                    }
                    for r in rows
                ],
            }
        )
        return EXIT_OK
    print(f"board {board.location}  run {board.run_id}  ledger head {state.seq}")
    for r in rows:
        code = f" {r.code.value}" if r.code else ""
        print(
            f"{r.task_id:<8} {r.status.value:<12} attempt {r.attempts}  "
            f"{r.owner or '-':<16} {', '.join(r.locks)}{code}  {r.task.title}"
        )
    return EXIT_OK


def _cmd_ledger(args: argparse.Namespace) -> int:
    for line in _ledger_lines(_board(args)):
        delta = json.loads(line)
        if args.task is not None and delta.get("task_id") != args.task:
            continue
        if args.table:
            code = delta.get("x_code") or ""
            print(
                f"{delta.get('x_seq', ''):>4} {delta['task_id']:<6} {delta['status']:<12} "
                f"{code:<22} {delta['reason'][:80]}"
            )
        else:
            sys.stdout.write(line.decode() + "\n")
    return EXIT_OK


def _ledger_lines(board: Board) -> list[bytes]:
    """The ledger's whole, non-blank lines without their newline, as stored."""
    from ..board.files import FileBoardStore

    if isinstance(board.store, FileBoardStore):
        path = board.ledger.path
        if not path.exists():
            return []
        from ..storage.ndjson import iter_lines

        return [line for _, line in iter_lines(path)]
    from .._ports import ReadLedgerInput

    data = board.store.read_ledger(ReadLedgerInput(after=0)).data
    return [line for line in data.split(b"\n") if line.strip()]


def _cmd_locks(args: argparse.Namespace) -> int:
    from ..formats.convert import unstructure

    _print([unstructure(lock) for lock in _board(args).lock_table(history=args.history)])
    return EXIT_OK


def _cmd_assign(args: argparse.Namespace) -> int:
    board = _board(args)
    board.assign([args.task], owner=args.owner)
    row = board.state().row(args.task)
    print(board.packet_location(args.task, row.attempts))
    return EXIT_OK


def _cmd_packet(args: argparse.Namespace) -> int:
    board = _board(args)
    attempt = args.attempt or board.state().row(args.task).attempts
    try:
        raw, _ = board.packet_text(args.task, attempt)
    except FileNotFoundError:
        raise BoardError(
            f"task {args.task} has no packet for attempt {attempt}: it was not assigned then",
            code="MISSING_REQUIRED_INPUT",
            task_id=args.task,
        ) from None
    print(raw.decode("utf-8"))
    return EXIT_OK


def _cmd_heartbeat(args: argparse.Namespace) -> int:
    print(_board(args).heartbeat(args.task, attempt=args.attempt))
    return EXIT_OK


def _cmd_worklog(args: argparse.Namespace) -> int:
    from ..formats.board import WorklogEntry
    from ..formats.board_rules import parse_worklog_entry

    board = _board(args)
    if args.json_stdin:
        data = _json_input(args, "<stdin>")
        entry = parse_worklog_entry(data, source="<stdin>")
    else:
        if args.action is None:
            raise UsageError("--action is required (or give the whole entry with --json-stdin)")
        entry = WorklogEntry(
            timestamp=board.now(),
            run_id=board.run_id,
            task_id=args.task,
            actor=args.actor,
            action=args.action,
            files_touched=list(args.touched),
            decision=args.decision,
            result=args.result,
            next_step=args.next_step,
            code=_error_code(args.code),
            evidence=args.evidence,
        )
    board.append_worklog(entry)
    return EXIT_OK


def _cmd_submit(args: argparse.Namespace) -> int:
    from ..board.handoff import waiting_requests
    from ..formats.convert import unstructure
    from .run_store import store_at

    board = _board(args)
    raw = _read_input(args)
    row = board.state().row(args.task)
    attempt = args.attempt or row.attempts
    runs = store_at(_store_dsn(args), (args.workdir or Path.cwd()).resolve())
    try:
        waiting = waiting_requests(board, runs)
        if (args.task, attempt) in waiting.requests:
            # A workflow waits for this answer: deliver it; the engine judges it on resume.
            from ..board.gateway import evaluate

            preview = evaluate(
                raw,
                task=row.task,
                run_id=board.run_id,
                source=str(args.file or "<stdin>"),
                submitted_at=board.now(),
                evaluated_at=board.now(),
                result_link=f"results/{args.task}.{attempt}.json",
                workspace=board.workspace,
            )
            target = waiting.answer((args.task, attempt), text=raw.decode("utf-8", "replace"))
            _print({"delivered": target, "preview": unstructure(preview.verdict)})
            return EXIT_OK if preview.passed else EXIT_REFUSED
    finally:
        runs.close()
    judgement = board.submit(args.task, raw, attempt=attempt)
    _print(unstructure(judgement.verdict))
    return EXIT_OK if judgement.passed else EXIT_REFUSED


def _cmd_watchdog(args: argparse.Namespace) -> int:
    from ..formats.convert import unstructure

    workdir = (args.workdir or Path.cwd()).resolve()
    now = _moment(args.now) if args.now else None
    board = _board(args)
    with board.store.maintenance(wait=max(0.0, args.wait)):
        timed_out = time_out_stale_tasks(board, workdir, now=now, dsn=_store_dsn(args))
    for delta in timed_out:
        print(json.dumps(unstructure(delta), separators=(",", ":")))
    print(f"orchestrate: {plural(len(timed_out), 'task')} timed out", file=sys.stderr)
    return EXIT_OK


def _cmd_set_status(args: argparse.Namespace) -> int:
    from ..formats.board import TaskStatus
    from ..formats.convert import unstructure

    delta = _board(args).set_status(
        args.task,
        TaskStatus(args.status),
        reason=args.reason,
        code=_error_code(args.code),
        base_version=args.base_version,
    )
    if delta is not None:
        print(json.dumps(unstructure(delta), separators=(",", ":")))
    return EXIT_OK


def _cmd_handoff(args: argparse.Namespace) -> int:
    from ..board.board import handoff_markdown
    from ..formats.board import dump_board_document
    from ..storage.durable import atomic_write

    board = _board(args)
    if args.write and _store_dsn(args) is not None:
        raise UsageError(
            "--write writes into a board directory; a board in a store has none: redirect "
            "the output instead (> handoff.json, or --markdown > handoff.md)"
        )
    bundle = board.handoff()
    document = dump_board_document(bundle)
    markdown = handoff_markdown(bundle)
    if args.write:
        atomic_write(board.directory / "handoff.json", document)
        atomic_write(board.directory / "handoff.md", markdown.encode())
    sys.stdout.write(markdown if args.markdown else document.decode())
    return EXIT_OK


def _cmd_adopt(args: argparse.Namespace) -> int:
    from ..board.board import adopt_handoff
    from ..formats.board_rules import parse_handoff

    bundle = parse_handoff(_json_input(args, "<stdin>"), source=str(args.file or "<stdin>"))
    target = _board(args)
    if _store_dsn(args) is not None:
        board = adopt_handoff(None, bundle, store=target.store)
    else:
        board = adopt_handoff(target.directory, bundle)
    print(board.location)
    return EXIT_OK


# -- validators ------------------------------------------------------------------------


def cmd_check(args: argparse.Namespace) -> int:
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
    if getattr(args, "board", None) and kind != "ledger":
        raise UsageError(
            f"--board names the board whose ledger 'check ledger' folds; 'check "
            f"{kind}' reads its document on stdin"
        )
    if kind == "ledger" and getattr(args, "board", None):
        try:
            return _check_ledger(b"".join(line + b"\n" for line in _ledger_lines(_board(args))))
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


def _check_ledger(raw: bytes) -> dict[str, Any]:
    """Fold the deltas (NDJSON) as the board reads its ledger: every rule of D1-D5 and
    the lock table; a torn last line is left out, as the board leaves it."""
    from ..board.ledger import LedgerState, fold_ledger

    state = LedgerState()
    fold = fold_ledger(state, raw, source="<stdin>")
    torn = " (a torn last line left out)" if raw[fold.consumed :].strip() else ""
    return {
        "allow": True,
        "code": "OK",
        "reason": f"{plural(fold.applied, 'delta')} apply cleanly "
        f"({plural(fold.duplicates, 'duplicate')} ignored){torn}; "
        f"{plural(len(state.rows), 'task')}, {plural(len(state.active_locks()), 'lock')} held",
    }


def _declare_board(board: argparse.ArgumentParser) -> None:
    add_board_commands(board, Formatter)


COMMANDS = {
    "board": Command(
        "The task board: tasks, locks, heartbeats, worklogs, results, handoff.",
        _declare_board,
        no_subcommand,
    ),
    "check": Command(
        "Validate a board document on stdin: one line of JSON; exit 0 only if allowed.",
        add_check_command,
        cmd_check,
    ),
}
