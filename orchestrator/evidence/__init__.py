"""What a run leaves behind: its event log, the results of each phase and agent request,
its timeline, and its OpenTelemetry spans.

Owns the evidence documents (``documents``: ``events.ndjson`` lines, ``results.json``),
the recorder the engine tells what happened (``recorder``: outbox events, phase and agent
results, the run's end), an agent step's ``events.ndjson`` on disk (``step_log``), the
``history`` timeline read from a state, the tokens and cost its answers told
(``usage``), its spans (``otel``: built from the events, exported after the fact;
``live_spans``: sent while the run runs), and a run's evidence judged as a whole
(``verify``: what ``orchestrate check evidence`` says).

May import: ``orchestrator._ports``, ``storage``, ``formats`` and the base modules
(``_errors``, ``_text``, ``_http``). Never the engine: the engine tells, the recorder
writes.
"""
