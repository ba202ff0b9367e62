"""Where a failed phase raised: the exception's type, message and innermost frames.

A failed run keeps this beside its one-line failure (the engine record's
``failure_trace``, the ``error`` and ``run.end`` events, ``status``), so nobody needs
the process's traceback to find the line that raised. Bounded: at most
:data:`MAX_FRAMES` innermost frames, the message cut to :data:`MAX_MESSAGE` characters
and scrubbed of secrets; files inside the workflow's directory are named relative to it.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Any

from .._text import shorten
from ..formats.secrets import redact

__all__ = ["MAX_FRAMES", "MAX_MESSAGE", "describe_trace", "failure_trace"]

#: The innermost frames kept of a failure's traceback.
MAX_FRAMES = 20
#: The longest message kept, in characters.
MAX_MESSAGE = 2000

_ENGINE_DIR = Path(__file__).resolve().parent


def failure_trace(exc: BaseException, *, workflow_cls: type | None = None) -> dict[str, Any]:
    """``exc`` as JSON data: ``{"type", "message", "frames": [{"file", "line",
    "function"}, ...]}``, innermost frame last; the engine's own frames that called the
    phase are left out."""
    frames = traceback.extract_tb(exc.__traceback__)
    start = 0
    while start < len(frames) - 1 and _in_engine(frames[start].filename):
        start += 1
    base = _workflow_dir(workflow_cls)
    kept = [
        {
            "file": _shown_path(frame.filename, base),
            "line": frame.lineno,
            "function": frame.name,
        }
        for frame in frames[start:][-MAX_FRAMES:]
    ]
    kind = type(exc)
    name = kind.__qualname__ if kind.__module__ == "builtins" else kind.__name__
    return {
        "type": name,
        "message": shorten(redact(str(exc)), MAX_MESSAGE),
        "frames": kept,
    }


def describe_trace(trace: dict[str, Any] | None) -> str | None:
    """Where a failure was raised, for a person: ``raised at FILE:LINE in FUNCTION``
    (the innermost frame); ``None`` when no frame was kept."""
    if not trace or not trace.get("frames"):
        return None
    last = trace["frames"][-1]
    return f"raised at {last.get('file')}:{last.get('line')} in {last.get('function')}"


def _in_engine(filename: str) -> bool:
    try:
        return Path(filename).resolve().parent == _ENGINE_DIR
    except (OSError, ValueError):
        return False


def _workflow_dir(workflow_cls: type | None) -> Path | None:
    if workflow_cls is None:
        return None
    module = sys.modules.get(workflow_cls.__module__)
    filename = getattr(module, "__file__", None)
    if not filename:
        return None
    try:
        return Path(filename).resolve().parent
    except (OSError, ValueError):
        return None


def _shown_path(filename: str, base: Path | None) -> str:
    if base is None:
        return filename
    try:
        return Path(filename).resolve().relative_to(base).as_posix()
    except (OSError, ValueError):
        return filename
