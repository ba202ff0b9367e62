"""The board wing's layout: its docstring names each of its modules, no module reads
another object's private attributes, and :class:`Board` keeps its public face though it
is built from a module per role."""

from __future__ import annotations

import ast
from pathlib import Path

import orchestrator.board
from orchestrator.board.board import Board

BOARD_PACKAGE = Path(orchestrator.board.__file__).parent

#: What callers of :class:`Board` use (the CLI, ``ctx.dispatch``, the adapters' tests).
BOARD_PUBLIC = {
    "append_worklog",
    "assign",
    "create",
    "create_tasks",
    "directory",
    "fail_attempt",
    "handoff",
    "heartbeat",
    "info",
    "last_heartbeat",
    "location",
    "lock_table",
    "now",
    "open_or_make",
    "packet_location",
    "packet_path",
    "packet_text",
    "ready",
    "requeue_or_fail",
    "run_id",
    "set_status",
    "settle_worklogs",
    "state",
    "submit",
    "sweep",
    "watchdog",
    "workspace",
    "worklog",
    "worklog_name",
    "worklog_path",
}


def modules() -> list[str]:
    return sorted(p.stem for p in BOARD_PACKAGE.glob("*.py") if p.stem != "__init__")


def test_the_package_docstring_names_each_module() -> None:
    docstring = orchestrator.board.__doc__ or ""
    missing = [name for name in modules() if f"``{name}.py``" not in docstring]
    assert missing == [], f"orchestrator/board/__init__.py does not name {missing}"


def test_no_module_reads_another_objects_private_attributes() -> None:
    """``obj._name`` only on ``self`` or ``cls``: the parts talk through public methods."""
    found = []
    for name in modules():
        if name == "dispatch":
            continue  # ctx.dispatch's reach into the engine goes with the engine's parts
        path = BOARD_PACKAGE / f"{name}.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
            ):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert found == []


def test_the_board_keeps_its_public_face(tmp_path: Path) -> None:
    public = {name for name in dir(Board) if not name.startswith("_")}
    assert public == BOARD_PUBLIC
    assert {"store", "clock", "ledger"} <= set(vars(Board(tmp_path / ".board")))
