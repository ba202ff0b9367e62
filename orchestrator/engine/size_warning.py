"""The size warning: a run's state or history past the size its workflow allows warns once.

A state is rewritten at every checkpoint and a history only grows; past the workflow's
``warn_state_bytes`` (1 MiB unless set) or ``warn_history_bytes`` (256 MiB), the run gets a
``run.size_warning`` event and a line on stderr naming the largest items, once per run (the
state keeps which warnings were told).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from .._text import plural
from ..formats.bridge import AgentRequestRecord
from ..formats.strict_json import dumps_canonical
from ..storage.runs import ENGINE_KEY

if TYPE_CHECKING:
    from .engine import Engine

EVENT_RUN_SIZE_WARNING = "run.size_warning"
#: How many of the largest items a warning names.
NAMED = 3
KIB = 1024


def note_archived(engine: Engine, lines: list[tuple[str, int]]) -> None:
    """Count the request lines (``(request id, bytes)``) just appended to the history,
    keeping its total and its largest lines in the run's record."""
    record = engine.record
    record.history_bytes = (record.history_bytes or 0) + sum(size for _, size in lines)
    largest = [(str(i), int(n)) for i, n in record.history_largest or []] + lines
    largest.sort(key=lambda item: -item[1])
    record.history_largest = [[i, n] for i, n in largest[:NAMED]]


def check_sizes(engine: Engine, state_bytes: int | None) -> None:
    """Warn once when the state just written (``state_bytes``, when the store tells it) or
    the run's history is past the workflow's limit. The event goes with the next
    checkpoint."""
    cls, record = engine.workflow_cls, engine.record
    told = record.size_warned or []
    found: list[tuple[str, int, int, list[tuple[str, int]]]] = []
    if state_bytes is not None and "state" not in told and state_bytes > cls.warn_state_bytes:
        found.append(("state", state_bytes, cls.warn_state_bytes, _state_items(engine)))
    history = record.history_bytes or 0
    if "history" not in told and history > cls.warn_history_bytes:
        items = [(f"request {i}", int(n)) for i, n in record.history_largest or []]
        found.append(("history", history, cls.warn_history_bytes, items))
    for what, size, limit, items in found:
        named = ", ".join(f"{name} ({_kib(n)})" for name, n in items) or "none"
        option = f"warn_{what}_bytes"
        print(
            f"orchestrate: warning: run {record.run_id}: its {what} is {_kib(size)}, past "
            f"{_kib(limit)} (the workflow's {option}); largest: {named}",
            file=sys.stderr,
        )
        engine.recorder.emit(
            EVENT_RUN_SIZE_WARNING,
            {
                "what": what,
                "bytes": size,
                "limit": limit,
                "largest": [{"item": name, "bytes": n} for name, n in items],
            },
        )
        told = [*told, what]
    if found:
        record.size_warned = told


def _state_items(engine: Engine) -> list[tuple[str, int]]:
    """The state's largest items: each phase's output, each request kept whole, and the
    current phase's journal."""
    state = engine.state
    items: list[tuple[str, int]] = []
    for name, value in state.phase_data.items():
        if name != ENGINE_KEY:
            items.append((f"output of phase {name!r}", _size(value)))
    for request in state.agent_requests:
        items.append((f"request {request.request_id}", _request_size(request)))
    journal = plural(len(engine.record.journal), "entry", "entries")
    items.append((f"journal ({journal})", _journal_size(engine)))
    items.sort(key=lambda item: -item[1])
    return items[:NAMED]


def _request_size(request: AgentRequestRecord) -> int:
    size = 0
    if request.x_request is not None:
        size += len(request.x_request.prompt.encode())
    if request.x_response is not None and request.x_response.response is not None:
        size += len(request.x_response.response.encode())
    return size


def _journal_size(engine: Engine) -> int:
    data: Any = engine.journal.data()
    return _size(list(data))


def _size(value: Any) -> int:
    try:
        return len(dumps_canonical(value))
    except (TypeError, ValueError):
        return len(repr(value).encode())


def _kib(size: int) -> str:
    return f"{size / KIB:,.1f} KiB" if size < KIB * KIB else f"{size / KIB / KIB:,.1f} MiB"
