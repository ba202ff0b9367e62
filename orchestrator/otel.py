"""A run's events as OpenTelemetry spans (what ``orchestrate events --otlp`` writes).

``run_trace(events)`` builds the spans from the lines of a run's ``events.ndjson`` with
the standard library alone; ``otlp_request``/``otlp_json_bytes`` give them as OTLP/JSON;
``otlp_exporter`` is the SDK's OTLP/HTTP exporter and ``replay_spans`` hands them to an
OpenTelemetry SDK exporter (``pip install 'checkpoint-orchestrator[otel]'``). See
``orchestrator.evidence.otel`` for how events map to spans.
"""

from .evidence.otel import (
    OtlpExportError,
    RunTrace,
    Span,
    SpanEvent,
    otlp_exporter,
    otlp_json_bytes,
    otlp_request,
    replay_spans,
    run_trace,
)

__all__ = [
    "OtlpExportError",
    "RunTrace",
    "Span",
    "SpanEvent",
    "otlp_exporter",
    "otlp_json_bytes",
    "otlp_request",
    "replay_spans",
    "run_trace",
]
