#!/usr/bin/env bash
# Sets up a virtual environment (once) and runs the task-board example end to end,
# offline: `orchestrate drive` hands each assignment to the fake subagent. One subagent
# hangs and is killed after --handler-timeout seconds (then reassigned); one strays out of
# its lock scope (refused by the gateway, then reassigned).
# Usage: bash examples/task_board/run_offline.sh [WORKDIR]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
if [ ! -x .venv/bin/orchestrate ]; then
  python3 -m venv .venv
  .venv/bin/pip install --quiet --upgrade pip
  .venv/bin/pip install --quiet -e .
fi
workdir="${1:-$(mktemp -d)}"
mkdir -p "$workdir"
.venv/bin/orchestrate drive examples/task_board/workflow.py:TaskBoardDemo \
  --workdir "$workdir" \
  --handler ".venv/bin/python examples/task_board/fake_subagent.py" \
  --handler-timeout "${HANDLER_TIMEOUT:-3}"
echo "== the board"
.venv/bin/orchestrate board status --workdir "$workdir"
echo "== the ledger, one line per delta"
.venv/bin/orchestrate board ledger --table --workdir "$workdir"
echo "== handoff for a fresh context: $workdir/.board/handoff.md"
