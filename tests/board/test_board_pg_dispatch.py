"""``ctx.dispatch`` with its board in PostgreSQL: the engine's ``board_store`` factory
(what the CLI sets for a run on a store) gives the board of the run's id, and a dispatch
works there as on files: waves, the gateway, a refused result retried, resumes after
every pause that ask no answered task again, and no board directory left anywhere.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from test_dispatch import BoardFlow, result_for, task

from orchestrator import phase
from orchestrator.adapters.postgres.connection import shown
from orchestrator.adapters.postgres.task_board import PostgresBoardStore
from orchestrator.board.board import Board
from orchestrator.engine.engine import Engine
from orchestrator.testing import FakeClock, MockAgentInvoker, WorkflowHarness
from support.cli import orchestrate

TASKS = [
    task("T-1", ["src/api.py"], priority="high"),
    task("T-2", ["src"]),
    task("T-3", ["docs/api.md"], dependencies=("T-1",)),
]


class BoardReader(BoardFlow):
    """Dispatches, then reads its board back through ``ctx.board()``."""

    name = "board-reader"

    @phase(2)
    def tally(self, ctx: Any) -> dict[str, Any]:
        with ctx.board() as board:
            return {
                "where": board.location,
                "statuses": {t: r.status.value for t, r in board.state().rows.items()},
            }


class StoreHarness(WorkflowHarness):
    """The harness's engine, with its dispatch boards in the store at ``dsn``."""

    def __init__(self, *args: Any, dsn: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dsn = dsn

    def engine(self) -> Engine:
        engine = super().engine()
        engine.board_store = lambda run_id: PostgresBoardStore(self.dsn, run_id)
        return engine


def ids_from(run_id: str) -> Any:
    """New ids: ``run_id`` first (the run's), then random ones (its requests')."""
    first = [run_id]
    return lambda: first.pop() if first else str(uuid.uuid4())


def reply(dsn: str, context: dict[str, Any], prompt: str, plan: dict[Any, str]) -> str:
    """A subagent's answer to one ask: the packet read from the store's board."""
    task_id, attempt = context["x_task_id"], context["x_attempt"]
    assert context["x_store"] == shown(dsn) and context["x_board"].startswith("board ")
    with PostgresBoardStore(dsn, context["x_board_id"]) as store:
        raw, where = Board(store=store).packet_text(task_id, attempt)
    assert where == context["x_packet"] and raw.decode() in prompt
    assert f"--store {store.name} --board " in prompt
    return json.dumps(result_for(json.loads(raw), plan.get((task_id, attempt), "pass")))


def test_dispatch_keeps_its_board_in_the_store_in_process(pg_dsn: str, tmp_path: Path) -> None:
    run_id = str(uuid.uuid4())  # the session's schema is shared: a board of its own
    mock = MockAgentInvoker()
    asked: list[tuple[str, int]] = []

    def answer(prompt: str) -> str:
        context = mock.invocations[-1]["kwargs"]["context"]
        asked.append((context["x_task_id"], context["x_attempt"]))
        return reply(pg_dsn, context, prompt, {("T-2", 1): "stray"})

    for agent in BoardFlow.agents:
        mock.add_response(agent, answer)
    harness = StoreHarness(
        BoardReader, tmp_path, invoker=mock, clock=FakeClock(), new_id=ids_from(run_id), dsn=pg_dsn
    )
    outcome = harness.run({"tasks": TASKS})
    assert outcome.status == "completed", outcome
    assert sorted(asked) == [("T-1", 1), ("T-2", 1), ("T-2", 2), ("T-3", 1)]
    assert not (tmp_path / ".board").exists()
    tally = outcome.outputs["tally"]
    assert tally["where"] == f"board {run_id} in {shown(pg_dsn)}"
    assert tally["statuses"] == {"T-1": "done", "T-2": "done", "T-3": "done"}
    with PostgresBoardStore(pg_dsn, run_id) as store:
        board = Board(store=store)
        assert board.run_id == run_id
        rows = board.state().rows
        assert {t: (r.status.value, r.attempts) for t, r in rows.items()} == {
            "T-1": ("done", 1),
            "T-2": ("done", 2),
            "T-3": ("done", 1),
        }
        assert rows["T-2"].verdict == "verdicts/T-2.2.json"
        assert board.worklog("T-2")[-1]["code"] == "SCOPE_VIOLATION"


def test_dispatch_on_the_store_resumes_after_every_pause(pg_dsn: str, tmp_path: Path) -> None:
    run_id = str(uuid.uuid4())
    harness = StoreHarness(
        BoardFlow, tmp_path, clock=FakeClock(), new_id=ids_from(run_id), dsn=pg_dsn
    )
    outcome = harness.run({"tasks": TASKS, "max_attempts": 2})
    waves, plan = [], {("T-1", 1): "TIMEOUT"}
    while outcome.status == "paused":
        waves.append(sorted(r.context["x_task_id"] for r in outcome.pending))
        for request in outcome.pending:
            context = request.context
            key = (context["x_task_id"], context["x_attempt"])
            if plan.get(key) == "TIMEOUT":
                harness.respond(
                    request.request_id,
                    "",
                    status="timeout",
                    error_type="TIMEOUT",
                    error_message="no answer",
                )
            else:
                harness.respond(request.request_id, reply(pg_dsn, context, request.prompt, plan))
        outcome = harness.resume()
    assert outcome.status == "completed", outcome
    assert waves == [["T-1"], ["T-1"], ["T-2", "T-3"]]  # T-2 waits for src/api.py
    with PostgresBoardStore(pg_dsn, run_id) as store:
        ids = [r[0] for r in store.conn.execute(
            "select delta_id from board_ledger where board_id = %s order by seq", (run_id,)
        ).fetchall()]  # fmt: skip
    assert Counter(ids).most_common(1)[0][1] == 1  # every delta once
    assert "T-1/1/blocked" in ids and "T-1/2/done" in ids


@pytest.mark.slow
def test_a_run_in_the_store_is_answered_by_the_watchdog_and_board_submit(
    pg_dsn: str, tmp_path: Path
) -> None:
    """The run itself in the store too: ``watch_store_board`` times out a stale task and
    answers its pending request TIMEOUT in the store, and ``orchestrate board submit
    --store`` delivers a subagent's result to the request waiting for it; each resume
    then goes on from those answers."""
    from orchestrator.adapters.postgres.store import PostgresStore
    from orchestrator.cli.board_handoff import watch_store_board

    run_id = str(uuid.uuid4())
    with PostgresStore(pg_dsn) as runs:

        def engine() -> Engine:
            made = Engine(
                BoardFlow, bridge=runs.bridge(run_id), clock=FakeClock(), new_id=ids_from(run_id)
            )
            made.board_store = lambda rid: PostgresBoardStore(pg_dsn, rid)
            return made

        outcome = engine().start(
            workflow_ref="test_dispatch:BoardFlow",
            workdir=tmp_path,
            inputs={"tasks": TASKS},
            run_id=run_id,
        )
        assert outcome.status == "paused"
        assert [r.context["x_task_id"] for r in outcome.pending] == ["T-1"]
        # The fake clock of the run is years behind: T-1's subagent looks silent.
        (timed_out,) = watch_store_board(pg_dsn, run_id)
        assert (timed_out.task_id, timed_out.x_code.value) == ("T-1", "TASK_TIMEOUT")
        assert runs.advanceable() >= 1  # the TIMEOUT answer makes the run able to go on
        outcome = engine().resume()
        assert outcome.status == "paused"
        (request,) = outcome.pending
        assert (request.context["x_task_id"], request.context["x_attempt"]) == ("T-1", 2)

        with PostgresBoardStore(pg_dsn, run_id) as store:
            raw, _ = Board(store=store).packet_text("T-1", 2)
        answer = json.dumps(result_for(json.loads(raw)))
        where = ["--store", pg_dsn, "--board", run_id, "--task", "T-1"]
        submitted = orchestrate("board", "submit", *where, stdin=answer)
        assert submitted.returncode == 0, submitted.stderr
        assert (
            f"run {run_id} request {request.request_id}"
            in json.loads(submitted.stdout)["delivered"]
        )
        assert [p.request_id for p in runs.pending(run_id)] == [request.request_id]
        outcome = engine().resume()
        assert outcome.status == "paused"  # the next wave: T-2 and T-3
        assert sorted(r.context["x_task_id"] for r in outcome.pending) == ["T-2", "T-3"]
        with PostgresBoardStore(pg_dsn, run_id) as store:
            row = Board(store=store).state().rows["T-1"]
        assert (row.status.value, row.attempts) == ("done", 2)


@pytest.mark.slow
def test_any_worker_runs_the_watchdog_of_a_waiting_run_s_board(pg_dsn: str, tmp_path: Path) -> None:
    """A run in the store waits for T-1, whose subagent has gone silent: an ``orchestrate
    worker`` with nothing else to do times the task out on the run's board, and the
    TIMEOUT answer lets it (or any worker) take the run on to T-1's second attempt."""

    from orchestrator.adapters.postgres.store import PostgresStore

    run_id = str(uuid.uuid4())
    with PostgresStore(pg_dsn) as runs:
        engine = Engine(
            BoardFlow, bridge=runs.bridge(run_id), clock=FakeClock(), new_id=ids_from(run_id)
        )
        engine.board_store = lambda rid: PostgresBoardStore(pg_dsn, rid)
        outcome = engine.start(
            workflow_ref="test_dispatch:BoardFlow",
            workdir=tmp_path,
            inputs={"tasks": TASKS},
            run_id=run_id,
        )
        assert [r.context["x_task_id"] for r in outcome.pending] == ["T-1"]
    where = {"PYTHONPATH": str(Path(__file__).parent)}  # where test_dispatch is
    worker = orchestrate("worker", "--store", pg_dsn, "--until-idle", env=where)
    assert worker.returncode == 0, worker.stderr
    assert f"board {run_id}: 1 stale task timed out" in worker.stderr
    with PostgresStore(pg_dsn) as runs:
        (waiting,) = runs.pending(run_id)
    request = json.loads(waiting.document)
    assert (request["context"]["x_task_id"], request["context"]["x_attempt"]) == ("T-1", 2)
