"""Texts stored once, by content: a prompt, an answer or a step's output over
:data:`THRESHOLD` bytes is kept as one immutable blob named by the SHA-256 of its text,
and whoever held the text keeps its reference (``sha256:<hex>``) instead.

A text that extends an earlier one of the same run (a growing transcript: each prompt is
the last one plus a new tail) is stored as a reference to that one plus the tail. Which
earlier text it extends is chosen as Subversion's skip-deltas do: the n-th text of a line
of growing texts refers to the (n & (n - 1))-th, so a chain is at most log2(n) links long
(reading stays fast) while the tails stored add up to about (n / 2) * log2(n) of them, not
the n * n / 2 of every prompt in full. A run's small index (the texts it may still refer
to: digest, length, number in its line) is kept beside the blobs; losing it costs a full
copy, never a wrong text.

Reading a blob rebuilds its text and checks it against the digest that names it: a blob
changed on disk (or in its table) is refused naming it, never returned.

Where the blobs live is a :class:`BlobBackend`'s: :class:`FileBlobBackend` keeps them
under ``.orchestrator/blobs/`` (each written whole, durably, and never replaced); the
PostgreSQL store keeps them in its ``text_blobs`` table.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from pathlib import Path
from typing import Protocol

from .._errors import HistoryDamagedError, UsageError
from . import beneath
from .durable import atomic_write, create_new, fsync_directory, sha256_hex
from .files import read_regular_file

__all__ = [
    "BLOB_DIR",
    "REF_PREFIX",
    "THRESHOLD",
    "BlobBackend",
    "FileBlobBackend",
    "TextBlobs",
    "is_ref",
]

#: Texts of at least this many UTF-8 bytes are stored as blobs; shorter ones stay inline.
THRESHOLD = 4096
#: Where the file backend keeps blobs, under the work directory.
BLOB_DIR = Path(".orchestrator") / "blobs"
REF_PREFIX = "sha256:"
#: The longest chain of links a reader follows (skip-deltas keep chains to log2(n)).
MAX_DEPTH = 48
#: How many of a run's texts its index names at most (the skip-delta bases kept first).
INDEX_LIMIT = 64
#: The most a blob file may hold (the reader's bound).
BLOB_MAX_BYTES = 256 * 1024 * 1024

_MAGIC = b"orchestrate-blob 1 "
_HEX = re.compile(r"[0-9a-f]{64}")
_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def is_ref(value: object) -> bool:
    """Whether ``value`` is a blob reference (``sha256:`` and 64 lowercase hex digits)."""
    return (
        isinstance(value, str)
        and value.startswith(REF_PREFIX)
        and _HEX.fullmatch(value[len(REF_PREFIX) :]) is not None
    )


class BlobBackend(Protocol):
    """Where blobs and runs' indexes are kept."""

    def write_blob(self, digest: str, body: bytes) -> None:
        """Keep ``body`` under ``digest``, durably; a blob already there stays as it is."""

    def read_blob(self, digest: str) -> bytes | None:
        """The body kept under ``digest``, or ``None`` when there is none."""

    def where(self, digest: str) -> str:
        """A name for the blob in messages (its file, its row)."""

    def read_index(self, run_id: str) -> bytes | None:
        """The run's index as last written, or ``None``."""

    def write_index(self, run_id: str, body: bytes) -> None:
        """Replace the run's index (need not be durable: it is only a hint)."""


class FileBlobBackend:
    """Blobs as files ``<workdir>/.orchestrator/blobs/<aa>/<digest>``, written whole and
    durably, never replaced; runs' indexes as ``index/<run_id>.json`` beside them."""

    def __init__(self, workdir: Path) -> None:
        self.root = Path(workdir) / BLOB_DIR

    def _path(self, digest: str) -> Path:
        return self.root / digest[:2] / digest

    def write_blob(self, digest: str, body: bytes) -> None:
        path = self._path(digest)
        if path.exists():
            return
        _make_durably(path.parent)
        with contextlib.suppress(FileExistsError):  # another writer stored it first
            create_new(path, body)

    def read_blob(self, digest: str) -> bytes | None:
        try:
            return read_regular_file(self._path(digest), max_bytes=BLOB_MAX_BYTES)
        except FileNotFoundError:
            return None

    def where(self, digest: str) -> str:
        return str(self._path(digest))

    def read_index(self, run_id: str) -> bytes | None:
        try:
            return read_regular_file(self.root / "index" / f"{run_id}.json", max_bytes=1 << 20)
        except FileNotFoundError:
            return None

    def write_index(self, run_id: str, body: bytes) -> None:
        folder = self.root / "index"
        _make_durably(folder)
        atomic_write(folder / f"{run_id}.json", body, durable=False)


class _Entry:
    """One text a run may still extend: its digest, byte length and number in its line."""

    __slots__ = ("digest", "length", "number")

    def __init__(self, digest: str, length: int, number: int) -> None:
        self.digest = digest
        self.length = length
        self.number = number


def _lowbit(number: int) -> int:
    return number & -number if number else 1 << 62


class TextBlobs:
    """Texts stored once through a :class:`BlobBackend`: :meth:`put` a text, keep the
    reference it returns, :meth:`get` the text back (checked against its digest)."""

    def __init__(self, backend: BlobBackend, *, threshold: int = THRESHOLD) -> None:
        self.backend = backend
        self.threshold = threshold
        self._indexes: dict[str, list[_Entry]] = {}

    # -- writing ----------------------------------------------------------------------

    def worth_storing(self, text: str) -> bool:
        """Whether ``text`` is long enough to be kept as a blob rather than inline."""
        return len(text) * 4 >= self.threshold and len(_utf8(text)) >= self.threshold

    def put(self, text: str, *, run_id: str | None = None) -> str:
        """Store ``text`` (once: a text stored before is not written again) and return its
        reference. With ``run_id``, a text that extends one of the run's recent texts is
        stored as a link to one of them plus the new tail."""
        data = _utf8(text)
        digest = sha256_hex(data)
        index = self._index(run_id) if run_id is not None else []
        parent = self._parent(data, index)
        if self.backend.read_blob(digest) is None:
            base = self._base(data, parent, index)
            if base is None:
                body = _MAGIC + b"full 0\n" + data
            else:
                entry, depth = base
                header = f"delta {depth} {entry.digest} {entry.length}\n".encode("ascii")
                body = _MAGIC + header + data[entry.length :]
            self.backend.write_blob(digest, body)
        if run_id is not None:
            self._note(run_id, index, digest, len(data), parent)
        return REF_PREFIX + digest

    @staticmethod
    def _parent(data: bytes, index: list[_Entry]) -> _Entry | None:
        """The longest of the run's recent texts that ``data`` extends, if any."""
        for entry in sorted(index, key=lambda e: -e.length):
            if entry.length < len(data) and _starts_with(data, entry):
                return entry
        return None

    def _base(
        self, data: bytes, parent: _Entry | None, index: list[_Entry]
    ) -> tuple[_Entry, int] | None:
        """The earlier text to link ``data`` to and the link's depth, or ``None`` (a full
        copy): ``data`` is number n = parent's + 1 of its line, and links to the entry
        numbered ``n & (n - 1)`` (a prefix of the parent, so of ``data`` too)."""
        if parent is None:
            return None
        number = parent.number + 1
        target = number & (number - 1)
        for entry in index:
            if (
                entry.number == target
                and entry.length <= parent.length
                and (entry is parent or _starts_with(data, entry))
            ):
                depth = self._depth(entry.digest)
                if depth is not None and depth + 1 < MAX_DEPTH:
                    return entry, depth + 1
        return None

    def _depth(self, digest: str) -> int | None:
        body = self.backend.read_blob(digest)
        if body is None or not body.startswith(_MAGIC):
            return None
        head = body[len(_MAGIC) : body.find(b"\n")].split(b" ")
        try:
            return int(head[1])
        except (IndexError, ValueError):
            return None

    # -- the run's index --------------------------------------------------------------

    def _index(self, run_id: str) -> list[_Entry]:
        if not _RUN_NAME.fullmatch(run_id):
            raise UsageError(f"run id {run_id!r} cannot name a blob index")
        cached = self._indexes.get(run_id)
        if cached is not None:
            return cached
        entries: list[_Entry] = []
        raw = self.backend.read_index(run_id)
        if raw is not None:
            try:  # a hint only: an index that does not read is started again
                for digest, length, number in json.loads(raw):
                    if _HEX.fullmatch(digest) and isinstance(length, int):
                        entries.append(_Entry(digest, length, int(number)))
            except (ValueError, TypeError):
                entries = []
        self._indexes[run_id] = entries
        return entries

    def _note(
        self, run_id: str, index: list[_Entry], digest: str, length: int, parent: _Entry | None
    ) -> None:
        if any(entry.digest == digest for entry in index):
            return
        index.append(_Entry(digest, length, parent.number + 1 if parent is not None else 0))
        newest = max(e.number for e in index)
        # Keep what a later text of the line may link to (n with n + lowbit(n) beyond the
        # newest: the number-0 texts always), newest first, no more than INDEX_LIMIT.
        keep = [e for e in index if e.number + _lowbit(e.number) > newest]
        keep.sort(key=lambda e: -e.number)
        index[:] = keep[:INDEX_LIMIT]
        body = json.dumps([[e.digest, e.length, e.number] for e in index]).encode("ascii")
        self.backend.write_index(run_id, body)

    # -- reading ----------------------------------------------------------------------

    def links(self, ref: str) -> list[str]:
        """The digests reading ``ref`` needs, from its own to its full copy's: a prune
        that keeps a text must keep each of them (a link names its base)."""
        if not is_ref(ref):
            raise UsageError(f"{ref!r} is not a text reference ('{REF_PREFIX}' and 64 hex digits)")
        chain = [ref[len(REF_PREFIX) :]]
        for _ in range(MAX_DEPTH):
            body = self.backend.read_blob(chain[-1])
            if body is None or not body.startswith(_MAGIC) or b"\n" not in body:
                break
            head = body[len(_MAGIC) : body.find(b"\n")].decode("ascii", "replace").split(" ")
            if head[0] != "delta" or len(head) != 4 or not _HEX.fullmatch(head[2]):
                break
            chain.append(head[2])
        return chain

    def get(self, ref: str) -> str:
        """The text ``ref`` names, checked against its digest; a blob that is missing or
        does not give back its digest is refused naming it."""
        return self.get_bytes(ref).decode("utf-8", "surrogatepass")

    def get_bytes(self, ref: str) -> bytes:
        if not is_ref(ref):
            raise UsageError(f"{ref!r} is not a text reference ('{REF_PREFIX}' and 64 hex digits)")
        digest = ref[len(REF_PREFIX) :]
        parts: list[bytes] = []
        links: list[str] = []  # the chain, from the text asked for to its full copy
        current = digest
        for _ in range(MAX_DEPTH + 1):
            links.append(current)
            body = self.backend.read_blob(current)
            where = self.backend.where(current)
            if body is None:
                raise HistoryDamagedError(
                    f"text {REF_PREFIX}{current} is missing: no blob at {where}", source=where
                )
            newline = body.find(b"\n")
            if not body.startswith(_MAGIC) or newline < 0:
                raise _damaged(where, "it does not begin as a blob does")
            head = body[len(_MAGIC) : newline].decode("ascii", "replace").split(" ")
            parts.append(body[newline + 1 :])
            if head[0] == "full" and len(head) == 2:
                break
            if head[0] != "delta" or len(head) != 4 or not _HEX.fullmatch(head[2]):
                raise _damaged(where, "its header is not one a blob has")
            current = head[2]
        else:
            raise _damaged(self.backend.where(digest), f"its links run past {MAX_DEPTH}")
        data = b""
        # Each link's text is checked against its own digest, the full copy first: a
        # changed blob is named itself, not the text that links to it.
        for link, part in zip(reversed(links), reversed(parts), strict=True):
            data += part
            if sha256_hex(data) != link:
                raise _damaged(
                    self.backend.where(link),
                    "its text does not give the digest that names it (changed after it was stored)",
                )
        return data


def _make_durably(folder: Path) -> None:
    """Make ``folder`` and any missing parent, never through a link, each new entry
    synced into its parent, so a blob written there lasts a power cut with its path."""
    if folder.is_dir() and not folder.is_symlink():
        return
    _make_durably(folder.parent)
    if beneath.make_directory(folder):
        fsync_directory(folder.parent)


def _damaged(where: str, why: str) -> HistoryDamagedError:
    return HistoryDamagedError(f"blob {where} refused: {why}", source=where)


def _starts_with(data: bytes, entry: _Entry) -> bool:
    return hashlib.sha256(data[: entry.length]).hexdigest() == entry.digest


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")
