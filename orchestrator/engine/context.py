"""The phase context: what a phase sees and calls (``ctx.ask``, ``ctx.step``, ...).

Each call takes the next position of the phase's journal. On replay, a position already
recorded returns its recorded result after its fingerprint (agent and prompt digest, or
step name) is checked; a different call there is a non-determinism error that names the
phase, the position and what changed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from .._errors import (
    AgentFailedError,
    ContractError,
    NonDeterminismError,
    RunFailedError,
    UsageError,
)
from .._ports import Clock
from .._text import plural
from ..evidence.documents import (
    RESERVED_NAMES,
    RESERVED_PREFIXES,
    check_artifact,
    event_name_ok,
)
from ..formats.answer_gate import confidence_of
from ..formats.answer_schema import answer_schema
from ..formats.bridge import (
    AgentRequestRecord,
    ErrorType,
    HistoryStatus,
    RequestStatus,
)
from ..formats.bridge_codec import PROMPT_MIN_LENGTH, TIMEOUT_RANGE, error_type_of
from ..formats.convert import structure
from ..formats.signals import check_signal_name
from ..formats.step_names import EVENT_ERROR, RESULTS_FILE
from ..formats.times import format_time
from ..storage import durable as _durable
from ..storage.runs import ENGINE_KEY
from .calls import ask_fingerprint, describe_asks, describe_call, edited_prompt, what_changed
from .dispatcher import TaskDispatcher, installed_dispatcher
from .journal import PhaseReplay
from .journal import ReplayRows as ReplayRows  # the class replays read, named here too
from .prompt_diff import edited_prompt_message
from .record import (
    ContinueAsNew,
    JournalEntry,
    Pause,
    copy_json,
    needs_structuring,
    record_value,
    step_type,
    to_json_value,
)
from .signals import delivered
from .step_attempts import ONCE, StepAttempts, failure_record, recorded_failure, timeout_seconds
from .workflow import Ask, PhaseSpec, RetryPolicy

if TYPE_CHECKING:
    from .._ports import BoardStore
    from ..formats.board_documents import Task
    from .commands import CommandResult
    from .engine import Engine

T = TypeVar("T")


class PhaseContext:
    """What a phase sees: ``ask``, ``ask_all``, ``step``, earlier outputs and inputs."""

    def __init__(self, engine: Engine, spec: PhaseSpec) -> None:
        self._engine = engine
        self._spec = spec
        self._position = 0
        state, record = engine.state, engine.record
        self.phase: int = spec.number
        self.phase_name: str = spec.name
        #: Which visit of the phase this is: 1, or more when a ``Goto`` entered it again.
        self.visit: int = record.visit or 1
        self.run_id: str = record.run_id
        self.clock: Clock = engine.clock
        self.inputs: dict[str, Any] = copy_json(record.inputs)
        self.workdir = engine.located(record.workdir)
        self.output_path = engine.located(state.output_path)
        # How this phase's plain asks answered before come back (one method: text()).
        self._replay = PhaseReplay(engine, spec)

    def output(self, phase_name: str, output_type: type[T] | None = None) -> Any:
        """The recorded output of an earlier phase, structured into ``output_type`` if given."""
        data = self._engine.state.phase_data
        if phase_name not in data or phase_name == ENGINE_KEY:
            raise KeyError(f"phase {phase_name!r} has no recorded output (yet)")
        value = copy_json(data[phase_name])
        return (
            structure(value, output_type, source=f"phase_data.{phase_name}")
            if output_type
            else value
        )

    def ask(
        self,
        agent: str,
        prompt: str,
        *,
        output_type: type[T] | None = None,
        min_confidence: float | None = None,
        timeout_seconds: int = 120,
        context: dict[str, Any] | None = None,
        answer_within: timedelta | None = None,
    ) -> Any:
        """Ask one agent; returns its answer text, or the answer structured into ``output_type``.

        Pauses the workflow (exit 42) when the host must answer, for as long as it takes:
        ``timeout_seconds`` is the host's budget for one invocation, not a deadline of the
        run. With ``answer_within``, a request still unanswered that long after it was made
        counts as a TIMEOUT answer (retried, then the phase's fallback, as any TIMEOUT).
        Raises :class:`AgentFailedError` when the answer is an error the policy does not
        retry.
        """
        if output_type is None and min_confidence is None and answer_within is None:
            replayed = self._replay.text(self._position, agent, prompt, timeout_seconds)
            if replayed is not None:  # a plain ask answered before
                self._position += 1
                return replayed
        spec = Ask(
            agent=agent,
            prompt=prompt,
            output_type=output_type,
            min_confidence=min_confidence,
            timeout_seconds=timeout_seconds,
            context=context,
            answer_within=answer_within,
        )
        return self._ask_group([spec], kind="ask")[0]

    def ask_all(self, asks: Sequence[Ask], *, return_failures: bool = False) -> list[Any]:
        """Ask several agents at once: one pause, answers in any order, results in order.

        With ``return_failures``, an ask whose answer is an error the policy does not
        retry gives its :class:`AgentFailedError` in the list instead of raising it, so
        one failure does not hide the other answers (AGENT_NOT_FOUND and a cancelled
        request still fail the run).
        """
        if not asks:
            return []
        return self._ask_group(list(asks), kind="ask_all", return_failures=return_failures)

    def dispatch(
        self,
        tasks: Sequence[Task],
        *,
        agent: str | Callable[[Task], str],
        objective: str,
        constraints: Sequence[str] = (),
        max_attempts: int = 3,
        retry_after_ms: int = 0,
        workspace: Path | None = None,
        board_dir: Path | None = None,
    ) -> Any:
        """Hand ``tasks`` (task board task objects) to subagents on the task board, in waves, until
        every task is done, failed or canceled; see ``docs/board.md``.

        Each wave starts the ready tasks whose locks are free, asks ``agent`` (or
        ``agent(task)``) once per task with the assignment packet, pauses until every
        answer is in, and judges each through the gateway: PASS makes a task done,
        anything else blocks it; blocked tasks are retried up to ``max_attempts``.

        The board is ``board_dir`` (default: ``.board`` in the work directory), or, when
        the engine was given a ``board_store`` factory (a PostgreSQL store), the board
        that factory returns for this run.
        """
        return self._dispatcher().dispatch(
            self,
            tasks,
            agent=agent,
            objective=objective,
            constraints=constraints,
            max_attempts=max_attempts,
            retry_after_ms=retry_after_ms,
            workspace=workspace,
            board_dir=board_dir,
        )

    @contextmanager
    def board(self, *, board_dir: Path | None = None) -> Iterator[Any]:
        """The task board :meth:`dispatch` uses in this run (a directory, or a board in
        the store the engine was given), open for the block: to read its rows, write its
        handoff, show its worklogs."""
        with self._dispatcher().open_board(self, board_dir) as board:
            yield board

    @property
    def board_store(self) -> Callable[[str], BoardStore] | None:
        """The engine's task board store factory (``Engine.board_store``), if any: what
        :meth:`dispatch` keeps its board in, instead of a directory."""
        return self._engine.board_store

    def _dispatcher(self) -> TaskDispatcher:
        return self._engine.dispatcher or installed_dispatcher()

    def step(
        self,
        name: str,
        fn: Callable[..., T],
        *args: Any,
        output_type: Any = None,
        retry: RetryPolicy | None = None,
        timeout: timedelta | float | None = None,
        **kwargs: Any,
    ) -> T:
        """Run ``fn(*args, **kwargs)`` once; on replay return its recorded result.

        The result comes back the same on replay as on the first run: plain JSON data as
        it is, and attrs instances (alone, or in lists and dicts) structured back into the
        type ``fn``'s return annotation names, or ``output_type``. A result that would
        come back different is refused when the step first returns, not after a pause.

        ``retry`` (a :class:`RetryPolicy`) runs ``fn`` again when it raises an exception
        of a class its ``retry_on`` names (any ``Exception`` when it names none), up to
        ``attempts`` runs, after waits that grow with backoff and jitter. ``timeout`` (a
        ``timedelta``, or seconds) abandons an attempt that runs longer: ``fn`` then runs
        in a worker thread, which cannot be stopped, so its side effects may still
        happen; its late result is thrown away. A timeout is a failed attempt, a
        :class:`StepTimeoutError`. Every attempt is journaled before the next one, and
        told in the run's events; when attempts run out the last error is raised here.
        """
        position = self._next_position()
        entry = self._recorded(position, kind="step", fingerprint=[name], what=f"step {name!r}")
        target = step_type(fn, output_type)
        if entry is not None and entry.next_attempt_at is None:
            if entry.error is not None:
                raise recorded_failure(name, entry.error)
            recorded = copy_json(entry.result)
            if target is not None and needs_structuring(target):
                return structure(recorded, target, source=f"step {name!r} result")  # type: ignore[no-any-return]
            return recorded  # type: ignore[no-any-return]
        where = f"phase {self._spec.name!r}: step {name!r}"

        def store(result: Any) -> Any:
            # A copy: what the phase does to ``result`` later must not change the record.
            return record_value(result, target, where=f"{where} result")

        if retry is not None or timeout is not None or entry is not None:
            if retry is not None and not isinstance(retry, RetryPolicy):
                raise RunFailedError(f"{where}: retry takes a RetryPolicy, not {retry!r}")
            if retry is not None:
                retry.check(where)
            attempts = StepAttempts(
                self._engine,
                position=position,
                name=name,
                policy=retry,
                timeout=timeout_seconds(timeout, where),
            )
            return attempts.run(fn, args, kwargs, store=store, recorded=entry)  # type: ignore[no-any-return]
        engine = self._engine
        started = engine.clock.now()
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            # A failure is recorded and raised again on replay: a failed step is not run again.
            engine.recorder.step(name, started, error=f"{type(exc).__name__}: {exc}")
            engine.journal.record_step(position, name, None, error=failure_record(exc))
            raise
        _durable.crash_point(f"after-step-run {name}")
        stored = store(result)
        engine.recorder.step(name, started, error=None)
        engine.journal.record_step(position, name, stored)
        return result

    def run_command(
        self,
        name: str,
        argv: Sequence[str],
        *,
        timeout: timedelta | float | None = None,
        retry: RetryPolicy | None = None,
        cwd: str | Path | None = None,
        env: dict[str, str] | None = None,
        check: bool = True,
    ) -> CommandResult:
        """Run the command ``argv`` as step ``name``: once, its :class:`CommandResult`
        (exit code, and the ends of its output as text) recorded like a step's result.

        The command runs in its own process group, in ``cwd`` (default: the work
        directory), with ``env`` added to this process's environment. Past ``timeout``
        the whole group is ended (SIGTERM, then SIGKILL after a short grace), children
        and grandchildren alike, and the attempt fails with :class:`StepTimeoutError`.
        With ``check`` (the default) an exit code other than 0 raises
        :class:`CommandFailedError`. ``retry`` applies to both, as for :meth:`step`.
        """
        from .commands import CommandResult, check_argv, run_process

        where = f"phase {self._spec.name!r}: run_command {name!r}"
        command = check_argv(argv, where)
        seconds = timeout_seconds(timeout, where)
        directory = str(self.workdir if cwd is None else cwd)
        return self.step(
            name,
            run_process,
            command,
            step_name=name,
            cwd=directory,
            env=env,
            seconds=seconds,
            check=check,
            output_type=CommandResult,
            # A timeout is an attempt's end even with no retry: journaled as one.
            retry=ONCE if retry is None and seconds is not None else retry,
        )

    def child(
        self, workflow: Any, inputs: dict[str, Any] | None = None, id: str | None = None
    ) -> Any:
        """Start a child run of ``workflow`` (a :class:`Workflow` class, or a reference
        ``path/file.py:Class``) with ``inputs``, pause this run until it ends, and return
        its outputs (phase name -> output).

        The child is a run of its own (its run id, state and evidence), linked to this
        one; its requests are answered from this run's pending list. ``id`` makes it
        idempotent: the same id in this run is the same child run. A child that fails or
        is cancelled raises :class:`ChildRunFailedError` here (and again on replay).
        """
        from .children import Child

        return self.children_all([Child(workflow=workflow, inputs=dict(inputs or {}), id=id)])[0]

    def children_all(self, children: Sequence[Any]) -> list[Any]:
        """Start several child runs at once (each a :class:`Child`, or a tuple
        ``(workflow, inputs[, id])``): one pause until every one has ended, their outputs
        in order. The first that failed or was cancelled raises
        :class:`ChildRunFailedError`, once all have ended."""
        from .children import run_children

        return run_children(
            self._engine,
            self._spec,
            children,
            next_position=self._next_position,
            recorded=self._recorded,
        )

    def patched(self, change_id: str) -> bool:
        """Whether this run takes the new path of a change made inside a phase.

        True for a new run, and for a run that had not reached this point when the code
        changed; False for a run whose recorded phase already went past it on the old
        path, so that an instance in flight keeps that path::

            if ctx.patched("ask-the-critic"):
                review = ctx.ask("critic", ...)   # the new code
            else:
                review = ctx.step("score", old_score, draft)   # what running instances did

        Once no run on the old path is left, remove the check and keep the new path.
        """
        if not isinstance(change_id, str) or not change_id:
            raise RunFailedError(f"phase {self._spec.name!r}: ctx.patched needs a change id")
        position = self._position
        entry = self._engine.journal.entry(position)
        if entry is not None and not (entry.kind == "patch" and entry.fingerprint == [change_id]):
            return False  # the recorded run took the old path here: it goes on on it
        self._position += 1
        if entry is None:
            self._engine.journal.append(
                JournalEntry(position=position, kind="patch", fingerprint=[change_id])
            )
        return True

    def continue_as_new(self, inputs: dict[str, Any]) -> None:
        """End this run and start it again as a new run of its lineage (``ContinueAsNew``)."""
        raise ContinueAsNew.of(inputs, phase_name=self._spec.name)

    def sleep(self, duration: timedelta | float) -> None:
        """Pause the run for ``duration`` (a ``timedelta``, or seconds): a durable timer.

        The run exits 42 with no agent request; ``orchestrate status`` says until when,
        ``resume`` before then changes nothing, and ``drive`` waits. The wake time is
        recorded the first time the phase gets here, so a replay waits for the same moment.
        """
        seconds = duration.total_seconds() if isinstance(duration, timedelta) else duration
        number = isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
        if not number or not 0 <= seconds < 10**9:
            raise RunFailedError(
                f"phase {self._spec.name!r}: ctx.sleep takes a timedelta or seconds, "
                f"from 0 to 10**9, not {duration!r}"
            )
        self._timer("sleep", lambda now: now + timedelta(seconds=seconds))

    def wait_until(self, when: datetime) -> None:
        """Pause the run until ``when`` (timezone-aware): a durable timer, as ``sleep``."""
        if not isinstance(when, datetime) or when.tzinfo is None:
            raise RunFailedError(
                f"phase {self._spec.name!r}: ctx.wait_until takes a timezone-aware datetime "
                f"(datetime(..., tzinfo=timezone.utc)), not {when!r}"
            )
        self._timer("wait_until", lambda now: when)

    def _timer(self, kind: str, wake_of: Callable[[datetime], datetime]) -> None:
        position = self._next_position()
        entry = self._recorded(position, kind="timer", fingerprint=[kind], what=f"ctx.{kind}")
        if entry is None:
            wake = format_time(wake_of(self.clock.now()))
            entry = JournalEntry(position=position, kind="timer", fingerprint=[kind], result=wake)
            self._engine.journal.append(entry)
        self._engine.journal.sleep_until(str(entry.result))

    def wait_for_signal(
        self,
        name: str,
        output_type: type[T] | None = None,
        timeout: timedelta | None = None,
    ) -> Any:
        """Wait for signal ``name`` (``orchestrate signal NAME``) and return its payload,
        structured into ``output_type`` (an attrs class) when given.

        A signal of that name sent earlier and not consumed yet is taken at once, the
        oldest first; else the run pauses (exit 42, no agent request; ``orchestrate
        status`` says "waiting for signal NAME") until one comes. With ``output_type``,
        ``orchestrate signal`` refuses at the door a payload that does not fit (exit 2,
        naming the field); one sent before the wait that does not fit is consumed as
        refused (the journal says why) and the wait goes on. With ``timeout`` (a
        ``timedelta``), the wait returns ``None`` when no signal came that long after it
        began; the deadline is recorded, so a replay waits for the same moment.
        """
        where = f"phase {self._spec.name!r}: ctx.wait_for_signal"
        self._signal_name(name, where)
        if timeout is not None and (not isinstance(timeout, timedelta) or timeout < timedelta(0)):
            raise RunFailedError(
                f"{where}: timeout must be a timedelta of 0 or more (timedelta(hours=4)), "
                f"not {timeout!r}"
            )
        position = self._next_position()
        what = f"ctx.wait_for_signal({name!r})"
        entry = self._recorded(position, kind="signal", fingerprint=[name], what=what)
        engine = self._engine
        if entry is None:
            deadline = None if timeout is None else format_time(self.clock.now() + timeout)
            entry = JournalEntry(
                position=position, kind="signal", fingerprint=[name], result={"deadline": deadline}
            )
            engine.journal.append(entry)
        if "payload" not in entry.result and not entry.result.get("timed_out"):
            entry = engine.signals.receive(entry, answer_schema(output_type))
        return delivered(entry, output_type, where=f"signal {name!r} payload")

    def signals(self, name: str) -> list[Any]:
        """Take every signal ``name`` sent and not consumed yet, oldest first: their
        payloads (an empty list when none came). Never pauses; each signal is consumed
        once, and a replay returns the same list."""
        self._signal_name(name, f"phase {self._spec.name!r}: ctx.signals")
        position = self._next_position()
        entry = self._recorded(
            position, kind="signals", fingerprint=[name], what=f"ctx.signals({name!r})"
        )
        if entry is None:
            entry = self._engine.signals.drain(position, name)
        return [copy_json(item["payload"]) for item in entry.result]

    def _signal_name(self, name: Any, where: str) -> None:
        try:
            check_signal_name(name, where=where)
        except UsageError as exc:
            raise RunFailedError(str(exc)) from None

    def event(self, name: str, data: dict[str, Any] | None = None) -> None:
        """Add an event of your own (``review.file_analyzed``, ``decision``) to the run's
        ``events.ndjson``: once, even when the phase is replayed.

        ``data`` is a JSON object. The engine's own namespaces (``run.``, ``agent.``,
        ``skill.``, ``tool.``) and ``artifact.written`` are refused: use ``ctx.step`` and
        ``ctx.artifact``, which tell them.
        """
        payload = self._event_payload(name, data)
        position = self._next_position()
        if self._recorded(position, kind="event", fingerprint=[name], what=f"event {name!r}"):
            return
        self._engine.journal.append(
            JournalEntry(position=position, kind="event", fingerprint=[name])
        )
        self._engine.recorder.emit(name, payload)

    def artifact(
        self,
        name: str,
        path: str,
        content: str | bytes,
        *,
        media_type: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        """Keep ``content`` as an artifact of this phase: a file at ``path`` in the phase's
        output directory, listed in its ``results.json`` and told by ``artifact.written``.
        Written once, even when the phase is replayed; returns where it is, relative to
        the run's directory. ``media_type`` defaults to a guess from the file name.
        """
        document = self._artifact_document(name, path, content, media_type, metadata)
        position = self._next_position()
        entry = self._recorded(
            position, kind="artifact", fingerprint=[path], what=f"artifact {path!r}"
        )
        if entry is not None:
            return str(entry.result["x_location"])
        data = content.encode() if isinstance(content, str) else bytes(content)
        return self._engine.journal.keep_artifact(self._spec, position, document, data)

    def _event_payload(self, name: str, data: dict[str, Any] | None) -> dict[str, Any]:
        where = f"phase {self._spec.name!r}: ctx.event({name!r})"
        if not event_name_ok(name):
            raise RunFailedError(
                f"{where}: the name must be lower-case dot-separated words of [a-z0-9_], "
                "with your step type first (like 'review.file_analyzed')"
            )
        if name in RESERVED_NAMES or name.startswith(RESERVED_PREFIXES):
            raise RunFailedError(
                f"{where}: {name!r} is the engine's own (run., agent., skill., tool., "
                "artifact.written); ctx.step and ctx.artifact tell those, pick another name"
            )
        payload = {} if data is None else data
        if not isinstance(payload, dict):
            raise RunFailedError(f"{where}: data must be a dict (a JSON object)")
        return copy_json(to_json_value(payload, where=f"{where} data"))  # type: ignore[no-any-return]

    def _artifact_document(
        self,
        name: str,
        path: str,
        content: str | bytes,
        media_type: str | None,
        metadata: dict[str, Any] | None,
    ) -> dict[str, Any]:
        where = f"phase {self._spec.name!r}: ctx.artifact({name!r}, {path!r})"
        if not isinstance(content, (str, bytes, bytearray)):
            raise RunFailedError(f"{where}: content must be str or bytes")
        if path == RESULTS_FILE:
            raise RunFailedError(f"{where}: {RESULTS_FILE} is the phase's own; pick another path")
        if media_type is None:
            import mimetypes

            media_type = mimetypes.guess_type(path)[0] or "application/octet-stream"
        document: dict[str, Any] = {"name": name, "path": path, "media_type": media_type}
        if metadata is not None:
            document["metadata"] = copy_json(to_json_value(metadata, where=f"{where} metadata"))
        try:
            check_artifact(document, source=where)
        except ContractError as exc:
            raise RunFailedError(f"{where}: {exc.detail} ({exc.json_path})") from None
        return document

    def check_all_replayed(self) -> None:
        record = self._engine.record
        later = [e for e in record.journal if e.position >= self._position]
        if later and self._engine.journal.reopened:
            self._engine.journal.drop_from(
                self._position, because=f"the phase now ends before {describe_call(later[0])}"
            )
        elif later:
            entry = later[0]
            raise NonDeterminismError(
                f"phase {self._spec.name!r} (phase {self._spec.number}) finished at position "
                f"{self._position}, but the recorded run went on to {describe_call(entry)}; a "
                "phase must make the same asks and steps, in the same order, on replay",
                phase_name=self._spec.name,
                position=self._position,
                recorded=describe_call(entry),
                current="no call: the phase returns here",
            )

    # -- internals ----------------------------------------------------------------------

    def _recorded(
        self,
        position: int,
        *,
        kind: str,
        fingerprint: list[str],
        what: str,
        asks: Sequence[Ask] = (),
    ) -> JournalEntry | None:
        """The journal's entry at ``position``, checked against the call the phase makes
        now; ``None`` when there is none (the call is made anew).

        A mismatch is a non-determinism error, except in a phase a retry re-opened: there
        the first call that no longer matches, or whose record is a failure, drops the
        journal from ``position`` on, and the phase runs on anew.
        """
        entry = self._engine.journal.entry(position)
        if entry is None:
            if self._engine.replay_only:
                raise NonDeterminismError(
                    f"phase {self._spec.name!r} (phase {self._spec.number}), position "
                    f"{position}: the recorded run made no call here, this code makes {what}",
                    phase_name=self._spec.name,
                    position=position,
                    recorded="no call: the phase returned here",
                    current=what,
                )
            return None
        if self._engine.journal.reopened:
            if entry.kind != kind or entry.fingerprint != fingerprint:
                because = f"{what}: {what_changed(entry, kind, fingerprint)}"
            elif not self._engine.journal.usable(entry):
                because = f"{describe_call(entry)} failed in the try before"
            else:
                return entry
            self._engine.journal.drop_from(position, because=because)
            return None
        self._expect(entry, kind=kind, fingerprint=fingerprint, what=what, asks=asks)
        return entry

    def _next_position(self) -> int:
        position = self._position
        self._position += 1
        return position

    def _ask_group(self, asks: list[Ask], *, kind: str, return_failures: bool = False) -> list[Any]:
        engine = self._engine
        for ask in asks:
            self._check_ask(ask)
        position = self._next_position()
        fingerprint = [ask_fingerprint(a) for a in asks]
        what = describe_asks(kind, asks)
        entry = self._recorded(position, kind=kind, fingerprint=fingerprint, what=what, asks=asks)
        if entry is None:
            engine.check_budget([a.agent for a in asks])
            entry = engine.mailbox.open_requests(
                self._spec, position, asks, kind=kind, fingerprint=fingerprint
            )
        records = engine.mailbox.records_of(entry)
        if any(r.status is HistoryStatus.PENDING for r in records):
            raise Pause()
        if not return_failures:
            return [self._answer(record, ask) for record, ask in zip(records, asks, strict=True)]
        answers: list[Any] = []
        for record, ask in zip(records, asks, strict=True):
            try:
                answers.append(self._answer(record, ask))
            except AgentFailedError as failure:
                if engine.fatal is not None:
                    raise
                answers.append(failure)
        return answers

    def _check_ask(self, ask: Ask) -> None:
        workflow_cls = self._engine.workflow_cls
        where = f"phase {self._spec.name!r}"
        if ask.agent not in workflow_cls.agents:
            raise RunFailedError(
                f"{where} asks agent {ask.agent!r}, which the workflow does not declare in "
                f"'agents' {list(self._engine.workflow_cls.agents)}: add it there (or ask a "
                "declared one)"
            )
        if not workflow_cls.may_ask(self._spec):
            raise RunFailedError(
                f"{where} asks an agent but is not marked @phase(..., asks_agents=True) "
                "while other phases are; mark it so the request schema lists it"
            )
        if len(ask.prompt) < PROMPT_MIN_LENGTH:
            raise RunFailedError(
                f"{where} asks {ask.agent!r} with a prompt of "
                f"{plural(len(ask.prompt), 'character')}; "
                f"a request's prompt has at least {PROMPT_MIN_LENGTH}: say who the agent is, "
                "what to do and what to answer with"
            )
        low, high = TIMEOUT_RANGE
        if not low <= ask.timeout_seconds <= high:
            raise RunFailedError(f"{where}: timeout_seconds must be within {low}..{high}")
        within = ask.answer_within
        if within is not None and (not isinstance(within, timedelta) or within <= timedelta(0)):
            raise RunFailedError(
                f"{where}: answer_within must be a positive timedelta "
                f"(timedelta(hours=4)), not {within!r}"
            )

    def _answer(self, record: AgentRequestRecord, ask: Ask) -> Any:
        response = record.x_response
        assert response is not None
        error = error_type_of(response)
        if response.status is RequestStatus.CANCELLED:
            cancelled = RunFailedError(
                f"the host cancelled request {record.request_id} to {record.agent_name}"
            )
            self._engine.mark_fatal(cancelled)
            raise cancelled
        if error is not None:
            raise self._failure(record, error, response.error_message or error.value)
        refused = record.x_refused
        if refused is not None:  # refused at the gate, and no attempt was left
            raise self._failure(record, ErrorType(refused["error_type"]), refused["message"])
        text = response.response or ""
        data: Any = None
        if ask.output_type is not None:  # an answer that is not JSON says so first
            try:
                data = json.loads(text)
            except ValueError as exc:
                raise self._failure(
                    record, ErrorType.PARSE_ERROR, f"the answer is not JSON: {exc}"
                ) from None
        if ask.min_confidence is not None:
            confidence = confidence_of(response)
            if confidence is None:
                raise self._failure(
                    record,
                    ErrorType.VALIDATION_ERROR,
                    "no confidence reported (metadata.confidence, or a numeric "
                    "overall_confidence or confidence in the JSON answer)",
                )
            if confidence < ask.min_confidence:
                raise self._failure(
                    record,
                    ErrorType.VALIDATION_ERROR,
                    f"confidence {confidence} is below the required {ask.min_confidence}",
                )
        if ask.output_type is None:
            return text
        try:
            return structure(data, ask.output_type, source=f"response to {record.request_id}")
        except ContractError as exc:
            raise self._failure(
                record, ErrorType.VALIDATION_ERROR, exc.detail + f" at {exc.json_path}"
            ) from None

    def _failure(
        self, record: AgentRequestRecord, error: ErrorType, message: str
    ) -> AgentFailedError:
        if record.status is not HistoryStatus.FAILED:  # once: the status is saved with it
            record.status = HistoryStatus.FAILED
            record.x_note = f"{error.value}: {message}"
            self._engine.recorder.emit(
                EVENT_ERROR,
                {
                    "skill": self._spec.name,
                    "agent": record.agent_name,
                    "request_id": record.request_id,
                    "error_type": error.value,
                    "message": message,
                },
                request_id=record.request_id,
            )
        failure = AgentFailedError(
            f"agent {record.agent_name} (request {record.request_id}) failed with "
            f"{error.value}: {message}",
            request_id=record.request_id,
            agent_name=record.agent_name,
            error_type=error.value,
        )
        if error is ErrorType.AGENT_NOT_FOUND:
            self._engine.mark_fatal(failure)
        return failure

    def _expect(
        self,
        entry: JournalEntry,
        *,
        kind: str,
        fingerprint: list[str],
        what: str,
        asks: Sequence[Ask] = (),
    ) -> None:
        if entry.kind == kind and entry.fingerprint == fingerprint:
            return
        where = f"phase {self._spec.name!r} (phase {self._spec.number}), position {entry.position}"
        made = f"the recorded run made {describe_call(entry)}, this run makes {what}"
        edited = edited_prompt(self._engine.mailbox, entry, kind, fingerprint, asks)
        recorded, current = describe_call(entry), what
        if edited is not None:
            index, old, new = edited
            recorded += f", request {index} with the prompt:\n{old}"
            current += f", request {index} with the prompt:\n{new}"
            message = edited_prompt_message(
                f"{where}: {made}: the prompt changed (request {index})",
                old=old,
                new=new,
                replay_only=self._engine.replay_only,
            )
        else:
            if recorded == current:  # the same call in words: its prompts' digests differ
                recorded += f" [{', '.join(entry.fingerprint)}]"
                current += f" [{', '.join(fingerprint)}]"
            message = (
                f"{where}: {made} ({what_changed(entry, kind, fingerprint)}); a phase must "
                "make the same asks and steps, in the same order, on replay; put anything "
                "that varies inside ctx.step, or 'orchestrate cancel' and run again"
            )
        raise NonDeterminismError(
            message,
            phase_name=self._spec.name,
            position=entry.position,
            recorded=recorded,
            current=current,
        )
