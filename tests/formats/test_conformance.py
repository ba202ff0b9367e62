"""One rule, one verdict: every task board document in the fixtures, judged by
``orchestrate check`` and by the board operation that consumes it, gets the same allow
and the same error code, and the one ``tests/fixtures/conformance/cases.json`` lists.

The operations: a task goes to ``board create``; a packet to the board's create and
assign (its active locks held by other tasks, its task created, assigned with its
context) and then to the board's own reading of a packet on disk (an assign repeated
after a crash reads the packet back); a subagent result or ``submit.json`` to ``board
submit`` (the validator judges it against the packet the board wrote, and alone); a
worklog entry to ``board worklog``; a ledger (NDJSON) to the board's reading of its ledger
file, by the watchdog. Task inputs and verdicts no board operation takes
from outside; the validator alone judges them.
"""

from __future__ import annotations

import ast
import copy
import json
import re
import typing
import uuid
from pathlib import Path
from typing import Any

import attrs
import pytest
from jsonschema import Draft7Validator, FormatChecker

from orchestrator._errors import BoardError, ContractError
from orchestrator.board.board import Board
from orchestrator.formats.board_documents import ContextItem, Task
from orchestrator.formats.board_rules import error_code_for, parse_packet
from orchestrator.formats.bridge_codec import parse_response, parse_state
from orchestrator.formats.convert import structure
from support.cli import in_process

FIXTURES = Path(__file__).parents[1] / "fixtures"
CASES: dict[str, dict[str, str]] = json.loads((FIXTURES / "conformance" / "cases.json").read_text())
BASE = json.loads((FIXTURES / "seed003" / "minimal-assignment-example.json").read_text())
OWNER = "coder"
# Where board documents live among the fixtures; every JSON file there is a case.
DOCUMENT_DIRS = ("seed002", "seed003", "conformance")
CHECK_KIND = {"worklog": "worklog", "task-input": "task-input", "verdict": "verdict"}
BOARD_KINDS = ("task", "packet", "result", "submit", "worklog", "ledger")


def verdict_of(kind: str, raw: bytes, *flags: str | Path) -> dict[str, Any]:
    """What ``orchestrate check`` prints."""
    code, out, err = in_process("check", kind, *flags, stdin=raw)
    verdict: dict[str, Any] = json.loads(out)
    assert err == "" and code == (0 if verdict["allow"] else 1), (out, err)
    assert verdict["allow"] is (verdict["code"] == "OK"), verdict
    return verdict


def check(kind: str, raw: bytes, *flags: str | Path) -> str:
    """The code ``orchestrate check`` gives (``OK`` when it allows)."""
    return str(verdict_of(kind, raw, *flags)["code"])


def refusal(code: int, out: str, err: str) -> str:
    """The code a board command's refusal names; ``OK`` when it succeeded."""
    if code == 0:
        return "OK"
    match = re.match(r"orchestrate: error: ([A-Z_]+): ", err)
    if match is not None:
        return match.group(1)
    verdict = json.loads(out)  # board submit prints the verdict of a refused result
    return str(verdict["x_code"])


def attempt(action: Any) -> str:
    """The code the board gives when ``action`` is refused; ``OK`` when it is not."""
    try:
        action()
    except BoardError as exc:
        return exc.code
    except ContractError as exc:
        return error_code_for(exc).value
    return "OK"


# -- the board operations ----------------------------------------------------------------


def new_board(root: Path) -> Board:
    return Board.create(
        root / ".board", run_id=BASE["run_id"], objective=BASE["global_objective"], workspace=root
    )


def task_data(task_id: str, lock_scope: list[str]) -> dict[str, Any]:
    return {**BASE["task"], "task_id": task_id, "lock_scope": lock_scope, "forbidden_scope": []}


def board_create(root: Path, raw: bytes) -> str:
    new_board(root)
    return refusal(*in_process("board", "create", "--workdir", root, stdin=b"[" + raw + b"]"))


def board_assign(root: Path, raw: bytes) -> str:
    """The packet's world made on a board, its task assigned, then the packet itself read
    back by the board as the packet of that attempt."""
    board = new_board(root)
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    usable = isinstance(data, dict) and isinstance(data.get("task"), dict)
    packet: dict[str, Any] = data if usable else BASE  # type: ignore[assignment]
    for index, lock in enumerate(packet.get("active_locks") or []):
        if not isinstance(lock, dict) or lock.get("task_id") == packet["task"].get("task_id"):
            continue
        if lock.get("active") is False:
            continue
        holder = json.dumps(task_data(str(lock.get("task_id")), [lock.get("resource")]))
        made = refusal(
            *in_process("board", "create", "--workdir", root, stdin=f"[{holder}]".encode())
        )
        if made != "OK":
            return made
        held = refusal(*in_process("board", "assign", "--workdir", root, "--task", lock["task_id"],
                            "--owner", f"other-{index}"))  # fmt: skip
        if held != "OK":
            return held
    created = refusal(
        *in_process(
            "board", "create", "--workdir", root, stdin=json.dumps([packet["task"]]).encode()
        )
    )
    if created != "OK":
        return created
    task_id = packet["task"]["task_id"]
    context = [
        item
        for item in (packet.get("context_package") or [])
        if isinstance(item, dict) and item.get("kind") != "constraint"
    ]
    items = structure(context, list[ContextItem], source="context_package")
    assigned = attempt(lambda: board.assign([task_id], owner=OWNER, context=items))
    if assigned != "OK":
        return assigned
    board.packet_path(task_id, 1).write_bytes(raw)  # the packet on disk is this document
    return refusal(
        *in_process("board", "assign", "--workdir", root, "--task", task_id, "--owner", OWNER)
    )


def assigned_board(root: Path) -> Path:
    """A board with the base packet's task in progress; the path of its packet."""
    root.mkdir(exist_ok=True)
    board = new_board(root)
    holder = task_data("T-9", ["src/api.py"])
    assert (
        refusal(
            *in_process("board", "create", "--workdir", root, stdin=json.dumps([holder]).encode())
        )
        == "OK"
    )
    board.assign(["T-9"], owner="other")
    board.create_tasks([structure(BASE["task"], Task, source="the base packet's task")])
    board.assign(["T-12"], owner=OWNER)
    for name in ("report.md", "selftest.log", "patch.diff", "submit.json"):
        (root / "out").mkdir(exist_ok=True)
        (root / "out" / name).write_text("evidence\n")
    (root / "out" / "evidence").mkdir(exist_ok=True)
    return board.packet_path("T-12", 1)


def board_submit(root: Path, raw: bytes) -> str:
    assigned_board(root)
    return refusal(*in_process("board", "submit", "--workdir", root, "--task", "T-12", stdin=raw))


def board_worklog(root: Path, raw: bytes) -> str:
    assigned_board(root)
    args = ("board", "worklog", "--workdir", root, "--task", "T-12", "--json-stdin")
    return refusal(*in_process(*args, stdin=raw))


def board_watchdog(root: Path, raw: bytes) -> str:
    """The ledger as a board's ledger file, read by the watchdog (and timed out)."""
    board = new_board(root)
    (board.directory / "ledger.ndjson").write_bytes(raw)
    return refusal(
        *in_process("board", "watchdog", "--workdir", root, "--now", "2030-01-01T00:00:00Z")
    )


OPERATIONS = {
    "task": board_create,
    "packet": board_assign,
    "result": board_submit,
    "submit": board_submit,
    "worklog": board_worklog,
    "ledger": board_watchdog,
}


# -- the tests ---------------------------------------------------------------------------


def test_every_board_document_among_the_fixtures_is_a_case() -> None:
    found = {
        str(path.relative_to(FIXTURES))
        for directory in DOCUMENT_DIRS
        for pattern in ("*.json", "*.ndjson")
        for path in (FIXTURES / directory).glob(pattern)
        if path.name != "cases.json" and not path.name.endswith(".schema.json")
    }
    assert found == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_validator_gives_the_listed_verdict(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    case, raw = CASES[name], (FIXTURES / name).read_bytes()
    kind = CHECK_KIND.get(case["kind"], case["kind"])
    if case["kind"] in ("result", "submit"):
        packet = assigned_board(tmp_path)
        monkeypatch.chdir(tmp_path)  # where a submit.json's artifacts are looked for
        assert check(kind, raw, "--packet", packet) == case["code"]
        assert check(kind, raw) == case["alone"]
    else:
        verdict = verdict_of(kind, raw)
        assert verdict["code"] == case["code"]
        assert verdict.get("details", {}).get("cause") == case.get("cause"), verdict


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if c["kind"] in BOARD_KINDS))
def test_the_board_gives_the_validators_verdict(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    case, raw = CASES[name], (FIXTURES / name).read_bytes()
    kind = CHECK_KIND.get(case["kind"], case["kind"])
    if case["kind"] in ("result", "submit"):
        packet = assigned_board(tmp_path / "check")
        monkeypatch.chdir(tmp_path / "check")
        validator = check(kind, raw, "--packet", packet)
    else:
        validator = check(kind, raw)
    (tmp_path / "board").mkdir()
    monkeypatch.chdir(tmp_path / "board")
    assert OPERATIONS[case["kind"]](tmp_path / "board", raw) == validator == case["code"]


def test_the_packet_validator_reads_the_packets_the_board_writes(tmp_path: Path) -> None:
    packet = assigned_board(tmp_path)
    assert check("packet", packet.read_bytes()) == "OK"
    parse_packet(json.loads(packet.read_bytes()), source=str(packet))


# -- every problem at once ----------------------------------------------------------------

SEED004 = FIXTURES / "seed004"


def test_a_state_from_an_older_tool_names_its_unknown_and_missing_fields_together(
    tmp_path: Path,
) -> None:
    """Unknown fields, missing ones, nulls and a wrong type deep inside, in one refusal."""
    state = json.loads((SEED004 / "example-state.json").read_text())
    for name in ("checkpoint_name", "created_at"):
        del state[name]
    state.update(legacy_cursor=3, legacy_owner="ops", template_name=None)
    state["completed_phases"][0]["phase"] = "one"
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    with pytest.raises(ContractError) as refused:
        parse_state(state, source=str(path))
    problems = [
        (refused.value.json_path, refused.value.rule),
        *((p, r) for p, r, _ in refused.value.also),
    ]
    assert problems == [
        ("$.template_name", "type"),
        ("$", "additionalProperties"),
        ("$", "required"),
        ("$.completed_phases[0].phase", "type"),
    ]
    message = str(refused.value)
    for words in ("template_name is null", "'legacy_cursor', 'legacy_owner'",
                  "required fields 'checkpoint_name', 'created_at' are missing",
                  "expected an integer, got a string at $.completed_phases[0].phase"):  # fmt: skip
        assert words in message
    # orchestrate validate says the same, in one line, naming the file
    code, out, err = in_process("validate", path)
    assert code == 1 and out == "" and err.count("\n") == 1
    assert str(path) in err and "'legacy_cursor'" in err and "'created_at' are missing" in err


def test_a_board_document_names_every_structural_problem_together() -> None:
    result = json.loads((FIXTURES / "seed003" / "minimal-result-example.json").read_text())
    del result["schema_version"], result["worklog_path"]
    result["comment"] = "hand-written"
    result["changes"][0]["action"] = 3
    verdict = verdict_of("result", json.dumps(result).encode(), "--strict")
    assert verdict["code"] == "MISSING_REQUIRED_INPUT"
    for words in ("'schema_version' is missing", "unknown field 'comment'",
                  "expected a string, got a number at $.changes[0].action",
                  "'worklog_path' is missing"):  # fmt: skip
        assert words in verdict["reason"]


def test_every_null_of_a_response_is_named_with_its_other_problems() -> None:
    response = json.loads((SEED004 / "example-success-response.json").read_text())
    response.update(error_type=None, duration_seconds=None, surprise=1)
    response["metadata"] = {"model": None, "confidence": None}
    with pytest.raises(ContractError) as refused:
        parse_response(response, source="response.json")
    message = str(refused.value)
    assert "duration_seconds, error_type are null" in message
    assert "model, confidence are null" in message and "unknown field 'surprise'" in message


def test_a_stored_request_must_carry_its_own_request_id() -> None:
    state = json.loads((FIXTURES / "replay" / "template-create" / "state.json").read_text())
    state["agent_requests"][0]["x_request"]["request_id"] = str(uuid.uuid4())
    with pytest.raises(ContractError) as refused:
        parse_state(state, source="state.json")
    assert (refused.value.rule, refused.value.json_path) == ("consistency", "$.agent_requests[0]")


# -- the conformance table ----------------------------------------------------------------

TABLE = (Path(__file__).parents[2] / "docs" / "conformance.md").read_text()


def rule_names_in(directory: Path) -> set[str]:
    """Every rule name a ContractError is raised with under ``directory``."""
    names = set()
    for path in directory.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            for keyword in node.keywords:
                if keyword.arg == "rule" and isinstance(keyword.value, ast.Constant):
                    names.add(keyword.value.value)
            called = node.func.attr if isinstance(node.func, ast.Attribute) else ""
            last = node.args[-1] if node.args else None
            if called == "fail" and isinstance(last, ast.Constant) and isinstance(last.value, str):
                names.add(last.value)
    return names


def test_the_conformance_table_names_every_rule_of_the_formats() -> None:
    rules = rule_names_in(Path(__file__).parents[2] / "orchestrator" / "formats")
    named = set(re.findall(r"`([a-zA-Z-]+)`", TABLE))
    assert rules - named == set()


def test_every_test_and_fixture_the_table_names_exists() -> None:
    root = Path(__file__).parents[2]
    tests = re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`", TABLE)
    assert len(tests) > 20
    for file, name in tests:
        text = (root / file).read_text()
        assert not name or f"def {name}(" in text, f"{file}::{name}"
    fixtures = re.findall(r"`(conformance/[\w.-]+)`", TABLE)
    assert set(fixtures) <= set(CASES), set(fixtures) - set(CASES)
    assert len(set(fixtures)) > 40


# -- null in every optional field, every family --------------------------------------------


def null_paths(document: dict[str, Any], cls: type, path: tuple[Any, ...] = ()) -> Any:
    """The path of every field of ``cls`` (there in ``document`` or not), and of the
    fields of the objects the document holds, at any depth."""
    attrs.resolve_types(cls)
    for field in attrs.fields(cls):
        if field.name == "extra":  # an open object: any member is the writer's
            continue
        yield (*path, field.name)
        value = document.get(field.name)
        kinds = [a for a in typing.get_args(field.type) if a is not type(None)] or [field.type]
        kind = kinds[0]
        if attrs.has(kind) and isinstance(value, dict):
            yield from null_paths(value, kind, (*path, field.name))
        elif typing.get_origin(kind) is list and value and isinstance(value[0], dict):
            (item,) = typing.get_args(kind)
            if attrs.has(item):
                yield from null_paths(value[0], item, (*path, field.name, 0))


def with_null(document: Any, path: tuple[Any, ...]) -> Any:
    changed = copy.deepcopy(document)
    target = changed
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = None
    return changed


def null_cases() -> list[Any]:
    from test_board_contracts import GOOD as BOARD_GOOD
    from test_steps import GOOD as STEPS_GOOD
    from test_steps import PARSERS as STEPS_PARSERS

    from orchestrator.formats import board_documents as board
    from orchestrator.formats import bridge, steps
    from orchestrator.formats.board_rules import board_schema, parse_board_document
    from support.bridge_documents import GOOD_BASES, SEED_SCHEMAS, python_verdict

    board_classes = {
        "assignment-packet": board.AssignmentPacket,
        "orchestrator-output": board.OrchestratorOutput,
        "subagent-result": board.SubagentResult,
        "ledger-delta": board.LedgerDelta,
        "worklog-entry": board.WorklogEntry,
        "handoff-bundle": board.HandoffBundle,
        "validator-output": board.ValidatorOutput,
        "task-input": board.TaskInput,
        "submit": board.Submit,
        "verdict": board.Verdict,
    }
    families: list[tuple[str, str, dict[str, Any], type, Any, Any]] = [
        ("board", kind, BOARD_GOOD[kind], cls, lambda k=kind: board_schema(k),
         lambda d, k=kind: parse_board_document(k, d, source=k))
        for kind, cls in board_classes.items()
    ]  # fmt: skip
    bridge_classes = {
        "request": bridge.AgentRequest,
        "response": bridge.AgentResponse,
        "state": bridge.CheckpointState,
    }
    families += [
        ("bridge", kind, GOOD_BASES[kind], cls, lambda k=kind: SEED_SCHEMAS[k],
         lambda d, k=kind: python_verdict(k, d))
        for kind, cls in bridge_classes.items()
    ]  # fmt: skip
    families += [
        ("steps", kind, STEPS_GOOD[kind], cls, lambda k=kind: steps.steps_schema(k),
         lambda d, k=kind: STEPS_PARSERS[k](d, source=k))
        for kind, cls in (("results", steps.Results), ("event", steps.Event))
    ]  # fmt: skip
    return [
        pytest.param(
            document, path, schema, parse, id=f"{family}-{kind}-{'.'.join(map(str, path))}"
        )
        for family, kind, document, cls, schema, parse in families
        for path in null_paths(document, cls)
    ]


@pytest.mark.parametrize(("document", "path", "schema", "parse"), null_cases())
def test_null_in_any_field_is_refused_by_the_schema_and_the_code_alike(
    document: dict[str, Any], path: tuple[Any, ...], schema: Any, parse: Any
) -> None:
    """No format gives a field a null (an optional field is left out): the shipped
    schema and the Python side both refuse it, naming the field."""
    bad = with_null(document, path)
    validator = Draft7Validator(schema(), format_checker=FormatChecker())
    assert list(validator.iter_errors(bad)), "the schema accepts a null"
    with pytest.raises(ContractError) as refused:
        parse(bad)
    assert str(path[-1]) in str(refused.value)
