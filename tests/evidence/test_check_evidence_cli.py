"""``orchestrate check evidence --run DIR``: a run's evidence judged as a whole, in one
line of JSON, as the board's documents are judged: its events (the step evidence format,
numbered one after another from ``run.start``), the results file of every output
directory an event names, and every journal the finished run's state vouches for."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from support.cli import orchestrate
from support.evidence_support import run_dir_of

FIXTURE = Path(__file__).parents[1] / "fixtures" / "archive" / "many_asks.py"
HANDLER = (
    f'{sys.executable} -c "import json, sys; r = json.load(sys.stdin); '
    "print('fact about ' + r['prompt'].split()[-1])\""
)


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    workdir = tmp_path_factory.mktemp("evidence")
    driven = orchestrate("drive", f"{FIXTURE}:ManyAsks", "--workdir", workdir, "--handler", HANDLER)
    assert driven.returncode == 0, driven.stderr
    return run_dir_of(workdir)


def checked(run_dir: Path) -> tuple[int, dict[str, Any]]:
    result = orchestrate("check", "evidence", "--run", run_dir)
    assert "Traceback" not in result.stderr, result.stderr
    assert len(result.stdout.splitlines()) == 1, result.stdout
    return result.returncode, json.loads(result.stdout)


def test_a_finished_runs_evidence_is_whole(finished: Path) -> None:
    code, verdict = checked(finished)
    assert code == 0 and verdict["allow"] is True, verdict
    assert verdict["details"] == {"events": verdict["details"]["events"], "results": 24,
                                  "journals": 12}  # fmt: skip
    assert verdict["details"]["events"] > 40


def copy_of(run_dir: Path, target: Path) -> Path:
    import shutil

    shutil.copytree(run_dir, target)
    return target


def test_an_event_line_out_of_order_is_refused_naming_the_line(
    finished: Path, tmp_path: Path
) -> None:
    run_dir = copy_of(finished, tmp_path / "run")
    log = run_dir / "events.ndjson"
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join([lines[0], lines[2], lines[1], *lines[3:]]))
    code, verdict = checked(run_dir)
    assert code == 1 and verdict["allow"] is False
    assert f"{log} line 2" in verdict["reason"] and "x_seq is 3, not 2" in verdict["reason"]


def test_a_results_file_that_breaks_the_format_is_refused(finished: Path, tmp_path: Path) -> None:
    run_dir = copy_of(finished, tmp_path / "run")
    results = next((run_dir / "phases").glob("*/results.json"))
    data = json.loads(results.read_bytes())
    data["status"] = "splendid"
    results.write_text(json.dumps(data))
    code, verdict = checked(run_dir)
    assert code == 1 and str(results) in verdict["reason"], verdict


def test_a_journal_changed_since_the_run_ended_is_refused(finished: Path, tmp_path: Path) -> None:
    run_dir = copy_of(finished, tmp_path / "run")
    journal = next((run_dir / "phases").glob("*/journal.json"))
    journal.write_bytes(journal.read_bytes().replace(b'"ask"', b'"step"', 1))
    code, verdict = checked(run_dir)
    assert code == 1 and str(journal) in verdict["reason"] and "digest" in verdict["reason"]


def test_evidence_needs_a_run_and_a_run_needs_evidence() -> None:
    result = orchestrate("check", "evidence")
    assert result.returncode == 2 and "needs --run DIR" in result.stderr
