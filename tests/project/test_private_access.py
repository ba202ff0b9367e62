"""No module reaches into another module's private attributes.

A class's ``_name`` attributes are its own: a module that needs one gets a public method,
property or Protocol instead (``/docs/architecture.md``). The rule, read from the code
with ``ast``: an attribute access ``x._name`` (one leading underscore, not a dunder) is
an access across modules unless

- ``x`` is ``self``, ``cls`` or ``super()``;
- ``x`` is a module the same file imports (``os._exit``, a module's own helpers); or
- a class defined in the same module defines ``_name`` (a method, a class attribute, or
  an assignment to ``self._name``): two objects of one class may read each other.

A named tuple's ``_replace`` and its kin, and an enum's ``_sunder_`` names, are public.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: (file, attribute): the two reaches into the standard library's own private names,
#: which it offers no public way around (argparse lists a parser's arguments only as
#: ``_actions``; ctypes names its scalar types' base only as ``_SimpleCData``).
ALLOWED: set[tuple[str, str]] = {
    ("orchestrator/cli/reference.py", "_actions"),  # argparse's parser
    ("orchestrator/storage/durable.py", "_SimpleCData"),  # ctypes
}

#: The public methods of a named tuple, underscored so as not to clash with its fields.
NAMED_TUPLE_API = {"_replace", "_asdict", "_fields", "_make", "_field_defaults"}


def _is_private(name: str) -> bool:
    """``_name``: not a dunder, not an enum's ``_sunder_`` name, not a named tuple's API."""
    if name.startswith("__") or name in NAMED_TUPLE_API:
        return False
    return name.startswith("_") and not (name.endswith("_") and len(name) > 2)


def _imported_modules(tree: ast.Module) -> set[str]:
    """Names bound by ``import x`` / ``import x as y`` / ``from . import module``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                bound = alias.asname or alias.name
                if bound[:1].islower():  # a module (classes are capitalised)
                    names.add(bound)
    return names


def _own_attributes(tree: ast.Module) -> set[str]:
    """The private attributes the classes of this module define."""
    own: set[str] = set()
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for node in ast.walk(cls):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                own.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for part in ast.walk(target):
                        if isinstance(part, ast.Name):
                            own.add(part.id)
                        elif (
                            isinstance(part, ast.Attribute)
                            and isinstance(part.value, ast.Name)
                            and part.value.id in ("self", "cls")
                        ):
                            own.add(part.attr)
    return {name for name in own if _is_private(name)}


def _is_super_call(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"
    )


def accesses_across_modules(source: str) -> list[tuple[int, str]]:
    """``(line, attribute)`` of each access to another module's private attribute."""
    tree = ast.parse(source)
    modules = _imported_modules(tree)
    own = _own_attributes(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not _is_private(node.attr):
            continue
        value = node.value
        if isinstance(value, ast.Name) and value.id in {"self", "cls", *modules}:
            continue
        if _is_super_call(value) or node.attr in own:
            continue
        found.append((node.lineno, node.attr))
    return sorted(found)


def package_files() -> list[Path]:
    return sorted([*(REPO / "orchestrator").rglob("*.py"), *(REPO / "adapters").rglob("*.py")])


def test_the_rule_catches_a_reach_into_another_object() -> None:
    source = (
        "import os\n"
        "from . import engine as engine_module\n"
        "class Ctx:\n"
        "    def __init__(self, engine):\n"
        "        self._engine = engine\n"
        "    def go(self, other):\n"
        "        os._exit(0)\n"
        "        engine_module._helper()\n"
        "        super()._setup()\n"
        "        other._engine\n"
        "        return self._engine._require_state()\n"
        "def dispatch(ctx):\n"
        "    return ctx._engine.board_store, ctx.engine._fatal\n"
    )
    assert accesses_across_modules(source) == [(11, "_require_state"), (13, "_fatal")]


def test_no_module_reads_another_modules_private_attributes() -> None:
    offenders = []
    seen: set[tuple[str, str]] = set()
    for path in package_files():
        relative = path.relative_to(REPO).as_posix()
        for line, attribute in accesses_across_modules(path.read_text(encoding="utf-8")):
            if (relative, attribute) in ALLOWED:
                seen.add((relative, attribute))
                continue
            offenders.append(f"{relative}:{line}: ._{attribute.lstrip('_')}")
    assert not offenders, "private attributes read across modules:\n" + "\n".join(offenders)
    assert seen == ALLOWED, f"allowed but no longer found: {sorted(ALLOWED - seen)}"
