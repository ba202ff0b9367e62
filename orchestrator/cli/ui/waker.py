"""Runs asleep on a timer that the page was asked to resume when due, and the thread of
the UI's process that resumes them: at the wake time it reads the run again, and only a
run still paused on that timer, now due, is resumed (``orchestrate resume``, in a new
process, as a host would)."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from ..._errors import OrchestratorError
from ...formats.times import parse_time
from .places import Place
from .runs import RunRef

#: The longest the thread sleeps between looks (a run resumed by hand is let go then).
LOOK_EVERY = 30.0


def spawn_resume(place: Place, run_id: str) -> None:
    """``orchestrate resume`` for the run, in its own process; the page shows the rest."""
    subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "resume", *place.command(run_id)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def wake_time(state: Any) -> datetime | None:
    """When the run's timer is due, if it is paused on one and waits for no answer."""
    record = state.phase_data.get("x_orchestrator") or {}
    until = record.get("waiting_until")
    if record.get("status") != "paused" or not isinstance(until, str):
        return None
    if any(r.status.value == "pending" for r in state.agent_requests):
        return None
    return parse_time(until)


class Waker:
    """The runs to resume when their timer is due, by their :class:`RunRef`."""

    def __init__(self, places: Sequence[Place]) -> None:
        self.places = places
        self._marks: dict[RunRef, datetime] = {}
        self._spawned: dict[RunRef, datetime] = {}  # the timer each run was resumed for
        self._declined: set[RunRef] = set()
        self._lock = threading.Lock()
        self._changed = threading.Event()
        self._thread: threading.Thread | None = None

    def marked(self, ref: RunRef) -> bool:
        with self._lock:
            return ref in self._marks

    def declined(self, ref: RunRef) -> bool:
        """Whether the box was unticked for the run: its page leaves it asleep."""
        with self._lock:
            return ref in self._declined

    def unmark(self, ref: RunRef) -> None:
        with self._lock:
            self._marks.pop(ref, None)
            self._declined.add(ref)

    def ask(self, ref: RunRef) -> str:
        """Resume the run when it is due (now, if it is); what happened, for the page."""
        wake = self._wake_of(ref)
        with self._lock:
            self._declined.discard(ref)
        if wake is None:
            with self._lock:
                self._marks.pop(ref, None)
            return "the run is not asleep on a timer now: nothing to resume"
        if wake <= datetime.now(timezone.utc):
            return "the timer is due; the run resumes" if self.resume_if_due(ref) else ""
        with self._lock:
            self._marks[ref] = wake
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, daemon=True, name="waker")
                self._thread.start()
        self._changed.set()
        return f"the run resumes when it is due ({wake.isoformat(timespec='seconds')})"

    def resume_if_due(self, ref: RunRef) -> bool:
        """Resume the run if it sleeps on a timer that is due; keep watching one that
        sleeps on; let go of one that no longer sleeps."""
        wake = self._wake_of(ref)
        with self._lock:
            if wake is not None and wake > datetime.now(timezone.utc):
                if ref in self._marks:
                    self._marks[ref] = wake
                return False
            self._marks.pop(ref, None)
            if wake is None:
                return False
            if self._spawned.get(ref) == wake:  # resumed for this timer already
                return True
            self._spawned[ref] = wake
        spawn_resume(self.places[ref.directory], ref.run_id)
        return True

    def _wake_of(self, ref: RunRef) -> datetime | None:
        try:
            loaded = self.places[ref.directory].load(ref.run_id)
        except (OrchestratorError, OSError):
            return None
        return None if loaded.problem else wake_time(loaded.state)

    def _watch(self) -> None:
        while True:
            with self._lock:
                due = sorted(self._marks.items(), key=lambda item: item[1])
            now = datetime.now(timezone.utc)
            for ref, wake in due:
                if wake <= now:
                    self.resume_if_due(ref)
            with self._lock:
                later = [w for w in self._marks.values() if w > now]
            pause = min([LOOK_EVERY, *((w - now).total_seconds() for w in later)])
            self._changed.wait(max(pause, 0.05))
            self._changed.clear()
