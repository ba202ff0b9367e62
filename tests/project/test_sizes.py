"""Rooms stay small: no module of the package over 800 lines, no function over 80. The
test prints the largest of each, so a run shows how close the house is to its limits."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODULE_LIMIT = 800
FUNCTION_LIMIT = 80


def package_modules() -> list[Path]:
    """Every module of ``orchestrator/`` and ``adapters/`` (the link
    ``orchestrator/adapters`` is not followed: its modules are counted once)."""
    modules = [
        path
        for path in (REPO / "orchestrator").rglob("*.py")
        if "adapters" not in path.relative_to(REPO / "orchestrator").parts
    ]
    return sorted([*modules, *(REPO / "adapters").rglob("*.py")])


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def function_sizes(path: Path) -> list[tuple[int, str]]:
    """``(lines, "file:line name")`` for every function and method of ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    where = path.relative_to(REPO)
    return [
        (node.end_lineno - node.lineno + 1, f"{where}:{node.lineno} {node.name}")
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno
    ]


def test_no_module_is_over_800_lines() -> None:
    sizes = sorted((line_count(p), str(p.relative_to(REPO))) for p in package_modules())
    largest = sizes[-1]
    print(f"largest module: {largest[1]}, {largest[0]} lines (limit {MODULE_LIMIT})")
    over = [f"{name}: {count}" for count, name in sizes if count > MODULE_LIMIT]
    assert not over, f"modules over {MODULE_LIMIT} lines: {over}"


def test_no_function_is_over_80_lines() -> None:
    sizes = sorted(size for path in package_modules() for size in function_sizes(path))
    largest = sizes[-1]
    print(f"largest function: {largest[1]}, {largest[0]} lines (limit {FUNCTION_LIMIT})")
    over = [f"{name}: {count}" for count, name in sizes if count > FUNCTION_LIMIT]
    assert not over, f"functions over {FUNCTION_LIMIT} lines: {over}"
