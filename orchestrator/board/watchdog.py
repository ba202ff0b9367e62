"""Attempts that end without a result, and what happens after: the watchdog's timeouts,
requeueing or failing blocked tasks, cancelling tasks that can never start, and the final
worklog entries a crash may have left out."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from .._text import plural
from ..formats.board_documents import ErrorCode, LedgerDelta, Task, TaskStatus
from ..formats.times import parse_time
from .core import BoardCore, next_step_after


class BoardWatchdog(BoardCore):
    """Attempts ended without a result, timeouts, and what comes after them."""

    def fail_attempt(
        self,
        task_id: str,
        attempt: int,
        *,
        code: ErrorCode,
        reason: str,
        timed_out: bool = False,
    ) -> LedgerDelta | None:
        """The attempt ended without a result (timeout, crash of the subagent): blocked,
        its locks released by the same delta. Repeating it changes nothing; an attempt
        settled otherwise meanwhile (its result judged, the watchdog) is left as it is."""
        with self.ledger.locked() as state:
            row = state.row(task_id)
            if row.status is not TaskStatus.IN_PROGRESS or row.attempts != attempt:
                return None  # already settled (by the watchdog, or before a crash)
            delta = self._blocked(row, attempt, code, reason, timed_out=timed_out)
            applied = self.ledger.append([delta], at=self.now())
        self._final_worklog(delta, row.task, next_step=next_step_after(delta), fresh=bool(applied))
        return applied[0] if applied else None

    def watchdog(
        self, *, now: datetime | None = None, spare: Iterable[str] = ()
    ) -> list[LedgerDelta]:
        """Block every task in progress whose last heartbeat is older than its
        ``timeout_seconds`` (TASK_TIMEOUT; the same delta releases its locks). Tasks in
        ``spare`` (their answer is in, waiting to be judged) are left alone."""
        moment = now or self.clock.now()
        if moment.tzinfo is None:
            raise ValueError("the watchdog's time must carry a timezone (UTC)")
        spared = set(spare)
        timed_out = []
        for row in list(self.state().rows.values()):
            if row.status is not TaskStatus.IN_PROGRESS or row.task_id in spared:
                continue
            last = self.last_heartbeat(row)
            if last is None:
                continue
            if moment - parse_time(last) <= timedelta(seconds=row.task.timeout_seconds):
                continue
            delta = self.fail_attempt(
                row.task_id,
                row.attempts,
                code=ErrorCode.TASK_TIMEOUT,
                reason=f"no heartbeat since {last} (timeout {row.task.timeout_seconds} s); "
                "locks released",
                timed_out=True,
            )
            if delta is not None:
                timed_out.append(delta)
        return timed_out

    def requeue_or_fail(self, *, max_attempts: int, retry_after_ms: int = 0) -> list[LedgerDelta]:
        """Blocked tasks back to todo while attempts remain, else failed; tasks that can
        never start (a dependency failed or was canceled) canceled."""
        changed = []
        for row in list(self.state().rows.values()):
            if row.status is not TaskStatus.BLOCKED:
                continue
            if row.attempts < max_attempts:
                delta = LedgerDelta(
                    task_id=row.task_id,
                    status=TaskStatus.TODO,
                    owner="",
                    reason=f"requeued after {row.code.value if row.code else 'a block'} "
                    f"(attempt {row.attempts} of {max_attempts})",
                    delta_id=f"{row.task_id}/v{row.version}/requeue",
                    x_base_version=row.version,
                    retry_after_ms=retry_after_ms,
                )
            else:
                delta = LedgerDelta(
                    task_id=row.task_id,
                    status=TaskStatus.FAILED,
                    owner=row.owner,
                    reason=f"gave up after {plural(row.attempts, 'attempt')}; last: {row.reason}",
                    delta_id=f"{row.task_id}/{row.attempts}/failed",
                    x_base_version=row.version,
                    x_code=row.code,
                )
            applied = self._append_once(delta, row.task, next_step=next_step_after(delta))
            if applied is not None:
                changed.append(applied)
        changed += self._cancel_unreachable()
        # A failure or cancel appended just before a crash may lack its worklog entry.
        self.settle_worklogs(
            row.task_id
            for row in self.state().rows.values()
            if row.status in (TaskStatus.FAILED, TaskStatus.CANCELED)
        )
        return changed

    def _cancel_unreachable(self) -> list[LedgerDelta]:
        changed: list[LedgerDelta] = []
        while True:
            state = self.state()
            doomed = [
                (row, dep)
                for row in state.rows.values()
                if row.status in (TaskStatus.TODO, TaskStatus.BLOCKED)
                for dep in row.task.dependencies
                if state.rows[dep].status in (TaskStatus.FAILED, TaskStatus.CANCELED)
            ]
            if not doomed:
                return changed
            row, dep = doomed[0]
            delta = LedgerDelta(
                task_id=row.task_id,
                status=TaskStatus.CANCELED,
                owner=row.owner,
                reason=f"dependency {dep} is {state.rows[dep].status.value}: it can never start",
                delta_id=f"{row.task_id}/canceled",
                x_base_version=row.version,
                x_code=ErrorCode.DEPENDENCY_NOT_MET,
            )
            applied = self._append_once(delta, row.task, next_step=next_step_after(delta))
            if applied is not None:
                changed.append(applied)

    def _append_once(self, delta: LedgerDelta, task: Task, *, next_step: str) -> LedgerDelta | None:
        """Append ``delta``; for a block or failure also the worklog's final entry, once."""
        with self.ledger.locked():
            applied = self.ledger.append([delta], at=self.now())
        if delta.status in (TaskStatus.BLOCKED, TaskStatus.FAILED, TaskStatus.CANCELED):
            self._final_worklog(delta, task, next_step=next_step, fresh=bool(applied))
        return applied[0] if applied else None

    def settle_worklogs(self, task_ids: Iterable[str] | None = None) -> None:
        """Give every blocked, failed or canceled task (of ``task_ids``, default all) the
        final worklog entry of the delta that put it there, if a crash between that
        delta and its entry left it out."""
        state = self.state()
        wanted = state.rows.keys() if task_ids is None else task_ids
        for task_id in wanted:
            row = state.rows[task_id]
            if row.status not in (TaskStatus.BLOCKED, TaskStatus.FAILED, TaskStatus.CANCELED):
                continue
            delta = LedgerDelta(
                task_id=task_id,
                status=row.status,
                owner=row.owner,
                reason=row.reason,
                delta_id=row.delta_id,
                x_code=row.code,
            )
            self._final_worklog(delta, row.task, next_step=next_step_after(delta), fresh=False)
