"""``orchestrate events --follow`` over a run's whole life: it fails, is retried, is rewound
and completes, each by a real ``orchestrate`` process, while the follower runs beside them
as another; and ``--until-pause``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from support.cli import child_env, command, orchestrate

PATIENCE = 120.0  # a safety net for a hung child, never a measure

FLOW = """\
from pathlib import Path
from typing import Any

from orchestrator import Workflow, phase

PROMPT = "You are an analyst. Read the question below and answer it in one short line. " * 2


class Flaky(Workflow):
    name = "flaky"
    agents = ("analyst",)

    @phase(1)
    def prepare(self, ctx: Any) -> str:
        if not Path("fixed").exists():
            raise RuntimeError("not fixed yet: create the file 'fixed'")
        return "ready"

    @phase(2)
    def ask(self, ctx: Any) -> str:
        return str(ctx.ask("analyst", PROMPT))
"""


def follower(workdir: Path, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        command("events", "--follow", "--json", "--poll", "0.05", *args),
        cwd=workdir,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def the_log(workdir: Path) -> bytes:
    (log,) = (workdir / ".orchestrator" / "runs").glob("*/events.ndjson")
    return log.read_bytes()


@pytest.mark.slow
def test_follow_sees_a_failed_retried_and_rewound_run_to_its_end(tmp_path: Path) -> None:
    (tmp_path / "flow.py").write_text(FLOW)
    watching = follower(tmp_path)
    try:
        assert orchestrate("run", "flow.py", cwd=tmp_path).returncode == 1  # run.end: failed
        (tmp_path / "fixed").write_text("")
        assert orchestrate("retry", cwd=tmp_path).returncode == 42
        assert orchestrate("rewind", "--to", "prepare", cwd=tmp_path).returncode == 0
        done = orchestrate("resume", "--agent", "subprocess:echo yes", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        printed, errors = watching.communicate(timeout=PATIENCE)
    finally:
        if watching.poll() is None:
            watching.kill()
            watching.wait()
    assert watching.returncode == 0, errors.decode()
    log = the_log(tmp_path)
    names = [line.split(b'"event":"')[1].split(b'"')[0] for line in log.splitlines()]
    assert names.count(b"run.end") == 2 and b"run.retry" in names and b"run.rewind" in names
    assert printed == log
    assert errors.decode().splitlines() == [
        f"orchestrate: waiting for a run to start in {tmp_path}"
    ]


def test_until_pause_stops_at_the_pause(tmp_path: Path) -> None:
    (tmp_path / "flow.py").write_text(FLOW)
    (tmp_path / "fixed").write_text("")
    assert orchestrate("run", "flow.py", cwd=tmp_path).returncode == 42
    watching = follower(tmp_path, "--until-pause")
    try:
        printed, errors = watching.communicate(timeout=PATIENCE)
    finally:
        if watching.poll() is None:
            watching.kill()
            watching.wait()
    assert (watching.returncode, errors) == (0, b"")
    assert printed == the_log(tmp_path)
    assert b'"event":"run.pause"' in printed.splitlines()[-1]


def test_until_pause_without_follow_is_a_usage_error(tmp_path: Path) -> None:
    done = orchestrate("events", "--until-pause", cwd=tmp_path)
    assert done.returncode == 2
    assert "--until-pause" in done.stderr and "--follow" in done.stderr
