"""Many finished runs made cheaply for the tests of ``orchestrate prune``: a few real runs
of ``store_flows.Chatter``, then copies of them under new run ids, each copy's state
signed again as orchestrate signs one (the readers take them as they take the real ones)."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import uuid
from pathlib import Path
from typing import Any

from support.cli import orchestrate

REPO = Path(__file__).resolve().parents[2]
FLOW = f"{REPO / 'tests' / 'support' / 'store_flows.py'}:Chatter"
AGENT = f"subprocess:{sys.executable} {REPO / 'tests' / 'support' / 'echo_agent.py'}"


def real_runs(workdir: Path, count: int, *extra: str) -> list[str]:
    """Run Chatter to its end ``count`` times; the run ids, in order."""
    ids: list[str] = []
    for _ in range(count):
        before = kept_ids(workdir) if (workdir / ".orchestrator" / "runs").is_dir() else set()
        done = orchestrate("run", FLOW, "--workdir", workdir, "--agent", AGENT, *extra)
        assert done.returncode == 0, done.stderr
        (new,) = kept_ids(workdir) - before
        ids.append(new)
    return ids


def kept_ids(workdir: Path) -> set[str]:
    return set(os.listdir(workdir / ".orchestrator" / "runs"))


def resign(raw: bytes, changes: dict[str, str]) -> bytes:
    """A run's kept state with each text of ``changes`` replaced (its run id, its home),
    signed again as orchestrate signs one."""
    import json

    from orchestrator.formats.bridge_codec import parse_state
    from orchestrator.storage.state_key import signed_document

    for old, new in changes.items():
        raw = raw.replace(old.encode(), new.encode())
    return signed_document(parse_state(json.loads(raw), source="copy"))


def clone_run(source: Path, workdir: Path, new: str, *, moment: float) -> None:
    """Copy the run directory ``source`` (of another run, maybe of another work
    directory) into ``workdir`` as run ``new``'s: every mention of its id changed, its
    state signed again for ``workdir``, its last checkpoint noted in the register as the
    bridge notes it; its state's time ``moment``."""
    import json

    from orchestrator.storage.checkpoints import home_of, note_checkpoint

    old = source.name
    home = source.parents[2]
    changes = {
        old: new,
        old.replace("-", ""): new.replace("-", ""),  # its trace id
        home_of(home): home_of(workdir),
        str(home): str(workdir),
    }
    target = workdir / ".orchestrator" / "runs" / new
    shutil.copytree(source, target)
    for path in target.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            if path.name == "state.json" and path.parent == target:
                data = resign(data, changes)
                path.write_bytes(data)
                record = json.loads(data)["phase_data"]["x_orchestrator"]
                note_checkpoint(new, record["started_at"], home_of(workdir), record["revision"])
            elif old.encode() in data:
                path.write_bytes(data.replace(old.encode(), new.encode()))
    os.utime(target / "state.json", (moment, moment))


def clone_many(
    sources: list[Path], workdir: Path, count: int, *, now: float, first: int = 1
) -> dict[str, float]:
    """``count`` copies of the run directories ``sources`` (in turn) in ``workdir``, the
    i-th last changed i hours before ``now``; each copy's id and time."""
    made = {}
    for i in range(count):
        new = str(uuid.UUID(int=first + i))
        moment = now - 3600.0 * (i + 1)
        clone_run(sources[i % len(sources)], workdir, new, moment=moment)
        made[new] = moment
    return made


def register_entry_of(workdir: Path, run_id: str) -> Path:
    """The checkpoint register's entry of run ``run_id`` of ``workdir`` (kept or not)."""
    import json

    from orchestrator.storage.checkpoints import home_of, register_entry

    state = workdir / ".orchestrator" / "runs" / run_id / "state.json"
    record = json.loads(state.read_bytes())["phase_data"]["x_orchestrator"]
    return register_entry(run_id, record["started_at"], home_of(workdir))


def tree_digests(directory: Path) -> dict[str, str]:
    """Every file under ``directory`` by its relative path, with its SHA-256."""
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def run_digests(workdir: Path) -> dict[str, dict[str, str]]:
    runs = workdir / ".orchestrator" / "runs"
    return {name: tree_digests(runs / name) for name in sorted(os.listdir(runs))}


def listing(workdir: Path) -> dict[str, Any]:
    """Every run the work directory's store lists, read whole, by id: its status."""
    from orchestrator._ports import ListRunsInput, RunInput
    from orchestrator.adapters.file_runs import FileRunStore

    store = FileRunStore(workdir)
    found = {}
    for row in store.list_runs(ListRunsInput(limit=100_000)):
        read = store.read_run(RunInput(run_id=row.run_id))
        assert read.problem is None, (row.run_id, read.problem)
        found[row.run_id] = row.status
    return found


# -- a PostgreSQL store ---------------------------------------------------------------------

#: The tables that hold rows of a run beside its ``runs`` row, and their columns after the id.
RUN_TABLES = {
    "requests": ("request_id", "position", "document"),
    "responses": ("request_id", "document", "sha256", "received_at"),
    "events": ("seq", "line"),
    "run_files": ("path", "content"),
}
RUN_COLUMNS = (
    "workflow_name",
    "workflow_ref",
    "status",
    "state",
    "state_version",
    "history",
    "start_args",
    "inbox",
    "handled",
    "wake_at",
    "created_at",
)


def pg_real_runs(dsn: str, count: int) -> list[str]:
    ids = []
    for _ in range(count):
        done = orchestrate("run", FLOW, "--store", dsn, "--agent", AGENT)
        assert done.returncode == 0, done.stderr
        ids.append(done.stdout.strip())
    return ids


def pg_clone_many(dsn: str, sources: list[str], count: int, *, now: Any) -> dict[str, Any]:
    """``count`` copies of the ended runs ``sources`` (in turn), each row of a run copied
    with its id changed and its history signed again, the i-th last changed i hours
    before ``now``; each copy's id and time. One transaction."""
    from datetime import timedelta

    import psycopg
    from psycopg.types.json import Jsonb

    made = {}
    with psycopg.connect(dsn) as conn:
        rows = {}
        for source in sources:
            run = conn.execute(
                f"select {', '.join(RUN_COLUMNS)} from runs where run_id = %s", (source,)
            ).fetchone()
            assert run is not None and run[3] is None, source  # ended: no live state
            others = {
                table: conn.execute(
                    f"select {', '.join(columns)} from {table} where run_id = %s", (source,)
                ).fetchall()
                for table, columns in RUN_TABLES.items()
            }
            archive = conn.execute(
                "select line from archive where run_id = %s order by seq", (source,)
            ).fetchall()
            rows[source] = (run, others, archive)
        for i in range(count):
            source = sources[i % len(sources)]
            new = str(uuid.UUID(int=i + 1))
            moment = now - timedelta(hours=i + 1)
            run, others, archive = rows[source]
            changes = {source: new, source.replace("-", ""): new.replace("-", "")}
            values = list(run)
            values[5] = resign(bytes(values[5]), changes)
            values[6] = None if values[6] is None else Jsonb(values[6])
            conn.execute(
                f"insert into runs (run_id, {', '.join(RUN_COLUMNS)}, updated_at) "
                f"values ({', '.join(['%s'] * (len(RUN_COLUMNS) + 2))})",
                (new, *values, moment),
            )
            for table, columns in RUN_TABLES.items():
                copied = [(new, *(_changed(v, source, new) for v in row)) for row in others[table]]
                if copied:
                    with conn.cursor() as cursor:
                        cursor.executemany(
                            f"insert into {table} (run_id, {', '.join(columns)}) "
                            f"values ({', '.join(['%s'] * (len(columns) + 1))})",
                            copied,
                        )
            for (line,) in archive:
                conn.execute(
                    "insert into archive (run_id, line) values (%s, %s)",
                    (new, _changed(line, source, new)),
                )
            made[new] = moment
    return made


def _changed(value: Any, old: str, new: str) -> Any:
    if isinstance(value, (bytes, memoryview)):
        return bytes(value).replace(old.encode(), new.encode())
    return value


def pg_run_digests(dsn: str) -> dict[str, str]:
    """Each run of the store, by its id: a digest of its row and of every row of it in the
    other tables (what a whole run is)."""
    import psycopg

    found: dict[str, Any] = {}
    with psycopg.connect(dsn) as conn:
        for row in conn.execute(
            f"select run_id, {', '.join(RUN_COLUMNS)}, updated_at from runs order by run_id"
        ):
            found[row[0]] = hashlib.sha256(repr(row[1:]).encode())
        for table, columns in {**RUN_TABLES, "archive": ("seq", "line")}.items():
            for row in conn.execute(
                f"select run_id, {', '.join(columns)} from {table} order by run_id, {columns[0]}"
            ):
                assert row[0] in found, f"{table} holds a row of run {row[0]}, which is gone"
                found[row[0]].update(repr((table, *row[1:])).encode())
    return {run_id: digest.hexdigest() for run_id, digest in found.items()}
