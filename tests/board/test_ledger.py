"""The file ledger (``orchestrator.board.ledger.Ledger``): appends, torn lines, crashes,
snapshots, a long ledger, D5 between writers, and edited files."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
from jsonschema import Draft7Validator, FormatChecker

from orchestrator._errors import BoardError
from orchestrator.board.ledger import LEDGER_FILE, SNAPSHOT_FILE, Ledger, LedgerState, encode_delta
from orchestrator.formats.board_documents import LedgerDelta, Task, TaskStatus, TaskType
from orchestrator.formats.board_rules import board_schema, parse_ledger_delta

AT = "2025-11-18T10:30:00.000Z"
WRITER = Path(__file__).parents[1] / "fixtures" / "board" / "ledger_writer.py"
DELTA_SCHEMA = Draft7Validator(board_schema("ledger-delta"), format_checker=FormatChecker())


def make_task(task_id: str, *, dependencies: tuple[str, ...] = (), scope: str = "") -> Task:
    return Task(
        task_id=task_id,
        title=f"task {task_id}",
        type=TaskType.PARALLELIZABLE,
        dependencies=list(dependencies),
        lock_scope=[scope or f"src/{task_id}.py"],
        forbidden_scope=[],
        acceptance_criteria=["it works"],
        worklog_path=f"worklogs/{task_id}.jsonl",
        timeout_seconds=600,
        heartbeat_interval_seconds=60,
    )


def create(task_id: str, **task: object) -> LedgerDelta:
    return LedgerDelta(
        task_id=task_id,
        status=TaskStatus.TODO,
        owner="",
        reason=f"create {task_id}",
        delta_id=f"{task_id}/create",
        x_base_version=0,
        x_create=make_task(task_id, **task),  # type: ignore[arg-type]
    )


def move(
    task_id: str,
    status: TaskStatus,
    base: int | None,
    *,
    delta_id: str = "",
    owner: str = "agent",
    reason: str = "",
) -> LedgerDelta:
    return LedgerDelta(
        task_id=task_id,
        status=status,
        owner=owner,
        reason=reason or f"{task_id} to {status.value}",
        delta_id=delta_id or f"{task_id}/{base}/{status.value}",
        x_base_version=base,
    )


def append(ledger: Ledger, *deltas: LedgerDelta) -> list[LedgerDelta]:
    with ledger.locked():
        return ledger.append(list(deltas), at=AT)


def lines_of(directory: Path) -> list[bytes]:
    return (directory / LEDGER_FILE).read_bytes().splitlines(keepends=True)


def summary(state: LedgerState) -> dict[str, tuple[str, int]]:
    return {task_id: (row.status.value, row.version) for task_id, row in state.rows.items()}


def build_ledger(directory: Path, count: int, *, snapshot_every: int = 1000) -> Ledger:
    """``count`` single-delta appends: T-1 and T-2 created, then T-1 and T-2 going back
    and forth between todo and blocked."""
    ledger = Ledger(directory, snapshot_every=snapshot_every)
    append(ledger, create("T-1"))
    append(ledger, create("T-2"))
    for number in range(count - 2):
        task_id = "T-1" if number % 2 == 0 else "T-2"
        row = ledger.read().rows[task_id]
        status = TaskStatus.BLOCKED if row.status is TaskStatus.TODO else TaskStatus.TODO
        append(ledger, move(task_id, status, row.version))
    return ledger


# -- append and read back ------------------------------------------------------------------


def test_appended_deltas_read_back_numbered_in_file_order(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    first = append(ledger, create("T-1"), create("T-2", dependencies=("T-1",)))
    second = append(ledger, move("T-1", TaskStatus.BLOCKED, 1, reason="waiting"))
    assert [(d.delta_id, d.x_seq, d.x_at) for d in [*first, *second]] == [
        ("T-1/create", 1, AT),
        ("T-2/create", 2, AT),
        ("T-1/1/blocked", 3, AT),
    ]
    lines = lines_of(tmp_path)
    assert len(lines) == 3 and all(line.endswith(b"\n") for line in lines)
    for number, line in enumerate(lines, 1):
        document = json.loads(line)
        assert list(DELTA_SCHEMA.iter_errors(document)) == []
        parsed = parse_ledger_delta(document, source=f"line {number}", strict=True)
        assert parsed == [*first, *second][number - 1]

    state = Ledger(tmp_path).read()
    assert state.seq == 3
    assert summary(state) == {"T-1": ("blocked", 3), "T-2": ("todo", 2)}
    assert state.rows["T-1"].reason == "waiting"
    assert state.rows["T-2"].task.dependencies == ["T-1"]


def test_append_needs_the_writers_lock(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="locked"):
        Ledger(tmp_path).append([create("T-1")], at=AT)
    assert not (tmp_path / LEDGER_FILE).exists()


def test_a_refused_batch_writes_nothing_and_a_duplicate_writes_nothing(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    append(ledger, create("T-1"))
    before = (tmp_path / LEDGER_FILE).read_bytes()
    with pytest.raises(BoardError) as refused:
        append(
            ledger,
            create("T-2"),
            move("T-1", TaskStatus.IN_PROGRESS, 1),
            move("T-1", TaskStatus.DONE, 3),  # done needs x_verdict
        )
    assert refused.value.code == "ACCEPTANCE_FAILED"
    assert refused.value.delta_id == "T-1/3/done"
    assert append(ledger, create("T-1")) == []  # the same create again: a duplicate
    assert (tmp_path / LEDGER_FILE).read_bytes() == before
    assert set(Ledger(tmp_path).read().rows) == {"T-1"}


# -- torn lines -----------------------------------------------------------------------------


TORN = [
    pytest.param(b'{"task_id":"T-9","sta', id="half-a-delta"),
    pytest.param(b"\xff\xfe garbage", id="not-even-utf8"),
    pytest.param(None, id="a-whole-delta-but-its-newline"),
]


@pytest.mark.parametrize("torn", TORN)
def test_a_torn_last_line_is_ignored_by_readers_and_cut_by_the_next_writer(
    tmp_path: Path, torn: bytes | None
) -> None:
    writer = Ledger(tmp_path)
    append(writer, create("T-1"))
    follower = Ledger(tmp_path)
    assert summary(follower.read()) == {"T-1": ("todo", 1)}
    whole = (tmp_path / LEDGER_FILE).read_bytes()
    if torn is None:  # the next delta, complete but for the newline: still not a line
        numbered = attrs.evolve(create("T-7"), x_seq=2, x_at=AT)
        torn = encode_delta(numbered)[:-1]
    with open(tmp_path / LEDGER_FILE, "ab") as file:
        file.write(torn)

    assert summary(Ledger(tmp_path).read()) == {"T-1": ("todo", 1)}  # a fresh reader
    assert summary(follower.read()) == {"T-1": ("todo", 1)}  # a reader that was there before

    appended = append(Ledger(tmp_path), create("T-2"))  # another writer: cuts, then appends
    assert [d.x_seq for d in appended] == [2]
    data = (tmp_path / LEDGER_FILE).read_bytes()
    assert data.startswith(whole) and torn not in data
    assert len(data.splitlines()) == 2 and data.endswith(b"\n")
    assert summary(Ledger(tmp_path).read()) == {"T-1": ("todo", 1), "T-2": ("todo", 2)}
    assert summary(follower.read()) == {"T-1": ("todo", 1), "T-2": ("todo", 2)}
    assert summary(writer.read()) == {"T-1": ("todo", 1), "T-2": ("todo", 2)}


def test_a_ledger_holding_only_a_torn_line_is_empty_until_a_writer_replaces_it(
    tmp_path: Path,
) -> None:
    (tmp_path / LEDGER_FILE).write_bytes(b'{"task_id":"T-1","status":"to')
    assert Ledger(tmp_path).read().rows == {}
    append(Ledger(tmp_path), create("T-1"))
    assert (tmp_path / LEDGER_FILE).read_bytes().startswith(b'{"task_id":"T-1","status":"todo"')
    assert summary(Ledger(tmp_path).read()) == {"T-1": ("todo", 1)}


def run_writer(
    directory: Path, count: int, *extra: str, crash_at: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_CRASH")}
    if crash_at is not None:
        env["ORCHESTRATOR_CRASH_AT"] = crash_at
        env["ORCHESTRATOR_CRASH_LOG"] = str(directory.parent / "crash.log")
    return subprocess.run(
        [sys.executable, str(WRITER), str(directory), str(count), *extra],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


def crash_points(tmp_path: Path, *extra: str, start_from: Path | None = None) -> list[str]:
    """The labels of every crash point a 4-task writer run passes, in order (from a copy
    of ``start_from``, or an empty directory)."""
    directory = tmp_path / "counting"
    if start_from is None:
        directory.mkdir()
    else:
        shutil.copytree(start_from, directory)
    run_writer(directory, 4, *extra, crash_at="count")
    log = (tmp_path / "crash.log").read_text().splitlines()
    (tmp_path / "crash.log").unlink()
    return [line.split(" ", 1)[1] for line in log]


@pytest.mark.slow
def test_a_writer_killed_at_any_point_leaves_a_ledger_the_next_writer_completes(
    tmp_path: Path,
) -> None:
    labels = crash_points(tmp_path, "--snapshot-every", "2")
    assert len(labels) == 18  # 3 per append, 3 per snapshot (at 2 and 4)
    assert {"before-append ledger.ndjson", "before-fsync ledger.ndjson"} <= set(labels)
    assert "before-rename ledger.snapshot.json" in labels  # snapshots are written too
    for number, label in enumerate(labels, 1):
        directory = tmp_path / f"crash-{number}"
        directory.mkdir()
        killed = run_writer(directory, 4, "--snapshot-every", "2", crash_at=str(number))
        assert killed.returncode == -signal.SIGKILL, (label, killed.stderr)
        state = Ledger(directory).read()
        created = sorted(state.rows)
        assert created == [f"T-{n}" for n in range(1, len(created) + 1)], label  # a prefix
        data = (directory / LEDGER_FILE).read_bytes() if created else b""
        assert data.endswith(b"\n") or not data, label

        again = run_writer(directory, 4, "--snapshot-every", "2")
        assert again.returncode == 0, (label, again.stderr)
        for reader in (Ledger(directory), Ledger(directory, snapshot_every=2)):
            state = reader.read()
            assert summary(state) == {f"T-{n}": ("todo", n) for n in range(1, 5)}, label
        assert [json.loads(line)["x_seq"] for line in lines_of(directory)] == [1, 2, 3, 4]


@pytest.mark.slow
def test_a_writer_killed_in_the_middle_of_a_line(tmp_path: Path) -> None:
    directory = tmp_path / "ledger"
    directory.mkdir()
    big = ("--reason-size", "300000")  # one line is ~300 KB: larger than any single page
    assert run_writer(directory, 2, *big).returncode == 0
    before = (directory / LEDGER_FILE).read_bytes()
    limit = str(len(before) + 100_000)
    labels = crash_points(tmp_path, *big, "--file-size-limit", limit, start_from=directory)
    mid = labels.index("mid-append ledger.ndjson") + 1  # reached only through a short write

    killed = run_writer(directory, 4, *big, "--file-size-limit", limit, crash_at=str(mid))
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    torn = (directory / LEDGER_FILE).read_bytes()
    assert len(torn) == len(before) + 100_000 and torn.startswith(before)
    assert sorted(Ledger(directory).read().rows) == ["T-1", "T-2"]

    assert run_writer(directory, 4, *big).returncode == 0
    assert sorted(Ledger(directory).read().rows) == ["T-1", "T-2", "T-3", "T-4"]
    assert [json.loads(line)["x_seq"] for line in lines_of(directory)] == [1, 2, 3, 4]


@pytest.mark.slow
def test_writers_in_several_processes_at_once_append_whole_numbered_lines(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "ledger"
    directory.mkdir()
    ready = tmp_path / "go"
    writers = [
        subprocess.Popen(
            [
                *(sys.executable, str(WRITER), str(directory), "25", "--start", str(1 + 25 * n)),
                *("--ready-file", str(ready), "--snapshot-every", "7", "--reason-size", "5000"),
            ],
            stderr=subprocess.PIPE,
        )
        for n in range(4)
    ]
    ready.touch()
    for writer in writers:
        _, error = writer.communicate(timeout=120)
        assert writer.returncode == 0, error
    numbers = [json.loads(line)["x_seq"] for line in lines_of(directory)]
    assert numbers == list(range(1, 101))
    state = Ledger(directory).read()
    assert sorted(state.rows) == sorted(f"T-{n}" for n in range(1, 101))
    assert state.seq == 100


# -- snapshots ------------------------------------------------------------------------------


def corrupt_line(directory: Path, number: int) -> None:
    """Make line ``number`` unreadable JSON without moving any byte offset."""
    path = directory / LEDGER_FILE
    lines = path.read_bytes().splitlines(keepends=True)
    lines[number - 1] = b"#" + lines[number - 1][1:]
    path.write_bytes(b"".join(lines))


def test_a_snapshot_is_used_so_only_the_tail_is_folded(tmp_path: Path) -> None:
    ledger = build_ledger(tmp_path, 12, snapshot_every=5)
    expected = summary(ledger.read())
    snapshot = json.loads((tmp_path / SNAPSHOT_FILE).read_bytes())
    assert snapshot["seq"] == 10  # taken at 5 and at 10
    assert snapshot["offset"] == sum(len(line) for line in lines_of(tmp_path)[:10])

    corrupt_line(tmp_path, 2)  # before the snapshot: a full fold would refuse it
    state = Ledger(tmp_path).read()
    assert summary(state) == expected and state.seq == 12
    assert state.rows == ledger.read().rows

    (tmp_path / SNAPSHOT_FILE).unlink()  # without the snapshot, the whole file is folded
    with pytest.raises(BoardError) as refused:
        Ledger(tmp_path).read()
    assert refused.value.code == "LEDGER_INCONSISTENT"
    assert f"{tmp_path / LEDGER_FILE} line 2" in str(refused.value)


def test_a_corrupt_line_after_the_snapshot_is_still_found(tmp_path: Path) -> None:
    build_ledger(tmp_path, 12, snapshot_every=5)
    corrupt_line(tmp_path, 11)
    with pytest.raises(BoardError) as refused:
        Ledger(tmp_path).read()
    assert refused.value.code == "LEDGER_INCONSISTENT"
    assert "line 11" in str(refused.value)


@pytest.mark.parametrize("other_count", [8, 15], ids=["shorter", "longer"])
def test_a_snapshot_of_another_ledger_is_ignored(tmp_path: Path, other_count: int) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    build_ledger(first, 12, snapshot_every=5)
    other = Ledger(second)  # another history: T-3 too, so its lines differ
    append(other, create("T-1"), create("T-3"))
    for number in range(other_count - 2):
        row = other.read().rows["T-3"]
        status = TaskStatus.BLOCKED if row.status is TaskStatus.TODO else TaskStatus.TODO
        append(other, move("T-3", status, row.version, delta_id=f"T-3/{number}"))
    expected = other.read().rows
    shutil.copy(first / SNAPSHOT_FILE, second / SNAPSHOT_FILE)  # the ledger was replaced

    state = Ledger(second).read()
    assert state.rows == expected and state.seq == other_count
    assert "T-2" not in state.rows


@pytest.mark.parametrize(
    "snapshot",
    [b"", b"{", b'{"format":"something-else"}', b"[]", b'{"format":"orchestrator.ledger'],
    ids=["empty", "truncated", "other-format", "not-an-object", "torn"],
)
def test_an_unreadable_snapshot_is_ignored(tmp_path: Path, snapshot: bytes) -> None:
    expected = build_ledger(tmp_path, 7, snapshot_every=1000).read().rows
    (tmp_path / SNAPSHOT_FILE).write_bytes(snapshot)
    assert Ledger(tmp_path).read().rows == expected


@pytest.mark.slow
@pytest.mark.soak
def test_a_ledger_of_100000_deltas_loads(tmp_path: Path) -> None:
    # About 15 s here: built through Ledger.append in ten batches of 10,000, then loaded with
    # its snapshot and without.
    tasks, rounds = 10_000, 10  # every task: created, then blocked and requeued in turns
    ledger = Ledger(tmp_path)
    append(ledger, *(create(f"T-{n}") for n in range(1, tasks + 1)))
    for turn in range(1, rounds):
        status = TaskStatus.BLOCKED if turn % 2 else TaskStatus.TODO
        with ledger.locked() as state:
            ledger.append(
                [
                    move(f"T-{n}", status, state.version(f"T-{n}"), delta_id=f"T-{n}/{turn}")
                    for n in range(1, tasks + 1)
                ],
                at=AT,
            )
    expected = ledger.read()
    assert expected.seq == 100_000
    assert len(lines_of(tmp_path)) == 100_000

    with_snapshot = Ledger(tmp_path).read()
    assert with_snapshot.seq == 100_000 and with_snapshot.rows == expected.rows
    (tmp_path / SNAPSHOT_FILE).unlink()
    full = Ledger(tmp_path).read()
    assert full.seq == 100_000 and full.rows == expected.rows
    last = full.rows[f"T-{tasks}"]
    assert (last.status, last.version) == (TaskStatus.BLOCKED, 100_000)


# -- D5: the version a writer saw ----------------------------------------------------------


def test_two_writers_that_saw_the_same_version_the_second_conflicts(tmp_path: Path) -> None:
    append(Ledger(tmp_path), create("T-1"), create("T-2"))
    alice, bob = Ledger(tmp_path), Ledger(tmp_path)
    seen_by_alice = alice.read().version("T-1")
    seen_by_bob = bob.read().version("T-1")
    assert seen_by_alice == seen_by_bob == 1

    applied = append(alice, move("T-1", TaskStatus.BLOCKED, seen_by_alice, delta_id="alice"))
    assert [d.x_seq for d in applied] == [3]
    before = (tmp_path / LEDGER_FILE).read_bytes()
    with pytest.raises(BoardError) as conflict:
        append(bob, move("T-1", TaskStatus.CANCELED, seen_by_bob, delta_id="bob"))
    assert conflict.value.code == "CONCURRENCY_CONFLICT"
    assert conflict.value.task_id == "T-1" and conflict.value.delta_id == "bob"
    assert conflict.value.details == {"seen_version": 1, "current_version": 3}
    assert (tmp_path / LEDGER_FILE).read_bytes() == before  # bob wrote nothing

    # Writers on different tasks never conflict; bob re-reads and decides again.
    assert append(bob, move("T-2", TaskStatus.BLOCKED, 2, delta_id="bob-2"))
    assert append(bob, move("T-1", TaskStatus.CANCELED, 3, delta_id="bob-3"))
    assert summary(Ledger(tmp_path).read()) == {"T-1": ("canceled", 5), "T-2": ("blocked", 4)}


def test_a_delta_without_a_base_version_applies_last_write_wins(tmp_path: Path) -> None:
    append(Ledger(tmp_path), create("T-1"))
    alice, bob = Ledger(tmp_path), Ledger(tmp_path)
    alice.read(), bob.read()
    append(alice, move("T-1", TaskStatus.BLOCKED, None, delta_id="alice"))
    append(bob, move("T-1", TaskStatus.TODO, None, delta_id="bob", owner="bob"))
    row = Ledger(tmp_path).read().rows["T-1"]
    assert (row.status, row.owner, row.version) == (TaskStatus.TODO, "bob", 3)


# -- an edited ledger -----------------------------------------------------------------------


def edit_line(directory: Path, number: int, **changes: object) -> None:
    path = directory / LEDGER_FILE
    lines = path.read_bytes().splitlines(keepends=True)
    document = json.loads(lines[number - 1])
    document.update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        del document[key]
    lines[number - 1] = json.dumps(document, separators=(",", ":")).encode() + b"\n"
    path.write_bytes(b"".join(lines))


EDITS = [
    pytest.param({"x_seq": 7}, "x_seq is 7, expected 3", id="x_seq-out-of-order"),
    pytest.param({"x_seq": 2}, "x_seq is 2, expected 3", id="x_seq-repeated"),
    pytest.param({"status": "in_progress", "owner": ""}, "needs an owner", id="no-owner"),
    pytest.param({"status": "todo"}, "cannot go to todo", id="invalid-transition"),
    pytest.param({"task_id": "T-9"}, "no task T-9", id="unknown-task"),
    pytest.param({"x_base_version": 2}, "at version 1", id="stale-base-version"),
    pytest.param({"delta_id": "T-1/create"}, "already used", id="reused-delta-id"),
    pytest.param({"status": "paused"}, "status", id="unknown-status"),
    pytest.param({"x_seq": None}, "x_seq is None", id="no-x_seq"),
]


@pytest.mark.parametrize(("changes", "words"), EDITS)
def test_an_edited_line_is_refused_naming_the_line(
    tmp_path: Path, changes: dict[str, object], words: str
) -> None:
    build_ledger(tmp_path, 5)  # line 3: T-1 todo -> blocked, at base version 1
    edit_line(tmp_path, 3, **changes)
    with pytest.raises(BoardError) as refused:
        Ledger(tmp_path).read()
    assert refused.value.code == "LEDGER_INCONSISTENT"
    message = str(refused.value)
    assert f"{tmp_path / LEDGER_FILE} line 3" in message
    assert words in message


def test_an_edited_line_is_found_by_a_reader_that_had_read_before(tmp_path: Path) -> None:
    ledger = build_ledger(tmp_path, 4)
    follower = Ledger(tmp_path)
    follower.read()
    with open(tmp_path / LEDGER_FILE, "ab") as file:  # a line no writer would append
        file.write(json.dumps({**json.loads(lines_of(tmp_path)[-1]), "x_seq": 9}).encode())
        file.write(b"\n")
    for reader in (follower, ledger, Ledger(tmp_path)):
        with pytest.raises(BoardError, match="line 5: x_seq is 9, expected 5"):
            reader.read()


# -- deltas the readers would refuse ------------------------------------------------------

UNREADABLE = [
    pytest.param({"last_heartbeat_at": "yesterday"}, AT, id="last_heartbeat_at-not-a-time"),
    pytest.param({"retry_after_ms": -1}, AT, id="negative-retry_after_ms"),
    pytest.param({"x_attempt": 0}, AT, id="x_attempt-zero"),
    pytest.param({"x_verdict": ""}, AT, id="empty-x_verdict"),
    pytest.param({}, "now", id="x_at-not-a-time"),
]


@pytest.mark.parametrize(("fields", "at"), UNREADABLE)
def test_append_refuses_a_delta_its_own_readers_would_refuse(
    tmp_path: Path, fields: dict[str, object], at: str
) -> None:
    append(Ledger(tmp_path), create("T-1"))
    before = (tmp_path / LEDGER_FILE).read_bytes()
    delta = attrs.evolve(move("T-1", TaskStatus.BLOCKED, 1), **fields)
    writer = Ledger(tmp_path)
    with writer.locked(), pytest.raises(BoardError) as refused:
        writer.append([delta], at=at)
    assert refused.value.code == "SCHEMA_INVALID"
    assert (tmp_path / LEDGER_FILE).read_bytes() == before
    assert Ledger(tmp_path).read().seq == 1


def test_a_delta_id_ending_in_a_newline_is_refused(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path, snapshot_every=1)
    with ledger.locked(), pytest.raises(BoardError) as refused:
        ledger.append([attrs.evolve(create("T-1"), delta_id="T-1/create\n")], at=AT)
    assert refused.value.code == "SCHEMA_INVALID"
