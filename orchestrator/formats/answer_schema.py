"""The JSON Schema of the answer an ask expects, from the attrs class it is structured
into (``ctx.ask(..., output_type=Cls)``).

The request carries it as ``context.x_answer_schema``, so a host (a person at
``orchestrate ui``, a script) can check an answer's shape before sending it. It is the
subset every checker reads alike: ``type``, ``properties``, ``required``, ``items``,
``enum``, ``anyOf``, ``patternProperties`` (``^x_``) and
``additionalProperties``. A field whose type has no JSON form here is left
open (``{}``): the engine's own structuring stays the judge.
"""

from __future__ import annotations

import enum
import types
import typing
from collections import abc
from typing import Any

import attrs

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def answer_schema(output_type: Any) -> dict[str, Any] | None:
    """The schema of ``output_type``'s JSON form; ``None`` unless it is an attrs class."""
    if not (isinstance(output_type, type) and attrs.has(output_type)):
        return None
    return _schema(output_type, depth=0)


def _schema(kind: Any, *, depth: int) -> dict[str, Any]:
    if depth > 8:  # a recursive type: open below here
        return {}
    if kind in _SCALARS:
        return {"type": _SCALARS[kind]}
    if kind is Any or kind is object:
        return {}
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return {"enum": [member.value for member in kind]}
    if isinstance(kind, type) and attrs.has(kind):
        hints = typing.get_type_hints(kind)
        fields = attrs.fields(kind)
        return {
            "type": "object",
            "properties": {
                f.alias or f.name: _schema(hints.get(f.name, Any), depth=depth + 1) for f in fields
            },
            "required": [f.alias or f.name for f in fields if f.default is attrs.NOTHING],
            # Extension fields (x_...) pass; any other unknown field is refused.
            "patternProperties": {"^x_": {}},
            "additionalProperties": False,
        }
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:
            inner = _schema(options[0], depth=depth + 1)
            return {"anyOf": [inner, {"type": "null"}]} if inner else {}
        return {}
    if origin in (list, tuple, set, frozenset, abc.Sequence, abc.Set):
        item = args[0] if args else Any
        return {"type": "array", "items": _schema(item, depth=depth + 1)}
    if origin is dict or kind is dict:
        return {"type": "object"}
    if kind is list:
        return {"type": "array"}
    if origin is typing.Literal:
        return {"enum": list(args)}
    return {}
