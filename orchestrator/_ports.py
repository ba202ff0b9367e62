"""The ports: small protocols the engine depends on, implemented by ``orchestrator.adapters``.

Each bridge method takes one attrs input object, so it can grow without breaking
adapters.

May import: ``formats`` and ``orchestrator._errors``. The engine, the evidence and the
adapters meet here, so nothing above may leak in.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

import attrs

from .formats.bridge import AgentRequest, AgentRequestRecord, AgentResponse, CheckpointState


class HostRequired(BaseException):
    """Raised by an invoker that cannot call the agent in-process: the host must answer.

    A ``BaseException``, like the pause it leads to, so an ``except Exception`` in user
    code between the engine and the invoker cannot swallow it.
    """


@runtime_checkable
class AgentInvoker(Protocol):
    """The agent bridge's invoker: call an agent, return its answer text.

    Raise :class:`orchestrator.AgentInvocationError` (with the agent bridge's
    ``error_type``) on failure, or :class:`HostRequired` to defer the call to the host
    through the bridge.
    """

    def invoke(
        self, agent_name: str, prompt: str, timeout_seconds: int = 120, **kwargs: Any
    ) -> str: ...


class AgentAnswer(str):
    """An invoker's answer text with what it knows about the call: ``model``,
    ``tokens_used`` and other facts (``prompt_tokens``, ``attempts``, ...). It is a
    ``str``, so an invoker that returns one still keeps the agent bridge's ``-> str``
    port; the engine copies the facts into the response's ``metadata``.
    """

    model: str | None
    tokens_used: int | None
    facts: dict[str, Any]

    def __new__(
        cls,
        text: str,
        *,
        model: str | None = None,
        tokens_used: int | None = None,
        facts: dict[str, Any] | None = None,
    ) -> AgentAnswer:
        answer = super().__new__(cls, text)
        answer.model = model
        answer.tokens_used = tokens_used
        answer.facts = dict(facts or {})
        return answer


class Clock(Protocol):
    """Wall-clock time, injected so that tests never wait."""

    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...


@attrs.frozen(kw_only=True)
class ReceivedResponse:
    """A response document read from the host, with where it came from and its digest."""

    response: AgentResponse
    source: str
    sha256: str
    #: Found where no request is named (the agent bridge's one ``.agent-response.json``):
    #: it answers the request published first, and may not answer another pending one.
    first_pending_only: bool = False


@attrs.frozen(kw_only=True)
class EvidenceInput:
    """Part of a run's evidence: ``files`` (paths relative to the run's directory), each
    written whole and durably, then ``lines`` appended to the run's ``events.ndjson`` in
    one write (see :meth:`Bridge.write_evidence` for when they are durable)."""

    run_id: str
    files: Sequence[tuple[str, bytes]] = ()
    lines: bytes = b""


@attrs.frozen(kw_only=True)
class SaveStateInput:
    """A checkpoint: the state, and the evidence it makes true (published with it: the
    files as durable as the state, the lines once the state is in place)."""

    state: CheckpointState
    evidence: EvidenceInput | None = None


@attrs.frozen(kw_only=True)
class PublishInput:
    """The requests now pending, in order; anything else published before is withdrawn."""

    pending: Sequence[AgentRequest]


@attrs.frozen(kw_only=True)
class ConsumeInput:
    """Response documents recorded durably in state, to be removed from the host's side."""

    consumed: Sequence[ReceivedResponse]


@attrs.frozen(kw_only=True)
class ArchiveInput:
    """Finished requests of completed phases: keep them whole in the run's history,
    durably, before the state drops their text."""

    records: Sequence[AgentRequestRecord]
    run_id: str


@attrs.frozen(kw_only=True)
class FinishInput:
    """The run ended (``completed`` or ``cancelled``): keep its history, clear the rest."""

    state: CheckpointState
    outcome: str
    run_id: str


class Bridge(Protocol):
    """One workflow instance's durable state and its mailbox to the host."""

    #: where the state lives, for messages (a file path, or a name)
    location: str

    def lock(self) -> Any:
        """A context manager holding the instance exclusively; refuses if already held."""
        ...

    def exists(self) -> bool: ...

    def load_state(self) -> CheckpointState: ...

    def save_state(self, request: SaveStateInput) -> None:
        """Durably replace the state (atomic; survives power loss once it returns), then
        publish ``request.evidence`` as :meth:`write_evidence` does."""
        ...

    def publish(self, request: PublishInput) -> None: ...

    def read_responses(self) -> list[ReceivedResponse]:
        """Every response the host has left, parsed and validated; refuses bad ones whole."""
        ...

    def consume(self, request: ConsumeInput) -> None: ...

    def archive(self, request: ArchiveInput) -> None:
        """Append records to the run's history; durable once it returns."""
        ...

    def evidence_mark(self, run_id: str) -> int:
        """The ``x_seq`` of the last whole line of the run's event log; 0 when it has none."""
        ...

    def write_evidence(self, request: EvidenceInput) -> None:
        """Write the files, then append the lines. The files are durable once it returns;
        the lines may reach the disk later, but before a later save or finish, so they
        are never lost while the state that holds their events is gone."""
        ...

    def state_token(self) -> object | None:
        """Something that changes whenever the stored state does (``None``: unknown), so a
        long-lived engine can skip re-reading a state it wrote itself."""
        ...

    def saved_token(self) -> object | None:
        """:meth:`state_token` of the state this bridge last saved or loaded, known
        without reading the store again (``None``: unknown)."""
        ...

    def finish(self, request: FinishInput) -> str:
        """Clean up after the run; returns where the run's history was kept (archived
        records whole again)."""
        ...

    def take_over(self, previous: Bridge) -> bool:
        """Take what ``previous`` (another bridge of this process, on the same instance)
        knows of the state it saved last, as if this one had saved it: True when it can;
        False leaves this bridge as it was."""
        ...


# -- the task board's store ---------------------------------------------------------------
#
# A board keeps its ledger (delta lines), its documents (board info, packets, results,
# verdicts), heartbeats and worklogs in a store: a directory (``orchestrator.board.files``)
# or a database (``orchestrator.adapters.postgres.board``). The board's logic (the fold,
# the judging, the gateway, dispatch) is one code path over both; a store only keeps bytes
# and says where it is. Every method that takes more than a name takes an input object.


@attrs.frozen(kw_only=True)
class ReadLedgerInput:
    """Read the ledger's whole lines after ``after``, a position a read, an append or a
    snapshot of this store gave (0: from the start)."""

    after: int = 0


@attrs.frozen(kw_only=True)
class LedgerLines:
    """Whole ledger lines, each ending in ``\\n``, in ledger order, and the position after
    them. ``restart``: the ledger is no longer the one ``after`` was a position in (it was
    replaced): read it again from the start."""

    data: bytes
    end: int
    restart: bool = False


@attrs.frozen(kw_only=True)
class LedgerLine:
    """One delta as the ledger keeps it: ``data`` is its compact JSON and ``\\n``, exactly
    the bytes of a ``ledger.ndjson`` line."""

    seq: int
    delta_id: str
    task_id: str
    data: bytes


@attrs.frozen(kw_only=True)
class AppendLedgerInput:
    """Deltas judged under the writers' lock (see :meth:`LedgerStore.locked`), numbered on
    from the head the writer folded; ``after``: the position that head was read to."""

    lines: Sequence[LedgerLine]
    after: int


@attrs.frozen(kw_only=True)
class LedgerSnapshot:
    """The fold of the ledger up to ``position`` (head ``seq``): ``body`` is the board's
    (rows and delta index), the position the store's."""

    position: int
    seq: int
    body: dict[str, Any]


@runtime_checkable
class LedgerStore(Protocol):
    """Where a board's ledger lines live: appended under one writers' lock, read by
    anyone from a position on."""

    #: where the ledger is, for messages (a file path, or a board in a database)
    ledger_location: str

    def locked(self) -> Any:
        """A context manager holding the board's writers' lock (waiting for it). Every
        read made inside sees every append made before; the reads, the judging and
        :meth:`append_ledger` inside it are one step no other writer enters (in a
        database: one transaction, rolled back when the block raises)."""
        ...

    def read_ledger(self, request: ReadLedgerInput) -> LedgerLines: ...

    def append_ledger(self, request: AppendLedgerInput) -> int:
        """Append the lines (inside :meth:`locked`); returns the position after them. A
        store that can refuses a ``delta_id`` or sequence number already there."""
        ...

    def load_snapshot(self) -> LedgerSnapshot | None:
        """The stored fold, if there is one that matches the ledger as it is."""
        ...

    def save_snapshot(self, request: LedgerSnapshot) -> None: ...


@attrs.frozen(kw_only=True)
class BoardDocumentInput:
    """A document of one attempt at a task: its ``kind`` (``packets``, ``results``,
    ``verdicts``), written whole."""

    kind: str
    task_id: str
    attempt: int
    data: bytes = b""


@attrs.frozen(kw_only=True)
class WorklogInput:
    """One worklog line (JSON and ``\\n``) for the worklog at ``path`` (the task's
    ``worklog_path``, normalised); ``delta_id``: the ledger delta the line explains."""

    path: str
    line: bytes
    delta_id: str | None = None


@attrs.frozen(kw_only=True)
class HeartbeatInput:
    task_id: str
    at: str  # RFC 3339


class BoardStore(LedgerStore, Protocol):
    """Everything a task board keeps: the ledger, ``board.json``, the attempts'
    documents, heartbeats and worklogs, and the lock of its maintenance passes."""

    #: where the board is, for messages and for the asks of its tasks (``x_board``)
    location: str
    #: the arguments that name this board to ``orchestrate board`` (``--board DIR``)
    cli_arguments: str
    #: what the asks of this board's tasks carry besides ``x_board`` and ``x_packet`` so
    #: a subagent elsewhere reaches the board (a directory's: nothing)
    ask_context: dict[str, str]

    def close(self) -> None: ...

    def board_exists(self) -> bool: ...

    def read_info(self) -> bytes | None:
        """``board.json``'s bytes, ``None`` when there is no board."""
        ...

    def create_board(self, info: bytes) -> bool:
        """Make the board, ``info`` its ``board.json``; durable once it returns. False when
        another writer made the board first (its ``board.json`` is kept)."""
        ...

    def write_document(self, request: BoardDocumentInput) -> None:
        """Write the document whole and durably, replacing an earlier one."""
        ...

    def read_document(self, request: BoardDocumentInput) -> bytes | None: ...

    def document_location(self, request: BoardDocumentInput) -> str:
        """Where the document is, for messages and asks (a path, or a name)."""
        ...

    def write_heartbeat(self, request: HeartbeatInput) -> None:
        """Record a heartbeat (a lost one is harmless: the next one replaces it)."""
        ...

    def read_heartbeat(self, task_id: str) -> str | None:
        """The last heartbeat's text as written, ``None`` when there is none."""
        ...

    def append_worklog(self, request: WorklogInput) -> None:
        """Append one line, whole and durably, with other writers appending too."""
        ...

    def read_worklog(self, path: str) -> list[Any]:
        """The worklog's records in order; a line that is not strict JSON raises."""
        ...

    def worklog_has_entry(self, request: WorklogInput) -> bool:
        """Whether the worklog holds the line written for ``request.delta_id``."""
        ...

    def maintenance(self, *, wait: float | None) -> Any:
        """A context manager holding the board's maintenance lock, yielding True; waiting
        ``wait`` seconds at most (then :class:`InstanceBusyError`), or with ``None`` not
        waiting at all (yielding False when another pass holds it)."""
        ...

    def sweep(self) -> None:
        """Clear what writers killed mid-write left behind."""
        ...
