"""Where a work directory keeps its runs, and which run a command about "the run here"
means, and the read of one run's state (:func:`load_run`). Standard library only at the
top: ``orchestrate events`` and ``history`` start with it."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import ContractError, NoInstanceError, StateDamagedError, UsageError
from ..formats.step_names import EVENTS_FILE

if TYPE_CHECKING:
    from ..formats.bridge import CheckpointState

__all__ = [
    "ARCHIVE_FILE",
    "ENGINE_KEY",
    "EVENTS_FILE",
    "HISTORY_DIR",
    "find_live_state",
    "is_run_id",
    "latest_finished",
    "live_state_files",
    "live_state_path",
    "load_run",
    "run_id_in",
    "runs_dir",
]

HISTORY_DIR = ".orchestrator"  # the instance lock, and each run's directory under runs/
ARCHIVE_FILE = "requests.ndjson"  # a run's finished requests, moved out of the state
ENGINE_KEY = "x_orchestrator"  # the engine's record in the state's phase_data
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def runs_dir(workdir: Path) -> Path:
    return workdir / HISTORY_DIR / "runs"


def live_state_files(workdir: Path) -> list[Path]:
    """The state files of live instances in ``workdir`` (``.<workflow>-state.json``)."""
    return sorted(p for p in workdir.glob(".*-state.json") if p.is_file())


def latest_finished(workdir: Path) -> Path | None:
    """The ``state.json`` of the run that finished last (by its time, then its path)."""
    found = []
    for state in runs_dir(workdir).glob("*/state.json"):
        try:
            found.append((state.stat().st_mtime, str(state), state))
        except FileNotFoundError:  # removed while we looked
            continue
    return max(found)[2] if found else None


def is_run_id(text: str) -> bool:
    """Whether ``text`` can be a run id: a plain name, safe as a directory's."""
    return _RUN_ID.fullmatch(text) is not None


def run_id_in(data: Any, *, source: str) -> str | None:
    """The run id a state (its JSON data) records; ``None`` when it records none. An id
    that is not a plain name (it names a directory) is refused: orchestrate wrote no such."""
    record = data.get("phase_data", {}) if isinstance(data, dict) else None
    engine = record.get(ENGINE_KEY) if isinstance(record, dict) else None
    run_id = engine.get("run_id") if isinstance(engine, dict) else None
    if not isinstance(run_id, str):
        return None
    if not is_run_id(run_id):
        raise ContractError(
            f"run id {run_id!r} is not a plain name; the state file was not written by orchestrate",
            source=source,
            json_path=f"$.phase_data.{ENGINE_KEY}.run_id",
            rule="pattern",
        )
    return run_id


def load_run(
    workdir: Path, run_id: str | None = None, *, signed_only: bool = False
) -> tuple[CheckpointState, str]:
    """The state of the live instance in ``workdir`` (or of run ``run_id``, or of the
    latest finished run), with every archived request whole again; and where it is.

    ``signed_only``: for a command that acts on the run (rewind, fork), a state whose
    signature does not hold is refused (``StateUntrustedError``) before it is read.
    """
    from .._errors import NoInstanceError
    from ..formats.bridge_codec import parse_state, restore_archived
    from .files import STATE_MAX_BYTES, read_json_file_bytes, read_regular_file

    runs = runs_dir(workdir)
    live = live_state_files(workdir)
    candidates: list[Path] = []
    if run_id is None:
        latest = latest_finished(workdir)
        candidates += live + ([latest] if latest is not None else [])
    else:
        candidates += [runs / run_id / "state.json", *live]  # a live run by its id too
    for path in candidates:
        if not path.exists():
            continue
        data, raw = read_json_file_bytes(
            path, max_bytes=STATE_MAX_BYTES, allow_lone_surrogates=True
        )
        own_run = run_id_in(data, source=str(path))
        if run_id is not None and own_run != run_id:
            continue
        if signed_only:
            from .checkpoints import check_checkpoint
            from .state_key import check_signature

            check_signature(data, source=str(path), raw=raw)
            check_checkpoint(data, workdir, source=str(path))
        state = parse_state(data, source=str(path))
        archive = runs / str(own_run) / ARCHIVE_FILE
        if any(r.x_archived for r in state.agent_requests) and archive.exists():
            lines = read_regular_file(archive, max_bytes=STATE_MAX_BYTES)
            state = restore_archived(state, lines, source=str(archive))
        return state, str(path)
    wanted = f"run {run_id}" if run_id else "workflow instance and no finished run"
    raise NoInstanceError(f"{workdir}: no {wanted} here (nothing under {runs})")


def live_state_path(workdir: Path, workflow_name: str | None) -> Path:
    """The state file of the instance in ``workdir``; one that is not a regular file (a
    FIFO, a directory) is a damaged state, which ``cancel --force`` sets aside."""
    path = find_live_state(workdir, workflow_name)
    mode = path.lstat().st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):  # a link: its readers refuse it
        kind = (
            "a FIFO (named pipe)"
            if stat.S_ISFIFO(mode)
            else "a directory"
            if stat.S_ISDIR(mode)
            else "a socket or a device"
        )
        raise StateDamagedError(
            f"is {kind}, not a regular file", source=str(path), rule="not-a-file"
        )
    return path


def find_live_state(workdir: Path, workflow_name: str | None) -> Path:
    """Where the instance's state is, whatever it is (read nothing: a FIFO would block)."""
    from ..formats.bridge import state_file_name

    if workflow_name:
        if ":" in workflow_name or workflow_name.endswith(".py") or "/" in workflow_name:
            raise UsageError(
                f"--workflow {workflow_name!r} looks like a workflow reference; here it names "
                "an instance by its workflow's name (the NAME of .NAME-state.json, such as "
                "'code-review'): the instance knows its own workflow"
            )
        path = workdir / state_file_name(workflow_name)
        if not os.path.lexists(path):
            raise NoInstanceError(
                f"{workdir}: no {workflow_name} instance here ({path.name} is missing)"
            )
        return path
    # Any kind of entry: a FIFO or a directory in the state's place is damage, not "none".
    found = sorted(workdir.glob(".*-state.json"))
    if not found:
        raise NoInstanceError(
            f"{workdir}: no workflow instance here (no .<workflow>-state.json); start one with "
            "'orchestrate run WORKFLOW'"
        )
    if len(found) > 1:
        names = ", ".join(p.name[1 : -len("-state.json")] for p in found)
        raise UsageError(f"{workdir} holds several instances ({names}); choose one with --workflow")
    return found[0]
