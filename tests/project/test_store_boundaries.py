"""Where the choice of store and its SQL may live.

Every SQL statement is under ``adapters/postgres/``: the faces and the wings talk to a
store through its port (``RunStore``, ``BoardStore``), never in SQL. The commands choose
their store in one module, ``cli/run_store.py``, the only CLI module that names an
adapter of PostgreSQL; no command module keeps a mirror of another for the database.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "orchestrator"
ADAPTERS = REPO / "adapters"
POSTGRES = ADAPTERS / "postgres"
CLI = PACKAGE / "cli"
STORE_CHOICE = CLI / "run_store.py"

#: A statement, not a word: each keyword with what must follow it in SQL.
SQL = re.compile(
    r"""\b(
        select\s+(?:distinct\s+)?[\w.*]+(?:\s*,\s*[\w.*]+)*\s+from\s+\w
      | insert\s+into\s+\w
      | update\s+\w+\s+set\s+\w
      | delete\s+from\s+\w
      | create\s+(?:unique\s+)?(?:table|index|schema|view|function)\s
      | alter\s+table\s+\w
      | select\s+(?:pg_|to_regclass|count\(|1\b|coalesce\()
    )""",
    re.IGNORECASE | re.VERBOSE | re.DOTALL,
)


def python_files() -> Iterator[Path]:
    """The package's modules and the adapters' (``orchestrator/adapters`` is a link to
    ``adapters/``: walked once, from there)."""
    for root in (PACKAGE, ADAPTERS):
        for path in sorted(root.rglob("*.py")):
            if root == PACKAGE and path.is_relative_to(PACKAGE / "adapters"):
                continue
            yield path


def docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string nodes that are docstrings (prose, not statements)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def sql_in(path: Path) -> list[str]:
    """``file:line: text`` of every string of ``path`` shaped like an SQL statement."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    prose = docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(
                part.value if isinstance(part, ast.Constant) else " x " for part in node.values
            )
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) in prose:
                continue
            text = node.value
        else:
            continue
        if SQL.search(text):
            where = path.relative_to(REPO)
            found.append(f"{where}:{node.lineno}: {' '.join(text.split())[:80]}")
    return found


def test_the_sql_pattern_finds_statements_and_passes_prose() -> None:
    statements = [
        "update runs set status = 'cancelled' where run_id = %s",
        "select request_id from responses where run_id = %s",
        "select state, history from runs where run_id = %s",
        "insert into responses (run_id) values (%s)",
        "delete from requests where run_id = %s",
        "create table runs (run_id text)",
        "alter table runs add column x int",
        "select pg_notify(%s, %s)",
    ]
    assert all(SQL.search(s) for s in statements)
    prose = [
        "select a run to update from the list",
        "the host can delete the file, then create one again",
        "Choose one with --workflow; update it later",
    ]
    assert not any(SQL.search(s) for s in prose)


def test_no_sql_statement_outside_the_postgresql_adapter() -> None:
    found = [
        hit for path in python_files() if not path.is_relative_to(POSTGRES) for hit in sql_in(path)
    ]
    assert found == [], "SQL outside adapters/postgres/:\n" + "\n".join(found)


def test_the_postgresql_adapter_holds_sql_so_the_search_can_find_it() -> None:
    # The search finds what it looks for: the adapter's own statements.
    assert sql_in(POSTGRES / "runs.py")
    assert sql_in(POSTGRES / "store.py")


def imported_modules(path: Path) -> Iterator[tuple[int, str]]:
    """Every module ``path`` imports, anywhere in it, as an absolute dotted name."""
    package = ".".join(path.relative_to(REPO).with_suffix("").parts[:-1])
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            yield node.lineno, module
            for alias in node.names:
                yield node.lineno, f"{module}.{alias.name}"


def test_no_command_module_keeps_a_mirror_for_the_database() -> None:
    assert not (CLI / "store_runs.py").exists(), "cli/store_runs.py mirrors the commands"
    mirrors = [
        f"{path.relative_to(REPO)}:{line}: {module}"
        for path in sorted(CLI.rglob("*.py"))
        for line, module in imported_modules(path)
        if module.split(".")[-1] == "store_runs" or ".store_runs." in module
    ]
    assert mirrors == []


def test_only_the_store_choice_names_the_postgresql_adapter() -> None:
    found = [
        f"{path.relative_to(REPO)}:{line}: {module}"
        for path in sorted(CLI.rglob("*.py"))
        if path != STORE_CHOICE
        for line, module in imported_modules(path)
        if module.startswith("orchestrator.adapters.postgres")
    ]
    assert found == [], "only cli/run_store.py may import adapters.postgres:\n" + "\n".join(found)
    choice = {module for _, module in imported_modules(STORE_CHOICE)}
    assert any(m.startswith("orchestrator.adapters.postgres") for m in choice)
