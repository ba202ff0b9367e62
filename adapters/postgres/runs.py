"""The PostgreSQL run store: the :class:`orchestrator._ports.RunStore` port over the runs
of one database schema, for every face (the commands, the UI, the workers).

Every SQL statement the faces need about runs is here: listing and reading runs, the
hosts' answers, cancelling a run no worker started, the task boards' ids and ledger
tails, the store's schema status and the read of a whole run for ``orchestrate export``.
The workers' claims are :class:`PostgresStore`'s, which this store wraps.

A store made with ``hold=False`` connects for each call and keeps nothing between them
(for the web page: it is not a worker, and holds nothing between requests).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs

from ..._errors import (
    AnswerRefusedError,
    NoInstanceError,
    OrchestratorError,
    StateDamagedError,
    UsageError,
)
from ..._ports import (
    AdvancedInput,
    AnswerInput,
    BoardStore,
    BoardTailInput,
    Bridge,
    ListRunsInput,
    OpenRunInput,
    PendingDocument,
    PendingInput,
    PrunedRun,
    PruneInput,
    QueueRunInput,
    ReadEventsInput,
    RespondInput,
    RunFileInput,
    RunInput,
    RunListing,
    RunNotNamedError,
    SendSignalInput,
    StoredRun,
)
from ...storage.runs import ENGINE_KEY
from ...storage.state_key import ReadMemo, ReadsHanded
from .connection import connect, schema_of, shown
from .store import PostgresStore

LIVE = ("running", "paused", "failed")
ENDED = ("completed", "cancelled")


class PostgresRunStore:
    """The runs of the store ``dsn`` names. ``migrate``: bring its schema up to date when
    it connects (every command does); ``hold``: keep one connection (else one per call)."""

    def __init__(self, dsn: str, *, migrate: bool = True, hold: bool = True) -> None:
        self.dsn = dsn
        self.name = shown(dsn)
        self.mailbox_directory: Path | None = None  # the store keeps the mailbox
        self._migrate = migrate
        self._held: PostgresStore | None = PostgresStore(dsn, migrate=migrate) if hold else None
        # What ``workflow_of`` learnt of a run's state, for the bridge built next for it.
        self._handed = ReadsHanded()

    def close(self) -> None:
        if self._held is not None:
            self._held.close()

    def __enter__(self) -> PostgresRunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def store(self) -> PostgresStore:
        """The connected store (a store that holds its connection only)."""
        if self._held is None:
            raise RuntimeError("a PostgresRunStore made with hold=False has no held store")
        return self._held

    @contextmanager
    def _session(self) -> Iterator[PostgresStore]:
        if self._held is not None:
            yield self._held
            return
        with PostgresStore(self.dsn, migrate=self._migrate) as store:
            yield store

    def _no_run(self, run_id: str | None) -> NoInstanceError:
        return NoInstanceError(
            f"{self.name}: no run {run_id} in this store ('orchestrate status --store ...' "
            "lists its runs)"
        )

    def _run_id(self, request: RunInput) -> str:
        if not request.run_id:
            raise RunNotNamedError(
                "with --store, name the run: --run ID ('orchestrate status --store' lists them)"
            )
        return request.run_id

    # -- naming and listing ---------------------------------------------------------------

    def command_arguments(self, run_id: str) -> list[str]:
        return ["--store", self.dsn, "--run", run_id]

    def named_run(self, run_id: str) -> str | None:
        return run_id

    def answer_hint(self, request: AnswerInput) -> str:
        return (
            f"orchestrate respond --store ... --run {request.run_id} --request {request.request_id}"
        )

    def host_lines(self, request: AdvancedInput) -> list[str]:
        return [request.run_id]

    def list_runs(self, request: ListRunsInput) -> list[RunListing]:
        with self._session() as store:
            rows = store.runs(status=request.status, limit=request.limit)
        return [
            RunListing(
                run_id=r.run_id,
                workflow=r.workflow_name,
                status=r.status,
                updated_at=r.updated_at,
                pending=r.pending,
            )
            for r in rows
        ]

    # -- one run ------------------------------------------------------------------------

    def read_run(self, request: RunInput) -> StoredRun:
        """The run's state (live) or history (ended), signature checked, every archived
        request whole again; a queued run without either."""
        from ...formats.bridge_codec import parse_state, restore_archived
        from ...formats.state_signature import with_signature
        from ...storage.state_key import read_signed

        run_id = self._run_id(request)
        with self._session() as store:
            row = store.conn.execute(
                "select state, history, status, workflow_name, workflow_ref, start_args "
                "from runs where run_id = %s",
                (run_id,),
            ).fetchone()
            if row is None:
                raise self._no_run(run_id)
            source = f"{self.name} run {run_id}"
            found = StoredRun(
                run_id=run_id,
                workflow_name=str(row[3]),
                status=str(row[2]),
                live=str(row[2]) in LIVE,
                source=source,
                state=None,
                workflow_ref=str(row[4]),
                start_args=row[5],
            )
            raw = row[0] if row[0] is not None else row[1]
            if raw is None:
                if found.status in ("queued", "cancelled"):
                    return found  # not started (a queued run cancelled before it started)
                raise NoInstanceError(f"{self.name}: run {run_id} is {row[2]}: it has no state yet")
            data, _ = read_signed(bytes(raw), source=source)
            state = parse_state(with_signature(data, None), source=source)
            if row[0] is not None and any(r.x_archived for r in state.agent_requests):
                lines = store.conn.execute(
                    "select line from archive where run_id = %s order by seq", (run_id,)
                ).fetchall()
                state = restore_archived(state, b"".join(bytes(r[0]) for r in lines), source=source)
        return attrs.evolve(found, state=state)

    def workflow_of(self, request: RunInput) -> str:
        from ...storage.state_key import read_signed

        run_id = self._run_id(request)
        with self._session() as store:
            row = store.conn.execute(
                "select state, workflow_ref, status from runs where run_id = %s", (run_id,)
            ).fetchone()
        if row is None:
            raise self._no_run(run_id)
        if row[0] is None:
            if row[2] == "queued":
                return str(row[1])
            raise NoInstanceError(
                f"{self.name}: run {run_id} has ended ({row[2]}); 'orchestrate history "
                f"--store ... --run {run_id}' shows it"
            )
        source = f"{self.name} run {run_id}"
        reads = ReadMemo()
        # Only looked at: the bridge built next for this run reuses the check and the parse.
        data, _ = read_signed(bytes(row[0]), source=source, peek=True, reads=reads)
        self._handed.leave(source, reads)
        try:
            reference = data["phase_data"]["x_orchestrator"]["workflow"]
        except (KeyError, TypeError):
            reference = None
        if not isinstance(reference, str):
            raise StateDamagedError(
                "no workflow reference recorded, so orchestrate did not write it",
                source=source,
                json_path="$.phase_data.x_orchestrator.workflow",
                rule="required",
            )
        return reference

    def relocate_hint(self, request: RunInput) -> str | None:
        return None  # a run's recorded workflow is changed only by the run itself here

    def run_board(self, request: RunInput) -> BoardStore | None:
        from . import board_store

        run_id = self._run_id(request)  # a dispatch board's id is its run's id
        with self._session() as store:
            row = store.conn.execute(
                "select 1 from boards where board_id = %s", (run_id,)
            ).fetchone()
        return None if row is None else board_store(self.dsn, run_id)

    def set_aside(self, request: RunInput) -> str:
        raise UsageError("--force sets a damaged state file aside: it is for work directories")

    # -- the hosts' side ----------------------------------------------------------------

    def pending(self, request: PendingInput) -> list[PendingDocument]:
        with self._session() as store:
            if request.run_id is not None:
                store.run(request.run_id)  # an unknown run is an error, not "none pending"
            found = store.pending(request.run_id)
        documents = [
            PendingDocument(run_id=p.run_id, request_id=p.request_id, document=p.document)
            for p in found
        ]
        if request.run_id is not None:
            # A child run's requests are its parent's host's to answer: one inbox.
            for child in self._children_of(request.run_id):
                documents += self.pending(PendingInput(run_id=child))
        return documents

    def _child_asking(self, run_id: str, request_id: str) -> str | None:
        """The child run of ``run_id`` (or a child's child) whose request ``request_id`` is."""
        owner = {p.request_id: p.run_id for p in self.pending(PendingInput(run_id=run_id))}
        return owner.get(request_id)

    def _children_of(self, run_id: str) -> list[str]:
        """The child runs a live run started (its record lists them)."""
        try:
            found = self.read_run(RunInput(run_id=run_id))
        except NoInstanceError:
            return []
        if found.state is None or not found.live:
            return []
        record = found.state.phase_data.get(ENGINE_KEY)
        children = record.get("children") if isinstance(record, dict) else None
        return [str(c) for c in children] if isinstance(children, list) else []

    def child_store(self, run_id: str) -> PostgresRunStore:
        return self  # a child is a run of this store like any other, claimable by workers

    def answered(self, request: RunInput) -> frozenset[str]:
        run_id = self._run_id(request)
        with self._session() as store:
            store.run(run_id)
            rows = store.conn.execute(
                "select r.request_id from responses r join requests q "
                "using (run_id, request_id) where r.run_id = %s",
                (run_id,),
            ).fetchall()
        return frozenset(str(r[0]) for r in rows)

    def respond(self, request: RespondInput) -> str:
        run_id = self._run_id(request.run)
        with self._session() as store:
            try:
                store.respond(run_id, request.response, check_shape=request.check_shape)
            except AnswerRefusedError as refused:
                child = self._child_asking(run_id, request.response.request_id)
                if refused.reason != "not-pending" or child is None:
                    raise
                run_id = child  # a child run's request, answered from its parent
                store.respond(run_id, request.response, check_shape=request.check_shape)
        return f"{self.name} run {run_id} request {request.response.request_id}"

    def send_signal(self, request: SendSignalInput) -> str:
        run_id = self._run_id(request.run)
        with self._session() as store:
            return store.send_signal(
                run_id, request.name, request.payload, signal_id=request.signal_id
            )

    def cancel_queued(self, request: RunInput) -> bool:
        run_id = self._run_id(request)
        with self._session() as store:
            if store.run(run_id).status != "queued":
                return False
            row = store.conn.execute(
                "update runs set status = 'cancelled', updated_at = now() where run_id = %s "
                "and status = 'queued' returning 1",
                (run_id,),
            ).fetchone()
        return row is not None

    # -- starting runs ------------------------------------------------------------------

    def queue_run(self, request: QueueRunInput) -> None:
        with self._session() as store:
            store.queue_run(
                run_id=request.run_id,
                workflow_name=request.workflow_name,
                workflow_ref=request.workflow_ref,
                start_args=request.start_args,
            )

    def bridge(self, request: OpenRunInput) -> Bridge:
        run_id = request.run_id
        reads = None if run_id is None else self._handed.take(f"{self.name} run {run_id}")
        return self.store.bridge(request, reads)

    def run_boards(self) -> Callable[[str], BoardStore]:
        return self.store.run_boards()

    # -- evidence -----------------------------------------------------------------------

    def events(self, request: ReadEventsInput) -> list[tuple[int, bytes]]:
        with self._session() as store:
            return store.events(request.run_id, after=request.after)

    def run_files(self, request: RunInput) -> list[str]:
        run_id = self._run_id(request)
        with self._session() as store:
            rows = store.conn.execute(
                "select path from run_files where run_id = %s order by path limit 500", (run_id,)
            ).fetchall()
            logged = bool(store.events(run_id, after=0)[:1])
        return sorted([str(r[0]) for r in rows] + (["events.ndjson"] if logged else []))

    def read_run_file(self, request: RunFileInput) -> bytes | None:
        with self._session() as store:
            if request.path == "events.ndjson":
                lines = store.events(request.run_id)
                return b"".join(line for _, line in lines) if lines else None
            row = store.conn.execute(
                "select content from run_files where run_id = %s and path = %s",
                (request.run_id, request.path),
            ).fetchone()
        return None if row is None else bytes(row[0])

    # -- task boards --------------------------------------------------------------------

    def boards(self) -> list[str]:
        with self._session() as store:
            rows = store.conn.execute("select board_id from boards order by created_at desc")
            return [str(r[0]) for r in rows.fetchall()]

    def board_store(self, board_id: str) -> BoardStore:
        from . import board_store

        if board_id not in self.boards():
            raise NoInstanceError(f"{self.name}: no task board {board_id}")
        return board_store(self.dsn, board_id)

    def board_tail(self, request: BoardTailInput) -> list[bytes]:
        with self._session() as store:
            rows = store.conn.execute(
                "select document from board_ledger where board_id = %s order by seq desc limit %s",
                (request.board_id, request.count),
            ).fetchall()
        return [bytes(r[0]) for r in reversed(rows)]

    # -- retention ----------------------------------------------------------------------

    def prune_runs(self, request: PruneInput) -> list[PrunedRun]:
        """Remove the finished runs ``request`` selects, a batch of them per transaction
        (see ``pruning``)."""
        from .pruning import prune_runs

        with self._session() as store:
            return prune_runs(store, request)

    # -- the workers' side (WorkerRunStore) ---------------------------------------------

    @property
    def lost(self) -> bool:
        return self.store.lost

    def claim(self, *, skip: Sequence[str] = ()) -> str | None:
        return self.store.claim(skip=skip)

    def release(self, run_id: str, *, handled: int | None = None) -> None:
        self.store.release(run_id, handled=handled)

    def advanceable(self, *, skip: Sequence[str] = ()) -> int:
        return self.store.advanceable(skip=skip)

    def next_wake(self) -> datetime | None:
        return self.store.next_wake()

    def boards_of_paused_runs(self) -> list[str]:
        return self.store.boards_of_paused_runs()

    def wait(self, timeout: float, *, stop: Callable[[], bool] | None = None) -> bool:
        return self.store.wait(timeout, stop=stop)


# -- looking after the store: db status, export ----------------------------------------------


@attrs.frozen(kw_only=True)
class SchemaStatus:
    """What ``db status`` tells of a store."""

    store: str
    schema: str
    version: int | None  # None: no schema_migrations table (never upgraded)
    latest: int
    runs: dict[str, int]

    def advice(self) -> str:
        command = "orchestrate db upgrade --store DSN"
        if self.version is None:
            return f"not made yet: '{command}' makes it (so does any command on the store)"
        if self.version > self.latest:
            return "newer than this orchestrate knows: use the orchestrate that upgraded it"
        if self.version < self.latest:
            return f"behind: '{command}' brings it up to date (so does any command on it)"
        return "up to date"


def schema_status(dsn: str) -> SchemaStatus:
    """The store's schema version and runs by status, read without changing anything."""
    from .migrations import latest

    conn: Any
    with connect(dsn, autocommit=True) as conn:
        version = schema_version(conn)
        runs: dict[str, int] = {}
        if conn.execute("select to_regclass('runs') is not null").fetchone()[0]:
            rows = conn.execute(
                "select status, count(*) from runs group by status order by status"
            ).fetchall()
            runs = {str(status): int(count) for status, count in rows}
    return SchemaStatus(
        store=shown(dsn), schema=schema_of(dsn), version=version, latest=latest(), runs=runs
    )


def schema_version(conn: Any) -> int | None:
    """The highest migration the store recorded; ``None`` when it has no migrations table."""
    if not conn.execute("select to_regclass('schema_migrations') is not null").fetchone()[0]:
        return None
    row = conn.execute("select coalesce(max(version), 0) from schema_migrations").fetchone()
    return int(row[0])


@attrs.frozen(kw_only=True)
class RunRows:
    """One run as the store holds it, read in one snapshot."""

    run_id: str
    workflow_name: str
    status: str
    state: bytes | None
    history: bytes | None
    requests: list[tuple[str, bytes]]  # (request id, document), position order
    responses: list[tuple[str, bytes]]  # (request id, document)
    events: list[bytes]  # seq order, each with its newline
    archive: list[bytes]  # seq order
    files: list[tuple[str, bytes]]  # (path in the run's directory, content)


def read_run_rows(dsn: str, run_id: str) -> RunRows:
    """Every row of run ``run_id``, from one read-only snapshot (a worker advancing the run
    meanwhile changes nothing of what is read)."""
    from .migrations import latest

    name = shown(dsn)
    with connect(dsn) as conn:
        conn.execute("set transaction isolation level repeatable read, read only")
        version = schema_version(conn)
        if version is None or version == 0:
            raise NoInstanceError(f"{name}: no run {run_id} in this store (it has no runs yet)")
        if version > latest():
            raise OrchestratorError(
                f"{name}: the store's schema is at version {version}, newer than this "
                f"orchestrate knows ({latest()}); export with the orchestrate that upgraded it"
            )
        row = conn.execute(
            "select workflow_name, status, state, history from runs where run_id = %s",
            (run_id,),
        ).fetchone()
        if row is None:
            raise NoInstanceError(
                f"{name}: no run {run_id} in this store ('orchestrate status --store ...' "
                "lists its runs)"
            )

        def rows(query: str) -> list[Any]:
            return list(conn.execute(query, (run_id,)).fetchall())

        def pairs(query: str) -> list[tuple[str, bytes]]:
            return [(str(r[0]), bytes(r[1])) for r in rows(query)]

        found = RunRows(
            run_id=run_id,
            workflow_name=str(row[0]),
            status=str(row[1]),
            state=None if row[2] is None else bytes(row[2]),
            history=None if row[3] is None else bytes(row[3]),
            requests=pairs(
                "select request_id, document from requests where run_id = %s order by position"
            ),
            responses=pairs(
                "select request_id, document from responses where run_id = %s "
                "order by received_at, request_id"
            ),
            events=[
                bytes(r[0]) for r in rows("select line from events where run_id = %s order by seq")
            ],
            archive=[
                bytes(r[0]) for r in rows("select line from archive where run_id = %s order by seq")
            ],
            files=pairs("select path, content from run_files where run_id = %s order by path"),
        )
        conn.rollback()
    return found
