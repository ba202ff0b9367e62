"""The runs of the served work directories, as the pages show them.

A run is named by the index of its work directory among those served and its id, never
by a path the browser sends. Live instances come from their state files, ended runs from
``.orchestrator/runs/<id>/state.json``; a page reads only the runs it shows.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

from ..._errors import OrchestratorError
from ...storage.runs import is_run_id, live_state_files, runs_dir


@attrs.frozen(kw_only=True)
class RunRef:
    """Where a run is: the served directory's index and the run's id."""

    directory: int
    run_id: str


@attrs.frozen(kw_only=True)
class RunRow:
    ref: RunRef
    workdir: Path
    workflow: str
    status: str
    phase: str
    waiting_for: int
    updated: float
    problem: str | None = None


class RunIndex:
    """The runs of the served directories, each read again only when its state file
    changes (a page over a thousand runs parses only what moved since the last one)."""

    def __init__(self, workdirs: Sequence[Path]) -> None:
        self.workdirs = list(workdirs)
        self._seen: dict[Path, tuple[int, int, RunRow | None]] = {}

    def rows(self) -> list[RunRow]:
        """Every run of every served directory, most recently changed first."""
        rows: list[RunRow] = []
        seen: dict[Path, tuple[int, int, RunRow | None]] = {}
        for index, workdir in enumerate(self.workdirs):
            live: set[str] = set()
            for state_path in live_state_files(workdir):
                row = self._cached(state_path, seen, functools.partial(_live_row, index, workdir))
                if row is not None:
                    live.add(row.ref.run_id)
                    rows.append(row)
            for state in runs_dir(workdir).glob("*/state.json"):
                if state.parent.name in live or not is_run_id(state.parent.name):
                    continue
                row = self._cached(state, seen, functools.partial(_ended_row, index, workdir))
                if row is not None:
                    rows.append(row)
        self._seen = seen
        return sorted(rows, key=lambda r: r.updated, reverse=True)

    def _cached(
        self,
        path: Path,
        seen: dict[Path, tuple[int, int, RunRow | None]],
        read: Callable[[Path], RunRow | None],
    ) -> RunRow | None:
        try:
            info = path.stat()
        except OSError:
            return None
        known = self._seen.get(path)
        if known is not None and known[:2] == (info.st_mtime_ns, info.st_size):
            seen[path] = known
            return known[2]
        row = read(path)
        seen[path] = (info.st_mtime_ns, info.st_size, row)
        return row


def eval_reports(workdirs: Sequence[Path]) -> list[tuple[int, str]]:
    """The ``report.html`` of each regression comparison under the served directories
    (up to three levels down): ``(directory index, path under it)``."""
    found = []
    for index, workdir in enumerate(workdirs):
        for pattern in ("report.html", "*/report.html", "*/*/report.html", "*/*/*/report.html"):
            for report in sorted(workdir.glob(pattern)):
                if report.is_file() and not report.is_symlink():
                    found.append((index, str(report.relative_to(workdir))))
    return found


def _ended_row(index: int, workdir: Path, state: Path) -> RunRow | None:
    import json

    try:
        data = json.loads(state.read_bytes())
        record = data["phase_data"]["x_orchestrator"]
        return RunRow(
            ref=RunRef(directory=index, run_id=state.parent.name),
            workdir=workdir,
            workflow=str(record.get("workflow_name", "?")),
            status=str(record.get("status", "?")),
            phase=str(data.get("phase_name", "")),
            waiting_for=0,
            updated=state.stat().st_mtime,
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None  # being written, or not ours: not listed


def _live_row(index: int, workdir: Path, state_path: Path) -> RunRow | None:
    from ..instance import describe_instance

    try:
        summary = describe_instance(state_path)
        return RunRow(
            ref=RunRef(directory=index, run_id=str(summary["run_id"])),
            workdir=workdir,
            workflow=str(summary["workflow"]),
            status=str(summary["status"]),
            phase=str(summary["phase_name"]),
            waiting_for=len(summary["pending"]),
            updated=state_path.stat().st_mtime,
            problem=summary.get("signature_problem"),
        )
    except (OrchestratorError, OSError) as exc:
        return RunRow(
            ref=RunRef(directory=index, run_id=state_path.name),
            workdir=workdir,
            workflow=state_path.name,
            status="damaged",
            phase="",
            waiting_for=0,
            updated=0.0,
            problem=str(exc),
        )
