"""One suite, both stores: the task board's rules hold the same on a directory and in
PostgreSQL (``board_stores`` runs each test on both).

The ledger's rules D1-D5 (order and numbering, idempotence by ``delta_id``, the last
applied wins, only a create makes a row, a stale ``x_base_version`` is a
CONCURRENCY_CONFLICT), between two writers each with its own view of the store; lock
conflicts; a board's whole life (create, assign, heartbeat, worklog, submit, watchdog,
requeue, handoff and adoption); snapshots; and the same operations leaving the same
ledger bytes in both stores.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_board import RUN, make_task, subagent_result
from test_ledger import AT, create, move

from orchestrator._errors import BoardError
from orchestrator._ports import BoardDocumentInput, ReadLedgerInput
from orchestrator.board.board import Board, adopt_handoff
from orchestrator.board.file_store import FileBoardStore
from orchestrator.board.ledger import Ledger, LedgerState, encode_delta
from orchestrator.formats.board_documents import ErrorCode, LedgerDelta, TaskStatus
from orchestrator.testing import FakeClock
from support.board_store_support import OpenStore, board_pg_store, board_stores

__all__ = ["board_pg_store", "board_stores"]  # fixtures, used by name

TODO, IN_PROGRESS, BLOCKED = TaskStatus.TODO, TaskStatus.IN_PROGRESS, TaskStatus.BLOCKED
DONE, FAILED, CANCELED = TaskStatus.DONE, TaskStatus.FAILED, TaskStatus.CANCELED


def append(ledger: Ledger, *deltas: LedgerDelta) -> list[LedgerDelta]:
    with ledger.locked():
        return ledger.append(list(deltas), at=AT)


def stored(open_store: OpenStore) -> bytes:
    """The ledger's lines as a new reader of the store gets them."""
    store = open_store()
    return store.read_ledger(ReadLedgerInput(after=0)).data


def summary(state: LedgerState) -> dict[str, tuple[str, int]]:
    return {task_id: (row.status.value, row.version) for task_id, row in state.rows.items()}


def refused(call: Any, *args: Any, **kwargs: Any) -> BoardError:
    with pytest.raises(BoardError) as caught:
        call(*args, **kwargs)
    return caught.value


def new_board(open_store: OpenStore, clock: FakeClock, workspace: Path | None = None) -> Board:
    return Board.create(
        run_id=RUN,
        objective="Add endpoint tests",
        constraints=["Do not edit vendor/"],
        workspace=workspace,
        clock=clock,
        store=open_store(),
    )


# -- the ledger: D1-D5 --------------------------------------------------------------------


def test_d1_deltas_are_numbered_in_order_and_read_back_by_another_reader(
    board_stores: OpenStore,
) -> None:
    ledger = Ledger(board_stores())
    first = append(ledger, create("T-1"), create("T-2", dependencies=("T-1",)))
    second = append(ledger, move("T-1", BLOCKED, 1, reason="waiting"))
    assert [(d.delta_id, d.x_seq, d.x_at) for d in [*first, *second]] == [
        ("T-1/create", 1, AT),
        ("T-2/create", 2, AT),
        ("T-1/1/blocked", 3, AT),
    ]
    assert stored(board_stores) == b"".join(encode_delta(d) for d in [*first, *second])
    reader = Ledger(board_stores())
    state = reader.read()
    assert state.seq == 3
    assert summary(state) == {"T-1": ("blocked", 3), "T-2": ("todo", 2)}
    assert state.rows["T-2"].task.dependencies == ["T-1"]
    append(ledger, move("T-1", TODO, 3))
    assert summary(reader.read()) == {"T-1": ("todo", 4), "T-2": ("todo", 2)}  # the tail only


def test_d2_a_delta_appended_again_is_a_duplicate_and_another_under_its_id_a_forgery(
    board_stores: OpenStore,
) -> None:
    ledger = Ledger(board_stores())
    append(ledger, create("T-1"), move("T-1", BLOCKED, 1))
    before = stored(board_stores)
    assert append(Ledger(board_stores()), create("T-1"), move("T-1", BLOCKED, 1)) == []
    forged = move("T-1", BLOCKED, 1, reason="someone else", delta_id="T-1/1/blocked")
    error = refused(append, Ledger(board_stores()), forged)
    assert error.code == "LEDGER_INCONSISTENT" and error.delta_id == "T-1/1/blocked"
    assert stored(board_stores) == before


def test_d3_the_last_applied_delta_wins(board_stores: OpenStore) -> None:
    ledger = Ledger(board_stores())
    append(ledger, create("T-1"))
    append(ledger, move("T-1", BLOCKED, 1, reason="first"))
    append(ledger, move("T-1", TODO, 2, reason="second"))
    append(ledger, move("T-1", CANCELED, 3, reason="third"))
    row = Ledger(board_stores()).read().rows["T-1"]
    assert (row.status, row.reason, row.version) == (CANCELED, "third", 4)


def test_d4_only_a_create_makes_a_row(board_stores: OpenStore) -> None:
    ledger = Ledger(board_stores())
    error = refused(append, ledger, move("T-1", BLOCKED, None))
    assert error.code == "LEDGER_INCONSISTENT" and "create the task first" in str(error)
    append(ledger, create("T-1"))
    assert refused(append, ledger, create("T-1", scope="src/other.py")).code == (
        "LEDGER_INCONSISTENT"
    )
    assert set(Ledger(board_stores()).read().rows) == {"T-1"}


def test_d5_a_writer_that_read_a_stale_version_conflicts_and_writes_nothing(
    board_stores: OpenStore,
) -> None:
    one, other = Ledger(board_stores()), Ledger(board_stores())
    append(one, create("T-1"))
    seen = other.read().rows["T-1"].version
    append(one, move("T-1", BLOCKED, seen, reason="the first writer"))
    before = stored(board_stores)
    error = refused(append, other, move("T-1", CANCELED, seen, reason="the second writer"))
    assert error.code == "CONCURRENCY_CONFLICT"
    assert error.details == {"seen_version": 1, "current_version": 2}
    assert stored(board_stores) == before
    assert summary(other.read()) == {"T-1": ("blocked", 2)}


def test_a_refused_batch_writes_nothing(board_stores: OpenStore) -> None:
    ledger = Ledger(board_stores())
    append(ledger, create("T-1"))
    before = stored(board_stores)
    error = refused(
        append,
        ledger,
        create("T-2"),
        move("T-1", IN_PROGRESS, 1),
        move("T-1", DONE, 3),  # done needs x_verdict
    )
    assert error.code == "ACCEPTANCE_FAILED"
    assert stored(board_stores) == before
    assert set(Ledger(board_stores()).read().rows) == {"T-1"}
    assert set(ledger.read().rows) == {"T-1"}


def test_a_block_that_raises_after_its_append_leaves_the_reader_on_what_is_stored(
    board_stores: OpenStore,
) -> None:
    """In a database the append is rolled back with the block; on files it stays. Either
    way the ledger's own view is what the store holds."""
    ledger = Ledger(board_stores())
    append(ledger, create("T-1"))
    with pytest.raises(KeyError), ledger.locked():
        ledger.append([create("T-2")], at=AT)
        raise KeyError("the caller failed after its append")
    fresh = set(Ledger(board_stores()).read().rows)
    assert fresh == ({"T-1", "T-2"} if isinstance(board_stores(), FileBoardStore) else {"T-1"})
    assert set(ledger.read().rows) == fresh


def test_a_snapshot_lets_a_new_reader_fold_only_the_tail(board_stores: OpenStore) -> None:
    ledger = Ledger(board_stores(), snapshot_every=3)
    append(ledger, create("T-1"))
    append(ledger, create("T-2"))
    for _ in range(4):
        for task_id in ("T-1", "T-2"):
            row = ledger.read().rows[task_id]
            status = BLOCKED if row.status is TODO else TODO
            append(ledger, move(task_id, status, row.version))
    snapshot = board_stores().load_snapshot()
    assert snapshot is not None and snapshot.seq == 9
    assert summary(Ledger(board_stores(), snapshot_every=3).read()) == summary(ledger.read())
    assert summary(ledger.read()) == {"T-1": ("todo", 9), "T-2": ("todo", 10)}


# -- the board ----------------------------------------------------------------------------


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_a_lock_conflict_refuses_the_assignment_until_the_holder_is_done(
    board_stores: OpenStore, clock: FakeClock
) -> None:
    board = new_board(board_stores, clock)
    board.create_tasks([make_task("T-1", scope=("src",)), make_task("T-2", scope=("src/a.py",))])
    board.assign(["T-1"], owner="agent-a")
    before = stored(board_stores)
    other = Board(store=board_stores(), clock=clock)  # another process
    error = refused(other.assign, ["T-2"], owner="agent-b")
    assert error.code == "LOCK_CONFLICT"
    assert error.details["conflicts"] == [
        {"task_id": "T-1", "resource": "src", "wanted": "src/a.py"}
    ]
    assert stored(board_stores) == before
    assert (
        other.store.read_document(BoardDocumentInput(kind="packets", task_id="T-2", attempt=1))
        is None
    )
    assert board.submit("T-1", subagent_result("T-1", ("src/api.py",))).passed
    (packet,) = other.assign(["T-2"], owner="agent-b")
    assert [(lock.task_id, lock.resource) for lock in packet.active_locks] == [("T-2", "src/a.py")]


def test_a_board_from_creation_to_handoff(
    board_stores: OpenStore, clock: FakeClock, tmp_path: Path
) -> None:
    board = new_board(board_stores, clock)
    assert new_board(board_stores, clock).info == board.info  # created once
    board.create_tasks(
        [make_task("T-1"), make_task("T-2", dependencies=("T-1",)), make_task("T-3")]
    )
    (packet,) = board.assign(["T-1"], owner="agent-a")
    again = Board(store=board_stores(), clock=clock)
    assert again.assign(["T-1"], owner="agent-a") == [packet]  # repeated: the same packet
    clock.advance(60)
    beat = again.heartbeat("T-1", attempt=1)
    assert board.last_heartbeat(board.state().rows["T-1"]) == beat
    from test_board import worklog_entry

    board.append_worklog(worklog_entry())
    judgement = again.submit("T-1", subagent_result("T-1", ("src/T-1.py",)))
    assert judgement.passed
    verdict = board.store.read_document(
        BoardDocumentInput(kind="verdicts", task_id="T-1", attempt=1)
    )
    assert verdict is not None and json.loads(verdict)["verdict"] == "PASS"
    assert board.submit("T-1", subagent_result("T-1", ("src/T-1.py",))).verdict == (
        judgement.verdict
    )  # submitted again: the recorded verdict

    board.assign(["T-2", "T-3"], owner="agent-b")
    clock.advance(121)
    assert [d.task_id for d in board.watchdog()] == ["T-2", "T-3"]
    assert board.worklog("T-2")[-1]["code"] == "TASK_TIMEOUT"
    assert [d.status for d in board.requeue_or_fail(max_attempts=1)] == [FAILED, FAILED]
    assert [entry["action"] for entry in board.worklog("T-1")] == ["edit"]

    bundle = board.handoff()
    assert [(r.task_id, r.status) for r in bundle.ledger] == [
        ("T-1", DONE),
        ("T-2", FAILED),
        ("T-3", FAILED),
    ]
    adopted = adopt_handoff(tmp_path / "adopted", bundle, clock=clock)
    assert [(r.task_id, r.status) for r in adopted.handoff().ledger] == [
        (r.task_id, r.status) for r in bundle.ledger
    ]


def test_a_set_status_with_a_stale_base_version_conflicts(
    board_stores: OpenStore, clock: FakeClock
) -> None:
    board = new_board(board_stores, clock)
    board.create_tasks([make_task("T-1")])
    seen = board.state().rows["T-1"].version
    Board(store=board_stores(), clock=clock).set_status("T-1", BLOCKED, reason="first")
    error = refused(board.set_status, "T-1", CANCELED, reason="second", base_version=seen)
    assert error.code == "CONCURRENCY_CONFLICT"
    assert board.state().rows["T-1"].status is BLOCKED
    assert [entry["result"] for entry in board.worklog("T-1")] == ["first"]


def test_a_second_maintenance_pass_does_not_wait_when_told_not_to(
    board_stores: OpenStore, clock: FakeClock
) -> None:
    new_board(board_stores, clock)
    with board_stores().maintenance(wait=1.0) as held:
        assert held
        with board_stores().maintenance(wait=None) as other:
            assert other is False
    with board_stores().maintenance(wait=None) as held_now:
        assert held_now


def test_a_missing_board_is_named(board_stores: OpenStore) -> None:
    error = refused(lambda: Board(store=board_stores()).info)
    assert error.code == ErrorCode.MISSING_REQUIRED_INPUT.value
    assert "no task board here" in str(error)


# -- both stores at once ---------------------------------------------------------------------


def test_the_same_operations_leave_the_same_ledger_bytes_in_both_stores(
    board_pg_store: OpenStore, tmp_path: Path
) -> None:
    results = []
    for open_store in (lambda: FileBoardStore(tmp_path / ".board"), board_pg_store):
        clock = FakeClock()
        board = new_board(open_store, clock)
        board.create_tasks(
            [make_task("T-1"), make_task("T-2", dependencies=("T-1",)), make_task("T-3")]
        )
        board.assign(["T-1", "T-3"], owner="agent-a")
        clock.advance(30)
        board.submit("T-1", subagent_result("T-1", ("src/T-1.py",)))
        board.submit("T-3", subagent_result("T-3", ("elsewhere.py",)))
        board.requeue_or_fail(max_attempts=2)
        board.assign(["T-2"], owner="agent-b")
        clock.advance(200)
        board.watchdog()
        kinds = [
            open_store().read_document(BoardDocumentInput(kind=kind, task_id="T-3", attempt=1))
            for kind in ("packets", "results", "verdicts")
        ]
        results.append((stored(open_store), kinds, board.worklog("T-3"), board.info))
    assert results[0] == results[1]
    assert (tmp_path / ".board" / "ledger.ndjson").read_bytes() == results[1][0]


def test_a_board_is_made_once_and_another_run_is_refused_it(
    board_stores: OpenStore, clock: FakeClock
) -> None:
    first = new_board(board_stores, clock)
    assert new_board(board_stores, clock).info == first.info
    error = refused(
        Board.create,
        run_id="0b8e2c1a-7d4f-4e0a-9c3b-5a6d7e8f9a0b",
        objective="another run",
        store=board_stores(),
    )
    assert error.code == "LEDGER_INCONSISTENT" and "not 0b8e2c1a" in str(error)
    assert Board(store=board_stores()).info == first.info
