#!/usr/bin/env bash
# Sets up a virtual environment (once) and runs the task-board example end to end,
# offline: `orchestrate drive` hands each assignment to the fake subagent. One subagent
# hangs and is killed after --handler-timeout seconds (then reassigned); one strays out of
# its lock scope (refused by the gateway, then reassigned).
# Usage: bash examples/task_board/run_offline.sh [--store DSN] [WORKDIR]
#   --store DSN  keep the run and its task board in PostgreSQL
#                (postgresql://USER@HOST/DATABASE) instead of the work directory's files
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
store=""
if [ "${1:-}" = "--store" ]; then
  store="${2:?--store needs a DSN, postgresql://USER@HOST/DATABASE}"
  shift 2
fi
if [ ! -x .venv/bin/orchestrate ]; then
  python3 -m venv .venv
  .venv/bin/pip install --quiet --upgrade pip
  .venv/bin/pip install --quiet -e .
fi
if [ -n "$store" ] && ! .venv/bin/python -c "import psycopg" 2>/dev/null; then
  .venv/bin/pip install --quiet -e '.[postgres]'
fi
workdir="${1:-$(mktemp -d)}"
mkdir -p "$workdir"
if [ -n "$store" ]; then
  # Each subagent reaches the board through three orchestrate processes: a longer budget.
  run_id="$(.venv/bin/orchestrate drive examples/task_board/workflow.py:TaskBoardDemo \
    --workdir "$workdir" --store "$store" \
    --handler ".venv/bin/python examples/task_board/fake_subagent.py" \
    --handler-timeout "${HANDLER_TIMEOUT:-10}")"
  echo "== the board of run $run_id, kept in the store"
  .venv/bin/orchestrate board status --store "$store" --board "$run_id"
  echo "== the ledger, one line per delta"
  .venv/bin/orchestrate board ledger --table --store "$store" --board "$run_id"
  echo "== handoff for a fresh context: $workdir/handoff.md"
  exit 0
fi
.venv/bin/orchestrate drive examples/task_board/workflow.py:TaskBoardDemo \
  --workdir "$workdir" \
  --handler ".venv/bin/python examples/task_board/fake_subagent.py" \
  --handler-timeout "${HANDLER_TIMEOUT:-10}"
echo "== the board"
.venv/bin/orchestrate board status --workdir "$workdir"
echo "== the ledger, one line per delta"
.venv/bin/orchestrate board ledger --table --workdir "$workdir"
echo "== handoff for a fresh context: $workdir/.board/handoff.md"
