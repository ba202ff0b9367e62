"""Read, validate and write the agent bridge files.

``parse_*`` take JSON-like data already read by the strict reader, structure it through
the converter and apply the checks the type system cannot express (formats, ranges,
versions), always naming the file and the JSON path of the first problem.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, TypeVar

import attrs

from .._errors import ContractError
from .._text import plural
from .bridge import (
    AgentRequest,
    AgentRequestRecord,
    AgentResponse,
    CheckpointState,
    ErrorType,
    RequestStatus,
    ResponseMetadata,
)
from .convert import (
    check_date_time,
    check_range,
    check_uuid,
    check_version,
    null_problem,
    refusal,
    structure,
    unstructure,
)
from .fastpath import shallow
from .strict_json import dumps_canonical, loads_strict

T = TypeVar("T")
PROMPT_MIN_LENGTH = 100
TIMEOUT_RANGE = (30, 600)
CONTEXT_STRING_KEYS = ("project_path", "output_path", "template_name")


def _structured(data: Any, cls: type[T], source: str) -> T:
    """``data`` as ``cls``, refused with every problem named at once: the null fields
    (the bridge format's schemas give no field a null: an optional field is left out)
    together with what the converter finds (unknown fields, missing ones, wrong types)."""
    nulls = _nulls(data, cls, "$")
    try:
        document = structure(data, cls, source=source)
    except ContractError as exc:
        if not nulls:
            raise
        null_paths = {f"{path}.{key}" for path, keys in nulls for key in keys}
        found = [(exc.json_path, exc.rule, exc.detail), *exc.also]
        others = [problem for problem in found if problem[0] not in null_paths]
        raise refusal([*(null_problem(*n) for n in nulls), *others], source=source) from None
    if nulls:
        raise refusal([null_problem(*n) for n in nulls], source=source)
    return document


def _nulls(data: Any, cls: type[Any], path: str) -> list[tuple[str, list[str]]]:
    """Each object's null fields, as (its JSON path, the fields)."""
    if not isinstance(data, dict):
        return []
    fields = {f.name for f in attrs.fields(cls)} - {"extra"}
    keys = [key for key, value in data.items() if value is None and key in fields]
    found = [(path, keys)] if keys else []
    if cls is AgentResponse:
        found += _nulls(data.get("metadata"), ResponseMetadata, f"{path}.metadata")
    return found


def _check_version_first(data: Any, source: str) -> None:
    # An unknown major version fails closed before anything else is judged: a 2.0
    # document may legitimately look nothing like a 1.0 one.
    if isinstance(data, dict) and isinstance(data.get("version"), str):
        check_version(data["version"], source=source)


def validate_request(
    request: AgentRequest,
    *,
    source: str,
    max_phase: int | None = None,
    phase_names: tuple[str, ...] | None = None,
    agent_names: tuple[str, ...] | None = None,
) -> None:
    """The request schema's rules beyond types; enums are the workflow's when given."""
    check_uuid(request.request_id, source=source, json_path="$.request_id")
    check_version(request.version, source=source)
    check_range(request.phase, low=1, high=max_phase, source=source, json_path="$.phase")
    if phase_names is not None and request.phase_name not in phase_names:
        raise ContractError(
            f"phase_name {request.phase_name!r} is not one of {list(phase_names)}",
            source=source,
            json_path="$.phase_name",
            rule="enum",
        )
    if agent_names is not None and request.agent_name not in agent_names:
        raise ContractError(
            f"agent_name {request.agent_name!r} is not one of {list(agent_names)}",
            source=source,
            json_path="$.agent_name",
            rule="enum",
        )
    if len(request.prompt) < PROMPT_MIN_LENGTH:
        raise ContractError(
            f"prompt has {plural(len(request.prompt), 'character')}; the contract asks for "
            "at least "
            f"{PROMPT_MIN_LENGTH}",
            source=source,
            json_path="$.prompt",
            rule="minLength",
        )
    low, high = TIMEOUT_RANGE
    check_range(
        request.timeout_seconds, low=low, high=high, source=source, json_path="$.timeout_seconds"
    )
    check_date_time(request.created_at, source=source, json_path="$.created_at")
    for key in CONTEXT_STRING_KEYS:
        value = (request.context or {}).get(key)
        if value is not None and not isinstance(value, str):
            raise ContractError(
                f"context.{key} must be a string",
                source=source,
                json_path=f"$.context.{key}",
                rule="type",
            )
    check_range(request.retry_count, low=0, high=None, source=source, json_path="$.retry_count")


def validate_response(response: AgentResponse, *, source: str) -> None:
    """The response schema's rules beyond types, and the format's status/error pairing."""
    check_uuid(response.request_id, source=source, json_path="$.request_id")
    check_version(response.version, source=source)
    check_date_time(response.created_at, source=source, json_path="$.created_at")
    if response.duration_seconds is not None:
        check_range(
            response.duration_seconds,
            low=0,
            high=None,
            source=source,
            json_path="$.duration_seconds",
        )
    if response.metadata is not None and response.metadata.confidence is not None:
        check_range(
            response.metadata.confidence,
            low=0,
            high=1,
            source=source,
            json_path="$.metadata.confidence",
        )
    if response.status is RequestStatus.SUCCESS and response.response is None:
        raise ContractError(
            "status is 'success' but there is no 'response' text; put the agent's answer "
            "in 'response'",
            source=source,
            json_path="$.response",
            rule="required",
        )


def validate_state(
    state: CheckpointState, *, source: str, max_phase: int | None = None, items: bool = True
) -> None:
    """The state schema's rules beyond types. ``items=False`` leaves out the checks of
    each completed phase and request, for bytes a save of this engine wrote (their
    signature covers the file): each item was checked when it was made, and a long
    run's state holds thousands of them."""
    check_version(state.version, source=source)
    check_range(state.phase, low=1, high=max_phase, source=source, json_path="$.phase")
    check_date_time(state.created_at, source=source, json_path="$.created_at")
    if not items:
        return
    for index, completed in enumerate(state.completed_phases):
        check_date_time(
            completed.completed_at,
            source=source,
            json_path=f"$.completed_phases[{index}].completed_at",
        )
    for index, record in enumerate(state.agent_requests):
        where = f"$.agent_requests[{index}]"
        if record.x_request is not None and record.x_request.request_id != record.request_id:
            raise ContractError(
                "request_id differs from x_request.request_id",
                source=source,
                json_path=where,
                rule="consistency",
            )


def parse_request(
    data: Any,
    *,
    source: str,
    max_phase: int | None = None,
    phase_names: tuple[str, ...] | None = None,
    agent_names: tuple[str, ...] | None = None,
) -> AgentRequest:
    """A request; with a workflow's enums and phase range when they are given."""
    _check_version_first(data, source)
    request = _structured(data, AgentRequest, source)
    validate_request(
        request,
        source=source,
        max_phase=max_phase,
        phase_names=phase_names,
        agent_names=agent_names,
    )
    return request


def parse_response(data: Any, *, source: str) -> AgentResponse:
    _check_version_first(data, source)
    response = _structured(data, AgentResponse, source)
    validate_response(response, source=source)
    return response


def parse_state(
    data: Any, *, source: str, max_phase: int | None = None, items: bool = True
) -> CheckpointState:
    """A state; ``items``: see :func:`validate_state`."""
    _check_version_first(data, source)
    state = _structured(data, CheckpointState, source)
    validate_state(state, source=source, max_phase=max_phase, items=items)
    return state


def dump_document(obj: Any) -> bytes:
    """Canonical bytes of any contract object (see ``dumps_canonical``), nulls omitted."""
    try:
        return dumps_canonical(shallow(obj), default=shallow)
    except TypeError:  # a value only the converter knows how to unstructure
        return dumps_canonical(unstructure(obj))


def encode_record_line(record: AgentRequestRecord) -> bytes:
    """One history line: the whole record as compact JSON (ASCII, so always valid UTF-8)."""
    return (json.dumps(shallow(record), default=shallow, separators=(",", ":")) + "\n").encode()


def record_line_digest(line: bytes) -> str:
    """The SHA-256 (hex) of one history line, without its newline: what an archived
    record's ``x_archived_sha256`` keeps."""
    return hashlib.sha256(line.rstrip(b"\n")).hexdigest()


def restore_archived(state: CheckpointState, lines: bytes, *, source: str) -> CheckpointState:
    """``state`` with every archived record replaced by its whole copy from history ``lines``.

    A record archived with its line's digest (``x_archived_sha256``) is taken only from a
    line of that digest: the signed state vouches for it, and a line changed since is
    refused (``HistoryDamagedError``), naming the file and the request. Lines that do
    not parse are skipped: only a crash mid-append makes one, and its record was still
    whole in the state then, so it was appended again.
    """
    whole: dict[str, AgentRequestRecord] = {}
    by_digest: dict[str, AgentRequestRecord] = {}
    for line in lines.split(b"\n"):
        if not line:
            continue
        try:
            data = loads_strict(line, source=source, allow_lone_surrogates=True)
            record = structure(data, AgentRequestRecord, source=source)
        except ContractError:
            continue
        whole[record.request_id] = record
        by_digest[record_line_digest(line)] = record
    restored = []
    for number, item in enumerate(state.agent_requests):
        if not item.x_archived:
            restored.append(item)
        elif item.x_archived_sha256 is None:  # archived before digests were kept
            restored.append(whole.get(item.request_id, item))
        else:
            found = by_digest.get(item.x_archived_sha256)
            if found is None or found.request_id != item.request_id:
                from .._errors import HistoryDamagedError

                changed = "changed" if item.request_id in whole else "missing"
                raise HistoryDamagedError(
                    f"request {item.request_id} is {changed} in the run's history: no line "
                    f"has the digest the signed state keeps for it (agent_requests[{number}], "
                    f"sha256 {item.x_archived_sha256[:16]}...)",
                    source=source,
                    rule="digest",
                )
            restored.append(found)
    return attrs.evolve(state, agent_requests=restored)


def error_type_of(response: AgentResponse) -> ErrorType | None:
    """The error kind a non-success response stands for (``None`` on success).

    ``timeout`` is TIMEOUT whatever ``error_type`` says; ``error`` without a type is UNKNOWN.
    """
    if response.status is RequestStatus.SUCCESS:
        return None
    if response.status is RequestStatus.TIMEOUT:
        return ErrorType.TIMEOUT
    return response.error_type or ErrorType.UNKNOWN
