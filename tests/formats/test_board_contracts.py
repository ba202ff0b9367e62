"""The task board documents and task IO with pins: the shipped JSON Schemas and the
Python side agree.

Proves that:
- the task board format's examples (Minimal Assignment, Minimal Result), a document of
  every other kind, and a submit and a verdict built from the task IO format's canonical
  shapes with real values
  are accepted by both judges (Draft-07 with a format checker that enforces "uuid" and
  "date-time", and ``parse_*``), in strict mode too;
- the task IO format's task-input example, copied verbatim, is refused by the strict JSON reader
  with its line and column; with its one syntax error fixed it is valid;
- every rule of the formats (and each project decision) is enforced by both judges, at the
  same JSON path; the rules JSON Schema cannot state (two fields compared, uniqueness of
  one member across items) are pinned as Python-only;
- an unknown major version fails closed; unknown keys are ignored, or refused in strict
  mode; ``x_`` keys are always accepted;
- every model round-trips through structure/unstructure, the fast path and cattrs alike.
"""

from __future__ import annotations

import copy
import enum
import json
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any, NamedTuple

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft7Validator, FormatChecker

from orchestrator._errors import ContractError, UnknownVersionError, UntrustedJSONError
from orchestrator.formats import board_documents as board
from orchestrator.formats import board_rules
from orchestrator.formats.board_documents import (
    AcceptanceCheck,
    CheckStatus,
    ErrorCode,
    FailCode,
    LedgerDelta,
    Priority,
    Task,
    TaskStatus,
    TaskType,
    dump_board_document,
)
from orchestrator.formats.board_rules import (
    BOARD_SCHEMA_KINDS,
    board_schema,
    error_code_for,
    parse_board_document,
    parse_ledger_delta,
    parse_packet,
    validate_subagent_result,
)
from orchestrator.formats.convert import structure, unstructure
from orchestrator.formats.strict_json import loads_strict
from orchestrator.storage.files import read_json_file

FIXTURES = Path(__file__).parents[1] / "fixtures"
SEED003 = FIXTURES / "seed003"
SEED002 = FIXTURES / "seed002"
FORMATS = FormatChecker()
RUN_ID = "3f56dc4d-35cf-4f97-925c-0b04a6fe8bf4"
UUID = "72c84e9c-0975-4c1a-b9a5-864c2725dc8a"


def fixture(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def complaints(kind: str, document: Any) -> list[tuple[str, str]]:
    """(JSON path, keyword) of every complaint of the shipped schema."""
    validator = Draft7Validator(board_schema(kind), format_checker=FORMATS)
    return [(e.json_path, str(e.validator)) for e in validator.iter_errors(document)]


@pytest.fixture(autouse=True, scope="module")
def formats_are_enforced() -> None:
    assert not FORMATS.conforms("T-1", "uuid")
    assert not FORMATS.conforms("2025-11-18", "date-time")


# -- good documents -----------------------------------------------------------------------

ASSIGNMENT = fixture(SEED003 / "minimal-assignment-example.json")
RESULT = fixture(SEED003 / "minimal-result-example.json")
TASK_T13 = {
    **ASSIGNMENT["task"],
    "task_id": "T-13",
    "dependencies": ["T-12"],
    "lock_scope": ["docs/api.md"],
    "worklog_path": "worklogs/T-13.jsonl",
}
LEDGER_DELTA = {
    "task_id": "T-13",
    "status": "todo",
    "owner": "",
    "reason": "created by the planner",
    "delta_id": "T-13/0/todo",
    "x_seq": 7,
    "x_at": "2025-11-18T10:30:00Z",
    "x_base_version": 0,
    "x_create": TASK_T13,
}
BLOCKER = {
    "task_id": "T-13",
    "code": "LOCK_CONFLICT",
    "reason": "docs/api.md is locked by T-9",
    "details": {"holder": "T-9"},
}
ORCHESTRATOR_OUTPUT = {
    "schema_version": "1.0.0",
    "run_id": RUN_ID,
    "ledger_delta": [
        LEDGER_DELTA,
        {
            "task_id": "T-12",
            "status": "in_progress",
            "owner": "subagent-1",
            "reason": "assigned",
            "delta_id": "T-12/1/in_progress",
            "last_heartbeat_at": "2025-11-18T10:31:00Z",
            "timed_out": False,
            "retry_after_ms": 0,
            "x_attempt": 1,
        },
    ],
    "assignments": [ASSIGNMENT],
    "active_locks": [{"task_id": "T-12", "resource": "tests/test_api.py", "active": True}],
    "blockers": [BLOCKER],
    "next_actions": ["wait for T-12"],
    "generated_at": "2025-11-18T10:31:00+00:00",
}
WORKLOG_ENTRY = {
    "timestamp": "2025-11-18T10:40:00Z",
    "run_id": RUN_ID,
    "task_id": "T-12",
    "actor": "subagent-1",
    "action": "run tests",
    "files_touched": ["tests/test_api.py"],
    "decision": "keep the fixture",
    "result": "3 failures",
    "next_step": "ask for the API spec",
    "code": "ACCEPTANCE_FAILED",
    "evidence": "pytest output",
}
HANDOFF = {
    "schema_version": "1.0.0",
    "run_id": RUN_ID,
    "objective": "Implement endpoint tests",
    "constraints": ["Do not edit src/api.py"],
    "ledger": [
        {
            "task_id": "T-12",
            "title": "Add endpoint tests",
            "status": "in_progress",
            "owner": "subagent-1",
            "lock_scope": ["tests/test_api.py"],
            "timeout_seconds": 1200,
            "heartbeat_interval_seconds": 120,
            "priority": "high",
            "last_heartbeat_at": "2025-11-18T10:31:00Z",
        }
    ],
    "active_locks": [{"task_id": "T-12", "resource": "tests/test_api.py", "active": True}],
    "dependencies": [{"task_id": "T-13", "depends_on": ["T-12"]}],
    "open_blockers": [BLOCKER],
    "acceptance_targets": [{"task_id": "T-12", "acceptance_criteria": ["All endpoint tests pass"]}],
}
VALIDATOR_OUTPUT = {
    "allow": False,
    "code": "SCOPE_VIOLATION",
    "reason": "src/api.py is in forbidden_scope",
    "details": {"file": "src/api.py"},
}
TASK_INPUT_TEXT = (SEED002 / "task-input-example.json").read_bytes()
# The printed example's only defect is the array closed with '}'; fixed here.
TASK_INPUT = json.loads(
    TASK_INPUT_TEXT.replace(b'evidence_spec.md"\n  },', b'evidence_spec.md"\n  ],')
)


def filled(shape: Any, values: dict[str, Any], prefix: str = "") -> Any:
    """The canonical ``shape`` of a task IO document, every leaf replaced by
    ``values[path]``."""
    if isinstance(shape, dict):
        return {k: filled(v, values, f"{prefix}{k}.") for k, v in shape.items()}
    return values[prefix[:-1]]


SUBMIT_SHAPE = fixture(SEED002 / "submit-canonical-shape.json")
VERDICT_SHAPE = fixture(SEED002 / "verdict-canonical-shape.json")
SUBMIT = filled(
    SUBMIT_SHAPE,
    {
        "schema_version": "scc.submit.v1",
        "task_id": UUID,
        "status": "DONE",
        "reason_code": "CI_FAILED",  # optional; present so that every key is exercised
        "changed_files": ["docs/prompt_os/io/schemas.md"],
        "new_files": ["docs/prompt_os/io/fail_codes.md"],
        "tests.commands": ["pytest -q docs/"],
        "tests.passed": True,
        "tests.summary": "12 passed",
        "artifacts.report_md": "artifacts/report.md",
        "artifacts.selftest_log": "artifacts/selftest.log",
        "artifacts.evidence_dir": "artifacts/evidence/",
        "artifacts.patch_diff": "artifacts/patch.diff",
        "artifacts.submit_json": "artifacts/submit.json",
        "exit_code": 0,
        "needs_input": [],
    },
)
VERDICT = filled(
    VERDICT_SHAPE,
    {
        "schema_version": "scc.verdict.v1",
        "task_id": "T-12",
        "verdict": "PASS",
        "reason_code": "CI_FAILED",
        "messages": ["all checks passed"],
        "checks.schema_valid": True,
        "checks.scope_valid": True,
        "checks.tests_passed": True,
        "checks.evidence_present": True,
        "timestamps.submitted_at": "2025-11-18T10:40:00Z",
        "timestamps.evaluated_at": "2025-11-18T10:40:02.5Z",
        "links.submit_json": "results/T-12.1.json",
        "links.report_md": "artifacts/report.md",
        "links.selftest_log": "artifacts/selftest.log",
        "links.patch_diff": "artifacts/patch.diff",
        "links.evidence_dir": "artifacts/evidence/",
    },
)

GOOD: dict[str, Any] = {
    "assignment-packet": ASSIGNMENT,
    "orchestrator-output": ORCHESTRATOR_OUTPUT,
    "subagent-result": RESULT,
    "ledger-delta": LEDGER_DELTA,
    "worklog-entry": WORKLOG_ENTRY,
    "handoff-bundle": HANDOFF,
    "validator-output": VALIDATOR_OUTPUT,
    "task-input": TASK_INPUT,
    "submit": SUBMIT,
    "verdict": VERDICT,
}


# The kinds, short, for the tables below.
PKT, RES, OUT, DLT, LOG = (
    "assignment-packet",
    "subagent-result",
    "orchestrator-output",
    "ledger-delta",
    "worklog-entry",
)
HND, VAL, INP, SUB, VER = "handoff-bundle", "validator-output", "task-input", "submit", "verdict"


def test_every_kind_has_a_good_document_and_a_schema() -> None:
    assert set(GOOD) == set(BOARD_SCHEMA_KINDS)
    for kind in BOARD_SCHEMA_KINDS:
        Draft7Validator.check_schema(board_schema(kind))
    with pytest.raises(ValueError, match="no board schema 'nope'"):
        board_schema("nope")


@pytest.mark.parametrize("kind", BOARD_SCHEMA_KINDS)
@pytest.mark.parametrize("strict", [False, True])
def test_good_documents_are_accepted_by_both_judges(kind: str, strict: bool) -> None:
    document = copy.deepcopy(GOOD[kind])
    assert complaints(kind, document) == []
    parsed = parse_board_document(kind, document, source=f"{kind}.json", strict=strict)
    assert document == GOOD[kind], "parsing changed its input"
    # What the project writes is the document it read, and the schema accepts it.
    written = loads_strict(dump_board_document(parsed), source="written")
    assert written == document
    assert complaints(kind, written) == []


def test_seed_examples_parse_to_what_they_say() -> None:
    packet = parse_packet(ASSIGNMENT, source="assignment.json", strict=True)
    assert packet.task.type is TaskType.PARALLELIZABLE
    assert packet.task.priority is Priority.HIGH
    assert packet.active_locks[0].active is True
    result = board_rules.parse_subagent_result(RESULT, source="result.json", strict=True)
    assert result.acceptance_check == [
        AcceptanceCheck(
            criterion="All endpoint tests pass",
            status=CheckStatus.PASS,
            evidence="pytest tests/test_api.py",
        )
    ]
    # priority is optional, default normal
    without_priority = changed(PKT, "task.priority", _DROP)
    assert parse_packet(without_priority, source="a").task.priority is Priority.NORMAL
    assert complaints(PKT, without_priority) == []


def test_submit_and_verdict_have_exactly_the_canonical_shapes() -> None:
    def keys(document: Any, prefix: str = "") -> set[str]:
        if not isinstance(document, dict):
            return set()
        found = set()
        for key, value in document.items():
            found |= {prefix + key} | keys(value, f"{prefix}{key}.")
        return found

    assert keys(SUBMIT) == keys(SUBMIT_SHAPE)
    assert keys(VERDICT) == keys(VERDICT_SHAPE)
    # The canonical shapes themselves are placeholders, not documents.
    assert complaints("submit", SUBMIT_SHAPE) != []
    with pytest.raises(ContractError):
        board_rules.parse_submit(SUBMIT_SHAPE, source="shape")


def test_the_seed_task_input_example_is_refused_where_its_syntax_error_is() -> None:
    # The printed example's '"files": [ ... }' is a bad-input case; the reader names the place.
    with pytest.raises(UntrustedJSONError) as caught:
        loads_strict(TASK_INPUT_TEXT, source="task-input-example.json")
    assert caught.value.rule == "syntax"
    assert "line 13, column 3" in str(caught.value)
    assert str(caught.value).startswith("task-input-example.json: invalid JSON")
    line = TASK_INPUT_TEXT.decode().splitlines()[12]
    assert line == "  },"
    with pytest.raises(UntrustedJSONError, match="line 13, column 3"):
        read_json_file(SEED002 / "task-input-example.json")
    assert error_code_for(caught.value) is ErrorCode.SCHEMA_INVALID
    # Fixed, it is a valid task input for both judges (see GOOD).
    assert TASK_INPUT["files"][0] == "docs/prompt_os/io/schemas.md"


# -- bad documents ------------------------------------------------------------------------

_DROP = object()


class Bad(NamedTuple):
    kind: str
    label: str
    document: Any
    where: str  # the JSON path both judges name
    rule: str  # the Python side's rule
    keyword: str | None  # the schema's keyword; None: JSON Schema cannot state the rule


def changed(kind: str, path: str, value: Any) -> Any:
    """A copy of the good ``kind`` document with ``a.b[0].c`` set (deleted for _DROP)."""
    document = copy.deepcopy(GOOD[kind])
    *parents, last = path.replace("[", ".").replace("]", "").split(".")
    target: Any = document
    for key in parents:
        target = target[int(key)] if key.isdigit() else target[key]
    if value is _DROP:
        del target[last]
    elif last.isdigit():
        target[int(last)] = value
    else:
        target[last] = value
    return document


def bad(kind: str, path: str, value: Any, where: str, rule: str, keyword: str | None = "") -> Bad:
    return Bad(
        kind, path, changed(kind, path, value), where, rule, rule if keyword == "" else keyword
    )


def result_with(status: str, checks: list[dict[str, str]]) -> dict[str, Any]:
    return {**RESULT, "status": status, "acceptance_check": checks}


PASS = {"criterion": "c", "status": "pass", "evidence": "log"}
BAD = [
    # assignment packet
    Bad(PKT, "not an object", ["x"], "$", "type", "type"),
    bad(PKT, "schema_version", "1.0", "$.schema_version", "pattern"),
    bad(PKT, "schema_version", "2.0.0", "$.schema_version", "version", "pattern"),
    bad(PKT, "schema_version", _DROP, "$", "required"),
    bad(PKT, "run_id", "run-1", "$.run_id", "pattern"),
    bad(PKT, "packet_type", "result", "$.packet_type", "const"),
    bad(PKT, "packet_type", _DROP, "$", "required"),
    bad(PKT, "global_objective", "", "$.global_objective", "minLength"),
    bad(PKT, "global_objective", "x" * 5001, "$.global_objective", "maxLength"),
    bad(PKT, "task", _DROP, "$", "required"),
    bad(PKT, "task.task_id", "12", "$.task.task_id", "pattern"),
    bad(PKT, "task.task_id", "T-", "$.task.task_id", "pattern"),
    bad(PKT, "task.title", "", "$.task.title", "minLength"),
    bad(PKT, "task.title", "t" * 501, "$.task.title", "maxLength"),
    bad(PKT, "task.type", "whenever", "$.task.type", "enum"),
    bad(PKT, "task.dependencies", ["T-1", "T 2"], "$.task.dependencies[1]", "pattern"),
    bad(PKT, "task.lock_scope", [], "$.task.lock_scope", "minItems"),
    bad(PKT, "task.lock_scope", [""], "$.task.lock_scope[0]", "minLength"),
    bad(PKT, "task.forbidden_scope", "src/", "$.task.forbidden_scope", "type"),
    bad(PKT, "task.acceptance_criteria", [], "$.task.acceptance_criteria", "minItems"),
    bad(PKT, "task.worklog_path", "", "$.task.worklog_path", "minLength"),
    bad(PKT, "task.worklog_path", "w" * 1001, "$.task.worklog_path", "maxLength"),
    bad(PKT, "task.timeout_seconds", 29, "$.task.timeout_seconds", "minimum"),
    bad(PKT, "task.timeout_seconds", 1200.5, "$.task.timeout_seconds", "type"),
    bad(PKT, "task.timeout_seconds", True, "$.task.timeout_seconds", "type"),
    bad(PKT, "task.heartbeat_interval_seconds", 4, "$.task.heartbeat_interval_seconds", "minimum"),
    # heartbeat < timeout compares two fields: not expressible in JSON Schema
    bad(
        PKT,
        "task.heartbeat_interval_seconds",
        1200,
        "$.task.heartbeat_interval_seconds",
        "heartbeat-below-timeout",
        None,
    ),
    bad(PKT, "task.priority", "urgent", "$.task.priority", "enum"),
    bad(PKT, "task.timeout_seconds", _DROP, "$.task", "required"),
    bad(PKT, "active_locks[0].active", "yes", "$.active_locks[0].active", "type"),
    bad(PKT, "active_locks[0].task_id", "T9", "$.active_locks[0].task_id", "pattern"),
    bad(PKT, "active_locks[0].resource", "", "$.active_locks[0].resource", "minLength"),
    bad(PKT, "context_package[1].kind", "url", "$.context_package[1].kind", "enum"),
    bad(PKT, "required_output_schema", "subagent_result_v2", "$.required_output_schema", "const"),
    bad(PKT, "generated_at", "yesterday", "$.generated_at", "format"),
    bad(PKT, "generated_at", "2025-02-30T10:00:00Z", "$.generated_at", "format"),
    # subagent result
    bad(RES, "status", "complete", "$.status", "enum"),
    bad(RES, "task_id", "T-x", "$.task_id", "pattern"),
    bad(RES, "run_id", RUN_ID[:-1], "$.run_id", "pattern"),
    bad(RES, "changes[0].action", _DROP, "$.changes[0]", "required"),
    bad(RES, "changes[0].resource", "", "$.changes[0].resource", "minLength"),
    bad(RES, "worklog_path", "", "$.worklog_path", "minLength"),
    bad(RES, "notes_for_orchestrator", ["n"] * 6, "$.notes_for_orchestrator", "maxItems"),
    bad(RES, "notes_for_orchestrator", ["ok", ""], "$.notes_for_orchestrator[1]", "minLength"),
    bad(RES, "acceptance_check[0].status", "skipped", "$.acceptance_check[0].status", "enum"),
    # the completion invariants, stated in the schema with if/then
    Bad(
        RES,
        "done, no checks",
        result_with("done", []),
        "$.acceptance_check",
        "completion",
        "minItems",
    ),
    Bad(
        RES,
        "done, a fail",
        result_with("done", [PASS, {**PASS, "status": "fail"}]),
        "$.acceptance_check[1].status",
        "completion",
        "const",
    ),
    Bad(
        RES,
        "done, no evidence",
        result_with("done", [{**PASS, "evidence": ""}]),
        "$.acceptance_check[0].evidence",
        "completion",
        "minLength",
    ),
    # orchestrator output
    bad(OUT, "ledger_delta[1].status", "paused", "$.ledger_delta[1].status", "enum"),
    bad(
        OUT,
        "ledger_delta[1].delta_id",
        "T-13/0/todo",
        "$.ledger_delta[1].delta_id",
        "unique-delta-id",
        None,
    ),
    bad(OUT, "ledger_delta[0].x_create.title", "", "$.ledger_delta[0].x_create.title", "minLength"),
    bad(
        OUT,
        "assignments[0].schema_version",
        "2.1.0",
        "$.assignments[0].schema_version",
        "version",
        "pattern",
    ),
    bad(OUT, "assignments[0].task.lock_scope", [], "$.assignments[0].task.lock_scope", "minItems"),
    bad(OUT, "blockers[0].code", "OOPS", "$.blockers[0].code", "enum"),
    bad(OUT, "blockers[0].details", [], "$.blockers[0].details", "type"),
    bad(OUT, "next_actions", [1], "$.next_actions[0]", "type"),
    bad(OUT, "ledger_delta", _DROP, "$", "required"),
    # fixed-value fields have Python defaults, yet are required in a document at any depth
    bad(OUT, "assignments[0].packet_type", _DROP, "$.assignments[0]", "required"),
    bad(OUT, "assignments[0].schema_version", _DROP, "$.assignments[0]", "required"),
    # ledger delta and the board's x_ fields
    bad(DLT, "status", "paused", "$.status", "enum"),
    bad(DLT, "task_id", "t-13", "$.task_id", "pattern"),
    bad(DLT, "delta_id", "", "$.delta_id", "minLength"),
    bad(DLT, "owner", None, "$.owner", "type"),
    bad(DLT, "last_heartbeat_at", "2025-13-01T00:00:00Z", "$.last_heartbeat_at", "format"),
    bad(DLT, "timed_out", "no", "$.timed_out", "type"),
    bad(DLT, "retry_after_ms", -1, "$.retry_after_ms", "minimum"),
    bad(DLT, "x_seq", 0, "$.x_seq", "minimum"),
    bad(DLT, "x_at", "10:30", "$.x_at", "format"),
    bad(DLT, "x_base_version", -1, "$.x_base_version", "minimum"),
    bad(
        DLT,
        "x_create.heartbeat_interval_seconds",
        3,
        "$.x_create.heartbeat_interval_seconds",
        "minimum",
    ),
    bad(DLT, "x_create.dependencies", ["T-1", "nope"], "$.x_create.dependencies[1]", "pattern"),
    bad(DLT, "x_attempt", 0, "$.x_attempt", "minimum"),
    bad(DLT, "x_code", "TIMEOUT", "$.x_code", "enum"),
    bad(DLT, "x_verdict", "", "$.x_verdict", "minLength"),
    # worklog entry
    bad(LOG, "timestamp", "2025-11-18", "$.timestamp", "format"),
    bad(LOG, "run_id", "r", "$.run_id", "pattern"),
    bad(LOG, "code", "BROKEN", "$.code", "enum"),
    bad(LOG, "files_touched", "a.py", "$.files_touched", "type"),
    bad(LOG, "next_step", _DROP, "$", "required"),
    # handoff bundle
    bad(HND, "schema_version", "1.0.0-rc1", "$.schema_version", "pattern"),
    bad(HND, "ledger[0].status", "waiting", "$.ledger[0].status", "enum"),
    bad(HND, "ledger[0].priority", _DROP, "$.ledger[0]", "required"),
    bad(HND, "ledger[0].lock_scope", [], "$.ledger[0].lock_scope", "minItems"),
    bad(HND, "ledger[0].timeout_seconds", 10, "$.ledger[0].timeout_seconds", "minimum"),
    bad(
        HND,
        "ledger[0].heartbeat_interval_seconds",
        1300,
        "$.ledger[0].heartbeat_interval_seconds",
        "heartbeat-below-timeout",
        None,
    ),
    bad(HND, "ledger[0].last_heartbeat_at", "soon", "$.ledger[0].last_heartbeat_at", "format"),
    bad(
        HND,
        "dependencies[0].depends_on",
        ["T-12", "x"],
        "$.dependencies[0].depends_on[1]",
        "pattern",
    ),
    bad(HND, "open_blockers[0].task_id", "13", "$.open_blockers[0].task_id", "pattern"),
    bad(
        HND,
        "acceptance_targets[0].acceptance_criteria",
        [],
        "$.acceptance_targets[0].acceptance_criteria",
        "minItems",
    ),
    bad(HND, "constraints", _DROP, "$", "required"),
    # validator output
    bad(VAL, "allow", "true", "$.allow", "type"),
    bad(VAL, "code", "", "$.code", "minLength"),
    bad(VAL, "reason", _DROP, "$", "required"),
    # task input
    bad(INP, "task_id", "T-1", "$.task_id", "format"),
    bad(INP, "goal", "", "$.goal", "minLength"),
    bad(INP, "pins", _DROP, "$", "required"),
    bad(INP, "pins.allowed_paths", [], "$.pins.allowed_paths", "minItems"),
    bad(INP, "pins.forbidden_paths", _DROP, "$.pins", "required"),
    # the same path allowed and forbidden: two lists compared, not expressible
    bad(
        INP,
        "pins.forbidden_paths",
        ["docs/prompt_os/io/"],
        "$.pins.forbidden_paths[0]",
        "pins-overlap",
        None,
    ),
    bad(INP, "files", "a.md", "$.files", "type"),
    bad(INP, "context.map", [], "$.context.map", "type"),
    # submit
    bad(SUB, "schema_version", "scc.submit.v2", "$.schema_version", "version", "const"),
    bad(SUB, "schema_version", _DROP, "$", "required"),
    bad(SUB, "task_id", "", "$.task_id", "pattern"),
    bad(SUB, "status", "OK", "$.status", "enum"),
    bad(SUB, "reason_code", "ci failed", "$.reason_code", "pattern"),
    bad(SUB, "tests.passed", "yes", "$.tests.passed", "type"),
    bad(SUB, "tests.summary", _DROP, "$.tests", "required"),
    bad(SUB, "artifacts.patch_diff", _DROP, "$.artifacts", "required"),
    bad(SUB, "artifacts.report_md", "", "$.artifacts.report_md", "minLength"),
    bad(SUB, "exit_code", 2, "$.exit_code", "done-exit-code", "const"),
    bad(SUB, "exit_code", "0", "$.exit_code", "type"),
    Bad(
        SUB,
        "need input, none asked",
        {**SUBMIT, "status": "NEED_INPUT"},
        "$.needs_input",
        "needs-input",
        "minItems",
    ),
    Bad(
        SUB,
        "failed, yet asking",
        {**SUBMIT, "status": "FAILED", "exit_code": 1, "needs_input": ["which API?"]},
        "$.needs_input",
        "needs-input",
        "maxItems",
    ),
    bad(SUB, "needs_input", ["which API?"], "$.needs_input", "needs-input", "maxItems"),
    # verdict
    bad(VER, "schema_version", "scc.verdict.v0", "$.schema_version", "version", "const"),
    bad(VER, "verdict", "MAYBE", "$.verdict", "enum"),
    bad(VER, "checks.scope_valid", False, "$.checks.scope_valid", "pass-checks", "const"),
    bad(VER, "checks.evidence_present", _DROP, "$.checks", "required"),
    bad(VER, "timestamps.evaluated_at", "now", "$.timestamps.evaluated_at", "format"),
    bad(VER, "links.submit_json", _DROP, "$.links", "required"),
    bad(VER, "links.patch_diff", "", "$.links.patch_diff", "minLength"),
    bad(VER, "messages", "ok", "$.messages", "type"),
    bad(VER, "reason_code", "Ci", "$.reason_code", "pattern"),
]


def bad_params() -> list[Any]:
    return [pytest.param(row, id=f"{row.kind}-{row.label}-{row.rule}") for row in BAD]


@pytest.mark.parametrize("row", bad_params())
def test_schema_refuses_each_bad_document_where_the_table_says(row: Bad) -> None:
    found = complaints(row.kind, row.document)
    if row.keyword is None:
        # Not expressible in JSON Schema: the schema accepts it, only Python refuses.
        assert found == []
    else:
        assert (row.where, row.keyword) in found, found


@pytest.mark.parametrize("row", bad_params())
@pytest.mark.parametrize("strict", [False, True])
def test_python_refuses_each_bad_document_naming_source_path_and_rule(
    row: Bad, strict: bool
) -> None:
    with pytest.raises(ContractError) as caught:
        parse_board_document(row.kind, row.document, source="doc.json", strict=strict)
    error = caught.value
    assert (error.source, error.json_path, error.rule) == ("doc.json", row.where, row.rule)
    assert str(error).startswith("doc.json: ")
    expected = {
        "version": ErrorCode.UNKNOWN_SCHEMA_VERSION,
        "required": ErrorCode.MISSING_REQUIRED_INPUT,
        # A done result whose criteria fail or lack evidence is well formed: the error-code
        # table gives ACCEPTANCE_FAILED ("acceptance criterion failed or missing evidence").
        "completion": ErrorCode.ACCEPTANCE_FAILED,
    }.get(row.rule, ErrorCode.SCHEMA_INVALID)
    assert error_code_for(error) is expected
    assert isinstance(error, UnknownVersionError) == (row.rule == "version")


def test_a_required_field_error_names_the_field() -> None:
    document = changed(PKT, "task.worklog_path", _DROP)
    with pytest.raises(
        ContractError, match=r"required field 'worklog_path' is missing at \$\.task"
    ):
        parse_packet(document, source="packet.json")


# -- versions -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind", ["assignment-packet", "orchestrator-output", "subagent-result", "handoff-bundle"]
)
def test_unknown_major_version_fails_closed_before_anything_else(kind: str) -> None:
    # A 2.x document may look nothing like a 1.x one: refused for its version alone, even
    # when the rest would not parse.
    newer = {"schema_version": "2.0.0", "run_id": 7, "something": "else"}
    with pytest.raises(UnknownVersionError, match=r"'2\.0\.0' has major 2") as caught:
        parse_board_document(kind, newer, source="next.json")
    assert caught.value.json_path == "$.schema_version"
    assert error_code_for(caught.value) is ErrorCode.UNKNOWN_SCHEMA_VERSION
    assert ("$.schema_version", "pattern") in complaints(kind, newer)
    # A newer minor or patch of the known major is read as before, by both.
    later = {**GOOD[kind], "schema_version": "1.4.2"}
    parse_board_document(kind, later, source="later.json", strict=True)
    assert complaints(kind, later) == []


@pytest.mark.parametrize(
    ("kind", "version"), [("submit", "scc.submit.v1"), ("verdict", "scc.verdict.v1")]
)
def test_seed_002_versions_are_exact(kind: str, version: str) -> None:
    for other in ("scc.submit.v2", "scc.verdict.v1" if kind == "submit" else "scc.submit.v1", ""):
        document = {"schema_version": other, "unrelated": True}
        with pytest.raises(UnknownVersionError, match=repr(version)):
            parse_board_document(kind, document, source="x.json")
    assert GOOD[kind]["schema_version"] == version


def test_built_objects_are_validated_too() -> None:
    result = board_rules.parse_subagent_result(RESULT, source="r")
    result.schema_version = "3.0.0"
    with pytest.raises(UnknownVersionError):
        validate_subagent_result(result, source="built")
    result.schema_version = "1.0.0"
    result.acceptance_check[0].status = CheckStatus.FAIL
    with pytest.raises(ContractError, match="'fail'; report 'blocked' or 'failed' instead"):
        validate_subagent_result(result, source="built")


# -- extension policy ---------------------------------------------------------------------


def with_unknown_keys(prefix: str) -> dict[str, Any]:
    """The assignment example with an extra key at three depths."""
    document = copy.deepcopy(ASSIGNMENT)
    document[f"{prefix}top"] = 1
    document["task"][f"{prefix}nested"] = {"deep": [1]}
    document["active_locks"][0][f"{prefix}in_list"] = "v"
    return document


def test_unknown_keys_are_ignored_unless_strict() -> None:
    document = with_unknown_keys("")
    assert parse_packet(document, source="p") == parse_packet(ASSIGNMENT, source="p")
    assert "top" in document, "the caller's document was changed"
    with pytest.raises(ContractError) as caught:
        parse_packet(document, source="p.json", strict=True)
    assert (caught.value.rule, caught.value.json_path) == ("additionalProperties", "$")
    assert "unknown field 'top'" in str(caught.value)
    assert error_code_for(caught.value) is ErrorCode.SCHEMA_INVALID
    nested_only = with_unknown_keys("")
    del nested_only["top"]
    with pytest.raises(ContractError) as caught:
        parse_packet(nested_only, source="p.json", strict=True)
    assert caught.value.json_path == "$.task"
    # The shipped schemas describe strict mode.
    assert {path for path, _ in complaints("assignment-packet", document)} == {
        "$",
        "$.task",
        "$.active_locks[0]",
    }


@pytest.mark.parametrize("strict", [False, True])
def test_x_keys_are_always_accepted(strict: bool) -> None:
    document = with_unknown_keys("x_")
    assert parse_packet(document, source="p", strict=strict) == parse_packet(ASSIGNMENT, source="p")
    assert complaints("assignment-packet", document) == []


def test_declared_x_fields_are_kept_and_checked() -> None:
    delta = parse_ledger_delta({**LEDGER_DELTA, "x_other": [1]}, source="ledger.ndjson")
    assert (delta.x_seq, delta.x_base_version, delta.x_create) == (
        7,
        0,
        structure(TASK_T13, Task, source="t"),
    )
    assert delta.status is TaskStatus.TODO
    # Unknown keys inside x_create are judged by Task's fields, as anywhere else.
    sloppy = changed(DLT, "x_create.colour", "red")
    assert parse_ledger_delta(sloppy, source="l") == parse_ledger_delta(LEDGER_DELTA, source="l")
    with pytest.raises(ContractError, match=r"'colour'.* at \$\.x_create"):
        parse_ledger_delta(sloppy, source="l", strict=True)
    later = LedgerDelta(
        task_id="T-13",
        status=TaskStatus.BLOCKED,
        owner="",
        reason="heartbeat lost",
        delta_id="T-13/1/blocked",
        timed_out=True,
        x_code=ErrorCode.TASK_TIMEOUT,
    )
    assert loads_strict(dump_board_document(later), source="line") == {
        "task_id": "T-13",
        "status": "blocked",
        "owner": "",
        "reason": "heartbeat lost",
        "delta_id": "T-13/1/blocked",
        "timed_out": True,
        "x_code": "TASK_TIMEOUT",
    }


# -- enums and schemas in step ------------------------------------------------------------


def test_enums_hold_the_seeds_codes() -> None:
    assert len(ErrorCode) == 14 and all(code.name == code.value for code in ErrorCode)
    assert len(FailCode) == 18 and all(code.name == code.value for code in FailCode)
    assert [s.value for s in TaskStatus] == [
        "todo",
        "in_progress",
        "blocked",
        "done",
        "failed",
        "canceled",
    ]
    assert [p.value for p in Priority] == ["low", "normal", "high", "critical"]


def test_schema_enums_are_the_python_enums() -> None:
    packet = board_schema("assignment-packet")["definitions"]
    output = board_schema("orchestrator-output")["definitions"]
    assert packet["task"]["properties"]["type"]["enum"] == [t.value for t in TaskType]
    assert packet["task"]["properties"]["priority"]["enum"] == [p.value for p in Priority]
    assert output["ledger_delta"]["properties"]["status"]["enum"] == [s.value for s in TaskStatus]
    assert output["blocker"]["properties"]["code"]["enum"] == [c.value for c in ErrorCode]
    worklog = board_schema("worklog-entry")["properties"]
    assert worklog["code"]["enum"] == [c.value for c in ErrorCode]


def test_importing_and_reading_good_documents_does_not_import_cattrs() -> None:
    # cattrs is slow to import; the fast path reads every good document without it.
    code = (
        "import json, sys\n"
        "from orchestrator.formats.board_rules import parse_board_document\n"
        "loaded = 'cattrs' in sys.modules\n"
        "for kind, document in json.loads(sys.stdin.read()).items():\n"
        "    parse_board_document(kind, document, source=kind, strict=True)\n"
        "print(loaded, 'cattrs' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(GOOD),
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["False", "False"]


# -- round trips --------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
MODELS = sorted(
    (
        value
        for name, value in vars(board).items()
        if attrs.has(value) and value.__module__ == board.__name__ and not name.startswith("_")
    ),
    key=lambda cls: cls.__name__,
)


def strategy_for(kind: Any) -> st.SearchStrategy[Any]:
    """Any instance of the type ``kind``, from its annotations (not only valid documents)."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is str:
        return st.text(max_size=20)
    if kind is int:
        return st.integers()
    if kind is bool:
        return st.booleans()
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return st.sampled_from(list(kind))
    if origin is list:
        return st.lists(strategy_for(args[0]), max_size=3)
    if origin is dict:
        return st.dictionaries(st.text(max_size=10), JSON_VALUES, max_size=3)
    if type(None) in args:
        (inner,) = (arg for arg in args if arg is not type(None))
        return st.none() | strategy_for(inner)
    assert isinstance(kind, type) and attrs.has(kind), kind
    attrs.resolve_types(kind)
    fields = {field.name: strategy_for(field.type) for field in attrs.fields(kind)}
    return st.builds(kind, **fields)


def test_every_model_is_covered() -> None:
    names = {cls.__name__ for cls in MODELS}
    assert {
        "Task",
        "LedgerDelta",
        "AssignmentPacket",
        "HandoffBundle",
        "Submit",
        "Verdict",
    } <= names
    assert len(MODELS) == 26


@pytest.mark.slow
@pytest.mark.parametrize("cls", MODELS, ids=lambda cls: cls.__name__)
@given(data=st.data())
def test_every_model_round_trips(cls: type[Any], data: st.DataObject) -> None:
    from orchestrator.formats.converter import converter

    obj = data.draw(strategy_for(cls))
    assert structure(unstructure(obj), cls, source="x") == obj  # the fast path
    assert converter.structure(converter.unstructure(obj), cls) == obj  # cattrs alone
    assert converter.unstructure(obj) == unstructure(obj)
    written = loads_strict(dump_board_document(obj), source="x")
    assert structure(written, cls, source="x") == obj
