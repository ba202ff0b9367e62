"""The PostgreSQL store: runs and the task board in a database, for work past one machine.

Installed with the optional extra ``postgres`` (psycopg 3 and psycopg-pool); psycopg is
imported only when a ``postgresql://`` store is named. The modules:

- ``connection``: the DSN, the schema the store lives in, a connection with the driver's
  absence or a refused connection as a one-line error;
- ``migrations``: the versioned SQL files in ``migrations/``, applied under an advisory
  lock at first use or by ``orchestrate db upgrade``;
- ``store``: a store of runs, what the commands and the workers do with it (queue,
  list, answer, claim, wait);
- ``bridge``: one run's state, mailbox and evidence as rows of the store;
- ``runs``: the ``RunStore`` port over the store, every SQL statement the faces need
  (with ``db status`` and the read of a run for ``export``);
- ``pruning``: ``orchestrate prune`` on the store, finished runs removed a batch per
  transaction;
- ``task_board``: a task board (its ledger as rows, under a transaction's advisory lock);
  :func:`board_store` opens one;
- ``text_blobs``: texts stored once (``storage.blobs``' backend over the ``text_blobs``
  table).

May import: ``orchestrator._ports``, ``storage``, ``formats`` and the base modules, like
every adapter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .task_board import PostgresBoardStore


def board_store(dsn: str, board_id: str) -> PostgresBoardStore:
    """The task board ``board_id`` in the store at ``dsn`` (a dispatch board's id is its
    run's id), on a connection of its own: give it to ``orchestrator.board.Board(store=...)``,
    or return it from the engine's ``board_store`` factory so ``ctx.dispatch`` uses it.
    Close it when done."""
    from .task_board import PostgresBoardStore

    return PostgresBoardStore(dsn, board_id)
