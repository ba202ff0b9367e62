"""Looking after a PostgreSQL store: ``orchestrate db upgrade`` and ``db status`` (its
schema), and ``orchestrate export`` (one run of it as the files a work directory keeps).

``db upgrade`` applies the migrations this version ships, under the advisory lock every
upgrade takes, so it can run beside workers and other upgrades; a database a newer
version migrated further is refused, unchanged. Any command on a store upgrades a store
that is behind, too: ``db upgrade`` is for doing it on purpose, before a fleet starts.

``export`` reads the run in one read-only snapshot and writes what the file store would
have left in a work directory at the same point: while the run lives its state file, its
published requests and the answers not yet read; ``.orchestrator/runs/<id>/`` with
``events.ndjson``, ``requests.ndjson`` and every evidence file; once it ended, the
history's ``state.json`` there. Every byte is the row's. Nothing is written until every
row was checked: a path that would leave the run's directory is damage, refused whole.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path, PurePosixPath
from typing import Any

import attrs

from .._errors import InstanceExistsError, OrchestratorError, UsageError
from .._text import plural, printable
from .common import Command, Formatter, no_subcommand

EXIT_OK = 0
#: The run's files that come from tables of their own, never from ``run_files``.
_OWN_FILES = ("state.json", "events.ndjson", "requests.ndjson")
_REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
_WORKFLOW_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


class StoreDamageError(OrchestratorError):
    """A row of the store cannot be what orchestrate wrote there (a path that leaves the
    run's directory, a name that is not a plain one); nothing was written."""

    def __init__(self, where: str, what: str) -> None:
        super().__init__(f"{where}: {what}; the store's rows are damaged, so nothing was written")


# -- the parser ---------------------------------------------------------------------------


def add_db_commands(db: Any, formatter: Any) -> None:
    """``db upgrade`` and ``db status``, on the ``db`` command's parser."""
    from .common import add_store_argument

    subs = db.add_subparsers(dest="db_command", metavar="SUBCOMMAND", required=True)
    upgrade = subs.add_parser(
        "upgrade",
        help="Bring the store's schema to this version (safe beside workers and other upgrades).",
        description="Apply the migrations this version of orchestrate ships that the store "
        "lacks, each in its own transaction, under an advisory lock: a second upgrade waits, "
        "then finds nothing to do. A store a newer orchestrate migrated is refused, unchanged.",
        formatter_class=formatter,
    )
    upgrade.set_defaults(run_command=cmd_db_upgrade)
    add_store_argument(upgrade, run=False, needed=True)
    status = subs.add_parser(
        "status",
        help="Show the store's schema version, the latest this version knows, and its runs "
        "by status.",
        description="Show the store's schema version, the latest this version of orchestrate "
        "knows, and how many runs it holds in each status. Changes nothing.",
        formatter_class=formatter,
    )
    status.set_defaults(run_command=cmd_db_status)
    add_store_argument(status, run=False, needed=True)
    status.add_argument("--json", action="store_true", help="print machine-readable JSON")


def add_export_arguments(export: Any) -> None:
    from .common import add_store_argument

    add_store_argument(export, run=False, needed=True)
    export.add_argument("--run", required=True, metavar="ID", help="the run's id")
    export.add_argument(
        "--to",
        required=True,
        type=Path,
        metavar="DIR",
        help="the work directory to write the run into (made if missing; it must hold no instance)",
    )


def required_store(args: argparse.Namespace) -> str:
    """The store named by ``--store`` or ``$ORCHESTRATOR_STORE``; one is needed here."""
    from .run_store import required_dsn

    return required_dsn(args)


# -- db upgrade, db status ----------------------------------------------------------------


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    from .run_store import shown, upgrade_store

    dsn = required_store(args)
    applied, latest = upgrade_store(dsn)
    if applied:
        print(f"{shown(dsn)}: upgraded to version {applied[-1].version} ({_named(applied)})")
    else:
        print(f"{shown(dsn)}: at version {latest} already; nothing to do")
    return EXIT_OK


def _named(migrations: list[Any]) -> str:
    return ", ".join(f"{m.version:04d}_{m.name}" for m in migrations)


def cmd_db_status(args: argparse.Namespace) -> int:
    from .run_store import schema_status

    status = schema_status(required_store(args))
    if args.json:
        print(json.dumps({**attrs.asdict(status), "advice": status.advice()}, indent=2))
        return EXIT_OK
    print(f"store: {status.store} (schema {status.schema})")
    shown_version = "none" if status.version is None else str(status.version)
    print(f"schema version: {shown_version} (latest known: {status.latest}); {status.advice()}")
    counts = ", ".join(f"{status.runs[name]} {name}" for name in sorted(status.runs))
    print(f"runs: {counts or 'none'}")
    return EXIT_OK


# -- export ---------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ExportPlan:
    """What export writes, in three groups: the run's directory, the mailbox, then the
    state (last: until it is there, the directory holds no instance to act on)."""

    directories: list[Path]  # made in this order, outermost first
    evidence: list[tuple[Path, bytes]]
    mailbox: list[tuple[Path, bytes]]
    state: tuple[Path, bytes]


def plan_export(rows: Any, target: Path, *, store: str) -> ExportPlan:
    """The files of ``rows`` (the run as the store holds it, ``RunRows``) under
    ``target``, every name checked first."""
    from ..formats.bridge import REQUEST_FILE, REQUESTS_DIR, RESPONSES_DIR, state_file_name
    from ..storage.runs import ARCHIVE_FILE, EVENTS_FILE, runs_dir

    where = f"{store} run {rows.run_id}"
    run_dir = runs_dir(target) / rows.run_id
    # Written last: the live state, or once the run ended its history.
    last: tuple[Path, bytes]
    if rows.state is not None:
        last = (target / state_file_name(rows.workflow_name), rows.state)
    elif rows.history is not None:
        last = (run_dir / "state.json", rows.history)
    elif rows.status == "queued":
        raise UsageError(
            f"{where} is queued: no worker has started it, so it has no files yet; "
            "export it once it has run"
        )
    else:
        raise StoreDamageError(where, f"it is {rows.status} with neither a state nor a history")
    directories = [target / ".orchestrator", runs_dir(target), run_dir]
    evidence: list[tuple[Path, bytes]] = []
    for number, line in enumerate(rows.events, 1):
        if not line.endswith(b"\n") or b"\n" in line[:-1]:
            raise StoreDamageError(where, f"event line {number} is not one whole line")
    for number, line in enumerate(rows.archive, 1):
        if not line.endswith(b"\n") or b"\n" in line[:-1]:
            raise StoreDamageError(where, f"archived request line {number} is not one whole line")
    if rows.events:
        evidence.append((run_dir / EVENTS_FILE, b"".join(rows.events)))
    if rows.archive:
        evidence.append((run_dir / ARCHIVE_FILE, b"".join(rows.archive)))
    paths = [_run_file_path(path, where) for path, _ in rows.files]
    _check_no_file_holds_another(paths, where)
    for parts, (_, content) in zip(paths, rows.files, strict=True):
        for depth in range(1, len(parts)):
            directory = run_dir.joinpath(*parts[:depth])
            if directory not in directories:
                directories.append(directory)
        evidence.append((run_dir.joinpath(*parts), content))
    mailbox: list[tuple[Path, bytes]] = []
    if rows.state is None:  # ended
        return ExportPlan(directories=directories, evidence=evidence, mailbox=mailbox, state=last)
    if rows.history is not None:  # an ended run made live again keeps its last history
        evidence.append((run_dir / "state.json", rows.history))
    if not _WORKFLOW_NAME.fullmatch(rows.workflow_name):
        raise StoreDamageError(
            where,
            f"workflow name {rows.workflow_name!r} is not a plain name, so it cannot name a "
            "state file",
        )
    for request_id, _ in [*rows.requests, *rows.responses]:
        if not _REQUEST_ID.fullmatch(request_id):
            raise StoreDamageError(
                where, f"request id {request_id!r} is not a plain name, so it cannot name a file"
            )
    if rows.requests:
        mailbox.append((target / REQUEST_FILE, rows.requests[0][1]))
    if len(rows.requests) > 1:
        directories.append(target / REQUESTS_DIR)
        mailbox += [(target / REQUESTS_DIR / f"{rid}.json", doc) for rid, doc in rows.requests]
    if rows.responses:
        directories.append(target / RESPONSES_DIR)
        mailbox += [(target / RESPONSES_DIR / f"{rid}.json", doc) for rid, doc in rows.responses]
    return ExportPlan(directories=directories, evidence=evidence, mailbox=mailbox, state=last)


def _run_file_path(path: str, where: str) -> tuple[str, ...]:
    """The parts of a run file's path, which must stay inside the run's directory."""
    parts = tuple(path.split("/"))
    plain = (
        bool(path)
        and not PurePosixPath(path).is_absolute()
        and all(p not in ("", ".", "..") and "\\" not in p and "\0" not in p for p in parts)
    )
    if not plain:
        raise StoreDamageError(
            where, f"run file path {path!r} is not a plain path inside the run's directory"
        )
    if len(parts) == 1 and parts[0] in _OWN_FILES:
        raise StoreDamageError(where, f"run file {path!r} takes the name of the run's own file")
    return parts


def _check_no_file_holds_another(paths: list[tuple[str, ...]], where: str) -> None:
    """No run file may be the directory of another (``a`` and ``a/b``)."""
    files = set(paths)
    for parts in paths:
        for depth in range(1, len(parts)):
            if parts[:depth] in files:
                raise StoreDamageError(
                    where,
                    f"run file {'/'.join(parts[:depth])!r} is also the directory of "
                    f"{'/'.join(parts)!r}",
                )


def check_target(target: Path, run_id: str) -> None:
    """``target`` must hold no instance, and no directory of this run: an export never
    mixes with what is there. Looked at without following a link below ``target``."""
    from ..formats.bridge import REQUEST_FILE, REQUESTS_DIR, RESPONSE_FILE, RESPONSES_DIR
    from ..storage import beneath
    from ..storage.runs import runs_dir

    states = sorted(
        n for n in beneath.list_directory(target) if n.startswith(".") and n.endswith("-state.json")
    )
    mailbox = [
        n
        for n in (REQUEST_FILE, REQUESTS_DIR, RESPONSE_FILE, RESPONSES_DIR)
        if beneath.entry_exists(target / n)
    ]
    if states or mailbox:
        raise InstanceExistsError(
            f"{target}: holds an instance already ({', '.join(states + mailbox)}); export "
            "into a directory without one"
        )
    if beneath.entry_exists(runs_dir(target) / run_id):
        raise InstanceExistsError(
            f"{runs_dir(target) / run_id}: this run is in that directory already (exported or "
            "run there before, or an export that stopped half-way): remove it, or export "
            "into another directory"
        )


def write_export(plan: ExportPlan) -> None:
    """Write the plan durably, never through a link: the run's directory, then the
    mailbox, then the state (its presence says the rest is there)."""
    from ..storage import beneath
    from ..storage.durable import write_together

    made: list[Path] = []
    for directory in plan.directories:
        if not beneath.is_directory(directory):
            beneath.make_directories(directory)
            made.append(directory)
    parents = list(dict.fromkeys(d.parent for d in made))
    write_together(plan.evidence, directories=parents)
    write_together(plan.mailbox, directories=[] if plan.evidence else parents)
    write_together([plan.state], directories=[] if plan.evidence or plan.mailbox else parents)


def cmd_export(args: argparse.Namespace) -> int:
    from ..storage import beneath
    from ..storage.runs import is_run_id
    from .run_store import run_rows, shown

    dsn = required_store(args)
    run_id = str(args.run)
    if not is_run_id(run_id):
        raise UsageError(f"--run {run_id!r}: a run id is a plain name (as 'run' printed it)")
    rows = run_rows(dsn, run_id)
    target = Path(os.path.abspath(args.to))
    plan = plan_export(rows, target, store=shown(dsn))
    if target.exists() and not target.is_dir():
        raise UsageError(f"--to {target}: not a directory")
    if not target.exists():
        from ..storage.durable import fsync_directory

        os.makedirs(target)
        fsync_directory(target.parent)  # the new directory lasts with what is written in it
    beneath.guard(target)  # nothing under it is reached through a link
    check_target(target, run_id)
    write_export(plan)
    what = rows.status if rows.state is None else "live"
    count = len(plan.evidence) + len(plan.mailbox) + 1
    print(
        f"{run_id} ({what}): {plural(count, 'file')} written to {printable(str(target))}",
        file=sys.stderr,
    )
    print(plan.state[0])
    return EXIT_OK


def _declare_db(db: argparse.ArgumentParser) -> None:
    add_db_commands(db, Formatter)


COMMANDS = {
    "db": Command(
        "The PostgreSQL store's schema: upgrade it to this version, or show its version and "
        "its runs by status.",
        _declare_db,
        no_subcommand,
    ),
    "export": Command(
        "Write a run of a PostgreSQL store into a work directory as the files the file "
        "store keeps: its state, requests and evidence, byte for byte.",
        add_export_arguments,
        cmd_export,
    ),
}
