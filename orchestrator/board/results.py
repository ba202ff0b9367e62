"""Results: a subagent's answer judged (by :mod:`orchestrator.board.gateway`) and its
verdict recorded, once; a result submitted again gets the judgement recorded."""

from __future__ import annotations

from .._errors import BoardError
from .._ports import BoardDocumentInput
from ..formats.board_documents import ErrorCode, LedgerDelta, Pins, TaskStatus
from .core import BoardCore, canonical_bytes, next_step_after
from .gateway import Judgement, evaluate
from .ledger import LedgerState, TaskRow


class BoardResults(BoardCore):
    """Submitting a result for the current attempt of a task."""

    def submit(
        self, task_id: str, raw: bytes, *, attempt: int | None = None, pins: Pins | None = None
    ) -> Judgement:
        """Judge a subagent's answer for the current attempt of ``task_id`` and record the
        outcome: done on PASS, blocked with the first blocking code otherwise.

        The judging happens under the board's lock, so no other writer (the watchdog)
        can settle the attempt between the verdict and the delta that records it.
        """
        with self.ledger.locked() as state:
            row = state.row(task_id)
            attempt = attempt or row.attempts
            if row.status is not TaskStatus.IN_PROGRESS or row.attempts != attempt:
                settled = self._settled(row, attempt, state)
                if settled is not None:
                    return settled  # this very result was judged already (a step run again)
                raise BoardError(
                    f"task {task_id} is {row.status.value} at attempt {row.attempts}: a result "
                    f"for attempt {attempt} is not expected (only a task in progress takes "
                    "results)",
                    code=ErrorCode.INVALID_TRANSITION.value,
                    task_id=task_id,
                )
            judgement, delta = self._judge(row, attempt, raw, pins)
            applied = self.ledger.append([delta], at=self.now())
        if delta.status is TaskStatus.BLOCKED:
            self._final_worklog(
                delta, row.task, next_step=next_step_after(delta), fresh=bool(applied)
            )
        return judgement

    def _judge(
        self, row: TaskRow, attempt: int, raw: bytes, pins: Pins | None
    ) -> tuple[Judgement, LedgerDelta]:
        """Keep the result, judge it, keep the verdict; the delta that records it."""
        task_id = row.task_id
        result = BoardDocumentInput(kind="results", task_id=task_id, attempt=attempt, data=raw)
        self.store.write_document(result)
        now = self.now()
        judgement = evaluate(
            raw,
            task=row.task,
            run_id=self.run_id,
            source=self.store.document_location(result),
            submitted_at=now,
            evaluated_at=now,
            result_link=f"results/{task_id}.{attempt}.json",
            pins=pins,
            workspace=self.workspace,
        )
        verdict = BoardDocumentInput(
            kind="verdicts",
            task_id=task_id,
            attempt=attempt,
            data=canonical_bytes(judgement.verdict),
        )
        self.store.write_document(verdict)
        link = f"verdicts/{task_id}.{attempt}.json"
        if judgement.problem is not None:
            message = _short(judgement.problem.message)
            return judgement, self._blocked(row, attempt, judgement.problem.code, message)
        return judgement, LedgerDelta(
            task_id=task_id,
            status=TaskStatus.DONE,
            owner=row.owner,
            reason=f"verdict PASS ({link})",
            delta_id=f"{task_id}/{attempt}/done",
            x_base_version=row.version,
            x_verdict=link,
        )

    def _settled(self, row: TaskRow, attempt: int, state: LedgerState) -> Judgement | None:
        """The judgement recorded for ``attempt`` of ``row``'s task, if it was judged; a
        PASS that lost the race to another settlement (the watchdog) is reported failed."""
        from ..formats.board_documents import FailCode, VerdictOutcome
        from ..formats.board_rules import parse_verdict
        from ..formats.strict_json import loads_strict
        from .gateway import Problem

        task_id = row.task_id
        done = state.index.get(f"{task_id}/{attempt}/done") is not None
        blocked_id = f"{task_id}/{attempt}/blocked"
        where = BoardDocumentInput(kind="verdicts", task_id=task_id, attempt=attempt)
        if not (done or state.index.get(blocked_id) is not None):
            return None
        raw = self.store.read_document(where)
        if raw is None:
            return None
        source = self.store.document_location(where)
        verdict = parse_verdict(loads_strict(raw, source=source), source=source)
        problem = None
        if not done:
            if verdict.verdict is VerdictOutcome.FAIL and verdict.x_code:
                code, fail_code = ErrorCode(verdict.x_code), FailCode(verdict.reason_code)
                message = "; ".join(verdict.messages)
            else:
                ended = row.code if row.delta_id == blocked_id and row.code else None
                code = ended or ErrorCode.TASK_TIMEOUT
                fail_code, message = (
                    FailCode.TIMEOUT_EXCEEDED,
                    (
                        f"the attempt was settled as blocked ({code.value}) before this result "
                        "was recorded"
                    ),
                )
            problem = Problem(code, fail_code, message)
        return Judgement(verdict=verdict, problem=problem, document=None, changed=[])


def _short(text: str, limit: int = 500) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
