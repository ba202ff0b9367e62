"""Judges of a run's evidence: every line and every ``results.json`` valid, the story whole.

``check_run_evidence(run_dir)`` validates each ``events.ndjson`` line and each
``results.json`` against the shipped JSON Schemas (jsonschema) and the Python contracts
(strict), and checks that the events tell one story without gaps or repeats:

- ``x_seq`` is 1, 2, 3, ... in file order;
- ``run.start`` opens, ``run.end`` closes, once each; or, when a failed run was retried
  (or an ended run rewound), each ``run.retry`` (``run.rewind``) after a ``run.end``
  opens the run again, and the phases it takes back may start once more after it;
- every phase has one ``skill.start`` and at most one ``skill.end`` after it, and the
  events of a phase (tools, agents, artifacts) fall between the two;
- every agent request has one ``agent.start`` and at most one ``agent.end`` after it
  (and at most one ``agent.late_answer`` after that);
  each ``tool.call`` is followed at once by its ``tool.result``;
- every output directory an event names holds a ``results.json`` that agrees with the
  event's status, and no directory is there that no event names;
- the run's directory holds nothing else (no temporary files).

``story(events)`` is the run's events without what varies between two runs of the same
workflow (times, ids, durations): what two runs' logs must share.
"""

from __future__ import annotations

import itertools
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import jsonschema

from orchestrator.formats.steps import parse_event, parse_results, steps_schema

EVENT_VALIDATOR = jsonschema.Draft7Validator(
    steps_schema("event"), format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER
)
RESULTS_VALIDATOR = jsonschema.Draft7Validator(
    steps_schema("results"), format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER
)
KNOWN_FILES = {"events.ndjson", "state.json", "requests.ndjson"}
# What varies between two runs of one workflow (or between a run and its kill and resume).
# (Prompts name the work directory, so their size and the fake agent's token count vary
# too; an agent's summary gives its duration; numbered directories shift after a retry.)
VOLATILE = {
    "ts", "run_id", "request_id", "duration_ms", "waiting", "ref", "duration_seconds",
    "prompt_chars", "tokens_used", "step", "output_dir",
    "x_trace",  # the trace context follows from the run id
}  # fmt: skip


def check_run_evidence(run_dir: Path, *, finished: bool = True) -> list[dict[str, Any]]:
    """The run's events, after every check above (``finished``: ``run.end`` is there)."""
    log = run_dir / "events.ndjson"
    raw = log.read_bytes()
    assert raw.endswith(b"\n"), f"{log}: the last line is not whole"
    events: list[dict[str, Any]] = []
    for number, line in enumerate(raw.splitlines(), start=1):
        value = json.loads(line)
        problems = [e.message for e in EVENT_VALIDATOR.iter_errors(value)]
        assert not problems, f"{log} line {number}: {problems}"
        parse_event(value, source=f"{log} line {number}", strict=True).validate()
        assert value["x_seq"] == number, f"{log} line {number} has x_seq {value['x_seq']}"
        events.append(value)
    _check_story(events, finished=finished)
    named = _check_results(run_dir, events)
    on_disk = {p.relative_to(run_dir).parent.as_posix() for p in run_dir.rglob("results.json")}
    assert on_disk == named, f"output directories no event names: {sorted(on_disk - named)}"
    for path in run_dir.rglob("*"):
        if path.is_dir():
            continue
        relative = path.relative_to(run_dir).as_posix()
        kept_state = relative.startswith("state.v") and relative.endswith(".json")  # migrated
        assert relative in KNOWN_FILES or kept_state or relative.startswith(("phases/", "agents/"))
        assert ".tmp" not in path.name and not path.name.startswith("."), f"left over: {relative}"
    return events


def _check_story(events: list[dict[str, Any]], *, finished: bool) -> None:
    names = [e["event"] for e in events]
    assert names[0] == "run.start", names[:3]
    assert names.count("run.start") == 1
    reopened = sum(
        1
        for before, after in itertools.pairwise(names)
        if before == "run.end" and after in ("run.retry", "run.rewind")
    )
    if finished:
        assert names[-1] == "run.end" and names.count("run.end") == 1 + reopened, names[-3:]
    numbers: dict[str, int] = {}  # phase name -> number, from skill.start
    open_skill: str | None = None
    # (phase name, visit) in the order they started: a route may enter a phase again
    skills_started: list[tuple[str, int]] = []
    agents: dict[str, str] = {}  # request id -> "started" | "ended"
    for index, event in enumerate(events):
        name, data = event["event"], event["data"]
        if name == "run.retry":
            before = events[index - 1]
            assert (before["event"], before["data"]["status"]) == ("run.end", "failed"), before
            assert open_skill is None
            failed = [s for s in skills_started if s[0] == data["skill"]]
            if failed:  # the failed phase (its latest visit) may start again
                skills_started.remove(failed[-1])
        elif name == "run.rewind":
            assert open_skill is None, f"event {index + 1}: a rewind inside {open_skill}"
            target = (data["skill"], data.get("visit", 1))
            if target in skills_started:  # that visit and every one after it run again
                skills_started = skills_started[: skills_started.index(target)]
            else:
                skills_started = [s for s in skills_started if numbers[s[0]] < data["phase"]]
        elif name == "run.end" and index + 1 < len(events):
            after = events[index + 1]["event"]
            assert after in ("run.retry", "run.rewind"), f"event {index + 2} after the end"
        if name == "skill.start":
            assert open_skill is None, (
                f"event {index + 1}: {data['skill']} starts inside {open_skill}"
            )
            started = (data["skill"], data.get("visit", 1))
            assert started not in skills_started, f"phase {started} started twice"
            skills_started.append(started)
            numbers[data["skill"]] = data["phase"]
            open_skill = data["skill"]
        elif name == "skill.end":
            assert open_skill == data["skill"], f"event {index + 1}: end of {data['skill']}"
            open_skill = None
        elif name.startswith(("tool.", "agent.", "artifact.")):
            assert open_skill == data.get("skill"), f"event {index + 1} ({name}) outside its phase"
        if name == "agent.start":
            assert data["request_id"] not in agents, f"{data['request_id']} started twice"
            agents[data["request_id"]] = "started"
        elif name == "agent.end":
            assert agents.get(data["request_id"]) == "started", f"end of {data['request_id']}"
            agents[data["request_id"]] = "ended"
        elif name == "agent.late_answer":  # after its end (a timeout), once
            assert agents.get(data["request_id"]) == "ended", f"late {data['request_id']}"
            agents[data["request_id"]] = "answered late"
        elif name == "tool.call":
            after = events[index + 1]
            assert after["event"] == "tool.result" and after["data"]["tool"] == data["tool"]
    if finished:
        assert open_skill is None or events[-1]["data"]["status"] != "completed"
        assert set(agents.values()) <= {"ended", "answered late"}, f"never ended: {agents}"


def _check_results(run_dir: Path, events: list[dict[str, Any]]) -> set[str]:
    named: set[str] = set()
    for event in events:
        if event["event"] not in ("agent.end", "skill.end"):
            continue
        directory = event["data"]["output_dir"]
        named.add(directory)
        path = run_dir / directory / "results.json"
        document = json.loads(path.read_bytes())
        problems = [e.message for e in RESULTS_VALIDATOR.iter_errors(document)]
        assert not problems, f"{path}: {problems}"
        parse_results(document, source=str(path), strict=True).validate()
        for artifact in document["artifacts"]:
            assert (path.parent / artifact["path"]).is_file(), f"{path}: {artifact['path']}"
        if event["event"] == "agent.end":
            assert document["metadata"]["request_id"] == event["data"]["request_id"]
    # The last word on a request's results is its last event: a refused answer's error
    # rewrites the pass its agent.end told.
    final: dict[str, str] = {}
    for event in events:
        data = event["data"]
        if event["event"] in ("agent.end", "agent.late_answer"):
            final[data["output_dir"]] = data["status"]
        elif event["event"] == "error" and "request_id" in data and "fatal" not in data:
            directory = next(
                e["data"]["output_dir"]
                for e in events
                if e["event"] == "agent.end" and e["data"]["request_id"] == data["request_id"]
            )
            final[directory] = "fail"
        elif event["event"] == "skill.end":
            final[data["output_dir"]] = data["status"]
    for directory, status in final.items():
        document = json.loads((run_dir / directory / "results.json").read_bytes())
        assert document["status"] == status, f"{directory}: {document['status']} != {status}"
    return named


def story(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The events as (name, stable data), without times, ids and durations."""
    out = []
    for event in events:
        data = {k: v for k, v in event["data"].items() if k not in VOLATILE}
        if event["event"].startswith("agent."):
            data.pop("summary", None)
        out.append((event["event"], json.dumps(data, sort_keys=True)))
    return out


def without_retries(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events without the attempts that were retried and without the pauses, which a
    retry adds: what a run with retries shares with one without."""
    retried = {
        e["data"]["request_id"]
        for e in events
        if e["event"] == "agent.end" and "retried as" in e["data"].get("summary", "")
    }
    return [
        e
        for e in events
        if e["event"] != "run.pause"
        and not (e["event"].startswith("agent.") and e["data"]["request_id"] in retried)
    ]


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "template_create"
EXAMPLE_HANDLER = shlex.join([sys.executable, str(EXAMPLE / "fake_agent.py")])


def example_args(workdir: Path, *, template_name: str = "demo") -> list[str]:
    """The arguments of ``orchestrate run``/``drive`` for the template-create example in
    ``workdir`` (add ``--handler EXAMPLE_HANDLER`` to drive it)."""
    return [
        f"{EXAMPLE / 'workflow.py'}:TemplateCreate",
        "--workdir", str(workdir), "--output", str(workdir / "template"),
        "--input", f"project_path={EXAMPLE / 'sample_project'}",
        "--input", f"template_name={template_name}",
    ]  # fmt: skip


def run_dir_of(workdir: Path) -> Path:
    runs = sorted((workdir / ".orchestrator" / "runs").iterdir())
    assert len(runs) == 1, runs
    return runs[0]
