"""Signals into a running workflow: what ``ctx.wait_for_signal`` and ``ctx.signals`` read.

A run's signals wait in its inbox (the bridge's :meth:`~orchestrator._ports.Bridge.read_signals`),
in the order they came. A phase consumes them by journal entries: ``signal`` (one wait:
the deadline, then the signal taken or the timeout) and ``signals`` (a drain: every
signal of the name not consumed yet). The ids consumed go into the engine record's
``signals_consumed`` at the same time, and both are saved in the same state document by
the next checkpoint: a crash before it leaves the signal unconsumed (the resume takes it
again, the same one, first in order), a crash after it has it consumed and journaled.
Each signal is thus delivered exactly once, and a replay returns what the journal says.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from .._ports import ReadSignalsInput
from ..formats.answer_gate import schema_mismatch
from ..formats.convert import structure
from ..formats.signals import SignalRecord
from ..formats.times import parse_time
from .record import JournalEntry, Pause, copy_json

if TYPE_CHECKING:
    from .engine import Engine


class SignalBox:
    """The engine's part that hands a phase the signals of its run's inbox, once each."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def unconsumed(self, name: str) -> list[SignalRecord]:
        """The signals named ``name`` in the inbox that no call consumed yet, in order."""
        engine = self._engine
        record = engine.record
        seen = set(record.signals_consumed)
        found = []
        for signal in engine.bridge.read_signals(ReadSignalsInput(run_id=record.run_id)):
            # An id kept twice (two senders of one id at once) is one signal: the first.
            if signal.signal_id not in seen:
                seen.add(signal.signal_id)
                if signal.name == name:
                    found.append(signal)
        return found

    def arrived(self) -> bool:
        """Whether the signal the run waits for is in its inbox, not consumed yet."""
        waiting = self._engine.record.waiting_for_signal
        return waiting is not None and bool(self.unconsumed(str(waiting["name"])))

    def drain(self, position: int, name: str) -> JournalEntry:
        """Consume every signal named ``name`` not consumed yet; the journal entry that
        records them (journaled here)."""
        engine = self._engine
        taken = self.unconsumed(name)
        engine.record.signals_consumed.extend(s.signal_id for s in taken)
        entry = JournalEntry(
            position=position,
            kind="signals",
            fingerprint=[name],
            result=[{"signal_id": s.signal_id, "payload": copy_json(s.payload)} for s in taken],
        )
        engine.journal.append(entry)
        return entry

    def receive(self, entry: JournalEntry, schema: dict[str, Any] | None) -> JournalEntry:
        """The wait ``entry`` (journaled, without its outcome) given its outcome: the first
        signal of its name that fits ``schema`` (those that do not are consumed as refused,
        with why), or the timeout once its deadline came; else the run pauses for it."""
        engine = self._engine
        record = engine.record
        name = entry.fingerprint[0]
        result = dict(entry.result)
        deadline = result.get("deadline")
        if engine.replay_only:
            raise Pause()  # the recorded run was waiting here
        refused: list[dict[str, Any]] = list(result.get("refused") or [])
        for signal in self.unconsumed(name):
            record.signals_consumed.append(signal.signal_id)
            found = None if schema is None else schema_mismatch(signal.payload, schema, "payload")
            if found is not None:
                refused.append({"signal_id": signal.signal_id, "refusal": found.line()})
                continue
            result.update(signal_id=signal.signal_id, payload=copy_json(signal.payload))
            break
        else:
            if deadline is not None and engine.clock.now() >= parse_time(deadline):
                result["timed_out"] = True
            else:
                if refused:
                    result["refused"] = refused
                    engine.journal.replace(attrs.evolve(entry, result=result))
                record.waiting_for_signal = {"name": name, "schema": schema}
                record.waiting_until = deadline
                raise Pause()
        if refused:
            result["refused"] = refused
        record.waiting_for_signal = None
        record.waiting_until = None
        done = attrs.evolve(entry, result=result)
        engine.journal.replace(done)
        return done


def delivered(entry: JournalEntry, output_type: Any, *, where: str) -> Any:
    """What a wait whose ``entry`` has its outcome returns: the payload, structured into
    ``output_type`` when given; ``None`` when it timed out."""
    result = entry.result
    if "payload" not in result:
        return None
    payload = copy_json(result["payload"])
    if output_type is None:
        return payload
    return structure(payload, output_type, source=where)


def consumed_ids(entry: JournalEntry) -> list[str]:
    """The ids of the signals a journal entry consumed (none for other kinds)."""
    if entry.kind == "signals":
        return [str(item["signal_id"]) for item in entry.result or ()]
    if entry.kind == "signal" and isinstance(entry.result, dict):
        ids = [str(item["signal_id"]) for item in entry.result.get("refused") or ()]
        if "signal_id" in entry.result:
            ids.append(str(entry.result["signal_id"]))
        return ids
    return []
