"""An answer's body on its way in: written to a file under the run's ``assets/`` as it
arrives, counted whole, kept and hashed up to the cap. A body of any size costs one
read buffer of memory; past the cap nothing more is kept.

The file is a hidden temporary (``.<caseId>.answer.<pid>.tmp``): an accepted answer is
parsed from it and it is removed; a failure's body is renamed into place as the case's
``full_body`` asset, its size and hash already known. One left by a process that died is
swept when the run finishes.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import threading
from pathlib import Path

from ..storage.beneath import open_file, rename, unlink
from ..storage.durable import fsync_directory, sha256_constructor

#: larger reads of a kept body are made in pieces (Linux reads at most about 2 GiB at once)
_READ_PIECE = 1 << 30


class BodyFile:
    """One try's body: :meth:`write` each piece as it arrives; :attr:`kept` bytes (at most
    ``cap``) are in the file, :attr:`total` counts all that came, :attr:`truncated` says
    whether more came than the cap. Safe to write from one thread while another closes."""

    def __init__(self, directory: Path, stem: str, *, cap: int) -> None:
        self.cap = cap
        self.total = 0
        self.kept = 0
        self.path = directory / f".{stem}.{os.getpid()}.tmp"
        self._hash = sha256_constructor()()
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._text: bool | None = True  # None once the end was checked
        self._lock = threading.Lock()
        self._fd: int | None = open_file(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)

    @property
    def room(self) -> int:
        """How much more to read: up to one byte past the cap, to know there is more."""
        return max(0, self.cap + 1 - self.total)

    @property
    def truncated(self) -> bool:
        return self.total > self.cap

    @property
    def sha256(self) -> str:
        """The hash of the kept bytes, in hex."""
        return self._hash.hexdigest()  # type: ignore[no-any-return]

    def write(self, chunk: bytes) -> None:
        """Count ``chunk``; keep what of it fits under the cap."""
        with self._lock:
            if self._fd is None:  # given up on (a try past its time): nothing more is kept
                return
            self.total += len(chunk)
            keep = chunk[: max(0, self.cap - self.kept)]
            if not keep:
                return
            view = memoryview(keep)
            while view:
                view = view[os.write(self._fd, view) :]
            self._hash.update(keep)
            self.kept += len(keep)
            if self._text:
                try:
                    self._utf8.decode(keep)
                except UnicodeDecodeError:
                    self._text = False

    def is_text(self) -> bool:
        """Whether the kept bytes are UTF-8 text, whole (a body cut inside a character
        is not)."""
        if self._text:
            try:
                self._utf8.decode(b"", final=True)
            except UnicodeDecodeError:
                self._text = False
            else:
                self._text = None
        return self._text is not False

    def head(self, size: int) -> bytes:
        """The first ``size`` kept bytes (fewer if fewer were kept)."""
        return self._read(min(size, self.kept))

    def read(self) -> bytes:
        """Every kept byte, read in one buffer of their size."""
        return self._read(self.kept)

    def _read(self, size: int) -> bytes:
        with self._lock:
            assert self._fd is not None, "read after the body file was closed"
            first = os.pread(self._fd, min(size, _READ_PIECE), 0)
            if len(first) == size:
                return first
            pieces = [first]
            offset = len(first)
            while offset < size:
                piece = os.pread(self._fd, min(size - offset, _READ_PIECE), offset)
                if not piece:
                    break
                pieces.append(piece)
                offset += len(piece)
            return b"".join(pieces)

    def keep_as(self, path: Path, *, durable: bool = True) -> None:
        """Move the kept bytes to ``path`` (a file under the same directory tree)."""
        with self._lock:
            fd, self._fd = self._fd, None
        assert fd is not None, "the body file was closed before it was kept"
        try:
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        try:
            rename(self.path, path)
        except BaseException:
            with contextlib.suppress(OSError):
                unlink(self.path)
            raise
        if durable:
            fsync_directory(path.parent)

    def discard(self) -> None:
        """Close and remove the file (no matter whether it was kept already)."""
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is None:
            return
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            unlink(self.path)
