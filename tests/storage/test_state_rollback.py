"""A signed state that is not the run's latest, or not this directory's, is refused.

The signature says that orchestrate wrote a state; the checkpoint register beside the key
says which state of the run it wrote last, and the engine's record says which work
directory the run belongs to. A state put back from before (or restored after the run
ended), or copied into another directory, is refused in one line; ``orchestrate trust
--accept-rollback`` accepts it on purpose, and the event log stays strictly increasing.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from support.cli import orchestrate

FIXTURE = Path(__file__).parents[1] / "fixtures" / "archive" / "many_asks.py"
REFERENCE = f"{FIXTURE}:ManyAsks"
STATE = ".many-asks-state.json"


def answer_and_resume(workdir: Path, text: str) -> int:
    answered = orchestrate("respond", "--workdir", workdir, "--text", text)
    assert answered.returncode == 0, answered.stderr
    return orchestrate("resume", "--workdir", workdir).returncode


def started(workdir: Path) -> Path:
    workdir.mkdir(exist_ok=True)
    begun = orchestrate("run", REFERENCE, "--workdir", workdir)
    assert begun.returncode == 42, begun.stderr
    return workdir / STATE


def finished_in_process(workdir: Path) -> None:
    """Answer every ask left of the run in ``workdir`` in this process (quicker than a
    process per pause; the same file bridge and register)."""
    from orchestrator.engine.loader import load_workflow
    from orchestrator.testing import WorkflowHarness

    harness = WorkflowHarness(load_workflow(REFERENCE), workdir)
    outcome = harness.resume()
    while outcome.status == "paused":
        harness.respond(outcome.pending[0].request_id, "an answer")
        outcome = harness.resume()
    assert outcome.status == "completed", outcome.message


def one_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


def sequence_numbers(workdir: Path) -> list[int]:
    (log,) = (workdir / ".orchestrator" / "runs").glob("*/events.ndjson")
    return [json.loads(line)["x_seq"] for line in log.read_bytes().splitlines()]


def test_an_older_signed_state_put_back_is_refused_and_the_answer_kept(tmp_path: Path) -> None:
    state = started(tmp_path)
    assert answer_and_resume(tmp_path, "first answer") == 42
    older = state.read_bytes()
    assert answer_and_resume(tmp_path, "second answer") == 42
    latest = state.read_bytes()

    state.write_bytes(older)  # put back: the second answer would be asked again
    (tmp_path / ".agent-response.json").unlink(missing_ok=True)
    refused = orchestrate("resume", "--workdir", tmp_path)
    assert refused.returncode == 1, refused.stderr
    line = one_line(refused.stderr)
    assert str(state) in line and "rolled back: checkpoint" in line, line
    assert "orchestrate trust --accept-rollback" in line
    assert state.read_bytes() == older, "nothing was run or changed"
    shown = orchestrate("status", "--workdir", tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "NOT VALID: run " in shown.stdout and "rolled back: checkpoint" in shown.stdout
    for command in ("retry", "cancel"):
        again = orchestrate(command, "--workdir", tmp_path)
        assert again.returncode == 1 and "rolled back" in again.stderr, again.stderr

    state.write_bytes(latest)
    assert answer_and_resume(tmp_path, "third answer") == 42


def test_a_finished_run_does_not_come_back_to_life(tmp_path: Path) -> None:
    state = started(tmp_path)
    kept = state.read_bytes()
    finished_in_process(tmp_path)
    state.write_bytes(kept)
    refused = orchestrate("resume", "--workdir", tmp_path)
    assert refused.returncode == 1 and "rolled back" in one_line(refused.stderr)


def test_a_state_copied_into_another_directory_is_refused(tmp_path: Path) -> None:
    first = tmp_path / "first"
    started(first)
    assert answer_and_resume(first, "first answer") == 42
    second = tmp_path / "second"
    shutil.copytree(first, second)
    refused = orchestrate("resume", "--workdir", second)
    assert refused.returncode == 1, refused.stderr
    line = one_line(refused.stderr)
    assert "signed for another work directory" in line and str(second / STATE) in line, line
    # The run goes on where it lives.
    assert answer_and_resume(first, "second answer") == 42


def test_a_signed_state_of_this_run_copied_as_a_finished_runs_history_is_refused(
    tmp_path: Path,
) -> None:
    state = started(tmp_path)
    older = state.read_bytes()
    finished_in_process(tmp_path)
    (history,) = (tmp_path / ".orchestrator" / "runs").glob("*/state.json")
    history.write_bytes(older)
    rewound = orchestrate("rewind", "--workdir", tmp_path, "--to", "fact_01")
    assert rewound.returncode == 1, rewound.stderr
    assert "rolled back" in one_line(rewound.stderr)


def test_accept_rollback_takes_the_state_and_the_event_log_stays_increasing(
    tmp_path: Path,
) -> None:
    state = started(tmp_path)
    assert answer_and_resume(tmp_path, "first answer") == 42
    older = state.read_bytes()
    assert answer_and_resume(tmp_path, "second answer") == 42
    assert answer_and_resume(tmp_path, "third answer") == 42
    state.write_bytes(older)
    (tmp_path / ".agent-response.json").unlink(missing_ok=True)

    accepted = orchestrate("trust", "--accept-rollback", state)
    assert accepted.returncode == 0, accepted.stderr
    assert "accepted as the run's latest (the last signed was" in accepted.stderr
    assert answer_and_resume(tmp_path, "second answer, again") == 42
    numbers = sequence_numbers(tmp_path)
    assert numbers == sorted(set(numbers)), numbers


def test_accept_rollback_makes_a_copy_this_directorys(tmp_path: Path) -> None:
    first = tmp_path / "first"
    started(first)
    second = tmp_path / "second"
    shutil.copytree(first, second)
    accepted = orchestrate("trust", "--accept-rollback", second / STATE)
    assert accepted.returncode == 0, accepted.stderr
    assert "now belongs to this one" in accepted.stderr
    assert answer_and_resume(second, "an answer") == 42
    # The original goes on where it began: each directory holds its own checkpoints.
    assert answer_and_resume(first, "an answer") == 42


def test_a_finished_runs_kept_state_is_neither_a_copy_nor_rolled_back(tmp_path: Path) -> None:
    """What ``status`` and the UI say of a run's kept ``state.json``: it belongs to the work
    directory above ``.orchestrator/runs/<run_id>/``, and is the run's latest."""
    from orchestrator.storage.state_key import signature_problem

    started(tmp_path)
    finished_in_process(tmp_path)
    (history,) = (tmp_path / ".orchestrator" / "runs").glob("*/state.json")
    raw = history.read_bytes()
    assert signature_problem(json.loads(raw), raw, history) is None
