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
