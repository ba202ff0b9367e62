"""``orchestrate history``: a run's timeline, read from its state, for a person.

One line per phase and per agent request, in time order, with the offset from the start
of the run and how long each took: when a phase ended and what it said, when each ask
went out, how it was answered (or why not), what a retry replaced, the completions a rewind
took back (marked "rewound"), and each durable timer the run waited for (from the run's
``run.pause`` events, when the caller passes the log). A live instance
is read from its state file (with the requests already moved to the run's history put
back); a finished one from ``.orchestrator/runs/<run_id>/state.json``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from .._text import plural, shorten
from ..formats.bridge import CheckpointState, HistoryStatus
from ..storage.runs import ENGINE_KEY, load_run

__all__ = ["load_run", "timeline"]


def timeline(state: CheckpointState, log: Sequence[dict[str, Any]] = ()) -> list[str]:
    """The lines of the timeline (see the module's docstring); ``log``: the run's events,
    in order, where the caller has them (the timers come from it)."""
    record: dict[str, Any] = state.phase_data.get(ENGINE_KEY) or {}
    start = _moment(record.get("started_at")) or _first_moment(state)
    events = [
        *_phase_events(state, start),
        *_rewound_events(record, start),
        *_ask_events(state, start),
        *_record_events(record, start),
        *_timer_events(log, start),
    ]
    lines = []
    for moment, _, _, text in sorted(events, key=lambda e: e[:3]):
        lines.append(f"{_offset(start, moment)}  {text}")
    status = record.get("status", "?")
    failure = f": {record['failure']}" if record.get("failure") else ""
    header = (
        f"{record.get('workflow_name', '?')}  run {record.get('run_id', '?')}  "
        f"{status}{failure}  phase {state.phase} {state.phase_name}"
    )
    lineage = [
        f"  {said} run {record[key]}"
        for key, said in (
            ("lineage_run_id", "lineage: first"),
            ("previous_run_id", "goes on from"),
            ("continued_as", "went on as"),
        )
        if isinstance(record.get(key), str)
    ]
    return [header, *lineage, *lines]


#: One line of the timeline: when, phase, ask 0 / done 1, text.
_Event = tuple[datetime, int, int, str]


def _phase_events(state: CheckpointState, start: datetime) -> list[_Event]:
    """Each completed phase, with how long it took since the one before ended."""
    events: list[_Event] = []
    previous_end = start
    for done in state.completed_phases:
        end = _moment(done.completed_at)
        took = _seconds(previous_end, end)
        events.append(
            (
                end or start,
                done.phase,
                1,
                f"phase {done.phase} {done.phase_name}: done{took}  {done.result_summary}",
            )
        )
        previous_end = end or previous_end
    return events


def _rewound_events(record: dict[str, Any], start: datetime) -> list[_Event]:
    """Each completion a rewind took back, at the time it happened, marked so."""
    events: list[_Event] = []
    for rewind in record.get("rewinds") or []:
        if not isinstance(rewind, dict):
            continue
        to_phase = rewind.get("to_phase")
        for done in rewind.get("completed") or []:
            if not isinstance(done, dict):
                continue
            number = done.get("phase")
            end = _moment(done.get("completed_at")) or start
            text = (
                f"phase {number} {done.get('phase_name')}: done, rewound (to phase {to_phase} "
                f"at {_offset(start, _moment(rewind.get('at')) or start)})  "
                f"{done.get('result_summary')}"
            )
            events.append((end, number if isinstance(number, int) else 0, 1, text))
    return events


def _timer_events(log: Sequence[dict[str, Any]], start: datetime) -> list[_Event]:
    """Each pause for a durable timer (a ``run.pause`` with ``until``): where and when due."""
    events: list[_Event] = []
    for event in log:
        data = event.get("data")
        if event.get("event") != "run.pause" or not isinstance(data, dict):
            continue
        until = data.get("until")
        if not isinstance(until, str):
            continue
        set_at = _moment(event.get("ts")) or start
        due = _moment(until)
        due_text = _offset(start, due) if due is not None else until
        number = data.get("phase")
        events.append(
            (
                set_at,
                number if isinstance(number, int) else 0,
                0,
                f"  timer in phase {number} {data.get('skill')}: waits until {until} "
                f"(due at {due_text})",
            )
        )
    return events


def _ask_events(state: CheckpointState, start: datetime) -> list[_Event]:
    """Each recorded ask, with its answer (or its status, for one without its request)."""
    events: list[_Event] = []
    for item in state.agent_requests:
        request = item.x_request
        if request is None:
            events.append(
                (
                    start,
                    item.phase,
                    0,
                    f"  ask {item.agent_name} ({item.request_id[:8]}): {item.status.value}",
                )
            )
            continue
        asked = _moment(request.created_at) or start
        retry = f", retry {request.retry_count}" if request.retry_count else ""
        context = request.context or {}
        if "x_task_id" in context:  # an assignment of the task board
            retry += f", task {context['x_task_id']} attempt {context.get('x_attempt', '?')}"
        events.append(
            (
                asked,
                request.phase,
                0,
                f"  ask {item.agent_name} ({item.request_id[:8]}) in phase {request.phase} "
                f"{request.phase_name}{retry}: {_answer(item)}",
            )
        )
    return events


def _record_events(record: dict[str, Any], start: datetime) -> list[_Event]:
    """What the engine's record notes besides: retries, rewinds, migrations, a fork."""
    events: list[_Event] = []
    for number, attempt in enumerate(record.get("tries") or [], start=2):
        if not isinstance(attempt, dict):
            continue
        text = (
            f"retry (try {number}) of phase {attempt.get('phase')}, "
            f"after: {shorten(str(attempt.get('failure')), 120)}"
        )
        if attempt.get("because"):
            text += (
                f"; the journal was dropped from position {attempt.get('from_position')} "
                f"({plural(len(attempt.get('dropped') or []), 'entry', 'entries')}): "
                f"{attempt['because']}"
            )
        events.append((_moment(attempt.get("at")) or start, 0, 0, text))
    for rewind in record.get("rewinds") or []:
        if isinstance(rewind, dict):
            moved = ", ".join(sorted(rewind.get("outputs") or {})) or "none"
            text = (
                f"rewind from phase {rewind.get('from_phase')} ({rewind.get('from_status')}) "
                f"to phase {rewind.get('to_phase')}; outputs taken back: {moved}"
            )
            events.append((_moment(rewind.get("at")) or start, 0, 0, text))
    for migration in record.get("migrations") or []:
        if isinstance(migration, dict):
            text = (
                f"migrated from version {migration.get('from')} to {migration.get('to')} "
                f"(the state before kept as {migration.get('kept')})"
            )
            events.append((_moment(migration.get("at")) or start, 0, 0, text))
    forked = record.get("forked_from")
    if isinstance(forked, dict):
        text = (
            f"forked from run {forked.get('run_id')} in {forked.get('workdir')}, "
            f"at phase {forked.get('phase')}"
        )
        events.append((start, 0, 0, text))
    return events


def _answer(item: Any) -> str:
    response = item.x_response
    note = f"; {item.x_note}" if item.x_note else ""
    if item.status is HistoryStatus.PENDING or response is None:
        return f"{item.status.value}: waiting{note}"
    took = (
        f" after {response.duration_seconds:.2f} s" if response.duration_seconds is not None else ""
    )
    if response.error_type is not None:
        what = f"{response.error_type.value}{took}: {shorten(response.error_message or '', 90)}"
    else:
        words = len((response.response or "").split())
        what = f"answered{took} ({plural(words, 'word')})"
        metadata = response.metadata
        if metadata is not None and metadata.model:
            tokens = f", {plural(metadata.tokens_used, 'token')}" if metadata.tokens_used else ""
            what += f" by {metadata.model}{tokens}"
    return f"{item.status.value}: {what}{note}"


def _moment(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _first_moment(state: CheckpointState) -> datetime:
    moments = [_moment(state.created_at)] + [
        _moment(item.x_request.created_at) for item in state.agent_requests if item.x_request
    ]
    found = [m for m in moments if m is not None]
    return min(found) if found else datetime.fromtimestamp(0).astimezone()


def _offset(start: datetime, moment: datetime) -> str:
    seconds = max(0.0, (moment - start).total_seconds())
    minutes, rest = divmod(seconds, 60)
    return f"+{int(minutes):02d}:{rest:06.3f}"


def _seconds(start: datetime | None, end: datetime | None) -> str:
    if start is None or end is None:
        return ""
    return f" in {max(0.0, (end - start).total_seconds()):.2f} s"
