"""Structuring and unstructuring for every wire format, and the checks types can't express.

:func:`structure` and :func:`unstructure` take the fast path of
:mod:`orchestrator.formats.fastpath` when it applies and the cattrs converter of
:mod:`orchestrator.formats.converter` otherwise; the converter alone decides what is an error
and says where. The ``check_*`` functions hold the rules of the formats' schemas that a
type cannot (formats, ranges, versions), each naming the file and the JSON path.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

from .._errors import ContractError, UnknownVersionError
from . import fastpath as _fastpath

T = TypeVar("T")

_VERSION = re.compile(r"(\d+)\.(\d+)", re.ASCII)
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
# RFC 3339 date-time, as JSON Schema's "date-time" format means it.
_DATE_TIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-](\d{2}):(\d{2}))",
    re.ASCII,
)


def structure(data: Any, cls: type[T], *, source: str) -> T:
    """Structure JSON-like ``data`` into ``cls``; a ``ContractError`` names file and path."""
    try:
        return _fastpath.structure(data, cls)  # type: ignore[no-any-return]
    except _fastpath.Unsupported:
        pass
    from .converter import contract_error, converter

    try:
        return converter.structure(data, cls)
    except Exception as exc:  # cattrs wraps every failure; turn it into one clear line
        raise contract_error(exc, source) from None


def unstructure(obj: Any) -> Any:
    """The JSON-ready form of an attrs instance (``None`` fields omitted)."""
    try:
        return _fastpath.unstructure(obj)
    except _fastpath.Unsupported:
        from .converter import converter

        return converter.unstructure(obj)


# -- checks the type system cannot express -----------------------------------------------


def check_version(version: str, *, source: str, json_path: str = "$.version") -> None:
    """``MAJOR.MINOR``; an unknown major version fails closed."""
    from .bridge import SUPPORTED_MAJOR

    match = _VERSION.fullmatch(version)
    if match is None:
        raise ContractError(
            f"version {version!r} is not MAJOR.MINOR (for example '1.0')",
            source=source,
            json_path=json_path,
            rule="pattern",
        )
    if int(match.group(1)) != SUPPORTED_MAJOR:
        raise UnknownVersionError(
            f"version {version!r} has major {match.group(1)}, this build reads major "
            f"{SUPPORTED_MAJOR} only; write a {SUPPORTED_MAJOR}.x document or upgrade",
            source=source,
            json_path=json_path,
            rule="version",
        )


def check_uuid(value: str, *, source: str, json_path: str) -> None:
    if _UUID.fullmatch(value) is None:
        raise ContractError(
            f"{value!r} is not a UUID", source=source, json_path=json_path, rule="format"
        )


def check_date_time(value: str, *, source: str, json_path: str) -> None:
    """RFC 3339 ``date-time``: the shape, and values that exist on a calendar."""
    match = _DATE_TIME.fullmatch(value)
    if match is None or not _real_date_time(match):
        raise ContractError(
            f"{value!r} is not an RFC 3339 date-time (like 2025-11-18T10:30:00Z)",
            source=source,
            json_path=json_path,
            rule="format",
        )


def _real_date_time(match: re.Match[str]) -> bool:
    from datetime import date

    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    try:
        date(year, month, day)  # refuses year 0, month 13, February 30, ...
    except ValueError:
        return False
    if hour > 23 or minute > 59 or second > 60:  # 60: a leap second
        return False
    offset_hours, offset_minutes = match.group(9), match.group(10)
    return offset_hours is None or (int(offset_hours) <= 23 and int(offset_minutes) <= 59)


def check_range(
    value: float, *, low: float | None, high: float | None, source: str, json_path: str
) -> None:
    if value != value:  # NaN compares false with everything: refuse it by name
        raise ContractError("NaN is not a number", source=source, json_path=json_path, rule="range")
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"{low if low is not None else '-inf'}..{high if high is not None else 'inf'}"
        raise ContractError(
            f"{value} is outside {bounds}", source=source, json_path=json_path, rule="range"
        )


# -- refusals naming every problem ----------------------------------------------------------


def null_problem(path: str, keys: list[str]) -> tuple[str, str, str]:
    """The problem of an object at ``path`` whose fields ``keys`` hold ``null``: no
    format of the project gives a field a null (an optional field is left out)."""
    verb = "is" if len(keys) == 1 else "are"
    text = (
        f"{', '.join(keys)} {verb} null; the format has no null: give a value, or leave an "
        "optional field out"
    )
    return (f"{path}.{keys[0]}", "type", text)


def refusal(problems: list[tuple[str, str, str]], *, source: str) -> ContractError:
    """One error naming ``problems`` (json_path, rule, message), the first as primary."""
    (path, rule, text), also = problems[0], tuple(problems[1:])
    return ContractError(text, source=source, json_path=path, rule=rule, also=also)
