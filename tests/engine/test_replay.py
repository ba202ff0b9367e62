"""Replay before deploy: a recorded run of the template-create example, shipped as a
fixture, replays clean against today's code, calling no agent; a copy of the workflow
with one prompt changed is reported at the right phase and position; and a mock invoker
made from the run answers as its agents did."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from orchestrator.testing import MockAgentInvoker, WorkflowHarness, replay_run
from support.cli import orchestrate
from support.signing_support import sign_state_file

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "template_create" / "workflow.py"
RECORDED = Path(__file__).parents[1] / "fixtures" / "replay" / "template-create"
PHASES = (
    "codebase_analysis", "manifest_generation", "settings_generation", "template_files",
    "agent_recommendation", "agent_creation", "agent_enhancement", "claude_md_generation",
    "template_validation",
)  # fmt: skip
# The title of the prompt that phase 7 (agent_enhancement) sends for each agent.
ENHANCE = "# Agent Enhancement Request"


def module_from(source: str, path: Path) -> ModuleType:
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def changed_copy(tmp_path: Path) -> tuple[Path, Any]:
    source = EXAMPLE.read_text()
    assert source.count(ENHANCE) == 1, "the test changes this sentence of the example"
    path = tmp_path / "changed_flow.py"
    module = module_from(source.replace(ENHANCE, ENHANCE + ", briefly"), path)
    return path, module.TemplateCreate


def test_the_recorded_run_replays_clean_against_todays_code(tmp_path: Path) -> None:
    example = module_from(EXAMPLE.read_text(), tmp_path / "example_today.py")
    report = replay_run(RECORDED, example.TemplateCreate)
    assert report.ok, report.describe()
    assert report.replayed == PHASES
    assert "replays clean (9 phases" in report.describe()


def test_a_changed_prompt_is_reported_at_its_phase_and_position(tmp_path: Path) -> None:
    _, changed = changed_copy(tmp_path)
    report = replay_run(RECORDED, changed)
    assert not report.ok
    assert (report.phase_name, report.position) == ("agent_enhancement", 0)
    assert report.replayed == PHASES[:6]
    assert "the prompt changed" in str(report.problem)


def signed_recording(tmp_path: Path) -> Path:
    """The recorded run, copied and signed, as a person who checked it trusts it."""
    recorded = tmp_path / "recorded"
    shutil.copytree(RECORDED, recorded)
    sign_state_file(recorded / "state.json")
    return recorded


@pytest.mark.slow
def test_orchestrate_replay_exits_0_clean_and_1_at_a_difference(tmp_path: Path) -> None:
    recorded = signed_recording(tmp_path)
    clean = orchestrate("replay", f"{EXAMPLE}:TemplateCreate", "--run", recorded)
    assert clean.returncode == 0, clean.stderr
    assert "replays clean (9 phases" in clean.stderr
    path, _ = changed_copy(tmp_path)
    differs = orchestrate("replay", f"{path}:TemplateCreate", "--run", recorded)
    assert differs.returncode == 1
    line, *diff, advice = differs.stderr.splitlines()
    assert "does not replay" in line and "phase 'agent_enhancement'" in line
    assert "position 0" in line and "the prompt changed" in line
    # The edit itself, as a unified diff of the recorded and the current prompt.
    assert f"-{ENHANCE}" in diff and f"+{ENHANCE}, briefly" in diff
    assert advice.startswith("runs recorded with the old text do not replay with this code")


@pytest.mark.slow
def test_orchestrate_replay_refuses_a_run_it_cannot_trust_until_it_is_trusted(
    tmp_path: Path,
) -> None:
    """The recording was signed by nobody here: the command says so and how to go on."""
    recorded = tmp_path / "recorded"
    shutil.copytree(RECORDED, recorded)
    refused = orchestrate("replay", f"{EXAMPLE}:TemplateCreate", "--run", recorded)
    assert refused.returncode == 1
    (line,) = refused.stderr.splitlines()
    assert "the state carries no signature" in line
    assert f"orchestrate trust {recorded / 'state.json'}" in line
    assert "cancel --force" not in line  # that sets a live instance aside, not a recording
    assert orchestrate("trust", recorded / "state.json").returncode == 0
    clean = orchestrate("replay", f"{EXAMPLE}:TemplateCreate", "--run", recorded)
    assert clean.returncode == 0, clean.stderr


def test_a_replay_writes_nothing(tmp_path: Path) -> None:
    before = {p: p.read_bytes() for p in RECORDED.rglob("*") if p.is_file()}
    example = module_from(EXAMPLE.read_text(), tmp_path / "example_again.py")
    assert replay_run(RECORDED / "state.json", example.TemplateCreate).ok
    assert {p: p.read_bytes() for p in RECORDED.rglob("*") if p.is_file()} == before


def test_a_live_run_replays_up_to_where_it_waits(tmp_path: Path) -> None:
    example = module_from(EXAMPLE.read_text(), tmp_path / "example_live.py")
    workdir = tmp_path / "work"
    workdir.mkdir()
    harness = WorkflowHarness(example.TemplateCreate, workdir=workdir)
    inputs = {"project_path": str(EXAMPLE.parent / "sample_project"), "template_name": "demo"}
    paused = harness.run(inputs)
    assert paused.status == "paused"
    report = replay_run(workdir / ".template-create-state.json", example.TemplateCreate)
    assert report.ok and report.replayed == (), report.describe()


def test_a_mock_made_from_the_run_answers_as_its_agents_did(tmp_path: Path) -> None:
    """The example run again, in process, answered by the recording: the same outputs."""
    import json

    example = module_from(EXAMPLE.read_text(), tmp_path / "example_mock.py")
    invoker = MockAgentInvoker.from_run(RECORDED)
    assert set(invoker.responses) == {"architectural-reviewer", "agent-content-enhancer"}
    recorded = json.loads((RECORDED / "state.json").read_text())
    workdir = tmp_path / "work"
    workdir.mkdir()
    harness = WorkflowHarness(example.TemplateCreate, workdir=workdir, invoker=invoker)
    inputs = recorded["phase_data"]["x_orchestrator"]["inputs"]
    inputs = {**inputs, "project_path": str(EXAMPLE.parent / "sample_project")}
    done = harness.run(inputs, output_path=str(workdir / "template"))
    assert done.status == "completed", done.message
    for name in ("agent_creation", "agent_enhancement"):
        assert done.outputs[name] == recorded["phase_data"][name], name
    assert len(invoker.invocations) == 9  # one analysis, four agents, four enhancements
    with pytest.raises(Exception, match="never asked architectural-reviewer this prompt"):
        invoker.responses["architectural-reviewer"]("a prompt the run never saw")
