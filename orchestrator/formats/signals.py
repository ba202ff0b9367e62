"""Signals: data pushed into a running workflow from outside (``orchestrate signal``).

A run's signals are kept in an append-only inbox, in the order they came, one
:class:`SignalRecord` each (on files: one JSON line each in the run's ``signals.ndjson``;
on PostgreSQL: a row each). Every signal has an id; the run records the ids it consumed
in its state, with the journal entry that consumed them, so each is delivered once.

A run that waits for a signal (``ctx.wait_for_signal``) records what it waits for in its
state (:data:`WAITING_KEY` of the engine's record): the signal's name and, when the wait
has an ``output_type``, the JSON Schema of the payload. :func:`admit_signal` is the
answer gate's check at the door: a payload that does not fit is refused, naming the
field, before anything is kept.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs

from .._errors import AnswerRefusedError, ContractError, UsageError
from .answer_gate import describe_schema, schema_mismatch

#: The file of a run's signals, in the run's directory.
SIGNALS_FILE = "signals.ndjson"
#: The engine record's key that says which signal the run waits for.
WAITING_KEY = "waiting_for_signal"
#: A signal's name: what ``ctx.wait_for_signal`` and ``orchestrate signal`` name it by.
SIGNAL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
#: A signal id given by its sender (``--id``), for a send that may be repeated.
SIGNAL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
MAX_SIGNAL_BYTES = 1024 * 1024


@attrs.frozen(kw_only=True)
class SignalRecord:
    """One signal in a run's inbox: its id, name, payload (JSON) and when it came."""

    signal_id: str
    name: str
    payload: Any
    sent_at: str


def check_signal_name(name: Any, *, where: str) -> str:
    """``name`` when it is a signal name, else a :class:`UsageError` saying what one is."""
    if not isinstance(name, str) or not SIGNAL_NAME.fullmatch(name):
        raise UsageError(
            f"{where}: {name!r} is not a signal name: use 1 to 128 letters, digits, '_', "
            "'.', ':' or '-', starting with a letter or digit"
        )
    return name


def signal_document(record: SignalRecord) -> dict[str, Any]:
    """The JSON form of a signal, as its inbox keeps it."""
    return {
        "signal_id": record.signal_id,
        "name": record.name,
        "payload": record.payload,
        "sent_at": record.sent_at,
    }


def signal_line(record: SignalRecord) -> bytes:
    """A signal as one line of an inbox file (compact JSON, a final newline)."""
    import json

    text = json.dumps(
        signal_document(record), ensure_ascii=False, allow_nan=False, separators=(",", ":")
    )
    return text.encode("utf-8") + b"\n"


def parse_signal(data: Any, *, source: str) -> SignalRecord:
    """A signal from its JSON form, checked field by field."""
    if not isinstance(data, dict):
        raise ContractError("a signal must be a JSON object", source=source, json_path="$")
    for key in ("signal_id", "name", "sent_at"):
        if not isinstance(data.get(key), str):
            raise ContractError(
                f"a signal's {key} must be a string", source=source, json_path=f"$.{key}"
            )
    if "payload" not in data:
        raise ContractError("a signal has a payload", source=source, json_path="$.payload")
    return SignalRecord(
        signal_id=data["signal_id"],
        name=data["name"],
        payload=data["payload"],
        sent_at=data["sent_at"],
    )


def waiting_for(engine_record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What a run whose engine record (``phase_data.x_orchestrator``) is given waits for:
    ``{"name": ..., "schema": ...}``, or ``None`` when it waits for no signal."""
    if not isinstance(engine_record, Mapping):
        return None
    waiting = engine_record.get(WAITING_KEY)
    return dict(waiting) if isinstance(waiting, Mapping) else None


def admit_signal(
    engine_record: Mapping[str, Any] | None, name: str, payload: Any, *, where: str
) -> None:
    """Refuse ``payload`` (:class:`AnswerRefusedError`, one line naming the field) when
    the run waits for signal ``name`` with a payload schema it does not fit. A signal the
    run does not wait for now is kept as it is: its wait judges it when it comes."""
    waiting = waiting_for(engine_record)
    if waiting is None or waiting.get("name") != name:
        return
    schema = waiting.get("schema")
    if not isinstance(schema, Mapping):
        return
    refusal = schema_mismatch(payload, schema, "payload")
    if refusal is None:
        return
    raise AnswerRefusedError(
        f"{where}: signal {name!r} was refused, {refusal.line()} (the run waits for "
        f"{describe_schema(schema)}); nothing was kept: correct the payload and send it again",
        reason="shape",
        details={"refusal": refusal.as_json(), "answer_schema": dict(schema)},
    )


def new_signal(name: str, payload: Any, *, signal_id: str | None = None) -> SignalRecord:
    """A signal sent now: checked name, payload and id (a new one unless given)."""
    import json
    import os
    from datetime import datetime, timezone

    from .times import format_time

    check_signal_name(name, where="signal")
    if signal_id is not None and not SIGNAL_ID.fullmatch(signal_id):
        raise UsageError(
            f"signal id {signal_id!r}: use 1 to 128 letters, digits, '_', '.', ':' or '-'"
        )
    try:
        size = len(json.dumps(payload, allow_nan=False).encode())
    except (TypeError, ValueError) as exc:
        raise UsageError(f"signal {name!r}: the payload is not JSON data: {exc}") from None
    if size > MAX_SIGNAL_BYTES:
        raise UsageError(
            f"signal {name!r}: the payload is {size} bytes; a signal holds at most "
            f"{MAX_SIGNAL_BYTES}: keep big data in a file and send its path"
        )
    return SignalRecord(
        signal_id=signal_id or os.urandom(16).hex(),
        name=name,
        payload=json.loads(json.dumps(payload)),
        sent_at=format_time(datetime.now(timezone.utc)),
    )
