"""The workflow engine: declaring workflows, running their phases, pausing for agents,
recording answers and replaying on resume.

Owns the ``Workflow`` base class, ``@phase`` and the retry policy (``workflow``), the
engine's record in the state (``record``), the engine itself (``engine``: the attached
run, checkpoints, the phase runner) and its parts: the lifecycle (start, resume, retry,
rewind, fork, cancel, version migrations, and what a pause hands the next resume:
``lifecycle``), routing between phases (``Goto``: which visit of a phase a run is in,
where a rewind or a fork of a routed run goes back to, the workflow's graph:
``routing``), where a failed phase raised (``failure_trace``), a state or history past
its size (``size_warning``), the requests and answers (``mailbox``), the signals pushed
in from outside (``signals``) and what a phase recorded, for replay (``journal``); the
phase context handed to each phase (``context``) and how a call it makes is told in
words (``calls``), a step's tries under a retry policy or a timeout (``step_attempts``),
the commands ``ctx.run_command`` runs (``commands``), how the context shows an edited
prompt (``prompt_diff``), the ``TaskDispatcher`` Protocol ``ctx.dispatch`` hands its
tasks to (``dispatcher``), child runs (``ctx.child``, started through the host's
``ChildRuns`` port: ``children``), finding a workflow class from what the user typed
(``loader``), and replaying a recorded run against the current code (``replay``).

May import: ``evidence``, ``orchestrator._ports``, ``storage``, ``formats`` and
``orchestrator._errors``. Never an adapter or the CLI: those are chosen by the caller.
The board is built on the engine, never the other way round: the package's face installs
the board's dispatcher (see ``dispatcher``).
"""
