"""The rules of the task board documents and of task IO with pins, and their parsing.

One module holds every rule a board document follows, so that the board, its writers,
``orchestrate check`` and the schema tests judge alike: a rule cannot exist in one path
and be missing in another. Each rule has a name (the ``rule`` of the
:class:`ContractError` it raises) and one error code (:func:`error_code_for`);
``docs/conformance.md`` lists them with the tests that hold them. The lock rules
themselves (normalising a resource, overlap) are :mod:`orchestrator.formats.scope`'s,
and the secret patterns :mod:`orchestrator.formats.secrets`'; the rules here apply them
to the documents' fields. The field checks they are made of, and the parse each document
goes through, are :mod:`orchestrator.formats.board_checks`'.

Decisions the formats leave open, made here:

- A task board document's ``schema_version`` is ``MAJOR.MINOR.PATCH``; a major other
  than 1 raises :class:`UnknownVersionError` before anything else is judged (fail
  closed). Task IO versions are exact strings (``scc.submit.v1``, ``scc.verdict.v1``);
  any other string is an unknown version.
- ``task_id`` in ``submit.json`` and the verdict follows the task board's rule (``T-<n>``
  or a 36-character id), since the board answers its tasks with them; the task input's
  is a UUID, as task IO says.
- A PASS verdict needs every check true (only PASS moves a task to done).
- Beyond the formats' words, and in the schemas too: resources, scope entries, acceptance
  criteria, pins, ``delta_id``, ``x_verdict``, artifact and link paths and a validator's
  ``code`` are non-empty strings; ``retry_after_ms``, ``x_base_version`` >= 0; ``x_seq``,
  ``x_attempt`` >= 1. ``delta_id`` is unique within one orchestrator output (Python
  only). "Both allowed and forbidden" in pins means the same string in both lists.
- A task's ``lock_scope``, ``forbidden_scope`` and ``worklog_path`` follow the lock rules
  wherever a task appears (a packet, a ledger delta's ``x_create``, ``board create``).
- Not checked here, because they need more than the document: ``delta_id`` uniqueness
  across a run, pins glob matching, ``files`` within pins, artifacts existing on disk.

Extension policy (the task board documents'): ``x_`` keys are always accepted (kept when
the model declares them, ignored otherwise); other unknown keys are ignored unless
``strict=True``, which refuses them (rule ``additionalProperties``). The shipped JSON
Schemas (``orchestrator/formats/schemas/board/``) describe strict mode.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from .._errors import ContractError, UnknownVersionError
from .board_checks import (
    At,
    check_board_version,
    check_const,
    check_exact_version,
    check_items,
    check_length,
    check_minimum,
    check_non_empty_strings,
    check_optional_date_time,
    check_pattern,
    parse_document,
)
from .board_documents import (
    EXTENSION_PREFIX,
    MAX_NOTES_FOR_ORCHESTRATOR,
    PACKET_TYPE_ASSIGNMENT,
    SUBAGENT_RESULT_V1,
    SUBMIT_SCHEMA_VERSION,
    VERDICT_SCHEMA_VERSION,
    AcceptanceCheck,
    ActiveLock,
    AssignmentPacket,
    Blocker,
    CheckStatus,
    ErrorCode,
    HandoffBundle,
    LedgerDelta,
    OrchestratorOutput,
    ResultStatus,
    SubagentResult,
    Submit,
    SubmitArtifacts,
    SubmitStatus,
    Task,
    TaskInput,
    ValidatorOutput,
    Verdict,
    VerdictChecks,
    VerdictLinks,
    VerdictOutcome,
    VerdictTimestamps,
    WorklogEntry,
)
from .convert import check_uuid

# -- validation ----------------------------------------------------------------------------

RUN_ID_PATTERN = r"^[0-9a-fA-F-]{36}(?![\s\S])"
TASK_ID_PATTERN = r"^(T-[0-9]+|[0-9a-fA-F-]{36})(?![\s\S])"
REASON_CODE_PATTERN = r"^[A-Z][A-Z0-9_]*(?![\s\S])"
_RUN_ID = re.compile(RUN_ID_PATTERN, re.ASCII)
_TASK_ID = re.compile(TASK_ID_PATTERN, re.ASCII)
_REASON_CODE = re.compile(REASON_CODE_PATTERN, re.ASCII)

TITLE_LENGTH = (1, 500)
OBJECTIVE_LENGTH = (1, 5000)
WORKLOG_PATH_LENGTH = (1, 1000)
MIN_TIMEOUT_SECONDS = 30
MIN_HEARTBEAT_INTERVAL_SECONDS = 5


def _run_id(value: str, at: At) -> None:
    check_pattern(value, _RUN_ID, "run_id", at)


def _task_id(value: str, at: At) -> None:
    if _TASK_ID.fullmatch(value) is None:
        at.fail(
            f"task_id {value!r} does not match {TASK_ID_PATTERN}; write T-<number> or a UUID",
            "pattern",
        )


# -- the task board documents' checks ------------------------------------------------------


def _task(task: Task, at: At) -> None:
    _task_id(task.task_id, at.key("task_id"))
    check_length(task.title, at.key("title"), *TITLE_LENGTH)
    for index, dependency in enumerate(task.dependencies):
        _task_id(dependency, at.key("dependencies").item(index))
    check_items(task.lock_scope, at.key("lock_scope"), 1)
    check_non_empty_strings(task.lock_scope, at.key("lock_scope"))
    check_non_empty_strings(task.forbidden_scope, at.key("forbidden_scope"))
    check_items(task.acceptance_criteria, at.key("acceptance_criteria"), 1)
    check_non_empty_strings(task.acceptance_criteria, at.key("acceptance_criteria"))
    check_length(task.worklog_path, at.key("worklog_path"), *WORKLOG_PATH_LENGTH)
    _timing(task.timeout_seconds, task.heartbeat_interval_seconds, at)
    _scopes(task, at)
    _worklog_path(task.worklog_path, at.key("worklog_path"))


def validate_task(task: Task, *, source: str) -> None:
    """The task board's rules for a task object (ids, lengths, timing, the lock rules of its
    scopes and worklog path), as ``board create`` and every document holding a task
    apply them."""
    _task(task, At(source))


def _worklog_path(path: str, at: At) -> None:
    """A worklog path is a resource the board writes under its directory: it normalises
    (not empty, no ``..``)."""
    from .scope import ScopeError, normalize_resource

    try:
        normalize_resource(path)
    except ScopeError as exc:
        at.fail(f"worklog_path {exc}", "scope")


def _scopes(task: Task, at: At) -> None:
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


def _lock_conflicts(packet: AssignmentPacket, at: At) -> None:
    """A packet's task may not lock what another task's active lock holds (LOCK_CONFLICT)."""
    from .scope import ScopeError, check_lock_table, lock_conflicts

    held = [(lock.task_id, lock.resource) for lock in packet.active_locks if lock.active]
    try:
        table = check_lock_table((task, resource, True) for task, resource in held)
        conflicts = lock_conflicts(held, packet.task.task_id, packet.task.lock_scope)
    except ScopeError as exc:  # an active lock on a resource no lock can name
        at.key("active_locks").fail(str(exc), "scope")
    for task_a, resource_a, task_b, resource_b in table:
        at.key("active_locks").fail(
            f"active locks conflict: {resource_a!r} held by {task_a} and {resource_b!r} by "
            f"{task_b}; a lock table holds no two overlapping locks of different tasks",
            "lock-conflict",
        )
    for held_task, held_resource, wanted in conflicts:
        at.key("task").key("lock_scope").fail(
            f"lock_scope entry {wanted!r} conflicts with {held_resource!r}, locked by "
            f"{held_task} (an active lock of this packet); wait for its release",
            "lock-conflict",
        )


def _timing(timeout_seconds: int, heartbeat_interval_seconds: int, at: At) -> None:
    check_minimum(timeout_seconds, at.key("timeout_seconds"), MIN_TIMEOUT_SECONDS)
    heartbeat = at.key("heartbeat_interval_seconds")
    check_minimum(heartbeat_interval_seconds, heartbeat, MIN_HEARTBEAT_INTERVAL_SECONDS)
    if heartbeat_interval_seconds >= timeout_seconds:
        heartbeat.fail(
            f"heartbeat_interval_seconds {heartbeat_interval_seconds} must be below "
            f"timeout_seconds {timeout_seconds}, or a live task would time out between beats",
            "heartbeat-below-timeout",
        )


def _active_lock(lock: ActiveLock, at: At) -> None:
    _task_id(lock.task_id, at.key("task_id"))
    check_length(lock.resource, at.key("resource"))


def _active_locks(locks: list[ActiveLock], at: At) -> None:
    for index, lock in enumerate(locks):
        _active_lock(lock, at.item(index))


def _blockers(blockers: list[Blocker], at: At) -> None:
    for index, blocker in enumerate(blockers):
        _task_id(blocker.task_id, at.item(index).key("task_id"))


def _ledger_delta(delta: LedgerDelta, at: At) -> None:
    _task_id(delta.task_id, at.key("task_id"))
    check_length(delta.delta_id, at.key("delta_id"))
    check_optional_date_time(delta.last_heartbeat_at, at.key("last_heartbeat_at"))
    if delta.retry_after_ms is not None:
        check_minimum(delta.retry_after_ms, at.key("retry_after_ms"), 0)
    if delta.x_seq is not None:
        check_minimum(delta.x_seq, at.key("x_seq"), 1)
    check_optional_date_time(delta.x_at, at.key("x_at"))
    if delta.x_base_version is not None:
        check_minimum(delta.x_base_version, at.key("x_base_version"), 0)
    if delta.x_create is not None:
        _task(delta.x_create, at.key("x_create"))
    if delta.x_attempt is not None:
        check_minimum(delta.x_attempt, at.key("x_attempt"), 1)
    if delta.x_verdict is not None:
        check_length(delta.x_verdict, at.key("x_verdict"))


def _packet(packet: AssignmentPacket, at: At) -> None:
    check_board_version(packet.schema_version, at.key("schema_version"))
    _run_id(packet.run_id, at.key("run_id"))
    check_const(packet.packet_type, PACKET_TYPE_ASSIGNMENT, at.key("packet_type"))
    check_length(packet.global_objective, at.key("global_objective"), *OBJECTIVE_LENGTH)
    _task(packet.task, at.key("task"))
    _active_locks(packet.active_locks, at.key("active_locks"))
    _lock_conflicts(packet, at)
    check_const(packet.required_output_schema, SUBAGENT_RESULT_V1, at.key("required_output_schema"))
    check_optional_date_time(packet.generated_at, at.key("generated_at"))


def validate_packet(packet: AssignmentPacket, *, source: str) -> None:
    """The task board's rules for an assignment packet beyond types."""
    _packet(packet, At(source))


def validate_ledger_delta(delta: LedgerDelta, *, source: str) -> None:
    """The task board's rules for one ledger delta, and the board's for its ``x_`` fields."""
    _ledger_delta(delta, At(source))


def validate_orchestrator_output(output: OrchestratorOutput, *, source: str) -> None:
    """The task board's rules for the orchestrator output; ``delta_id`` is unique within it."""
    at = At(source)
    check_board_version(output.schema_version, at.key("schema_version"))
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
    check_optional_date_time(output.generated_at, at.key("generated_at"))


def validate_subagent_result(
    result: SubagentResult, *, source: str, acceptance: bool = True
) -> None:
    """The task board's rules for a subagent result, the completion invariants included unless
    ``acceptance`` is false (the gateway judges acceptance against the task itself)."""
    at = At(source)
    check_board_version(result.schema_version, at.key("schema_version"))
    _run_id(result.run_id, at.key("run_id"))
    _task_id(result.task_id, at.key("task_id"))
    for index, change in enumerate(result.changes):
        check_length(change.resource, at.key("changes").item(index).key("resource"))
    check_length(result.worklog_path, at.key("worklog_path"), *WORKLOG_PATH_LENGTH)
    notes = at.key("notes_for_orchestrator")
    check_items(result.notes_for_orchestrator, notes, 0, MAX_NOTES_FOR_ORCHESTRATOR)
    check_non_empty_strings(result.notes_for_orchestrator, notes)
    check_optional_date_time(result.generated_at, at.key("generated_at"))
    if acceptance and result.status is ResultStatus.DONE:
        _completion(result.acceptance_check, at.key("acceptance_check"))


def _completion(checks: list[AcceptanceCheck], at: At) -> None:
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
        if not has_evidence(check):
            where.key("evidence").fail(
                f"status is 'done' but criterion {check.criterion!r} has no evidence",
                "completion",
            )


def has_evidence(check: AcceptanceCheck) -> bool:
    """Whether a criterion's check gives evidence (blank text is none)."""
    return bool(check.evidence.strip())


def validate_worklog_entry(entry: WorklogEntry, *, source: str) -> None:
    at = At(source)
    check_optional_date_time(entry.timestamp, at.key("timestamp"))
    _run_id(entry.run_id, at.key("run_id"))
    _task_id(entry.task_id, at.key("task_id"))


def validate_handoff(bundle: HandoffBundle, *, source: str) -> None:
    at = At(source)
    check_board_version(bundle.schema_version, at.key("schema_version"))
    _run_id(bundle.run_id, at.key("run_id"))
    for index, row in enumerate(bundle.ledger):
        where = at.key("ledger").item(index)
        _task_id(row.task_id, where.key("task_id"))
        check_length(row.title, where.key("title"), *TITLE_LENGTH)
        check_items(row.lock_scope, where.key("lock_scope"), 1)
        check_non_empty_strings(row.lock_scope, where.key("lock_scope"))
        _timing(row.timeout_seconds, row.heartbeat_interval_seconds, where)
        check_optional_date_time(row.last_heartbeat_at, where.key("last_heartbeat_at"))
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
        check_items(target.acceptance_criteria, where.key("acceptance_criteria"), 1)
        check_non_empty_strings(target.acceptance_criteria, where.key("acceptance_criteria"))
    check_optional_date_time(bundle.generated_at, at.key("generated_at"))


def validate_validator_output(output: ValidatorOutput, *, source: str) -> None:
    check_length(output.code, At(source).key("code"))


# -- the checks of task IO with pins -------------------------------------------------------


def validate_task_input(task_input: TaskInput, *, source: str) -> None:
    """Task IO's rules for a task input (``files`` within pins is a SHOULD, not checked)."""
    at = At(source)
    check_uuid(task_input.task_id, source=source, json_path="$.task_id")
    check_length(task_input.goal, at.key("goal"))
    check_length(task_input.role, at.key("role"))
    pins = at.key("pins")
    check_items(task_input.pins.allowed_paths, pins.key("allowed_paths"), 1)
    check_non_empty_strings(task_input.pins.allowed_paths, pins.key("allowed_paths"))
    check_non_empty_strings(task_input.pins.forbidden_paths, pins.key("forbidden_paths"))
    allowed = set(task_input.pins.allowed_paths)
    for index, path in enumerate(task_input.pins.forbidden_paths):
        if path in allowed:
            pins.key("forbidden_paths").item(index).fail(
                f"{path!r} is both allowed and forbidden; keep it in one list",
                "pins-overlap",
            )


def _reason_code(value: str | None, at: At) -> None:
    if value is not None:
        check_pattern(value, _REASON_CODE, "reason_code", at)


def validate_submit(submit: Submit, *, source: str) -> None:
    """Task IO's rules for ``submit.json`` that the document alone can show."""
    at = At(source)
    check_exact_version(submit.schema_version, SUBMIT_SCHEMA_VERSION, at.key("schema_version"))
    _task_id(submit.task_id, at.key("task_id"))
    _reason_code(submit.reason_code, at.key("reason_code"))
    for name in attrs.fields_dict(SubmitArtifacts):
        check_length(getattr(submit.artifacts, name), at.key("artifacts").key(name))
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
    at = At(source)
    check_exact_version(verdict.schema_version, VERDICT_SCHEMA_VERSION, at.key("schema_version"))
    _task_id(verdict.task_id, at.key("task_id"))
    _reason_code(verdict.reason_code, at.key("reason_code"))
    if verdict.x_code is not None and verdict.x_code not in ErrorCode._value2member_map_:
        at.key("x_code").fail(
            f"x_code {verdict.x_code!r} is not an error code; write one of "
            f"{', '.join(code.value for code in ErrorCode)}",
            "enum",
        )
    for name in attrs.fields_dict(VerdictTimestamps):
        check_optional_date_time(getattr(verdict.timestamps, name), at.key("timestamps").key(name))
    for name in attrs.fields_dict(VerdictLinks):
        link = getattr(verdict.links, name)
        if link is not None:
            check_length(link, at.key("links").key(name))
    if verdict.verdict is VerdictOutcome.PASS:
        for name in attrs.fields_dict(VerdictChecks):
            if not getattr(verdict.checks, name):
                at.key("checks").key(name).fail(
                    f"verdict is PASS but check {name} is false; a PASS needs every check",
                    "pass-checks",
                )


# -- parsing -------------------------------------------------------------------------------


def parse_lock_table(data: Any, *, source: str, strict: bool = False) -> list[ActiveLock]:
    """A lock table: a list of ``active_locks`` items, or an object holding one."""
    at = At(source)
    items = data
    if isinstance(data, dict):
        extra = [k for k in data if k != "active_locks" and not k.startswith(EXTENSION_PREFIX)]
        if strict and extra:
            at.fail(
                f"unknown field {', '.join(map(repr, extra))}: not in the lock table "
                "(extension fields need the 'x_' prefix)",
                "additionalProperties",
            )
        items = data.get("active_locks")
    if not isinstance(items, list):
        at.fail("expected a list of locks (or an object with active_locks)", "type")
    return [
        parse_active_lock(item, source=f"{source}[{index}]", strict=strict)
        for index, item in enumerate(items)
    ]


def parse_task(data: Any, *, source: str, strict: bool = False) -> Task:
    """A task object (as ``board create`` takes it, and as a packet holds it)."""
    return parse_document(data, Task, validate_task, source=source, strict=strict)


def validate_active_lock(lock: ActiveLock, *, source: str) -> None:
    _active_lock(lock, At(source))


def parse_active_lock(data: Any, *, source: str, strict: bool = False) -> ActiveLock:
    """One ``active_locks`` item (the lock-table validator reads a list of them)."""
    return parse_document(data, ActiveLock, validate_active_lock, source=source, strict=strict)


def parse_packet(data: Any, *, source: str, strict: bool = False) -> AssignmentPacket:
    """An assignment packet from JSON-like ``data``; a ``ContractError`` names the problem."""
    return parse_document(
        data,
        AssignmentPacket,
        validate_packet,
        source=source,
        strict=strict,
        version=check_board_version,
    )


def parse_orchestrator_output(
    data: Any, *, source: str, strict: bool = False
) -> OrchestratorOutput:
    return parse_document(
        data,
        OrchestratorOutput,
        validate_orchestrator_output,
        source=source,
        strict=strict,
        version=check_board_version,
    )


def parse_subagent_result(
    data: Any, *, source: str, strict: bool = False, acceptance: bool = True
) -> SubagentResult:
    """A subagent result; without the completion invariants if ``acceptance`` is false."""

    def validate(result: SubagentResult, *, source: str) -> None:
        validate_subagent_result(result, source=source, acceptance=acceptance)

    return parse_document(
        data,
        SubagentResult,
        validate,
        source=source,
        strict=strict,
        version=check_board_version,
    )


def parse_ledger_delta(data: Any, *, source: str, strict: bool = False) -> LedgerDelta:
    return parse_document(data, LedgerDelta, validate_ledger_delta, source=source, strict=strict)


def parse_worklog_entry(data: Any, *, source: str, strict: bool = False) -> WorklogEntry:
    return parse_document(data, WorklogEntry, validate_worklog_entry, source=source, strict=strict)


def parse_handoff(data: Any, *, source: str, strict: bool = False) -> HandoffBundle:
    return parse_document(
        data,
        HandoffBundle,
        validate_handoff,
        source=source,
        strict=strict,
        version=check_board_version,
    )


def parse_validator_output(data: Any, *, source: str, strict: bool = False) -> ValidatorOutput:
    return parse_document(
        data, ValidatorOutput, validate_validator_output, source=source, strict=strict
    )


def parse_task_input(data: Any, *, source: str, strict: bool = False) -> TaskInput:
    return parse_document(data, TaskInput, validate_task_input, source=source, strict=strict)


def _submit_version(version: str, at: At) -> None:
    check_exact_version(version, SUBMIT_SCHEMA_VERSION, at)


def _verdict_version(version: str, at: At) -> None:
    check_exact_version(version, VERDICT_SCHEMA_VERSION, at)


def parse_submit(data: Any, *, source: str, strict: bool = False) -> Submit:
    return parse_document(
        data, Submit, validate_submit, source=source, strict=strict, version=_submit_version
    )


def parse_verdict(data: Any, *, source: str, strict: bool = False) -> Verdict:
    return parse_document(
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


def untrusted_secret(document: Any) -> tuple[str, str] | None:
    """The first untrusted field of ``document`` that holds a secret, as (JSON path, the
    reason to give); ``None`` when none does.

    The untrusted fields are the task board documents' ("data trust classification"): a task's
    ``acceptance_criteria``, a packet's ``context_package[].value``, a result's
    ``notes_for_orchestrator``, a worklog entry's ``decision`` and ``result``, wherever
    these appear (a ledger delta's ``x_create``, an orchestrator output's assignments, a
    handoff's acceptance targets). A secret in one is UNTRUSTED_CONTEXT_BLOCK, whoever
    judges the document: the board writing or reading it, or ``orchestrate check``.
    """
    from .secrets import first_secret_kind

    for path, text in _untrusted_texts(document, "$"):
        kind = first_secret_kind(text)
        if kind is not None:
            return path, (
                f"{path[2:]} holds a secret ({kind}); it is an untrusted field: scrub it "
                "before it is sent"
            )
    return None


def refuse_untrusted_secret(document: Any, *, source: str) -> None:
    """Raise the :class:`ContractError` (rule ``untrusted-secret``) of
    :func:`untrusted_secret`, if ``document`` has one."""
    found = untrusted_secret(document)
    if found is not None:
        raise ContractError(found[1], source=source, json_path=found[0], rule="untrusted-secret")


def _untrusted_texts(document: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(document, Task):
        for index, criterion in enumerate(document.acceptance_criteria):
            yield f"{path}.acceptance_criteria[{index}]", criterion
    elif isinstance(document, AssignmentPacket):
        yield from _untrusted_texts(document.task, f"{path}.task")
        for index, item in enumerate(document.context_package):
            yield f"{path}.context_package[{index}].value", item.value
    elif isinstance(document, SubagentResult):
        for index, note in enumerate(document.notes_for_orchestrator):
            yield f"{path}.notes_for_orchestrator[{index}]", note
    elif isinstance(document, WorklogEntry):
        yield f"{path}.decision", document.decision
        yield f"{path}.result", document.result
    elif isinstance(document, LedgerDelta):
        if document.x_create is not None:
            yield from _untrusted_texts(document.x_create, f"{path}.x_create")
    elif isinstance(document, OrchestratorOutput):
        for index, delta in enumerate(document.ledger_delta):
            yield from _untrusted_texts(delta, f"{path}.ledger_delta[{index}]")
        for index, packet in enumerate(document.assignments):
            yield from _untrusted_texts(packet, f"{path}.assignments[{index}]")
    elif isinstance(document, HandoffBundle):
        for index, target in enumerate(document.acceptance_targets):
            for position, criterion in enumerate(target.acceptance_criteria):
                where = f"{path}.acceptance_targets[{index}].acceptance_criteria[{position}]"
                yield where, criterion


def error_code_for(exc: ContractError) -> ErrorCode:
    """The task board error code a validator reports for ``exc``."""
    if isinstance(exc, UnknownVersionError):
        return ErrorCode.UNKNOWN_SCHEMA_VERSION
    if exc.rule == "required":
        return ErrorCode.MISSING_REQUIRED_INPUT
    if exc.rule == "completion":  # well formed; what fails is the acceptance
        return ErrorCode.ACCEPTANCE_FAILED
    if exc.rule == "lock-conflict":
        return ErrorCode.LOCK_CONFLICT
    if exc.rule == "untrusted-secret":
        return ErrorCode.UNTRUSTED_CONTEXT_BLOCK
    return ErrorCode.SCHEMA_INVALID


def board_schema(kind: str) -> dict[str, Any]:
    """The shipped JSON Schema (draft-07, strict mode) of the document ``kind``."""
    if kind not in BOARD_PARSERS:
        raise ValueError(f"no board schema {kind!r}; the kinds are {', '.join(BOARD_SCHEMA_KINDS)}")
    from .schemas import shipped_schema

    return shipped_schema("board", f"{kind}.schema.json")
