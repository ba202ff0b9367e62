"""``orchestrate prune`` on a work directory: over a thousand finished runs it removes
exactly the runs it selects, each whole, with its entry in the checkpoint register; a
kill -9 at any point leaves every run whole or gone and the next prune finishes; the live
instance and its run are never touched; a dry run removes nothing."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from orchestrator._ports import PruneInput, RunListing
from orchestrator.adapters.prune_rule import select_runs
from support import prune_support as prune
from support.cli import child_env, command, orchestrate
from support.sweeps import chosen

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
NOW_TEXT = "2026-06-01T12:00:00Z"


def workdir_of(tmp: Path, name: str) -> Path:
    workdir = tmp / name
    workdir.mkdir()
    return workdir


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Three real ended runs: two completed, one cancelled (paused for its host, then
    cancelled)."""
    workdir = tmp_path_factory.mktemp("prune-sources")
    completed = prune.real_runs(workdir, 2)
    paused = orchestrate("run", prune.FLOW, "--workdir", workdir)
    assert paused.returncode == 42, paused.stderr
    cancelled = orchestrate("cancel", "--workdir", workdir)
    assert cancelled.returncode == 0, cancelled.stderr
    (cancelled_id,) = prune.kept_ids(workdir) - set(completed)
    runs = workdir / ".orchestrator" / "runs"
    return [runs / run_id for run_id in (*completed, cancelled_id)]


def with_live_instance(workdir: Path) -> str:
    """Start an instance that pauses for its host; its run id."""
    before = prune.kept_ids(workdir)
    paused = orchestrate("run", prune.FLOW, "--workdir", workdir)
    assert paused.returncode == 42, paused.stderr
    (live,) = prune.kept_ids(workdir) - before
    return live


def expected(
    made: dict[str, float],
    statuses: dict[str, str],
    *,
    older: timedelta,
    keep: int,
    wanted: set[str],
) -> set[str]:
    """What prune should remove, worked out here on its own: of the runs in ``wanted``
    statuses, all but the ``keep`` most recent, last changed before NOW - ``older``."""
    cutoff = (NOW - older).timestamp()
    candidates = sorted(
        (r for r in made if statuses[r] in wanted), key=lambda r: made[r], reverse=True
    )
    return {r for r in candidates[keep:] if made[r] < cutoff}


def prune_cli(workdir: Path, *args: str) -> dict[str, object]:
    done = orchestrate(
        "prune", "--workdir", workdir, "--json", *args, env={"ORCHESTRATOR_NOW": NOW_TEXT}
    )
    assert done.returncode == 0, done.stderr
    document: dict[str, object] = json.loads(done.stdout)
    return document


def test_prune_over_a_thousand_runs_removes_exactly_those_selected(
    sources: list[Path], tmp_path: Path
) -> None:
    workdir = workdir_of(tmp_path, "work")
    made = prune.clone_many(sources, workdir, 1000, now=NOW.timestamp())
    live = with_live_instance(workdir)
    statuses = prune.listing(workdir)
    assert len(statuses) == 1001 and statuses[live] == "paused"
    live_files = prune.tree_digests(workdir / ".orchestrator" / "runs" / live)
    goes = expected(made, statuses, older=timedelta(hours=300), keep=250, wanted={"completed"})
    assert 300 < len(goes) < 500 and {statuses[r] for r in goes} == {"completed"}
    old = {r for r in made if made[r] < (NOW - timedelta(hours=300)).timestamp()}
    assert {r for r in old - goes if statuses[r] == "completed"}  # kept by --keep-last
    args = ("--status", "completed", "--older-than", "300h", "--keep-last", "250")
    entries = {r: prune.register_entry_of(workdir, r) for r in made}
    assert all(entry.is_file() for entry in entries.values())

    before = prune.run_digests(workdir)
    dry = prune_cli(workdir, *args, "--dry-run")
    assert prune.run_digests(workdir) == before  # a dry run removes nothing
    assert {r["run_id"] for r in dry["runs"]} == goes  # type: ignore[attr-defined]

    done = prune_cli(workdir, *args)
    assert done["removed"] == len(goes) and done["kept"] == 0
    assert {r["run_id"] for r in done["runs"]} == goes  # type: ignore[attr-defined]
    assert prune.kept_ids(workdir) == (set(made) | {live}) - goes
    assert os.listdir(workdir / ".orchestrator" / "removing") == []
    after = prune.listing(workdir)  # every run left reads whole, its signature holding
    assert set(after) == (set(made) | {live}) - goes
    assert prune.run_digests(workdir) == {r: before[r] for r in before if r not in goes}
    assert prune.tree_digests(workdir / ".orchestrator" / "runs" / live) == live_files
    for run_id, entry in entries.items():
        assert entry.is_file() == (run_id not in goes), run_id

    kept = sorted(set(made) - goes)[0]
    shown = orchestrate("history", "--workdir", workdir, "--run", kept)
    assert shown.returncode == 0 and "phase 3 three: done" in shown.stdout, shown.stderr
    gone = orchestrate("history", "--workdir", workdir, "--run", sorted(goes)[0])
    assert gone.returncode == 2 and "no run" in gone.stderr
    status = orchestrate("status", "--workdir", workdir)
    assert status.returncode == 0 and "paused" in status.stdout, status.stderr


def test_keep_last_keeps_the_most_recent_of_each_workflow() -> None:
    def run(n: int, workflow: str, status: str = "completed") -> RunListing:
        return RunListing(
            run_id=f"{workflow}-{n}",
            workflow=workflow,
            status=status,
            updated_at=NOW - timedelta(days=n),
        )

    runs = [run(n, w) for n in range(1, 6) for w in ("a", "b")] + [run(9, "a", "paused")]
    chosen_runs = select_runs(runs, PruneInput(keep_last=2, keep=["b-5"]))
    assert [r.run_id for r in chosen_runs] == ["a-5", "a-4", "b-4", "a-3", "b-3"]  # oldest first
    older = select_runs(runs, PruneInput(older_than=NOW - timedelta(days=4), status=["paused"]))
    assert older == []  # a live status is never selected, whatever is asked
    aged = select_runs(runs, PruneInput(older_than=NOW - timedelta(days=4)))
    assert {r.run_id for r in aged} == {"a-5", "b-5"}


def test_prune_says_what_it_needs() -> None:
    nothing = orchestrate("prune")
    assert nothing.returncode == 2 and "--older-than" in nothing.stderr
    bad_age = orchestrate("prune", "--older-than", "30x")
    assert bad_age.returncode == 2 and "30d (days)" in bad_age.stderr
    live = orchestrate("prune", "--keep-last", "1", "--status", "paused")
    assert live.returncode == 2 and "'paused' is not a finished run's status" in live.stderr


# -- kill -9 --------------------------------------------------------------------------------

PRUNE_ARGS = ("--older-than", "10h", "--keep-last", "2")
RUNS_IN_SWEEP = 24


def sweep_workdir(sources: list[Path], where: Path) -> tuple[Path, str, dict[str, float]]:
    workdir = workdir_of(where, "work")
    made = prune.clone_many(sources, workdir, RUNS_IN_SWEEP, now=NOW.timestamp())
    return workdir, with_live_instance(workdir), made


def prune_process(workdir: Path, crash_at: int | str, log: Path) -> subprocess.Popen[bytes]:
    env = child_env(
        {
            "ORCHESTRATOR_NOW": NOW_TEXT,
            "ORCHESTRATOR_CRASH_AT": str(crash_at),
            "ORCHESTRATOR_CRASH_LOG": str(log),
        }
    )
    return subprocess.Popen(
        command("prune", "--workdir", workdir, *PRUNE_ARGS),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


@pytest.fixture(scope="module")
def crash_labels(sources: list[Path], tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    workdir, _, _ = sweep_workdir(sources, tmp_path_factory.mktemp("prune-count"))
    log = workdir.parent / "crash.log"
    process = prune_process(workdir, "count", log)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    return [line.split(" ", 1)[1] for line in log.read_text().splitlines()]


def whole_or_gone(workdir: Path, before: dict[str, dict[str, str]]) -> None:
    """Every run is as it was, file for file, or not under ``runs/`` at all; what is
    left reads whole."""
    now = prune.run_digests(workdir)
    assert set(now) <= set(before)
    for run_id, files in now.items():
        assert files == before[run_id], f"run {run_id} is not whole"
    assert set(prune.listing(workdir)) == set(now)


def test_the_sweep_kills_prune_at_the_points_of_each_kind(crash_labels: list[str]) -> None:
    kinds = " ".join(crash_labels)
    for needed in ("before moving run", "moved aside", "removed state.json", "register entry"):
        assert needed in kinds, needed


@pytest.mark.parametrize("case", range(6))
def test_kill_9_during_prune_leaves_every_run_whole_or_gone(
    case: int, sources: list[Path], crash_labels: list[str], tmp_path: Path
) -> None:
    """Each case kills at the first point of each kind (spread over the cases) and at
    random points; then a prune with nothing set finishes the work."""
    points = chosen("each-kind", crash_labels)
    picks = [p for i, p in enumerate(points) if i % 6 == case]
    picks += random.Random(case).sample(range(1, len(crash_labels) + 1), 2)
    for point in picks:
        where = tmp_path / f"at-{point}"
        where.mkdir()
        workdir, live, made = sweep_workdir(sources, where)
        before = prune.run_digests(workdir)
        entries = {r: prune.register_entry_of(workdir, r) for r in made}
        process = prune_process(workdir, point, where / "crash.log")
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == -signal.SIGKILL, (point, crash_labels[point - 1], stderr)
        whole_or_gone(workdir, before)
        assert live in prune.kept_ids(workdir)
        for run_id, entry in entries.items():  # an entry goes only with its run
            if run_id in prune.kept_ids(workdir):
                assert entry.is_file(), (point, run_id)
        done = prune_cli(workdir, *PRUNE_ARGS)
        goes = expected(
            made,
            {r: "completed" for r in made},
            older=timedelta(hours=10),
            keep=2,
            wanted={"completed"},
        )
        assert prune.kept_ids(workdir) == (set(made) | {live}) - goes, (point, done)
        assert os.listdir(workdir / ".orchestrator" / "removing") == []
        whole_or_gone(workdir, before)
        for run_id, entry in entries.items():
            assert entry.is_file() == (run_id not in goes), (point, run_id)


# -- power cuts -------------------------------------------------------------------------------


def test_a_power_cut_during_prune_leaves_every_run_whole_or_gone(
    sources: list[Path], tmp_path: Path
) -> None:
    """Every disk a power cut during a prune could leave (``support.powercut``) holds each
    run whole or not at all, and the next prune finishes."""
    from orchestrator.adapters.file_prune import prune_runs
    from support import powercut

    root = tmp_path / "work"
    root.mkdir()
    made = prune.clone_many(sources, root, 6, now=NOW.timestamp())
    live = with_live_instance(root)
    before = prune.run_digests(root)
    request = PruneInput(older_than=NOW - timedelta(hours=2), keep_last=1)
    goes = expected(
        made,
        dict.fromkeys(made, "completed"),
        older=timedelta(hours=2),
        keep=1,
        wanted={"completed"},
    )
    assert len(goes) == 4
    with powercut.recording(root) as rec:
        prune_runs(root, request)
    disks = powercut.explore(rec, seed=39, budget=120)
    assert len(disks) > 20
    for crash in disks:
        powercut.materialise(crash.disk, root)
        for run_id in prune.kept_ids(root) & set(made):  # a disk keeps no times: put them back
            os.utime(root / ".orchestrator" / "runs" / run_id / "state.json", (made[run_id],) * 2)
        with powercut.syncs_skipped():
            where = crash.describe(rec.log)
            now = prune.run_digests(root)
            assert all(now[r] == before[r] for r in now), where
            assert set(prune.listing(root)) == set(now), where
            prune_runs(root, request)
        assert prune.kept_ids(root) == (set(made) | {live}) - goes, where
        assert os.listdir(root / ".orchestrator" / "removing") == [], where


CHILDREN = Path(__file__).resolve().parents[1] / "support" / "child_runs_workflows.py"


def test_a_pruned_parent_takes_its_child_runs_places_and_a_live_ones_stay(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    parent = f"{CHILDREN}:AwaitsApproval"
    assert orchestrate("run", parent, "--workdir", work).returncode == 42
    assert orchestrate("signal", "approve", "--data", "1", "--workdir", work).returncode == 0
    assert orchestrate("resume", "--workdir", work).returncode == 0
    (ended,) = [p.name for p in (work / ".orchestrator" / "runs").iterdir()]
    # A second run of the parent, live and waiting for its own child.
    assert orchestrate("run", parent, "--workdir", work).returncode == 42
    places = work / ".orchestrator" / "children"
    names = [p.name for p in places.iterdir()]
    assert len(names) == 2 and f"{ended}.approval" in names
    done = orchestrate("prune", "--keep-last", "0", "--workdir", work)
    assert done.returncode == 0, done.stderr
    assert not (work / ".orchestrator" / "runs" / ended).exists()
    (left,) = [p.name for p in places.iterdir()]
    assert not left.startswith(ended)  # the live parent's child stays
    assert not list((work / ".orchestrator" / "removing").iterdir())
    # The live run goes on with its child as before.
    assert orchestrate("signal", "approve", "--data", "2", "--workdir", work).returncode == 0
    assert orchestrate("resume", "--workdir", work).returncode == 0
    output = orchestrate("output", "--workdir", work)
    assert json.loads(output.stdout) == {"spawn": {"wait": 2}}
