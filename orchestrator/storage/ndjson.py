"""Append-only JSON-lines files that several processes write at once.

Task-board worklogs, the ledger and a run's event log are files of one record per line
that grow only at the end. Writers in any process call :func:`append_lines`: under an
exclusive ``flock`` on the file it cuts a torn tail (the bytes a writer killed mid-write
left after the last newline, which would otherwise be glued to the next record), appends
all of its lines with one ``write`` and syncs them. A writer in another language must do
the same: ``flock`` the file exclusively and append whole lines. Readers hold a shared
``flock`` only while they read a chunk, never while their caller works: what they read is
whole lines plus, perhaps, a dead writer's torn tail, which they ignore (and read again
later, so it is never joined to the bytes a writer puts in its place).

:func:`iter_lines` and :func:`iter_records` read a file from its start with 1-based line
numbers in their errors; :func:`iter_lines_from` and :func:`iter_records_from` resume at a
byte offset and tell the caller the offset after each line, so a snapshot can record how
far it folded. Reading is chunked: memory stays bounded by the longest line, never by the
file.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat

from .._errors import ContractError, UntrustedJSONError, UsageError
from .._text import plural
from ..formats.strict_json import DEFAULT_MAX_DEPTH, loads_strict
from .durable import crash_point, fsync_directory

# ``typing`` is not needed at run time; keeping it out of the imports keeps start-up cheap.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from pathlib import Path
    from typing import Any

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "append_joined_lines",
    "append_lines",
    "iter_lines",
    "iter_lines_from",
    "iter_records",
    "iter_records_from",
    "last_line",
]

DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024
_READ_CHUNK = 1024 * 1024
_BLANK = b" \t\r"
# fdatasync skips timestamps but still flushes the new size, which is all an append needs.
_sync_data = getattr(os, "fdatasync", os.fsync)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_APPEND_FLAGS = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | _NOFOLLOW
# Without O_NONBLOCK, opening a FIFO with no writer would hang before fstat could refuse it.
_READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0)


def append_lines(path: Path, lines: Sequence[bytes], *, durable: bool = True) -> None:
    """Append ``lines`` to ``path`` as one write, safe with other processes appending too.

    Each item must be one complete line: it ends with ``\\n`` and holds no other newline
    (``UsageError``, a ``ValueError``, otherwise; nothing is written). The file is created
    (mode 0o644) if missing. Under an exclusive ``flock`` a torn tail is cut, every line
    is written with a single ``write``, and with ``durable`` the data is synced before the
    lock is released (the directory too, when these are the file's first lines). Another
    process's lines therefore never interleave with these, and a line is never glued to
    the remains of a killed writer's. If the write fails (a full disk) the file is cut
    back to where it was.
    """
    data = _joined_lines(path, lines)
    if data:
        _append(path, data, durable=durable)


def append_joined_lines(path: Path, data: bytes, *, durable: bool = True) -> None:
    """:func:`append_lines` for lines already joined into ``data``, which must end in ``\\n``.

    For callers that build one buffer of encoder-made lines; the lines inside are not
    checked for stray newlines.
    """
    if data and not data.endswith(b"\n"):
        raise UsageError(f"{path}: the data to append does not end with a newline")
    if data:
        _append(path, data, durable=durable)


def iter_lines(
    path: Path,
    *,
    source: str | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> Iterator[tuple[int, bytes]]:
    """Yield ``(line_number, line)`` for each complete, non-blank line of ``path``.

    Line numbers are 1-based and count blank lines too, so they match an editor's. A line
    is returned without its ``\\n``; blank lines (nothing but spaces, tabs or ``\\r``) are
    skipped; a final line without ``\\n`` is a write still in progress or torn by a crash,
    and is not returned. A line longer than ``max_line_bytes`` raises
    ``UntrustedJSONError`` (rule ``too-large``) naming ``source`` (default: the path) and
    the line number. A missing file raises ``FileNotFoundError``.
    """
    name = source if source is not None else os.fspath(path)
    for number, _start, _end, line in _scan(path, 0, name, max_line_bytes):
        if line.strip(_BLANK):
            yield number, line


def iter_records(
    path: Path,
    *,
    source: str | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    max_depth: int = DEFAULT_MAX_DEPTH,
    allow_lone_surrogates: bool = False,
) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, value)`` for each line of :func:`iter_lines`, parsed strictly.

    Each line goes through :func:`orchestrator.formats.strict_json.loads_strict`; a line it refuses
    raises its ``UntrustedJSONError`` with ``source`` set to ``"<source> line <n>"``, so
    the message names the file and the line (``worklogs/T-1.jsonl line 7: invalid JSON at
    column 7: Expecting value``). ``allow_lone_surrogates`` is for the engine's own records
    (see ``loads_strict``).
    """
    name = source if source is not None else os.fspath(path)
    for number, line in iter_lines(path, source=name, max_line_bytes=max_line_bytes):
        where = f"{name} line {number}"
        yield number, _parse_line(line, where, max_line_bytes, max_depth, allow_lone_surrogates)


def iter_lines_from(
    path: Path,
    offset: int,
    *,
    source: str | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset_after, line)`` for each complete, non-blank line from byte ``offset``.

    ``offset_after`` is the byte offset just past the line's newline: where a later call
    resumes to read only what was appended since. ``offset`` must be 0 or just past a
    newline inside the file, else ``ContractError`` (rule ``offset``): the file is not the
    one the offset was taken from, so the caller should read it from the start. Lines are
    as in :func:`iter_lines`; as line numbers are unknown after a jump (``offset > 0``),
    errors name the byte offset where the line starts (``ledger.ndjson line at byte 4096``).
    """
    name = source if source is not None else os.fspath(path)
    for _number, _start, end, line in _scan(path, offset, name, max_line_bytes):
        if line.strip(_BLANK):
            yield end, line


def iter_records_from(
    path: Path,
    offset: int,
    *,
    source: str | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> Iterator[tuple[int, Any]]:
    """Yield ``(offset_after, value)``: :func:`iter_lines_from`, each line parsed as in
    :func:`iter_records`."""
    name = source if source is not None else os.fspath(path)
    for number, start, end, line in _scan(path, offset, name, max_line_bytes):
        if line.strip(_BLANK):
            where = _line_name(name, number, start, offset)
            yield end, _parse_line(line, where, max_line_bytes, max_depth)


def last_line(path: Path) -> bytes | None:
    """The last complete, non-blank line of ``path`` without its newline (a torn tail is
    not a line); ``None`` when the file is missing or has none. Reads from the end, so
    its cost does not grow with the file."""
    try:
        fd = _open_for_reading(path, os.fspath(path))
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        end = _end_of_last_line(fd, os.fstat(fd).st_size)
        while end > 0:
            start = _end_of_last_line(fd, end - 1)
            line = os.pread(fd, end - 1 - start, start)
            if line.strip(_BLANK):
                return line
            end = start
        return None
    finally:
        os.close(fd)


# --- writing ------------------------------------------------------------------------------


def _append(path: Path, data: bytes, *, durable: bool) -> None:
    fd = _open_for_append(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        start = _cut_torn_tail(fd)
        crash_point(f"before-append {path.name}")
        _write_at_end(fd, data, start, path)
        crash_point(f"before-fsync {path.name}")
        if durable:
            _sync_data(fd)
            if start == 0:
                # These may be the file's first lines: its directory entry must last too.
                fsync_directory(path.parent)
    finally:
        os.close(fd)  # drops the flock


def _joined_lines(path: Path, lines: Sequence[bytes]) -> bytes:
    if isinstance(lines, (bytes, bytearray, memoryview)):
        raise UsageError(
            f"{path}: append_lines takes a sequence of lines, not one bytes object; pass [line]"
        )
    for index, line in enumerate(lines):
        end = line.find(b"\n")
        if end < 0 or end != len(line) - 1:
            problem = "does not end with a newline" if end < 0 else "holds a newline inside it"
            raise UsageError(
                f"{path}: item {index} of the {plural(len(lines), 'line')} to append {problem}; "
                "pass each record as one line ending in b'\\n' (JSON escapes its newlines)"
            )
    return b"".join(lines)


def _open_for_append(path: Path) -> int:
    from .beneath import parent

    try:
        with parent(path) as (directory, name):
            fd = os.open(name, _APPEND_FLAGS | os.O_NONBLOCK, 0o644, dir_fd=directory)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a FIFO with no reader
            raise ContractError(
                "is a FIFO, not a regular file; remove it (the engine makes the file)",
                source=os.fspath(path),
                rule="not-a-file",
            ) from None
        if exc.errno == errno.ELOOP and _NOFOLLOW:
            raise _symlink_error(os.fspath(path)) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ContractError(
            "is not a regular file; remove it (the engine makes the file)",
            source=os.fspath(path),
            rule="not-a-file",
        )
    return fd


def _cut_torn_tail(fd: int) -> int:
    """Cut the bytes after the last newline; return the file's size afterwards.

    Only a writer that died mid-write leaves them (every writer holds the lock while it
    writes, and we hold it now), so they are no record and never will be one.
    """
    size = os.fstat(fd).st_size
    keep = _end_of_last_line(fd, size)
    if keep != size:
        os.ftruncate(fd, keep)
    return keep


def _end_of_last_line(fd: int, size: int) -> int:
    """Offset just past the last newline (0 when there is none)."""
    if size and os.pread(fd, 1, size - 1) == b"\n":  # a whole last line: nearly always
        return size
    end = size
    while end > 0:
        start = max(0, end - 65536)
        block = os.pread(fd, end - start, start)
        newline = block.rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        end = start
    return 0


def _write_at_end(fd: int, data: bytes, start: int, path: Path) -> None:
    """Write all of ``data`` (O_APPEND puts it at the end); on failure cut back to ``start``."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
            if view:
                # Only a short write gets here (a full disk, a file size limit): the one
                # place where a crash leaves part of a line behind.
                crash_point(f"mid-append {path.name}")
    except BaseException:
        # Leave no partial line behind for the next writer to cut.
        with contextlib.suppress(OSError):
            os.ftruncate(fd, start)
        raise


# --- reading ------------------------------------------------------------------------------


def _scan(
    path: Path, offset: int, name: str, max_line_bytes: int
) -> Iterator[tuple[int, int, int, bytes]]:
    """Yield ``(number, start, end, line)`` for every complete line from ``offset``.

    ``number`` counts lines from 1 at ``offset``; ``start`` and ``end`` are the byte
    offsets of the line's first byte and just past its newline; ``line`` lacks the newline.
    """
    fd = _open_for_reading(path, name)
    try:
        if offset:
            _check_offset(fd, offset, name)
        number = 0
        line_start = offset
        while True:
            block = _read_whole_lines(fd, line_start, max_line_bytes)
            if block is None:
                raise _too_long(name, number + 1, line_start, offset, max_line_bytes)
            if not block:
                return
            begin = 0
            for end_in_block in _newlines(block):
                number += 1
                if end_in_block - begin > max_line_bytes:
                    raise _too_long(name, number, line_start, offset, max_line_bytes)
                end = line_start + end_in_block - begin + 1
                yield number, line_start, end, block[begin:end_in_block]
                line_start = end
                begin = end_in_block + 1
    finally:
        os.close(fd)


def _read_whole_lines(fd: int, start: int, max_line_bytes: int) -> bytes | None:
    """Read from ``start`` up to the last newline of a chunk (or of the first line, if longer).

    Returns ``b""`` at the end of the complete lines and None if a line exceeds
    ``max_line_bytes``. Reads hold a shared ``flock``, so no writer is between cutting a
    torn tail and writing: what is read is whole lines and perhaps a dead writer's torn
    tail, which is left for the next call to read again, never glued to what a writer
    puts in its place. Readers hold it only while reading, never while the caller works.
    """
    fcntl.flock(fd, fcntl.LOCK_SH)
    try:
        chunk = os.pread(fd, _READ_CHUNK, start)
        last = chunk.rfind(b"\n")
        if last >= 0:
            return chunk[: last + 1]
        # One line longer than a chunk, or the end of the file: read on to its newline.
        pieces = [chunk]
        size = len(chunk)
        while chunk:
            if size > max_line_bytes:
                return None
            chunk = os.pread(fd, _READ_CHUNK, start + size)
            newline = chunk.find(b"\n")
            if newline >= 0:
                pieces.append(chunk[: newline + 1])
                return b"".join(pieces)
            pieces.append(chunk)
            size += len(chunk)
        return b""  # no newline before the end: nothing, or a torn tail
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _newlines(block: bytes) -> Iterator[int]:
    """Offsets of every newline in ``block``."""
    newline = block.find(b"\n")
    while newline >= 0:
        yield newline
        newline = block.find(b"\n", newline + 1)


def _open_for_reading(path: Path, name: str) -> int:
    from .beneath import parent

    try:
        with parent(path) as (directory, entry):
            fd = os.open(entry, _READ_FLAGS, dir_fd=directory)
    except OSError as exc:
        if exc.errno == errno.ELOOP and _NOFOLLOW:
            raise _symlink_error(name) from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise ContractError(
            "is not a regular file; point to a JSON-lines file",
            source=name,
            rule="not-a-file",
        )
    return fd


def _check_offset(fd: int, offset: int, name: str) -> None:
    size = os.fstat(fd).st_size
    if offset < 0 or offset > size or os.pread(fd, 1, offset - 1) != b"\n":
        raise ContractError(
            f"byte offset {offset} is not the start of a line (the file has "
            f"{plural(size, 'byte')}); "
            "the file is not the one the offset was taken from: read it from the start",
            source=name,
            rule="offset",
        )


def _too_long(
    name: str, number: int, start: int, offset: int, max_line_bytes: int
) -> UntrustedJSONError:
    return UntrustedJSONError(
        f"is longer than the limit of {max_line_bytes} bytes; "
        "write smaller records or raise max_line_bytes",
        source=_line_name(name, number, start, offset),
        rule="too-large",
    )


def _line_name(name: str, number: int, start: int, offset: int) -> str:
    return f"{name} line {number}" if offset == 0 else f"{name} line at byte {start}"


def _parse_line(
    line: bytes,
    where: str,
    max_line_bytes: int,
    max_depth: int,
    allow_lone_surrogates: bool = False,
) -> Any:
    try:
        return loads_strict(
            line,
            source=where,
            max_bytes=max_line_bytes,
            max_depth=max_depth,
            allow_lone_surrogates=allow_lone_surrogates,
        )
    except UntrustedJSONError as exc:
        # The document is one line: "at line 1, column 7" would contradict "line 7".
        detail = exc.detail.replace("at line 1, column ", "at column ", 1)
        if detail == exc.detail:
            raise
        raise UntrustedJSONError(
            detail, source=exc.source, json_path=exc.json_path, rule=exc.rule
        ) from None


def _symlink_error(name: str) -> ContractError:
    return ContractError(
        "is a symbolic link; use the file itself, not a link",
        source=name,
        rule="symlink",
    )
