"""``orchestrate eval ...``: agent regression runs. ``eval run`` asks every case of a
cases file of one agent version and writes the run directory (``docs/evals.md``).

Imported only when an ``eval`` command runs. Each subcommand's parser is built by a
function of its own (:func:`add_run_command`), so that other subcommands join the group
without touching it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .._errors import UsageError
from .._text import plural
from .common import Command, Formatter, no_subcommand

EXIT_OK, EXIT_ERROR = 0, 1


def add_eval_commands(group: Any, formatter: Any) -> Any:
    """The ``eval`` subcommands on the ``eval`` command's parser; returns their
    subparsers object, for more subcommands."""
    subs = group.add_subparsers(dest="eval_command", metavar="SUBCOMMAND", required=True)
    add_run_command(subs, formatter)
    return subs


def add_run_command(subs: Any, formatter: Any) -> None:
    """``eval run``: its arguments."""
    text = (
        "Ask every case of a cases file of one agent version (baseline or new) and write "
        "OUT/VERSION/RUN_ID/: run.json, one CASE_ID.json per case, assets/. An unfinished "
        "run of the same cases and agent is carried on, not started again."
    )
    run = subs.add_parser("run", help=text, description=text, formatter_class=formatter)
    run.set_defaults(run_command=cmd_eval_run)
    from .common import add_otlp

    add_otlp(run)
    run.add_argument(
        "--cases",
        type=Path,
        required=True,
        metavar="FILE",
        help="the cases: a JSON array of {id, title?, input: {user, context?}, expected?}, "
        "or one such object per line (JSONL)",
    )
    agent = run.add_mutually_exclusive_group(required=True)
    agent.add_argument(
        "--base-url", default=None, metavar="URL", help="the agent's endpoint: POST URL/run-case"
    )
    agent.add_argument(
        "--agent-command",
        default=None,
        metavar="COMMAND",
        help="run COMMAND per case instead: the request JSON on stdin, the answer on stdout",
    )
    agent.add_argument(
        "--agent-callable",
        default=None,
        metavar="MODULE:FUNCTION",
        help="call FUNCTION(request) -> answer in this process instead",
    )
    run.add_argument(
        "--version",
        dest="side",  # not ``version``: that is ``orchestrate --version``'s
        required=True,
        choices=["baseline", "new"],
        help="which side this run is",
    )
    run.add_argument(
        "--out",
        type=Path,
        default=Path("runs"),
        metavar="DIR",
        help="the output directory (default: ./runs); the run goes to DIR/VERSION/RUN_ID",
    )
    run.add_argument("--concurrency", type=int, default=4, help="cases in flight (default 4)")
    run.add_argument(
        "--timeout-ms", type=int, default=30_000, help="limit of one try (default 30000)"
    )
    run.add_argument(
        "--retries", type=int, default=2, help="tries after the first, on a retry class (default 2)"
    )
    run.add_argument(
        "--retry-on",
        default="timeout,network_error,http_5xx",
        metavar="CLASSES",
        help="comma-separated retry classes: timeout, http_error, invalid_json, "
        "schema_mismatch, network_error, other, http_5xx, http_429 (default "
        "timeout,network_error,http_5xx)",
    )
    run.add_argument(
        "--backoff-ms",
        type=int,
        default=200,
        help="the first wait before a retry; it doubles, up to 5000, with jitter (default 200)",
    )
    run.add_argument(
        "--max-body-bytes",
        type=int,
        default=16 * 1024 * 1024,  # formats.runs.Limits' default (not imported for --help)
        help="answers are read up to this size, on their way to disk, never held whole "
        "beyond it; a larger answer is a BodyTooLarge failure with its first bytes kept "
        "(default 16777216)",
    )


def cmd_eval_run(args: argparse.Namespace) -> int:
    """Start (or carry on) a regression run; exit 0 when every case has its artifact."""
    import os

    from ..formats.runs import RETRY_CLASSES, Limits
    from ..storage.beneath import guard, make_directories

    agent = _agent(args)
    classes = [c.strip() for c in args.retry_on.split(",") if c.strip()]
    unknown = [c for c in classes if c not in RETRY_CLASSES]
    if unknown:
        raise UsageError(
            f"--retry-on: unknown class {', '.join(unknown)}; the classes are "
            f"{', '.join(RETRY_CLASSES)}"
        )
    for name in ("concurrency", "timeout_ms", "max_body_bytes"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if args.retries < 0 or args.backoff_ms < 0:
        raise UsageError("--retries and --backoff-ms cannot be negative")
    from ..evals.cases import read_cases

    read_cases(args.cases)  # a bad cases file is refused before anything is made or called
    from ..evals.workflow import run_inputs

    workdir = (args.out / args.side).absolute()
    # The directory the user named is made as named; nothing below it follows a link.
    os.makedirs(args.out, exist_ok=True)
    guard(args.out.absolute())
    make_directories(workdir)
    inputs = run_inputs(
        version=args.side,
        agent=agent,
        cases_file=args.cases,
        out_root=args.out,
        repo_dir=Path(os.getcwd()),
        timeout_ms=args.timeout_ms,
        retries=args.retries,
        concurrency=args.concurrency,
        retry_classes=classes,
        base_delay_ms=args.backoff_ms,
        limits=Limits(max_body_bytes=args.max_body_bytes),
    )
    return _start_or_resume(workdir, inputs)


def _agent(args: argparse.Namespace) -> dict[str, Any]:
    from ..evals.transport import transport_for

    if args.base_url is not None:
        agent = {"kind": "http", "base_url": args.base_url}
    elif args.agent_command is not None:
        agent = {"kind": "subprocess", "command": args.agent_command}
    else:
        agent = {"kind": "callable", "ref": args.agent_callable}
    transport_for(agent)  # a URL or reference that cannot work is refused now
    return agent


def _start_or_resume(workdir: Path, inputs: dict[str, Any]) -> int:
    from ..adapters.file_bridge import FileBridge
    from ..engine.engine import Engine
    from ..evals.workflow import WORKFLOW_REFERENCE, RegressionRun
    from .common import clock
    from .run_store import directory_store
    from .telemetry import wanted, watch

    bridge = FileBridge(workdir, RegressionRun.name)
    engine = Engine(RegressionRun, bridge=bridge, clock=clock())
    if wanted():  # live spans: the run's log is read through its directory's store
        watch(engine, directory_store(workdir), action="resume" if bridge.exists() else "start")
    if bridge.exists():
        _check_same_run(bridge.state_path, inputs, workdir)
        print(f"carrying on the unfinished run in {workdir}", file=sys.stderr)
        outcome = engine.resume()
    else:
        # The engine keeps its state in the folder a user copies to share the run: it
        # records the work directory as "." (the bridge's directory), no place here.
        outcome = engine.start(
            workflow_ref=WORKFLOW_REFERENCE, workdir=Path("."), output_path=".", inputs=inputs
        )
    if outcome.status != "completed":
        print(f"orchestrate: error: {outcome.message}", file=sys.stderr)
        return EXIT_ERROR
    plan = outcome.outputs["plan"]
    stats = outcome.outputs["finish"]
    print(
        f"{workdir / plan['run_id']}: {plural(stats['cases_total'], 'case')}, "
        f"{stats['cases_completed']} ok, {plural(stats['cases_failed'], 'runner error')}"
    )
    return EXIT_OK


_SAME_RUN_KEYS = ("version", "agent", "cases_file")


def _check_same_run(state_path: Path, inputs: dict[str, Any], workdir: Path) -> None:
    """An unfinished run is carried on only by the same cases and agent."""
    from ..storage.files import read_json_file

    data = read_json_file(state_path, allow_lone_surrogates=True)
    try:
        recorded = data["phase_data"]["x_orchestrator"]["inputs"]
    except (KeyError, TypeError):
        recorded = {}
    changed = [k for k in _SAME_RUN_KEYS if not _same(k, recorded.get(k), inputs[k], workdir)]
    if changed:
        raise UsageError(
            f"{workdir} holds an unfinished run with another {', '.join(changed)}; "
            f"'orchestrate resume --workdir {workdir}' finishes it, 'orchestrate cancel "
            f"--workdir {workdir}' drops it"
        )


def _same(key: str, recorded: Any, given: Any, workdir: Path) -> bool:
    """Whether an input recorded by the unfinished run is the one given now (a path
    compared as the place it names: an earlier version recorded it absolute)."""
    if key != "cases_file" or not isinstance(recorded, str):
        return bool(recorded == given)
    from ..evals.workflow import input_path

    return input_path(workdir, recorded) == input_path(workdir, given)


def _declare_eval(group: argparse.ArgumentParser) -> None:
    from .eval_compare import add_compare_commands

    add_compare_commands(add_eval_commands(group, Formatter), Formatter)


COMMANDS = {
    "eval": Command(
        "Agent regression runs: ask every case of a cases file of an agent version, "
        "compare a baseline run with a new one, check run and evaluation folders.",
        _declare_eval,
        no_subcommand,
    ),
}
