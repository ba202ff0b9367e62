"""A run's spans sent while it runs, through an OpenTelemetry SDK span processor.

:class:`LiveSpans` watches a recorder: each batch of events, once the run's log holds
them, goes through the same span builder as an export after the fact
(:mod:`orchestrator.evidence.otel`), so the ids are the ones that export gives: the
trace id is the run's, a span's id follows from the event that opened it. A span is sent
when it ends: a phase, an agent request (with the GenAI attributes), a step; the run's
own span when the run ends. A run pauses and resumes in new processes, so no span stays
open across them: a process that goes on with a run first reads the run's log to learn
what is open (the spans it ends carry their recorded start), and each process sends a
span of its own under the run's (``start <workflow>`` or ``resume <workflow>``) with the
pause as an event. Telemetry never stops a run: a failure is told once on standard error.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from .otel import (
    RunTrace,
    Span,
    SpanBuilder,
    SpanEvent,
    checked_record,
    readable_spans,
    trace_context_of,
    trace_id_for,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

__all__ = ["LiveSpans"]


class LiveSpans:
    """Sends the spans of the run a recorder records to ``processor`` (an SDK span
    processor: its ``on_end`` takes each finished span).

    ``read_log`` reads the run's earlier events when this process goes on with a run it
    did not start; ``action`` names this process's span (``start``, ``resume``).
    """

    def __init__(
        self,
        *,
        processor: Any,
        sdk: Any,
        read_log: Callable[[str, int], list[dict[str, Any]]] | None = None,
        action: str = "resume",
    ) -> None:
        self.processor = processor
        self.sdk = sdk
        self.read_log = read_log
        self.action = action
        self._began_ns = time.time_ns()
        self._trace: RunTrace | None = None
        self._spans: SpanBuilder | None = None
        self._sent: set[str] = set()
        self._process: Span | None = None
        self._resumed = False
        self._failed = False

    def published(
        self,
        run_id: str,
        records: Sequence[Mapping[str, Any]],
        *,
        trace: Mapping[str, Any] | None = None,
    ) -> None:
        """Events the run's log now holds (``x_seq``, ``ts``, ``event``, ``data``);
        ``trace``: the run's trace context, as its state keeps it."""
        try:
            self._take(run_id, records, trace)
        except Exception as exc:  # telemetry must never stop a run
            self._tell(exc)

    def close(self) -> None:
        """End this process's span and send it; called once the process is done with the
        run (before exit 42, at its end)."""
        try:
            process = self._process
            if process is None or self._trace is None or process.finished:
                return
            process.end_ns = max(process.start_ns, time.time_ns())
            process.finished = True
            self._send([process])
        except Exception as exc:
            self._tell(exc)

    # -- internals --------------------------------------------------------------------------

    def _take(
        self,
        run_id: str,
        records: Sequence[Mapping[str, Any]],
        trace: Mapping[str, Any] | None,
    ) -> None:
        events = [checked_record(record, 0) for record in records]
        if not events:
            return
        if self._spans is None or self._trace is None or self._trace.run_id != run_id:
            self._begin(run_id, events, trace_context_of(dict(trace or {})))
        assert self._spans is not None
        before = {span.span_id for span in self._spans.trace.spans if span.finished}
        self._spans.feed(events)
        self._ensure_process_span()
        for _, name, moment, data in events:
            if name == "run.pause" and self._process is not None:
                skill = str(data.get("skill") or "")
                attributes: dict[str, Any] = {"orchestrator.skill": skill}
                self._process.events.append(SpanEvent(name, moment, attributes))
        ended = [
            span
            for span in self._spans.trace.spans
            if span.finished and span.span_id not in before and span.span_id not in self._sent
        ]
        self._send(ended)

    def _begin(
        self,
        run_id: str,
        events: list[tuple[int, str, int, dict[str, Any]]],
        context: dict[str, str] | None,
    ) -> None:
        """Learn what the run's log says before ``events``: spans open, spans ended."""
        first_seq = events[0][0]
        earlier: list[tuple[int, str, int, dict[str, Any]]] = []
        if first_seq > 1 and self.read_log is not None:
            lines = self.read_log(run_id, 0)
            earlier = [checked_record(line, 0) for line in lines]
            earlier = [record for record in earlier if record[0] < first_seq]
        start = next((data for _, name, _, data in earlier + events if name == "run.start"), {})
        workflow = start.get("workflow") if isinstance(start.get("workflow"), str) else None
        self._trace = RunTrace(
            run_id=run_id,
            trace_id=trace_id_for(run_id) if context is None else context["trace_id"],
            service_name=workflow or "checkpoint-orchestrator",
            spans=[],
        )
        self._spans = SpanBuilder(self._trace, context)
        self._spans.feed(earlier)
        self._sent = {span.span_id for span in self._trace.spans if span.finished}
        self._resumed = bool(earlier)

    def _ensure_process_span(self) -> None:
        """Open this process's span under the run's, once the run's span is known."""
        if self._process is not None or self._trace is None or self._spans is None:
            return
        root = self._spans.root
        if root is None:
            return
        # This process's own span: one per process and run, never derived from an event.
        key = f"{self._trace.trace_id}/process/{os.getpid()}/{self._began_ns}"
        span_id = hashlib.sha256(key.encode("ascii")).hexdigest()[:16]
        self._process = Span(
            name=f"{self.action} {self._trace.service_name}",
            span_id=span_id,
            parent_span_id=root.span_id,
            start_ns=self._began_ns,
            end_ns=self._began_ns,
            attributes={"orchestrator.run_id": self._trace.run_id, "process.pid": os.getpid()},
        )
        if self._resumed:
            self._process.events.append(
                SpanEvent(name="run.resume", time_ns=self._began_ns, attributes={})
            )

    def _send(self, spans: list[Span]) -> None:
        if self._trace is None:
            return
        for span in readable_spans(self.sdk, self._trace, spans):
            self.processor.on_end(span)
        self._sent.update(span.span_id for span in spans)

    def _tell(self, exc: Exception) -> None:
        if not self._failed:
            self._failed = True
            print(
                f"orchestrate: warning: OpenTelemetry spans are not sent ({exc}); the run "
                "goes on; check OTEL_EXPORTER_OTLP_ENDPOINT",
                file=sys.stderr,
            )
