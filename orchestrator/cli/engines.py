"""An engine for a run of a run store: its bridge from the store, its invoker and clock
from the command's options, its task boards where the store keeps them, and its child
runs (``ctx.child``) as runs of the same store. What every command that advances a run
(run, resume, retry, rewind, cancel, drive, worker) shares, on either store.

A child run is started, advanced, retried and cancelled through the run store port
(``RunStore.child_store``), never through a particular store. In a command (``run``,
``resume``, ``retry``) a child that can advance is advanced in that process, as new
work, before the parent goes on; a worker leaves its children queued in the store for any
worker to claim (the store wakes the parent when a child ends)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import NoInstanceError, WorkflowNotFoundError
from .._ports import ChildRunInput, ChildRunState, OpenRunInput, QueueRunInput, RunInput

if TYPE_CHECKING:
    from .._ports import RunStore, StoredRun
    from ..engine.engine import Engine
    from ..engine.record import Outcome

#: How a child run that will not go on by itself ended.
ENDED = ("completed", "failed", "cancelled")


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
    # The new run of a ctx.continue_as_new lives in the same store.
    engine.next_run_bridge = lambda next_id: store.bridge(
        OpenRunInput(run_id=next_id, workflow_name=workflow_cls.name, new=True)
    )
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


# -- child runs (ctx.child) ----------------------------------------------------------


#: Builds the engine of a child run: ``(store, run_id, workflow class, new)``.
EngineMaker = Callable[["RunStore", str, Any, bool], "Engine"]


class StoreChildRuns:
    """The :class:`orchestrator._ports.ChildRuns` of runs of ``store``; ``agent``: who
    answers a child's asks in-process (as for its parent); ``in_process``: advance a child
    here (a command), or leave it queued for the store's workers (a worker); ``make``:
    builds a child's engine (default: as a command does, with ``agent``)."""

    def __init__(
        self,
        store: RunStore,
        agent: str,
        *,
        in_process: bool = True,
        make: EngineMaker | None = None,
    ) -> None:
        self._store = store
        self._agent = agent
        self._in_process = in_process
        self._make = make

    def _new_engine(self, store: RunStore, run_id: str, workflow_cls: Any) -> Engine:
        if self._make is None:
            return engine_for(store, run_id, workflow_cls, self._agent, new=True)
        return self._make(store, run_id, workflow_cls, True)

    def _live_engine(self, store: RunStore, run_id: str) -> Engine:
        if self._make is None:
            return run_engine(store, RunInput(run_id=run_id), self._agent)
        from ..engine.loader import load_workflow

        workflow_cls = load_workflow(store.workflow_of(RunInput(run_id=run_id)))
        return self._make(store, run_id, workflow_cls, False)

    def advance(self, request: ChildRunInput) -> ChildRunState:
        store = self._store.child_store(request.run_id)
        found = _read(store, request.run_id)
        if found is None:
            return self._start(store, request)
        queued = found.status == "queued"  # left for a worker, which has not started it
        if found.status == "failed" or not (found.live or queued) or not self._in_process:
            return state_of(found)
        # Live: it goes on here (one that ended by its last checkpoint, its end cut short
        # by a crash, finishes its end).
        run = RunInput(run_id=request.run_id)
        engine = self._live_engine(store, request.run_id)
        return _outcome_state(request.run_id, advance(store, run, engine), store)

    def _start(self, store: RunStore, request: ChildRunInput) -> ChildRunState:
        from ..engine.loader import load_workflow

        workflow_cls = load_workflow(request.workflow_ref)
        workdir = store.mailbox_directory or Path(request.workdir)
        if not self._in_process:
            store.queue_run(
                QueueRunInput(
                    run_id=request.run_id,
                    workflow_name=workflow_cls.name,
                    workflow_ref=request.workflow_ref,
                    start_args={
                        "inputs": request.inputs,
                        "output_path": None,
                        "workdir": str(workdir),
                        "parent_run_id": request.parent_run_id,
                    },
                )
            )
            return ChildRunState(run_id=request.run_id, status="queued")
        engine = self._new_engine(store, request.run_id, workflow_cls)
        engine.parent_run_id = request.parent_run_id
        outcome = engine.start(
            workflow_ref=request.workflow_ref,
            workdir=workdir,
            inputs=request.inputs,
            output_path=None,
            run_id=request.run_id,
        )
        return _outcome_state(request.run_id, outcome, store)

    def retry(self, run_id: str) -> None:
        store = self._store.child_store(run_id)
        found = _read(store, run_id)
        if found is None or not found.live or found.status != "failed":
            return
        self._live_engine(store, run_id).retry(run_id=run_id)

    def cancel(self, run_id: str) -> None:
        store = self._store.child_store(run_id)
        found = _read(store, run_id)
        run = RunInput(run_id=run_id)
        if found is not None and found.status == "queued" and store.cancel_queued(run):
            return
        if found is None or not found.live or found.status in ("completed", "cancelled"):
            return
        self._live_engine(store, run_id).cancel()


def _read(store: RunStore, run_id: str) -> StoredRun | None:
    """The child run, or ``None`` when it does not exist yet."""
    try:
        found = store.read_run(RunInput(run_id=run_id))
    except NoInstanceError:
        return None
    if found.run_id != run_id:
        return None  # the child's place holds no run of that id yet
    return found


def state_of(found: StoredRun) -> ChildRunState:
    """Where a stored child run is."""
    from ..engine.record import load_record
    from ..storage.runs import ENGINE_KEY

    state = found.state
    if state is None:
        return ChildRunState(run_id=found.run_id, status=found.status or "queued")
    record = load_record(state, source=found.source)
    status = record.status if found.live else (found.status or record.status)
    outputs: dict[str, Any] | None = None
    if status == "completed":
        outputs = {k: v for k, v in state.phase_data.items() if k != ENGINE_KEY}
    from ..formats.bridge import HistoryStatus

    pending = tuple(r.request_id for r in state.agent_requests if r.status is HistoryStatus.PENDING)
    return ChildRunState(
        run_id=found.run_id,
        status=status,
        outputs=outputs,
        failure=record.failure,
        pending=pending if found.live else (),
    )


def _outcome_state(run_id: str, outcome: Outcome, store: RunStore) -> ChildRunState:
    """Where a child is after this process advanced it."""
    if outcome.status == "completed":
        return ChildRunState(run_id=run_id, status="completed", outputs=dict(outcome.outputs))
    if outcome.status == "paused":
        return ChildRunState(
            run_id=run_id, status="paused", pending=tuple(r.request_id for r in outcome.pending)
        )
    found = _read(store, run_id)  # failed, or cancelled: the store says which, and why
    return state_of(found) if found is not None else ChildRunState(run_id=run_id, status="failed")
