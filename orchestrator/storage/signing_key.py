"""The user's signing key: where it lives, reading it, and making it the first time.

The key is a file of 64 hex digits, readable by its owner alone:
``$ORCHESTRATOR_KEY_FILE`` when that is set (an absolute path), else
``$XDG_CONFIG_HOME/checkpoint-orchestrator/state.key``, else
``~/.config/checkpoint-orchestrator/state.key``. It is made on first use, whole or not
at all, and two processes that make it at once end up with the same one. What it signs
is :mod:`orchestrator.storage.state_key`'s.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from .._errors import KeyFileError
from .._text import plural
from .durable import fsync_directory

__all__ = ["KEY_FILE_ENV", "check_key_outside", "key_file", "load_key"]

KEY_FILE_ENV = "ORCHESTRATOR_KEY_FILE"
KEY_DIRECTORY = "checkpoint-orchestrator"
KEY_NAME = "state.key"
KEY_MIN_BYTES = 32
_KEY_MAX_BYTES = 4096

_keys: dict[str, bytes] = {}  # key file -> its key, once read in this process

# (the environment it was found from) -> where the key lives: asked at every save.
_key_file_found: tuple[tuple[str | None, ...], Path] | None = None


def key_file() -> Path:
    """Where the signing key lives (see the module's docstring)."""
    global _key_file_found
    environ = os.environ
    seen = (environ.get(KEY_FILE_ENV), environ.get("XDG_CONFIG_HOME"), environ.get("HOME"))
    found = _key_file_found
    if found is not None and found[0] == seen:
        return found[1]
    path = _find_key_file()
    _key_file_found = (seen, path)
    return path


def _find_key_file() -> Path:
    given = os.environ.get(KEY_FILE_ENV)
    if given:
        if not os.path.isabs(given):
            raise KeyFileError(
                f"{KEY_FILE_ENV}={given!r} is not an absolute path; give the key file's "
                "absolute path, outside any work directory",
                path=given,
            )
        return Path(given)
    config = os.environ.get("XDG_CONFIG_HOME", "")
    if not os.path.isabs(config):  # unset, or relative: the XDG spec says to ignore it
        home = os.path.expanduser("~")
        if home == "~" or not os.path.isabs(home):
            raise KeyFileError(
                "cannot tell where the signing key lives (no home directory); set "
                f"{KEY_FILE_ENV} to an absolute path outside any work directory",
                path="",
            )
        config = os.path.join(home, ".config")
    return Path(config, KEY_DIRECTORY, KEY_NAME)


def load_key(*, create: bool) -> bytes:
    """The signing key; with ``create``, made first when there is none yet.

    Without ``create`` a missing key raises ``FileNotFoundError``: only a writer makes a
    key, since a key made to check a state could never have signed it.
    """
    path = key_file()
    known = _keys.get(str(path))
    if known is not None:
        return known
    try:
        key = _read_key(path)
    except FileNotFoundError:
        if not create:
            raise
        key = _create_key(path)
    _keys[str(path)] = key
    return key


def check_key_outside(workdir: Path) -> None:
    """Refuse a key file inside ``workdir``: whoever writes there could read it."""
    path = key_file()
    key_dir = os.path.realpath(path.parent)
    work = os.path.realpath(workdir)
    if key_dir == work or key_dir.startswith(work.rstrip(os.sep) + os.sep):
        raise KeyFileError(
            f"{path}: the signing key is inside the work directory {workdir}, where hosts "
            f"and agents write; move it out and set {KEY_FILE_ENV} to where it is now",
            path=str(path),
        )


def _read_key(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        info = os.fstat(fd)
        _check_key_file(path, info)
        data = os.read(fd, _KEY_MAX_BYTES + 1)
    finally:
        os.close(fd)
    key = data.strip()
    if len(key) < KEY_MIN_BYTES or len(data) > _KEY_MAX_BYTES:
        raise KeyFileError(
            f"{path}: the signing key holds {plural(len(key), 'byte')}, not {KEY_MIN_BYTES} to "
            f"{_KEY_MAX_BYTES}; remove the file (a new key is made on next use, and each "
            "state signed with the old one must be trusted again with 'orchestrate trust')",
            path=str(path),
        )
    return key


def _check_key_file(path: Path, info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise KeyFileError(
            f"{path}: the signing key is not a regular file; remove it (a new key is made on "
            f"next use), or set {KEY_FILE_ENV} to the key file",
            path=str(path),
        )
    uid = os.geteuid()
    if info.st_uid != uid:
        raise KeyFileError(
            f"{path}: the signing key belongs to uid {info.st_uid}, not to you (uid {uid}); "
            f"use a key of your own: set {KEY_FILE_ENV} to another path, or remove this one",
            path=str(path),
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise KeyFileError(
            f"{path}: the signing key can be read by others (mode {mode:04o}); run 'chmod "
            f"600 {path}' (if someone may have read it, remove it instead: a new key is "
            "made on next use, and each state must then be trusted again)",
            path=str(path),
        )


def _create_key(path: Path) -> bytes:
    """Make the key whole under a temporary name, then link it into place: the first
    link wins, and a process that loses reads the winner's key."""
    directory = path.parent
    os.makedirs(directory, mode=0o700, exist_ok=True)
    material = os.urandom(32).hex().encode("ascii") + b"\n"
    temporary = directory / f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(temporary, flags | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, material)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(temporary, path)
    except FileExistsError:
        pass  # another process made the key first: that one is the key
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        _create_in_place(path, material)  # a file system without hard links
    finally:
        os.unlink(temporary)
    fsync_directory(directory)
    return _read_key(path)


def _create_in_place(path: Path, material: bytes) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        return
    try:
        os.write(fd, material)
        os.fsync(fd)
    finally:
        os.close(fd)
