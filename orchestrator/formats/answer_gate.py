"""The answer gate's shape check: does an answer have the shape its request asks for?

A request made by ``ctx.ask(..., output_type=Cls, min_confidence=c)`` carries the
answer's JSON Schema (``context.x_answer_schema``, see :mod:`.answer_schema`) and the
lowest confidence taken (``context.x_min_confidence``). Every way an answer comes in
(``orchestrate respond``, the UI's form, ``drive``'s handler, a response file read at
resume, an in-process agent) asks :func:`check_answer`; a refusal says which field,
what was expected and what came, in one line (:meth:`Refusal.line`) and as JSON
(:meth:`Refusal.as_json`, the ``x_previous_error`` of the request asked again).

The schemas checked are the subset :mod:`.answer_schema` writes: ``type``,
``properties``, ``required``, ``items``, ``enum``, ``anyOf``, ``patternProperties`` and
``additionalProperties``; anything else in a schema is not checked here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import attrs

from .._errors import AnswerRefusedError
from .bridge import AgentRequest, AgentResponse, RequestStatus

#: The request context's keys the gate reads.
SCHEMA_KEY = "x_answer_schema"
MIN_CONFIDENCE_KEY = "x_min_confidence"
#: The key of a request asked again: why the answer before was refused.
PREVIOUS_ERROR_KEY = "x_previous_error"

_SHOWN = 60  # characters of a wrong value shown in a refusal


@attrs.frozen(kw_only=True)
class Refusal:
    """Why an answer was refused: the field (a JSON path into the response document,
    ``response`` being the answer itself), what the request expected, what came."""

    field: str
    expected: str
    got: str
    error_type: str  # PARSE_ERROR or VALIDATION_ERROR

    def line(self) -> str:
        """The refusal in one line, for a person."""
        return f"{self.field}: expected {self.expected}, got {self.got}"

    def as_json(self) -> dict[str, str]:
        return {
            "field": self.field,
            "expected": self.expected,
            "got": self.got,
            "error_type": self.error_type,
            "message": self.line(),
        }


def admit_answer(request: AgentRequest, response: AgentResponse, *, where: str) -> None:
    """Refuse ``response`` (:class:`AnswerRefusedError`, one line naming the field) when
    it is not of the shape ``request`` asks for; ``where`` names the run for the line."""
    refusal = check_answer(request, response)
    if refusal is None:
        return
    schema = (request.context or {}).get(SCHEMA_KEY)
    raise AnswerRefusedError(
        f"{where}: the answer to request {request.request_id} was refused, "
        f"{refusal.line()}; nothing was written: correct the answer and send it again",
        reason="shape",
        details={"refusal": refusal.as_json(), "answer_schema": schema},
    )


def check_answer(request: AgentRequest, response: AgentResponse) -> Refusal | None:
    """``None`` when ``response`` may answer ``request``, else why not. An error answer
    (an agent that failed, a timeout, a cancel) has no shape to check."""
    if response.status is not RequestStatus.SUCCESS:
        return None
    context = request.context or {}
    schema = context.get(SCHEMA_KEY)
    minimum = context.get(MIN_CONFIDENCE_KEY)
    data: Any = None
    if isinstance(schema, Mapping):
        text = response.response or ""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            return Refusal(
                field="response",
                expected=f"a JSON document ({describe_schema(schema)})",
                got=f"text {_shown(text)} (not JSON: {exc.msg} at character {exc.pos})",
                error_type="PARSE_ERROR",
            )
        found = schema_mismatch(data, schema, "response")
        if found is not None:
            return found
    if isinstance(minimum, (int, float)) and not isinstance(minimum, bool):
        return _confidence_refusal(response, float(minimum))
    return None


def _confidence_refusal(response: AgentResponse, minimum: float) -> Refusal | None:
    confidence = confidence_of(response)
    if confidence is None:
        return Refusal(
            field="metadata.confidence",
            expected=f"a confidence of at least {minimum} (metadata.confidence, or a "
            "numeric overall_confidence or confidence in the JSON answer)",
            got="none",
            error_type="VALIDATION_ERROR",
        )
    if confidence < minimum:
        return Refusal(
            field="metadata.confidence",
            expected=f"at least {minimum}",
            got=str(confidence),
            error_type="VALIDATION_ERROR",
        )
    return None


def confidence_of(response: AgentResponse) -> float | None:
    """The answer's confidence: the response metadata's, else the answer's own.

    The request format describes ``metadata.confidence`` as the "overall confidence
    score from response": a host may copy it out of the answer, or leave it there. An
    in-process invoker returns text only, so the answer's top-level
    ``overall_confidence`` (or ``confidence``) counts too. ``None`` when neither says.
    """
    if response.metadata is not None and response.metadata.confidence is not None:
        return response.metadata.confidence
    try:
        data = json.loads(response.response or "")
    except ValueError:
        return None
    if isinstance(data, dict):
        for key in ("overall_confidence", "confidence"):
            value = data.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
    return None


# -- the schema subset ------------------------------------------------------------------

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}


def schema_mismatch(value: Any, schema: Mapping[str, Any], path: str) -> Refusal | None:
    """The first place ``value`` (at ``path``) breaks ``schema``, or ``None``."""
    kind = schema.get("type")
    if isinstance(kind, str) and not _is_type(value, kind):
        return _mismatch(path, _a(kind), _describe_value(value))
    if "enum" in schema and not any(_same(value, option) for option in schema["enum"]):
        return _mismatch(path, describe_schema(schema), _describe_value(value))
    options = schema.get("anyOf")
    if isinstance(options, list) and options:
        results = [schema_mismatch(value, option, path) for option in options]
        if all(r is not None for r in results):
            return _mismatch(
                path, " or ".join(describe_schema(o) for o in options), _describe_value(value)
            )
    if isinstance(value, dict):
        return _object_mismatch(value, schema, path)
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            found = schema_mismatch(item, schema["items"], f"{path}[{index}]")
            if found is not None:
                return found
    return None


def _object_mismatch(value: dict[str, Any], schema: Mapping[str, Any], path: str) -> Refusal | None:
    properties = schema.get("properties") or {}
    for name in schema.get("required") or ():
        if name not in value:
            wanted = describe_schema(properties.get(name) or {})
            return _mismatch(f"{path}.{name}", f"{wanted} (a required field)", "nothing (missing)")
    patterns = schema.get("patternProperties") or {}
    extra_allowed = schema.get("additionalProperties", True) is not False
    for name, item in value.items():
        if name in properties:
            found = schema_mismatch(item, properties[name], f"{path}.{name}")
            if found is not None:
                return found
        elif not extra_allowed and not any(re.search(p, name) for p in patterns):
            known = ", ".join(properties) or "none"
            return _mismatch(
                f"{path}.{name}",
                f"no such field (the fields are {known}; extensions start with x_)",
                f"a field {json.dumps(name, ensure_ascii=False)}",
            )
    return None


def describe_schema(schema: Mapping[str, Any]) -> str:
    """A schema of the subset in a few words: "an object with fields a, b"."""
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(o, ensure_ascii=False) for o in schema["enum"])
    if isinstance(schema.get("anyOf"), list):
        return " or ".join(describe_schema(o) for o in schema["anyOf"])
    kind = schema.get("type")
    if kind == "object" and schema.get("properties"):
        return "an object with fields " + ", ".join(schema["properties"])
    if kind == "array" and isinstance(schema.get("items"), Mapping) and schema["items"]:
        return f"an array of {describe_schema(schema['items'])}"
    return _a(kind) if isinstance(kind, str) else "any JSON value"


def example_of(schema: Mapping[str, Any]) -> Any:
    """A value of ``schema``'s shape, to show a person what to write."""
    if schema.get("enum"):
        return schema["enum"][0]
    if isinstance(schema.get("anyOf"), list) and schema["anyOf"]:
        return example_of(schema["anyOf"][0])
    kind = schema.get("type")
    if kind == "object":
        return {name: example_of(item) for name, item in (schema.get("properties") or {}).items()}
    if kind == "array":
        items = schema.get("items")
        return [example_of(items)] if isinstance(items, Mapping) else []
    return {"string": "text", "integer": 1, "number": 0.5, "boolean": True, "null": None}.get(
        str(kind), "any"
    )


def _is_type(value: Any, kind: str) -> bool:
    if kind in ("integer", "number") and isinstance(value, bool):
        return False
    if kind == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES.get(kind, (object,)))


def _same(value: Any, option: Any) -> bool:
    return bool(value == option and isinstance(value, bool) == isinstance(option, bool))


def _a(kind: str) -> str:
    words = {"object": "an object", "array": "an array", "integer": "an integer", "null": "null"}
    return words.get(kind, f"a {kind}")


def _describe_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    kind = "a string" if isinstance(value, str) else "a number"
    return f"{kind} {_cut(json.dumps(value, ensure_ascii=False))}"


def _shown(text: str) -> str:
    return repr(_cut(text))


def _cut(text: str) -> str:
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def _mismatch(path: str, expected: str, got: str) -> Refusal:
    return Refusal(field=path, expected=expected, got=got, error_type="VALIDATION_ERROR")
