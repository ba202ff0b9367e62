"""The engine's bookkeeping in the state, and how a phase's values become JSON.

Everything the engine needs to resume that the bridge format's state has no field for
lives in ``phase_data.x_orchestrator`` as an :class:`EngineRecord`: the run's identity
and inputs, the current phase's journal of asks and steps, and the evidence outbox.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import attrs

from .._errors import ContractError, RunFailedError, StateDamagedError
from ..evidence.recorder import OutboxEvent
from ..formats.bridge import AgentRequest, CheckpointState
from ..formats.convert import structure, unstructure
from ..storage.durable import sha256_hex
from ..storage.runs import ENGINE_KEY

__all__ = [
    "EXIT_ERROR",
    "EXIT_OK",
    "EXIT_PAUSED",
    "EXIT_USAGE",
    "ContinueAsNew",
    "EngineRecord",
    "JournalEntry",
    "OutboxEvent",
    "Outcome",
    "Pause",
    "copy_json",
    "load_record",
    "prompt_digest",
    "record_value",
    "same_value",
    "step_type",
    "to_json_value",
]


class Pause(BaseException):
    """Unwinds a phase to the engine when it must wait for the host.

    A ``BaseException`` so that a user's ``except Exception:`` cannot swallow it.
    """


class ContinueAsNew(BaseException):
    """Unwinds a phase to the engine when it calls ``ctx.continue_as_new(inputs)``: the run
    ends there, and the workflow starts again as a new run with ``inputs``, a fresh
    history under the same lineage (the new run's record names this one and the lineage's
    first run; this one's names the new run). For a run that loops without end: each
    run's history stays the size of one round.

    The run ends ``completed`` (its record's ``continued_as`` says it went on); ``run``,
    ``resume``, ``drive`` and a worker go straight on into the new run; a replay of the
    run ends here. A ``BaseException``, as :class:`Pause` is."""

    def __init__(self, inputs: dict[str, Any]) -> None:
        super().__init__("continue as new")
        self.inputs = inputs

    @classmethod
    def of(cls, inputs: Any, *, phase_name: str) -> ContinueAsNew:
        """The unwinding for ``ctx.continue_as_new(inputs)`` in ``phase_name``; inputs
        that are not a dict of JSON values fail the phase, saying so."""
        if not isinstance(inputs, dict):
            raise RunFailedError(
                f"phase {phase_name!r}: ctx.continue_as_new takes the new run's inputs as a "
                f"dict, not {type(inputs).__name__}"
            )
        where = f"phase {phase_name!r}: the inputs of ctx.continue_as_new"
        return cls(to_json_value(inputs, where=where))


def prompt_digest(prompt: str) -> str:
    return sha256_hex(prompt.encode("utf-8"))


@attrs.define(kw_only=True, frozen=True)
class JournalEntry:
    """One ``ask``/``ask_all``/``step`` call of the current phase, by position. Frozen: an
    entry that changes is replaced by a new one (the engine keeps each entry's JSON form
    while it is the very object it was)."""

    position: int
    kind: str  # "ask" | "ask_all" | "step"
    fingerprint: list[str]  # ask: "agent sha256(prompt)" per request; step: [name]
    request_ids: list[str] = attrs.field(factory=list)
    result: Any = None
    # A step that raised: {"type": "module:qualname", "message": ...}, raised again on replay.
    error: dict[str, Any] | None = None
    # A step run with a retry policy or a timeout: each attempt that ended, in order
    # ({"attempt", "started_at", "duration_ms", and "error", "timed_out" when it failed}).
    attempts: list[dict[str, Any]] | None = None
    # A step between two attempts: when the next one is due. The step is not over yet
    # (no result, no error): a resume goes on with the next attempt.
    next_attempt_at: str | None = None


@attrs.define(kw_only=True)
class EngineRecord:
    """Everything the engine needs to resume that the agent bridge's state file has no field for."""

    run_id: str
    workflow: str
    workflow_name: str
    workdir: str
    started_at: str
    # The work directory's identity (``storage.checkpoints.home_of``), which the file
    # bridge writes at each save: a state found in another directory was copied or moved
    # there. Absent from runs begun before, and from runs in other stores.
    home: str | None = None
    inputs: dict[str, Any] = attrs.field(factory=dict)
    status: str = "running"  # running | paused | failed | completed | cancelled
    failure: str | None = None
    # Where the failure was raised: type, message and innermost frames (``failure_trace``).
    failure_trace: dict[str, Any] | None = None
    revision: int = 0
    journal: list[JournalEntry] = attrs.field(factory=list)
    # Whether this run writes evidence: a run started by a version without it does not.
    evidence: bool = False
    # The event outbox (see ``evidence.recorder``) and the next event's number.
    events: list[OutboxEvent] = attrs.field(factory=list)
    next_seq: int = 1
    # Facts of the current phase told once (its start, a fallback, ...); cleared with it.
    marks: list[str] = attrs.field(factory=list)
    phase_started_at: str | None = None
    # A durable timer of the current phase not yet due (``ctx.sleep``, ``ctx.wait_until``).
    waiting_until: str | None = None
    # The signal the current phase waits for (``ctx.wait_for_signal``): ``{"name": ...,
    # "schema": the payload's JSON Schema or None}`` (see ``formats.signals``).
    waiting_for_signal: dict[str, Any] | None = None
    # The ids of the signals of the run's inbox consumed so far, in the order consumed:
    # each is delivered once (saved with the journal entry that consumed it).
    signals_consumed: list[str] = attrs.field(factory=list)
    # Each ``orchestrate retry`` of a failed run: when, the failure, and the journal
    # entries of the failed phase the new code did not make again (they left the journal).
    tries: list[dict[str, Any]] = attrs.field(factory=list)
    # The current phase was re-opened by a retry: its first call that no longer matches
    # the journal (or whose record failed) drops the journal from there, instead of
    # being a non-determinism error.
    reopened: bool = False
    # Each ``orchestrate rewind``: when, from where to which phase, and the outputs of the
    # phases it took back (they run again; what they said before stays here).
    rewinds: list[dict[str, Any]] = attrs.field(factory=list)
    # A run made by ``orchestrate fork``: the run, directory and phase it started from.
    forked_from: dict[str, Any] | None = None
    # The ``version`` of the workflow that last wrote the state, and each migration
    # from an older one (when, from, to, and where the state before it is kept).
    workflow_version: int = 1
    migrations: list[dict[str, Any]] = attrs.field(factory=list)
    # The SHA-256 of each phase's ``journal.json`` as written, by the phase's directory
    # in the run's evidence: replay takes a journal only when it is as this state says.
    journals: dict[str, Any] = attrs.field(factory=dict)
    # The tokens of the answers moved to the run's history, by model (see
    # ``evidence.usage.tally_of``): what a budget needs of them once their text is gone.
    archived_usage: dict[str, Any] = attrs.field(factory=dict)
    # Which visit of the current phase this is (1 the first time the run enters it; a
    # ``Goto`` back to a phase enters it again). Each visit has its own evidence directory.
    # The three routing fields stay ``None`` (and out of the state) in a run that never
    # routed.
    visit: int | None = None
    # Each ``Goto`` a phase returned, in order: ``index`` (of its completion in the
    # state's ``completed_phases``), ``from`` (the phase), ``visit`` (its visit), ``to``
    # and ``at``. A rewind or a fork takes the routes after its point back with them.
    route: list[dict[str, Any]] | None = None
    # The outputs of the earlier visits of phases a route entered again (``phase``,
    # ``visit``, ``output``): ``phase_data`` holds each phase's latest; a rewind or a fork
    # to an earlier visit takes these back.
    earlier_visits: list[dict[str, Any]] | None = None
    # The run's trace context for OpenTelemetry, made once at its start: ``trace_id``
    # (32 hex digits), the run span's ``span_id`` (16), and ``parent_span_id`` when the
    # run was started inside another trace (``TRACEPARENT``). Every process that goes on
    # with the run sends its spans into this trace (see ``evidence.live_spans``).
    trace: dict[str, Any] | None = None
    # A child run (``ctx.child``): the run id of the run that started it.
    parent_run_id: str | None = None
    # The child runs this run started, in the order it started them (their run ids).
    children: list[str] = attrs.field(factory=list)
    # The child runs the current phase waits for (not yet ended).
    waiting_children: list[str] = attrs.field(factory=list)
    # The bytes of the request lines moved to the run's history so far, and its largest
    # lines (``[request id, bytes]``, at most three): what the size warning tells.
    history_bytes: int | None = None
    history_largest: list[list[Any]] | None = None
    # The size warnings told (``"state"``, ``"history"``): each once per run.
    size_warned: list[str] | None = None
    # ``ctx.continue_as_new``: the run this one went on as (it ended there), the run it
    # goes on from, and the first run of the lineage (each stays ``None`` when it has none).
    continued_as: str | None = None
    # The inputs the run it went on as starts with: kept with ``continued_as`` before this
    # run ends, so a crash between the two runs starts that run as it was meant to be.
    continued_inputs: dict[str, Any] | None = None
    previous_run_id: str | None = None
    lineage_run_id: str | None = None


@attrs.frozen(kw_only=True)
class Outcome:
    """How a ``run``/``resume`` ended, with the exit code the CLI should use."""

    status: str  # "completed" | "paused" | "failed"
    exit_code: int
    message: str
    pending: tuple[AgentRequest, ...] = ()
    outputs: dict[str, Any] = attrs.field(factory=dict)
    history_path: str | None = None
    #: paused by a durable timer: when it is due (RFC 3339), and nothing is pending
    wake_at: str | None = None
    #: paused waiting for a signal: its name (``wake_at`` too when the wait has a timeout)
    signal: str | None = None


EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_PAUSED = 0, 1, 2, 42


def copy_json(data: Any) -> Any:
    """A deep copy of JSON data, so recorded values never alias what user code holds."""
    if isinstance(data, (dict, list)):
        return json.loads(json.dumps(data))
    return data


def step_type(fn: Any, output_type: Any = None) -> Any:
    """What a step gives back: ``output_type``, else ``fn``'s return annotation; ``None``
    for plain JSON data (no annotation, or ``Any``)."""
    if output_type is not None:
        return output_type
    try:
        return _return_type(fn)
    except TypeError:  # not hashable: look it up each time
        return _return_type.__wrapped__(fn)


@functools.lru_cache(maxsize=1024)
def _return_type(fn: Any) -> Any:
    # A replay asks at every recorded step; resolving annotations is not free.
    import typing

    try:
        hint = typing.get_type_hints(fn).get("return")
    except Exception:  # a builtin, a partial, a name the annotation cannot resolve
        return None
    return None if hint in (None, type(None), typing.Any, object) else hint


def needs_structuring(target: Any) -> bool:
    """Whether JSON data must be structured to be ``target``: it holds attrs classes or
    enums (``list[Verdict]``, ``dict[str, Finding]``); plain JSON types need nothing."""
    import enum
    import typing

    if isinstance(target, type) and (attrs.has(target) or issubclass(target, enum.Enum)):
        return True
    return any(needs_structuring(arg) for arg in typing.get_args(target))


def record_value(value: Any, target: Any, *, where: str) -> Any:
    """The JSON data that gives ``value`` back, the same, after a pause: structured into
    ``target`` where that holds attrs classes. A value that would come back different (a
    tuple as a list, an attrs instance as a dict, an int key as a string) is refused now,
    when it is made, never after a pause."""
    try:
        data = unstructure(value)
    except Exception:  # not a shape the converters know: json.dumps says why below
        data = value
    try:
        text = json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise RunFailedError(f"{where} cannot be stored as JSON: {exc}") from None
    back = json.loads(text)
    if target is not None and needs_structuring(target):
        try:
            back = structure(back, target, source=where)
        except ContractError as exc:
            raise RunFailedError(
                f"{where} does not come back as {_type_name(target)}: {exc.detail} at "
                f"{exc.json_path}; return that type, or fix the annotation (or output_type=)"
            ) from None
    if not same_value(back, value):
        raise RunFailedError(
            f"{where} would come back as {_type_name(type(back))} after a pause, not as the "
            f"{_type_name(type(value))} returned now: return plain JSON data (dict, list, "
            "str, numbers, bool, None), or annotate the function's return type (or pass "
            "output_type=) with the attrs classes it returns"
        )
    return json.loads(text)


def same_value(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (``[1]`` is not ``(1,)``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    if attrs.has(type(a)):
        return all(
            same_value(getattr(a, f.name), getattr(b, f.name)) for f in attrs.fields(type(a))
        )
    return bool(a == b)


def _type_name(target: Any) -> str:
    return getattr(target, "__qualname__", None) or str(target)


def to_json_value(value: Any, *, where: str) -> Any:
    """``value`` as plain JSON data (attrs instances unstructured); refuses what JSON can't hold."""
    data = unstructure(value) if attrs.has(type(value)) else value
    try:
        text = json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise RunFailedError(f"{where} cannot be stored as JSON: {exc}") from None
    # A copy, as a resumed run reads it back: what the phase still holds may change later.
    return json.loads(text) if isinstance(data, (dict, list)) else data


def load_record(state: CheckpointState, *, source: str) -> EngineRecord:
    """The engine's bookkeeping from a loaded state; a state it cannot resume is damaged."""
    raw = state.phase_data.get(ENGINE_KEY)
    if raw is None:
        raise StateDamagedError(
            f"there is no phase_data.{ENGINE_KEY}, so orchestrate did not write it",
            source=source,
            json_path=f"$.phase_data.{ENGINE_KEY}",
            rule="required",
        )
    for index, item in enumerate(state.agent_requests):
        if not item.x_archived and (item.x_request is None or item.x_position is None):
            raise StateDamagedError(
                "an agent_requests item lacks the engine's x_request/x_position",
                source=source,
                json_path=f"$.agent_requests[{index}]",
                rule="required",
            )
    try:
        return structure(raw, EngineRecord, source=source)
    except ContractError as exc:
        raise StateDamagedError.wrap(exc, path_prefix=f"$.phase_data.{ENGINE_KEY}") from None
