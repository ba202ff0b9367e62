"""An OTLP/HTTP traces receiver in the test process: a small HTTP server on loopback that
decodes what the OpenTelemetry SDK's exporter sends (protobuf at ``/v1/traces``) with the
exporter's own ``opentelemetry.proto``."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# A workflow whose first phase makes a step, then asks (and pauses); its second makes a step.
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
