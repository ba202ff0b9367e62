"""Wall-clock time: the real clock, and the one way times are written and read (RFC 3339,
UTC, milliseconds, ``Z``). Engine and board both use it; tests inject their own clock."""

from __future__ import annotations

from datetime import datetime, timezone


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        return datetime.now(timezone.utc)


class FixedClock:
    """A clock stopped at one moment. ``ORCHESTRATOR_NOW`` gives one to an ``orchestrate``
    process, so that tests of real processes can pause on one day and resume days later."""

    def __init__(self, moment: datetime) -> None:
        self.moment = moment

    def now(self) -> datetime:
        return self.moment


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC with a ``Z``, millisecond precision."""
    text = moment.astimezone(timezone.utc).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
