"""``ctx.continue_as_new`` with real ``orchestrate`` processes on a work directory's
files: a loop of three rounds is three runs of one lineage, each linked to the next; the
state file is the running run's, the ended ones sit in ``.orchestrator/runs/<id>/``;
``run``, ``resume`` and ``drive`` go straight on into the new run; ``status`` and
``history`` name the lineage, and each ended run replays clean."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Any

from support.cli import orchestrate

SUPPORT = Path(__file__).resolve().parents[1] / "support" / "lineage_workflows.py"
ROUNDS = f"{SUPPORT}:Rounds"
STATE = ".lineage-rounds-state.json"


def record_of(path: Path) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))["phase_data"][
        "x_orchestrator"
    ]
    return record


def ended_runs(workdir: Path) -> dict[str, dict[str, Any]]:
    runs = workdir / ".orchestrator" / "runs"
    return {p.parent.name: record_of(p) for p in runs.glob("*/state.json")}


def test_resume_goes_on_into_each_new_run_of_the_lineage(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    ran = orchestrate("run", ROUNDS, "--input", "rounds=3", "--workdir", work)
    assert ran.returncode == 42, ran.stderr
    first = record_of(work / STATE)
    assert first["inputs"] == {"rounds": "3"}
    assert "previous_run_id" not in first and "lineage_run_id" not in first

    seen = [first["run_id"]]
    for said in ("one", "two"):
        answered = orchestrate("respond", "--workdir", work, "--text", f"round {said}")
        assert answered.returncode == 0, answered.stderr
        resumed = orchestrate("resume", "--workdir", work)
        # the round ended its run, and the same process went on into the next, which asks
        assert resumed.returncode == 42, resumed.stderr
        live = record_of(work / STATE)
        assert live["run_id"] not in seen
        assert live["previous_run_id"] == seen[-1]
        assert live["lineage_run_id"] == seen[0]
        seen.append(live["run_id"])
        status = orchestrate("status", "--workdir", work)
        assert f"lineage    goes on from {seen[-2]}" in status.stdout
        assert f"lineage    first run {seen[0]}" in status.stdout

    answered = orchestrate("respond", "--workdir", work, "--text", "round three")
    assert answered.returncode == 0, answered.stderr
    done = orchestrate("resume", "--workdir", work)
    assert done.returncode == 0, done.stderr
    assert not (work / STATE).exists()

    ended = ended_runs(work)
    assert sorted(ended) == sorted(seen)
    for earlier, later in itertools.pairwise(seen):
        assert ended[earlier]["continued_as"] == later
        assert ended[earlier]["status"] == "completed"
        assert ended[later]["previous_run_id"] == earlier
    assert "continued_as" not in ended[seen[-1]]
    last = json.loads((work / ".orchestrator" / "runs" / seen[-1] / "state.json").read_text())
    assert last["phase_data"]["loop"] == {"heard": ["round one", "round two", "round three"]}
    # each run's history is its own round: one answered ask
    for run_id in seen:
        kept = json.loads((work / ".orchestrator" / "runs" / run_id / "state.json").read_text())
        assert len(kept["agent_requests"]) == 1

    history = orchestrate("history", "--workdir", work)
    assert history.returncode == 0, history.stderr
    assert f"goes on from run {seen[1]}" in history.stdout
    for run_id in seen:  # the old runs replay clean: continue_as_new is their end
        replayed = orchestrate("replay", "--run", work / ".orchestrator" / "runs" / run_id, ROUNDS)
        assert replayed.returncode == 0, replayed.stderr
        assert "replays clean" in replayed.stderr


def test_drive_goes_on_through_the_lineage_to_its_end(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    handler = f"{sys.executable} -c \"import sys; sys.stdin.read(); print('heard')\""
    driven = orchestrate(
        "drive", ROUNDS, "--input", "rounds=4", "--workdir", work, "--handler", handler
    )
    assert driven.returncode == 0, driven.stderr
    ended = ended_runs(work)
    assert len(ended) == 4
    (last,) = [r for r in ended.values() if "continued_as" not in r]
    assert last["inputs"]["round"] == 4
    firsts = {r.get("lineage_run_id", r["run_id"]) for r in ended.values()}
    assert len(firsts) == 1  # one lineage
    (start,) = firsts
    chain, run_id = [start], start
    while "continued_as" in ended[run_id]:
        run_id = ended[run_id]["continued_as"]
        chain.append(run_id)
    assert chain[-1] == last["run_id"] and len(chain) == 4


def test_on_postgresql_a_worker_goes_on_into_the_new_run_row(
    pg_fresh_dsn: str, tmp_path: Path
) -> None:
    dsn, work = pg_fresh_dsn, tmp_path / "work"
    work.mkdir()
    queued = orchestrate(
        "run", ROUNDS, "--input", "rounds=2", "--workdir", work, "--store", dsn, "--queue"
    )
    assert queued.returncode == 0, queued.stderr
    first = queued.stdout.strip()

    def pending() -> list[dict[str, Any]]:
        listed = orchestrate("pending", "--store", dsn, "--json")
        assert listed.returncode == 0, listed.stderr
        found: list[dict[str, Any]] = json.loads(listed.stdout)
        return found

    def answer_and_work(text: str) -> str:
        (item,) = pending()
        answered = orchestrate("respond", "--store", dsn, "--run", item["run_id"], "--text", text)
        assert answered.returncode == 0, answered.stderr
        worked = orchestrate("worker", "--store", dsn, "--until-idle")
        assert worked.returncode == 0, worked.stderr
        return str(item["run_id"])

    assert orchestrate("worker", "--store", dsn, "--until-idle").returncode == 0
    assert answer_and_work("round one") == first
    # the worker that went on with the first run went on into the second: it asks
    (item,) = pending()
    second = item["run_id"]
    assert second != first
    status = orchestrate("status", "--store", dsn, "--run", first)
    assert f"lineage    went on as {second}" in status.stdout, status.stderr
    status = orchestrate("status", "--store", dsn, "--run", second)
    assert f"lineage    goes on from {first}" in status.stdout, status.stderr
    assert f"lineage    first run {first}" in status.stdout

    assert answer_and_work("round two") == second
    assert pending() == []
    output = orchestrate("output", "--store", dsn, "--run", second)
    assert output.returncode == 0, output.stderr
    assert json.loads(output.stdout)["loop"] == {"heard": ["round one", "round two"]}
    ended = orchestrate("status", "--store", dsn, "--run", first)
    assert "status     completed" in ended.stdout
