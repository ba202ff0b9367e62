"""Live OpenTelemetry spans: a run sends its spans while it runs, through the SDK's OTLP
exporter, to a receiver in the test process; a resume in a new process goes on with the
same trace; without an endpoint nothing of OpenTelemetry is imported."""

from __future__ import annotations

import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from support import needs
from support.cli import orchestrate

WORKFLOW = """
from pathlib import Path
from orchestrator import Workflow, phase

PAD = "Please answer with care; this sentence pads the prompt past the minimum length " * 2


class Traced(Workflow):
    name = "traced"
    agents = ("critic",)

    @phase(1)
    def draft(self, ctx):
        ctx.step("outline", lambda: "three parts")
        return ctx.ask("critic", PAD)

    @phase(2)
    def publish(self, ctx):
        return ctx.step("write", lambda: Path(ctx.workdir, "OUT").write_text("done"))
"""

PROXY_VARIABLES = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy")


class Receiver:
    """An OTLP/HTTP (protobuf) traces receiver on loopback: every span it was sent."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        self.spans: list[Any] = []
        self.paths: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.paths.append(self.path)
                for resource_spans in request.resource_spans:
                    for scope_spans in resource_spans.scope_spans:
                        receiver.spans.extend(scope_spans.spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    def names(self) -> list[str]:
        return [span.name for span in self.spans]

    def named(self, name: str) -> Any:
        (span,) = [span for span in self.spans if span.name == name]
        return span


def attributes_of(span: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for item in span.attributes:
        value = item.value
        found[item.key] = getattr(value, value.WhichOneof("value"))
    return found


@pytest.mark.slow
def test_a_paused_run_sends_its_spans_and_a_resume_goes_on_with_its_trace(
    tmp_path: Path,
) -> None:
    needs.extra("opentelemetry.exporter.otlp.proto.http", "otel")
    (tmp_path / "wf.py").write_text(WORKFLOW)
    workdir = tmp_path / "work"
    workdir.mkdir()
    with Receiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}
        run = orchestrate(
            "run", f"{tmp_path / 'wf.py'}:Traced", "--workdir", workdir,
            env=env, unset=PROXY_VARIABLES,
        )  # fmt: skip
        assert run.returncode == 42, run.stderr
        # Paused: what ended is in already, before the run completes.
        assert sorted(receiver.names()) == ["start traced", "tool outline"]
        assert receiver.paths == ["/v1/traces"] * len(receiver.paths)
        paused = receiver.named("start traced")
        assert [event.name for event in paused.events] == ["run.pause"]
        trace_id = paused.trace_id
        answered = orchestrate(
            "respond", "--workdir", workdir, "--text", "fine",
            "--model", "claude-test-1", "--tokens-used", "321",
        )  # fmt: skip
        assert answered.returncode == 0, answered.stderr
        resumed = orchestrate("resume", "--workdir", workdir, env=env, unset=PROXY_VARIABLES)
        assert resumed.returncode == 0, resumed.stderr
    assert sorted(receiver.names()) == [
        "agent critic", "resume traced", "run traced", "skill draft", "skill publish",
        "start traced", "tool outline", "tool write",
    ]  # fmt: skip
    assert {span.trace_id for span in receiver.spans} == {trace_id}
    by_id = {span.span_id: span for span in receiver.spans}

    def parent(name: str) -> str:
        return str(by_id[receiver.named(name).parent_span_id].name)

    assert receiver.named("run traced").parent_span_id == b""
    assert parent("skill draft") == parent("skill publish") == "run traced"
    assert parent("start traced") == parent("resume traced") == "run traced"
    assert parent("tool outline") == parent("agent critic") == "skill draft"
    assert parent("tool write") == "skill publish"
    ask = attributes_of(receiver.named("agent critic"))
    assert ask["gen_ai.request.model"] == "claude-test-1"
    assert ask["gen_ai.agent.name"] == "critic"
    assert ask["orchestrator.tokens_used"] == 321
    assert ask["gen_ai.request.id"] == ask["orchestrator.request_id"]
    # The phase began in the first process: its span keeps that start and the pause.
    draft = receiver.named("skill draft")
    assert draft.start_time_unix_nano < paused.end_time_unix_nano
    assert "run.pause" in [event.name for event in draft.events]
    resume_span = receiver.named("resume traced")
    assert [event.name for event in resume_span.events] == ["run.resume"]


@pytest.mark.slow
def test_without_an_endpoint_resume_imports_no_opentelemetry(tmp_path: Path) -> None:
    (tmp_path / "wf.py").write_text(WORKFLOW)
    workdir = tmp_path / "work"
    workdir.mkdir()
    unset = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    run = orchestrate("run", f"{tmp_path / 'wf.py'}:Traced", "--workdir", workdir, unset=unset)
    assert run.returncode == 42, run.stderr
    code = (
        "import sys; from orchestrator.cli.main import main; "
        f"rc = main(['resume', '--workdir', {str(workdir)!r}]); "
        "print(rc, sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k not in unset}
    shown = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    assert shown.stdout.split()[-2:] == ["42", "[]"], shown.stderr
