"""Workers of a PostgreSQL store send a run's spans as each turn on it ends: two worker
processes, one before the pause and one after, send into the same trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from support import needs
from support.cli import orchestrate
from support.otlp_receiver import PROXY_VARIABLES, WORKFLOW, Receiver, attributes_of


@pytest.mark.slow
def test_two_workers_send_one_trace(pg_dsn: str, tmp_path: Path) -> None:
    needs.extra("opentelemetry.exporter.otlp.proto.http", "otel")
    (tmp_path / "wf.py").write_text(WORKFLOW)
    queued = orchestrate(
        "run", f"{tmp_path / 'wf.py'}:Traced", "--store", pg_dsn, "--queue", cwd=tmp_path
    )  # its work directory: the test's own
    assert queued.returncode == 0, queued.stderr
    run_id = queued.stdout.strip()
    with Receiver() as receiver:
        first = orchestrate(
            "worker", "--store", pg_dsn, "--until-idle", "--otlp", receiver.url,
            unset=PROXY_VARIABLES,
        )  # fmt: skip
        assert first.returncode == 0, first.stderr
        assert "tool outline" in receiver.names() and "run traced" not in receiver.names()
        answered = orchestrate(
            "respond", "--store", pg_dsn, "--run", run_id, "--text", "fine",
            "--model", "claude-test-3",
        )  # fmt: skip
        assert answered.returncode == 0, answered.stderr
        second = orchestrate(
            "worker", "--store", pg_dsn, "--until-idle", "--otlp", receiver.url,
            unset=PROXY_VARIABLES,
        )  # fmt: skip
        assert second.returncode == 0, second.stderr
    assert {"run traced", "skill draft", "agent critic", "tool write"} <= set(receiver.names())
    assert len({span.trace_id for span in receiver.spans}) == 1
    assert (tmp_path / "OUT").read_text() == "done"
    by_id = {span.span_id: span for span in receiver.spans}
    ask = receiver.named("agent critic")
    assert by_id[ask.parent_span_id].name == "skill draft"
    assert attributes_of(ask)["gen_ai.request.model"] == "claude-test-3"
