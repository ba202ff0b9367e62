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

import pytest

from support.cli import orchestrate
from support.sweeps import SWEEPS, chosen

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


# -- kill -9 at every durable write of the step from one run to the next ----------------------

EXPECTED_HEARD = ["round 1", "round 2", "round 3"]


def live_round(work: Path) -> int | None:
    """The round of the live run (its inputs say it), or ``None`` when none is live."""
    if not (work / STATE).exists():
        return None
    return int(record_of(work / STATE)["inputs"].get("round", 1))


def host_until_done(work: Path) -> None:
    """What a host does with the work directory, whatever a crash left: start the run if
    nothing of it is there, answer the live run's ask with its round, resume, until the
    lineage completes."""
    for _ in range(16):
        round_no = live_round(work)
        if round_no is None and not ended_runs(work):
            done = orchestrate("run", ROUNDS, "--input", "rounds=3", "--workdir", work)
        else:
            if round_no is not None:
                answered = orchestrate("respond", "--workdir", work, "--text", f"round {round_no}")
                # 2: answered before the kill, or the live run asks nothing (it went on)
                assert answered.returncode in (0, 2), answered.stderr
            done = orchestrate("resume", "--workdir", work)
        if done.returncode == 0 and not (work / STATE).exists():
            return
        assert done.returncode == 42, done.stderr
    raise AssertionError(f"{work}: the lineage did not complete")


def lineage_crash_labels(tmp_path: Path) -> list[list[str]]:
    """The crash points of ``run`` and of the two ``resume``s that each end a run and
    start the next, in order."""
    work = tmp_path / "count"
    work.mkdir()
    logs = [tmp_path / f"{name}.points" for name in ("run", "resume-1", "resume-2")]

    def counted(log: Path) -> dict[str, str]:
        return {"ORCHESTRATOR_CRASH_AT": "count", "ORCHESTRATOR_CRASH_LOG": str(log)}

    ran = orchestrate("run", ROUNDS, "--input", "rounds=3", "--workdir", work, env=counted(logs[0]))
    assert ran.returncode == 42, ran.stderr
    for round_no, log in ((1, logs[1]), (2, logs[2])):
        orchestrate("respond", "--workdir", work, "--text", f"round {round_no}", check=True)
        resumed = orchestrate("resume", "--workdir", work, env=counted(log))
        assert resumed.returncode == 42, resumed.stderr
    return [[line.partition(" ")[2] for line in log.read_text().splitlines()] for log in logs]


def between_the_runs(labels: list[str]) -> list[int]:
    """The points from the old run's history write to the new run's first state in
    place: the window a crash there must not lose the lineage in."""
    start = labels.index("before-write state.json") + 1
    placed = next(
        i for i, label in enumerate(labels, 1) if i > start and label == f"after-rename {STATE}"
    )
    return list(range(start, placed + 1))


@pytest.mark.slow
@pytest.mark.parametrize("sweep", SWEEPS)
def test_kill_9_at_every_durable_write_of_the_continue_cycle_loses_no_run(
    tmp_path: Path, sweep: str
) -> None:
    labels = lineage_crash_labels(tmp_path)
    cases = [("run", 0, p) for p in chosen(sweep, labels[0])]
    for answered, resume_labels in ((1, labels[1]), (2, labels[2])):
        window = between_the_runs(resume_labels)
        assert len(window) >= 4, resume_labels
        cases += [("resume", answered, p) for p in chosen(sweep, resume_labels, also=window)]
    for command_name, answered, point in cases:
        case = (command_name, answered, point)
        work = tmp_path / f"{command_name}-{answered}-{point}"
        work.mkdir()
        if command_name == "resume":  # the lineage brought to the resume that is killed
            ran = orchestrate("run", ROUNDS, "--input", "rounds=3", "--workdir", work)
            assert ran.returncode == 42, ran.stderr
            for round_no in range(1, answered + 1):
                orchestrate("respond", "--workdir", work, "--text", f"round {round_no}", check=True)
                if round_no < answered:
                    went_on = orchestrate("resume", "--workdir", work)
                    assert went_on.returncode == 42, went_on.stderr
            killed = orchestrate(
                "resume", "--workdir", work, env={"ORCHESTRATOR_CRASH_AT": str(point)}
            )
        else:
            killed = orchestrate(
                "run", ROUNDS, "--input", "rounds=3", "--workdir", work,
                env={"ORCHESTRATOR_CRASH_AT": str(point)},
            )  # fmt: skip
        assert killed.returncode == -9, (case, killed.stderr)
        host_until_done(work)

        ended = ended_runs(work)
        # each run of the lineage exists once: three kept runs, and no other run's files
        assert len(ended) == 3, (case, sorted(ended))
        assert sorted(p.name for p in (work / ".orchestrator" / "runs").iterdir()) == sorted(
            ended
        ), case
        (first,) = [r for r in ended.values() if "previous_run_id" not in r]
        chain = [first["run_id"]]
        while "continued_as" in ended[chain[-1]]:
            chain.append(ended[chain[-1]]["continued_as"])
        assert len(chain) == 3 and set(chain) == set(ended), (case, chain)
        for earlier, later in itertools.pairwise(chain):
            assert ended[later]["previous_run_id"] == earlier, case
            assert ended[later]["lineage_run_id"] == chain[0], case
            assert ended[earlier]["continued_inputs"] == ended[later]["inputs"], case
            assert ended[earlier]["status"] == "completed", case
        assert [ended[r]["inputs"].get("round", 1) for r in chain] == [1, 2, 3], case
        last = json.loads((work / ".orchestrator" / "runs" / chain[-1] / "state.json").read_text())
        assert last["phase_data"]["loop"] == {"heard": EXPECTED_HEARD}, case


def test_on_postgresql_a_worker_killed_between_the_runs_leaves_the_old_one_live(
    pg_fresh_dsn: str, tmp_path: Path
) -> None:
    """On PostgreSQL the old run's end and the new run's first row are one transaction: a
    worker killed before it commits leaves the old run live, and the next worker goes on
    into the same new run, once."""
    dsn = pg_fresh_dsn

    def pending() -> list[dict[str, Any]]:
        listed = orchestrate("pending", "--store", dsn, "--json")
        assert listed.returncode == 0, listed.stderr
        found: list[dict[str, Any]] = json.loads(listed.stdout)
        return found

    def answer(text: str) -> str:
        (item,) = pending()
        answered = orchestrate("respond", "--store", dsn, "--run", item["run_id"], "--text", text)
        assert answered.returncode == 0, answered.stderr
        return str(item["run_id"])

    def work(**env: str) -> int:
        worked = orchestrate("worker", "--store", dsn, "--until-idle", env=env)
        assert worked.returncode in (0, -9), worked.stderr
        return worked.returncode

    def start(name: str) -> str:
        folder = tmp_path / name
        folder.mkdir()
        queued = orchestrate(
            "run", ROUNDS, "--input", "rounds=2", "--workdir", folder, "--store", dsn, "--queue"
        )
        assert queued.returncode == 0, queued.stderr
        assert work() == 0
        return queued.stdout.strip()

    # the points of the worker that ends the first run and starts the second
    log = tmp_path / "worker.points"
    start("counted")
    answer("round one")
    assert work(ORCHESTRATOR_CRASH_AT="count", ORCHESTRATOR_CRASH_LOG=str(log)) == 0
    answer("round two")
    assert work() == 0 and pending() == []
    labels = [line.partition(" ")[2] for line in log.read_text().splitlines()]
    point = next(i for i, label in enumerate(labels, 1) if label.startswith("before-commit finish"))

    first = start("killed")
    assert answer("round one") == first
    assert work(ORCHESTRATOR_CRASH_AT=str(point)) == -9
    status = orchestrate("status", "--store", dsn, "--run", first)
    assert status.returncode == 0, status.stderr
    # its end was saved, not committed with the new run: it is still live, to go on from
    assert f"(run {first})" in status.stdout, status.stdout
    (named,) = [line for line in status.stdout.splitlines() if "went on as" in line]
    second = named.rsplit(" ", 1)[1]
    assert orchestrate("status", "--store", dsn, "--run", second).returncode != 0
    assert work() == 0
    (item,) = pending()
    assert item["run_id"] == second  # the run it named, started once
    went_on = orchestrate("status", "--store", dsn, "--run", first)
    assert "status     completed" in went_on.stdout
    assert f"lineage    went on as {second}" in went_on.stdout
    assert answer("round two") == second
    assert work() == 0 and pending() == []
    output = orchestrate("output", "--store", dsn, "--run", second)
    assert output.returncode == 0, output.stderr
    assert json.loads(output.stdout)["loop"] == {"heard": ["round one", "round two"]}
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        counted = conn.execute("select count(*) from runs").fetchone()
    assert counted is not None and counted[0] == 4  # two lineages of two runs each: none twice
