"""``orchestrate``, the command line: the composition root.

``main`` parses the arguments, picks the store and the adapters, runs the command and
maps its outcome to an exit code; each command group has its own module, imported only
when its command runs, because a host spawns ``orchestrate`` once per pause:

- ``instance``: looks at an instance and the host's helpers (``status``, ``respond``,
  ``validate``);
- ``drive``: the host loop built in; ``events``: a run's events and their export;
- ``trust``: a person signs a state as it is now;
- ``scaffold``: ``orchestrate init``, a workflow file and its test;
- ``board``: the task board; ``worker``: the runs of a PostgreSQL store advanced on
  any number of hosts;
- ``store_runs``: commands on runs in a PostgreSQL store; ``store``: looking after the
  store itself (``db upgrade``, ``db status``);
- ``evals`` and ``eval_compare``: agent regression runs, and their comparison;
- ``reference``: the command-line reference (``docs/cli.md``), made from the parser;
- ``ui``: ``orchestrate ui``, the local web app.

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
