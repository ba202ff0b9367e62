"""One rule, one verdict: for generated lock scopes, the packet validator (``orchestrate
check packet``), the board's create (``orchestrate board create``) and the lock table
validator (``orchestrate check locks``) give the same allow and the same code."""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator._errors import BoardError, ContractError
from orchestrator.board.board import Board
from orchestrator.formats.board_documents import Task
from orchestrator.formats.board_rules import error_code_for, parse_board_document, validate_task
from orchestrator.formats.convert import structure
from orchestrator.formats.scope import ScopeError, check_lock_table

SEED003 = Path(__file__).parents[1] / "fixtures" / "seed003"
PACKET = json.loads((SEED003 / "minimal-assignment-example.json").read_text())
RUN_ID = "3f56dc4d-35cf-4f97-925c-0b04a6fe8bf4"

# Pieces that normalise, pieces that do not, and pieces that overlap each other.
PIECES = ["src", "src/", "src/a.py", "src//a.py", "./src", "src2", "docs", "docs/x.md",
          " ", "", "..", "../etc", "src/../..", "a\\b", " tests ", "tests/", "/abs"]  # fmt: skip
scopes = st.lists(st.sampled_from(PIECES), min_size=0, max_size=4)


def verdict(action: Any) -> tuple[bool, str]:
    try:
        action()
    except BoardError as exc:
        return False, exc.code
    except ContractError as exc:
        return False, error_code_for(exc).value
    return True, "OK"


def packet_verdict(lock_scope: list[str], forbidden_scope: list[str]) -> tuple[bool, str]:
    packet = copy.deepcopy(PACKET)
    packet["task"].update(lock_scope=lock_scope, forbidden_scope=forbidden_scope)
    packet["active_locks"] = []
    return verdict(lambda: parse_board_document("assignment-packet", packet, source="<packet>"))


def create_verdict(lock_scope: list[str], forbidden_scope: list[str]) -> tuple[bool, str]:
    """As ``orchestrate board create`` judges one task: the task's rules, then the board's."""
    task_data = {**PACKET["task"], "lock_scope": lock_scope, "forbidden_scope": forbidden_scope}
    task_data["dependencies"] = []

    def create() -> None:
        task = structure(task_data, Task, source="<tasks>[0]")
        validate_task(task, source="<tasks>[0]")
        with tempfile.TemporaryDirectory() as scratch:
            board = Board.create(Path(scratch) / ".board", run_id=RUN_ID, objective="o")
            board.create_tasks([task])

    return verdict(create)


def lock_table_allows(resource: str) -> bool:
    """Whether the lock table takes ``resource`` as a lock (it normalises)."""
    try:
        check_lock_table([("T-1", resource, True)])
    except ScopeError:
        return False
    return True


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(lock_scope=scopes, forbidden_scope=scopes)
def test_the_packet_validator_and_board_create_agree(
    lock_scope: list[str], forbidden_scope: list[str]
) -> None:
    assert packet_verdict(lock_scope, forbidden_scope) == create_verdict(
        lock_scope, forbidden_scope
    )


@settings(max_examples=300, deadline=None)
@given(lock_scope=scopes)
def test_a_scope_the_lock_table_refuses_is_refused_by_the_packet_validator(
    lock_scope: list[str],
) -> None:
    """Each entry of a lock scope is a lock the task will hold: an entry the lock table
    cannot take makes the packet (and so the task) refused, and a scope whose every
    entry the table takes is refused by the packet only for being empty."""
    allowed, code = packet_verdict(lock_scope, [])
    if not all(lock_table_allows(entry) for entry in lock_scope):
        assert (allowed, code) == (False, "SCHEMA_INVALID")
    elif lock_scope:
        assert allowed, code
