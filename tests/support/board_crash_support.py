"""Running the task-board example under ``orchestrate drive`` and judging what it left.

Used by ``tests/board/test_board_crash_safety.py``. Everything here works on real processes and
real files: ``python -m orchestrator drive`` with the example's offline
``fake_subagent.py`` as the handler (``FAKE_SUBAGENT_FAST=1``: the hung subagent answers
TIMEOUT at once, and no ``orchestrate board`` commands are run), one work directory per
scenario.

What a finished run left is read into a :class:`Final`, and :func:`judge` compares it
with the uninterrupted baseline's, one named check at a time (``CHECKS``), so that a
failing check is reported with the scenarios and labels where it failed and does not
hide the others.

What is normalised, and why (nothing else is):

* ledger ``x_at``: the wall-clock time of the append;
* ledger ``last_heartbeat_at``: with no heartbeat file it is the ``x_at`` of the delta
  that started the attempt (a wall-clock time); whether the field is there is kept;
* in ledger ``reason`` and worklog ``result``: request ids (random UUIDs; a request
  re-opened after a crash gets a new one) and RFC 3339 times;
* worklog ``timestamp`` (wall clock) and ``run_id`` (a new UUID per run);
* packets, results and verdicts: the run id; verdicts also their ``timestamps``;
* phase outputs: the scenario's work directory, which is in two absolute paths
  (``prepare.workspace`` and ``work.board``).

Statuses, owners, delta ids, attempts, codes, verdict paths, base versions and the
order of the deltas are compared as they are.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.cli import command
from support.evidence_support import check_run_evidence, story, without_retries

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_DIR = ROOT / "examples" / "task_board"
WORKFLOW_REF = f"{EXAMPLE_DIR / 'workflow.py'}:TaskBoardDemo"
SUBAGENT = EXAMPLE_DIR / "fake_subagent.py"
CRASH_VARIABLES = ("ORCHESTRATOR_CRASH_AT", "ORCHESTRATOR_CRASH_LOG")
# drive hands its handler a copy of its own environment (orchestrator/_drive.py), so the
# crash hook's variables would reach the subagent: ``env -u`` takes them out, so that only
# the drive process counts (and dies at) crash points.
UNSET_CRASH_VARIABLES = [arg for name in CRASH_VARIABLES for arg in ("-u", name)]
HANDLER = shlex.join(["env", *UNSET_CRASH_VARIABLES, sys.executable, str(SUBAGENT)])
# A safety net only: with FAKE_SUBAGENT_FAST=1 no subagent sleeps.
HANDLER_TIMEOUT = "30"
STATE_FILE = ".task-board-demo-state.json"
TASKS = ("T-1", "T-2", "T-3", "T-4", "T-5", "T-6")
RUN_TIMEOUT = 120  # seconds for one drive process: a hang is a failure, not a wait

UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)")
ATTEMPT_FILE = re.compile(r"^T-\d+\.\d+\.json$")

# -- running drive --------------------------------------------------------------------------


def drive_command(workdir: Path) -> list[str]:
    return command(
        "drive", WORKFLOW_REF,
        "--workdir", str(workdir),
        "--handler", HANDLER,
        "--handler-timeout", HANDLER_TIMEOUT,
    )  # fmt: skip


def drive_env(
    scenario: Path, *, crash_at: str | int | None = None, crash_log: Path | None = None
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CRASH_VARIABLES}
    env["FAKE_SUBAGENT_FAST"] = "1"
    env["FAKE_SUBAGENT_LOG"] = str(scenario / "subagents.log")
    if crash_at is not None:
        assert crash_log is not None
        env["ORCHESTRATOR_CRASH_AT"] = str(crash_at)
        env["ORCHESTRATOR_CRASH_LOG"] = str(crash_log)
    return env


def run_drive(
    scenario: Path, *, crash_at: str | int | None = None, crash_log: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        drive_command(scenario / "work"),
        cwd=scenario,
        env=drive_env(scenario, crash_at=crash_at, crash_log=crash_log),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )


def start_drive(scenario: Path, *, crash_log: Path) -> subprocess.Popen[bytes]:
    """drive in count mode (it only logs its crash points), for an external kill."""
    return subprocess.Popen(
        drive_command(scenario / "work"),
        cwd=scenario,
        env=drive_env(scenario, crash_at="count", crash_log=crash_log),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def new_scenario(base: Path, name: str) -> Path:
    scenario = base / name
    (scenario / "work").mkdir(parents=True)
    return scenario


def expect_rc(proc: subprocess.CompletedProcess[str], code: int, what: str) -> None:
    if proc.returncode != code:
        raise AssertionError(
            f"{what}: exit {proc.returncode}, expected {code}\nstderr:\n{proc.stderr[-3000:]}"
        )


def kill_at(scenario: Path, point: int, expected: str, log_name: str) -> None:
    """drive with ORCHESTRATOR_CRASH_AT=point must die by SIGKILL there, at ``expected``."""
    log = scenario / log_name
    proc = run_drive(scenario, crash_at=point, crash_log=log)
    expect_rc(proc, -signal.SIGKILL, f"drive with ORCHESTRATOR_CRASH_AT={point}")
    logged = read_log(log)
    assert len(logged) == 1 and logged[0][0] == point, logged
    assert same_point(plain(logged[0][1]), expected), f"killed at {logged[0]}, not {expected!r}"


def subagent_runs(scenario: Path) -> Counter[str]:
    """How often each (task, attempt) subagent ran: FAKE_SUBAGENT_LOG's lines."""
    log = scenario / "subagents.log"
    if not log.exists():
        return Counter()
    return Counter(log.read_text(encoding="utf-8").splitlines())


# -- crash logs and labels --------------------------------------------------------------------


def read_log(path: Path) -> list[tuple[int, str]]:
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [(int(n), label) for n, _, label in (line.partition(" ") for line in lines)]


def plain(label: str) -> str:
    """A label with request ids and pids replaced, so that runs of a scenario compare."""
    return re.sub(r"\.\d+\.tmp$", ".<pid>.tmp", UUID.sub("<id>", label))


def same_point(logged: str, expected: str) -> bool:
    """Whether a kill landed at the expected point of a (deterministic) run.

    Among the unlinks of a directory listing (stale request files, temporary files) the
    order is unspecified: only the kind of point is compared there.
    """
    if logged == expected:
        return True
    listed = re.compile(r"^before-unlink (<id>\.json|\.<id>\.json\.<pid>\.tmp)$")
    return bool(listed.match(logged) and listed.match(expected))


def annotate(labels: list[str]) -> list[str]:
    """Plain labels, with each write of ``T-n.a.json`` named after its directory.

    A packet, a result and a verdict of one attempt share their file name. The gateway
    writes the result and then, at once, the verdict (``Board.submit``); a packet write
    is never directly next to another write of its own name. So three points of a write
    followed by the same name's write are the result, three preceded by it the verdict,
    any other the packet.
    """
    names = [plain(label) for label in labels]
    writes = ("before-write", "before-rename", "after-rename")
    file_of = [name.split(" ", 1)[1] if name.split(" ")[0] in writes else None for name in names]
    out = []
    for point, name in enumerate(names):
        target = file_of[point]
        if target is None or not ATTEMPT_FILE.match(target):
            out.append(name)
            continue
        start = point - writes.index(name.split(" ")[0])
        before = file_of[start - 1] if start > 0 else None
        after = file_of[start + 3] if start + 3 < len(names) else None
        kind = "result" if after == target else "verdict" if before == target else "packet"
        out.append(f"{name.split()[0]} {kind}s/{target}")
    return out


def regions(annotated: list[str]) -> list[str]:
    """Where each point of a whole run falls (``annotated`` labels): ``prepare``,
    ``create`` (the board and its tasks), ``wave k: plan``, ``wave k: ask`` (the pause,
    the handlers, the answers taken in), ``wave k: results``, ``summarize`` (from the last
    plan, which finds every task finished). A step's region ends with the state write
    that records it."""
    last = max(
        int(label.rsplit(" ", 1)[1])
        for label in annotated
        if label.startswith("after-step-run board: plan wave ")
    )
    after_step = {
        "board: create tasks": "wave 1: plan",
        **{f"board: plan wave {k}": f"wave {k}: ask" for k in range(1, last)},
        **{f"board: results of wave {k}": f"wave {k + 1}: plan" for k in range(1, last - 1)},
        # The last plan finds nothing to do: what follows the last results is the summary.
        f"board: results of wave {last - 1}": "summarize",
    }
    out: list[str] = []
    region, following = "prepare", None
    for label in annotated:
        if label == "before-write board.json":
            region = "create"
        elif label == f"after-step-run board: plan wave {last}" or region == "summarize":
            region = "summarize"
        elif region.endswith(": ask") and (
            label == "before-append ledger.ndjson" or label.startswith("before-write results/")
        ):
            region = region.replace(": ask", ": results")
        out.append(region)
        if label.startswith("after-step-run "):
            step = label.removeprefix("after-step-run ")
            # The create step's name may carry a digest of the tasks after its words.
            if step.startswith("board: create tasks"):
                step = "board: create tasks"
            following = after_step.get(step)
        elif following is not None and label == f"after-rename {STATE_FILE}":
            region, following = following, None
    return out


# -- what a finished run left ------------------------------------------------------------------


def read_tree(root: Path) -> dict[str, bytes]:
    if not root.is_dir():
        return {}
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def read_ndjson(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


@dataclass
class Final:
    workdir: Path
    ledger: list[dict[str, Any]]  # the deltas as written
    worklogs: dict[str, list[dict[str, Any]]]  # task id -> entries as written
    repo: dict[str, bytes]
    board_files: dict[str, bytes]  # packets/, results/, verdicts/ (no temporary files)
    leftovers: list[str]  # temporary files of killed writes, anywhere under the work dir
    history: dict[str, Any]
    history_runs: list[str]
    outputs: dict[str, Any]  # phase_data without x_orchestrator


def final_of(workdir: Path) -> Final:
    board = workdir / ".board"
    runs_dir = workdir / ".orchestrator" / "runs"
    runs = sorted(p.name for p in runs_dir.iterdir()) if runs_dir.is_dir() else []
    history: dict[str, Any] = {}
    if len(runs) == 1:
        history = json.loads((runs_dir / runs[0] / "state.json").read_text(encoding="utf-8"))
    worklogs = {
        path.stem: read_ndjson(path) for path in sorted((board / "worklogs").glob("*.jsonl"))
    }
    board_files = {
        rel: data
        for sub in ("packets", "results", "verdicts")
        for rel, data in ((f"{sub}/{k}", v) for k, v in read_tree(board / sub).items())
        if not rel.rsplit("/", 1)[1].startswith(".")
    }
    leftovers = sorted(
        path.relative_to(workdir).as_posix() for path in workdir.rglob(".*.tmp") if path.is_file()
    )
    return Final(
        workdir=workdir,
        ledger=read_ndjson(board / "ledger.ndjson"),
        worklogs=worklogs,
        repo=read_tree(workdir / "repo"),
        board_files=board_files,
        leftovers=leftovers,
        history=history,
        history_runs=runs,
        outputs={k: v for k, v in history.get("phase_data", {}).items() if k != "x_orchestrator"},
    )


# -- normalising ---------------------------------------------------------------------------------


def normal_text(text: str) -> str:
    return RFC3339.sub("<time>", UUID.sub("<id>", text))


def normal_delta(delta: dict[str, Any]) -> dict[str, Any]:
    out = dict(delta)
    out.pop("x_at", None)
    if "last_heartbeat_at" in out:
        out["last_heartbeat_at"] = "<time>"
    out["reason"] = normal_text(out["reason"])
    return out


def normal_entry(entry: dict[str, Any]) -> dict[str, Any]:
    out = dict(entry)
    out["timestamp"] = "<time>"
    out["run_id"] = "<run>"
    out["result"] = normal_text(out["result"])
    return out


def normal_board_file(rel: str, data: bytes, run_id: str) -> Any:
    document = json.loads(data.replace(run_id.encode(), b"<run>"))
    if rel.startswith("verdicts/"):
        document.pop("timestamps", None)
    return document


def normal_outputs(final: Final) -> dict[str, Any]:
    text = json.dumps(final.outputs, sort_keys=True)
    return json.loads(text.replace(str(final.workdir), "<W>"))


def run_id_of(final: Final) -> str:
    return str(final.history["phase_data"]["x_orchestrator"]["run_id"])


# -- the checks -------------------------------------------------------------------------------


def check_ledger(final: Final, baseline: Final) -> None:
    """(a) the ledger equals the baseline's, delta by delta, in order."""
    mine = [normal_delta(d) for d in final.ledger]
    theirs = [normal_delta(d) for d in baseline.ledger]
    for i, (a, b) in enumerate(zip(mine, theirs, strict=False)):
        if a != b:
            keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
            raise AssertionError(
                f"ledger line {i + 1} differs in {keys}: {a['delta_id']} "
                f"{ {k: a.get(k) for k in keys} } vs baseline {b['delta_id']} "
                f"{ {k: b.get(k) for k in keys} }"
            )
    assert len(mine) == len(theirs), (
        f"ledger has {len(mine)} lines, baseline {len(theirs)}: extra "
        f"{[d['delta_id'] for d in mine[len(theirs) :]]}, missing "
        f"{[d['delta_id'] for d in theirs[len(mine) :]]}"
    )


def check_done_once(final: Final, baseline: Final) -> None:
    """(b) each task has exactly one ``done`` delta and the baseline's number of attempts."""
    done = Counter(d["task_id"] for d in final.ledger if d["status"] == "done")
    assert done == Counter(TASKS), f"done deltas per task: {dict(done)}"

    def attempts(ledger: list[dict[str, Any]]) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for d in ledger:
            if d["status"] == "in_progress":
                out.setdefault(d["task_id"], []).append(d["x_attempt"])
        return out

    mine, theirs = attempts(final.ledger), attempts(baseline.ledger)
    assert mine == theirs, f"attempts per task {mine}, baseline {theirs}"
    reported = {t: o["attempts"] for t, o in final.outputs["work"]["tasks"].items()}
    assert reported == {t: len(a) for t, a in theirs.items()}, f"reported attempts {reported}"


def check_ids_and_seq(final: Final, baseline: Final) -> None:
    """(c) no delta_id twice; x_seq runs 1..n."""
    ids = Counter(d["delta_id"] for d in final.ledger)
    twice = sorted(i for i, n in ids.items() if n > 1)
    assert not twice, f"delta ids appended twice: {twice}"
    seqs = [d["x_seq"] for d in final.ledger]
    assert seqs == list(range(1, len(seqs) + 1)), f"x_seq is {seqs}"


def check_repo(final: Final, baseline: Final) -> None:
    """(d) the workspace equals the baseline's, byte for byte."""
    assert final.repo.keys() == baseline.repo.keys(), (
        f"workspace files differ: {sorted(final.repo.keys() ^ baseline.repo.keys())}"
    )
    differing = sorted(k for k in final.repo if final.repo[k] != baseline.repo[k])
    assert not differing, f"workspace file contents differ: {differing}"


def check_outputs(final: Final, baseline: Final) -> None:
    """(e) one finished run in the history; its phase outputs equal the baseline's."""
    assert len(final.history_runs) == 1, f"runs in the history: {final.history_runs}"
    engine = final.history["phase_data"]["x_orchestrator"]
    assert engine["status"] == "completed", engine["status"]
    assert engine["journal"] == []
    assert normal_outputs(final) == normal_outputs(baseline), "phase outputs differ"
    assert (final.workdir / STATE_FILE).exists() is False, "the state file is still there"


def check_worklogs(final: Final, baseline: Final) -> None:
    """(f) one final worklog entry per blocked/failed/canceled delta; worklogs as the
    baseline's."""
    closing = Counter(
        d["delta_id"] for d in final.ledger if d["status"] in ("blocked", "failed", "canceled")
    )
    entries = [e for log in final.worklogs.values() for e in log]
    logged = Counter(e["x_delta_id"] for e in entries if "x_delta_id" in e)
    assert logged == closing, (
        f"final worklog entries by delta {dict(logged)}, blocking deltas {dict(closing)}"
    )
    for e in entries:
        if "x_delta_id" in e:
            delta = next(d for d in final.ledger if d["delta_id"] == e["x_delta_id"])
            assert (e["task_id"], e["code"]) == (delta["task_id"], delta.get("x_code")), e
    mine = {t: [normal_entry(e) for e in log] for t, log in final.worklogs.items()}
    theirs = {t: [normal_entry(e) for e in log] for t, log in baseline.worklogs.items()}
    assert mine == theirs, f"worklogs differ: {mine} vs baseline {theirs}"


def check_board_files(final: Final, baseline: Final) -> None:
    """(g) the packets, results and verdicts are the baseline's: no attempt has a file the
    uninterrupted run does not have, and each says the same."""
    assert final.board_files.keys() == baseline.board_files.keys(), (
        f"board files differ: {sorted(final.board_files.keys() ^ baseline.board_files.keys())}"
    )
    mine, theirs = run_id_of(final), run_id_of(baseline)
    differing = sorted(
        rel
        for rel in final.board_files
        if normal_board_file(rel, final.board_files[rel], mine)
        != normal_board_file(rel, baseline.board_files[rel], theirs)
    )
    assert not differing, f"board files' contents differ: {differing}"


def check_evidence(final: Final, baseline: Final) -> None:
    """The run's evidence is valid, whole, and tells the baseline's story (see
    ``evidence_support``)."""
    (run,) = final.history_runs
    (base,) = baseline.history_runs
    runs = final.workdir / ".orchestrator" / "runs"
    mine = check_run_evidence(runs / run)
    theirs = check_run_evidence(baseline.workdir / ".orchestrator" / "runs" / base)
    assert story(without_retries(mine)) == story(without_retries(theirs)), "the event log differs"


CHECKS: dict[str, Callable[[Final, Final], None]] = {
    "ledger": check_ledger,
    "done once": check_done_once,
    "ids and seq": check_ids_and_seq,
    "workspace": check_repo,
    "phase outputs": check_outputs,
    "worklogs": check_worklogs,
    "board files": check_board_files,
    "evidence": check_evidence,
}


def judge(final: Final, baseline: Final) -> dict[str, str]:
    """Every check; the failing ones by name, with their message."""
    failures = {}
    for name, check in CHECKS.items():
        try:
            check(final, baseline)
        except (AssertionError, KeyError, StopIteration) as exc:
            failures[name] = f"{type(exc).__name__}: {exc}"
    return failures


@dataclass
class Outcome:
    """One killed-and-resumed scenario."""

    name: str
    kills: list[str] = field(default_factory=list)  # annotated label of each kill
    regions: list[str] = field(default_factory=list)  # where each kill landed
    failures: dict[str, str] = field(default_factory=dict)  # check -> message
    error: str | None = None  # the scenario could not run to its end
    subagent_runs: int = 0
    extra_runs: list[str] = field(default_factory=list)  # subagent runs beyond the baseline
    resume_labels: list[str] | None = None  # count log of layer 1's resume, plain
    # Whether a kill fell between a block's ledger line and its final worklog entry
    # (None: not known, for an external kill).
    in_worklog_window: bool | None = None
    leftovers: list[str] = field(default_factory=list)
