"""Each package's docstring is a map of its folder: it names every module and every
subpackage there as code (``name``, or a dotted path ending in it), so a reader finds
where a thing lives from the package's opening."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def packages() -> list[Path]:
    """Every package folder of ``orchestrator/`` and ``adapters/`` (the link
    ``orchestrator/adapters`` is the folder ``adapters/``, taken once)."""
    found = {
        init.parent.resolve()
        for top in ("orchestrator", "adapters")
        for init in (ROOT / top).rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    return sorted(found)


def members(package: Path) -> list[str]:
    """The modules and subpackages in ``package``'s folder, by name."""
    names = [path.stem for path in package.glob("*.py") if path.name != "__init__.py"]
    names += [path.name for path in package.iterdir() if (path / "__init__.py").is_file()]
    return sorted(names)


def named_in(package: Path) -> set[str]:
    """The names the package's docstring writes as code: each part of what stands
    between backquotes (``orchestrator.storage.durable`` names ``durable``)."""
    text = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    return {name for span in re.findall(r"`+([^`]+)`+", text) for name in re.findall(r"\w+", span)}


def test_every_package_is_found() -> None:
    found = {path.relative_to(ROOT).as_posix() for path in packages()}
    assert {"orchestrator", "orchestrator/storage", "adapters", "adapters/postgres"} <= found


@pytest.mark.parametrize("package", packages(), ids=lambda path: path.relative_to(ROOT).as_posix())
def test_the_package_docstring_names_each_module_of_its_folder(package: Path) -> None:
    named = named_in(package)
    missing = [name for name in members(package) if name not in named]
    assert not missing, f"{package.relative_to(ROOT)}/__init__.py does not name {missing}"


def shared_names() -> dict[str, set[str]]:
    """Module names (files, not subpackages) held by more than one package: name -> the
    packages, as folders relative to ``orchestrator/`` (its top level is ``the face``)."""
    held: dict[str, set[str]] = {}
    for package in packages():
        where = package.relative_to(ROOT).as_posix()
        where = "the face" if where == "orchestrator" else where.removeprefix("orchestrator/")
        for name in (path.stem for path in package.glob("*.py") if path.name != "__init__.py"):
            held.setdefault(name, set()).add(where if where == "the face" else f"{where}/")
    return {name: places for name, places in held.items() if len(places) > 1}


def explained_names() -> dict[str, set[str]]:
    """The table of ``docs/architecture.md``'s "Names shared between wings": name -> where."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Names shared between wings", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \|", section, flags=re.MULTILINE)
    return {
        name: {place.strip().strip("`") for place in places.split(",")} for name, places in rows
    }


def test_every_name_two_wings_share_is_explained() -> None:
    assert shared_names() == explained_names()
