"""The work directory is untrusted ground: a link, a FIFO or a directory planted at any
path the engine, the board or the evidence writer uses steers nothing outside it.

For every such path and every kind of thing planted there (a link to a file outside, to
a directory outside, a dangling link, a link to ``/dev/null``, a FIFO, a directory where a
file belongs or a file where a directory belongs), the commands that use the path run as
real processes. Outside the work directory lies a watched tree (on its own tmpfs where
this machine lets the tests mount one): decoy files with known bytes, a decoy directory,
and the place a dangling link points at. After every command, not one byte of it has
changed; every refusal is one line, never a traceback; and the instance's state is still
there to resume from.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.board.board import Board
from orchestrator.formats.board_documents import Task
from orchestrator.formats.convert import structure
from support.bad_input_support import (
    STATE_FILE,
    Instance,
    assert_one_line_error,
    child_env,
    describe,
    orchestrate,
    start,
)

pytestmark = pytest.mark.slow
COMMANDS = Path(__file__).parents[1] / "fixtures" / "untrusted" / "commands.py"

KINDS = ("link-to-file", "link-to-dir", "dangling-link", "link-to-dev-null", "fifo", "wrong-kind")
RUN = "<run>"  # stands for the run's id in the paths below
# Paths of a paused instance: (path, whether the engine keeps a directory there).
WORKFLOW_PATHS = [
    (STATE_FILE, False),
    (".agent-request.json", False),
    (".agent-response.json", False),
    (".agent-requests", True),
    (".agent-responses", True),
    (".orchestrator", True),
    (".orchestrator/tiny.lock", False),
    (".orchestrator/runs", True),
    (f".orchestrator/runs/{RUN}", True),
    (f".orchestrator/runs/{RUN}/events.ndjson", False),
    (f".orchestrator/runs/{RUN}/phases", True),
    (f".orchestrator/runs/{RUN}/agents", True),
    (f".orchestrator/runs/{RUN}/archive.ndjson", False),
]
BOARD_PATHS = [
    (".board", True),
    (".board/board.json", False),
    (".board/ledger.ndjson", False),
    (".board/board.lock", False),
    (".board/maintenance.lock", False),
    (".board/packets", True),
    (".board/results", True),
    (".board/verdicts", True),
    (".board/heartbeats", True),
    (".board/heartbeats/T-1", False),
    (".board/worklogs", True),
    (".board/worklogs/T-1.jsonl", False),
]
RUN_ID = "3f56dc4d-35cf-4f97-925c-0b04a6fe8bf4"
TASK = {
    "task_id": "T-1",
    "title": "Write the notes",
    "type": "parallelizable",
    "dependencies": [],
    "lock_scope": ["notes.md"],
    "forbidden_scope": [],
    "acceptance_criteria": ["The notes exist"],
    "worklog_path": "worklogs/T-1.jsonl",
    "timeout_seconds": 60,
    "heartbeat_interval_seconds": 10,
}


# -- the watched world outside -------------------------------------------------------------


@pytest.fixture(scope="module")
def outside(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A tree outside every work directory, on a tmpfs of its own where one can be mounted."""
    root = tmp_path_factory.mktemp("outside")
    mounted = (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(root)], capture_output=True
        ).returncode
        == 0
    )
    try:
        yield root
    finally:
        if mounted:
            subprocess.run(["umount", str(root)], check=True)


def fill(outside: Path) -> None:
    """The decoys, afresh: known bytes, a directory with a file, nothing at ``absent``."""
    for entry in outside.iterdir():
        shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    (outside / "decoy.txt").write_bytes(b"the user's own file\n" * 64)
    (outside / "decoy-dir").mkdir()
    (outside / "decoy-dir" / "keep.txt").write_bytes(b"keep me\n")
    os.chmod(outside / "decoy.txt", 0o644)


def snapshot(outside: Path) -> dict[str, tuple[int, str]]:
    """Every entry under ``outside``: its mode and (files) the SHA-256 of its bytes."""
    seen = {}
    for directory, dirs, files in os.walk(outside):
        for name in dirs + files:
            path = Path(directory) / name
            info = path.lstat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if name in files else ""
            seen[str(path.relative_to(outside))] = (info.st_mode, digest)
    return seen


def plant(path: Path, kind: str, directory: bool, outside: Path) -> None:
    """Put ``kind`` at ``path``, replacing what is there."""
    if path.is_symlink() or path.is_file() or (path.exists() and not path.is_dir()):
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "link-to-file":
        path.symlink_to(outside / "decoy.txt")
    elif kind == "link-to-dir":
        path.symlink_to(outside / "decoy-dir", target_is_directory=True)
    elif kind == "dangling-link":
        path.symlink_to(outside / "absent")
    elif kind == "link-to-dev-null":
        path.symlink_to("/dev/null")
    elif kind == "fifo":
        os.mkfifo(path)
    elif directory:  # a file where the engine keeps a directory
        path.write_bytes(b"not a directory\n")
    else:  # a directory where the engine keeps a file
        path.mkdir()
        (path / "inside.txt").write_bytes(b"x\n")


def run_commands(cwd: Path, *commands: tuple[tuple[object, ...], str]) -> None:
    """Run ``orchestrate`` commands (arguments, standard input) one after another in one
    process (``fixtures/untrusted/commands.py``); each did its work or refused in one
    line, never with a traceback."""
    spec = cwd / "commands.json"
    spec.write_text(json.dumps([{"argv": list(map(str, a)), "stdin": i} for a, i in commands]))
    process = subprocess.run(
        [sys.executable, str(COMMANDS), str(spec)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=child_env(),
        timeout=120,
    )
    assert process.returncode == 0 and process.stderr == "", describe(process)
    for result in json.loads(process.stdout):
        said = f"{result['argv']}: exit {result['code']}, stderr {result['stderr']!r}"
        assert result["code"] in (0, 1, 2, 42, 75), said
        assert "Traceback" not in result["stderr"], said
        if result["code"] in (1, 2, 75):
            assert_one_line_error(result["stderr"])


def judge(result: subprocess.CompletedProcess[str]) -> None:
    """A command either did its work or refused in one line; never a traceback."""
    assert result.returncode in (0, 1, 2, 42, 75), describe(result)
    assert "Traceback" not in result.stderr, describe(result)
    if result.returncode in (1, 2, 75):
        assert_one_line_error(result.stderr)


# -- a paused workflow ----------------------------------------------------------------------


def run_id_of(instance: Instance) -> str:
    return str(instance.engine_record()["run_id"])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("where", "directory"), WORKFLOW_PATHS)
def test_a_paused_instance_never_reaches_outside_through_what_is_planted(
    tmp_path: Path, outside: Path, where: str, directory: bool, kind: str
) -> None:
    fill(outside)
    before = snapshot(outside)
    instance = start(tmp_path)
    state_before = instance.state_bytes()
    path = instance.workdir / where.replace(RUN, run_id_of(instance))
    plant(path, kind, directory, outside)
    run_commands(
        tmp_path,
        (("status", "--workdir", instance.workdir), ""),
        (("respond", "--workdir", instance.workdir, "--text", "Owls hunt at night."), ""),
        (("resume", "--workdir", instance.workdir), ""),
    )
    assert snapshot(outside) == before
    if where != STATE_FILE:  # nothing lost: the state is there, or the run's history is
        state = instance.state_path
        finished = list((instance.workdir / ".orchestrator" / "runs").glob("*/state.json"))
        if state.is_file() and not state.is_symlink():
            json.loads(state.read_bytes())
        else:
            assert finished or state_before, "the state is gone and no history was kept"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("where", "directory"),
    [(STATE_FILE, False), (".orchestrator", True), (".orchestrator/tiny.lock", False),
     (".agent-request.json", False), (".orchestrator/runs", True)],
)  # fmt: skip
def test_run_never_reaches_outside_through_what_is_planted(
    tmp_path: Path, outside: Path, where: str, directory: bool, kind: str
) -> None:
    from support.bad_input_support import WORKFLOW_FILE

    fill(outside)
    before = snapshot(outside)
    workdir = tmp_path / "work"
    workdir.mkdir()
    plant(workdir / where, kind, directory, outside)
    result = orchestrate(
        "run", f"{WORKFLOW_FILE}:Tiny", "--workdir", workdir, "--output", tmp_path / "out",
        "--input", "topic=owls", cwd=tmp_path,
    )  # fmt: skip
    judge(result)
    assert snapshot(outside) == before, describe(result)


def test_answers_behind_a_linked_responses_directory_are_refused_and_left_alone(
    tmp_path: Path, outside: Path
) -> None:
    """A link at ``.agent-responses/`` to a directory outside, holding a valid answer for
    the pending request: refused in one line naming the link; the answer outside is not
    taken, not deleted; the request stays pending."""
    from support.bad_input_support import response_bytes

    fill(outside)
    instance = start(tmp_path)
    request_id = instance.request()["request_id"]
    answers = outside / "answers"
    answers.mkdir()
    (answers / f"{request_id}.json").write_bytes(response_bytes(request_id))
    before = snapshot(outside)
    state = instance.state_bytes()
    link = instance.workdir / ".agent-responses"
    link.symlink_to(answers, target_is_directory=True)
    result = instance.resume()
    assert result.returncode == 1, describe(result)
    assert_one_line_error(result.stderr, str(link), "symbolic link")
    assert snapshot(outside) == before
    assert instance.state_bytes() == state


# -- a board ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("where", "directory"), BOARD_PATHS)
def test_a_board_never_reaches_outside_through_what_is_planted(
    tmp_path: Path, outside: Path, where: str, directory: bool, kind: str
) -> None:
    fill(outside)
    before = snapshot(outside)
    workdir = tmp_path / "work"
    workdir.mkdir()
    board = Board.create(workdir / ".board", run_id=RUN_ID, objective="notes")
    board.create_tasks([structure(TASK, Task, source="task")])
    plant(workdir / where, kind, directory, outside)
    result_document = {
        "schema_version": "1.0.0",
        "run_id": RUN_ID,
        "task_id": "T-1",
        "status": "done",
        "changes": [{"resource": "notes.md", "action": "edit", "evidence": "written"}],
        "acceptance_check": [
            {"criterion": "The notes exist", "status": "pass", "evidence": "notes.md"}
        ],
        "worklog_path": "worklogs/T-1.jsonl",
        "notes_for_orchestrator": [],
    }
    at = ("--workdir", workdir)
    run_commands(
        tmp_path,
        (("board", "assign", *at, "--task", "T-1", "--owner", "coder"), ""),
        (("board", "heartbeat", *at, "--task", "T-1"), ""),
        (("board", "worklog", *at, "--task", "T-1", "--action", "edit"), ""),
        (("board", "submit", *at, "--task", "T-1"), json.dumps(result_document)),
        (("board", "watchdog", *at, "--now", "2030-01-01T00:00:00Z", "--wait", "1"), ""),
        (("board", "status", *at), ""),
    )
    assert snapshot(outside) == before
