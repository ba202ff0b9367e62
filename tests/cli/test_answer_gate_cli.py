"""The answer gate as a host meets it: ``respond`` refuses a wrong answer at the door and
writes nothing; a wrong response file is set aside and asked again, never the end of the
run; of answers racing for one request, the first wins, on files and on PostgreSQL."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from support.cli import child_env, command, orchestrate

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "answer_gate" / "typed.py"
WORKFLOW = f"{FIXTURE}:Triage"
GOOD = {"severity": "high", "summary": "division by zero in the parser"}


def start(workdir: Path, *store: str) -> dict[str, Any]:
    """A run paused on its typed ask: its one pending request."""
    started = orchestrate(
        "run", WORKFLOW, "--workdir", workdir, "--output", workdir / "out", *store
    )
    assert started.returncode == 42, started.stderr
    return pending(workdir, *store)[0]


def pending(workdir: Path, *store: str) -> list[dict[str, Any]]:
    where = store or ("--workdir", str(workdir))
    listed = orchestrate("pending", *where, "--json")
    assert listed.returncode == 0, listed.stderr
    return [item["request"] for item in json.loads(listed.stdout)]


def answers_written(workdir: Path) -> list[Path]:
    return [workdir / ".agent-response.json", *workdir.glob(".agent-responses/*.json")]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("answer", "field", "expected", "got"),
    [
        ("high: division by zero", "response", "a JSON document", "not JSON"),
        (json.dumps({"severity": "high"}), "response.summary", "a required field", "missing"),
        (
            json.dumps({**GOOD, "sevrity": "low"}),
            "response.sevrity",
            "no such field",
            '"sevrity"',
        ),
        (json.dumps({**GOOD, "severity": 3}), "response.severity", "a string", "a number 3"),
    ],
    ids=["plain-text", "missing-field", "extra-field", "wrong-type"],
)
def test_respond_refuses_a_wrong_answer_in_one_line_and_writes_nothing(
    tmp_path: Path, answer: str, field: str, expected: str, got: str
) -> None:
    request = start(tmp_path)
    refused = orchestrate("respond", "--workdir", tmp_path, "--text", answer)
    assert refused.returncode == 2, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert f"{field}: expected" in lines[0] and expected in lines[0] and got in lines[0]
    assert request["request_id"] in lines[0]
    assert not [p for p in answers_written(tmp_path) if p.exists()]
    as_json = orchestrate("respond", "--workdir", tmp_path, "--text", answer, "--json")
    assert as_json.returncode == 2
    document = json.loads(as_json.stdout)
    assert document["reason"] == "shape" and document["refusal"]["field"] == field
    assert document["answer_schema"]["required"] == ["severity", "summary"]
    # The right answer still goes in, and the run completes with it.
    assert orchestrate("respond", "--workdir", tmp_path, "--text", json.dumps(GOOD)).returncode == 0
    resumed = orchestrate("resume", "--workdir", tmp_path)
    assert resumed.returncode == 0, resumed.stderr


def test_a_wrong_response_file_is_set_aside_and_asked_again(tmp_path: Path) -> None:
    request = start(tmp_path)
    document = {
        "request_id": request["request_id"],
        "status": "success",
        "created_at": "2026-11-29T10:00:00Z",
        "response": json.dumps({"severity": "high"}),
    }
    (tmp_path / ".agent-response.json").write_text(json.dumps(document))
    resumed = orchestrate("resume", "--workdir", tmp_path)
    assert resumed.returncode == 42, resumed.stderr
    assert "was refused" in resumed.stderr and "response.summary" in resumed.stderr
    status = json.loads(orchestrate("status", "--workdir", tmp_path, "--json").stdout)
    assert status["status"] == "paused"
    rejected = tmp_path / ".agent-responses" / "rejected"
    kept = sorted(rejected.glob("*.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text()) == document
    reason = kept[0].with_name(kept[0].stem + ".reason.txt").read_text()
    assert "response.summary" in reason
    again = pending(tmp_path)
    assert len(again) == 1 and again[0]["request_id"] != request["request_id"]
    previous = again[0]["context"]["x_previous_error"]
    assert previous["field"] == "response.summary" and previous["error_type"] == "VALIDATION_ERROR"
    assert again[0]["retry_count"] == 1
    # Answered right, the run completes; the refused file is still kept.
    assert orchestrate("respond", "--workdir", tmp_path, "--text", json.dumps(GOOD)).returncode == 0
    assert orchestrate("resume", "--workdir", tmp_path).returncode == 0
    output = orchestrate("output", "--workdir", tmp_path, "--json")
    assert json.loads(output.stdout)["triage"] == GOOD
    assert sorted(rejected.glob("*.json")) == kept


def race(where: list[str], count: int) -> list[tuple[int, str, str]]:
    """``count`` ``respond`` processes for the one pending request, all started at once:
    (exit code, the answer's summary, stderr) of each."""
    procs = []
    for n in range(count):
        answer = json.dumps({"severity": "high", "summary": f"answer number {n}"})
        procs.append(
            (
                subprocess.Popen(
                    command("respond", *where, "--text", answer),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=child_env(),
                ),
                f"answer number {n}",
            )
        )
    done = []
    for proc, summary in procs:
        _, err = proc.communicate(timeout=180)
        done.append((proc.returncode, summary, err.decode()))
    return done


def check_race(done: list[tuple[int, str, str]]) -> str:
    winners = [summary for code, summary, _ in done if code == 0]
    assert len(winners) == 1, [(c, e) for c, _, e in done]
    for code, _, err in done:
        if code != 0:
            assert code == 2 and "has an answer already" in err and "first answer wins" in err, err
    return winners[0]


def test_twenty_racing_answers_on_files_one_wins(tmp_path: Path) -> None:
    start(tmp_path)
    winner = check_race(race(["--workdir", str(tmp_path)], 20))
    resumed = orchestrate("resume", "--workdir", tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    output = orchestrate("output", "--workdir", tmp_path, "--json")
    assert winner in output.stdout, output.stdout


@pytest.mark.slow
def test_twenty_racing_answers_on_postgresql_one_wins(pg_dsn: str, tmp_path: Path) -> None:
    started = orchestrate(
        "run", WORKFLOW, "--workdir", tmp_path, "--output", tmp_path / "out", "--store", pg_dsn
    )
    assert started.returncode == 42, started.stderr
    run_id = started.stdout.strip().splitlines()[-1]
    winner = check_race(race(["--store", pg_dsn, "--run", run_id], 20))
    resumed = orchestrate("resume", "--store", pg_dsn, "--run", run_id)
    assert resumed.returncode == 0, resumed.stderr
    output = orchestrate("output", "--store", pg_dsn, "--run", run_id, "--json")
    assert winner in output.stdout, output.stdout


def test_a_corrected_file_for_the_refused_request_is_taken(tmp_path: Path) -> None:
    """A person who fixes their file and keeps its request_id (the refused request's, not
    the new one's) is not refused again: the corrected answer is taken and the request
    asked again is withdrawn; a still-wrong one is set aside too."""
    request = start(tmp_path)

    def write(answer: dict[str, str]) -> None:
        document = {
            "request_id": request["request_id"],
            "status": "success",
            "created_at": "2026-11-29T10:00:00Z",
            "response": json.dumps(answer),
        }
        (tmp_path / ".agent-response.json").write_text(json.dumps(document))

    write({"severity": "high"})
    assert orchestrate("resume", "--workdir", tmp_path).returncode == 42
    write({"severity": "high", "sumary": "typo again"})
    again = orchestrate("resume", "--workdir", tmp_path)
    assert again.returncode == 42 and "response.summary" in again.stderr, again.stderr
    assert len(list((tmp_path / ".agent-responses" / "rejected").glob("*.json"))) == 2
    write(GOOD)
    done = orchestrate("resume", "--workdir", tmp_path)
    assert done.returncode == 0, done.stderr
    output = orchestrate("output", "--workdir", tmp_path, "--json")
    assert json.loads(output.stdout)["triage"] == GOOD
