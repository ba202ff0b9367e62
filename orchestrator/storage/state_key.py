"""The user's signing key, and the signature over a state's parts made with it.

The work directory is where hosts and agents write, so a state file there cannot be taken
at its word: the engine signs every state it writes (HMAC-SHA256 over the parts that
``orchestrator.formats.state_signature`` names) with a key that lives outside any work
directory, and every command that acts on a state checks the signature before it imports
a workflow or reads an answer from it.

The key is a file of 64 hex digits, readable by its owner alone:
``$ORCHESTRATOR_KEY_FILE`` when that is set (an absolute path), else
``$XDG_CONFIG_HOME/checkpoint-orchestrator/state.key``, else
``~/.config/checkpoint-orchestrator/state.key``. It is made on first use, whole or not
at all, and two processes that make it at once end up with the same one.

``hashlib`` and ``hmac`` load OpenSSL, milliseconds of every ``orchestrate`` start; the
MAC is built by hand (RFC 2104) on the interpreter's built-in SHA-256, as
``orchestrator.storage.durable.sha256_hex`` does, and compared in constant time.
"""

from __future__ import annotations

import errno
import json
import operator
import os
import re
import stat
from itertools import compress
from itertools import count as count_from
from json.encoder import encode_basestring as _quote
from pathlib import Path

from .._errors import ContractError, KeyFileError, StateDamagedError, StateUntrustedError
from ..formats.bridge import record_edits
from ..formats.convert import unstructure
from ..formats.fastpath import shallow
from ..formats.state_signature import (
    ENGINE_KEY,
    PARTS,
    SIGNATURE_KEY,
    SIGNATURE_PATH,
    signature_of,
    signed_parts,
    with_signature,
)
from ..formats.strict_json import (
    SETTLED_KEPT,
    SETTLED_MADE,
    dumps_canonical,
    lines_key,
    loads_strict,
    members_key,
)
from .durable import fsync_directory, sha256_constructor
from .files import STATE_MAX_BYTES

# ``typing`` is not needed at run time; keeping it out of the imports keeps start-up cheap.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "KEY_FILE_ENV",
    "Verdict",
    "check_key_outside",
    "check_signature",
    "data_if_signed",
    "hmac_sha256_hex",
    "judge_signature",
    "key_file",
    "load_key",
    "read_signed",
    "sign_state_data",
    "signed_bytes",
    "signed_document",
]

KEY_FILE_ENV = "ORCHESTRATOR_KEY_FILE"
KEY_DIRECTORY = "checkpoint-orchestrator"
KEY_NAME = "state.key"
KEY_MIN_BYTES = 32
_KEY_MAX_BYTES = 4096
_MAC_CONTEXT = b"checkpoint-orchestrator state signature 1\n"
_FILE_MAC_CONTEXT = b"checkpoint-orchestrator state signature 2, over the file\n"
COVERS_FILE = "file"  # ``covers`` of a signature made over the file's bytes
# What stands in the file for the signature while its MAC is computed.
_MARK = "checkpoint-orchestrator: the state signature goes here"
_MARK_TEXT = b'"' + _MARK.encode() + b'"'
_SIGNATURE_OPENING = b'"' + SIGNATURE_KEY.encode() + b'": {"hmac_sha256": "'
_signature_pattern: re.Pattern[bytes] | None = None
_KEY_ID_CONTEXT = b"checkpoint-orchestrator key id\n"
_HINT_DIGITS = 8  # of each part's digest kept beside the MAC, to name what changed
_BLOCK = 64  # SHA-256's block size, in bytes
_IPAD = bytes(byte ^ 0x36 for byte in range(256))
_OPAD = bytes(byte ^ 0x5C for byte in range(256))

# A lone surrogate written as an escape: a state with one was written all in ASCII.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")

_keys: dict[str, bytes] = {}  # key file -> its key, once read in this process
_verified: tuple[str, bytes | None] | None = None  # the last bytes whose signature held
# Their JSON data, parsed for a caller that only looked at it (``peek``), for the next
# reader of the same bytes: ``resume`` reads the workflow's name, then the whole state.
_peeked: tuple[bytes, Any] | None = None
_decoded: tuple[bytes, str] | None = None  # the last bytes parsed, and their text


# -- the key ----------------------------------------------------------------------------


# (the environment it was found from) -> where the key lives: asked at every save.
_key_file_found: tuple[tuple[str | None, ...], Path] | None = None


def key_file() -> Path:
    """Where the signing key lives (see the module's docstring)."""
    global _key_file_found
    environ = os.environ
    seen = (environ.get(KEY_FILE_ENV), environ.get("XDG_CONFIG_HOME"), environ.get("HOME"))
    found = _key_file_found
    if found is not None and found[0] == seen:
        return found[1]
    path = _find_key_file()
    _key_file_found = (seen, path)
    return path


def _find_key_file() -> Path:
    given = os.environ.get(KEY_FILE_ENV)
    if given:
        if not os.path.isabs(given):
            raise KeyFileError(
                f"{KEY_FILE_ENV}={given!r} is not an absolute path; give the key file's "
                "absolute path, outside any work directory",
                path=given,
            )
        return Path(given)
    config = os.environ.get("XDG_CONFIG_HOME", "")
    if not os.path.isabs(config):  # unset, or relative: the XDG spec says to ignore it
        home = os.path.expanduser("~")
        if home == "~" or not os.path.isabs(home):
            raise KeyFileError(
                "cannot tell where the signing key lives (no home directory); set "
                f"{KEY_FILE_ENV} to an absolute path outside any work directory",
                path="",
            )
        config = os.path.join(home, ".config")
    return Path(config, KEY_DIRECTORY, KEY_NAME)


def load_key(*, create: bool) -> bytes:
    """The signing key; with ``create``, made first when there is none yet.

    Without ``create`` a missing key raises ``FileNotFoundError``: only a writer makes a
    key, since a key made to check a state could never have signed it.
    """
    path = key_file()
    known = _keys.get(str(path))
    if known is not None:
        return known
    try:
        key = _read_key(path)
    except FileNotFoundError:
        if not create:
            raise
        key = _create_key(path)
    _keys[str(path)] = key
    return key


def check_key_outside(workdir: Path) -> None:
    """Refuse a key file inside ``workdir``: whoever writes there could read it."""
    path = key_file()
    key_dir = os.path.realpath(path.parent)
    work = os.path.realpath(workdir)
    if key_dir == work or key_dir.startswith(work.rstrip(os.sep) + os.sep):
        raise KeyFileError(
            f"{path}: the signing key is inside the work directory {workdir}, where hosts "
            f"and agents write; move it out and set {KEY_FILE_ENV} to where it is now",
            path=str(path),
        )


def _read_key(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        info = os.fstat(fd)
        _check_key_file(path, info)
        data = os.read(fd, _KEY_MAX_BYTES + 1)
    finally:
        os.close(fd)
    key = data.strip()
    if len(key) < KEY_MIN_BYTES or len(data) > _KEY_MAX_BYTES:
        raise KeyFileError(
            f"{path}: the signing key holds {len(key)} bytes, not {KEY_MIN_BYTES} to "
            f"{_KEY_MAX_BYTES}; remove the file (a new key is made on next use, and each "
            "state signed with the old one must be trusted again with 'orchestrate trust')",
            path=str(path),
        )
    return key


def _check_key_file(path: Path, info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise KeyFileError(
            f"{path}: the signing key is not a regular file; remove it (a new key is made on "
            f"next use), or set {KEY_FILE_ENV} to the key file",
            path=str(path),
        )
    uid = os.geteuid()
    if info.st_uid != uid:
        raise KeyFileError(
            f"{path}: the signing key belongs to uid {info.st_uid}, not to you (uid {uid}); "
            f"use a key of your own: set {KEY_FILE_ENV} to another path, or remove this one",
            path=str(path),
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise KeyFileError(
            f"{path}: the signing key can be read by others (mode {mode:04o}); run 'chmod "
            f"600 {path}' (if someone may have read it, remove it instead: a new key is "
            "made on next use, and each state must then be trusted again)",
            path=str(path),
        )


def _create_key(path: Path) -> bytes:
    """Make the key whole under a temporary name, then link it into place: the first
    link wins, and a process that loses reads the winner's key."""
    directory = path.parent
    os.makedirs(directory, mode=0o700, exist_ok=True)
    material = os.urandom(32).hex().encode("ascii") + b"\n"
    temporary = directory / f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(temporary, flags | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, material)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(temporary, path)
    except FileExistsError:
        pass  # another process made the key first: that one is the key
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        _create_in_place(path, material)  # a file system without hard links
    finally:
        os.unlink(temporary)
    fsync_directory(directory)
    return _read_key(path)


def _create_in_place(path: Path, material: bytes) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        return
    try:
        os.write(fd, material)
        os.fsync(fd)
    finally:
        os.close(fd)


# -- the MAC ----------------------------------------------------------------------------


def hmac_sha256_hex(key: bytes, *message: bytes | memoryview) -> str:
    """HMAC-SHA256 (RFC 2104) under ``key`` of the message made of the ``message`` pieces
    one after the other (a long run's state is not copied to put a few bytes before it),
    in hex."""
    sha256 = sha256_constructor(sum(map(len, message)))
    if len(key) > _BLOCK:
        key = sha256(key).digest()
    key = key.ljust(_BLOCK, b"\0")
    inner = sha256(key.translate(_IPAD))
    for piece in message:
        inner.update(piece)
    inner = inner.digest()
    return sha256(key.translate(_OPAD) + inner).hexdigest()  # type: ignore[no-any-return]


def _key_id(key: bytes) -> str:
    return sha256_constructor()(_KEY_ID_CONTEXT + key).hexdigest()[:16]  # type: ignore[no-any-return]


def _digests(data: dict[str, Any], memo: dict[Any, Any] | None = None) -> list[tuple[str, str]]:
    parts = signed_parts(data, memo=memo)
    sha256 = sha256_constructor(sum(len(encoded) for _, encoded in parts))
    if memo is None:
        return [(name, sha256(encoded).hexdigest()) for name, encoded in parts]
    kept, made = memo.get(_PARTS_KEPT, {}), memo.setdefault(_PARTS_MADE, {})
    digests = []
    for name, encoded in parts:
        hasher, made[name] = _hashed_on(sha256, encoded, kept.get(name))
        digests.append((name, hasher.hexdigest()))
    return digests


# memo keys: the parts' bytes at the last save with a hash taken up to where they agreed
# with the save before (lent by whoever keeps the memo), and those of this save.
_PARTS_KEPT = "parts-kept"
_PARTS_MADE = "parts-made"
_HASHED_ON_FROM = 1 << 16  # a shorter part is hashed whole
_AGREE_STEP = 1 << 12


def _hashed_on(
    sha256: Any, encoded: bytes, last: tuple[bytes, int, Any] | None
) -> tuple[Any, tuple[bytes, int, Any] | None]:
    """A hash object that has taken ``encoded``, and what the next save may go on from:
    ``(encoded, offset, a copy of the hash at offset)``.

    A long run's parts grow at their end (its requests, its outputs): the bytes up to
    the first one that changed since the last save were hashed then. ``last`` is what
    that save kept: when ``encoded`` begins with the same bytes up to its offset, its
    hash goes on from there. How far the two agree beyond is found a few kilobytes at a
    time, and the copy kept there, for the next save.
    """
    if len(encoded) < _HASHED_ON_FROM:
        return sha256(encoded), None
    view = memoryview(encoded)
    start, hasher, before = 0, None, b""
    if last is not None:
        before, offset, at_offset = last
        if encoded.startswith(memoryview(before)[:offset]):  # compared at C speed
            start, hasher = offset, at_offset.copy()
    agreed, limit = start, min(len(before), len(encoded))
    while agreed + _AGREE_STEP <= limit and (
        encoded[agreed : agreed + _AGREE_STEP] == before[agreed : agreed + _AGREE_STEP]
    ):
        agreed += _AGREE_STEP
    if hasher is None:
        hasher = sha256()
    hasher.update(view[start:agreed])
    kept = hasher.copy()
    hasher.update(view[agreed:])
    return hasher, (encoded, agreed, kept)


def _signature(key: bytes, digests: list[tuple[str, str]]) -> dict[str, Any]:
    message = _MAC_CONTEXT + "".join(f"{name} {digest}\n" for name, digest in digests).encode()
    return {
        "hmac_sha256": hmac_sha256_hex(key, message),
        "key_id": _key_id(key),
        "parts": {name: digest[:_HINT_DIGITS] for name, digest in digests},
    }


def sign_state_data(data: dict[str, Any], memo: dict[Any, Any] | None = None) -> dict[str, Any]:
    """A copy of the top level of a state's ``data`` (JSON data, or the top level of a
    state about to be written) that carries its signature, made with the key (made first
    if there is none yet)."""
    key = load_key(create=True)
    return with_signature(data, _signature(key, _digests(data, memo)))


def signed_document(state: Any, encoded: EncodedItems | None = None) -> bytes:
    """The bytes a state (a ``CheckpointState``) is written as, signed: the canonical
    encoding ``dump_document`` gives it, with a signature over those very bytes in its
    engine record (see :func:`signed_bytes`). Each request and output is encoded once,
    for its part and for the file; with ``encoded`` (kept by the writer from one save to
    the next), a recorded request or a completed phase that has not changed since the
    last save is not encoded again."""
    memo: dict[Any, Any] = {}
    try:
        data = shallow(state)
        if encoded is not None:
            encoded.lend(state, memo)
        document = signed_bytes(data, memo, default=shallow)
    except TypeError:  # a value only the converter knows how to unstructure
        return signed_bytes(unstructure(state), {})
    if encoded is not None:
        encoded.keep(state, memo)
    global _verified
    _verified = (str(key_file()), document)  # signed here: reading it back needs no check
    return document


def signed_bytes(data: dict[str, Any], memo: dict[Any, Any], *, default: Any = None) -> bytes:
    """The canonical encoding of a state's ``data``, signed over its own bytes.

    The file is what a reader checks, so the MAC covers the file: its bytes with the
    signature's own text in place of a fixed mark, after the signature's other fields.
    Checking it costs one search and one hash of the file, with no encoding, however
    long the run. The parts' digests are still kept beside it, to name what changed.
    Should the state's own data hold the mark's text, the state is signed over its
    parts instead (as states written before were), which every reader also checks.
    """
    key = load_key(create=True)
    digests = _digests(data, memo)
    unsigned = dumps_canonical(
        with_signature(data, _MARK), default=default, memo=memo, members="phase_data"
    )
    mark = _member(_MARK_TEXT)
    # The mark is near the top (the engine's record leads phase_data): one pass finds it
    # and that it is there once.
    at = unsigned.find(mark)
    if at < 0 or unsigned.find(mark, at + len(mark)) >= 0:
        signed = with_signature(data, _signature(key, digests))
        return dumps_canonical(signed, default=default, memo=memo)
    fields = {
        "key_id": _key_id(key),
        "parts": {name: digest[:_HINT_DIGITS] for name, digest in digests},
        "covers": COVERS_FILE,
    }
    signature = {"hmac_sha256": _file_mac(key, fields, unsigned), **fields}
    view = memoryview(unsigned)
    return b"".join((view[:at], _member(_compact(signature)), view[at + len(mark) :]))


def data_if_signed(raw: bytes, *, peek: bool = False) -> Any:
    """The JSON data of a state file's bytes when they carry a signature over themselves
    made with the user's key (so they are exactly what a save wrote); ``None`` otherwise,
    and the caller reads them the careful way, which says what is wrong.

    The check needs no parsing: the signature's text is found in the bytes, and the MAC
    computed over them. Bytes orchestrate wrote are parsed by the C parser alone, without
    the rules that guard against what others write (duplicate keys, NaN, depth): a save
    never writes any of that.

    ``peek``: the caller only looks at the data and changes nothing in it, so the next
    read of the same bytes in this process takes this very parse (once) instead of
    parsing them again.
    """
    global _verified, _peeked
    peeked, _peeked = _peeked, None
    if _verified is not None and _verified[1] == raw and _verified[0] == str(key_file()):
        # the bytes this process last signed or checked
        data = peeked[1] if peeked is not None and peeked[0] == raw else _parse(raw)
        if peek:
            _peeked = (raw, data)
        return data
    start = raw.find(_SIGNATURE_OPENING)
    if start < 0 or raw.find(_SIGNATURE_OPENING, start + 1) >= 0:
        return None
    match = _signature_text().match(raw, start)
    if match is None:
        return None
    try:
        key = load_key(create=False)
    except FileNotFoundError:
        return None
    head = _FILE_MAC_CONTEXT + b"{" + match.group(2) + b"\n"
    view = memoryview(raw)  # the pieces are hashed where they are
    mac = hmac_sha256_hex(key, head, view[:start], _member(_MARK_TEXT), view[match.end() :])
    if not _compare_digest(match.group(1).decode("ascii"), mac):
        return None
    try:
        data = _parse(raw)
    except ValueError:  # pragma: no cover - bytes a save wrote always parse
        return None
    _verified = (str(key_file()), raw)
    if peek:
        _peeked = (raw, data)
    return data


def _parse(raw: bytes) -> Any:
    """``json.loads(raw)``, its text kept for :meth:`EncodedItems.seed` of the same bytes."""
    global _decoded
    text = raw.decode(json.detect_encoding(raw), "surrogatepass")  # as json.loads does
    _decoded = (raw, text)
    return json.loads(text)


def _text_of(raw: bytes) -> str:
    """The text of ``raw``, as the last parse of the same bytes decoded it (taken once)."""
    global _decoded
    decoded, _decoded = _decoded, None
    return decoded[1] if decoded is not None and decoded[0] == raw else raw.decode("utf-8")


def read_signed(raw: bytes, *, source: str, peek: bool = False) -> tuple[Any, bool]:
    """The JSON data of a state file's bytes, and whether a save wrote them exactly (see
    :func:`data_if_signed`, and ``peek`` there); other bytes are read under the strict
    rules, and refused unless their signature holds (``StateDamagedError``,
    ``StateUntrustedError``)."""
    data = data_if_signed(raw, peek=peek)
    if data is not None:
        return data, True
    try:
        data = loads_strict(
            raw, source=source, max_bytes=STATE_MAX_BYTES, allow_lone_surrogates=True
        )
    except ContractError as exc:
        raise StateDamagedError.wrap(exc) from None
    check_signature(data, source=source, raw=raw)
    return data, False


def _signature_text() -> re.Pattern[bytes]:
    global _signature_pattern
    if _signature_pattern is None:
        _signature_pattern = re.compile(
            _SIGNATURE_OPENING
            + rb'([0-9a-f]{64})", ("key_id": "[0-9a-f]{1,64}", "parts": \{[^{}]*\}, '
            + rb'"covers": "file"\})'
        )
    return _signature_pattern


def _file_mac(key: bytes, fields: dict[str, Any], unsigned: bytes) -> str:
    return hmac_sha256_hex(key, _FILE_MAC_CONTEXT + _compact(fields) + b"\n", unsigned)


def _compact(value: Any) -> bytes:
    """``value`` as the canonical encoding lays out an object inside a line."""
    return json.dumps(value, ensure_ascii=True, separators=(", ", ": ")).encode("ascii")


def _member(text: bytes) -> bytes:
    return b'"' + SIGNATURE_KEY.encode() + b'": ' + text


class EncodedItems:
    """The text of a state's items at the last save or load, for the next save.

    The items are those laid out on a line of their own. ``agent_requests`` and
    ``completed_phases`` are kept as their whole lines: a long run appends to them, and
    the lines of the items before the first one that changed are used as they are, found
    with a few passes at C speed rather than a step of Python per item. A request or a
    completed phase is unchanged while it is the very object it was then (``is``) and
    no field of it was assigned since (completed phases are frozen; a request's
    assignments are logged, see ``record_edits``); the engine replaces a field's value,
    never changes one in place (a request, once made, is what the host was sent). The
    outputs (in ``phase_data``, and in the signature's part) are kept as their member
    lines, each the same while its output is the same object: the engine keeps its own
    copy of what a phase returned and hands out copies. A long phase's journal is kept
    item by item (``SettledItems``).
    """

    __slots__ = ("_lists", "_members", "_parts", "_settled")

    def __init__(self) -> None:
        # list name -> _Lines of the list at the last save or load
        self._lists: dict[str, _Lines] = {}
        # The outputs' member lines, in the file and in the signature's part: the memo's
        # entries (keys, values, lines), checked by the encoder against each value's
        # identity (see strict_json._member_lines).
        self._members: dict[Any, tuple[list[Any], list[Any], list[str]]] = {}
        # The settled lists' item texts (a long phase's journal; see SettledItems).
        self._settled: dict[int, tuple[list[Any], list[str]]] = {}
        # The signature's parts as last hashed (see _hashed_on).
        self._parts: dict[str, tuple[bytes, int, Any] | None] = {}

    def held(self) -> int:
        """How many items' texts are held."""
        lists = sum(len(kept.items) for kept in self._lists.values())
        return lists + sum(len(kept[2]) for kept in self._members.values())

    def lend(self, state: Any, memo: dict[Any, Any]) -> None:
        """Put the texts still good for ``state``'s items into the encoder's ``memo``."""
        for name in _LISTS:
            lines = self._lists.get(name)
            if lines is not None:
                lines.lend(getattr(state, name), memo)
        memo.update(self._members)
        memo[SETTLED_KEPT] = self._settled
        memo[_PARTS_KEPT] = self._parts

    def keep(self, state: Any, memo: dict[Any, Any]) -> None:
        """Remember the texts ``memo`` holds for ``state``'s items (and nothing else)."""
        self._lists = {}
        for name in _LISTS:
            items = getattr(state, name)
            made = memo.get(lines_key(items))
            if made is not None and made[0] is items:
                self._lists[name] = _Lines(items, made[2])
        self._members = {key: memo[key] for key in _MEMBER_KEYS if key in memo}
        self._settled = memo.get(SETTLED_MADE, {})
        self._parts = memo.get(_PARTS_MADE, {})

    def seed(self, state: Any, raw: bytes) -> None:
        """Take the items' texts from the file ``state`` was just read from: a new
        process then encodes only what changes, however long the run.

        Only for bytes signed over themselves (so they are exactly what a save wrote, in
        the canonical layout, one item a line) and written without the ASCII fallback
        (its escapes would not be what the next save writes).
        """
        self._lists, self._members, self._settled, self._parts = {}, {}, {}, {}
        if _SURROGATE_ESCAPE.search(raw) is not None:
            return
        text = _text_of(raw)
        # The members are in this order, one line each or one item a line: each block
        # ends before the next member (the requests are the last).
        limit = len(text)
        lists = {}
        for name in reversed(_LISTS):
            items = getattr(state, name)
            span = _block(text, f'"{name}": [', "]", len(items), limit)
            if span is None:
                return
            if items:
                lists[name] = _Lines(items, text, *span)
            limit = text.find(f'\n  "{name}": ', 0, limit)
            if limit < 0:
                return
        outputs = list(state.phase_data.items())
        span = _block(text, '"phase_data": {', "}", len(outputs), limit)
        if span is None:
            return
        lines = text[span[0] : span[1]].split("\n") if outputs else []
        self._lists = lists
        # The file's own lines of phase_data, each a member's (the engine's record, first,
        # is made anew at every save).
        keys, values = [key for key, _ in outputs], [value for _, value in outputs]
        if lines and keys[0] == ENGINE_KEY and all(map(str.startswith, lines, map(_head, keys))):
            lines[:-1] = [line[:-1] for line in lines[:-1]]  # without the separating comma
            self._members = {_PHASE_DATA_LINES: (keys, values, lines)}


class _Lines:
    """A list's items as they were, and the lines they were laid out as.

    An item is unchanged while it is the very object it was, and no field of it has
    been assigned since: the items of ``completed_phases`` are frozen, and those of
    ``agent_requests`` are noted in ``record_edits`` when one of their fields is.
    """

    __slots__ = ("_edits", "_end", "_seen", "_start", "_text", "items")

    def __init__(self, items: list[Any], text: str, start: int = 0, end: int | None = None) -> None:
        """``text[start:end]`` holds the lines (a file's text and where they are in it:
        they are cut out once, when lent)."""
        self.items = tuple(items)
        self._text, self._start, self._end = text, start, len(text) if end is None else end
        self._edits = record_edits()  # the edit log as it is now, and how long
        self._seen = len(self._edits)

    def lend(self, items: list[Any], memo: dict[Any, Any]) -> None:
        """Put the lines of the first items still as they were into ``memo``."""
        count = self._unchanged(items)
        if count == 0:
            return
        text, start, end = self._text, self._start, self._end
        if count < len(self.items):
            # The line of item ``count`` begins after the newline that many lines from the
            # end: a long run changes its last items, so this walks back a few lines, where
            # splitting the text would copy all of it.
            for _ in range(len(self.items) - count):
                end = text.rfind("\n", start, end)
            end -= 1  # without its ",\n"
        if start or end < len(text):
            text = text[start:end]
        memo[lines_key(items)] = (items, count, text)

    def _unchanged(self, items: list[Any]) -> int:
        """How many items, from the first, are the same objects, none edited since."""
        kept = self.items
        count = min(len(kept), len(items))
        count = next(compress(count_from(), map(operator.is_not, items, kept)), count)
        edits = record_edits()
        if edits is not self._edits:
            return 0  # the log was replaced since: what changed is not known
        edited = set(map(id, edits[self._seen :]))
        if edited and count:
            ids = map(id, items[:count])
            count = next(compress(count_from(), map(edited.__contains__, ids)), count)
        return count


_LISTS = ("completed_phases", "agent_requests")  # in the order of the file
_PHASE_DATA_LINES = members_key("phase_data")
_MEMBER_KEYS = (_PHASE_DATA_LINES, members_key(""))


def _head(key: str) -> str:
    return f"    {_quote(key)}: "


def _block(text: str, opening: str, closing: str, count: int, limit: int) -> tuple[int, int] | None:
    """Where the lines of a top-level member laid out one item a line are in ``text``
    (without the brackets), if it has ``count`` lines and ends before ``limit``."""
    if count == 0:
        return 0, 0
    start = text.find(f"\n  {opening}\n", 0, limit)
    if start < 0:
        return None
    start += len(opening) + 4
    # Its closing line is sought back from the limit, a few characters; its lines are
    # counted at C speed, not split: a long run's lines are taken as one text.
    end = text.rfind(f"\n  {closing}", start, limit)
    return (start, end) if end >= 0 and text.count("\n", start, end) == count - 1 else None


# -- checking ---------------------------------------------------------------------------


class Verdict:
    """What the signature of a state says: ``ok``; else ``rule`` (``signature-missing``,
    ``signature-key``, ``signature-changed``), a sentence saying why (``reason``), and,
    for a change, the parts that changed as (name, JSON path, words)."""

    __slots__ = ("changed", "ok", "reason", "rule")

    def __init__(
        self,
        *,
        ok: bool,
        rule: str = "",
        reason: str = "",
        changed: tuple[tuple[str, str, str], ...] = (),
    ) -> None:
        self.ok = ok
        self.rule = rule
        self.reason = reason
        self.changed = changed


def judge_signature(data: Any, raw: bytes | None = None) -> Verdict:
    """Whether a state's JSON ``data`` carries a signature made with the user's key over
    exactly this state. Reads the key, never makes one. ``raw``: the bytes ``data`` was
    parsed from (without them, a signature over the file is checked against the state's
    canonical encoding, which is what its file holds)."""
    signature = signature_of(data)
    if signature is None or not isinstance(data, dict):
        return Verdict(
            ok=False,
            rule="signature-missing",
            reason="the state carries no signature, so orchestrate cannot tell it is as it "
            "wrote it (a run begun before states were signed, or the signature was removed)",
        )
    if not _well_formed(signature):
        return Verdict(
            ok=False,
            rule="signature-changed",
            reason="changed since orchestrate signed it: its signature is not one "
            "orchestrate writes",
        )
    path = key_file()
    try:
        key = load_key(create=False)
    except FileNotFoundError:
        return Verdict(
            ok=False,
            rule="signature-key",
            reason=f"it was signed with a key that is not here: there is no key at {path} "
            "(a state from another user or machine, or the key was removed)",
        )
    if not _compare_digest(signature["key_id"], _key_id(key)):
        return Verdict(
            ok=False,
            rule="signature-key",
            reason=f"it was signed with another key than {path} (key id "
            f"{signature['key_id']}): a state from another user or machine, or the key "
            "was replaced",
        )
    if signature.get("covers") == COVERS_FILE:
        if raw is None:
            raw = dumps_canonical(data)
        return _judge_file(data, signature, key, raw)
    digests = _digests(data)
    expected = _signature(key, digests)
    if _compare_digest(signature["hmac_sha256"], expected["hmac_sha256"]):
        if signature["parts"] == expected["parts"]:
            return Verdict(ok=True)
        return _changed(())  # the hints alone were edited
    return _changed(_parts_changed(signature, digests))


def _judge_file(data: dict[str, Any], signature: dict[str, Any], key: bytes, raw: bytes) -> Verdict:
    """A signature over the file (see :func:`signed_bytes`): its text must stand in the
    file once, where the mark stood when the MAC was made."""
    fields = {name: value for name, value in signature.items() if name != "hmac_sha256"}
    try:
        text = _member(_compact(signature))
    except (TypeError, ValueError):
        return _changed(())
    unsigned = raw.replace(text, _member(_MARK_TEXT))
    if raw.count(text) == 1 and _compare_digest(
        signature["hmac_sha256"], _file_mac(key, fields, unsigned)
    ):
        return Verdict(ok=True)
    # Changed: the parts whose digests differ from the hints say where. When the state is
    # as signed but the hints were edited, the MAC holds with the true hints put back.
    digests = _digests(data)
    true_hints = {name: digest[:_HINT_DIGITS] for name, digest in digests}
    if raw.count(text) == 1 and true_hints != signature["parts"]:
        restored = {**fields, "parts": true_hints}
        if _compare_digest(signature["hmac_sha256"], _file_mac(key, restored, unsigned)):
            return _changed(())
    return _changed(_parts_changed(signature, digests))


def _parts_changed(
    signature: dict[str, Any], digests: list[tuple[str, str]]
) -> tuple[tuple[str, str, str], ...]:
    hints = signature["parts"]
    return tuple(
        (name, where, words)
        for (name, digest), (_, where, words) in zip(digests, PARTS, strict=True)
        if hints.get(name) != digest[:_HINT_DIGITS]
    )


def _changed(changed: tuple[tuple[str, str, str], ...]) -> Verdict:
    return Verdict(
        ok=False,
        rule="signature-changed",
        reason="changed since orchestrate signed it",
        changed=changed,
    )


def check_signature(data: Any, *, source: str, raw: bytes | None = None) -> None:
    """Refuse a state whose signature does not hold (see :func:`judge_signature`) with a
    :class:`StateUntrustedError` that names the file, what changed and what to do.

    ``raw``, the bytes ``data`` was parsed from, lets a second check of the same bytes in
    this process (``resume`` checks before the import, then again under the lock) pass
    without encoding the state again.
    """
    global _verified
    checked = (str(key_file()), raw)
    if raw is not None and checked == _verified:
        return
    verdict = judge_signature(data, raw)
    if verdict.ok:
        if raw is not None:
            _verified = checked
        return
    if not verdict.changed:
        raise StateUntrustedError(
            verdict.reason, source=source, json_path=SIGNATURE_PATH, rule=verdict.rule
        )
    (_, first_path, first_words), *others = verdict.changed
    raise StateUntrustedError(
        f"changed since orchestrate signed it: {first_words}",
        source=source,
        json_path=first_path,
        rule=verdict.rule,
        also=tuple((where, verdict.rule, words) for _, where, words in others),
    )


def _well_formed(signature: Any) -> bool:
    if not isinstance(signature, dict):
        return False
    mac, key_id, parts = (signature.get(k) for k in ("hmac_sha256", "key_id", "parts"))
    return (
        isinstance(mac, str)
        and mac.isascii()
        and isinstance(key_id, str)
        and key_id.isascii()
        and isinstance(parts, dict)
    )


def _compare_digest(a: str, b: str) -> bool:
    """Equal, in time that does not depend on where they differ."""
    from _operator import _compare_digest as compare

    return bool(compare(a, b))
