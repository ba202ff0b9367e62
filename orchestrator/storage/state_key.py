"""The user's signing key, and the signature over a state's file made with it.

The work directory is where hosts and agents write, so a state file there cannot be taken
at its word: the engine signs every state it writes (HMAC-SHA256 over the file's bytes,
cut into a few segments: see :func:`signed_bytes`) with a key that lives outside any
work directory, and every command that acts on a state checks the signature before it
imports a workflow or reads an answer from it. States signed before over the whole file,
or over the parts that ``orchestrator.formats.state_signature`` names, are still read.

The key is :mod:`orchestrator.storage.signing_key`'s (its names are also this
module's); what a save keeps for the next one, to encode and hash only
what changed, is :mod:`orchestrator.storage.kept_texts`'s.

The MAC is the standard library's ``hmac`` over ``hashlib``'s SHA-256, compared in
constant time (``hmac.compare_digest``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re

from .._errors import ContractError, StateDamagedError, StateUntrustedError
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
    dumps_canonical,
    loads_strict,
)
from .durable import sha256_constructor
from .files import STATE_MAX_BYTES
from .kept_texts import SEGMENTS_KEPT, SEGMENTS_MADE, EncodedItems, ReadMemo, ReadsHanded, parse
from .signing_key import KEY_FILE_ENV, check_key_outside, key_file, load_key

# ``typing`` is not needed at run time; keeping it out of the imports keeps start-up cheap.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from .kept_texts import _Hashed

__all__ = [
    "KEY_FILE_ENV",
    "EncodedItems",
    "ReadMemo",
    "ReadsHanded",
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
    "signature_problem",
    "signed_bytes",
    "signed_document",
]

_MAC_CONTEXT = b"checkpoint-orchestrator state signature 1\n"
_FILE_MAC_CONTEXT = b"checkpoint-orchestrator state signature 2, over the file\n"
_SEGMENTS_MAC_CONTEXT = b"checkpoint-orchestrator state signature 3, over the file's segments\n"
COVERS_FILE = "file"  # ``covers`` of a signature over the whole file (states written before)
COVERS_SEGMENTS = "segments"  # ``covers`` of one over the file's segments
# What stands in the file for the signature while its MAC is computed.
_MARK = "checkpoint-orchestrator: the state signature goes here"
_MARK_TEXT = b'"' + _MARK.encode() + b'"'
_SIGNATURE_OPENING = b'"' + SIGNATURE_KEY.encode() + b'": {"hmac_sha256": "'
# The signature's text as a save writes it: its MAC, its other fields, and what it covers.
_SIGNATURE_TEXT = re.compile(
    _SIGNATURE_OPENING
    + rb'([0-9a-f]{64})", ("key_id": "[0-9a-f]{1,64}", "parts": \{[^{}]*\}, '
    + rb'"covers": "(file|segments)"\})'
)
_KEY_ID_CONTEXT = b"checkpoint-orchestrator key id\n"
_HINT_DIGITS = 8  # of each part's digest kept beside the MAC, to name what changed

# -- the MAC ----------------------------------------------------------------------------


def hmac_sha256_hex(key: bytes, *message: bytes | memoryview) -> str:
    """HMAC-SHA256 (RFC 2104) under ``key`` of the message made of the ``message`` pieces
    one after the other (a long run's state is not copied to put a few bytes before it),
    in hex."""
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for piece in message:
        mac.update(piece)
    return mac.hexdigest()


def _key_id(key: bytes) -> str:
    return sha256_constructor()(_KEY_ID_CONTEXT + key).hexdigest()[:16]  # type: ignore[no-any-return]


def _digests(data: dict[str, Any]) -> list[tuple[str, str]]:
    """The digest of each of the state's parts (a signature over its parts: states
    written before the signature covered the file, and states holding the mark)."""
    parts = signed_parts(data)
    sha256 = sha256_constructor()
    return [(name, sha256(encoded).hexdigest()) for name, encoded in parts]


# -- the file's segments ----------------------------------------------------------------

#: Each segment a state's file is cut into for its MAC: its name, where it is (for
#: messages), and what it holds, in words; in the order of the file.
SEGMENTS: tuple[tuple[str, str, str], ...] = (
    ("fields", "$", "the phase and the other top-level fields"),
    (
        "record",
        f"$.phase_data.{ENGINE_KEY}",
        "the engine's record of the run (its workflow, inputs and journal)",
    ),
    ("outputs", "$.phase_data", "the phases' outputs"),
    ("completed_phases", "$.completed_phases", "the completed phases"),
    ("agent_requests", "$.agent_requests", "the recorded requests and answers"),
)
_PHASE_DATA_OPENING = b'\n  "phase_data": {\n    '
_LIST_OPENINGS = (
    ("completed_phases", b'\n  "completed_phases": '),
    ("agent_requests", b'\n  "agent_requests": '),
)


def _cuts(data: bytes) -> list[tuple[str, int, int]]:
    """The segments of a state's bytes: ``(name, start, end)``, one after the other from
    the first byte to the last.

    Each segment but the first begins where the canonical layout begins what it holds:
    the record at ``phase_data``'s opening line (the engine's record is its first
    member, on one line), the outputs after that line, then ``completed_phases`` and
    ``agent_requests``, each sought after the one before with a long needle, so the
    search skips through the file rather than stepping. A segment not found is part of
    the one before it: any bytes are cut some way, and the MAC covers every byte.
    """
    found = data.find(_PHASE_DATA_OPENING)
    cuts = [("fields", 0)]
    if found >= 0:
        line_end = data.find(b"\n", found + len(_PHASE_DATA_OPENING))
        cuts.append(("record", found))
        if line_end >= 0:
            cuts.append(("outputs", line_end))
    for name, opening in _LIST_OPENINGS:
        found = data.find(opening, cuts[-1][1])
        if found >= 0:
            cuts.append((name, found))
    ends = [start for _, start in cuts[1:]] + [len(data)]
    return [(name, start, end) for (name, start), end in zip(cuts, ends, strict=True)]


_HASHED_ON_FROM = 1 << 16  # a shorter segment is hashed whole
_AGREE_STEP = 1 << 12


def _hashed_on(
    sha256: Any, data: bytes, start: int, end: int, last: _Hashed | None
) -> tuple[Any, _Hashed | None]:
    """A hash object that has taken ``data[start:end]`` (a segment), and what the next
    save may go on from.

    A long run's segments grow at their end (its requests, its outputs): the bytes up
    to the first one that changed since the last save were hashed then. ``last`` is
    what that save kept: when the segment begins with the same bytes up to its offset,
    its hash goes on from there. How far the two agree beyond is found a few kilobytes
    at a time (compared at C speed, where they lie), and a copy of the hash kept there.
    """
    view = memoryview(data)[start:end]
    if end - start < _HASHED_ON_FROM:
        return sha256(view), None
    begin, agreed, hasher = 0, 0, None
    if last is not None:
        before, before_start, before_end, offset, at_offset = last
        kept = memoryview(before)
        if offset <= end - start and data.startswith(
            kept[before_start : before_start + offset], start
        ):
            begin = agreed = offset
            hasher = at_offset.copy()
        limit = min(before_end - before_start, end - start)
        while agreed + _AGREE_STEP <= limit and data.startswith(
            kept[before_start + agreed : before_start + agreed + _AGREE_STEP], start + agreed
        ):
            agreed += _AGREE_STEP
    if hasher is None:
        hasher = sha256()
    hasher.update(view[begin:agreed])
    at_agreed = hasher.copy()
    hasher.update(view[agreed:])
    return hasher, (data, start, end, agreed, at_agreed)


def _mark_elsewhere(unsigned: bytes, mark: bytes, at: int, vouched: list[tuple[int, int]]) -> bool:
    """Whether ``unsigned`` holds ``mark`` anywhere but at ``at`` (its first place).

    ``vouched``: ranges ``(start, end)``, in order and apart, whose bytes are those of a
    segment of the last save or of a check that did not hold the mark (see
    :func:`signed_bytes`): no mark lies wholly in one, and the search steps over them.
    A long run's save thus looks for a second mark in what changed since the last one,
    not in the whole file; a mark that begins before a range and ends in it is found.
    """
    size = len(mark)
    begin = 0
    for start, end in [*vouched, (len(unsigned), len(unsigned))]:
        stop = start + size - 1  # a mark beginning before ``start`` may end in the range
        found = unsigned.find(mark, begin, stop)
        while found >= 0:
            if found != at:
                return True
            found = unsigned.find(mark, found + 1, stop)
        begin = max(start, end - size + 1)
    return False


def _segments_mac(key: bytes, fields: dict[str, Any], digests: list[bytes]) -> str:
    return hmac_sha256_hex(key, _SEGMENTS_MAC_CONTEXT + _compact(fields) + b"\n", *digests)


def _segment_fields(key: bytes, names: list[str], digests: list[bytes]) -> dict[str, Any]:
    return {
        "key_id": _key_id(key),
        "parts": {
            name: digest.hex()[:_HINT_DIGITS] for name, digest in zip(names, digests, strict=True)
        },
        "covers": COVERS_SEGMENTS,
    }


def _signature(key: bytes, digests: list[tuple[str, str]]) -> dict[str, Any]:
    message = _MAC_CONTEXT + "".join(f"{name} {digest}\n" for name, digest in digests).encode()
    return {
        "hmac_sha256": hmac_sha256_hex(key, message),
        "key_id": _key_id(key),
        "parts": {name: digest[:_HINT_DIGITS] for name, digest in digests},
    }


def sign_state_data(data: dict[str, Any]) -> dict[str, Any]:
    """A copy of the top level of a state's ``data`` (JSON data, or the top level of a
    state about to be written) that carries a signature over its parts, made with the
    key (made first if there is none yet)."""
    key = load_key(create=True)
    return with_signature(data, _signature(key, _digests(data)))


def signed_document(state: Any, encoded: EncodedItems | None = None) -> bytes:
    """The bytes a state (a ``CheckpointState``) is written as, signed: the canonical
    encoding ``dump_document`` gives it, with a signature over those very bytes in its
    engine record (see :func:`signed_bytes`). With ``encoded`` (kept by the writer from
    one save to the next), a recorded request or a completed phase that has not changed
    since the last save is not encoded again, and the file's long segments are hashed on
    from where they agree with the last save's; and, with the writer's :class:`ReadMemo`
    (``encoded.reads``), its next read of these very bytes needs no check, and the next
    save of the state read from them hashes on from here."""
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
    reads = encoded.reads if encoded is not None else None
    if reads is not None:
        reads.note_verified(str(key_file()), document)  # signed here: no check to read back
        reads.keep_segments(document, memo.get(SEGMENTS_MADE, {}))
    return document


def signed_bytes(data: dict[str, Any], memo: dict[Any, Any], *, default: Any = None) -> bytes:
    """The canonical encoding of a state's ``data``, signed over its own bytes.

    The file is what a reader checks, so the MAC covers the file: its bytes with the
    signature's own text in place of a fixed mark, cut into a few segments (see
    :func:`_cuts`), each hashed, then the MAC made over the signature's other fields and
    the segments' digests. Checking it costs one search and one hash of the file, with
    no encoding, however long the run; and a save hashes a long segment on from where it
    agrees with the last save's (a long run's requests and outputs grow at their end),
    so what it hashes is what changed. The segments' digests are kept beside the MAC
    (their first digits), to name what changed. Should the state's own data hold the
    mark's text, the state is signed over its parts instead (as states written before
    the signature covered the file were), which every reader also checks.
    """
    key = load_key(create=True)
    unsigned = dumps_canonical(
        with_signature(data, _MARK), default=default, memo=memo, members="phase_data"
    )
    mark = _member(_MARK_TEXT)
    at = unsigned.find(mark)  # near the top: the engine's record leads phase_data
    segments = _cuts(unsigned) if at >= 0 else []
    sha256 = sha256_constructor()
    kept = memo.get(SEGMENTS_KEPT, {})
    hashed, vouched = [], []
    for name, start, end in segments:
        last = kept.get(name)
        hasher, made = _hashed_on(sha256, unsigned, start, end, last)
        if made is not None and last is not None and made[3]:
            vouched.append((start, start + made[3]))  # as the last save's, which held no mark
        # The segment that holds the mark is not kept: each one kept holds none.
        hashed.append((name, hasher, None if start <= at < end else made))
    if at < 0 or _mark_elsewhere(unsigned, mark, at, vouched):
        signed = with_signature(data, _signature(key, _digests(data)))
        return dumps_canonical(signed, default=default, memo=memo)
    made_now = memo.setdefault(SEGMENTS_MADE, {})
    digests = []
    for name, hasher, made in hashed:
        made_now[name] = made
        digests.append(hasher.digest())
    fields = _segment_fields(key, [name for name, _, _ in segments], digests)
    signature = {"hmac_sha256": _segments_mac(key, fields, digests), **fields}
    view = memoryview(unsigned)
    return b"".join((view[:at], _member(_compact(signature)), view[at + len(mark) :]))


def data_if_signed(raw: bytes, *, peek: bool = False, reads: ReadMemo | None = None) -> Any:
    """The JSON data of a state file's bytes when they carry a signature over themselves
    made with the user's key (so they are exactly what a save wrote); ``None`` otherwise,
    and the caller reads them the careful way, which says what is wrong.

    The check needs no parsing: the signature's text is found in the bytes, and the MAC
    computed over them. Bytes orchestrate wrote are parsed by the C parser alone, without
    the rules that guard against what others write (duplicate keys, NaN, depth): a save
    never writes any of that.

    ``reads``: the :class:`ReadMemo` of the run's handling. Bytes it last signed or
    checked, with the same key file, are not checked again; a parse it kept for them
    (``peek``) is taken (by this reader alone) instead of parsing them again. Without
    it, the whole check and the whole parse.

    ``peek``: the caller only looks at the data and changes nothing in it, so the next
    read of the same bytes through ``reads`` takes this very parse (once).
    """
    if reads is not None and reads.verified(str(key_file()), raw):
        # the bytes this run's handling last signed or checked
        data = reads.take_peeked(raw)
        if data is None:
            data = parse(raw, reads)
        if peek:
            reads.keep_peeked(raw, data)
        return data
    start = raw.find(_SIGNATURE_OPENING)
    if start < 0 or raw.find(_SIGNATURE_OPENING, start + 1) >= 0:
        return None
    match = _SIGNATURE_TEXT.match(raw, start)
    if match is None:
        return None
    try:
        key = load_key(create=False)
    except FileNotFoundError:
        return None
    fields = b"{" + match.group(2)
    if match.group(3) == COVERS_FILE.encode():
        view = memoryview(raw)  # the pieces are hashed where they are
        head = _FILE_MAC_CONTEXT + fields + b"\n"
        mac = hmac_sha256_hex(key, head, view[:start], _member(_MARK_TEXT), view[match.end() :])
        hashed = None
    else:
        read = _segments_read_from(raw, start, match.end())
        if read is None:
            return None
        digests, hashed = read
        mac = hmac_sha256_hex(key, _SEGMENTS_MAC_CONTEXT + fields + b"\n", *digests)
    if not hmac.compare_digest(match.group(1).decode("ascii"), mac):
        return None
    try:
        data = parse(raw, reads)
    except ValueError:  # pragma: no cover - bytes a save wrote always parse
        return None
    if reads is not None:
        reads.note_verified(str(key_file()), raw)
        if hashed is not None:
            reads.keep_segments(raw, hashed)
        if peek:
            reads.keep_peeked(raw, data)
    return data


def _segments_read_from(
    raw: bytes, start: int, end: int
) -> tuple[list[bytes], dict[str, _Hashed]] | None:
    """The digests of the segments of ``raw``, a state file whose signature is
    ``raw[start:end]`` (hashed as the mark that stood there); and, for each long segment
    but the signature's, a hash of it up to its last item's line, for the next save to
    go on from (see :func:`_hashed_on`). ``None`` when the signature is not inside one
    segment (no save writes that)."""
    sha256 = sha256_constructor()
    view, digests, hashed = memoryview(raw), [], {}
    for name, first, last in _cuts(raw):
        if first <= start < last:
            if end > last:
                return None
            hasher = sha256(view[first:start])
            hasher.update(_member(_MARK_TEXT))
            hasher.update(view[end:last])
        elif last - first < _HASHED_ON_FROM:
            hasher = sha256(view[first:last])
        else:
            # The last item's line is the one a next save changes first (an answer comes
            # in); the lines before it stay.
            split = max(raw.rfind(b"\n    ", first, last), first)
            hasher = sha256(view[first:split])
            hashed[name] = (raw, first, last, split - first, hasher.copy())
            hasher.update(view[split:last])
        digests.append(hasher.digest())
    return digests, hashed


def read_signed(
    raw: bytes, *, source: str, peek: bool = False, reads: ReadMemo | None = None
) -> tuple[Any, bool]:
    """The JSON data of a state file's bytes, and whether a save wrote them exactly (see
    :func:`data_if_signed`, and ``peek`` and ``reads`` there); other bytes are read
    under the strict rules, and refused unless their signature holds (``StateDamagedError``,
    ``StateUntrustedError``)."""
    data = data_if_signed(raw, peek=peek, reads=reads)
    if data is not None:
        return data, True
    try:
        data = loads_strict(
            raw, source=source, max_bytes=STATE_MAX_BYTES, allow_lone_surrogates=True
        )
    except ContractError as exc:
        raise StateDamagedError.wrap(exc) from None
    check_signature(data, source=source, raw=raw, reads=reads)
    return data, False


def _file_mac(key: bytes, fields: dict[str, Any], unsigned: bytes) -> str:
    return hmac_sha256_hex(key, _FILE_MAC_CONTEXT + _compact(fields) + b"\n", unsigned)


def _compact(value: Any) -> bytes:
    """``value`` as the canonical encoding lays out an object inside a line."""
    return json.dumps(value, ensure_ascii=True, separators=(", ", ": ")).encode("ascii")


def _member(text: bytes) -> bytes:
    return b'"' + SIGNATURE_KEY.encode() + b'": ' + text


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
    if not hmac.compare_digest(signature["key_id"], _key_id(key)):
        return Verdict(
            ok=False,
            rule="signature-key",
            reason=f"it was signed with another key than {path} (key id "
            f"{signature['key_id']}): a state from another user or machine, or the key "
            "was replaced",
        )
    if signature.get("covers") == COVERS_SEGMENTS:
        return _judge_segments(data, signature, key, raw)
    if signature.get("covers") == COVERS_FILE:
        if raw is None:
            raw = dumps_canonical(data)
        return _judge_file(data, signature, key, raw)
    digests = _digests(data)
    expected = _signature(key, digests)
    if hmac.compare_digest(signature["hmac_sha256"], expected["hmac_sha256"]):
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
    if raw.count(text) == 1 and hmac.compare_digest(
        signature["hmac_sha256"], _file_mac(key, fields, unsigned)
    ):
        return Verdict(ok=True)
    # Changed: the parts whose digests differ from the hints say where. When the state is
    # as signed but the hints were edited, the MAC holds with the true hints put back.
    digests = _digests(data)
    true_hints = {name: digest[:_HINT_DIGITS] for name, digest in digests}
    if raw.count(text) == 1 and true_hints != signature["parts"]:
        restored = {**fields, "parts": true_hints}
        if hmac.compare_digest(signature["hmac_sha256"], _file_mac(key, restored, unsigned)):
            return _changed(())
    return _changed(_parts_changed(signature, digests))


def _judge_segments(
    data: dict[str, Any], signature: dict[str, Any], key: bytes, raw: bytes | None
) -> Verdict:
    """A signature over the file's segments (see :func:`signed_bytes`): its text must
    stand in the file once, where the mark stood when the MAC was made. What changed is
    named by the segments whose digests differ from the hints, in the state laid out as
    a save lays it out (an editor that laid the whole file out otherwise changed its
    bytes, not what it says)."""
    fields = {name: value for name, value in signature.items() if name != "hmac_sha256"}
    try:
        text = _member(_compact(signature))
    except (TypeError, ValueError):
        return _changed(())
    canonical = dumps_canonical(data)
    if raw is None or raw == canonical:
        raw = canonical
    for document in (raw,) if raw is canonical else (raw, canonical):
        names, digests = _segment_digests(document, text)
        if digests and hmac.compare_digest(
            signature["hmac_sha256"], _segments_mac(key, fields, digests)
        ):
            # Laid out otherwise, the same data: the file is not what a save wrote.
            return Verdict(ok=True) if document is raw else _changed(())
    if not digests:
        return _changed(())
    true_fields = _segment_fields(key, names, digests)
    if hmac.compare_digest(signature["hmac_sha256"], _segments_mac(key, true_fields, digests)):
        return _changed(())  # the state is as signed: the hints alone were edited
    hints, true_hints = signature["parts"], true_fields["parts"]
    return _changed(
        tuple(
            (name, where, words)
            for name, where, words in SEGMENTS
            if hints.get(name) != true_hints.get(name)
        )
    )


def _segment_digests(document: bytes, text: bytes) -> tuple[list[str], list[bytes]]:
    """The names and digests of the segments of ``document``, with the mark in place of
    the signature's ``text``; none when that text is not there once."""
    at = document.find(text)
    if at < 0 or document.find(text, at + len(text)) >= 0:
        return [], []
    read = _segments_read_from(document, at, at + len(text))  # as the check reads a file
    if read is None:
        return [], []
    return [name for name, _, _ in _cuts(document)], read[0]


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


def check_signature(
    data: Any, *, source: str, raw: bytes | None = None, reads: ReadMemo | None = None
) -> None:
    """Refuse a state whose signature does not hold (see :func:`judge_signature`) with a
    :class:`StateUntrustedError` that names the file, what changed and what to do.

    ``raw``, the bytes ``data`` was parsed from, with ``reads`` (the run's handling's
    :class:`ReadMemo`), lets a second check of the same bytes through the same memo
    pass without encoding the state again. Without either, the whole check.
    """
    if raw is not None and reads is not None and reads.verified(str(key_file()), raw):
        return
    verdict = judge_signature(data, raw)
    if verdict.ok:
        if raw is not None and reads is not None:
            reads.note_verified(str(key_file()), raw)
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


def _workdir_of(state_path: Path) -> Path:
    """The work directory of a state file: a live instance's lies in it; a run's kept
    ``state.json`` in ``.orchestrator/runs/<run_id>/`` beneath it."""
    runs = state_path.parent.parent
    if (
        state_path.name == "state.json"
        and runs.name == "runs"
        and runs.parent.name == ".orchestrator"
    ):
        return runs.parent.parent
    return state_path.parent


def signature_problem(data: Any, raw: bytes, state_path: Path) -> str | None:
    """Why the signature of the state at ``state_path`` (a live instance's, or a run's
    kept ``state.json``) does not hold, or why it is not the run's latest or not this
    directory's, in one sentence; ``None`` when it is all right (what ``status`` and the
    UI show of a state they will not act on)."""
    from .._errors import KeyFileError, StateRolledBackError
    from .checkpoints import check_checkpoint

    try:
        check_key_outside(state_path.parent)
        check_signature(data, source=str(state_path), raw=raw)
        check_checkpoint(data, _workdir_of(state_path), source=str(state_path))
    except StateRolledBackError as exc:
        return exc.detail
    except StateUntrustedError as exc:
        where = f" at {exc.json_path}" if exc.json_path != "$" else ""
        others = "".join(f"; and {text} at {path}" for path, _, text in exc.also)
        return f"{exc.detail}{where}{others}"
    except KeyFileError as exc:
        return f"cannot be checked: {exc}"
    return None
