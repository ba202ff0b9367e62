"""``ctx.dispatch`` inside workflows: waves, the gateway, retries, the watchdog, replay.

Every test runs a small workflow over the real file bridge in a temporary directory with
the fake clock: in-process (a ``MockAgentInvoker`` plays the subagents; its callable
reads the ask's context from the invocation it has just recorded) or as a host would
(``invoker=None``: every wave pauses, and the test answers the pending requests with
response files). It proves that:

- a wave starts the ready tasks by priority; a task whose locks conflict waits for the
  next wave, and dependencies order the waves; the phase output lists every task's
  status, attempts, code and verdict;
- a result outside the task's scope blocks it (SCOPE_VIOLATION) and the task is
  reassigned (attempt 2), then done; an error answer (TIMEOUT, INVOCATION_FAILED,
  PARSE_ERROR) blocks it (TASK_TIMEOUT, NON_COMPLIANT, SCHEMA_INVALID) and it is retried;
- a task out of attempts fails, its dependents are canceled (DEPENDENCY_NOT_MET) and the
  workflow still completes and reports them; AGENT_NOT_FOUND still fails the run;
- ``retry_after_ms`` is waited out on the injected clock (its ``sleep``), never for real;
- resuming after each pause never asks an answered task again, the ledger has no
  duplicate, and a phase whose task list changed under a paused run is refused;
- the watchdog (``Board.watchdog`` plus the TIMEOUT answer to the pending request) makes
  the next resume reassign the task;
- every packet written validates against the shipped assignment-packet schema, and every
  request the engine publishes against the workflow's request schema.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest
from jsonschema import Draft7Validator, FormatChecker

from orchestrator import (
    AgentInvocationError,
    Board,
    DispatchReport,
    Task,
    Workflow,
    phase,
    workflow_schemas,
)
from orchestrator.cli.board_handoff import time_out_stale_tasks
from orchestrator.formats.convert import structure, unstructure
from orchestrator.testing import FakeClock, MockAgentInvoker, SequentialIds, WorkflowHarness

PACKET_SCHEMA = json.loads(
    (
        Path(__file__).parents[2]
        / "orchestrator"
        / "formats"
        / "schemas"
        / "board"
        / "assignment-packet.schema.json"
    ).read_text(encoding="utf-8")
)
FORMATS = FormatChecker()
OBJECTIVE = "Ship input validation for the key-value service"
CONSTRAINTS = ["Keep put() and get() backwards compatible."]
# Error answers and the code each one blocks its task with.
ERROR_CODES = {
    "TIMEOUT": "TASK_TIMEOUT",
    "INVOCATION_FAILED": "NON_COMPLIANT",
    "PARSE_ERROR": "SCHEMA_INVALID",
}


def task(
    task_id: str,
    scope: list[str],
    *,
    dependencies: tuple[str, ...] = (),
    priority: str = "normal",
    timeout_seconds: int = 60,
) -> dict[str, Any]:
    """A task object of the task board documents, as a workflow input."""
    return {
        "task_id": task_id,
        "title": f"Do {task_id}",
        "type": "parallelizable",
        "dependencies": list(dependencies),
        "lock_scope": scope,
        "forbidden_scope": [],
        "acceptance_criteria": [f"{task_id} is finished"],
        "worklog_path": f"worklogs/{task_id}.jsonl",
        "timeout_seconds": timeout_seconds,
        "heartbeat_interval_seconds": 10,
        "priority": priority,
    }


def agent_for(task: Task) -> str:
    return "writer" if task.lock_scope[0].startswith("docs") else "coder"


class BoardFlow(Workflow):
    """Dispatches the tasks of its inputs, then tallies the report in a phase of its own."""

    name = "board-flow"
    agents = ("coder", "writer")
    purpose = "testing ctx.dispatch"
    max_retries = 0

    @phase(1, asks_agents=True)
    def work(self, ctx: Any) -> Any:
        tasks = [structure(item, Task, source="inputs.tasks") for item in self.inputs["tasks"]]
        return ctx.dispatch(
            tasks,
            agent=agent_for,
            objective=OBJECTIVE,
            constraints=CONSTRAINTS,
            max_attempts=self.inputs.get("max_attempts", 3),
            retry_after_ms=self.inputs.get("retry_after_ms", 0),
        )

    @phase(2)
    def tally(self, ctx: Any) -> dict[str, Any]:
        report = ctx.output("work")
        return {
            "done": sorted(t for t, o in report["tasks"].items() if o["status"] == "done"),
            "not_done": sorted(t for t, o in report["tasks"].items() if o["status"] != "done"),
        }


# The task list of ``Shifting``: a module global, so a test can change it under a pause.
SHIFTING_TASKS: list[dict[str, Any]] = []


class Shifting(Workflow):
    name = "shifting"
    agents = ("coder",)
    max_retries = 0

    @phase(1, asks_agents=True)
    def work(self, ctx: Any) -> Any:
        tasks = [structure(item, Task, source="SHIFTING_TASKS") for item in SHIFTING_TASKS]
        return ctx.dispatch(tasks, agent="coder", objective=OBJECTIVE)


# -- the subagents ---------------------------------------------------------------------


@attrs.define
class Subagents:
    """Plays every subagent. ``plan`` says how an attempt misbehaves ((task, attempt) ->
    one of :data:`REFUSED` or an error type); any other attempt passes."""

    plan: dict[tuple[str, int], str] = attrs.Factory(dict)
    asked: list[tuple[str, int]] = attrs.Factory(list)

    def reply(self, prompt: str, context: dict[str, Any]) -> tuple[str, str]:
        """(status or error type, answer text) for one ask; checks what the ask carries."""
        packet_path = Path(context["x_packet"])
        packet_text = packet_path.read_text(encoding="utf-8")
        packet = json.loads(packet_text)
        task_id, attempt = context["x_task_id"], context["x_attempt"]
        assert packet["task"]["task_id"] == task_id
        assert packet_path == Path(context["x_board"]) / "packets" / f"{task_id}.{attempt}.json"
        assert packet_text in prompt, "the prompt carries the packet"
        assert f"Do task {task_id} (attempt {attempt})" in prompt
        self.asked.append((task_id, attempt))
        behaviour = self.plan.get((task_id, attempt), "pass")
        if behaviour in ERROR_CODES or behaviour == "AGENT_NOT_FOUND":
            return behaviour, f"the subagent of {task_id} answered {behaviour}"
        if behaviour == "garbage":
            return "success", "I did it, trust me"
        return "success", json.dumps(result_for(packet, behaviour))

    def invoker(self) -> MockAgentInvoker:
        """A mock whose answers come from :meth:`reply` (errors raised as the mock does)."""
        mock = MockAgentInvoker()

        def answer(prompt: str) -> str:
            # The mock records the call before it answers: the context is in it.
            context = mock.invocations[-1]["kwargs"]["context"]
            status, text = self.reply(prompt, context)
            if status != "success":
                raise AgentInvocationError(text, error_type=status)
            return text

        for agent in BoardFlow.agents:
            mock.add_response(agent, answer)
        return mock


def result_for(packet: dict[str, Any], behaviour: str = "pass") -> dict[str, Any]:
    """A subagent result (a task board document) that passes the gateway, or misbehaves as told."""
    task = packet["task"]
    changed = [*task["lock_scope"], *(["README.md"] if behaviour == "stray" else [])]
    result = {
        "schema_version": "1.0.0",
        "run_id": packet["run_id"],
        "task_id": task["task_id"],
        "status": "done",
        "changes": [{"resource": r, "action": "edit", "evidence": f"edited {r}"} for r in changed],
        "acceptance_check": [
            {"criterion": c, "status": "pass", "evidence": "pytest -q: 3 passed"}
            for c in task["acceptance_criteria"]
        ],
        "worklog_path": task["worklog_path"],
        "notes_for_orchestrator": [f"{task['task_id']} finished"],
    }
    if behaviour == "other-task":
        result["task_id"] = "T-99"
    elif behaviour == "secret":
        result["notes_for_orchestrator"] = ["deployed with AKIAIOSFODNN7EXAMPLE"]
    elif behaviour == "gave-up":
        result["status"] = "failed"
        result["acceptance_check"][0]["status"] = "fail"
    elif behaviour == "unchecked":
        result["acceptance_check"][0]["criterion"] = "something else entirely"
    return result


# A result the gateway refuses: (ledger code, verdict reason_code, the verdict check that fails).
REFUSED = {
    "stray": ("SCOPE_VIOLATION", "SCOPE_CONFLICT", "scope_valid"),
    "garbage": ("SCHEMA_INVALID", "SCHEMA_VIOLATION", "schema_valid"),
    "other-task": ("SCHEMA_INVALID", "SCHEMA_VIOLATION", "schema_valid"),
    "secret": ("UNTRUSTED_CONTEXT_BLOCK", "POLICY_VIOLATION", None),
    "gave-up": ("ACCEPTANCE_FAILED", "EXECUTOR_ERROR", "tests_passed"),
    "unchecked": ("ACCEPTANCE_FAILED", "CI_FAILED", "tests_passed"),
}


# -- running ---------------------------------------------------------------------------


def harness(
    workdir: Path, *, invoker: Any = None, clock: FakeClock | None = None, cls: Any = BoardFlow
) -> WorkflowHarness:
    return WorkflowHarness(
        cls, workdir, invoker=invoker, clock=clock or FakeClock(), new_id=SequentialIds()
    )


def run_in_process(workdir: Path, inputs: dict[str, Any], agents: Subagents, **kw: Any) -> Any:
    outcome = harness(workdir, invoker=agents.invoker(), **kw).run(inputs)
    assert_packets_valid(workdir)
    return outcome


@attrs.define
class HostRun:
    """A run driven as a host drives it: one pause per wave."""

    harness: WorkflowHarness
    agents: Subagents
    waves: list[list[str]] = attrs.Factory(list)  # the task ids each pause asked for
    requests: list[Any] = attrs.Factory(list)  # every request of every pause

    def start(self, inputs: dict[str, Any]) -> Any:
        return self.checked(self.harness.run(inputs))

    def checked(self, outcome: Any) -> Any:
        if outcome.status == "paused":
            assert outcome.exit_code == 42
            assert_requests_valid(self.harness.workdir, self.harness.workflow_cls)
        assert_packets_valid(self.harness.workdir)
        return outcome

    def answer(self, request: Any) -> None:
        status, text = self.agents.reply(request.prompt, request.context)
        if status == "success":
            self.harness.respond(request.request_id, text)
        else:
            self.harness.respond(
                request.request_id,
                "",
                status="timeout" if status == "TIMEOUT" else "error",
                error_type=status,
                error_message=text,
            )

    def to_the_end(self, outcome: Any) -> Any:
        while outcome.status == "paused":
            self.waves.append([r.context["x_task_id"] for r in outcome.pending])
            self.requests += outcome.pending
            for request in outcome.pending:
                self.answer(request)
            outcome = self.checked(self.harness.resume())
        return outcome


def host_run(workdir: Path, agents: Subagents, clock: FakeClock | None = None) -> HostRun:
    return HostRun(harness(workdir, clock=clock), agents)


# -- reading the board -----------------------------------------------------------------


def ledger(workdir: Path) -> list[dict[str, Any]]:
    text = (workdir / ".board" / "ledger.ndjson").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def history_of(workdir: Path, task_id: str) -> list[tuple[str, Any]]:
    """(status, x_code) of every delta of ``task_id``, in ledger order."""
    return [(d["status"], d.get("x_code")) for d in ledger(workdir) if d["task_id"] == task_id]


def started(workdir: Path) -> list[tuple[str, int]]:
    """(task, attempt) of every start, in ledger order."""
    return [(d["task_id"], d["x_attempt"]) for d in ledger(workdir) if d["status"] == "in_progress"]


def assert_ledger_clean(workdir: Path) -> None:
    deltas = ledger(workdir)
    assert [d["x_seq"] for d in deltas] == list(range(1, len(deltas) + 1))
    ids = Counter(d["delta_id"] for d in deltas)
    assert [i for i, n in ids.items() if n > 1] == [], "a delta was appended twice"


def assert_packets_valid(workdir: Path) -> None:
    """Every packet on the board validates against the shipped schema."""
    validator = Draft7Validator(PACKET_SCHEMA, format_checker=FORMATS)
    packets = sorted((workdir / ".board" / "packets").glob("*.json"))
    for path in packets:
        errors = [f"{e.json_path}: {e.message}" for e in validator.iter_errors(read(path))]
        assert errors == [], f"{path.name}: {errors}"


def assert_requests_valid(workdir: Path, cls: Any) -> None:
    """Every request file the engine published validates against the workflow's schema."""
    validator = Draft7Validator(workflow_schemas(cls)["request"], format_checker=FORMATS)
    files = sorted((workdir / ".agent-requests").glob("*.json"))
    if (workdir / ".agent-request.json").exists():
        files.append(workdir / ".agent-request.json")
    assert files, "a paused run publishes its requests"
    for path in files:
        errors = [f"{e.json_path}: {e.message}" for e in validator.iter_errors(read(path))]
        assert errors == [], f"{path.name}: {errors}"


def read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def moment(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_the_schema_checks_enforce_formats() -> None:
    # Without the format checker's extras, "uuid" and "date-time" would pass unchecked.
    assert not FORMATS.conforms("T-1", "uuid")
    assert not FORMATS.conforms("2025-11-18", "date-time")


@pytest.fixture(autouse=True)
def no_real_sleeping(monkeypatch: pytest.MonkeyPatch) -> None:
    """The board waits on the injected clock; a real sleep here is a bug."""

    def refuse(seconds: float) -> None:
        raise AssertionError(f"time.sleep({seconds}) called: the fake clock must be used")

    monkeypatch.setattr(time, "sleep", refuse)


# A plan with three waves: T-2 (high) goes before T-1 (normal), whose lock scope contains
# T-2's; T-3 waits for T-2, T-5 for T-1; T-4 (low) conflicts with nobody.
WAVES_PLAN = [
    task("T-1", ["src"]),
    task("T-2", ["src/api.py"], priority="high"),
    task("T-3", ["docs/api.md"], dependencies=("T-2",)),
    task("T-4", ["CHANGELOG.md"], priority="low"),
    task("T-5", ["tests"], dependencies=("T-1",), priority="critical"),
]


# -- waves -----------------------------------------------------------------------------


def test_waves_start_by_priority_keep_conflicts_apart_and_follow_dependencies(
    tmp_path: Path,
) -> None:
    agents = Subagents()
    outcome = run_in_process(tmp_path, {"tasks": WAVES_PLAN}, agents)
    assert (outcome.status, outcome.exit_code) == ("completed", 0), outcome.message
    report = outcome.outputs["work"]
    assert report["waves"] == 3
    assert report["board"] == str(tmp_path / ".board")
    # Within a wave by priority (T-2 high before T-4 low); T-1 after T-2 released src/.
    assert started(tmp_path) == [("T-2", 1), ("T-4", 1), ("T-1", 1), ("T-3", 1), ("T-5", 1)]
    assert agents.asked == started(tmp_path)
    deltas = ledger(tmp_path)
    seq = {(d["task_id"], d["status"]): d["x_seq"] for d in deltas}
    assert seq[("T-2", "done")] < seq[("T-1", "in_progress")]
    assert seq[("T-1", "done")] < seq[("T-5", "in_progress")]
    assert seq[("T-2", "done")] < seq[("T-3", "in_progress")]
    assert outcome.outputs["tally"] == {"done": ["T-1", "T-2", "T-3", "T-4", "T-5"], "not_done": []}
    assert_ledger_clean(tmp_path)


def test_each_wave_is_one_pause_for_a_host(tmp_path: Path) -> None:
    run = host_run(tmp_path, Subagents())
    outcome = run.start({"tasks": WAVES_PLAN})
    assert outcome.status == "paused"
    (first,) = [r for r in outcome.pending if r.context["x_task_id"] == "T-2"]
    assert (first.agent_name, first.timeout_seconds, first.phase_name) == ("coder", 60, "work")
    assert first.context["x_attempt"] == 1
    assert first.context["x_task_title"] == "Do T-2"  # a host names the task by it
    assert first.context["x_board"] == str(tmp_path / ".board")
    assert first.context["x_packet"] == str(tmp_path / ".board" / "packets" / "T-2.1.json")
    outcome = run.to_the_end(outcome)
    assert outcome.status == "completed", outcome.message
    assert run.waves == [["T-2", "T-4"], ["T-1", "T-3"], ["T-5"]]
    agent_of = {r.context["x_task_id"]: r.agent_name for r in run.requests}
    assert agent_of == {
        "T-1": "coder",
        "T-2": "coder",
        "T-3": "writer",
        "T-4": "coder",
        "T-5": "coder",
    }
    assert outcome.outputs["work"]["tasks"]["T-3"]["status"] == "done"
    assert [a for t, a in run.agents.asked if t == "T-3"] == [1]
    assert_ledger_clean(tmp_path)


def test_a_packet_names_the_locks_held_and_the_constraints(tmp_path: Path) -> None:
    run_in_process(tmp_path, {"tasks": WAVES_PLAN}, Subagents())
    packet = read(tmp_path / ".board" / "packets" / "T-4.1.json")
    assert packet["global_objective"] == OBJECTIVE
    assert packet["task"] == WAVES_PLAN[3]
    held = {(lock["task_id"], lock["resource"]) for lock in packet["active_locks"]}
    assert held == {("T-2", "src/api.py"), ("T-4", "CHANGELOG.md")}
    assert {"kind": "constraint", "value": CONSTRAINTS[0]} in packet["context_package"]
    assert packet["required_output_schema"] == "subagent_result_v1"


def test_the_phase_output_lists_every_task(tmp_path: Path) -> None:
    plan = {("T-2", 1): "stray", ("T-4", 1): "TIMEOUT", ("T-4", 2): "TIMEOUT"}
    inputs = {"tasks": WAVES_PLAN, "max_attempts": 2}
    outcome = run_in_process(tmp_path, inputs, Subagents(plan))
    assert outcome.status == "completed", outcome.message
    tasks = outcome.outputs["work"]["tasks"]
    assert list(tasks) == ["T-1", "T-2", "T-3", "T-4", "T-5"]
    for task_id in ("T-1", "T-3", "T-5"):
        assert tasks[task_id]["status"] == "done"
        assert tasks[task_id]["attempts"] == 1
        assert tasks[task_id]["verdict"] == f"verdicts/{task_id}.1.json"
        assert tasks[task_id].get("code") is None
    assert tasks["T-2"]["status"] == "done" and tasks["T-2"]["attempts"] == 2
    assert tasks["T-2"]["verdict"] == "verdicts/T-2.2.json"
    assert tasks["T-4"]["status"] == "failed" and tasks["T-4"]["attempts"] == 2
    assert tasks["T-4"]["code"] == "TASK_TIMEOUT"
    assert tasks["T-4"].get("verdict") is None
    assert "gave up after 2 attempts" in tasks["T-4"]["reason"]
    assert outcome.outputs["tally"] == {"done": ["T-1", "T-2", "T-3", "T-5"], "not_done": ["T-4"]}


# -- the gateway and retries -----------------------------------------------------------


@pytest.mark.parametrize("mode", ["in-process", "host"])
def test_a_result_out_of_scope_is_blocked_then_reassigned(tmp_path: Path, mode: str) -> None:
    agents = Subagents({("T-1", 1): "stray"})
    inputs = {"tasks": [task("T-1", ["src/api.py"])]}
    if mode == "in-process":
        outcome = run_in_process(tmp_path, inputs, agents)
    else:
        run = host_run(tmp_path, agents)
        outcome = run.to_the_end(run.start(inputs))
        assert run.waves == [["T-1"], ["T-1"]]
    assert outcome.status == "completed", outcome.message
    assert history_of(tmp_path, "T-1") == [
        ("todo", None),
        ("in_progress", None),
        ("blocked", "SCOPE_VIOLATION"),
        ("todo", None),
        ("in_progress", None),
        ("done", None),
    ]
    assert agents.asked == [("T-1", 1), ("T-1", 2)]
    refused = read(tmp_path / ".board" / "verdicts" / "T-1.1.json")
    assert (refused["verdict"], refused["reason_code"]) == ("FAIL", "SCOPE_CONFLICT")
    assert refused["checks"]["scope_valid"] is False
    assert any("README.md" in m for m in refused["messages"])
    assert read(tmp_path / ".board" / "verdicts" / "T-1.2.json")["verdict"] == "PASS"
    stray = json.loads((tmp_path / ".board" / "results" / "T-1.1.json").read_text())
    assert [c["resource"] for c in stray["changes"]] == ["src/api.py", "README.md"]
    outcome_t1 = outcome.outputs["work"]["tasks"]["T-1"]
    assert (outcome_t1["status"], outcome_t1["attempts"]) == ("done", 2)
    worklog = [
        json.loads(line)
        for line in (tmp_path / ".board" / "worklogs" / "T-1.jsonl").read_text().splitlines()
    ]
    blocked = [e for e in worklog if e.get("code") == "SCOPE_VIOLATION"]
    assert len(blocked) == 1 and blocked[0]["actor"] == "orchestrator"
    assert_ledger_clean(tmp_path)


@pytest.mark.parametrize("mode", ["in-process", "host"])
@pytest.mark.parametrize("error_type", sorted(ERROR_CODES))
def test_an_error_answer_blocks_the_task_and_it_is_retried(
    tmp_path: Path, mode: str, error_type: str
) -> None:
    agents = Subagents({("T-1", 1): error_type})
    inputs = {"tasks": [task("T-1", ["src/api.py"]), task("T-2", ["docs"])]}
    if mode == "in-process":
        outcome = run_in_process(tmp_path, inputs, agents)
    else:
        run = host_run(tmp_path, agents)
        outcome = run.to_the_end(run.start(inputs))
        assert run.waves == [["T-1", "T-2"], ["T-1"]]
    assert outcome.status == "completed", outcome.message
    code = ERROR_CODES[error_type]
    assert history_of(tmp_path, "T-1") == [
        ("todo", None),
        ("in_progress", None),
        ("blocked", code),
        ("todo", None),
        ("in_progress", None),
        ("done", None),
    ]
    (blocked,) = [d for d in ledger(tmp_path) if d["status"] == "blocked"]
    assert error_type in blocked["reason"]
    if error_type == "TIMEOUT":
        assert blocked["timed_out"] is True
    else:
        assert "timed_out" not in blocked
    assert not (tmp_path / ".board" / "verdicts" / "T-1.1.json").exists()
    assert agents.asked.count(("T-2", 1)) == 1 and agents.asked.count(("T-1", 2)) == 1
    assert outcome.outputs["work"]["tasks"]["T-1"]["attempts"] == 2
    assert_ledger_clean(tmp_path)


@pytest.mark.parametrize("behaviour", sorted(REFUSED))
def test_every_refused_result_blocks_with_its_code_and_is_reassigned(
    tmp_path: Path, behaviour: str
) -> None:
    code, reason_code, failed_check = REFUSED[behaviour]
    agents = Subagents({("T-1", 1): behaviour})
    outcome = run_in_process(tmp_path, {"tasks": [task("T-1", ["src"])]}, agents)
    assert outcome.status == "completed", outcome.message
    assert history_of(tmp_path, "T-1")[2:] == [
        ("blocked", code),
        ("todo", None),
        ("in_progress", None),
        ("done", None),
    ]
    verdict = read(tmp_path / ".board" / "verdicts" / "T-1.1.json")
    assert (verdict["verdict"], verdict["reason_code"]) == ("FAIL", reason_code)
    if failed_check is not None:
        assert verdict["checks"][failed_check] is False
    assert agents.asked == [("T-1", 1), ("T-1", 2)]
    # The answer is kept as received, and a secret never reaches the ledger.
    raw = (tmp_path / ".board" / "results" / "T-1.1.json").read_text()
    assert ("AKIAIOSFODNN7EXAMPLE" in raw) is (behaviour == "secret")
    assert "AKIAIOSFODNN7EXAMPLE" not in (tmp_path / ".board" / "ledger.ndjson").read_text()


def test_a_dependency_cycle_fails_the_run_before_anything_is_created(tmp_path: Path) -> None:
    tasks = [
        task("T-1", ["src"], dependencies=("T-2",)),
        task("T-2", ["docs"], dependencies=("T-1",)),
    ]
    agents = Subagents()
    outcome = run_in_process(tmp_path, {"tasks": tasks}, agents)
    assert (outcome.status, outcome.exit_code) == ("failed", 1)
    assert "cycle: T-1 -> T-2 -> T-1" in outcome.message, outcome.message
    assert not (tmp_path / ".board" / "ledger.ndjson").exists()
    assert agents.asked == []


def test_out_of_attempts_fails_cancels_dependents_and_still_completes(tmp_path: Path) -> None:
    plan = {("T-2", 1): "TIMEOUT", ("T-2", 2): "INVOCATION_FAILED"}
    tasks = [
        task("T-1", ["src/api.py"]),
        task("T-2", ["src/storage.py"]),
        task("T-3", ["docs/api.md"], dependencies=("T-2",)),
        task("T-4", ["docs/notes.md"], dependencies=("T-3",)),
        task("T-5", ["tests"], dependencies=("T-1",)),
    ]
    agents = Subagents(plan)
    outcome = run_in_process(tmp_path, {"tasks": tasks, "max_attempts": 2}, agents)
    assert (outcome.status, outcome.exit_code) == ("completed", 0), outcome.message
    report = outcome.outputs["work"]["tasks"]
    assert {t: (o["status"], o["attempts"]) for t, o in report.items()} == {
        "T-1": ("done", 1),
        "T-2": ("failed", 2),
        "T-3": ("canceled", 0),
        "T-4": ("canceled", 0),
        "T-5": ("done", 1),
    }
    assert report["T-2"]["code"] == "NON_COMPLIANT"  # the last attempt's code
    assert "dependency T-2 is failed" in report["T-3"]["reason"]
    assert "dependency T-3 is canceled" in report["T-4"]["reason"]
    assert history_of(tmp_path, "T-3") == [("todo", None), ("canceled", "DEPENDENCY_NOT_MET")]
    assert history_of(tmp_path, "T-4") == [("todo", None), ("canceled", "DEPENDENCY_NOT_MET")]
    assert [t for t, _ in agents.asked].count("T-2") == 2
    assert not {"T-3", "T-4"} & {t for t, _ in agents.asked}
    assert outcome.outputs["tally"]["not_done"] == ["T-2", "T-3", "T-4"]
    assert not list((tmp_path / ".board" / "packets").glob("T-3.*"))
    assert_ledger_clean(tmp_path)


def test_a_canceled_dependent_is_reported_with_dependency_not_met(tmp_path: Path) -> None:
    tasks = [task("T-1", ["src"]), task("T-2", ["docs"], dependencies=("T-1",))]
    outcome = run_in_process(
        tmp_path, {"tasks": tasks, "max_attempts": 1}, Subagents({("T-1", 1): "TIMEOUT"})
    )
    assert outcome.status == "completed", outcome.message
    assert outcome.outputs["work"]["tasks"]["T-2"]["status"] == "canceled"
    assert outcome.outputs["work"]["tasks"]["T-2"].get("code") == "DEPENDENCY_NOT_MET"


@pytest.mark.parametrize("mode", ["in-process", "host"])
def test_agent_not_found_fails_the_run(tmp_path: Path, mode: str) -> None:
    agents = Subagents({("T-1", 1): "AGENT_NOT_FOUND"})
    inputs = {"tasks": [task("T-1", ["src"]), task("T-2", ["docs"])]}
    if mode == "in-process":
        outcome = run_in_process(tmp_path, inputs, agents)
    else:
        run = host_run(tmp_path, agents)
        outcome = run.to_the_end(run.start(inputs))
    assert (outcome.status, outcome.exit_code) == ("failed", 1)
    assert "AGENT_NOT_FOUND" in outcome.message and "phase 1 (work)" in outcome.message
    state = read(tmp_path / ".board-flow-state.json")
    assert state["phase_name"] == "work"
    assert not (tmp_path / ".agent-requests").exists() or not list(
        (tmp_path / ".agent-requests").iterdir()
    )
    assert ("T-1", 2) not in agents.asked


# -- retry_after_ms --------------------------------------------------------------------


class SleepingClock(FakeClock):
    """A fake clock that also records every wait."""

    def __init__(self) -> None:
        super().__init__()
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        super().sleep(seconds)


def test_retry_after_ms_is_waited_on_the_clock_before_the_reassignment(tmp_path: Path) -> None:
    clock = SleepingClock()
    start = clock.now()
    tasks = [
        task("T-1", ["src/api.py"]),
        task("T-2", ["docs"]),
        task("T-3", ["tests"], dependencies=("T-2",)),
    ]
    inputs = {"tasks": tasks, "retry_after_ms": 1500}
    outcome = run_in_process(tmp_path, inputs, Subagents({("T-1", 1): "TIMEOUT"}), clock=clock)
    assert outcome.status == "completed", outcome.message
    deltas = ledger(tmp_path)
    (requeue,) = [d for d in deltas if d["task_id"] == "T-1" and d["status"] == "todo"][1:]
    assert requeue["retry_after_ms"] == 1500
    (again,) = [d for d in deltas if d["delta_id"] == "T-1/2/in_progress"]
    assert moment(again["x_at"]) - moment(requeue["x_at"]) >= timedelta(milliseconds=1500)
    # T-3 was ready while T-1 rested: it started without waiting, in the wave before.
    (t3,) = [d for d in deltas if d["delta_id"] == "T-3/1/in_progress"]
    assert t3["x_seq"] < again["x_seq"] and t3["x_at"] == requeue["x_at"]
    assert clock.slept and sum(clock.slept) * 1000 >= 1500
    assert clock.now() - start >= timedelta(milliseconds=1500)


def test_without_retry_after_ms_nothing_waits(tmp_path: Path) -> None:
    clock = SleepingClock()
    inputs = {"tasks": [task("T-1", ["src"])]}
    outcome = run_in_process(tmp_path, inputs, Subagents({("T-1", 1): "TIMEOUT"}), clock=clock)
    assert outcome.status == "completed", outcome.message
    assert clock.slept == []
    assert started(tmp_path) == [("T-1", 1), ("T-1", 2)]


# -- replay ----------------------------------------------------------------------------


def test_resuming_after_each_pause_never_asks_an_answered_task_again(tmp_path: Path) -> None:
    plan = {("T-2", 1): "stray", ("T-4", 1): "TIMEOUT", ("T-1", 1): "PARSE_ERROR"}
    agents = Subagents(plan)
    run = host_run(tmp_path, agents)
    outcome = run.start({"tasks": WAVES_PLAN})
    requested: list[tuple[str, int]] = []
    waves = []
    while outcome.status == "paused":
        pending = outcome.pending
        waves.append([r.context["x_task_id"] for r in pending])
        requested += [(r.context["x_task_id"], r.context["x_attempt"]) for r in pending]
        # A resume with nothing answered changes nothing and asks nothing new.
        board_before = (tmp_path / ".board" / "ledger.ndjson").read_bytes()
        again = run.checked(run.harness.resume())
        assert [r.request_id for r in again.pending] == [r.request_id for r in pending]
        assert (tmp_path / ".board" / "ledger.ndjson").read_bytes() == board_before
        # One answer of several: the others stay pending, nothing is asked again.
        run.answer(pending[0])
        if len(pending) > 1:
            partial = run.checked(run.harness.resume())
            assert [r.request_id for r in partial.pending] == [r.request_id for r in pending[1:]]
            assert (tmp_path / ".board" / "ledger.ndjson").read_bytes() == board_before
        for request in pending[1:]:
            run.answer(request)
        outcome = run.checked(run.harness.resume())
    assert outcome.status == "completed", outcome.message
    # T-2 and T-4 again (T-2 still holds src/api.py first), then T-1 and T-3, T-1 again.
    assert waves == [["T-2", "T-4"], ["T-2", "T-4"], ["T-1", "T-3"], ["T-1"], ["T-5"]]
    assert [k for k, n in Counter(requested).items() if n > 1] == []
    assert sorted(requested) == sorted(started(tmp_path))
    assert sorted(agents.asked) == sorted(requested)
    assert_ledger_clean(tmp_path)
    state = read(Path(outcome.history_path))
    statuses = Counter(r["status"] for r in state["agent_requests"])
    assert statuses == Counter({"completed": 6, "failed": 2})  # the TIMEOUT, the PARSE_ERROR


CHANGES = {
    "a task added": [task("T-1", ["src"]), task("T-2", ["docs"]), task("T-3", ["tests"])],
    "a task removed": [task("T-1", ["src"])],
    "a task redefined": [task("T-1", ["src"]), task("T-2", ["docs/other.md"])],
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_task_list_changed_under_a_paused_run_is_refused(tmp_path: Path, change: str) -> None:
    SHIFTING_TASKS[:] = [task("T-1", ["src"]), task("T-2", ["docs"])]
    shifting = harness(tmp_path, cls=Shifting)
    outcome = shifting.run()
    assert outcome.status == "paused"
    agents = Subagents()
    for request in outcome.pending:
        _, text = agents.reply(request.prompt, request.context)
        shifting.respond(request.request_id, text)
    SHIFTING_TASKS[:] = CHANGES[change]
    try:
        outcome = shifting.resume()
    finally:
        SHIFTING_TASKS[:] = []
    assert (outcome.status, outcome.exit_code) == ("failed", 1), outcome.message
    assert "same asks and steps" in outcome.message, outcome.message
    assert "phase 'work'" in outcome.message


# -- the watchdog ----------------------------------------------------------------------


@pytest.mark.parametrize("how", ["Board.watchdog", "time_out_stale_tasks"])
def test_the_watchdog_makes_the_next_resume_reassign_the_task(tmp_path: Path, how: str) -> None:
    clock = FakeClock()
    agents = Subagents()
    run = host_run(tmp_path, agents, clock)
    tasks = [task("T-1", ["src"]), task("T-2", ["docs"], timeout_seconds=600)]
    outcome = run.start({"tasks": tasks})
    assert outcome.status == "paused"
    board = Board(tmp_path / ".board", clock=clock)
    # A heartbeat keeps T-1 alive past its start: 50 s later, 60 s of silence is not yet out.
    clock.advance(50)
    board.heartbeat("T-1", attempt=1)
    assert board.watchdog(now=clock.now() + timedelta(seconds=60)) == []
    (t1,) = [r for r in outcome.pending if r.context["x_task_id"] == "T-1"]
    (t2,) = [r for r in outcome.pending if r.context["x_task_id"] == "T-2"]
    late = clock.now() + timedelta(seconds=61)
    if how == "Board.watchdog":
        timed_out = board.watchdog(now=late)
        run.harness.respond(
            t1.request_id,
            "",
            status="timeout",
            error_type="TIMEOUT",
            error_message=timed_out[0].reason,
        )
    else:
        timed_out = time_out_stale_tasks(board, tmp_path, now=late)
        assert (tmp_path / ".agent-responses" / f"{t1.request_id}.json").exists()
    assert [d.task_id for d in timed_out] == ["T-1"]
    blocked = ledger(tmp_path)[-1]
    assert (blocked["task_id"], blocked["status"], blocked["x_code"]) == (
        "T-1",
        "blocked",
        "TASK_TIMEOUT",
    )
    assert blocked["timed_out"] is True
    assert blocked["last_heartbeat_at"] == "2025-11-18T10:30:50.000Z"
    held = [(lock.task_id, lock.resource) for lock in board.lock_table()]
    assert held == [("T-2", "docs")], "the timeout released T-1's lock"
    run.answer(t2)
    outcome = run.checked(run.harness.resume())
    assert outcome.status == "paused"
    assert [(r.context["x_task_id"], r.context["x_attempt"]) for r in outcome.pending] == [
        ("T-1", 2)
    ]
    outcome = run.to_the_end(outcome)
    assert outcome.status == "completed", outcome.message
    assert history_of(tmp_path, "T-1") == [
        ("todo", None),
        ("in_progress", None),
        ("blocked", "TASK_TIMEOUT"),
        ("todo", None),
        ("in_progress", None),
        ("done", None),
    ]
    assert agents.asked.count(("T-1", 1)) == 0, "the timed-out attempt was never answered"
    assert_ledger_clean(tmp_path)


def test_a_late_answer_for_a_timed_out_attempt_changes_nothing(tmp_path: Path) -> None:
    clock = FakeClock()
    agents = Subagents()
    run = host_run(tmp_path, agents, clock)
    outcome = run.start({"tasks": [task("T-1", ["src"])]})
    (request,) = outcome.pending
    board = Board(tmp_path / ".board", clock=clock)
    assert len(board.watchdog(now=clock.now() + timedelta(seconds=61))) == 1
    # The subagent answers anyway (its answer arrives before the TIMEOUT would have).
    run.answer(request)
    outcome = run.checked(run.harness.resume())
    assert [(r.context["x_task_id"], r.context["x_attempt"]) for r in outcome.pending] == [
        ("T-1", 2)
    ]
    assert not (tmp_path / ".board" / "verdicts" / "T-1.1.json").exists()
    outcome = run.to_the_end(outcome)
    assert outcome.status == "completed", outcome.message
    assert outcome.outputs["work"]["tasks"]["T-1"]["attempts"] == 2
    assert_ledger_clean(tmp_path)


def test_the_report_round_trips_through_unstructure(tmp_path: Path) -> None:
    outcome = run_in_process(tmp_path, {"tasks": [task("T-1", ["src"])]}, Subagents())
    report = outcome.outputs["work"]
    assert unstructure(structure(report, DispatchReport, source="report")) == report
