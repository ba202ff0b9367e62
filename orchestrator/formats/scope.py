"""Resource locks and path pins: pure rules over repository-relative paths.

Two companion rules of the task formats live here, with no I/O and no dependency beyond
the standard library:

* **Locks** (the lock scopes of the task board documents, ``docs/formats/task-board.md``).
  A resource is a path relative to the repository root, normalised before it is compared
  (:func:`normalize_resource`). Two locks conflict when their resources are equal or one
  is a directory prefix of the other at a ``/`` boundary (``src`` and ``src/api.py``
  conflict; ``src`` and ``src2`` do not). Locks of one task never conflict with each
  other. Every answer is sorted, so it never depends on the order of the input.
* **Pins** (task IO with pins, ``docs/formats/task-io.md``). Globs relative to the
  repository root: ``*`` and ``?`` stay within one path segment, a ``**`` segment matches
  zero or more whole segments, and a pattern ending in ``/`` covers everything under that
  directory. Empty ``allowed_paths`` denies all; a forbidden match denies; an allowed
  match allows; anything else is denied. A forbidden pattern also covers everything under
  a directory it matches; an allowed one covers only what it matches (each side errs
  toward denial).

Normalisation is purely lexical: it never looks at the file system, so symbolic links
are not resolved and comparison is case-sensitive (as Git's index is).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence

from .._errors import OrchestratorError

__all__ = [
    "ScopeError",
    "check_lock_table",
    "check_pins",
    "check_scope_pair",
    "in_scope",
    "lock_conflicts",
    "normalize_resource",
    "pin_matches",
    "pins_allow",
    "resources_conflict",
]


class ScopeError(OrchestratorError, ValueError):
    """A resource, scope or pin that cannot be used as written.

    ``value`` is the offending text as it was given; ``related`` is the other entry when
    the problem is a pair of entries (a forbidden entry overlapping a lock entry), else
    ``""``. The message says what is wrong and what to write instead.
    """

    def __init__(self, message: str, *, value: str, related: str = "") -> None:
        self.value = value
        self.related = related
        super().__init__(message)


# -- normalisation ---------------------------------------------------------------------


def normalize_resource(value: str) -> str:
    """The canonical form of a repository-relative path, or :class:`ScopeError`.

    Trims surrounding whitespace, turns ``\\`` into ``/``, drops ``.`` segments, empty
    segments (duplicate, leading ``./`` and trailing separators). Refused: a value that
    is empty after that; any ``..`` segment, even one that would stay inside the
    repository (``a/../b``), because a lock or pin must name one path unambiguously and
    a lexical ``..`` means something else once ``a`` is a symbolic link; an absolute
    path (leading ``/`` or a Windows drive such as ``C:``); control characters; and a
    segment that begins or ends with whitespace (after trimming the whole value), which
    is almost always a typo and would make normalising twice differ from once.

    The result is idempotent: ``normalize_resource(normalize_resource(x))`` equals
    ``normalize_resource(x)``.
    """
    return _normalize(value, "resource")


def _normalize(value: str, noun: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"a {noun} is a string, not {type(value).__name__}: {value!r}")
    text = value.strip().replace("\\", "/")
    if not text:
        raise ScopeError(
            f"{noun} {value!r} is empty; write a path relative to the repository root, "
            "such as 'src/api.py'",
            value=value,
        )
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in text):
        raise ScopeError(
            f"{noun} {value!r} contains a control character; write the path without it",
            value=value,
        )
    if text.startswith("/") or _has_drive(text):
        raise ScopeError(
            f"{noun} {value!r} is an absolute path; paths here are relative to "
            f"the repository root: write {_relative_hint(text)!r} instead",
            value=value,
        )
    segments = [segment for segment in text.split("/") if segment not in ("", ".")]
    if ".." in segments:
        raise ScopeError(_dotdot_message(value, segments, noun), value=value)
    for segment in segments:
        if segment != segment.strip():
            raise ScopeError(
                f"{noun} {value!r} has a segment {segment!r} that begins or ends with "
                f"whitespace; write {'/'.join(s.strip() for s in segments)!r} if that is "
                "what you meant",
                value=value,
            )
    if not segments:
        raise ScopeError(
            f"{noun} {value!r} names the repository root itself; name a file or "
            "directory inside it, such as 'src'",
            value=value,
        )
    return "/".join(segments)


def _has_drive(text: str) -> bool:
    return len(text) >= 2 and text[1] == ":" and text[0].isascii() and text[0].isalpha()


def _relative_hint(text: str) -> str:
    rest = text[2:] if _has_drive(text) else text
    rest = rest.lstrip("/")
    return rest or "src/api.py"


def _dotdot_message(value: str, segments: list[str], noun: str) -> str:
    kept: list[str] = []
    escapes = False
    for segment in segments:
        if segment != "..":
            kept.append(segment)
        elif kept:
            kept.pop()
        else:
            escapes = True
    if escapes or not kept:
        return (
            f"{noun} {value!r} climbs out of the repository with '..'; paths here "
            "are relative to the repository root: name a path inside it"
        )
    return (
        f"{noun} {value!r} has a '..' segment, which is not allowed: "
        f"write {'/'.join(kept)!r} instead"
    )


def _normalize_all(values: Sequence[str], what: str) -> list[str]:
    if isinstance(values, str):
        raise TypeError(f"{what} is a list of paths, not the single string {values!r}")
    return [normalize_resource(value) for value in values]


def _covers(outer: str, inner: str) -> bool:
    """``inner`` equals ``outer`` or lies under it (both normalised)."""
    return inner == outer or (inner.startswith(outer) and inner[len(outer)] == "/")


def _overlap(a: str, b: str) -> bool:
    return _covers(a, b) or _covers(b, a)


# -- locks -----------------------------------------------------------------------------


def normalised_conflict(a: str, b: str) -> bool:
    """:func:`resources_conflict` for two resources already normalised (no work repeated)."""
    return _overlap(a, b)


def resources_conflict(a: str, b: str) -> bool:
    """Whether locks on ``a`` and ``b`` conflict: equal, or one under the other.

    Both are normalised first (:class:`ScopeError` when one cannot be). The relation is
    symmetric: ``src`` conflicts with ``src/api.py`` and ``src/api.py`` with ``src``;
    ``src`` does not conflict with ``src2``.
    """
    return _overlap(normalize_resource(a), normalize_resource(b))


def in_scope(path: str, scope: Sequence[str]) -> bool:
    """Whether ``path`` equals or lies under an entry of ``scope`` (all normalised).

    An empty scope contains nothing. ``src/api.py`` is in ``["src"]``; ``src2/x.py`` is
    not; ``src`` is not in ``["src/api.py"]``.
    """
    wanted = normalize_resource(path)
    return any(_covers(entry, wanted) for entry in _normalize_all(scope, "a scope"))


def lock_conflicts(
    held: Iterable[tuple[str, str]], wanted_task: str, wanted: Sequence[str]
) -> list[tuple[str, str, str]]:
    """The held locks that keep ``wanted_task`` from locking ``wanted``.

    ``held`` is the active lock table as ``(task_id, resource)`` pairs. Each answer is
    ``(held_task, held_resource, wanted_resource)`` with both resources normalised;
    locks ``wanted_task`` holds itself are never in the way. The answer is sorted and
    without duplicates, so it does not depend on the order of either input.
    """
    wanted_resources = sorted(set(_normalize_all(wanted, "the wanted lock scope")))
    found: set[tuple[str, str, str]] = set()
    for held_task, held_resource in held:
        if held_task == wanted_task:
            continue
        resource = normalize_resource(held_resource)
        for want in wanted_resources:
            if _overlap(resource, want):
                found.add((held_task, resource, want))
    return sorted(found)


def check_lock_table(
    locks: Iterable[tuple[str, str, bool]],
) -> list[tuple[str, str, str, str]]:
    """Every pair of active locks of different tasks that conflict, for a validator.

    ``locks`` holds ``(task_id, resource, active)`` rows; inactive rows (history) are
    ignored. Each answer is ``(task_a, resource_a, task_b, resource_b)`` with normalised
    resources and ``(task_a, resource_a) < (task_b, resource_b)``; the list is sorted
    and without duplicates, so it does not depend on the order of the rows. An empty
    list means the table is consistent.
    """
    active_locks = {
        (task_id, normalize_resource(resource)) for task_id, resource, active in locks if active
    }
    entries = sorted(
        (tuple(resource.split("/")), task_id, resource) for task_id, resource in active_locks
    )
    # Sorted by segment tuples, everything under a resource directly follows it, so a
    # stack of the enclosing resources finds every overlapping pair in one pass.
    found: set[tuple[str, str, str, str]] = set()
    enclosing: list[tuple[tuple[str, ...], str, str]] = []
    for segments, task_id, resource in entries:
        while enclosing and segments[: len(enclosing[-1][0])] != enclosing[-1][0]:
            enclosing.pop()
        for _, other_task, other_resource in enclosing:
            if other_task != task_id:
                first, second = sorted([(other_task, other_resource), (task_id, resource)])
                found.add((*first, *second))
        enclosing.append((segments, task_id, resource))
    return sorted(found)


def check_scope_pair(
    lock_scope: Sequence[str], forbidden_scope: Sequence[str]
) -> tuple[list[str], list[str]]:
    """Check a task's ``lock_scope`` against its ``forbidden_scope``; return both normalised.

    ``lock_scope`` must name at least one resource, every entry of both must normalise,
    and no forbidden entry may equal, contain or lie inside a lock entry (the task could
    not do its work, or the forbidden entry would be unenforceable). Raises
    :class:`ScopeError` naming the first offending pair in sorted order. The returned
    lists are sorted and without duplicates.
    """
    locked = sorted(set(_normalize_all(lock_scope, "lock_scope")))
    if not locked:
        raise ScopeError(
            "lock_scope is empty; name at least one resource the task may change, such "
            "as 'src/api.py'",
            value="",
        )
    forbidden = sorted(set(_normalize_all(forbidden_scope, "forbidden_scope")))
    for lock_entry in locked:
        for forbidden_entry in forbidden:
            if _overlap(lock_entry, forbidden_entry):
                raise ScopeError(
                    f"forbidden_scope entry {forbidden_entry!r} overlaps lock_scope entry "
                    f"{lock_entry!r}; a task may not be forbidden what it locks: narrow "
                    "one of them so that neither lies inside the other",
                    value=forbidden_entry,
                    related=lock_entry,
                )
    return locked, forbidden


# -- pins ------------------------------------------------------------------------------


def pin_matches(pattern: str, path: str) -> bool:
    """Whether the pin glob ``pattern`` matches the repository-relative ``path``.

    ``*`` matches any characters but ``/`` (including none and leading dots), ``?``
    exactly one character but ``/``, and a segment that is exactly ``**`` matches zero or
    more whole segments (``docs/**/x.md`` matches ``docs/x.md`` and ``docs/a/b/x.md``;
    ``docs/**`` matches ``docs`` itself). ``**`` inside a longer segment is a plain
    ``*``. A pattern ending in ``/`` means the directory and everything under it, as if
    it ended in ``/**``. Every other character is literal, brackets included (so
    ``app/[id].tsx`` names that file). Patterns are anchored at the repository root:
    ``*.md`` matches ``README.md``, not ``docs/x.md``.

    Both sides are normalised like resources; a pattern or path that cannot be
    (absolute, ``..``, empty) raises :class:`ScopeError`.
    """
    return _compiled_pin(pattern).fullmatch(_normalize(path, "path")) is not None


def pins_allow(allowed: Sequence[str], forbidden: Sequence[str], path: str) -> bool:
    """The pins decision of task IO for ``path``.

    The path is normalised first (:class:`ScopeError` if it escapes the root). Then,
    exactly: an empty ``allowed`` denies all; a match in ``forbidden`` denies; a match
    in ``allowed`` allows; anything else is denied.

    Each side errs toward denial. An allowed pattern must match the path itself (end it
    in ``/`` to allow a whole directory). A forbidden pattern also denies everything
    under a directory it matches: forbidding ``secrets`` or ``build/*`` forbids
    ``secrets/key.pem`` and ``build/x/y.o`` (task IO with pins: changed files must not be
    *under* ``forbidden_paths``).
    """
    if isinstance(allowed, str) or isinstance(forbidden, str):
        raise TypeError("allowed and forbidden pins are lists of globs, not single strings")
    target = _normalize(path, "path")
    if not allowed:
        return False
    segments = target.split("/")
    itself_and_parents = ["/".join(segments[:end]) for end in range(1, len(segments) + 1)]
    for pattern in forbidden:
        glob = _compiled_pin(pattern)
        if any(glob.fullmatch(candidate) for candidate in itself_and_parents):
            return False
    return any(_compiled_pin(pattern).fullmatch(target) for pattern in allowed)


def check_pins(allowed: Sequence[str], forbidden: Sequence[str]) -> None:
    """Check a task input's pins (the validation rules of task IO with pins).

    ``allowed`` must be non-empty, every pattern must be usable, and no pattern may be
    in both lists (compared after normalisation, so ``docs/`` and ``./docs//`` are the
    same). Raises :class:`ScopeError` naming the pattern.
    """
    if isinstance(allowed, str) or isinstance(forbidden, str):
        raise TypeError("allowed and forbidden pins are lists of globs, not single strings")
    if not allowed:
        raise ScopeError(
            "pins.allowed_paths is empty, which denies every path; list the paths the "
            "task may touch, such as 'docs/prompt_os/io/'",
            value="",
        )
    allowed_keys = {_pin_key(pattern): pattern for pattern in allowed}
    for pattern in forbidden:
        both = allowed_keys.get(_pin_key(pattern))
        if both is not None:
            raise ScopeError(
                f"pin {pattern!r} is both allowed (as {both!r}) and forbidden; keep it in one list",
                value=pattern,
                related=both,
            )


def _pin_key(pattern: str) -> tuple[str, bool]:
    """The pattern's normalised text and whether it names a directory (trailing ``/``)."""
    text = pattern.strip().replace("\\", "/")
    return _normalize(text, "pin"), text.endswith("/")


@functools.lru_cache(maxsize=1024)
def _compiled_pin(pattern: str) -> re.Pattern[str]:
    body, is_directory = _pin_key(pattern)
    segments = body.split("/")
    if is_directory:
        segments.append("**")
    return re.compile(_glob_regex(segments), re.DOTALL)


def _glob_regex(segments: list[str]) -> str:
    if all(segment == "**" for segment in segments):
        return ".+"
    parts: list[str] = []
    started = False  # whether a segment has been emitted (so the next needs a "/")
    for index, segment in enumerate(segments):
        if segment == "**":
            if index and segments[index - 1] == "**":
                continue  # "**/**" means the same as "**"
            parts.append("(?:/[^/]+)*" if started else "(?:[^/]+/)*")
            continue
        if started:
            parts.append("/")
        parts.append(_segment_regex(segment))
        started = True
    return "".join(parts)


def _segment_regex(segment: str) -> str:
    out: list[str] = []
    for char in segment:
        if char == "*":
            if not out or out[-1] != "[^/]*":
                out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        else:
            out.append(re.escape(char))
    return "".join(out)
