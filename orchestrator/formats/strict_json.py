"""Strict JSON text: bounded size and depth, UTF-8 only, no NaN, no duplicate keys; and
the one canonical encoding every document is written in.

Everything read from outside the process (state files, response files, stdin) goes through
``loads_strict`` (files through ``orchestrator.storage.files.read_json_file``); each refusal
is an ``UntrustedJSONError`` whose ``rule`` says which check failed and whose ``json_path``
says where.
"""

from __future__ import annotations

import json
import operator
import re
import threading
from itertools import compress
from itertools import count as count_from

from orchestrator._errors import UntrustedJSONError
from orchestrator._text import plural

# ``typing`` is not needed at run time; keeping it out of the imports keeps start-up cheap.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_DEPTH",
    "SETTLED_KEPT",
    "SETTLED_MADE",
    "SettledItems",
    "dumps_canonical",
    "lines_key",
    "loads_strict",
    "members_key",
]

DEFAULT_MAX_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_DEPTH = 64

# Longest marks first: the UTF-32-LE mark begins with the UTF-16-LE one.
_BOMS = (
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\xef\xbb\xbf", "UTF-8"),
    (b"\xfe\xff", "UTF-16"),
    (b"\xff\xfe", "UTF-16"),
)

# The depth scan only needs quotes and brackets; ``{}`` become ``[]`` so one pattern covers both.
_NOT_STRUCTURAL = bytes(b for b in range(256) if b not in b'"[]{}')
_BRACES_AS_BRACKETS = bytes.maketrans(b"{}", b"[]")
_BRACKET_WEIGHTS = bytes.maketrans(b"[]", b"\x02\x00")
# json.dumps leaves these raw with ensure_ascii=False, yet splitlines() breaks on them.
_LINE_BREAKS = {0x85: "\\u0085", 0x2028: "\\u2028", 0x2029: "\\u2029"}

#: the depth check reads a large document in blocks of this size (see ``_structure``)
_STRUCTURE_BLOCK = 1 << 20
_NOT_JSON_SPACE = re.compile(r"[^ \t\r\n]")
# Left to right: an escaped backslash is consumed first, so "\\\\ud800" (the text \ud800)
# is no escape; a pair is consumed whole; what is left of D800-DFFF is lone.
_SURROGATE_ESCAPES = re.compile(
    r"(?P<backslash>\\\\)"
    r"|(?P<pair>\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|(?P<lone>\\u[dD][89a-fA-F][0-9a-fA-F]{2})"
)
_SURROGATES = re.compile("[\\ud800-\\udfff]")
# A string (with its escapes) or a structural character.
_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},:]', re.DOTALL)


def dumps_canonical(
    obj: Any,
    *,
    default: Any = None,
    memo: dict[Any, Any] | None = None,
    members: str | None = None,
) -> bytes:
    """Serialise ``obj`` the one way this project writes JSON (UTF-8, final newline).

    The layout is two levels deep: each top-level member on its own line, and each item of
    a top-level object or array on its own line, written compactly. A state file thus
    reads as one line per phase output and per agent request, which is what a person
    scans for, and it is written by the C encoder (``indent`` would force the much slower
    pure-Python one on every checkpoint). Key order is kept; NaN/Infinity raise
    ``ValueError`` so that everything written reads back through ``loads_strict``.
    ``default`` is the encoder's hook for values JSON has no type for.

    ``memo``, a dict the caller keeps for a few documents made of the same objects (the
    parts of a state and the state), remembers the encoding of each item laid out on its
    own line by the item's identity: the objects must not change while it is in use.
    With ``members`` too, the lines of an object's members are kept there, under
    :func:`members_key`: ``""`` names the top level's members, another name those of
    the top-level member of that name (see :func:`_member_lines`).
    """
    try:
        text = _layout(obj, ensure_ascii=False, default=default, memo=memo, members=members)
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (legal as a JSON escape, e.g. from a host's response) has no
        # UTF-8 form: keep it as an escape so the file stays valid and reads back equal.
        if memo is not None:
            memo = memo.setdefault("ascii", {})
        return _layout(obj, ensure_ascii=True, default=default, memo=memo).encode("ascii")


_JSON_TYPES = (dict, list, str, int, float, bool, type(None))


# This thread's (ensure_ascii, default) -> its encoder: a save lays out several documents
# with each. One thread's: an encoder marks the containers it is inside while it runs.
_this_thread = threading.local()


def _compact_encoder(*, ensure_ascii: bool, default: Any) -> Callable[[Any], str]:
    """One C encoder for a whole document: ``JSONEncoder.encode`` would build a new one
    for every line of the layout, which costs more than encoding most lines. Made once
    for each ``ensure_ascii`` and ``default`` (an encoder keeps nothing between calls)."""
    try:
        encoders: dict[tuple[bool, Any], Callable[[Any], str]] = _this_thread.encoders
    except AttributeError:
        encoders = _this_thread.encoders = {}
    key = (ensure_ascii, default)
    encoder = encoders.get(key)
    if encoder is None:
        if len(encoders) >= 16:  # a caller making a new ``default`` at every call
            encoders.clear()
        encoder = encoders[key] = _new_compact_encoder(ensure_ascii=ensure_ascii, default=default)
    return encoder


def _new_compact_encoder(*, ensure_ascii: bool, default: Any) -> Callable[[Any], str]:
    try:
        from _json import make_encoder
    except ImportError:  # pragma: no cover - an interpreter without the C accelerator
        return json.JSONEncoder(
            ensure_ascii=ensure_ascii, allow_nan=False, separators=(", ", ": "), default=default
        ).encode
    from json.encoder import encode_basestring, encode_basestring_ascii

    def unknown(value: Any) -> Any:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")

    # The arguments of json.JSONEncoder.iterencode's one-shot path: markers, default,
    # string encoder, indent, key and item separators, sort_keys, skipkeys, allow_nan.
    encoder = make_encoder(
        {},
        default or unknown,
        encode_basestring_ascii if ensure_ascii else encode_basestring,
        None,
        ": ",
        ", ",
        False,
        False,
        False,
    )

    def encode(value: Any) -> str:
        return "".join(encoder(value, 0))

    return encode


def _layout(
    obj: Any,
    *,
    ensure_ascii: bool,
    default: Any,
    memo: dict[Any, Any] | None = None,
    members: str | None = None,
) -> str:
    encode = _compact_encoder(ensure_ascii=ensure_ascii, default=default)
    if not isinstance(obj, dict) or not obj:
        return encode(obj) + "\n"
    quote = _string_encoder(ensure_ascii)
    if memo is not None:
        encode = _remembering(encode, quote, memo)
    else:
        members = None

    def key_text(key: Any) -> str:
        return quote(key) if type(key) is str else encode(key)

    def inner_line(key: Any, value: Any) -> str:
        return f"    {key_text(key)}: {encode(value)}"

    def pieces(key: Any, value: Any) -> tuple[str, ...]:
        """A member's text, in pieces: a long list's lines are not copied into another
        string before the document is joined."""
        if default is not None and not isinstance(value, _JSON_TYPES):
            value = default(value)  # lay an object out as its JSON form would be
        if isinstance(value, dict) and value:
            if members == key:
                assert memo is not None
                lines = _member_lines(value, inner_line, memo, members_key(key))
            else:
                lines = list(map(inner_line, value, value.values()))
            return f"  {key_text(key)}: {{\n", ",\n".join(lines), "\n  }"
        if isinstance(value, list) and value:
            return f"  {key_text(key)}: [\n", *_item_lines(value, encode, memo), "\n  ]"
        return (f"  {key_text(key)}: {encode(value)}",)

    def member(key: Any, value: Any) -> str:
        return "".join(pieces(key, value))

    if members == "":
        assert memo is not None
        lines = _member_lines(obj, member, memo, members_key(""))
        return "{\n" + ",\n".join(lines) + "\n}\n"
    text = ["{\n"]
    for key, value in obj.items():
        text += pieces(key, value)
        text.append(",\n")
    text[-1] = "\n}\n"
    return "".join(text)


def members_key(name: str) -> tuple[str, str]:
    """The ``memo`` key of the member lines kept for ``name`` (see :func:`_member_lines`)."""
    return ("members", name)


def _member_lines(
    obj: dict[Any, Any], line: Callable[[Any, Any], str], memo: dict[Any, Any], key: Any
) -> list[str]:
    """The lines of ``obj``'s members, each made by ``line(key, value)``.

    The lines made last time under ``key`` in ``memo`` are taken for every member whose
    key is where it was and whose value is the very object it was: whoever keeps the memo
    from one document to the next vouches that those values do not change (a state's
    outputs are appended to, and replaced, never changed). The checks run at C speed, so
    a long run's thousand outputs cost no step of Python each.
    """
    keys, values = list(obj), list(obj.values())
    kept = memo.get(key)
    count = 0 if kept is None else len(kept[0])
    lines: list[str]
    if kept is not None and count <= len(keys) and keys[:count] == kept[0]:
        lines = list(kept[2])
        for index in compress(count_from(), map(operator.is_not, values, kept[1])):
            lines[index] = line(keys[index], values[index])
        lines += map(line, keys[count:], values[count:])
    else:
        lines = list(map(line, keys, values))
    memo[key] = (keys, values, lines)
    return lines


def lines_key(items: list[Any]) -> tuple[str, int]:
    """The ``memo`` key of the lines a list is laid out as (see :func:`_item_lines`)."""
    return ("lines", id(items))


#: The most pieces a list's lines are kept in (see :func:`_item_lines`).
_PIECES_KEPT = 64


def _item_lines(
    items: list[Any], encode: Callable[[Any], str], memo: dict[Any, Any] | None
) -> tuple[str, ...]:
    """The lines of a list laid out one item a line, joined (without the brackets), in
    pieces: the document joins them once.

    With a ``memo``, the lines of its first items may be there already, under
    :func:`lines_key`, as ``(items, count, pieces)``: whoever put them there vouches
    that those items are as they were when those lines were made (a long run's history
    is appended to, and its earlier items are not encoded again at every save). The
    lines made here are left there in the same form, for the other documents of the
    memo and for the caller to keep: the pieces kept and those of the new items, so
    that a save copies a long history once, when the document is joined. When they grow
    many, all but the last few are joined into one.
    """
    if memo is None:
        return (",\n".join(f"    {encode(v)}" for v in items),)
    key = lines_key(items)
    kept = memo.get(key)
    head: tuple[str, ...] = ()
    start = 0
    if kept is not None and kept[0] is items and 0 < kept[1] <= len(items):
        head, start = kept[2], kept[1]
    tail = ",\n".join(f"    {encode(v)}" for v in items[start:])
    pieces = (*head, ",\n", tail) if head and tail else head or (tail,)
    if len(pieces) > _PIECES_KEPT:
        pieces = ("".join(pieces[:-4]), *pieces[-4:])  # the last ones change first
    memo[key] = (items, len(items), pieces)
    return pieces


def _string_encoder(ensure_ascii: bool) -> Callable[[str], str]:
    """The encoder's own quoting of a string (what it does to a ``str`` key or value)."""
    from json.encoder import encode_basestring, encode_basestring_ascii

    return encode_basestring_ascii if ensure_ascii else encode_basestring


class SettledItems(list):  # type: ignore[type-arg]
    """A list whose items never change in place: it grows at its end, or an item is
    replaced by another object. An encoder with a memo kept from one document to the
    next (see :data:`SETTLED_KEPT`) encodes only its new items: a long phase's journal,
    in the engine's record, costs what its last entry does."""

    __slots__ = ()


#: ``memo`` keys: the texts of the settled lists of the last document (lent by whoever
#: keeps the memo from one document to the next), and those made now (for it to keep).
SETTLED_KEPT = "settled-kept"
SETTLED_MADE = "settled-made"


def _remembering(
    encode: Callable[[Any], str], quote: Callable[[str], str], memo: dict[Any, Any]
) -> Callable[[Any], str]:
    """``encode`` that keeps each container's text in ``memo`` under its identity (with the
    object itself, so the identity cannot be reused while the memo lives). An object laid
    out on its own line is put together from its members' texts, which other documents of
    the memo may have encoded already (a state's engine record, field by field in the
    signature's parts); the result is the encoder's own (``{"k": v, ...}``)."""

    def member(value: Any) -> str:
        kind = type(value)
        if kind is str:
            return quote(value)
        if kind is int:  # the encoder's own text of an int, without its call
            return int.__repr__(value)
        if value is None or isinstance(value, (int, float)):
            return encode(value)
        kept = memo.get(id(value))
        if kept is None:
            text = settled(value) if type(value) is SettledItems and value else encode(value)
            kept = memo[id(value)] = (value, text)
        return kept[1]

    def settled(items: SettledItems) -> str:
        """A settled list's text, its items' texts taken from the last document where
        each item is the very object it was (found at C speed)."""
        values = list(items)
        kept = memo.get(SETTLED_KEPT, {}).get(id(values[0]))
        if kept is not None and kept[0][0] is values[0] and len(kept[0]) <= len(values):
            texts = kept[1][:]
            for index in compress(count_from(), map(operator.is_not, values, kept[0])):
                texts[index] = whole(values[index])
            texts += map(whole, values[len(kept[0]) :])
        else:
            texts = _split_items(values, encode) or list(map(whole, values))
        memo.setdefault(SETTLED_MADE, {})[id(values[0])] = (values, texts)
        return "[" + ", ".join(texts) + "]"

    def whole(value: Any) -> str:
        """An item's text made in one call of the C encoder (no other document lays out
        its members apart), kept under its identity."""
        kept = memo.get(id(value))
        if kept is None:
            kept = memo[id(value)] = (value, encode(value))
        return kept[1]

    def remembered(value: Any) -> str:
        if type(value) is dict and id(value) not in memo and all(type(k) is str for k in value):
            text = "{" + ", ".join(f"{quote(k)}: {member(v)}" for k, v in value.items()) + "}"
            memo[id(value)] = (value, text)
            return text
        return member(value)

    return remembered


#: A settled list with no texts kept and at least this many items is encoded in one call.
_SPLIT_FROM = 8
_ITEM_SEPARATOR = '}, {"'


def _split_items(values: list[Any], encode: Callable[[Any], str]) -> list[str] | None:
    """The text of each item of a list of non-empty objects, from one call of the encoder
    on the whole list (a new process saving a long phase's journal); ``None`` if the
    list is short, or holds anything else, or the text does not split into its items.

    The encoder joins the items' texts with ``", "``, each ``{"...}``: so ``}, {"``
    separates every two. Anywhere else it is within an item's own text (a list of
    objects in it, a string or key that ends in ``}, {``), and makes one piece more: a
    split into exactly as many pieces as there are items is the items' own texts.
    """
    if len(values) < _SPLIT_FROM or not all(type(v) is dict and v for v in values):
        return None
    pieces = encode(values)[3:-2].split(_ITEM_SEPARATOR)  # within "[{\"" and "}]"
    if len(pieces) != len(values):
        return None
    return [f'{{"{piece}}}' for piece in pieces]


def item_texts_in(line: str, items: list[Any]) -> list[str] | None:
    """The text of each item of ``items`` as the compact encoder writes it, cut from
    ``line``, a line this module laid out (``ensure_ascii=False``) that holds the list
    (a state file's engine record, with a long phase's journal); ``None`` when it cannot
    be cut exactly, and the caller encodes the items.

    The items are objects that begin with the same key, so ``}, {"key": `` stands
    between every two. When the line holds exactly as many of those as the list has
    boundaries, each one is a boundary (none is within an item, or elsewhere in the
    line), and the text between two is an item's. The first and the last item are
    encoded and found where the line has them. A few passes at C speed, where encoding
    a journal of a thousand entries again takes milliseconds.
    """
    count = len(items)
    if count < 2 or set(map(type, items)) != {dict}:
        return None
    firsts = list(map(next, map(iter, items)))  # an empty object ends it short
    key = firsts[0] if firsts else None
    if len(firsts) != count or type(key) is not str or firsts.count(key) != count:
        return None
    opening = "{" + _string_encoder(False)(key) + ": "
    separator = "}, " + opening
    if line.count(separator) != count - 1:
        return None
    encode = _compact_encoder(ensure_ascii=False, default=None)
    first, last = encode(items[0]), encode(items[-1])
    pieces = line.split(separator)
    if not (
        first.startswith(opening)
        and last.startswith(opening)
        and pieces[0].endswith(first[:-1])
        and pieces[-1].startswith(last[len(opening) :])
    ):
        return None
    return [first, *[f"{opening}{piece}}}" for piece in pieces[1:-1]], last]


def loads_strict(
    data: bytes,
    *,
    source: str,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_depth: int = DEFAULT_MAX_DEPTH,
    allow_lone_surrogates: bool = False,
) -> Any:
    """Parse ``data`` as one JSON document, or raise ``UntrustedJSONError``.

    Refused: more than ``max_bytes`` bytes (``too-large``), a byte-order mark (``bom``),
    invalid UTF-8 or a lone UTF-16 surrogate written as an escape, ``"\\ud800"``
    (``encoding``), invalid or empty JSON (``syntax``), NaN/Infinity or a number too large
    for a float (``constant``), a key repeated in one object (``duplicate-key``) and
    nesting deeper than ``max_depth`` with the top-level value at depth 1 (``depth``).
    ``source`` names the document in error messages.

    ``allow_lone_surrogates`` is for the engine's own records read back (the state and
    its history): a value a workflow produced, such as a file name read with
    ``surrogateescape``, is written by :func:`dumps_canonical` as such an escape and must
    read back equal. Anything a host or an agent wrote keeps the default.
    """
    _check_size(data, source, max_bytes)
    _check_depth(data, source, max_depth)  # before the text is made: it reads the bytes
    text = _decoded_text(data, source)
    # Only a \uD... escape can make a surrogate (the UTF-8 decoder refuses encoded ones), so
    # a document without one, nearly every document, costs two substring searches here.
    surrogates = not allow_lone_surrogates and (b"\\ud" in data or b"\\uD" in data)
    # The bytes are not needed past here: a caller that handed over its only reference
    # (``loads_strict(file.read(), ...)``) gets them freed before the value is built.
    del data
    value = _parse_checked(text, source, max_depth)
    if surrogates:
        _check_lone_surrogates(text, value, source)
    return value


def _check_size(data: bytes, source: str, max_bytes: int) -> None:
    """Refuse more than ``max_bytes`` (``too-large``)."""
    if len(data) > max_bytes:
        raise UntrustedJSONError(
            f"document is {plural(len(data), 'byte')}, more than the limit of {max_bytes}; "
            "send a smaller document",
            source=source,
            json_path="$",
            rule="too-large",
        )


def _decoded_text(data: bytes, source: str) -> str:
    """The text of ``data``, refused when marked with a BOM (``bom``), not UTF-8
    (``encoding``) or empty (``syntax``)."""
    for mark, encoding in _BOMS:
        if data.startswith(mark):
            raise UntrustedJSONError(
                f"starts with a {encoding} byte-order mark; save it as UTF-8 without a BOM",
                source=source,
                json_path="$",
                rule="bom",
            )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UntrustedJSONError(
            f"not valid UTF-8 at byte offset {exc.start} (byte 0x{data[exc.start]:02x}); "
            "save it as UTF-8",
            source=source,
            json_path="$",
            rule="encoding",
        ) from None
    if _NOT_JSON_SPACE.search(text) is None:  # no copy of a large text, as strip makes
        what = "empty" if not text else "only whitespace"
        raise UntrustedJSONError(
            f"document is {what}; write one JSON value",
            source=source,
            json_path="$",
            rule="syntax",
        )
    return text


def _parse_checked(text: str, source: str, max_depth: int) -> Any:
    """``text`` parsed, refused when it is not JSON (``syntax``, ``depth``) or holds a
    repeated key (``duplicate-key``) or a value JSON has no number for (``constant``)."""
    problems: list[_Problem] = []
    pairs_hook, constant_hook, float_hook = _hooks(problems)
    try:
        value = json.loads(
            text,
            object_pairs_hook=pairs_hook,
            parse_constant=constant_hook,
            parse_float=float_hook,
        )
    except json.JSONDecodeError as exc:
        raise UntrustedJSONError(
            f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
            source=source,
            json_path="$",
            rule="syntax",
        ) from None
    except RecursionError:
        # Second net: the byte scan should have refused this already.
        raise UntrustedJSONError(
            f"nesting is too deep to parse; keep it within {max_depth} levels",
            source=source,
            json_path="$",
            rule="depth",
        ) from None
    except ValueError as exc:
        # int() refuses literals over sys.get_int_max_str_digits() digits (CVE-2020-10735).
        raise UntrustedJSONError(
            f"a number is too long to read ({str(exc).split(';')[0]}); "
            "write very long numbers as strings",
            source=source,
            json_path="$",
            rule="syntax",
        ) from None
    if problems:
        path, problem = _locate_problem(value)
        raise UntrustedJSONError(problem.message, source=source, json_path=path, rule=problem.rule)
    return value


def _hooks(problems: list[_Problem]) -> tuple[Callable[..., Any], ...]:
    """The parser's hooks for objects, constants and floats; each bad value is left as a
    :class:`_Problem` (also put in ``problems``) where it was, so its path can be found
    afterwards by a walk that only runs when something was wrong."""

    def pairs_hook(pairs: list[tuple[str, Any]]) -> Any:
        obj = dict(pairs)
        if len(obj) == len(pairs):
            return obj
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                break
            seen.add(key)
        problem = _Problem(
            "duplicate-key",
            f"key {_quote(key)} appears more than once in one object; keep only one of them",
        )
        problems.append(problem)
        return problem

    def constant_hook(name: str) -> Any:
        problem = _Problem("constant", f"{name} is not allowed; write a finite number or null")
        problems.append(problem)
        return problem

    def float_hook(literal: str) -> Any:
        number = float(literal)
        if number - number == 0.0:  # false only for +-inf, which an oversized literal becomes
            return number
        problem = _Problem(
            "constant",
            f"number {literal[:40]} is too large and would read as Infinity; "
            "write a smaller number or a string",
        )
        problems.append(problem)
        return problem

    return pairs_hook, constant_hook, float_hook


def _check_lone_surrogates(text: str, value: Any, source: str) -> None:
    """Refuse a ``\\uD800``-``\\uDFFF`` escape that is not half of a surrogate pair.

    ``json`` reads it as a lone surrogate: a ``str`` no UTF-8 file, pipe or terminal takes,
    so an answer holding one would fail the run wherever a workflow wrote it.
    """
    for match in _SURROGATE_ESCAPES.finditer(text):
        if match.lastgroup != "lone":
            continue  # an escaped backslash, or a valid pair
        offset = match.start()
        line = text.count("\n", 0, offset) + 1
        column = offset - (text.rfind("\n", 0, offset) + 1) + 1
        path, in_key = _locate_surrogate(value)
        where = "in a key " if in_key else ""
        raise UntrustedJSONError(
            f"{match.group()} {where}at line {line}, column {column} is a lone UTF-16 "
            "surrogate, not a character (it has no UTF-8 form); write the character itself, "
            "or a high surrogate escape followed by a low one",
            source=source,
            json_path=path,
            rule="encoding",
        )


def _locate_surrogate(value: Any) -> tuple[str, bool]:
    """The path of the first string (in document order) holding a lone surrogate, and
    whether it is a key (then the path is its object's)."""
    has_surrogate = _SURROGATES.search
    stack: list[tuple[Any, str]] = [(value, "$")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            if has_surrogate(node):
                return path, False
        elif isinstance(node, dict):
            for key in node:
                if has_surrogate(key):
                    return path, True
            stack.extend((v, path + _member(k)) for k, v in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend((node[i], f"{path}[{i}]") for i in range(len(node) - 1, -1, -1))
    return "$", False


class _Problem:
    """Stands in the parse result where a refused value (or object) was."""

    __slots__ = ("message", "rule")

    def __init__(self, rule: str, message: str) -> None:
        self.rule = rule
        self.message = message


def _locate_problem(value: Any) -> tuple[str, _Problem]:
    """Return the path and marker of the first _Problem in document order."""
    stack: list[tuple[Any, str]] = [(value, "$")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, _Problem):
            return path, node
        if isinstance(node, dict):
            stack.extend((v, path + _member(k)) for k, v in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend((node[i], f"{path}[{i}]") for i in range(len(node) - 1, -1, -1))
    raise AssertionError("a JSON hook reported a problem that is not in the result")


def _member(key: str) -> str:
    if key.isascii() and key.isidentifier():
        return "." + key
    return "[" + _quote(key) + "]"


def _quote(key: str) -> str:
    # Escaped so that a message stays on one line whatever the key holds.
    return json.dumps(key, ensure_ascii=False).translate(_LINE_BREAKS)


def _check_depth(data: bytes, source: str, max_depth: int) -> None:
    """Refuse nesting deeper than ``max_depth`` before the recursive C parser sees it.

    No Python-level loop over bytes, so it stays cheap next to ``json.loads``: escaped quotes
    and backslashes are dropped (one regex) so every remaining quote delimits a string,
    everything but quotes and brackets is deleted, string contents are cut out, and then
    innermost ``[]`` pairs are removed once per level; within ``max_depth`` levels that
    empties the text.
    """
    reduced = _structure(data)
    # Each '""' is an empty string or the seam between two strings with nothing between them,
    # so dropping it keeps what lies outside strings; quotes left enclose bracket-holding text.
    outside = reduced.replace(b'""', b"")
    if b'"' in outside:
        outside = b"".join(outside.split(b'"')[::2])
    rest = outside
    passes = 0
    # A run this long is too deep whatever surrounds it; looking for it each pass ends
    # b"[" * 100_000 at once instead of after max_depth fruitless passes.
    too_deep_run = b"[" * (max_depth + 1)
    while rest:
        if passes >= max_depth or too_deep_run in rest:
            break
        shorter = rest.replace(b"[]", b"")
        if len(shorter) == len(rest):
            break  # only unmatched brackets are left
        rest = shorter
        passes += 1
    else:
        return
    # Brackets left over: too deep, or unmatched (a syntax error json will report). Removing
    # matched pairs keeps every other bracket's depth and lowers the deepest by at most one a
    # pass, so the true maximum lies between max(rest) and max(rest) + passes.
    if too_deep_run not in rest and _max_prefix_depth(rest) + passes <= max_depth:
        return
    located = _find_too_deep(data, max_depth)
    if located is None:
        return  # brackets stop matching before nesting gets too deep: json reports it
    offset, path = located
    line = data.count(b"\n", 0, offset) + 1
    line_start = data.rfind(b"\n", 0, offset) + 1
    column = len(data[line_start:offset].decode("utf-8", "replace")) + 1
    raise UntrustedJSONError(
        f"nested deeper than {max_depth} levels (line {line}, column {column}); "
        "flatten the document or raise max_depth",
        source=source,
        json_path=path,
        rule="depth",
    )


def _structure(data: bytes) -> bytes:
    """``data`` without escaped backslashes and quotes, then only quotes and brackets
    (braces as brackets), made a block at a time: no copy of a large document, no object
    per escape (as ``re.sub`` makes). Two ``replace`` passes do what one left-to-right
    scan does: the first cuts a run of backslashes to its odd one out, which the second
    cuts with the quote after it; no block ends in a backslash, so no run is split."""
    if b"\\" not in data:
        return data.translate(_BRACES_AS_BRACKETS, _NOT_STRUCTURAL)
    pieces: list[bytes] = []
    start, size = 0, len(data)
    while start < size:
        end = min(start + _STRUCTURE_BLOCK, size)
        while end < size and data[end - 1] == 0x5C:  # a backslash: take the next one too
            end += 1
        block = data[start:end] if (start, end) != (0, size) else data
        block = block.replace(b"\\\\", b"").replace(b'\\"', b"")
        pieces.append(block.translate(_BRACES_AS_BRACKETS, _NOT_STRUCTURAL))
        start = end
    return b"".join(pieces)


def _max_prefix_depth(brackets: bytes) -> int:
    """Deepest nesting of a string of ``[`` and ``]``, with C-speed iteration."""
    import itertools
    import operator

    # '[' weighs 2 and ']' 0, so the running sum after n brackets, minus n, is the depth there.
    weights = brackets.translate(_BRACKET_WEIGHTS)
    depths = map(operator.sub, itertools.accumulate(weights), itertools.count(1))
    return max(depths, default=0)


def _find_too_deep(data: bytes, max_depth: int) -> tuple[int, str] | None:
    """Byte offset and JSON path of the first container nested deeper than ``max_depth``.

    Walks tokens in Python, so it runs only once the document is likely too deep, and stops
    at the first container too deep. None if there is none before the brackets stop matching.
    """
    # Each open container: [is_object, index (arrays), key (objects), a key comes next].
    stack: list[list[Any]] = []
    for match in _TOKENS.finditer(data):
        token = match.group()
        first = token[0]
        if first in b"[{":
            if len(stack) >= max_depth:
                return match.start(), _stack_path(stack)
            stack.append([first == ord("{"), 0, None, True])
        elif first in b"]}":
            if not stack:
                return None
            stack.pop()
        elif not stack:
            continue
        elif first == ord(","):
            frame = stack[-1]
            if frame[0]:
                frame[3] = True
            else:
                frame[1] += 1
        elif first == ord(":"):
            stack[-1][3] = False
        elif stack[-1][0] and stack[-1][3]:
            try:
                stack[-1][2] = json.loads(token.decode("utf-8"))
            except ValueError:
                stack[-1][2] = token.decode("utf-8", "replace")[1:-1]
    return None


def _stack_path(stack: list[list[Any]]) -> str:
    parts = ["$"]
    for is_object, index, key, _ in stack:
        if not is_object:
            parts.append(f"[{index}]")
        elif isinstance(key, str):
            parts.append(_member(key))
    return "".join(parts)
