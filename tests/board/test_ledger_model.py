"""The ledger against a model: a hypothesis state machine with duplicated and reordered deltas.

The system under test is :class:`LedgerState` (the pure fold) and, beside it, a real
:class:`Ledger` on a temporary directory (and, in :class:`PostgresLedgerMachine`, on a
board in PostgreSQL) that receives the very same deltas; at every check a fresh
``Ledger`` reads the store back (with ``snapshot_every=3``, so snapshots are written and
used all the time) and must hold the same rows as the in-memory fold.

The model is written here, apart from the library: a dict ``task_id -> row`` (status,
owner, attempts, version, dependencies, locks) and the deltas applied by ``delta_id``. Its
rules are the status transitions of ``docs/formats/task-board.md`` and D1-D5 of
``docs/board.md``. The
resources overlap on purpose (``src`` holds ``src/api.py``; ``src2`` is apart) so that
lock conflicts happen.
"""

from __future__ import annotations

import copy
import json
import shutil
import tempfile
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from orchestrator._errors import BoardError
from orchestrator._ports import ReadLedgerInput
from orchestrator.board.file_store import FileBoardStore
from orchestrator.board.ledger import Ledger, LedgerState
from orchestrator.formats.board_documents import LedgerDelta, Task, TaskStatus, TaskType
from orchestrator.formats.board_rules import parse_ledger_delta
from orchestrator.formats.scope import normalize_resource, resources_conflict

AT = "2025-11-18T10:30:00.000Z"
NEVER_CREATED = "T-99"
# "./docs/" and "src\\api.py" normalise onto "docs" and "src/api.py": the model compares
# normalised resources, as the lock rules say.
RESOURCES = ["src", "src/api.py", "src2", "docs", "./docs/", "src\\api.py"]
OWNERS = ["", "agent-a", "agent-b", "agent-a"]
VERDICT = "verdicts/T-1.1.json"

TODO, IN_PROGRESS, BLOCKED = TaskStatus.TODO, TaskStatus.IN_PROGRESS, TaskStatus.BLOCKED
DONE, FAILED, CANCELED = TaskStatus.DONE, TaskStatus.FAILED, TaskStatus.CANCELED
TERMINAL = {DONE, FAILED, CANCELED}
LEGAL = {
    TODO: {IN_PROGRESS, BLOCKED, FAILED, CANCELED},
    IN_PROGRESS: {DONE, BLOCKED, FAILED, CANCELED},
    BLOCKED: {TODO, IN_PROGRESS, FAILED, CANCELED},
    DONE: set(),
    FAILED: set(),
    CANCELED: set(),
}

APPLIED, DUPLICATE = "applied", "duplicate"
Spec = tuple[Any, ...]  # a drawn description of a delta, resolved against the model


# -- the model ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelRow:
    status: TaskStatus
    owner: str
    attempts: int
    version: int
    dependencies: tuple[str, ...]
    locks: frozenset[str]


def _content(delta: LedgerDelta) -> LedgerDelta:
    """What D2 compares: the delta without the board's bookkeeping."""
    return attrs.evolve(delta, x_seq=None, x_at=None)


class Model:
    """The ledger as the rules describe it, kept independently of ``orchestrator.board.ledger``."""

    def __init__(self) -> None:
        self.rows: dict[str, ModelRow] = {}
        self.seq = 0
        self.applied: dict[str, LedgerDelta] = {}

    def copy(self) -> Model:
        other = Model()
        other.rows, other.seq, other.applied = dict(self.rows), self.seq, dict(self.applied)
        return other

    def judge(self, delta: LedgerDelta) -> str:
        """APPLIED, DUPLICATE, or the error code that refuses ``delta``."""
        seen = self.applied.get(delta.delta_id)
        if seen is not None:
            return DUPLICATE if seen == _content(delta) else "LEDGER_INCONSISTENT"
        row = self.rows.get(delta.task_id)
        if delta.x_create is not None:
            return self._judge_create(delta, row)
        if row is None:
            return "LEDGER_INCONSISTENT"
        if delta.x_base_version is not None and delta.x_base_version != row.version:
            return "CONCURRENCY_CONFLICT"
        if delta.status is row.status and row.status in TERMINAL:
            return APPLIED  # a terminal state re-asserted
        if delta.status not in LEGAL[row.status]:
            return "INVALID_TRANSITION"
        if delta.status is IN_PROGRESS:
            if any(self.rows[d].status is not DONE for d in row.dependencies):
                return "DEPENDENCY_NOT_MET"
            if not delta.owner.strip():
                return "MISSING_REQUIRED_INPUT"
            if self._conflicting(delta.task_id, row.locks):
                return "LOCK_CONFLICT"
        if delta.status is DONE and not delta.x_verdict:
            return "ACCEPTANCE_FAILED"
        return APPLIED

    def _judge_create(self, delta: LedgerDelta, row: ModelRow | None) -> str:
        assert delta.x_create is not None
        if row is not None:
            return "LEDGER_INCONSISTENT"
        if delta.status is not TODO:
            return "INVALID_TRANSITION"
        if delta.x_base_version not in (None, 0):
            return "CONCURRENCY_CONFLICT"
        for dependency in delta.x_create.dependencies:
            if dependency == delta.task_id or dependency not in self.rows:
                return "DEPENDENCY_NOT_MET"
        return APPLIED

    def _conflicting(self, task_id: str, locks: frozenset[str]) -> bool:
        return any(
            resources_conflict(held, wanted)
            for other_id, other in self.rows.items()
            if other_id != task_id and other.status is IN_PROGRESS
            for held in other.locks
            for wanted in locks
        )

    def apply(self, delta: LedgerDelta) -> None:
        """Fold a delta :meth:`judge` found APPLIED."""
        self.seq += 1
        self.applied[delta.delta_id] = _content(delta)
        if delta.x_create is not None:
            task = delta.x_create
            self.rows[delta.task_id] = ModelRow(
                status=TODO,
                owner=delta.owner,
                attempts=0,
                version=self.seq,
                dependencies=tuple(task.dependencies),
                locks=frozenset(normalize_resource(r) for r in task.lock_scope),
            )
            return
        row = self.rows[delta.task_id]
        if delta.status is row.status and row.status in TERMINAL:
            self.rows[delta.task_id] = replace(row, version=self.seq)
            return
        attempts = row.attempts
        if delta.status is IN_PROGRESS:
            attempts = delta.x_attempt or row.attempts + 1
        self.rows[delta.task_id] = replace(
            row, status=delta.status, owner=delta.owner, attempts=attempts, version=self.seq
        )

    def feed(self, delta: LedgerDelta) -> str:
        outcome = self.judge(delta)
        if outcome == APPLIED:
            self.apply(delta)
        return outcome

    def feed_batch(self, deltas: list[LedgerDelta]) -> tuple[str | None, str | None]:
        """All or nothing: (None, None) if the batch applies, else (code, delta_id) of the
        first refused delta, and the model is left as it was."""
        scratch = self.copy()
        for delta in deltas:
            outcome = scratch.feed(delta)
            if outcome not in (APPLIED, DUPLICATE):
                return outcome, delta.delta_id
        self.rows, self.seq, self.applied = scratch.rows, scratch.seq, scratch.applied
        return None, None


# -- building deltas ---------------------------------------------------------------------


def make_task(task_id: str, dependencies: list[str], lock_scope: list[str]) -> Task:
    return Task(
        task_id=task_id,
        title=f"task {task_id}",
        type=TaskType.PARALLELIZABLE,
        dependencies=dependencies,
        lock_scope=lock_scope,
        forbidden_scope=["vendor"],
        acceptance_criteria=["it works"],
        worklog_path=f"worklogs/{task_id}.jsonl",
        timeout_seconds=600,
        heartbeat_interval_seconds=60,
    )


# Tasks are named at run time from these picks: a pick chooses among the tasks created so
# far (the last value names a task that never exists), so most deltas meet a real row.
picks = st.integers(min_value=0, max_value=11)
NEVER = 11
create_specs = st.tuples(
    st.just("create"),
    st.sampled_from(["new", "new", "new", "new", "existing"]),
    st.one_of(st.just([]), st.lists(picks, max_size=2, unique=True)),
    st.lists(st.sampled_from(RESOURCES), min_size=1, max_size=2, unique=True),
    st.sampled_from([TODO, TODO, TODO, TODO, IN_PROGRESS]),
    st.sampled_from([0, 0, None, 2]),
)
move_specs = st.tuples(
    st.just("move"),
    picks,
    st.sampled_from([*TaskStatus, IN_PROGRESS, DONE]),
    st.sampled_from(["current", "current", "current", "none", "stale"]),
    st.sampled_from(OWNERS),
    st.sampled_from([VERDICT, VERDICT, None]),
    st.sampled_from([None, None, None, 7]),
)
delta_specs = st.one_of(create_specs, move_specs)


class LedgerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.model = Model()
        self.state = LedgerState()
        self.setup_store()
        self.ledger = Ledger(self.open_store(), snapshot_every=3)
        self.reader = Ledger(self.open_store(), snapshot_every=3)  # one long-lived reader
        self.history: list[LedgerDelta] = []  # every applied delta, numbered
        self.versions: dict[str, int] = {}
        self.next_id = 0

    def setup_store(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="ledger-model-"))

    def open_store(self) -> Any:
        """The ledger's store, as another reader or writer opens it."""
        return FileBoardStore(self.directory)

    def teardown(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

    # -- helpers ----------------------------------------------------------------------

    def fresh_id(self) -> str:
        self.next_id += 1
        return f"d-{self.next_id}"

    def build(self, spec: Spec, model: Model | None = None) -> LedgerDelta:
        """The delta ``spec`` describes; "current" is the version ``model`` (by default the
        ledger's) has for the task, "stale" another one."""
        model = model or self.model
        created = sorted(model.rows, key=lambda t: int(t[2:]))
        if spec[0] == "create":
            _, which, dependency_picks, scope, status, base = spec
            if which == "new" or not created:
                task_id = f"T-{len(created) + 1}"
            else:
                task_id = created[dependency_picks[0] % len(created) if dependency_picks else 0]
            dependencies = sorted({self.named(pick, created) for pick in dependency_picks})
            return LedgerDelta(
                task_id=task_id,
                status=status,
                owner="",
                reason=f"create {task_id}",
                delta_id=self.fresh_id(),
                x_base_version=base,
                x_create=make_task(task_id, dependencies, scope),
            )
        _, pick, status, base_mode, owner, verdict, attempt = spec
        task_id = self.named(pick, created)
        row = model.rows.get(task_id)
        version = 0 if row is None else row.version
        base = {"current": version, "none": None, "stale": version + 1}[base_mode]
        if base_mode == "stale" and version > 1:
            base = version - 1
        return LedgerDelta(
            task_id=task_id,
            status=status,
            owner=owner,
            reason=f"{task_id} to {status.value}",
            delta_id=self.fresh_id(),
            x_base_version=base,
            x_attempt=attempt,
            x_verdict=verdict,
        )

    @staticmethod
    def named(pick: int, created: list[str]) -> str:
        return NEVER_CREATED if pick == NEVER or not created else created[pick % len(created)]

    def submit(self, deltas: list[LedgerDelta]) -> None:
        """Apply ``deltas`` to the model, the in-memory fold and the file ledger alike."""
        expected_code, expected_id = self.model.feed_batch(deltas)
        if expected_code is None:
            for delta in deltas:
                event(f"applied: {delta.status.value}")
        else:
            event(f"refused: {expected_code}")
        rows_before, seq_before = copy.deepcopy(self.state.rows), self.state.seq
        size_before = self.ledger_size()
        if expected_code is not None:
            with pytest.raises(BoardError) as refused:
                self.state.apply_batch(deltas, at=AT)
            assert (refused.value.code, refused.value.delta_id) == (expected_code, expected_id)
            assert self.state.rows == rows_before and self.state.seq == seq_before
            with self.ledger.locked(), pytest.raises(BoardError) as on_disk:
                self.ledger.append(deltas, at=AT)
            assert on_disk.value.code == expected_code
            assert self.ledger_size() == size_before  # nothing written
            return
        applied = self.state.apply_batch(deltas, at=AT)
        with self.ledger.locked():
            written = self.ledger.append(deltas, at=AT)
        assert written == applied
        assert [d.x_seq for d in applied] == list(range(seq_before + 1, self.state.seq + 1))
        self.history += applied

    def ledger_size(self) -> int:
        return len(self.stored())

    def stored(self) -> bytes:
        """The ledger's lines as the store holds them."""
        return bytes(self.open_store().read_ledger(ReadLedgerInput(after=0)).data)

    # -- rules ------------------------------------------------------------------------

    @rule(spec=create_specs)
    def create(self, spec: Spec) -> None:
        self.submit([self.build(spec)])

    @rule(spec=move_specs)
    def move(self, spec: Spec) -> None:
        self.submit([self.build(spec)])

    @rule(pick=picks, owner=st.sampled_from(["agent-a", "agent-b"]))
    def advance(self, pick: int, owner: str) -> None:
        """The happy path of one task: todo or blocked -> in_progress -> done (so that locks
        are held and wanted often); the model still decides whether it may."""
        created = sorted(self.model.rows, key=lambda t: int(t[2:]))
        task_id = self.named(pick % NEVER, created)
        row = self.model.rows.get(task_id)
        status = IN_PROGRESS if row is None or row.status is not IN_PROGRESS else DONE
        self.submit([self.build(("move", pick % NEVER, status, "current", owner, VERDICT, None))])

    @precondition(lambda self: self.history)
    @rule(data=st.data(), numbered=st.booleans())
    def resend_verbatim(self, data: st.DataObject, numbered: bool) -> None:
        """D2: a delta applied before, sent again (as it was sent, or as the file has it),
        is a duplicate and changes nothing."""
        delta = data.draw(st.sampled_from(self.history))
        again = delta if numbered else _content(delta)
        rows, seq = copy.deepcopy(self.state.rows), self.state.seq
        assert self.model.feed(again) == DUPLICATE
        assert self.state.apply_batch([again], at=AT) == []
        with self.ledger.locked():
            assert self.ledger.append([again], at=AT) == []
        assert self.state.rows == rows and self.state.seq == seq

    @precondition(lambda self: self.history)
    @rule(data=st.data(), change=st.sampled_from(["reason", "owner", "status", "base"]))
    def resend_forged(self, data: st.DataObject, change: str) -> None:
        """D2: an old delta_id with other content is refused with LEDGER_INCONSISTENT."""
        delta = _content(data.draw(st.sampled_from(self.history)))
        if change == "reason":
            forged = attrs.evolve(delta, reason=delta.reason + " (edited)")
        elif change == "owner":
            forged = attrs.evolve(delta, owner=delta.owner + "-x")
        elif change == "status":
            other = CANCELED if delta.status is not CANCELED else FAILED
            forged = attrs.evolve(delta, status=other)
        else:
            forged = attrs.evolve(delta, x_base_version=(delta.x_base_version or 0) + 1)
        assert self.model.judge(forged) == "LEDGER_INCONSISTENT"
        self.submit([forged])

    @rule(
        specs=st.lists(delta_specs, min_size=1, max_size=3),
        poison=st.sampled_from(["none", "unknown-task", "forged"]),
        where=st.integers(min_value=0, max_value=3),
        data=st.data(),
    )
    def batch(self, specs: list[Spec], poison: str, where: int, data: st.DataObject) -> None:
        """All or nothing: a batch with one bad delta applies none of its deltas."""
        deltas = []
        scratch = self.model.copy()  # one writer's batch: each delta sees the ones before it
        for spec in specs:
            delta = self.build(spec, scratch)
            scratch.feed(delta)
            deltas.append(delta)
        if self.history and data.draw(st.booleans()):
            deltas.insert(0, _content(data.draw(st.sampled_from(self.history))))  # a duplicate
        if poison == "unknown-task" or (poison == "forged" and not self.history):
            bad = LedgerDelta(
                task_id=NEVER_CREATED,
                status=BLOCKED,
                owner="",
                reason="no such task",
                delta_id=self.fresh_id(),
            )
            deltas.insert(min(where, len(deltas)), bad)
        elif poison == "forged":
            old = _content(data.draw(st.sampled_from(self.history)))
            deltas.insert(min(where, len(deltas)), attrs.evolve(old, reason=old.reason + "!"))
        self.submit(deltas)

    @precondition(lambda self: len(self.history) >= 2)
    @rule(data=st.data())
    def reorder(self, data: st.DataObject) -> None:
        """Apply the history in another interleaving of its tasks, with duplicates, to a
        fresh fold: every delta is judged as the model judges it there, and a task whose
        deltas all applied ends as it ended in the original order (its own deltas decide
        its row; the order among tasks does not matter)."""
        stripped = [attrs.evolve(_content(d), x_base_version=None) for d in self.history]
        order = data.draw(st.permutations(range(len(stripped))))
        by_task: dict[str, list[LedgerDelta]] = {}
        for delta in stripped:
            by_task.setdefault(delta.task_id, []).append(delta)
        cursor = {task_id: 0 for task_id in by_task}
        interleaved = []
        for index in order:  # a random merge that keeps each task's own order (D1)
            task_id = stripped[index].task_id
            interleaved.append(by_task[task_id][cursor[task_id]])
            cursor[task_id] += 1
        copies = data.draw(st.lists(st.integers(0, len(interleaved) - 1), max_size=3))
        for position in sorted(copies, reverse=True):
            interleaved.insert(position + 1, interleaved[position])  # delivered twice

        model, state = Model(), LedgerState()
        refused: set[str] = set()
        for delta in interleaved:
            expected = model.feed(delta)
            try:
                applied = state.apply_batch([delta], at=AT)
            except BoardError as exc:
                assert exc.code == expected, delta
                refused.add(delta.task_id)
                continue
            assert expected == (APPLIED if applied else DUPLICATE), delta
        assert_rows_match(state, model)
        for task_id, row in model.rows.items():
            if task_id not in refused:
                original = self.model.rows[task_id]
                assert (row.status, row.owner, row.attempts) == (
                    original.status,
                    original.owner,
                    original.attempts,
                )

    # -- invariants -------------------------------------------------------------------

    @invariant()
    def rows_equal_the_model(self) -> None:
        assert_rows_match(self.state, self.model)
        assert len(self.state.index) == self.state.seq

    @invariant()
    def no_conflicting_locks_in_progress(self) -> None:
        holding = [r for r in self.state.rows.values() if r.status is IN_PROGRESS]
        for i, first in enumerate(holding):
            for second in holding[i + 1 :]:
                for a in first.locks:
                    for b in second.locks:
                        assert not resources_conflict(a, b), (first.task_id, a, second.task_id, b)
        expected = sorted(
            (task_id, resource)
            for task_id, row in self.model.rows.items()
            if row.status is IN_PROGRESS
            for resource in row.locks
        )
        assert self.state.active_locks() == expected

    @invariant()
    def versions_only_grow(self) -> None:
        for task_id, row in self.state.rows.items():
            assert self.versions.get(task_id, 0) <= row.version <= self.state.seq
            self.versions[task_id] = row.version

    @invariant()
    def the_files_hold_the_same_ledger(self) -> None:
        fresh = Ledger(self.open_store(), snapshot_every=3).read()  # snapshot + tail
        assert fresh.rows == self.state.rows and fresh.seq == self.state.seq
        follower = self.reader.read()  # folds only what was appended since its last read
        assert follower.rows == self.state.rows and follower.seq == self.state.seq

    @invariant()
    def replaying_the_file_changes_nothing(self) -> None:
        stored = self.stored()
        if not stored:
            return
        lines = [
            parse_ledger_delta(json.loads(line), source=f"line {number}", strict=True)
            for number, line in enumerate(stored.splitlines(), 1)
        ]
        full = LedgerState()  # a full fold, no snapshot
        assert full.apply_batch(lines, at=AT) == lines  # each line applies, numbered as it is
        assert full.rows == self.state.rows and full.seq == self.state.seq
        for _ in range(2):
            assert full.apply_batch(lines, at=AT) == []
            assert full.rows == self.state.rows and full.seq == self.state.seq


def assert_rows_match(state: LedgerState, model: Model) -> None:
    assert state.seq == model.seq
    assert set(state.rows) == set(model.rows)
    for task_id, expected in model.rows.items():
        row = state.rows[task_id]
        got = (row.status, row.owner, row.attempts, row.version)
        assert got == (expected.status, expected.owner, expected.attempts, expected.version), (
            task_id
        )
        assert set(row.locks) == expected.locks
        assert list(row.task.dependencies) == list(expected.dependencies)


LedgerMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestLedgerMachine = LedgerMachine.TestCase
TestLedgerMachine.pytestmark = [pytest.mark.slow]


class PostgresLedgerMachine(LedgerMachine):
    """The same machine with its ledger in PostgreSQL: a board of its own per example, in
    the test session's schema; the writer, the long-lived reader and the fresh readers
    each on a connection of their own, as other processes would be."""

    dsn = ""  # set by the test that runs the machine

    def setup_store(self) -> None:
        from orchestrator.adapters.postgres.connection import connect
        from orchestrator.adapters.postgres.task_board import PostgresBoardStore

        self.board_id = f"model-{uuid.uuid4()}"
        self.stores: list[PostgresBoardStore] = []
        self.shared = connect(self.dsn, autocommit=True)  # the fresh readers'

    def open_store(self) -> Any:
        from orchestrator.adapters.postgres.task_board import PostgresBoardStore

        if len(self.stores) < 2:  # the writer and the long-lived reader
            store = PostgresBoardStore(self.dsn, self.board_id, migrate=False)
            self.stores.append(store)
            return store
        return PostgresBoardStore(self.dsn, self.board_id, conn=self.shared, migrate=False)

    def teardown(self) -> None:
        for store in self.stores:
            store.close()
        self.shared.close()


@pytest.mark.slow
def test_the_ledger_model_holds_in_postgresql(pg_dsn: str) -> None:
    PostgresLedgerMachine.dsn = pg_dsn
    run_state_machine_as_test(
        PostgresLedgerMachine,
        settings=settings(
            max_examples=40,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


# -- one batch that names a delta twice ---------------------------------------------------


def _create(task_id: str, delta_id: str) -> LedgerDelta:
    return LedgerDelta(
        task_id=task_id,
        status=TODO,
        owner="",
        reason=f"create {task_id}",
        delta_id=delta_id,
        x_base_version=0,
        x_create=make_task(task_id, [], ["src"]),
    )


def test_a_delta_twice_in_one_batch_applies_once() -> None:
    model, state = Model(), LedgerState()
    delta = _create("T-1", "T-1/create")
    assert model.feed_batch([delta, delta]) == (None, None)
    applied = state.apply_batch([delta, delta], at=AT)
    assert [d.delta_id for d in applied] == ["T-1/create"]
    assert_rows_match(state, model)


def test_one_delta_id_for_two_deltas_in_one_batch_is_refused(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    with ledger.locked():
        ledger.append([_create("T-1", "T-1/create")], at=AT)
        first = LedgerDelta(task_id="T-1", status=BLOCKED, owner="", reason="a", delta_id="same")
        second = LedgerDelta(task_id="T-1", status=TODO, owner="", reason="b", delta_id="same")
        with pytest.raises(BoardError) as refused:
            ledger.append([first, second], at=AT)
    assert refused.value.code == "LEDGER_INCONSISTENT"
    assert Ledger(tmp_path).read().seq == 1  # nothing written, and the file still loads
