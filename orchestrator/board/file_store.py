"""The file store of a task board: one directory, as ``docs/board.md`` describes it.

``ledger.ndjson`` (appended under ``board.lock``, a torn last line cut by the next writer)
and ``ledger.snapshot.json``, ``board.json``, ``packets/``, ``results/``, ``verdicts/``,
``heartbeats/`` and the worklogs. A position in the ledger is a byte offset in
``ledger.ndjson``. Implements :class:`orchestrator._ports.BoardStore`; the board's logic
is the same over this store and a database.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .._ports import (
    AppendLedgerInput,
    BoardDocumentInput,
    HeartbeatInput,
    LedgerLines,
    LedgerSnapshot,
    ReadLedgerInput,
    ReplaceLedgerInput,
    WorklogInput,
)
from ..storage import beneath
from ..storage.durable import atomic_write, crash_point, fsync_directory, sha256_hex
from ..storage.files import STATE_MAX_BYTES, read_regular_file
from ..storage.ndjson import append_joined_lines

LEDGER_FILE = "ledger.ndjson"
SNAPSHOT_FILE = "ledger.snapshot.json"
LOCK_FILE = "board.lock"
INFO_FILE = "board.json"
SNAPSHOT_FORMAT = "orchestrator.ledger-snapshot.v1"
HEARTBEAT_MAX_BYTES = 256  # one RFC 3339 time
DOCUMENT_MAX_BYTES = 16 * 1024 * 1024
SUBDIRECTORIES = ("worklogs", "packets", "results", "verdicts", "heartbeats")


class FileBoardStore:
    """A board kept in ``directory``; cheap to construct, touches nothing until used."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / LEDGER_FILE
        self.snapshot_path = directory / SNAPSHOT_FILE
        self.lock_path = directory / LOCK_FILE
        self.location = str(directory)
        self.ledger_location = str(self.path)
        self.cli_arguments = f"--board {directory}"
        self.ask_context: dict[str, str] = {}
        # The last whole line read or appended, and the offset after it: what a snapshot
        # taken there checks the ledger against.
        self._last_line = b""
        self._last_end = 0
        # Which file the positions given out are in: a compaction puts a new one in its
        # place, where an old position means nothing.
        self._file_id: tuple[int, int] | None = None

    def close(self) -> None:
        """Nothing to close: every file is opened and closed by the call that needs it."""

    # -- the ledger -----------------------------------------------------------------------

    @contextmanager
    def locked(self) -> Iterator[None]:
        import fcntl

        fd = beneath.open_file(self.lock_path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing drops the flock

    def read_ledger(self, request: ReadLedgerInput) -> LedgerLines:
        try:
            fd = beneath.open_file(self.path, os.O_RDONLY)
        except FileNotFoundError:
            self._file_id = None
            return LedgerLines(data=b"", end=0, restart=request.after > 0)
        with open(fd, "rb") as ledger:
            info = os.fstat(ledger.fileno())  # size and identity of the file read, not a newer one
            file_id = (info.st_dev, info.st_ino)
            replaced = self._file_id is not None and file_id != self._file_id
            self._file_id = file_id
            if info.st_size < request.after or (request.after and replaced):
                return LedgerLines(data=b"", end=0, restart=True)
            if info.st_size == request.after:
                return LedgerLines(data=b"", end=request.after)
            ledger.seek(request.after)
            data = ledger.read()
        whole = data.rfind(b"\n") + 1  # a torn last line is left for the next writer to cut
        end = request.after + whole
        if whole:
            self._last_line = data[data.rfind(b"\n", 0, whole - 1) + 1 : whole]
            self._last_end = end
        return LedgerLines(data=data[:whole], end=end)

    def append_ledger(self, request: AppendLedgerInput) -> int:
        data = b"".join(line.data for line in request.lines)
        append_joined_lines(self.path, data)
        crash_point("after-append ledger")
        end = request.after + len(data)  # a torn line after ``after`` was cut first
        if request.lines:
            self._last_line, self._last_end = request.lines[-1].data, end
        return end

    def load_snapshot(self) -> LedgerSnapshot | None:
        try:
            size = os.stat(self.path).st_size
        except FileNotFoundError:
            return None
        if size == 0:
            return None
        try:
            raw = read_regular_file(self.snapshot_path, max_bytes=STATE_MAX_BYTES)
            document = json.loads(raw)
            offset, length = int(document["offset"]), int(document["last_line_length"])
            if document.get("format") != SNAPSHOT_FORMAT or not 0 < offset <= size:
                return None
            with open(beneath.open_file(self.path, os.O_RDONLY), "rb") as ledger:
                ledger.seek(offset - length)
                last_line = ledger.read(length)
                info = os.fstat(ledger.fileno())
            if sha256_hex(last_line) != document["last_line_sha256"]:
                return None  # the ledger is not the one the snapshot was taken of
            snapshot = LedgerSnapshot(
                position=offset,
                seq=int(document["seq"]),
                body={"rows": document["rows"], "delta_index": document["delta_index"]},
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None  # no snapshot, or one we cannot trust: fold the whole ledger
        self._last_line, self._last_end = last_line, offset
        self._file_id = (info.st_dev, info.st_ino)  # the file the snapshot's offset is in
        return snapshot

    def save_snapshot(self, request: LedgerSnapshot) -> None:
        if request.position != self._last_end:
            return  # not at a line this store has seen: no snapshot rather than a wrong one
        document = {
            "format": SNAPSHOT_FORMAT,
            "seq": request.seq,
            "offset": request.position,
            "last_line_sha256": sha256_hex(self._last_line),
            "last_line_length": len(self._last_line),
            **request.body,
        }
        atomic_write(self.snapshot_path, json.dumps(document, separators=(",", ":")).encode())

    def replace_ledger(self, request: ReplaceLedgerInput) -> None:
        """Write the compacted ledger beside the old one and rename it over it (a reader
        sees one or the other, whole); the snapshot file, whose offsets are the old
        ledger's, goes first."""
        from ..storage.durable import remove_file

        if remove_file(self.snapshot_path):
            fsync_directory(self.directory)
        atomic_write(self.path, request.snapshot + request.tail)
        info = os.stat(self.path)
        self._file_id = (info.st_dev, info.st_ino)
        self._last_line, self._last_end = b"", 0

    # -- the board ------------------------------------------------------------------------

    def board_exists(self) -> bool:
        return (self.directory / INFO_FILE).exists()

    def read_info(self) -> bytes | None:
        try:
            return read_regular_file(self.directory / INFO_FILE, max_bytes=DOCUMENT_MAX_BYTES)
        except FileNotFoundError:
            return None

    def info_location(self) -> str:
        return str(self.directory / INFO_FILE)

    def create_board(self, info: bytes) -> bool:
        for sub in ("", *SUBDIRECTORIES):
            beneath.make_directories(self.directory / sub)
        # Their entries last before board.json says the board exists (its write syncs the
        # board's directory again, for its own entry).
        fsync_directory(self.directory.parent)
        fsync_directory(self.directory)
        atomic_write(self.directory / INFO_FILE, info)
        return True

    def document_path(self, request: BoardDocumentInput) -> Path:
        return self.directory / request.kind / f"{request.task_id}.{request.attempt}.json"

    def document_location(self, request: BoardDocumentInput) -> str:
        return str(self.document_path(request))

    def write_document(self, request: BoardDocumentInput) -> None:
        atomic_write(self.document_path(request), request.data)

    def read_document(self, request: BoardDocumentInput) -> bytes | None:
        try:
            return read_regular_file(self.document_path(request), max_bytes=DOCUMENT_MAX_BYTES)
        except FileNotFoundError:
            return None

    def write_heartbeat(self, request: HeartbeatInput) -> None:
        path = self.directory / "heartbeats" / request.task_id
        atomic_write(path, request.at.encode() + b"\n", durable=False)

    def read_heartbeat(self, task_id: str) -> str | None:
        path = self.directory / "heartbeats" / task_id
        try:
            return read_regular_file(path, max_bytes=HEARTBEAT_MAX_BYTES).decode().strip()
        except (FileNotFoundError, ValueError):
            return None

    def worklog_file(self, path: str) -> Path:
        return self.directory / path

    def append_worklog(self, request: WorklogInput) -> None:
        from ..storage.ndjson import append_lines

        target = self.worklog_file(request.path)
        beneath.make_directories(target.parent)
        append_lines(target, [request.line])

    def read_worklog(self, path: str) -> list[Any]:
        from ..storage.ndjson import iter_records

        target = self.worklog_file(path)
        beneath.make_directories(target.parent)
        if not beneath.is_file(target):
            return []
        return [record for _, record in iter_records(target)]

    def worklog_has_entry(self, request: WorklogInput) -> bool:
        """The last line is looked at first (where such an entry almost always is)."""
        target = self.worklog_file(request.path)
        beneath.make_directories(target.parent)
        if not beneath.is_file(target):
            return False
        from ..storage.ndjson import iter_records

        with open(beneath.open_file(target, os.O_RDONLY), "rb") as worklog:
            size = worklog.seek(0, 2)
            worklog.seek(max(0, size - 65536))
            tail = worklog.read().rstrip(b"\n").rpartition(b"\n")[2]
        try:
            if json.loads(tail).get("x_delta_id") == request.delta_id:
                return True
        except (ValueError, AttributeError):
            pass
        return any(r.get("x_delta_id") == request.delta_id for _, r in iter_records(target))

    @contextmanager
    def maintenance(self, *, wait: float | None) -> Iterator[bool]:
        from .maintenance import maintenance, maintenance_if_free

        if wait is None:
            with maintenance_if_free(self.directory) as held:
                yield held
        else:
            with maintenance(self.directory, timeout=wait):
                yield True

    def sweep(self) -> None:
        from ..storage.durable import sweep_temporaries

        for sub in ("", "packets", "results", "verdicts", "heartbeats"):
            sweep_temporaries(self.directory / sub)
