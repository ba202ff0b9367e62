"""Step evidence: an agent step's ``results.json`` and its ``events.ndjson`` lines.

Every agent step writes two files into its output directory: ``results.json``
(:class:`Results`: status, confidence, summary, the artifacts it produced) once it is
done, and ``events.ndjson`` (one :class:`Event` per line) while it works. This module is
the format's self-contained schema package: data types, serialisation and validation, no
step execution. It imports only the standard library, attrs and the project's JSON and
NDJSON primitives. ``docs/steps.md`` is the reference; the shipped JSON Schemas
(``orchestrator/formats/schemas/steps/``) say the same wherever JSON Schema can.

Decisions the format leaves open, made here:

- ``schema_version`` is ``MAJOR.MINOR`` without leading zeros
  (``docs/formats/step-evidence.md``); a major other than 1 raises
  :class:`UnknownVersionError` before anything else is judged (fail closed), a later minor
  of major 1 is read as 1.0.
- ``confidence`` is a JSON number in [0, 1]; a boolean is not a number.
- An artifact ``path`` is the canonical form of a path relative to the output directory:
  ``/``-separated segments, none empty, ``.`` or ``..``, none starting or ending with
  whitespace, no backslash, no control character, no drive (``C:``). It names one file
  unambiguously, so a consumer can join it to the directory without normalising.
- ``name`` and ``media_type`` are non-empty strings; ``summary`` may be any string.
- An event name is lower-case segments of ``[a-z0-9_]`` joined by dots; the format's set
  (:data:`EVENT_TYPES`) is not closed: a step adds its own under its step type
  (``review.file_analyzed``).
- ``ts`` is an RFC 3339 date-time with a time and an offset; a date alone is refused.
- Status constants are the wire strings (``STATUS_PASS == "pass"``), for comparing event
  payloads such as ``agent.end``'s ``status``; :class:`Results` holds a :class:`StepStatus`.
- Writers validate too: :func:`dump_results` and :func:`encode_event` (and
  :class:`orchestrator.evidence.step_log.EventLog`, which appends through it) refuse an
  invalid document rather than write it.

Extension policy (as the task board's): ``x_`` keys are always accepted and ignored;
other unknown keys are ignored unless ``strict=True``, which refuses them (rule
``additionalProperties``). ``metadata`` and ``data`` are open objects. The shipped
schemas describe strict mode.
"""

from __future__ import annotations

import enum
import json
import re
from typing import Any

import attrs

from .._errors import ContractError, UnknownVersionError
from .convert import check_date_time, null_problem, refusal, structure, unstructure
from .step_names import (
    EVENT_AGENT_END,
    EVENT_AGENT_START,
    EVENT_ARTIFACT_WRITTEN,
    EVENT_DECISION,
    EVENT_ERROR,
    EVENT_NAME_PATTERN,
    EVENT_SKILL_END,
    EVENT_SKILL_START,
    EVENT_TOOL_CALL,
    EVENT_TOOL_RESULT,
    EVENT_TYPES,
    EVENTS_FILE,
    EXTENSION_PREFIX,
    RESULTS_FILE,
    STATUS_ABSTAIN,
    STATUS_ERROR,
    STATUS_FAIL,
    STATUS_PASS,
    STEPS_SCHEMA_VERSION,
    STEPS_SUPPORTED_MAJOR,
)
from .strict_json import dumps_canonical

__all__ = [
    "ARTIFACT_PATH_PATTERN",
    "EVENTS_FILE",
    "EVENT_AGENT_END",
    "EVENT_AGENT_START",
    "EVENT_ARTIFACT_WRITTEN",
    "EVENT_DECISION",
    "EVENT_ERROR",
    "EVENT_NAME_PATTERN",
    "EVENT_SKILL_END",
    "EVENT_SKILL_START",
    "EVENT_TOOL_CALL",
    "EVENT_TOOL_RESULT",
    "EVENT_TYPES",
    "RESULTS_FILE",
    "STATUS_ABSTAIN",
    "STATUS_ERROR",
    "STATUS_FAIL",
    "STATUS_PASS",
    "STEPS_SCHEMA_KINDS",
    "STEPS_SCHEMA_VERSION",
    "STEPS_SUPPORTED_MAJOR",
    "Artifact",
    "Event",
    "Results",
    "StepStatus",
    "dump_results",
    "encode_event",
    "parse_event",
    "parse_results",
    "steps_schema",
    "validate_event",
    "validate_results",
]


class StepStatus(enum.Enum):
    """The outcome of an agent step; ``abstain``: the agent declined to judge."""

    PASS = STATUS_PASS
    FAIL = STATUS_FAIL
    ERROR = STATUS_ERROR
    ABSTAIN = STATUS_ABSTAIN


# The patterns are the schemas' own, in the dialect Python and ECMA 262 share.
# ``(?![\s\S])`` is "end of input" in both: ``$`` would also match before a final "\n".
_END = r"(?![\s\S])"
VERSION_PATTERN = r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)" + _END
_SEGMENT_CHAR = r"[^/\\\x00-\x1f\x7f]"
_SEGMENT_EDGE = r"[^/\\\x00-\x20\x7f\s]"
_SEGMENT = rf"(?!\.\.?(/|{_END})){_SEGMENT_EDGE}({_SEGMENT_CHAR}*{_SEGMENT_EDGE})?"
ARTIFACT_PATH_PATTERN = rf"^(?![A-Za-z]:){_SEGMENT}(/{_SEGMENT})*{_END}"
DATE_TIME_PATTERN = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?"
    r"([Zz]|[+-][0-9]{2}:[0-9]{2})" + _END
)
_VERSION = re.compile(VERSION_PATTERN)
_EVENT_NAME = re.compile(EVENT_NAME_PATTERN)
_ARTIFACT_PATH = re.compile(ARTIFACT_PATH_PATTERN)


# -- models --------------------------------------------------------------------------------


@attrs.define(kw_only=True)
class Artifact:
    """A file the step produced, at ``path`` relative to its output directory."""

    name: str
    path: str
    media_type: str
    metadata: dict[str, Any] | None = None


@attrs.define(kw_only=True)
class Results:
    """``results.json``: the outcome of an agent step, for the DAG to branch on."""

    schema_version: str = STEPS_SCHEMA_VERSION
    status: StepStatus
    confidence: float
    summary: str
    artifacts: list[Artifact]
    metadata: dict[str, Any] | None = None

    def validate(self, *, source: str = RESULTS_FILE) -> None:
        """:func:`validate_results` on this document."""
        validate_results(self, source=source)


@attrs.define(kw_only=True)
class Event:
    """One line of ``events.ndjson``: what happened (``event``), when, and its payload."""

    ts: str
    event: str
    data: dict[str, Any]

    def validate(self, *, source: str = EVENTS_FILE) -> None:
        """:func:`validate_event` on this event."""
        validate_event(self, source=source)


# -- validation ----------------------------------------------------------------------------


def validate_results(results: Results, *, source: str) -> None:
    """Every rule a reader of ``results.json`` applies, to a document about to be written:
    its types and values as :func:`parse_results` reads them back, then the rules beyond
    types. ``ContractError`` names the first problem's file (``source``), JSON path and
    rule; a writer never writes what a reader would refuse."""
    _as_read(results, Results, source)
    _results_rules(results, source=source)
    _finite(results, source)


def _results_rules(results: Results, *, source: str) -> None:
    _check_version(results.schema_version, source, "$.schema_version")
    _check_confidence(results.confidence, source, "$.confidence")
    for index, artifact in enumerate(results.artifacts):
        _check_artifact(artifact, source, f"$.artifacts[{index}]")


def validate_event(event: Event, *, source: str) -> None:
    """Every rule a reader of ``events.ndjson`` applies to one event about to be written:
    its types as :func:`parse_event` reads them back, an RFC 3339 ``ts``, a
    dot-namespaced ``event``."""
    _as_read(event, Event, source)
    _event_rules(event, source=source)
    _finite(event, source)


def _as_read(document: Any, cls: type[Any], source: str) -> None:
    """``document`` as a reader would structure its JSON: a wrong type or enum value is
    the same ``ContractError`` the reader raises, not a crash of the writer."""
    try:
        data = unstructure(document)
        json.dumps(data)  # types; a NaN is for the rules to name, then refused below
    except Exception as exc:  # a value no JSON document can hold
        raise ContractError(
            f"a {cls.__name__} holds a value JSON cannot: {exc}",
            source=source,
            json_path="$",
            rule="type",
        ) from None
    structure(data, cls, source=source)


def _finite(document: Any, source: str) -> None:
    try:
        json.dumps(unstructure(document), allow_nan=False)
    except ValueError:
        raise ContractError(
            "holds a number that is not finite (NaN or infinity), which JSON cannot",
            source=source,
            json_path="$",
            rule="type",
        ) from None


def _event_rules(event: Event, *, source: str) -> None:
    check_date_time(event.ts, source=source, json_path="$.ts")
    if not isinstance(event.event, str) or _EVENT_NAME.match(event.event) is None:
        raise ContractError(
            f"event name {event.event!r} is not lower-case dot-separated words of [a-z0-9_] "
            "(like 'tool.call' or 'review.file_analyzed')",
            source=source,
            json_path="$.event",
            rule="pattern",
        )
    if not isinstance(event.data, dict):
        raise ContractError(
            f"data is {type(event.data).__name__}; it must be an object",
            source=source,
            json_path="$.data",
            rule="type",
        )


def _check_version(version: str, source: str, json_path: str) -> None:
    match = _VERSION.match(version)
    if match is None:
        raise ContractError(
            f"schema_version {version!r} is not MAJOR.MINOR (for example {STEPS_SCHEMA_VERSION!r})",
            source=source,
            json_path=json_path,
            rule="pattern",
        )
    if int(match.group(1)) != STEPS_SUPPORTED_MAJOR:
        raise UnknownVersionError(
            f"schema_version {version!r} has major {match.group(1)}, this build reads major "
            f"{STEPS_SUPPORTED_MAJOR} only; write a {STEPS_SUPPORTED_MAJOR}.x document or "
            "upgrade",
            source=source,
            json_path=json_path,
            rule="version",
        )


def _check_confidence(value: float, source: str, json_path: str) -> None:
    if value != value:  # NaN compares false with everything: name it
        message = "confidence is NaN; it must be a number from 0 to 1"
    elif not 0.0 <= value <= 1.0:
        message = f"confidence is {value}; it must be from 0 to 1"
    else:
        return
    raise ContractError(message, source=source, json_path=json_path, rule="range")


def _check_artifact(artifact: Artifact, source: str, json_path: str) -> None:
    for field in ("name", "media_type"):
        if not getattr(artifact, field):
            raise ContractError(
                f"{field} is empty; write at least one character",
                source=source,
                json_path=f"{json_path}.{field}",
                rule="minLength",
            )
    if _ARTIFACT_PATH.match(artifact.path) is None:
        raise ContractError(
            _artifact_path_problem(artifact.path),
            source=source,
            json_path=f"{json_path}.path",
            rule="pattern",
        )


def _artifact_path_problem(path: str) -> str:
    """Why ``path`` is not a canonical path inside the output directory, and what to write."""
    from .scope import ScopeError, _normalize

    if "\\" in path:
        return (
            f"artifact path {path!r} holds a backslash; separate directories with '/' "
            "(paths are relative to the step's output directory)"
        )
    try:
        # The lock rules' normalisation, whose messages say what to write instead.
        canonical = _normalize(path, "artifact path")
    except ScopeError as exc:
        # Its messages speak of the repository; here the root is the output directory.
        return (
            str(exc)
            .replace("repository root", "output directory")
            .replace("repository", "output directory")
        )
    return f"artifact path {path!r} is not in canonical form; write {canonical!r}"


# -- parsing and writing -------------------------------------------------------------------

_RESULTS_KEYS = frozenset(attrs.fields_dict(Results))
_ARTIFACT_KEYS = frozenset(attrs.fields_dict(Artifact))
_EVENT_KEYS = frozenset(attrs.fields_dict(Event))


def parse_results(data: Any, *, source: str, strict: bool = False) -> Results:
    """``results.json`` from JSON-like ``data`` (as
    :func:`orchestrator.formats.strict_json.loads_strict` returns it); a ``ContractError``
    names ``source``, the JSON path and the rule.

    An unknown major version fails closed first. Unknown keys: see the module docstring.
    """
    if isinstance(data, dict):
        version = data.get("schema_version")
        if isinstance(version, str):
            _check_version(version, source, "$.schema_version")
        if "schema_version" not in data:
            raise ContractError(
                "required field 'schema_version' is missing", source=source, rule="required"
            )
        artifacts = data.get("artifacts")
        items = artifacts if isinstance(artifacts, list) else []
        _refuse_nulls(
            [("$", data, _RESULTS_KEYS)]
            + [(f"$.artifacts[{i}]", item, _ARTIFACT_KEYS) for i, item in enumerate(items)],
            source,
        )
        if not strict:
            data = _known(data, _RESULTS_KEYS)
            if isinstance(artifacts, list):
                data["artifacts"] = [_known(item, _ARTIFACT_KEYS) for item in artifacts]
    results = structure(data, Results, source=source)
    _results_rules(results, source=source)
    return results


def parse_event(data: Any, *, source: str, strict: bool = False) -> Event:
    """One ``events.ndjson`` line's value as an :class:`Event`; errors as :func:`parse_results`."""
    if isinstance(data, dict):
        _refuse_nulls([("$", data, _EVENT_KEYS)], source)
        if not strict:
            data = _known(data, _EVENT_KEYS)
    event = structure(data, Event, source=source)
    _event_rules(event, source=source)
    return event


def _refuse_nulls(objects: list[tuple[str, Any, frozenset[str]]], source: str) -> None:
    """No field of the format holds ``null`` (an optional field is left out, as the
    schemas say): every null field of the ``objects`` (path, value, field names) named."""
    problems = []
    for path, value, names in objects:
        if isinstance(value, dict):
            keys = [key for key, item in value.items() if item is None and key in names]
            if keys:
                problems.append(null_problem(path, keys))
    if problems:
        raise refusal(problems, source=source)


def _known(value: Any, names: frozenset[str]) -> Any:
    """``value`` without the keys outside ``names``, ``x_`` keys kept for the converter."""
    if not isinstance(value, dict):
        return value
    return {
        key: item for key, item in value.items() if key in names or key.startswith(EXTENSION_PREFIX)
    }


def dump_results(results: Results, *, source: str = RESULTS_FILE) -> bytes:
    """Canonical bytes of a valid ``results.json`` (UTF-8, nulls omitted, final newline)."""
    validate_results(results, source=source)
    return dumps_canonical(unstructure(results))


def encode_event(event: Event, *, source: str = EVENTS_FILE) -> bytes:
    """A valid event as one compact ASCII JSON line ending in ``\\n``."""
    validate_event(event, source=source)
    line = json.dumps(unstructure(event), ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return line.encode("ascii") + b"\n"


#: The kinds of :func:`steps_schema`.
STEPS_SCHEMA_KINDS = ("results", "event")


def steps_schema(kind: str) -> dict[str, Any]:
    """The shipped JSON Schema (draft-07, strict mode) of ``results`` or one ``event``."""
    if kind not in STEPS_SCHEMA_KINDS:
        raise ValueError(f"no steps schema {kind!r}; the kinds are {', '.join(STEPS_SCHEMA_KINDS)}")
    from .schemas import shipped_schema

    return shipped_schema("steps", f"{kind}.schema.json")
