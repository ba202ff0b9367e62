"""The task board documents and task IO with pins, as types.

The task board documents (``docs/formats/task-board.md``): the assignment packet, the
orchestrator output envelope, the subagent result, the worklog entry, the fresh-context
handoff bundle, the ledger delta and the validator output. Task IO with pins
(``docs/formats/task-io.md``): the task input, ``submit.json`` and the verdict. Field
names, enums and ranges are the formats', verbatim; the project's own fields are ``x_``
extensions (the ledger's are described in ``docs/board.md``). Every rule these documents
follow, and their parsing, is in :mod:`orchestrator.formats.board_rules`.

Decisions the formats leave open, made here:

- Enums are plain :class:`enum.Enum` (as in :mod:`orchestrator.formats.bridge`); ``.value`` is
  the wire string. A ``str`` mixin would be taken for a plain string by the converter's
  ``str`` hook, which then accepts any value.
- Fields the formats require on the wire but whose value is fixed (``schema_version``,
  ``packet_type``, ``required_output_schema``) have defaults in Python, so building a
  document is short, but parsing still refuses a document that omits them.
- Handoff bundle items the format only names: ``active_locks`` are :class:`ActiveLock`,
  ``dependencies`` are :class:`HandoffDependency` (``task_id``, ``depends_on``),
  ``open_blockers`` are :class:`Blocker`, ``acceptance_targets`` are
  :class:`AcceptanceTarget` (``task_id``, ``acceptance_criteria``).
- ``submit.json`` ``artifacts``: all five paths are required (the format says every one must
  exist). Verdict ``links``: only ``submit_json`` is required; a FAIL verdict on a result
  that lacks artifacts has nothing to link to. ``reason_code`` (both) is a
  SCREAMING_SNAKE_CASE string, not only a :class:`FailCode` (the format says "SHOULD map").
"""

from __future__ import annotations

import enum
from typing import Any

import attrs

from .bridge_codec import dump_document

EXTENSION_PREFIX = "x_"

BOARD_SCHEMA_VERSION = "1.0.0"
BOARD_SUPPORTED_MAJOR = 1
SUBMIT_SCHEMA_VERSION = "scc.submit.v1"
SUBMIT_VERSION_PREFIX = "scc.submit."  # any version of submit.json, known or not
VERDICT_SCHEMA_VERSION = "scc.verdict.v1"
PACKET_TYPE_ASSIGNMENT = "assignment"
SUBAGENT_RESULT_V1 = "subagent_result_v1"
MAX_NOTES_FOR_ORCHESTRATOR = 5


class TaskStatus(enum.Enum):
    """A task's state in the ledger; ``done``, ``failed`` and ``canceled`` are terminal."""

    TODO = "todo"
    IN_PROGRESS = "in_progress"
    BLOCKED = "blocked"
    DONE = "done"
    FAILED = "failed"
    CANCELED = "canceled"


class TaskType(enum.Enum):
    PARALLELIZABLE = "parallelizable"
    SERIAL = "serial"


class Priority(enum.Enum):
    LOW = "low"
    NORMAL = "normal"
    HIGH = "high"
    CRITICAL = "critical"


class ErrorCode(enum.Enum):
    """The task board's error codes (``docs/formats/task-board.md``); a validator reports
    exactly one."""

    SCHEMA_INVALID = "SCHEMA_INVALID"
    MISSING_REQUIRED_INPUT = "MISSING_REQUIRED_INPUT"
    UNKNOWN_SCHEMA_VERSION = "UNKNOWN_SCHEMA_VERSION"
    LOCK_CONFLICT = "LOCK_CONFLICT"
    SCOPE_VIOLATION = "SCOPE_VIOLATION"
    INVALID_TRANSITION = "INVALID_TRANSITION"
    DEPENDENCY_NOT_MET = "DEPENDENCY_NOT_MET"
    CONCURRENCY_CONFLICT = "CONCURRENCY_CONFLICT"
    TASK_TIMEOUT = "TASK_TIMEOUT"
    ACCEPTANCE_FAILED = "ACCEPTANCE_FAILED"
    LEDGER_INCONSISTENT = "LEDGER_INCONSISTENT"
    NON_COMPLIANT = "NON_COMPLIANT"
    MISSING_VALIDATOR = "MISSING_VALIDATOR"
    UNTRUSTED_CONTEXT_BLOCK = "UNTRUSTED_CONTEXT_BLOCK"


class FailCode(enum.Enum):
    """The fail codes of task IO (``docs/formats/task-io.md``); report the first blocking
    root cause."""

    SCOPE_CONFLICT = "SCOPE_CONFLICT"
    CI_FAILED = "CI_FAILED"
    SCHEMA_VIOLATION = "SCHEMA_VIOLATION"
    PINS_INSUFFICIENT = "PINS_INSUFFICIENT"
    POLICY_VIOLATION = "POLICY_VIOLATION"
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"
    TIMEOUT_EXCEEDED = "TIMEOUT_EXCEEDED"
    EXECUTOR_ERROR = "EXECUTOR_ERROR"
    PREFLIGHT_FAILED = "PREFLIGHT_FAILED"
    FILE_NOT_FOUND = "FILE_NOT_FOUND"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    MERGE_CONFLICT = "MERGE_CONFLICT"
    DEPENDENCY_MISSING = "DEPENDENCY_MISSING"
    FORMAT_VIOLATION = "FORMAT_VIOLATION"
    EVIDENCE_MISSING = "EVIDENCE_MISSING"
    EVIDENCE_INVALID = "EVIDENCE_INVALID"
    NEEDS_CLARIFICATION = "NEEDS_CLARIFICATION"
    UPSTREAM_CHANGED = "UPSTREAM_CHANGED"


class ContextKind(enum.Enum):
    FILE = "file"
    NOTE = "note"
    COMMAND = "command"
    CONSTRAINT = "constraint"


class ResultStatus(enum.Enum):
    """``status`` of a subagent result."""

    DONE = "done"
    BLOCKED = "blocked"
    FAILED = "failed"


class CheckStatus(enum.Enum):
    """``status`` of an ``acceptance_check`` item."""

    PASS = "pass"
    FAIL = "fail"


class SubmitStatus(enum.Enum):
    """``status`` of a ``submit.json``."""

    DONE = "DONE"
    NEED_INPUT = "NEED_INPUT"
    FAILED = "FAILED"


class VerdictOutcome(enum.Enum):
    """``verdict`` of a verdict document."""

    PASS = "PASS"
    FAIL = "FAIL"


# -- the task board documents --------------------------------------------------------------


@attrs.define(kw_only=True)
class Task:
    """The ``task`` of an assignment packet (and the ledger's ``x_create``)."""

    task_id: str
    title: str
    type: TaskType
    dependencies: list[str]
    lock_scope: list[str]
    forbidden_scope: list[str]
    acceptance_criteria: list[str]
    worklog_path: str
    timeout_seconds: int
    heartbeat_interval_seconds: int
    priority: Priority = Priority.NORMAL


@attrs.define(kw_only=True)
class LedgerDelta:
    """One ``ledger_delta`` item: one line of the board's ``ledger.ndjson``.

    The ``x_`` fields are the board's (``docs/board.md``): sequence, append time, the row
    version the writer saw (D5), create intent (D4), attempt, error code and verdict path.
    """

    task_id: str
    status: TaskStatus
    owner: str
    reason: str
    delta_id: str
    last_heartbeat_at: str | None = None
    timed_out: bool | None = None
    retry_after_ms: int | None = None
    x_seq: int | None = None
    x_at: str | None = None
    x_base_version: int | None = None
    x_create: Task | None = None
    x_attempt: int | None = None
    x_code: ErrorCode | None = None
    x_verdict: str | None = None


@attrs.define(kw_only=True)
class ActiveLock:
    task_id: str
    resource: str
    active: bool


@attrs.define(kw_only=True)
class ContextItem:
    """A ``context_package`` item; ``value`` is untrusted data."""

    kind: ContextKind
    value: str


@attrs.define(kw_only=True)
class AssignmentPacket:
    """The assignment packet, orchestrator -> subagent."""

    schema_version: str = BOARD_SCHEMA_VERSION
    run_id: str
    packet_type: str = PACKET_TYPE_ASSIGNMENT
    global_objective: str
    task: Task
    active_locks: list[ActiveLock]
    context_package: list[ContextItem]
    required_output_schema: str = SUBAGENT_RESULT_V1
    generated_at: str | None = None


@attrs.define(kw_only=True)
class Blocker:
    task_id: str
    code: ErrorCode
    reason: str
    details: dict[str, Any] | None = None


@attrs.define(kw_only=True)
class OrchestratorOutput:
    """The orchestrator output envelope."""

    schema_version: str = BOARD_SCHEMA_VERSION
    run_id: str
    ledger_delta: list[LedgerDelta]
    assignments: list[AssignmentPacket]
    active_locks: list[ActiveLock]
    blockers: list[Blocker]
    next_actions: list[str]
    generated_at: str | None = None


@attrs.define(kw_only=True)
class Change:
    resource: str
    action: str
    evidence: str | None = None


@attrs.define(kw_only=True)
class AcceptanceCheck:
    criterion: str
    status: CheckStatus
    evidence: str


@attrs.define(kw_only=True)
class SubagentResult:
    """The subagent result envelope."""

    schema_version: str = BOARD_SCHEMA_VERSION
    run_id: str
    task_id: str
    status: ResultStatus
    changes: list[Change]
    acceptance_check: list[AcceptanceCheck]
    worklog_path: str
    notes_for_orchestrator: list[str]
    generated_at: str | None = None


@attrs.define(kw_only=True)
class WorklogEntry:
    """One line of a worklog (no ``schema_version``: exempt, as
    ``docs/formats/task-board.md`` says)."""

    timestamp: str
    run_id: str
    task_id: str
    actor: str
    action: str
    files_touched: list[str]
    decision: str
    result: str
    next_step: str
    code: ErrorCode | None = None
    evidence: str | None = None


@attrs.define(kw_only=True)
class HandoffRow:
    """A ``ledger`` row of the handoff bundle."""

    task_id: str
    title: str
    status: TaskStatus
    owner: str
    lock_scope: list[str]
    timeout_seconds: int
    heartbeat_interval_seconds: int
    priority: Priority
    last_heartbeat_at: str | None = None
    x_task: Task | None = None  # the whole definition, so a new board can take the task over


@attrs.define(kw_only=True)
class HandoffDependency:
    """A ``dependencies`` item of the handoff bundle: a task and the tasks it waits for."""

    task_id: str
    depends_on: list[str]


@attrs.define(kw_only=True)
class AcceptanceTarget:
    """An ``acceptance_targets`` item of the handoff bundle: what a task must show."""

    task_id: str
    acceptance_criteria: list[str]


@attrs.define(kw_only=True)
class HandoffBundle:
    """The fresh-context handoff bundle."""

    schema_version: str = BOARD_SCHEMA_VERSION
    run_id: str
    objective: str
    constraints: list[str]
    ledger: list[HandoffRow]
    active_locks: list[ActiveLock]
    dependencies: list[HandoffDependency]
    open_blockers: list[Blocker]
    acceptance_targets: list[AcceptanceTarget]
    generated_at: str | None = None


@attrs.define(kw_only=True)
class ValidatorOutput:
    """What every validator returns (no ``schema_version``: exempt)."""

    allow: bool
    code: str
    reason: str
    details: dict[str, Any] | None = None


# -- task IO with pins ---------------------------------------------------------------------


@attrs.define(kw_only=True)
class Pins:
    """Scope guardrails: globs relative to the repository root."""

    allowed_paths: list[str]
    forbidden_paths: list[str]


@attrs.define(kw_only=True)
class TaskContext:
    """The task input's optional ``context``: free-form helper objects."""

    map: dict[str, Any] | None = None
    docs: dict[str, Any] | None = None
    history: dict[str, Any] | None = None


@attrs.define(kw_only=True)
class TaskInput:
    task_id: str
    goal: str
    role: str
    pins: Pins
    files: list[str] | None = None
    context: TaskContext | None = None


@attrs.define(kw_only=True)
class SubmitTests:
    commands: list[str]
    passed: bool
    summary: str


@attrs.define(kw_only=True)
class SubmitArtifacts:
    report_md: str
    selftest_log: str
    evidence_dir: str
    patch_diff: str
    submit_json: str


@attrs.define(kw_only=True)
class Submit:
    """``submit.json``: what an executor reports."""

    schema_version: str = SUBMIT_SCHEMA_VERSION
    task_id: str
    status: SubmitStatus
    reason_code: str | None = None
    changed_files: list[str]
    new_files: list[str]
    tests: SubmitTests
    artifacts: SubmitArtifacts
    exit_code: int
    needs_input: list[str]


@attrs.define(kw_only=True)
class VerdictChecks:
    schema_valid: bool
    scope_valid: bool
    tests_passed: bool
    evidence_present: bool


@attrs.define(kw_only=True)
class VerdictTimestamps:
    submitted_at: str
    evaluated_at: str


@attrs.define(kw_only=True)
class VerdictLinks:
    submit_json: str
    report_md: str | None = None
    selftest_log: str | None = None
    patch_diff: str | None = None
    evidence_dir: str | None = None


@attrs.define(kw_only=True)
class Verdict:
    """The gateway's evaluation of one result."""

    schema_version: str = VERDICT_SCHEMA_VERSION
    task_id: str
    verdict: VerdictOutcome
    reason_code: str | None = None
    messages: list[str]
    checks: VerdictChecks
    timestamps: VerdictTimestamps
    links: VerdictLinks
    x_code: str | None = None  # the board's task board error code for a FAIL


def dump_board_document(obj: Any) -> bytes:
    """Canonical bytes of a board document (``dumps_canonical``), nulls omitted."""
    return dump_document(obj)
