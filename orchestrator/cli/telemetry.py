"""Live OpenTelemetry spans for the commands that advance runs (run, resume, drive,
worker, eval run, the MCP server), sent while they run when
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set.

Without it nothing of OpenTelemetry is imported. With it, one SDK batch span processor
and the SDK's OTLP/HTTP exporter serve the process; each engine gets a
:class:`~orchestrator.evidence.live_spans.LiveSpans` watching its recorder, and
:func:`flush` (called as every command returns, so before exit 42) ends each process
span and sends what is queued.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import TYPE_CHECKING, Any

from .._text import plural

if TYPE_CHECKING:
    from .._ports import RunStore
    from ..engine.engine import Engine
    from ..evidence.live_spans import LiveSpans

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")

_lock = threading.Lock()
_shipping: _Shipping | None = None
# ``--otlp URL``: where this process sends spans, over the environment's endpoint.
_endpoint: str | None = None


class _Shipping:
    """The process's span processor and the engines' span sinks not yet closed."""

    def __init__(self) -> None:
        import logging

        from ..evidence.otel import load_sdk, otlp_exporter

        self.sdk = load_sdk()
        exporter = otlp_exporter(_endpoint)
        self.exporter = _Tallied(exporter, self.sdk.export.SpanExportResult.SUCCESS)
        self.processor = self.sdk.export.BatchSpanProcessor(self.exporter)
        self.sinks: list[LiveSpans] = []
        self.told = False
        # The SDK's own lines about each retry: this module says it once, in one line.
        for name in ("opentelemetry.exporter.otlp.proto.http", "opentelemetry.sdk"):
            logging.getLogger(name).setLevel(logging.CRITICAL)

    def flush(self) -> None:
        """Send what is queued; a collector that took none of it is told once."""
        self.processor.force_flush()
        if self.exporter.failed and not self.told:
            self.told = True
            where = getattr(self.exporter.inner, "_endpoint", "the OTLP endpoint")
            print(
                f"orchestrate: warning: {plural(self.exporter.failed, 'span batch')} of "
                f"OpenTelemetry spans could not be sent to {where}; the run is not "
                "affected: check that a collector listens there (OTEL_EXPORTER_OTLP_ENDPOINT "
                "or --otlp)",
                file=sys.stderr,
            )


class _Tallied:
    """A span exporter that counts the batches its ``inner`` one failed to deliver."""

    def __init__(self, inner: Any, success: Any) -> None:
        self.inner, self.success, self.failed = inner, success, 0

    def export(self, spans: Any) -> Any:
        result = self.inner.export(spans)
        if result is not self.success:
            self.failed += 1
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))


def wanted() -> bool:
    """Whether spans are to be sent: ``--otlp URL`` given, or an OTLP endpoint set in
    the environment."""
    return _endpoint is not None or any(os.environ.get(name) for name in ENDPOINT_VARIABLES)


def send_to(url: str) -> None:
    """``--otlp URL``: send this process's spans to ``url`` (``UsageError`` if it is not
    an http:// or https:// address)."""
    from .._errors import UsageError
    from ..evidence.otel import traces_url

    global _endpoint
    try:
        traces_url(url)
    except ValueError as exc:
        raise UsageError(f"--otlp {exc}") from None
    _endpoint = url


def watch(engine: Engine, store: RunStore, *, action: str) -> None:
    """Send ``engine``'s run's spans live, when :func:`wanted`; ``action`` names this
    process's span (``start``, ``resume``)."""
    if not wanted():
        return
    from ..evidence.live_spans import LiveSpans

    global _shipping
    with _lock:
        if _shipping is None:
            _shipping = _Shipping()
        shipping = _shipping
        sink = LiveSpans(
            processor=shipping.processor,
            sdk=shipping.sdk,
            read_log=_log_reader(store),
            action=action,
        )
        shipping.sinks.append(sink)
    engine.recorder.observer = sink


def flush() -> None:
    """End each engine's process span and send every queued span (before the process
    leaves, exit 42 included)."""
    with _lock:
        shipping = _shipping
        if shipping is None:
            return
        sinks, shipping.sinks = shipping.sinks, []
    for sink in sinks:
        sink.close()
    shipping.flush()


def finish(engine: Engine) -> None:
    """``engine`` is done with its run for now (a worker's or the MCP server's turn, an
    evaluation run's pass): end its process span and send what is queued, without waiting
    for the process to end."""
    sink = engine.recorder.observer
    with _lock:
        shipping = _shipping
        if shipping is None or sink not in shipping.sinks:
            return
        shipping.sinks.remove(sink)
    sink.close()
    shipping.flush()


def _log_reader(store: RunStore) -> Any:
    from .._ports import ReadEventsInput

    def read_log(run_id: str, after: int) -> list[dict[str, Any]]:
        lines = store.events(ReadEventsInput(run_id=run_id, after=after))
        return [json.loads(line) for _, line in lines]

    return read_log
