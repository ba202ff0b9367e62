"""Peers of the resume-cycle benchmark: the same workflow on other frameworks.

``bench/resume_cycle.py --peers`` calls :func:`measure_peers` after its own figures and
prints :func:`peer_lines` under its table. Each peer's requirements are pinned in
``requirements.txt`` beside this file and are never a dependency of the package: when they
are not installed, the peer is skipped with a line that says how to install them.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

INSTALL_HINT = (
    "peers: LangGraph is not installed; for the peer lines run "
    "'.venv/bin/pip install -r bench/peers/requirements.txt'"
)


def langgraph_installed() -> bool:
    """Whether LangGraph and its SQLite checkpointer can be imported (without importing them)."""
    try:
        return importlib.util.find_spec("langgraph.checkpoint.sqlite") is not None
    except ImportError:  # find_spec imports the parents: no langgraph at all
        return False


def measure_peers(
    *, root: Path, phases: int, cycles: int, env: dict[str, str], progress: Callable[[str], None]
) -> Any:
    """The LangGraph figures for the same workflow, or the one line to print instead: how to
    install it, or how its workflow failed (ours are judged alone: the exit status stays)."""
    if not langgraph_installed():
        return INSTALL_HINT
    from peers import langgraph_cycle  # imported only now: it imports langgraph

    try:
        return langgraph_cycle.measure(
            root=root, phases=phases, cycles=cycles, env=env, progress=progress
        )
    except langgraph_cycle.PeerFailure as exc:
        return f"peers: no LangGraph figures, its workflow failed: {exc}"


def peer_lines(
    figures: Any,
    *,
    row: Callable[..., str],
    ours_in_process: Any,
    ours_cross_process: Any,
    group_floor: Any = None,
) -> list[str]:
    """The report's peer section, or the line ``measure_peers`` gave instead of figures."""
    if isinstance(figures, str):
        return [figures]
    from peers import langgraph_cycle

    return langgraph_cycle.report(
        figures,
        row=row,
        ours_in_process=ours_in_process,
        ours_cross_process=ours_cross_process,
        group_floor=group_floor,
    )
