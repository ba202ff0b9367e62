"""Which PostgreSQL runs a worker takes on: besides runs that can advance, a run whose
end was cut short (its last checkpoint says completed or cancelled, but the crash came
before the run's row was closed and its history kept) is finished by the next worker,
as ``resume`` finishes it on files.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from support import pg_fleet, pg_flows

pytestmark = pytest.mark.slow


class Crash(BaseException):
    """A process dying there (not an error any code would catch)."""


@pytest.mark.parametrize("end", ["completed", "cancelled"])
def test_a_run_whose_end_was_cut_short_is_finished_by_the_next_worker(
    pg_fresh_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, end: str
) -> None:
    from orchestrator.adapters.postgres.bridge import PostgresBridge
    from orchestrator.adapters.postgres.store import PostgresStore
    from orchestrator.cli.engines import engine_for
    from orchestrator.engine.loader import load_workflow

    env = pg_fleet.fleet_env(tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    run_id = str(uuid.uuid4())
    workflow = load_workflow(pg_fleet.RELAY)
    agent = f"subprocess:{pg_flows.agent_command()}"
    inputs = {"tag": run_id, **({"nap": "3600"} if end == "cancelled" else {})}

    def crash(self: Any, request: Any) -> str:
        raise Crash()

    with PostgresStore(pg_fresh_dsn) as store:
        engine = engine_for(store, run_id, workflow, agent)
        if end == "cancelled":  # paused on a long timer first, then cancelled
            engine.start(
                workflow_ref=pg_fleet.RELAY, workdir=tmp_path, inputs=inputs, run_id=run_id
            )
            engine = engine_for(store, run_id, workflow, agent)
        monkeypatch.setattr(PostgresBridge, "finish", crash)
        with pytest.raises(Crash):
            if end == "cancelled":
                engine.cancel()
            else:
                engine.start(
                    workflow_ref=pg_fleet.RELAY, workdir=tmp_path, inputs=inputs, run_id=run_id
                )
        monkeypatch.undo()
        assert store.run(run_id).status == end
        assert store.conn.execute(
            "select state is not null and history is null from runs where run_id = %s", (run_id,)
        ).fetchone() == (True,)

    log = tmp_path / "worker.err"
    worker = pg_fleet.start_worker(pg_fresh_dsn, env, log, "--until-idle")
    assert worker.wait(timeout=120) == 0, log.read_text()

    runs = pg_fleet.read_runs(pg_fresh_dsn)
    assert runs[run_id]["status"] == end, log.read_text()
    assert runs[run_id]["history"] is not None, f"the run's end was not finished: {log.read_text()}"
    if end == "completed":
        assert not pg_fleet.history_problems(run_id, runs[run_id])
        assert len(runs[run_id]["history"]["phase_data"]["seal"]["answers"]) == 3
