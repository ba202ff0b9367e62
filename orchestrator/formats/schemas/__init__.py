"""JSON Schemas shipped with the package, for hosts in any language.

``agent-request``, ``agent-response`` and ``state`` are seed 004's schemas as printed;
:func:`orchestrator.bridge_schemas` derives a workflow's own from them.
"""
