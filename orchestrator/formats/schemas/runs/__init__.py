"""JSON Schemas (draft-07) of agent regression runs, for tools in any language.

``cases`` is a cases file (a JSON array of cases; a JSONL file holds one case per line);
``run-case-answer`` is the body an agent under test answers ``POST /run-case`` with;
``run``, ``case``, ``assets-manifest`` and ``failure-meta`` are the files of a run
directory (``run.json``, ``<caseId>.json``, ``assets/manifest.json``, a failure's body
meta file).
:func:`orchestrator.formats.runs.runs_schema` loads them; ``docs/evals.md`` is the
reference.
"""
