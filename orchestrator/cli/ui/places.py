"""Where the page finds runs: a work directory's files, or a PostgreSQL store.

Each served place is one of these; the browser names it by its number. Both give the
same things: the runs to list, a run's state, what of it is answered, an answer taken
through ``orchestrate respond``'s own validation, the command that resumes or recovers
it, its events and its evidence files.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from ..._errors import ContractError, NoInstanceError, OrchestratorError
from ...storage.runs import live_state_files, run_id_in, runs_dir
from .guard import read_evidence
from .runs import RunIndex, RunRef, RunRow

MAX_RESPONSE = 16 * 1024 * 1024  # as the file bridge reads one
#: An event line: (x_seq, its bytes without the newline, its name).
EventLine = tuple[int, bytes, str]


class Place(Protocol):
    label: str

    def rows(self, index: int) -> list[RunRow]: ...

    def load(self, run_id: str) -> tuple[Any, str, bool]:
        """The run's state (archived requests whole), where from, and whether it lives."""
        ...

    def answered(self, run_id: str, pending: list[str]) -> frozenset[str]: ...

    def answer(self, run_id: str, request_id: str, text: str) -> int:
        """Take the answer; how many of the run's requests still wait for one."""
        ...

    def command(self, run_id: str) -> list[str]:
        """The options that name this run to an ``orchestrate`` command."""
        ...

    def event_reader(self, run_id: str) -> Callable[[], list[EventLine]]: ...

    def files(self, run_id: str) -> list[str]: ...

    def read_file(self, run_id: str, relative: str) -> bytes | None: ...

    def boards(self) -> list[str]:
        """The ids of the task boards here ("" for a work directory's one board)."""
        ...

    def board(self, board_id: str) -> tuple[Any, list[bytes]]:
        """The board (``orchestrator.board.board.Board``) and its ledger's last lines;
        ``NoInstanceError`` when there is none by that id."""
        ...


class DirectoryPlace:
    """A work directory: its live instance and the runs it kept."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.label = str(workdir)
        self._index = RunIndex([workdir])

    def rows(self, index: int) -> list[RunRow]:
        from attrs import evolve

        return [
            evolve(row, ref=RunRef(directory=index, run_id=row.ref.run_id))
            for row in self._index.rows()
        ]

    def load(self, run_id: str) -> tuple[Any, str, bool]:
        from ...evidence.history import load_run

        state, source = load_run(self.workdir, run_id)
        return state, str(source), self._live_state(run_id) is not None

    def _live_state(self, run_id: str) -> Path | None:
        from ...storage.files import STATE_MAX_BYTES, read_regular_file

        for state_path in live_state_files(self.workdir):
            try:
                data = json.loads(read_regular_file(state_path, max_bytes=STATE_MAX_BYTES))
                if run_id_in(data, source=str(state_path)) == run_id:
                    return state_path
            except (OSError, ValueError, OrchestratorError):
                continue
        return None

    def answered(self, run_id: str, pending: list[str]) -> frozenset[str]:
        from ...formats.bridge import RESPONSE_FILE, RESPONSES_DIR
        from ...storage import beneath
        from ...storage.files import read_regular_file

        found = {r for r in pending if beneath.is_file(self.workdir / RESPONSES_DIR / f"{r}.json")}
        try:
            document = json.loads(
                read_regular_file(self.workdir / RESPONSE_FILE, max_bytes=1 << 24)
            )
        except (OSError, ValueError, OrchestratorError):
            document = None
        if isinstance(document, dict) and document.get("request_id") in pending:
            found.add(str(document["request_id"]))
        return frozenset(found)

    def answer(self, run_id: str, request_id: str, text: str) -> int:
        from ..instance import pending_of, write_response

        live = self._live_state(run_id)
        if live is None:
            raise NoInstanceError("the run is not live: there is nothing to answer")
        write_response(live, request_id=request_id, text=text)
        pending = [item["request"]["request_id"] for item in pending_of(self.workdir)]
        return len(pending) - len(self.answered(run_id, pending))

    def command(self, run_id: str) -> list[str]:
        return ["--workdir", str(self.workdir)]

    def event_reader(self, run_id: str) -> Callable[[], list[EventLine]]:
        from ..events import EventTail

        tail = EventTail(runs_dir(self.workdir) / run_id / "events.ndjson")

        def read_new() -> list[EventLine]:
            try:
                return [(e.seq, e.line, e.name) for e in tail.read_new()]
            except (FileNotFoundError, ContractError):
                return []

        return read_new

    def files(self, run_id: str) -> list[str]:
        run_dir = runs_dir(self.workdir) / run_id
        found = (p for p in run_dir.rglob("*") if p.is_file() and not p.is_symlink())
        return sorted(str(p.relative_to(run_dir)) for p in found)[:500]

    def read_file(self, run_id: str, relative: str) -> bytes | None:
        return read_evidence(runs_dir(self.workdir) / run_id, relative)

    def boards(self) -> list[str]:
        return [""] if (self.workdir / ".board" / "board.json").is_file() else []

    def board(self, board_id: str) -> tuple[Any, list[bytes]]:
        from ...board.board import Board

        if board_id or not self.boards():
            raise NoInstanceError(f"{self.workdir}: no task board here")
        directory = self.workdir / ".board"
        return Board(directory), last_lines(directory / "ledger.ndjson", 30)


class StorePlace:
    """A PostgreSQL store: every run in it (a connection per call: the page is not a
    worker, and holds nothing between requests)."""

    def __init__(self, dsn: str) -> None:
        from ...adapters.postgres.connection import shown

        self.dsn = dsn
        self.label = shown(dsn)

    def _store(self) -> Any:
        from ...adapters.postgres.store import PostgresStore

        return PostgresStore(self.dsn)

    def rows(self, index: int) -> list[RunRow]:
        with self._store() as store:
            found = store.runs(limit=10_000)
        return [
            RunRow(
                ref=RunRef(directory=index, run_id=r.run_id),
                workdir=Path(self.label),
                workflow=r.workflow_name,
                status=r.status,
                phase="",
                waiting_for=r.pending,
                updated=r.updated_at.timestamp(),
            )
            for r in found
        ]

    def load(self, run_id: str) -> tuple[Any, str, bool]:
        from ..store_runs import load_run

        with self._store() as store:
            state, source = load_run(store, run_id)
            live = store.run(run_id).status in ("running", "paused", "failed")
        return state, source, live

    def answered(self, run_id: str, pending: list[str]) -> frozenset[str]:
        with self._store() as store:
            rows = store.conn.execute(
                "select request_id from responses where run_id = %s", (run_id,)
            ).fetchall()
        return frozenset(r[0] for r in rows if r[0] in pending)

    def answer(self, run_id: str, request_id: str, text: str) -> int:
        from ..instance import choose_request, response_document

        with self._store() as store:
            pending = [p.request_id for p in store.pending(run_id)]
            choose_request(pending, request_id, where=f"run {run_id}")
            store.respond(run_id, response_document(request_id, text=text))
        return len(pending) - len(self.answered(run_id, pending))

    def command(self, run_id: str) -> list[str]:
        return ["--store", self.dsn, "--run", run_id]

    def event_reader(self, run_id: str) -> Callable[[], list[EventLine]]:
        last = 0

        def read_new() -> list[EventLine]:
            nonlocal last
            with self._store() as store:
                found = store.events(run_id, after=last)
            lines = []
            for seq, line in found:
                last = seq
                try:
                    name = str(json.loads(line).get("event", ""))
                except ValueError:
                    continue
                lines.append((seq, line.rstrip(b"\n"), name))
            return lines

        return read_new

    def files(self, run_id: str) -> list[str]:
        with self._store() as store:
            rows = store.conn.execute(
                "select path from run_files where run_id = %s order by path limit 500", (run_id,)
            ).fetchall()
            logged = bool(store.events(run_id, after=0)[:1])
        return sorted([str(r[0]) for r in rows] + (["events.ndjson"] if logged else []))

    def read_file(self, run_id: str, relative: str) -> bytes | None:
        if relative == "events.ndjson":
            with self._store() as store:
                return b"".join(line for _, line in store.events(run_id))
        with self._store() as store:
            row = store.conn.execute(
                "select content from run_files where run_id = %s and path = %s",
                (run_id, relative),
            ).fetchone()
        return None if row is None else bytes(row[0])

    def boards(self) -> list[str]:
        with self._store() as store:
            rows = store.conn.execute("select board_id from boards order by created_at desc")
            return [str(r[0]) for r in rows.fetchall()]

    def board(self, board_id: str) -> tuple[Any, list[bytes]]:
        from ...adapters.postgres import board_store
        from ...board.board import Board

        if board_id not in self.boards():
            raise NoInstanceError(f"{self.label}: no task board {board_id}")
        with self._store() as store:
            rows = store.conn.execute(
                "select document from board_ledger where board_id = %s order by seq desc limit 30",
                (board_id,),
            ).fetchall()
        return Board(store=board_store(self.dsn, board_id)), [bytes(r[0]) for r in reversed(rows)]


def last_lines(path: Path, count: int, *, window: int = 64 * 1024) -> list[bytes]:
    """The last ``count`` whole lines of ``path``, read from its end (a long ledger is
    not read whole for its tail), with no link followed."""
    import os

    from ...storage import beneath

    try:
        with open(beneath.open_file(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as file:
            size = file.seek(0, 2)
            file.seek(max(0, size - window))
            chunk = file.read()
    except (OSError, OrchestratorError):
        return []
    lines = chunk.splitlines()
    if size > window and lines:
        lines = lines[1:]  # the first may be cut
    return lines[-count:]
