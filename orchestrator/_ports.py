"""The ports: small protocols the engine depends on, implemented by ``orchestrator.adapters``.

Each bridge method takes one attrs input object, so it can grow without breaking
adapters.

May import: ``formats`` and ``orchestrator._errors``. The engine, the evidence and the
adapters meet here, so nothing above may leak in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs

from ._board_ports import (
    AppendLedgerInput as AppendLedgerInput,
)
from ._board_ports import (
    BoardDocumentInput as BoardDocumentInput,
)
from ._board_ports import (
    BoardStore as BoardStore,
)
from ._board_ports import (
    HeartbeatInput as HeartbeatInput,
)
from ._board_ports import (
    LedgerLine as LedgerLine,
)
from ._board_ports import (
    LedgerLines as LedgerLines,
)
from ._board_ports import (
    LedgerSnapshot as LedgerSnapshot,
)
from ._board_ports import (
    LedgerStore as LedgerStore,
)
from ._board_ports import (
    ReadLedgerInput as ReadLedgerInput,
)
from ._board_ports import (
    ReplaceLedgerInput as ReplaceLedgerInput,
)
from ._board_ports import (
    WorklogInput as WorklogInput,
)
from ._errors import UsageError
from .formats.bridge import AgentRequest, AgentRequestRecord, AgentResponse, CheckpointState

if TYPE_CHECKING:
    from .formats.signals import SignalRecord


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
    """Response documents recorded durably in state, to be removed from the host's side;
    ``rejected``: those the state holds as refused at the answer gate, each with why, to
    be set aside (kept, never deleted: a person may want to see what they wrote)."""

    consumed: Sequence[ReceivedResponse]
    rejected: Sequence[tuple[ReceivedResponse, str]] = ()


@attrs.frozen(kw_only=True)
class ReadSignalsInput:
    """The signals of run ``run_id``'s inbox (see :mod:`orchestrator.formats.signals`)."""

    run_id: str


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
    #: The first save of the run this one went on as (``ctx.continue_as_new``), at the
    #: same location or in the same store: made together with the end, so no crash leaves
    #: neither run live (files: in place of the state's removal, the new state replacing
    #: the old in one rename; a database: in the same transaction).
    then: Callable[[], None] | None = None


class Bridge(Protocol):
    """One workflow instance's durable state and its mailbox to the host."""

    #: where the state lives, for messages (a file path, or a name)
    location: str

    def lock(self) -> Any:
        """A context manager holding the instance exclusively; refuses if already held."""
        ...

    def exists(self) -> bool: ...

    def load_state(self) -> CheckpointState: ...

    def save_state(self, request: SaveStateInput) -> int | None:
        """Durably replace the state (atomic; survives power loss once it returns), then
        publish ``request.evidence`` as :meth:`write_evidence` does. Returns the state's
        size in bytes as written (``None`` when the store does not tell it)."""
        ...

    def publish(self, request: PublishInput) -> None: ...

    def read_responses(self) -> list[ReceivedResponse]:
        """Every response the host has left, parsed and validated; refuses bad ones whole."""
        ...

    def consume(self, request: ConsumeInput) -> None: ...

    def read_signals(self, request: ReadSignalsInput) -> list[SignalRecord]:
        """Every signal in the run's inbox, in the order they came (whole ones only: a
        sender killed mid-write left none)."""
        ...

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


# -- the runs' store ----------------------------------------------------------------------
#
# Runs live in a store: a work directory's files (``orchestrator.adapters.file_runs``) or a
# PostgreSQL database (``orchestrator.adapters.postgres.runs``). The faces (the commands,
# the UI, the worker) choose one store once and then talk to it through this port only:
# list and read runs, answer and cancel them, and get a run's :class:`Bridge` so the
# engine can start or resume it. Every method that takes more than nothing takes an
# input object.


@attrs.frozen(kw_only=True)
class RunInput:
    """Names one run: ``run_id``; ``None`` means the store's own run where it has one (a
    work directory's live instance, else its last ended run). ``workflow``: the workflow
    name that picks among a work directory's live instances."""

    run_id: str | None = None
    workflow: str | None = None
    #: for a command that acts on the run (rewind, respond): a state whose signature
    #: does not hold is refused before it is read
    signed_only: bool = False
    #: only a run that can be answered: where the store has a run of its own (a work
    #: directory's live instance), its absence is ``NoInstanceError``
    live_only: bool = False


class RunNotNamedError(UsageError):
    """A store of many runs was asked for "its" run: name one (``--run ID``)."""


@attrs.frozen(kw_only=True)
class ListRunsInput:
    """Runs only in these statuses (every run when empty), at most ``limit`` of them."""

    status: Sequence[str] = ()
    limit: int = 1000


@attrs.frozen(kw_only=True)
class RunListing:
    """A run as a store lists it: what a list of runs shows, read cheaply."""

    run_id: str
    workflow: str
    status: str  # queued, running, paused, failed, completed, cancelled (damaged: unreadable)
    updated_at: datetime
    pending: int = 0
    phase: str = ""
    #: why the run cannot be trusted as it is (a signature that does not hold), if so
    problem: str | None = None


@attrs.frozen(kw_only=True)
class StoredRun:
    """One run read whole: its state (live) or its history (ended), every archived
    request whole again; ``None`` for a run queued and not started. ``source``: where
    it was read from, for messages."""

    run_id: str
    workflow_name: str
    status: str
    live: bool
    source: str
    state: CheckpointState | None
    #: why the state's signature does not hold (it is shown, not acted on), if so
    problem: str | None = None
    #: a queued run's workflow reference and what ``run --queue`` recorded to start it
    workflow_ref: str | None = None
    start_args: dict[str, Any] | None = None


@attrs.frozen(kw_only=True)
class PendingInput:
    """The requests waiting for a host: of run ``run_id``, or of every run (``None``);
    of the live instance of ``workflow`` (by its name) where the store has several."""

    run_id: str | None = None
    workflow: str | None = None


@attrs.frozen(kw_only=True)
class PendingDocument:
    """A pending request of run ``run_id``, as its published document's bytes."""

    run_id: str
    request_id: str
    document: bytes


@attrs.frozen(kw_only=True)
class RespondInput:
    """A host's answer to a pending request of ``run``. ``check_shape``: refuse an answer
    of the wrong shape at once (a person, a script); without it the engine judges the
    shape at its next resume and asks again with the refusal attached (``drive``'s
    handler, which is asked again as an in-process agent is)."""

    run: RunInput
    response: AgentResponse
    check_shape: bool = True


@attrs.frozen(kw_only=True)
class SendSignalInput:
    """A signal for ``run``: its name and JSON payload. ``signal_id``: the sender's id for
    it, so that sending it again (after a send that may not have finished) keeps it
    once; ``None``: a new id."""

    run: RunInput
    name: str
    payload: Any
    signal_id: str | None = None


@attrs.frozen(kw_only=True)
class OpenRunInput:
    """The run whose bridge an engine needs: ``run_id`` (a new run's too) and its
    workflow's name."""

    run_id: str | None
    workflow_name: str
    #: a run about to start (or an ended one made live again): a store that keeps one
    #: live run at a time refuses while another lives
    new: bool = False


@attrs.frozen(kw_only=True)
class QueueRunInput:
    """A new run left for a worker to start, with what starts it."""

    run_id: str
    workflow_name: str
    workflow_ref: str
    start_args: dict[str, Any]


@attrs.frozen(kw_only=True)
class ReadEventsInput:
    """The run's event lines after ``x_seq`` ``after``."""

    run_id: str
    after: int = 0


@attrs.frozen(kw_only=True)
class RunFileInput:
    """A file of a run's evidence, by its path relative to the run's directory."""

    run_id: str
    path: str


@attrs.frozen(kw_only=True)
class AnswerInput:
    """A pending request of a run, and how many of the run's requests are pending."""

    run_id: str
    request_id: str
    pending_count: int = 1


@attrs.frozen(kw_only=True)
class AdvancedInput:
    """A run a command advanced: its id, and the requests it waits for now."""

    run_id: str
    pending: Sequence[str] = ()


@attrs.frozen(kw_only=True)
class BoardTailInput:
    """The last ``count`` ledger lines of task board ``board_id`` (``""``: a work
    directory's one board)."""

    board_id: str
    count: int = 30


@attrs.frozen(kw_only=True)
class ChildRunInput:
    """A child run a phase waits for: its id, its parent's, the workflow it runs (a
    reference ``path.py:Class`` or ``module:Class``) and its inputs."""

    run_id: str
    parent_run_id: str
    workflow_ref: str
    inputs: dict[str, Any]
    #: the parent's work directory (where a store that keeps no directory starts it)
    workdir: str


@attrs.frozen(kw_only=True)
class ChildRunState:
    """Where a child run is: ``queued``, ``running``, ``paused``, ``failed``,
    ``completed`` or ``cancelled``; a completed one's outputs (phase name -> output), a
    failed one's failure, and the requests it waits for (its own and its children's)."""

    run_id: str
    status: str
    outputs: dict[str, Any] | None = None
    failure: str | None = None
    pending: tuple[str, ...] = ()

    @property
    def ended(self) -> bool:
        """Whether the child will not go on by itself: completed, failed or cancelled."""
        return self.status in ("completed", "failed", "cancelled")


class ChildRuns(Protocol):
    """How an engine starts, advances, retries and cancels the child runs of its run
    (``ctx.child``): the host gives one to each engine it builds (``Engine.children``).
    Each child is a run of its own in the host's store; this port never runs the parent."""

    def advance(self, request: ChildRunInput) -> ChildRunState:
        """Start the child when it does not exist yet (the same id: the same child), else
        go on with it where this host may (or leave it to a worker); where it is now."""
        ...

    def retry(self, run_id: str) -> None:
        """Re-open a failed child at its failed phase (it goes on at its next advance)."""
        ...

    def cancel(self, run_id: str) -> None:
        """Cancel a child that has not ended (and its own children)."""
        ...


#: The statuses of runs that ended: what ``orchestrate prune`` may remove.
FINISHED_STATUSES = ("completed", "failed", "cancelled")


@attrs.frozen(kw_only=True)
class PruneInput:
    """Which finished runs go: those in ``status`` (never a live one, whatever is asked),
    last changed before ``older_than`` (any time when ``None``), except the ``keep_last``
    most recent of them per workflow (none kept at 0), and never those in ``keep``.
    ``dry_run``: say what would go, remove nothing."""

    status: Sequence[str] = FINISHED_STATUSES
    older_than: datetime | None = None
    keep_last: int = 0
    keep: Sequence[str] = ()
    dry_run: bool = False


@attrs.frozen(kw_only=True)
class PrunedRun:
    """A run ``prune`` chose: ``removed`` (or, on a dry run, would be); else ``skipped``
    says why it stayed (another process held it, it changed meanwhile)."""

    run_id: str
    workflow: str
    status: str
    updated_at: datetime
    removed: bool
    skipped: str | None = None


class RunStore(Protocol):
    """Where runs live, as the faces see them. A read of a run the store does not hold
    raises :class:`orchestrator.NoInstanceError` naming the store and the run."""

    #: the store, for messages (a work directory's path, or the DSN without a password)
    name: str
    #: the directory whose files are the runs' mailbox to their hosts (a work
    #: directory), or ``None`` where the store keeps it
    mailbox_directory: Path | None

    def close(self) -> None: ...

    def command_arguments(self, run_id: str) -> list[str]:
        """The options that name run ``run_id`` of this store to an ``orchestrate``
        command (``--workdir DIR``, ``--store DSN --run ID``)."""
        ...

    def named_run(self, run_id: str) -> str | None:
        """The id commands name run ``run_id`` by (``--run ID``), or ``None`` where the
        store names its one live run itself (a work directory)."""
        ...

    def answer_hint(self, request: AnswerInput) -> str:
        """Where, or how, a host answers the request (a response file, a command)."""
        ...

    def host_lines(self, request: AdvancedInput) -> list[str]:
        """What a command that advanced the run prints for its host, which reads it: the
        files of the requests it waits for (a work directory), or the run's id."""
        ...

    def list_runs(self, request: ListRunsInput) -> list[RunListing]:
        """The runs, most recently changed first."""
        ...

    def read_run(self, request: RunInput) -> StoredRun:
        """A run read whole; with no ``run_id``, the store's own run (a work directory's
        live instance, else its last ended run), or :class:`RunNotNamedError`."""
        ...

    def run_board(self, request: RunInput) -> BoardStore | None:
        """The store of the run's task board, ``None`` when it has none."""
        ...

    def set_aside(self, request: RunInput) -> str:
        """Remove a damaged live run without reading it; where its state was kept. A
        store that has no such runs refuses (``UsageError``)."""
        ...

    def workflow_of(self, request: RunInput) -> str:
        """The workflow reference a run records, read from its signed state (a queued
        run's from what queued it) before anything it names is imported."""
        ...

    def relocate_hint(self, request: RunInput) -> str | None:
        """How a person points the run at its workflow's new place when the recorded one
        is gone (a command), or ``None`` where the store offers no way."""
        ...

    def pending(self, request: PendingInput) -> list[PendingDocument]:
        """Requests waiting for a host, oldest run first, in the order they were made."""
        ...

    def answered(self, request: RunInput) -> frozenset[str]:
        """The ids of the run's requests answered and not yet read by the run."""
        ...

    def respond(self, request: RespondInput) -> str:
        """Take a host's answer to a pending request; refuses one not pending and writes
        nothing then. Returns what the host is told of where the answer went."""
        ...

    def send_signal(self, request: SendSignalInput) -> str:
        """Keep a signal in the run's inbox, durably and in order, after the answer gate
        (:func:`orchestrator.formats.signals.admit_signal`) took its payload; wake the
        run's worker where the store has workers. Returns the signal's id. A run that
        ended takes no signal (``NoInstanceError``)."""
        ...

    def cancel_queued(self, request: RunInput) -> bool:
        """Cancel a run no worker has started: True when it was one (and is cancelled
        now); False when the run has started (its engine cancels it)."""
        ...

    def queue_run(self, request: QueueRunInput) -> None:
        """Leave a new run for a worker to start; a store without workers refuses."""
        ...

    def bridge(self, request: OpenRunInput) -> Bridge:
        """The run's bridge, so an engine can start, resume, retry, rewind or cancel it."""
        ...

    def run_boards(self) -> Any:
        """Where the task boards of this store's runs live: a callable from a run id to
        its :class:`BoardStore`, or ``None`` when each is kept in the run's work
        directory (the engine's default)."""
        ...

    def events(self, request: ReadEventsInput) -> list[tuple[int, bytes]]:
        """The run's event lines after ``request.after``, in order: ``(x_seq, line)``."""
        ...

    def run_files(self, request: RunInput) -> list[str]:
        """The paths of the run's evidence files, relative to its directory, sorted: on
        disk, regular files with one name each, none reached through a link."""
        ...

    def read_run_file(self, request: RunFileInput) -> bytes | None:
        """A file of the run's evidence (``None``: there is none by that path, or what is
        there is a link, a file with another name too, or not a regular file)."""
        ...

    def boards(self) -> list[str]:
        """The ids of the task boards here (``""`` for a work directory's one board)."""
        ...

    def board_store(self, board_id: str) -> BoardStore:
        """Task board ``board_id``'s store; ``NoInstanceError`` when there is none."""
        ...

    def board_tail(self, request: BoardTailInput) -> list[bytes]:
        """The last lines of the board's ledger, read without reading it whole."""
        ...

    def child_store(self, run_id: str) -> RunStore:
        """The store child run ``run_id`` of this store's run lives in: this store when
        it keeps many runs, a place of the child's own where it keeps one (a work
        directory's ``.orchestrator/children/<run_id>/``)."""
        ...

    def prune_runs(self, request: PruneInput) -> list[PrunedRun]:
        """Remove the finished runs ``request`` selects, each whole (its state, history,
        events and evidence files, its mailbox, and what the store keeps of it elsewhere)
        or not at all, oldest first; a run that is live, or held by another process, is
        never removed. Returns the runs chosen, each removed or skipped with why."""
        ...


class WorkerRunStore(RunStore, Protocol):
    """A run store workers share: they claim a run that can advance, advance it through
    its bridge, and release it; idle, they wait to be woken."""

    @property
    def lost(self) -> bool:
        """Whether the store is of no more use (its connection is gone, and its claims)."""
        ...

    def claim(self, *, skip: Sequence[str] = ()) -> str | None:
        """A run that can advance, held by this store until :meth:`release`."""
        ...

    def release(self, run_id: str, *, handled: int | None = None) -> None: ...

    def advanceable(self, *, skip: Sequence[str] = ()) -> int: ...

    def next_wake(self) -> datetime | None: ...

    def boards_of_paused_runs(self) -> list[str]: ...

    def wait(self, timeout: float, *, stop: Any = None) -> bool: ...
