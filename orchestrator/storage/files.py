"""Reading a file from the work directory: a regular file, never through a link, bounded.

Everything the engine, the board and the commands read from where hosts and agents write
(state files, response files, documents named on the command line) goes through
:func:`read_regular_file`, and JSON through :func:`read_json_file`, which adds every rule
of :func:`orchestrator.formats.strict_json.loads_strict`.
"""

from __future__ import annotations

import os
import stat

from .._errors import UntrustedJSONError
from ..formats.strict_json import DEFAULT_MAX_BYTES, DEFAULT_MAX_DEPTH, loads_strict

# ``typing`` is not needed at run time; keeping it out of the imports keeps start-up cheap.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["STATE_MAX_BYTES", "read_json_file", "read_json_file_bytes", "read_regular_file"]

STATE_MAX_BYTES = 256 * 1024 * 1024

# Without O_NONBLOCK, opening a FIFO with no writer would hang before fstat could refuse it.
_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)
_HAS_NOFOLLOW = hasattr(os, "O_NOFOLLOW")
_READ_CHUNK = 1024 * 1024


def read_regular_file(
    path: str | os.PathLike[str], *, max_bytes: int, source: str | None = None
) -> bytes:
    """Return the bytes of the regular file at ``path``, refusing anything else.

    Refuses a symbolic link (``symlink``), anything but a regular file (``not-a-file``) and a
    file over ``max_bytes`` (``too-large``), never reading more than ``max_bytes + 1`` bytes.
    ``FileNotFoundError`` propagates unchanged, so callers can treat it as "not there yet".
    """
    name = source if source is not None else os.fspath(path)
    if not _HAS_NOFOLLOW and os.path.islink(path):
        # Racy, but the best that can be done where the kernel cannot refuse links itself.
        raise _symlink_error(name)
    from .beneath import parent

    # No component under a work directory is followed if it is a link (beneath.parent).
    with parent(path) as (directory, entry):
        try:
            fd = os.open(entry, _OPEN_FLAGS, dir_fd=directory)
        except FileNotFoundError:
            raise
        except IsADirectoryError:
            raise _not_a_file_error(name, "a directory") from None
        except OSError as exc:
            # O_NOFOLLOW reports a link as ELOOP (EMLINK on some BSDs); lstat tells it
            # from a real loop.
            try:
                mode = os.stat(entry, dir_fd=directory, follow_symlinks=False).st_mode
            except OSError:
                mode = 0
            if stat.S_ISLNK(mode):
                raise _symlink_error(name) from exc
            raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _not_a_file_error(name, _file_kind(info.st_mode))
        if info.st_size > max_bytes:
            raise UntrustedJSONError(
                f"file is {info.st_size} bytes, more than the limit of {max_bytes}; "
                "write a smaller document",
                source=name,
                json_path="$",
                rule="too-large",
            )
        # The file may grow after fstat, so the reads themselves are capped at max_bytes + 1.
        chunks: list[bytes] = []
        remaining = max_bytes + 1
        want = min(remaining, info.st_size + 1)
        while remaining > 0:
            chunk = os.read(fd, want)
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
            want = min(remaining, _READ_CHUNK)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        raise UntrustedJSONError(
            f"file grew past the limit of {max_bytes} bytes while being read; "
            "write it whole (to a temporary name, then rename) before it is read",
            source=name,
            json_path="$",
            rule="too-large",
        )
    return data


def read_json_file(
    path: str | os.PathLike[str],
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_depth: int = DEFAULT_MAX_DEPTH,
    source: str | None = None,
    allow_lone_surrogates: bool = False,
) -> Any:
    """Read and parse the JSON file at ``path`` under every rule of ``read_regular_file`` and
    ``loads_strict``; errors name ``source`` (default: the path). ``allow_lone_surrogates``
    is for the engine's own records (see ``loads_strict``).
    """
    return read_json_file_bytes(
        path,
        max_bytes=max_bytes,
        max_depth=max_depth,
        source=source,
        allow_lone_surrogates=allow_lone_surrogates,
    )[0]


def read_json_file_bytes(
    path: str | os.PathLike[str],
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_depth: int = DEFAULT_MAX_DEPTH,
    source: str | None = None,
    allow_lone_surrogates: bool = False,
) -> tuple[Any, bytes]:
    """:func:`read_json_file`, with the bytes it parsed (a state's signature covers them)."""
    name = source if source is not None else os.fspath(path)
    raw = read_regular_file(path, max_bytes=max_bytes, source=name)
    data = loads_strict(
        raw,
        source=name,
        max_bytes=max_bytes,
        max_depth=max_depth,
        allow_lone_surrogates=allow_lone_surrogates,
    )
    return data, raw


def _symlink_error(name: str) -> UntrustedJSONError:
    return UntrustedJSONError(
        "is a symbolic link; write the file itself, not a link",
        source=name,
        json_path="$",
        rule="symlink",
    )


def _not_a_file_error(name: str, kind: str) -> UntrustedJSONError:
    return UntrustedJSONError(
        f"is {kind}, not a regular file; point to a regular JSON file",
        source=name,
        json_path="$",
        rule="not-a-file",
    )


def _file_kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a plain file"
