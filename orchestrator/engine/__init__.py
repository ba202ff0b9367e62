"""The workflow engine: declaring workflows, running their phases, pausing for agents,
recording answers and replaying on resume.

Owns the ``Workflow`` base class, ``@phase`` and the retry policy (``workflow``), the
engine's record in the state (``record``), the engine itself with its lifecycle (run,
resume, retry, rewind, fork, version migrations: ``engine``), the phase context handed
to each phase (``context``), finding a workflow class from what the user typed
(``loader``), and replaying a recorded run against the current code (``replay``).

May import: ``evidence``, ``orchestrator._ports``, ``storage``, ``formats`` and
``orchestrator._errors``. Never an adapter or the CLI: those are chosen by the caller.
The board is built on the engine, never the other way round; the one exception is
``ctx.dispatch``, which imports ``board.dispatch`` when a phase calls it.
"""
