"""Counts said in words: ``1 task``, ``2 tasks``, through one helper wherever a count is
printed, so no message reads ``1 tasks`` or ``task(s)``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from orchestrator._text import plural

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("count", "noun", "many", "said"),
    [
        (0, "task", None, "0 tasks"),
        (1, "task", None, "1 task"),
        (2, "task", None, "2 tasks"),
        (1, "entry", "entries", "1 entry"),
        (3, "entry", "entries", "3 entries"),
    ],
)
def test_plural_says_the_count_with_its_noun(
    count: int, noun: str, many: str | None, said: str
) -> None:
    assert plural(count, noun, many) == said


def counted_in_fstrings(path: Path) -> list[str]:
    """Each place in ``path`` where an f-string puts ``{len(...)}`` before a plural noun,
    or writes a noun as ``noun(s)``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.JoinedStr):
            continue
        for value, after in zip(node.values, node.values[1:], strict=False):
            if not (isinstance(after, ast.Constant) and isinstance(after.value, str)):
                continue
            counts = (
                isinstance(value, ast.FormattedValue)
                and isinstance(value.value, ast.Call)
                and getattr(value.value.func, "id", None) == "len"
            )
            if counts and re.match(r" [a-z]+s\b", after.value):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
            if re.search(r"\b[a-z]+\(s\)", after.value):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    return found


@pytest.mark.slow
def test_no_message_counts_without_the_plural_helper() -> None:
    files = [*(REPO / "orchestrator").rglob("*.py"), *(REPO / "adapters").rglob("*.py")]
    assert [place for path in sorted(files) for place in counted_in_fstrings(path)] == []
