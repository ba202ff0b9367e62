"""Text from agents and hosts, made safe to print on a terminal; counts said in words."""

from __future__ import annotations

import re

# C0 and C1 controls (escape sequences start with them), and the Unicode controls that
# reorder or break what a terminal shows (bidi overrides, line and paragraph separators).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028-\u202e\u2066-\u2069]")
_UNPRINTABLE_IN_LINES = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028-\u202e\u2066-\u2069]"
)


def printable(text: str, *, lines: bool = False) -> str:
    """``text`` with control characters shown as ``\\uXXXX`` escapes; with ``lines``,
    newlines and tabs are kept."""
    pattern = _UNPRINTABLE_IN_LINES if lines else _UNPRINTABLE
    return pattern.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def shorten(text: str, limit: int) -> str:
    """``text`` on one line (whitespace runs made one space), cut to ``limit`` characters
    with ``...`` at the end when it is longer."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``count`` and ``noun``, the noun plural unless the count is one: ``1 task``,
    ``0 tasks``, ``2 entries`` (``many`` when adding an ``s`` is not the plural)."""
    return f"{count} {noun if count == 1 else many or noun + 's'}"
