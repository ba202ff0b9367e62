"""The page's places: one class over the ``RunStore`` port, for a work directory and for
a PostgreSQL store alike; a store is shown by its DSN as written (without a password)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from orchestrator import Engine, Workflow, phase
from orchestrator._ports import OpenRunInput
from orchestrator.cli.run_store import directory_store, page_store, store_at
from orchestrator.cli.ui.places import Place
from orchestrator.testing import FakeClock

PROMPT = (
    "You are a writer of short lines. Write one line about the sea, in plain words, and "
    "answer with that line alone."
)


class Line(Workflow):
    name = "ui-places"
    agents = ("writer",)

    @phase(1)
    def write(self, ctx: Any) -> dict[str, Any]:
        return {"text": ctx.ask("writer", PROMPT)}


def paused_run(dsn: str | None, workdir: Path) -> str:
    """A run paused on one request, started as ``orchestrate run`` starts one."""
    run_id = str(uuid.uuid4())
    store = store_at(dsn, workdir)
    try:
        bridge = store.bridge(OpenRunInput(run_id=run_id, workflow_name=Line.name))
        outcome = Engine(Line, bridge=bridge, clock=FakeClock()).start(
            workflow_ref="tests:Line", workdir=workdir, run_id=run_id
        )
    finally:
        store.close()
    assert outcome.status == "paused", outcome.message
    return run_id


def test_a_store_is_shown_by_its_dsn_with_every_slash(pg_dsn: str, tmp_path: Path) -> None:
    place = Place(page_store(pg_dsn))
    run_id = paused_run(pg_dsn, tmp_path)
    assert place.label.startswith("postgresql:///")
    (row,) = [r for r in place.rows(1) if r.ref.run_id == run_id]
    assert row.where == place.label and row.where.startswith("postgresql:///")
    assert (row.status, row.waiting_for) == ("paused", 1)


def test_a_run_is_answered_through_the_place_on_either_store(pg_dsn: str, tmp_path: Path) -> None:
    places = {None: Place(directory_store(tmp_path), workdir=tmp_path)}
    places[pg_dsn] = Place(page_store(pg_dsn))
    for dsn, place in places.items():
        run_id = paused_run(dsn, tmp_path)
        loaded = place.load(run_id)
        (request_id,) = [r.request_id for r in loaded.state.agent_requests]
        assert loaded.problem is None
        assert loaded.live and place.answered(run_id, [request_id]) == frozenset()
        assert place.answer(run_id, request_id, "Waves.") == 0
        assert place.answered(run_id, [request_id]) == {request_id}
        assert place.command(run_id)[0] in ("--workdir", "--store")
