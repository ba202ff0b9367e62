"""One maintenance pass at a time on a board: the watchdog, and what it answers.

A maintenance pass times out the tasks whose heartbeat is stale and answers the workflow
requests that waited for them. ``orchestrate board watchdog`` (a host's timer, a cron
job) runs it, and so does ``orchestrate resume`` before it resumes a workflow that
dispatches to the board. Two passes at once would judge the same tasks twice, so each
holds ``maintenance.lock`` in the board's directory.

The command waits for the lock through filelock. ``resume`` takes the same lock with a
bare ``flock``, and never waits: when another pass holds it, that pass is doing this
work, and the resume goes on without it. Importing filelock costs more than half of a
whole resume (``docs/decisions.md``), and a host spawns ``resume`` once per pause.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .._errors import InstanceBusyError

__all__ = ["MAINTENANCE_LOCK", "maintenance", "maintenance_if_free"]

MAINTENANCE_LOCK = "maintenance.lock"


@contextmanager
def maintenance(directory: Path, *, timeout: float) -> Iterator[None]:
    """Hold the board's maintenance lock, waiting up to ``timeout`` seconds for it.

    Where there is no board yet there is nothing to maintain, and no lock is made: a
    lock file must not be what creates a board's directory.
    """
    from ..storage import beneath

    if not beneath.is_directory(directory):
        yield
        return
    import filelock

    path = directory / MAINTENANCE_LOCK
    # filelock opens the path itself: make sure no link is on the way or at it first.
    os.close(beneath.open_file(path, os.O_RDWR | os.O_CREAT))
    lock = filelock.FileLock(os.fspath(path), timeout=timeout)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise InstanceBusyError(
            f"{directory}: another maintenance pass (a watchdog, or a resume) has held "
            f"{MAINTENANCE_LOCK} for {timeout:g} s; try again when it is done",
            lock_path=os.fspath(path),
        ) from None
    try:
        yield
    finally:
        lock.release()


@contextmanager
def maintenance_if_free(directory: Path) -> Iterator[bool]:
    """Hold the same lock if no one does, without waiting: yields whether it is held."""
    import fcntl

    from ..storage.beneath import open_file

    fd = open_file(directory / MAINTENANCE_LOCK, os.O_RDWR | os.O_CREAT)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing drops the flock
