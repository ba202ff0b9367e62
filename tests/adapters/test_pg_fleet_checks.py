"""The checks the worker-fleet tests make (``tests/support/pg_fleet.py``) find what they look for:
each is given a run that is whole, then the same run with one fault, and must name it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from support import pg_fleet, pg_flows

RUN = "run-1"
A, B = "vm:101", "vm:202"


def event(seq: int, ts: str, name: str, worker: str, **data: Any) -> tuple[int, dict[str, Any]]:
    return seq, {"ts": ts, "event": name, "data": data, "x_seq": seq, "x_worker": worker}


def whole(tmp: Path) -> dict[str, dict[str, Any]]:
    """A run advanced by A through its first phase, then by B, with both logs written."""
    answers = []
    agent_lines, step_lines = [], []
    events = [event(1, "2026-01-01T00:00:00.001Z", "run.start", A)]
    for number, step in enumerate(pg_flows.STEPS):
        worker = A if number == 0 else B
        prompt = pg_flows.prompt_for(RUN, step, f"{step}-of-{RUN}")
        nonce = f"n{number}"
        answers.append(f"{pg_flows.digest_of(prompt)}:{nonce}")
        agent_lines.append(f"{pg_flows.digest_of(prompt)} {nonce} {pg_fleet.pid_of(worker)}")
        step_lines.append(f"{RUN} {step} {pg_fleet.pid_of(worker)}")
        ts = f"2026-01-01T00:00:0{number + 1}.000Z"
        events.append(event(len(events) + 1, ts, "tool.result", worker, tool=step))
        events.append(event(len(events) + 1, ts, "agent.end", worker, skill=step))
    events.append(
        event(len(events) + 1, "2026-01-01T00:00:09.000Z", "run.end", B, status="completed")
    )
    (tmp / "agent.log").write_text("\n".join(agent_lines) + "\n")
    (tmp / "steps.log").write_text("\n".join(step_lines) + "\n")
    outputs = {"gather": answers[0], "shape": answers[1], "seal": {"answers": answers}}
    return {RUN: {"status": "completed", "history": {"phase_data": outputs}, "events": events}}


def test_a_whole_run_passes_every_check(tmp_path: Path) -> None:
    assert pg_fleet.all_problems(whole(tmp_path), tmp_path) == []


def test_each_fault_is_named(tmp_path: Path) -> None:
    runs = whole(tmp_path)

    gap = copy.deepcopy(runs)
    del gap[RUN]["events"][2]
    assert any("event numbers" in p for p in pg_fleet.all_problems(gap, tmp_path))

    overlap = copy.deepcopy(runs)
    # B wrote an event stamped after the one A wrote next: both held the run at once
    overlap[RUN]["events"][1][1].update(x_worker=B, ts="2026-01-01T00:00:01.500Z")
    assert any("while" in p for p in pg_fleet.overlap_problems(RUN, overlap[RUN]))

    unfinished = copy.deepcopy(runs)
    unfinished[RUN]["events"].pop()
    assert any("run.end" in p for p in pg_fleet.all_problems(unfinished, tmp_path))

    with (tmp_path / "steps.log").open("a") as log:
        log.write(f"{RUN} shape {pg_fleet.pid_of(A)}\n")  # after B's: a second run of shape
    problems = pg_fleet.step_problems(runs, tmp_path / "steps.log", killed=())
    assert any("step shape last ran in process 101" in p for p in problems), problems


def test_a_step_run_again_is_allowed_only_after_its_worker_was_killed(tmp_path: Path) -> None:
    runs = whole(tmp_path)
    lines = (tmp_path / "steps.log").read_text()
    (tmp_path / "steps.log").write_text(f"{RUN} shape 303\n" + lines)
    problems = pg_fleet.step_problems(runs, tmp_path / "steps.log", killed=())
    assert any("[303] were not killed" in p for p in problems), problems
    assert pg_fleet.step_problems(runs, tmp_path / "steps.log", killed=[303]) == []


def test_an_answer_lost_or_made_up_is_named(tmp_path: Path) -> None:
    runs = whole(tmp_path)
    with (tmp_path / "agent.log").open("a") as log:
        log.write("0123456789abcdef lost1 202\n")
    problems = pg_fleet.answer_problems(runs, tmp_path / "agent.log", killed=())
    assert any("lost1" in p and "lost" in p for p in problems), problems
    assert pg_fleet.answer_problems(runs, tmp_path / "agent.log", killed=[202]) == []

    made_up = copy.deepcopy(runs)
    made_up[RUN]["history"]["phase_data"]["gather"] = "feedfacefeedface:n9"
    made_up[RUN]["history"]["phase_data"]["seal"]["answers"][0] = "feedfacefeedface:n9"
    problems = pg_fleet.answer_problems(made_up, tmp_path / "agent.log", killed=[202])
    assert any("is no answer given" in p for p in problems), problems
