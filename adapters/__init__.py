"""Adapters: implementations of the ports in ``orchestrator._ports``.

Imported as ``orchestrator.adapters``: ``orchestrator/adapters`` is a link to this folder,
so the checkout and an installed wheel (which holds a copy) agree. Each module implements
one port and nothing else: the file bridge (``file_bridge``) and the in-memory bridge
(``memory``), both ``Bridge``; the work directory's run store (``file_runs``,
``RunStore``), with ``file_signals``, the runs' inboxes of signals, ``file_prune``,
how it removes finished runs whole for ``orchestrate prune``, and ``prune_rule``, which
runs a prune selects in every store; the subprocess and HTTP agents
(``subprocess_agent``, ``http_agent``), both ``AgentInvoker``; and the PostgreSQL store
(``postgres``: its bridge, run store and board store). The CLI and the tests choose
which to use; the engine never names one.

May import: ``orchestrator._ports``, ``storage``, ``formats`` and the base modules
(``_errors``, ``_text``, ``_http``). Never the engine, the evidence, the board or the CLI.
"""
