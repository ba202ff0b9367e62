"""An offline subagent for the task-board example: ``orchestrate drive --handler`` runs it
once per assignment, with the request (``.agent-request.json``'s format) on standard input.

It does what a real subagent would: reads its assignment packet (from the board's
directory, or with ``orchestrate board packet`` from a board in PostgreSQL), heartbeats
and logs its steps through ``orchestrate board`` (any language can), edits the files of its lock
scope in the workspace, and prints a subagent result. Two assignments go wrong
on their first attempt, on purpose:

* T-4 hangs: it heartbeats once, then sleeps until ``drive --handler-timeout`` kills it
  (with ``FAKE_SUBAGENT_FAST=1`` it answers TIMEOUT at once instead, for quick runs);
* T-5 also edits README.md, outside its lock scope: the gateway refuses the result.

``FAKE_SUBAGENT_FAST=1`` also skips the heartbeat and worklog commands (each is a
process start), and ``FAKE_SUBAGENT_LOG`` names a file where every run appends a line
(task, attempt), so tests can count how often a subagent ran. With
``FAKE_SUBAGENT_STAGGER=S``, task T-N works N times S seconds before it hands in, so the
tasks end one after another (for someone watching the board).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

FAST = os.environ.get("FAKE_SUBAGENT_FAST") == "1"
STAGGER = float(os.environ.get("FAKE_SUBAGENT_STAGGER") or 0)

# The edits, as whole file contents (so a run repeated after a crash writes the same bytes).
EDITS = {
    "T-1": {
        "src/api.py": '''"""A tiny key-value API over the storage layer."""

from src import storage


def put(key, value):
    if not isinstance(key, str) or not key:
        raise ValueError("key must be a non-empty string")
    storage.save(key, value)
    return {"ok": True}


def get(key):
    return {"ok": True, "value": storage.load(key)}
''',
    },
    "T-2": {
        "src/storage.py": '''"""Storage: a dictionary in memory; keys are case-insensitive."""

_DATA = {}


def save(key, value):
    _DATA[key.casefold()] = value


def load(key):
    return _DATA.get(key.casefold())
''',
    },
    "T-3": {
        "docs/api.md": """# API

`put(key, value)` stores a value; `get(key)` reads it back.

`put` refuses a key that is not a non-empty string (`ValueError`).
""",
    },
    "T-4": {
        "tests/test_validation.py": """import pytest

from src import api


def test_put_refuses_an_empty_key():
    with pytest.raises(ValueError):
        api.put("", 1)
""",
    },
    "T-5": {
        "CHANGELOG.md": """# Changelog

## Unreleased

- put() refuses empty keys.
- Storage keys are case-insensitive.
""",
    },
    "T-6": {
        "docs/release-notes.md": """# Release notes

- Input validation: put() refuses empty keys.
- Storage keys are case-insensitive.
""",
    },
}
STRAY = {"README.md": "# kv-service\n\nEdited by a subagent that strayed out of its scope.\n"}


def main() -> int:
    request = json.load(sys.stdin)
    context = request["context"]
    task_id, attempt = context["x_task_id"], context["x_attempt"]
    if "x_store" in context:  # a board in PostgreSQL: reached through orchestrate
        where = ["--store", context["x_store"], "--board", context["x_board_id"]]
        command = ["board", "packet", *where, "--task", task_id, "--attempt", str(attempt)]
        shown = subprocess.run(
            [sys.executable, "-m", "orchestrator", *command],
            check=True,
            capture_output=True,
        )
        packet = json.loads(shown.stdout)
    else:  # a board directory
        where = ["--board", context["x_board"]]
        packet = json.loads(Path(context["x_packet"]).read_text(encoding="utf-8"))
    task = packet["task"]
    workspace = Path(context["x_workspace"])
    log = os.environ.get("FAKE_SUBAGENT_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as out:
            out.write(f"{task_id} {attempt}\n")

    def board(command: str, *args: str) -> None:
        if FAST:
            return
        subprocess.run(
            [
                sys.executable,
                "-m",
                "orchestrator",
                "board",
                command,
                *where,
                "--task",
                task_id,
                "--attempt",
                str(attempt),
                *args,
            ],
            check=True,
            stdout=subprocess.DEVNULL,  # our stdout is the answer: keep it clean
        )

    board("heartbeat")
    if task_id == "T-4" and attempt == 1:
        if FAST:
            print(
                json.dumps(
                    {
                        "request_id": request["request_id"],
                        "version": "1.0",
                        "status": "timeout",
                        "error_type": "TIMEOUT",
                        "error_message": "the subagent stopped answering",
                        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    }
                )
            )
            return 0
        time.sleep(120)  # hangs: drive kills it at --handler-timeout
    time.sleep(STAGGER * int(task_id.removeprefix("T-")))
    edits = dict(EDITS[task_id])
    if task_id == "T-5" and attempt == 1:
        edits.update(STRAY)
    for relative, text in edits.items():
        target = workspace / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    board(
        "worklog",
        "--actor",
        request["agent_name"],
        "--action",
        "edit",
        "--decision",
        f"edit {', '.join(sorted(edits))}",
        "--result",
        "files written",
        "--next-step",
        "hand in the result",
        *[arg for name in sorted(edits) for arg in ("--file", name)],
    )
    result = {
        "schema_version": "1.0.0",
        "run_id": packet["run_id"],
        "task_id": task_id,
        "status": "done",
        "changes": [
            {"resource": name, "action": "edit", "evidence": f"wrote {name}"}
            for name in sorted(edits)
        ],
        "acceptance_check": [
            {
                "criterion": criterion,
                "status": "pass",
                "evidence": f"see {', '.join(sorted(edits))}",
            }
            for criterion in task["acceptance_criteria"]
        ],
        "worklog_path": task["worklog_path"],
        "notes_for_orchestrator": [f"{task_id} attempt {attempt} finished"],
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
