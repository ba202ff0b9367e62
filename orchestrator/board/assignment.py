"""Starting tasks: the assignment packet each attempt gets (written before the ledger
delta that starts it), and reading it back."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import attrs

from .._errors import BoardError
from .._ports import BoardDocumentInput
from ..formats.board_documents import (
    ActiveLock,
    AssignmentPacket,
    ContextItem,
    ContextKind,
    ErrorCode,
    LedgerDelta,
    TaskStatus,
)
from .core import BoardCore, canonical_bytes
from .ledger import LedgerState, TaskRow


class BoardAssignments(BoardCore):
    """Assigning tasks to an owner, and the packets that tell the subagent its task."""

    def assign(
        self,
        task_ids: Sequence[str],
        *,
        owner: str,
        context: Sequence[ContextItem] = (),
    ) -> list[AssignmentPacket]:
        """Start ``task_ids`` (all or none): write each packet, then one ledger append that
        takes their locks. A task this owner already started (the call repeated after a
        crash) is given back as it is: the same packet, nothing appended."""
        with self.ledger.locked() as state:
            packets, deltas = [], []
            scratch = state.scratch()
            for task_id in task_ids:
                row = scratch.row(task_id)
                if row.status is TaskStatus.IN_PROGRESS and row.owner == owner:
                    packets.append(self._read_packet(task_id, row.attempts))
                    continue
                attempt = row.attempts + 1
                delta = LedgerDelta(
                    task_id=task_id,
                    status=TaskStatus.IN_PROGRESS,
                    owner=owner,
                    reason=f"assigned to {owner} (attempt {attempt})",
                    delta_id=f"{task_id}/{attempt}/in_progress",
                    x_base_version=row.version,
                    x_attempt=attempt,
                )
                scratch.judge(delta)  # refuses before any packet is written
                scratch.apply(attrs.evolve(delta, x_seq=scratch.seq + 1, x_at=""))
                packets.append(self._packet(scratch, scratch.rows[task_id], context))
                deltas.append(delta)
            fresh = {delta.task_id: delta for delta in deltas}
            for packet in packets:
                started = fresh.get(packet.task.task_id)
                if started is not None:
                    self.store.write_document(
                        _packet_input(
                            started.task_id, started.x_attempt or 1, canonical_bytes(packet)
                        )
                    )
            self.ledger.append(deltas, at=self.now())
        return packets

    def _read_packet(self, task_id: str, attempt: int) -> AssignmentPacket:
        from ..formats.board_rules import parse_packet
        from ..formats.strict_json import loads_strict

        raw, source = self.packet_text(task_id, attempt)
        return parse_packet(loads_strict(raw, source=source), source=source)

    def packet_text(self, task_id: str, attempt: int) -> tuple[bytes, str]:
        """The packet of an attempt as written, and where it is."""
        where = _packet_input(task_id, attempt)
        source = self.store.document_location(where)
        raw = self.store.read_document(where)
        if raw is None:
            raise FileNotFoundError(2, "No such file or directory", source)
        return raw, source

    def packet_location(self, task_id: str, attempt: int) -> str:
        """Where the packet of an attempt is: a path, or a name in the database."""
        return self.store.document_location(_packet_input(task_id, attempt))

    def packet_path(self, task_id: str, attempt: int) -> Path:
        return self.directory / "packets" / f"{task_id}.{attempt}.json"

    def _packet(
        self, state: LedgerState, row: TaskRow, context: Sequence[ContextItem]
    ) -> AssignmentPacket:
        from ..formats.board_rules import untrusted_secret

        info = self.info
        packet = AssignmentPacket(
            run_id=info.run_id,
            global_objective=info.objective,
            task=row.task,
            active_locks=[
                ActiveLock(task_id=t, resource=r, active=True) for t, r in state.active_locks()
            ],
            context_package=[
                *(ContextItem(kind=ContextKind.CONSTRAINT, value=c) for c in info.constraints),
                *context,
            ],
        )
        found = untrusted_secret(packet)
        if found is not None:  # as `orchestrate check packet` refuses it
            raise BoardError(
                f"the packet of task {row.task_id}: {found[1]}; it was not written",
                code=ErrorCode.UNTRUSTED_CONTEXT_BLOCK.value,
                task_id=row.task_id,
            )
        return packet


def _packet_input(task_id: str, attempt: int, data: bytes = b"") -> BoardDocumentInput:
    return BoardDocumentInput(kind="packets", task_id=task_id, attempt=attempt, data=data)
