"""The wire formats: every document the project reads or writes, and its rules.

Owns the attrs models of the agent bridge files (request, response, state), the task
board documents (packets, results, ledger deltas, worklogs, handoffs, verdicts), and
step evidence (``results.json``, ``events.ndjson`` lines); the one cattrs converter and
its fast path; strict JSON text (bounded, no duplicate keys, canonical encoding); the
lock-scope, pin and secret rules the documents cite; the one way times are written; and
the shipped JSON Schemas (``schemas/``). Each family's rules live in one module
(``bridge_codec``, ``board_rules``, ``steps``), which every reader, writer and validator
calls (``docs/conformance.md``).

The modules:

- the agent bridge files: ``bridge`` (the types), ``bridge_codec`` (reading, validating
  and writing them), ``state_signature`` (where a state's signature lives, and its
  parts), ``workflow_schemas`` (a workflow's own schemas), ``answer_schema`` (the
  schema of the answer an ask expects) and ``answer_gate`` (whether an answer has that
  shape: the answer gate's check, and what a refusal says), ``signals`` (a signal in a
  run's inbox, and the gate's check of its payload);
- the task board documents and task IO with pins: ``board_documents`` (the types), ``board_rules``
  (their rules and parsing) and ``board_checks`` (the field checks and the parse those
  rules are made of);
- step evidence: ``steps``, and ``step_names`` (its wire names);
- agent regression runs: ``runs`` (the cases file, the ``/run-case`` exchange, a run's
  files) and ``evaluation`` (``evaluation.json``);
- shared: ``converter`` (the one cattrs converter), ``convert`` (structuring,
  unstructuring and the checks types cannot express), ``fastpath`` (the converter's fast
  path), ``strict_json``, ``scope`` (resource locks and path pins), ``secrets`` (secrets
  in free text) and ``times``.

May import: the standard library, attrs, cattrs and ``orchestrator._errors``. Nothing
else of the project, so the formats could be lifted into a package of their own.
"""
