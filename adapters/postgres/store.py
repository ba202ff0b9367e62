"""A PostgreSQL store of runs: what the commands and the workers do with it beyond one
run's bridge (queue a run, list runs and their pending requests, take a host's answer,
claim a run that can advance, wait for one).

A run can advance when it is queued (no state yet), was left running (its worker died:
the lock died with it), or is paused with an answer not yet read (``inbox > handled``) or
a timer due. Claims take candidate rows ``FOR UPDATE SKIP LOCKED``, so workers never wait
on each other's rows, then the run's advisory lock, which a worker holds for as long as
it advances the run. Whatever makes a run able to advance notifies ``orchestrator_ready``,
so idle workers wake at once instead of polling.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import attrs

from ..._errors import AnswerRefusedError, NoInstanceError, UsageError
from ..._ports import BoardStore, OpenRunInput
from ...formats.answer_gate import admit_answer
from ...formats.bridge import AgentResponse
from ...formats.bridge_codec import dump_document, parse_request
from ...storage.durable import sha256_hex
from ...storage.runs import ENGINE_KEY
from ...storage.state_key import ReadMemo
from .bridge import TRY_LOCK_RUN, UNLOCK_RUN, PostgresBridge, run_lock_name
from .connection import connect, schema_of, shown
from .migrations import check_current

READY_CHANNEL = "orchestrator_ready"
STOP_CHECK = 0.5  # seconds between looks at a waiting worker's stop flag
#: The runs a worker can take on: queued, left running (its worker died), paused with an
#: answer not yet read or a timer due, or ended by their last checkpoint but not closed
#: (a crash came between the two; resuming finishes the end, as on files).
CAN_ADVANCE = (
    "(status in ('queued', 'running') "
    " or (status = 'paused' and (inbox > handled or wake_at <= now())) "
    " or (status in ('completed', 'cancelled') and state is not null))"
)
LIVE = ("queued", "running", "paused", "failed")


@attrs.frozen(kw_only=True)
class RunRow:
    """A run as the store lists it."""

    run_id: str
    workflow_name: str
    workflow_ref: str
    status: str
    updated_at: datetime
    created_at: datetime
    pending: int = 0
    start_args: dict[str, Any] | None = None


@attrs.frozen(kw_only=True)
class PendingRequest:
    run_id: str
    request_id: str
    document: bytes


class PostgresStore:
    """Runs in the PostgreSQL database ``dsn`` names, on one connection (autocommit).
    Created with ``migrate`` (the default), it brings the schema up to date first."""

    def __init__(self, dsn: str, *, migrate: bool = True) -> None:
        self.dsn = dsn
        self.name = shown(dsn)
        self.schema = schema_of(dsn)
        self.conn = connect(dsn, autocommit=True)
        if migrate:
            check_current(self.conn, dsn=dsn)
        self._listening = False

    def close(self) -> None:
        self.conn.close()

    @property
    def lost(self) -> bool:
        """Whether the connection is gone (the server restarted, the backend was ended):
        the store is of no more use then, and its advisory locks died with it."""
        return bool(self.conn.closed or self.conn.broken)

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def bridge(self, run_id: str | OpenRunInput, reads: ReadMemo | None = None) -> PostgresBridge:
        """The bridge of run ``run_id`` (or of the run an ``OpenRunInput`` names, as the
        ``RunStore`` port asks), on this store's connection; ``reads``: what was learnt
        of the run's state when it was looked at (see ``PostgresBridge``)."""
        if isinstance(run_id, OpenRunInput):
            if run_id.run_id is None:
                raise UsageError(f"{self.name}: a run here is named by its id")
            run_id = run_id.run_id
        return PostgresBridge(
            self.conn, run_id=run_id, store_name=self.name, schema=self.schema, reads=reads
        )

    def run_boards(self) -> Callable[[str], BoardStore]:
        """The task boards of this store's runs, each named by its run's id."""
        from . import board_store

        dsn = self.dsn
        return lambda run_id: board_store(dsn, run_id)

    # -- runs ---------------------------------------------------------------------------

    def run(self, run_id: str) -> RunRow:
        rows = self._runs("where r.run_id = %s", (run_id,))
        if not rows:
            raise NoInstanceError(f"{self.name}: no run {run_id} in this store")
        return rows[0]

    def runs(self, *, status: Sequence[str] = (), limit: int = 1000) -> list[RunRow]:
        """Runs, most recently changed first; only those in ``status`` when given."""
        if status:
            return self._runs(
                "where r.status = any(%s) order by r.updated_at desc limit %s",
                (list(status), limit),
            )
        return self._runs("order by r.updated_at desc limit %s", (limit,))

    def _runs(self, tail: str, params: tuple[Any, ...]) -> list[RunRow]:
        rows = self.conn.execute(
            "select r.run_id, r.workflow_name, r.workflow_ref, r.status, r.updated_at, "
            " r.created_at, (select count(*) from requests q where q.run_id = r.run_id), "
            f" r.start_args from runs r {tail}",
            params,
        ).fetchall()
        return [
            RunRow(
                run_id=row[0],
                workflow_name=row[1],
                workflow_ref=row[2],
                status=row[3],
                updated_at=row[4],
                created_at=row[5],
                pending=int(row[6]),
                start_args=row[7],
            )
            for row in rows
        ]

    def queue_run(
        self, *, run_id: str, workflow_name: str, workflow_ref: str, start_args: dict[str, Any]
    ) -> None:
        """Leave a new run for a worker to start."""
        with self.conn.transaction():
            self.conn.execute(
                "insert into runs (run_id, workflow_name, workflow_ref, status, start_args) "
                "values (%s, %s, %s, 'queued', %s)",
                (run_id, workflow_name, workflow_ref, json.dumps(start_args)),
            )
            self.conn.execute("select pg_notify(%s, %s)", (READY_CHANNEL, run_id))

    def events(self, run_id: str, *, after: int = 0) -> list[tuple[int, bytes]]:
        """The run's event lines after ``x_seq`` ``after``, in order: ``(seq, line)``."""
        rows = self.conn.execute(
            "select seq, line from events where run_id = %s and seq > %s order by seq",
            (run_id, after),
        ).fetchall()
        return [(int(seq), bytes(line)) for seq, line in rows]

    # -- the hosts' side ----------------------------------------------------------------

    def pending(self, run_id: str | None = None) -> list[PendingRequest]:
        """Requests waiting for a host: of one run, or of every run, oldest run first."""
        where = "where q.run_id = %s" if run_id else ""
        rows = self.conn.execute(
            "select q.run_id, q.request_id, q.document from requests q "
            f"join runs r using (run_id) {where} order by r.created_at, q.run_id, q.position",
            (run_id,) if run_id else (),
        ).fetchall()
        return [PendingRequest(run_id=r[0], request_id=r[1], document=bytes(r[2])) for r in rows]

    def respond(self, run_id: str, response: AgentResponse, *, check_shape: bool = True) -> None:
        """Take a host's answer to a pending request of ``run_id``; a worker is woken.

        The request must be pending now and not answered yet; anything else is refused
        and nothing is written."""
        raw = dump_document(response)
        with self.conn.transaction():
            row = self.conn.execute(
                "select status from runs where run_id = %s for update", (run_id,)
            ).fetchone()
            if row is None:
                raise NoInstanceError(f"{self.name}: no run {run_id} in this store")
            published = self.conn.execute(
                "select document from requests where run_id = %s and request_id = %s",
                (run_id, response.request_id),
            ).fetchone()
            if published is None:
                ids = [p.request_id for p in self.pending(run_id)]
                raise AnswerRefusedError(
                    f"run {run_id}: request {response.request_id} is not pending; "
                    + (f"pending: {', '.join(ids)}" if ids else "nothing is pending"),
                    reason="not-pending",
                )
            if check_shape:
                asked = parse_request(json.loads(bytes(published[0])), source=f"run {run_id}")
                admit_answer(asked, response, where=f"{self.name} run {run_id}")
            inserted = self.conn.execute(
                "insert into responses (run_id, request_id, document, sha256) "
                "values (%s, %s, %s, %s) on conflict do nothing returning 1",
                (run_id, response.request_id, raw, sha256_hex(raw)),
            ).fetchone()
            if inserted is None:
                self._refuse_second(run_id, response.request_id)
            self.conn.execute(
                "update runs set inbox = inbox + 1, updated_at = now() where run_id = %s",
                (run_id,),
            )
            self.conn.execute("select pg_notify(%s, %s)", (READY_CHANNEL, run_id))

    def send_signal(
        self, run_id: str, name: str, payload: Any, *, signal_id: str | None = None
    ) -> str:
        """Keep a signal for ``run_id`` after the answer gate took its payload; a worker
        is woken. A signal id already kept for the run is not kept again. Returns its id."""
        from ...formats.signals import admit_signal, new_signal, signal_line

        signal = new_signal(name, payload, signal_id=signal_id)
        with self.conn.transaction():
            row = self.conn.execute(
                "select status, state from runs where run_id = %s for update", (run_id,)
            ).fetchone()
            if row is None:
                raise NoInstanceError(f"{self.name}: no run {run_id} in this store")
            status, state = str(row[0]), row[1]
            if status in ("completed", "cancelled"):
                raise NoInstanceError(
                    f"{self.name}: run {run_id} is {status}: it takes no more signals"
                )
            record = None
            if state is not None:
                record = (json.loads(bytes(state)).get("phase_data") or {}).get(ENGINE_KEY)
            admit_signal(record, name, signal.payload, where=f"{self.name} run {run_id}")
            inserted = self.conn.execute(
                "insert into signals (run_id, signal_id, name, line) values (%s, %s, %s, %s) "
                "on conflict (run_id, signal_id) do nothing returning 1",
                (run_id, signal.signal_id, name, signal_line(signal)),
            ).fetchone()
            if inserted is None:
                return signal.signal_id  # sent before: kept once
            self.conn.execute(
                "update runs set inbox = inbox + 1, updated_at = now() where run_id = %s",
                (run_id,),
            )
            self.conn.execute("select pg_notify(%s, %s)", (READY_CHANNEL, run_id))
        return signal.signal_id

    def _refuse_second(self, run_id: str, request_id: str) -> None:
        """The first answer wins: refuse a second, naming when the first came."""
        row = self.conn.execute(
            "select received_at, sha256 from responses where run_id = %s and request_id = %s",
            (run_id, request_id),
        ).fetchone()
        when = row[0].isoformat(timespec="seconds") if row else "just now"
        digest = str(row[1]) if row else ""
        raise AnswerRefusedError(
            f"run {run_id}: request {request_id} has an answer already (received at "
            f"{when}, sha256 {digest[:16]}); the first answer wins and this one was not "
            "written: the run takes the first at its next resume",
            reason="answered",
            details={"answered_at": when, "sha256": digest},
        )

    # -- the workers' side --------------------------------------------------------------

    def claim(self, *, skip: Sequence[str] = ()) -> str | None:
        """A run that can advance, its lock now held on this connection; ``None`` if none.
        The caller advances it (through :meth:`bridge`), then calls :meth:`release`."""
        with self.conn.transaction():
            candidates = self.conn.execute(
                f"select run_id from runs where {CAN_ADVANCE} and not (run_id = any(%s)) "
                "order by updated_at limit 32 for update skip locked",
                (list(skip),),
            ).fetchall()
            for (run_id,) in candidates:
                taken = self.conn.execute(
                    TRY_LOCK_RUN, (run_lock_name(self.schema, run_id),)
                ).fetchone()
                if taken and taken[0]:
                    return str(run_id)
        return None

    def advanceable(self, *, skip: Sequence[str] = ()) -> int:
        """How many runs a worker could advance now, claimed by someone or not."""
        row = self.conn.execute(
            f"select count(*) from runs where {CAN_ADVANCE} and not (run_id = any(%s))",
            (list(skip),),
        ).fetchone()
        return int(row[0]) if row else 0

    def release(self, run_id: str, *, handled: int | None = None) -> None:
        """Let go of a claimed run; ``handled``: how far its inbox was read."""
        if handled is not None:
            self.conn.execute(
                "update runs set handled = greatest(handled, %s) where run_id = %s",
                (handled, run_id),
            )
        self.conn.execute(UNLOCK_RUN, (run_lock_name(self.schema, run_id),))

    def boards_of_paused_runs(self) -> list[str]:
        """The task boards (named by their run's id) of runs that wait now: where a
        subagent that stopped heartbeating may hold a run up."""
        rows = self.conn.execute(
            "select b.board_id from boards b join runs r on r.run_id = b.board_id "
            "where r.status = 'paused'"
        ).fetchall()
        return [str(row[0]) for row in rows]

    def next_wake(self) -> datetime | None:
        """When the next timer of a paused run is due."""
        row = self.conn.execute(
            "select min(wake_at) from runs where status = 'paused' and wake_at is not null"
        ).fetchone()
        return row[0] if row else None

    def wait(self, timeout: float, *, stop: Callable[[], bool] | None = None) -> bool:
        """Sleep until a run may have become able to advance, or ``timeout`` seconds, or
        ``stop()`` says so (asked every half second); True when woken by a notification."""
        if not self._listening:
            # Notifications that come while the connection does other work are kept by
            # the driver for the next ``notifies()``: none is missed between two waits.
            self.conn.execute(f"listen {READY_CHANNEL}")
            self._listening = True
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (stop is not None and stop()):
                return False
            slice_ = remaining if stop is None else min(remaining, STOP_CHECK)
            for _ in self.conn.notifies(timeout=slice_, stop_after=1):
                return True
