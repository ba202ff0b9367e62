"""The wings and their import direction, as ``docs/architecture.md`` declares them.

Every import of every module of the package counts: at the top, inside a function (a lazy
import still runs), and under ``TYPE_CHECKING`` (a type a lower wing names from a higher
one ties them as surely). The table of wings is read from ``docs/architecture.md``, and
each wing's docstring must name the same wings, so the picture, the words and the code
cannot drift apart.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ARCHITECTURE_DOC = REPO / "docs" / "architecture.md"

#: Imports against the direction that the design names on purpose: none. (``ctx.dispatch``
#: reaches the board through the ``TaskDispatcher`` the package's face installs.)
DECLARED_EXCEPTIONS: set[tuple[str, str]] = set()

#: Third-party packages a wing may import, beyond the standard library. The formats could
#: be lifted into a package of their own; the rest may use the runtime dependencies, and
#: an optional extra only where its feature is (checked to be lazy below).
RUNTIME_DEPENDENCIES = {"attrs", "cattrs", "filelock", "tenacity"}
THIRD_PARTY = {"formats": {"attrs", "cattrs"}}
OPTIONAL_EXTRAS = {
    "orchestrator.evidence.otel": {"opentelemetry"},
    "orchestrator._pytest_plugin": {"pytest"},  # loaded by pytest alone
}
#: Subpackages that are an optional extra's feature as a whole: each of their modules may
#: import it, never at the top (the package is found before the driver is needed).
OPTIONAL_EXTRA_PACKAGES = {
    "orchestrator.adapters.postgres": {"psycopg", "psycopg_pool"},
    "orchestrator.cli.ui": {"starlette", "uvicorn"},
    # the official MCP SDK and what it brings (its types, its event loop, its HTTP server)
    "orchestrator.cli.mcp": {"mcp", "mcp_types", "anyio", "uvicorn"},
}


#: Modules of those subpackages that import their extra at the top: each is imported only
#: by its package, once the feature runs (a test below holds that the CLI does not load it).
EXTRA_AT_TOP = {"orchestrator.cli.ui.app", "orchestrator.cli.mcp.server"}


def extras_of(module: str) -> set[str]:
    """The optional extras ``module`` may import (lazily)."""
    for package, extras in OPTIONAL_EXTRA_PACKAGES.items():
        if module == package or module.startswith(f"{package}."):
            return extras
    return OPTIONAL_EXTRAS.get(module, set())


#: Modules outside the subpackages, by wing.
LOOSE_MODULES = {
    "orchestrator": "face",
    "orchestrator._errors": "base",
    "orchestrator._text": "base",
    "orchestrator._http": "base",
    "orchestrator._ports": "ports",
    "orchestrator._board_ports": "ports",
    "orchestrator.__main__": "face",
    "orchestrator._pytest_plugin": "face",
    "orchestrator.testing": "face",
    "orchestrator.otel": "face",
}


def read_wing_table(text: str) -> dict[str, set[str]]:
    """``{wing: wings it may import}`` from the "Wings" table of the architecture page."""
    table: dict[str, set[str]] = {}
    section = text.split("## Wings", 1)[1].split("\n## ", 1)[0]
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].startswith("**"):
            continue
        wing = cells[0].strip("*")
        allowed = cells[3]
        table[wing] = set() if allowed == "-" else {w.strip() for w in allowed.split(",")}
    return table


def wing_of(module: str) -> str | None:
    """The wing of an ``orchestrator`` module (``None`` for anything else)."""
    if module in LOOSE_MODULES:
        return LOOSE_MODULES[module]
    parts = module.split(".")
    if parts[0] != "orchestrator" or len(parts) < 2:
        return None
    return parts[1]


def module_name(path: Path) -> str:
    relative = path.relative_to(REPO).with_suffix("")
    parts = list(relative.parts)
    if parts[0] == "adapters":
        parts = ["orchestrator", *parts]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def package_modules() -> dict[str, Path]:
    files = [*(REPO / "orchestrator").rglob("*.py"), *(REPO / "adapters").rglob("*.py")]
    return {module_name(path): path for path in sorted(files)}


def imports_of(module: str, source: str, *, is_package: bool) -> Iterator[tuple[int, str]]:
    """``(line, imported module)`` for every import in ``source``, relative ones resolved.

    ``from X import y`` counts as ``X.y`` when that is a module of the package, else ``X``.
    """
    package = module if is_package else module.rsplit(".", 1)[0]
    known = set(package_modules())
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                yield node.lineno, candidate if candidate in known else target


def violations(
    module: str, source: str, table: dict[str, set[str]], *, is_package: bool = False
) -> list[str]:
    """What ``module`` imports against the table, one line each."""
    wing = wing_of(module)
    assert wing in table, f"{module}: wing {wing!r} is not in the architecture table"
    found = []
    for line, imported in imports_of(module, source, is_package=is_package):
        top = imported.split(".")[0]
        if imported == "orchestrator":
            # The package root (``__version__``): loaded before any of its modules is, so
            # naming it adds no dependency.
            continue
        if top == "orchestrator":
            target = wing_of(imported)
            if target is None or target == wing or target in table[wing]:
                continue
            if (module, imported) in DECLARED_EXCEPTIONS:
                continue
            found.append(f"{module}:{line} ({wing}) imports {imported} ({target})")
        elif top in {"__future__", *sys.stdlib_module_names, *extras_of(module)}:
            continue
        elif top not in THIRD_PARTY.get(wing, RUNTIME_DEPENDENCIES):
            found.append(f"{module}:{line} ({wing}) imports the third-party {imported}")
    return found


@pytest.fixture(scope="module")
def table() -> dict[str, set[str]]:
    return read_wing_table(ARCHITECTURE_DOC.read_text(encoding="utf-8"))


@pytest.mark.slow
def test_every_module_imports_only_downward(table: dict[str, set[str]]) -> None:
    found = []
    for module, path in package_modules().items():
        found += violations(
            module, path.read_text(encoding="utf-8"), table, is_package=path.name == "__init__.py"
        )
    assert found == []


def test_the_table_is_a_direction(table: dict[str, set[str]]) -> None:
    """No two wings may import each other, however indirectly: the order has no cycle."""
    for wing in table:
        reachable, frontier = set(), set(table[wing])
        while frontier:
            reachable |= frontier
            frontier = {w for f in frontier for w in table[f]} - reachable
        assert wing not in reachable, f"wing {wing} can reach itself through the table"
        assert reachable == table[wing], f"wing {wing} reaches {reachable - table[wing]} too"


def test_optional_extras_are_imported_only_when_their_feature_runs() -> None:
    modules = package_modules()
    lazy = {m: extras_of(m) for m in modules if extras_of(m) and m not in EXTRA_AT_TOP}
    for module, extras in lazy.items():
        if module == "orchestrator._pytest_plugin":
            continue
        tree = ast.parse(modules[module].read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                names.append(getattr(node, "module", None) or "")
                assert not any(n.split(".")[0] in extras for n in names), (module, node.lineno)


def test_every_module_belongs_to_a_declared_wing(table: dict[str, set[str]]) -> None:
    assert {wing_of(m) for m in package_modules()} == set(table)


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        # A lower wing importing a higher one, at the top, lazily or for types only.
        ("orchestrator.formats.bridge", "from ..engine.engine import Engine\n", "(engine)"),
        ("orchestrator.storage.durable", "def f():\n    from ..board import ledger\n", "(board)"),
        (
            "orchestrator.evidence.recorder",
            "if TYPE_CHECKING:\n    from orchestrator.engine.record import Pause\n",
            "(engine)",
        ),
        (
            "orchestrator.engine.engine",
            "from ..adapters.file_bridge import FileBridge\n",
            "(adapters)",
        ),
        ("orchestrator.board.board", "import orchestrator.cli.main\n", "(cli)"),
        (
            "orchestrator.engine.context",
            "def f():\n    from ..board.dispatch import run_dispatch\n",
            "(board)",
        ),
        ("orchestrator.formats.steps", "import tenacity\n", "third-party tenacity"),
        ("orchestrator.engine.engine", "import requests\n", "third-party requests"),
    ],
)
def test_the_check_catches_a_wrong_import(
    table: dict[str, set[str]], module: str, source: str, expected: str
) -> None:
    found = violations(module, source, table)
    assert len(found) == 1 and expected in found[0]


def test_the_check_allows_the_right_direction(table: dict[str, set[str]]) -> None:
    source = (
        "from ..formats.bridge import AgentRequest\n"
        "from ..storage import durable\n"
        "from .._errors import ContractError\n"
        "import attrs, json\n"
        "def f():\n    from ..evidence.recorder import Recorder\n"
    )
    assert violations("orchestrator.engine.context", source, table) == []


def declared_in_docstring(path: Path) -> set[str]:
    """The wings a wing's docstring says it may import (its "May import:" sentence)."""
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    match = re.search(r"May import: (.*?)\.(\s|$)", docstring, re.S)
    assert match is not None, f"{path}: the docstring has no 'May import:' sentence"
    sentence = match.group(1)
    if "every wing" in sentence:
        return {"every wing"}
    named = set()
    for name in re.findall(r"``([\w.]+)``", sentence):
        name = name.removeprefix("orchestrator.")
        named.add(LOOSE_MODULES.get(f"orchestrator.{name}", name))
    return named


@pytest.mark.parametrize(
    "wing", ["formats", "storage", "evidence", "engine", "board", "evals", "cli"]
)
def test_each_wing_docstring_agrees_with_the_table(table: dict[str, set[str]], wing: str) -> None:
    declared = declared_in_docstring(REPO / "orchestrator" / wing / "__init__.py")
    if declared == {"every wing"}:
        assert table[wing] == set(table) - {wing, "face"}
    else:
        assert declared == table[wing]


def test_the_adapters_and_ports_docstrings_agree_with_the_table(
    table: dict[str, set[str]],
) -> None:
    assert declared_in_docstring(REPO / "adapters" / "__init__.py") == table["adapters"]
    assert declared_in_docstring(REPO / "orchestrator" / "_ports.py") == table["ports"]


def test_the_picture_names_every_wing(table: dict[str, set[str]]) -> None:
    text = ARCHITECTURE_DOC.read_text(encoding="utf-8")
    picture = text.split("```text", 1)[1].split("```", 1)[0]
    for wing in table:
        assert re.search(rf"\b{wing}\b", picture), f"the picture lacks {wing}"


def test_the_cli_loads_no_optional_extra_until_a_command_needs_it() -> None:
    """Every command's parser built, as ``orchestrate COMMAND --help`` does: none of the
    extras (the web app, the PostgreSQL driver, OpenTelemetry) is imported."""
    import subprocess

    code = (
        "import sys\n"
        "from orchestrator.cli import main\n"
        "for name in main.COMMANDS:\n"
        "    main.build_parser(name)\n"
        "loaded = {m.split('.')[0] for m in sys.modules}\n"
        "print(sorted(loaded & {'starlette', 'uvicorn', 'psycopg', 'opentelemetry', 'mcp'}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert done.stdout.strip() == "[]"
