"""The handoff bundle: everything a fresh orchestrator needs to continue a run, built from
a board (deterministic and size-capped), shown as a page, and adopted by a new board."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from ..formats.board_documents import (
    AcceptanceTarget,
    Blocker,
    ErrorCode,
    HandoffBundle,
    HandoffDependency,
    HandoffRow,
    LedgerDelta,
    Task,
    TaskStatus,
    TaskType,
)
from .core import canonical_bytes
from .ledger import TERMINAL
from .tasks import topological_order

if TYPE_CHECKING:
    from .board import Board

HANDOFF_MAX_BYTES = 256 * 1024


def handoff_bundle(board: Board) -> HandoffBundle:
    """Everything a fresh orchestrator needs to continue, deterministic and size-capped."""
    state = board.state()
    info = board.info
    rows = sorted(state.rows.values(), key=lambda row: row.created)
    bundle = HandoffBundle(
        run_id=info.run_id,
        objective=info.objective,
        constraints=list(info.constraints),
        ledger=[
            HandoffRow(
                task_id=row.task_id,
                title=row.task.title,
                status=row.status,
                owner=row.owner,
                lock_scope=list(row.task.lock_scope),
                timeout_seconds=row.task.timeout_seconds,
                heartbeat_interval_seconds=row.task.heartbeat_interval_seconds,
                priority=row.task.priority,
                last_heartbeat_at=board.last_heartbeat(row)
                if row.status is TaskStatus.IN_PROGRESS
                else row.last_heartbeat_at,
                x_task=row.task,
            )
            for row in rows
        ],
        active_locks=board.lock_table(),
        dependencies=[
            HandoffDependency(task_id=row.task_id, depends_on=list(row.task.dependencies))
            for row in rows
            if row.task.dependencies
        ],
        open_blockers=[
            Blocker(
                task_id=row.task_id,
                code=row.code or ErrorCode.NON_COMPLIANT,
                reason=row.reason,
            )
            for row in rows
            if row.status is TaskStatus.BLOCKED
            or (row.status is TaskStatus.FAILED and row.code is not None)
        ],
        acceptance_targets=[
            AcceptanceTarget(
                task_id=row.task_id, acceptance_criteria=list(row.task.acceptance_criteria)
            )
            for row in rows
        ],
    )
    return cap_handoff(bundle)


def continue_handoff(board: Board, bundle: HandoffBundle) -> None:
    """Bring ``board`` (made for the run ``bundle`` describes) to where the bundle left
    off: every task recreated and brought to its recorded status (finished tasks stay
    finished, a task that was in progress is blocked, to be reassigned). Doing it again
    after a crash finishes what is left."""
    from ..formats.board_rules import validate_task

    depends = {d.task_id: list(d.depends_on) for d in bundle.dependencies}
    criteria = {t.task_id: list(t.acceptance_criteria) for t in bundle.acceptance_targets}
    tasks = [
        row.x_task
        or Task(
            task_id=row.task_id,
            title=row.title,
            type=TaskType.PARALLELIZABLE,
            dependencies=depends.get(row.task_id, []),
            lock_scope=list(row.lock_scope),
            forbidden_scope=[],
            acceptance_criteria=criteria.get(row.task_id) or [f"{row.title}: done"],
            worklog_path=f"worklogs/{row.task_id}.jsonl",
            timeout_seconds=row.timeout_seconds,
            heartbeat_interval_seconds=row.heartbeat_interval_seconds,
            priority=row.priority,
        )
        for row in bundle.ledger
    ]
    for task in tasks:
        validate_task(task, source=f"handoff ledger {task.task_id}")
    board.create_tasks(tasks, owner="handoff")
    by_id = {row.task_id: row for row in bundle.ledger}
    for task in topological_order(tasks):
        _bring_to(board, task.task_id, by_id[task.task_id].status, bundle.run_id)


def _bring_to(board: Board, task_id: str, status: TaskStatus, run_id: str) -> None:
    """Replay ``task_id`` (just created, todo) to ``status`` through legal transitions."""
    note = f"adopted from the handoff of run {run_id}"
    current = board.state().row(task_id).status
    target = TaskStatus.BLOCKED if status is TaskStatus.IN_PROGRESS else status
    if current is target or status is TaskStatus.TODO:
        return  # there already (adopting again after a crash)
    if status is TaskStatus.DONE:
        if current is not TaskStatus.IN_PROGRESS:
            board.assign([task_id], owner="handoff")
        with board.ledger.locked() as state:
            row = state.row(task_id)
            board.ledger.append(
                [
                    LedgerDelta(
                        task_id=task_id,
                        status=TaskStatus.DONE,
                        owner=row.owner,
                        reason=note,
                        delta_id=f"{task_id}/handoff/done",
                        x_base_version=row.version,
                        x_verdict=f"handoff:{run_id}",
                    )
                ],
                at=board.now(),
            )
        return
    board.set_status(task_id, target, reason=note, delta_id=f"{task_id}/handoff/{target.value}")


def cap_handoff(bundle: HandoffBundle, limit: int = HANDOFF_MAX_BYTES) -> HandoffBundle:
    """Keep the bundle under ``limit`` bytes by leaving out the oldest finished tasks
    (their rows, targets and dependency lists), with a constraint saying how many. Open
    work, and every finished task open work depends on, always stays."""
    if len(canonical_bytes(bundle)) <= limit:
        return bundle
    depends = {d.task_id: d.depends_on for d in bundle.dependencies}
    keep = {row.task_id for row in bundle.ledger if row.status not in TERMINAL}
    pending = list(keep)
    while pending:  # what open tasks wait for, transitively
        for dependency in depends.get(pending.pop(), []):
            if dependency not in keep:
                keep.add(dependency)
                pending.append(dependency)
    droppable = [row.task_id for row in bundle.ledger if row.task_id not in keep]

    def without(dropped: set[str]) -> HandoffBundle:
        note = (
            f"{len(dropped)} finished tasks are left out of this bundle (size cap); "
            "the board's ledger.ndjson has them"
        )
        return attrs.evolve(
            bundle,
            ledger=[r for r in bundle.ledger if r.task_id not in dropped],
            dependencies=[d for d in bundle.dependencies if d.task_id not in dropped],
            acceptance_targets=[t for t in bundle.acceptance_targets if t.task_id not in dropped],
            constraints=[*bundle.constraints, note],
        )

    count = 1
    while count < len(droppable) and len(canonical_bytes(without(set(droppable[:count])))) > limit:
        count *= 2
    return without(set(droppable[: min(count, len(droppable))]))


def handoff_markdown(bundle: HandoffBundle) -> str:
    """The bundle as a page a fresh model context reads first."""
    lines = [
        f"# Handoff: run {bundle.run_id}",
        "",
        f"Objective: {bundle.objective}",
        "",
    ]
    if bundle.constraints:
        lines += ["## Constraints", "", *(f"- {c}" for c in bundle.constraints), ""]
    lines += [
        "## Tasks",
        "",
        "| task | status | owner | priority | lock scope | title |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in bundle.ledger:
        lines.append(
            f"| {row.task_id} | {row.status.value} | {row.owner or '-'} | {row.priority.value} "
            f"| {', '.join(row.lock_scope)} | {row.title} |"
        )
    lines.append("")
    if bundle.active_locks:
        lines += [
            "## Locks held",
            "",
            *(f"- {lock.resource} ({lock.task_id})" for lock in bundle.active_locks),
            "",
        ]
    if bundle.open_blockers:
        lines += [
            "## Open blockers",
            "",
            *(f"- {b.task_id}: {b.code.value}: {b.reason}" for b in bundle.open_blockers),
            "",
        ]
    if bundle.dependencies:
        lines += [
            "## Dependencies",
            "",
            *(f"- {d.task_id} after {', '.join(d.depends_on)}" for d in bundle.dependencies),
            "",
        ]
    open_tasks = {row.task_id for row in bundle.ledger if row.status not in TERMINAL}
    targets = [t for t in bundle.acceptance_targets if t.task_id in open_tasks]
    if targets:
        lines += ["## Acceptance targets (open tasks)", ""]
        for target in targets:
            lines += [f"- {target.task_id}:", *(f"  - {c}" for c in target.acceptance_criteria)]
        lines.append("")
    return "\n".join(lines)
