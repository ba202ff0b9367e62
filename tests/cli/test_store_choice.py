"""Which store a command talks to: an option given beats the environment. ``--workdir``
with ``$ORCHESTRATOR_STORE`` exported means the work directory; ``--workdir`` and
``--store`` both given is a usage error that names both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.cli import orchestrate


@pytest.fixture
def finished_run(tmp_path: Path) -> Path:
    """A work directory whose demo run has ended, with its outputs."""
    assert orchestrate("init", "demo", "--directory", tmp_path).returncode == 0
    started = orchestrate("run", "demo.py:Demo", "--input", "topic=owls", cwd=tmp_path)
    assert started.returncode == 42, started.stderr
    answered = orchestrate("respond", "--text", "Owls hunt at night.", cwd=tmp_path)
    assert answered.returncode == 0, answered.stderr
    assert orchestrate("resume", cwd=tmp_path).returncode == 0
    return tmp_path


@pytest.mark.slow
def test_an_exported_store_does_not_hide_the_work_directory_named(
    finished_run: Path, pg_dsn: str
) -> None:
    store = {"ORCHESTRATOR_STORE": pg_dsn}
    shown = orchestrate("output", "--workdir", finished_run, env=store)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["draft"] == {"draft": "Owls hunt at night."}
    history = orchestrate("history", "--workdir", finished_run, env=store)
    assert history.returncode == 0, history.stderr
    assert "ask writer" in history.stdout


@pytest.mark.slow
@pytest.mark.parametrize("command", ["output", "history", "status", "resume"])
def test_a_work_directory_and_a_store_both_named_is_a_usage_error(
    command: str, tmp_path: Path
) -> None:
    refused = orchestrate(command, "--workdir", tmp_path, "--store", "postgresql:///test")
    assert refused.returncode == 2
    assert "--store postgresql:///test and --workdir" in refused.stderr
    assert refused.stderr.count("\n") == 1  # one line, no traceback
