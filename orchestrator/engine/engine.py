"""The workflow engine: run phases, pause for agents, record answers, replay on resume.

The state file is the source of truth. Phases that completed are skipped; the current
phase runs again from its top, and every ``ctx.ask``/``ctx.step`` it already made returns
its recorded result, matched by position and checked against a fingerprint.

:class:`Engine` is the public class; it holds the run it has attached (its state and
record), saves checkpoints, and runs phases. Its parts, each reached through a public
attribute: ``lifecycle`` (start, resume, retry, rewind, fork, cancel, migrations),
``mailbox`` (requests and answers) and ``journal`` (what a phase recorded, for replay).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from .._errors import (
    AgentFailedError,
    BudgetExceededError,
    NonDeterminismError,
    OrchestratorError,
    RunFailedError,
    StorageError,
    UnsafePathError,
)
from .._ports import (
    AgentInvoker,
    ArchiveInput,
    BoardStore,
    Bridge,
    ChildRuns,
    Clock,
    FinishInput,
    PublishInput,
    SaveStateInput,
)
from .._text import plural
from ..evidence.recorder import PhaseTally, Recorder
from ..evidence.usage import add_tallies, parse_prices, tally_of, tally_spent
from ..formats.bridge import CheckpointState, CompletedPhase, ErrorType, HistoryStatus
from ..formats.bridge_codec import encode_record_line, record_line_digest
from ..formats.convert import unstructure
from ..formats.secrets import redact
from ..formats.step_names import EVENT_DECISION, EVENT_ERROR, STATUS_ERROR, STATUS_PASS
from ..formats.strict_json import SettledItems
from ..formats.times import SystemClock, format_time, parse_time
from ..storage.runs import ENGINE_KEY
from .context import PhaseContext
from .dispatcher import TaskDispatcher
from .failure_trace import failure_trace
from .journal import Journal
from .lifecycle import Lifecycle, PauseHandoff
from .mailbox import Mailbox
from .record import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_PAUSED,
    ContinueAsNew,
    EngineRecord,
    Outcome,
    Pause,
    copy_json,
    to_json_value,
)
from .routing import visits_of
from .signals import SignalBox
from .size_warning import check_sizes, note_archived
from .workflow import Goto, PhaseResult, PhaseSpec, Workflow

RETRYABLE = frozenset({ErrorType.TIMEOUT, ErrorType.INVOCATION_FAILED})


FALLBACK_ERRORS = (
    frozenset({ErrorType.PARSE_ERROR, ErrorType.VALIDATION_ERROR, ErrorType.UNKNOWN}) | RETRYABLE
)


class Engine:
    """Runs one workflow instance against a bridge (state and host mailbox).

    ``invoker`` answers asks in-process; when it is ``None`` or raises
    :class:`HostRequired`, the ask is left to the host and the engine pauses.
    ``handoff``: where a clean pause leaves its state for the next resume in this
    process (see :class:`~orchestrator.engine.lifecycle.PauseHandoff`); a host that
    builds an engine per resume gives each the same one. Default: the engine's own.
    """

    def __init__(
        self,
        workflow_cls: type[Workflow],
        *,
        bridge: Bridge,
        invoker: AgentInvoker | None = None,
        clock: Clock | None = None,
        new_id: Callable[[], str] | None = None,
        archive_after: int | None = None,
        handoff: PauseHandoff | None = None,
    ) -> None:
        self.workflow_cls = workflow_cls
        self.archive_after = archive_after or workflow_cls.archive_after
        self.bridge = bridge
        self.invoker = invoker
        self.clock = clock or SystemClock()
        self.new_id = new_id or _random_uuid
        self.handoff = handoff or PauseHandoff()
        self._state: CheckpointState | None = None
        self._record: EngineRecord | None = None
        self._fatal: OrchestratorError | None = None
        #: Requests and answers.
        self.mailbox = Mailbox(self)
        #: What the current phase recorded, for replay.
        self.journal = Journal(self)
        #: Start, resume, retry, rewind, fork, cancel.
        self.lifecycle = Lifecycle(self)
        #: Signals from outside, once each (``ctx.wait_for_signal``, ``ctx.signals``).
        self.signals = SignalBox(self)
        # The engine tells what happens; the recorder writes the run's evidence.
        self.recorder = Recorder(
            bridge=bridge, clock=self.clock, record_index=self.mailbox.record_index
        )
        # A replay (``engine.replay``): every call must be in the journal; none is made.
        self.replay_only = False
        #: Asked after every checkpoint of a run that goes on: when it answers True, the
        #: engine stops there, the run left ``running`` for the next resume (a worker
        #: told to stop finishes the step it is in, not the whole run).
        self.stop_requested: Callable[[], bool] | None = None
        #: Where ``ctx.dispatch`` keeps its task board: called with the run's id, it
        #: returns the board's store (closed when the dispatch returns or pauses), e.g.
        #: ``lambda run_id: orchestrator.adapters.postgres.task_board(dsn, run_id)``.
        #: ``None``: the board is a directory, ``.board`` in the run's work directory.
        self.board_store: Callable[[str], BoardStore] | None = None
        #: Who runs ``ctx.dispatch``: ``None`` takes the one installed for the process
        #: (the task board's, see ``engine.dispatcher``).
        self.dispatcher: TaskDispatcher | None = None
        #: A W3C ``traceparent`` a run started here continues (its spans go into that
        #: trace, under that span); ``None``: the run's trace is its own.
        self.trace_parent: str | None = None
        #: Who starts and advances the child runs of this run (``ctx.child``): the host's
        #: (``None``: a phase that starts a child fails, saying so).
        self.children: ChildRuns | None = None
        #: The run a run started here is a child of (its record names it).
        self.parent_run_id: str | None = None
        #: Where the new run of ``ctx.continue_as_new`` lives, by its run id (a store of a
        #: row per run); ``None``, or a bridge at this one's location: the new run
        #: replaces the old one in the instance (a work directory).
        self.next_run_bridge: Callable[[str], Bridge] | None = None

    # -- entry points -------------------------------------------------------------------

    def start(
        self,
        *,
        workflow_ref: str,
        workdir: Path,
        inputs: dict[str, Any] | None = None,
        output_path: str | None = None,
        run_id: str | None = None,
    ) -> Outcome:
        """Create the instance and run until it pauses, fails or completes; ``run_id``:
        the new run's id, when the store has chosen it (default: a new one)."""
        return self.lifecycle.start(
            workflow_ref=workflow_ref,
            workdir=workdir,
            inputs=inputs,
            output_path=output_path,
            run_id=run_id,
        )

    def resume(self) -> Outcome:
        """Record the host's answers, then continue; with nothing answered, pause again."""
        return self.lifecycle.resume()

    def retry(self, *, run_id: str | None = None) -> Outcome:
        """Re-open a failed run at its failed phase with the current code, and go on.

        The phase is replayed: each recorded ask and step that still matches at its
        position returns what it recorded (a paid answer is not paid for again). The first
        call that no longer matches, or whose record is a failure (an error answer, a
        refused answer, a step that raised), drops the journal from there, and the phase
        runs on anew. Requests left unanswered when the run failed are withdrawn.
        """
        return self.lifecycle.retry(run_id=run_id)

    def rewind(self, to_phase: str, *, ended: CheckpointState | None = None) -> str:
        """Take a paused, failed or completed run back to ``to_phase``: that phase and
        every later one run again (their earlier outputs move to the record's history).

        A run that has ended has no state here any more: ``ended`` is its last state (its
        history), and the rewind makes it live again. Nothing runs now; ``resume`` (or
        ``drive``) runs the phase.
        """
        return self.lifecycle.rewind(to_phase, ended=ended)

    def fork(
        self, source: CheckpointState, *, from_phase: str, workdir: Path, output_path: str
    ) -> str:
        """Start a new run here (a new run id) at ``from_phase`` of the run whose state is
        ``source``: the same inputs, and the outputs of the phases before it. The source
        run is only read."""
        return self.lifecycle.fork(
            source, from_phase=from_phase, workdir=workdir, output_path=output_path
        )

    def cancel(self) -> str:
        """End the instance on purpose: keep its history, remove state and request files."""
        return self.lifecycle.cancel()

    def adopt_paused(self) -> bool:
        """Attach the state the last clean pause of this instance left in the engine's
        handoff, without reading it, when the stored state is still that one; False
        otherwise (see :meth:`Lifecycle.adopt_paused`)."""
        return self.lifecycle.adopt_paused()

    # -- the attached run ---------------------------------------------------------------

    @property
    def attached(self) -> bool:
        """Whether the engine has a run's state attached."""
        return self._state is not None and self._record is not None

    @property
    def state(self) -> CheckpointState:
        """The attached run's state."""
        assert self._state is not None, "engine has no state attached"
        return self._state

    @property
    def record(self) -> EngineRecord:
        """The attached run's engine record (in its state's ``phase_data``)."""
        assert self._record is not None, "engine has no record attached"
        return self._record

    def located(self, recorded: str) -> Path:
        """A path the run recorded (its work directory, its output path), as a place on
        this machine: one recorded relative (a run that keeps no absolute path, such as a
        regression run, whose folder is copied to be shared) is taken from the directory
        its bridge keeps the instance in, or from the current directory."""
        path = Path(recorded)
        if path.is_absolute():
            return path
        # Only a bridge that keeps an instance in a directory has ``workdir``.
        home = getattr(self.bridge, "workdir", None)
        return (Path(home) if home is not None else Path.cwd()) / path

    def attach(self, state: CheckpointState, record: EngineRecord, *, published: int = 0) -> None:
        """Run ``state`` (whose record is ``record``) from here on; ``published``: the
        last event known to be in its log (0: asked when it publishes)."""
        self._state, self._record = state, record
        self.recorder.attach(
            state, record, published=published, record_index=self.mailbox.record_index
        )

    @property
    def fatal(self) -> OrchestratorError | None:
        """An error that fails the run even though the phase caught it (see
        :meth:`mark_fatal`)."""
        return self._fatal

    def check_budget(self, agents: list[str]) -> None:
        """Refuse an ask to ``agents`` that would start once the run's answers have used
        the workflow's ``budget_tokens`` or ``budget_usd``: the phase fails with
        BUDGET_EXCEEDED, even if it catches the error (a retry with a raised budget goes
        on)."""
        cls = self.workflow_cls
        if cls.budget_tokens is None and cls.budget_usd is None:
            return
        live = [r for r in self.state.agent_requests if not r.x_archived]
        tally = add_tallies(self.record.archived_usage, tally_of(live))
        tokens, cost, _ = tally_spent(tally, parse_prices(cls.prices, source="prices"))
        asked = ", ".join(repr(a) for a in agents)
        if cls.budget_tokens is not None and tokens >= cls.budget_tokens:
            spent, budget, unit = float(tokens), float(cls.budget_tokens), "budget_tokens"
            said = f"{tokens} tokens, and its budget_tokens is {cls.budget_tokens}"
        elif cls.budget_usd is not None and cost >= cls.budget_usd:
            spent, budget, unit = cost, float(cls.budget_usd), "budget_usd"
            said = f"${cost:.4f}, and its budget_usd is ${cls.budget_usd}"
        else:
            return
        error = BudgetExceededError(
            f"BUDGET_EXCEEDED: the run's answers have used {said}; the ask to {asked} was "
            f"not made: raise the workflow's {unit}",
            spent=spent,
            budget=budget,
            unit=unit,
        )
        self.mark_fatal(error)
        raise error

    def mark_fatal(self, error: OrchestratorError) -> None:
        """Fail the run with ``error`` when the phase returns or pauses (an agent not
        found, a request the host cancelled), whatever the phase does with it."""
        self._fatal = error

    def sleeping(self) -> bool:
        """Whether a durable timer of the current phase is not yet due."""
        until = self.record.waiting_until
        return until is not None and self.clock.now() < parse_time(until)

    def waiting_quietly(self) -> bool:
        """Whether the run waits for a timer not yet due or a signal not yet come, with
        nothing else to do: a resume now has nothing to write."""
        waiting = self.record.waiting_for_signal
        if waiting is None:
            return self.sleeping()
        if self.record.waiting_until is not None and not self.sleeping():
            return False  # the wait's deadline came
        return not self.signals.arrived()

    def waiting_children(self) -> bool:
        """Whether the current phase waits for child runs that have not ended."""
        return bool(self.record.waiting_children)

    def stop_if_requested(self) -> None:
        """Leave the phase at the checkpoint just saved when the engine is asked to stop;
        a resume replays the phase to here from its journal."""
        if self.stop_requested is not None and self.stop_requested():
            raise Pause()

    # -- checkpoints --------------------------------------------------------------------

    def save(self, checkpoint_name: str, *, publish: bool = True) -> None:
        """Save a checkpoint named ``checkpoint_name`` through the bridge, with the
        evidence it makes true (unless ``publish`` is False)."""
        state, record = self.state, self.record
        self.recorder.drop_published()
        self._archive_finished()
        record.revision += 1
        if record.status not in ("failed", "completed", "cancelled"):
            waits = (
                self.mailbox.pending()
                or self.sleeping()
                or record.waiting_for_signal
                or self.waiting_children()
            )
            record.status = "paused" if waits else "running"
        state.checkpoint_name = checkpoint_name
        state.created_at = format_time(self.clock.now())
        self._store_record()
        # The checkpoint and the evidence it makes true go to the disk as one group.
        evidence = self.recorder.outgoing() if publish else None
        size = self.bridge.save_state(SaveStateInput(state=state, evidence=evidence))
        if publish:
            self.recorder.sent()
        check_sizes(self, size)

    def _archive_finished(self) -> None:
        """Move finished requests of completed phases to the run's history, in batches.

        The state is rewritten at every checkpoint; keeping only what resuming needs keeps
        that cost flat over a long run. The history append is durable before the state
        that drops the text is written; a crash in between only appends them twice.
        """
        state = self.state
        # A request whose evidence is still to be written keeps its text until it is.
        unwritten = {e.request_id for e in self.record.events}
        # A routed run may be in an earlier phase than some it completed (a loop back):
        # the requests of every phase but the current one are done with.
        routed = bool(self.record.route)
        finished = [
            r
            for r in state.agent_requests
            if not r.x_archived
            and (r.phase < state.phase or (routed and r.phase != state.phase))
            and r.status is not HistoryStatus.PENDING
            and r.request_id not in unwritten
        ]
        if len(finished) < self.archive_after:
            return
        run_id = self.record.run_id
        self.bridge.archive(ArchiveInput(records=tuple(finished), run_id=run_id))
        self.record.archived_usage = add_tallies(self.record.archived_usage, tally_of(finished))
        sizes: list[tuple[str, int]] = []
        for record in finished:
            # The line's digest stays in the signed state, which thus vouches for it.
            line = encode_record_line(record)
            sizes.append((record.request_id, len(line)))
            record.x_archived_sha256 = record_line_digest(line)
            record.x_request = record.x_response = None
            record.x_position = None
            record.x_archived = True
        note_archived(self, sizes)

    def _store_record(self) -> None:
        record = self.record
        data = unstructure(attrs.evolve(record, journal=[]))
        data["journal"] = SettledItems(self.journal.data())
        self.state.phase_data[ENGINE_KEY] = data

    # -- running phases -----------------------------------------------------------------

    def advance(self) -> Outcome:
        """Run the current phase and the ones after it until the run pauses, fails or
        completes."""
        state = self.state
        workflow = self.workflow_cls(copy_json(self.record.inputs))
        while True:
            try:
                spec = self.workflow_cls.phase_named(state.phase_name)
            except KeyError:
                return self._fail_unknown_phase(state.phase_name)
            self.recorder.open_phase(spec.number, spec.name, visit=self.record.visit or 1)
            try:
                result = self.run_phase(workflow, spec)
                next_spec = self._complete_phase(spec, result)
            except ContinueAsNew as going_on:
                return self.continue_as_new(spec, going_on.inputs)
            except Pause:
                self.tell_pause()
                self.save(
                    "before_agent_invocation"
                    if self.mailbox.pending()
                    else "waiting_for_signal"
                    if self.record.waiting_for_signal is not None
                    else "waiting_for_timer"
                    if self.sleeping()
                    else "waiting_for_children"
                    if self.waiting_children()
                    else "stopped"
                )
                return self.pause_now()
            except (StorageError, UnsafePathError):
                raise  # the instance's own files, not the phase: nothing to fail the run for
            except OrchestratorError as exc:
                trace = failure_trace(exc, workflow_cls=self.workflow_cls)
                if isinstance(exc, (BudgetExceededError, AgentFailedError)):
                    trace["error_type"] = exc.error_type
                return self._fail(
                    f"phase {spec.number} ({spec.name}): {exc}", spec=spec, trace=trace
                )
            except Exception as exc:  # the user's phase raised: fail with its words
                return self._fail(
                    f"phase {spec.number} ({spec.name}): {type(exc).__name__}: {exc}",
                    spec=spec,
                    trace=failure_trace(exc, workflow_cls=self.workflow_cls),
                )
            if next_spec is None:
                return self.finish()
            state.phase, state.phase_name = next_spec.number, next_spec.name
            if self.stop_requested is not None and self.stop_requested():
                self.save("stopped")
                return self.pause_now()

    def _fail_unknown_phase(self, phase_name: str) -> Outcome:
        names = ", ".join(p.name for p in self.workflow_cls.phases)
        error = NonDeterminismError(
            f"the state is in phase {phase_name!r}, which the workflow no longer declares "
            f"(its phases: {names}); restore the phase, or 'orchestrate cancel' and run again",
            phase_name=phase_name,
            position=0,
        )
        return self._fail(str(error))

    def run_phase(self, workflow: Workflow, spec: PhaseSpec) -> PhaseResult | Goto:
        """Run one phase of ``workflow`` against the attached run's journal (a replay
        runs phases one by one this way); raises :class:`Pause` when it must wait. A
        :class:`Goto` it returns names a phase the workflow has and ``spec`` may go to."""
        ctx = PhaseContext(self, spec)
        self._fatal = None
        try:
            try:
                value = getattr(workflow, spec.method_name)(ctx)
            except AgentFailedError as exc:
                if (
                    spec.fallback is None
                    or self._fatal is not None
                    or ErrorType(exc.error_type) not in FALLBACK_ERRORS
                ):
                    raise
                if self.recorder.mark(f"fallback {exc.request_id}"):
                    self.recorder.emit(
                        EVENT_DECISION,
                        {
                            "skill": spec.name,
                            "decision": "fallback",
                            "method": spec.fallback,
                            "request_id": exc.request_id,
                            "because": str(exc),
                        },
                    )
                value = getattr(workflow, spec.fallback)(ctx, exc)
        except Pause:
            if self._fatal is not None:  # fail now, not after the host answers the rest
                raise self._fatal from None
            raise
        if self._fatal is not None:
            # AGENT_NOT_FOUND and a cancelled request fail the run even if the phase caught them
            raise self._fatal
        ctx.check_all_replayed()
        if isinstance(value, Goto):
            self.workflow_cls.phase_entered(spec, value)  # a bad route fails the phase
            return value
        if isinstance(value, PhaseResult):
            return value
        return PhaseResult(output=value, summary=f"Completed {spec.name}")

    def _complete_phase(self, spec: PhaseSpec, result: PhaseResult | Goto) -> PhaseSpec | None:
        state, record = self.state, self.record
        next_spec = self.workflow_cls.phase_entered(spec, result)
        routed = isinstance(result, Goto) or bool(record.route)
        entering = self._entering(spec, next_spec) if routed and next_spec is not None else 1
        output = to_json_value(result.output, where=f"phase {spec.name!r} output")
        if routed and spec.name in state.phase_data:  # a visit again: keep the earlier output
            record.earlier_visits = [
                *(record.earlier_visits or []),
                {
                    "phase": spec.name,
                    "visit": visits_of(state.completed_phases, spec.name),
                    "output": state.phase_data[spec.name],
                },
            ]
        state.phase_data[spec.name] = output
        summary = result.summary or f"Completed {spec.name}"
        if isinstance(result, Goto):
            summary = result.summary or f"Completed {spec.name}; goes to {result.to}"
            self._tell_route(spec, result.to)
        state.completed_phases.append(
            CompletedPhase(
                phase=spec.number,
                phase_name=spec.name,
                completed_at=format_time(self.clock.now()),
                result_summary=summary,
            )
        )
        self.close_phase(spec, status=STATUS_PASS, summary=summary)
        record.journal = []
        record.reopened = False
        record.waiting_children = []
        record.visit = entering if entering > 1 else None
        return next_spec

    def _entering(self, spec: PhaseSpec, next_spec: PhaseSpec) -> int:
        """The visit of ``next_spec`` a routed run enters after ``spec`` completes; past
        its ``max_visits``, the run fails (a loop that does not end)."""
        visit = visits_of(self.state.completed_phases, next_spec.name) + 1
        if next_spec.name == spec.name:
            visit += 1  # the completion of this visit is not appended yet
        if visit > next_spec.max_visits:
            raise RunFailedError(
                f"phase {next_spec.name!r} would be entered a {_ordinal(visit)} time, past "
                f"its max_visits of {next_spec.max_visits}: the route does not end; make "
                f"the loop end, or raise @phase({next_spec.number}, max_visits=...)"
            )
        return visit

    def _tell_route(self, spec: PhaseSpec, target: str) -> None:
        """Journal the route: the record's ``route`` is saved with the completion."""
        record = self.record
        visit = record.visit or 1
        record.route = [
            *(record.route or []),
            {
                "index": len(self.state.completed_phases),
                "from": spec.name,
                "visit": visit,
                "to": target,
                "at": format_time(self.clock.now()),
            },
        ]
        self.recorder.emit(
            EVENT_DECISION,
            {"skill": spec.name, "decision": "goto", "to": target, "visit": visit},
        )

    def finish(self, *, then: Callable[[], None] | None = None) -> Outcome:
        """End a run whose every phase completed: save, then move it to its history;
        ``then``: the first save of the run it went on as, made with the end (see
        ``go_on_as_new``)."""
        state = self.state
        record = self.record
        if record.status != "completed":
            record.status = "completed"
            self.recorder.run_end("completed")
        if self.mailbox.consumed_any or self.recorder.unpublished():
            # Answers recorded since the last checkpoint exist only in memory and in their
            # response files, which the end of the run removes, and the last events are
            # published only from a durable state: save first. A crash after this resumes
            # straight into the end (see ``resume``).
            self.save("completed")
        state.checkpoint_name = "completed"
        self._store_record()
        outputs = {k: v for k, v in state.phase_data.items() if k != ENGINE_KEY}
        history = self.bridge.finish(
            FinishInput(state=state, outcome="completed", run_id=record.run_id, then=then)
        )
        self.mailbox.forget_consumed()
        return Outcome(
            status="completed",
            exit_code=EXIT_OK,
            message=f"{self.workflow_cls.name}: {_all_phases(len(self.workflow_cls.phases))} "
            f"completed; history kept in {history}",
            outputs=outputs,
            history_path=history,
        )

    def continue_as_new(self, spec: PhaseSpec, inputs: dict[str, Any]) -> Outcome:
        """End the run in ``spec`` (``ctx.continue_as_new``) and go straight on into a new
        run of the same workflow and lineage with ``inputs``, in the same instance: the
        old run moves to its history as a finished run does, naming the new one."""
        record = self.record
        new_run_id = self.new_id()
        record.continued_as = new_run_id
        record.continued_inputs = inputs
        summary = f"continued as new run {new_run_id}"
        self.recorder.emit(
            EVENT_DECISION,
            {"skill": spec.name, "decision": "continue_as_new", "to": new_run_id},
        )
        self.close_phase(spec, status=STATUS_PASS, summary=summary)
        return self.go_on_as_new()

    def go_on_as_new(self) -> Outcome:
        """End the run, which went on as the new run its record names (with its inputs),
        and start that run in the same step (see ``FinishInput.then``): a crash leaves
        the old run live, whose resume comes here again, or the new one."""
        record = self.record
        run_id = record.continued_as
        assert run_id is not None
        inputs = dict(record.continued_inputs or {})
        bridge = self.bridge
        if self.next_run_bridge is not None:  # opened first: a refusal leaves the run as it is
            bridge = self.next_run_bridge(run_id)
            if bridge.location == self.bridge.location:
                bridge = self.bridge

        def begin_next() -> None:
            self.mailbox.forget_consumed()  # the old run's answers went with it
            self.bridge = self.recorder.bridge = bridge
            self.lifecycle.begin(
                workflow_ref=record.workflow,
                workdir=Path(record.workdir),
                inputs=inputs,
                output_path=self.state.output_path,
                run_id=run_id,
                previous=record,
            )

        with contextlib.nullcontext() if bridge is self.bridge else bridge.lock():
            self.finish(then=begin_next)
            return self.advance()

    def _fail(
        self,
        failure: str,
        *,
        spec: PhaseSpec | None = None,
        trace: dict[str, Any] | None = None,
    ) -> Outcome:
        """Record the run as failed, durably, and withdraw its requests; ``trace``: where
        it was raised (see ``failure_trace``). Secrets in the words are scrubbed: the
        failure is kept in the state, the events and every face."""
        record = self.record
        failure = redact(failure)
        self.recorder.withdraw(self.mailbox.pending(), "the run failed")
        self.recorder.emit(
            EVENT_ERROR,
            {
                "skill": None if spec is None else spec.name,
                "message": failure,
                "fatal": True,
                "error_type": None if trace is None else trace.get("error_type"),
                "trace": trace,
            },
        )
        if spec is not None:
            self.close_phase(spec, status=STATUS_ERROR, summary=failure)
        record.status = "failed"
        record.failure = failure
        record.failure_trace = trace
        self.recorder.run_end("failed", failure=failure, trace=trace)
        self.save("run_failed")
        self.mailbox.flush_consumed()
        self.bridge.publish(PublishInput(pending=()))
        return Outcome(
            status="failed",
            exit_code=EXIT_ERROR,
            message=f"run failed: {record.failure}; the state is kept: fix the cause, then "
            "'orchestrate retry' goes on from this phase",
        )

    def pause_now(self) -> Outcome:
        """Publish the pending requests and return the pause (exit 42)."""
        pending = tuple(r.request() for r in self.mailbox.pending())
        record = self.record
        record.status = "paused"
        # Consumed answers go first: a fast host may answer the new request at once.
        self.mailbox.flush_consumed()
        self.bridge.publish(PublishInput(pending=pending))
        self.lifecycle.leave_paused()
        state = self.state
        where = f"paused in phase {state.phase} ({state.phase_name})"
        signal = record.waiting_for_signal
        if not pending and signal is not None:
            until = record.waiting_until
            return Outcome(
                status="paused",
                exit_code=EXIT_PAUSED,
                message=f"{where}: waiting for signal {signal['name']}"
                + (f" until {until}" if until else ""),
                wake_at=until,
                signal=str(signal["name"]),
            )
        if not pending and record.waiting_children:
            return Outcome(
                status="paused",
                exit_code=EXIT_PAUSED,
                message=f"{where}: waiting for child run "
                f"{', '.join(record.waiting_children)}; 'orchestrate pending' lists what the "
                "children ask, and 'orchestrate resume' goes on with them",
            )
        if not pending and record.waiting_until is None:
            record.status = "running"  # stopped on request: it goes on at the next resume
            return Outcome(
                status="paused",
                exit_code=EXIT_PAUSED,
                message=f"stopped in phase {state.phase} ({state.phase_name}) at a "
                "checkpoint, as asked; the run goes on from there when next resumed",
            )
        if not pending and record.waiting_until is not None:
            return Outcome(
                status="paused",
                exit_code=EXIT_PAUSED,
                message=f"{where}: sleeping until {record.waiting_until}",
                wake_at=record.waiting_until,
            )
        names = ", ".join(f"{r.agent_name} ({r.request_id})" for r in pending)
        refused = "".join(f"\n{line}" for line in self.mailbox.refusals)
        return Outcome(
            status="paused",
            exit_code=EXIT_PAUSED,
            message=f"{where}: waiting for {names}{refused}",
            pending=pending,
        )

    # -- what the recorder is told ------------------------------------------------------

    def tell_pause(self) -> None:
        """Tell the recorder the run waits (for its requests, or a timer)."""
        waiting = [r.request_id for r in self.mailbox.pending()]
        self.recorder.pause(waiting, until=None if waiting else self.record.waiting_until)

    def close_phase(self, spec: PhaseSpec, *, status: str, summary: str) -> None:
        """Tell the recorder how the phase ended, with what its journal says it did."""
        request_ids: list[str] = []
        artifacts: list[dict[str, Any]] = []
        steps = 0
        for entry in self.record.journal:
            if entry.kind == "artifact":
                artifacts.append(
                    {
                        k: entry.result[k]
                        for k in ("name", "path", "media_type", "metadata")
                        if entry.result.get(k) is not None
                    }
                )
            elif entry.kind == "step":
                steps += 1
            elif entry.kind in ("ask", "ask_all"):
                request_ids += entry.request_ids
        tally = PhaseTally(
            request_ids=tuple(request_ids),
            steps=steps,
            artifacts=tuple(artifacts),
            journal=tuple(unstructure(entry) for entry in self.record.journal),
        )
        self.recorder.close_phase(
            spec.number,
            spec.name,
            status=status,
            summary=summary,
            tally=tally,
            visit=self.record.visit or 1,
        )


def _all_phases(count: int) -> str:
    """``all 3 phases``; a workflow of one phase has ``its 1 phase``."""
    return f"its {plural(count, 'phase')}" if count == 1 else f"all {plural(count, 'phase')}"


def _ordinal(number: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``, ... ``11th``, ``21st``."""
    suffix = {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}th" if 10 <= number % 100 <= 20 else f"{number}{suffix}"


def _random_uuid() -> str:
    """A random (version 4) UUID, made from ``os.urandom`` as the ``uuid`` module makes
    it; importing that module costs a new process about a millisecond."""
    import os

    data = bytearray(os.urandom(16))
    data[6] = (data[6] & 0x0F) | 0x40  # version 4
    data[8] = (data[8] & 0x3F) | 0x80  # the RFC 4122 variant
    text = data.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"
