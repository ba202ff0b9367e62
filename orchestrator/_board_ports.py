"""The task board's ports: the store of a board's ledger and documents, which
``orchestrator.board`` writes through and ``orchestrator.adapters`` implements (in a
directory and on PostgreSQL). Re-exported by ``orchestrator._ports``.

May import: ``formats`` and ``orchestrator._errors``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

# -- the task board's store ---------------------------------------------------------------
#
# A board keeps its ledger (delta lines), its documents (board info, packets, results,
# verdicts), heartbeats and worklogs in a store: a directory (``orchestrator.board.file_store``)
# or a database (``orchestrator.adapters.postgres.task_board``). The board's logic (the fold,
# the judging, the gateway, dispatch) is one code path over both; a store only keeps bytes
# and says where it is. Every method that takes more than a name takes an input object.


@attrs.frozen(kw_only=True)
class ReadLedgerInput:
    """Read the ledger's whole lines after ``after``, a position a read, an append or a
    snapshot of this store gave (0: from the start)."""

    after: int = 0


@attrs.frozen(kw_only=True)
class LedgerLines:
    """Whole ledger lines, each ending in ``\\n``, in ledger order, and the position after
    them. ``restart``: the ledger is no longer the one ``after`` was a position in (it was
    replaced): read it again from the start."""

    data: bytes
    end: int
    restart: bool = False


@attrs.frozen(kw_only=True)
class LedgerLine:
    """One delta as the ledger keeps it: ``data`` is its compact JSON and ``\\n``, exactly
    the bytes of a ``ledger.ndjson`` line."""

    seq: int
    delta_id: str
    task_id: str
    data: bytes


@attrs.frozen(kw_only=True)
class AppendLedgerInput:
    """Deltas judged under the writers' lock (see :meth:`LedgerStore.locked`), numbered on
    from the head the writer folded; ``after``: the position that head was read to."""

    lines: Sequence[LedgerLine]
    after: int


@attrs.frozen(kw_only=True)
class LedgerSnapshot:
    """The fold of the ledger up to ``position`` (head ``seq``): ``body`` is the board's
    (rows and delta index), the position the store's."""

    position: int
    seq: int
    body: dict[str, Any]


@attrs.frozen(kw_only=True)
class ReplaceLedgerInput:
    """A compacted ledger: ``snapshot`` (one line, with its ``\n``) folds every delta up
    to and including ``seq``; ``tail`` is the ledger's whole lines after them, unchanged."""

    snapshot: bytes
    seq: int
    tail: bytes


@runtime_checkable
class LedgerStore(Protocol):
    """Where a board's ledger lines live: appended under one writers' lock, read by
    anyone from a position on."""

    #: where the ledger is, for messages (a file path, or a board in a database)
    ledger_location: str

    def locked(self) -> Any:
        """A context manager holding the board's writers' lock (waiting for it). Every
        read made inside sees every append made before; the reads, the judging and
        :meth:`append_ledger` inside it are one step no other writer enters (in a
        database: one transaction, rolled back when the block raises)."""
        ...

    def read_ledger(self, request: ReadLedgerInput) -> LedgerLines: ...

    def append_ledger(self, request: AppendLedgerInput) -> int:
        """Append the lines (inside :meth:`locked`); returns the position after them. A
        store that can refuses a ``delta_id`` or sequence number already there."""
        ...

    def load_snapshot(self) -> LedgerSnapshot | None:
        """The stored fold, if there is one that matches the ledger as it is."""
        ...

    def save_snapshot(self, request: LedgerSnapshot) -> None: ...

    def replace_ledger(self, request: ReplaceLedgerInput) -> None:
        """Replace the ledger by its compacted form (inside :meth:`locked`), whole or not at
        all: a reader sees the old ledger or the new one. A reader's position in the old
        one reads as ``restart``."""
        ...


@attrs.frozen(kw_only=True)
class BoardDocumentInput:
    """A document of one attempt at a task: its ``kind`` (``packets``, ``results``,
    ``verdicts``), written whole."""

    kind: str
    task_id: str
    attempt: int
    data: bytes = b""


@attrs.frozen(kw_only=True)
class WorklogInput:
    """One worklog line (JSON and ``\\n``) for the worklog at ``path`` (the task's
    ``worklog_path``, normalised); ``delta_id``: the ledger delta the line explains."""

    path: str
    line: bytes
    delta_id: str | None = None


@attrs.frozen(kw_only=True)
class HeartbeatInput:
    task_id: str
    at: str  # RFC 3339


class BoardStore(LedgerStore, Protocol):
    """Everything a task board keeps: the ledger, ``board.json``, the attempts'
    documents, heartbeats and worklogs, and the lock of its maintenance passes."""

    #: where the board is, for messages and for the asks of its tasks (``x_board``)
    location: str
    #: the arguments that name this board to ``orchestrate board`` (``--board DIR``)
    cli_arguments: str
    #: what the asks of this board's tasks carry besides ``x_board`` and ``x_packet`` so
    #: a subagent elsewhere reaches the board (a directory's: nothing)
    ask_context: dict[str, str]

    def close(self) -> None: ...

    def board_exists(self) -> bool: ...

    def read_info(self) -> bytes | None:
        """``board.json``'s bytes, ``None`` when there is no board."""
        ...

    def create_board(self, info: bytes) -> bool:
        """Make the board, ``info`` its ``board.json``; durable once it returns. False when
        another writer made the board first (its ``board.json`` is kept)."""
        ...

    def write_document(self, request: BoardDocumentInput) -> None:
        """Write the document whole and durably, replacing an earlier one."""
        ...

    def read_document(self, request: BoardDocumentInput) -> bytes | None: ...

    def document_location(self, request: BoardDocumentInput) -> str:
        """Where the document is, for messages and asks (a path, or a name)."""
        ...

    def write_heartbeat(self, request: HeartbeatInput) -> None:
        """Record a heartbeat (a lost one is harmless: the next one replaces it)."""
        ...

    def read_heartbeat(self, task_id: str) -> str | None:
        """The last heartbeat's text as written, ``None`` when there is none."""
        ...

    def append_worklog(self, request: WorklogInput) -> None:
        """Append one line, whole and durably, with other writers appending too."""
        ...

    def read_worklog(self, path: str) -> list[Any]:
        """The worklog's records in order; a line that is not strict JSON raises."""
        ...

    def worklog_has_entry(self, request: WorklogInput) -> bool:
        """Whether the worklog holds the line written for ``request.delta_id``."""
        ...

    def maintenance(self, *, wait: float | None) -> Any:
        """A context manager holding the board's maintenance lock, yielding True; waiting
        ``wait`` seconds at most (then :class:`InstanceBusyError`), or with ``None`` not
        waiting at all (yielding False when another pass holds it)."""
        ...

    def sweep(self) -> None:
        """Clear what writers killed mid-write left behind."""
        ...
