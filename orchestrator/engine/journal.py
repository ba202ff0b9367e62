"""The journal: what the current phase recorded, by position, and how a replay reads it.

Each ``ctx.ask``/``ctx.step``/``ctx.event``/... call of a phase takes the next position;
the journal holds one :class:`JournalEntry` per position, with its fingerprint (agent
and prompt digest, or step name). On resume the phase runs again from its top and each
call that is already recorded gets its recorded result back. :class:`Journal` is the
engine's part that keeps the entries (in the run's record), hands them to the phase
context, drops them when a retried phase goes another way, and keeps each entry's JSON
form from one save to the next; :class:`ReplayRows` is the fast way a loop's asks
replay.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from itertools import compress
from itertools import count as count_from
from typing import TYPE_CHECKING, Any

import attrs

from ..formats.bridge import (
    AgentRequestRecord,
    CheckpointState,
    HistoryStatus,
    RequestStatus,
    record_edits,
)
from ..formats.bridge_codec import PROMPT_MIN_LENGTH, TIMEOUT_RANGE
from ..formats.convert import unstructure
from ..formats.times import parse_time
from ..storage import durable as _durable
from ..storage.runs import ENGINE_KEY
from .record import EngineRecord, JournalEntry, Pause
from .workflow import PhaseSpec

if TYPE_CHECKING:
    from .engine import Engine

#: A plain ask answered before, as a replay hands it back: (agent, prompt, answer text).
ReplayRow = tuple[str, str, str]

#: The journal's entries, and their JSON forms.
JournalKept = tuple[list[JournalEntry], list[Any]]


class ReplayRows:
    """The current phase's journal as a replay reads it: by position, each plain ``ask``
    answered with a success as ``(agent, prompt, answer)``, anything else ``None``.

    A phase that asks in a loop replays every earlier ask at each resume: with the rows,
    each costs an index and two compares of texts, nothing per entry beyond. The engine
    keeps them from one resume to the next (a new engine takes them with the state the
    last pause left, see ``lifecycle.PauseHandoff``), and brings them up to date at C
    speed: a row stays while its entry is the very object it was (entries are frozen, and
    one that changes is replaced) and no field of its request was assigned since
    (``record_edits``: an answer that came in, a request marked failed).
    """

    __slots__ = ("_agents", "_edits", "_entries", "_positions", "_seen", "_spec", "rows")

    def __init__(self) -> None:
        self._spec: PhaseSpec | None = None
        self._agents: Sequence[str] = ()  # the workflow's agents when the rows were made
        self._entries: list[JournalEntry] = []  # the journal the rows were made from
        self.rows: list[ReplayRow | None] = []
        self._positions: dict[str, int] = {}  # request id -> the position that holds it
        self._edits: list[Any] | None = None  # the edit log, and how much of it was seen
        self._seen = 0

    def of(
        self,
        record: EngineRecord,
        by_id: dict[str, AgentRequestRecord],
        agents: Sequence[str],
        spec: PhaseSpec,
        *,
        replayable: bool,
    ) -> list[ReplayRow | None]:
        """The rows of ``spec``'s journal in ``record`` now (none when its asks cannot
        replay as they are: a phase that may not ask, a retried phase whose calls are
        checked anew). ``by_id``: the state's requests by id; ``agents``: the workflow's."""
        journal, edits = record.journal, record_edits()
        if record.reopened or not replayable:
            self._spec = None  # made anew next time
            return []
        count = 0
        if spec is self._spec and edits is self._edits and agents == self._agents:
            count = min(len(self._entries), len(journal))
            count = next(
                compress(count_from(), map(operator.is_not, journal, self._entries)), count
            )
            positions = self._positions
            for edited in edits[self._seen :]:
                at = positions.get(edited.request_id, count)
                count = min(count, at)
        else:
            self._positions = {}
        rows, positions = self.rows, self._positions
        del rows[count:]
        for position in range(count, len(journal)):
            rows.append(_replay_row(journal[position], position, by_id, agents, positions))
        self._spec, self._agents, self._entries = spec, agents, list(journal)
        self._edits, self._seen = edits, len(edits)
        return rows


def _replay_row(
    entry: JournalEntry,
    position: int,
    by_id: dict[str, AgentRequestRecord],
    agents: Sequence[str],
    positions: dict[str, int],
) -> ReplayRow | None:
    """``entry``'s row (see :class:`ReplayRows`): an ask whose one request was answered
    with a success, and passes every check the same ask made now would."""
    if entry.kind != "ask" or entry.position != position or len(entry.request_ids) != 1:
        return None
    request_id = entry.request_ids[0]
    positions[request_id] = position  # an edit of its request makes the row again
    record = by_id.get(request_id)
    if record is None or record.status is not HistoryStatus.COMPLETED:
        return None
    request, response = record.x_request, record.x_response
    if (
        request is None
        or response is None
        or response.status is not RequestStatus.SUCCESS
        or request.agent_name not in agents
        or len(request.prompt) < PROMPT_MIN_LENGTH
    ):
        return None
    return request.agent_name, request.prompt, response.response or ""


class PhaseReplay:
    """How a phase's plain asks answered before come back: :meth:`text`, the one way
    from a recorded answer to ``ctx.ask``. The answer is read from the request the
    mailbox settled (``Mailbox.record_answer``), by the journal's entry at the ask's
    position: from the phase's :class:`ReplayRows` (an index and two compares), else
    checked against the entry and its request."""

    __slots__ = ("_agents", "_engine", "_may_ask", "_rows", "_sha256")

    def __init__(self, engine: Engine, spec: PhaseSpec) -> None:
        workflow_cls = engine.workflow_cls
        self._engine = engine
        self._agents = workflow_cls.agents
        self._may_ask = workflow_cls.may_ask(spec)
        self._sha256 = _durable.sha256_constructor()
        self._rows = engine.journal.rows_for(spec, replayable=self._may_ask)

    def text(self, position: int, agent: str, prompt: str, timeout_seconds: int) -> str | None:
        """The recorded answer of the plain ``ask`` at ``position``, when the journal holds
        this very call there, answered with a success, and the call passes every check a
        new one would; ``None`` (and nothing done) in every other case: the full path then
        checks, opens, pauses, fails or re-opens as it says."""
        rows = self._rows
        if position < len(rows):  # an ask answered before: two compares (ReplayRows)
            row = rows[position]
            if (
                row is not None
                and row[1] == prompt
                and row[0] == agent
                and TIMEOUT_RANGE[0] <= timeout_seconds <= TIMEOUT_RANGE[1]
            ):
                return row[2]
        return self._checked(position, agent, prompt, timeout_seconds)

    def _checked(self, position: int, agent: str, prompt: str, timeout_seconds: int) -> str | None:
        """:meth:`text` for the asks the rows do not hold (a request whose text went to
        the run's history, say): checked with the recorded request's prompt, whose digest
        the entry's fingerprint holds (the engine writes both from the same ask), and a
        prompt that differs against the fingerprint itself."""
        engine = self._engine
        if not engine.attached or engine.record.reopened:
            return None
        journal = engine.record.journal
        if position >= len(journal):
            return None
        entry = journal[position]
        if (
            entry.kind != "ask"
            or entry.position != position
            or len(entry.request_ids) != 1
            or not self._may_ask
            or agent not in self._agents
            or len(prompt) < PROMPT_MIN_LENGTH
            or not TIMEOUT_RANGE[0] <= timeout_seconds <= TIMEOUT_RANGE[1]
        ):
            return None
        answered = engine.mailbox.records_by_id().get(entry.request_ids[0])
        if answered is None or answered.status is not HistoryStatus.COMPLETED:
            return None
        request = answered.x_request
        if (
            request is None
            or request.prompt != prompt  # one compare of the texts, where they differ
            or request.agent_name != agent
        ) and entry.fingerprint != [f"{agent} {self._sha256(prompt.encode()).hexdigest()}"]:
            return None
        response = answered.x_response
        if response is None or response.status is not RequestStatus.SUCCESS:
            return None
        return response.response or ""


class Journal:
    """The engine's part that keeps the current phase's journal (in the run's record).

    Reads the attached run through the engine's public ``record``, ``state`` and
    ``mailbox``, and saves through its ``save``; nothing else of the engine."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        #: The current phase's asks answered before, as a replay reads them.
        self.rows = ReplayRows()
        # The entries and their JSON forms at the last save or load: see data()
        self._kept: JournalKept | None = None

    # -- what a phase's calls read --------------------------------------------------------

    def entry(self, position: int) -> JournalEntry | None:
        """The recorded call at ``position``."""
        journal = self._engine.record.journal
        if position < len(journal) and journal[position].position == position:
            return journal[position]
        if position >= len(journal) and (not journal or journal[-1].position == len(journal) - 1):
            # Entries are journaled at rising positions: when the last one is at its index,
            # each one is, and none is at ``position`` (the first new call after a replay).
            return None
        for entry in journal:
            if entry.position == position:
                return entry
        return None

    def rows_for(self, spec: PhaseSpec, *, replayable: bool) -> list[ReplayRow | None]:
        """The replay rows of ``spec``'s journal now (see :class:`ReplayRows`)."""
        engine = self._engine
        by_id = engine.mailbox.records_by_id()
        return self.rows.of(
            engine.record, by_id, engine.workflow_cls.agents, spec, replayable=replayable
        )

    @property
    def reopened(self) -> bool:
        """Whether the current phase replays after a retry (see ``Engine.retry``)."""
        return self._engine.record.reopened

    def usable(self, entry: JournalEntry) -> bool:
        """Whether a retry may hand back what ``entry`` recorded: not a failure."""
        if entry.kind == "step":
            return entry.error is None
        if entry.kind in ("ask", "ask_all"):
            records = self._engine.mailbox.records_by_id()
            return all(
                rid in records and records[rid].status is HistoryStatus.COMPLETED
                for rid in entry.request_ids
            )
        return True

    # -- what a phase's calls write -------------------------------------------------------

    def append(self, entry: JournalEntry) -> None:
        """Journal an ``event``, ``artifact``, patch or timer call, or an ask's requests;
        the next checkpoint saves it."""
        self._engine.record.journal.append(entry)

    def record_step(
        self, position: int, name: str, result: Any, *, error: dict[str, str] | None = None
    ) -> None:
        """Journal a step's result (or the error it raised), and save a checkpoint."""
        self.append(
            JournalEntry(
                position=position, kind="step", fingerprint=[name], result=result, error=error
            )
        )
        self._engine.save(f"after_step_{name}")
        self._engine.stop_if_requested()

    def sleep_until(self, wake: str) -> None:
        """Pause the run (no request: a timer) unless ``wake`` has come."""
        record = self._engine.record
        if self._engine.clock.now() < parse_time(wake):
            record.waiting_until = wake
            raise Pause()
        record.waiting_until = None

    def keep_artifact(
        self, spec: PhaseSpec, position: int, document: dict[str, Any], data: bytes
    ) -> str:
        """Write a phase's artifact now (a replay writes the same file again), then journal
        it; the recorder queues its ``artifact.written``."""
        facts = self._engine.recorder.artifact(spec.number, spec.name, document, data)
        self.append(
            JournalEntry(
                position=position, kind="artifact", fingerprint=[document["path"]], result=facts
            )
        )
        return str(facts["x_location"])

    def drop_from(self, position: int, *, because: str) -> None:
        """The retried phase no longer makes the recorded call at ``position``: it and
        every later entry leave the journal (kept in the try's record), and the phase runs
        on anew from there."""
        record = self._engine.record
        dropped = [e for e in record.journal if e.position >= position]
        record.journal = [e for e in record.journal if e.position < position]
        record.reopened = False
        if record.tries:
            record.tries[-1]["dropped"] = [
                {
                    "position": e.position,
                    "kind": e.kind,
                    "fingerprint": e.fingerprint,
                    "request_ids": e.request_ids,
                }
                for e in dropped
            ]
            record.tries[-1]["from_position"] = position
            record.tries[-1]["because"] = because

    def replace(self, old: JournalEntry, new: JournalEntry) -> None:
        """Put ``new`` in the journal where ``old`` (the very entry) is."""
        journal = self._engine.record.journal
        for index, entry in enumerate(journal):
            if entry is old:
                journal[index] = new
                return
        raise AssertionError("the entry to replace is not in the journal")

    def repoint(self, old_id: str, new_id: str) -> None:
        """The journal slot that waited for ``old_id`` now waits for ``new_id`` (a new entry
        in its place)."""
        journal = self._engine.record.journal
        for index, entry in enumerate(journal):
            if old_id in entry.request_ids:
                ids = [new_id if rid == old_id else rid for rid in entry.request_ids]
                journal[index] = attrs.evolve(entry, request_ids=ids)

    # -- the journal's JSON form ----------------------------------------------------------

    def keep_json(self, state: CheckpointState, record: EngineRecord) -> None:
        """Take each journal entry's JSON form from the state it was read from, so a new
        engine does not encode a long phase's journal again at its first save."""
        written = state.phase_data[ENGINE_KEY].get("journal")
        if not isinstance(written, list) or len(written) != len(record.journal):
            return
        self._kept = (list(record.journal), written)

    def data(self) -> list[Any]:
        """The journal's JSON form, each entry's made once: a phase of many asks or steps
        (a loop, a regression run's cases) saves its whole journal at each one. Entries
        are frozen, and one that changes is replaced (:meth:`repoint`): an entry that is
        the very object it was has the JSON form it had, found by identity at C speed, so
        an unchanged entry costs no step of Python."""
        journal = self._engine.record.journal
        entries, data = self._kept or ([], [])
        count = min(len(entries), len(journal))
        count = next(compress(count_from(), map(operator.is_not, journal, entries)), count)
        made = data[:count] + [unstructure(entry) for entry in journal[count:]]
        self._kept = (list(journal), made)
        return made

    # -- handed from one engine to the next ------------------------------------------------

    def memo(self) -> tuple[ReplayRows, JournalKept | None]:
        """What this part learnt of the run, for the next engine (``PauseHandoff``)."""
        return self.rows, self._kept

    def take_memo(self, memo: tuple[ReplayRows, JournalKept | None]) -> None:
        self.rows, self._kept = memo
