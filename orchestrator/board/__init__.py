"""The task board: subagents take tasks under resource locks, with an append-only ledger.

Owns the ledger (deltas folded into rows, idempotent by ``delta_id``, optimistic
concurrency), the board directory (tasks, assignments, heartbeats, worklogs, results),
the gateway that judges a subagent's answer into a verdict, ``ctx.dispatch``, which
hands tasks to subagents from a workflow phase, the hand-off of a task's answer to the
run waiting for it (``handoff``, through the ``RunStore`` port), and the lock that keeps the board's
maintenance passes (the watchdog) one at a time.

May import: ``engine``, ``evidence``, ``orchestrator._ports``, ``storage``, ``formats``
and ``orchestrator._errors``. Never an adapter or the CLI.
"""
