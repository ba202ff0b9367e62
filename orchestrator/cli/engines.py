"""An engine for a run of a run store: its bridge from the store, its invoker and clock
from the command's options, its task boards where the store keeps them. What every
command that advances a run (run, resume, retry, rewind, cancel, drive, worker) shares,
on either store."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import WorkflowNotFoundError
from .._ports import OpenRunInput, RunInput

if TYPE_CHECKING:
    from .._ports import RunStore, StoredRun
    from ..engine.engine import Engine
    from ..engine.record import Outcome


def engine_for(
    store: RunStore, run_id: str | None, workflow_cls: Any, agent: str, *, new: bool = False
) -> Engine:
    """An engine for run ``run_id`` of ``store`` and ``workflow_cls``; ``new``: a run about
    to start, or an ended one to be made live again."""
    from ..engine.engine import Engine
    from .common import clock, invoker

    opened = OpenRunInput(run_id=run_id, workflow_name=workflow_cls.name, new=new)
    bridge = store.bridge(opened)
    engine = Engine(workflow_cls, bridge=bridge, invoker=invoker(agent), clock=clock())
    if new:  # a run started inside a caller's trace (W3C Trace Context) stays in it
        engine.trace_parent = os.environ.get("TRACEPARENT")
    from .child_runs import StoreChildRuns

    # Its child runs live in the same store, advanced here as new work.
    engine.children = StoreChildRuns(store, agent)
    boards = store.run_boards()
    if boards is not None:  # its task boards live in the store too
        engine.board_store = boards
    from .telemetry import watch

    watch(engine, store, action="start" if new else "resume")
    return engine


def run_engine(store: RunStore, run: RunInput, agent: str) -> Engine:
    """An engine for a run the store holds, with the workflow it records (checked before
    anything it names is imported)."""
    from ..engine.loader import load_workflow

    reference = store.workflow_of(run)
    try:
        workflow_cls = load_workflow(reference)
    except WorkflowNotFoundError as exc:
        hint = store.relocate_hint(run)
        if hint is None:
            raise
        raise WorkflowNotFoundError(
            f"{exc}; if the project moved, point the instance at its workflow's new place: {hint}"
        ) from None
    return engine_for(store, run.run_id, workflow_cls, agent)


def start_queued(run: StoredRun, engine: Engine) -> Outcome:
    """Start a queued run with what ``run --queue`` recorded."""
    args = run.start_args or {}
    parent = args.get("parent_run_id")
    if isinstance(parent, str):  # a child run a worker left queued (``ctx.child``)
        engine.parent_run_id = parent
    return engine.start(
        workflow_ref=str(run.workflow_ref),
        workdir=Path(str(args.get("workdir") or os.getcwd())),
        inputs=dict(args.get("inputs") or {}),
        output_path=args.get("output_path"),
        run_id=run.run_id,
    )


def advance(store: RunStore, run: RunInput, engine: Engine) -> Outcome:
    """Go on with a run: start it when it is queued, else resume it."""
    found = store.read_run(run) if run.run_id is not None else None
    if found is not None and found.status == "queued":
        return start_queued(found, engine)
    return engine.resume()
