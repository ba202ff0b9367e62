"""JSON Schemas (draft-07) of seed 000's agent step output, for hosts in any language.

``results`` is ``results.json``; ``event`` is one line of ``events.ndjson``. They describe
strict mode: ``x_`` keys are accepted, any other unknown key is refused.
:func:`orchestrator.formats.steps.steps_schema` loads them; ``docs/steps.md`` is the reference.
"""
