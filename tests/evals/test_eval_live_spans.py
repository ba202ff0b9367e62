"""``eval run --otlp URL`` sends the regression run's spans as it runs."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from support import needs
from support.cli import orchestrate
from support.otlp_receiver import PROXY_VARIABLES, Receiver


@pytest.mark.slow
def test_an_eval_run_sends_its_spans(tmp_path: Path) -> None:
    needs.extra("opentelemetry.exporter.otlp.proto.http", "otel")
    cases = [{"id": i, "input": {"user": f"do {i}"}} for i in ("a", "b")]
    (tmp_path / "cases.json").write_text(json.dumps(cases), encoding="utf-8")
    agent = tmp_path / "agent.py"
    agent.write_text(
        "import json, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parents[1])!r})\n"
        "from support.eval_agent_server import good_answer\n"
        "print(json.dumps(good_answer(json.load(sys.stdin))))\n",
        encoding="utf-8",
    )
    with Receiver() as receiver:
        done = orchestrate(
            "eval", "run", "--cases", "cases.json", "--agent-command",
            shlex.join([sys.executable, str(agent)]), "--version", "new", "--out", "runs",
            "--otlp", receiver.url, cwd=tmp_path, unset=PROXY_VARIABLES,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    roots = [span for span in receiver.spans if span.name.startswith("run ")]
    assert len(roots) == 1 and roots[0].parent_span_id == b""
    assert any(span.name.startswith("skill ") for span in receiver.spans)
    assert {span.trace_id for span in receiver.spans} == {roots[0].trace_id}
