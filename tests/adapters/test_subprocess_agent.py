"""The subprocess invoker against real child processes (``tests/fixtures/agents``).

Timeouts are fractions of a second; no test asserts on how long anything took.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator import AgentAnswer, AgentInvocationError, AgentInvoker, Workflow, phase
from orchestrator._errors import UsageError
from orchestrator.adapters.file_bridge import FileBridge
from orchestrator.adapters.subprocess_agent import SubprocessInvoker

pytestmark = pytest.mark.skipif(os.name != "posix", reason="process groups are POSIX")

AGENT = str(Path(__file__).parents[1] / "fixtures" / "agents" / "fake_agent.py")
PY = sys.executable


def agent(mode: str, *args: str) -> list[str]:
    return [PY, AGENT, mode, *args]


def shell(mode: str, *args: str) -> str:
    return shlex.join(agent(mode, *args))


def failure(invoker: SubprocessInvoker, agent_name: str = "writer", **kwargs: Any) -> Any:
    with pytest.raises(AgentInvocationError) as caught:
        invoker.invoke(agent_name, kwargs.pop("prompt", "hello"), **kwargs)
    return caught.value


def live_members(pgid: int) -> list[int]:
    """Processes of group ``pgid`` that are not zombies (orphaned zombies are init's)."""
    live = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        state, _ppid, group = stat.rsplit(")", 1)[1].split()[:3]
        if int(group) == pgid and state != "Z":
            live.append(int(entry.name))
    return live


def assert_group_gone(pid_file: Path) -> None:
    pid, pgid = map(int, pid_file.read_text().split())
    deadline = time.monotonic() + 5
    while live_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.02)  # SIGKILL is delivered asynchronously
    assert live_members(pgid) == []
    # the group leader was our child: reaped, not left a zombie
    with pytest.raises(ChildProcessError):
        os.waitpid(pgid, os.WNOHANG)
    assert pid


# -- success ---------------------------------------------------------------------------


def test_it_is_an_agent_invoker() -> None:
    assert isinstance(SubprocessInvoker(agent("upper")), AgentInvoker)


def test_the_prompt_goes_on_stdin_and_stdout_is_the_answer() -> None:
    answer = SubprocessInvoker(agent("upper")).invoke("writer", "write a haiku, café")
    assert answer == "WRITE A HAIKU, CAFÉ"
    assert isinstance(answer, AgentAnswer)
    assert answer.facts["exit_code"] == 0
    assert answer.facts["command"] == PY
    assert isinstance(answer.facts["duration_ms"], int) and answer.facts["duration_ms"] >= 0


def test_duration_is_measured_with_the_injected_clock() -> None:
    ticks = iter([10.0, 10.25])
    answer = SubprocessInvoker(agent("upper"), monotonic=lambda: next(ticks)).invoke("w", "x")
    assert isinstance(answer, AgentAnswer)
    assert answer.facts == {"exit_code": 0, "duration_ms": 250, "command": PY}


def test_a_shell_command_never_sees_the_prompt(tmp_path: Path) -> None:
    hostile = f"$(touch {tmp_path}/pwned); `touch {tmp_path}/pwned2` ' \" ; exit 9"
    invoker = SubprocessInvoker(shell("upper"), cwd=tmp_path)
    assert invoker.invoke("writer", hostile) == hostile.upper()
    assert list(tmp_path.iterdir()) == []
    assert invoker.invoke("writer", "x").facts["command"] == PY


def test_a_large_prompt_is_streamed_without_deadlock() -> None:
    prompt = "abc " * 300_000  # far more than a pipe buffer, both ways
    answer = SubprocessInvoker(agent("upper")).invoke("writer", prompt)
    assert answer == prompt.upper().rstrip()


def test_a_child_that_does_not_read_its_stdin_still_answers() -> None:
    answer = SubprocessInvoker(agent("ignore-stdin")).invoke("writer", "x" * 1_000_000)
    assert answer == "answered without reading"


def test_json_answer() -> None:
    answer = SubprocessInvoker(agent("json"), expect="json").invoke("critic", "four")
    assert json.loads(answer) == {"length": 4, "agent": "critic"}


def test_fenced_json_answer_is_unwrapped() -> None:
    answer = SubprocessInvoker(agent("fenced"), expect="json").invoke("critic", "one two three")
    assert answer == '{"words": 3}'


def test_fenced_json_is_left_alone_when_text_is_expected() -> None:
    answer = SubprocessInvoker(agent("fenced")).invoke("critic", "one")
    assert answer.startswith("Here it is:") and "```json" in answer


def test_json_may_be_expected_of_some_agents_only() -> None:
    invoker = SubprocessInvoker(agent("fenced"), expects={"critic": "json"})
    assert invoker.invoke("critic", "one") == '{"words": 1}'
    assert invoker.invoke("writer", "one").startswith("Here it is:")


# -- environment -----------------------------------------------------------------------


def test_environment_carries_agent_timeout_context_and_extra_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("INHERITED_VAR", "from parent")
    invoker = SubprocessInvoker(
        agent("env", "MY_VAR", "INHERITED_VAR"), env={"MY_VAR": "mine"}, timeout_seconds=30
    )
    context = {"output_path": "out.json", "x_run_id": "r1", "note": "é"}
    seen = json.loads(invoker.invoke("writer", "p", 120, context=context))
    assert seen == {
        "ORCHESTRATOR_AGENT_NAME": "writer",
        "ORCHESTRATOR_TIMEOUT_SECONDS": "30",  # the invoker's cap, below the request's 120
        "ORCHESTRATOR_CONTEXT": json.dumps(context, sort_keys=True),
        "MY_VAR": "mine",
        "INHERITED_VAR": "from parent",
    }


def test_no_context_means_no_context_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCHESTRATOR_CONTEXT", '{"stale": true}')
    seen = json.loads(SubprocessInvoker(agent("env")).invoke("critic", "p", 7))
    assert seen["ORCHESTRATOR_CONTEXT"] is None
    assert seen["ORCHESTRATOR_TIMEOUT_SECONDS"] == "7"


def test_a_context_that_is_not_json_is_a_validation_error() -> None:
    error = failure(SubprocessInvoker(agent("env")), context={"when": object()})
    assert error.error_type == "VALIDATION_ERROR"


# -- per-agent commands ----------------------------------------------------------------


def test_each_agent_may_have_its_own_command() -> None:
    invoker = SubprocessInvoker(commands={"writer": agent("upper"), "critic": "printf critic"})
    assert invoker.invoke("writer", "draft") == "DRAFT"
    critic = invoker.invoke("critic", "draft")
    assert critic == "critic"
    assert critic.facts["command"] == "printf"
    error = failure(invoker, "editor")
    assert error.error_type == "AGENT_NOT_FOUND"
    assert "'editor'" in str(error) and "critic" in str(error)


def test_the_default_command_answers_agents_without_their_own() -> None:
    invoker = SubprocessInvoker(agent("upper"), commands={"critic": "printf critic"})
    assert invoker.invoke("editor", "edit") == "EDIT"
    assert invoker.invoke("critic", "edit") == "critic"


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"command": []},
        {"command": "  "},
        {"command": "x", "expect": "yaml"},
        {"command": "x", "expects": {"critic": "xml"}},
        {"command": "x", "max_output_bytes": 0},
        {"command": "x", "timeout_seconds": 0},
    ],
)
def test_bad_configuration_is_refused_at_once(kwargs: dict[str, Any]) -> None:
    with pytest.raises(UsageError):
        SubprocessInvoker(**kwargs)


# -- timeouts --------------------------------------------------------------------------


@pytest.mark.slow
def test_timeout_kills_a_sleeping_child(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    invoker = SubprocessInvoker(agent("sleep", "60", str(pid_file)))
    error = failure(invoker, timeout_seconds=1)
    assert error.error_type == "TIMEOUT"
    assert "within 1 s" in str(error)
    assert_group_gone(pid_file)


@pytest.mark.slow
def test_timeout_kills_a_shell_grandchild_that_holds_stdout(tmp_path: Path) -> None:
    # The shell waits for its background child, which keeps stdout open and sleeps.
    pid_file = tmp_path / "pid"
    invoker = SubprocessInvoker(f"{shell('sleep', '60', str(pid_file))} & echo partial; wait")
    error = failure(invoker, timeout_seconds=1)
    assert error.error_type == "TIMEOUT"
    pid, pgid = map(int, pid_file.read_text().split())
    assert pid != pgid  # it was a grandchild, in the shell's group
    assert_group_gone(pid_file)


def test_a_leftover_holding_stdout_does_not_hold_the_answer(tmp_path: Path) -> None:
    """The shell answers and exits, leaving a child that keeps stdout open: the answer
    is what the shell printed, taken a moment after it exited (not at the timeout), and
    the leftover is killed."""
    pid_file = tmp_path / "pid"
    wait_for_pid = f"while [ ! -s {shlex.quote(str(pid_file))} ]; do sleep 0.01; done"
    invoker = SubprocessInvoker(
        f"{shell('sleep', '60', str(pid_file))} & {wait_for_pid}; echo the answer"
    )
    started = time.monotonic()
    answer = invoker.invoke("writer", "hello", timeout_seconds=30)
    assert time.monotonic() - started < 10
    assert answer == "the answer"
    pid, pgid = map(int, pid_file.read_text().split())
    assert pid != pgid
    assert_group_gone(pid_file)


def test_the_invoker_timeout_caps_the_request_timeout() -> None:
    invoker = SubprocessInvoker(agent("sleep", "60"), timeout_seconds=0.3)
    error = failure(invoker, timeout_seconds=120)
    assert error.error_type == "TIMEOUT"
    assert "within 0.3 s" in str(error)


# -- failures --------------------------------------------------------------------------


def test_a_crash_reports_the_exit_code_and_only_the_tail_of_stderr(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SECRET_TOKEN", "hunter2")
    error = failure(SubprocessInvoker(agent("crash"), env={"API_KEY": "sk-123"}))
    message = str(error)
    assert error.error_type == "INVOCATION_FAILED"
    assert "exited with code 3" in message
    assert message.rstrip().endswith("fatal: the model refused the request")
    assert message.count("noise line") < 200  # a tail, not the 1000 lines
    assert "hunter2" not in message and "sk-123" not in message


def test_a_signal_death_is_named() -> None:
    error = failure(SubprocessInvoker(agent("sigkill")))
    assert error.error_type == "INVOCATION_FAILED"
    assert "killed by SIGKILL" in str(error)


def test_a_missing_program_cannot_start(tmp_path: Path) -> None:
    error = failure(SubprocessInvoker([str(tmp_path / "no-such-agent"), "-p"]))
    assert error.error_type == "INVOCATION_FAILED"
    assert "cannot start" in str(error) and "no-such-agent" in str(error)


def test_a_program_that_is_not_executable_cannot_start(tmp_path: Path) -> None:
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    error = failure(SubprocessInvoker([str(script)]))
    assert error.error_type == "INVOCATION_FAILED"
    assert "cannot start" in str(error) and "agent.sh" in str(error)


def test_a_missing_working_directory_is_named(tmp_path: Path) -> None:
    error = failure(SubprocessInvoker(agent("upper"), cwd=tmp_path / "gone"))
    assert error.error_type == "INVOCATION_FAILED"
    assert "cannot start" in str(error) and "gone" in str(error)


def test_the_command_fact_skips_shell_variable_assignments() -> None:
    answer = SubprocessInvoker(f"MODEL=small {shell('upper')}").invoke("writer", "x")
    assert answer.facts["command"] == PY


def test_stragglers_left_after_a_clean_exit_are_killed(tmp_path: Path) -> None:
    # The answer comes at once; a background child, stdout closed, would live on.
    pid_file = tmp_path / "pid"
    sleeper = shell("sleep", "60", str(pid_file))
    command = (
        f"{sleeper} >/dev/null 2>&1 </dev/null & "
        f"while [ ! -s {shlex.quote(str(pid_file))} ]; do sleep 0.01; done; echo done"
    )
    assert SubprocessInvoker(command).invoke("writer", "x", 20) == "done"
    assert_group_gone(pid_file)


def test_a_shell_command_that_is_not_found_fails_with_127() -> None:
    error = failure(SubprocessInvoker("no-such-agent-xyz --print"))
    assert error.error_type == "INVOCATION_FAILED"
    assert "127" in str(error) and "no-such-agent-xyz" in str(error)


@pytest.mark.parametrize(
    ("mode", "expect", "words"),
    [
        ("bad-utf8", "text", "not UTF-8"),
        ("empty", "text", "printed nothing"),
        ("empty", "json", "printed nothing"),
        ("prose", "json", "not print a JSON document"),
    ],
)
def test_garbage_output_is_a_parse_error(mode: str, expect: Any, words: str) -> None:
    error = failure(SubprocessInvoker(agent(mode), expect=expect))
    assert error.error_type == "PARSE_ERROR"
    assert words in str(error)


def test_output_over_the_cap_stops_the_child() -> None:
    invoker = SubprocessInvoker(agent("flood"), max_output_bytes=100_000, timeout_seconds=20)
    error = failure(invoker)
    assert error.error_type == "PARSE_ERROR"
    assert "more than 100000 bytes" in str(error)


# -- end to end ------------------------------------------------------------------------

LONG = (
    "Please answer carefully and completely; "
    "this sentence pads the prompt past the request contract's minimum length. "
)


class Review(Workflow):
    name = "subprocess-review"
    agents = ("writer", "critic")

    @phase(1)
    def draft(self, ctx: Any) -> dict[str, Any]:
        return {"text": str(ctx.ask("writer", LONG + "Topic: pipes"))}

    @phase(2)
    def critique(self, ctx: Any) -> dict[str, Any]:
        verdict = json.loads(ctx.ask("critic", LONG + ctx.output("draft")["text"]))
        return {"verdict": verdict}


def test_a_two_phase_workflow_runs_to_completion_through_real_processes(tmp_path: Path) -> None:
    from orchestrator import Engine

    invoker = SubprocessInvoker(
        commands={"writer": agent("upper"), "critic": agent("fenced")},
        expects={"critic": "json"},
        timeout_seconds=20,
    )
    engine = Engine(Review, bridge=FileBridge(tmp_path, Review.name), invoker=invoker)
    outcome = engine.start(workflow_ref=f"{__name__}:Review", workdir=tmp_path)
    assert outcome.status == "completed", outcome.message
    assert outcome.outputs["draft"]["text"] == (LONG + "Topic: pipes").upper().rstrip()
    assert outcome.outputs["critique"]["verdict"]["words"] > 10
    histories = list((tmp_path / ".orchestrator" / "runs").glob("*/state.json"))
    assert len(histories) == 1
    records = json.loads(histories[0].read_text())["agent_requests"]
    assert [r["agent_name"] for r in records] == ["writer", "critic"]
    for record in records:
        metadata = record["x_response"]["metadata"]
        assert metadata["x_exit_code"] == 0
        assert metadata["x_command"] == PY
        assert isinstance(metadata["x_duration_ms"], int)
