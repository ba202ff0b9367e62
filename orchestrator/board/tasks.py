"""The board's tasks: creating them (in dependency order), which may start now, and a
transition a person or another tool asks for."""

from __future__ import annotations

from collections.abc import Sequence

from .._errors import BoardError, ContractError
from ..formats.board_documents import ErrorCode, LedgerDelta, Priority, Task, TaskStatus
from .core import BoardCore
from .ledger import LedgerState, TaskRow

PRIORITY_RANK = {Priority.CRITICAL: 0, Priority.HIGH: 1, Priority.NORMAL: 2, Priority.LOW: 3}


class BoardTasks(BoardCore):
    """Creating tasks, the ready ones, and a status set by hand."""

    def create_tasks(self, tasks: Sequence[Task], *, owner: str = "") -> list[LedgerDelta]:
        """Create ``tasks`` (in dependency order; a cycle is refused before anything is
        written). Creating the same tasks again changes nothing."""
        from ..formats.board_rules import error_code_for, refuse_untrusted_secret, validate_task

        for task in tasks:
            where = f"task {task.task_id}"
            try:
                validate_task(task, source=where)
                refuse_untrusted_secret(task, source=where)
            except ContractError as exc:
                raise BoardError(
                    f"{exc}; nothing was created",
                    code=error_code_for(exc).value,
                    task_id=task.task_id,
                ) from None
        ordered = topological_order(tasks)
        deltas = [
            LedgerDelta(
                task_id=task.task_id,
                status=TaskStatus.TODO,
                owner=owner,
                reason=f"created: {task.title}",
                delta_id=f"{task.task_id}/create",
                x_base_version=0,
                x_create=task,
            )
            for task in ordered
        ]
        with self.ledger.locked():
            return self.ledger.append(deltas, at=self.now())

    def ready(self, state: LedgerState | None = None) -> list[TaskRow]:
        """Tasks that may start now, in the order they should: todo, every dependency
        done; by priority, then creation order. Locks are not considered here."""
        state = state or self.state()
        ready = [
            row
            for row in state.rows.values()
            if row.status is TaskStatus.TODO
            and all(state.rows[d].status is TaskStatus.DONE for d in row.task.dependencies)
        ]
        return sorted(ready, key=lambda r: (PRIORITY_RANK[r.task.priority], r.created))

    def set_status(
        self,
        task_id: str,
        status: TaskStatus,
        *,
        reason: str,
        owner: str | None = None,
        code: ErrorCode | None = None,
        base_version: int | None = None,
        delta_id: str | None = None,
    ) -> LedgerDelta | None:
        """One transition as a person or another tool asks for it (checked like any other).

        Entering ``in_progress`` goes through :meth:`assign` (it needs a packet), and
        ``done`` through :meth:`submit` (it needs a PASS verdict).
        """
        if status is TaskStatus.IN_PROGRESS:
            raise BoardError(
                f"task {task_id}: use 'assign' to start a task (it writes the packet)",
                code=ErrorCode.INVALID_TRANSITION.value,
                task_id=task_id,
            )
        if status is TaskStatus.DONE:
            raise BoardError(
                f"task {task_id}: a task is done only through 'submit' and a PASS verdict",
                code=ErrorCode.ACCEPTANCE_FAILED.value,
                task_id=task_id,
            )
        from ..formats.secrets import redact

        with self.ledger.locked() as state:
            row = state.row(task_id)
            delta = LedgerDelta(
                task_id=task_id,
                status=status,
                owner=row.owner if owner is None else owner,
                reason=redact(reason),
                delta_id=delta_id or f"{task_id}/v{row.version}/{status.value}",
                x_base_version=row.version if base_version is None else base_version,
                x_code=code,
            )
            applied = self.ledger.append([delta], at=self.now())
        if applied and status in (TaskStatus.BLOCKED, TaskStatus.FAILED):
            self._final_worklog(
                applied[0], row.task, next_step="a person decides: requeue or cancel"
            )
        return applied[0] if applied else None


def topological_order(tasks: Sequence[Task]) -> list[Task]:
    """``tasks`` with every dependency first (ties in the given order); a cycle is refused
    with the tasks that form it."""
    by_id = {}
    for task in tasks:
        if task.task_id in by_id:
            raise BoardError(
                f"task {task.task_id} is listed twice",
                code=ErrorCode.SCHEMA_INVALID.value,
                task_id=task.task_id,
            )
        by_id[task.task_id] = task
    ordered: list[Task] = []
    done: set[str] = set()
    visiting: list[str] = []

    def visit(task: Task) -> None:
        if task.task_id in done:
            return
        if task.task_id in visiting:
            cycle = [*visiting[visiting.index(task.task_id) :], task.task_id]
            raise BoardError(
                f"the dependencies form a cycle: {' -> '.join(cycle)}; a task graph must "
                "be acyclic",
                code=ErrorCode.DEPENDENCY_NOT_MET.value,
                task_id=task.task_id,
                details={"cycle": cycle},
            )
        visiting.append(task.task_id)
        for dependency in task.dependencies:
            if dependency in by_id:
                visit(by_id[dependency])
        visiting.pop()
        done.add(task.task_id)
        ordered.append(task)

    for task in tasks:
        visit(task)
    return ordered
