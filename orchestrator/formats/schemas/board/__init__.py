"""JSON Schemas (draft-07) of the task board's documents, for hosts in any language.

The task board documents: ``assignment-packet``, ``orchestrator-output``,
``subagent-result``, ``ledger-delta``, ``worklog-entry``, ``handoff-bundle``,
``validator-output``. Task IO with pins: ``task-input``, ``submit``, ``verdict``. They
describe strict mode: ``x_`` keys are accepted, any other unknown key is refused.
:func:`orchestrator.formats.board_rules.board_schema` loads them;
``docs/formats/task-board.md`` and ``docs/formats/task-io.md`` are the reference.
"""
