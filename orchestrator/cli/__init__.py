"""``orchestrate``, the command line: the composition root.

``main`` is the entry point: it builds the parser from what each command module declares
(a ``COMMANDS`` table: help, arguments, handler), runs the command and maps its outcome
to an exit code. Only the module of the command being run is imported, because a host
spawns ``orchestrate`` once per pause. ``common`` holds what the command modules share
(the work directory and its instance, the engine and its agent, the arguments several
commands take); they import it, never ``main``. ``run_store`` chooses the store a
command names, once: every command on runs talks to it through the ``RunStore`` port.

The command modules: ``run`` (run, resume, retry, rewind, fork, replay, drive, cancel),
``inspect`` (status, history, output), ``answer`` (respond, pending), ``signal_command``
(signal), ``validate`` (validate, schema), ``graph`` (a workflow's phases and routes as
Mermaid text), ``scaffold`` (init, with ``host_recipes``: what a coding agent needs to
host a workflow), ``trust``, ``events`` (with ``event_lines``, an
event as one readable line), ``board``, ``check``, ``evals`` and ``eval_compare`` (eval),
``store`` (db, export), ``retention`` (prune), ``worker``, ``ui/`` (``orchestrate
ui``, the local web app), and ``mcp/`` (``orchestrate mcp``, the MCP server over the
same run stores).
Beside them: ``run_store``, the one
place a command chooses its store (and the only one that names the PostgreSQL adapter);
``run_commands``, the commands on runs written once over the ``RunStore`` port;
``engines``, an engine for a run of a store (and its child runs, ``ctx.child``, run in
the same store); ``telemetry``, the live OpenTelemetry
spans an engine sends when an OTLP endpoint is set; ``board_handoff``, the board commands'
hand-off to the board wing's ``handoff``; ``instance``, the reads and writes of an
instance's files that the commands share; ``hints``, what comes next after a pause, said
for the face that says it (the plain CLI, ``drive``, a worker, the UI); ``drive``, the
host loop of ``drive``; ``replay_suite``, ``replay --corpus``; and ``reference``, which
makes ``docs/cli.md`` from the parser.

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
