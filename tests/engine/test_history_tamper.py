"""One byte flipped, or a file cut short, anywhere under a paused run's directory.

``.orchestrator/runs/<run_id>/`` holds what the engine does not sign: the event log, the
archived requests, each phase's journal and results, each request's prompt and answer.
Whatever the change, ``resume``, ``retry``, ``rewind``, ``fork`` and ``replay`` either
refuse it in one line (no traceback) or go on with the answers the run was given: the
run, finished afterwards, holds only the genuine ones.

The commands run in this process through the CLI's own entry point (hundreds of runs
in seconds); the files, the key and the register are real. Each example starts from the
same paused run, put back at the same path, the register's note of it with it.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator._errors import HistoryDamagedError
from orchestrator.cli.main import main
from orchestrator.engine.loader import load_workflow
from orchestrator.storage.checkpoints import register_entry
from orchestrator.testing import WorkflowHarness

FIXTURE = Path(__file__).parents[1] / "fixtures" / "archive" / "many_asks.py"
REFERENCE = f"{FIXTURE}:ManyAsks"
ANSWERED = 5  # asks answered before the pause: several archived, several journals
COMMANDS = ("resume", "retry", "rewind", "fork", "replay")


def genuine(prompt: str) -> str:
    return "genuine answer about " + prompt.split()[-1]


class PausedRun:
    """A ManyAsks run paused after ``ANSWERED`` answers, kept to be put back whole."""

    def __init__(self, root: Path) -> None:
        self.workdir = root / "work"
        self.workdir.mkdir()
        harness = WorkflowHarness(load_workflow(REFERENCE), self.workdir)
        outcome = harness.engine().start(workflow_ref=REFERENCE, workdir=self.workdir, inputs=None)
        for _ in range(ANSWERED):
            request = outcome.pending[0]
            harness.respond(request.request_id, genuine(request.prompt))
            outcome = harness.resume()
        pending = outcome.pending[0]
        harness.respond(pending.request_id, genuine(pending.prompt))  # waiting to be taken
        (self.run_dir,) = (self.workdir / ".orchestrator" / "runs").iterdir()
        self.kept = root / "kept"
        shutil.copytree(self.workdir, self.kept, symlinks=True)
        record = json.loads(next(self.workdir.glob(".*-state.json")).read_bytes())
        engine = record["phase_data"]["x_orchestrator"]
        self.entry = register_entry(engine["run_id"], engine["started_at"], engine["home"])
        self.entry_kept = self.entry.read_bytes()

    def files(self) -> list[Path]:
        """Every file under the paused run's directory (as it was kept)."""
        kept = self.kept_run
        return sorted(p.relative_to(kept) for p in kept.rglob("*") if p.is_file())

    @property
    def kept_run(self) -> Path:
        return self.kept / self.run_dir.relative_to(self.workdir)

    def put_back(self) -> None:
        shutil.rmtree(self.workdir)
        shutil.copytree(self.kept, self.workdir, symlinks=True)
        self.entry.write_bytes(self.entry_kept)
        fork = self.workdir.parent / "fork"
        if fork.exists():
            shutil.rmtree(fork)


@pytest.fixture(scope="module")
def paused(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PausedRun]:
    yield PausedRun(tmp_path_factory.mktemp("tamper"))


def orchestrate_here(*argv: object) -> tuple[int, str]:
    """``orchestrate ARGV`` through the CLI's entry point: its exit code and stderr."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:  # argparse's usage errors
            code = int(exc.code or 0)
    return code, stderr.getvalue()


def command_line(command: str, run: PausedRun) -> list[object]:
    workdir = run.workdir
    return {
        "resume": ["resume", "--workdir", workdir],
        "retry": ["retry", "--workdir", workdir],
        "rewind": ["rewind", "--workdir", workdir, "--to", "fact_03"],
        "fork": [
            "fork",
            "--source",
            workdir,
            "--workdir",
            workdir.parent / "fork",
            "--from",
            "fact_04",
        ],
        "replay": ["replay", REFERENCE, "--run", run.run_dir],
    }[command]


def answers_used(workdir: Path) -> list[tuple[str, str]]:
    """Finish the run in ``workdir`` in this process, answering what is still asked,
    and return each recorded (prompt, answer) of its history."""
    for left in (workdir / ".agent-responses").glob("*.json"):
        left.unlink()  # an answer to a request the command withdrew (rewind)
    harness = WorkflowHarness(load_workflow(REFERENCE), workdir)
    try:
        outcome = harness.resume()
        while outcome.status == "paused":
            request = outcome.pending[0]
            harness.respond(request.request_id, genuine(request.prompt))
            outcome = harness.resume()
    except HistoryDamagedError:
        return []  # refused where it is read (the end of the run): nothing was taken
    assert outcome.status == "completed", outcome.message
    (history,) = (workdir / ".orchestrator" / "runs").glob("*/state.json")
    state = json.loads(history.read_bytes())
    used = [
        (r["x_request"]["prompt"], r["x_response"]["response"])
        for r in state["agent_requests"]
        if r["status"] == "completed"
    ]
    # The phases' outputs too: a fork takes those of the phases before it as they were.
    used += [
        (f"the number {name.removeprefix('fact_').lstrip('0')}", output["fact"])
        for name, output in state["phase_data"].items()
        if name.startswith("fact_")
    ]
    assert len(used) >= 12, used
    return used


def changed(data: bytes, kind: str, at: int, *, bit: int | None = None) -> bytes:
    """``data`` with the byte at ``at`` (wrapped) flipped in one bit (``bit``, else one
    picked by the place), or cut short there."""
    if not data:
        return data
    at %= len(data)
    if kind == "flip":
        mask = 1 << (at % 8 if bit is None else bit)
        return data[:at] + bytes([data[at] ^ mask]) + data[at + 1 :]
    return data[:at]  # cut short


def where_an_answer_is(data: bytes) -> int | None:
    """The place of the first answer's number in ``data``: its lowest bit flipped makes
    another answer that still reads well (the change that matters most)."""
    found = data.find(b"genuine answer about ")
    return None if found < 0 else found + len(b"genuine answer about ")


def check_one_change(
    run: PausedRun, relative: Path, kind: str, at: int, command: str, *, bit: int | None = None
) -> None:
    run.put_back()
    target = run.run_dir / relative
    before = target.read_bytes()
    after = changed(before, kind, at, bit=bit)
    if after == before:
        return
    target.write_bytes(after)
    code, stderr = orchestrate_here(*command_line(command, run))
    assert "Traceback" not in stderr, stderr
    if code not in (0, 42):
        lines = [line for line in stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("orchestrate: "), stderr
        if command == "replay" and code == 1 and "does not replay" in stderr:
            pytest.fail(f"{relative} ({kind} at {at}) made replay report a change: {stderr}")
        return
    if command == "replay":
        return  # it replayed clean: it took nothing changed
    where = run.workdir.parent / "fork" if command == "fork" else run.workdir
    for prompt, answer in answers_used(where):
        assert answer == genuine(prompt), f"{relative} ({kind} at {at}), {command}: {answer!r}"


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS)
@given(data=st.data())
@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_a_changed_byte_under_the_run_is_refused_or_changes_no_answer(
    paused: PausedRun, command: str, data: Any
) -> None:
    relative = data.draw(st.sampled_from(paused.files()), label="file")
    kind = data.draw(st.sampled_from(["flip", "cut"]), label="change")
    at = data.draw(st.integers(min_value=0, max_value=1 << 20), label="at")
    check_one_change(paused, relative, kind, at, command)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["flip", "cut"])
def test_every_file_under_the_run_changed_once_for_every_command(
    paused: PausedRun, kind: str
) -> None:
    for number, relative in enumerate(paused.files()):
        answer = where_an_answer_is((paused.kept_run / relative).read_bytes())
        for command in COMMANDS:
            if answer is None:
                check_one_change(paused, relative, kind, 7919 * number + 13, command)
            else:  # within an answer: the change most worth refusing
                check_one_change(paused, relative, kind, answer, command, bit=0)
