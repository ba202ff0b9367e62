"""Crash safety of the task-board example's dispatch waves under real SIGKILLs.

The requirement: kill -9 at 200 or more points during the example's dispatch waves, then
resume: the final ledger equals an uninterrupted run's, no task done twice.

How it is proved, with real processes (``python -m orchestrator drive`` on
``examples/task_board/workflow.py:TaskBoardDemo``, ``fake_subagent.py`` as the handler
with ``FAKE_SUBAGENT_FAST=1``; see ``board_crash_support.py`` for the plumbing and for
exactly what is normalised before comparing):

* A baseline: the example run uninterrupted, without the crash hook. What it leaves is
  the reference; a run in ``ORCHESTRATOR_CRASH_AT=count`` mode lists its crash points and
  must leave the same.
* Layer 1: drive with ``ORCHESTRATOR_CRASH_AT=N`` for 200 points of the dispatch waves
  (every ledger append, packet, result and verdict write, worklog append, step and state
  write of the board's steps, and a spread of the mailbox and evidence writes between
  them) and a few
  before and after them; it must die by SIGKILL at the label the baseline has there; the
  resume (in count mode, so layer 2 learns its points) must exit 0.
* Layer 2: for a few N, the resuming process is killed too, at a point M of its own, then
  a third drive finishes.
* External kills: ``os.kill(pid, SIGKILL)`` after varied delays.

Checks on every killed-and-resumed run (``board_crash_support.CHECKS``): (a) the ledger
equals the baseline's, line by line; (b) one ``done`` per task and the baseline's attempts;
(c) no ``delta_id`` twice, ``x_seq`` 1..n; (d) the workspace byte for byte; (e) one run in
the history, its phase outputs as the baseline's; (f) one final worklog entry per
blocking delta, worklogs as the baseline's; (g) packets, results and verdicts as the
baseline's; (h) the run's events and results.json valid, and the events the baseline's
story (``evidence_support``).

Subagent runs may repeat after a kill (the resumed drive asks a pending request again:
at-least-once for a subagent's own work); they are counted and printed (``-s``), not
required to be once. ``CRASH_SAFETY_WORKERS`` sets the parallel drives (2), and
``BOARD_CRASH_POINTS=all`` kills at every point of the run instead of the chosen 206.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from support import board_crash_support as board_crash
from support import sweeps

Final, Outcome = board_crash.Final, board_crash.Outcome

WORKERS = int(os.environ.get("CRASH_SAFETY_WORKERS", "2"))
DISPATCH_POINTS = 200  # layer-1 kills inside the dispatch waves
OUTSIDE_POINTS = 6  # and before them (prepare) or after them (summarize)
LAYER_TWO_RUNS = 8
# External kills: delays counted from the moment drive passed its first crash point, as
# fractions of the time an uninterrupted drive takes from there to its end, and one counted
# from the spawn. A drive that ends before its kill is judged as it is.
EXTERNAL_FRACTIONS = (0.05, 0.15, 0.25, 0.35, 0.45, 0.55, 0.65, 0.75, 0.9)
EXTERNAL_SPAWN_DELAY = 0.05
BLOCKED_IN_BASELINE = {"T-5/1/blocked": "SCOPE_VIOLATION", "T-4/1/blocked": "TASK_TIMEOUT"}


pytestmark = pytest.mark.slow


def is_mailbox(label: str) -> bool:
    """A point of the host mailbox (request and response files), not of the board."""
    return "<id>" in label or ".agent-re" in label


EVIDENCE_FILES = ("events.ndjson", "results.json", "prompt.md", "response.json", "response.txt")


def is_evidence(label: str) -> bool:
    """A point of the run's evidence (its event log and output directories)."""
    return label.split(" ")[-1] in EVIDENCE_FILES


def label_kind(label: str) -> str:
    """What an (annotated) crash point is about, for the summary."""
    if label.startswith("after-step-run "):
        return "step run"
    if is_mailbox(label):
        return "mailbox"
    if is_evidence(label):
        return "evidence"
    target = label.split(" ")[-1]
    if target in ("ledger", "ledger.ndjson"):
        return "ledger append"
    if target.endswith(".jsonl"):
        return "worklog append"
    if target == board_crash.STATE_FILE:
        return "state write"
    return target.split("/")[0] if "/" in target else target


def pick(points: Sequence[int], count: int) -> list[int]:
    """``count`` of ``points``, evenly spaced, both ends included."""
    if count >= len(points):
        return list(points)
    if count <= 1:
        return list(points[:count])
    return sorted({points[round(k * (len(points) - 1) / (count - 1))] for k in range(count)})


def worklog_windows(labels: list[str]) -> dict[int, str]:
    """Point -> task, for the points between a block's ledger append (its line written,
    not yet fsynced) and its final worklog append (``Board._append_once``)."""
    windows = {}
    for i, label in enumerate(labels):
        if label.startswith("before-append ") and label.endswith(".jsonl"):
            assert labels[i - 2 : i] == ["before-fsync ledger.ndjson", "after-append ledger"]
            task = label.removeprefix("before-append ").removesuffix(".jsonl")
            windows.update({i - 1: task, i: task, i + 1: task})  # 1-based points
    return windows


# -- the baseline ------------------------------------------------------------------------------


@dataclass
class Baseline:
    final: Final
    labels: list[str]  # the crash points of an uninterrupted run, plain
    annotated: list[str]
    regions: list[str]
    seconds: float
    active_seconds: float  # from the first crash point to the end
    subagent_runs: Counter[str]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Baseline:
    base = tmp_path_factory.mktemp("board-baseline")
    plain_run = board_crash.new_scenario(base, "example")
    started = time.monotonic()
    board_crash.expect_rc(board_crash.run_drive(plain_run), 0, "uninterrupted example")
    seconds = time.monotonic() - started
    reference = board_crash.final_of(plain_run / "work")
    counted = board_crash.new_scenario(base, "example-count")
    process = board_crash.start_drive(counted, crash_log=counted / "crash.log")
    first_point = wait_for_first_point(process, counted / "crash.log")
    assert process.wait(timeout=board_crash.RUN_TIMEOUT) == 0, "example in count mode"
    active_seconds = time.monotonic() - first_point
    points = board_crash.read_log(counted / "crash.log")
    assert [n for n, _ in points] == list(range(1, len(points) + 1))
    # Count mode changes nothing the checks look at.
    assert board_crash.judge(board_crash.final_of(counted / "work"), reference) == {}
    annotated = board_crash.annotate([label for _, label in points])
    return Baseline(
        final=reference,
        labels=[board_crash.plain(label) for _, label in points],
        annotated=annotated,
        regions=board_crash.regions(annotated),
        seconds=seconds,
        active_seconds=active_seconds,
        subagent_runs=board_crash.subagent_runs(plain_run),
    )


def test_the_baseline_is_the_example_as_documented(baseline: Baseline) -> None:
    """Six tasks done in four waves; T-5 refused once (out of scope), T-4 timed out once;
    each subagent ran once; the crash hook's variables do not reach the handler."""
    final = baseline.final
    assert final.leftovers == []
    summary = final.outputs["summarize"]
    assert summary["done"] == list(board_crash.TASKS) and summary["not_done"] == []
    assert summary["waves"] == 4
    assert summary["attempts"] == {"T-1": 1, "T-2": 1, "T-3": 1, "T-4": 2, "T-5": 2, "T-6": 1}
    blocked = {d["delta_id"]: d["x_code"] for d in final.ledger if d["status"] == "blocked"}
    assert blocked == BLOCKED_IN_BASELINE
    assert sorted(baseline.subagent_runs.elements()) == [
        "T-1 1", "T-2 1", "T-3 1", "T-4 1", "T-4 2", "T-5 1", "T-5 2", "T-6 1",
    ]  # fmt: skip
    for check in board_crash.CHECKS.values():
        check(final, final)
    assert board_crash.HANDLER.startswith("env -u ORCHESTRATOR_CRASH_AT -u ORCHESTRATOR_CRASH_LOG ")
    dispatch = [r for r in baseline.regions if r not in ("prepare", "summarize")]
    assert len(dispatch) >= DISPATCH_POINTS
    regions = Counter(r.split(":")[0] for r in dispatch)
    assert sorted(regions) == ["create", "wave 1", "wave 2", "wave 3", "wave 4"], regions
    assert 5 <= regions["create"] <= 15, f"the create step was not found: {regions}"
    # Two windows where a kill falls between a block's ledger line and its worklog entry.
    windows = worklog_windows(baseline.labels)
    assert sorted(Counter(windows.values()).items()) == [("T-4", 3), ("T-5", 3)]
    print(
        f"\n[board-crash] baseline: {len(baseline.labels)} crash points "
        f"({len(dispatch)} in the dispatch waves), {baseline.seconds:.2f} s per drive "
        f"({baseline.active_seconds:.2f} s from its first crash point)"
    )


def test_the_checks_catch_what_they_look_for(baseline: Baseline, tmp_path: Path) -> None:
    """Each check fails on a doctored copy of the baseline made to break it, and the
    normalisation does not hide a changed status, owner, code, attempt or order."""
    final = baseline.final
    # (h): a copy of the run whose log tells one tool step twice.
    import shutil

    (run,) = final.history_runs
    copied = tmp_path / "copy"
    shutil.copytree(final.workdir / ".orchestrator", copied / ".orchestrator")
    log = copied / ".orchestrator" / "runs" / run / "events.ndjson"
    events = [json.loads(line) for line in log.read_bytes().splitlines()]
    at = next(i for i, e in enumerate(events) if e["event"] == "tool.call")
    told_twice = events[: at + 2] + events[at : at + 2] + events[at + 2 :]
    log.write_bytes(
        b"".join(
            json.dumps({**e, "x_seq": n}).encode() + b"\n" for n, e in enumerate(told_twice, 1)
        )
    )
    with pytest.raises(AssertionError):
        board_crash.CHECKS["evidence"](dataclasses.replace(final, workdir=copied), final)

    def doctored(**changes: Any) -> Final:
        return dataclasses.replace(copy.deepcopy(final), **changes)

    def fails(check: str, bad: Final) -> None:
        with pytest.raises(AssertionError):
            board_crash.CHECKS[check](bad, final)

    ledger = final.ledger
    done = next(i for i, d in enumerate(ledger) if d["status"] == "done")
    twice = [*copy.deepcopy(ledger), {**ledger[done], "x_seq": len(ledger) + 1}]
    fails("ledger", doctored(ledger=twice))
    fails("done once", doctored(ledger=twice))
    fails("ids and seq", doctored(ledger=twice))
    swapped = copy.deepcopy(ledger)
    swapped[6], swapped[7] = swapped[7], swapped[6]
    fails("ledger", doctored(ledger=swapped))
    for key, value in (
        ("status", "blocked"),
        ("owner", "someone"),
        ("x_verdict", "verdicts/T-0.1.json"),
        ("x_base_version", 0),
        ("delta_id", "T-1/9/done"),
    ):
        changed = copy.deepcopy(ledger)
        changed[done][key] = value
        fails("ledger", doctored(ledger=changed))
    extra = copy.deepcopy(ledger)
    start = next(d for d in extra if d["status"] == "in_progress")
    extra.insert(extra.index(start) + 1, {**start, "x_attempt": 2, "delta_id": "x"})
    fails("done once", doctored(ledger=extra))
    gap = copy.deepcopy(ledger)
    gap[-1]["x_seq"] += 1
    fails("ids and seq", doctored(ledger=gap))
    repo = dict(final.repo)
    repo["README.md"] = repo["README.md"] + b" "
    fails("workspace", doctored(repo=repo))
    outputs = copy.deepcopy(final.outputs)
    outputs["work"]["tasks"]["T-4"]["attempts"] = 3
    fails("phase outputs", doctored(outputs=outputs))
    fails("phase outputs", doctored(history_runs=[*final.history_runs, "another-run"]))
    worklogs = copy.deepcopy(final.worklogs)
    worklogs["T-5"] = []
    fails("worklogs", doctored(worklogs=worklogs))
    worklogs = copy.deepcopy(final.worklogs)
    worklogs["T-4"] = worklogs["T-4"] * 2
    fails("worklogs", doctored(worklogs=worklogs))
    files = dict(final.board_files)
    files["results/T-4.1.json"] = files["results/T-4.2.json"]
    fails("board files", doctored(board_files=files))
    assert missing_final_entries(doctored(worklogs={"T-4": final.worklogs["T-4"]}), final) == [
        "T-5/1/blocked"
    ]


# -- the campaign --------------------------------------------------------------------------------


def finish(scenario: Path, baseline: Baseline, outcome: Outcome) -> Outcome:
    """Judge a scenario that ran to its end."""
    final = board_crash.final_of(scenario / "work")
    outcome.failures = board_crash.judge(final, baseline.final)
    runs = board_crash.subagent_runs(scenario)
    outcome.subagent_runs = sum(runs.values())
    outcome.extra_runs = sorted((runs - baseline.subagent_runs).elements())
    outcome.leftovers = final.leftovers
    missing = missing_final_entries(final, baseline.final)
    if "worklogs" in outcome.failures and missing:
        outcome.failures["worklogs"] += f" [missing final entries: {missing}]"
    return outcome


def missing_final_entries(final: Final, baseline: Final) -> list[str] | None:
    """The delta ids whose final worklog entries are missing, if the worklogs are the
    baseline's but for those entries (else None)."""
    theirs = {t: [board_crash.normal_entry(e) for e in log] for t, log in baseline.worklogs.items()}
    mine = {t: [board_crash.normal_entry(e) for e in log] for t, log in final.worklogs.items()}
    missing = []
    for task, entries in theirs.items():
        kept = mine.get(task, [])
        if kept == entries:
            continue
        gone = [e for e in entries if e not in kept]
        if [e for e in entries if e in kept] != kept or any("x_delta_id" not in e for e in gone):
            return None
        missing += [e["x_delta_id"] for e in gone]
    if any(log for task, log in mine.items() if task not in theirs):
        return None
    return sorted(missing)


def layer_one(base: Path, baseline: Baseline, point: int) -> Outcome:
    outcome = Outcome(name=f"N={point}")
    scenario = board_crash.new_scenario(base, f"n{point:03d}")
    board_crash.kill_at(scenario, point, baseline.labels[point - 1], "crash.log")
    outcome.kills.append(baseline.annotated[point - 1])
    outcome.regions.append(baseline.regions[point - 1])
    outcome.in_worklog_window = point in worklog_windows(baseline.labels)
    resume_log = scenario / "resume.log"
    proc = board_crash.run_drive(scenario, crash_at="count", crash_log=resume_log)
    board_crash.expect_rc(proc, 0, f"resume after a kill at point {point}")
    outcome.resume_labels = [
        board_crash.plain(label) for _, label in board_crash.read_log(resume_log)
    ]
    return finish(scenario, baseline, outcome)


def layer_two(
    base: Path, baseline: Baseline, first: int, resume_labels: list[str], second: int
) -> Outcome:
    outcome = Outcome(name=f"N={first},M={second}")
    scenario = board_crash.new_scenario(base, f"n{first:03d}-m{second:03d}")
    board_crash.kill_at(scenario, first, baseline.labels[first - 1], "crash1.log")
    board_crash.kill_at(scenario, second, resume_labels[second - 1], "crash2.log")
    outcome.kills += [
        baseline.annotated[first - 1],
        board_crash.annotate(resume_labels)[second - 1],
    ]
    outcome.regions += [baseline.regions[first - 1], "(resume)"]
    windows = (worklog_windows(baseline.labels), worklog_windows(resume_labels))
    outcome.in_worklog_window = first in windows[0] or second in windows[1]
    board_crash.expect_rc(
        board_crash.run_drive(scenario), 0, f"resume after kills at {first}, {second}"
    )
    return finish(scenario, baseline, outcome)


def external_kill(base: Path, baseline: Baseline, index: int, start: str, delay: float) -> Outcome:
    outcome = Outcome(name=f"external #{index}: {delay * 1000:.0f} ms after the {start}")
    scenario = board_crash.new_scenario(base, f"ext{index:02d}")
    log = scenario / "crash.log"
    process = board_crash.start_drive(scenario, crash_log=log)
    if start == "first point":
        wait_for_first_point(process, log)
    time.sleep(delay)
    os.kill(process.pid, signal.SIGKILL)  # not reaped before wait(): at worst a zombie
    returncode = process.wait(timeout=board_crash.RUN_TIMEOUT)
    # A subagent drive was running when it died goes on alone (its own session): wait for
    # it, so that its writes are not mistaken for the resume's.
    wait_for_subagents(scenario)
    passed = [board_crash.plain(label) for _, label in board_crash.read_log(log)]
    work = scenario / "work"
    finished = not (work / board_crash.STATE_FILE).exists() and bool(
        board_crash.final_of(work).history_runs
    )
    if returncode == -signal.SIGKILL and not finished:
        outcome.kills.append(passed[-1] if passed else "(before the first crash point)")
        outcome.regions.append(baseline.regions[len(passed) - 1] if passed else "prepare")
        outcome.resume_labels = passed
        board_crash.expect_rc(board_crash.run_drive(scenario), 0, "resume after an external kill")
    elif returncode == -signal.SIGKILL:
        outcome.regions.append("(after the last crash point: nothing to resume)")
    else:
        assert returncode == 0, f"drive exited {returncode} before the kill"
    return finish(scenario, baseline, outcome)


def wait_for_first_point(process: subprocess.Popen[bytes], log: Path) -> float:
    """Until drive (in count mode) has logged a crash point; returns when it had."""
    deadline = time.monotonic() + board_crash.RUN_TIMEOUT
    while process.poll() is None and not (log.exists() and log.stat().st_size):
        assert time.monotonic() < deadline, "drive passed no crash point"
        time.sleep(0.001)
    return time.monotonic()


def wait_for_subagents(scenario: Path, timeout: float = 30.0) -> None:
    """Until no process has this scenario's FAKE_SUBAGENT_LOG in its environment."""
    marker = f"FAKE_SUBAGENT_LOG={scenario / 'subagents.log'}".encode() + b"\0"
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as environ:
                    if marker in environ.read():
                        alive.append(entry.name)
            except OSError:
                continue
        if not alive:
            return
        assert time.monotonic() < deadline, f"subagents of {scenario} still running: {alive}"
        time.sleep(0.02)


def run_all(jobs: Iterable[tuple[str, Callable[[], Outcome]]]) -> list[Outcome]:
    def guarded(name: str, job: Callable[[], Outcome]) -> Outcome:
        try:
            return job()
        except Exception as exc:  # collected: one report for all failing scenarios
            return Outcome(name=name, error=f"{type(exc).__name__}: {exc}")

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        futures = [pool.submit(guarded, name, job) for name, job in jobs]
        return [f.result() for f in futures]


def chosen_points(baseline: Baseline, sweep: str) -> list[int]:
    """In the soak run, every board point of the dispatch waves, a spread of their mailbox
    and evidence points up to ``DISPATCH_POINTS``, and ``OUTSIDE_POINTS`` spread over the
    rest of the run; in the default run, one point of each kind and the first block/worklog
    window whole."""
    everything = list(range(1, len(baseline.labels) + 1))
    if os.environ.get("BOARD_CRASH_POINTS") == "all":
        return everything
    if sweep == sweeps.EACH_KIND:
        also = sorted(worklog_windows(baseline.labels))[:3]
        firsts: dict[str, int] = {}  # and each kind of board point inside the waves
        for p in everything:
            if baseline.regions[p - 1] not in ("prepare", "summarize"):
                firsts.setdefault(label_kind(baseline.annotated[p - 1]), p)
        return sweeps.chosen(sweep, baseline.labels, also=also + list(firsts.values()))
    outside = [p for p in everything if baseline.regions[p - 1] in ("prepare", "summarize")]
    inside = [p for p in everything if p not in outside]
    board = [
        p
        for p in inside
        if not is_mailbox(baseline.labels[p - 1]) and not is_evidence(baseline.labels[p - 1])
    ]
    mailbox = [p for p in inside if p not in board]
    assert len(board) <= DISPATCH_POINTS
    return sorted(
        board + pick(mailbox, DISPATCH_POINTS - len(board)) + pick(outside, OUTSIDE_POINTS)
    )


@dataclass
class Campaign:
    sweep: str
    points: list[int]
    first: list[Outcome]
    second: list[Outcome]
    external: list[Outcome]
    seconds: float

    @property
    def outcomes(self) -> list[Outcome]:
        return self.first + self.second + self.external


@pytest.fixture(scope="module", params=sweeps.SWEEPS)
def campaign(
    baseline: Baseline, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Campaign:
    sweep = request.param
    base = tmp_path_factory.mktemp("board-crash")
    started = time.monotonic()
    points = chosen_points(baseline, sweep)
    first = run_all((f"N={n}", partial(layer_one, base, baseline, n)) for n in points)
    by_point = dict(zip(points, first, strict=True))
    dispatch_board = [
        p
        for p in points
        if baseline.regions[p - 1] not in ("prepare", "summarize")
        and not is_mailbox(baseline.labels[p - 1])
    ]
    jobs = []
    for n in pick(dispatch_board, sweeps.fewer(sweep, LAYER_TWO_RUNS, 3)):
        labels = by_point[n].resume_labels
        if labels:  # a failed layer-1 scenario is reported there
            m = 1 + (n * 37 + 11) % len(labels)
            jobs.append((f"N={n},M={m}", partial(layer_two, base, baseline, n, labels, m)))
    second = run_all(jobs)
    fractions = pick(EXTERNAL_FRACTIONS, sweeps.fewer(sweep, len(EXTERNAL_FRACTIONS), 3))
    plan = [("spawn", EXTERNAL_SPAWN_DELAY)] + [
        ("first point", f * baseline.active_seconds) for f in fractions
    ]
    external = run_all(
        (f"external #{i}", partial(external_kill, base, baseline, i, start, delay))
        for i, (start, delay) in enumerate(plan)
    )
    return Campaign(sweep, points, first, second, external, time.monotonic() - started)


def failures_of(campaign: Campaign, checks: Iterable[str]) -> list[str]:
    wanted = set(checks)
    return [
        f"{o.name} (killed at {' / '.join(o.kills) or '-'}): {check}: {message}"
        for o in campaign.outcomes
        for check, message in o.failures.items()
        if check in wanted
    ]


def report(failed: list[str], what: str) -> str:
    return f"{len(failed)} {what}:\n" + "\n".join(failed[:12])


@pytest.mark.slow
def test_every_kill_lands_and_every_run_resumes(baseline: Baseline, campaign: Campaign) -> None:
    """Every CRASH_AT drive died by SIGKILL at the label asked; every resume exited 0."""
    errors = [f"{o.name}: {o.error}" for o in campaign.outcomes if o.error]
    assert not errors, report(errors, "scenarios did not run to their end")
    inside = [p for p in campaign.points if baseline.regions[p - 1] not in ("prepare", "summarize")]
    if campaign.sweep == sweeps.EVERY_POINT:
        assert len(inside) >= DISPATCH_POINTS, "at least 200 kills during the dispatch waves"
    kinds = Counter(label_kind(baseline.annotated[p - 1]) for p in inside)
    board = ("ledger append", "packets", "results", "verdicts", "worklog append", "step run")
    assert all(kinds[kind] for kind in board), kinds
    external = [o for o in campaign.external if o.kills]
    assert external, "no external kill landed before its drive ended"
    processes = sum(len(o.kills) for o in campaign.outcomes)
    extra = Counter(run for o in campaign.outcomes for run in o.extra_runs)
    leftovers = Counter(
        f.rsplit("/", 1)[0] + "/*.tmp" for o in campaign.outcomes for f in o.leftovers
    )
    print(
        f"\n[board-crash] {len(baseline.labels)} crash points per run; killed-and-resumed "
        f"runs: {len(campaign.outcomes)} ({len(campaign.first)} single kills at "
        f"{len(inside)} dispatch and {len(campaign.first) - len(inside)} other points, "
        f"{len(campaign.second)} double kills, {len(external)} of {len(campaign.external)} "
        f"external kills landed); SIGKILLed drives: {processes}; "
        f"{campaign.seconds:.0f} s with {WORKERS} workers"
    )
    regions = Counter(r.split(":")[0] for o in campaign.first for r in o.regions)
    print(f"[board-crash] layer-1 kills by region: {dict(regions)}")
    print(f"[board-crash] layer-1 kills in the dispatch waves by kind: {dict(kinds)}")
    print(
        f"[board-crash] layer-2 kills: {[(o.name, o.kills) for o in campaign.second]}\n"
        f"[board-crash] external kills (last point passed): "
        f"{[(o.name, o.kills) for o in campaign.external]}"
    )
    runs = [o.subagent_runs for o in campaign.outcomes]
    print(
        f"[board-crash] subagent runs: {sum(runs)} in {len(runs)} runs (uninterrupted: "
        f"{sum(baseline.subagent_runs.values())} each; most in one run: {max(runs)}); "
        f"runs again after a kill: {sum(extra.values())} {dict(extra)}"
    )
    print(f"[board-crash] temporary files left by killed writes: {dict(leftovers)}")


@pytest.mark.slow
def test_final_ledger_equals_the_uninterrupted_runs_and_no_task_is_done_twice(
    campaign: Campaign,
) -> None:
    """(a) the ledger, line by line; (b) one done per task, the baseline's attempts;
    (c) unique delta ids, x_seq 1..n."""
    failed = failures_of(campaign, ("ledger", "done once", "ids and seq"))
    assert not failed, report(failed, "ledger failures")


@pytest.mark.slow
def test_workspace_history_and_board_files_equal_the_uninterrupted_runs(
    campaign: Campaign,
) -> None:
    """(d) the workspace; (e) the history's phase outputs; (g) packets, results, verdicts."""
    failed = failures_of(campaign, ("workspace", "phase outputs", "board files"))
    assert not failed, report(failed, "failures")


@pytest.mark.slow
def test_every_blocked_delta_has_exactly_one_final_worklog_entry(campaign: Campaign) -> None:
    """(f) one final worklog entry (with its code) per blocked delta, worklogs as the
    baseline's."""
    failed = failures_of(campaign, ("worklogs",))
    assert not failed, report(failed, "worklog failures")


@pytest.mark.slow
def test_kills_between_a_block_and_its_worklog_entry_were_made(campaign: Campaign) -> None:
    """The worklog check above means something only if kills landed in the windows
    between a block's ledger line and its worklog entry: they did, and those runs have
    their entries (a step run again settles them)."""
    in_window = [o for o in campaign.first + campaign.second if o.in_worklog_window]
    assert in_window, "no kill landed between a blocked delta and its worklog entry"
    assert not [o for o in in_window if "worklogs" in o.failures]
    print(f"\n[board-crash] {len(in_window)} runs killed in a block/worklog window, all whole")
