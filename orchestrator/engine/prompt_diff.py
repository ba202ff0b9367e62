"""How a prompt changed under a recorded run, in words: where the recorded text and the
current one first differ, and a short unified diff of the two.

A replay that meets an edited prompt fails (the run was recorded with the old text); the
error shows the texts rather than their digests, bounded so that a long prompt cannot
flood a terminal or the state that keeps the failure: at most ``MAX_DIFF_LINES`` lines of
diff, each cut to ``MAX_LINE`` characters, with a note of what was left out.
"""

from __future__ import annotations

import difflib

from .._text import plural

#: The most lines of unified diff shown (its two header lines included).
MAX_DIFF_LINES = 20
#: The most characters shown of one line of the diff.
MAX_LINE = 120
#: Unchanged lines shown around each change.
CONTEXT_LINES = 2
#: Characters of each text shown from the first difference on.
SNIPPET = 24
#: Characters kept before the first difference when a long line is cut.
LEAD = 40


def first_difference(old: str, new: str) -> tuple[int, int, int]:
    """Where ``old`` and ``new`` first differ: ``(line, column, offset)``, the line and
    column counted from 1, the offset (characters from the start) from 0."""
    offset = next(
        (i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b),
        min(len(old), len(new)),
    )
    line = old.count("\n", 0, offset) + 1
    column = offset - (old.rfind("\n", 0, offset) + 1) + 1
    return line, column, offset


def describe_prompt_change(old: str, new: str) -> tuple[str, list[str]]:
    """Where ``old`` (recorded) and ``new`` (current) first differ, in a line, and their
    unified diff, bounded (empty when they differ in line endings only)."""
    line, column, offset = first_difference(old, new)
    where = (
        f"first difference at line {line}, column {column} (offset {offset}): recorded "
        f"{_snippet(old, offset)}, now {_snippet(new, offset)}"
    )
    diff = list(
        difflib.unified_diff(
            old.splitlines(),
            new.splitlines(),
            "recorded prompt",
            "current prompt",
            n=CONTEXT_LINES,
            lineterm="",
        )
    )
    shown = [_cut(text, column - 1) for text in diff[:MAX_DIFF_LINES]]
    left = len(diff) - len(shown)
    if left:
        shown.append(f"... {plural(left, 'more line')} of the diff")
    return where, shown


def _snippet(text: str, offset: int) -> str:
    """What ``text`` holds from ``offset`` on, quoted and short; the end of the text
    when it ends there."""
    if offset >= len(text):
        return "(the end of the text)"
    part = text[offset : offset + SNIPPET]
    return repr(part) + ("..." if offset + SNIPPET < len(text) else "")


def _cut(text: str, column: int) -> str:
    """One line of the diff cut to ``MAX_LINE`` characters: a changed line keeps
    ``LEAD`` characters before ``column`` (0-based, in the prompt's line) so the
    difference stays in view; ``...`` marks what was cut."""
    if len(text) <= MAX_LINE:
        return text
    sign, body = text[:1], text[1:]
    # The same start on every changed line, so the recorded and the current line align.
    start = min(max(0, column - LEAD), len(body) - LEAD) if sign in "+-" else 0
    prefix = "..." if start else ""
    width = MAX_LINE - 1 - len(prefix)
    part = body[start : start + width]
    suffix = "..." if start + width < len(body) else ""
    if suffix:
        part = part[: width - len(suffix)]
    return f"{sign}{prefix}{part}{suffix}"


def edited_prompt_message(headline: str, *, old: str, new: str, replay_only: bool = False) -> str:
    """The non-determinism error for an edited prompt: ``headline`` (the phase, the
    position, the ask) and where the texts first differ on its first line, then their
    diff, then what to do on the last line."""
    where, diff = describe_prompt_change(old, new)
    if replay_only:
        advice = (
            "runs recorded with the old text do not replay with this code: put the old "
            "text back, or keep those runs on it with ctx.patched"
        )
    else:
        advice = (
            "the run was recorded with the old text, and what was answered to it is kept: "
            "put the old text back and 'orchestrate retry' goes on with the answer already "
            "given, asking nothing again; or, "
            "to keep the new text, 'orchestrate retry' asks again from here ('orchestrate "
            "rewind --to PHASE' runs an earlier phase again, 'orchestrate cancel' ends the "
            "run)"
        )
    return "\n".join([f"{headline}; {where}", *diff, advice])
