"""The wire formats: every document the project reads or writes, and its rules.

Owns the attrs models of the agent bridge files (request, response, state), the task
board documents (packets, results, ledger deltas, worklogs, handoffs, verdicts), and
step evidence (``results.json``, ``events.ndjson`` lines); the one cattrs converter and
its fast path; strict JSON text (bounded, no duplicate keys, canonical encoding); the
lock-scope, pin and secret rules the documents cite; the one way times are written; and
the shipped JSON Schemas (``schemas/``). Each family's rules live in one module
(``bridge_codec``, ``board_rules``, ``steps``), which every reader, writer and validator
calls (``docs/conformance.md``).

May import: the standard library, attrs, cattrs and ``orchestrator._errors``. Nothing
else of the project, so the formats could be lifted into a package of their own.
"""
