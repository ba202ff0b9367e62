"""Tests for ``orchestrator.formats.strict_json``, the strict reader for untrusted JSON.

Cost, measured on CPython 3.11 (best of 60 runs on a busy 2-core box; ``/tmp`` scripts,
not part of the suite):

* 1 MB text-heavy document (records with multi-line English text, ``\\n``/``\\"`` escapes):
  ``json.loads`` 2.7 ms, ``loads_strict`` 5.4 ms (about 2x). The extra: depth scan 1.3 ms
  (an escape regex, ``bytes.translate``, ``bytes.replace`` passes), duplicate-key/NaN/float
  hooks about 1 ms.
* 1 MB of tiny values (50 000 short strings, floats, nested lists and objects):
  ``json.loads`` 7.5 ms, ``loads_strict`` 13.2 ms (1.75x); depth scan 2.4 ms.
* 35-byte document: ``json.loads`` 2 us, ``loads_strict`` 5.6 us.
* Refusals stay cheap: ``b"[" * 100_000`` 0.2 ms, 16 MB of ``[`` 50 ms (``json.loads`` alone
  raises RecursionError). Worst seen: a 15 MB document whose only too-deep spot is at its end,
  0.7 s, spent finding the JSON path in Python. The slowest accepted input: 16 MB holding
  8 million empty lists nested 64 deep, 6.3 s where ``json.loads`` alone takes 3.9 s.
"""

from __future__ import annotations

import json
import math
import os
import stat
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator._errors import ContractError, UntrustedJSONError
from orchestrator.formats import strict_json
from orchestrator.formats.strict_json import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_DEPTH,
    dumps_canonical,
    loads_strict,
)
from orchestrator.storage.files import read_json_file, read_regular_file

SRC = "doc.json"


def refused(data: bytes, **kwargs: Any) -> UntrustedJSONError:
    kwargs.setdefault("source", SRC)
    with pytest.raises(UntrustedJSONError) as info:
        loads_strict(data, **kwargs)
    err = info.value
    assert "\n" not in str(err), "messages are one line"
    return err


def nesting(value: Any) -> int:
    """Depth as loads_strict counts it: each array or object is one level, scalars none."""
    if isinstance(value, dict):
        return 1 + max(map(nesting, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(nesting, value), default=0)
    return 0


# --- the happy path -----------------------------------------------------------------------


HAPPY = {
    "name": "Grüße, 世界 🌍",
    "items": [
        {"id": 1, "tags": ["a", "b"], "score": 0.5, "ok": True, "parent": None},
        {"id": 2, "tags": [], "score": -1.25e-3, "ok": False, "note": 'say "[hi]" \\ {x}'},
    ],
    "metadata": {"confidence": 0.93, "nested": {"deeper": [[[{"leaf": "\u2028"}]]]}},
    "big": 12345678901234567890,
}


def test_happy_path_nested_unicode(tmp_path: Path) -> None:
    path = tmp_path / "happy.json"
    path.write_bytes(json.dumps(HAPPY, ensure_ascii=False, indent=2).encode("utf-8"))
    assert read_json_file(path) == HAPPY
    assert loads_strict(path.read_bytes(), source=str(path)) == HAPPY
    assert loads_strict(json.dumps(HAPPY).encode(), source=SRC) == HAPPY  # \u escapes too


def test_defaults() -> None:
    assert DEFAULT_MAX_BYTES == 16 * 1024 * 1024
    assert DEFAULT_MAX_DEPTH == 64


def test_scalar_documents() -> None:
    assert loads_strict(b" 42 ", source=SRC) == 42
    assert loads_strict(b'"x"', source=SRC) == "x"
    assert loads_strict(b"null\n", source=SRC) is None


def test_dumps_canonical_format() -> None:
    assert dumps_canonical({"b": 1, "a": ["é", None]}) == (
        '{\n  "b": 1,\n  "a": [\n    "é",\n    null\n  ]\n}\n'.encode()
    )
    with pytest.raises(ValueError):
        dumps_canonical({"x": math.nan})


def test_read_regular_file_returns_bytes(tmp_path: Path) -> None:
    path = tmp_path / "raw.bin"
    path.write_bytes(b"\x00\xffabc")
    assert read_regular_file(path, max_bytes=5) == b"\x00\xffabc"
    assert read_regular_file(str(path), max_bytes=5, source="raw") == b"\x00\xffabc"


def test_error_is_a_contract_error() -> None:
    err = refused(b"{")
    assert isinstance(err, ContractError)
    assert isinstance(err, ValueError)
    assert err.source == SRC


# --- too-large ------------------------------------------------------------------------------


def test_too_large_bytes() -> None:
    err = refused(b"[1, 2, 3]", max_bytes=8)
    assert err.rule == "too-large"
    assert err.json_path == "$"
    assert "9 bytes" in str(err) and "8" in str(err)
    assert loads_strict(b"[1, 2, 3]", source=SRC, max_bytes=9) == [1, 2, 3]


def test_too_large_file(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_bytes(b"[" + b"1," * 100 + b"1]")
    with pytest.raises(UntrustedJSONError) as info:
        read_json_file(path, max_bytes=100)
    assert info.value.rule == "too-large"
    assert str(path) in str(info.value)


def test_100_mb_sparse_file_refused_without_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "huge.json"
    with open(path, "wb") as f:
        f.truncate(100 * 1024 * 1024)  # sparse: no disk blocks, no memory

    def no_read(fd: int, n: int) -> bytes:
        raise AssertionError(f"read({n}) called on a file fstat already showed too large")

    monkeypatch.setattr(os, "read", no_read)
    start = time.perf_counter()
    with pytest.raises(UntrustedJSONError) as info:
        read_json_file(path)
    assert time.perf_counter() - start < 1.0
    assert info.value.rule == "too-large"
    assert str(104857600) in str(info.value)


def test_file_growing_after_fstat_reads_at_most_max_bytes_plus_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "growing.json"
    path.write_bytes(b" " * 10_000)
    real_fstat, real_read = os.fstat, os.read
    requested: list[int] = []

    def stale_fstat(fd: int) -> os.stat_result:
        st = real_fstat(fd)
        # As if the file had been empty when fstat ran and grew before the read.
        return os.stat_result(
            (
                st.st_mode,
                st.st_ino,
                st.st_dev,
                st.st_nlink,
                st.st_uid,
                st.st_gid,
                0,
                int(st.st_atime),
                int(st.st_mtime),
                int(st.st_ctime),
            )
        )

    def counting_read(fd: int, n: int) -> bytes:
        requested.append(n)
        return real_read(fd, n)

    monkeypatch.setattr(os, "fstat", stale_fstat)
    monkeypatch.setattr(os, "read", counting_read)
    with pytest.raises(UntrustedJSONError) as info:
        read_regular_file(path, max_bytes=100)
    assert info.value.rule == "too-large"
    assert sum(requested) <= 101


# --- symlink, not-a-file, missing -----------------------------------------------------------


symlinks = pytest.mark.skipif(
    not hasattr(os, "symlink") or sys.platform == "win32", reason="needs POSIX symbolic links"
)


@symlinks
def test_symlink_refused(tmp_path: Path) -> None:
    target = tmp_path / "real.json"
    target.write_bytes(b"{}")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    with pytest.raises(UntrustedJSONError) as info:
        read_json_file(link)
    err = info.value
    assert err.rule == "symlink"
    assert "is a symbolic link; write the file itself, not a link" in str(err)
    assert str(link) in str(err)


@symlinks
def test_dangling_symlink_is_a_symlink_not_missing(tmp_path: Path) -> None:
    link = tmp_path / "dangling.json"
    link.symlink_to(tmp_path / "nowhere.json")
    with pytest.raises(UntrustedJSONError) as info:
        read_json_file(link)
    assert info.value.rule == "symlink"


def test_directory_refused(tmp_path: Path) -> None:
    with pytest.raises(UntrustedJSONError) as info:
        read_json_file(tmp_path)
    assert info.value.rule == "not-a-file"
    assert "directory" in str(info.value)
    assert str(tmp_path) in str(info.value)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
def test_fifo_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    start = time.perf_counter()
    with pytest.raises(UntrustedJSONError) as info:
        read_json_file(fifo)  # a blocking open would hang here: nobody writes to the pipe
    assert time.perf_counter() - start < 1.0
    assert info.value.rule == "not-a-file"
    assert "FIFO" in str(info.value)


def test_missing_file_raises_file_not_found_unchanged(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as info:
        read_json_file(tmp_path / "not-yet.json")
    assert not isinstance(info.value, UntrustedJSONError)
    with pytest.raises(FileNotFoundError):
        read_regular_file(tmp_path / "not-yet.json", max_bytes=10)


def test_source_overrides_path_in_errors(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_bytes(b"[1,]")
    with pytest.raises(UntrustedJSONError) as info:
        read_json_file(path, source="<response>")
    assert info.value.source == "<response>"
    assert str(info.value).startswith("<response>: ")


# --- bom, encoding ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("encoding", "name"),
    [
        ("utf-8-sig", "UTF-8"),
        ("utf-16", "UTF-16"),
        ("utf-16-be", "UTF-16"),
        ("utf-32", "UTF-32"),
        ("utf-32-be", "UTF-32"),
    ],
)
def test_bom_refused(encoding: str, name: str) -> None:
    text = '{"a": 1}'
    data = text.encode(encoding)
    if encoding.endswith("-be"):
        data = "\ufeff".encode(encoding) + data  # the -be codecs write no mark themselves
    err = refused(data)
    assert err.rule == "bom"
    assert f"{name} byte-order mark" in str(err)


def test_invalid_utf8_names_offset() -> None:
    err = refused(b'{"name": "caf\xe9"}')
    assert err.rule == "encoding"
    assert "byte offset 13" in str(err)
    assert "0xe9" in str(err)


def test_utf8_encoded_surrogate_refused() -> None:
    assert refused(b'"\xed\xa0\x80"').rule == "encoding"


# A lone surrogate has no UTF-8 form: as a JSON escape it parses to a str that no file,
# pipe or terminal takes. (document, the escape named, line, column, json_path)
LONE_SURROGATES = {
    "high alone": (b'{"a": "x\\ud800y"}', "\\ud800", 1, 9, "$.a"),
    "low alone": (b'["ok", "\\udc00"]', "\\udc00", 1, 9, "$[1]"),
    "high, then no escape": (b'{"k":\n  [1, "\\ud83dA"]}', "\\ud83d", 2, 8, "$.k[1]"),
    "high, then another escape": (b'{"a": {"b": "\\ud800\\u0041"}}', "\\ud800", 1, 14, "$.a.b"),
    "high, then a whole pair": (b'"\\ud83d\\ud83d\\ude00"', "\\ud83d", 1, 2, "$"),
    "high at the end": (b'{"t": "abc\\uDBFF"}', "\\uDBFF", 1, 11, "$.t"),
    "low, then high": (b'{"t": "\\udc00\\ud800"}', "\\udc00", 1, 8, "$.t"),
    "after an escaped backslash": (b'{"t": "\\\\\\ud800"}', "\\ud800", 1, 10, "$.t"),
    "second of two strings": (b'{"a": "\\ud83d\\ude00",\n "b": "\\uDFFF"}', "\\uDFFF", 2, 8, "$.b"),
}


@pytest.mark.parametrize("case", list(LONE_SURROGATES), ids=list(LONE_SURROGATES))
def test_a_lone_surrogate_escape_is_refused_with_its_place(case: str) -> None:
    data, escape, line, column, path = LONE_SURROGATES[case]
    err = refused(data)
    assert err.rule == "encoding"
    assert err.json_path == path
    assert err.detail.startswith(f"{escape} at line {line}, column {column} is a lone UTF-16")
    assert "write the character itself" in str(err)
    assert str(err).isascii(), "the message must print anywhere"
    assert loads_strict(data, source=SRC, allow_lone_surrogates=True) == json.loads(data)


def test_a_lone_surrogate_in_a_key_is_refused() -> None:
    err = refused(b'{"outer": {"ok": 1, "\\udfff": 2}}')
    assert err.rule == "encoding"
    assert err.json_path == "$.outer"
    assert err.detail.startswith("\\udfff in a key at line 1, column 22")


@pytest.mark.parametrize(
    ("data", "value"),
    [
        (b'"\\ud83d\\ude00"', "\U0001f600"),
        (b'"\\uD83D\\uDE00"', "\U0001f600"),
        (b'"\\udbff\\udfff"', "\U0010ffff"),
        (b'"\\\\ud800"', "\\ud800"),  # an escaped backslash, then the letters
        (b'"\\\\\\\\ud800"', "\\\\ud800"),
        (b'{"\\ud800\\udc00": "\\ud7ff\\ue000"}', {"\U00010000": "\ud7ff\ue000"}),
    ],
)
def test_surrogate_pairs_and_lookalikes_are_accepted(data: bytes, value: Any) -> None:
    assert loads_strict(data, source=SRC) == value


def test_a_document_of_escaped_emoji_is_accepted() -> None:
    value = {"names": ["caf\u00e9 \U0001f600"] * 50, "deep": [[["\U0001f680"]]]}
    assert loads_strict(json.dumps(value).encode("ascii"), source=SRC) == value


lone_surrogate_text = st.text(
    alphabet=st.sampled_from(["a", "\\", '"', "\ud800", "\udbff", "\udc00", "\udfff", "\u00e9"]),
    min_size=1,
    max_size=6,
)


@settings(max_examples=200)
@given(lone_surrogate_text)
def test_what_has_no_utf8_form_is_refused_and_reads_back_only_when_allowed(text: str) -> None:
    """The oracle is UTF-8 itself: a string that, once parsed, cannot be encoded is
    refused, one that can is accepted (an adjacent high and low escape is one character);
    the engine's own records read back equal."""
    data = json.dumps({"x": [text]}, ensure_ascii=True).encode("ascii")
    value = json.loads(data)
    try:
        value["x"][0].encode("utf-8")
    except UnicodeEncodeError:
        err = refused(data)
        assert (err.rule, err.json_path) == ("encoding", "$.x[0]")
    else:
        assert loads_strict(data, source=SRC) == value
    written = dumps_canonical(value)
    assert loads_strict(written, source=SRC, allow_lone_surrogates=True) == value


# --- syntax -----------------------------------------------------------------------------------


def test_syntax_error_names_line_and_column() -> None:
    err = refused(b'{\n  "a": 1,\n  "b": [1, 2 3]\n}')
    assert err.rule == "syntax"
    assert err.detail == "invalid JSON at line 3, column 14: Expecting ',' delimiter"


@pytest.mark.parametrize("data", [b"", b" ", b"\n\t\r\n  "])
def test_empty_and_whitespace_refused(data: bytes) -> None:
    err = refused(data)
    assert err.rule == "syntax"
    assert "JSON value" in str(err)


@pytest.mark.parametrize(
    "data",
    [
        b"{",
        b"[1,]",
        b"{'a': 1}",
        b'{"a": 1} {"b": 2}',
        b'"tab\there"',
        b"01",
        b"\x0c{}",
        b'{"a": "unterminated}',
    ],
)
def test_invalid_json_refused(data: bytes) -> None:
    err = refused(data)
    assert err.rule == "syntax"
    assert "line 1, column" in str(err)


def test_too_many_digits_refused_as_syntax() -> None:
    if not hasattr(sys, "get_int_max_str_digits"):
        pytest.skip("no integer digit limit before Python 3.11")
    err = refused(b"[" + b"9" * 5000 + b"]")
    assert err.rule == "syntax"
    assert "as strings" in str(err)


# --- constant ---------------------------------------------------------------------------------


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_constants_refused_with_path(constant: str) -> None:
    data = f'{{"metadata": {{"confidence": {constant}}}}}'.encode()
    err = refused(data)
    assert err.rule == "constant"
    assert err.json_path == "$.metadata.confidence"
    assert constant in str(err)
    assert "finite number or null" in str(err)


def test_constant_in_array_and_at_top() -> None:
    assert refused(b'{"items": [1, 2, 3, [NaN]]}').json_path == "$.items[3][0]"
    assert refused(b"NaN").json_path == "$"


def test_float_overflowing_to_infinity_refused() -> None:
    err = refused(b'{"x": [1.5, -1e400]}')
    assert err.rule == "constant"
    assert err.json_path == "$.x[1]"
    assert "Infinity" in str(err)


# --- duplicate-key ----------------------------------------------------------------------------


def test_duplicate_key_names_key_and_object_path() -> None:
    err = refused(b'{"metadata": {"a": 1, "a": 2}}')
    assert err.rule == "duplicate-key"
    assert err.json_path == "$.metadata"
    assert '"a"' in str(err)
    assert str(err).endswith("at $.metadata")


@pytest.mark.parametrize(
    ("data", "path"),
    [
        (b'{"a": 1, "a": 1}', "$"),
        (b'{"items": [{}, {}, {}, {"name": {"x": 1, "y": 2, "x": 3}}]}', "$.items[3].name"),
        (b'{"a b": {"k": 1, "k": 1}}', '$["a b"]'),
        (b'[{"ok": 1}, {"n\\n": {"z": [], "z": {}}}]', '$[1]["n\\n"]'),
        ('{"\u2028": {"z": 1, "z": 2}}'.encode(), '$["\\u2028"]'),
    ],
)
def test_duplicate_key_paths(data: bytes, path: str) -> None:
    err = refused(data)
    assert err.rule == "duplicate-key"
    assert err.json_path == path


def test_same_key_in_different_objects_is_fine() -> None:
    assert loads_strict(b'[{"a": 1}, {"a": 2}, {"b": {"a": 3}}]', source=SRC)[2] == {"b": {"a": 3}}


# --- depth ------------------------------------------------------------------------------------


def test_deep_nesting_is_a_depth_error_not_a_crash() -> None:
    for data in (b"[" * 100_000, b'{"a":' * 100_000, b"[" * 100_000 + b"]" * 100_000):
        err = refused(data)
        assert err.rule == "depth"
        assert "64 levels" in str(err)
        assert err.json_path == "$" + "[0]" * 64 or err.json_path.startswith("$.a.a.a")


def test_depth_limit_is_exact() -> None:
    ok = b"[" * 64 + b"]" * 64
    assert loads_strict(ok, source=SRC) is not None
    err = refused(b"[" * 65 + b"]" * 65)
    assert err.rule == "depth"
    assert err.json_path == "$" + "[0]" * 64
    assert loads_strict(b'{"a": [{"b": 1}]}', source=SRC, max_depth=3) == {"a": [{"b": 1}]}
    err = refused(b'{"a": [{"b": 1}, {"c": {}}]}', max_depth=3)
    assert err.json_path == "$.a[1].c"
    assert "line 1, column 24" in str(err)


def test_brackets_inside_strings_do_not_count() -> None:
    text = '"[[[[{{{{" , "\\\\", "\\"[[[", "]]]}}}" '
    data = ('{"k[": [' + text.replace(" , ", ", ") + "]}").encode()
    assert loads_strict(data, source=SRC, max_depth=2)["k["][1] == "\\"
    assert refused(b'["]]]]", [["["]]]', max_depth=2).rule == "depth"


def test_recursion_error_is_a_second_net(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(strict_json, "_check_depth", lambda *args: None)
    assert refused(b"[" * 100_000).rule == "depth"


def test_unbalanced_input_is_a_syntax_error() -> None:
    assert refused(b"[[1, 2]").rule == "syntax"
    assert refused(b"[1]]").rule == "syntax"
    assert refused(b'{"a": [1, 2').rule == "syntax"  # a truncated write
    assert refused(b"]" + b"[" * 1000).rule == "syntax"
    assert refused(b"[1]]" + b"[" * 100_000).rule == "syntax"


def test_deep_spine_hidden_between_siblings() -> None:
    value: list[Any] = []
    for _ in range(100):
        value = [[[]], value, {"k": []}]
    err = refused(json.dumps(value).encode())
    assert err.rule == "depth"
    # The first container too deep in document order: the [[]] sibling at spine depth 63.
    assert err.json_path == "$" + "[1]" * 62 + "[0][0]"


def test_maximum_size_of_brackets_refused_quickly() -> None:
    data = b"[" * (DEFAULT_MAX_BYTES - 1) + b"]"
    start = time.perf_counter()
    assert refused(data).rule == "depth"
    assert time.perf_counter() - start < 2.0


# --- every message names the file ---------------------------------------------------------------


BAD_DOCUMENTS = {
    "too-large": b"[" + b"0," * 600 + b"0]",
    "bom": b'\xef\xbb\xbf{"a": 1}',
    "encoding": b'{"a": "\xff"}',
    "syntax": b'{"a": 1,}',
    "constant": b'{"a": Infinity}',
    "duplicate-key": b'{"a": 1, "a": 2}',
    "depth": b"[" * 70 + b"]" * 70,
}


@pytest.mark.parametrize("rule", sorted(BAD_DOCUMENTS))
def test_every_message_names_the_path(tmp_path: Path, rule: str) -> None:
    path = tmp_path / f"{rule}.json"
    path.write_bytes(BAD_DOCUMENTS[rule])
    with pytest.raises(UntrustedJSONError) as info:
        read_json_file(path, max_bytes=1000)
    err = info.value
    assert err.rule == rule
    assert err.source == str(path)
    assert str(err).startswith(f"{path}: ")
    assert "\n" not in str(err)
    assert err.json_path.startswith("$")


# --- properties ---------------------------------------------------------------------------------


json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=5)
    ),
    max_leaves=30,
).filter(lambda value: nesting(value) <= DEFAULT_MAX_DEPTH)


@pytest.mark.slow
@settings(max_examples=300)
@given(json_values)
def test_canonical_round_trip(value: Any) -> None:
    assert loads_strict(dumps_canonical(value), source=SRC) == value


# Strings full of the characters the depth scan has to see past.
tricky_text = st.text(alphabet='[]{}"\\ax\n\t\u00e9', max_size=8)
tricky_values = st.recursive(
    st.none() | st.integers() | tricky_text,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(tricky_text, children, max_size=4)
    ),
    max_leaves=25,
)


@pytest.mark.slow
@settings(max_examples=300)
@given(tricky_values, st.sampled_from([None, 0, 2]), st.booleans())
def test_depth_scan_is_exact(value: Any, indent: int | None, ascii_only: bool) -> None:
    data = json.dumps(value, indent=indent, ensure_ascii=ascii_only).encode()
    depth = nesting(value)
    assert loads_strict(data, source=SRC, max_depth=depth) == value
    if depth:
        assert refused(data, max_depth=depth - 1).rule == "depth"


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.text(max_size=5),
        st.one_of(
            st.lists(st.dictionaries(st.text(max_size=3), st.text(max_size=8)), max_size=3),
            st.dictionaries(st.text(max_size=3), st.lists(st.integers(), max_size=3)),
            st.text(max_size=8),
        ),
        max_size=4,
    )
)
def test_a_memo_shared_by_documents_of_the_same_objects_changes_no_byte(doc: dict) -> None:
    """The state's parts and the state are encoded with one memo: each document comes out
    as it does without one, whichever is encoded first, lone surrogates included."""
    parts = [{"a": doc}, dict(doc), {k: v for k, v in list(doc.items())[:2]}]
    memo: dict = {}
    for part in [*parts, doc]:
        assert dumps_canonical(part, memo=memo) == dumps_canonical(part)
    surrogate = {"x": ["\udc80", {"k": "\ud800"}]}
    memo = {}
    assert dumps_canonical(surrogate, memo=memo) == dumps_canonical(surrogate)
    assert dumps_canonical({"y": surrogate["x"]}, memo=memo) == dumps_canonical(
        {"y": surrogate["x"]}
    )


# -- texts kept from one document to the next ---------------------------------------------

_small_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=5,
)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["append", "replace", "output", "drop"]), _small_values),
        min_size=1,
        max_size=25,
    )
)
def test_kept_member_lines_and_settled_items_encode_as_a_fresh_document_does(
    steps: list[tuple[str, Any]],
) -> None:
    """A memo carried from one document to the next (member lines and settled lists, as
    a state's saves carry it) gives the very bytes a fresh encoding gives, whatever is
    appended, replaced or dropped in between; the carried texts are used."""
    from orchestrator.formats.strict_json import (
        SETTLED_KEPT,
        SETTLED_MADE,
        SettledItems,
        members_key,
    )

    journal: list[Any] = [{"position": 0}]
    outputs: dict[str, Any] = {"x_engine": {"n": 0}}
    carried: dict[Any, Any] = {}
    for number, (step, value) in enumerate(steps):
        if step == "append":
            journal = [*journal, {"position": len(journal), "value": value}]
        elif step == "replace":
            journal = [*journal[:-1], {"replaced": value}]
        elif step == "output":
            outputs = {**outputs, f"phase_{len(outputs)}": value}
        elif len(outputs) > 1:
            outputs = dict(list(outputs.items())[:-1])
        outputs["x_engine"] = {"n": number, "journal": SettledItems(journal)}
        document = {"phase": number, "phase_data": outputs, "items": list(outputs)}
        memo: dict[Any, Any] = {members_key(k): v for k, v in carried.items() if k != "settled"}
        memo[SETTLED_KEPT] = carried.get("settled", {})
        made = strict_json.dumps_canonical(document, memo=memo, members="phase_data")
        assert made == strict_json.dumps_canonical(document)
        part = {k: v for k, v in outputs.items() if k != "x_engine"}
        assert strict_json.dumps_canonical(part, memo=memo, members="") == (
            strict_json.dumps_canonical(part)
        )
        carried = {
            "phase_data": memo[members_key("phase_data")],
            "": memo.get(members_key("")),
            "settled": memo.get(SETTLED_MADE, {}),
        }
        carried = {k: v for k, v in carried.items() if v is not None}
        assert len(carried["phase_data"][2]) == len(outputs)


def test_threads_lay_out_the_same_objects_at_once() -> None:
    """Encoders are kept from one document to the next, one set per thread: an encoder
    marks the containers it is inside, and another thread laying out the same objects
    meanwhile (while the first waits in a ``default`` hook) must not see those marks."""
    import threading
    import time

    class Later:
        def __init__(self, value: int) -> None:
            self.value = value

    def default(obj: Any) -> Any:
        time.sleep(0.001)  # hands the interpreter to the other thread mid-document
        return {"value": obj.value}

    shared = {"items": [[Later(n), {"n": n}] for n in range(20)]}
    expected = dumps_canonical(shared, default=default)
    failures: list[BaseException] = []

    def lay_out() -> None:
        try:
            for _ in range(5):
                assert dumps_canonical(shared, default=default) == expected
        except BaseException as exc:  # told by the main thread, below
            failures.append(exc)

    threads = [threading.Thread(target=lay_out) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


_JSON_LEAVES = st.none() | st.booleans() | st.integers() | st.text(alphabet='{}[], "\\xé')
_JSON_VALUES = st.recursive(
    _JSON_LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(st.text(alphabet='{}, "a', max_size=4), _JSON_VALUES), max_size=12))
def test_a_list_encoded_in_one_call_splits_into_its_items_texts_or_not_at_all(
    items: list[dict[str, Any]],
) -> None:
    """A long phase's journal is encoded in one call and split into its entries' texts:
    every split is each item's own text, however its strings and nested lists look;
    where the text cannot be split so, nothing is."""
    for ensure_ascii in (False, True):
        encode = strict_json._compact_encoder(ensure_ascii=ensure_ascii, default=None)
        texts = strict_json._split_items(items, encode)
        if texts is not None:
            assert texts == [encode(item) for item in items]
        elif len(items) >= strict_json._SPLIT_FROM and all(items):
            nested = [item for item in items if strict_json._ITEM_SEPARATOR in encode(item)]
            assert nested, "a list of plain objects was not split"


_CUT_KEYS = st.sampled_from(["position", "kind", 'po"s'])
_CUT_NAMES = _CUT_KEYS | st.text(alphabet='{}, "pos', max_size=4)
# Values whose objects may begin with an item's first key: a list of them in an item, or
# beside the list, holds the very text that separates two items.
_CUT_VALUES = st.recursive(
    _JSON_LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_CUT_NAMES, inner, max_size=3),
    max_leaves=8,
)


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(
    _CUT_KEYS,
    st.lists(st.dictionaries(_CUT_NAMES, _CUT_VALUES, max_size=3), min_size=2, max_size=8),
    st.dictionaries(_CUT_NAMES, _CUT_VALUES, max_size=3),
    st.booleans(),
    st.integers(min_value=0, max_value=12),
)
def test_items_cut_from_a_line_are_each_items_own_text_or_none_is(
    key: str, rests: list[dict[str, Any]], around: dict[str, Any], last: bool, other: int
) -> None:
    """A journal's entries are cut from the record's line a state file holds instead of
    encoded again: every cut is each entry's own text, whatever the entries and the rest
    of the line hold (the separating text too, or an entry that begins with another
    key); where it cannot be cut so, nothing is."""
    items = [{key: rest.get(key, 0), **rest} for rest in rests]
    if other < len(items):  # this one begins with another key
        items[other] = {"other": 0, **items[other]}
    encode = strict_json._compact_encoder(ensure_ascii=False, default=None)
    record = {**around, "journal": items} if last else {"journal": items, **around}
    line = f"    {encode('x_orchestrator')}: {encode(record)},"
    texts = strict_json.item_texts_in(line, items)
    if texts is not None:
        assert texts == [encode(item) for item in items]
    elif other >= len(items):
        separator = "}, " + encode({key: 0})[:-2]
        assert line.count(separator) != len(items) - 1, "the line was not cut"


def test_a_journal_is_cut_from_the_line_that_holds_it() -> None:
    """The engine record's shape: a long journal amid the record's other fields."""
    entries = [
        {"position": n, "kind": "ask", "fingerprint": [f"agent {n}"], "request_ids": [str(n)]}
        for n in range(40)
    ]
    encode = strict_json._compact_encoder(ensure_ascii=False, default=None)
    record = {"run_id": "r", "journal": entries, "events": [{"seq": 1}], "next_seq": 2}
    line = f'    "x_orchestrator": {encode(record)},'
    assert strict_json.item_texts_in(line, entries) == [encode(entry) for entry in entries]
    # An output that holds the separating text: the line is not cut.
    record["inputs"] = {"note": [{"a": 1}, {"position": 2}]}
    line = f'    "x_orchestrator": {encode(record)},'
    assert strict_json.item_texts_in(line, entries) is None
    assert strict_json.item_texts_in(line, entries[:1]) is None  # one entry: encoded
    # An entry that begins with another key, and holds one separating text more: as
    # many as the boundaries, but not all at them.
    odd = {"kind": "step", "result": [{"a": 1}, {"position": 2}], **entries[2]}
    mixed = [entries[0], entries[1], odd, entries[3]]
    line = f'    "x_orchestrator": {encode({"journal": mixed})},'
    assert line.count('}, {"position": ') == len(mixed) - 1
    assert strict_json.item_texts_in(line, mixed) is None


def test_a_long_list_of_plain_objects_is_split() -> None:
    """The journal's shape: each entry's text, from one call."""
    entries = [
        {"position": n, "kind": "ask", "fingerprint": [f"agent {n}"], "request_ids": [str(n)]}
        for n in range(20)
    ]
    encode = strict_json._compact_encoder(ensure_ascii=False, default=None)
    assert strict_json._split_items(entries, encode) == [encode(entry) for entry in entries]
    assert strict_json._split_items(entries[:5], encode) is None  # short: item by item


def _structure_by_one_scan(data: bytes) -> bytes:
    """What the depth check reads of ``data``, the plain way: escaped backslashes and
    quotes cut out in one left-to-right regex scan, then all but quotes and brackets."""
    import re

    scanned = re.sub(rb'\\[\\"]', b"", data)
    kept = bytes(b for b in scanned if b in b'"[]{}')
    return kept.replace(b"{", b"[").replace(b"}", b"]")


@given(
    st.binary(max_size=60)
    | st.lists(st.sampled_from([b"\\", b'"', b"[", b"}", b"a"])).map(b"".join)
)
@settings(max_examples=400)
def test_the_depth_checks_blocks_read_as_one_scan_does(data: bytes) -> None:
    from unittest import mock

    for block in (1, 2, 3, 7, 1 << 20):
        with mock.patch.object(strict_json, "_STRUCTURE_BLOCK", block):
            assert strict_json._structure(data) == _structure_by_one_scan(data), block


def test_a_document_dense_with_escaped_quotes_costs_no_object_per_escape() -> None:
    import tracemalloc

    size = 4 << 20
    holder = [b'{"a": "' + b'a\\"b' * (size // 4) + b'"}']
    tracemalloc.start()
    try:
        loads_strict(holder.pop(), source="dense", max_bytes=2 * size)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # the text and the value, each about the document's size; an object per escape
    # (a million here) would cost tens of times more
    assert peak < 3 * size, peak
