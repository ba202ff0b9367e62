"""The task board: subagents take tasks under resource locks, with an append-only ledger.

Owns the ledger (``ledger``: deltas folded into rows, idempotent by ``delta_id``,
optimistic concurrency), the board directory (``board``: tasks, assignments, heartbeats,
worklogs, results; ``files``: its file store), the gateway that judges a subagent's
answer into a verdict (``gateway``), ``ctx.dispatch``, which hands tasks to subagents
from a workflow phase (``dispatch``), the hand-off of a task's answer to the run waiting
for it (``handoff``), and the lock that keeps the board's maintenance passes (the
watchdog) one at a time (``maintenance``).

Its modules:

- ``board.py``: :class:`~orchestrator.board.board.Board`, one board, made of the roles
  below, and ``adopt_handoff``;
- ``core.py``: what every role stands on: where the board is, ``board.json``, the clock,
  the ledger, the final worklog entry of a settled task;
- ``tasks.py``: creating tasks in dependency order, the ready ones, a status set by hand;
- ``assignment.py``: starting tasks and their assignment packets;
- ``progress.py``: a working subagent's heartbeats and worklog entries;
- ``results.py``: a subagent's answer judged and its verdict recorded, once;
- ``watchdog.py``: timeouts, requeueing or failing blocked tasks, cancelling unreachable ones;
- ``bundle.py``: the handoff bundle a fresh orchestrator continues from, its page, its adoption;
- ``handoff.py``: a task's answer (a submitted result, a time-out) handed to the workflow
  run waiting for it, through the ``RunStore`` port;
- ``ledger.py``: the append-only ledger and the rows it folds into;
- ``compaction.py``: the ledger folded into a verified snapshot line (``board compact``);
- ``file_store.py``: the board kept in a directory (a ``BoardStore`` and ``LedgerStore``);
- ``gateway.py``: a subagent's answer judged into a verdict;
- ``dispatch.py``: ``ctx.dispatch``, tasks handed to subagents from a workflow phase;
- ``maintenance.py``: the lock that keeps maintenance passes one at a time.

May import: ``engine``, ``evidence``, ``orchestrator._ports``, ``storage``, ``formats``
and ``orchestrator._errors``. Never an adapter or the CLI.
"""
