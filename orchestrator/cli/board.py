"""``orchestrate board ...``: the task board for hosts and subagents in any language.

``board`` commands act on a board directory (``--board``, default ``.board`` in the work
directory), or with ``--store DSN`` (or ``$ORCHESTRATOR_STORE``) on the board of that
PostgreSQL store that ``--board ID`` names (a dispatch board's id is its run's id). When a
workflow waits for a task's answer (an instance in the work directory, or the run of a
store's board), ``board submit`` and ``board watchdog`` answer its pending request (the
engine judges the result on resume); on a board no workflow drives, they record the
outcome directly.

Each subcommand is a row of ``SUBCOMMANDS``: its help, its own arguments (beside
``--workdir``, ``--board`` and ``--store``, which every one takes) and its handler.
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


# -- parsers ---------------------------------------------------------------------------


def add_board_commands(board: Any, formatter: Any) -> None:
    """The ``board`` subcommands, on the ``board`` command's parser."""
    subs = board.add_subparsers(dest="board_command", metavar="SUBCOMMAND", required=True)
    for name, command in SUBCOMMANDS.items():
        parser = subs.add_parser(
            name, help=command.help, description=command.help, formatter_class=formatter
        )
        parser.set_defaults(run_command=_with_codes(command.run))
        parser.add_argument("--workdir", type=Path, default=None, help="default: current directory")
        add_board_arguments(parser)
        command.declare(parser)


def _declare_init(init: argparse.ArgumentParser) -> None:
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


def _declare_status(status: argparse.ArgumentParser) -> None:
    status.add_argument("--json", action="store_true", help="print machine-readable JSON")


def _declare_ledger(ledger: argparse.ArgumentParser) -> None:
    ledger.add_argument("--task", default=None, help="only this task's deltas")
    ledger.add_argument("--table", action="store_true", help="one readable line per delta")


def _declare_compact(compact: argparse.ArgumentParser) -> None:
    compact.add_argument(
        "--keep",
        type=int,
        default=100,
        metavar="N",
        help="keep the last N deltas as lines after the snapshot (default: 100)",
    )
    compact.add_argument("--json", action="store_true", help="print machine-readable JSON")


def _declare_locks(locks: argparse.ArgumentParser) -> None:
    locks.add_argument("--history", action="store_true", help="also released locks")


def _declare_assign(assign: argparse.ArgumentParser) -> None:
    assign.add_argument("--task", required=True, help="the task to start (T-<n>)")
    assign.add_argument("--owner", required=True, help="who works on it (a subagent's name)")


def _declare_packet(packet: argparse.ArgumentParser) -> None:
    packet.add_argument("--task", required=True, help="the task whose packet to print")
    _add_attempt(packet)


def _declare_heartbeat(beat: argparse.ArgumentParser) -> None:
    beat.add_argument("--task", required=True, help="the task whose subagent is alive")
    _add_attempt(beat)


def _declare_worklog(worklog: argparse.ArgumentParser) -> None:
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


def _declare_submit(submit: argparse.ArgumentParser) -> None:
    submit.add_argument("--task", required=True, help="the task the result answers")
    _add_attempt(submit)
    _add_input(submit)


def _declare_watchdog(watchdog: argparse.ArgumentParser) -> None:
    watchdog.add_argument("--now", default=None, help="RFC 3339 time (default: now)")
    watchdog.add_argument(
        "--wait",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long to wait while another maintenance pass runs (default 30); then exit 75",
    )


def _declare_set_status(set_status: argparse.ArgumentParser) -> None:
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


def _declare_handoff(handoff: argparse.ArgumentParser) -> None:
    handoff.add_argument("--markdown", action="store_true", help="the Markdown page instead")
    handoff.add_argument(
        "--write", action="store_true", help="also write handoff.json and handoff.md"
    )


def _add_attempt(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--attempt", type=int, default=None, help="the attempt (default: the current one)"
    )


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


def add_board_arguments(parser: Any, *, board_help: str | None = None) -> None:
    """``--board`` and ``--store``: which board a command acts on."""
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


def _add_input(parser: Any) -> None:
    parser.add_argument("--file", type=Path, default=None, help="default: standard input")


# -- board commands --------------------------------------------------------------------


def _store_dsn(args: argparse.Namespace) -> str | None:
    """The PostgreSQL store named by ``--store`` or ``$ORCHESTRATOR_STORE``; ``None``: files
    (``--workdir`` names where the board's workflow runs, not a store, here)."""
    from .run_store import store_dsn

    return store_dsn(args, starts_run=True, workdir_beats_env=False)


def board_of(args: argparse.Namespace) -> Board:
    """The board ``--board`` and ``--store`` name (default: ``.board`` in the work directory)."""
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
    from ..formats.board_documents import ErrorCode

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

    board = board_of(args)
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
    applied = board_of(args).create_tasks(tasks)
    for delta in applied:
        print(json.dumps(unstructure(delta), separators=(",", ":")))
    print(f"orchestrate: {plural(len(applied), 'task')} created", file=sys.stderr)
    return EXIT_OK


def _cmd_status(args: argparse.Namespace) -> int:
    board = board_of(args)
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


def _cmd_compact(args: argparse.Namespace) -> int:
    from ..board.compaction import compact_ledger
    from ..formats.times import SystemClock, format_time

    if args.keep < 0:
        raise UsageError(f"--keep {args.keep}: write 0 or more")
    board = board_of(args)
    done = compact_ledger(board.store, keep=args.keep, at=format_time(SystemClock().now()))
    head = done.head
    if args.json:
        _print(
            {
                "folded": done.folded,
                "kept": done.kept,
                "seq": head.seq if head else 0,
                "deltas": head.deltas if head else 0,
                "deltas_sha256": head.deltas_sha256 if head else None,
                "size_before": done.size_before,
                "size_after": done.size_after,
            }
        )
    elif not done.folded:
        print(f"{board.store.ledger_location}: nothing to fold ({plural(done.kept, 'delta')} kept)")
    else:
        assert head is not None
        print(
            f"{board.store.ledger_location}: folded {plural(done.folded, 'delta')} into a "
            f"snapshot at x_seq {head.seq} ({plural(head.deltas, 'delta')} in all, sha256 "
            f"{head.deltas_sha256[:16]}); {plural(done.kept, 'delta')} kept after it; "
            f"{done.size_before} -> {done.size_after} bytes"
        )
    return EXIT_OK


def _cmd_ledger(args: argparse.Namespace) -> int:
    for line in ledger_lines(board_of(args)):
        delta = json.loads(line)
        if "x_ledger_snapshot" in delta:  # a compacted ledger's first line: not a delta
            if args.table and args.task is None:
                folded = delta["x_ledger_snapshot"]
                print(f"{folded['seq']:>4} (snapshot of {plural(folded['deltas'], 'delta')})")
            elif not args.table and args.task is None:
                sys.stdout.write(line.decode() + "\n")
            continue
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


def ledger_lines(board: Board) -> list[bytes]:
    """The ledger's whole, non-blank lines without their newline, as stored."""
    from ..board.file_store import FileBoardStore

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

    _print([unstructure(lock) for lock in board_of(args).lock_table(history=args.history)])
    return EXIT_OK


def _cmd_assign(args: argparse.Namespace) -> int:
    board = board_of(args)
    board.assign([args.task], owner=args.owner)
    row = board.state().row(args.task)
    print(board.packet_location(args.task, row.attempts))
    return EXIT_OK


def _cmd_packet(args: argparse.Namespace) -> int:
    board = board_of(args)
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
    print(board_of(args).heartbeat(args.task, attempt=args.attempt))
    return EXIT_OK


def _cmd_worklog(args: argparse.Namespace) -> int:
    from ..formats.board_documents import WorklogEntry
    from ..formats.board_rules import parse_worklog_entry

    board = board_of(args)
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
    from ..board.handoff import deliver_result
    from ..formats.convert import unstructure
    from .run_store import store_at

    board = board_of(args)
    raw = _read_input(args)
    attempt = args.attempt or board.state().row(args.task).attempts
    runs = store_at(_store_dsn(args), (args.workdir or Path.cwd()).resolve())
    try:
        source = str(args.file or "<stdin>")
        delivery = deliver_result(board, runs, args.task, raw, attempt=attempt, source=source)
    finally:
        runs.close()
    if delivery is not None:  # a workflow waits for this answer: it judges it on resume
        _print({"delivered": delivery.target, "preview": unstructure(delivery.preview.verdict)})
        return EXIT_OK if delivery.preview.passed else EXIT_REFUSED
    judgement = board.submit(args.task, raw, attempt=attempt)
    _print(unstructure(judgement.verdict))
    return EXIT_OK if judgement.passed else EXIT_REFUSED


def _cmd_watchdog(args: argparse.Namespace) -> int:
    from ..formats.convert import unstructure

    workdir = (args.workdir or Path.cwd()).resolve()
    now = _moment(args.now) if args.now else None
    board = board_of(args)
    with board.store.maintenance(wait=max(0.0, args.wait)):
        timed_out = time_out_stale_tasks(board, workdir, now=now, dsn=_store_dsn(args))
    for delta in timed_out:
        print(json.dumps(unstructure(delta), separators=(",", ":")))
    print(f"orchestrate: {plural(len(timed_out), 'task')} timed out", file=sys.stderr)
    return EXIT_OK


def _cmd_set_status(args: argparse.Namespace) -> int:
    from ..formats.board_documents import TaskStatus
    from ..formats.convert import unstructure

    delta = board_of(args).set_status(
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
    from ..formats.board_documents import dump_board_document
    from ..storage.durable import atomic_write

    board = board_of(args)
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
    target = board_of(args)
    if _store_dsn(args) is not None:
        board = adopt_handoff(None, bundle, store=target.store)
    else:
        board = adopt_handoff(target.directory, bundle)
    print(board.location)
    return EXIT_OK


def _declare_board(board: argparse.ArgumentParser) -> None:
    add_board_commands(board, Formatter)


SUBCOMMANDS = {
    "init": Command("Make a board (for tasks no workflow dispatches).", _declare_init, _cmd_init),
    "create": Command(
        "Create tasks: a JSON list of task objects (as in an assignment packet).",
        _add_input,
        _cmd_create,
    ),
    "status": Command(
        "Show every task: status, owner, attempts, locks.", _declare_status, _cmd_status
    ),
    "ledger": Command("Print the ledger's deltas (NDJSON).", _declare_ledger, _cmd_ledger),
    "compact": Command(
        "Fold the ledger into a verified snapshot line, keeping the last deltas after it.",
        _declare_compact,
        _cmd_compact,
    ),
    "locks": Command("Print the lock table (JSON).", _declare_locks, _cmd_locks),
    "assign": Command(
        "Start a task: write its packet, take its locks.", _declare_assign, _cmd_assign
    ),
    "packet": Command(
        "Print the assignment packet of a task's attempt.", _declare_packet, _cmd_packet
    ),
    "heartbeat": Command(
        "Record that a task's subagent is alive.", _declare_heartbeat, _cmd_heartbeat
    ),
    "worklog": Command(
        "Append a worklog entry: from flags, or a whole JSON entry with --json-stdin.",
        _declare_worklog,
        _cmd_worklog,
    ),
    "submit": Command(
        "Hand in a task's result (subagent result or submit.json).", _declare_submit, _cmd_submit
    ),
    "watchdog": Command(
        "Time out tasks whose heartbeat is stale.", _declare_watchdog, _cmd_watchdog
    ),
    "set-status": Command(
        "Block, fail, cancel or requeue a task.", _declare_set_status, _cmd_set_status
    ),
    "handoff": Command("Print the fresh-context handoff bundle.", _declare_handoff, _cmd_handoff),
    "adopt": Command(
        "Make a new board from a handoff bundle and continue it.", _add_input, _cmd_adopt
    ),
}

COMMANDS = {
    "board": Command(
        "The task board: tasks, locks, heartbeats, worklogs, results, handoff.",
        _declare_board,
        no_subcommand,
    ),
}
