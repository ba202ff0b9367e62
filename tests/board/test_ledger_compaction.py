"""``orchestrate board compact``: the ledger folded into a verified snapshot line, the last
deltas kept after it, on a directory and in PostgreSQL. The board reads the same state,
``check ledger`` accepts the compacted ledger (and refuses a changed snapshot), deltas
appended later are judged against the folded ones (a duplicate is still a duplicate), a
reader that had read the old ledger reads the new one, and a kill -9 at any point of a
compaction leaves the old ledger or the new one, whole."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from test_ledger import AT, create, move

from orchestrator._errors import BoardError
from orchestrator._ports import ReadLedgerInput
from orchestrator.board.compaction import compact_ledger, is_snapshot_line
from orchestrator.board.file_store import FileBoardStore
from orchestrator.board.ledger import Ledger, LedgerState, fold_ledger
from orchestrator.formats.board_documents import TaskStatus
from orchestrator.formats.convert import unstructure
from support.board_store_support import OpenStore, board_pg_store, board_stores
from support.cli import child_env, command, orchestrate

__all__ = ["board_pg_store", "board_stores"]  # fixtures, used by name

TODO, IN_PROGRESS, BLOCKED = TaskStatus.TODO, TaskStatus.IN_PROGRESS, TaskStatus.BLOCKED


def board_of(ledger: Ledger) -> dict[str, Any]:
    """What the board reads: every row, the head, the locks held."""
    state = ledger.read()
    return {
        "seq": state.seq,
        "rows": {t: unstructure(r) for t, r in state.rows.items()},
        "locks": state.active_locks(),
    }


def busy_ledger(open_store: OpenStore, tasks: int = 12, rounds: int = 5) -> Ledger:
    """A ledger of ``tasks`` tasks moved back and forth, the last one left in progress
    (holding its lock)."""
    ledger = Ledger(open_store())
    with ledger.locked():
        ledger.append([create(f"T-{n}", scope=f"src/t{n}/") for n in range(tasks)], at=AT)
    for _ in range(rounds):
        for n in range(tasks):
            with ledger.locked() as state:
                row = state.rows[f"T-{n}"]
                status = BLOCKED if row.status is TODO else TODO
                ledger.append([move(f"T-{n}", status, row.version)], at=AT)
    with ledger.locked() as state:
        row = state.rows["T-0"]
        ledger.append([move("T-0", IN_PROGRESS, row.version)], at=AT)
    return ledger


def stored(open_store: OpenStore) -> bytes:
    return open_store().read_ledger(ReadLedgerInput(after=0)).data


def check_ledger(data: bytes) -> dict[str, Any]:
    done = orchestrate("check", "ledger", stdin=data)
    verdict: dict[str, Any] = json.loads(done.stdout)
    return verdict


def test_compact_keeps_the_board_and_check_ledger_accepts_it(board_stores: OpenStore) -> None:
    ledger = busy_ledger(board_stores)
    before = board_of(ledger)
    old = stored(board_stores)
    total = old.count(b"\n")
    assert before["seq"] == total and before["locks"]

    done = compact_ledger(board_stores(), keep=5, at=AT)
    assert (done.folded, done.kept, done.head and done.head.seq) == (total - 5, 5, total - 5)
    new = stored(board_stores)
    lines = new.splitlines(keepends=True)
    assert is_snapshot_line(lines[0]) and lines[1:] == old.splitlines(keepends=True)[-5:]
    assert len(new) < len(old)
    assert board_of(Ledger(board_stores())) == before  # a new reader
    assert board_of(ledger) == before  # a reader that had read the old ledger
    verdict = check_ledger(new)
    assert verdict["allow"] is True, verdict
    assert verdict["details"]["snapshot"]["deltas"] == total - 5
    assert f"after a snapshot of {total - 5} deltas" in verdict["reason"]

    # Later deltas are judged against the folded ones too: an old delta again is a
    # duplicate, its id with other content a forgery.
    folded_delta = create("T-1", scope="src/t1/")
    with ledger.locked():
        assert ledger.append([folded_delta], at=AT) == []
    with ledger.locked(), pytest.raises(BoardError) as forged:
        ledger.append([create("T-1", scope="elsewhere/")], at=AT)
    assert "already used for a different delta" in forged.value.reason
    with ledger.locked() as state:
        row = state.rows["T-3"]
        ledger.append([move("T-3", IN_PROGRESS, row.version)], at=AT)
    after = board_of(ledger)

    again = compact_ledger(board_stores(), keep=0, at=AT)  # the chain goes on
    assert again.head is not None and again.head.deltas == total + 1
    assert again.head.deltas_sha256 != (done.head.deltas_sha256 if done.head else "")
    assert stored(board_stores).count(b"\n") == 1
    assert board_of(Ledger(board_stores())) == after == board_of(ledger)
    assert check_ledger(stored(board_stores))["allow"] is True
    nothing = compact_ledger(board_stores(), keep=0, at=AT)
    assert nothing.folded == 0 and stored(board_stores).count(b"\n") == 1


def test_check_ledger_refuses_a_changed_or_misplaced_snapshot(tmp_path: Path) -> None:
    directory = tmp_path / ".board"
    directory.mkdir()
    busy_ledger(lambda: FileBoardStore(directory), tasks=3, rounds=2)
    compact_ledger(FileBoardStore(directory), keep=2, at=AT)
    data = (directory / "ledger.ndjson").read_bytes()
    first, rest = data.split(b"\n", 1)
    changed = first.replace(b'"status":"blocked"', b'"status":"done"', 1) + b"\n" + rest
    assert changed != data
    verdict = check_ledger(changed)
    assert verdict["allow"] is False and verdict["code"] == "LEDGER_INCONSISTENT"
    assert "sha256 does not match" in verdict["reason"]
    misplaced = rest + first + b"\n"
    verdict = check_ledger(misplaced)
    assert verdict["allow"] is False and verdict["code"] == "LEDGER_INCONSISTENT"
    # the same fold the board makes refuses both
    for bad in (changed, misplaced):
        with pytest.raises(BoardError):
            fold_ledger(LedgerState(), bad, source="ledger")


def test_the_cli_compacts_and_the_board_commands_read_the_compacted_ledger(
    tmp_path: Path,
) -> None:
    directory = tmp_path / ".board"
    made = orchestrate("board", "init", "--board", directory, "--objective", "compact it")
    assert made.returncode == 0, made.stderr
    busy_ledger(lambda: FileBoardStore(directory))
    status = orchestrate("board", "status", "--board", directory, "--json")
    assert status.returncode == 0, status.stderr
    done = orchestrate("board", "compact", "--board", directory, "--keep", "3", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["kept"] == 3
    after = orchestrate("board", "status", "--board", directory, "--json")
    assert json.loads(after.stdout) == json.loads(status.stdout)
    checked = orchestrate("check", "ledger", "--board", directory)
    assert checked.returncode == 0 and json.loads(checked.stdout)["allow"] is True
    table = orchestrate("board", "ledger", "--board", directory, "--table")
    assert table.returncode == 0, table.stderr
    assert "(snapshot of" in table.stdout.splitlines()[0]
    assert len(table.stdout.splitlines()) == 4


# -- kill -9 ----------------------------------------------------------------------------------


def compact_process(args: list[object], crash_at: int | str, log: Path) -> int:
    env = child_env({"ORCHESTRATOR_CRASH_AT": str(crash_at), "ORCHESTRATOR_CRASH_LOG": str(log)})
    done = subprocess.run(
        command("board", "compact", *args, "--keep", "3"),
        env=env,
        capture_output=True,
        timeout=120,
    )
    return done.returncode


def test_kill_9_during_compact_leaves_the_old_ledger_or_the_new_one(tmp_path: Path) -> None:
    template = tmp_path / "template"
    template.mkdir()
    busy_ledger(lambda: FileBoardStore(template))
    old = (template / "ledger.ndjson").read_bytes()
    reference = board_of(Ledger(FileBoardStore(template)))
    counted = tmp_path / "counted"
    shutil.copytree(template, counted)
    assert compact_process(["--board", counted], "count", tmp_path / "count.log") == 0
    labels = (tmp_path / "count.log").read_text().splitlines()
    assert any("before-rename ledger.ndjson" in label for label in labels), labels
    for point in range(1, len(labels) + 1):
        directory = tmp_path / f"at-{point}"
        shutil.copytree(template, directory)
        killed = compact_process(["--board", directory], point, tmp_path / "kill.log")
        assert killed == -signal.SIGKILL, labels[point - 1]
        data = (directory / "ledger.ndjson").read_bytes()
        assert data == old or is_snapshot_line(data), labels[point - 1]
        checked = orchestrate("check", "ledger", "--board", directory)
        assert json.loads(checked.stdout)["allow"] is True, (labels[point - 1], checked.stdout)
        assert board_of(Ledger(FileBoardStore(directory))) == reference, labels[point - 1]
        assert compact_process(["--board", directory], 0, tmp_path / "none.log") == 0
        assert board_of(Ledger(FileBoardStore(directory))) == reference


def test_kill_9_during_compact_in_postgresql_leaves_the_old_ledger_or_the_new_one(
    board_pg_store: OpenStore, pg_dsn: str, tmp_path: Path
) -> None:
    busy_ledger(board_pg_store)
    old = stored(board_pg_store)
    reference = board_of(Ledger(board_pg_store()))
    board_id = board_pg_store().board_id  # type: ignore[attr-defined]
    args: list[object] = ["--store", pg_dsn, "--board", board_id]
    for point in (1, 2):  # folded, not replaced; replaced, not committed
        assert compact_process(args, point, tmp_path / "kill.log") == -signal.SIGKILL
        assert stored(board_pg_store) == old
        assert board_of(Ledger(board_pg_store())) == reference
    assert compact_process(args, 0, tmp_path / "none.log") == 0
    assert is_snapshot_line(stored(board_pg_store))
    assert board_of(Ledger(board_pg_store())) == reference
    checked = orchestrate("check", "ledger", *args)
    assert json.loads(checked.stdout)["allow"] is True, checked.stdout


def test_a_power_cut_during_compact_leaves_the_old_ledger_or_the_new_one(tmp_path: Path) -> None:
    """Every disk a power cut during a compaction could leave (``support.powercut``) holds
    the old ledger or the new one, whole: the board reads the same, ``check ledger``
    accepts it, and compacting again goes on from it."""
    from orchestrator.cli.check import _check_ledger
    from support import powercut

    root = tmp_path / "root"
    directory = root / ".board"
    directory.mkdir(parents=True)
    busy_ledger(lambda: FileBoardStore(directory), tasks=6, rounds=2)
    Ledger(FileBoardStore(directory), snapshot_every=5)  # a snapshot file too
    reference = board_of(Ledger(FileBoardStore(directory)))
    old = (directory / "ledger.ndjson").read_bytes()
    with powercut.recording(root) as rec:
        compact_ledger(FileBoardStore(directory), keep=3, at=AT)
    new = (directory / "ledger.ndjson").read_bytes()
    disks = powercut.explore(rec, seed=39, budget=80)
    assert disks
    seen = set()
    for crash in disks:
        powercut.materialise(crash.disk, root)
        where = crash.describe(rec.log)
        with powercut.syncs_skipped():
            data = (directory / "ledger.ndjson").read_bytes()
            assert data in (old, new), where
            seen.add(data == new)
            assert _check_ledger(data)["allow"] is True, where
            assert board_of(Ledger(FileBoardStore(directory))) == reference, where
            compact_ledger(FileBoardStore(directory), keep=3, at=AT)
            assert board_of(Ledger(FileBoardStore(directory))) == reference, where
    assert seen == {False, True}  # cuts before and after the rename were both tried
