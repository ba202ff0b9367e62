"""The PostgreSQL bridge: one run's state, mailbox and evidence as rows of the store.

The state is the state file's exact bytes (signed as the file store signs them), in the
run's row. A checkpoint is one transaction: the row, the requests a pause publishes (the
pending ones, derived from that very state) and the checkpoint's evidence, so a crash
leaves all of them or none. The instance lock is a session advisory lock: the server
releases it when its holder's connection dies, so a worker killed mid-run frees its run
for another.

Host answers are rows of ``responses``; each one received counts up the run's ``inbox``,
and a save records how far the engine had read it (``handled``), so a worker knows a run
can advance without parsing anything: ``inbox > handled``.
"""

from __future__ import annotations

import functools
import json
import typing
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..._errors import (
    ContractError,
    InstanceBusyError,
    NoInstanceError,
    ResponseRejectedError,
    StateDamagedError,
    StorageError,
)
from ..._ports import (
    ArchiveInput,
    Bridge,
    ConsumeInput,
    EvidenceInput,
    FinishInput,
    PublishInput,
    ReadSignalsInput,
    ReceivedResponse,
    SaveStateInput,
)
from ...formats.bridge import AgentRequest, CheckpointState, HistoryStatus
from ...formats.bridge_codec import (
    dump_document,
    encode_record_line,
    parse_response,
    parse_state,
    restore_archived,
)
from ...formats.signals import SignalRecord
from ...formats.state_signature import with_signature
from ...formats.strict_json import loads_strict
from ...storage.durable import crash_point
from ...storage.runs import ENGINE_KEY
from ...storage.state_key import EncodedItems, ReadMemo, read_signed, signed_document

MAX_RESPONSE_BYTES = 16 * 1024 * 1024
F = typing.TypeVar("F", bound=Callable[..., Any])
#: A run's advisory lock: a 64-bit hash of its schema and id (stores in different schemas
#: of one database never block each other; a 32-bit key would make two of a hundred
#: thousand runs share a lock).
TRY_LOCK_RUN = "select pg_try_advisory_lock(hashtextextended(%s, 0))"
UNLOCK_RUN = "select pg_advisory_unlock(hashtextextended(%s, 0))"


def run_lock_name(schema: str, run_id: str) -> str:
    return f"orchestrator/{schema}/{run_id}"


def _store_errors(action: str) -> Callable[[F], F]:
    """A database error in a bridge method becomes a :class:`StorageError` naming the
    run: like a full disk under the file bridge, it is the store's trouble, not the
    phase's, so the engine lets it through instead of failing the run (every change is a
    transaction: the run is as its last completed one left it)."""

    def wrap(method: F) -> F:
        @functools.wraps(method)
        def run(self: PostgresBridge, *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, *args, **kwargs)
            except Exception as exc:
                if type(exc).__module__.split(".")[0] != "psycopg":
                    raise
                reason = " ".join(str(exc).split()) or type(exc).__name__
                raise StorageError(
                    path=self.location, action=action, errno=None, strerror=reason
                ) from exc

        return typing.cast(F, run)

    return wrap


class PostgresBridge:
    """One run in a PostgreSQL store, on a connection of its own (autocommit: each
    change is its own transaction, or one ``transaction()`` block)."""

    def __init__(
        self,
        conn: Any,
        *,
        run_id: str,
        store_name: str,
        schema: str,
        reads: ReadMemo | None = None,
    ) -> None:
        """``reads``: what the command that builds this bridge learnt of the run's state
        (it read the workflow's name from it), for this bridge's own reads; one of its
        own otherwise."""
        self.conn = conn
        self.run_id = run_id
        self.schema = schema
        self.store_name = store_name
        self.location = f"{store_name} run {run_id}"
        self._held = False  # this bridge holds the lock (the server's lock is re-entrant)
        self._lock_name = run_lock_name(schema, run_id)
        self._version: int | None = None  # state_version last saved or loaded
        self._inbox_seen = 0  # the run's inbox count when responses were last read
        self._published: tuple[str, ...] | None = None  # request ids in the table
        # The state's bytes this bridge signed, checked or parsed last (and no other's).
        self._reads = reads if reads is not None else ReadMemo()
        self._encoded = EncodedItems(self._reads)  # its saves note their bytes in _reads

    @property
    def inbox_seen(self) -> int:
        """The run's inbox count when responses were last read (what a worker marks
        handled when it lets the run go)."""
        return self._inbox_seen

    # -- the instance -------------------------------------------------------------------

    @contextmanager
    def lock(self) -> Iterator[None]:
        held = not self._held and self.conn.execute(TRY_LOCK_RUN, (self._lock_name,)).fetchone()[0]
        if not held:
            raise InstanceBusyError(
                f"{self.location}: another process is advancing this run; try again when it "
                "has paused (exit 75 means: busy, nothing changed)",
                lock_path=self.location,
            )
        self._held = True
        try:
            yield
        finally:
            self._held = False
            if not (self.conn.closed or self.conn.broken):  # else the lock died with it
                self.conn.execute(UNLOCK_RUN, (self._lock_name,))

    @_store_errors("read")
    def exists(self) -> bool:
        row = self.conn.execute(
            "select state is not null from runs where run_id = %s", (self.run_id,)
        ).fetchone()
        return bool(row and row[0])

    @_store_errors("read")
    def load_state(self) -> CheckpointState:
        row = self.conn.execute(
            "select state, state_version from runs where run_id = %s", (self.run_id,)
        ).fetchone()
        if row is None or row[0] is None:
            raise NoInstanceError(f"{self.location}: no live run with this id")
        raw, version = bytes(row[0]), int(row[1])
        data, written_here = read_signed(raw, source=self.location, reads=self._reads)
        try:
            state = parse_state(
                with_signature(data, None), source=self.location, items=not written_here
            )
        except ContractError as exc:
            raise StateDamagedError.wrap(exc) from None
        if written_here:
            self._encoded.take_from_read(state, raw, self._reads)
        self._version = version
        return state

    @_store_errors("write")
    def save_state(self, request: SaveStateInput) -> int | None:
        state = request.state
        data = signed_document(state, self._encoded)
        record = state.phase_data.get(ENGINE_KEY) or {}
        if record.get("run_id", self.run_id) != self.run_id:
            raise ContractError(
                f"the state is of run {record.get('run_id')}, not {self.run_id}: a store's "
                "run keeps its id",
                source=self.location,
                json_path=f"$.phase_data.{ENGINE_KEY}.run_id",
                rule="const",
            )
        status = str(record.get("status") or "running")
        pending = _published_by(state, status)
        self._version = None  # until the transaction is in
        with self.conn.transaction():
            row = self.conn.execute(
                "insert into runs (run_id, workflow_name, workflow_ref, status, state, "
                " state_version, handled, wake_at) "
                "values (%s, %s, %s, %s, %s, 1, %s, %s) "
                "on conflict (run_id) do update set status = excluded.status, "
                " state = excluded.state, state_version = runs.state_version + 1, "
                " handled = greatest(runs.handled, excluded.handled), "
                " wake_at = excluded.wake_at, updated_at = now() "
                "returning state_version",
                (
                    self.run_id,
                    str(record.get("workflow_name") or ""),
                    str(record.get("workflow") or ""),
                    status,
                    data,
                    self._inbox_seen,
                    record.get("waiting_until"),
                ),
            ).fetchone()
            published = self._publish_rows(pending)
            if request.evidence is not None:
                self._evidence_rows(request.evidence)
            if status == "failed":
                self._wake_parent(record)
        self._version = int(row[0])
        self._published = published
        return len(data)

    @_store_errors("read")
    def state_token(self) -> object | None:
        row = self.conn.execute(
            "select state_version from runs where run_id = %s and state is not null",
            (self.run_id,),
        ).fetchone()
        return None if row is None else int(row[0])

    def saved_token(self) -> object | None:
        return self._version

    def take_over(self, previous: Bridge) -> bool:
        return previous is self  # each bridge has its own connection and instance lock

    # -- the mailbox --------------------------------------------------------------------

    @_store_errors("write")
    def publish(self, request: PublishInput) -> None:
        pending = tuple(request.pending)
        if tuple(r.request_id for r in pending) == self._published:
            return  # the checkpoint's transaction published them already
        with self.conn.transaction():
            published = self._publish_rows(pending)
        self._published = published

    def _publish_rows(self, pending: Sequence[AgentRequest]) -> tuple[str, ...]:
        """Replace the run's requests with ``pending`` (inside the caller's transaction);
        the ids, for the caller to keep once the transaction is in."""
        ids = tuple(r.request_id for r in pending)
        if ids == self._published:
            return ids
        self._published = None  # unknown until the transaction is in
        self.conn.execute("delete from requests where run_id = %s", (self.run_id,))
        if pending:
            with self.conn.cursor() as cursor:
                cursor.executemany(
                    "insert into requests (run_id, request_id, position, document) "
                    "values (%s, %s, %s, %s)",
                    [
                        (self.run_id, r.request_id, i, dump_document(r))
                        for i, r in enumerate(pending)
                    ],
                )
        return ids

    @_store_errors("read")
    def read_responses(self) -> list[ReceivedResponse]:
        with self.conn.transaction():
            inbox = self.conn.execute(
                "select inbox from runs where run_id = %s", (self.run_id,)
            ).fetchone()
            rows = self.conn.execute(
                "select request_id, document, sha256 from responses where run_id = %s "
                "order by received_at, request_id",
                (self.run_id,),
            ).fetchall()
        self._inbox_seen = int(inbox[0]) if inbox else 0
        received = []
        for request_id, document, digest in rows:
            source = f"{self.location} response {request_id}"
            raw = bytes(document)
            try:
                data = loads_strict(raw, source=source, max_bytes=MAX_RESPONSE_BYTES)
                response = parse_response(data, source=source)
            except ContractError as exc:
                raise ResponseRejectedError(
                    f"{exc}; the response was refused and left in the store",
                    path=source,
                    reason=exc.rule,
                ) from None
            if response.request_id != request_id:
                raise ResponseRejectedError(
                    f"{source}: it answers request {response.request_id}, not the one it is "
                    "filed under; the response was refused and left in the store",
                    path=source,
                    reason="request-mismatch",
                )
            received.append(ReceivedResponse(response=response, source=source, sha256=digest))
        return received

    @_store_errors("read")
    def read_signals(self, request: ReadSignalsInput) -> list[SignalRecord]:
        from ...formats.signals import parse_signal

        rows = self.conn.execute(
            "select seq, line from signals where run_id = %s order by seq", (request.run_id,)
        ).fetchall()
        return [
            parse_signal(
                loads_strict(bytes(line), source=f"{self.location} signal {seq}"),
                source=f"{self.location} signal {seq}",
            )
            for seq, line in rows
        ]

    @_store_errors("write")
    def consume(self, request: ConsumeInput) -> None:
        # A refused answer's row goes too: the state keeps its text, and why it was refused.
        done = [*request.consumed, *(item for item, _ in request.rejected)]
        if not done:
            return
        with self.conn.transaction(), self.conn.cursor() as cursor:
            cursor.executemany(
                "delete from responses where run_id = %s and request_id = %s and sha256 = %s",
                [(self.run_id, r.response.request_id, r.sha256) for r in done],
            )

    # -- history and evidence -----------------------------------------------------------

    @_store_errors("write")
    def archive(self, request: ArchiveInput) -> None:
        with self.conn.transaction(), self.conn.cursor() as cursor:
            cursor.executemany(
                "insert into archive (run_id, line) values (%s, %s)",
                [(request.run_id, encode_record_line(r)) for r in request.records],
            )

    @_store_errors("read")
    def evidence_mark(self, run_id: str) -> int:
        row = self.conn.execute(
            "select max(seq) from events where run_id = %s", (run_id,)
        ).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    @_store_errors("write")
    def write_evidence(self, request: EvidenceInput) -> None:
        with self.conn.transaction():
            self._evidence_rows(request)

    def _evidence_rows(self, evidence: EvidenceInput) -> None:
        with self.conn.cursor() as cursor:
            if evidence.files:
                cursor.executemany(
                    "insert into run_files (run_id, path, content) values (%s, %s, %s) "
                    "on conflict (run_id, path) do update set content = excluded.content",
                    [(evidence.run_id, path, data) for path, data in evidence.files],
                )
            lines = evidence.lines.splitlines(keepends=True)
            if lines:
                # A line written again after a crash keeps its first copy.
                cursor.executemany(
                    "insert into events (run_id, seq, line) values (%s, %s, %s) "
                    "on conflict (run_id, seq) do nothing",
                    [(evidence.run_id, _sequence_of(line), line) for line in lines],
                )

    def _wake_parent(self, record: Any) -> None:
        """A child run that ends (or fails) makes its parent able to advance, in the
        transaction that ends it: the parent's inbox grows, and a worker is woken."""
        parent = record.get("parent_run_id") if isinstance(record, dict) else None
        if not isinstance(parent, str):
            return
        if self.conn.execute(_wake_parent_sql(), (parent,)).fetchone() is not None:
            from .store import READY_CHANNEL

            self.conn.execute("select pg_notify(%s, %s)", (READY_CHANNEL, parent))

    @_store_errors("write")
    def finish(self, request: FinishInput) -> str:
        with self.conn.transaction():
            rows = self.conn.execute(
                "select line from archive where run_id = %s order by seq", (request.run_id,)
            ).fetchall()
            state = request.state
            if rows:
                lines = b"".join(bytes(r[0]) for r in rows)
                state = restore_archived(state, lines, source=f"{self.location} archive")
            self.conn.execute(
                "update runs set status = %s, state = null, history = %s, wake_at = null, "
                " state_version = state_version + 1, updated_at = now() where run_id = %s",
                (request.outcome, signed_document(state), self.run_id),
            )
            self.conn.execute("delete from requests where run_id = %s", (self.run_id,))
            self.conn.execute("delete from responses where run_id = %s", (self.run_id,))
            self._wake_parent(state.phase_data.get(ENGINE_KEY) or {})
            if request.then is not None:  # the new run's first row, in the same transaction
                request.then()
                crash_point(f"before-commit finish {request.run_id}")
        self._published = ()
        self._version = None
        return f"{self.store_name} runs/{request.run_id}"


def _wake_parent_sql() -> str:
    return (
        "update runs set inbox = inbox + 1, updated_at = now() where run_id = %s "
        "and status in ('paused', 'running') returning 1"
    )


def _published_by(state: CheckpointState, status: str) -> tuple[AgentRequest, ...]:
    """The requests a paused state waits for, in order (none unless it is paused)."""
    if status != "paused":
        return ()
    return tuple(r.request() for r in state.agent_requests if r.status is HistoryStatus.PENDING)


def _sequence_of(line: bytes) -> int:
    try:
        sequence = json.loads(line).get("x_seq")
    except (ValueError, AttributeError):
        sequence = None
    if not isinstance(sequence, int):
        raise StateDamagedError(
            "an event line without an x_seq cannot be stored", source="events", rule="x_seq"
        )
    return sequence
