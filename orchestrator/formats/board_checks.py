"""What the rules of :mod:`orchestrator.formats.board_rules` are made of: where a check
looks in a document (:class:`At`), the checks of one field (a pattern, a length, a count,
a minimum, a time, a constant), the documents' versions, and the parse every board
document and task IO file goes through: a pre-pass (fixed fields present, ``null`` named,
unknown keys dropped unless strict), the converter, then the document's rules.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import attrs

from .._errors import ContractError, UnknownVersionError
from .._text import plural
from .board_documents import (
    BOARD_SCHEMA_VERSION,
    BOARD_SUPPORTED_MAJOR,
    EXTENSION_PREFIX,
    AssignmentPacket,
    HandoffBundle,
    OrchestratorOutput,
    SubagentResult,
    Submit,
    Verdict,
)
from .convert import check_date_time, null_problem, refusal, structure

T = TypeVar("T")

_SEMVER = re.compile(r"([0-9]+)\.([0-9]+)\.([0-9]+)")


@attrs.frozen
class At:
    """Where a check looks: the document's name and a JSON path inside it."""

    source: str
    path: str = "$"

    def key(self, name: str) -> At:
        return At(self.source, f"{self.path}.{name}")

    def item(self, index: int) -> At:
        return At(self.source, f"{self.path}[{index}]")

    @property
    def name(self) -> str:
        """The member the path ends at (``lock_scope[0]``), for messages."""
        return self.path.rsplit(".", 1)[-1]

    def fail(self, message: str, rule: str) -> NoReturn:
        raise ContractError(message, source=self.source, json_path=self.path, rule=rule)


def check_pattern(value: str, regex: re.Pattern[str], what: str, at: At) -> None:
    if regex.fullmatch(value) is None:
        at.fail(f"{what} {value!r} does not match {regex.pattern}", "pattern")


def check_length(value: str, at: At, low: int = 1, high: int | None = None) -> None:
    if len(value) < low:
        what = "is empty" if not value else f"has {plural(len(value), 'character')}"
        at.fail(f"{at.name} {what}; write at least {plural(low, 'character')}", "minLength")
    if high is not None and len(value) > high:
        at.fail(
            f"{at.name} has {plural(len(value), 'character')}; at most {high} are allowed",
            "maxLength",
        )


def check_items(values: list[Any], at: At, low: int = 0, high: int | None = None) -> None:
    if len(values) < low:
        at.fail(f"{at.name} has {plural(len(values), 'item')}; list at least {low}", "minItems")
    if high is not None and len(values) > high:
        at.fail(
            f"{at.name} has {plural(len(values), 'item')}; at most {high} are allowed", "maxItems"
        )


def check_minimum(value: int, at: At, low: int) -> None:
    if value < low:
        at.fail(f"{at.name} is {value}; the minimum is {low}", "minimum")


def check_optional_date_time(value: str | None, at: At) -> None:
    if value is not None:
        check_date_time(value, source=at.source, json_path=at.path)


def check_const(value: str, expected: str, at: At) -> None:
    if value != expected:
        at.fail(f"{at.name} is {value!r}; it must be {expected!r}", "const")


def check_non_empty_strings(values: list[str], at: At) -> None:
    for index, value in enumerate(values):
        check_length(value, at.item(index))


def check_board_version(version: str, at: At) -> None:
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


def check_exact_version(version: str, expected: str, at: At) -> None:
    if version != expected:
        raise UnknownVersionError(
            f"schema_version {version!r} is not {expected!r}, the only version this build "
            "reads; write that version or upgrade",
            source=at.source,
            json_path=at.path,
            rule="version",
        )


# Fields with a fixed value: defaulted in Python, but required in a document.
FIXED_FIELDS: dict[type, tuple[str, ...]] = {
    AssignmentPacket: ("schema_version", "packet_type", "required_output_schema"),
    OrchestratorOutput: ("schema_version",),
    SubagentResult: ("schema_version",),
    HandoffBundle: ("schema_version",),
    Submit: ("schema_version",),
    Verdict: ("schema_version",),
}


def parse_document(
    data: Any,
    cls: type[T],
    validate: Callable[..., None],
    *,
    source: str,
    strict: bool,
    version: Callable[[str, At], None] | None = None,
) -> T:
    """``data`` as a ``cls`` document judged by ``validate``; ``version`` judges its
    ``schema_version`` first. Every problem the pre-pass finds is named together with
    what the converter finds (:class:`ContractError`)."""
    at = At(source)
    if isinstance(data, dict):
        # An unknown major version fails closed before anything else is judged: a 2.0.0
        # document may legitimately look nothing like a 1.0.0 one.
        if version is not None and isinstance(data.get("schema_version"), str):
            version(data["schema_version"], at.key("schema_version"))
        found: list[tuple[str, str, str]] = []
        nulls: set[str] = set()
        data = _prepared(data, cls, at, strict=strict, found=found, nulls=nulls)
        if found:  # named together with what the converter finds
            try:
                structure(data, cls, source=source)
            except ContractError as exc:
                more = [(exc.json_path, exc.rule, exc.detail), *exc.also]
                found += [problem for problem in more if problem[0] not in nulls]
            raise refusal(found, source=source)
    document = structure(data, cls, source=source)
    validate(document, source=source)
    return document


# -- the pre-pass: fixed fields present, unknown keys dropped unless strict ---------------

_field_types: dict[type, dict[str, Any]] = {}


def _prepared(
    value: Any,
    kind: Any,
    at: At,
    *,
    strict: bool,
    found: list[tuple[str, str, str]],
    nulls: set[str],
) -> Any:
    """``value`` without the keys ``kind`` does not declare unless ``strict`` (``x_`` keys
    always stay). Added to ``found``, at any depth: a fixed field of ``kind`` missing, and
    the fields that hold ``null`` (the formats give no field a null, as their schemas
    say: an optional field is left out), whose paths go to ``nulls`` too.

    Values of the wrong JSON type are left as they are, for the converter to name.
    """
    kind = _optional_inner(kind)
    if typing.get_origin(kind) is list:
        if not isinstance(value, list):
            return value
        (item_kind,) = typing.get_args(kind)
        return [
            _prepared(item, item_kind, at.item(index), strict=strict, found=found, nulls=nulls)
            for index, item in enumerate(value)
        ]
    if not (isinstance(kind, type) and attrs.has(kind) and isinstance(value, dict)):
        return value
    for name in FIXED_FIELDS.get(kind, ()):
        if name not in value:
            found.append((at.path, "required", f"required field {name!r} is missing"))
    fields = _field_types.get(kind)
    if fields is None:
        attrs.resolve_types(kind)
        fields = _field_types[kind] = {f.name: f.type for f in attrs.fields(kind)}
    null_keys = [key for key, item in value.items() if item is None and key in fields]
    if null_keys:
        found.append(null_problem(at.path, null_keys))
        nulls.update(at.key(key).path for key in null_keys)
    return {
        key: (
            _prepared(item, fields[key], at.key(key), strict=strict, found=found, nulls=nulls)
            if key in fields
            else item
        )
        for key, item in value.items()
        if strict or key in fields or key.startswith(EXTENSION_PREFIX)
    }


def _optional_inner(kind: Any) -> Any:
    args = typing.get_args(kind)
    if typing.get_origin(kind) in (typing.Union, types.UnionType) and type(None) in args:
        (inner,) = (arg for arg in args if arg is not type(None))
        return inner
    return kind
