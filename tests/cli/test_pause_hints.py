"""What comes next after a pause is said for the face that says it.

Real ``orchestrate`` processes on a workflow that sleeps on a durable timer (and one that
asks), each face in turn:

- the plain CLI (``run`` on a work directory) says ``'orchestrate resume'`` goes on once
  the timer is due, as ``status`` does;
- ``drive`` says it resumes the run itself at the wake time, and never names
  ``orchestrate resume``;
- ``run`` on a PostgreSQL store names the run as that store's commands take it
  (``--store DSN --run ID``, the DSN without a password), as ``status`` does;
- a worker's log says a worker resumes the run when the timer is due, and for an ask, that
  its host answers it (naming the run) before a worker goes on;
- ``status`` of a store run that ended names the run, never "no live instance here".
"""

from __future__ import annotations

import json
import re
import shlex
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from orchestrator.adapters.postgres.connection import shown
from support.cli import orchestrate

pytestmark = pytest.mark.slow

DAY = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)
WAKE = "2026-03-02T10:00:00.000Z"

FLOW = """
from datetime import timedelta

from orchestrator import Workflow, phase

PROMPT = (
    "You are the writer of a test workflow. Say in one plain sentence what you think of "
    "the topic below, with no preamble. Topic: sleep"
)


class Sleeper(Workflow):
    name = "sleeper"

    @phase(1)
    def nap(self, ctx):
        ctx.sleep(timedelta(hours=1))
        return "rested"

    @phase(2)
    def more(self, ctx):
        return "done"


class Nap(Workflow):
    name = "nap"

    @phase(1)
    def nap(self, ctx):
        ctx.sleep(0.5)
        return "rested"

    @phase(2)
    def wake(self, ctx):
        return "awake"


class Asker(Workflow):
    name = "asker"
    agents = ("writer",)

    @phase(1)
    def ask(self, ctx):
        return ctx.ask("writer", PROMPT)
"""


@pytest.fixture
def flow(tmp_path: Path) -> Path:
    path = tmp_path / "flows.py"
    path.write_text(FLOW)
    return path


def at(moment: datetime) -> dict[str, str]:
    return {"ORCHESTRATOR_NOW": moment.isoformat().replace("+00:00", "Z")}


def next_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("orchestrate: next: ")]


def sleeping_until(stderr: str) -> str:
    (until,) = re.findall(r"sleeping until ([0-9T:.-]+Z)", stderr.split("next:")[0])
    return until


def store_status(dsn: str, run_id: str) -> dict[str, Any]:
    shown_status = orchestrate("status", "--store", dsn, "--run", run_id, "--json")
    assert shown_status.returncode == 0, shown_status.stderr
    return json.loads(shown_status.stdout)  # type: ignore[no-any-return]


def test_the_plain_cli_says_resume_once_the_timer_is_due(tmp_path: Path, flow: Path) -> None:
    workdir = tmp_path / "run"
    workdir.mkdir()
    started = orchestrate("run", f"{flow}:Sleeper", "--workdir", workdir, env=at(DAY))
    assert started.returncode == 42, started.stderr
    expected = f"'orchestrate resume' goes on once the timer is due ({WAKE})"
    assert next_lines(started.stderr) == [f"orchestrate: next: {expected}"]
    status = orchestrate("status", "--workdir", workdir, "--json")
    assert json.loads(status.stdout)["next"] == expected
    early = orchestrate("resume", "--workdir", workdir, env=at(DAY + timedelta(minutes=30)))
    assert early.returncode == 42, early.stderr
    assert next_lines(early.stderr) == [f"orchestrate: next: {expected}"]


def test_drive_says_it_resumes_the_run_itself(tmp_path: Path, flow: Path) -> None:
    workdir = tmp_path / "run"
    workdir.mkdir()
    driven = orchestrate("drive", f"{flow}:Nap", "--workdir", workdir, "--agent", "subprocess:cat")
    assert driven.returncode == 0, driven.stderr
    until = sleeping_until(driven.stderr)
    assert next_lines(driven.stderr) == [
        f"orchestrate: next: drive resumes it at {until}, when the timer is due"
    ]
    assert "orchestrate resume" not in driven.stderr
    assert "all 2 phases completed" in driven.stderr


def test_run_on_a_store_names_the_run_as_its_commands_take_it(pg_dsn: str, flow: Path) -> None:
    started = orchestrate("run", f"{flow}:Nap", "--store", pg_dsn)
    assert started.returncode == 42, started.stderr
    run_id = started.stdout.strip()
    until = sleeping_until(started.stderr)
    named = f"--store {shlex.quote(shown(pg_dsn))} --run {run_id}"
    expected = (
        f"a worker of the store goes on once the timer is due ({until}), or "
        f"'orchestrate resume {named}'"
    )
    assert next_lines(started.stderr) == [f"orchestrate: next: {expected}"]
    assert "--store ..." not in started.stderr
    assert store_status(pg_dsn, run_id)["next"] == expected


def test_a_worker_says_a_worker_resumes_the_run_when_due(pg_dsn: str, flow: Path) -> None:
    queued = orchestrate("run", f"{flow}:Nap", "--store", pg_dsn, "--queue")
    assert queued.returncode == 0, queued.stderr
    run_id = queued.stdout.strip()
    worked = orchestrate("worker", "--store", pg_dsn, "--until-idle")
    assert worked.returncode == 0, worked.stderr
    (line,) = [line for line in worked.stderr.splitlines() if f"run {run_id}: paused" in line]
    until = sleeping_until(line)
    assert line.endswith(
        f"sleeping until {until}; next: a worker of the store resumes it at {until}, when "
        "the timer is due"
    ), line
    assert "orchestrate resume" not in worked.stderr


def test_a_worker_at_an_ask_says_its_host_answers_it(pg_dsn: str, flow: Path) -> None:
    queued = orchestrate("run", f"{flow}:Asker", "--store", pg_dsn, "--queue")
    assert queued.returncode == 0, queued.stderr
    run_id = queued.stdout.strip()
    worked = orchestrate("worker", "--store", pg_dsn, "--until-idle")
    assert worked.returncode == 0, worked.stderr
    (line,) = [line for line in worked.stderr.splitlines() if f"run {run_id}: paused" in line]
    named = f"--store {shlex.quote(shown(pg_dsn))} --run {run_id}"
    assert line.endswith(
        f"; next: its host answers ('orchestrate respond {named}'), then a worker goes on"
    ), line


def test_status_of_a_store_run_that_ended_names_the_run(pg_dsn: str, flow: Path) -> None:
    driven = orchestrate("drive", f"{flow}:Nap", "--store", pg_dsn, "--agent", "subprocess:cat")
    assert driven.returncode == 0, driven.stderr
    run_id = driven.stdout.strip()
    status = orchestrate("status", "--store", pg_dsn, "--run", run_id)
    assert status.returncode == 0, status.stderr
    first = status.stdout.splitlines()[0]
    assert first == f"workflow   nap  (run {run_id})", status.stdout
    named = f"--store {shlex.quote(shown(pg_dsn))} --run {run_id}"
    assert f"'orchestrate output {named}' prints the outputs" in status.stdout
    assert "no live instance" not in status.stdout
