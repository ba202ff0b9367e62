"""Worker fleets for the PostgreSQL tests: queue ``pg_flows.Relay`` runs, start real
``orchestrate worker`` processes, and read back what the store and the side-effect logs
say, with the checks every fleet test makes of them.

The checks (each returns the problems found, so a failure lists them all):

- :func:`history_problems`: a run's events are one ordered history: ``x_seq`` 1..N with
  no gap or duplicate (and the row's number is the line's), times never going back,
  one ``run.start`` first and one ``run.end`` last, ``completed``;
- :func:`overlap_problems`: the stretches of events each worker wrote (``x_worker``) never
  overlap in time: one worker at a time advanced the run;
- :func:`answer_problems`: each run's outputs are exactly what the agent answered for its
  prompts, each answer one the agent gave (``PG_FLOWS_AGENT_LOG``) to the worker that
  recorded it; an answer given and not used was given to a worker that was killed;
- :func:`step_problems`: each step ran once, or more than once where every run but the
  last was by a worker killed before the step's checkpoint (its at-least-once window),
  and the last by the worker whose events record the step.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from support import pg_flows
from support.cli import command
from support.pg_support import server_turn as server_turn  # the fleet tests take turns

RELAY = f"{Path(pg_flows.__file__).resolve()}:Relay"


def fleet_env(tmp: Path) -> dict[str, str]:
    """The environment of the workers: the logs the workflow and the agent append to."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_CRASH")}
    env[pg_flows.STEP_LOG_ENV] = str(tmp / "steps.log")
    env[pg_flows.AGENT_LOG_ENV] = str(tmp / "agent.log")
    return env


def queue(dsn: str, count: int, *, nap: float = 0.0, workdir: Path) -> list[str]:
    """Queue ``count`` runs of Relay (tagged with their run ids); their ids."""
    from orchestrator.adapters.postgres.store import PostgresStore

    ids = []
    with PostgresStore(dsn) as store:
        for _ in range(count):
            run_id = str(uuid.uuid4())
            inputs = {"tag": run_id, **({"nap": str(nap)} if nap else {})}
            store.queue_run(
                run_id=run_id,
                workflow_name="relay",
                workflow_ref=RELAY,
                start_args={"inputs": inputs, "output_path": None, "workdir": str(workdir)},
            )
            ids.append(run_id)
    return ids


def worker_command(dsn: str, *extra: str) -> list[str]:
    return command(
        "worker", "--store", dsn, "--agent", f"subprocess:{pg_flows.agent_command()}", *extra
    )


#: the label each worker started here gives the agent (``PG_FLOWS_WORKER``) -> its pid
LABELS: dict[str, int] = {}


def start_worker(
    dsn: str, env: dict[str, str], stderr: Path, *extra: str
) -> subprocess.Popen[bytes]:
    """An ``orchestrate worker`` process, its messages going to ``stderr``."""
    label = uuid.uuid4().hex[:12]
    with stderr.open("wb") as sink:
        process = subprocess.Popen(
            worker_command(dsn, *extra),
            env={**env, pg_flows.WORKER_ENV: label},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
    LABELS[label] = process.pid
    return process


def statuses(dsn: str) -> Counter[str]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        return Counter(row[0] for row in conn.execute("select status from runs"))


def unfinished(dsn: str) -> int:
    counts = statuses(dsn)
    return sum(n for status, n in counts.items() if status != "completed")


# -- what the store holds ------------------------------------------------------------------


def read_runs(dsn: str) -> dict[str, dict[str, Any]]:
    """Every run: status, history (parsed), events (``(seq, parsed line)`` in order)."""
    import psycopg

    runs: dict[str, dict[str, Any]] = {}
    with psycopg.connect(dsn) as conn:
        for run_id, status, history in conn.execute("select run_id, status, history from runs"):
            runs[run_id] = {
                "status": status,
                "history": None if history is None else json.loads(bytes(history)),
                "events": [],
            }
        for run_id, seq, line in conn.execute(
            "select run_id, seq, line from events order by run_id, seq"
        ):
            runs[run_id]["events"].append((int(seq), json.loads(bytes(line))))
    return runs


def pid_of(worker: str) -> int:
    """The process id in a worker's default name (``HOST:PID``)."""
    return int(worker.rsplit(":", 1)[1])


def read_lines(path: Path) -> list[list[str]]:
    if not path.exists():
        return []
    return [line.split() for line in path.read_text().splitlines() if line.strip()]


# -- the checks ----------------------------------------------------------------------------


def history_problems(run_id: str, run: dict[str, Any]) -> list[str]:
    events = run["events"]
    where = f"run {run_id}"
    problems = []
    if run["status"] != "completed":
        problems.append(f"{where}: {run['status']}, not completed")
    seqs = [seq for seq, _ in events]
    if seqs != list(range(1, len(seqs) + 1)):
        problems.append(f"{where}: event numbers {seqs}, not 1..{len(seqs)}")
    for seq, line in events:
        if line.get("x_seq") != seq:
            problems.append(f"{where}: row {seq} holds x_seq {line.get('x_seq')}")
    names = [line["event"] for _, line in events]
    if not names or names[0] != "run.start" or names.count("run.start") != 1:
        problems.append(f"{where}: not one run.start first: {names[:3]}")
    if not names or names[-1] != "run.end" or names.count("run.end") != 1:
        problems.append(f"{where}: not one run.end last: {names[-3:]}")
    elif events[-1][1]["data"].get("status") != "completed":
        problems.append(f"{where}: run.end says {events[-1][1]['data'].get('status')}")
    times = [line["ts"] for _, line in events]
    for (seq, _), before, after in zip(events[1:], times, times[1:], strict=False):
        if after < before:
            problems.append(f"{where}: event {seq} at {after} is before the one before it")
    return problems


def segments(events: Sequence[tuple[int, dict[str, Any]]]) -> list[tuple[str, str, str]]:
    """The run's events as stretches of one worker: ``(worker, first ts, last ts)``."""
    found: list[tuple[str, str, str]] = []
    for _, line in events:
        worker = str(line.get("x_worker"))
        if found and found[-1][0] == worker:
            found[-1] = (worker, found[-1][1], line["ts"])
        else:
            found.append((worker, line["ts"], line["ts"]))
    return found


def overlap_problems(run_id: str, run: dict[str, Any]) -> list[str]:
    problems = []
    stretches = segments(run["events"])
    if any(worker == "None" for worker, _, _ in stretches):
        problems.append(f"run {run_id}: an event names no worker")
    for i, (worker, _, end) in enumerate(stretches):
        for other, start, _ in stretches[i + 1 :]:
            if other != worker and start < end:
                problems.append(
                    f"run {run_id}: {other} wrote at {start}, while {worker} held the run "
                    f"until {end}"
                )
    return problems


def _step_event_workers(run: dict[str, Any]) -> dict[str, str]:
    """Step name -> the worker whose events record it."""
    return {
        line["data"]["tool"]: str(line.get("x_worker"))
        for _, line in run["events"]
        if line["event"] == "tool.result"
    }


def step_problems(
    runs: dict[str, dict[str, Any]], step_log: Path, killed: Iterable[int]
) -> list[str]:
    killed = set(killed)
    done: dict[tuple[str, str], list[int]] = defaultdict(list)
    for tag, step, pid in read_lines(step_log):
        done[(tag, step)].append(int(pid))
    problems = []
    for run_id, run in runs.items():
        recorded = _step_event_workers(run)
        for step in pg_flows.STEPS:
            pids = done.get((run_id, step), [])
            if not pids:
                problems.append(f"run {run_id}: step {step} never ran")
                continue
            if step not in recorded:
                problems.append(f"run {run_id}: no event records step {step}")
            elif pid_of(recorded[step]) != pids[-1]:
                problems.append(
                    f"run {run_id}: step {step} last ran in process {pids[-1]}, but "
                    f"{recorded[step]} recorded it"
                )
            again = [pid for pid in pids[:-1] if pid not in killed]
            if again:
                problems.append(
                    f"run {run_id}: step {step} ran {len(pids)} times, by {pids}; "
                    f"{again} were not killed"
                )
    return problems


def answer_problems(
    runs: dict[str, dict[str, Any]], agent_log: Path, killed: Iterable[int]
) -> list[str]:
    killed = set(killed)
    given: dict[str, tuple[str, int]] = {}  # nonce -> (digest, worker pid)
    for digest, nonce, worker in read_lines(agent_log):
        given[nonce] = (digest, LABELS[worker] if worker in LABELS else int(worker))
    used: Counter[str] = Counter()
    problems = []
    for run_id, run in runs.items():
        history = run["history"] or {}
        outputs = history.get("phase_data", {})
        answers = [outputs.get("gather"), outputs.get("shape")]
        answers.append((outputs.get("seal") or {}).get("answers", [None, None, None])[2])
        if (outputs.get("seal") or {}).get("answers") != answers:
            kept = "no history" if history == {} else f"outputs of {sorted(outputs)}"
            problems.append(
                f"run {run_id}: the last phase's answers differ from the phases' "
                f"({run['status']}, {kept})"
            )
        asked_by = {
            line["data"]["skill"]: str(line.get("x_worker"))
            for _, line in run["events"]
            if line["event"] == "agent.end"
        }
        for step, answer in zip(pg_flows.STEPS, answers, strict=True):
            prompt = pg_flows.prompt_for(run_id, step, f"{step}-of-{run_id}")
            digest, _, nonce = str(answer).partition(":")
            if digest != pg_flows.digest_of(prompt) or nonce not in given:
                problems.append(f"run {run_id}: phase {step} output {answer!r} is no answer given")
                continue
            used[nonce] += 1
            if given[nonce][0] != digest:
                problems.append(f"run {run_id}: phase {step}: answer {nonce} was to another prompt")
            if step not in asked_by or pid_of(asked_by[step]) != given[nonce][1]:
                problems.append(
                    f"run {run_id}: phase {step}: the answer went to process "
                    f"{given[nonce][1]}, the events say {asked_by.get(step)} asked"
                )
    for nonce, count in used.items():
        if count > 1:
            problems.append(f"answer {nonce} is the output of {count} phases")
    for nonce, (digest, pid) in given.items():
        if nonce not in used and pid not in killed:
            problems.append(
                f"answer {nonce} ({digest}) given to process {pid}, which was not killed, "
                "is in no run: lost"
            )
    return problems


def all_problems(
    runs: dict[str, dict[str, Any]], tmp: Path, killed: Iterable[int] = ()
) -> list[str]:
    killed = set(killed)
    problems = []
    for run_id, run in sorted(runs.items()):
        problems += history_problems(run_id, run)
        problems += overlap_problems(run_id, run)
    problems += step_problems(runs, tmp / "steps.log", killed)
    problems += answer_problems(runs, tmp / "agent.log", killed)
    return problems


def summary(runs: dict[str, dict[str, Any]], tmp: Path, killed: Iterable[int] = ()) -> str:
    """What a fleet test went through, for its output: runs, kills, takeovers, repeats."""
    steps = Counter((tag, step) for tag, step, _ in read_lines(tmp / "steps.log"))
    asked = len(read_lines(tmp / "agent.log"))
    taken = sum(len({line.get("x_worker") for _, line in r["events"]}) > 1 for r in runs.values())
    again = sum(n > 1 for n in steps.values())
    return (
        f"{len(runs)} runs, {len(set(killed))} workers killed or cut off, {taken} runs "
        f"advanced by more than one worker, {again} steps run again in their window, "
        f"{asked - 3 * len(runs)} answers asked again"
    )
