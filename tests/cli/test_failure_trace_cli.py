"""A phase that raises leaves where it raised: real ``orchestrate`` processes.

The failure's type, message (secrets scrubbed) and frames (file relative to the
workflow's directory, line, function) are in the engine's record, in the ``error`` and
``run.end`` events, in ``status`` (text and ``--json``) and in ``output --json``; a
``retry`` that goes on clears them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.cli import orchestrate
from support.run_facts import FAILING_FLOW, RAISE_LINE, write_failing_flow

pytestmark = pytest.mark.slow


def test_status_names_the_file_and_line_of_the_raise(tmp_path: Path) -> None:
    flow = write_failing_flow(tmp_path, [1, 2])
    assert FAILING_FLOW.splitlines()[RAISE_LINE - 1].strip().startswith("raise ValueError")
    ran = orchestrate("run", f"{flow}:Counter", "--workdir", tmp_path)
    assert ran.returncode == 1, ran.stderr

    status = orchestrate("status", "--workdir", tmp_path)
    assert f"raised at counting.py:{RAISE_LINE} in check_count" in status.stdout, status.stdout

    summary = json.loads(orchestrate("status", "--workdir", tmp_path, "--json").stdout)
    trace = summary["failure_trace"]
    assert trace["type"] == "ValueError"
    assert trace["message"].startswith("the count is off")
    assert "Zx8qL2vN9rT4wY6pK3mB7cJ5" not in json.dumps(summary)  # scrubbed
    assert [f["function"] for f in trace["frames"]] == ["count", "check_count"]
    assert trace["frames"][-1] == {
        "file": "counting.py",
        "line": RAISE_LINE,
        "function": "check_count",
    }

    outputs = json.loads(orchestrate("output", "--workdir", tmp_path, "--json").stdout)
    assert outputs["x_run"]["failure_trace"] == trace
    assert outputs["x_run"]["status"] == "failed"

    (log,) = (tmp_path / ".orchestrator" / "runs").glob("*/events.ndjson")
    events = [json.loads(line) for line in log.read_text().splitlines()]
    kept = [e["data"]["trace"] for e in events if e["event"] in ("error", "run.end")]
    assert len(kept) == 2 and all(t == trace for t in kept)

    # Fixed, the retry goes on and the failure's trace is gone from status.
    write_failing_flow(tmp_path, [1, 2, 3])
    retried = orchestrate("retry", "--workdir", tmp_path)
    assert retried.returncode == 0, retried.stderr
    ended = orchestrate("status", "--workdir", tmp_path)
    assert "raised at" not in ended.stdout
