"""``--agent SPEC``: run and resume answer asks in-process through an adapter."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from orchestrator._errors import UsageError
from orchestrator.cli.common import invoker as _invoker
from support.cli import orchestrate

WORKFLOW = """
from orchestrator import Workflow, phase


class Echo(Workflow):
    name = "echo-agent"
    agents = ("echo",)

    @phase(1)
    def ask(self, ctx):
        prompt = "Repeat this sentence back in capitals, please, and add nothing else to it. " * 2
        return {"answer": ctx.ask("echo", prompt)}
"""


@pytest.mark.parametrize(
    "spec", ["", "nobody", "subprocess:", "subprocess:   ", "http:model", "http:@url", "http:m@"]
)
def test_a_bad_spec_is_a_usage_error_naming_the_forms(spec: str) -> None:
    with pytest.raises(UsageError, match="'host', 'subprocess:COMMAND' or 'http:MODEL@BASE_URL'"):
        _invoker(spec)


def test_host_is_the_default_and_pauses(tmp_path: Path) -> None:
    (tmp_path / "wf.py").write_text(WORKFLOW)
    done = orchestrate("run", f"{tmp_path / 'wf.py'}:Echo", "--workdir", str(tmp_path))
    assert done.returncode == 42, done.stderr
    assert (tmp_path / ".agent-request.json").exists()


def test_a_subprocess_agent_runs_the_workflow_to_the_end_without_a_pause(tmp_path: Path) -> None:
    (tmp_path / "wf.py").write_text(WORKFLOW)
    agent = f"{sys.executable} -c 'import sys; print(sys.stdin.read().upper().strip())'"
    done = orchestrate(
        "run",
        f"{tmp_path / 'wf.py'}:Echo",
        "--workdir",
        str(tmp_path),
        "--agent",
        f"subprocess:{agent}",
    )
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / ".agent-request.json").exists()
    history = next((tmp_path / ".orchestrator" / "runs").glob("*/state.json")).read_text()
    assert "REPEAT THIS SENTENCE BACK IN CAPITALS" in history


def test_drive_takes_the_agent_option_instead_of_a_handler(tmp_path: Path) -> None:
    (tmp_path / "wf.py").write_text(WORKFLOW)
    agent = f"{sys.executable} -c 'import sys; print(sys.stdin.read().upper().strip())'"
    done = orchestrate(
        "drive",
        f"{tmp_path / 'wf.py'}:Echo",
        "--workdir",
        str(tmp_path),
        "--agent",
        f"subprocess:{agent}",
    )
    assert done.returncode == 0, done.stderr
    assert "its 1 phase completed" in done.stderr


def test_drive_without_handler_or_agent_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "wf.py").write_text(WORKFLOW)
    done = orchestrate("drive", f"{tmp_path / 'wf.py'}:Echo", "--workdir", str(tmp_path))
    assert done.returncode == 2
    assert "--handler" in done.stderr and "Traceback" not in done.stderr
