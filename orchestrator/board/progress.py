"""The subagent's side of the board while it works: heartbeats and worklog entries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from .._errors import BoardError
from .._ports import HeartbeatInput, WorklogInput
from ..formats.board_documents import ErrorCode, Task, TaskStatus, WorklogEntry
from ..formats.convert import unstructure
from ..storage import beneath
from .core import BoardCore, json_line


class BoardProgress(BoardCore):
    """Heartbeats and worklogs: written by any process at once, no lock needed."""

    def heartbeat(self, task_id: str, *, attempt: int | None = None) -> str:
        """Record that the subagent of ``task_id`` is alive; returns the time written."""
        row = self.state().row(task_id)
        if row.status is not TaskStatus.IN_PROGRESS:
            raise BoardError(
                f"task {task_id} is {row.status.value}, not in_progress: no heartbeat is "
                "expected (was it timed out and reassigned?)",
                code=ErrorCode.INVALID_TRANSITION.value,
                task_id=task_id,
            )
        if attempt is not None and attempt != row.attempts:
            raise BoardError(
                f"task {task_id} is at attempt {row.attempts}; a heartbeat for attempt "
                f"{attempt} comes from a subagent that was replaced: stop working",
                code=ErrorCode.CONCURRENCY_CONFLICT.value,
                task_id=task_id,
            )
        now = self.now()
        self.store.write_heartbeat(HeartbeatInput(task_id=task_id, at=now))
        return now

    def append_worklog(self, entry: WorklogEntry) -> WorklogEntry:
        """Append one entry to its task's worklog, any process at once. Secrets in
        ``decision``/``result`` (untrusted) refuse it; elsewhere they are redacted."""
        from ..formats.board_rules import untrusted_secret
        from ..formats.secrets import redact

        if entry.run_id.lower() != self.run_id.lower():
            raise BoardError(
                f"worklog entry for run {entry.run_id}; this board is run {self.run_id}",
                code=ErrorCode.SCHEMA_INVALID.value,
                task_id=entry.task_id,
            )
        row = self.state().row(entry.task_id)
        found = untrusted_secret(entry)
        if found is not None:  # as `orchestrate check worklog` refuses it
            raise BoardError(
                f"the worklog entry's {found[1]}; it was not written: append it again once "
                "scrubbed",
                code=ErrorCode.UNTRUSTED_CONTEXT_BLOCK.value,
                task_id=entry.task_id,
            )
        clean = attrs.evolve(
            entry,
            actor=redact(entry.actor),
            action=redact(entry.action),
            files_touched=[redact(f) for f in entry.files_touched],
            next_step=redact(entry.next_step),
            evidence=None if entry.evidence is None else redact(entry.evidence),
        )
        self.store.append_worklog(WorklogInput(path=self.worklog_name(row.task), line=_line(clean)))
        return clean

    def worklog_path(self, task: Task) -> Path:
        path = self.directory / self.worklog_name(task)
        beneath.make_directories(path.parent)
        return path

    def worklog(self, task_id: str) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = self.store.read_worklog(
            self.worklog_name(self.state().row(task_id).task)
        )
        return records


def _line(entry: WorklogEntry) -> bytes:
    return json_line(unstructure(entry))
