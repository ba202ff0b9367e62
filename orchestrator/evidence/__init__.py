"""What a run leaves behind: its event log, the results of each phase and agent request,
its timeline, and its export as OpenTelemetry spans.

Owns the evidence documents (``events.ndjson`` lines, ``results.json``), the recorder the
engine tells what happened (outbox events, phase and agent results, the run's end), the
``history`` timeline read from a state, and the OTLP export.

May import: ``orchestrator._ports``, ``storage``, ``formats`` and the base modules
(``_errors``, ``_text``, ``_http``). Never the engine: the engine tells, the recorder
writes.
"""
