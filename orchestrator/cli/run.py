"""The commands that move an instance through its life: ``run``, ``resume``, ``retry``,
``rewind``, ``fork``, ``replay``, ``drive`` and ``cancel``.

Each works on the store the command names, through the ``RunStore`` port
(:mod:`.run_commands`); ``fork`` and ``replay`` work on a work directory's recorded runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .._errors import UsageError
from .._text import printable
from . import common
from .common import EXIT_ERROR, EXIT_OK, Command

if TYPE_CHECKING:
    pass


# -- arguments --------------------------------------------------------------------------------


def add_start(sub: argparse.ArgumentParser, *, required: bool) -> None:
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
    sub.add_argument("--output", default=None, help="the output path (default: the work directory)")


def _declare_run(run: argparse.ArgumentParser) -> None:
    add_start(run, required=True)
    common.add_workdir(run)
    common.add_agent(run)
    common.add_store(run, run=False)
    common.add_otlp(run)
    run.add_argument(
        "--queue",
        action="store_true",
        help="with --store: only record the new run and print its id; a worker starts it",
    )


def _declare_resume(resume: argparse.ArgumentParser) -> None:
    common.add_workdir(resume)
    common.add_agent(resume)
    common.add_instance(resume)
    common.add_store(resume)
    common.add_otlp(resume)


def _declare_retry(retry: argparse.ArgumentParser) -> None:
    common.add_workdir(retry)
    common.add_agent(retry)
    common.add_instance(retry)
    retry.add_argument(
        "--run",
        default=None,
        help="the failed run's id, to make sure it is the one here (with --store: the run)",
    )
    common.add_store(retry, run=False)


def _declare_rewind(rewind: argparse.ArgumentParser) -> None:
    common.add_workdir(rewind)
    rewind.add_argument(
        "--to", required=True, metavar="PHASE", help="the phase to run again from (its name)"
    )
    rewind.add_argument(
        "--run",
        default=None,
        help="a finished run's id (default: the live instance, else the latest run)",
    )
    common.add_instance(rewind)
    common.add_store(rewind, run=False)


def _declare_fork(fork: argparse.ArgumentParser) -> None:
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


def _declare_replay(replay: argparse.ArgumentParser) -> None:
    replay.add_argument("workflow", metavar="WORKFLOW", help="pkg.module:Class or file.py:Class")
    replay.add_argument(
        "--run",
        type=Path,
        default=None,
        help="the run: its directory (.orchestrator/runs/<run_id>) or a state file",
    )
    replay.add_argument(
        "--corpus",
        type=Path,
        nargs="+",
        default=None,
        metavar="DIR",
        help="instead of --run: replay every recorded run under these folders (run "
        "directories and live state files, found recursively) with their recorded answers, "
        "and report each as unchanged, outputs_changed (a JSON diff per phase), diverged "
        "(the first call that differs) or failed; writes summary.json and report.html",
    )
    replay.add_argument(
        "--out",
        type=Path,
        default=Path("replay-report"),
        metavar="DIR",
        help="with --corpus: where summary.json and report.html go (default: "
        "./replay-report; never inside a recorded run)",
    )
    replay.add_argument(
        "--fail-on",
        default="diverged,failed",
        metavar="STATUSES",
        help="with --corpus: comma-separated statuses that fail the gate (exit 1): "
        "diverged, outputs-changed, failed; 'none' never fails (default: diverged,failed)",
    )


def _declare_drive(drive: argparse.ArgumentParser) -> None:
    add_start(drive, required=False)
    common.add_workdir(drive)
    drive.add_argument(
        "--handler",
        default=None,
        help="shell command: gets the request JSON on stdin, prints the answer (needed "
        "unless --agent answers in-process)",
    )
    common.add_agent(drive)
    drive.add_argument("--parallel", type=int, default=4, help="handlers run at once (default 4)")
    drive.add_argument(
        "--handler-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="kill a handler after this long and answer TIMEOUT (default: the request's "
        "timeout_seconds)",
    )
    common.add_store(drive)
    common.add_otlp(drive)


def _declare_cancel(cancel: argparse.ArgumentParser) -> None:
    common.add_workdir(cancel)
    cancel.add_argument(
        "--force",
        action="store_true",
        help="for a damaged state: move it aside unread and clear the request files",
    )
    common.add_instance(cancel)
    common.add_store(cancel)


# -- commands ---------------------------------------------------------------------------------


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

    target = common.workdir(args)
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
    engine = common.engine_for(workflow_cls, target)
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
    if (args.run is None) == (args.corpus is None):
        raise UsageError(
            "replay: name one recorded run (--run DIR) or folders of them (--corpus DIR...)"
        )
    if args.corpus is not None:
        from .replay_suite import cmd_replay_corpus

        return cmd_replay_corpus(args)
    from ..engine.loader import locate_workflow
    from ..engine.replay import load_recorded_run, replay_run

    load_recorded_run(args.run, signed_only=True)  # a run that was changed is not replayed
    _, workflow_cls = locate_workflow(args.workflow, base_dir=Path.cwd())
    report = replay_run(args.run, workflow_cls, signed_only=True)
    print(f"orchestrate: {printable(report.describe(), lines=True)}", file=sys.stderr)
    return EXIT_OK if report.ok else EXIT_ERROR


def _cmd_drive(args: argparse.Namespace) -> int:
    import gc

    gc.enable()  # a long-lived host loop: collect as usual
    from ..storage.durable import live_briefly

    live_briefly(False)  # and hash with OpenSSL's SHA-256
    from .run_commands import cmd_drive

    return cmd_drive(args)


def _cmd_cancel(args: argparse.Namespace) -> int:
    from .run_commands import cmd_cancel

    return cmd_cancel(args)


COMMANDS = {
    "run": Command(
        "Start a workflow instance; runs until it pauses (42) or ends.", _declare_run, _cmd_run
    ),
    "resume": Command(
        "Record the host's responses and continue the instance.", _declare_resume, _cmd_resume
    ),
    "retry": Command(
        "Re-open a failed run at its failed phase with the current code; recorded answers "
        "that still match are used again.",
        _declare_retry,
        _cmd_retry,
    ),
    "rewind": Command(
        "Take a paused, failed or completed run back to an earlier phase; that phase and "
        "the ones after it run again at the next resume.",
        _declare_rewind,
        _cmd_rewind,
    ),
    "fork": Command(
        "Start a new run in another directory at a phase of an existing run, with its "
        "inputs and the outputs of the phases before; the original is left as it is.",
        _declare_fork,
        _cmd_fork,
    ),
    "replay": Command(
        "Replay a recorded run against a workflow's current code, calling no agent; exit 1 "
        "at the first call that differs. With --corpus, replay every recorded run under "
        "folders as a regression suite: each run's status, summary.json and report.html, "
        "exit 1 when a run has a status named by --fail-on.",
        _declare_replay,
        _cmd_replay,
    ),
    "drive": Command(
        "Host loop: run or resume, answer each request with HANDLER, until the end.",
        _declare_drive,
        _cmd_drive,
    ),
    "cancel": Command(
        "Stop the instance: keep its history, remove its state and request files.",
        _declare_cancel,
        _cmd_cancel,
    ),
}
