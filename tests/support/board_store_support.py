"""The task board's stores for tests: one board, opened as often as a test likes (each
opening is what another process sees), in a directory or in PostgreSQL.

``board_pg_store`` opens a board of its own in the session's PostgreSQL schema
(``pg_support.pg_dsn``: skipped with the reason where no server answers, a failure under
``CI=true``); ``board_stores`` is parametrised over both stores, so one test holds both
to the same rules. Import the fixtures into a test module to use them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from orchestrator._ports import BoardStore

STORES = ("files", "postgres")
OpenStore = Callable[[], BoardStore]


@pytest.fixture
def board_pg_store(pg_dsn: str) -> Iterator[OpenStore]:
    """Opens a new connection to one board of this test's own in the session's schema."""
    from orchestrator.adapters.postgres.task_board import PostgresBoardStore

    board_id = f"board-{uuid.uuid4()}"
    opened: list[PostgresBoardStore] = []

    def open_store() -> BoardStore:
        store = PostgresBoardStore(pg_dsn, board_id)
        opened.append(store)
        return store

    yield open_store
    for store in opened:
        store.close()


@pytest.fixture(params=STORES)
def board_stores(request: pytest.FixtureRequest, tmp_path: Path) -> OpenStore:
    """Opens one board again, in a directory or in PostgreSQL (the test's parameter)."""
    if request.param == "postgres":
        opener: OpenStore = request.getfixturevalue("board_pg_store")
        return opener
    from orchestrator.board.file_store import FileBoardStore

    directory = tmp_path / ".board"
    directory.mkdir()
    return lambda: FileBoardStore(directory)
