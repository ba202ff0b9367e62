"""The runs of the served places, as the pages show them, and the regression reports of
the served work directories.

A run is named by the index of its place among those served and its id, never by a path
the browser sends.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import attrs


@attrs.frozen(kw_only=True)
class RunRef:
    """Where a run is: the served directory's index and the run's id."""

    directory: int
    run_id: str


@attrs.frozen(kw_only=True)
class RunRow:
    ref: RunRef
    where: str  # the store the run is in, as its place's label says
    workflow: str
    status: str
    phase: str
    waiting_for: int
    updated: float
    problem: str | None = None


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
