"""The fast path and the cattrs converter agree on every document.

``orchestrator.formats.fastpath`` structures the wire formats without cattrs, for start-up
speed; it may only ever step aside (``Unsupported``), never decide differently. Each
property takes a valid document, mutates it at a random place (drop a key, replace a
value with any JSON value, add a key), and requires: whenever the fast path answers, the
converter accepts the same document and builds an equal object; whenever the converter
refuses, the fast path has stepped aside. Unstructuring must give equal JSON both ways.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.engine.record import EngineRecord
from orchestrator.formats import fastpath as _fastpath
from orchestrator.formats.bridge import AgentRequest, AgentResponse, CheckpointState
from orchestrator.formats.bridge_codec import dump_document
from orchestrator.formats.converter import converter
from orchestrator.formats.strict_json import dumps_canonical

FIXTURES = Path(__file__).parents[1] / "fixtures" / "seed004"

REQUEST = {
    **json.loads((FIXTURES / "example-request.json").read_text()),
    "prompt": "p" * 120,
}
RESPONSE = json.loads((FIXTURES / "example-success-response.json").read_text())
ERROR_RESPONSE = json.loads((FIXTURES / "example-error-response.json").read_text())
RECORD = {
    "run_id": "7d6423d1-fe12-43ad-8083-79b5c6d3a95b",
    "workflow": "/w/wf.py:Flow",
    "workflow_name": "flow",
    "workdir": "/w",
    "started_at": "2025-11-18T10:30:00Z",
    "inputs": {"topic": "owls"},
    "status": "paused",
    "revision": 3,
    "journal": [
        {
            "position": 0,
            "kind": "step",
            "fingerprint": ["scan"],
            "request_ids": [],
            "result": {"n": 1},
        },
        {
            "position": 1,
            "kind": "ask",
            "fingerprint": ["a h"],
            "request_ids": [REQUEST["request_id"]],
        },
        {  # a step between two tries (``ctx.step(..., retry=...)``)
            "position": 2,
            "kind": "step",
            "fingerprint": ["fetch"],
            "request_ids": [],
            "attempts": [
                {
                    "attempt": 1,
                    "started_at": "2025-11-18T10:30:01.000Z",
                    "duration_ms": 12,
                    "error": {"type": "builtins:ConnectionError", "message": "down"},
                    "timed_out": False,
                }
            ],
            "next_attempt_at": "2025-11-18T10:30:02.000Z",
        },
    ],
}
STATE = {
    **json.loads((FIXTURES / "example-state.json").read_text()),
}
STATE["phase_data"]["x_orchestrator"] = RECORD
STATE["agent_requests"][0].update(
    x_request=REQUEST, x_position=1, x_response=RESPONSE, x_response_sha256="ab" * 32
)

CASES = [
    (AgentRequest, REQUEST),
    (AgentResponse, RESPONSE),
    (AgentResponse, ERROR_RESPONSE),
    # integers where the contract says "number": both sides must store floats
    (AgentResponse, {**RESPONSE, "duration_seconds": 5, "metadata": {"confidence": 1}}),
    (EngineRecord, RECORD),
    (CheckpointState, STATE),
]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 200)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.sampled_from(["success", "error", "completed", "pending", "TIMEOUT", "1.0"]),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=6,
)


def places(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += places(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += places(item, (*path, index))
    return found


@st.composite
def mutated(draw: st.DrawFn, document: dict[str, Any]) -> Any:
    data = copy.deepcopy(document)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(places(data)))
        if not path:
            continue
        *parent_path, last = path
        parent = data
        for step in parent_path:
            parent = parent[step]
        operation = draw(st.sampled_from(["drop", "replace", "add"]))
        if operation == "drop":
            del parent[last]
        elif operation == "replace":
            parent[last] = draw(json_values)
        elif isinstance(parent, dict):
            name = draw(
                st.sampled_from(["x_extra", "extra", "unknown", "model"]) | st.text(max_size=4)
            )
            parent[name] = draw(json_values)
    return data


def same_json(a: Any, b: Any) -> bool:
    # Compared as text: 1 == 1.0 in Python, but not in the bytes written to disk.
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def cattrs_result(data: Any, cls: type) -> tuple[bool, Any]:
    try:
        return True, converter.structure(copy.deepcopy(data), cls)
    except Exception as exc:
        return False, exc


@pytest.mark.parametrize(
    ("cls", "document"), CASES, ids=[f"{c.__name__}-{i}" for i, (c, _) in enumerate(CASES)]
)
def test_valid_documents_take_the_fast_path_and_agree(cls: type, document: Any) -> None:
    fast = _fastpath.structure(copy.deepcopy(document), cls)
    ok, slow = cattrs_result(document, cls)
    assert ok and fast == slow
    assert same_json(_fastpath.unstructure(fast), converter.unstructure(slow))


@pytest.mark.slow
@settings(max_examples=400)
@given(data=st.data(), case=st.sampled_from(CASES))
def test_mutated_documents_never_make_the_two_disagree(
    data: st.DataObject, case: tuple[type, Any]
) -> None:
    cls, document = case
    candidate = data.draw(mutated(document))
    ok, slow = cattrs_result(candidate, cls)
    try:
        fast = _fastpath.structure(copy.deepcopy(candidate), cls)
    except _fastpath.Unsupported:
        return
    assert ok, f"the fast path accepted what the converter refuses: {slow}"
    assert fast == slow
    assert same_json(_fastpath.unstructure(fast), converter.unstructure(slow))


@pytest.mark.parametrize(("cls", "document"), CASES)
def test_documents_are_written_as_the_converter_would_write_them(cls: type, document: Any) -> None:
    obj = converter.structure(copy.deepcopy(document), cls)
    assert dump_document(obj) == dumps_canonical(converter.unstructure(obj))


def test_classes_it_cannot_handle_are_left_to_the_converter() -> None:
    import attrs

    @attrs.define
    class Odd:
        when: tuple[int, int]

    with pytest.raises(_fastpath.Unsupported):
        _fastpath.structure({"when": [1, 2]}, Odd)
    assert converter.structure({"when": [1, 2]}, Odd) == Odd(when=(1, 2))
    with pytest.raises(_fastpath.Unsupported):
        _fastpath.unstructure(Odd(when=(1, 2)))


def test_an_instance_is_made_as_its_init_would_make_it() -> None:
    """A plain slotted class is made slot by slot; a factory default gives each instance
    its own value, and a class whose ``__init__`` does more is made by calling it."""
    import attrs

    @attrs.define
    class Plain:
        name: str
        tags: list[str] = attrs.field(factory=list)
        note: str | None = None

    first = _fastpath.structure({"name": "a"}, Plain)
    second = _fastpath.structure({"name": "b"}, Plain)
    assert first == Plain(name="a") and second == Plain(name="b")
    first.tags.append("x")
    assert second.tags == [] and Plain(name="c").tags == []  # not one shared list
    assert _fastpath.structure({"name": "a", "note": "n", "tags": ["t"]}, Plain) == Plain(
        name="a", tags=["t"], note="n"
    )

    seen: list[str] = []

    @attrs.define
    class Hooked:
        name: str

        def __attrs_post_init__(self) -> None:
            seen.append(self.name)

    @attrs.define
    class Checked:
        size: int = attrs.field(validator=attrs.validators.ge(0))

    assert _fastpath.structure({"name": "h"}, Hooked) == Hooked(name="h")
    assert seen == ["h", "h"]  # the build called __init__, which ran the hook
    with pytest.raises(ValueError):
        _fastpath.structure({"size": -1}, Checked)
