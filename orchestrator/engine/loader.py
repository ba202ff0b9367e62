"""Finding a workflow class from what the user typed: ``pkg.module:Class``,
``path/file.py:Class`` or a name registered under the ``orchestrator.workflows``
entry-point group."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from pathlib import Path

from .._errors import WorkflowNotFoundError
from ..storage.durable import sha256_hex
from .workflow import Workflow

ENTRY_POINT_GROUP = "orchestrator.workflows"
#: Held while a workflow file is imported: a worker's slots load workflows from several
#: threads, and one must not find the module in ``sys.modules`` half executed. Re-entrant:
#: a workflow file may load another.
_IMPORTING = threading.RLock()


def resolve_reference(reference: str, *, base_dir: Path) -> str:
    """The reference as it should be recorded: file paths made absolute."""
    module_part, sep, class_name = reference.rpartition(":")
    if sep and (module_part.endswith(".py") or "/" in module_part):
        return f"{(base_dir / module_part).resolve()}:{class_name}"
    return reference


def load_workflow(reference: str) -> type[Workflow]:
    """Import and return the workflow class ``reference`` names (see module doc)."""
    module_part, sep, class_name = reference.rpartition(":")
    if not sep:
        return _from_entry_point(reference)
    if module_part.endswith(".py") or "/" in module_part:
        namespace = _import_file(Path(module_part), reference)
    else:
        try:
            namespace = vars(importlib.import_module(module_part))
        except ImportError as exc:
            raise WorkflowNotFoundError(
                f"workflow {reference!r}: cannot import module {module_part!r} ({exc}); is it "
                "installed or on PYTHONPATH?"
            ) from None
        except Exception as exc:
            raise WorkflowNotFoundError(
                f"workflow {reference!r}: importing {module_part} failed: {_one_line(exc)}"
            ) from exc
    found = namespace.get(class_name)
    if not (isinstance(found, type) and issubclass(found, Workflow)):
        raise WorkflowNotFoundError(
            f"workflow {reference!r}: {class_name!r} is not a Workflow subclass in {module_part}"
        )
    return found


def _import_file(path: Path, reference: str) -> dict[str, object]:
    with _IMPORTING:
        return _import_file_now(path, reference)


def _import_file_now(path: Path, reference: str) -> dict[str, object]:
    if not path.is_file():
        raise WorkflowNotFoundError(f"workflow {reference!r}: no such file {path}")
    digest = sha256_hex(str(path).encode())[:10]
    name = f"_orchestrator_workflow_{path.stem}_{digest}"
    if name in sys.modules:
        return vars(sys.modules[name])
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise WorkflowNotFoundError(f"workflow {reference!r}: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    # Sibling modules of a workflow file import each other as a script's would.
    sys.path.insert(0, str(path.parent))
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise WorkflowNotFoundError(
            f"workflow {reference!r}: importing {path} failed: {_one_line(exc)}; fix the file"
        ) from exc
    return vars(module)


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        return f"SyntaxError: {exc.msg} (line {exc.lineno})"
    return f"{type(exc).__name__}: {exc}"


def _from_entry_point(name: str) -> type[Workflow]:
    from importlib.metadata import entry_points

    for entry in entry_points(group=ENTRY_POINT_GROUP):
        if entry.name == name:
            found = entry.load()
            if isinstance(found, type) and issubclass(found, Workflow):
                return found
            raise WorkflowNotFoundError(f"entry point {name!r} does not name a Workflow subclass")
    raise WorkflowNotFoundError(
        f"no workflow named {name!r}: give 'package.module:Class' or 'path/file.py:Class', or "
        f"register it under the {ENTRY_POINT_GROUP!r} entry-point group"
    )
