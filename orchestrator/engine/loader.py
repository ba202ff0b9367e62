"""Finding a workflow class from what the user typed: ``pkg.module:Class``,
``path/file.py:Class``, ``path/file.py`` (the one workflow the file defines) or a name
registered under the ``orchestrator.workflows`` entry-point group."""

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


def locate_workflow(reference: str, *, base_dir: Path) -> tuple[str, type[Workflow]]:
    """The workflow class ``reference`` names and the reference to record for it: a file's
    path made absolute from ``base_dir`` and its class named (``path/file.py`` alone names
    the one workflow the file defines)."""
    in_file = _file_reference(reference)
    if in_file is None:
        return reference, load_workflow(reference)
    typed, class_name = in_file
    path = (base_dir / typed).resolve()
    name, found = _pick(_import_file(path, reference), class_name, reference, typed)
    return f"{path}:{name}", found


def load_workflow(reference: str) -> type[Workflow]:
    """Import and return the workflow class ``reference`` names (see module doc)."""
    in_file = _file_reference(reference)
    if in_file is not None:
        typed, class_name = in_file
        return _pick(_import_file(Path(typed), reference), class_name, reference, typed)[1]
    module_part, sep, class_name = reference.rpartition(":")
    if not sep:
        return _from_entry_point(reference)
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
    return _pick(namespace, class_name, reference, module_part)[1]


def _file_reference(reference: str) -> tuple[str, str | None] | None:
    """``(path, class or None)`` when ``reference`` names a file, else ``None``."""
    module_part, sep, class_name = reference.rpartition(":")
    if not sep:
        return (reference, None) if reference.endswith(".py") else None
    if module_part.endswith(".py") or "/" in module_part:
        return module_part, class_name
    return None


def _pick(
    namespace: dict[str, object], class_name: str | None, reference: str, where: str
) -> tuple[str, type[Workflow]]:
    """The class ``class_name`` in ``namespace``, or with no name the one workflow defined
    there; refused in one line that lists the candidates as references (``where:Class``)."""
    found = namespace.get(class_name) if class_name else None
    if isinstance(found, type) and issubclass(found, Workflow) and class_name:
        return class_name, found
    defined = {
        name: value
        for name, value in sorted(namespace.items())
        if isinstance(value, type)
        and issubclass(value, Workflow)
        and value.__module__ == namespace.get("__name__")
        and value.__qualname__ == name
        and "phases" in vars(value)  # not a base declared ``abstract=True``
    }
    listed = ", ".join(f"{where}:{name}" for name in defined)
    if class_name is None:
        if len(defined) == 1:
            return next(iter(defined.items()))
        if not defined:
            raise WorkflowNotFoundError(
                f"workflow {reference!r}: {where} defines no Workflow subclass; define one "
                "there, or name the class: path/file.py:Class"
            )
        raise WorkflowNotFoundError(
            f"workflow {reference!r}: {where} defines several workflows; name one: {listed}"
        )
    raise WorkflowNotFoundError(
        f"workflow {reference!r}: {class_name!r} is not a Workflow subclass in {where}"
        + _did_you_mean(class_name, list(defined))
        + (f"; its workflows: {listed}" if defined else "")
    )


def _did_you_mean(typed: str, names: list[str]) -> str:
    import difflib  # only on the way to an error

    by_folded = {name.casefold(): name for name in names}
    close = difflib.get_close_matches(typed.casefold(), list(by_folded), n=1)
    return f" (did you mean {by_folded[close[0]]}?)" if close else ""


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
