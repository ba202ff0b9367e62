#!/usr/bin/env bash
# Sets up a virtual environment (once) and runs the template-create example end to end,
# offline: `orchestrate drive` answers each request with the deterministic fake agent.
# Usage: bash examples/template_create/run_offline.sh [WORKDIR]
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
.venv/bin/orchestrate drive examples/template_create/workflow.py:TemplateCreate \
  --workdir "$workdir" \
  --output "$workdir/template" \
  --input project_path=examples/template_create/sample_project \
  --input template_name=task-tracker \
  --handler ".venv/bin/python examples/template_create/fake_agent.py"
echo "template written to $workdir/template:"
(cd "$workdir/template" && find . -type f | sort)
run_dir="$(ls -d "$workdir"/.orchestrator/runs/*)"
echo "run history and evidence: $run_dir"
echo "the phases, as the run's events.ndjson tells them:"
.venv/bin/orchestrate events --workdir "$workdir" --type skill.end
