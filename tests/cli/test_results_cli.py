"""A run's results after it ends: ``orchestrate status`` shows the last run when no
instance is live, and ``orchestrate output`` prints what its phases returned."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.cli import orchestrate

FLOWS = Path(__file__).parents[1] / "fixtures" / "drive" / "flows.py"
FAILING = """
from orchestrator import Workflow, phase


class Brittle(Workflow):
    name = "brittle"

    @phase(1)
    def first(self, ctx):
        return {"kept": [1, 2]}

    @phase(2)
    def second(self, ctx):
        raise RuntimeError("the disk is not there")
"""


MEASURED = """
from orchestrator import Workflow, phase


class Measured(Workflow):
    name = "measured"

    @phase(1)
    def topic(self, ctx):
        return "tides"

    @phase(2)
    def measure(self, ctx):
        return {"lines": 3}
"""


pytestmark = pytest.mark.slow


def completed(workdir: Path, answer: str = "high tide at noon") -> Path:
    assert orchestrate("run", f"{FLOWS}:OneAsk", "--workdir", workdir).returncode == 42
    assert orchestrate("respond", "--workdir", workdir, "--text", answer).returncode == 0
    assert orchestrate("resume", "--workdir", workdir).returncode == 0
    return workdir


def test_status_after_the_run_ended_shows_that_run(tmp_path: Path) -> None:
    completed(tmp_path)
    shown = orchestrate("status", "--workdir", tmp_path)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("workflow   one-ask  (run ") and "no live instance" in lines[0]
    assert lines[1].startswith("status     completed, at 20")
    assert "output     only: high tide at noon" in lines
    assert any(line.startswith("history    ") and "state.json" in line for line in lines)
    assert "orchestrate output" in lines[-1]
    as_json = json.loads(orchestrate("status", "--workdir", tmp_path, "--json").stdout)
    assert (as_json["status"], as_json["outputs"]) == ("completed", {"only": "high tide at noon"})
    assert as_json["completed_phases"] == ["only"]


def test_status_json_gives_outputs_as_json_values(tmp_path: Path) -> None:
    (tmp_path / "measured.py").write_text(MEASURED)
    done = orchestrate("run", f"{tmp_path / 'measured.py'}:Measured", "--workdir", tmp_path)
    assert done.returncode == 0, done.stderr
    summary = json.loads(orchestrate("status", "--workdir", tmp_path, "--json").stdout)
    assert summary["outputs"] == {"topic": "tides", "measure": {"lines": 3}}
    shown = orchestrate("status", "--workdir", tmp_path).stdout.splitlines()
    assert 'output     measure: {"lines": 3}' in shown and "output     topic: tides" in shown


def test_status_of_a_cancelled_run(tmp_path: Path) -> None:
    assert orchestrate("run", f"{FLOWS}:OneAsk", "--workdir", tmp_path).returncode == 42
    assert orchestrate("cancel", "--workdir", tmp_path).returncode in (0, 1)
    summary = json.loads(orchestrate("status", "--workdir", tmp_path, "--json").stdout)
    assert summary["status"] == "cancelled" and summary["outputs"] == {}


def test_status_of_a_failed_run_says_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "brittle.py").write_text(FAILING)
    failed = orchestrate("run", f"{tmp_path / 'brittle.py'}:Brittle", "--workdir", tmp_path)
    assert failed.returncode == 1
    shown = orchestrate("status", "--workdir", tmp_path)
    assert "status     failed: phase 2 (second): RuntimeError: the disk is not there" in (
        shown.stdout
    )
    assert "next       " in shown.stdout and "orchestrate retry" in shown.stdout
    output = orchestrate("output", "first", "--workdir", tmp_path)
    assert json.loads(output.stdout) == {"kept": [1, 2]}


def test_output_prints_every_phase_or_one(tmp_path: Path) -> None:
    completed(tmp_path, "line one\nline two")
    every = orchestrate("output", "--workdir", tmp_path)
    assert every.returncode == 0 and json.loads(every.stdout) == {"only": "line one\nline two"}
    assert "(from " in every.stderr
    text = orchestrate("output", "only", "--workdir", tmp_path)
    assert text.stdout == "line one\nline two\n"
    quoted = orchestrate("output", "only", "--json", "--workdir", tmp_path)
    assert json.loads(quoted.stdout) == "line one\nline two"


def test_output_of_an_earlier_run_by_its_id(tmp_path: Path) -> None:
    completed(tmp_path, "first answer")
    (first,) = [p.name for p in (tmp_path / ".orchestrator" / "runs").iterdir()]
    completed(tmp_path, "second answer")
    assert orchestrate("output", "only", "--workdir", tmp_path).stdout == "second answer\n"
    older = orchestrate("output", "only", "--run", first, "--workdir", tmp_path)
    assert older.stdout == "first answer\n"


def test_output_of_a_phase_without_one_is_a_usage_error(tmp_path: Path) -> None:
    completed(tmp_path)
    missing = orchestrate("output", "later", "--workdir", tmp_path)
    assert missing.returncode == 2 and missing.stdout == ""
    assert "phase 'later' has no output (phases with one: only)" in missing.stderr


def test_status_with_nothing_here_says_how_to_start(tmp_path: Path) -> None:
    shown = orchestrate("status", "--workdir", tmp_path)
    assert shown.returncode == 2
    assert "no workflow instance here" in shown.stderr
    assert "start one with 'orchestrate run WORKFLOW'" in shown.stderr
