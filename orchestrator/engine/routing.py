"""Routing between phases: a phase that returns ``Goto`` chooses the phase that runs next.

The route a run took is its ``completed_phases``, in order, with the phase it is in now:
each completion is saved with the state that names the next phase, so a resume after a
crash, a replay, a retry, a rewind and a fork all follow it. A phase the route enters
again is a new visit: its evidence goes to a directory of its own
(``phases/02-review.2`` for the second visit of phase 2), and ``phase_data`` holds its
latest output while the earlier ones wait in the engine's record (``earlier_visits``)
for a rewind or a fork that goes back to them.

This module holds what the engine, its lifecycle and the replay share about visits, and
the workflow's graph as Mermaid text (``orchestrate graph``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..formats.bridge import CompletedPhase
from .record import EngineRecord, copy_json
from .workflow import DEFAULT_MAX_VISITS, PhaseSpec, Workflow

__all__ = ["cut_for", "mermaid_graph", "outputs_at", "visits_of"]


def visits_of(completed: Sequence[CompletedPhase], name: str) -> int:
    """How many visits of phase ``name`` completed."""
    return sum(1 for done in completed if done.phase_name == name)


def cut_for(
    completed: Sequence[CompletedPhase], current: str, status: str, target: PhaseSpec
) -> int | None:
    """Where a rewind or a fork to ``target`` cuts a routed run's completions: the
    completions from that index on are taken back. It goes back to the latest visit of
    ``target``: the one the run is in (``current``, unless the run completed), else its
    latest completion. ``None``: the run never entered ``target`` (a route skipped it)."""
    if target.name == current and status != "completed":
        return len(completed)
    for index in range(len(completed) - 1, -1, -1):
        if completed[index].phase_name == target.name:
            return index
    return None


def outputs_at(
    phase_data: dict[str, Any], record: EngineRecord, completed: Sequence[CompletedPhase], cut: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The outputs of a routed run as they were before its completion number ``cut``
    (each phase's latest visit before it), and the earlier visits' outputs of then."""
    earlier = record.earlier_visits or []
    counts: dict[str, int] = {}
    for done in completed[:cut]:
        counts[done.phase_name] = counts.get(done.phase_name, 0) + 1
    outputs: dict[str, Any] = {}
    kept: list[dict[str, Any]] = []
    for name, count in counts.items():
        if count == visits_of(completed, name):
            if name in phase_data:
                outputs[name] = copy_json(phase_data[name])
        else:
            found = [e for e in earlier if e.get("phase") == name and e.get("visit") == count]
            if found:
                outputs[name] = copy_json(found[-1].get("output"))
        kept += [copy_json(e) for e in earlier if e.get("phase") == name and e["visit"] < count]
    return outputs, kept


def mermaid_graph(workflow_cls: type[Workflow]) -> str:
    """The workflow's phases as a Mermaid flowchart: the phases in order, joined by solid
    arrows, and each route a phase declares as a dashed arrow labelled ``goto``."""
    ids = {spec.name: f"p{spec.number}" for spec in workflow_cls.phases}
    lines = ["flowchart TD"]
    for spec in workflow_cls.phases:
        limit = spec.max_visits
        extra = "" if limit == DEFAULT_MAX_VISITS else f"<br/>max_visits {limit}"
        lines.append(f'    {ids[spec.name]}["{spec.number} {spec.name}{extra}"]')
    for spec, following in zip(workflow_cls.phases, workflow_cls.phases[1:], strict=False):
        lines.append(f"    {ids[spec.name]} --> {ids[following.name]}")
    for spec in workflow_cls.phases:
        for target in spec.routes:
            lines.append(f"    {ids[spec.name]} -. goto .-> {ids[target]}")
    return "\n".join(lines) + "\n"
