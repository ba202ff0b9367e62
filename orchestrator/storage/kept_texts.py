"""The text of a state's items and the hashes of its file's segments, kept from one save
(or one read) to the next, so that a save encodes and hashes what changed, not the whole
state: :class:`EncodedItems`, which the writer keeps; and :class:`ReadMemo`, what one
run's handling learnt of the bytes it read or wrote, for its own next read of them.

Nothing here is held by the module: whoever handles a run makes its memo and passes it,
so one engine's reads cannot reach another's through a global.
"""

from __future__ import annotations

import json
import operator
import re
import threading
from itertools import compress, islice
from itertools import count as count_from
from json.encoder import encode_basestring as _quote

from ..formats.bridge import record_edits
from ..formats.state_signature import ENGINE_KEY
from ..formats.strict_json import SETTLED_KEPT, SETTLED_MADE, item_texts_in, lines_key, members_key

# ``typing`` is not needed at run time; keeping it out of the imports keeps start-up cheap.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    #: What the next save may go on from: a segment's bytes (``data[start:end]``), how
    #: far it was hashed, and a copy of that hash.
    _Hashed = tuple[bytes, int, int, int, Any]

#: memo keys: each segment as last hashed, with a hash taken up to where it agreed with
#: the save before (lent by whoever keeps the memo), and those of this save.
SEGMENTS_KEPT = "segments-kept"
SEGMENTS_MADE = "segments-made"

# A lone surrogate written as an escape: a state with one was written all in ASCII.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")


class ReadMemo:
    """What one run's handling (a bridge, and the command that built it) learnt of the
    state's bytes it wrote, checked or parsed, for its next read of the very same bytes:

    - the bytes whose signature was made or held, with the key file's path then: reading
      them back needs no MAC (``state_key.data_if_signed``);
    - the JSON data parsed for a caller that only looked at it (``peek``), given to the
      next reader of the same bytes (``resume`` reads the workflow's name, then the
      whole state) and to that reader alone: it is taken out under the lock;
    - the text the last parse decoded, and the segments' hashes the last check or save
      took, for the :class:`EncodedItems` of the state read from the same bytes.

    Each entry is matched against the bytes (and the key's path) before it is used, and
    taken once where the taker may change it. Safe to share between threads: every
    entry is read and replaced under one lock. Without a memo a reader does the whole
    check and the whole parse.
    """

    __slots__ = ("_decoded", "_lock", "_peeked", "_segments", "_verified")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._verified: tuple[str, bytes] | None = None
        self._peeked: tuple[bytes, Any] | None = None
        self._decoded: tuple[bytes, str] | None = None
        self._segments: tuple[bytes, dict[str, Any]] | None = None

    def note_verified(self, key_path: str, raw: bytes) -> None:
        """``raw``'s signature was made, or held, with the key at ``key_path``."""
        with self._lock:
            self._verified = (key_path, raw)

    def verified(self, key_path: str, raw: bytes) -> bool:
        """Whether ``raw`` is the last bytes signed or checked here, with the same key."""
        with self._lock:
            verified = self._verified
        return verified is not None and verified[0] == key_path and verified[1] == raw

    def keep_peeked(self, raw: bytes, data: Any) -> None:
        """Keep ``data``, parsed from ``raw`` and not changed, for the next reader."""
        with self._lock:
            self._peeked = (raw, data)

    def take_peeked(self, raw: bytes) -> Any:
        """The data kept by :meth:`keep_peeked` when it was parsed from ``raw`` (then
        nobody else holds it), else ``None``; either way nothing is kept any more."""
        with self._lock:
            peeked, self._peeked = self._peeked, None
        return peeked[1] if peeked is not None and peeked[0] == raw else None

    def keep_text(self, raw: bytes, text: str) -> None:
        with self._lock:
            self._decoded = (raw, text)

    def take_text(self, raw: bytes) -> str | None:
        """The text the last parse decoded, when it parsed ``raw`` (taken once)."""
        with self._lock:
            decoded, self._decoded = self._decoded, None
        return decoded[1] if decoded is not None and decoded[0] == raw else None

    def keep_segments(self, raw: bytes, hashed: dict[str, Any]) -> None:
        """Keep what the next save of the state read from ``raw`` may hash on from."""
        with self._lock:
            self._segments = (raw, hashed)

    def take_segments(self, raw: bytes) -> dict[str, Any]:
        """A copy of what :meth:`keep_segments` kept for ``raw`` (taken once), else
        nothing."""
        with self._lock:
            read, self._segments = self._segments, None
        return dict(read[1]) if read is not None and read[0] == raw else {}


class ReadsHanded:
    """The :class:`ReadMemo` a run store made when it looked at a run's state (the
    workflow's name, before the workflow is imported), for the bridge it builds next for
    the same run: taken by that bridge alone. A few runs at most, the latest ones; safe
    to share between threads."""

    KEPT = 8

    __slots__ = ("_kept", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[str, ReadMemo] = {}

    def leave(self, location: str, reads: ReadMemo) -> None:
        with self._lock:
            self._kept.pop(location, None)
            self._kept[location] = reads
            while len(self._kept) > self.KEPT:
                del self._kept[next(iter(self._kept))]

    def take(self, location: str) -> ReadMemo | None:
        with self._lock:
            return self._kept.pop(location, None)


def parse(raw: bytes, reads: ReadMemo | None = None) -> Any:
    """``json.loads(raw)``; with ``reads``, its text kept there for the
    :class:`EncodedItems` of the state read from the same bytes."""
    text = raw.decode(json.detect_encoding(raw), "surrogatepass")  # as json.loads does
    if reads is not None:
        reads.keep_text(raw, text)
    return json.loads(text)


def _text_of(raw: bytes, reads: ReadMemo | None) -> str:
    """The text of ``raw``, as the last parse of the same bytes decoded it."""
    text = reads.take_text(raw) if reads is not None else None
    return text if text is not None else raw.decode("utf-8")


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

    __slots__ = ("_lists", "_members", "_segments", "_settled", "reads")

    def __init__(self, reads: ReadMemo | None = None) -> None:
        #: the writer's :class:`ReadMemo`: each save notes its bytes there (signed here,
        #: so reading them back needs no check), for the writer's next read
        self.reads = reads
        # list name -> _Lines of the list at the last save or load
        self._lists: dict[str, _Lines] = {}
        # The outputs' member lines, in the file and in the signature's part: the memo's
        # entries (keys, values, lines), checked by the encoder against each value's
        # identity (see strict_json._member_lines).
        self._members: dict[Any, tuple[list[Any], list[Any], list[str]]] = {}
        # The settled lists' item texts (a long phase's journal; see SettledItems).
        self._settled: dict[int, tuple[list[Any], list[str]]] = {}
        # The file's segments as last hashed (see _hashed_on).
        self._segments: dict[str, _Hashed | None] = {}

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
        memo[SEGMENTS_KEPT] = self._segments

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
        self._segments = memo.get(SEGMENTS_MADE, {})

    def take_from_read(self, state: Any, raw: bytes, reads: ReadMemo | None = None) -> None:
        """Take the items' texts from the file ``state`` was just read from: a new
        process then encodes only what changes, however long the run.

        Only for bytes signed over themselves (so they are exactly what a save wrote, in
        the canonical layout, one item a line) and written without the ASCII fallback
        (its escapes would not be what the next save writes).
        """
        self._lists, self._members, self._settled = {}, {}, {}
        # The segments' hashes as the check (or the save) of ``reads`` took them, to go on
        # from.
        self._segments = reads.take_segments(raw) if reads is not None else {}
        # (A file without a backslash has no escape at all: one pass of memchr.)
        if b"\\" in raw and _SURROGATE_ESCAPE.search(raw) is not None:
            return
        text = _text_of(raw, reads)
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
                lists[name] = _Lines(items, text=text, start=span[0], end=span[1])
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
            # A long phase's journal: its entries' texts, cut from the record's line.
            journal = values[0].get("journal") if type(values[0]) is dict else None
            if type(journal) is list:
                texts = item_texts_in(lines[0], journal)
                if texts is not None:
                    self._settled = {id(journal[0]): (list(journal), texts)}


class _Lines:
    """A list's items as they were, and the lines they were laid out as.

    An item is unchanged while it is the very object it was, and no field of it has
    been assigned since: the items of ``completed_phases`` are frozen, and those of
    ``agent_requests`` are noted in ``record_edits`` when one of their fields is.
    """

    __slots__ = ("_edits", "_end", "_pieces", "_seen", "_start", "_text", "items")

    def __init__(
        self,
        items: list[Any],
        pieces: tuple[str, ...] = (),
        *,
        text: str = "",
        start: int = 0,
        end: int = 0,
    ) -> None:
        """The lines in ``pieces`` (as the encoder keeps them, see
        ``strict_json._item_lines``), or ``text[start:end]`` (a file's text and where
        they are in it: they are cut out once, when lent)."""
        self.items = tuple(items)
        self._pieces, self._text, self._start, self._end = pieces, text, start, end
        self._edits = record_edits()  # the edit log as it is now, and how long
        self._seen = len(self._edits)

    def lend(self, items: list[Any], memo: dict[Any, Any]) -> None:
        """Put the lines of the first items still as they were into ``memo``."""
        count = self._unchanged(items)
        if count == 0:
            return
        # A long run changes its last items: the lines of those are cut off the end,
        # walking back a few lines, where splitting the text would copy all of it.
        dropped = len(self.items) - count
        pieces = self._pieces
        if not pieces:
            text, start, end = self._text, self._start, self._end
            for _ in range(dropped):
                end = text.rfind("\n", start, end)
            end -= 1 if dropped else 0  # without its ",\n"
            pieces = (text[start:end] if start or end < len(text) else text,)
        elif dropped:
            pieces = _without_last_lines(pieces, dropped)
        memo[lines_key(items)] = (items, count, pieces)

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
            # The requests edited are the latest, mostly: sought from the last item back,
            # the search stops once it has found each of them (it goes through all only
            # when one is not among these items).
            flags = map(edited.__contains__, map(id, reversed(items[:count])))
            found = list(islice(compress(range(count - 1, -1, -1), flags), len(edited)))
            count = min(found, default=count)
        return count


def _without_last_lines(pieces: tuple[str, ...], dropped: int) -> tuple[str, ...]:
    """``pieces`` (lines joined by ``",\\n"``, in pieces) without their last ``dropped``
    lines (fewer than they hold)."""
    kept = list(pieces)
    while True:
        last = kept.pop()
        at = len(last)
        while dropped and (at := last.rfind("\n", 0, at)) >= 0:
            dropped -= 1
        if not dropped:
            break
    # ``at`` is where the newline before the first line dropped is; the comma before it
    # goes too (the lines are joined by ",\n", which is never cut in two).
    if at > 1:
        kept.append(last[: at - 1])
    elif at == 0:  # the comma ended the piece before
        kept[-1] = kept[-1][:-1]
    return tuple(kept)


_LISTS = ("completed_phases", "agent_requests")  # in the order of the file
_PHASE_DATA_LINES = members_key("phase_data")
_MEMBER_KEYS = (_PHASE_DATA_LINES,)


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
