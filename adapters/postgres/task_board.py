"""A task board in PostgreSQL: the :class:`orchestrator._ports.BoardStore` of one board.

A board is named by an id (a dispatch board's is its run's id). Its ledger is the table
``board_ledger``: one row per delta, the same JSON bytes a ``ledger.ndjson`` line holds,
numbered per board (``seq``, the delta's ``x_seq``), ``delta_id`` unique per board. A
position in the ledger is a sequence number.

Writers take the board's lock in a transaction (``pg_advisory_xact_lock``): the board
reads the rows appended since its last read, judges its deltas against the fold (D1-D5,
``x_base_version``, ``delta_id``), writes the documents they rely on and inserts them, in
that one transaction. Another process, on this machine or another, waits for the lock
and then sees every row committed before; a writer that dies mid-way leaves nothing,
and the server releases its lock. Heartbeats and worklog lines are rows written outside
the lock. The maintenance lock (one watchdog pass at a time) is a session-level advisory
lock, released by the server when its holder's connection ends.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..._errors import BoardError, InstanceBusyError, UsageError
from ..._ports import (
    AppendLedgerInput,
    BoardDocumentInput,
    HeartbeatInput,
    LedgerLines,
    LedgerSnapshot,
    ReadLedgerInput,
    ReplaceLedgerInput,
    WorklogInput,
)
from .connection import connect, schema_of, shown
from .migrations import check_current

if TYPE_CHECKING:
    import psycopg

#: The advisory locks of a board are 64-bit hashes of a name that holds the schema and
#: the board's id (as a run's lock is): the writers' lock, and the maintenance lock.
WRITERS_LOCK = "orchestrator-board/{schema}/{board_id}"
MAINTENANCE_LOCK = "orchestrator-board-maintenance/{schema}/{board_id}"
DOCUMENT_KINDS = ("packets", "results", "verdicts")
_POLL_SECONDS = 0.05


def check_board_id(board_id: str) -> str:
    """``board_id`` if it can name a board: 1..200 printable ASCII characters, no spaces."""
    if not (0 < len(board_id) <= 200 and board_id.isascii() and board_id.isprintable()) or (
        " " in board_id
    ):
        raise UsageError(
            f"board id {board_id!r}: use 1..200 printable ASCII characters without spaces "
            "(a dispatch board's id is its run's id)"
        )
    return board_id


class PostgresBoardStore:
    """Board ``board_id`` in the store at ``dsn``, on a connection of its own (autocommit
    outside the writers' lock), or on ``conn`` when given (left open by :meth:`close`).
    The schema is brought up to date first unless ``migrate`` is False."""

    def __init__(
        self,
        dsn: str,
        board_id: str,
        *,
        conn: psycopg.Connection[Any] | None = None,
        migrate: bool = True,
    ) -> None:
        self.dsn = dsn
        self.board_id = check_board_id(board_id)
        self.name = shown(dsn)
        self.schema = schema_of(dsn)
        self._owned = conn is None
        self.conn: psycopg.Connection[Any] = conn or connect(dsn, autocommit=True)
        if migrate:
            check_current(self.conn, dsn=dsn)
        self.location = f"board {board_id} in {self.name}"
        self.ledger_location = f"{self.location}, ledger"
        self.cli_arguments = f"--store {self.name} --board {board_id}"
        # The store without its password (a subagent gives it with PGPASSWORD or
        # ~/.pgpass, or sets ORCHESTRATOR_STORE) and the board's id.
        self.ask_context = {"x_store": self.name, "x_board_id": board_id}
        self._writers_lock = WRITERS_LOCK.format(schema=self.schema, board_id=board_id)
        self._maintenance_lock = MAINTENANCE_LOCK.format(schema=self.schema, board_id=board_id)
        self._in_lock = False

    def close(self) -> None:
        if self._owned and not self.conn.closed:
            self.conn.close()

    def __enter__(self) -> PostgresBoardStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the ledger -----------------------------------------------------------------------

    @contextmanager
    def locked(self) -> Iterator[None]:
        if self._in_lock:
            raise RuntimeError(f"{self.location}: the writers' lock is held already")
        from psycopg import sql

        # BEGIN and the lock in one round trip (a simple query: no parameters).
        self.conn.execute(
            sql.SQL("begin; select pg_advisory_xact_lock(hashtextextended({}, 0))").format(
                sql.Literal(self._writers_lock)
            )
        )
        self._in_lock = True
        try:
            yield
        except BaseException:
            self._in_lock = False
            import psycopg

            # A connection that is gone was rolled back by the server, its lock released.
            with contextlib.suppress(psycopg.Error):
                self.conn.execute("rollback")
            raise
        self._in_lock = False
        self.conn.execute("commit")

    def read_ledger(self, request: ReadLedgerInput) -> LedgerLines:
        # The row at ``after`` must still be there (a position of this ledger); -1 says not.
        rows = self.conn.execute(
            "select seq, document from board_ledger where board_id = %(b)s and seq > %(a)s "
            "union all select -1, null where %(a)s > 0 and not exists "
            "(select 1 from board_ledger where board_id = %(b)s and seq = %(a)s) "
            "order by 1",
            {"b": self.board_id, "a": request.after},
        ).fetchall()
        if rows and rows[0][0] == -1:
            return LedgerLines(data=b"", end=0, restart=True)
        if not rows:
            return LedgerLines(data=b"", end=request.after)
        data = b"".join(bytes(document) + b"\n" for _, document in rows)
        return LedgerLines(data=data, end=int(rows[-1][0]))

    def append_ledger(self, request: AppendLedgerInput) -> int:
        if not self._in_lock:
            raise RuntimeError(f"{self.location}: append the ledger inside locked()")
        if not request.lines:
            return request.after
        import psycopg

        rows = [
            (self.board_id, line.seq, line.delta_id, line.task_id, line.data[:-1])
            for line in request.lines
        ]
        insert = (
            "insert into board_ledger (board_id, seq, delta_id, task_id, document) "
            "values (%s, %s, %s, %s, %s)"
        )
        try:
            if len(rows) == 1:
                self.conn.execute(insert, rows[0])
            else:
                with self.conn.cursor() as cursor:
                    cursor.executemany(insert, rows)
        except psycopg.errors.UniqueViolation as exc:
            raise BoardError(
                f"{self.ledger_location}: {exc.diag.message_detail or exc}; another writer "
                "appended without the board's lock",
                code="LEDGER_INCONSISTENT",
            ) from None
        return request.lines[-1].seq

    def replace_ledger(self, request: ReplaceLedgerInput) -> None:
        """In the writers' transaction: the folded rows go, the snapshot line takes the
        place of the last of them (so a reader at that position reads on from there, and
        one before it reads again from the start); the fold kept for loading goes too."""
        if not self._in_lock:
            raise RuntimeError(f"{self.location}: replace the ledger inside locked()")
        self.conn.execute(
            "delete from board_ledger where board_id = %s and seq <= %s",
            (self.board_id, request.seq),
        )
        self.conn.execute("delete from board_snapshots where board_id = %s", (self.board_id,))
        self.conn.execute(
            "insert into board_ledger (board_id, seq, delta_id, task_id, document) "
            "values (%s, %s, %s, '', %s)",
            (self.board_id, request.seq, f"x_ledger_snapshot:{request.seq}", request.snapshot[:-1]),
        )

    def load_snapshot(self) -> LedgerSnapshot | None:
        row = self.conn.execute(
            "select s.seq, s.body from board_snapshots s join board_ledger l "
            "on l.board_id = s.board_id and l.seq = s.seq and l.delta_id = s.delta_id "
            "where s.board_id = %s",
            (self.board_id,),
        ).fetchone()
        if row is None:
            return None
        try:
            body = json.loads(bytes(row[1]))
        except ValueError:
            return None
        return LedgerSnapshot(position=int(row[0]), seq=int(row[0]), body=body)

    def save_snapshot(self, request: LedgerSnapshot) -> None:
        self.conn.execute(
            "insert into board_snapshots (board_id, seq, delta_id, body) "
            "select board_id, seq, delta_id, %s from board_ledger "
            "where board_id = %s and seq = %s "
            "on conflict (board_id) do update set seq = excluded.seq, "
            "delta_id = excluded.delta_id, body = excluded.body",
            (
                json.dumps(request.body, separators=(",", ":")).encode(),
                self.board_id,
                request.position,
            ),
        )

    # -- the board ------------------------------------------------------------------------

    def board_exists(self) -> bool:
        return self.read_info() is not None

    def read_info(self) -> bytes | None:
        row = self.conn.execute(
            "select info from boards where board_id = %s", (self.board_id,)
        ).fetchone()
        return None if row is None else bytes(row[0])

    def create_board(self, info: bytes) -> bool:
        made = self.conn.execute(
            "insert into boards (board_id, info) values (%s, %s) on conflict do nothing "
            "returning 1",
            (self.board_id, info),
        ).fetchone()
        return made is not None

    def document_location(self, request: BoardDocumentInput) -> str:
        return f"{self.location}: {request.kind}/{request.task_id}.{request.attempt}.json"

    def write_document(self, request: BoardDocumentInput) -> None:
        if request.kind not in DOCUMENT_KINDS:
            raise ValueError(f"document kind {request.kind!r}: one of {DOCUMENT_KINDS}")
        self.conn.execute(
            "insert into board_documents (board_id, kind, task_id, attempt, content) "
            "values (%s, %s, %s, %s, %s) on conflict (board_id, kind, task_id, attempt) "
            "do update set content = excluded.content, written_at = now()",
            (self.board_id, request.kind, request.task_id, request.attempt, request.data),
        )

    def read_document(self, request: BoardDocumentInput) -> bytes | None:
        row = self.conn.execute(
            "select content from board_documents "
            "where board_id = %s and kind = %s and task_id = %s and attempt = %s",
            (self.board_id, request.kind, request.task_id, request.attempt),
        ).fetchone()
        return None if row is None else bytes(row[0])

    def write_heartbeat(self, request: HeartbeatInput) -> None:
        self.conn.execute(
            "insert into board_heartbeats (board_id, task_id, beat) values (%s, %s, %s) "
            "on conflict (board_id, task_id) do update set beat = excluded.beat",
            (self.board_id, request.task_id, request.at),
        )

    def read_heartbeat(self, task_id: str) -> str | None:
        row = self.conn.execute(
            "select beat from board_heartbeats where board_id = %s and task_id = %s",
            (self.board_id, task_id),
        ).fetchone()
        return None if row is None else str(row[0])

    def append_worklog(self, request: WorklogInput) -> None:
        self.conn.execute(
            "insert into board_worklogs (board_id, path, delta_id, line) values (%s, %s, %s, %s)",
            (self.board_id, request.path, request.delta_id, request.line),
        )

    def read_worklog(self, path: str) -> list[Any]:
        from ...formats.strict_json import loads_strict

        rows = self.conn.execute(
            "select seq, line from board_worklogs where board_id = %s and path = %s order by seq",
            (self.board_id, path),
        ).fetchall()
        return [
            loads_strict(bytes(line), source=f"{self.location}: {path} line {number}")
            for number, (_, line) in enumerate(rows, 1)
        ]

    def worklog_has_entry(self, request: WorklogInput) -> bool:
        row = self.conn.execute(
            "select 1 from board_worklogs where board_id = %s and path = %s and delta_id = %s "
            "limit 1",
            (self.board_id, request.path, request.delta_id),
        ).fetchone()
        return row is not None

    @contextmanager
    def maintenance(self, *, wait: float | None) -> Iterator[bool]:
        key = (self._maintenance_lock,)
        deadline = time.monotonic() + (wait or 0.0)
        while True:
            row = self.conn.execute("select pg_try_advisory_lock(hashtextextended(%s, 0))", key)
            taken = row.fetchone()
            if taken is not None and taken[0]:
                break
            if wait is None:
                yield False
                return
            if time.monotonic() >= deadline:
                raise InstanceBusyError(
                    f"{self.location}: another maintenance pass (a watchdog, or a resume) "
                    f"has held the board's maintenance lock for {wait:g} s; try again when "
                    "it is done",
                    lock_path=self.location,
                )
            time.sleep(_POLL_SECONDS)
        try:
            yield True
        finally:
            if not self.conn.closed:
                self.conn.execute("select pg_advisory_unlock(hashtextextended(%s, 0))", key)

    def sweep(self) -> None:
        """Nothing to sweep: a writer that dies leaves no half-written row."""


def board_ids(conn: psycopg.Connection[Any]) -> list[tuple[str, bytes]]:
    """Every board of the store on ``conn``: (id, board.json bytes), oldest first."""
    rows = conn.execute("select board_id, info from boards order by created_at, board_id")
    return [(str(board_id), bytes(info)) for board_id, info in rows.fetchall()]
