"""Signals in a work directory (``orchestrate signal``): each run's inbox is
``signals.ndjson`` in its directory, appended to and synced, after the answer gate took
the payload; and which run here, the live instance or one of its child runs, waits for a
signal of a name."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .._errors import OrchestratorError, StorageError
from .._ports import SendSignalInput
from ..storage.runs import ENGINE_KEY, runs_dir

if TYPE_CHECKING:
    from .file_runs import FileRunStore


def append_signal(workdir: Path, state_path: Path, request: SendSignalInput) -> str:
    """Append the signal to the inbox of the live run whose state is at ``state_path``;
    a signal id already there is not kept again. Returns the signal's id."""
    from ..formats.signals import SIGNALS_FILE, admit_signal, new_signal, signal_line
    from ..storage.beneath import make_directories
    from ..storage.ndjson import append_lines
    from .file_bridge import read_signal_lines
    from .file_runs import read_state

    state = read_state(state_path, signed_only=True)
    record = state.phase_data.get(ENGINE_KEY)
    record = record if isinstance(record, dict) else None
    run_id = str(record.get("run_id", "")) if record is not None else ""
    admit_signal(record, request.name, request.payload, where=f"{state_path} (run {run_id})")
    signal = new_signal(request.name, request.payload, signal_id=request.signal_id)
    inbox = runs_dir(workdir) / run_id / SIGNALS_FILE
    try:
        if request.signal_id is not None and any(
            s.signal_id == request.signal_id for s in read_signal_lines(inbox)
        ):
            return request.signal_id  # sent before: kept once
        make_directories(inbox.parent)
        append_lines(inbox, [signal_line(signal)])
    except OSError as exc:
        raise StorageError.from_os_error(exc, path=str(inbox), action="write") from exc
    return signal.signal_id


def waiting_for_signal(store: FileRunStore, name: str) -> FileRunStore | None:
    """The place of the run that waits for signal ``name``: ``store``'s live instance,
    else the first of its child runs (or theirs) that waits for it; ``None`` when none
    does (a signal is then kept for the live instance)."""
    from .file_runs import read_live

    try:
        state, _ = read_live(store.state_path(), signed_only=True)
    except OrchestratorError:
        return None  # no live instance here (or one not to be read): nothing waits
    record = state.phase_data.get(ENGINE_KEY)
    waiting = record.get("waiting_for_signal") if isinstance(record, dict) else None
    if isinstance(waiting, dict) and waiting.get("name") == name:
        return store
    for _, child in store.child_stores():
        found = waiting_for_signal(child, name)
        if found is not None:
            return found
    return None
