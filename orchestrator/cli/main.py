"""``orchestrate``: the composition root. Parses arguments, picks adapters, maps outcomes
to exit codes (0 done, 1 error with state kept, 2 usage, 42 paused, 75 instance busy).

Only what a command needs is imported, and only when it runs: a host spawns this once
per pause, so start-up time is the product.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import (
    ContractError,
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

if TYPE_CHECKING:
    from ..engine.engine import Engine

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_PAUSED, EXIT_BUSY = 0, 1, 2, 42, 75


def entry() -> None:
    """The console script: :func:`main`, then leave at once.

    A process that lives for one command gains nothing from garbage collection during
    imports or from tearing the interpreter down at exit (together about 15 ms, more
    than a fifth of a resume). Every file is closed before ``main`` returns and the
    output streams are flushed here; ``drive``, which lives long, turns collection on.
    """
    import gc
    import os

    gc.disable()
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    """Run one ``orchestrate`` command; returns its exit code."""
    if argv is None:
        argv = sys.argv[1:]
    parser = _parser(argv[0] if argv else None)
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
    try:
        code: int = args.run_command(args)
        return code
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
_READ_ONLY = {"status", "validate", "schema", "replay", "history", "events", "output", "check"}


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
        from .run_store import directory_store

        try:  # a run that saved its first checkpoint is an instance: it resumes
            directory_store(_workdir(args)).state_path(None)
        except (OrchestratorError, OSError):
            return "'orchestrate run' again (no instance was made)"
        command = "resume"
    if command == "resume":
        return "'orchestrate resume' goes on from the last checkpoint"
    if command == "board":
        return f"'orchestrate board {getattr(args, 'board_command', '')}' again"
    return f"'orchestrate {command}' again"


# -- argument parsing -----------------------------------------------------------------


class _Formatter(argparse.HelpFormatter):
    """argparse's formatter, minus the ``shutil`` import it makes to size the terminal."""

    def __init__(self, prog: str) -> None:
        import os

        super().__init__(prog, width=int(os.environ.get("COLUMNS", "") or 100) - 2)


class _Unused:
    """Stands for the parser of a command that is not being run: it records nothing."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: self


COMMANDS = (
    "init",
    "run",
    "resume",
    "retry",
    "rewind",
    "fork",
    "replay",
    "status",
    "respond",
    "drive",
    "validate",
    "schema",
    "cancel",
    "board",
    "check",
    "history",
    "events",
    "output",
    "trust",
    "eval",
    "pending",
    "worker",
    "db",
    "export",
    "ui",
)


def _parser(first_word: str | None = None) -> argparse.ArgumentParser:
    """The argument parser; when ``first_word`` names a command, only that one is built
    (building them all costs milliseconds on every start)."""
    only = first_word if first_word in COMMANDS else None
    parser = argparse.ArgumentParser(
        prog="orchestrate",
        formatter_class=_Formatter,
        description="Run agent workflows that pause with exit 42 and resume where they stopped.",
        epilog="exit codes: 0 done, 1 error (state kept), 2 usage, 42 paused for an agent, "
        "75 another process holds the instance",
    )
    parser.add_argument(
        "--version", action="store_true", help="print the version of checkpoint-orchestrator"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, handler: Any, help_text: str) -> Any:
        if only is not None and name != only:
            return _Unused()
        sub = commands.add_parser(
            name, help=help_text, description=help_text, formatter_class=_Formatter
        )
        sub.set_defaults(run_command=handler)
        return sub

    def add_workdir(sub: Any) -> None:
        sub.add_argument(
            "--workdir",
            type=Path,
            default=None,
            help="the instance's work directory (default: the current directory)",
        )

    def add_instance(sub: Any) -> None:
        sub.add_argument(
            "--workflow",
            default=None,
            help="the instance's workflow name (the NAME of .NAME-state.json), not a file; "
            "not needed, since a work directory holds one instance: given, the command "
            "refuses a directory whose instance is another workflow's",
        )

    def add_store(sub: Any, *, run: bool = True, needed: bool = False) -> None:
        from .run_store import add_store_argument

        add_store_argument(sub, run=run, needed=needed)

    def add_agent(sub: Any) -> None:
        sub.add_argument(
            "--agent",
            default="host",
            metavar="SPEC",
            help="who answers the asks: 'host' (default: pause with exit 42 for the host), "
            "'subprocess:COMMAND' (run COMMAND with the prompt on stdin), or "
            "'http:MODEL@BASE_URL' (an OpenAI-compatible endpoint; the key from "
            "OPENAI_API_KEY, or the variable named by ORCHESTRATOR_API_KEY_ENV)",
        )

    def add_start(sub: Any, *, required: bool) -> None:
        sub.add_argument(
            "workflow",
            nargs=None if required else "?",
            help="pkg.module:Class, path/file.py:Class, path/file.py (the one workflow the "
            "file defines), or a registered workflow name",
        )
        sub.add_argument(
            "--input",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="a workflow input (repeatable)",
        )
        sub.add_argument(
            "--output", default=None, help="the output path (default: the work directory)"
        )

    init = command(
        "init",
        _cmd_init,
        "Write a new workflow file and its test file (two phases, a step, an ask), ready "
        "to run and to pass: NAME.py and NAME_test.py.",
    )
    init.add_argument("name", metavar="NAME", help="the workflow's name, kebab-case: 'demo'")
    init.add_argument(
        "--directory",
        type=Path,
        default=None,
        help="where to write the two files (default: the current directory)",
    )

    run = command("run", _cmd_run, "Start a workflow instance; runs until it pauses (42) or ends.")
    add_start(run, required=True)
    add_workdir(run)
    add_agent(run)
    add_store(run, run=False)
    run.add_argument(
        "--queue",
        action="store_true",
        help="with --store: only record the new run and print its id; a worker starts it",
    )

    resume = command(
        "resume", _cmd_resume, "Record the host's responses and continue the instance."
    )
    add_workdir(resume)
    add_agent(resume)
    add_instance(resume)
    add_store(resume)

    retry = command(
        "retry",
        _cmd_retry,
        "Re-open a failed run at its failed phase with the current code; recorded answers "
        "that still match are used again.",
    )
    add_workdir(retry)
    add_agent(retry)
    add_instance(retry)
    retry.add_argument(
        "--run",
        default=None,
        help="the failed run's id, to make sure it is the one here (with --store: the run)",
    )
    add_store(retry, run=False)

    rewind = command(
        "rewind",
        _cmd_rewind,
        "Take a paused, failed or completed run back to an earlier phase; that phase and "
        "the ones after it run again at the next resume.",
    )
    add_workdir(rewind)
    rewind.add_argument(
        "--to", required=True, metavar="PHASE", help="the phase to run again from (its name)"
    )
    rewind.add_argument(
        "--run",
        default=None,
        help="a finished run's id (default: the live instance, else the latest run)",
    )
    add_instance(rewind)
    add_store(rewind, run=False)

    fork = command(
        "fork",
        _cmd_fork,
        "Start a new run in another directory at a phase of an existing run, with its "
        "inputs and the outputs of the phases before; the original is left as it is.",
    )
    fork.add_argument(
        "--workdir",
        type=Path,
        required=True,
        help="the new run's work directory (it must hold no instance)",
    )
    fork.add_argument(
        "--from", dest="from_phase", required=True, metavar="PHASE", help="the phase to start at"
    )
    fork.add_argument(
        "--source",
        type=Path,
        default=None,
        help="the work directory of the run to fork (default: the current directory)",
    )
    fork.add_argument(
        "--run",
        default=None,
        help="which of its runs (default: its live instance, else its latest finished run)",
    )
    fork.add_argument(
        "--output",
        default=None,
        help="the new run's output path (default: the source's, moved into the new "
        "work directory; required when the source writes outside its own)",
    )

    replay = command(
        "replay",
        _cmd_replay,
        "Replay a recorded run against a workflow's current code, calling no agent; exit 1 "
        "at the first call that differs.",
    )
    replay.add_argument("workflow", metavar="WORKFLOW", help="pkg.module:Class or file.py:Class")
    replay.add_argument(
        "--run",
        type=Path,
        required=True,
        help="the run: its directory (.orchestrator/runs/<run_id>) or a state file",
    )

    status = command("status", _cmd_status, "Show the instance: phase, pending requests, history.")
    add_workdir(status)
    add_instance(status)
    status.add_argument("--json", action="store_true", help="print machine-readable JSON")
    add_store(status)

    respond = command("respond", _cmd_respond, "Write a valid response for a pending request.")
    add_workdir(respond)
    add_instance(respond)
    respond.add_argument(
        "--request-id",
        "--request",
        dest="request_id",
        default=None,
        help="the request answered; needed when several are pending",
    )
    add_store(respond)
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

    drive = command(
        "drive",
        _cmd_drive,
        "Host loop: run or resume, answer each request with HANDLER, until the end.",
    )
    add_start(drive, required=False)
    add_workdir(drive)
    drive.add_argument(
        "--handler",
        default=None,
        help="shell command: gets the request JSON on stdin, prints the answer (needed "
        "unless --agent answers in-process)",
    )
    add_agent(drive)
    drive.add_argument("--parallel", type=int, default=4, help="handlers run at once (default 4)")
    drive.add_argument(
        "--handler-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="kill a handler after this long and answer TIMEOUT (default: the request's "
        "timeout_seconds)",
    )
    add_store(drive)

    validate = command(
        "validate",
        _cmd_validate,
        "Check a bridge file (request, response or state); exit 0 valid, 1 invalid.",
    )
    validate.add_argument(
        "file",
        type=Path,
        metavar="FILE",
        help="the file to check: a request, a response or a state file",
    )
    validate.add_argument(
        "--workflow",
        default=None,
        help="also check the workflow's phase names, agent names and phase range",
    )
    validate.add_argument(
        "--kind",
        choices=["request", "response", "state"],
        default=None,
        help="default: from the file name",
    )

    schema = command(
        "schema",
        _cmd_schema,
        "Print the JSON Schema of an agent bridge file: as shipped, or a workflow's own.",
    )
    schema.add_argument(
        "kind", choices=["request", "response", "state"], help="which file's schema to print"
    )
    schema.add_argument("--workflow", default=None, help="derive the schema for this workflow")

    cancel = command(
        "cancel",
        _cmd_cancel,
        "Stop the instance: keep its history, remove its state and request files.",
    )
    add_workdir(cancel)
    cancel.add_argument(
        "--force",
        action="store_true",
        help="for a damaged state: move it aside unread and clear the request files",
    )
    add_instance(cancel)
    add_store(cancel)

    history = command(
        "history",
        _cmd_history,
        "Show a run's timeline: phases, asks, answers, retries, with times.",
    )
    add_workdir(history)
    history.add_argument(
        "--run",
        default=None,
        help="a finished run's id (default: the live instance, else the latest run)",
    )
    add_store(history, run=False)

    output = command(
        "output",
        _cmd_output,
        "Print a run's outputs: every phase's, or one phase's.",
    )
    add_workdir(output)
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
    add_store(output, run=False)
    output.add_argument(
        "--json",
        action="store_true",
        help="print JSON even for a phase whose output is text (default: text as it is)",
    )

    trust = command(
        "trust",
        _cmd_trust,
        "Sign a state file as it is now, once you have checked it: a state changed by "
        "hand, or begun before states were signed. Commands that act on a state refuse "
        "one whose signature does not hold.",
    )
    trust.add_argument(
        "state",
        type=Path,
        metavar="STATE",
        help="the state file: .<workflow>-state.json in a work directory, or a run's "
        "state.json (.orchestrator/runs/<run_id>/state.json)",
    )
    trust.add_argument(
        "--workflow",
        default=None,
        metavar="REFERENCE",
        help="point the state at its workflow's new place first (path/file.py:Class or "
        "pkg.module:Class), for a project that moved; the workflow must have the "
        "instance's name",
    )

    events = command(
        "events",
        _cmd_events,
        "Show a run's events: filter, follow, or export them as OpenTelemetry spans.",
    )
    if not isinstance(events, _Unused):
        from .events import add_events_arguments

        add_workdir(events)
        add_events_arguments(events)
        add_store(events, run=False)

    board = command(
        "board",
        _cmd_board,
        "The task board: tasks, locks, heartbeats, worklogs, results, handoff.",
    )
    if not isinstance(board, _Unused):
        from .board import add_board_commands

        add_board_commands(board, _Formatter)
    eval_group = command(
        "eval",
        _cmd_eval,
        "Agent regression runs: ask every case of a cases file of an agent version, "
        "compare a baseline run with a new one, check run and evaluation folders.",
    )
    if not isinstance(eval_group, _Unused):
        from .eval_compare import add_compare_commands
        from .evals import add_eval_commands

        add_compare_commands(add_eval_commands(eval_group, _Formatter), _Formatter)
    pending = command(
        "pending",
        _cmd_pending,
        "List the requests waiting for a host: of the work directory's instance, or of "
        "every run in a store (--store), each with its run's id.",
    )
    add_workdir(pending)
    add_store(pending)
    pending.add_argument(
        "--json",
        action="store_true",
        help="print a JSON array of {run_id, request} (the request document as a host reads it)",
    )
    worker = command(
        "worker",
        _cmd_worker,
        "Advance runs of a PostgreSQL store: claim each run that can go on (new, "
        "answered, a timer due, or left by a worker that died), advance it under its lock, "
        "wait for the next; stops cleanly on SIGTERM or Ctrl-C after the step at hand.",
    )
    if not isinstance(worker, _Unused):
        from .worker import add_worker_arguments

        add_store(worker, run=False, needed=True)
        add_agent(worker)
        add_worker_arguments(worker)
    db = command(
        "db",
        _cmd_db,
        "The PostgreSQL store's schema: upgrade it to this version, or show its version and "
        "its runs by status.",
    )
    if not isinstance(db, _Unused):
        from .store import add_db_commands

        add_db_commands(db, _Formatter)
    export = command(
        "export",
        _cmd_export,
        "Write a run of a PostgreSQL store into a work directory as the files the file "
        "store keeps: its state, requests and evidence, byte for byte.",
    )
    if not isinstance(export, _Unused):
        from .store import add_export_arguments

        add_export_arguments(export)
    ui = command(
        "ui",
        _cmd_ui,
        "A local web page to watch runs and answer their requests: prints a link "
        "(127.0.0.1, with an access token) and serves until Ctrl-C.",
    )
    if not isinstance(ui, _Unused):
        from .ui.serve import add_ui_arguments

        add_ui_arguments(ui)
    check = command(
        "check",
        _cmd_check,
        "Validate a board document on stdin: one line of JSON; exit 0 only if allowed.",
    )
    if not isinstance(check, _Unused):
        from .board import add_check_command

        add_check_command(check)
    return parser


# -- composition --------------------------------------------------------------------------


def _workdir(args: argparse.Namespace) -> Path:
    workdir = (args.workdir or Path.cwd()).resolve()
    if not workdir.is_dir():
        raise UsageError(f"work directory {workdir} does not exist")
    return workdir


def _engine_for(workflow_cls: Any, workdir: Path, agent: str = "host") -> Engine:
    from ..adapters.file_bridge import FileBridge
    from ..engine.engine import Engine

    return Engine(
        workflow_cls,
        bridge=FileBridge(workdir, workflow_cls.name),
        invoker=_invoker(agent),
        clock=_clock(),
    )


def _clock() -> Any:
    """The real clock, or the moment ``ORCHESTRATOR_NOW`` fixes (for tests of processes)."""
    import os

    fixed = os.environ.get("ORCHESTRATOR_NOW")
    if not fixed:
        return None
    from ..formats.convert import check_date_time
    from ..formats.times import FixedClock, parse_time

    try:
        check_date_time(fixed, source="ORCHESTRATOR_NOW", json_path="$")
    except ContractError:
        raise UsageError(
            f"ORCHESTRATOR_NOW={fixed!r}: write an RFC 3339 time (2026-01-02T03:04:05Z), "
            "or unset it to use the real clock"
        ) from None
    return FixedClock(parse_time(fixed))


def _invoker(spec: str) -> Any:
    """The invoker an ``--agent`` SPEC names (see ``orchestrate run --help``)."""
    kind, _, rest = spec.partition(":")
    if kind == "host" and not rest:
        from ..adapters.file_bridge import FileBridgeInvoker

        return FileBridgeInvoker()
    if kind == "subprocess" and rest.strip():
        from ..adapters.subprocess_agent import SubprocessInvoker

        return SubprocessInvoker(rest)
    model, _, base_url = rest.partition("@")
    if kind == "http" and model and base_url:
        import os

        from ..adapters.http_agent import HttpInvoker

        key_env = os.environ.get("ORCHESTRATOR_API_KEY_ENV", "OPENAI_API_KEY")
        return HttpInvoker(base_url=base_url, model=model, api_key_env=key_env)
    raise UsageError(
        f"--agent {spec!r}: write 'host', 'subprocess:COMMAND' or 'http:MODEL@BASE_URL'"
    )


def _parse_inputs(pairs: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` pairs. Keys ending in ``_path`` or ``_dir`` are paths: made absolute
    against the current directory now, so a later ``resume`` from elsewhere finds them."""
    inputs = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--input {pair!r}: write KEY=VALUE")
        if key.endswith(("_path", "_dir")) and value:
            value = str(Path(value).resolve())
        inputs[key] = value
    return inputs


def _cmd_init(args: argparse.Namespace) -> int:
    from .scaffold import scaffold

    directory = (args.directory or Path.cwd()).resolve()
    if not directory.is_dir():
        raise UsageError(f"directory {directory} does not exist")
    workflow, test = scaffold(args.name, directory)
    print(workflow)
    print(test)
    print(
        f"orchestrate: wrote {workflow.name} and {test.name}; run the tests with "
        f"'pytest {test.name}', the workflow with 'orchestrate run {workflow.name}:"
        f"{workflow.stem.title().replace('_', '')} --input topic=owls'",
        file=sys.stderr,
    )
    return EXIT_OK


def _cmd_run(args: argparse.Namespace) -> int:
    from .run_commands import cmd_run

    return cmd_run(args)


def _cmd_resume(args: argparse.Namespace) -> int:
    from .run_commands import cmd_resume

    return cmd_resume(args)


def _cmd_retry(args: argparse.Namespace) -> int:
    from .run_commands import cmd_retry

    return cmd_retry(args)


def _cmd_rewind(args: argparse.Namespace) -> int:
    from .run_commands import cmd_rewind

    return cmd_rewind(args)


def _cmd_fork(args: argparse.Namespace) -> int:
    from ..engine.loader import load_workflow
    from ..engine.record import load_record
    from ..evidence.history import load_run

    target = _workdir(args)
    origin_dir = (args.source or Path.cwd()).resolve()
    if origin_dir == target:
        raise UsageError(f"{target}: fork into another work directory than the source's")
    state, source = load_run(origin_dir, args.run, signed_only=True)
    record = load_record(state, source=source)
    output = args.output
    if output is None:
        try:
            inside = Path(state.output_path).resolve().relative_to(Path(record.workdir).resolve())
        except ValueError:
            raise UsageError(
                f"the run writes to {state.output_path}, outside its work directory: give "
                "--output for the fork, so that the original's files stay as they are"
            ) from None
        output = str(target / inside)
    else:
        output = str(Path(output).resolve())
    workflow_cls = load_workflow(record.workflow)
    engine = _engine_for(workflow_cls, target)
    # (An unknown phase, or an instance already there, is refused by the fork below,
    # before anything is copied.)
    forkable = args.from_phase in {p.name for p in workflow_cls.phases} and not any(
        target.glob(".*-state.json")
    )
    if forkable and Path(state.output_path).is_dir() and not Path(output).exists():
        _copy_whole(Path(state.output_path), Path(output))
    message = engine.fork(state, from_phase=args.from_phase, workdir=target, output_path=output)
    print(f"orchestrate: {printable(message)}", file=sys.stderr)
    return EXIT_OK


def _cmd_replay(args: argparse.Namespace) -> int:
    from ..engine.loader import locate_workflow
    from ..engine.replay import load_recorded_run, replay_run

    load_recorded_run(args.run, signed_only=True)  # a run that was changed is not replayed
    _, workflow_cls = locate_workflow(args.workflow, base_dir=Path.cwd())
    report = replay_run(args.run, workflow_cls, signed_only=True)
    print(f"orchestrate: {printable(report.describe())}", file=sys.stderr)
    return EXIT_OK if report.ok else EXIT_ERROR


def _copy_whole(source: Path, target: Path) -> None:
    """Copy the tree ``source`` to ``target`` whole or not at all: into a temporary
    directory beside it, then renamed into place (a copy cut short is started again)."""
    import shutil

    from ..storage.durable import crash_point, fsync_directory

    partial = target.with_name(f".{target.name}.copying")
    shutil.rmtree(partial, ignore_errors=True)
    # What the earlier phases wrote comes along: the fork goes on from their files.
    shutil.copytree(source, partial, symlinks=True)
    crash_point(f"before-rename {partial.name}")
    partial.rename(target)
    fsync_directory(target.parent)


def _cmd_status(args: argparse.Namespace) -> int:
    from .run_commands import cmd_status

    return cmd_status(args)


def _cmd_respond(args: argparse.Namespace) -> int:
    from .run_commands import cmd_respond

    return cmd_respond(args)


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


def _cmd_drive(args: argparse.Namespace) -> int:
    import gc

    gc.enable()  # a long-lived host loop: collect as usual
    from ..storage.durable import live_briefly

    live_briefly(False)  # and hash with OpenSSL's SHA-256
    from .run_commands import cmd_drive

    return cmd_drive(args)


def _cmd_validate(args: argparse.Namespace) -> int:
    from .instance import validate_file

    workflow_cls = None
    if args.workflow:
        from ..engine.loader import locate_workflow

        _, workflow_cls = locate_workflow(args.workflow, base_dir=Path.cwd())
    problems = validate_file(args.file, kind=args.kind, workflow_cls=workflow_cls)
    if problems:
        for problem in problems:
            print(f"invalid: {problem}", file=sys.stderr)
        return EXIT_ERROR
    print(f"valid: {args.file}")
    return EXIT_OK


def _cmd_schema(args: argparse.Namespace) -> int:
    import json

    from ..formats.workflow_schemas import seed_schema, workflow_schemas

    if args.workflow:
        from ..engine.loader import locate_workflow

        _, workflow_cls = locate_workflow(args.workflow, base_dir=Path.cwd())
        schema = workflow_schemas(workflow_cls)[args.kind]
    else:
        schema = seed_schema(args.kind)
    print(json.dumps(schema, indent=2))
    return EXIT_OK


def _cmd_cancel(args: argparse.Namespace) -> int:
    from .run_commands import cmd_cancel

    return cmd_cancel(args)


def _cmd_history(args: argparse.Namespace) -> int:
    from .run_commands import cmd_history

    return cmd_history(args)


def _cmd_output(args: argparse.Namespace) -> int:
    from .run_commands import cmd_output

    return cmd_output(args)


def _cmd_trust(args: argparse.Namespace) -> int:
    from .trust import trust_state

    print(f"orchestrate: {trust_state(args.state, workflow=args.workflow)}", file=sys.stderr)
    return EXIT_OK


def _cmd_events(args: argparse.Namespace) -> int:
    from .events import cmd_events

    return cmd_events(args)


def _cmd_pending(args: argparse.Namespace) -> int:
    from .run_commands import cmd_pending

    return cmd_pending(args)


def _cmd_ui(args: argparse.Namespace) -> int:
    from .ui.serve import cmd_ui

    return cmd_ui(args)


def _cmd_worker(args: argparse.Namespace) -> int:
    from .run_store import store_dsn

    dsn = store_dsn(args)
    if dsn is None:
        raise UsageError(
            "a worker advances the runs of a PostgreSQL store: give --store DSN (or set "
            "ORCHESTRATOR_STORE)"
        )
    from .worker import cmd_worker

    return cmd_worker(args, dsn)


def _cmd_board(args: argparse.Namespace) -> int:
    raise UsageError("name a board subcommand (orchestrate board --help lists them)")


def _cmd_eval(args: argparse.Namespace) -> int:
    raise UsageError("name an eval subcommand (orchestrate eval --help lists them)")


def _cmd_db(args: argparse.Namespace) -> int:
    raise UsageError("name a db subcommand (orchestrate db --help lists them)")


def _cmd_export(args: argparse.Namespace) -> int:
    from .store import cmd_export

    return cmd_export(args)


def _cmd_check(args: argparse.Namespace) -> int:
    from .board import cmd_check

    return cmd_check(args)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main(sys.argv[1:]))
