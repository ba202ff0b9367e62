"""Durable file primitives: atomic writes, directory fsync, the instance lock.

Every write that must survive a crash goes through :func:`atomic_write`: a temporary
file in the same directory, fsync, rename over the target, fsync of the directory. A
reader therefore sees either the old bytes or the new ones, never a mix.

The crash hook (``ORCHESTRATOR_CRASH_AT``) lets the crash tests kill the process with a
real SIGKILL at a numbered point; it costs one dictionary lookup when unset.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import sys
import threading
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from .._errors import InstanceBusyError, LockFileError, OrchestratorError, StorageError
from .beneath import (
    check_entry,
    list_directory,
    make_directories,
    open_directory,
    open_directory_in,
    parent,
    unlink,
)

# ORCHESTRATOR_CRASH_AT=N kills the process at its N-th crash point; "count" only logs
# every point to ORCHESTRATOR_CRASH_LOG, so a test can learn how many a run has.
_crash_setting = os.environ.get("ORCHESTRATOR_CRASH_AT", "")
_crash_at = -1 if _crash_setting == "count" else int(_crash_setting or 0)
_crash_log = os.environ.get("ORCHESTRATOR_CRASH_LOG", "")
_crash_points_seen = 0
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC


def crash_point(label: str) -> None:
    """Count a point where a crash may happen; SIGKILL ourselves at the chosen one."""
    global _crash_points_seen
    if not _crash_at:
        return
    _crash_points_seen += 1
    if _crash_at == -1:
        with open(_crash_log, "a", encoding="utf-8") as log:
            log.write(f"{_crash_points_seen} {label}\n")
    elif _crash_points_seen == _crash_at:
        if _crash_log:
            with open(_crash_log, "a", encoding="utf-8") as log:
                log.write(f"{_crash_at} {label}\n")
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


def sha256_hex(data: bytes) -> str:
    """SHA-256 of ``data`` in hex."""
    return sha256_constructor()(data).hexdigest()  # type: ignore[no-any-return]


def sha256_constructor(size: int = 0) -> Callable[..., Any]:
    """The SHA-256 constructor the project hashes with: ``hashlib.sha256``.

    Every hash goes through here, so a test can watch what a caller hashes. ``size``
    (how many bytes the caller is about to hash) changes nothing; callers may give it."""
    del size
    return hashlib.sha256


def live_briefly(brief: bool = True) -> None:
    """Say that this process lives for one command (``orchestrate``'s one-shot commands),
    or, with ``False``, that it lives on (``drive``): see :func:`_lanes_pay`."""
    global _brief
    _brief = brief


_brief = False


def fsync_directory(directory: Path) -> None:
    """Make a rename or unlink inside ``directory`` durable."""
    fd = open_directory(directory)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically; with ``durable`` also survive power loss.

    ``durable=False`` still renames atomically but skips both fsyncs: for files that are
    derived from durable state and are rebuilt from it after a crash. No component of
    ``path`` is followed if it is a link (:mod:`orchestrator.storage.beneath`), and what
    ``path`` names must be a regular file or nothing.
    """
    with parent(path) as (directory, name):
        crash_point(f"before-write {path.name}")
        tmp = _write_temporary(directory, name, path, data, sync=durable)
        crash_point(f"before-rename {path.name}")
        os.replace(tmp, name, src_dir_fd=directory, dst_dir_fd=directory)
        crash_point(f"after-rename {path.name}")
        if durable:
            if directory is None:
                fsync_directory(path.parent)
            else:
                os.fsync(directory)


def create_new(path: Path, data: bytes) -> None:
    """Write ``path`` whole, durably, only if nothing is there: of writers racing for
    one name, exactly one wins, and the others get :class:`FileExistsError` and change
    nothing. The content is written to a temporary first and linked into place (a link
    never replaces), so no reader sees a part of it."""
    with parent(path) as (directory, name):
        tmp = _write_temporary(directory, name, path, data, sync=True)
        try:
            os.link(tmp, name, src_dir_fd=directory, dst_dir_fd=directory, follow_symlinks=False)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=directory)
        if directory is None:
            fsync_directory(path.parent)
        else:
            os.fsync(directory)


def write_together(
    items: Sequence[tuple[Path, bytes]],
    *,
    directories: Sequence[Path] = (),
    make: Collection[Path] = (),
) -> None:
    """Replace several files at once, durably, waiting on the disk twice (a group commit).

    Every file is written to its temporary; then all of them are made durable as one group
    (one ``syncfs`` where Linux offers it, else an fsync of each); then they are renamed
    into place in the order given; then the renames are made durable (one ``syncfs``, else
    an fsync of each directory touched, ``directories`` included: the parents of
    directories the caller made). A crash leaves each file old or new, never a mix. A
    power cut before the return may keep any of the renames and lose others, so what must
    never be seen without another file is written by a later call (the event lines after
    their state, say).

    ``make``: directories of the files that may not be there yet (each one's parent is).
    Each is made before its files are written, and its entry lasts with them; one that is
    there already is swept of a dead writer's temporaries first.

    In a process that lives on (see :func:`live_briefly`), the files of different
    directories may be written in two lanes at once, this thread and a helper
    (:class:`_Beside`): making a file or a directory is the file system's work, and on a
    file system that has freed many files lately it is most of a commit's
    (:func:`_lanes_pay`). The renames keep their order, in this thread.

    Where ``syncfs`` is used, the first wait also makes durable whatever was written
    before it on that file system: appends made without a sync of their own
    (:func:`group_sync_covers_earlier_writes`) are durable before these files are visible.
    """
    if not items:
        return
    group = _Group(items, grouped=group_sync_covers_earlier_writes())
    try:
        # One crash point for the writes: until a rename, a crash anywhere in them leaves
        # only temporaries (swept later), as one before the first write does.
        crash_point(f"before-write {items[0][0].name}")
        try:
            group.open_folders(make)
            group.write_temporaries()
            if group.grouped:
                _sync_file_systems(group.opened)
            group.rename()
        except BaseException:
            group.discard_temporaries()
            raise
        group.sync_entries(directories)
    finally:
        group.close()


class _Group:
    """One :func:`write_together` call's files: the directories it reached, and each
    file's temporary until it is renamed into place."""

    __slots__ = ("above", "folders", "grouped", "items", "made", "opened", "staged")

    def __init__(self, items: Sequence[tuple[Path, bytes]], *, grouped: bool) -> None:
        self.items = items
        self.grouped = grouped  # one syncfs makes the group durable
        # The files of each directory, in the order given; the directories in the order
        # their first file comes.
        self.folders: dict[Path, list[int]] = {}
        for index, (path, _data) in enumerate(items):
            self.folders.setdefault(path.parent, []).append(index)
        self.opened: dict[Path, int] = {}  # each directory reached once
        self.above: dict[Path, int] = {}  # the parents of the directories to make
        self.made: list[Path] = []
        self.staged: list[tuple[int, str, str, Path] | None] = [None] * len(items)

    def open_folders(self, make: Collection[Path]) -> None:
        """Reach each directory (or, for one to make, its parent) from this thread:
        ``storage.beneath`` keeps its walks per thread."""
        for folder in self.folders:
            if folder not in make:
                self.opened[folder] = open_directory(folder)
            elif folder.parent not in self.above:
                self.above[folder.parent] = open_directory(folder.parent)

    def write_temporaries(self) -> None:
        """Write every file's temporary, in two lanes when they pay (see
        :func:`_lanes_pay`), and note how long one file took."""
        lanes = list(self.folders.items())
        beside = _beside() if len(lanes) > 1 and _lanes_pay() else None
        started = time.perf_counter_ns()
        if beside is None:
            self.write(lanes)
        else:
            mine, theirs = _split_lanes(lanes)
            beside.run(lambda: self.write(mine), lambda: self.write(theirs))
        _note_write_time(time.perf_counter_ns() - started, len(self.items), beside is not None)

    def write(self, lanes: list[tuple[Path, list[int]]]) -> None:
        """Write the temporaries of the files of ``lanes`` (directories and the indexes of
        their files), making a directory first where it is to be made."""
        for folder, indexes in lanes:
            directory = self.opened.get(folder)
            if directory is None:
                parent_fd = self.above[folder.parent]
                directory = self.opened[folder] = _made_in(parent_fd, folder, self.made)
            for index in indexes:
                path, data = self.items[index]
                try:
                    tmp = _write_temporary(directory, path.name, path, data, sync=not self.grouped)
                except OSError as exc:
                    if exc.filename is None:  # name the file a full disk refused
                        exc.filename = str(path)
                    raise
                self.staged[index] = (directory, tmp, path.name, path)

    def rename(self) -> None:
        """Rename each temporary into place, in the order given."""
        for position, entry in enumerate(self.staged):
            assert entry is not None
            directory, tmp, name, path = entry
            crash_point(f"before-rename {path.name}")
            os.replace(tmp, name, src_dir_fd=directory, dst_dir_fd=directory)
            self.staged[position] = None
            crash_point(f"after-rename {path.name}")

    def discard_temporaries(self) -> None:
        """Remove the temporaries not renamed (after a failure)."""
        for entry in self.staged:
            if entry is not None:
                with contextlib.suppress(OSError):
                    os.unlink(entry[1], dir_fd=entry[0])

    def sync_entries(self, directories: Sequence[Path]) -> None:
        """Make the renames durable, and the entries of the directories made, and
        ``directories``."""
        if self.grouped:
            _sync_file_systems(self.opened)
            return
        for fd in self.opened.values():
            os.fsync(fd)
        for folder in self.made:  # a new directory's entry
            os.fsync(self.above[folder.parent])
        for extra in directories:
            if extra not in self.opened and extra not in self.above:
                fsync_directory(extra)

    def close(self) -> None:
        for fd in (*self.opened.values(), *self.above.values()):
            os.close(fd)


def _made_in(parent_fd: int, folder: Path, made: list[Path]) -> int:
    """Make ``folder`` in its parent ``parent_fd`` (noting it in ``made``) and open it; if
    it is there already, open it and sweep it (written again after a crash, a killed
    writer's temporary may be there)."""
    try:
        os.mkdir(folder.name, 0o755, dir_fd=parent_fd)
    except FileExistsError:
        fd = open_directory_in(parent_fd, folder.name, folder)
        sweep_temporaries(folder)
        return fd
    made.append(folder)
    return open_directory_in(parent_fd, folder.name, folder)


# What writing one temporary took lately, in ns (smoothed): the lanes are used while it
# is long. A handoff to the helper costs about a tenth of a millisecond (the two threads
# take turns with the interpreter's lock between their system calls); on a file system
# that has freed many files in the last minute, making one file can cost several times
# that, and the lanes save half of it.
_LANES_AFTER_NS = 100_000
_write_ns = 0
_lanes_forced: bool | None = None  # the tests' switch: always, never, or as measured


def _lanes_pay() -> bool:
    """Whether a group's files go in two lanes: in a process that lives on (a brief one
    commits once or twice, and a thread costs it more than it saves), once writing a file
    has been seen to be slow."""
    if _lanes_forced is not None:
        return _lanes_forced
    return not _brief and _write_ns > _LANES_AFTER_NS


def _note_write_time(elapsed: int, files: int, in_lanes: bool) -> None:
    """Take the time one group's temporaries took into the estimate of one file's (for
    files written in two lanes, what one after the other would have taken)."""
    global _write_ns
    each = (2 * elapsed if in_lanes else elapsed) // files
    _write_ns = (_write_ns + each) // 2


def _split_lanes(
    lanes: list[tuple[Path, list[int]]],
) -> tuple[list[tuple[Path, list[int]]], list[tuple[Path, list[int]]]]:
    """The directories cut into two lanes of about as many files each, in order: this
    thread's (the first directory's, where the state is) and the helper's."""
    total = sum(len(indexes) for _, indexes in lanes)
    count = cut = 0
    while cut < len(lanes) - 1 and 2 * (count + len(lanes[cut][1])) <= total:
        count += len(lanes[cut][1])
        cut += 1
    cut = max(cut, 1)
    return lanes[:cut], lanes[cut:]


class _Beside:
    """One helper thread that runs a function beside the caller's: :meth:`run`. Made at
    the first use in a process (a fork's child makes its own); one caller at a time, and
    a caller that finds it busy runs both functions itself."""

    def __init__(self) -> None:
        import _thread

        self._busy = _thread.allocate_lock()
        self._go = _thread.allocate_lock()
        self._done = _thread.allocate_lock()
        self._go.acquire()
        self._done.acquire()
        self._job: Any = None
        self._failure: BaseException | None = None
        _thread.start_new_thread(self._serve, ())

    def _serve(self) -> None:
        while True:
            self._go.acquire()
            try:
                self._job()
            except BaseException as exc:  # handed to the caller, which raises it
                self._failure = exc
            self._done.release()

    def run(self, mine: Any, theirs: Any) -> None:
        """Run ``theirs`` in the helper and ``mine`` here; return when both have ended,
        raising the first failure (this thread's first)."""
        if not self._busy.acquire(blocking=False):
            mine()
            theirs()
            return
        try:
            self._job, self._failure = theirs, None
            self._go.release()
            failure: BaseException | None = None
            try:
                mine()
            except BaseException as exc:
                failure = exc
            while True:  # the helper's files must be known before anyone cleans up
                try:
                    self._done.acquire()
                    break
                except BaseException as exc:  # an interrupt while waiting: raised after
                    failure = failure or exc
            failure = failure or self._failure
            self._job = self._failure = None
            if failure is not None:
                raise failure
        finally:
            self._busy.release()


_helper: tuple[int, _Beside] | None = None


def _beside() -> _Beside | None:
    """This process's helper (made now if there is none), or ``None`` where no thread can
    be started."""
    global _helper
    pid = os.getpid()
    if _helper is None or _helper[0] != pid:
        try:
            _helper = (pid, _Beside())
        except RuntimeError:  # pragma: no cover - the system refuses a thread
            return None
    return _helper[1]


def group_sync_covers_earlier_writes() -> bool:
    """Whether :func:`write_together`'s first wait makes every earlier write on the file
    system durable (``syncfs``), so an append may skip its own sync when a later group
    commit is what must not be seen without it."""
    return _syncfs() is not None


def sync_filesystem(fd: int) -> None:
    """Make everything written on the file system that holds ``fd`` durable (``syncfs``)."""
    function = _syncfs()
    if function is None:  # pragma: no cover - only where the system has no syncfs
        raise OSError(errno.ENOSYS, "syncfs is not available here")
    if function(fd) != 0:
        import _ctypes

        code: int = _ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def _sync_file_systems(opened: dict[Path, int]) -> None:
    """One ``syncfs`` per file system the directories ``opened`` are on (one, nearly
    always: a work directory with a mount inside it has two)."""
    devices = {os.fstat(fd).st_dev: fd for fd in opened.values()} if len(opened) > 1 else opened
    for fd in devices.values():
        sync_filesystem(fd)


def _write_temporary(
    directory: int | None, name: str, path: Path, data: bytes, *, sync: bool
) -> str:
    """Write ``data`` to the temporary beside ``name`` (in ``directory``; the name is
    ``path``'s, which must be a regular file or nothing), fsynced with ``sync``; return
    the temporary's name. If anything fails, no temporary is left."""
    # Unique per thread and process (threads of one process write at once: the UI's),
    # the pid last, as sweep_temporaries reads it.
    unique = f"{threading.get_native_id()}.{os.getpid()}"
    tmp = os.path.join(os.path.dirname(name), f".{os.path.basename(name)}.{unique}.tmp")
    check_entry(directory, name, path)
    fd = os.open(tmp, _WRITE_FLAGS, 0o644, dir_fd=directory)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if sync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=directory)
        raise
    os.close(fd)
    return tmp


def _syncfs() -> Any:
    """The C library's ``syncfs`` (see :data:`_syncfs_function`), or ``None``."""
    return _syncfs_function


def _find_syncfs() -> Any:
    if not sys.platform.startswith("linux") or os.environ.get("ORCHESTRATOR_NO_SYNCFS"):
        return None
    try:
        import _ctypes

        c: Any = _ctypes  # typeshed's stubs do not describe these low-level classes
        address = c.dlsym(c.dlopen(None, os.RTLD_NOW), "syncfs")
    except (ImportError, OSError, AttributeError):  # pragma: no cover - no C library call
        return None

    class _Int(c._SimpleCData):  # type: ignore[misc]
        _type_ = "i"

    class _Function(c.CFuncPtr):  # type: ignore[misc]
        _flags_ = c.FUNCFLAG_CDECL | c.FUNCFLAG_USE_ERRNO
        _restype_ = _Int
        _argtypes_ = (_Int,)

    return _Function(address)


# The C library's syncfs, found when this module is imported (every save uses it): a
# callable taking a file descriptor, or None where the system has none (then each file and
# directory is synced by itself). Only ``_ctypes`` is loaded (the ``ctypes`` package costs
# four times as much).
_syncfs_function: Any = _find_syncfs()


def sweep_temporaries(directory: Path) -> list[Path]:
    """Remove temporary files that :func:`atomic_write` left behind when its process died.

    A temporary file names its writer's pid; one whose writer is still alive (a concurrent
    ``orchestrate respond``, say) is left alone.
    """
    removed: list[Path] = []
    for name in list_directory(directory):
        if not (name.startswith(".") and name.endswith(".tmp")):
            continue
        pid_text = name[:-4].rpartition(".")[2]
        if not pid_text.isdigit() or _process_alive(int(pid_text)):
            continue
        path = directory / name
        with contextlib.suppress(OSError):
            unlink(path)
        removed.append(path)
    return removed


def _process_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_file(path: Path) -> bool:
    """Unlink ``path`` if it exists; return whether it did. The caller fsyncs the directory."""
    crash_point(f"before-unlink {path.name}")
    return unlink(path)


class InstanceLock:
    """An exclusive, non-blocking lock on one workflow instance, held for a process's life.

    It is an ``fcntl`` lock on a lock file: the kernel drops it when the process dies,
    even by SIGKILL, so a crash never leaves a stale lock behind. The holder's pid is
    written into the file so the refusal can name it. Only a regular file is used: a
    symbolic link is never followed (the pid would overwrite the start of its target), and
    a FIFO cannot hang the open.
    """

    _FLAGS = (
        os.O_RDWR
        | os.O_CREAT
        | os.O_CLOEXEC
        | getattr(os, "O_NONBLOCK", 0)
        | getattr(os, "O_NOFOLLOW", 0)
    )

    def __init__(self, path: Path, *, make_directory: bool = False) -> None:
        self.path = path
        self._fd: int | None = None
        self._make_directory = make_directory  # its directory too, if it is not there

    def acquire(self) -> None:
        import fcntl

        try:  # no link followed on the way either (storage.beneath)
            try:
                fd = self._open()
            except FileNotFoundError:
                if not self._make_directory:
                    raise
                make_directories(self.path.parent)
                fd = self._open()
        except OSError as exc:
            raise self._refusal(exc) from exc
        try:
            self._check_regular(fd)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            busy = exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK)
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() if busy else ""
            os.close(fd)
            if not busy:
                raise self._refusal(exc) from exc
            who = f" (pid {holder})" if holder else ""
            raise InstanceBusyError(
                f"{self.path.parent}: another orchestrate process{who} is working on this "
                "instance; wait for it to exit, then try again",
                lock_path=str(self.path),
                holder=holder,
            ) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            # Fixed width, so no truncate is needed (a truncate costs a journal write).
            os.pwrite(fd, str(os.getpid()).encode().ljust(20), 0)
        except OSError as exc:
            os.close(fd)
            raise self._refusal(exc) from exc
        self._fd = fd

    def _open(self) -> int:
        with parent(self.path) as (directory, name):
            return os.open(name, self._FLAGS, 0o644, dir_fd=directory)

    def _check_regular(self, fd: int) -> None:
        import stat

        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise self._not_a_file(self._kind(mode))

    def _refusal(self, exc: OSError) -> OrchestratorError:
        """What a failed open, lock or write of the lock file means, naming the file."""
        if exc.errno == errno.EISDIR:
            return self._not_a_file("a directory")
        if exc.errno in (errno.ELOOP, errno.EMLINK, errno.ENXIO, errno.ENODEV):
            import stat

            try:
                mode = os.lstat(self.path).st_mode
            except OSError:
                mode = 0
            if stat.S_ISLNK(mode):
                return self._not_a_file("a symbolic link (never followed)")
            if mode and not stat.S_ISREG(mode):
                return self._not_a_file(self._kind(mode))
        return StorageError.from_os_error(exc, path=str(self.path), action="write")

    @staticmethod
    def _kind(mode: int) -> str:
        import stat

        if stat.S_ISFIFO(mode):
            return "a FIFO (named pipe)"
        return "a socket" if stat.S_ISSOCK(mode) else "a device"

    def _not_a_file(self, kind: str) -> LockFileError:
        return LockFileError(
            f"{self.path}: the instance lock is {kind}, not a regular file; nothing was "
            "changed: remove it (orchestrate makes a new one), then try again",
            lock_path=str(self.path),
        )

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> InstanceLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()
