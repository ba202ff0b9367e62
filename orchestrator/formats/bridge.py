"""The agent bridge files: the agent request, the agent response, the checkpoint state.

Field names, enums and ranges are the format's JSON Schemas, verbatim. Everything the
engine needs beyond them lives where those schemas leave room, under ``x_`` keys:
``phase_data["x_orchestrator"]``, extra keys on ``agent_requests`` items, and the
request's ``context``.

This module knows nothing of the engine; it imports only attrs and the standard library.
Structuring and validation live in :mod:`orchestrator.formats.convert`.
"""

from __future__ import annotations

import enum
from typing import Any

import attrs

BRIDGE_VERSION = "1.0"
SUPPORTED_MAJOR = 1

REQUEST_FILE = ".agent-request.json"
RESPONSE_FILE = ".agent-response.json"
REQUESTS_DIR = ".agent-requests"
RESPONSES_DIR = ".agent-responses"
#: Under ``RESPONSES_DIR``: response files refused at the answer gate, each with a
#: ``.reason.txt`` beside it; never read as answers, never removed by the engine.
REJECTED_DIR = "rejected"


def state_file_name(workflow_name: str) -> str:
    """``template-create`` -> ``.template-create-state.json`` (the format's name)."""
    return f".{workflow_name}-state.json"


class RequestStatus(enum.Enum):
    """``status`` of an ``.agent-response.json``."""

    SUCCESS = "success"
    ERROR = "error"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"


class ErrorType(enum.Enum):
    """``error_type`` of an ``.agent-response.json``."""

    AGENT_NOT_FOUND = "AGENT_NOT_FOUND"
    INVOCATION_FAILED = "INVOCATION_FAILED"
    TIMEOUT = "TIMEOUT"
    PARSE_ERROR = "PARSE_ERROR"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    UNKNOWN = "UNKNOWN"


class HistoryStatus(enum.Enum):
    """``status`` of an ``agent_requests`` item in the state file (free text in the format)."""

    PENDING = "pending"
    COMPLETED = "completed"
    RETRIED = "retried"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SUPERSEDED = "superseded"  # a retry made moot by a late answer to the request before it
    WITHDRAWN = "withdrawn"  # left unanswered when its run failed, then was retried


@attrs.frozen(kw_only=True)
class AgentRequest:
    """``.agent-request.json``: what the engine asks a host to run."""

    request_id: str
    phase: int
    phase_name: str
    agent_name: str
    prompt: str
    created_at: str
    version: str = BRIDGE_VERSION
    context: dict[str, Any] | None = None
    timeout_seconds: int = 120
    retry_count: int = 0


@attrs.frozen(kw_only=True)
class ResponseMetadata:
    """``metadata`` of a response; unknown keys are kept in ``extra``."""

    model: str | None = None
    tokens_used: int | None = None
    confidence: float | None = None
    extra: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class AgentResponse:
    """``.agent-response.json``: what a host answers."""

    request_id: str
    status: RequestStatus
    created_at: str
    version: str = BRIDGE_VERSION
    response: str | None = None
    error_message: str | None = None
    error_type: ErrorType | None = None
    duration_seconds: float | None = None
    metadata: ResponseMetadata | None = None

    def is_success(self) -> bool:
        return self.status is RequestStatus.SUCCESS

    def get_confidence(self) -> float:
        """The metadata's confidence, 0.0 when absent (as the format's helper does)."""
        if self.metadata is None or self.metadata.confidence is None:
            return 0.0
        return self.metadata.confidence


@attrs.frozen(kw_only=True)
class CompletedPhase:
    """One item of the state's ``completed_phases``."""

    phase: int
    phase_name: str
    completed_at: str
    result_summary: str


# Every AgentRequestRecord whose field was assigned after it was made, in order: whoever
# keeps a state's text from one save to the next finds here which records changed since,
# rather than comparing every field of a long run's thousand records. When long, it is
# replaced by a new list (never cut), which tells a reader of the old one to look again.
_record_edits: list[Any] = []
_RECORD_EDITS_KEPT = 4096


def record_edits() -> list[Any]:
    """The records edited since the list was last replaced (see above), in order."""
    return _record_edits


def _note_edit(instance: Any, attribute: Any, value: Any) -> Any:
    global _record_edits
    edits = _record_edits
    if len(edits) >= _RECORD_EDITS_KEPT:
        _record_edits = edits = []
    edits.append(instance)
    return value


@attrs.define(kw_only=True, on_setattr=_note_edit)
class AgentRequestRecord:
    """One item of the state's ``agent_requests`` history.

    The format's four keys, plus the engine's own under ``x_`` names (absent from states
    written by other tools, such as the format's example): the whole request
    (so a lost request file is re-derived from state), the phase position that asked,
    the recorded response and a digest of its bytes (so a response file left behind by a
    crash is recognised, not consumed twice). Once its phase is over, an item may be
    archived: its full text moves to the run's history and ``x_archived`` is set, keeping
    the state, rewritten at every checkpoint, small; ``x_archived_sha256`` is the digest of
    that history line, which the state (signed) vouches for. ``x_output_dir`` is where the run's
    evidence of this request (``results.json``, prompt and answer) lives, relative to the
    run's directory.
    """

    request_id: str
    agent_name: str
    phase: int
    status: HistoryStatus
    x_request: AgentRequest | None = None
    x_position: int | None = None
    x_response: AgentResponse | None = None
    x_response_sha256: str | None = None
    x_note: str | None = None
    x_archived: bool | None = None
    # SHA-256 of the record's line in the run's history (``requests.ndjson``), kept when
    # it is archived: the signed state vouches for the line read back.
    x_archived_sha256: str | None = None
    x_max_retries: int | None = None
    x_output_dir: str | None = None
    # Seconds the workflow waits for an answer (``answer_within``); absent: no deadline.
    x_answer_within: float | None = None
    # Why the answer it got was refused at the gate (field, expected, got, error_type):
    # the answer stays in ``x_response``, and the request was asked again or failed.
    x_refused: dict[str, Any] | None = None

    def request(self) -> AgentRequest:
        """The full request; only states written by this engine carry it."""
        if self.x_request is None:
            raise ValueError(
                f"agent_requests item {self.request_id} has no x_request: this state was not "
                "written by orchestrate and cannot be resumed"
            )
        return self.x_request


@attrs.define(kw_only=True)
class CheckpointState:
    """``.<workflow>-state.json``: the source of truth of one workflow instance."""

    phase: int
    phase_name: str
    checkpoint_name: str
    created_at: str
    output_path: str
    version: str = BRIDGE_VERSION
    project_path: str | None = None
    template_name: str | None = None
    phase_data: dict[str, Any] = attrs.field(factory=dict)
    completed_phases: list[CompletedPhase] = attrs.field(factory=list)
    agent_requests: list[AgentRequestRecord] = attrs.field(factory=list)


class RecordIndex:
    """``request_id`` -> item of a state's ``agent_requests``, kept as the list grows.

    A phase that asks in a loop looks up one record per recorded ask at every replay;
    building the map anew for each lookup made a long loop quadratic. The engine only
    appends to the list (or replaces the list whole), so the map is extended with the
    items added since the last call, and rebuilt when the list is another one or shorter.
    Callers must not change the map.
    """

    __slots__ = ("_by_id", "_items", "_seen")

    def __init__(self) -> None:
        self._items: list[AgentRequestRecord] | None = None  # held: its id is not reused
        self._seen = 0
        self._by_id: dict[str, AgentRequestRecord] = {}

    def of(self, items: list[AgentRequestRecord]) -> dict[str, AgentRequestRecord]:
        """The map for ``items`` (the state's ``agent_requests``)."""
        if items is not self._items or len(items) < self._seen:
            self._items, self._seen, self._by_id = items, 0, {}
        if len(items) > self._seen:
            by_id = self._by_id
            for item in items[self._seen :]:
                by_id[item.request_id] = item
            self._seen = len(items)
        return self._by_id
