"""The template-create example gives the same result whichever way it is driven.

Three ways, each answering every request with examples/template_create/fake_agent.py
(run as a real process, exactly as ``orchestrate drive`` runs it):

(a) real ``orchestrate run`` / ``respond`` / ``resume`` processes through every pause
    (``WorkflowHarness.run_subprocess``);
(b) one ``orchestrate drive --handler "<python> fake_agent.py"`` process;
(c) in-process, with a ``MockAgentInvoker`` whose answers are callables of the prompt.

"The same" means: byte-identical template trees, and equal phase outputs in the final
history state file (``phase_data`` without ``x_orchestrator``).

Phase 1 asks with ``min_confidence=0.5``. Only (b) carries the fake agent's
``metadata.confidence``; in (a) and (c) the answer is text alone, and the engine reads the
answer's own ``overall_confidence``: all three must agree.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest

from orchestrator.testing import FakeClock, MockAgentInvoker, SequentialIds, WorkflowHarness
from support.cli import orchestrate

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "template_create"
WORKFLOW_REF = f"{EXAMPLE / 'workflow.py'}:TemplateCreate"
FAKE_AGENT = EXAMPLE / "fake_agent.py"
INPUTS = {"project_path": str(EXAMPLE / "sample_project"), "template_name": "task-tracker"}
BRIDGE_LEFTOVERS = (
    ".agent-request.json",
    ".agent-response.json",
    ".agent-requests",
    ".agent-responses",
    ".template-create-state.json",
)
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def load_template_create() -> Any:
    name = "template_create_example_for_equivalence"
    spec = importlib.util.spec_from_file_location(name, EXAMPLE / "workflow.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # cattrs resolves the answer types through it
    spec.loader.exec_module(module)
    return module.TemplateCreate


def fake_agent(request: dict[str, Any]) -> dict[str, Any]:
    """The response document fake_agent.py prints for ``request``."""
    printed = subprocess.run(
        [sys.executable, str(FAKE_AGENT)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    document: dict[str, Any] = json.loads(printed)
    return document


@attrs.frozen
class Run:
    """What one way of driving the example left behind."""

    workdir: Path
    tree: dict[str, bytes]  # every file outside .orchestrator/, by relative path
    outputs: dict[str, Any]  # phase_data of the history state, minus x_orchestrator


def collect(workdir: Path) -> Run:
    (history,) = (workdir / ".orchestrator" / "runs").glob("*/state.json")
    state = json.loads(history.read_text(encoding="utf-8"))
    assert state["checkpoint_name"] == "completed"
    outputs = {k: v for k, v in state["phase_data"].items() if k != "x_orchestrator"}
    tree = {
        path.relative_to(workdir).as_posix(): path.read_bytes()
        for path in sorted(workdir.rglob("*"))
        if path.is_file() and ".orchestrator" not in path.relative_to(workdir).parts
    }
    return Run(workdir=workdir, tree=tree, outputs=outputs)


def via_cli_host_loop(workdir: Path) -> Run:
    """(a) Every pause crosses a process boundary: run, then respond + resume per pause.

    run_subprocess has no --output, so the template goes into the work directory; the
    other two ways do the same to stay comparable.
    """
    harness = WorkflowHarness(load_template_create(), workdir)
    result = harness.run_subprocess(
        WORKFLOW_REF, INPUTS, lambda request: fake_agent(request)["response"]
    )
    assert result.returncode == 0, result.stderr
    return collect(workdir)


def via_drive(workdir: Path) -> Run:
    """(b) One `orchestrate drive` process; the fake agent is its handler."""
    handler = f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKE_AGENT))}"
    inputs = [arg for key, value in INPUTS.items() for arg in ("--input", f"{key}={value}")]
    result = orchestrate("drive", WORKFLOW_REF, "--workdir", workdir, "--handler", handler, *inputs)
    assert result.returncode == 0, result.stderr
    return collect(workdir)


def via_in_process_mock(workdir: Path) -> Run:
    """(c) No pause at all: the mock answers each ask inside the engine."""
    workflow = load_template_create()
    mock = MockAgentInvoker()
    for agent in workflow.agents:
        mock.add_response(agent, lambda prompt, agent=agent: answer_from_prompt(agent, prompt))
    harness = WorkflowHarness(
        workflow, workdir, invoker=mock, clock=FakeClock(), new_id=SequentialIds()
    )
    outcome = harness.run(INPUTS)
    assert outcome.status == "completed", outcome.message
    assert mock.get_invocations(), "the mock was never asked"
    return collect(workdir)


def answer_from_prompt(agent: str, prompt: str) -> str:
    # The fake agent needs a request_id to echo; the mock sees only agent and prompt.
    request = {"request_id": "00000000-0000-4000-8000-000000000000", "agent_name": agent}
    answer: str = fake_agent({**request, "prompt": prompt})["response"]
    return answer


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    ways = {"cli": via_cli_host_loop, "drive": via_drive, "mock": via_in_process_mock}
    return {name: way(tmp_path_factory.mktemp(name)) for name, way in ways.items()}


def without_request_ids(outputs: dict[str, Any]) -> Any:
    # A fallback's reason quotes the failed request's id, which differs between runs.
    return json.loads(UUID.sub("<request-id>", json.dumps(outputs)))


@pytest.mark.slow
@pytest.mark.parametrize("way", ["cli", "drive", "mock"])
def test_each_way_completes_all_phases_and_cleans_up(runs: dict[str, Run], way: str) -> None:
    run = runs[way]
    assert list(run.outputs) == [
        "codebase_analysis",
        "manifest_generation",
        "settings_generation",
        "template_files",
        "agent_recommendation",
        "agent_creation",
        "agent_enhancement",
        "claude_md_generation",
        "template_validation",
    ]
    assert {"manifest.json", "settings.json", "CLAUDE.md"} <= set(run.tree)
    assert any(name.startswith("agents/") for name in run.tree)
    leftovers = [name for name in BRIDGE_LEFTOVERS if (run.workdir / name).exists()]
    assert leftovers == [], f"the cleanup protocol left {leftovers}"


def test_drive_uses_the_agents_analysis(runs: dict[str, Run]) -> None:
    analysis = runs["drive"].outputs["codebase_analysis"]
    assert "fallback_reason" not in analysis
    assert analysis["layers"] == ["api", "domain", "repository"]
    assert analysis["overall_confidence"] == 0.92


def test_cli_host_loop_and_in_process_mock_give_the_same_template(runs: dict[str, Run]) -> None:
    cli, mock = runs["cli"], runs["mock"]
    assert cli.tree == mock.tree
    assert without_request_ids(cli.outputs) == without_request_ids(mock.outputs)


@pytest.mark.parametrize("other", ["cli", "mock"])
def test_drive_gives_the_same_template_as_the_other_ways(runs: dict[str, Run], other: str) -> None:
    drive, analysis = runs["drive"], runs[other].outputs["codebase_analysis"]
    assert "fallback_reason" not in analysis, analysis["fallback_reason"]
    assert sorted(runs[other].tree) == sorted(drive.tree)
    assert runs[other].tree == drive.tree
    assert without_request_ids(runs[other].outputs) == without_request_ids(drive.outputs)
