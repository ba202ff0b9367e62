"""JSON Schemas (draft-07) of step evidence (an agent step's output), for hosts in any language.

``results`` is ``results.json``; ``event`` is one line of ``events.ndjson``. They describe
strict mode: ``x_`` keys are accepted, any other unknown key is refused.
:func:`orchestrator.formats.steps.steps_schema` loads them;
``docs/formats/step-evidence.md`` is the reference.
"""
