"""Files beneath a work directory, reached without following a symbolic link.

Hosts and agents write in the work directory, so a link there may point anywhere: at a
file of the user's to overwrite, at a directory outside to fill, at ``/dev/null`` to
swallow an answer. Every file the engine, the board and the evidence writer open,
create, rename or delete under a work directory goes through this module, which walks
from the directory one component at a time (``openat`` with ``O_NOFOLLOW``, each step
from the directory descriptor of the one before), so no component is ever a link
followed, whatever changes under it meanwhile. A link (or a file where a directory
belongs, or a FIFO, a socket or a device where a file belongs) is refused in one line
naming it; nothing is written through it.

A component registers the directories it works beneath with :func:`guard` (the file
bridge its work directory, the board its directory's parent). The directory itself may
be reached through links (the user named it); what lies under it may not. A path under no
guarded directory is used as given: the user's own files (a key, a document named on the
command line).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

from .._errors import OrchestratorError, UnsafePathError

_ROOTS: list[str] = []
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_NOFOLLOW = os.O_NOFOLLOW
# A FIFO must not block an open: without O_NONBLOCK, opening one with no writer hangs.
_NONBLOCK = os.O_NONBLOCK


def guard(directory: Path | str) -> None:
    """Reach everything beneath ``directory`` without following a link (this process)."""
    root = os.path.abspath(directory)
    if root not in _ROOTS:
        _ROOTS.append(root)
        _ROOTS.sort(key=len, reverse=True)  # the innermost root first


def _split(path: os.PathLike[str] | str) -> tuple[str, list[str]] | None:
    """(the guarded root, the components under it) of ``path``; ``None`` if unguarded."""
    absolute = os.path.abspath(path)
    for root in _ROOTS:
        if absolute == root:
            return root, []
        if absolute.startswith(root) and absolute[len(root)] == "/":
            return root, absolute[len(root) + 1 :].split("/")
    return None


def _refuse(path: str, what: str) -> UnsafePathError:
    return UnsafePathError(
        f"{path}: {what}; the engine never follows a link or writes through one in the "
        "work directory, so nothing was written there and the instance is intact: remove "
        "it (the engine makes what it needs there), then run the command again",
        path=path,
    )


def _kind(mode: int, belongs: str = "a file") -> str:
    if stat.S_ISLNK(mode):
        return "is a symbolic link"
    if stat.S_ISDIR(mode):
        return f"is a directory where {belongs} belongs"
    if stat.S_ISREG(mode):
        return f"is a file where {belongs} belongs"
    if stat.S_ISFIFO(mode):
        return f"is a FIFO (named pipe) where {belongs} belongs"
    if stat.S_ISSOCK(mode):
        return f"is a socket where {belongs} belongs"
    return f"is a device where {belongs} belongs"


def _what_is(fd: int | None, name: str, belongs: str) -> str:
    """What the entry ``name`` of directory ``fd`` is, said as a refusal."""
    try:
        mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
    except OSError:
        return f"cannot be opened as {belongs}"
    return _kind(mode, belongs)


def _step(fd: int, name: str, where: str, *, create: bool) -> int:
    """The directory ``name`` inside directory ``fd``, never through a link."""
    try:
        return os.open(name, _DIRECTORY | _NOFOLLOW, dir_fd=fd)
    except FileNotFoundError:
        if not create:
            raise
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK, errno.ENOTDIR):
            raise _refuse(where, _what_is(fd, name, "a directory")) from None
        raise
    with contextlib.suppress(FileExistsError):  # made meanwhile by another process
        os.mkdir(name, 0o755, dir_fd=fd)
    return _step(fd, name, where, create=False)


@contextlib.contextmanager
def parent(
    path: os.PathLike[str] | str, *, create: bool = False
) -> Iterator[tuple[int | None, str]]:
    """``(directory descriptor, name)`` of ``path`` for the ``*at`` calls: the parent
    reached without following a link (made, with ``create``). Unguarded, ``(None, path)``
    (``dir_fd=None`` makes the calls take the whole path)."""
    split = _split(path)
    if split is None or not split[1]:
        if create:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        yield None, os.fspath(path)
        return
    root, parts = split
    kept = getattr(_this_thread, "kept", None)
    if kept is not None:
        yield _kept_directory(kept, root, parts[:-1], create=create), parts[-1]
        return
    fd = os.open(root, _DIRECTORY)
    try:
        where = root
        for name in parts[:-1]:
            where = f"{where}/{name}"
            inner = _step(fd, name, where, create=create)
            os.close(fd)
            fd = inner
        yield fd, parts[-1]
    finally:
        os.close(fd)


# ``kept``: the directories reached during this thread's :func:`keeping_directories`
# block, path -> descriptor (another thread's walks never see them).
_this_thread = threading.local()


@contextlib.contextmanager
def keeping_directories() -> Iterator[None]:
    """Within the block, each directory a walk of this thread reaches is opened once and
    kept: the next walk through it starts there. Every descriptor was reached without
    following a link, as always; the block only makes several files of one commit share
    the walk. A block must not remove a directory it walks through. Blocks nest (the
    outer one keeps)."""
    if getattr(_this_thread, "kept", None) is not None:
        yield
        return
    kept: dict[str, int] = {}
    _this_thread.kept = kept
    try:
        yield
    finally:
        _this_thread.kept = None
        for fd in kept.values():
            os.close(fd)


def _kept_directory(kept: dict[str, int], root: str, parts: list[str], *, create: bool) -> int:
    """The descriptor of ``root/parts...`` from ``kept``, walking (and keeping) from the
    deepest directory already there."""
    where = "/".join([root, *parts])
    depth = len(parts)
    while where not in kept and depth > 0:
        depth -= 1
        where = where.rsplit("/", 1)[0]
    fd = kept.get(where)
    if fd is None:
        fd = kept[root] = os.open(root, _DIRECTORY)
    for name in parts[depth:]:
        where = f"{where}/{name}"
        fd = kept[where] = _step(fd, name, where, create=create)
    return fd


def open_directory(path: Path | str, *, create: bool = False) -> int:
    """A descriptor of the directory ``path`` (made with ``create``), reached without
    following a link; the caller closes it."""
    with parent(path, create=create) as (fd, name):
        if fd is None:
            if create:
                os.makedirs(name, exist_ok=True)
            return os.open(name, _DIRECTORY)
        return _step(fd, name, os.path.abspath(path), create=create)


def open_directory_in(fd: int, name: str, path: Path | str) -> int:
    """A descriptor of the directory ``name`` inside directory ``fd`` (``path`` is its
    path, for a refusal), never through a link; the caller closes it."""
    return _step(fd, name, os.path.abspath(path), create=False)


def make_directories(path: Path | str) -> None:
    """``mkdir -p`` without following a link at any component."""
    os.close(open_directory(path, create=True))


def make_directory(path: Path | str) -> bool:
    """Make the directory ``path`` (its parent must be there, reached without following
    a link); whether it was made. What is there already must be a directory, not a link
    to one."""
    with parent(path) as (fd, name):
        try:
            os.mkdir(name, 0o755, dir_fd=fd)
        except FileExistsError:
            if fd is None:
                os.close(os.open(name, _DIRECTORY))
            else:
                os.close(_step(fd, name, os.path.abspath(path), create=False))
            return False
    return True


def open_file(path: Path | str, flags: int, mode: int = 0o644) -> int:
    """``os.open`` of the regular file ``path``, never through a link at any component;
    anything but a regular file there is refused (a FIFO is refused, never waited on)."""
    with parent(path) as (fd, name):
        try:
            opened = os.open(name, flags | _NOFOLLOW | _NONBLOCK | os.O_CLOEXEC, mode, dir_fd=fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EMLINK, errno.EISDIR, errno.ENXIO):
                raise _refuse(os.path.abspath(path), _what_is(fd, name, "a file")) from None
            raise
    info = os.fstat(opened)
    if not stat.S_ISREG(info.st_mode):
        os.close(opened)
        raise _refuse(os.path.abspath(path), _kind(info.st_mode))
    if flags & (os.O_WRONLY | os.O_RDWR) == 0:
        os.set_blocking(opened, True)
    return opened


def check_entry(fd: int | None, name: str, path: Path | str) -> bool:
    """Whether the entry ``name`` of directory ``fd`` exists as a regular file; a link or
    anything else there is refused."""
    try:
        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(info.st_mode):
        raise _refuse(os.path.abspath(path), _kind(info.st_mode))
    return True


def is_file(path: Path | str) -> bool:
    """Whether ``path`` is a regular file, refusing a link (at any component) or a
    non-file there; a missing directory on the way is ``False``."""
    try:
        with parent(path) as (fd, name):
            return check_entry(fd, name, path)
    except FileNotFoundError:
        return False


def entry_exists(path: Path | str) -> bool:
    """Whether anything (a link too, never followed) is at ``path``, reached without
    following a link on the way."""
    try:
        with parent(path) as (fd, name):
            os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def is_directory(path: Path | str) -> bool:
    """Whether the directory ``path`` exists, refusing a link at any component."""
    try:
        os.close(open_directory(path))
    except FileNotFoundError:
        return False
    return True


def list_directory(path: Path | str) -> list[str]:
    """The names in directory ``path`` (none if it is not there), never through a link."""
    try:
        fd = open_directory(path)
    except FileNotFoundError:
        return []
    try:
        return os.listdir(fd)
    finally:
        os.close(fd)


def unlink(path: Path | str) -> bool:
    """Remove the file ``path`` (a link there is removed, never followed); whether it was
    there. A directory on the way that is missing means there was nothing."""
    try:
        with parent(path) as (fd, name):
            os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        return False
    return True


def remove_directory(path: Path | str) -> None:
    """``rmdir`` of ``path`` (empty), reached without following a link."""
    with parent(path) as (fd, name):
        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if not stat.S_ISDIR(info.st_mode):
            raise _refuse(os.path.abspath(path), _kind(info.st_mode))
        os.rmdir(name, dir_fd=fd)


def rename(source: Path | str, target: Path | str) -> None:
    """Move ``source`` to ``target`` (both reached without following a link); what is at
    ``target`` must be a regular file or nothing."""
    with parent(source) as (source_fd, source_name), parent(target) as (target_fd, name):
        check_entry(target_fd, name, target)
        os.replace(source_name, name, src_dir_fd=source_fd, dst_dir_fd=target_fd)


def read_file_under(
    directory: Path, relative: str, *, max_bytes: int = 8 * 1024 * 1024
) -> bytes | None:
    """The bytes of ``relative``, a regular file under ``directory`` reached without a link;
    ``None`` for anything else (``..``, an absolute path, a link on the way, a directory,
    a FIFO, a file with another name too (a hard link, which may be any file of the
    user's), nothing there, more than ``max_bytes``)."""
    parts = relative.split("/")
    if relative.startswith("/") or any(p in ("", ".", "..") or "\0" in p for p in parts):
        return None
    try:
        fd = open_file(directory.joinpath(*parts), os.O_RDONLY | os.O_NONBLOCK)
    except (OSError, OrchestratorError):
        return None
    with open(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or info.st_size > max_bytes:
            return None
        return file.read(max_bytes + 1)[:max_bytes]
