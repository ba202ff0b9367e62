"""The engine's bookkeeping in the state, and how a phase's values become JSON.

Everything the engine needs to resume that the bridge format's state has no field for
lives in ``phase_data.x_orchestrator`` as an :class:`EngineRecord`: the run's identity
and inputs, the current phase's journal of asks and steps, and the evidence outbox.
"""

from __future__ import annotations

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
    "EngineRecord",
    "JournalEntry",
    "OutboxEvent",
    "Outcome",
    "Pause",
    "copy_json",
    "load_record",
    "prompt_digest",
    "to_json_value",
]


class Pause(BaseException):
    """Unwinds a phase to the engine when it must wait for the host.

    A ``BaseException`` so that a user's ``except Exception:`` cannot swallow it.
    """


def prompt_digest(prompt: str) -> str:
    return sha256_hex(prompt.encode("utf-8"))


@attrs.define(kw_only=True)
class JournalEntry:
    """One ``ask``/``ask_all``/``step`` call of the current phase, by position."""

    position: int
    kind: str  # "ask" | "ask_all" | "step"
    fingerprint: list[str]  # ask: "agent sha256(prompt)" per request; step: [name]
    request_ids: list[str] = attrs.field(factory=list)
    result: Any = None
    # A step that raised: {"type": "module:qualname", "message": ...}, raised again on replay.
    error: dict[str, Any] | None = None


@attrs.define(kw_only=True)
class EngineRecord:
    """Everything the engine needs to resume that the seed's state has no field for."""

    run_id: str
    workflow: str
    workflow_name: str
    workdir: str
    started_at: str
    inputs: dict[str, Any] = attrs.field(factory=dict)
    status: str = "running"  # running | paused | failed | completed | cancelled
    failure: str | None = None
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


@attrs.frozen(kw_only=True)
class Outcome:
    """How a ``run``/``resume`` ended, with the exit code the CLI should use."""

    status: str  # "completed" | "paused" | "failed"
    exit_code: int
    message: str
    pending: tuple[AgentRequest, ...] = ()
    outputs: dict[str, Any] = attrs.field(factory=dict)
    history_path: str | None = None


EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_PAUSED = 0, 1, 2, 42


def copy_json(data: Any) -> Any:
    """A deep copy of JSON data, so recorded values never alias what user code holds."""
    if isinstance(data, (dict, list)):
        return json.loads(json.dumps(data))
    return data


def to_json_value(value: Any, *, where: str) -> Any:
    """``value`` as plain JSON data (attrs instances unstructured); refuses what JSON can't hold."""
    data = unstructure(value) if attrs.has(type(value)) else value
    try:
        json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise RunFailedError(f"{where} cannot be stored as JSON: {exc}") from None
    return data


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
