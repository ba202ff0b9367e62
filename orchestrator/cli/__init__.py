"""``orchestrate``, the command line: the composition root.

``main`` parses the arguments, runs the command and maps its outcome to an exit code;
``run_store`` chooses the store, once, for every command; the commands on runs
(``run_commands``, with ``engines``) talk to it through the ``RunStore`` port; each other
command group has its own module (``board``, ``events``, ``drive``, ``instance``,
``eval_compare``, ``store``, ``worker``), imported only when its command runs, because a
host spawns ``orchestrate`` once per pause.

May import: every wing, and the adapters. Nothing imports the CLI.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    # ``orchestrator.cli:entry`` was the console script before the CLI became a package.
    if name == "entry":
        from .main import entry

        return entry
    raise AttributeError(f"module 'orchestrator.cli' has no attribute {name!r}")
