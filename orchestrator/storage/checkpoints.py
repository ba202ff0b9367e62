"""The last checkpoint the user's key signed for each run, kept beside the key.

A signature proves that orchestrate wrote a state, not that the state is the latest one:
an older signed state of the same run put back, or a signed state copied into another
work directory, would be taken at its word (an answer replaced, steps run twice, a
finished run back to life, one run advancing in two places). So:

- the engine's record names the work directory it belongs to (``home``: a digest of its
  real path, so a regression-run folder holds no path of the machine that made it), and
  a state found elsewhere is refused as copied or moved;
- each save notes the state's ``revision`` (the engine counts its checkpoints) in a
  small file of this register, outside every work directory, beside the signing key;
  a state older than the last one noted for its run is refused as rolled back.

``orchestrate trust --accept-rollback`` accepts such a state on purpose. The register is
written without a sync: after a power cut it may lag the state by a few checkpoints, so
it never refuses a state a save wrote; a lost register only loses this protection for
the runs it held (``docs/security.md``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

from .._errors import KeyFileError, StateRolledBackError
from .runs import ENGINE_KEY
from .signing_key import key_file

__all__ = [
    "ANYWHERE",
    "REGISTER_DIRECTORY",
    "check_checkpoint",
    "home_for",
    "home_of",
    "last_signed",
    "note_checkpoint",
    "portable",
    "register_directory",
    "register_entry",
]

REGISTER_DIRECTORY = "checkpoints"
_ENTRY_MAX_BYTES = 4096
_HOME_DIGITS = 32
#: The home of a run that may live anywhere (it records its work directory relative).
ANYWHERE = "anywhere"


def home_of(workdir: Path | str) -> str:
    """The identity a state records for its work directory: the SHA-256 of the
    directory's real path (links resolved), in hex, cut short."""
    real = os.path.realpath(os.path.abspath(os.fspath(workdir)))
    return hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:_HOME_DIGITS]


def home_for(record: dict[str, Any], workdir: Path | str) -> str:
    """The home a run's record should hold in ``workdir``: the directory's identity; or
    :data:`ANYWHERE` for a run that records its work directory relative (a regression
    run's, whose folder is made to be moved and shared). Copies of such a run share one
    register entry: the first to go on makes the others rolled back."""
    return ANYWHERE if portable(record) else home_of(workdir)


def portable(record: dict[str, Any]) -> bool:
    """Whether a run's record keeps its work directory relative: it may live anywhere."""
    recorded = record.get("workdir")
    return isinstance(recorded, str) and not os.path.isabs(recorded)


def register_directory() -> Path:
    """Where the register lives: beside the signing key."""
    return key_file().parent / REGISTER_DIRECTORY


def register_entry(run_id: str, started_at: str, home: str) -> Path:
    """The register's file for one run."""
    # One run is its id, when it began and where it lives: a run id given by hand (or
    # made by a test's fixed generator) in two work directories names two runs.
    name = hashlib.sha256(f"{home}\0{run_id}\0{started_at}".encode()).hexdigest()[:40]
    return register_directory() / f"{name}.json"


def last_signed(run_id: str, started_at: str, home: str) -> int | None:
    """The last revision noted for the run; ``None`` when the register holds none (a run
    from before the register, or the register was lost or damaged)."""
    path = register_entry(run_id, started_at, home)
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        data = os.read(fd, _ENTRY_MAX_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        entry = json.loads(data)
    except ValueError:
        return None
    revision = entry.get("revision") if isinstance(entry, dict) else None
    if isinstance(revision, int) and not isinstance(revision, bool) and entry.get("run") == run_id:
        return revision
    return None


def note_checkpoint(run_id: str, started_at: str, home: str, revision: int) -> None:
    """Note ``revision`` as the run's last signed checkpoint (after the state that holds
    it is written), replacing what was noted."""
    directory = register_directory()
    path = register_entry(run_id, started_at, home)
    data = json.dumps({"run": run_id, "started_at": started_at, "revision": revision}).encode()
    temporary = directory / f".{path.name}.{threading.get_native_id()}.{os.getpid()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
    try:
        try:
            fd = os.open(temporary, flags | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except FileNotFoundError:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            fd = os.open(temporary, flags | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)  # a write that failed leaves nothing behind
        raise KeyFileError(
            f"{directory}: cannot note the run's checkpoint there ({exc.strerror or exc}): "
            "it lives beside the signing key and must be writable; fix its permissions, or "
            "set ORCHESTRATOR_KEY_FILE to a key in a directory of your own",
            path=str(directory),
        ) from None


def check_checkpoint(data: Any, workdir: Path | str, *, source: str) -> None:
    """Refuse a state (its JSON ``data``, signature checked) that was signed for another
    work directory, or that is older than the last checkpoint signed for its run."""
    phase_data = data.get("phase_data") if isinstance(data, dict) else None
    record = phase_data.get(ENGINE_KEY) if isinstance(phase_data, dict) else None
    if not isinstance(record, dict):
        return  # not this engine's record: reading it says what is wrong
    run_id, started_at, revision = (record.get(k) for k in ("run_id", "started_at", "revision"))
    if not isinstance(run_id, str) or not isinstance(started_at, str):
        return
    here = home_for(record, workdir)
    home = record.get("home")
    if isinstance(home, str) and home != here:
        raise StateRolledBackError(
            f"run {run_id}'s state was signed for another work directory: it was copied or "
            "moved here",
            source=source,
        )
    if not isinstance(revision, int) or isinstance(revision, bool):
        return
    last = last_signed(run_id, started_at, here)
    if last is not None and revision < last:
        raise StateRolledBackError(
            f"run {run_id}'s state was rolled back: checkpoint {revision}, last signed {last}",
            source=source,
        )
