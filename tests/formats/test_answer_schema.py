"""``context.x_answer_schema``: the shape an ask's answer must have, carried by the
request, agrees with the engine that structures the answer."""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Any, Literal

import attrs
import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.formats.answer_gate import schema_mismatch
from orchestrator.formats.answer_schema import answer_schema
from orchestrator.formats.convert import structure


class Level(enum.Enum):
    LOW = "low"
    HIGH = "high"


@attrs.define
class Inner:
    name: str
    weight: float = 1.0


@attrs.define
class Outer:
    title: str
    count: int
    level: Level
    tags: list[str]
    inner: Inner
    maybe: Inner | None = None
    mode: Literal["a", "b"] = "a"
    extra: dict[str, Any] = attrs.field(factory=dict)


def test_an_attrs_class_gives_its_schema_and_anything_else_none() -> None:
    schema = answer_schema(Outer)
    assert schema is not None
    assert schema["required"] == ["title", "count", "level", "tags", "inner"]
    assert schema["properties"]["level"] == {"enum": ["low", "high"]}
    assert schema["properties"]["maybe"]["anyOf"][1] == {"type": "null"}
    assert answer_schema(str) is None and answer_schema(dict) is None


documents = st.fixed_dictionaries(
    {},
    optional={
        "title": st.one_of(st.text(max_size=5), st.integers()),
        "count": st.one_of(st.integers(), st.text(max_size=3), st.booleans()),
        "level": st.sampled_from(["low", "high", "mid", 3]),
        "tags": st.one_of(st.lists(st.text(max_size=3), max_size=2), st.text(max_size=2)),
        "inner": st.one_of(
            st.fixed_dictionaries({"name": st.text(max_size=3)}),
            st.fixed_dictionaries({"weight": st.floats(allow_nan=False, allow_infinity=False)}),
        ),
        "maybe": st.none(),
        "mode": st.sampled_from(["a", "b", "c"]),
        "unknown": st.integers(),
        "x_note": st.text(max_size=3),
    },
)


@given(documents)
def test_the_schema_and_the_engine_agree_on_every_answer(document: dict[str, Any]) -> None:
    schema = answer_schema(Outer)
    fits = jsonschema.Draft202012Validator(schema).is_valid(document)
    try:
        structure(document, Outer, source="answer")
        taken = True
    except Exception:
        taken = False
    assert fits == taken, document


def test_a_typed_ask_carries_its_schema_in_the_request(tmp_path: Path) -> None:
    from support.cli import orchestrate

    flow = f"{Path(__file__).parents[1] / 'support' / 'ui_flows.py'}:Review"
    paused = orchestrate("run", flow, "--workdir", tmp_path)
    assert paused.returncode == 42, paused.stderr
    request = json.loads((tmp_path / ".agent-request.json").read_text())
    schema = request["context"]["x_answer_schema"]
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid({"verdict": "ok", "score": 7})
    assert not validator.is_valid({"verdict": "ok"})
    assert not validator.is_valid({"verdict": "ok", "score": "7"})


@pytest.mark.slow
@pytest.mark.parametrize("answer", ['{"verdict": "ok"}', '{"verdict": "ok", "score": 1.5}'])
def test_an_answer_of_another_shape_is_refused_at_the_door(tmp_path: Path, answer: str) -> None:
    from support.cli import orchestrate

    flow = f"{Path(__file__).parents[1] / 'support' / 'ui_flows.py'}:Review"
    assert orchestrate("run", flow, "--workdir", tmp_path).returncode == 42
    refused = orchestrate("respond", "--workdir", tmp_path, "--text", answer)
    assert refused.returncode == 2
    assert "response.score: expected" in refused.stderr
    assert not (tmp_path / ".agent-response.json").exists()


@given(documents)
def test_the_gate_and_a_json_schema_validator_agree_on_every_answer(
    document: dict[str, Any],
) -> None:
    schema = answer_schema(Outer)
    assert schema is not None
    fits = jsonschema.Draft202012Validator(schema).is_valid(document)
    refusal = schema_mismatch(document, schema, "response")
    assert fits == (refusal is None), (document, refusal)
