"""``orchestrate drive`` says what it is doing while it does it: as plain lines into a
pipe, and with a status line redrawn below them on a terminal (a real pseudo-terminal)."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import time
from pathlib import Path

import pytest

from support.cli import command, orchestrate

HANDLER = "while [ ! -e {release} ]; do sleep 0.05; done; echo Owls hunt at night."


def made_workflow(tmp_path: Path) -> Path:
    assert orchestrate("init", "demo", "--directory", tmp_path).returncode == 0
    return tmp_path / "demo.py"


def drive_args(tmp_path: Path, release: Path) -> list[str]:
    workdir = tmp_path / "work"
    workdir.mkdir()
    return [
        "drive", f"{made_workflow(tmp_path)}:Demo", "--workdir", str(workdir),
        "--input", "topic=owls", "--handler", HANDLER.format(release=release),
    ]  # fmt: skip


def test_into_a_pipe_every_step_is_a_plain_line(tmp_path: Path) -> None:
    release = tmp_path / "release"
    release.touch()  # the handler answers at once
    done = orchestrate(*drive_args(tmp_path, release))
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert "\r" not in done.stderr and "\x1b" not in done.stderr
    assert re.fullmatch(r"orchestrate: asked     writer \([0-9a-f]{8}\), phase 1 draft", lines[0])
    assert re.fullmatch(r"orchestrate: answering writer \([0-9a-f]{8}\)", lines[1])
    assert re.fullmatch(r"orchestrate: answered  writer \([0-9a-f]{8}\) in \d+\.\d s", lines[2])
    assert lines[3:5] == ["orchestrate: phase 1 draft done", "orchestrate: phase 2 measure done"]
    assert lines[5].startswith("orchestrate: demo: all 2 phases completed")
    assert re.fullmatch(r"orchestrate: drive: 2 phases, 1 ask, \d+\.\d s", lines[6])
    assert len(lines) == 7


@pytest.mark.slow
def test_on_a_terminal_a_status_line_shows_the_handler_at_work(tmp_path: Path) -> None:
    release = tmp_path / "release"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        command(*drive_args(tmp_path, release)),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=terminal, env=env,
    )  # fmt: skip
    os.close(terminal)
    seen = b""
    deadline = time.monotonic() + 60
    try:
        while b"answering: writer" not in seen:  # the status line, redrawn while it works
            assert time.monotonic() < deadline, seen
            seen += os.read(controller, 4096)
        release.touch()
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # the terminal closed with the process
                break
            if not chunk:
                break
            seen += chunk
    finally:
        assert process.wait(timeout=60) == 0
        os.close(controller)
    text = seen.decode()
    assert "\r\x1b[Korchestrate: asked     writer" in text
    assert re.search(r"\r\x1b\[Kanswering: writer \d+ s", text)
    assert re.search(r"\r\x1b\[Korchestrate: answered  writer \([0-9a-f]{8}\) in \d", text)
    assert "orchestrate: answering writer" not in text  # the status line says it instead
    assert re.search(r"drive: 2 phases, 1 ask, \d+\.\d s", text)


PACED = """
from orchestrator import Workflow, phase

PROMPT = "You are an analyst. Read the question below and answer it in one short line. " * 2


class Paced(Workflow):
    name = "paced"
    agents = ("analyst",)

    @phase(1)
    def prepare(self, ctx):
        return "ready"

    @phase(2)
    def wait(self, ctx):
        ctx.sleep(0.1)
        return "waited"

    @phase(3)
    def report(self, ctx):
        return str(ctx.ask("analyst", PROMPT))
"""


def said(stderr: str) -> list[str]:
    """drive's lines without the prefix, its request ids and its times."""
    lines = [line.removeprefix("orchestrate: ") for line in stderr.splitlines()]
    return [re.sub(r"\([0-9a-f]{8}\)|\d{4}-\d\d-\d\dT[0-9:.]+Z|\d+\.\d s", "_", t) for t in lines]


def test_lines_come_in_the_order_things_happened_and_a_fork_says_copied(
    tmp_path: Path,
) -> None:
    (tmp_path / "paced.py").write_text(PACED)
    first, forked = tmp_path / "first", tmp_path / "forked"
    first.mkdir()
    forked.mkdir()
    done = orchestrate(
        "drive", "paced.py", "--workdir", first, "--handler", "echo yes", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    lines = said(done.stderr)
    assert lines[:4] == [
        "phase 1 prepare done",  # before the timer its phase 2 set
        "paused in phase 2 (wait): sleeping until _",
        "next: drive resumes it at _, when the timer is due",
        "phase 2 wait done",
    ]
    assert lines[4:8] == [
        "asked     analyst _, phase 3 report",
        "answering analyst _",
        "answered  analyst _ in _",
        "phase 3 report done",
    ]
    made = orchestrate("fork", "--source", first, "--from", "report", "--workdir", forked)
    assert made.returncode == 0, made.stderr
    done = orchestrate("drive", "--workdir", forked, "--handler", "echo yes")
    assert done.returncode == 0, done.stderr
    lines = said(done.stderr)
    assert lines[:3] == [
        "phase 1 prepare copied",
        "phase 2 wait copied",
        "asked     analyst _, phase 3 report",
    ]
    assert "phase 3 report done" in lines


def test_a_board_task_is_named_by_its_id_and_title() -> None:
    import io

    from orchestrator.cli.drive import Progress
    from orchestrator.formats.bridge import AgentRequest

    request = AgentRequest(
        request_id="0d9c5e4e-2f1a-4b7c-9e3d-5a6b7c8d9e0f",
        version="1.0",
        agent_name="coder",
        phase=2,
        phase_name="work",
        prompt="Do it.",
        created_at="2026-03-01T10:00:00.000Z",
        timeout_seconds=60,
        context={"x_task_id": "T-2", "x_task_title": "Add the API", "x_attempt": 1},
    )
    stream = io.StringIO()
    progress = Progress(stream, tty=False)
    progress.asked(request)
    progress.answering(request)
    assert stream.getvalue().splitlines() == [
        'orchestrate: asked     task T-2 "Add the API" (coder, attempt 1), phase 2 work',
        'orchestrate: answering task T-2 "Add the API" (coder, attempt 1)',
    ]
