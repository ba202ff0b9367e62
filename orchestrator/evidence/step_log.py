"""An agent step's ``events.ndjson`` on disk: read it line by line, append to it whole.

The event format is :mod:`orchestrator.formats.steps`; this module adds the file: the
append-only log of :mod:`orchestrator.storage.ndjson`, validated on the way in and out.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import attrs

from ..formats.steps import Event, encode_event, parse_event
from ..storage.ndjson import append_lines, iter_records

__all__ = ["EventLog", "read_events"]


def read_events(
    path: str | os.PathLike[str], *, source: str | None = None, strict: bool = False
) -> Iterator[tuple[int, Event]]:
    """Yield ``(line_number, event)`` for each line of the ``events.ndjson`` at ``path``.

    Line numbers are 1-based and count blank lines, which are skipped; a last line without
    its newline is a write in progress (or torn by a crash) and is not returned. Errors
    name ``source`` (default: the path) and the line: ``events.ndjson line 7: ...``.
    """
    name = source if source is not None else os.fspath(path)
    for number, value in iter_records(Path(path), source=name, allow_lone_surrogates=True):
        yield number, parse_event(value, source=f"{name} line {number}", strict=strict)


def _as_path(value: str | os.PathLike[str]) -> Path:
    return Path(value)


@attrs.frozen
class EventLog:
    """An ``events.ndjson`` that only grows: each append is whole lines, in one write.

    Safe with other processes appending to the same file (an exclusive ``flock``, a torn
    tail of a killed writer cut first); with ``durable`` (the default) each append is
    synced before it returns. Events are validated before anything is written.
    """

    path: Path = attrs.field(converter=_as_path)
    durable: bool = attrs.field(default=True, kw_only=True)

    def append(self, event: Event) -> None:
        """Append one event as one line."""
        self.append_many([event])

    def append_many(self, events: Iterable[Event]) -> None:
        """Append ``events`` in order as one write: all of them, or (on error) none."""
        name = os.fspath(self.path)
        lines = [encode_event(event, source=name) for event in events]
        append_lines(self.path, lines, durable=self.durable)
