"""Peak memory of ``eval run`` for one large answer, beside its floor (the cap + 64 MiB).

Run it from the repository root with the project's virtualenv::

    .venv/bin/python bench/eval_big_bodies.py [--cap MIB] [--dir DIR]

An agent command streams its answer to stdout in 1 MiB pieces, never holding it whole.
Each line runs ``orchestrate eval run`` as a process of its own, with ``--max-body-bytes``
at the cap, and reads the peak resident memory of that process (and what it waited for)
from ``getrusage(RUSAGE_CHILDREN)`` in a fresh wrapper process:

- cut: a 1 GiB answer, past the cap (kept cut at the cap in ``assets/``, a failure);
- ok: a valid answer of three quarters of the cap, all of it one tool result's payload
  (read, parsed, its payload moved to ``assets/``).

Figures are printed, never judged: the exit status is 1 only if a run ends otherwise
than expected.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

MiB = 1 << 20

AGENT = r"""
import json, sys
size, ok = int(sys.argv[1]), sys.argv[2] == "ok"
request = json.loads(sys.stdin.buffer.read())
out = sys.stdout.buffer
if ok:
    head = json.dumps({"case_id": request["case_id"], "version": request["version"],
        "proposed_actions": [], "final_output": {"content_type": "text", "content": "done"},
        "events": [{"type": "tool_result", "ts": 1, "call_id": "c1", "status": "ok",
                    "latency_ms": 1, "payload_summary": "@"}]}).encode()
    before, after = head.split(b"@")
    out.write(before)
    size -= len(head)
else:
    after = b""
left = size
while left > 0:
    out.write(b"x" * min(left, 1 << 20))
    left -= 1 << 20
out.write(after)
"""

MEASURED = """
import json, resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(json.dumps({"code": done.returncode, "stderr": done.stderr[-2000:],
                  "peak_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""


def peak_of_one_run(directory: Path, name: str, size: int, ok: bool, cap: int) -> dict[str, object]:
    agent = directory / "agent.py"
    agent.write_text(AGENT, encoding="utf-8")
    cases = directory / "cases.json"
    cases.write_text(json.dumps([{"id": name, "input": {"user": "go"}}]), encoding="utf-8")
    command = [
        sys.executable, "-m", "orchestrator", "eval", "run", "--cases", str(cases),
        "--agent-command", f"{sys.executable} {agent} {size} {'ok' if ok else 'cut'}",
        "--version", "new", "--out", str(directory / name), "--retries", "0",
        "--timeout-ms", "600000", "--max-body-bytes", str(cap),
    ]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", MEASURED, *command], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cap", type=int, default=256, help="the cap, in MiB (default 256)")
    parser.add_argument("--dir", type=Path, default=None, help="where the runs go (a temp dir)")
    args = parser.parse_args()
    cap = args.cap * MiB
    floor = cap / MiB + 64
    failed = False
    with tempfile.TemporaryDirectory(dir=args.dir) as temporary:
        directory = Path(temporary)
        print(f"cap {args.cap} MiB; floor (cap + 64 MiB) {floor:.0f} MiB")
        for name, size, ok in (("cut", 1 << 30, False), ("ok", cap * 3 // 4, True)):
            measured = peak_of_one_run(directory, name, size, ok, cap)
            peak = int(str(measured["peak_kib"])) / 1024
            print(
                f"{name:>4}: answer {size / MiB:6.0f} MiB  peak {peak:6.0f} MiB  "
                f"peak / floor {peak / floor:4.2f}"
            )
            case = next((directory / name / "new").glob("[!.]*/" + name + ".json"), None)
            status = json.loads(case.read_text(encoding="utf-8"))["status"] if case else None
            if measured["code"] != 0 or status != ("ok" if ok else "runner_error"):
                print(f"      unexpected end: {status} {measured['stderr']}", file=sys.stderr)
                failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
