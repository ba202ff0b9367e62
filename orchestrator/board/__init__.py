"""The task board: subagents take tasks under resource locks, with an append-only ledger.

Owns the ledger (``ledger``: deltas folded into rows, idempotent by ``delta_id``,
optimistic concurrency), the board directory (``board``: tasks, assignments, heartbeats,
worklogs, results; ``files``: its file store), the gateway that judges a subagent's
answer into a verdict (``gateway``), ``ctx.dispatch``, which hands tasks to subagents
from a workflow phase (``dispatch``), and the lock that keeps the board's maintenance
passes (the watchdog) one at a time (``maintenance``).

May import: ``engine``, ``evidence``, ``orchestrator._ports``, ``storage``, ``formats``
and ``orchestrator._errors``. Never an adapter or the CLI.
"""
