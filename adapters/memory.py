"""An in-memory bridge: the state and the host's mailbox held in one process.

For tests and for embedding the engine where another component owns persistence. The
state is kept as the same canonical bytes the file bridge writes, so what is saved goes
through the real codec both ways.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .._errors import ContractError, InstanceBusyError, NoInstanceError, ResponseRejectedError
from .._ports import (
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
from ..formats.bridge import AgentRequest, AgentResponse, CheckpointState
from ..formats.bridge_codec import (
    dump_document,
    encode_record_line,
    parse_response,
    parse_state,
    restore_archived,
)
from ..formats.signals import SignalRecord
from ..formats.strict_json import dumps_canonical, loads_strict
from ..storage.durable import sha256_hex


class MemoryBridge:
    """One workflow instance in memory. ``answer`` plays the host."""

    def __init__(self, name: str = "memory") -> None:
        self.name = name
        self.location = f"{name}:state"
        self.state_bytes: bytes | None = None
        self.published: tuple[AgentRequest, ...] = ()
        self.inbox: dict[str, bytes] = {}  # source name -> raw response document
        self.rejected: dict[str, tuple[bytes, str]] = {}  # refused at the gate, with why
        self.history: dict[str, bytes] = {}
        self.archived = b""
        self.events: dict[str, list[bytes]] = {}  # run id -> its event lines
        self.run_files: dict[str, dict[str, bytes]] = {}  # run id -> path -> content
        self.signals: list[SignalRecord] = []  # the run's signals, in order
        self._saves = 0
        self._lock = threading.Lock()

    @contextmanager
    def lock(self) -> Iterator[None]:
        if not self._lock.acquire(blocking=False):
            raise InstanceBusyError(
                f"{self.name}: the instance is in use by another caller", lock_path=self.name
            )
        try:
            yield
        finally:
            self._lock.release()

    def exists(self) -> bool:
        return self.state_bytes is not None

    def load_state(self) -> CheckpointState:
        if self.state_bytes is None:
            raise NoInstanceError(f"{self.name}: no instance")
        source = self.location
        data = loads_strict(self.state_bytes, source=source, allow_lone_surrogates=True)
        return parse_state(data, source=source)

    def save_state(self, request: SaveStateInput) -> int | None:
        self.state_bytes = dump_document(request.state)
        self._saves += 1
        if request.evidence is not None:
            self.write_evidence(request.evidence)
        return len(self.state_bytes)

    def state_token(self) -> object | None:
        return None if self.state_bytes is None else self._saves

    def saved_token(self) -> object | None:
        return self.state_token()

    def take_over(self, previous: Bridge) -> bool:
        return previous is self

    def archive(self, request: ArchiveInput) -> None:
        self.archived += b"".join(encode_record_line(r) for r in request.records)

    def evidence_mark(self, run_id: str) -> int:
        lines = self.events.get(run_id)
        if not lines:
            return 0
        sequence: int = json.loads(lines[-1]).get("x_seq", 0)
        return sequence

    def write_evidence(self, request: EvidenceInput) -> None:
        self.run_files.setdefault(request.run_id, {}).update(request.files)
        if request.lines:
            lines = request.lines.splitlines(keepends=True)
            self.events.setdefault(request.run_id, []).extend(lines)

    def publish(self, request: PublishInput) -> None:
        self.published = tuple(request.pending)

    def answer(self, raw: bytes | dict[str, Any], *, source: str | None = None) -> None:
        """Leave a response document for the next ``read_responses``, as a host would."""
        data = raw if isinstance(raw, bytes) else dumps_canonical(raw)
        self.inbox[source or f"{self.name}:response:{len(self.inbox)}"] = data

    def read_responses(self) -> list[ReceivedResponse]:
        received = []
        for source, raw in sorted(self.inbox.items()):
            try:
                response: AgentResponse = parse_response(
                    loads_strict(raw, source=source), source=source
                )
            except ContractError as exc:
                raise ResponseRejectedError(
                    f"{exc}; the response was refused", path=source, reason=exc.rule
                ) from None
            received.append(
                ReceivedResponse(response=response, source=source, sha256=sha256_hex(raw))
            )
        return received

    def signal(self, name: str, payload: Any, *, signal_id: str | None = None) -> str:
        """Leave a signal in the run's inbox, as ``orchestrate signal`` does; its id."""
        from ..formats.times import SystemClock, format_time

        signal_id = signal_id or f"{self.name}:signal:{len(self.signals) + 1}"
        self.signals.append(
            SignalRecord(
                signal_id=signal_id,
                name=name,
                payload=json.loads(json.dumps(payload)),
                sent_at=format_time(SystemClock().now()),
            )
        )
        return signal_id

    def read_signals(self, request: ReadSignalsInput) -> list[SignalRecord]:
        return list(self.signals)

    def consume(self, request: ConsumeInput) -> None:
        for item in request.consumed:
            self.inbox.pop(item.source, None)
        for item, reason in request.rejected:  # kept aside, with why
            raw = self.inbox.pop(item.source, None)
            if raw is not None:
                self.rejected[item.source] = (raw, reason)

    def finish(self, request: FinishInput) -> str:
        key = f"{self.name}:runs/{request.run_id}"
        state = restore_archived(request.state, self.archived, source=f"{self.name}:archive")
        self.history[key] = dump_document(state)
        self.archived = b""
        self.state_bytes = None
        self.published = ()
        self.inbox.clear()
        if request.then is not None:
            request.then()
        return key
