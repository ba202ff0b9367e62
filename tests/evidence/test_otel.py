"""A run's events as OpenTelemetry spans: the conversion, the OTLP/JSON file, the POST to
an OTLP/HTTP endpoint (a real server on loopback), and the replay into the SDK."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from orchestrator._errors import ContractError
from orchestrator.evidence.otel import (
    RunTrace,
    Span,
    otlp_exporter,
    otlp_json_bytes,
    otlp_request,
    replay_spans,
    run_trace,
    trace_id_for,
    unix_nanos,
)
from support import needs
from support.cli import command, orchestrate
from support.evidence_support import EXAMPLE_HANDLER, example_args

RUN_ID = "5f0c1e2a-0b1c-4d2e-8f30-1a2b3c4d5e6f"
PATIENCE = 120.0
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY")


@pytest.fixture(scope="module")
def driven(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A work directory where the template-create example ran to its end."""
    workdir = tmp_path_factory.mktemp("driven")
    done = orchestrate("drive", *example_args(workdir), "--handler", EXAMPLE_HANDLER, text=False)
    assert done.returncode == 0, done.stderr.decode()
    return workdir


def records_of(workdir: Path) -> list[dict[str, Any]]:
    (log,) = (workdir / ".orchestrator" / "runs").glob("*/events.ndjson")
    return [json.loads(line) for line in log.read_bytes().splitlines()]


def exported(workdir: Path, target: Path) -> dict[str, Any]:
    done = orchestrate("events", "--workdir", str(workdir), "--otlp", str(target), text=False)
    assert done.returncode == 0, done.stderr.decode()
    assert b"wrote " in done.stderr and str(target).encode() in done.stderr
    document: dict[str, Any] = json.loads(target.read_bytes())
    return document


def spans_of(document: dict[str, Any]) -> list[dict[str, Any]]:
    (resource,) = document["resourceSpans"]
    (scope,) = resource["scopeSpans"]
    spans: list[dict[str, Any]] = scope["spans"]
    return spans


def attributes(item: dict[str, Any]) -> dict[str, Any]:
    """OTLP's typed attribute list as plain values."""
    return {a["key"]: plain(a["value"]) for a in item["attributes"]}


def plain(value: dict[str, Any]) -> Any:
    ((kind, inner),) = value.items()
    if kind == "intValue":
        assert isinstance(inner, str)  # int64 travels as a string
        return int(inner)
    if kind == "arrayValue":
        return [plain(item) for item in inner["values"]]
    return inner


# -- the OTLP/JSON export of a real run ----------------------------------------------------


@pytest.mark.slow
def test_a_finished_run_exports_as_one_well_formed_trace(driven: Path, tmp_path: Path) -> None:
    document = exported(driven, tmp_path / "trace.json")
    records = records_of(driven)
    run_id = records[0]["data"]["run_id"]
    (resource,) = document["resourceSpans"]
    assert attributes(resource["resource"]) == {"service.name": "template-create"}
    assert resource["scopeSpans"][0]["scope"]["name"] == "checkpoint-orchestrator"
    spans = spans_of(document)
    opening = {"skill.start", "agent.start", "tool.call"}
    assert len(spans) == 1 + sum(r["event"] in opening for r in records)
    by_id = {span["spanId"]: span for span in spans}
    assert len(by_id) == len(spans)
    (root,) = [span for span in spans if "parentSpanId" not in span]
    assert root is spans[0] and root["name"] == "run template-create"
    for span in spans:
        assert span["traceId"] == run_id.replace("-", "")
        assert len(span["spanId"]) == 16 and int(span["spanId"], 16) != 0
        assert span["kind"] == 1 and span["status"] == {}
        start, end = int(span["startTimeUnixNano"]), int(span["endTimeUnixNano"])
        assert start <= end
        assert "orchestrator.unfinished" not in attributes(span)  # every span was closed
        if span is root:
            continue
        parent = by_id[span["parentSpanId"]]
        assert int(parent["startTimeUnixNano"]) <= start
        assert end <= int(parent["endTimeUnixNano"])
        facts = attributes(span)
        if span["name"].startswith("skill "):
            assert parent is root
        else:  # an agent request or tool step lies inside its own phase's span
            assert parent["name"] == f"skill {facts['orchestrator.skill']}"
    assert int(root["startTimeUnixNano"]) == unix_nanos(records[0]["ts"])
    assert int(root["endTimeUnixNano"]) == unix_nanos(records[-1]["ts"])


@pytest.mark.slow
def test_spans_carry_the_events_facts_and_times(driven: Path, tmp_path: Path) -> None:
    spans = spans_of(exported(driven, tmp_path / "trace.json"))
    records = records_of(driven)
    first_ask = next(r for r in records if r["event"] == "agent.start")
    answer = next(r for r in records if r["event"] == "agent.end")
    agent = next(s for s in spans if s["name"] == "agent architectural-reviewer")
    facts = attributes(agent)
    assert facts["orchestrator.request_id"] == first_ask["data"]["request_id"]
    assert facts["orchestrator.model"] == "offline-fake-agent"
    assert facts["orchestrator.tokens_used"] == answer["data"]["tokens_used"]
    assert facts["orchestrator.confidence"] == 0.92 and facts["orchestrator.status"] == "pass"
    assert facts["orchestrator.start_seq"] == first_ask["x_seq"]
    assert facts["orchestrator.end_seq"] == answer["x_seq"]
    assert agent["startTimeUnixNano"] == str(unix_nanos(first_ask["ts"]))
    assert agent["endTimeUnixNano"] == str(unix_nanos(answer["ts"]))
    root_facts = attributes(spans[0])
    assert root_facts["orchestrator.phases"][0] == "codebase_analysis"
    assert root_facts["orchestrator.phases_completed"] == 9
    # Each pause is an event on the span of the phase that paused.
    pauses = [r for r in records if r["event"] == "run.pause"]
    for pause in pauses:
        (phase,) = [s for s in spans if s["name"] == f"skill {pause['data']['skill']}"]
        (event,) = [e for e in phase["events"] if e["name"] == "run.pause"]
        assert event["timeUnixNano"] == str(unix_nanos(pause["ts"]))
        assert attributes(event)["orchestrator.waiting"] == pause["data"]["waiting"]
        assert phase["startTimeUnixNano"] <= event["timeUnixNano"] <= phase["endTimeUnixNano"]


def test_exporting_twice_gives_the_same_bytes(driven: Path, tmp_path: Path) -> None:
    exported(driven, tmp_path / "one.json")
    exported(driven, tmp_path / "two.json")
    assert (tmp_path / "one.json").read_bytes() == (tmp_path / "two.json").read_bytes()
    shown = orchestrate("events", "--workdir", str(driven), "--otlp", "-", text=False)
    assert shown.returncode == 0 and shown.stdout == (tmp_path / "one.json").read_bytes()


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (["--otlp", "out.json", "--type", "agent.*"], 2, "drop --json and --type"),
        (["--otlp", "out.json", "--json"], 2, "drop --json and --type"),
        (["--otlp-endpoint", "ftp://collector:4318"], 2, "http:// or https:// URL"),
        (["--otlp-endpoint", "http://"], 2, "http:// or https:// URL"),
        (["--otlp", "/no/such/dir/out.json"], 1, "cannot write it"),
    ],
)
def test_export_mistakes_are_named(driven: Path, args: list[str], code: int, words: str) -> None:
    shown = orchestrate("events", "--workdir", str(driven), *args, text=False)
    assert shown.returncode == code
    assert words in shown.stderr.decode() and b"Traceback" not in shown.stderr


def test_follow_exports_once_the_run_has_ended(tmp_path: Path) -> None:
    run_dir = tmp_path / ".orchestrator" / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    log = run_dir / "events.ndjson"
    log.write_bytes(b"".join(line(r) for r in small_run()[:-1]))
    target = tmp_path / "trace.json"
    follow = command("events", "--workdir", tmp_path, "--run", RUN_ID, "--follow", "--poll", "0.05")
    with subprocess.Popen(
        [*follow, "--otlp", str(target)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as child:
        try:
            with log.open("ab") as file:
                file.write(line(small_run()[-1]))
            out, err = child.communicate(timeout=PATIENCE)
        finally:
            child.kill()
    assert child.returncode == 0, err.decode()
    assert out == b""
    root = spans_of(json.loads(target.read_bytes()))[0]
    assert attributes(root)["orchestrator.status"] == "failed"
    assert "orchestrator.unfinished" not in attributes(root)


# -- the conversion, on logs written here --------------------------------------------------


def record(seq: int, event: str, **data: Any) -> dict[str, Any]:
    return {"ts": f"2026-03-01T10:00:{seq:02d}.500Z", "event": event, "data": data, "x_seq": seq}


def line(item: dict[str, Any]) -> bytes:
    return json.dumps(item, separators=(",", ":")).encode() + b"\n"


def small_run() -> list[dict[str, Any]]:
    """One phase that calls a tool, asks twice (one answer unusable), decides, writes an
    artifact, logs an event of its own, and fails the run."""
    rid, other = "11111111-aaaa", "22222222-bbbb"
    return [
        record(1, "run.start", workflow="tiny", run_id=RUN_ID, phases=["check"]),
        record(2, "skill.start", skill="check", phase=1),
        record(3, "tool.call", tool="grep", skill="check"),
        record(4, "tool.result", tool="grep", skill="check", status="error", error="no such dir"),
        record(5, "agent.start", agent="judge", request_id=rid, skill="check", attempt=1),
        record(6, "agent.start", agent="judge", request_id=other, skill="check", attempt=1),
        record(7, "run.pause", phase=1, skill="check", waiting=[rid, other]),
        record(8, "agent.end", agent="judge", request_id=other, skill="check", status="pass"),
        record(9, "error", skill="check", agent="judge", request_id=rid, message="bad JSON"),
        record(
            10,
            "agent.end",
            agent="judge",
            request_id=rid,
            skill="check",
            status="fail",
            summary="answer refused: bad JSON",
        ),
        record(11, "decision", skill="check", decision="fallback", method="guess", because="x"),
        record(12, "artifact.written", name="report", path="r.md", bytes=10, skill="check"),
        record(13, "check.scored", skill="check", score=0.5, tags=["a", "b"], detail={"n": 1}),
        record(14, "skill.end", skill="check", phase=1, status="error", summary="phase broke"),
        record(15, "run.end", status="failed", duration_ms=15000, failure="phase check broke"),
    ]


def named(trace: RunTrace, name: str) -> Span:
    (span,) = [s for s in trace.spans if s.name == name]
    return span


def test_outcomes_become_statuses_and_other_events_land_where_they_happened() -> None:
    trace = run_trace(small_run())
    root, phase, tool = (
        named(trace, "run tiny"),
        named(trace, "skill check"),
        named(trace, "tool grep"),
    )
    refused, answered = [s for s in trace.spans if s.name == "agent judge"]
    assert root.error == "phase check broke" and phase.error == "phase broke"
    assert tool.error == "no such dir" and refused.error == "answer refused: bad JSON"
    assert answered.error is None
    assert [e.name for e in refused.events] == ["error"]  # told while its request was open
    assert [e.name for e in phase.events] == [
        "run.pause",
        "decision",
        "artifact.written",
        "check.scored",
    ]
    scored = phase.events[-1].attributes
    assert scored["orchestrator.tags"] == ["a", "b"] and scored["orchestrator.detail.n"] == 1
    assert scored["orchestrator.seq"] == 13
    assert {s.parent_span_id for s in (tool, refused, answered)} == {phase.span_id}
    assert phase.parent_span_id == root.span_id and root.parent_span_id is None
    document = otlp_request(trace)
    statuses = {s["name"]: s["status"] for s in spans_of(document)}
    assert statuses["skill check"] == {"code": 2, "message": "phase broke"}


def test_a_run_not_over_ends_at_its_last_event_with_open_spans_marked() -> None:
    trace = run_trace(small_run()[:6])  # both asks still out
    last = unix_nanos(small_run()[5]["ts"])
    assert all(span.end_ns == last for span in trace.spans if span.name != "tool grep")
    unfinished = {s.name for s in trace.spans if s.attributes.get("orchestrator.unfinished")}
    assert unfinished == {"run tiny", "skill check", "agent judge"}
    assert named(trace, "tool grep").end_ns == unix_nanos(small_run()[3]["ts"])


def test_ids_are_derived_from_the_run_and_the_opening_event() -> None:
    first, again = run_trace(small_run()), run_trace(small_run())
    assert [s.span_id for s in first.spans] == [s.span_id for s in again.spans]
    assert first.trace_id == RUN_ID.replace("-", "")
    other = run_trace(small_run(), run_id="6a1b2c3d-0000-4000-8000-000000000000")
    assert {s.span_id for s in first.spans}.isdisjoint(s.span_id for s in other.spans)
    named_run = trace_id_for("nightly build 7")
    assert (
        len(named_run) == 32 and int(named_run, 16) and named_run == trace_id_for("nightly build 7")
    )
    assert trace_id_for("00000000-0000-0000-0000-000000000000") != "0" * 32


def test_a_log_without_its_start_still_makes_a_closed_trace() -> None:
    trace = run_trace(small_run()[4:10], run_id=RUN_ID)
    root = trace.spans[0]
    assert root.parent_span_id is None and root.attributes["orchestrator.log_without_run_start"]
    assert trace.service_name == "checkpoint-orchestrator"
    assert all(span.end_ns >= span.start_ns for span in trace.spans)
    assert {s.parent_span_id for s in trace.spans[1:]} == {root.span_id}


def test_values_become_otel_attribute_types() -> None:
    item = record(
        2,
        "x.y",
        text="t",
        flag=True,
        count=3,
        ratio=0.5,
        nothing=None,
        huge=2**70,
        ints=[1, 2],
        mixed_numbers=[1, 2.5],
        mixed=[1, "a"],
        objects=[{"a": 1}],
        nested={"deep": {"er": "yes"}},
    )
    trace = run_trace([record(1, "run.start", workflow="w", run_id=RUN_ID), item])
    (span_event,) = trace.spans[0].events
    (event,) = spans_of(otlp_request(trace))[0]["events"]
    values = {a["key"].removeprefix("orchestrator."): a["value"] for a in event["attributes"]}
    assert values["text"] == {"stringValue": "t"} and values["flag"] == {"boolValue": True}
    assert values["count"] == {"intValue": "3"} and values["ratio"] == {"doubleValue": 0.5}
    assert "nothing" not in values and values["huge"] == {"stringValue": str(2**70)}
    assert values["ints"] == {"arrayValue": {"values": [{"intValue": "1"}, {"intValue": "2"}]}}
    assert span_event.attributes["orchestrator.mixed_numbers"] == [1.0, 2.5]
    assert values["mixed"] == {"stringValue": '[1,"a"]'}
    assert values["objects"] == {"stringValue": '[{"a":1}]'}
    assert values["nested.deep.er"] == {"stringValue": "yes"}


def test_times_are_exact_nanoseconds() -> None:
    assert unix_nanos("1970-01-01T00:00:00Z") == 0
    assert unix_nanos("1970-01-01T01:00:00.5+01:00") == 500_000_000
    assert unix_nanos("2026-03-01T10:00:01.123456789123Z") == 1772359201123456789
    for bad in (
        "2026-02-30T10:00:00Z",
        "2026-03-01T10:00:00",
        "2026-03-01",
        "2026-03-01T25:00:00Z",
    ):
        with pytest.raises(ValueError, match="2026"):
            unix_nanos(bad)
    with pytest.raises(ContractError, match=r"event 1: .*RFC 3339"):
        run_trace([{"ts": "yesterday", "event": "run.start", "data": {}, "x_seq": 1}])


# -- OTLP/HTTP -----------------------------------------------------------------------------


class Collector:
    """An OTLP/HTTP receiver on 127.0.0.1 that records each POST and answers as told."""

    def __init__(
        self, status: int = 200, body: bytes = b"{}", headers: dict[str, str] | None = None
    ) -> None:
        self.status, self.body, self.headers = status, body, headers or {}
        self.received: list[tuple[str, dict[str, str], bytes]] = []
        self.release = threading.Event()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                headers = {name.lower(): value for name, value in self.headers.items()}
                collector.received.append((self.path, headers, body))
                if collector.status == 0:  # no answer until the test ends
                    collector.release.wait(PATIENCE)
                    return
                self.send_response(collector.status)
                for name, value in collector.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(collector.body)))
                self.end_headers()
                self.wfile.write(collector.body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Collector:
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def no_proxies(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    yield


def received_spans(body: bytes) -> list[Any]:
    """The spans of an OTLP/HTTP protobuf ``ExportTraceServiceRequest``."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    return [
        span
        for resource_spans in request.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
    ]


def test_the_endpoint_receives_the_same_spans_with_its_headers(
    driven: Path, tmp_path: Path
) -> None:
    needs.extra("opentelemetry.exporter.otlp.proto.http", "otel")
    document = exported(driven, tmp_path / "trace.json")
    env = {"OTEL_EXPORTER_OTLP_HEADERS": "x-team=obs,authorization=Bearer%20abc"}
    with Collector() as collector:
        sent = orchestrate(
            "events",
            "--workdir",
            str(driven),
            "--otlp-endpoint",
            collector.url,
            env=env,
            unset=PROXY_VARIABLES,
            text=False,
        )
    assert sent.returncode == 0, sent.stderr.decode()
    assert b"sent 26 spans" in sent.stderr  # the run, 9 phases, 9 asks, 7 steps
    ((path, headers, body),) = collector.received
    assert path == "/v1/traces"
    assert headers["content-type"] == "application/x-protobuf"  # the SDK's own exporter
    assert headers["x-team"] == "obs" and headers["authorization"] == "Bearer abc"
    spans = received_spans(body)
    assert [(s.name, s.span_id.hex(), s.trace_id.hex()) for s in spans] == [
        (s["name"], s["spanId"], s["traceId"]) for s in spans_of(document)
    ]
    assert spans[0].name == "run template-create"


@pytest.mark.usefixtures("no_proxies")
def test_a_path_given_is_used_as_it_is() -> None:
    needs.extra("opentelemetry.exporter.otlp.proto.http", "otel")
    with Collector() as collector:
        exporter = otlp_exporter(collector.url + "/custom/traces", timeout=30)
        replay_spans(run_trace(small_run()), exporter)
        exporter.shutdown()
    assert collector.received[0][0] == "/custom/traces"
    assert len(received_spans(collector.received[0][2])) == len(run_trace(small_run()).spans)


@pytest.mark.usefixtures("no_proxies")
def test_a_refused_export_says_where(driven: Path) -> None:
    needs.extra("opentelemetry.exporter.otlp.proto.http", "otel")
    with Collector(400, b"bad trace id") as collector:
        sent = orchestrate(
            "events", "--workdir", str(driven), "--otlp-endpoint", collector.url,
            unset=PROXY_VARIABLES, text=False,
        )  # fmt: skip
    assert sent.returncode == 1 and b"Traceback" not in sent.stderr
    assert (collector.url + "/v1/traces").encode() in sent.stderr
    assert b"not delivered" in sent.stderr
    assert len(collector.received) == 1  # a 400 is not tried again


@pytest.mark.usefixtures("no_proxies")
def test_nobody_listening_is_a_clear_error(driven: Path) -> None:
    needs.extra("opentelemetry.exporter.otlp.proto.http", "otel")
    with Collector() as collector:
        url = collector.url  # a port that was ours, now closed
    sent = orchestrate(
        "events", "--workdir", str(driven), "--otlp-endpoint", url, "--otlp-timeout", "2",
        unset=PROXY_VARIABLES, text=False,
    )  # fmt: skip
    assert sent.returncode == 1 and b"not delivered" in sent.stderr
    assert b"Traceback" not in sent.stderr


# -- the OpenTelemetry SDK -----------------------------------------------------------------


def test_without_the_sdk_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    with pytest.raises(ImportError, match=r"pip install 'checkpoint-orchestrator\[otel\]'"):
        replay_spans(run_trace(small_run()), exporter=object())


def test_the_sdk_receives_the_same_spans(driven: Path) -> None:
    needs.extra("opentelemetry.sdk", "otel")
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import StatusCode

    for trace in (run_trace(records_of(driven)), run_trace(small_run())):
        exporter = InMemorySpanExporter()
        replay_spans(trace, exporter)
        received = exporter.get_finished_spans()
        assert [s.name for s in received] == [s.name for s in trace.spans]
        for ours, theirs in zip(trace.spans, received, strict=True):
            assert f"{theirs.context.trace_id:032x}" == trace.trace_id
            assert f"{theirs.context.span_id:016x}" == ours.span_id
            parent = None if theirs.parent is None else f"{theirs.parent.span_id:016x}"
            assert parent == ours.parent_span_id
            assert (theirs.start_time, theirs.end_time) == (ours.start_ns, ours.end_ns)
            assert dict(theirs.attributes or {}) == {
                k: tuple(v) if isinstance(v, list) else v for k, v in ours.attributes.items()
            }
            assert [(e.name, e.timestamp) for e in theirs.events] == [
                (e.name, e.time_ns) for e in ours.events
            ]
            wanted = StatusCode.UNSET if ours.error is None else StatusCode.ERROR
            assert theirs.status.status_code is wanted
            assert theirs.resource.attributes["service.name"] == trace.service_name


def test_the_json_bytes_end_with_a_newline_and_are_ascii() -> None:
    trace = run_trace([record(1, "run.start", workflow="wf", run_id=RUN_ID, note="café ☕")])
    body = otlp_json_bytes(trace)
    assert body.endswith(b"\n") and body.isascii()
    assert attributes(spans_of(json.loads(body))[0])["orchestrator.note"] == "café ☕"
