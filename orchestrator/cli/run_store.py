"""The one place a command chooses its run store, and the store's looking-after.

A command names its store by ``--store DSN`` (a PostgreSQL store), ``--workdir DIR`` (a
work directory's files), ``$ORCHESTRATOR_STORE``, or nothing (the current directory's
files), in that order: an option given beats the environment. ``--store`` and ``--workdir``
together name two stores, a usage error, except on a command that starts a run, where
``--workdir`` is the directory the run works in. Every other command module talks to
the store it is given through the :class:`orchestrator._ports.RunStore` port; this is
the only module of the CLI that names an adapter of PostgreSQL.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import UsageError

if TYPE_CHECKING:
    from .._ports import BoardStore, RunStore, WorkerRunStore
    from ..adapters.file_runs import FileRunStore

from .common import STORE_ENV


def store_dsn(
    args: argparse.Namespace, *, starts_run: bool = False, workdir_beats_env: bool = True
) -> str | None:
    """The PostgreSQL store the command names, or ``None`` for a work directory's files:
    ``--store``, else ``--workdir`` (files), else ``$ORCHESTRATOR_STORE``. ``starts_run``:
    on a command that starts a run, ``--workdir`` is the directory it works in and may
    come with ``--store``. ``workdir_beats_env``: False where ``--workdir`` never names a
    store (the board commands: there ``$ORCHESTRATOR_STORE`` names the board's store)."""
    given = getattr(args, "store", None)
    workdir = getattr(args, "workdir", None)
    if given and workdir is not None and not starts_run:
        raise UsageError(
            f"--store {shown(given)} and --workdir {workdir} name two stores: give one "
            "(--store for a run in PostgreSQL, --workdir for a work directory's files)"
        )
    if given:
        return _checked(given, "--store")
    if workdir is not None and workdir_beats_env:
        return None  # an option given beats the environment
    from_env = os.environ.get(STORE_ENV) or None
    return None if from_env is None else _checked(from_env, STORE_ENV)


def _checked(dsn: str, where: str) -> str:
    from ..adapters.postgres.connection import is_store_dsn

    if not is_store_dsn(dsn):
        raise UsageError(
            f"{where} {dsn!r}: name a PostgreSQL store as postgresql://USER@HOST/DATABASE "
            "(work directories are named with --workdir)"
        )
    return dsn


def workdir_of(args: argparse.Namespace) -> Path:
    """The work directory a command names (``--workdir``, else the current one)."""
    workdir = (getattr(args, "workdir", None) or Path.cwd()).resolve()
    if not workdir.is_dir():
        raise UsageError(f"work directory {workdir} does not exist")
    return Path(workdir)


def open_run_store(args: argparse.Namespace, *, starts_run: bool = False) -> RunStore:
    """The run store the command names (see :func:`store_dsn`), open; close it when done."""
    dsn = store_dsn(args, starts_run=starts_run)
    if dsn is not None:
        from ..adapters.postgres.runs import PostgresRunStore

        return PostgresRunStore(dsn)
    return directory_store(workdir_of(args))


def store_at(dsn: str | None, workdir: Path) -> RunStore:
    """The PostgreSQL store at ``dsn``, or (``None``) the work directory ``workdir``'s."""
    if dsn is None:
        return directory_store(workdir)
    from ..adapters.postgres.runs import PostgresRunStore

    return PostgresRunStore(dsn)


def board_store(dsn: str, board_id: str) -> BoardStore:
    """Task board ``board_id`` of the PostgreSQL store at ``dsn``, on a connection of its
    own (a dispatch board's id is its run's id); close it when done."""
    from ..adapters.postgres import board_store as open_board

    return open_board(dsn, board_id)


# Board stores a command opened, closed when it ends (a database connection each).
_OPENED: list[BoardStore] = []


def open_board_store(dsn: str, board_id: str | None) -> BoardStore:
    """The board ``board_id`` of the PostgreSQL store at ``dsn``, closed by
    :func:`close_board_stores` when the command ends."""
    if not board_id:
        raise UsageError(
            "with --store, name the board: --board ID (a dispatch board's id is its run's "
            "id; 'orchestrate status --store DSN' lists runs)"
        )
    store = board_store(dsn, board_id)
    _OPENED.append(store)
    return store


def close_board_stores() -> None:
    while _OPENED:
        _OPENED.pop().close()


def directory_store(workdir: Path) -> FileRunStore:
    """The run store of the work directory ``workdir`` (its task board kept in files)."""
    from ..adapters.file_runs import FileRunStore

    return FileRunStore(workdir, boards=_file_board_store)


def _file_board_store(directory: Path) -> BoardStore:
    """The board kept in ``directory``, its module imported only when a board is there."""
    from ..board.file_store import FileBoardStore

    return FileBoardStore(directory)


def page_store(dsn: str) -> RunStore:
    """The PostgreSQL store at ``dsn`` for the web page: checked now (it answers, its schema
    is current), then connected for each call and holding nothing between them."""
    from ..adapters.postgres.runs import PostgresRunStore

    PostgresRunStore(dsn).close()
    return PostgresRunStore(dsn, hold=False)


def worker_store(dsn: str, *, migrate: bool = True) -> WorkerRunStore:
    """The PostgreSQL store at ``dsn`` for one worker thread, on a connection of its own;
    ``migrate``: bring its schema up to date first."""
    from ..adapters.postgres.runs import PostgresRunStore

    return PostgresRunStore(dsn, migrate=migrate)


def shown(dsn: str) -> str:
    """``dsn`` as messages show it (no password)."""
    from ..adapters.postgres.connection import shown as without_password

    return without_password(dsn)


# -- looking after a PostgreSQL store ------------------------------------------------------


def required_dsn(args: argparse.Namespace) -> str:
    """The store named by ``--store`` or ``$ORCHESTRATOR_STORE``; one is needed here."""
    dsn = store_dsn(args)
    if dsn is None:
        raise UsageError(
            f"name the PostgreSQL store: --store postgresql://USER@HOST/DATABASE (or set "
            f"{STORE_ENV})"
        )
    return dsn


def upgrade_store(dsn: str) -> tuple[list[Any], int]:
    """Apply the migrations the store lacks: those applied, and the latest version known."""
    from ..adapters.postgres.migrations import latest, upgrade

    return upgrade(dsn), latest()


def schema_status(dsn: str) -> Any:
    """The store's schema version and runs by status (``SchemaStatus``), read only."""
    from ..adapters.postgres.runs import schema_status as read_status

    return read_status(dsn)


def run_rows(dsn: str, run_id: str) -> Any:
    """Every row of one run (``RunRows``), from one read-only snapshot, for ``export``."""
    from ..adapters.postgres.runs import read_run_rows

    return read_run_rows(dsn, run_id)
