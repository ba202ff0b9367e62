"""The run's lifecycle: start, resume, retry, rewind, fork, cancel, and version migrations.

Each entry point takes the instance lock, attaches the run's state to the engine (a new
one, the stored one, or the one a clean pause of this process left, see
:class:`PauseHandoff`), changes what it must, saves a checkpoint, and hands over to the
engine's phase runner (``Engine.advance``).

What a pause leaves for the next resume is held by the engine, or by a
:class:`PauseHandoff` the host gives every engine it builds, never by the module: one
engine's run cannot reach another through a global.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from .._errors import (
    InstanceExistsError,
    OrchestratorError,
    ResponseRejectedError,
    StateDamagedError,
    UsageError,
)
from .._ports import Bridge, ConsumeInput, EvidenceInput, FinishInput, PublishInput
from ..evidence.documents import (
    EVENT_RUN_FORK,
    EVENT_RUN_MIGRATE,
    EVENT_RUN_RETRY,
    EVENT_RUN_REWIND,
    EVENT_RUN_START,
)
from ..formats.bridge import CheckpointState, CompletedPhase, HistoryStatus
from ..formats.bridge_codec import dump_document
from ..formats.step_names import STATUS_ABSTAIN
from ..formats.times import format_time
from ..storage.runs import ENGINE_KEY
from .journal import JournalKept, ReplayRows
from .mailbox import MailboxMemo
from .record import EXIT_ERROR, EngineRecord, Outcome, copy_json, load_record, to_json_value
from .routing import cut_for, outputs_at, visits_of
from .workflow import PhaseSpec, Workflow

if TYPE_CHECKING:
    from .engine import Engine


@attrs.define(eq=False)
class PausedRun:
    """What a clean pause left for the next resume of the same instance."""

    token: object  # the bridge's token of the state it saved
    state: CheckpointState
    record: EngineRecord
    workflow_cls: type[Workflow]
    bridge: Bridge
    published: int  # the recorder's: the last event known to be in the run's log
    mailbox: MailboxMemo  # the index of the state's requests, and how many are settled
    journal: tuple[ReplayRows, JournalKept | None]  # replay rows, the journal's JSON


class PauseHandoff:
    """Hands the state a clean pause saved to the next resume of the same instance in
    this process, so that resume reads nothing back while the stored state is still
    what was saved.

    Every engine has one of its own (an in-process host that keeps its engine, like
    ``drive``, gains from it); a host that builds an engine per resume (``WorkflowHarness``,
    a worker) gives each one it builds the same handoff. It holds a few instances at most,
    the most recent ones, by the bridge's location; a handoff is safe to share between
    threads (a worker advances several runs at once)."""

    KEPT = 8

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[str, PausedRun] = {}

    def leave(self, location: str, paused: PausedRun) -> None:
        """Keep ``paused`` for the next resume of the instance at ``location``."""
        with self._lock:
            self._kept.pop(location, None)
            self._kept[location] = paused
            while len(self._kept) > self.KEPT:
                del self._kept[next(iter(self._kept))]

    def take(self, location: str) -> PausedRun | None:
        """What a pause left for ``location``, taken: whoever takes it is its only holder."""
        with self._lock:
            return self._kept.pop(location, None)

    def holds(self, location: str) -> bool:
        """Whether a pause left something for ``location``."""
        with self._lock:
            return location in self._kept

    def clear(self) -> None:
        """Forget every pause: the next resume reads its state, as a new process does."""
        with self._lock:
            self._kept.clear()


class Lifecycle:
    """The engine's part that runs its entry points (see ``Engine``'s methods of the same
    names). Reads and changes the run through the engine's public interface only."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    # -- a new run --------------------------------------------------------------------------

    def start(
        self,
        *,
        workflow_ref: str,
        workdir: Path,
        inputs: dict[str, Any] | None,
        output_path: str | None,
        run_id: str | None,
    ) -> Outcome:
        engine = self._engine
        workflow_cls = engine.workflow_cls
        with engine.bridge.lock():
            if engine.bridge.exists():
                raise InstanceExistsError(
                    f"{workdir}: a {workflow_cls.name} instance already lives here; "
                    "'orchestrate resume' continues it, 'orchestrate cancel' removes it"
                )
            self._clear_leftovers()
            self.begin(
                workflow_ref=workflow_ref,
                workdir=workdir,
                inputs=dict(inputs or {}),
                output_path=str(output_path or workdir),
                run_id=run_id or engine.new_id(),
            )
            return engine.advance()

    def begin(
        self,
        *,
        workflow_ref: str,
        workdir: Path,
        inputs: dict[str, Any],
        output_path: str,
        run_id: str,
        previous: EngineRecord | None = None,
    ) -> None:
        """Attach a new run at its first phase and save it (the caller holds the lock);
        ``previous``: the run it continues (``ctx.continue_as_new``), of the same lineage."""
        engine = self._engine
        first = engine.workflow_cls.phases[0]
        now = format_time(engine.clock.now())
        from ..evidence.otel import new_trace_context

        record = EngineRecord(
            run_id=run_id,
            workflow=workflow_ref,
            workflow_name=engine.workflow_cls.name,
            workflow_version=engine.workflow_cls.version,
            workdir=str(workdir),
            started_at=now,
            inputs=inputs,
            evidence=True,
            trace=new_trace_context(run_id, parent=engine.trace_parent),
            parent_run_id=engine.parent_run_id if previous is None else previous.parent_run_id,
        )
        if previous is not None:
            record.previous_run_id = previous.run_id
            record.lineage_run_id = previous.lineage_run_id or previous.run_id
        state = CheckpointState(
            phase=first.number,
            phase_name=first.name,
            checkpoint_name="started",
            created_at=now,
            output_path=output_path,
            project_path=_optional_str(inputs.get("project_path")),
            template_name=_optional_str(inputs.get("template_name")),
        )
        engine.attach(state, record)
        self._tell_start()
        engine.save("started")

    def _tell_start(self) -> None:
        engine = self._engine
        record = engine.record
        engine.recorder.emit(
            EVENT_RUN_START,
            {
                "workflow": engine.workflow_cls.name,
                "ref": record.workflow,
                "run_id": record.run_id,
                "phases": [p.name for p in engine.workflow_cls.phases],
                "inputs": sorted(record.inputs),
                "x_trace": record.trace,
            },
        )

    def _clear_leftovers(self) -> None:
        """Before a new run: requests and answers a crash left from an earlier one."""
        bridge = self._engine.bridge
        try:
            stale = bridge.read_responses()
        except ResponseRejectedError:
            stale = []  # not ours to judge; the first resume will name it
        bridge.consume(ConsumeInput(consumed=stale))
        bridge.publish(PublishInput(pending=()))

    # -- going on ---------------------------------------------------------------------------

    def resume(self) -> Outcome:
        engine = self._engine
        mailbox = engine.mailbox
        with engine.bridge.lock():
            if not self.adopt_paused():
                self.attach_current(engine.bridge.load_state())
                engine.recorder.publish()  # a crash may have cut the last publication
            record = engine.record
            if record.status == "cancelled":  # a crash cut the cancel short: finish it
                return self.finish_cancel()
            if record.status == "failed":
                return Outcome(
                    status="failed",
                    exit_code=EXIT_ERROR,
                    message=f"the run already failed: {record.failure}; the state is kept: "
                    "fix the cause, then 'orchestrate retry' goes on from the failed phase "
                    "('orchestrate cancel' removes it)",
                )
            changed = mailbox.accept_responses(engine.bridge.read_responses())
            if record.continued_as is not None:  # a crash cut the step into the next run
                return engine.go_on_as_new()
            if record.status == "completed":  # every phase ran; a crash cut the cleanup
                return engine.finish()
            changed |= mailbox.expire_overdue()
            if not changed and not mailbox.pending() and engine.waiting_quietly():
                return engine.pause_now()  # a timer not yet due, no signal: nothing to write
            if mailbox.pending():
                if changed:
                    engine.tell_pause()
                    engine.save("before_agent_invocation")
                return engine.pause_now()
            return engine.advance()

    def retry(self, *, run_id: str | None) -> Outcome:
        engine = self._engine
        with engine.bridge.lock():
            self.attach_current(engine.bridge.load_state())
            record = engine.record
            if run_id is not None and run_id != record.run_id:
                raise UsageError(
                    f"{engine.bridge.location}: the instance here is run {record.run_id}, not "
                    f"{run_id}; a run that ended is history and cannot be retried"
                )
            # A state left "running" (or re-opened) is a retry a crash cut short.
            cut_short = record.status == "running" or (
                record.status != "failed" and record.reopened
            )
            if record.status != "failed" and not cut_short:
                raise UsageError(
                    f"{engine.bridge.location}: run {record.run_id} is {record.status}, not "
                    "failed: there is nothing to retry ('orchestrate resume' goes on)"
                )
            if not cut_short:
                self._retry_children()
                return self._reopen()
        # Re-opened already, by a retry that a crash cut short: go on as resume does.
        return self.resume()

    def _retry_children(self) -> None:
        """A retry of a run reaches its children: each child the failed phase waited
        for that failed is re-opened first, and the phase goes on with the same runs."""
        engine = self._engine
        host = engine.children
        if host is None:
            return
        for entry in engine.record.journal:
            if entry.kind == "children" and entry.error is not None:
                host.retry(str(entry.error["run_id"]))

    def _reopen(self) -> Outcome:
        engine = self._engine
        state, record = engine.state, engine.record
        engine.recorder.publish()  # a crash may have cut the failure's publication
        for pending in engine.mailbox.pending():
            pending.status = HistoryStatus.WITHDRAWN
            pending.x_note = "withdrawn: the run failed, then was retried"
        failure = record.failure
        record.tries.append(
            {
                "at": format_time(engine.clock.now()),
                "phase": state.phase_name,
                "failure": failure,
                "trace": record.failure_trace,
                "dropped": [],
            }
        )
        record.status, record.failure, record.reopened = "running", None, True
        record.failure_trace = None
        engine.recorder.emit(
            EVENT_RUN_RETRY,
            {
                "phase": state.phase,
                "skill": state.phase_name,
                "failure": failure,
                "try": len(record.tries) + 1,
            },
        )
        engine.save("retried")
        return engine.advance()

    # -- back and aside -----------------------------------------------------------------------

    def rewind(self, to_phase: str, *, ended: CheckpointState | None) -> str:
        engine = self._engine
        with engine.bridge.lock():
            if engine.bridge.exists():
                state = engine.bridge.load_state()
            elif ended is not None:
                state = ended
            else:
                engine.bridge.load_state()  # says there is no instance here
                raise AssertionError("unreachable")
            self.attach_current(state)
            record = engine.record
            target = self._phase_for(to_phase, "rewind to")
            if record.status == "cancelled":
                raise UsageError(f"run {record.run_id} was cancelled; it cannot be rewound")
            cut = self._routed_cut(state, record, target, "rewind to")
            if cut is None and target.number > state.phase and record.status != "completed":
                raise UsageError(
                    f"phase {target.name} comes after the run's current phase "
                    f"{state.phase_name}: a rewind goes back ('orchestrate resume' goes on)"
                )
            engine.recorder.publish()
            if record.status not in ("failed", "completed"):
                self._stop_current_phase(f"the run was rewound to {target.name}", target)
            moved = (
                self._move_outputs_from(target)
                if cut is None
                else self._move_routed_outputs(target, cut)
            )
            engine.recorder.emit(
                EVENT_RUN_REWIND,
                {
                    "phase": target.number,
                    "skill": target.name,
                    "from": record.rewinds[-1]["from_phase"],
                    "outputs_moved": sorted(moved),
                    **({"visit": record.visit} if record.visit else {}),
                },
            )
            engine.save("rewound")
            engine.bridge.publish(PublishInput(pending=()))
            return (
                f"{engine.workflow_cls.name}: run {record.run_id} rewound to phase "
                f"{target.number} ({target.name}); 'orchestrate resume' (or drive) runs it "
                "and every phase after it again"
            )

    def _stop_current_phase(self, why: str, target: PhaseSpec) -> None:
        """A rewind of a live run: its requests are withdrawn, its phase closed."""
        engine = self._engine
        state, record = engine.state, engine.record
        engine.recorder.withdraw(engine.mailbox.pending(), why)
        if record.phase_started_at is not None:  # the current phase stops here
            engine.close_phase(
                engine.workflow_cls.phase_named(state.phase_name),
                status=STATUS_ABSTAIN,
                summary=f"rewound to phase {target.number} ({target.name})",
            )

    def _move_outputs_from(self, target: PhaseSpec) -> dict[str, Any]:
        """Take the run back to ``target``: the outputs of it and every later phase move to
        the record's rewinds; returns them."""
        engine = self._engine
        state, record = engine.state, engine.record
        for pending in engine.mailbox.pending():
            pending.status = HistoryStatus.WITHDRAWN
        later = {p.name for p in engine.workflow_cls.phases if p.number >= target.number}
        moved = {name: state.phase_data.pop(name) for name in later if name in state.phase_data}
        taken_back = [p for p in state.completed_phases if p.phase >= target.number]
        record.rewinds.append(
            {
                "at": format_time(engine.clock.now()),
                "from_phase": state.phase_name,
                "from_status": record.status,
                "to_phase": target.name,
                "outputs": moved,
                # the completions taken back, so that the run's history still tells them
                "completed": [_completion(p) for p in taken_back],
            }
        )
        state.completed_phases = [p for p in state.completed_phases if p.phase < target.number]
        state.phase, state.phase_name = target.number, target.name
        record.status, record.failure, record.failure_trace = "paused", None, None
        record.journal, record.marks = [], []
        record.reopened, record.waiting_until, record.phase_started_at = False, None, None
        record.waiting_for_signal = None
        record.waiting_children = []  # the phase starts its children anew when it runs
        record.continued_as = record.continued_inputs = None  # it goes on anew, if at all
        return moved

    def _routed_cut(
        self, state: CheckpointState, record: EngineRecord, target: PhaseSpec, what: str
    ) -> int | None:
        """Where a rewind or a fork of a routed run goes back to (see ``routing.cut_for``);
        ``None`` for a run that never routed (it goes back by phase number)."""
        if not record.route:
            return None
        cut = cut_for(state.completed_phases, state.phase_name, record.status, target)
        if cut is None:
            raise UsageError(
                f"{what} {target.name!r}: run {record.run_id} never entered that phase (its "
                "route went past it); name a phase the run was in ('orchestrate history' "
                "lists them)"
            )
        return cut

    def _move_routed_outputs(self, target: PhaseSpec, cut: int) -> dict[str, Any]:
        """Take a routed run back to its latest visit of ``target``: the completions from
        ``cut`` on, with their outputs and routes, move to the record's rewinds, and each
        phase gets back the output of its latest visit before them; returns the outputs
        taken back."""
        engine = self._engine
        state, record = engine.state, engine.record
        for pending in engine.mailbox.pending():
            pending.status = HistoryStatus.WITHDRAWN
        completed = state.completed_phases
        taken_back = completed[cut:]
        outputs, earlier = outputs_at(state.phase_data, record, completed, cut)
        moved = {
            name: state.phase_data[name]
            for name in {p.phase_name for p in taken_back}
            if name in state.phase_data
        }
        route = record.route or []
        record.rewinds.append(
            {
                "at": format_time(engine.clock.now()),
                "from_phase": state.phase_name,
                "from_status": record.status,
                "to_phase": target.name,
                "outputs": moved,
                "completed": [_completion(p) for p in taken_back],
                "route": [r for r in route if r.get("index", 0) >= cut],
            }
        )
        state.completed_phases = completed[:cut]
        state.phase_data = {**outputs, ENGINE_KEY: state.phase_data[ENGINE_KEY]}
        state.phase, state.phase_name = target.number, target.name
        record.route = [r for r in route if r.get("index", 0) < cut]
        record.earlier_visits = earlier or None
        visit = visits_of(state.completed_phases, target.name) + 1
        record.visit = visit if visit > 1 else None
        record.status, record.failure, record.failure_trace = "paused", None, None
        record.journal, record.marks = [], []
        record.reopened, record.waiting_until, record.phase_started_at = False, None, None
        record.waiting_for_signal = None
        record.waiting_children = []  # the phase starts its children anew when it runs
        record.continued_as = record.continued_inputs = None  # it goes on anew, if at all
        return moved

    def fork(
        self, source: CheckpointState, *, from_phase: str, workdir: Path, output_path: str
    ) -> str:
        engine = self._engine
        with engine.bridge.lock():
            if engine.bridge.exists():
                raise InstanceExistsError(
                    f"{engine.bridge.location}: an instance already lives here; fork into an "
                    "empty work directory"
                )
            origin = load_record(source, source="the run to fork")
            target = self._phase_for(from_phase, "fork from")
            state, record = self._forked(source, origin, target, workdir, output_path)
            cut = self._routed_cut(source, origin, target, "fork from")
            if cut is not None:
                self._follow_route(state, record, source, origin, cut)
            self._clear_leftovers()
            engine.attach(state, record)
            self._tell_start()
            engine.recorder.emit(
                EVENT_RUN_FORK,
                {
                    "phase": target.number,
                    "skill": target.name,
                    "from_run": origin.run_id,
                    "outputs": sorted(state.phase_data),
                },
            )
            engine.save("forked")
            return (
                f"{engine.workflow_cls.name}: run {record.run_id} forked from run "
                f"{origin.run_id} at phase {target.number} ({target.name}); 'orchestrate "
                "resume' (or drive) runs it"
            )

    def _forked(
        self,
        source: CheckpointState,
        origin: EngineRecord,
        target: PhaseSpec,
        workdir: Path,
        output_path: str,
    ) -> tuple[CheckpointState, EngineRecord]:
        """The state and record of a new run forked from ``source`` at ``target``."""
        engine = self._engine
        now = format_time(engine.clock.now())
        earlier = {p.name for p in engine.workflow_cls.phases if p.number < target.number}
        record = EngineRecord(
            run_id=engine.new_id(),
            workflow=origin.workflow,
            workflow_name=engine.workflow_cls.name,
            workflow_version=engine.workflow_cls.version,
            workdir=str(workdir),
            started_at=now,
            inputs=copy_json(origin.inputs),
            status="paused",
            evidence=True,
            forked_from={"run_id": origin.run_id, "workdir": origin.workdir, "phase": target.name},
        )
        state = CheckpointState(
            phase=target.number,
            phase_name=target.name,
            checkpoint_name="forked",
            created_at=now,
            output_path=output_path,
            project_path=source.project_path,
            template_name=source.template_name,
            completed_phases=[p for p in source.completed_phases if p.phase < target.number],
            phase_data={
                name: copy_json(value)
                for name, value in source.phase_data.items()
                if name in earlier
            },
        )
        return state, record

    def _follow_route(
        self,
        state: CheckpointState,
        record: EngineRecord,
        source: CheckpointState,
        origin: EngineRecord,
        cut: int,
    ) -> None:
        """A fork of a routed run starts at the latest visit of its phase: the route up to
        there, and each phase's output of its latest visit before it."""
        outputs, earlier = outputs_at(source.phase_data, origin, source.completed_phases, cut)
        state.completed_phases = list(source.completed_phases[:cut])
        state.phase_data = outputs
        record.route = [copy_json(r) for r in origin.route or [] if r.get("index", 0) < cut]
        record.earlier_visits = earlier or None
        visit = visits_of(state.completed_phases, state.phase_name) + 1
        record.visit = visit if visit > 1 else None

    def _phase_for(self, name: str, what: str) -> PhaseSpec:
        workflow_cls = self._engine.workflow_cls
        try:
            return workflow_cls.phase_named(name)
        except KeyError:
            names = ", ".join(p.name for p in workflow_cls.phases)
            raise UsageError(f"{what} {name!r}: the workflow has no such phase ({names})") from None

    # -- the end on purpose -----------------------------------------------------------------

    def cancel(self) -> str:
        engine = self._engine
        with engine.bridge.lock():
            state = engine.bridge.load_state()
            record = load_record(state, source=engine.bridge.location)
            check_phases(
                state, engine.workflow_cls, source=engine.bridge.location, routed=bool(record.route)
            )
            engine.attach(state, record)
            if record.status not in ("completed", "cancelled") and engine.children is not None:
                # Its children first: a crash before the run's own cancel cancels again.
                for child in record.children:
                    engine.children.cancel(child)
            if record.status not in ("failed", "completed", "cancelled"):
                engine.recorder.withdraw(engine.mailbox.pending(), "the run was cancelled")
                engine.recorder.run_end("cancelled")
            record.status = "cancelled"
            # Saved before the end, so that a crash in between finishes the cancel on the
            # next resume or cancel, never runs the workflow on.
            engine.save("cancelled", publish=False)
            history = self.finish_cancel().history_path
            assert history is not None
            return history

    def finish_cancel(self) -> Outcome:
        """The end of a cancel whose state is saved: its evidence, then the cleanup.

        Evidence that cannot be written (a full disk) does not stop a cancel: the
        cancel is how an instance is removed.
        """
        import contextlib

        engine = self._engine
        with contextlib.suppress(OrchestratorError, OSError, ValueError):
            engine.recorder.publish()
        record = engine.record
        history = engine.bridge.finish(
            FinishInput(state=engine.state, outcome="cancelled", run_id=record.run_id)
        )
        return Outcome(
            status="failed",
            exit_code=EXIT_ERROR,
            message=f"the run was cancelled (the cancel is now complete); history kept in "
            f"{history}",
            history_path=history,
        )

    # -- the stored state, attached ---------------------------------------------------------

    def attach_current(self, state: CheckpointState) -> None:
        """Attach a loaded state, migrated first when an older version of the workflow
        wrote it (see :class:`Workflow`); a state of a newer version, or one that a hook
        is missing for, is refused with nothing changed."""
        engine = self._engine
        workflow_cls, location = engine.workflow_cls, engine.bridge.location
        record = load_record(state, source=location)
        engine.journal.keep_json(state, record)
        have, want = record.workflow_version, workflow_cls.version
        name = f"{location}: run {record.run_id}"
        if have > want:
            raise UsageError(
                f"{name} was written by version {have} of {workflow_cls.name}, and this "
                f"code is version {want}: resume it with the newer code"
            )
        check_phases(state, workflow_cls, source=location, routed=bool(record.route))
        engine.attach(state, record)
        if have == want:
            return
        hooks = [f"migrate_v{v}_to_v{v + 1}" for v in range(have, want)]
        missing = [hook for hook in hooks if not callable(getattr(workflow_cls, hook, None))]
        if missing:
            raise UsageError(
                f"{name} was written by version {have} of {workflow_cls.name}, and this "
                f"code (version {want}) has no {missing[0]}: add it, or resume with the code "
                f"of version {have}"
            )
        self._migrate(name, hooks, have, want)

    def _migrate(self, name: str, hooks: list[str], have: int, want: int) -> None:
        """Run the workflow's migration ``hooks`` over the attached state's outputs."""
        engine = self._engine
        state, record = engine.state, engine.record
        before = dump_document(state)
        outputs = {k: copy_json(v) for k, v in state.phase_data.items() if k != ENGINE_KEY}
        workflow = engine.workflow_cls(copy_json(record.inputs))
        for hook in hooks:
            try:
                outputs = getattr(workflow, hook)(outputs)
            except Exception as exc:
                raise UsageError(
                    f"{name}: {hook} raised {type(exc).__name__}: {exc}; nothing was changed"
                ) from None
            if not isinstance(outputs, dict) or ENGINE_KEY in outputs:
                raise UsageError(
                    f"{name}: {hook} must return the outputs as a dict by phase name; "
                    "nothing was changed"
                )
            outputs = to_json_value(outputs, where=f"what {hook} returned")
        kept = f"state.v{have}.json"  # the state as it was, in the run's history
        engine.bridge.write_evidence(EvidenceInput(run_id=record.run_id, files=[(kept, before)]))
        state.phase_data = {**outputs, ENGINE_KEY: state.phase_data[ENGINE_KEY]}
        record.workflow_version = want
        record.migrations.append(
            {"at": format_time(engine.clock.now()), "from": have, "to": want, "kept": kept}
        )
        engine.recorder.emit(EVENT_RUN_MIGRATE, {"from": have, "to": want, "kept": kept})
        engine.save("migrated")

    # -- from one pause to the next resume ----------------------------------------------------

    def leave_paused(self) -> None:
        """Leave the state as this clean pause saved it for the next resume in this
        process, by this engine or by another one given the same handoff: while the
        stored state is still what was saved, that resume reads nothing back. Called last
        before the engine returns: nothing changes the state until a resume takes it."""
        engine = self._engine
        token = engine.bridge.saved_token()
        if token is None:
            return
        engine.handoff.leave(
            engine.bridge.location,
            PausedRun(
                token=token,
                state=engine.state,
                record=engine.record,
                workflow_cls=engine.workflow_cls,
                bridge=engine.bridge,
                published=engine.recorder.published,
                mailbox=engine.mailbox.memo(),
                journal=engine.journal.memo(),
            ),
        )

    def adopt_paused(self) -> bool:
        """Take the state a clean pause left in the engine's handoff (see
        :meth:`leave_paused`), when the stored state is still exactly that one and this
        engine runs the same workflow code. It is taken once: whoever takes it is its
        only holder."""
        engine = self._engine
        kept = engine.handoff.take(engine.bridge.location)
        if kept is None or kept.workflow_cls is not engine.workflow_cls:
            return False
        if engine.bridge.state_token() != kept.token:
            return False
        if kept.bridge is not engine.bridge and not engine.bridge.take_over(kept.bridge):
            return False
        if not engine.attached or kept.state is not engine.state:
            engine.mailbox.take_memo(kept.mailbox)
            engine.journal.take_memo(kept.journal)
            engine.attach(kept.state, kept.record, published=kept.published)
        return True


def check_phases(
    state: CheckpointState, workflow_cls: type[Workflow], *, source: str, routed: bool = False
) -> None:
    """Refuse, as damaged, a state whose ``phase`` and ``phase_name`` are not one phase
    of the workflow, or that lists a completed phase the workflow does not have (by that
    number and name) or that comes after the current one (unless the run is ``routed``:
    a ``Goto`` went back). Such a state was edited, or the workflow's phases changed under
    the run; resuming it would run the wrong phase."""
    phases = ", ".join(f"{p.number} {p.name}" for p in workflow_cls.phases)
    why = (
        f"(the phases of {workflow_cls.name}: {phases}): the state was edited, or the "
        "workflow's phases changed under this run (put them back to go on)"
    )
    numbers = {p.name: p.number for p in workflow_cls.phases}
    if state.phase_name not in numbers:
        raise StateDamagedError(
            f"phase_name {state.phase_name!r} is not a phase of the workflow {why}",
            source=source,
            json_path="$.phase_name",
            rule="consistency",
        )
    if numbers[state.phase_name] != state.phase:
        raise StateDamagedError(
            f"phase is {state.phase}, but phase_name {state.phase_name!r} is phase "
            f"{numbers[state.phase_name]} {why}",
            source=source,
            json_path="$.phase",
            rule="consistency",
        )
    for index, done in enumerate(state.completed_phases):
        if numbers.get(done.phase_name) != done.phase or (done.phase > state.phase and not routed):
            raise StateDamagedError(
                f"completed phase {done.phase} {done.phase_name!r} is not a phase of the "
                f"workflow before or at the current one ({state.phase} {state.phase_name}) "
                f"{why}",
                source=source,
                json_path=f"$.completed_phases[{index}]",
                rule="consistency",
            )


def _completion(done: CompletedPhase) -> dict[str, Any]:
    """A completion a rewind took back, as its record keeps it (the history tells it)."""
    return {
        "phase": done.phase,
        "phase_name": done.phase_name,
        "completed_at": done.completed_at,
        "result_summary": done.result_summary,
    }


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)
