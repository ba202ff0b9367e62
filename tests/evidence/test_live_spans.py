"""Live OpenTelemetry spans: a run sends its spans while it runs, through the SDK's OTLP
exporter, to a receiver in the test process; a resume in a new process goes on with the
same trace; without an endpoint nothing of OpenTelemetry is imported."""

from __future__ import annotations

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
