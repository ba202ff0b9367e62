"""Seed 003 and seed 002 wire formats: the task board's documents, and their validation.

Seed 003 (multi-agent operator contracts): the assignment packet, the orchestrator output
envelope, the subagent result, the worklog entry, the fresh-context handoff bundle, the
ledger delta and the validator output. Seed 002 (task IO with pins): the task input,
``submit.json`` and the verdict. Field names, enums and ranges are the seeds', verbatim;
the project's own fields are ``x_`` extensions (the ledger's are described in
``docs/board.md``).

Decisions the seeds leave open, made here:

- Enums are plain :class:`enum.Enum` (as in :mod:`orchestrator.formats.bridge`); ``.value`` is
  the wire string. A ``str`` mixin would be taken for a plain string by the converter's
  ``str`` hook, which then accepts any value.
- Seed 003 ``schema_version`` is ``MAJOR.MINOR.PATCH``; a major other than 1 raises
  :class:`UnknownVersionError` before anything else is judged (fail closed). Seed 002
  versions are exact strings (``scc.submit.v1``, ``scc.verdict.v1``); any other string is
  an unknown version.
- Fields the seeds require on the wire but whose value is fixed (``schema_version``,
  ``packet_type``, ``required_output_schema``) have defaults in Python, so building a
  document is short, but ``parse_*`` still refuse a document that omits them.
- Handoff bundle items the seed only names: ``active_locks`` are :class:`ActiveLock`,
  ``dependencies`` are :class:`HandoffDependency` (``task_id``, ``depends_on``),
  ``open_blockers`` are :class:`Blocker`, ``acceptance_targets`` are
  :class:`AcceptanceTarget` (``task_id``, ``acceptance_criteria``).
- ``submit.json`` ``artifacts``: all five paths are required (the seed says every one must
  exist). Verdict ``links``: only ``submit_json`` is required; a FAIL verdict on a result
  that lacks artifacts has nothing to link to. ``reason_code`` (both) is a
  SCREAMING_SNAKE_CASE string, not only a :class:`FailCode` (the seed says "SHOULD map").
- ``task_id`` in ``submit.json`` and the verdict follows seed 003's rule (``T-<n>`` or a
  36-character id), since the board answers seed 003 tasks with them; the task input's
  is a UUID, as seed 002 says.
- A PASS verdict needs every check true (only PASS moves a task to done).
- Beyond the seeds' words, and in the schemas too: resources, scope entries, acceptance
  criteria, pins, ``delta_id``, ``x_verdict``, artifact and link paths and a validator's
  ``code`` are non-empty strings; ``retry_after_ms``, ``x_base_version`` >= 0; ``x_seq``,
  ``x_attempt`` >= 1. ``delta_id`` is unique within one orchestrator output (Python
  only). "Both allowed and forbidden" in pins means the same string in both lists.
- Not checked here, because they need more than the document: ``delta_id`` uniqueness
  across a run, pins glob matching, ``files`` within pins, ``forbidden_scope`` overlap
  (the lock module normalises paths), artifacts existing on disk.

Extension policy (seed 003): ``x_`` keys are always accepted (kept when the model
declares them, ignored otherwise); other unknown keys are ignored unless ``strict=True``,
which refuses them (rule ``additionalProperties``). The shipped JSON Schemas
(``orchestrator/formats/schemas/board/``) describe strict mode.
"""

from __future__ import annotations

import enum
import json
import re
import types
import typing
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import attrs

from .._errors import ContractError, UnknownVersionError
from .bridge_codec import dump_document
from .convert import check_date_time, check_uuid, structure

T = TypeVar("T")
EXTENSION_PREFIX = "x_"

BOARD_SCHEMA_VERSION = "1.0.0"
BOARD_SUPPORTED_MAJOR = 1
SUBMIT_SCHEMA_VERSION = "scc.submit.v1"
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
    """Seed 003's error codes (``error-codes.md``); a validator reports exactly one."""

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
    """Seed 002's fail codes (``fail_codes.md``); report the first blocking root cause."""

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


# -- seed 003 ------------------------------------------------------------------------------


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
    """One line of a worklog (no ``schema_version``: exempt, see ``specs/SEEDS.md``)."""

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


# -- seed 002 ------------------------------------------------------------------------------


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
    x_code: str | None = None  # the board's seed 003 error code for a FAIL


# -- validation ----------------------------------------------------------------------------

RUN_ID_PATTERN = r"^[0-9a-fA-F-]{36}(?![\s\S])"
TASK_ID_PATTERN = r"^(T-[0-9]+|[0-9a-fA-F-]{36})(?![\s\S])"
REASON_CODE_PATTERN = r"^[A-Z][A-Z0-9_]*(?![\s\S])"
_RUN_ID = re.compile(RUN_ID_PATTERN, re.ASCII)
_TASK_ID = re.compile(TASK_ID_PATTERN, re.ASCII)
_REASON_CODE = re.compile(REASON_CODE_PATTERN, re.ASCII)
_SEMVER = re.compile(r"([0-9]+)\.([0-9]+)\.([0-9]+)")

TITLE_LENGTH = (1, 500)
OBJECTIVE_LENGTH = (1, 5000)
WORKLOG_PATH_LENGTH = (1, 1000)
MIN_TIMEOUT_SECONDS = 30
MIN_HEARTBEAT_INTERVAL_SECONDS = 5


@attrs.frozen
class _At:
    """Where a check looks: the document's name and a JSON path inside it."""

    source: str
    path: str = "$"

    def key(self, name: str) -> _At:
        return _At(self.source, f"{self.path}.{name}")

    def item(self, index: int) -> _At:
        return _At(self.source, f"{self.path}[{index}]")

    @property
    def name(self) -> str:
        """The member the path ends at (``lock_scope[0]``), for messages."""
        return self.path.rsplit(".", 1)[-1]

    def fail(self, message: str, rule: str) -> NoReturn:
        raise ContractError(message, source=self.source, json_path=self.path, rule=rule)


def _pattern(value: str, regex: re.Pattern[str], what: str, at: _At) -> None:
    if regex.fullmatch(value) is None:
        at.fail(f"{what} {value!r} does not match {regex.pattern}", "pattern")


def _run_id(value: str, at: _At) -> None:
    _pattern(value, _RUN_ID, "run_id", at)


def _task_id(value: str, at: _At) -> None:
    if _TASK_ID.fullmatch(value) is None:
        at.fail(
            f"task_id {value!r} does not match {TASK_ID_PATTERN}; write T-<number> or a UUID",
            "pattern",
        )


def _length(value: str, at: _At, low: int = 1, high: int | None = None) -> None:
    if len(value) < low:
        what = "is empty" if not value else f"has {len(value)} characters"
        at.fail(f"{at.name} {what}; write at least {low} character(s)", "minLength")
    if high is not None and len(value) > high:
        at.fail(f"{at.name} has {len(value)} characters; at most {high} are allowed", "maxLength")


def _items(values: list[Any], at: _At, low: int = 0, high: int | None = None) -> None:
    if len(values) < low:
        at.fail(f"{at.name} has {len(values)} items; list at least {low}", "minItems")
    if high is not None and len(values) > high:
        at.fail(f"{at.name} has {len(values)} items; at most {high} are allowed", "maxItems")


def _minimum(value: int, at: _At, low: int) -> None:
    if value < low:
        at.fail(f"{at.name} is {value}; the minimum is {low}", "minimum")


def _date_time(value: str | None, at: _At) -> None:
    if value is not None:
        check_date_time(value, source=at.source, json_path=at.path)


def _const(value: str, expected: str, at: _At) -> None:
    if value != expected:
        at.fail(f"{at.name} is {value!r}; it must be {expected!r}", "const")


def _non_empty_strings(values: list[str], at: _At) -> None:
    for index, value in enumerate(values):
        _length(value, at.item(index))


def _board_version(version: str, at: _At) -> None:
    """``MAJOR.MINOR.PATCH``; an unknown major fails closed."""
    match = _SEMVER.fullmatch(version)
    if match is None:
        at.fail(
            f"schema_version {version!r} is not MAJOR.MINOR.PATCH (for example "
            f"{BOARD_SCHEMA_VERSION!r})",
            "pattern",
        )
    if int(match.group(1)) != BOARD_SUPPORTED_MAJOR:
        raise UnknownVersionError(
            f"schema_version {version!r} has major {match.group(1)}, this build reads major "
            f"{BOARD_SUPPORTED_MAJOR} only; write a {BOARD_SUPPORTED_MAJOR}.x.y document or "
            "upgrade",
            source=at.source,
            json_path=at.path,
            rule="version",
        )


def _exact_version(version: str, expected: str, at: _At) -> None:
    if version != expected:
        raise UnknownVersionError(
            f"schema_version {version!r} is not {expected!r}, the only version this build "
            "reads; write that version or upgrade",
            source=at.source,
            json_path=at.path,
            rule="version",
        )


# -- seed 003 checks -----------------------------------------------------------------------


def _task(task: Task, at: _At) -> None:
    _task_id(task.task_id, at.key("task_id"))
    _length(task.title, at.key("title"), *TITLE_LENGTH)
    for index, dependency in enumerate(task.dependencies):
        _task_id(dependency, at.key("dependencies").item(index))
    _items(task.lock_scope, at.key("lock_scope"), 1)
    _non_empty_strings(task.lock_scope, at.key("lock_scope"))
    _non_empty_strings(task.forbidden_scope, at.key("forbidden_scope"))
    _items(task.acceptance_criteria, at.key("acceptance_criteria"), 1)
    _non_empty_strings(task.acceptance_criteria, at.key("acceptance_criteria"))
    _length(task.worklog_path, at.key("worklog_path"), *WORKLOG_PATH_LENGTH)
    _timing(task.timeout_seconds, task.heartbeat_interval_seconds, at)
    _scopes(task, at)


def _scopes(task: Task, at: _At) -> None:
    """The lock rules of a task's scopes, as the board applies them when it creates the
    task: every entry normalises (not empty, no ``..``), and no forbidden entry overlaps
    a locked one."""
    from .scope import ScopeError, check_scope_pair

    try:
        check_scope_pair(task.lock_scope, task.forbidden_scope)
    except ScopeError as exc:
        if exc.related:  # a forbidden entry overlaps a locked one
            field = "forbidden_scope"
        else:  # an entry that does not normalise, in lock_scope or else forbidden_scope
            locked = any(_names(entry, exc.value) for entry in task.lock_scope)
            field = "lock_scope" if locked or not task.forbidden_scope else "forbidden_scope"
        entries = task.forbidden_scope if field == "forbidden_scope" else task.lock_scope
        where = at.key(field)
        index = next((i for i, entry in enumerate(entries) if _names(entry, exc.value)), None)
        if index is not None:
            where = where.item(index)
        where.fail(str(exc), "scope")


def _names(entry: str, value: str) -> bool:
    """Whether scope ``entry`` is ``value`` as written or once normalised."""
    from .scope import ScopeError, normalize_resource

    if entry == value:
        return True
    try:
        return normalize_resource(entry) == value
    except ScopeError:
        return False


def _lock_conflicts(packet: AssignmentPacket, at: _At) -> None:
    """A packet's task may not lock what another task's active lock holds (LOCK_CONFLICT)."""
    from .scope import ScopeError, lock_conflicts

    held = [(lock.task_id, lock.resource) for lock in packet.active_locks if lock.active]
    try:
        conflicts = lock_conflicts(held, packet.task.task_id, packet.task.lock_scope)
    except ScopeError as exc:  # an active lock on a resource no lock can name
        at.key("active_locks").fail(str(exc), "scope")
    for held_task, held_resource, wanted in conflicts:
        at.key("task").key("lock_scope").fail(
            f"lock_scope entry {wanted!r} conflicts with {held_resource!r}, locked by "
            f"{held_task} (an active lock of this packet); wait for its release",
            "lock-conflict",
        )


def _timing(timeout_seconds: int, heartbeat_interval_seconds: int, at: _At) -> None:
    _minimum(timeout_seconds, at.key("timeout_seconds"), MIN_TIMEOUT_SECONDS)
    heartbeat = at.key("heartbeat_interval_seconds")
    _minimum(heartbeat_interval_seconds, heartbeat, MIN_HEARTBEAT_INTERVAL_SECONDS)
    if heartbeat_interval_seconds >= timeout_seconds:
        heartbeat.fail(
            f"heartbeat_interval_seconds {heartbeat_interval_seconds} must be below "
            f"timeout_seconds {timeout_seconds}, or a live task would time out between beats",
            "heartbeat-below-timeout",
        )


def _active_lock(lock: ActiveLock, at: _At) -> None:
    _task_id(lock.task_id, at.key("task_id"))
    _length(lock.resource, at.key("resource"))


def _active_locks(locks: list[ActiveLock], at: _At) -> None:
    for index, lock in enumerate(locks):
        _active_lock(lock, at.item(index))


def _blockers(blockers: list[Blocker], at: _At) -> None:
    for index, blocker in enumerate(blockers):
        _task_id(blocker.task_id, at.item(index).key("task_id"))


def _ledger_delta(delta: LedgerDelta, at: _At) -> None:
    _task_id(delta.task_id, at.key("task_id"))
    _length(delta.delta_id, at.key("delta_id"))
    _date_time(delta.last_heartbeat_at, at.key("last_heartbeat_at"))
    if delta.retry_after_ms is not None:
        _minimum(delta.retry_after_ms, at.key("retry_after_ms"), 0)
    if delta.x_seq is not None:
        _minimum(delta.x_seq, at.key("x_seq"), 1)
    _date_time(delta.x_at, at.key("x_at"))
    if delta.x_base_version is not None:
        _minimum(delta.x_base_version, at.key("x_base_version"), 0)
    if delta.x_create is not None:
        _task(delta.x_create, at.key("x_create"))
    if delta.x_attempt is not None:
        _minimum(delta.x_attempt, at.key("x_attempt"), 1)
    if delta.x_verdict is not None:
        _length(delta.x_verdict, at.key("x_verdict"))


def _packet(packet: AssignmentPacket, at: _At) -> None:
    _board_version(packet.schema_version, at.key("schema_version"))
    _run_id(packet.run_id, at.key("run_id"))
    _const(packet.packet_type, PACKET_TYPE_ASSIGNMENT, at.key("packet_type"))
    _length(packet.global_objective, at.key("global_objective"), *OBJECTIVE_LENGTH)
    _task(packet.task, at.key("task"))
    _active_locks(packet.active_locks, at.key("active_locks"))
    _lock_conflicts(packet, at)
    _const(packet.required_output_schema, SUBAGENT_RESULT_V1, at.key("required_output_schema"))
    _date_time(packet.generated_at, at.key("generated_at"))


def validate_packet(packet: AssignmentPacket, *, source: str) -> None:
    """Seed 003's rules for an assignment packet beyond types."""
    _packet(packet, _At(source))


def validate_ledger_delta(delta: LedgerDelta, *, source: str) -> None:
    """Seed 003's rules for one ledger delta, and the board's for its ``x_`` fields."""
    _ledger_delta(delta, _At(source))


def validate_orchestrator_output(output: OrchestratorOutput, *, source: str) -> None:
    """Seed 003's rules for the orchestrator output; ``delta_id`` is unique within it."""
    at = _At(source)
    _board_version(output.schema_version, at.key("schema_version"))
    _run_id(output.run_id, at.key("run_id"))
    seen: set[str] = set()
    for index, delta in enumerate(output.ledger_delta):
        where = at.key("ledger_delta").item(index)
        _ledger_delta(delta, where)
        if delta.delta_id in seen:
            where.key("delta_id").fail(
                f"delta_id {delta.delta_id!r} appears twice; it is the idempotency key and "
                "must be unique within a run",
                "unique-delta-id",
            )
        seen.add(delta.delta_id)
    for index, packet in enumerate(output.assignments):
        _packet(packet, at.key("assignments").item(index))
    _active_locks(output.active_locks, at.key("active_locks"))
    _blockers(output.blockers, at.key("blockers"))
    _date_time(output.generated_at, at.key("generated_at"))


def validate_subagent_result(result: SubagentResult, *, source: str) -> None:
    """Seed 003's rules for a subagent result, the completion invariants included."""
    at = _At(source)
    _board_version(result.schema_version, at.key("schema_version"))
    _run_id(result.run_id, at.key("run_id"))
    _task_id(result.task_id, at.key("task_id"))
    for index, change in enumerate(result.changes):
        _length(change.resource, at.key("changes").item(index).key("resource"))
    _length(result.worklog_path, at.key("worklog_path"), *WORKLOG_PATH_LENGTH)
    notes = at.key("notes_for_orchestrator")
    _items(result.notes_for_orchestrator, notes, 0, MAX_NOTES_FOR_ORCHESTRATOR)
    _non_empty_strings(result.notes_for_orchestrator, notes)
    _date_time(result.generated_at, at.key("generated_at"))
    if result.status is ResultStatus.DONE:
        _completion(result.acceptance_check, at.key("acceptance_check"))


def _completion(checks: list[AcceptanceCheck], at: _At) -> None:
    if not checks:
        at.fail(
            "status is 'done' but acceptance_check is empty; report every criterion",
            "completion",
        )
    for index, check in enumerate(checks):
        where = at.item(index)
        if check.status is not CheckStatus.PASS:
            where.key("status").fail(
                f"status is 'done' but criterion {check.criterion!r} is "
                f"{check.status.value!r}; report 'blocked' or 'failed' instead",
                "completion",
            )
        if not check.evidence:
            where.key("evidence").fail(
                f"status is 'done' but criterion {check.criterion!r} has no evidence",
                "completion",
            )


def validate_worklog_entry(entry: WorklogEntry, *, source: str) -> None:
    at = _At(source)
    _date_time(entry.timestamp, at.key("timestamp"))
    _run_id(entry.run_id, at.key("run_id"))
    _task_id(entry.task_id, at.key("task_id"))


def validate_handoff(bundle: HandoffBundle, *, source: str) -> None:
    at = _At(source)
    _board_version(bundle.schema_version, at.key("schema_version"))
    _run_id(bundle.run_id, at.key("run_id"))
    for index, row in enumerate(bundle.ledger):
        where = at.key("ledger").item(index)
        _task_id(row.task_id, where.key("task_id"))
        _length(row.title, where.key("title"), *TITLE_LENGTH)
        _items(row.lock_scope, where.key("lock_scope"), 1)
        _non_empty_strings(row.lock_scope, where.key("lock_scope"))
        _timing(row.timeout_seconds, row.heartbeat_interval_seconds, where)
        _date_time(row.last_heartbeat_at, where.key("last_heartbeat_at"))
    _active_locks(bundle.active_locks, at.key("active_locks"))
    for index, dependency in enumerate(bundle.dependencies):
        where = at.key("dependencies").item(index)
        _task_id(dependency.task_id, where.key("task_id"))
        for position, other in enumerate(dependency.depends_on):
            _task_id(other, where.key("depends_on").item(position))
    _blockers(bundle.open_blockers, at.key("open_blockers"))
    for index, target in enumerate(bundle.acceptance_targets):
        where = at.key("acceptance_targets").item(index)
        _task_id(target.task_id, where.key("task_id"))
        _items(target.acceptance_criteria, where.key("acceptance_criteria"), 1)
        _non_empty_strings(target.acceptance_criteria, where.key("acceptance_criteria"))
    _date_time(bundle.generated_at, at.key("generated_at"))


def validate_validator_output(output: ValidatorOutput, *, source: str) -> None:
    _length(output.code, _At(source).key("code"))


# -- seed 002 checks -----------------------------------------------------------------------


def validate_task_input(task_input: TaskInput, *, source: str) -> None:
    """Seed 002's rules for a task input (``files`` within pins is a SHOULD, not checked)."""
    at = _At(source)
    check_uuid(task_input.task_id, source=source, json_path="$.task_id")
    _length(task_input.goal, at.key("goal"))
    _length(task_input.role, at.key("role"))
    pins = at.key("pins")
    _items(task_input.pins.allowed_paths, pins.key("allowed_paths"), 1)
    _non_empty_strings(task_input.pins.allowed_paths, pins.key("allowed_paths"))
    _non_empty_strings(task_input.pins.forbidden_paths, pins.key("forbidden_paths"))
    allowed = set(task_input.pins.allowed_paths)
    for index, path in enumerate(task_input.pins.forbidden_paths):
        if path in allowed:
            pins.key("forbidden_paths").item(index).fail(
                f"{path!r} is both allowed and forbidden; keep it in one list",
                "pins-overlap",
            )


def _reason_code(value: str | None, at: _At) -> None:
    if value is not None:
        _pattern(value, _REASON_CODE, "reason_code", at)


def validate_submit(submit: Submit, *, source: str) -> None:
    """Seed 002's rules for ``submit.json`` that the document alone can show."""
    at = _At(source)
    _exact_version(submit.schema_version, SUBMIT_SCHEMA_VERSION, at.key("schema_version"))
    _task_id(submit.task_id, at.key("task_id"))
    _reason_code(submit.reason_code, at.key("reason_code"))
    for name in attrs.fields_dict(SubmitArtifacts):
        _length(getattr(submit.artifacts, name), at.key("artifacts").key(name))
    if submit.status is SubmitStatus.DONE and submit.exit_code != 0:
        at.key("exit_code").fail(
            f"status is DONE but exit_code is {submit.exit_code}; DONE means exit code 0",
            "done-exit-code",
        )
    asking = submit.status is SubmitStatus.NEED_INPUT
    if asking and not submit.needs_input:
        at.key("needs_input").fail(
            "status is NEED_INPUT but needs_input is empty; list the questions to answer",
            "needs-input",
        )
    if not asking and submit.needs_input:
        at.key("needs_input").fail(
            f"needs_input has questions but status is {submit.status.value}; use NEED_INPUT "
            "or leave needs_input empty",
            "needs-input",
        )


def validate_verdict(verdict: Verdict, *, source: str) -> None:
    at = _At(source)
    _exact_version(verdict.schema_version, VERDICT_SCHEMA_VERSION, at.key("schema_version"))
    _task_id(verdict.task_id, at.key("task_id"))
    _reason_code(verdict.reason_code, at.key("reason_code"))
    for name in attrs.fields_dict(VerdictTimestamps):
        _date_time(getattr(verdict.timestamps, name), at.key("timestamps").key(name))
    for name in attrs.fields_dict(VerdictLinks):
        link = getattr(verdict.links, name)
        if link is not None:
            _length(link, at.key("links").key(name))
    if verdict.verdict is VerdictOutcome.PASS:
        for name in attrs.fields_dict(VerdictChecks):
            if not getattr(verdict.checks, name):
                at.key("checks").key(name).fail(
                    f"verdict is PASS but check {name} is false; a PASS needs every check",
                    "pass-checks",
                )


# -- parsing -------------------------------------------------------------------------------

# Fields with a fixed value: defaulted in Python, but required in a document.
_FIXED_FIELDS: dict[type, tuple[str, ...]] = {
    AssignmentPacket: ("schema_version", "packet_type", "required_output_schema"),
    OrchestratorOutput: ("schema_version",),
    SubagentResult: ("schema_version",),
    HandoffBundle: ("schema_version",),
    Submit: ("schema_version",),
    Verdict: ("schema_version",),
}


def _parse(
    data: Any,
    cls: type[T],
    validate: Callable[..., None],
    *,
    source: str,
    strict: bool,
    version: Callable[[str, _At], None] | None = None,
) -> T:
    at = _At(source)
    if isinstance(data, dict):
        # An unknown major version fails closed before anything else is judged: a 2.0.0
        # document may legitimately look nothing like a 1.0.0 one.
        if version is not None and isinstance(data.get("schema_version"), str):
            version(data["schema_version"], at.key("schema_version"))
        data = _prepared(data, cls, at, strict=strict)
    document = structure(data, cls, source=source)
    validate(document, source=source)
    return document


def validate_active_lock(lock: ActiveLock, *, source: str) -> None:
    _active_lock(lock, _At(source))


def parse_active_lock(data: Any, *, source: str, strict: bool = False) -> ActiveLock:
    """One ``active_locks`` item (the lock-table validator reads a list of them)."""
    return _parse(data, ActiveLock, validate_active_lock, source=source, strict=strict)


def parse_packet(data: Any, *, source: str, strict: bool = False) -> AssignmentPacket:
    """An assignment packet from JSON-like ``data``; a ``ContractError`` names the problem."""
    return _parse(
        data,
        AssignmentPacket,
        validate_packet,
        source=source,
        strict=strict,
        version=_board_version,
    )


def parse_orchestrator_output(
    data: Any, *, source: str, strict: bool = False
) -> OrchestratorOutput:
    return _parse(
        data,
        OrchestratorOutput,
        validate_orchestrator_output,
        source=source,
        strict=strict,
        version=_board_version,
    )


def parse_subagent_result(data: Any, *, source: str, strict: bool = False) -> SubagentResult:
    return _parse(
        data,
        SubagentResult,
        validate_subagent_result,
        source=source,
        strict=strict,
        version=_board_version,
    )


def parse_ledger_delta(data: Any, *, source: str, strict: bool = False) -> LedgerDelta:
    return _parse(data, LedgerDelta, validate_ledger_delta, source=source, strict=strict)


def parse_worklog_entry(data: Any, *, source: str, strict: bool = False) -> WorklogEntry:
    return _parse(data, WorklogEntry, validate_worklog_entry, source=source, strict=strict)


def parse_handoff(data: Any, *, source: str, strict: bool = False) -> HandoffBundle:
    return _parse(
        data, HandoffBundle, validate_handoff, source=source, strict=strict, version=_board_version
    )


def parse_validator_output(data: Any, *, source: str, strict: bool = False) -> ValidatorOutput:
    return _parse(data, ValidatorOutput, validate_validator_output, source=source, strict=strict)


def parse_task_input(data: Any, *, source: str, strict: bool = False) -> TaskInput:
    return _parse(data, TaskInput, validate_task_input, source=source, strict=strict)


def _submit_version(version: str, at: _At) -> None:
    _exact_version(version, SUBMIT_SCHEMA_VERSION, at)


def _verdict_version(version: str, at: _At) -> None:
    _exact_version(version, VERDICT_SCHEMA_VERSION, at)


def parse_submit(data: Any, *, source: str, strict: bool = False) -> Submit:
    return _parse(
        data, Submit, validate_submit, source=source, strict=strict, version=_submit_version
    )


def parse_verdict(data: Any, *, source: str, strict: bool = False) -> Verdict:
    return _parse(
        data, Verdict, validate_verdict, source=source, strict=strict, version=_verdict_version
    )


#: Each document kind (the name of its schema file) and its parser.
BOARD_PARSERS: dict[str, Callable[..., Any]] = {
    "assignment-packet": parse_packet,
    "orchestrator-output": parse_orchestrator_output,
    "subagent-result": parse_subagent_result,
    "ledger-delta": parse_ledger_delta,
    "worklog-entry": parse_worklog_entry,
    "handoff-bundle": parse_handoff,
    "validator-output": parse_validator_output,
    "task-input": parse_task_input,
    "submit": parse_submit,
    "verdict": parse_verdict,
}
BOARD_SCHEMA_KINDS = tuple(BOARD_PARSERS)


def parse_board_document(kind: str, data: Any, *, source: str, strict: bool = False) -> Any:
    """Parse ``data`` as the document ``kind`` (one of :data:`BOARD_SCHEMA_KINDS`)."""
    return BOARD_PARSERS[kind](data, source=source, strict=strict)


def secret_in_untrusted_fields(result: SubagentResult) -> tuple[str, str] | None:
    """The first untrusted field of a subagent result that holds a secret, as (JSON path,
    the reason to give); ``None`` when none does. That is UNTRUSTED_CONTEXT_BLOCK, whether
    the result is judged against its packet or alone."""
    from .secrets import first_secret_kind

    for index, note in enumerate(result.notes_for_orchestrator):
        kind = first_secret_kind(note)
        if kind is not None:
            return (
                f"$.notes_for_orchestrator[{index}]",
                f"notes_for_orchestrator[{index}] holds a secret ({kind}); notes must be "
                "scrubbed before they are sent",
            )
    return None


def error_code_for(exc: ContractError) -> ErrorCode:
    """The seed 003 error code a validator reports for ``exc``."""
    if isinstance(exc, UnknownVersionError):
        return ErrorCode.UNKNOWN_SCHEMA_VERSION
    if exc.rule == "required":
        return ErrorCode.MISSING_REQUIRED_INPUT
    if exc.rule == "completion":  # well formed; what fails is the acceptance
        return ErrorCode.ACCEPTANCE_FAILED
    if exc.rule == "lock-conflict":
        return ErrorCode.LOCK_CONFLICT
    return ErrorCode.SCHEMA_INVALID


def dump_board_document(obj: Any) -> bytes:
    """Canonical bytes of a board document (``dumps_canonical``), nulls omitted."""
    return dump_document(obj)


def board_schema(kind: str) -> dict[str, Any]:
    """The shipped JSON Schema (draft-07, strict mode) of the document ``kind``."""
    if kind not in BOARD_PARSERS:
        raise ValueError(f"no board schema {kind!r}; the kinds are {', '.join(BOARD_SCHEMA_KINDS)}")
    from importlib import resources

    schema_file = resources.files("orchestrator.formats.schemas.board").joinpath(
        f"{kind}.schema.json"
    )
    schema: dict[str, Any] = json.loads(schema_file.read_text(encoding="utf-8"))
    return schema


# -- the pre-pass: fixed fields present, unknown keys dropped unless strict ---------------

_field_types: dict[type, dict[str, Any]] = {}


def _prepared(value: Any, kind: Any, at: _At, *, strict: bool) -> Any:
    """``value`` checked for the fixed fields of ``kind`` at every depth, and without the
    keys ``kind`` does not declare unless ``strict`` (``x_`` keys always stay).

    Values of the wrong JSON type are left as they are, for the converter to name.
    """
    kind = _optional_inner(kind)
    if typing.get_origin(kind) is list:
        if not isinstance(value, list):
            return value
        (item_kind,) = typing.get_args(kind)
        return [
            _prepared(item, item_kind, at.item(index), strict=strict)
            for index, item in enumerate(value)
        ]
    if not (isinstance(kind, type) and attrs.has(kind) and isinstance(value, dict)):
        return value
    for name in _FIXED_FIELDS.get(kind, ()):
        if name not in value:
            at.fail(f"required field {name!r} is missing", "required")
    fields = _field_types.get(kind)
    if fields is None:
        attrs.resolve_types(kind)
        fields = _field_types[kind] = {f.name: f.type for f in attrs.fields(kind)}
    return {
        key: _prepared(item, fields[key], at.key(key), strict=strict) if key in fields else item
        for key, item in value.items()
        if strict or key in fields or key.startswith(EXTENSION_PREFIX)
    }


def _optional_inner(kind: Any) -> Any:
    args = typing.get_args(kind)
    if typing.get_origin(kind) in (typing.Union, types.UnionType) and type(None) in args:
        (inner,) = (arg for arg in args if arg is not type(None))
        return inner
    return kind
