"""A power-cut simulator: record a run's file-system operations, then build every disk a
power cut could have left, in the spirit of ALICE, CrashMonkey and LazyFS.

Recording
---------
:func:`recording` monkeypatches, for one run in this interpreter, the ``os`` functions the
durable layer calls (``open`` with or without ``dir_fd``, ``write``, ``pwrite``,
``ftruncate``, ``close``, ``fsync``, ``fdatasync``, ``replace``/``rename`` with
``src_dir_fd``/``dst_dir_fd``, ``unlink``/``remove``, ``mkdir`` (``makedirs`` calls it),
``rmdir``), ``orchestrator.storage.ndjson._sync_data`` (bound at import),
``orchestrator.storage.durable.sync_filesystem`` (the group commit's ``syncfs``), and
``io.open`` / ``builtins.open`` for files opened for writing (a workflow's
``Path.write_text``: its bytes are recorded as one write when the file is closed). The
real call always happens; the operations under the run's root directory are appended to
a log of :class:`Op`:

    create(path, fid)  write(fid, offset, bytes)  truncate(fid, size)  rename(src, dst)
    unlink(path)  mkdir(path)  rmdir(path)  fsync(fid)  fdatasync(fid)  dirsync(dir)
    syncfs

Paths are relative to the root (``dir_fd``-relative names are resolved through the
directory descriptors seen at open, else ``/proc/self/fd/N``). A file is known by a file
id, one per inode: it is given at creation (or in the initial snapshot) and found again
by ``(st_dev, st_ino)`` when the file is opened later, so it follows the file across
renames.

The persistence model
---------------------
A power cut after the first ``k`` operations of the log (the crash point ``k``) keeps

* every *durable* operation: one a later sync before ``k`` covers. ``syncfs`` covers
  everything before it; ``fsync``/``fdatasync`` of a file covers that file's writes and
  truncates before it (its data and size: the model does not tell the two syncs apart);
  a directory sync covers the entry operations in that directory before it (create,
  unlink, mkdir, rmdir, and a rename into or out of it: a rename is one journaled
  change, so a sync of either of its directories makes it durable). Nothing else makes
  anything durable: an ``fsync`` of a file does not make its name durable, and a sync of
  a directory says nothing of its parent's entry for it;
* plus any subset of the non-durable operations, applied in log order, where

  - a file's non-durable writes and truncates persist as a prefix of them, in order, and
    the last write of the prefix may be torn (only its first half reaches the disk);
  - the non-durable entry operations persist as any subset (each independently); one
    that cannot apply to the disk built so far (its parent directory never made it, the
    file it renames is not there) is lost with it;
  - an entry shows its file's content as persisted, whatever happened to its names: data
    belongs to the file (inode), names to directories.

Disks are identified by a hash of their tree (names, kinds, bytes). Between two syncs
every crash point's disks are among those of the last point before the next sync (the
non-durable set only grows, the durable set is the same), so :func:`crash_points` lists
only the points just before each sync operation and the end of the log.

:func:`explore` enumerates every disk of a crash point when its choices are few
(:data:`ENUMERATE_LIMIT`) and otherwise takes a seeded sample that always includes the
empty set, every name without the unsynced bytes (what a rename before its data's sync
leaves), every singleton, every all-but-one and the full set; it returns distinct disks
in rounds over all crash points, so a budget spreads over the whole run.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import itertools
import os
import random
import shutil
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DATA_KINDS = frozenset({"write", "truncate"})
ENTRY_KINDS = frozenset({"create", "rename", "unlink", "mkdir", "rmdir"})
SYNC_KINDS = frozenset({"fsync", "fdatasync", "dirsync", "syncfs"})
ENUMERATE_LIMIT = 64  # choices of a crash point enumerated whole; above it, sampled
RANDOM_PER_POINT = 12  # random choices per sampled crash point, after the structured ones
DIRECTORY = None  # a directory's entry in a disk (a file's entry holds its bytes)


@dataclass(frozen=True)
class Op:
    """One recorded operation; ``path``/``dst`` are relative to the root."""

    kind: str
    path: str = ""
    dst: str = ""
    fid: int = -1
    offset: int = 0
    data: bytes = b""
    size: int = 0

    def directories(self) -> set[str]:
        """The directories whose sync makes this entry operation durable."""
        dirs = {os.path.dirname(self.path)}
        if self.kind == "rename":
            dirs.add(os.path.dirname(self.dst))
        return dirs

    def __str__(self) -> str:
        if self.kind == "write":
            return f"write(fid {self.fid}, offset {self.offset}, {len(self.data)} bytes)"
        if self.kind == "truncate":
            return f"truncate(fid {self.fid}, {self.size})"
        if self.kind == "rename":
            return f"rename({self.path} -> {self.dst})"
        if self.kind in ("fsync", "fdatasync"):
            return f"{self.kind}(fid {self.fid})"
        if self.kind == "create":
            return f"create({self.path}, fid {self.fid})"
        return f"{self.kind}({self.path})" if self.kind != "syncfs" else "syncfs"


@dataclass
class Snapshot:
    """The root's tree when recording began: directories, files (by id) and their bytes."""

    directories: set[str] = field(default_factory=set)
    names: dict[str, int] = field(default_factory=dict)  # file path -> file id
    contents: dict[int, bytes] = field(default_factory=dict)

    @classmethod
    def capture(cls, root: Path) -> tuple[Snapshot, dict[tuple[int, int], int]]:
        """The snapshot of ``root`` and the file ids of its inodes."""
        snapshot, inodes = cls(), {}
        for path in sorted(root.rglob("*")):
            relative = path.relative_to(root).as_posix()
            info = path.lstat()
            if stat.S_ISDIR(info.st_mode):
                snapshot.directories.add(relative)
            elif stat.S_ISREG(info.st_mode):
                fid = len(snapshot.contents)
                snapshot.names[relative] = fid
                snapshot.contents[fid] = path.read_bytes()
                inodes[(info.st_dev, info.st_ino)] = fid
        return snapshot, inodes


@dataclass
class Recording:
    """What :func:`recording` saw: the initial tree and the log of operations."""

    root: Path
    snapshot: Snapshot
    log: list[Op] = field(default_factory=list)


# -- recording -----------------------------------------------------------------------------


class _Recorder:
    """The patched functions of one recording, and the descriptors they track."""

    def __init__(self, recording: Recording, inodes: dict[tuple[int, int], int]) -> None:
        self.rec = recording
        self.root = os.path.realpath(recording.root)
        self.inodes = inodes
        self.next_fid = len(recording.snapshot.contents)
        self.files: dict[int, tuple[int, bool]] = {}  # fd -> (file id, O_APPEND)
        self.dirs: dict[int, str] = {}  # fd -> absolute path of a directory
        self.lock = threading.RLock()
        self.real: dict[str, Any] = {}

    # where things are

    def absolute(self, path: Any, dir_fd: int | None) -> str:
        name = os.fsdecode(os.fspath(path))
        if os.path.isabs(name):
            return os.path.normpath(name)
        if dir_fd is None:
            return os.path.normpath(os.path.join(os.getcwd(), name))
        base = self.dirs.get(dir_fd) or os.readlink(f"/proc/self/fd/{dir_fd}")
        return os.path.normpath(os.path.join(base, name))

    def relative(self, absolute: str) -> str | None:
        if absolute == self.root:
            return ""
        if absolute.startswith(self.root + "/"):
            return absolute[len(self.root) + 1 :]
        return None

    def add(self, op: Op) -> None:
        self.rec.log.append(op)

    def new_fid(self, fd: int) -> int:
        info = os.fstat(fd)
        fid = self.next_fid
        self.next_fid += 1
        self.inodes[(info.st_dev, info.st_ino)] = fid
        return fid

    def fid_of(self, fd: int) -> int:
        info = os.fstat(fd)
        key = (info.st_dev, info.st_ino)
        if key not in self.inodes:  # made under the root without us: from now on, known
            return self.new_fid(fd)
        return self.inodes[key]

    # the patched functions

    def open(self, path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        absolute = self.absolute(path, dir_fd)
        relative = self.relative(absolute)
        existed = os.path.lexists(absolute) if relative is not None else True
        fd: int = self.real["open"](path, flags, mode, dir_fd=dir_fd)
        with self.lock:
            self.files.pop(fd, None)
            self.dirs.pop(fd, None)
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                self.dirs[fd] = absolute
                return fd
            if relative is None:
                return fd
            if not existed:
                fid = self.new_fid(fd)
                self.add(Op("create", path=relative, fid=fid))
            else:
                fid = self.fid_of(fd)
                if flags & os.O_TRUNC and flags & (os.O_WRONLY | os.O_RDWR):
                    self.add(Op("truncate", fid=fid, size=0))
            self.files[fd] = (fid, bool(flags & os.O_APPEND))
        return fd

    def write(self, fd: int, data: Any) -> int:
        with self.lock:
            tracked = self.files.get(fd)
            if tracked is None:
                return self.real["write"](fd, data)  # type: ignore[no-any-return]
            fid, appending = tracked
            offset = os.fstat(fd).st_size if appending else os.lseek(fd, 0, os.SEEK_CUR)
            written: int = self.real["write"](fd, data)
            self.add(Op("write", fid=fid, offset=offset, data=bytes(data[:written])))
            return written

    def pwrite(self, fd: int, data: Any, offset: int) -> int:
        written: int = self.real["pwrite"](fd, data, offset)
        with self.lock:
            if fd in self.files:
                self.add(
                    Op("write", fid=self.files[fd][0], offset=offset, data=bytes(data[:written]))
                )
        return written

    def ftruncate(self, fd: int, size: int) -> None:
        self.real["ftruncate"](fd, size)
        with self.lock:
            if fd in self.files:
                self.add(Op("truncate", fid=self.files[fd][0], size=size))

    def close(self, fd: int) -> None:
        with self.lock:
            self.files.pop(fd, None)
            self.dirs.pop(fd, None)
        self.real["close"](fd)

    def sync(self, kind: str) -> Callable[[int], None]:
        def synced(fd: int) -> None:
            self.real[kind](fd)
            with self.lock:
                if fd in self.files:
                    self.add(Op(kind, fid=self.files[fd][0]))
                elif fd in self.dirs:
                    relative = self.relative(self.dirs[fd])
                    if relative is not None:
                        self.add(Op("dirsync", path=relative))

        return synced

    def sync_filesystem(self, fd: int) -> None:
        self.real["sync_filesystem"](fd)
        with self.lock:
            self.add(Op("syncfs"))

    def rename(self, kind: str) -> Callable[..., None]:
        def renamed(
            src: Any, dst: Any, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None
        ) -> None:
            source = self.relative(self.absolute(src, src_dir_fd))
            target = self.relative(self.absolute(dst, dst_dir_fd))
            self.real[kind](src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
            if source is not None and target is not None:
                with self.lock:
                    self.add(Op("rename", path=source, dst=target))

        return renamed

    def entry(self, kind: str, op_kind: str) -> Callable[..., None]:
        def changed(path: Any, *args: Any, dir_fd: int | None = None) -> None:
            relative = self.relative(self.absolute(path, dir_fd))
            self.real[kind](path, *args, dir_fd=dir_fd)
            if relative is not None:
                with self.lock:
                    self.add(Op(op_kind, path=relative))

        return changed

    def io_open(self, file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        writing = any(c in mode for c in "wax+")
        if not writing or isinstance(file, int) or kwargs.get("opener") is not None:
            return self.real["io_open"](file, mode, *args, **kwargs)
        relative = self.relative(self.absolute(file, None))
        if relative is None:
            return self.real["io_open"](file, mode, *args, **kwargs)

        def opener(name: str, flags: int) -> int:
            return self.open(name, flags, 0o666)

        handle = self.real["io_open"](file, mode, *args, opener=opener, **kwargs)
        fd = handle.fileno()
        start = 0 if "w" in mode else os.fstat(fd).st_size
        return _RecordedFile(self, handle, start)


class _RecordedFile:
    """A file object opened for writing under the root: its bytes from ``start`` are
    recorded as one write when it is closed (buffered writes bypass ``os.write``)."""

    def __init__(self, recorder: _Recorder, handle: Any, start: int) -> None:
        self._recorder, self._handle, self._start = recorder, handle, start

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)

    def __enter__(self) -> _RecordedFile:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[Any]:
        return iter(self._handle)

    def close(self) -> None:
        if self._handle.closed:
            return
        self._handle.flush()
        fd = self._handle.fileno()
        reader = self._recorder.real["open"](f"/proc/self/fd/{fd}", os.O_RDONLY)
        try:
            content = b""
            while chunk := os.pread(reader, 1 << 20, len(content)):
                content += chunk
        finally:
            self._recorder.real["close"](reader)
        with self._recorder.lock:
            tracked = self._recorder.files.pop(fd, None)
            if tracked is not None and len(content) > self._start:
                data = content[self._start :]
                self._recorder.add(Op("write", fid=tracked[0], offset=self._start, data=data))
        self._handle.close()


@contextlib.contextmanager
def recording(root: Path) -> Iterator[Recording]:
    """Record the file-system operations under ``root`` while the block runs."""
    from orchestrator.storage import durable, ndjson

    snapshot, inodes = Snapshot.capture(root)
    rec = Recording(root=root, snapshot=snapshot)
    recorder = _Recorder(rec, inodes)
    patches: list[tuple[Any, str, Any]] = [
        (os, "open", recorder.open),
        (os, "write", recorder.write),
        (os, "pwrite", recorder.pwrite),
        (os, "ftruncate", recorder.ftruncate),
        (os, "close", recorder.close),
        (os, "fsync", recorder.sync("fsync")),
        (os, "fdatasync", recorder.sync("fdatasync")),
        (os, "replace", recorder.rename("replace")),
        (os, "rename", recorder.rename("rename")),
        (os, "unlink", recorder.entry("unlink", "unlink")),
        (os, "remove", recorder.entry("remove", "unlink")),
        (os, "mkdir", recorder.entry("mkdir", "mkdir")),
        (os, "rmdir", recorder.entry("rmdir", "rmdir")),
        (io, "open", recorder.io_open),
        (builtins, "open", recorder.io_open),
    ]
    for module, name, _ in patches:
        key = "io_open" if name == "open" and module is not os else name
        recorder.real.setdefault(key, getattr(module, name))
    # ndjson binds its sync at import; sync_filesystem is the group commit's syncfs.
    patches.append((ndjson, "_sync_data", recorder.sync(ndjson._sync_data.__name__)))
    recorder.real["sync_filesystem"] = durable.sync_filesystem
    patches.append((durable, "sync_filesystem", recorder.sync_filesystem))
    saved = [(module, name, getattr(module, name)) for module, name, _ in patches]
    try:
        for module, name, replacement in patches:
            setattr(module, name, replacement)
        yield rec
    finally:
        for module, name, original in saved:
            setattr(module, name, original)


# -- crash states ----------------------------------------------------------------------------


def crash_points(log: list[Op]) -> list[int]:
    """The crash points worth building: just before each sync, and the end of the log."""
    return [i for i, op in enumerate(log) if op.kind in SYNC_KINDS] + [len(log)]


def durable_operations(log: list[Op], k: int) -> set[int]:
    """Indices of the operations before ``k`` that a later sync before ``k`` covers."""
    durable: set[int] = set()
    synced_files: set[int] = set()
    synced_dirs: set[str] = set()
    everything = False
    for i in range(k - 1, -1, -1):
        op = log[i]
        if op.kind == "syncfs":
            everything = True
        elif op.kind in ("fsync", "fdatasync"):
            synced_files.add(op.fid)
        elif op.kind == "dirsync":
            synced_dirs.add(op.path)
        elif (
            everything
            or (op.kind in DATA_KINDS and op.fid in synced_files)
            or (op.kind in ENTRY_KINDS and op.directories() & synced_dirs)
        ):
            durable.add(i)
    return durable


@dataclass(frozen=True)
class Choice:
    """Which non-durable operations of a crash point reach the disk: the entry operations
    persisted, and per file how many of its non-durable data operations (``torn``: the
    last of them, a write, only half)."""

    entries: frozenset[int]
    data: tuple[tuple[int, int, bool], ...]  # (file id, how many, torn)


@dataclass(frozen=True)
class CrashPoint:
    """The operations of a crash point: the durable ones and the choices over the rest."""

    k: int
    durable: frozenset[int]
    entries: tuple[int, ...]  # non-durable entry operations
    data: dict[int, list[int]]  # file id -> its non-durable data operations, in order

    @classmethod
    def at(cls, log: list[Op], k: int) -> CrashPoint:
        durable = durable_operations(log, k)
        entries, data = [], {}
        for i in range(k):
            if i in durable:
                continue
            if log[i].kind in ENTRY_KINDS:
                entries.append(i)
            elif log[i].kind in DATA_KINDS:
                data.setdefault(log[i].fid, []).append(i)
        return cls(k, frozenset(durable), tuple(entries), data)

    def variants(self, log: list[Op], fid: int) -> list[tuple[int, bool]]:
        """A file's data choices: every prefix of its non-durable operations, and each
        prefix that ends in a write of two bytes or more with that write torn."""
        ops = self.data[fid]
        whole = [(n, False) for n in range(len(ops) + 1)]
        torn = [(n, True) for n in range(1, len(ops) + 1) if len(log[ops[n - 1]].data) >= 2]
        return whole + torn

    def count(self, log: list[Op]) -> int:
        total = 2 ** len(self.entries)
        for fid in self.data:
            total *= len(self.variants(log, fid))
        return total

    def choices(self, log: list[Op], rng: random.Random) -> Iterator[Choice]:
        """Every choice when they are few, else the structured ones and a random sample."""
        fids = sorted(self.data)
        options = [self.variants(log, fid) for fid in fids]

        def make(entries: Any, picks: Any) -> Choice:
            data = tuple((fid, n, torn) for fid, (n, torn) in zip(fids, picks, strict=True))
            return Choice(frozenset(entries), data)

        if self.count(log) <= ENUMERATE_LIMIT:
            for mask in itertools.product((False, True), repeat=len(self.entries)):
                chosen = [i for i, keep in zip(self.entries, mask, strict=True) if keep]
                for picks in itertools.product(*options):
                    yield make(chosen, picks)
            return
        nothing = [o[0] for o in options]
        everything = [(len(self.data[fid]), False) for fid in fids]
        yield make((), nothing)
        # Every name, none of the unsynced bytes: the disk a rename before its data's sync
        # leaves, the classic ordering bug; early, so a small budget meets it.
        yield make(self.entries, nothing)
        yield make(self.entries, everything)
        for i in self.entries:
            yield make((i,), nothing)
            yield make(set(self.entries) - {i}, everything)
        for position, variants in enumerate(options):
            for variant in variants[1:]:
                yield make((), [*nothing[:position], variant, *nothing[position + 1 :]])
                yield make(
                    self.entries, [*everything[:position], variant, *everything[position + 1 :]]
                )
        for _ in range(RANDOM_PER_POINT):
            chosen = [i for i in self.entries if rng.random() < 0.5]
            yield make(chosen, [rng.choice(variants) for variants in options])


Disk = dict[str, "bytes | None"]  # path -> bytes of a file, or DIRECTORY


def build_disk(snapshot: Snapshot, log: list[Op], point: CrashPoint, choice: Choice) -> Disk:
    """The tree a power cut at ``point`` leaves when ``choice`` says what else persisted."""
    directories = set(snapshot.directories) | {""}
    names = dict(snapshot.names)
    contents = {fid: bytearray(data) for fid, data in snapshot.contents.items()}
    keep_data: dict[int, tuple[int, bool]] = {}  # op index -> (bytes kept or -1, torn)
    for fid, count, torn in choice.data:
        for position, index in enumerate(point.data.get(fid, [])[:count]):
            last = position == count - 1
            keep_data[index] = (len(log[index].data) // 2 if torn and last else -1, False)
    for i in range(point.k):
        op = log[i]
        if op.kind in DATA_KINDS:
            if i in point.durable:
                _apply_data(contents, op, -1)
            elif i in keep_data:
                _apply_data(contents, op, keep_data[i][0])
        elif op.kind in ENTRY_KINDS and (i in point.durable or i in choice.entries):
            _apply_entry(directories, names, contents, op)
    disk: Disk = {d: DIRECTORY for d in directories if d}
    disk.update({path: bytes(contents.get(fid, b"")) for path, fid in names.items()})
    return disk


def _apply_data(contents: dict[int, bytearray], op: Op, keep: int) -> None:
    content = contents.setdefault(op.fid, bytearray())
    if op.kind == "truncate":
        del content[op.size :]
        content.extend(b"\0" * (op.size - len(content)))
        return
    data = op.data if keep < 0 else op.data[:keep]
    if len(content) < op.offset:
        content.extend(b"\0" * (op.offset - len(content)))
    content[op.offset : op.offset + len(data)] = data


def _apply_entry(
    directories: set[str], names: dict[str, int], contents: dict[int, bytearray], op: Op
) -> None:
    """One entry operation on the tree, if it can apply (its parent is there)."""
    if op.kind == "create":
        if os.path.dirname(op.path) in directories:
            names[op.path] = op.fid
            contents.setdefault(op.fid, bytearray())
    elif op.kind == "mkdir":
        if os.path.dirname(op.path) in directories:
            directories.add(op.path)
    elif op.kind == "unlink":
        names.pop(op.path, None)
    elif op.kind == "rmdir":
        inside = op.path + "/"
        if not any(n.startswith(inside) for n in itertools.chain(names, directories)):
            directories.discard(op.path)
    elif op.kind == "rename" and os.path.dirname(op.dst) in directories:
        if op.path in names:
            names[op.dst] = names.pop(op.path)
        elif op.path in directories:  # a directory moves with all under it
            inside = op.path + "/"
            for name in [n for n in names if n.startswith(inside)]:
                names[op.dst + name[len(op.path) :]] = names.pop(name)
            for name in [d for d in directories if d == op.path or d.startswith(inside)]:
                directories.discard(name)
                directories.add(op.dst + name[len(op.path) :])


def disk_digest(disk: Disk) -> str:
    """A hash of the tree: its names, their kinds and the files' bytes."""
    from orchestrator.storage.durable import sha256_constructor

    digest = sha256_constructor()()
    for path in sorted(disk):
        content = disk[path]
        digest.update(path.encode() + (b"/\0" if content is None else b"\0"))
        if content is not None:
            digest.update(len(content).to_bytes(8, "big") + content)
    return digest.hexdigest()  # type: ignore[no-any-return]


# No process has this pid after the reboot: above the kernel's largest (2**22).
DEAD_PID = 2**22 + 1


def materialise(disk: Disk, target: Path) -> None:
    """Make ``target`` hold exactly ``disk`` (real files in a real directory), as after a
    reboot: a temporary file named after its writer's pid (``.name.<pid>.tmp``, see
    ``durable.sweep_temporaries``) names this process's pid, which recorded the run, so
    it is renamed after a pid no process has, as its dead writer's would be."""
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    ours = f".{os.getpid()}.tmp"
    for path in sorted(p for p, content in disk.items() if content is None):
        (target / path).mkdir(parents=True, exist_ok=True)
    for path, content in disk.items():
        if content is not None:
            if path.endswith(ours):
                path = f"{path[: -len(ours)]}.{DEAD_PID}.tmp"
            (target / path).write_bytes(content)


@dataclass(frozen=True)
class CrashDisk:
    """A distinct disk and how it came about (a crash point and a choice)."""

    point: CrashPoint
    choice: Choice
    disk: Disk
    digest: str

    def describe(self, log: list[Op]) -> str:
        """The crash point and the non-durable operations that persisted, in words."""
        kept = [str(log[i]) for i in sorted(self.choice.entries)]
        for fid, count, torn in self.choice.data:
            if count:
                kept.append(f"fid {fid}: {count} of {len(self.point.data[fid])} data ops")
                kept[-1] += " (last torn)" if torn else ""
        lost = [str(log[i]) for i in self.point.entries if i not in self.choice.entries]
        lost += [
            f"fid {fid}: {len(self.point.data[fid]) - count} data ops"
            for fid, count, _ in self.choice.data
            if count < len(self.point.data[fid])
        ]
        before = str(log[self.point.k]) if self.point.k < len(log) else "the end of the log"
        return (
            f"power cut before op {self.point.k} ({before}); not durable but persisted: "
            f"{kept or 'nothing'}; lost: {lost or 'nothing'}"
        )


def explore(rec: Recording, *, seed: int, budget: int | None = None) -> list[CrashDisk]:
    """Distinct disks over every crash point of ``rec``, at most ``budget`` of them.

    Crash points are visited in rounds (each point's next choice in turn), so a budget
    covers the whole run rather than its beginning.
    """
    rng = random.Random(seed)
    log = rec.log
    points = [CrashPoint.at(log, k) for k in crash_points(log)]
    streams = [point.choices(log, rng) for point in points]
    seen: set[str] = set()
    found: list[CrashDisk] = []
    while streams and (budget is None or len(found) < budget):
        alive = []
        for point, stream in zip(points, streams, strict=True):
            choice = next(stream, None)
            if choice is None:
                continue
            alive.append((point, stream))
            disk = build_disk(rec.snapshot, log, point, choice)
            digest = disk_digest(disk)
            if digest not in seen:
                seen.add(digest)
                found.append(CrashDisk(point, choice, disk, digest))
                if budget is not None and len(found) >= budget:
                    break
        points = [p for p, _ in alive]
        streams = [s for _, s in alive]
    return found


@contextlib.contextmanager
def syncs_skipped() -> Iterator[None]:
    """Make ``fsync``/``fdatasync`` (and the durable layer's syncs) do nothing while the
    block runs: for recoveries that are judged, not cut, whose syncs decide nothing."""
    from orchestrator.storage import durable, ndjson

    def skip(fd: int) -> None:
        return None

    patches = [(os, "fsync"), (os, "fdatasync"), (ndjson, "_sync_data")]
    patches.append((durable, "sync_filesystem"))
    saved = [(module, name, getattr(module, name)) for module, name in patches]
    try:
        for module, name in patches:
            setattr(module, name, skip)
        yield
    finally:
        for module, name, original in saved:
            setattr(module, name, original)
