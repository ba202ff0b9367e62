"""Locks and pins (``orchestrator.formats.scope``): decision tables, every input order,
properties."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator._errors import OrchestratorError
from orchestrator.formats.scope import (
    ScopeError,
    check_lock_table,
    check_pins,
    check_scope_pair,
    in_scope,
    lock_conflicts,
    normalize_resource,
    pin_matches,
    pins_allow,
    resources_conflict,
)

# -- normalisation ---------------------------------------------------------------------

NORMALISED = [
    ("src/api.py", "src/api.py"),
    ("  src/api.py\t", "src/api.py"),
    ("./src/api.py", "src/api.py"),
    ("src\\api.py", "src/api.py"),
    (".\\src\\api.py", "src/api.py"),
    ("src/", "src"),
    ("src///", "src"),
    ("src//api.py", "src/api.py"),
    ("src/./api.py", "src/api.py"),
    ("././src/./.", "src"),
    ("docs/prompt_os/io/", "docs/prompt_os/io"),
    ("a b/c d.txt", "a b/c d.txt"),
    ("src2", "src2"),
    ("...", "..."),  # a file named "..." is not a parent reference
    ("..foo/bar..", "..foo/bar.."),
    ("app/[id].tsx", "app/[id].tsx"),
    ("D:dir/file"[1:], ":dir/file"),  # a colon that is not a drive letter stays
]


@pytest.mark.parametrize(("raw", "expected"), NORMALISED)
def test_normalize_resource(raw: str, expected: str) -> None:
    assert normalize_resource(raw) == expected


REFUSED = [
    ("", "empty"),
    ("   ", "empty"),
    (".", "repository root"),
    ("./", "repository root"),
    ("//", "absolute"),
    ("/", "absolute"),
    ("/etc/passwd", "absolute"),
    ("\\\\server\\share\\x", "absolute"),
    ("C:\\repo\\src", "absolute"),
    ("c:src", "absolute"),
    ("..", "climbs out"),
    ("../x", "climbs out"),
    ("src/../../x", "climbs out"),
    ("a/..", "climbs out"),
    ("a/../b", "write 'b' instead"),
    ("a\\..\\b\\c", "write 'b/c' instead"),
    ("src/\nx", "control character"),
    ("src\x00", "control character"),
    ("src/ api.py", "whitespace"),
    ("./ src", "whitespace"),
    ("src /api.py", "whitespace"),
]


@pytest.mark.parametrize(("raw", "words"), REFUSED)
def test_normalize_resource_refuses(raw: str, words: str) -> None:
    with pytest.raises(ScopeError) as caught:
        normalize_resource(raw)
    assert caught.value.value == raw
    assert words in str(caught.value)
    assert repr(raw) in str(caught.value)


def test_scope_error_is_a_value_error_of_the_project() -> None:
    with pytest.raises(ValueError):
        normalize_resource("../x")
    assert issubclass(ScopeError, OrchestratorError)


def test_absolute_paths_say_what_to_write_instead() -> None:
    with pytest.raises(ScopeError, match=r"write 'src/api\.py' instead"):
        normalize_resource("/src/api.py")
    with pytest.raises(ScopeError, match="write 'repo/src' instead"):
        normalize_resource("C:\\repo\\src")


def test_a_non_string_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        normalize_resource(42)  # type: ignore[arg-type]


# -- lock decisions --------------------------------------------------------------------

CONFLICTS = [
    ("src/api.py", "src/api.py", True),  # exact
    ("src", "src/api.py", True),  # prefix at a "/" boundary
    ("src", "src/deep/er/x.py", True),
    ("./src", "src/api.py", True),
    ("src\\api.py", "src/api.py", True),
    ("src/", "src/api.py", True),  # trailing slash
    ("src//api.py", "src/api.py", True),  # duplicate separators
    ("src/./api.py", " src/api.py ", True),
    ("src", "src2", False),  # prefix, but not at a boundary
    ("src/api", "src/api.py", False),
    ("src-b", "src/b", False),
    ("docs/a.md", "src/a.md", False),
    ("src/a", "src/b", False),
]


@pytest.mark.parametrize(("a", "b", "expected"), CONFLICTS)
def test_resources_conflict_table(a: str, b: str, expected: bool) -> None:
    assert resources_conflict(a, b) is expected
    assert resources_conflict(b, a) is expected


@pytest.mark.parametrize(("a", "b", "expected"), CONFLICTS)
def test_lock_conflicts_table(a: str, b: str, expected: bool) -> None:
    found = lock_conflicts([("T-1", a)], "T-2", [b])
    if expected:
        assert found == [("T-1", normalize_resource(a), normalize_resource(b))]
    else:
        assert found == []
    # the same resources held by the same task never conflict
    assert lock_conflicts([("T-2", a)], "T-2", [b]) == []


@pytest.mark.parametrize("bad", ["", "  ", "../x", "/abs", "a/../../b", "."])
def test_lock_conflicts_refuses_bad_resources(bad: str) -> None:
    with pytest.raises(ScopeError):
        lock_conflicts([("T-1", bad)], "T-2", ["src"])
    with pytest.raises(ScopeError):
        lock_conflicts([("T-1", "src")], "T-2", [bad])
    with pytest.raises(ScopeError):
        resources_conflict(bad, "src")
    with pytest.raises(ScopeError):
        check_lock_table([("T-1", bad, True)])


HELD = [
    ("T-9", "src/api.py"),
    ("T-1", "./src/"),
    ("T-2", "docs"),
    ("T-3", "src2"),
    ("T-12", "tests"),  # the wanting task's own lock
    ("T-4", "tests\\test_api.py\\"),
]
WANTED = ["tests/test_api.py", "src/api.py", "lib"]
EXPECTED_HELD_CONFLICTS = [
    ("T-1", "src", "src/api.py"),
    ("T-4", "tests/test_api.py", "tests/test_api.py"),
    ("T-9", "src/api.py", "src/api.py"),
]


def test_lock_conflicts_in_every_input_order() -> None:
    results = {
        tuple(lock_conflicts(held, "T-12", wanted))
        for held in itertools.permutations(HELD)
        for wanted in itertools.permutations(WANTED)
    }
    assert results == {tuple(EXPECTED_HELD_CONFLICTS)}


def test_lock_conflicts_accepts_any_iterable_and_removes_duplicates() -> None:
    held = iter([("T-1", "src"), ("T-1", "./src"), ("T-1", "src/")])
    assert lock_conflicts(held, "T-2", ["src/a.py", "src//a.py"]) == [("T-1", "src", "src/a.py")]


def test_the_seed_example_has_no_conflict() -> None:
    # The task board format's minimal assignment example: T-12 locks tests/test_api.py
    # while T-9 holds src/api.py.
    assert lock_conflicts([("T-9", "src/api.py")], "T-12", ["tests/test_api.py"]) == []


TABLE = [
    ("T-1", "src", True),
    ("T-2", "src/api.py", True),
    ("T-3", "src2/x.py", True),
    ("T-4", "src\\api.py", True),
    ("T-5", "src/api.py", False),  # released: history, not a lock
    ("T-1", "src/util.py", True),  # the same task twice: never a conflict with itself
    ("T-6", "docs/", True),
]
EXPECTED_TABLE = [
    ("T-1", "src", "T-2", "src/api.py"),
    ("T-1", "src", "T-4", "src/api.py"),
    ("T-2", "src/api.py", "T-4", "src/api.py"),
]


def test_check_lock_table_in_every_input_order() -> None:
    results = {tuple(check_lock_table(rows)) for rows in itertools.permutations(TABLE)}
    assert results == {tuple(EXPECTED_TABLE)}


def test_check_lock_table_ignores_inactive_and_same_task_locks() -> None:
    assert check_lock_table([("T-1", "src", True), ("T-1", "src/a", True)]) == []
    assert check_lock_table([("T-1", "src", True), ("T-2", "src/a", False)]) == []
    assert check_lock_table([]) == []


def test_check_lock_table_sees_past_a_sibling_that_sorts_between() -> None:
    # "src-b" sorts between "src" and "src/x" as a string; the pair must still be found
    rows = [("T-1", "src", True), ("T-2", "src-b", True), ("T-3", "src/x", True)]
    assert check_lock_table(rows) == [("T-1", "src", "T-3", "src/x")]


# -- scope pairs and in_scope ----------------------------------------------------------


@pytest.mark.parametrize(
    ("lock_scope", "forbidden_scope", "expected"),
    [
        # the task board example
        (["tests/test_api.py"], ["src/"], (["tests/test_api.py"], ["src"])),
        (["src"], ["src2"], (["src"], ["src2"])),
        (["./b", "a", "a/"], [], (["a", "b"], [])),
    ],
)
def test_check_scope_pair_accepts(
    lock_scope: list[str], forbidden_scope: list[str], expected: tuple[list[str], list[str]]
) -> None:
    assert check_scope_pair(lock_scope, forbidden_scope) == expected


@pytest.mark.parametrize(
    ("lock_scope", "forbidden_scope", "value", "related"),
    [
        (["src/api.py"], ["src/"], "src", "src/api.py"),  # the lock lies inside the forbidden
        (["src"], ["src/secret.py"], "src/secret.py", "src"),  # the forbidden inside the lock
        (["docs", "./src"], ["src"], "src", "src"),  # equal after normalisation
    ],
)
def test_check_scope_pair_refuses_overlaps(
    lock_scope: list[str], forbidden_scope: list[str], value: str, related: str
) -> None:
    with pytest.raises(ScopeError) as caught:
        check_scope_pair(lock_scope, forbidden_scope)
    assert (caught.value.value, caught.value.related) == (value, related)
    assert repr(value) in str(caught.value)
    assert repr(related) in str(caught.value)


def test_check_scope_pair_refuses_an_empty_lock_scope_and_bad_entries() -> None:
    with pytest.raises(ScopeError, match="lock_scope is empty"):
        check_scope_pair([], ["src"])
    with pytest.raises(ScopeError, match="climbs out"):
        check_scope_pair(["src"], ["../x"])
    with pytest.raises(ScopeError, match="absolute"):
        check_scope_pair(["/src"], [])


def test_check_scope_pair_reports_the_same_pair_in_any_order() -> None:
    lock_scope = ["src", "docs", "tests"]
    forbidden = ["docs/private", "src/secret.py", "build"]
    reported = set()
    for locks in itertools.permutations(lock_scope):
        for forbid in itertools.permutations(forbidden):
            with pytest.raises(ScopeError) as caught:
                check_scope_pair(locks, forbid)
            reported.add((caught.value.value, caught.value.related))
    assert reported == {("docs/private", "docs")}


@pytest.mark.parametrize(
    ("path", "scope", "expected"),
    [
        ("src/api.py", ["src"], True),
        ("src/api.py", ["src/api.py"], True),
        ("./src\\api.py", ["src/"], True),
        ("src2/x.py", ["src"], False),
        ("src", ["src/api.py"], False),
        ("docs/x.md", ["src", "docs/"], True),
        ("src/api.py", [], False),
    ],
)
def test_in_scope(path: str, scope: list[str], expected: bool) -> None:
    assert in_scope(path, scope) is expected
    assert in_scope(path, list(reversed(scope))) is expected


def test_a_single_string_is_not_a_scope() -> None:
    with pytest.raises(TypeError, match="not the single string"):
        in_scope("s", "src")
    with pytest.raises(TypeError):
        lock_conflicts([], "T-1", "src")
    with pytest.raises(TypeError):
        check_scope_pair("src", [])


# -- properties ------------------------------------------------------------------------

# Segments built from characters that matter to the rules: separators, dots, spaces.
raw_paths = st.text(alphabet="ab2./\\ -", max_size=16)
segment = st.text(alphabet="abcs2-_.", min_size=1, max_size=4).filter(
    lambda s: s not in (".", "..")
)
clean_paths = st.lists(segment, min_size=1, max_size=4).map("/".join)


def _normal_or_none(raw: str) -> str | None:
    try:
        return normalize_resource(raw)
    except ScopeError:
        return None


@given(raw_paths)
def test_normalize_is_idempotent_and_canonical(raw: str) -> None:
    once = _normal_or_none(raw)
    if once is None:
        return
    assert normalize_resource(once) == once
    assert once == once.strip()
    assert "\\" not in once
    assert not once.startswith("/")
    assert not once.endswith("/")
    assert all(part not in ("", ".", "..") for part in once.split("/"))


@given(st.text())
def test_normalize_refuses_with_scope_error_only(raw: str) -> None:
    once = _normal_or_none(raw)  # any other exception fails the test
    if once is not None:
        assert normalize_resource(once) == once


@given(clean_paths, st.lists(st.sampled_from(["./", ".//", "././"]), max_size=3), st.booleans())
def test_normalize_undoes_noise(path: str, noise: list[str], backslashes: bool) -> None:
    noisy = "".join(noise) + path.replace("/", "//" if noise else "/") + "/"
    if backslashes:
        noisy = noisy.replace("/", "\\")
    assert normalize_resource(" " + noisy + " ") == path


@given(raw_paths, raw_paths)
def test_conflict_is_symmetric(a: str, b: str) -> None:
    if _normal_or_none(a) is None or _normal_or_none(b) is None:
        return
    assert resources_conflict(a, b) == resources_conflict(b, a)


@given(clean_paths, clean_paths)
def test_conflict_means_one_is_in_scope_of_the_other(a: str, b: str) -> None:
    assert resources_conflict(a, b) == (in_scope(a, [b]) or in_scope(b, [a]))


@given(raw_paths)
def test_a_path_is_in_scope_of_itself(raw: str) -> None:
    if _normal_or_none(raw) is None:
        return
    assert in_scope(raw, [raw])
    assert resources_conflict(raw, raw)


def _brute_force_table(rows: list[tuple[str, str, bool]]) -> list[tuple[str, str, str, str]]:
    active = sorted({(t, normalize_resource(r)) for t, r, on in rows if on})
    found = set()
    for (ta, ra), (tb, rb) in itertools.combinations(active, 2):
        if ta != tb and resources_conflict(ra, rb):
            found.add((ta, ra, tb, rb))
    return sorted(found)


lock_rows = st.lists(
    st.tuples(st.sampled_from(["T-1", "T-2", "T-3"]), clean_paths, st.booleans()), max_size=12
)


@given(lock_rows, st.randoms(use_true_random=False))
def test_check_lock_table_matches_brute_force_in_any_order(
    rows: list[tuple[str, str, bool]], rnd: random.Random
) -> None:
    expected = _brute_force_table(rows)
    assert check_lock_table(rows) == expected
    shuffled = list(rows)
    rnd.shuffle(shuffled)
    assert check_lock_table(shuffled) == expected


@pytest.mark.slow
@given(lock_rows, st.lists(clean_paths, max_size=4), st.randoms(use_true_random=False))
def test_lock_conflicts_matches_brute_force_in_any_order(
    rows: list[tuple[str, str, bool]], wanted: list[str], rnd: random.Random
) -> None:
    held = [(t, r) for t, r, _ in rows]
    expected = sorted(
        {
            (t, normalize_resource(r), normalize_resource(w))
            for t, r in held
            for w in wanted
            if t != "T-1" and resources_conflict(r, w)
        }
    )
    assert lock_conflicts(held, "T-1", wanted) == expected
    rnd.shuffle(held)
    rnd.shuffle(wanted)
    assert lock_conflicts(held, "T-1", wanted) == expected


# -- pins ------------------------------------------------------------------------------

PIN_TABLE = [
    # the task IO format's example: a directory pin
    ("docs/prompt_os/io/", "docs/prompt_os/io/schemas.md", True),
    ("docs/prompt_os/io/", "docs/prompt_os/io/fail_codes.md", True),
    ("docs/prompt_os/io/", "docs/prompt_os/io/deeper/evidence_spec.md", True),
    ("docs/prompt_os/io/", "docs/prompt_os/io", True),
    ("docs/prompt_os/io/", "docs/prompt_os/iox/a.md", False),
    ("docs/prompt_os/io/", "docs/prompt_os/README.md", False),
    ("docs/prompt_os/io", "docs/prompt_os/io/schemas.md", False),  # no "/": that path only
    ("docs/prompt_os/io", "docs/prompt_os/io", True),
    ("./docs\\prompt_os//io/", "docs/prompt_os/io/schemas.md", True),
    # "*" stays within a segment
    ("*.md", "README.md", True),
    ("*.md", "docs/x.md", False),
    ("docs/*.md", "docs/x.md", True),
    ("docs/*.md", "docs/a/x.md", False),
    ("docs/*", "docs/.hidden", True),
    ("src/*_test.py", "src/_test.py", True),
    ("src/*", "src", False),
    ("a*b", "a/b", False),
    # "?" is one character within a segment
    ("file?.txt", "file1.txt", True),
    ("file?.txt", "file.txt", False),
    ("file?.txt", "file12.txt", False),
    ("a?b", "a/b", False),
    # "**" crosses segments, zero or more
    ("docs/**/x.md", "docs/x.md", True),
    ("docs/**/x.md", "docs/a/x.md", True),
    ("docs/**/x.md", "docs/a/b/c/x.md", True),
    ("docs/**/x.md", "docsx.md", False),
    ("docs/**/x.md", "docs/a/y.md", False),
    ("**/*.py", "a.py", True),
    ("**/*.py", "src/pkg/a.py", True),
    ("**/*.py", "src/pkg/a.pyc", False),
    ("docs/**", "docs", True),
    ("docs/**", "docs/a/b", True),
    ("docs/**", "docs2/a", False),
    ("**", "anything/at/all.txt", True),
    ("**/**/x", "x", True),
    ("a/**/**/b", "a/b", True),
    ("a/**/b/**/c", "a/x/b/y/z/c", True),
    ("a/**/b/**/c", "a/x/c", False),
    ("a**b", "axyb", True),  # "**" inside a segment is a plain "*"
    ("a**b", "ax/yb", False),
    # everything else is literal
    ("app/[id].tsx", "app/[id].tsx", True),
    ("app/[id].tsx", "app/i.tsx", False),
    ("a+b(c).txt", "a+b(c).txt", True),
    ("a.txt", "abtxt", False),
    ("src/api.py", "./src\\api.py", True),  # the path is normalised too
]


@pytest.mark.parametrize(("pattern", "path", "expected"), PIN_TABLE)
def test_pin_matches_table(pattern: str, path: str, expected: bool) -> None:
    assert pin_matches(pattern, path) is expected


PINS_ALLOW = [
    # (allowed, forbidden, path, expected)
    (["docs/prompt_os/io/"], [], "docs/prompt_os/io/schemas.md", True),  # the task IO example
    (["docs/prompt_os/io/"], [], "src/main.py", False),
    ([], [], "docs/prompt_os/io/schemas.md", False),  # empty allowed denies all
    ([], ["nothing"], "anything", False),
    (["**"], ["secrets/"], "secrets/key.pem", False),  # a forbidden match denies
    (["**"], ["secrets"], "secrets/key.pem", False),  # also under a forbidden directory
    (["**"], ["build/*"], "build/x/y.o", False),
    (["**"], ["**/*.pem"], "deep/dir/key.pem", False),
    (["**"], ["secrets"], "secrets2/x", True),
    (["docs/"], ["docs/private/"], "docs/private/a.md", False),
    (["docs/"], ["docs/private/"], "docs/public/a.md", True),
    (["docs/"], ["docs/"], "docs/a.md", False),  # forbidden wins over allowed
    (["src/*.py"], [], "src/a.py", True),
    (["src/*.py"], [], "src/sub/a.py", False),  # allowed covers only what it matches
    (["src/*.py", "tests/"], ["tests/fixtures/"], "tests/test_a.py", True),
    (["src/*.py", "tests/"], ["tests/fixtures/"], "tests/fixtures/a.json", False),
    (["a.md"], [], "b.md", False),  # no match: deny
]


@pytest.mark.parametrize(("allowed", "forbidden", "path", "expected"), PINS_ALLOW)
def test_pins_allow_table(
    allowed: list[str], forbidden: list[str], path: str, expected: bool
) -> None:
    assert pins_allow(allowed, forbidden, path) is expected
    assert pins_allow(allowed[::-1], forbidden[::-1], path) is expected


@pytest.mark.parametrize("path", ["../outside.txt", "/etc/passwd", "docs/../../x", "", "C:\\x"])
def test_pins_refuse_paths_that_escape_the_root(path: str) -> None:
    with pytest.raises(ScopeError) as caught:
        pins_allow(["**"], [], path)
    assert str(caught.value).startswith("path ")
    with pytest.raises(ScopeError):
        pins_allow([], [], path)  # normalised first, even when everything is denied
    with pytest.raises(ScopeError):
        pin_matches("**", path)


@pytest.mark.parametrize("pattern", ["../docs/", "/abs/**", "", "/", "a/../b", "C:/x"])
def test_bad_pin_patterns_are_refused(pattern: str) -> None:
    with pytest.raises(ScopeError) as caught:
        pin_matches(pattern, "docs/x.md")
    assert str(caught.value).startswith("pin ")
    with pytest.raises(ScopeError):
        pins_allow([pattern], [], "docs/x.md")


def test_check_pins() -> None:
    check_pins(["docs/prompt_os/io/"], [])  # the task IO format's example
    check_pins(["docs/"], ["docs"])  # a directory and a file are different patterns
    with pytest.raises(ScopeError, match="allowed_paths is empty"):
        check_pins([], [])
    with pytest.raises(ScopeError, match="both allowed") as caught:
        check_pins(["src/", "docs/"], ["./docs//"])
    assert (caught.value.value, caught.value.related) == ("./docs//", "docs/")
    with pytest.raises(ScopeError, match="climbs out"):
        check_pins(["../x"], [])
    with pytest.raises(TypeError):
        check_pins("docs/", [])


glob_segment = st.text(alphabet="ab*?.", min_size=1, max_size=4).filter(
    lambda text: text not in (".", "..")
)
globs = st.lists(st.one_of(glob_segment, st.just("**")), min_size=1, max_size=4).map("/".join)


@given(globs, clean_paths)
def test_pin_matches_agrees_with_a_segment_by_segment_matcher(pattern: str, path: str) -> None:
    assert pin_matches(pattern, path) == _reference_match(pattern.split("/"), path.split("/"))


@given(clean_paths)
def test_a_literal_pin_matches_exactly_itself(path: str) -> None:
    assert pin_matches(path, path)
    assert pin_matches(path + "/", path + "/x")
    assert not pin_matches(path, path + "/x")


def _reference_match(pattern: list[str], path: list[str]) -> bool:
    """A slow, obviously correct matcher: recursion over segments, fnmatch-like inside."""
    if not pattern:
        return not path
    if pattern[0] == "**":
        return any(_reference_match(pattern[1:], path[skip:]) for skip in range(len(path) + 1))
    return (
        bool(path)
        and _segment_match(pattern[0], path[0])
        and _reference_match(pattern[1:], path[1:])
    )


def _segment_match(pattern: str, text: str) -> bool:
    if not pattern:
        return not text
    if pattern[0] == "*":
        return any(_segment_match(pattern[1:], text[skip:]) for skip in range(len(text) + 1))
    if not text:
        return False
    return (pattern[0] == "?" or pattern[0] == text[0]) and _segment_match(pattern[1:], text[1:])
