"""The template-create example with every ``ctx.step`` execution counted on disk.

Used by ``tests/engine/test_crash_safety.py`` through a file reference
(``tests/support/crash_counting_workflow.py:CountingTemplateCreate``). Every phase of the
example is wrapped so that its ``ctx`` is a proxy whose ``step`` wraps the step function:
when the function has run to its end, a line ``<step name>`` is appended (``O_APPEND``,
then ``fsync``) to the file named by ``CRASH_STEP_LOG``, before the function returns to
the engine. A step that the engine runs twice therefore shows up twice in that file,
even though the example's steps write their files atomically and a repetition would not
be visible in the template.

The class keeps the example's name (``template-create``), phases, prompts and outputs:
the test checks that an uninterrupted run of it goes through the same crash points and
produces the same outputs as the example itself.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

STEP_LOG_ENV = "CRASH_STEP_LOG"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "template_create" / "workflow.py"


def _load_example() -> Any:
    name = "_crash_tests_template_create_example"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


TemplateCreate = _load_example().TemplateCreate


def _log_step(name: str) -> None:
    path = os.environ.get(STEP_LOG_ENV)
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, f"{name}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)


class _CountingContext:
    """Delegates everything to the engine's context; ``step`` counts executions."""

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._ctx, attribute)

    def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        def counted(*a: Any, **k: Any) -> Any:
            result = fn(*a, **k)
            _log_step(name)
            return result

        return self._ctx.step(name, counted, *args, **kwargs)


def _counting(method: Callable[..., Any]) -> Callable[..., Any]:
    # functools.wraps copies __dict__, so the @phase marker comes along.
    @functools.wraps(method)
    def run(self: Any, ctx: Any) -> Any:
        return method(self, _CountingContext(ctx))

    return run


CountingTemplateCreate = type(
    "CountingTemplateCreate",
    (TemplateCreate,),
    {
        "__module__": __name__,
        "__doc__": "TemplateCreate whose step executions are logged to $CRASH_STEP_LOG.",
        **{
            spec.method_name: _counting(getattr(TemplateCreate, spec.method_name))
            for spec in TemplateCreate.phases
        },
    },
)
