"""Which finished runs ``orchestrate prune`` removes: one rule for every run store.

A store lists its ended runs as :class:`RunListing` rows; :func:`select_runs` applies the
request's statuses, its age and its ``keep_last`` (per workflow) and returns the runs to
remove, oldest first. The removal itself is each store's (whole or not at all).
"""

from __future__ import annotations

from collections.abc import Iterable

from .._ports import FINISHED_STATUSES, PruneInput, RunListing


def select_runs(runs: Iterable[RunListing], request: PruneInput) -> list[RunListing]:
    """The runs ``request`` selects among ``runs``, oldest first. Only a finished status
    is ever selected, whatever ``request.status`` names."""
    wanted = set(request.status) & set(FINISHED_STATUSES)
    keep = set(request.keep)
    candidates = [r for r in runs if r.status in wanted and r.run_id not in keep]
    newest_first = sorted(candidates, key=lambda r: (r.updated_at, r.run_id), reverse=True)
    seen: dict[str, int] = {}
    chosen = []
    for run in newest_first:
        seen[run.workflow] = seen.get(run.workflow, 0) + 1
        if seen[run.workflow] <= request.keep_last:
            continue  # one of the workflow's most recent: kept
        if request.older_than is not None and run.updated_at >= request.older_than:
            continue
        chosen.append(run)
    return chosen[::-1]
