"""The words of an edited prompt, bounded: where the recorded and the current text first
differ (line, column, offset), and a unified diff of at most ``MAX_DIFF_LINES`` lines,
each cut to ``MAX_LINE`` characters around the difference, with notes of what was cut."""

from __future__ import annotations

from orchestrator.engine.prompt_diff import (
    MAX_DIFF_LINES,
    MAX_LINE,
    describe_prompt_change,
    first_difference,
)


def test_the_first_difference_is_found_by_line_column_and_offset() -> None:
    assert first_difference("one\ntwo\nthree", "one\ntwo\nthreE") == (3, 5, 12)
    assert first_difference("short", "shorter") == (1, 6, 5)


def test_a_long_prompt_edited_in_many_places_gives_a_bounded_diff() -> None:
    old = "\n".join(f"rule {i}: " + "say it plainly " * 20 for i in range(200))
    new = old.replace("rule 7:", "rule seven:")
    for number in (30, 60, 90, 150):
        new = new.replace(f"rule {number}:", f"RULE {number}:")
    where, diff = describe_prompt_change(old, new)
    assert where.startswith("first difference at line 8, column 6 (offset ")
    assert "recorded '7: say it plainly say it'..., now 'seven: say it plainly sa'..." in where
    assert len(diff) == MAX_DIFF_LINES + 1
    assert diff[-1].startswith("... ") and diff[-1].endswith("more lines of the diff")
    assert all(len(line) <= MAX_LINE for line in diff)
    (removed,) = [line for line in diff if line.startswith("-rule 7:")]
    (added,) = [line for line in diff if line.startswith("+rule seven:")]
    assert removed.endswith("...") and added.endswith("...")


def test_a_change_far_along_a_long_line_stays_in_view() -> None:
    old = "a" * 500 + " the old words " + "z" * 500
    new = "a" * 500 + " the new words " + "z" * 500
    _, diff = describe_prompt_change(old, new)
    removed, added = diff[-2:]
    assert removed.startswith("-...") and "the old words" in removed
    assert added.startswith("+...") and "the new words" in added
    assert removed.index("old") == added.index("new")


def test_texts_that_differ_in_line_endings_only_say_where() -> None:
    where, diff = describe_prompt_change("ask this\r\n", "ask this\n")
    assert where == "first difference at line 1, column 9 (offset 8): recorded '\\r\\n', now '\\n'"
    assert diff == []
