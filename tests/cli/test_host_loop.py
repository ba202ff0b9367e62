"""``orchestrate drive`` and the end of a run, through real processes.

Each handler gets its own request (``ORCHESTRATOR_REQUEST_FILE``) even when several are
pending; a handler that prints a broken response document is an invocation failure, not
an answer; and a SIGKILL at any point while a run finishes loses nothing: the answer
recorded at the very end is in the history, or the run resumes and records it again.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from support import sweeps
from support.cli import orchestrate

FLOWS = Path(__file__).parents[1] / "fixtures" / "drive" / "flows.py"
READ_OWN_FILE = (
    f'{sys.executable} -c "import json, os; '
    "r = json.load(open(os.environ['ORCHESTRATOR_REQUEST_FILE'])); "
    "print(r['agent_name'] + ' on ' + r['prompt'].split()[-1])\""
)


def history(workdir: Path) -> dict[str, Any]:
    (path,) = (workdir / ".orchestrator" / "runs").glob("*/state.json")
    return json.loads(path.read_text())


def test_each_parallel_handler_reads_its_own_request(tmp_path: Path) -> None:
    result = orchestrate(
        "drive", f"{FLOWS}:TwoAtOnce", "--workdir", str(tmp_path), "--handler", READ_OWN_FILE
    )
    assert result.returncode == 0, result.stderr
    assert history(tmp_path)["phase_data"]["both"] == ["helper on moon\n", "other on sun\n"]


def test_a_broken_response_document_is_an_invocation_failure(tmp_path: Path) -> None:
    broken = (
        f'{sys.executable} -c "import json, sys; r = json.load(sys.stdin); '
        "print(json.dumps({'request_id': r['request_id'], 'status': 'error', "
        "'error_type': 'AGENT_NOT_FOUND'}))\""  # no version, no created_at
    )
    result = orchestrate(
        "drive", f"{FLOWS}:OneAsk", "--workdir", str(tmp_path), "--handler", broken
    )
    assert result.returncode == 1, result.stderr
    assert "INVOCATION_FAILED" in result.stderr and "bad response" in result.stderr
    state = json.loads((tmp_path / ".one-ask-state.json").read_text())
    assert [r["status"] for r in state["agent_requests"]] == ["retried", "retried", "failed"]


def test_a_second_workflow_in_the_same_directory_is_refused(tmp_path: Path) -> None:
    assert orchestrate("run", f"{FLOWS}:OneAsk", "--workdir", str(tmp_path)).returncode == 42
    before = (tmp_path / ".agent-request.json").read_bytes()
    result = orchestrate("run", f"{FLOWS}:TwoAtOnce", "--workdir", str(tmp_path))
    assert result.returncode == 2
    assert "one instance per work directory" in result.stderr
    assert (tmp_path / ".agent-request.json").read_bytes() == before
    assert not (tmp_path / ".two-at-once-state.json").exists()


def test_run_at_a_pause_says_the_next_step_status_gives(tmp_path: Path) -> None:
    started = orchestrate("run", f"{FLOWS}:OneAsk", "--workdir", str(tmp_path))
    assert started.returncode == 42
    assert started.stdout == f"{tmp_path / '.agent-request.json'}\n"  # hosts read it
    status = orchestrate("status", "--workdir", str(tmp_path), "--json")
    expected = json.loads(status.stdout)["next"]
    assert "then 'orchestrate resume'" in expected
    assert f"orchestrate: next: {expected}\n" in started.stderr


def test_drive_at_a_pause_gives_no_resume_hint(tmp_path: Path) -> None:
    driven = orchestrate(
        "drive", f"{FLOWS}:OneAsk", "--workdir", str(tmp_path), "--handler", READ_OWN_FILE
    )
    assert driven.returncode == 0, driven.stderr
    assert "orchestrate resume" not in driven.stderr and "next:" not in driven.stderr


def test_nan_confidence_is_refused_in_one_line(tmp_path: Path) -> None:
    assert orchestrate("run", f"{FLOWS}:OneAsk", "--workdir", str(tmp_path)).returncode == 42
    result = orchestrate(
        "respond", "--workdir", str(tmp_path), "--text", "x", "--confidence", "nan"
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "NaN" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("sweep", sweeps.SWEEPS)
def test_kill_9_at_any_point_of_the_last_resume_loses_no_answer(tmp_path: Path, sweep: str) -> None:
    def prepared(name: str) -> Path:
        workdir = tmp_path / name
        workdir.mkdir()
        assert orchestrate("run", f"{FLOWS}:OneAsk", "--workdir", str(workdir)).returncode == 42
        assert (
            orchestrate("respond", "--workdir", str(workdir), "--text", "the sea").returncode == 0
        )
        return workdir

    log = tmp_path / "count.log"
    counted = prepared("count")
    env = {"ORCHESTRATOR_CRASH_AT": "count", "ORCHESTRATOR_CRASH_LOG": str(log)}
    assert orchestrate("resume", "--workdir", str(counted), env=env).returncode == 0
    labels = [line.partition(" ")[2] for line in log.read_text().splitlines()]
    assert len(labels) >= 5
    for point in sweeps.chosen(sweep, labels):
        workdir = prepared(f"kill-{point}")
        env = {
            "ORCHESTRATOR_CRASH_AT": str(point),
            "ORCHESTRATOR_CRASH_LOG": str(tmp_path / "k.log"),
        }
        killed = orchestrate("resume", "--workdir", str(workdir), env=env)
        assert killed.returncode == -signal.SIGKILL, (point, killed.stderr)
        again = orchestrate("resume", "--workdir", str(workdir))
        final = history(workdir)
        assert final["phase_data"]["only"] == "the sea", point
        assert [r["status"] for r in final["agent_requests"]] == ["completed"], point
        leftovers = {p.name for p in workdir.iterdir()} - {".orchestrator"}
        if again.returncode == 2:
            # Killed after the state was gone: the run had finished, and only its mailbox
            # may be left; the next run in this directory clears it before it starts.
            assert "no workflow instance" in again.stderr
            assert leftovers <= {".agent-request.json", ".agent-response.json"}, point
            assert orchestrate("run", f"{FLOWS}:OneAsk", "--workdir", str(workdir)).returncode == 42
            assert not (workdir / ".agent-response.json").exists(), point
        else:
            assert again.returncode == 0, (point, again.stderr)
            assert leftovers == set(), (point, leftovers)


def test_a_handler_that_prints_no_utf8_gives_a_parse_error(tmp_path: Path) -> None:
    """As with the subprocess adapter: output that cannot be an answer is PARSE_ERROR
    (not retried), and the run says so."""
    garbage = f"{sys.executable} -c \"import sys; sys.stdout.buffer.write(b'\\xff\\xfe bad')\""
    result = orchestrate(
        "drive", f"{FLOWS}:OneAsk", "--workdir", str(tmp_path), "--handler", garbage
    )
    assert result.returncode == 1, result.stderr
    assert "PARSE_ERROR" in result.stderr and "not UTF-8" in result.stderr
    state = json.loads((tmp_path / ".one-ask-state.json").read_text())
    assert [r["status"] for r in state["agent_requests"]] == ["failed"]


def test_a_handler_printing_more_than_a_response_holds_is_stopped(tmp_path: Path) -> None:
    flood = f"{sys.executable} -c \"import sys; sys.stdout.write('x' * (17 * 1024 * 1024))\""
    result = orchestrate("drive", f"{FLOWS}:OneAsk", "--workdir", str(tmp_path), "--handler", flood)
    assert result.returncode == 1, result.stderr
    assert "PARSE_ERROR" in result.stderr and "more than 16777216 bytes" in result.stderr
    # Nothing left that the bridge would refuse: the error answer was recorded and removed.
    assert [p for p in tmp_path.glob(".agent-response*") if p.is_file()] == []
    assert list((tmp_path / ".agent-responses").iterdir()) == []


@pytest.mark.slow
def test_what_a_handler_leaves_running_is_killed_and_does_not_hold_the_answer(
    tmp_path: Path,
) -> None:
    """The handler answers and exits, leaving a process that keeps stdout open: the
    answer is taken a moment after it exits (not at the request's timeout of 120 s), and
    the leftover is killed."""
    pid_file = tmp_path / "leftover.pid"
    leftover = (
        f'{sys.executable} -c "import os, time; '
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(300)\""
    )
    handler = (
        f"{leftover} & while [ ! -s {pid_file} ]; do sleep 0.01; done; echo answered by the host"
    )
    result = orchestrate(
        "drive", f"{FLOWS}:OneAsk", "--workdir", str(tmp_path), "--handler", handler
    )
    assert result.returncode == 0, result.stderr
    assert history(tmp_path)["agent_requests"][0]["status"] == "completed"
    pid = int(pid_file.read_text())
    for _ in range(250):  # SIGKILL is delivered asynchronously
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        status = Path(f"/proc/{pid}/stat")
        if status.exists() and status.read_text().split()[2] == "Z":
            break  # a zombie waiting for init: dead
        import time

        time.sleep(0.02)
    else:
        raise AssertionError(f"the handler's leftover {pid} still runs")


def test_control_characters_from_a_run_never_reach_the_terminal(tmp_path: Path) -> None:
    """A failure's words come from user code and agents: an escape sequence or a bidi
    override in them is shown escaped, not obeyed."""
    (tmp_path / "wf.py").write_text(
        "from orchestrator import Workflow, phase\n"
        "class Loud(Workflow):\n"
        "    name = 'loud'\n"
        "    @phase(1)\n"
        "    def go(self, ctx):\n"
        "        raise RuntimeError('boom \\x1b[2J\\x1b[31m red \\u202e desrever')\n"
    )
    result = orchestrate("run", f"{tmp_path / 'wf.py'}:Loud", "--workdir", str(tmp_path))
    assert result.returncode == 1
    assert "\x1b" not in result.stderr and "\u202e" not in result.stderr
    assert "boom \\u001b[2J\\u001b[31m red \\u202e desrever" in result.stderr
    shown = orchestrate("history", "--workdir", str(tmp_path))
    assert "\x1b" not in shown.stdout and "\\u001b[2J" in shown.stdout
