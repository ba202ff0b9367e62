"""Where ``ctx.dispatch`` hands its tasks: the :class:`TaskDispatcher` the engine knows.

The task board is built on the engine (it asks agents through the phase context and
records its work as steps), so the engine never imports it. It only knows this small
Protocol; the package's face (``orchestrator/__init__.py``, loaded before any module of
the package) installs the board's dispatcher here as a factory that imports the board
when a phase first dispatches. An engine may also be given a dispatcher of its own
(``Engine.dispatcher``).

What is installed is a factory of a dispatcher that holds no run's state; installing is
one assignment of one reference (atomic, so safe from any thread), and the factory runs
at each dispatch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # a module the face loads: nothing more at run time
    from collections.abc import Callable, Sequence
    from contextlib import AbstractContextManager
    from pathlib import Path

    from ..formats.board_documents import Task
    from .context import PhaseContext


class TaskDispatcher(Protocol):
    """Runs ``ctx.dispatch`` and ``ctx.board`` for a phase."""

    def dispatch(
        self,
        ctx: PhaseContext,
        tasks: Sequence[Task],
        *,
        agent: str | Callable[[Task], str],
        objective: str,
        constraints: Sequence[str],
        max_attempts: int,
        retry_after_ms: int,
        workspace: Path | None,
        board_dir: Path | None,
    ) -> Any:
        """Hand ``tasks`` to subagents through ``ctx`` until each ends; its report."""
        ...

    def open_board(self, ctx: PhaseContext, board_dir: Path | None) -> AbstractContextManager[Any]:
        """The board ``dispatch`` uses in ``ctx``'s run, open for a block."""
        ...


_factory: Callable[[], TaskDispatcher] | None = None


def install_dispatcher(factory: Callable[[], TaskDispatcher]) -> None:
    """Make ``factory()`` the dispatcher of every engine not given one of its own."""
    global _factory
    _factory = factory


def installed_dispatcher() -> TaskDispatcher:
    """The dispatcher installed for the process (see :func:`install_dispatcher`)."""
    factory = _factory
    if factory is None:
        from .._errors import UsageError

        raise UsageError(
            "ctx.dispatch: no task board is installed; import orchestrator (which installs "
            "it), or give the engine a dispatcher (Engine.dispatcher)"
        )
    return factory()
