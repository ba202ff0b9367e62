"""A run's events as OpenTelemetry spans: one trace per run, for any tracing backend.

:func:`run_trace` turns the lines of a run's ``events.ndjson`` into spans, with the
standard library alone:

=============================  =================================================
events                         span
=============================  =================================================
``run.start`` .. ``run.end``   the root, ``run <workflow>`` (to the last event
                               while the run is not over)
``skill.start`` .. ``.end``    ``skill <phase>``, a child of the root
``agent.start`` .. ``.end``    ``agent <agent>``, a child of its phase's span,
                               the two matched by ``request_id``
``tool.call`` .. ``.result``   ``tool <tool>``, a child of its phase's span
anything else                  an event on the innermost open span it belongs to
                               (its request's, its phase's, else the root)
=============================  =================================================

Ids are derived, never drawn, so exporting a run twice gives the same ids: the trace id
is the run id's 32 hex digits (the first 32 of its SHA-256 when it is not a UUID), a span
id the first 16 hex digits of the SHA-256 of ``<trace id>/<x_seq of the opening event>``.
A span's status is ERROR when its phase, agent request or tool step ended in ``error`` or
``fail``, or, for the root, when the run failed; otherwise it is left unset. Attributes
are the events' ``data`` under ``orchestrator.``: nested objects flattened with dots,
lists of one scalar type kept as arrays, other values as JSON text, nulls left out. A span
the log never closes ends with the root (at the last event while the run is not over) and
carries ``orchestrator.unfinished``; a parent always spans its children.

:func:`otlp_request` writes the spans as an OTLP/JSON ``ExportTraceServiceRequest``,
which OpenTelemetry collectors read from a file; :func:`replay_spans` hands them to an
OpenTelemetry SDK exporter (the ``otel`` extra), :func:`otlp_exporter` the OTLP/HTTP one.
A live run's spans (:mod:`orchestrator.evidence.live_spans`) are built here too.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from .._errors import ContractError, OrchestratorError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = [
    "ATTRIBUTE_PREFIX",
    "OtlpExportError",
    "RunTrace",
    "Span",
    "SpanEvent",
    "new_trace_context",
    "otlp_exporter",
    "otlp_json_bytes",
    "otlp_request",
    "readable_spans",
    "replay_spans",
    "run_trace",
    "unix_nanos",
]

#: The namespace of every attribute taken from an event's ``data``.
ATTRIBUTE_PREFIX = "orchestrator."
SCOPE_NAME = "checkpoint-orchestrator"
OTEL_INSTALL_HINT = "pip install 'checkpoint-orchestrator[otel]'"
TRACES_PATH = "/v1/traces"
_SPAN_KIND_INTERNAL = 1  # OTLP's SPAN_KIND_INTERNAL
_STATUS_CODE_ERROR = 2  # OTLP's STATUS_CODE_ERROR
_FAILED = frozenset({"error", "fail", "failed"})
_INT64 = range(-(2**63), 2**63)
_HEX32 = re.compile(r"[0-9a-f]{32}")
_HEX16 = re.compile(r"[0-9a-f]{16}")
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")
#: Where ``run.start`` keeps the run's trace context (see :func:`new_trace_context`).
TRACE_FIELD = "x_trace"
_TIMESTAMP = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?"
    r"(?:[Zz]|([+-])([0-9]{2}):([0-9]{2}))"
)
_EPOCH_ORDINAL = 719163  # date(1970, 1, 1).toordinal()

#: What an OpenTelemetry attribute may hold: a scalar, or a list of one scalar type.
AttributeValue = str | bool | int | float | list[str] | list[bool] | list[int] | list[float]


@dataclasses.dataclass
class SpanEvent:
    """Something that happened inside a span, at ``time_ns`` (Unix nanoseconds)."""

    name: str
    time_ns: int
    attributes: dict[str, AttributeValue]


@dataclasses.dataclass
class Span:
    """One span of a run's trace; ``parent_span_id`` is None for the root (unless the run
    was started inside another trace: then that trace's span).

    ``error`` is the ERROR status's message, None when the status is unset.
    """

    name: str
    span_id: str
    parent_span_id: str | None
    start_ns: int
    end_ns: int
    attributes: dict[str, AttributeValue]
    events: list[SpanEvent] = dataclasses.field(default_factory=list)
    error: str | None = None
    finished: bool = False


@dataclasses.dataclass
class RunTrace:
    """The spans of one run, the root first, then in the order they opened."""

    run_id: str
    trace_id: str
    service_name: str
    spans: list[Span]


class OtlpExportError(OrchestratorError):
    """Spans could not be delivered to an OTLP/HTTP endpoint (``url``; ``status`` when it
    answered)."""

    def __init__(self, message: str, *, url: str, status: int | None = None) -> None:
        self.url = url
        self.status = status
        super().__init__(message)


# -- events to spans -----------------------------------------------------------------------


def run_trace(records: Iterable[Mapping[str, Any]], *, run_id: str | None = None) -> RunTrace:
    """The trace of a run from its ``events.ndjson`` records, in log order.

    Each record is a parsed line: ``ts`` (RFC 3339), ``event``, ``data`` and ``x_seq``
    (its position in the log when missing). ``run_id`` defaults to ``run.start``'s. A
    record without a valid ``ts``, ``event`` or ``data`` raises ``ContractError``.
    """
    events = [checked_record(record, position) for position, record in enumerate(records, start=1)]
    start = next((data for _, name, _, data in events if name == "run.start"), {})
    run = run_id or _text(start.get("run_id")) or "unknown-run"
    trace = RunTrace(
        run_id=run,
        trace_id=trace_id_for(run),
        service_name=_text(start.get("workflow")) or SCOPE_NAME,
        spans=[],
    )
    SpanBuilder(trace).build(events)
    return trace


def trace_id_for(run_id: str) -> str:
    """The run id's 32 hex digits (a UUID's), else the first 32 of its SHA-256."""
    import hashlib

    digits = run_id.replace("-", "").lower()
    if _HEX32.fullmatch(digits) and digits.strip("0"):
        return digits
    return hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:32]


def new_trace_context(run_id: str, *, parent: str | None = None) -> dict[str, Any]:
    """A run's trace context, made once at its start and kept in its state: ``trace_id``
    the run id's (:func:`trace_id_for`) and ``span_id`` the run span's; inside a W3C
    ``traceparent`` ``parent`` (``00-<trace id>-<span id>-<flags>``), that trace's id and
    ``parent_span_id`` its span. A ``parent`` that is not one is ignored."""
    import hashlib

    context: dict[str, Any] = {"trace_id": trace_id_for(run_id)}
    match = _TRACEPARENT.fullmatch((parent or "").strip().lower())
    if match is not None and match.group(1).strip("0") and match.group(2).strip("0"):
        context = {"trace_id": match.group(1), "parent_span_id": match.group(2)}
    digest = hashlib.sha256(f"{context['trace_id']}/run/{run_id}".encode()).hexdigest()
    context["span_id"] = digest[:16] if digest[:16].strip("0") else digest[16:32]
    return context


def trace_context_of(value: object) -> dict[str, str] | None:
    """A trace context as :func:`new_trace_context` makes it, or None."""
    if not isinstance(value, dict):
        return None
    trace_id, span_id = value.get("trace_id"), value.get("span_id")
    parent = value.get("parent_span_id")
    if not (isinstance(trace_id, str) and _HEX32.fullmatch(trace_id) and trace_id.strip("0")):
        return None
    if not (isinstance(span_id, str) and _HEX16.fullmatch(span_id) and span_id.strip("0")):
        return None
    if parent is not None and not (isinstance(parent, str) and _HEX16.fullmatch(parent)):
        return None
    context = {"trace_id": trace_id, "span_id": span_id}
    if parent is not None:
        context["parent_span_id"] = parent
    return context


def unix_nanos(text: str) -> int:
    """Nanoseconds since the Unix epoch of an RFC 3339 date-time (``ValueError`` if it is
    not one). Exact: no float is involved."""
    import datetime

    match = _TIMESTAMP.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not an RFC 3339 date-time (like 2026-02-09T14:03:00.000Z)")
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    if hour > 23 or minute > 59 or second > 60:
        raise ValueError(f"{text!r} has no such time of day")
    try:
        days = datetime.date(year, month, day).toordinal() - _EPOCH_ORDINAL
    except ValueError:
        raise ValueError(f"{text!r} names a day that does not exist") from None
    offset = 0
    if match.group(8):
        offset = (int(match.group(9)) * 60 + int(match.group(10))) * 60
        offset = offset if match.group(8) == "+" else -offset
    seconds = days * 86400 + hour * 3600 + minute * 60 + second - offset
    fraction = (match.group(7) or "")[:9].ljust(9, "0")
    return seconds * 1_000_000_000 + int(fraction)


def checked_record(
    record: Mapping[str, Any], position: int
) -> tuple[int, str, int, dict[str, Any]]:
    """``(seq, name, unix nanoseconds, data)`` of one record, or ``ContractError``."""
    seq = record.get("x_seq")
    if not isinstance(seq, int) or isinstance(seq, bool):
        seq = position
    where = f"event {seq}"
    name, data, ts = record.get("event"), record.get("data"), record.get("ts")
    if not isinstance(name, str) or not name:
        raise ContractError("has no event name", source=where, json_path="$.event")
    if not isinstance(data, dict):
        raise ContractError("data is not an object", source=where, json_path="$.data")
    try:
        moment = unix_nanos(ts if isinstance(ts, str) else repr(ts))
    except ValueError as exc:
        raise ContractError(str(exc), source=where, json_path="$.ts") from None
    return seq, name, moment, data


class SpanBuilder:
    """The span bookkeeping of :func:`run_trace`: what is open, and who is whose parent."""

    def __init__(self, trace: RunTrace, context: dict[str, str] | None = None) -> None:
        self.trace = trace
        # The run's trace context (its state's), else the one run.start tells, else derived.
        self.context = context
        self.root: Span | None = None
        self.phases: list[tuple[str, Span]] = []  # open phase spans, by skill, oldest first
        self.agents: dict[str, Span] = {}  # open agent spans by request id
        self.tools: list[tuple[tuple[str, str], Span]] = []  # open tool spans by (skill, tool)
        self.last_ns = 0

    def build(self, records: list[tuple[int, str, int, dict[str, Any]]]) -> None:
        if not records:
            return  # no events, no spans
        self.feed(records)
        self._close_the_rest()

    def feed(self, records: list[tuple[int, str, int, dict[str, Any]]]) -> None:
        """Place ``records`` after those fed before: a span they end is finished, the rest
        stay open (a log read whole, or events as a live run publishes them)."""
        for seq, name, moment, data in records:
            self.last_ns = max(self.last_ns, moment)
            if self.root is None:
                self._open_root(seq, name, moment, data)
                if name == "run.start":
                    continue
            self._place(seq, name, moment, data)

    def _place(self, seq: int, name: str, moment: int, data: dict[str, Any]) -> None:
        skill = _text(data.get("skill")) or ""
        if name in ("skill.start", "agent.start", "tool.call"):
            self._open_step(seq, name, moment, data, skill)
            return
        span = self._ended_by(name, skill, data)
        if span is None:
            event = SpanEvent(name=name, time_ns=moment, attributes=_event_attributes(seq, data))
            self._enclosing(data, skill).events.append(event)
            return
        message = data.get("failure") if span is self.root else data.get("error")
        failed = data.get("status") in _FAILED
        self._close(span, seq, moment, data, failed=failed, message=message)
        if span is self.root:
            self._close_the_rest()

    def _open_step(
        self, seq: int, name: str, moment: int, data: dict[str, Any], skill: str
    ) -> None:
        """A phase under the root; an agent request or tool step under its phase."""
        kind = name.split(".", 1)[0]
        if kind == "skill":
            self.phases.append((skill, self._open(f"skill {skill}", seq, moment, data)))
            return
        label = _text(data.get(kind)) or "?"
        span = self._open(f"{kind} {label}", seq, moment, data, parent=self._phase(skill))
        if kind == "agent":
            span.attributes.update(genai_attributes(data))
            self.agents[_text(data.get("request_id")) or f"#{seq}"] = span
        else:
            self.tools.append(((skill, label), span))

    def _ended_by(self, name: str, skill: str, data: dict[str, Any]) -> Span | None:
        """The open span the event ``name`` closes, taken off the open ones; or None."""
        if name == "skill.end":
            return self._take_phase(skill)
        if name == "agent.end":
            return self.agents.pop(_text(data.get("request_id")) or "", None)
        if name == "tool.result":
            return self._take_tool((skill, _text(data.get("tool")) or "?"))
        root = self._root()
        return root if name == "run.end" and not root.finished else None

    # -- opening and closing ---------------------------------------------------------------

    def _open_root(self, seq: int, name: str, moment: int, data: dict[str, Any]) -> None:
        started = name == "run.start"
        context = self.context or (trace_context_of(data.get(TRACE_FIELD)) if started else None)
        if context is not None:  # the run's own, as its state keeps it
            self.trace.trace_id = context["trace_id"]
        data = {k: v for k, v in data.items() if k != TRACE_FIELD}
        self.root = Span(
            name=f"run {self.trace.service_name}",
            span_id=(
                context["span_id"]
                if context is not None
                else self._span_id(str(seq) if started else "root")
            ),
            parent_span_id=None if context is None else context.get("parent_span_id"),
            start_ns=moment,
            end_ns=moment,
            attributes={f"{ATTRIBUTE_PREFIX}run_id": self.trace.run_id},
        )
        if started:
            _merge(self.root.attributes, data)
            self.root.attributes[f"{ATTRIBUTE_PREFIX}start_seq"] = seq
        else:
            self.root.attributes[f"{ATTRIBUTE_PREFIX}log_without_run_start"] = True
        self.trace.spans.append(self.root)

    def _open(
        self, name: str, seq: int, moment: int, data: dict[str, Any], *, parent: Span | None = None
    ) -> Span:
        attributes: dict[str, AttributeValue] = {f"{ATTRIBUTE_PREFIX}start_seq": seq}
        _merge(attributes, data)
        span = Span(
            name=name,
            span_id=self._span_id(str(seq)),
            parent_span_id=(parent or self._root()).span_id,
            start_ns=moment,
            end_ns=moment,
            attributes=attributes,
        )
        self.trace.spans.append(span)
        return span

    def _close(
        self,
        span: Span,
        seq: int,
        moment: int,
        data: dict[str, Any],
        *,
        failed: bool,
        message: object = None,
    ) -> None:
        _merge(span.attributes, data)
        if span.name.startswith("agent "):
            span.attributes.update(genai_attributes(data))
        span.attributes[f"{ATTRIBUTE_PREFIX}end_seq"] = seq
        span.end_ns = max(span.start_ns, moment)
        span.finished = True
        if failed:
            summary = message if message is not None else data.get("summary")
            span.error = _text(summary) or str(data.get("status"))

    def _close_the_rest(self) -> None:
        """End every span the log left open with the root (or the last event), marked
        unfinished; then stretch each parent over its children, whatever the clocks said."""
        root = self._root()
        end = root.end_ns if root.finished else self.last_ns
        for span in self.trace.spans:
            if not span.finished:
                span.end_ns = max(span.start_ns, end)
                span.attributes[f"{ATTRIBUTE_PREFIX}unfinished"] = True
                span.finished = True
        self.phases, self.agents, self.tools = [], {}, []
        by_id = {span.span_id: span for span in self.trace.spans}
        for span in reversed(self.trace.spans):  # children open after their parents
            parent = by_id.get(span.parent_span_id or "")
            if parent is not None:
                parent.end_ns = max(parent.end_ns, span.end_ns)

    # -- finding the open span an event belongs to ----------------------------------------

    def _root(self) -> Span:
        assert self.root is not None  # opened by the first event
        return self.root

    def _phase(self, skill: str) -> Span:
        """The open span of phase ``skill``; else the latest open phase's; else the root."""
        for name, span in reversed(self.phases):
            if name == skill:
                return span
        return self.phases[-1][1] if self.phases else self._root()

    def _take_phase(self, skill: str) -> Span | None:
        for index in range(len(self.phases) - 1, -1, -1):
            if self.phases[index][0] == skill:
                return self.phases.pop(index)[1]
        return None

    def _take_tool(self, key: tuple[str, str]) -> Span | None:
        for index in range(len(self.tools) - 1, -1, -1):
            if self.tools[index][0] == key:
                return self.tools.pop(index)[1]
        return None

    def _enclosing(self, data: dict[str, Any], skill: str) -> Span:
        agent = self.agents.get(_text(data.get("request_id")) or "")
        if agent is not None:
            return agent
        if self.root is not None and self.root.finished:
            return self.root  # after run.end every other span is closed too
        return self._phase(skill)

    def _span_id(self, key: str) -> str:
        import hashlib

        digest = hashlib.sha256(f"{self.trace.trace_id}/{key}".encode("ascii")).hexdigest()
        span_id = digest[:16]
        return span_id if span_id.strip("0") else digest[16:32]


# -- attributes ----------------------------------------------------------------------------


def genai_attributes(data: Mapping[str, Any]) -> dict[str, AttributeValue]:
    """The OpenTelemetry GenAI attributes of an agent request's ``agent.start`` or
    ``agent.end``: the agent, the request id, the model and the tokens where the answer
    tells them (``input_tokens``/``output_tokens``; a lone ``tokens_used`` has no GenAI
    name and stays ``orchestrator.tokens_used``)."""
    names = {
        "agent": "gen_ai.agent.name",
        "request_id": "gen_ai.request.id",
        "model": "gen_ai.request.model",
        "input_tokens": "gen_ai.usage.input_tokens",
        "output_tokens": "gen_ai.usage.output_tokens",
    }
    attributes: dict[str, AttributeValue] = {"gen_ai.operation.name": "invoke_agent"}
    for key, name in names.items():
        value = _scalar(data.get(key))
        if value is not None and not isinstance(value, bool):
            attributes[name] = value
    return attributes


def _event_attributes(seq: int, data: dict[str, Any]) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {f"{ATTRIBUTE_PREFIX}seq": seq}
    _merge(attributes, data)
    return attributes


def _merge(attributes: dict[str, AttributeValue], data: dict[str, Any]) -> None:
    for key, value in data.items():
        _flatten(f"{ATTRIBUTE_PREFIX}{key}", value, attributes)


def _flatten(key: str, value: Any, out: dict[str, AttributeValue]) -> None:
    """Put ``value`` under ``key`` as OpenTelemetry allows it (see the module docstring)."""
    if value is None:
        return
    if isinstance(value, dict):
        for inner, item in value.items():
            _flatten(f"{key}.{inner}", item, out)
        return
    if isinstance(value, list):
        out[key] = _array(value)
        return
    scalar = _scalar(value)
    if scalar is not None:
        out[key] = scalar


def _scalar(value: Any) -> str | bool | int | float | None:
    if isinstance(value, int) and not isinstance(value, bool) and value not in _INT64:
        return str(value)  # OTLP integers are 64-bit
    if isinstance(value, (str, bool, int, float)):
        return value
    return None


def _array(values: list[Any]) -> AttributeValue:
    """A list of one scalar type as it is (ints mixed with floats as floats); else JSON."""
    kinds = {type(v) for v in values}
    if kinds <= {str} or kinds <= {bool}:
        return list(values)
    if kinds <= {int}:
        return list(values) if all(v in _INT64 for v in values) else [str(v) for v in values]
    if kinds <= {int, float}:
        return [float(v) for v in values]
    return json.dumps(values, ensure_ascii=False, separators=(",", ":"))


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


# -- OTLP/JSON -----------------------------------------------------------------------------


def otlp_request(trace: RunTrace) -> dict[str, Any]:
    """The trace as an OTLP/JSON ``ExportTraceServiceRequest``: hex ids, times as decimal
    strings of Unix nanoseconds, typed attribute values, ``service.name`` the workflow's."""
    from .. import __version__

    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _otlp_attributes({"service.name": trace.service_name})},
                "scopeSpans": [
                    {
                        "scope": {"name": SCOPE_NAME, "version": __version__},
                        "spans": [_otlp_span(trace.trace_id, span) for span in trace.spans],
                    }
                ],
            }
        ]
    }


def otlp_json_bytes(trace: RunTrace) -> bytes:
    """:func:`otlp_request` as compact ASCII JSON with a final newline."""
    text = json.dumps(otlp_request(trace), ensure_ascii=True, separators=(",", ":"))
    return text.encode("ascii") + b"\n"


def _otlp_span(trace_id: str, span: Span) -> dict[str, Any]:
    document: dict[str, Any] = {"traceId": trace_id, "spanId": span.span_id}
    if span.parent_span_id is not None:
        document["parentSpanId"] = span.parent_span_id
    document.update(
        name=span.name,
        kind=_SPAN_KIND_INTERNAL,
        startTimeUnixNano=str(span.start_ns),
        endTimeUnixNano=str(span.end_ns),
        attributes=_otlp_attributes(span.attributes),
        events=[
            {
                "timeUnixNano": str(event.time_ns),
                "name": event.name,
                "attributes": _otlp_attributes(event.attributes),
            }
            for event in span.events
        ],
        status={} if span.error is None else {"code": _STATUS_CODE_ERROR, "message": span.error},
    )
    return document


def _otlp_attributes(attributes: Mapping[str, AttributeValue]) -> list[dict[str, Any]]:
    return [{"key": key, "value": _any_value(value)} for key, value in attributes.items()]


def _any_value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}  # int64 is a string in protobuf's JSON mapping
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list):
        return {"arrayValue": {"values": [_any_value(item) for item in value]}}
    return {"stringValue": str(value)}


# -- OTLP/HTTP -----------------------------------------------------------------------------


def traces_url(endpoint: str) -> str:
    """``endpoint`` as the URL to POST to: an address without a path gets ``/v1/traces``
    (as ``OTEL_EXPORTER_OTLP_ENDPOINT`` does); one with a path is used as it is."""
    from urllib.parse import urlsplit, urlunsplit

    from .._http import endpoint_of

    parts = urlsplit(endpoint)
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:  # not a number, or out of range
        port_ok = False
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise ValueError(
            f"{endpoint_of(endpoint)!r} is not an http:// or https:// URL with a valid "
            "port; write one like http://localhost:4318/v1/traces"
        )
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            f"{endpoint_of(endpoint)!r} carries credentials in the URL; give them as a "
            "header in OTEL_EXPORTER_OTLP_HEADERS instead (never printed)"
        )
    if parts.path in ("", "/"):
        parts = parts._replace(path=TRACES_PATH)
    return urlunsplit(parts)


def headers_from_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """Extra request headers from ``OTEL_EXPORTER_OTLP_TRACES_HEADERS`` (else
    ``OTEL_EXPORTER_OTLP_HEADERS``): ``name=value`` pairs joined by commas, values
    percent-encoded, as the OpenTelemetry exporters read them."""
    from urllib.parse import unquote

    setting = environ.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS")
    if setting is None:
        setting = environ.get("OTEL_EXPORTER_OTLP_HEADERS", "")
    headers = {}
    for pair in setting.split(","):
        name, sep, value = pair.partition("=")
        if sep and name.strip():
            headers[unquote(name.strip())] = unquote(value.strip())
    return headers


# -- the OpenTelemetry SDK (the ``otel`` extra) --------------------------------------------


def replay_spans(trace: RunTrace, exporter: Any) -> None:
    """Hand the trace's spans to an OpenTelemetry SDK span ``exporter`` (the OTLP one, the
    console's, an in-memory one) in one batch, with this module's ids and times.

    A failed export raises :class:`OtlpExportError`. Needs ``opentelemetry-sdk``
    (``pip install 'checkpoint-orchestrator[otel]'``), imported only here.
    """
    sdk = load_sdk()
    result = exporter.export(readable_spans(sdk, trace, trace.spans))
    if result is not sdk.export.SpanExportResult.SUCCESS:
        where = getattr(exporter, "_endpoint", None) or type(exporter).__name__
        raise OtlpExportError(
            f"{where}: the spans were not delivered; is an OTLP/HTTP collector running and "
            "listening there (often http://HOST:4318/v1/traces)?",
            url=str(where),
        )


def readable_spans(sdk: Any, trace: RunTrace, spans: Iterable[Span]) -> list[Any]:
    """``spans`` of ``trace`` as the SDK's finished spans (``ReadableSpan``), which any SDK
    exporter or span processor takes: sampled, internal, ``service.name`` the trace's."""
    from .. import __version__

    resource = sdk.resources.Resource.create({"service.name": trace.service_name})
    scope = sdk.instrumentation.InstrumentationScope(SCOPE_NAME, __version__)
    trace_id = int(trace.trace_id, 16)
    finished = []
    for span in spans:
        status = sdk.api.Status(sdk.api.StatusCode.UNSET)
        if span.error is not None:
            status = sdk.api.Status(sdk.api.StatusCode.ERROR, span.error)
        parent = None
        if span.parent_span_id is not None:
            parent = _span_context(sdk, trace_id, span.parent_span_id)
        finished.append(
            sdk.trace.ReadableSpan(
                name=span.name,
                context=_span_context(sdk, trace_id, span.span_id),
                parent=parent,
                resource=resource,
                attributes=_frozen(span.attributes),
                events=[
                    sdk.trace.Event(event.name, _frozen(event.attributes), event.time_ns)
                    for event in span.events
                ],
                kind=sdk.api.SpanKind.INTERNAL,
                status=status,
                start_time=span.start_ns,
                end_time=span.end_ns,
                instrumentation_scope=scope,
            )
        )
    return finished


def _frozen(attributes: Mapping[str, AttributeValue]) -> dict[str, Any]:
    """Attributes as the SDK keeps them: arrays as tuples."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in attributes.items()}


def _span_context(sdk: Any, trace_id: int, span_id: str) -> Any:
    return sdk.api.SpanContext(
        trace_id=trace_id,
        span_id=int(span_id, 16),
        is_remote=False,
        trace_flags=sdk.api.TraceFlags(sdk.api.TraceFlags.SAMPLED),
    )


def load_sdk() -> Any:
    """The OpenTelemetry SDK modules the spans are built with, or an ImportError saying
    how to install them."""
    import importlib
    import types

    try:
        modules = {
            "api": importlib.import_module("opentelemetry.trace"),
            "trace": importlib.import_module("opentelemetry.sdk.trace"),
            "resources": importlib.import_module("opentelemetry.sdk.resources"),
            "export": importlib.import_module("opentelemetry.sdk.trace.export"),
            "instrumentation": importlib.import_module("opentelemetry.sdk.util.instrumentation"),
        }
    except ImportError as exc:
        raise ImportError(
            f"OpenTelemetry spans need the SDK ({exc}); install it with {OTEL_INSTALL_HINT}",
            name=exc.name,
        ) from None
    return types.SimpleNamespace(**modules)


def otlp_exporter(endpoint: str | None = None, *, timeout: float | None = None) -> Any:
    """The SDK's OTLP/HTTP (protobuf) span exporter: to ``endpoint`` (see
    :func:`traces_url`), else where ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` says; headers from ``OTEL_EXPORTER_OTLP_HEADERS``."""
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        raise ImportError(
            f"sending spans needs the OTLP exporter ({exc}); install it with {OTEL_INSTALL_HINT}",
            name=exc.name,
        ) from None
    options: dict[str, Any] = {}
    if endpoint is not None:
        options["endpoint"] = traces_url(endpoint)
    if timeout is not None:
        options["timeout"] = timeout
    return OTLPSpanExporter(**options)
