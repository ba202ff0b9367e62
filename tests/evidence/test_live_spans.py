"""Live OpenTelemetry spans: a run sends its spans while it runs, through the SDK's OTLP
exporter, to a receiver in the test process; a resume in a new process goes on with the
same trace; without an endpoint nothing of OpenTelemetry is imported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support import needs
from support.cli import orchestrate
from support.otlp_receiver import PROXY_VARIABLES, WORKFLOW, Receiver, attributes_of


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


@pytest.mark.slow
def test_a_run_started_inside_a_trace_stays_in_it_live_and_after_the_fact(
    tmp_path: Path,
) -> None:
    needs.extra("opentelemetry.exporter.otlp.proto.http", "otel")
    (tmp_path / "wf.py").write_text(WORKFLOW)
    workdir = tmp_path / "work"
    workdir.mkdir()
    caller_trace, caller_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    with Receiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}
        started = {**env, "TRACEPARENT": f"00-{caller_trace}-{caller_span}-01"}
        run = orchestrate(
            "run", f"{tmp_path / 'wf.py'}:Traced", "--workdir", workdir,
            env=started, unset=PROXY_VARIABLES,
        )  # fmt: skip
        assert run.returncode == 42, run.stderr
        assert orchestrate("respond", "--workdir", workdir, "--text", "ok").returncode == 0
        # The resume knows the trace from the run's state alone; --otlp names the endpoint.
        unset = (*PROXY_VARIABLES, "OTEL_EXPORTER_OTLP_ENDPOINT")
        wrong = orchestrate("resume", "--workdir", workdir, "--otlp", "ftp://x", unset=unset)
        assert wrong.returncode == 2 and "--otlp 'ftp://x' is not an http" in wrong.stderr
        resumed = orchestrate("resume", "--workdir", workdir, "--otlp", receiver.url, unset=unset)
        assert resumed.returncode == 0, resumed.stderr
    assert {span.trace_id.hex() for span in receiver.spans} == {caller_trace}
    root = receiver.named("run traced")
    assert root.parent_span_id.hex() == caller_span
    live = {(span.name, span.span_id.hex()) for span in receiver.spans}
    exported = orchestrate("events", "--workdir", workdir, "--otlp", tmp_path / "trace.json")
    assert exported.returncode == 0, exported.stderr
    document = json.loads((tmp_path / "trace.json").read_text())
    (resource,) = document["resourceSpans"]
    (scope,) = resource["scopeSpans"]
    after = {(span["name"], span["spanId"]) for span in scope["spans"]}
    assert {span["traceId"] for span in scope["spans"]} == {caller_trace}
    assert after == {item for item in live if not item[0].startswith(("start ", "resume "))}


@pytest.mark.slow
def test_a_collector_nobody_runs_never_stops_a_run(tmp_path: Path) -> None:
    needs.extra("opentelemetry.exporter.otlp.proto.http", "otel")
    (tmp_path / "wf.py").write_text(WORKFLOW)
    workdir = tmp_path / "work"
    workdir.mkdir()
    with Receiver() as receiver:
        url = receiver.url  # a port that was ours, now closed
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": url, "OTEL_EXPORTER_OTLP_TIMEOUT": "1"}
    run = orchestrate(
        "run", f"{tmp_path / 'wf.py'}:Traced", "--workdir", workdir,
        env=env, unset=PROXY_VARIABLES,
    )  # fmt: skip
    assert run.returncode == 42, run.stderr
    warnings = [line for line in run.stderr.splitlines() if "OpenTelemetry" in line]
    (warning,) = warnings  # told once, in one line, however many batches failed
    assert warning.startswith("orchestrate: warning: ")
    assert f"could not be sent to {url}/v1/traces; the run is not affected" in warning
    assert "Transient error" not in run.stderr and "Traceback" not in run.stderr


@pytest.mark.slow
def test_drive_sends_one_trace_through_its_pauses(tmp_path: Path) -> None:
    needs.extra("opentelemetry.exporter.otlp.proto.http", "otel")
    (tmp_path / "wf.py").write_text(WORKFLOW)
    workdir = tmp_path / "work"
    workdir.mkdir()
    handler = f"{sys.executable} -c \"import sys; sys.stdin.read(); print('fine')\""
    with Receiver() as receiver:
        done = orchestrate(
            "drive", f"{tmp_path / 'wf.py'}:Traced", "--workdir", workdir,
            "--handler", handler, "--otlp", receiver.url, unset=PROXY_VARIABLES,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    names = receiver.names()
    assert {"run traced", "skill draft", "skill publish", "agent critic"} <= set(names)
    assert {"tool outline", "tool write"} <= set(names)
    assert len({span.trace_id for span in receiver.spans}) == 1
    assert len(names) == len(set(names))  # each span sent once
