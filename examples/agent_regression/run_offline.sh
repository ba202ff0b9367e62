#!/usr/bin/env bash
# Runs an agent regression end to end, offline: starts a small agent on loopback that has
# a baseline and a new behaviour, runs every case against both with `orchestrate eval run`,
# compares them with `orchestrate eval compare`, proves the artifact contract on the
# output with `orchestrate eval check`, and prints where the report is.
# Usage: bash examples/agent_regression/run_offline.sh [WORKDIR]
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
example=examples/agent_regression

.venv/bin/python "$example/agent_server.py" "$workdir/agent.port" &
server=$!
trap 'kill "$server" 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -s "$workdir/agent.port" ] && break; sleep 0.1; done
base_url="http://127.0.0.1:$(cat "$workdir/agent.port")"

for version in baseline new; do
  echo "== eval run --version $version"
  .venv/bin/orchestrate eval run --cases "$example/cases.json" --base-url "$base_url" \
    --version "$version" --out "$workdir/runs" --timeout-ms 1000 --retries 1
done

echo "== eval compare"
# The gate fails (exit 1): the new agent regressed and fails cases the baseline answered.
set +e
.venv/bin/orchestrate eval compare "$workdir"/runs/baseline/* "$workdir"/runs/new/* \
  --cases "$example/cases.json" --fail-on regressed,new-failure
gate=$?
set -e
if [ "$gate" -ne 1 ]; then
  echo "expected the gate to fail with exit 1, got $gate" >&2
  exit 1
fi

echo "== eval check"
.venv/bin/orchestrate eval check "$workdir/runs"
echo "report: $workdir/runs/report.html (the folder $workdir/runs can be copied anywhere)"
