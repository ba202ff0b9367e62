"""The task board under real concurrency: eight worker processes on one board.

Each worker (``tests/support/board_race_process.py``) appends its worklog entries through
``Board.append_worklog`` and, between appends, races the others for tasks whose lock
scopes overlap (``src`` over ``src/api.py`` and ``src/db``, two tasks on ``src/api.py``, a
task on ``tests`` and ``docs/api.md`` at once), and writes on purpose with versions that
may be, or certainly are, stale. The workers are released together through a pipe; no
outcome depends on timing: whatever the race gives, the run is checked afterwards.

- Worklogs: every line parses and is byte-for-byte what its worker wrote; every
  (worker, sequence number) is there exactly once, in its worker's order.
- Locks: no worker ever saw a conflicting holder in the shared holder table while it held
  a task; replaying the ledger, no two tasks in progress ever hold conflicting resources.
- Writes: every attempt a worker journaled as applied is in the ledger exactly once, as it
  was asked for; every refused one is absent; the ledger holds nothing no worker claims;
  a write based on a version another writer had moved past is refused with
  ``CONCURRENCY_CONFLICT``, never applied and never dropped without an error.
- The ledger: ``x_seq`` runs 1..n without a gap, no ``delta_id`` twice, and a fresh
  reader folds it to the same rows as the replay.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import pytest

from orchestrator.board.board import Board
from orchestrator.formats.board_documents import Task, TaskStatus, TaskType
from orchestrator.formats.convert import unstructure
from orchestrator.formats.scope import resources_conflict
from orchestrator.storage.ndjson import iter_records
from support.board_race_process import RUN_ID, SCOPES, TASK_IDS, worklog_entry

WORKER = Path(__file__).parents[1] / "support" / "board_race_process.py"
WORKERS = 8
RUN_TIMEOUT = 1800
CONFLICT = "CONCURRENCY_CONFLICT"
# The transitions of docs/board.md, restated so the replay does not trust the code it checks.
LEGAL = {
    "todo": {"in_progress", "blocked", "failed", "canceled"},
    "in_progress": {"done", "blocked", "failed", "canceled"},
    "blocked": {"todo", "in_progress", "failed", "canceled"},
}


@attrs.frozen
class Race:
    """One finished run: the board, what the workers journaled, the ledger as JSON."""

    board: Path
    count: int
    journal: list[dict[str, Any]]
    ledger: list[dict[str, Any]]
    seconds: float


@attrs.frozen
class Replay:
    """The ledger folded independently of the board's code."""

    status: dict[str, str]
    version: dict[str, int]
    violations: list[str]
    most_held_at_once: int


def make_board(directory: Path) -> Board:
    board = Board.create(directory, run_id=RUN_ID, objective="eight workers, one board")
    board.create_tasks(
        [
            Task(
                task_id=task_id,
                title=f"work on {', '.join(scope)}",
                type=TaskType.PARALLELIZABLE,
                dependencies=[],
                lock_scope=scope,
                forbidden_scope=[],
                acceptance_criteria=["the race is checked afterwards"],
                worklog_path=f"worklogs/{task_id}.jsonl",
                timeout_seconds=60,
                heartbeat_interval_seconds=10,
            )
            for task_id, scope in SCOPES.items()
        ]
    )
    return board


def run_race(directory: Path, count: int) -> Race:
    board = directory / "board"
    make_board(board)
    holders = directory / "holders.json"
    holders.write_bytes(b"{}")
    journals = [directory / f"journal-{worker}.jsonl" for worker in range(WORKERS)]
    start_read, start_write = os.pipe()
    try:
        workers = [
            subprocess.Popen(
                [
                    sys.executable,
                    str(WORKER),
                    str(board),
                    str(worker),
                    str(count),
                    "--holders",
                    str(holders),
                    "--journal",
                    str(journals[worker]),
                    "--start-fd",
                    str(start_read),
                ],
                pass_fds=(start_read,),
                stderr=subprocess.PIPE,
            )
            for worker in range(WORKERS)
        ]
    finally:
        os.close(start_read)
        started = time.monotonic()
        os.close(start_write)  # EOF on the pipe releases every worker at once
    try:
        for worker in workers:
            _, stderr = worker.communicate(timeout=RUN_TIMEOUT)
            assert worker.returncode == 0, stderr.decode()
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.communicate()
    seconds = time.monotonic() - started
    journal = [json.loads(line) for path in journals for line in path.read_text().splitlines()]
    raw = (board / "ledger.ndjson").read_bytes()
    assert raw.endswith(b"\n"), "the ledger ends in a torn line"
    ledger = [json.loads(line) for line in raw.split(b"\n")[:-1]]
    return Race(board, count, journal, ledger, seconds)


@pytest.fixture(
    scope="module",
    params=[
        pytest.param(200, id="8x200"),
        pytest.param(10_000, id="8x10000", marks=[pytest.mark.slow, pytest.mark.soak]),
    ],
)
def race(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Race:
    result = run_race(tmp_path_factory.mktemp("race"), request.param)
    print_summary(result)
    return result


def print_summary(race: Race) -> None:
    outcomes = Counter(
        (item["op"], item.get("outcome"), item.get("code"))
        for item in race.journal
        if item["op"] != "violation"
    )
    appends = WORKERS * race.count
    print(
        f"\n{WORKERS} workers x {race.count} worklog appends = {appends} in {race.seconds:.1f} s "
        f"({appends / race.seconds:.0f}/s); {len(race.ledger)} ledger deltas; "
        f"locks taken {outcomes['assign', 'applied', None]}, "
        f"refused LOCK_CONFLICT {outcomes['assign', 'refused', 'LOCK_CONFLICT']}, "
        f"INVALID_TRANSITION {outcomes['assign', 'refused', 'INVALID_TRANSITION']}; "
        f"{CONFLICT}: {sum(n for (_, _, code), n in outcomes.items() if code == CONFLICT)} "
        f"(stale on purpose {outcomes['stale', 'refused', CONFLICT]}, "
        f"parks {outcomes['park', 'refused', CONFLICT]} of "
        f"{sum(n for (op, _, _), n in outcomes.items() if op == 'park')}, "
        f"requeues {outcomes['requeue', 'refused', CONFLICT]}, "
        f"unparks {outcomes['unpark', 'refused', CONFLICT]}); "
        f"holder-table violations {sum(1 for i in race.journal if i['op'] == 'violation')}; "
        f"most tasks in progress at once {replay(race.ledger).most_held_at_once}"
    )


def replay(ledger: list[dict[str, Any]]) -> Replay:
    """Fold the ledger with plain JSON; note every moment two held locks conflict."""
    scope: dict[str, list[str]] = {}
    status: dict[str, str] = {}
    version: dict[str, int] = {}
    violations: list[str] = []
    most = 0
    for delta in ledger:
        task, seq = delta["task_id"], delta["x_seq"]
        if "x_create" in delta:
            assert task not in status, f"x_seq {seq}: {task} created twice"
            scope[task], status[task], version[task] = delta["x_create"]["lock_scope"], "todo", seq
            continue
        if delta.get("x_base_version") != version[task]:
            violations.append(
                f"x_seq {seq}: {delta['delta_id']} was based on version "
                f"{delta.get('x_base_version')}, but {task} was at {version[task]}"
            )
        if delta["status"] not in LEGAL.get(status[task], set()):
            violations.append(f"x_seq {seq}: {task} went {status[task]} -> {delta['status']}")
        status[task], version[task] = delta["status"], seq
        held = sorted(t for t, s in status.items() if s == "in_progress")
        most = max(most, len(held))
        violations += [
            f"x_seq {seq}: {a} holds {ra} while {b} holds {rb}"
            for i, a in enumerate(held)
            for b in held[i + 1 :]
            for ra in scope[a]
            for rb in scope[b]
            if resources_conflict(ra, rb)
        ]
    return Replay(status, version, violations, most)


# --- worklogs -------------------------------------------------------------------------------


@pytest.mark.slow
def test_every_worklog_line_is_intact_and_present_once(race: Race) -> None:
    seen: Counter[tuple[int, int]] = Counter()
    orchestrator_entries: Counter[str] = Counter()
    for task_id in TASK_IDS:
        path = race.board / "worklogs" / f"{task_id}.jsonl"
        raw = path.read_bytes()
        assert raw.endswith(b"\n") and b"\n\n" not in raw, f"{path.name}: torn or blank line"
        records = [record for _, record in iter_records(path)]  # every line parses
        assert len(records) == raw.count(b"\n")
        last: dict[int, int] = {}
        for record in records:
            if record["actor"] == "orchestrator":  # a release's or park's final entry
                orchestrator_entries[record["x_delta_id"]] += 1
                continue
            worker, seq = int(record["actor"][1:]), int(record["action"].split()[1])
            assert record == unstructure(worklog_entry(worker, seq)), (
                f"{path.name}: w{worker}'s entry {seq} was altered"
            )
            assert seq > last.get(worker, -1), f"{path.name}: w{worker}'s {seq} out of order"
            last[worker] = seq
            seen[worker, seq] += 1
    assert [pair for pair, n in seen.items() if n > 1] == []
    assert len(seen) == WORKERS * race.count
    blocked = [d["delta_id"] for d in race.ledger if d["status"] == "blocked"]
    assert sorted(orchestrator_entries.elements()) == sorted(blocked)


# --- locks ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_no_worker_ever_saw_a_conflicting_holder(race: Race) -> None:
    assert [item for item in race.journal if item["op"] == "violation"] == []
    taken = [i for i in race.journal if i["op"] == "assign" and i["outcome"] == "applied"]
    assert taken  # the first assign of the run meets no holder
    # Right after its assign, each worker read its task as in progress under its own name.
    assert {(i["status_after"], i["owner_after"] == i["owner"]) for i in taken} == {
        ("in_progress", True)
    }


def test_replaying_the_ledger_no_two_tasks_ever_held_conflicting_locks(race: Race) -> None:
    folded = replay(race.ledger)
    assert folded.violations == []
    # Every lock was released in the end, and a fresh reader agrees with the replay.
    state = Board(race.board).state()
    assert {t: row.status.value for t, row in state.rows.items()} == folded.status
    assert {t: row.version for t, row in state.rows.items()} == folded.version
    assert set(folded.status.values()) == {TaskStatus.TODO.value}
    assert Board(race.board).lock_table() == []


# --- writes ---------------------------------------------------------------------------------


def test_every_write_is_in_the_ledger_once_as_journaled_and_nothing_else(race: Race) -> None:
    by_seq = {delta["x_seq"]: delta for delta in race.ledger}
    claims: dict[int, dict[str, Any]] = {}
    refused_reasons = set()
    for item in race.journal:
        if item["op"] == "violation":
            continue
        assert item["outcome"] in ("applied", "refused"), f"dropped without an error: {item}"
        if item["outcome"] == "refused":
            if "reason" in item:
                refused_reasons.add(item["reason"])
            continue
        assert item["x_seq"] not in claims, f"two workers claim x_seq {item['x_seq']}"
        claims[item["x_seq"]] = item
        delta = by_seq.get(item["x_seq"])
        assert delta is not None, f"applied but not in the ledger: {item}"
        wanted = {"task_id": item["task_id"], "owner": item["owner"], "delta_id": item["delta_id"]}
        if item["op"] == "assign":
            wanted["status"] = "in_progress"
        else:
            wanted |= {
                "status": item["status"],
                "reason": item["reason"],
                "x_base_version": item["base_version"],
            }
        assert {key: delta.get(key) for key in wanted} == wanted
    unclaimed = [d for d in race.ledger if "x_create" not in d and d["x_seq"] not in claims]
    assert unclaimed == [], "the ledger holds writes no worker made"
    assert [d for d in race.ledger if d["reason"] in refused_reasons] == []


def test_a_write_on_a_stale_version_is_refused_with_a_concurrency_conflict(race: Race) -> None:
    on_purpose = [item for item in race.journal if item.get("must_refuse")]
    assert on_purpose, "no worker took a lock, so no stale write was tried"
    assert [i for i in on_purpose if (i["outcome"], i.get("code")) != ("refused", CONFLICT)] == []
    task_of = {delta["x_seq"]: delta["task_id"] for delta in race.ledger}
    for item in race.journal:
        if item.get("code") != CONFLICT:
            continue
        # The version the board compared with is a real, later change of that very task.
        current = item["details"]["current_version"]
        assert item["details"]["seen_version"] == item["base_version"]
        assert current > item["base_version"]
        assert task_of[current] == item["task_id"]
    refused = Counter(item.get("code") for item in race.journal if item.get("outcome") == "refused")
    assert set(refused) <= {CONFLICT, "LOCK_CONFLICT", "INVALID_TRANSITION"}


# --- the ledger -----------------------------------------------------------------------------


def test_the_ledger_is_numbered_without_gaps_and_ids_are_unique(race: Race) -> None:
    assert [delta["x_seq"] for delta in race.ledger] == list(range(1, len(race.ledger) + 1))
    ids = Counter(delta["delta_id"] for delta in race.ledger)
    assert [delta_id for delta_id, n in ids.items() if n > 1] == []
    assert len(race.ledger) > len(SCOPES)
