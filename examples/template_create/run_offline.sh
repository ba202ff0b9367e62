#!/usr/bin/env bash
# Sets up a virtual environment (once) and runs the template-create example end to end,
# offline: `orchestrate drive` answers each request with the deterministic fake agent.
# Usage: bash examples/template_create/run_offline.sh [--store DSN] [WORKDIR]
#   --store DSN  keep the run in PostgreSQL (postgresql://USER@HOST/DATABASE) instead of
#                the work directory's files
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
run_id="$(.venv/bin/orchestrate drive examples/template_create/workflow.py:TemplateCreate \
  --workdir "$workdir" \
  --output "$workdir/template" \
  --input project_path=examples/template_create/sample_project \
  --input template_name=task-tracker \
  --handler ".venv/bin/python examples/template_create/fake_agent.py" \
  ${store:+--store "$store"})"
echo "template written to $workdir/template:"
(cd "$workdir/template" && find . -type f | sort)
if [ -n "$store" ]; then
  echo "run $run_id is kept in the store; its timeline:"
  .venv/bin/orchestrate history --store "$store" --run "$run_id"
  echo "the phases, as the run's events tell them:"
  .venv/bin/orchestrate events --store "$store" --run "$run_id" --type skill.end
  .venv/bin/orchestrate export --store "$store" --run "$run_id" --to "$workdir/export"
  echo "the run as files (what a file-store run leaves): $workdir/export/.orchestrator/runs/$run_id"
  exit 0
fi
run_dir="$(ls -d "$workdir"/.orchestrator/runs/*)"
echo "run history and evidence: $run_dir"
echo "the phases, as the run's events.ndjson tells them:"
.venv/bin/orchestrate events --workdir "$workdir" --type skill.end
