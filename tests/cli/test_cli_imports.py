"""The command line's modules import one another without a cycle.

Every import of ``orchestrator/cli/**`` counts, at the top of a module or inside a
function: a cycle through imports made only when a command runs is still one module that
cannot be read, or changed, without the other. Command modules share what they need
through ``cli.common``; only the entry points reach ``cli.main``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CLI = Path(__file__).resolve().parents[2] / "orchestrator" / "cli"
PACKAGE = "orchestrator.cli"
# The package's console-script shim and the reference page's generator read the parser.
MAY_IMPORT_MAIN = {f"{PACKAGE}", f"{PACKAGE}.reference"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(CLI).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((PACKAGE, *parts))


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(CLI.rglob("*.py"))}


def _imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The CLI's modules that ``name`` imports anywhere in its text."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1 if node.level else 0):
                base = base.rpartition(".")[0]
            if node.level:
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            # ``from . import common`` names a module; ``from .common import x`` a name in one
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            # A package is imported before its modules anyway: not an edge of its own.
            if target and target != name and not name.startswith(f"{target}."):
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imported(name, path, known) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan), each as a cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            part = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                part.append(top)
                if top == node:
                    break
            if len(part) > 1:
                found.append(_a_cycle(graph, set(part)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _a_cycle(graph: dict[str, set[str]], part: set[str]) -> list[str]:
    """One closed path through ``part``, to print: start, ..., start."""
    start = min(part)
    path, seen = [start], {start}
    while True:
        options = sorted(graph[path[-1]] & part)
        if start in options and len(path) > 1:
            return [*path, start]
        fresh = [o for o in options if o not in seen]
        if not fresh:
            return [*path, options[0]]
        path.append(fresh[0])
        seen.add(fresh[0])


def test_the_graph_sees_imports_inside_functions() -> None:
    graph = import_graph()
    # run.py imports run_commands only inside the commands, when one runs
    assert f"{PACKAGE}.run_commands" in graph[f"{PACKAGE}.run"]
    assert f"{PACKAGE}.common" in graph[f"{PACKAGE}.run"]
    assert f"{PACKAGE}.instance" in graph[f"{PACKAGE}.ui.places"]


def test_a_cycle_is_found_and_printed() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_cli_has_no_import_cycle() -> None:
    found = cycles(import_graph())
    if found:
        pytest.fail(
            "import cycles in orchestrator/cli:\n" + "\n".join(" -> ".join(c) for c in found)
        )


def test_only_the_entry_points_import_main() -> None:
    main = f"{PACKAGE}.main"
    importers = sorted(name for name, targets in import_graph().items() if main in targets)
    assert set(importers) <= MAY_IMPORT_MAIN, importers


def test_the_package_docstring_names_every_module() -> None:
    import orchestrator.cli

    text = " ".join((orchestrator.cli.__doc__ or "").split())
    modules = sorted(p.stem for p in CLI.glob("*.py") if p.stem != "__init__")
    modules += sorted(f"{p.name}/" for p in CLI.iterdir() if (p / "__init__.py").exists())
    missing = [name for name in modules if f"``{name}``" not in text]
    assert not missing, f"orchestrator/cli/__init__.py does not name {missing}"
