"""Texts stored once on PostgreSQL: :class:`orchestrator.storage.blobs.TextBlobs`'
backend over the ``text_blobs`` table (one row per distinct text, never changed) and
``text_blob_indexes`` (each run's hint of the texts a later one may extend)."""

from __future__ import annotations

from typing import Any

from .connection import connect, shown

__all__ = ["PostgresBlobBackend"]


class PostgresBlobBackend:
    """Blobs as rows of ``text_blobs``; each write commits on its own (autocommit), so a
    blob is durable before the state or history that names it is written."""

    def __init__(self, dsn: str, *, conn: Any = None) -> None:
        self.dsn = dsn
        self._conn = conn

    def _connection(self) -> Any:
        if self._conn is None:
            from .migrations import check_current

            conn = connect(self.dsn, autocommit=False)
            check_current(conn, dsn=self.dsn)
            conn.autocommit = True
            self._conn = conn
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def write_blob(self, digest: str, body: bytes) -> None:
        self._connection().execute(
            "insert into text_blobs (digest, body) values (%s, %s) on conflict do nothing",
            (digest, body),
        )

    def read_blob(self, digest: str) -> bytes | None:
        row = (
            self._connection()
            .execute("select body from text_blobs where digest = %s", (digest,))
            .fetchone()
        )
        return None if row is None else bytes(row[0])

    def where(self, digest: str) -> str:
        return f"{shown(self.dsn)} text_blobs row {digest}"

    def read_index(self, run_id: str) -> bytes | None:
        row = (
            self._connection()
            .execute("select body from text_blob_indexes where run_id = %s", (run_id,))
            .fetchone()
        )
        return None if row is None else bytes(row[0])

    def write_index(self, run_id: str, body: bytes) -> None:
        self._connection().execute(
            "insert into text_blob_indexes (run_id, body) values (%s, %s)"
            " on conflict (run_id) do update set body = excluded.body",
            (run_id, body),
        )
