"""Where a work directory keeps its runs, and which run a command about "the run here"
means. Standard library only: ``orchestrate events`` and ``history`` start with it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .._errors import ContractError
from ..formats.step_names import EVENTS_FILE

__all__ = [
    "ARCHIVE_FILE",
    "ENGINE_KEY",
    "EVENTS_FILE",
    "HISTORY_DIR",
    "is_run_id",
    "latest_finished",
    "live_state_files",
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
