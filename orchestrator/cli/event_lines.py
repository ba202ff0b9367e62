"""One event of a run's ``events.ndjson`` as one readable line: its sequence number, its
UTC time of day, its name and the facts that matter for that kind of event. ``orchestrate
events`` prints these lines, and the local web app shows them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from .._text import plural

__all__ = ["describe_event"]

_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt]([0-9]{2}:[0-9]{2}:[0-9]{2})(\.[0-9]+)?[Zz]")
_SUMMARY_LIMIT = 160


def describe_event(record: dict[str, Any], *, seq: int) -> str:
    """One readable line: sequence number, UTC time of day, event name, key facts."""
    name = str(record.get("event"))
    data = record.get("data")
    facts = _FACTS.get(name, _other_facts)(data if isinstance(data, dict) else {})
    line = f"{seq:>4}  {_time_of_day(record.get('ts'))}  {_clean(name):<14}  {facts}"
    return line.rstrip()


def _real_time(ts: str) -> bool:
    """Whether ``ts`` names a real moment (no month 13, no 25 o'clock)."""
    from ..formats.times import parse_time

    try:
        parse_time(ts)
    except ValueError:
        return False
    return True


def _time_of_day(ts: object) -> str:
    """``HH:MM:SS.mmm`` in UTC."""
    if isinstance(ts, str):
        match = _TIME.fullmatch(ts)
        if match is not None and _real_time(ts):  # already UTC, the engine's form
            return match.group(1) + (match.group(2) or ".")[:4].ljust(4, "0")
        from ..evidence.otel import unix_nanos

        try:
            nanos = unix_nanos(ts)
        except ValueError:
            pass
        else:
            millis = nanos // 1_000_000
            seconds, ms = divmod(millis, 1000)
            minutes, sec = divmod(seconds % 86400, 60)
            return f"{minutes // 60:02d}:{minutes % 60:02d}:{sec:02d}.{ms:03d}"
    return "??:??:??.???"


def _facts_run_start(data: dict[str, Any]) -> str:
    phases = data.get("phases")
    inputs = data.get("inputs")
    parts = [_word(data.get("workflow")), _word(data.get("run_id"))]
    if isinstance(phases, list):
        parts.append(f"{plural(len(phases), 'phase')}: " + ", ".join(_word(p) for p in phases))
    if isinstance(inputs, list) and inputs:
        parts.append("inputs " + ", ".join(_word(i) for i in inputs))
    return _joined(parts)


def _facts_run_end(data: dict[str, Any]) -> str:
    done = data.get("phases_completed")
    return _joined(
        [
            _word(data.get("status")),
            _duration(data.get("duration_ms")),
            None if done is None else f"{_counted(done, 'phase')} completed",
        ],
        tail=data.get("failure"),
    )


def _facts_run_pause(data: dict[str, Any]) -> str:
    waiting = data.get("waiting")
    ids = waiting if isinstance(waiting, list) else []
    what = f"waiting for {plural(len(ids), 'request')}"
    if not ids and data.get("until") is not None:
        what = f"sleeping until {_word(data.get('until'))}"
    return _joined([_phase(data), what], tail=" ".join(_word(i)[:8] for i in ids))


def _facts_skill(data: dict[str, Any]) -> str:
    return _joined(
        [
            _phase(data),
            _word(data.get("status")),
            _confidence(data),
            _duration(data.get("duration_ms")),
        ],
        tail=data.get("summary"),
    )


def _facts_agent(data: dict[str, Any]) -> str:
    attempt = data.get("attempt")
    tokens = data.get("tokens_used")
    chars = data.get("prompt_chars")
    return _joined(
        [
            _word(data.get("agent")),
            _short_id(data.get("request_id")),
            _word(data.get("status")),
            _word(data.get("error_type")),
            _confidence(data),
            _duration(data.get("duration_ms")),
            None if attempt is None else f"attempt {_word(attempt)}",
            None if chars is None else _counted(chars, "char"),
            _word(data.get("model")),
            None if tokens is None else _counted(tokens, "token"),
            None if data.get("skill") is None else f"in {_word(data['skill'])}",
        ],
        tail=data.get("summary", data.get("task")),
    )


def _facts_tool(data: dict[str, Any]) -> str:
    return _joined(
        [
            _word(data.get("tool")),
            _try(data),
            _word(data.get("status")),
            _duration(data.get("duration_ms")),
            "timed out" if data.get("timed_out") is True else None,
            None if data.get("skill") is None else f"in {_word(data['skill'])}",
        ],
        tail=data.get("error"),
    )


def _try(data: dict[str, Any]) -> str | None:
    """``try 2/3``: which try of a step with a retry policy or a timeout."""
    number, most = data.get("attempt"), data.get("max_attempts")
    if number is None:
        return None
    return f"try {_word(number)}" + ("" if most is None else f"/{_word(most)}")


def _facts_artifact(data: dict[str, Any]) -> str:
    where = "/".join(_word(data[k]) for k in ("output_dir", "path") if data.get(k) is not None)
    size = data.get("bytes")
    return _joined(
        [
            _word(data.get("name")),
            where or None,
            _word(data.get("media_type")),
            None if size is None else _counted(size, "byte"),
        ]
    )


def _facts_decision(data: dict[str, Any]) -> str:
    method = data.get("method")
    return _joined(
        [
            _word(data.get("decision", data.get("choice"))),
            None if method is None else f"-> {_word(method)}",
            _short_id(data.get("request_id")),
            None if data.get("skill") is None else f"in {_word(data['skill'])}",
        ],
        tail=data.get("because", data.get("reason")),
    )


def _facts_error(data: dict[str, Any]) -> str:
    return _joined(
        [
            "fatal" if data.get("fatal") else None,
            _word(data.get("agent")),
            _short_id(data.get("request_id")),
            _word(data.get("error_type")),
            None if data.get("skill") is None else f"in {_word(data['skill'])}",
        ],
        tail=data.get("message"),
    )


def _other_facts(data: dict[str, Any]) -> str:
    import json

    pairs = []
    for key, value in data.items():
        shown = value if isinstance(value, str) and value and " " not in value else None
        if shown is None:
            shown = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        pairs.append(f"{key}={shown}")
    return _short(" ".join(pairs))


_FACTS: dict[str, Callable[[dict[str, Any]], str]] = {
    "run.start": _facts_run_start,
    "run.end": _facts_run_end,
    "run.pause": _facts_run_pause,
    "skill.start": _facts_skill,
    "skill.end": _facts_skill,
    "agent.start": _facts_agent,
    "agent.end": _facts_agent,
    "agent.late_answer": _facts_agent,
    "tool.call": _facts_tool,
    "tool.result": _facts_tool,
    "artifact.written": _facts_artifact,
    "decision": _facts_decision,
    "error": _facts_error,
}


def _joined(parts: Sequence[str | None], *, tail: object = None) -> str:
    text = "  ".join(p for p in parts if p)
    if isinstance(tail, str) and tail.strip():
        text += f": {_short(tail)}" if text else _short(tail)
    return text


def _phase(data: dict[str, Any]) -> str | None:
    number, skill = data.get("phase"), data.get("skill")
    if number is None and skill is None:
        return None
    return " ".join(_word(p) for p in ("phase", number, skill) if p is not None)


def _number(value: object) -> float | None:
    """``value`` as a finite float, if it is a JSON number that fits in one."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer of hundreds of digits
        return None
    return number if number == number and abs(number) != float("inf") else None


def _confidence(data: dict[str, Any]) -> str | None:
    value = _number(data.get("confidence"))
    if value is None:
        return None
    if data.get("confidence_reported") is False:
        return None
    return f"confidence {value:g}"


def _duration(raw: object) -> str | None:
    value = _number(raw)
    if value is None:
        return None
    if value < 1000:
        return f"{value:g} ms"
    seconds = value / 1000
    if seconds < 60:
        return f"{seconds:.2f} s"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)} min {rest:.1f} s"


def _short_id(value: object) -> str | None:
    """The first block of a UUID (as ``orchestrate history`` shows it)."""
    return _word(value)[:8] if isinstance(value, str) and value else None


def _counted(value: object, noun: str) -> str:
    """A count from an event: the noun plural unless it is one (what is not a whole
    number is shown as it is)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return plural(value, noun)
    return f"{_word(value)} {noun}s"


def _word(value: object) -> str:
    """``value`` as one clean word; nothing for a missing one (``_joined`` drops it)."""
    if value is None:
        return ""
    return _clean(value if isinstance(value, str) else str(value))


def _short(text: str) -> str:
    """``text`` on one line, cut to the summary's length, control characters escaped."""
    from .._text import printable, shorten

    return printable(shorten(text, _SUMMARY_LIMIT))


def _clean(text: str) -> str:
    """``text`` on one line, control characters shown as escapes."""
    from .._text import printable  # agent answers end up in summaries

    return printable(" ".join(text.split()))
