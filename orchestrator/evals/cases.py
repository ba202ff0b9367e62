"""Reading a cases file: a JSON array of cases, or JSONL (one case per line), checked
whole before any agent is called."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._errors import ContractError
from ..formats.runs import CaseSpec, parse_cases
from ..formats.strict_json import loads_strict
from ..storage.files import read_regular_file

CASES_MAX_BYTES = 64 * 1024 * 1024


def read_cases(path: Path, *, source: str | None = None) -> tuple[list[CaseSpec], list[Any], bytes]:
    """The cases of the file at ``path``, the JSON values they were read from, and the
    file's bytes; a ``ContractError`` names the file, the case and the field."""
    name = source or str(path)
    raw = read_regular_file(path, max_bytes=CASES_MAX_BYTES, source=name)
    values = cases_values(raw, source=name)
    return parse_cases(values, source=name), values, raw


def cases_values(raw: bytes, *, source: str) -> list[Any]:
    """The JSON values of a cases file: the array, or every non-blank JSONL line."""
    if raw.lstrip()[:1] == b"[":
        data = loads_strict(raw, source=source, max_bytes=CASES_MAX_BYTES)
        if not isinstance(data, list):  # pragma: no cover - '[' starts an array
            raise ContractError("a cases file is a JSON array", source=source, rule="type")
        return data
    values = []
    for number, line in enumerate(raw.split(b"\n"), start=1):
        if line.strip():
            values.append(loads_strict(line, source=f"{source} line {number}"))
    return values
