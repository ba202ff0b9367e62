"""A run's evidence judged as a whole: what ``orchestrate check evidence --run DIR`` says.

Every ``events.ndjson`` line is read under the strict rules and the step evidence
format's; the lines are numbered 1, 2, 3, ... (``x_seq``) and open with ``run.start``;
every output directory an event names holds a ``results.json`` of the format; and,
where the run's state is there (a finished run's ``state.json``), every phase journal
it vouches for has the digest it keeps. A problem is a ``ContractError`` naming the file,
the line or field, and the rule.
"""

from __future__ import annotations

import hmac
from pathlib import Path
from typing import Any

from .._errors import ContractError
from ..formats.step_names import RESULTS_FILE
from ..formats.steps import parse_event, parse_results
from ..formats.strict_json import loads_strict
from ..storage.durable import sha256_hex
from ..storage.files import STATE_MAX_BYTES, read_json_file, read_regular_file
from ..storage.runs import ENGINE_KEY, EVENTS_FILE
from .documents import JOURNAL_FILE

__all__ = ["verify_run_evidence"]

_FIRST_EVENT = "run.start"


def verify_run_evidence(run_dir: Path) -> dict[str, Any]:
    """What the run's evidence holds (events, results files, journals checked); a
    ``ContractError`` at the first problem."""
    log = run_dir / EVENTS_FILE
    raw = read_regular_file(log, max_bytes=STATE_MAX_BYTES)
    if raw and not raw.endswith(b"\n"):
        raise ContractError(
            "the last line is not whole (a writer stopped mid-line)", source=str(log), rule="line"
        )
    output_dirs: dict[str, None] = {}
    events = 0
    for number, line in enumerate(raw.splitlines(), start=1):
        source = f"{log} line {number}"
        value = loads_strict(line, source=source)
        event = parse_event(value, source=source)
        sequence = value.get("x_seq") if isinstance(value, dict) else None
        events += 1
        if number == 1 and event.event != _FIRST_EVENT:
            raise ContractError(
                f"the log opens with {event.event!r}, not {_FIRST_EVENT!r}",
                source=source,
                json_path="$.event",
                rule="order",
            )
        if sequence != number:
            raise ContractError(
                f"x_seq is {sequence}, not {number}: the lines are not numbered one after another",
                source=source,
                json_path="$.x_seq",
                rule="order",
            )
        where = event.data.get("output_dir") if isinstance(event.data, dict) else None
        if isinstance(where, str) and event.event.endswith(".end"):
            output_dirs[where] = None
    for where in output_dirs:
        results = run_dir / where / RESULTS_FILE
        parse_results(read_json_file(results), source=str(results))
    journals = _journals_checked(run_dir)
    return {"events": events, "results": len(output_dirs), "journals": journals}


def _journals_checked(run_dir: Path) -> int:
    """The phase journals a finished run's state vouches for, each checked by digest."""
    state_file = run_dir / "state.json"
    if not state_file.is_file():
        return 0
    state = read_json_file(state_file, max_bytes=STATE_MAX_BYTES, allow_lone_surrogates=True)
    record = state.get("phase_data", {}).get(ENGINE_KEY) if isinstance(state, dict) else None
    digests = record.get("journals") if isinstance(record, dict) else None
    if not isinstance(digests, dict):
        return 0
    for where, expected in digests.items():
        journal = run_dir / str(where) / JOURNAL_FILE
        data = read_regular_file(journal, max_bytes=STATE_MAX_BYTES)
        if not isinstance(expected, str) or not hmac.compare_digest(sha256_hex(data), expected):
            raise ContractError(
                "changed since it was written: its digest is not the one the run's state "
                "keeps for it",
                source=str(journal),
                rule="digest",
            )
    return len(digests)
