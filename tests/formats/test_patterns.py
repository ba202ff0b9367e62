"""Identifier, version and time patterns match the whole value, in ASCII only."""

from __future__ import annotations

import pytest

from orchestrator._errors import ContractError
from orchestrator.formats.board_documents import LedgerDelta, TaskStatus
from orchestrator.formats.board_rules import validate_ledger_delta
from orchestrator.formats.convert import check_date_time, check_uuid, check_version


@pytest.mark.parametrize(
    "value",
    [
        "2025-11-18T10:30:00Z\n",
        "0000-01-01T00:00:00Z",
        "\uff12025-11-18T10:30:00Z",  # a full-width digit
        "2025-11-18",
    ],
)
def test_a_date_time_with_anything_around_or_odd_digits_is_refused(value: str) -> None:
    with pytest.raises(ContractError):
        check_date_time(value, source="t", json_path="$")


@pytest.mark.parametrize("value", ["1.0\n", "\u0661.\u0660", "1.0 ", " 1.0"])
def test_a_version_with_anything_around_or_odd_digits_is_refused(value: str) -> None:
    with pytest.raises(ContractError):
        check_version(value, source="t")


def test_a_uuid_with_a_final_newline_is_refused() -> None:
    with pytest.raises(ContractError):
        check_uuid("3f56dc4d-35cf-4f97-925c-0b04a6fe8bf4\n", source="t", json_path="$")
    check_uuid("3f56dc4d-35cf-4f97-925c-0b04a6fe8bf4", source="t", json_path="$")


@pytest.mark.parametrize("task_id", ["T-1\n", "T-\u0661"])
def test_a_task_id_with_a_final_newline_or_odd_digits_is_refused(task_id: str) -> None:
    delta = LedgerDelta(
        task_id=task_id, status=TaskStatus.TODO, owner="", reason="r", delta_id="d-1"
    )
    with pytest.raises(ContractError):
        validate_ledger_delta(delta, source="t")


def test_the_shipped_board_schemas_refuse_a_final_newline_too() -> None:
    import jsonschema

    from orchestrator.formats.board_rules import board_schema

    schema = board_schema("ledger-delta")
    good = {"task_id": "T-1", "status": "todo", "owner": "", "reason": "r", "delta_id": "d-1"}
    jsonschema.Draft7Validator(schema).validate(good)
    for task_id in ("T-1\n", "T-1 "):
        errors = list(jsonschema.Draft7Validator(schema).iter_errors({**good, "task_id": task_id}))
        assert [e.validator for e in errors] == ["pattern"], task_id
