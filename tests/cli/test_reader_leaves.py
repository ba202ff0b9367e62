"""A reader that leaves early (``| head -n1``) ends every printing command quietly, exit 0:
real processes writing into real pipes, through a real shell."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from support.cli import child_env, command, orchestrate

FLOW = """\
from typing import Any

from orchestrator import Workflow, phase


PROMPT = "You are an analyst. Read the question below and answer it in one short line. " * 2


class Tiny(Workflow):
    name = "tiny"
    agents = ("analyst",)

    @phase(1)
    def ask(self, ctx: Any) -> str:
        return str(ctx.ask("analyst", PROMPT))
"""


@pytest.fixture(scope="module")
def paused(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A work directory whose one run is paused for an answer."""
    workdir = tmp_path_factory.mktemp("paused")
    (workdir / "flow.py").write_text(FLOW)
    started = orchestrate("run", "flow.py", cwd=workdir)
    assert started.returncode == 42, started.stderr
    return workdir


def into_closed_pipe(workdir: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """``orchestrate ARGS`` writing into a pipe whose reader has already gone."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            command(*args),
            stdout=write_end,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            cwd=workdir,
            env=child_env(),
            timeout=120,
            check=False,
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize(
    "args",
    [["status"], ["status", "--json"], ["events"], ["events", "--json"], ["history"], ["--help"]],
)
def test_a_reader_gone_before_the_first_line_is_exit_0_and_silence(
    paused: Path, args: list[str]
) -> None:
    done = into_closed_pipe(paused, *args)
    assert done.stderr == b""
    assert done.returncode == 0


@pytest.mark.slow
def test_status_into_head_a_hundred_times_is_a_hundred_quiet_exits_0(
    paused: Path, tmp_path: Path
) -> None:
    status = shlex.join(command("status"))
    errors = tmp_path / "errors.txt"
    script = (
        "set -o pipefail\n"
        "for i in $(seq 100); do\n"
        f"  {status} 2>>{shlex.quote(str(errors))} | head -n1 >/dev/null\n"
        "  echo $?\n"
        "done\n"
    )
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=paused,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.stderr == ""
    assert errors.read_text() == ""
    assert done.stdout.split() == ["0"] * 100


@pytest.mark.parametrize("args", [["events"], ["history"]])
def test_events_and_history_into_head_exit_0(paused: Path, args: list[str]) -> None:
    line = shlex.join(command(*args))
    done = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {line} | head -n1"],
        cwd=paused,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "error" not in done.stderr and "Traceback" not in done.stderr  # history names its file
    assert len(done.stdout.splitlines()) == 1


def test_only_a_closed_reader_of_standard_output_counts_as_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A broken pipe elsewhere (a handler that left its stdin unread) stays an error."""
    import sys

    from orchestrator.cli.common import stdout_reader_gone

    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "w") as writer:
        monkeypatch.setattr(sys, "stdout", writer)
        assert not stdout_reader_gone()  # its reader is there
        os.close(read_end)
        assert stdout_reader_gone()
    with open(os.devnull, "w") as devnull:
        monkeypatch.setattr(sys, "stdout", devnull)
        assert not stdout_reader_gone()
