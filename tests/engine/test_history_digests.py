"""What replay trusts of a run's history is vouched for by its signed state.

Finished requests leave the state for ``.orchestrator/runs/<run_id>/requests.ndjson``, and
each phase's journal is kept as ``journal.json``: neither file is signed, so the state keeps
the digest of each (``x_archived_sha256``, the record's ``journals``). A line or a journal
changed since is refused in one line naming the file and the record; nothing is taken
from it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.testing import WorkflowHarness
from support.cli import orchestrate

FIXTURE = Path(__file__).parents[1] / "fixtures" / "archive" / "many_asks.py"
REFERENCE = f"{FIXTURE}:ManyAsks"


def load_workflow() -> Any:
    from orchestrator.engine.loader import load_workflow as load

    return load(REFERENCE)


def answer(request: Any) -> str:
    return "genuine answer about " + request.prompt.split()[-1]


def paused_after(workdir: Path, answered: int) -> tuple[Any, str]:
    """A ManyAsks run in ``workdir`` with ``answered`` asks answered, paused on the next
    (the harness, and the pending request's id)."""
    harness = WorkflowHarness(load_workflow(), workdir)
    # Started by its file's reference, as 'orchestrate run' does, so the CLI resumes it.
    outcome = harness.engine().start(workflow_ref=REFERENCE, workdir=workdir, inputs=None)
    for _ in range(answered):
        harness.respond(outcome.pending[0].request_id, answer(outcome.pending[0]))
        outcome = harness.resume()
    assert outcome.status == "paused", outcome.message
    return harness, outcome.pending[0].request_id


def archive_of(workdir: Path) -> Path:
    (archive,) = (workdir / ".orchestrator" / "runs").glob("*/requests.ndjson")
    return archive


def one_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


def test_a_forged_archived_answer_is_refused_and_never_signed_into_the_history(
    tmp_path: Path,
) -> None:
    harness, pending = paused_after(tmp_path, 11)
    archive = archive_of(tmp_path)
    original = archive.read_bytes()
    assert b'genuine answer about 1"' in original
    archive.write_bytes(original.replace(b'genuine answer about 1"', b'FORGED ANSWER"'))
    harness.respond(pending, "genuine answer about 12")

    ended = orchestrate("resume", "--workdir", tmp_path)
    assert ended.returncode == 1, ended.stderr
    line = one_line(ended.stderr)
    assert str(archive) in line and "changed in the run's history" in line, line
    assert list((tmp_path / ".orchestrator" / "runs").glob("*/state.json")) == []
    for command in (("status",), ("history",)):
        shown = orchestrate(*command, "--workdir", tmp_path)
        assert "FORGED" not in shown.stdout + shown.stderr

    archive.write_bytes(original)  # put back as written: the run ends, the genuine answer kept
    ended = orchestrate("resume", "--workdir", tmp_path)
    assert ended.returncode == 0, ended.stderr
    (history,) = (tmp_path / ".orchestrator" / "runs").glob("*/state.json")
    records = json.loads(history.read_text())["agent_requests"]
    assert records[0]["x_response"]["response"] == "genuine answer about 1"


def test_a_forged_line_beside_the_genuine_one_is_passed_over(tmp_path: Path) -> None:
    harness, pending = paused_after(tmp_path, 11)
    archive = archive_of(tmp_path)
    first = archive.read_bytes().splitlines(keepends=True)[0]
    with archive.open("ab") as appended:
        appended.write(first.replace(b'genuine answer about 1"', b'FORGED ANSWER"'))
    harness.respond(pending, "genuine answer about 12")
    ended = orchestrate("resume", "--workdir", tmp_path)
    assert ended.returncode == 0, ended.stderr
    (history,) = (tmp_path / ".orchestrator" / "runs").glob("*/state.json")
    assert b"FORGED" not in history.read_bytes()


def test_rewind_of_a_finished_run_refuses_a_forged_history(tmp_path: Path) -> None:
    harness, pending = paused_after(tmp_path, 11)
    harness.respond(pending, "genuine answer about 12")
    assert harness.resume().status == "completed"
    archive = archive_of(tmp_path)
    archive.write_bytes(archive.read_bytes().replace(b'genuine answer about 3"', b'FORGED"'))
    # The finished run's state holds every record whole: its history file is no longer read.
    rewound = orchestrate("rewind", "--workdir", tmp_path, "--to", "fact_02")
    assert rewound.returncode == 0, rewound.stderr
    assert b"FORGED" not in next(tmp_path.glob(".*-state.json")).read_bytes()


def test_a_missing_history_line_is_refused_naming_the_request(tmp_path: Path) -> None:
    harness, pending = paused_after(tmp_path, 11)
    archive = archive_of(tmp_path)
    lines = archive.read_bytes().splitlines(keepends=True)
    gone = json.loads(lines[1])["request_id"]
    archive.write_bytes(b"".join(lines[:1] + lines[2:]))
    harness.respond(pending, "genuine answer about 12")
    ended = orchestrate("resume", "--workdir", tmp_path)
    assert ended.returncode == 1, ended.stderr
    line = one_line(ended.stderr)
    assert gone in line and "missing in the run's history" in line, line


def test_replay_refuses_a_journal_changed_since_it_was_written(tmp_path: Path) -> None:
    harness, pending = paused_after(tmp_path, 11)
    harness.respond(pending, "genuine answer about 12")
    assert harness.resume().status == "completed"
    (run_dir,) = (tmp_path / ".orchestrator" / "runs").iterdir()
    clean = orchestrate("replay", REFERENCE, "--run", run_dir)
    assert clean.returncode == 0, clean.stderr
    journal = next(run_dir.rglob("journal.json"))
    data = json.loads(journal.read_bytes())
    data["entries"][0]["result"] = "FORGED"
    journal.write_text(json.dumps(data, sort_keys=True, indent=2))
    replayed = orchestrate("replay", REFERENCE, "--run", run_dir)
    assert replayed.returncode != 0
    line = one_line(replayed.stderr)
    assert str(journal) in line and "journal changed since it was written" in line, line
