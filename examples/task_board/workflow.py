"""The task-board example: one goal split into tasks that subagents do in waves.

The goal is a small change to a key-value service (``sample_repo/``, copied into the work
directory as ``repo/``). Six tasks touch overlapping parts of it: the lock table keeps
apart the two that both want ``src/``, dependencies order the docs and tests after the
API change, and the board recovers a subagent that hangs (timed out, reassigned) and one
that strays outside its scope (refused by the gateway, reassigned).

Run it offline with ``run_offline.sh``: ``orchestrate drive`` answers every assignment
with ``fake_subagent.py``, which edits the files, heartbeats and writes its worklog
through ``orchestrate board``, as a subagent in any language would.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from orchestrator import Priority, Task, TaskType, Workflow, phase

SAMPLE_REPO = Path(__file__).resolve().parent / "sample_repo"
GOAL = (
    "Validate input in the key-value API, make storage keys case-insensitive, and ship "
    "the change with its documentation, tests, changelog and release notes."
)
CONSTRAINTS = [
    "Change only the files of your task's lock_scope.",
    "Keep the public functions put() and get() backwards compatible.",
]

# task id -> (title, lock scope, dependencies, priority, agent, acceptance criterion)
PLAN: dict[str, tuple[str, list[str], list[str], str, str, str]] = {
    "T-1": (
        "Validate input in the API",
        ["src/api.py"],
        [],
        "high",
        "coder",
        "put() refuses an empty key",
    ),
    "T-2": (
        "Make storage keys case-insensitive",
        ["src"],
        [],
        "normal",
        "coder",
        "load() finds a key whatever its case",
    ),
    "T-3": (
        "Document input validation",
        ["docs/api.md"],
        ["T-1"],
        "normal",
        "doc-writer",
        "docs/api.md says which keys put() refuses",
    ),
    "T-4": (
        "Test input validation",
        ["tests"],
        ["T-1"],
        "normal",
        "tester",
        "a test shows put() refusing an empty key",
    ),
    "T-5": (
        "Note the changes in the changelog",
        ["CHANGELOG.md"],
        [],
        "low",
        "doc-writer",
        "CHANGELOG.md lists both changes",
    ),
    "T-6": (
        "Write the release notes",
        ["docs"],
        ["T-2", "T-3", "T-4"],
        "normal",
        "doc-writer",
        "docs/release-notes.md summarises the release",
    ),
}


def make_tasks() -> list[Task]:
    return [
        Task(
            task_id=task_id,
            title=title,
            type=TaskType.PARALLELIZABLE,
            dependencies=dependencies,
            lock_scope=scope,
            forbidden_scope=["src"] if task_id == "T-6" else [],
            acceptance_criteria=[criterion],
            worklog_path=f"worklogs/{task_id}.jsonl",
            timeout_seconds=60,
            heartbeat_interval_seconds=10,
            priority=Priority(priority),
        )
        for task_id, (title, scope, dependencies, priority, _, criterion) in PLAN.items()
    ]


def agent_for(task: Task) -> str:
    return PLAN[task.task_id][4]


class TaskBoardDemo(Workflow):
    name = "task-board-demo"
    agents = ("coder", "doc-writer", "tester")
    purpose = "splitting a change into tasks done by subagents under locks"
    max_retries = 0

    @phase(1)
    def prepare(self, ctx: Any) -> dict[str, Any]:
        """Copy the sample repository into the work directory: the subagents' workspace."""
        source = Path(ctx.inputs.get("repo_path") or SAMPLE_REPO)
        workspace = ctx.workdir / "repo"

        def copy() -> list[str]:
            if not workspace.exists():
                # Copied beside it, then renamed into place: a copy killed half-way is
                # never taken for the workspace when the step runs again.
                partial = workspace.with_name(workspace.name + ".partial")
                shutil.rmtree(partial, ignore_errors=True)
                shutil.copytree(source, partial)
                partial.rename(workspace)
            return sorted(p.relative_to(workspace).as_posix() for p in workspace.rglob("*.*"))

        files = ctx.step("copy the repository", copy)
        return {"workspace": str(workspace), "files": files}

    @phase(2, asks_agents=True)
    def work(self, ctx: Any) -> Any:
        """Dispatch the tasks; returns where every task ended."""
        workspace = Path(ctx.output("prepare")["workspace"])
        return ctx.dispatch(
            make_tasks(),
            agent=agent_for,
            objective=GOAL,
            constraints=CONSTRAINTS,
            workspace=workspace,
            max_attempts=3,
        )

    @phase(3)
    def summarize(self, ctx: Any) -> dict[str, Any]:
        """Write the board's handoff (JSON and Markdown) and count the outcome: in the
        board's directory, or in the work directory when the board is in a database."""
        from orchestrator.board.board import handoff_markdown
        from orchestrator.board.file_store import FileBoardStore
        from orchestrator.formats.board_documents import dump_board_document

        report = ctx.output("work")

        def write_handoff() -> str:
            with ctx.board() as board:
                bundle = board.handoff()
                on_files = isinstance(board.store, FileBoardStore)
                where = board.directory if on_files else ctx.workdir
            (where / "handoff.json").write_bytes(dump_board_document(bundle))
            (where / "handoff.md").write_text(handoff_markdown(bundle))
            return "handoff.json"

        ctx.step("write the handoff", write_handoff)
        tasks = report["tasks"]
        return {
            "done": sorted(t for t, o in tasks.items() if o["status"] == "done"),
            "not_done": sorted(t for t, o in tasks.items() if o["status"] != "done"),
            "attempts": {t: o["attempts"] for t, o in tasks.items()},
            "waves": report["waves"],
        }
