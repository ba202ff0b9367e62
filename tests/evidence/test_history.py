"""``orchestrate history``: a run's timeline a person can read at a glance."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from support.cli import orchestrate

WORKFLOW = """
from orchestrator import Workflow, phase

PROMPT = "Say something short about this phase, in one sentence, for the timeline test. " * 2


class Timeline(Workflow):
    name = "timeline"
    agents = ("writer",)
    max_retries = 1

    @phase(1)
    def first(self, ctx):
        return {"said": ctx.ask("writer", PROMPT)}

    @phase(2)
    def second(self, ctx):
        return {"said": ctx.ask("writer", "Once more. " + PROMPT)}
"""

# Fails its first call (INVOCATION_FAILED, retried), then answers.
HANDLER = (
    "import os, sys; sys.stdin.read(); mark = os.environ['MARK']\n"
    "if not os.path.exists(mark):\n"
    "    open(mark, 'w').close(); sys.exit(3)\n"
    "print('a short answer')\n"
)


@pytest.mark.slow
def test_the_timeline_lists_phases_asks_answers_and_retries_in_order(tmp_path: Path) -> None:

    (tmp_path / "wf.py").write_text(WORKFLOW)
    (tmp_path / "handler.py").write_text(HANDLER)
    env = {"MARK": str(tmp_path / "failed-once")}
    done = orchestrate(
        "drive",
        f"{tmp_path / 'wf.py'}:Timeline",
        "--workdir",
        str(tmp_path),
        "--handler",
        f"{sys.executable} {tmp_path / 'handler.py'}",
        env=env,
    )
    assert done.returncode == 0, done.stderr
    shown = orchestrate("history", "--workdir", str(tmp_path))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("timeline  run ") and "completed" in lines[0]
    body = lines[1:]
    assert all(re.match(r"\+\d\d:\d\d\.\d{3}  ", line) for line in body), body
    kinds = [
        "retried"
        if "retried: INVOCATION_FAILED" in line
        else "answer"
        if "completed: answered after" in line
        else "phase 1"
        if "phase 1 first: done in" in line
        else "phase 2"
        if "phase 2 second: done in" in line
        else line
        for line in body
    ]
    assert kinds == ["retried", "answer", "phase 1", "answer", "phase 2"], body
    assert "retry 1" in body[1] and "retried as" in body[0]
    offsets = [line.split()[0] for line in body]
    assert offsets == sorted(offsets)


@pytest.mark.slow
def test_a_paused_instance_shows_what_it_waits_for(tmp_path: Path) -> None:
    (tmp_path / "wf.py").write_text(WORKFLOW)
    assert (
        orchestrate("run", f"{tmp_path / 'wf.py'}:Timeline", "--workdir", str(tmp_path)).returncode
        == 42
    )
    shown = orchestrate("history", "--workdir", str(tmp_path))
    assert shown.returncode == 0, shown.stderr
    assert "paused" in shown.stdout.splitlines()[0]
    assert "ask writer" in shown.stdout and "pending: waiting" in shown.stdout
    # The live run by its id too; another id is no run here.
    run_id = shown.stdout.split()[2]
    by_id = orchestrate("history", "--workdir", str(tmp_path), "--run", run_id)
    assert by_id.returncode == 0 and by_id.stdout == shown.stdout
    other = orchestrate("history", "--workdir", str(tmp_path), "--run", "not-this-run")
    assert other.returncode == 2 and "not-this-run" in other.stderr


def test_no_run_here_is_a_usage_error(tmp_path: Path) -> None:
    shown = orchestrate("history", "--workdir", str(tmp_path))
    assert shown.returncode == 2
    assert "no a workflow instance" not in shown.stderr
    assert "Traceback" not in shown.stderr and "nothing under" in shown.stderr


TIMED = """
from orchestrator import Workflow, phase


class Timed(Workflow):
    name = "timed"

    @phase(1)
    def prepare(self, ctx):
        return "ready"

    @phase(2)
    def wait(self, ctx):
        ctx.sleep(60)
        return "waited"

    @phase(3)
    def report(self, ctx):
        return "reported"
"""


def at(moment: str) -> dict[str, str]:
    return {"ORCHESTRATOR_NOW": moment}


def test_the_timeline_shows_timers_and_the_completions_a_rewind_took_back(
    tmp_path: Path,
) -> None:
    (tmp_path / "timed.py").write_text(TIMED)
    started = orchestrate("run", "timed.py", cwd=tmp_path, env=at("2026-03-01T10:00:00Z"))
    assert started.returncode == 42, started.stderr  # the timer
    done = orchestrate("resume", cwd=tmp_path, env=at("2026-03-01T10:02:00Z"))
    assert done.returncode == 0, done.stderr
    rewound = orchestrate("rewind", "--to", "prepare", cwd=tmp_path, env=at("2026-03-01T10:03:00Z"))
    assert rewound.returncode == 0, rewound.stderr

    shown = orchestrate("history", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()[1:]
    texts = [line.split("  ", 1)[1] for line in lines]
    timer = next(i for i, text in enumerate(texts) if "timer in phase 2 wait" in text)
    assert "waits until 2026-03-01T10:01:00" in texts[timer]
    assert lines[timer].startswith("+00:00.000")
    rewound_lines = [text for text in texts if "rewound" in text and ": done" in text]
    assert [text.split(":")[0] for text in rewound_lines] == [
        "phase 1 prepare",
        "phase 2 wait",
        "phase 3 report",
    ]
    assert all("(to phase prepare at +03:00.000)" in text for text in rewound_lines)
    assert lines[-1].endswith("outputs taken back: prepare, report, wait")
