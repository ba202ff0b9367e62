"""The runs of the served places, as the pages show them.

A run is named by the index of its place among those served and its id, never by a path
the browser sends.
"""

from __future__ import annotations

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
