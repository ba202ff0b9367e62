"""Compacting a task board's ledger: its deltas folded into one verified snapshot line.

A compacted ledger begins with one line that is not a delta, the ledger extension
``x_ledger_snapshot``: the board state the folded deltas build (the rows and the delta
index, as the board's snapshot file keeps them), the ``x_seq`` of the last one folded,
how many ledger lines were folded, a SHA-256 chained over their bytes (``deltas_sha256``:
of the lines themselves the first time; a later compaction hashes the previous chain
value, a newline, then the lines it folds), and a SHA-256 of the snapshot's own content.
The deltas after it follow unchanged, and new ones are appended as ever. A ledger that
was never compacted has no such line and reads exactly as before.

Compaction runs under the board's writers' lock: it folds the whole ledger, folds the
snapshot and the kept deltas again and requires the same board, then has the store
replace the ledger whole (a file renamed over the old one; one transaction in a
database), so a crash leaves the old ledger or the new one.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import attrs

from .._errors import BoardError, ContractError
from .._ports import LedgerStore, ReadLedgerInput, ReplaceLedgerInput
from ..formats.board_documents import ErrorCode
from ..formats.convert import structure, unstructure
from ..formats.strict_json import loads_strict
from ..storage.durable import crash_point, sha256_hex
from .ledger import DeltaIndex, LedgerState, TaskRow, fold_ledger

SNAPSHOT_KEY = "x_ledger_snapshot"
SNAPSHOT_PREFIX = b'{"' + SNAPSHOT_KEY.encode() + b'":'
COMPACTED_FORMAT = "orchestrator.ledger-compacted.v1"


@attrs.frozen(kw_only=True)
class SnapshotHead:
    """What a snapshot line says it folded."""

    seq: int
    deltas: int
    deltas_sha256: str


@attrs.frozen(kw_only=True)
class Compacted:
    """What :func:`compact_ledger` did: the deltas it folded now, the snapshot's head,
    the deltas kept after it, and the ledger's size before and after (bytes)."""

    folded: int
    head: SnapshotHead | None
    kept: int
    size_before: int
    size_after: int


def is_snapshot_line(line: bytes) -> bool:
    return line.startswith(SNAPSHOT_PREFIX)


def snapshot_line(state: LedgerState, head: SnapshotHead, *, at: str) -> bytes:
    """The snapshot line of ``state``, the fold of the lines ``head`` describes."""
    body: dict[str, Any] = {
        "format": COMPACTED_FORMAT,
        "seq": head.seq,
        "deltas": head.deltas,
        "deltas_sha256": head.deltas_sha256,
        "compacted_at": at,
        "rows": [unstructure(row) for row in sorted(state.rows.values(), key=_created)],
        "delta_index": state.index.pack(),
    }
    body["sha256"] = _body_digest(body)
    return (json.dumps({SNAPSHOT_KEY: body}, separators=(",", ":")) + "\n").encode()


def _created(row: TaskRow) -> int:
    return row.created


def _body_digest(body: dict[str, Any]) -> str:
    content = {k: v for k, v in body.items() if k != "sha256"}
    return sha256_hex(json.dumps(content, sort_keys=True, separators=(",", ":")).encode())


def adopt_snapshot(state: LedgerState, line: bytes, where: str) -> SnapshotHead:
    """Make ``state`` (empty) the board ``line``, a snapshot line, holds; refuses one that
    is not whole or not as compaction wrote it (LEDGER_INCONSISTENT)."""
    try:
        document = loads_strict(line, source=where)
        body = document[SNAPSHOT_KEY] if list(document) == [SNAPSHOT_KEY] else None
        if not isinstance(body, dict) or body.get("format") != COMPACTED_FORMAT:
            raise ValueError(f"it is not a {COMPACTED_FORMAT} snapshot")
        if body.get("sha256") != _body_digest(body):
            raise ValueError("its sha256 does not match its content: it was changed")
        head = SnapshotHead(
            seq=_count(body, "seq"),
            deltas=_count(body, "deltas"),
            deltas_sha256=body["deltas_sha256"],
        )
        rows = {}
        for data in body["rows"]:
            row = structure(data, TaskRow, source=where)
            rows[row.task_id] = row
        index = DeltaIndex(str(body["delta_index"]))
        if len(index) < len(rows):
            raise ValueError("its delta index is shorter than its rows")
    except (ValueError, KeyError, TypeError, ContractError) as exc:
        raise BoardError(
            f"{where}: the ledger's snapshot line cannot be read ({exc}); restore the ledger "
            "from a copy",
            code=ErrorCode.LEDGER_INCONSISTENT.value,
        ) from None
    state.rows, state.seq, state.index = rows, head.seq, index
    state.live = {t for t, row in rows.items() if row.status.value == "in_progress"}
    return head


def _count(body: dict[str, Any], name: str) -> int:
    value = body[name]
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name} is not a count")
    return value


def _same(one: LedgerState, other: LedgerState) -> bool:
    def rows(state: LedgerState) -> list[Any]:
        return [unstructure(r) for r in sorted(state.rows.values(), key=_created)]

    return (
        one.seq == other.seq
        and rows(one) == rows(other)
        and sorted(one.index.pack().splitlines()) == sorted(other.index.pack().splitlines())
    )


def compact_ledger(store: LedgerStore, *, keep: int, at: str) -> Compacted:
    """Fold the ledger of ``store`` into a snapshot line, keeping its last ``keep`` deltas
    as lines after it; nothing changes when there is nothing new to fold."""
    with store.locked():
        data = store.read_ledger(ReadLedgerInput(after=0)).data
        source = store.ledger_location
        whole = LedgerState()
        fold_ledger(whole, data, source=source, first_line=1)  # every rule, as check does
        lines = [line + b"\n" for line in data.split(b"\n")[:-1] if line.strip()]
        earlier = lines[0] if lines and is_snapshot_line(lines[0]) else None
        deltas = lines[1:] if earlier is not None else lines
        cut = max(0, len(deltas) - keep)
        if cut == 0:
            head = None if earlier is None else adopt_snapshot(LedgerState(), earlier, source)
            return Compacted(
                folded=0, head=head, kept=len(deltas), size_before=len(data), size_after=len(data)
            )
        state = LedgerState()
        folded = fold_ledger(state, b"".join(lines[: cut + (earlier is not None)]), source=source)
        previous = folded.snapshot
        chain = hashlib.sha256()
        if previous is not None:
            chain.update(previous.deltas_sha256.encode() + b"\n")
        for line in deltas[:cut]:
            chain.update(line)
        head = SnapshotHead(
            seq=state.seq,
            deltas=(previous.deltas if previous else 0) + cut,
            deltas_sha256=chain.hexdigest(),
        )
        line = snapshot_line(state, head, at=at)
        tail = b"".join(deltas[cut:])
        again = LedgerState()
        fold_ledger(again, line + tail, source=source)
        if not _same(again, whole):
            raise BoardError(
                f"{source}: the compacted ledger would not build the same board; nothing was "
                "changed",
                code=ErrorCode.LEDGER_INCONSISTENT.value,
            )
        crash_point("compact: ledger folded, not replaced")
        store.replace_ledger(ReplaceLedgerInput(snapshot=line, seq=state.seq, tail=tail))
        crash_point("compact: ledger replaced, lock not yet released")
    return Compacted(
        folded=cut,
        head=head,
        kept=len(deltas) - cut,
        size_before=len(data),
        size_after=len(line) + len(tail),
    )
