"""JSON Schemas (draft-07) of the task board's documents, for hosts in any language.

Seed 003: ``assignment-packet``, ``orchestrator-output``, ``subagent-result``,
``ledger-delta``, ``worklog-entry``, ``handoff-bundle``, ``validator-output``. Seed 002:
``task-input``, ``submit``, ``verdict``. They describe strict mode: ``x_`` keys are
accepted, any other unknown key is refused. :func:`orchestrator.formats.board_rules.board_schema`
loads them.
"""
