"""The public surface: a pinned ``__all__``, lazy imports, the agent bridge's mock API, fixtures."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta

import orchestrator
from orchestrator.testing import AgentInvocationError, FakeClock, MockAgentInvoker

PUBLIC = [
    "AgentAnswer",
    "AgentFailedError",
    "AgentInvocationError",
    "AgentInvoker",
    "AgentRequest",
    "AgentResponse",
    "AnswerRefusedError",
    "Ask",
    "Board",
    "BoardError",
    "CheckpointState",
    "Child",
    "ChildRunFailedError",
    "Clock",
    "CommandFailedError",
    "CommandResult",
    "ContractError",
    "DispatchReport",
    "Engine",
    "ErrorCode",
    "ErrorType",
    "Goto",
    "HostRequired",
    "InstanceBusyError",
    "NonDeterminismError",
    "OrchestratorError",
    "Outcome",
    "PhaseContext",
    "PhaseResult",
    "Priority",
    "RequestStatus",
    "ResponseMetadata",
    "ResponseRejectedError",
    "RetryPolicy",
    "RunFailedError",
    "StepFailedError",
    "StepTimeoutError",
    "Task",
    "TaskStatus",
    "TaskType",
    "UnknownVersionError",
    "Workflow",
    "WorkflowDefinitionError",
    "bridge_schemas",
    "phase",
    "workflow_schemas",
]


def test_all_is_pinned_sorted_and_resolvable() -> None:
    assert orchestrator.__all__ == PUBLIC == sorted(PUBLIC)
    for name in PUBLIC:
        assert getattr(orchestrator, name) is not None


def test_importing_the_package_imports_no_dependency() -> None:
    code = (
        "import sys, orchestrator; deps = ('attrs', 'attr', 'cattrs', 'filelock', 'tenacity'); "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in deps)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", "import json;" + code], capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == []


def test_errors_derive_from_the_root_and_matching_builtins() -> None:
    assert issubclass(orchestrator.ContractError, ValueError)
    assert issubclass(orchestrator.WorkflowDefinitionError, TypeError)
    for name in PUBLIC:
        value = getattr(orchestrator, name)
        if isinstance(value, type) and name.endswith("Error"):
            assert issubclass(value, orchestrator.OrchestratorError), name
    assert issubclass(orchestrator.HostRequired, BaseException)
    assert not issubclass(orchestrator.HostRequired, Exception)


def test_mock_invoker_has_the_seed_api() -> None:
    mock = MockAgentInvoker({"architectural-reviewer": "{}"})
    mock.add_response_from_dict("architectural-reviewer", {"overall_confidence": 0.92})
    assert json.loads(mock.invoke("architectural-reviewer", "p", timeout_seconds=60, extra=1)) == {
        "overall_confidence": 0.92
    }
    assert mock.get_invocations("architectural-reviewer") == [
        {
            "agent_name": "architectural-reviewer",
            "prompt": "p",
            "timeout_seconds": 60,
            "kwargs": {"extra": 1},
        }
    ]
    try:
        mock.invoke("nobody", "p")
    except AgentInvocationError as exc:
        assert "nobody" in str(exc) and exc.error_type == "AGENT_NOT_FOUND"
    else:  # pragma: no cover
        raise AssertionError("expected AgentInvocationError")
    assert len(mock.get_invocations()) == 2
    mock.reset()
    assert mock.get_invocations() == []


def test_the_pytest_plugin_provides_the_fixtures(
    mock_invoker: MockAgentInvoker, fake_clock: FakeClock
) -> None:
    assert isinstance(mock_invoker, MockAgentInvoker)
    start = fake_clock.now()
    fake_clock.advance(5)
    assert (fake_clock.now() - start).total_seconds() == 5


def test_the_fake_clock_moves_by_seconds_or_by_a_timedelta(fake_clock: FakeClock) -> None:
    start = fake_clock.now()
    fake_clock.advance(timedelta(seconds=3))
    fake_clock.advance(2.5)
    fake_clock.sleep(timedelta(minutes=1))
    assert fake_clock.now() - start == timedelta(seconds=65.5)


#: Names of the public modules besides the package root; moving code between wings must
#: keep every one of them importable where it was.
PUBLIC_MODULE_NAMES = {
    "orchestrator.testing": [
        "AgentInvocationError",
        "FakeClock",
        "MockAgentInvoker",
        "ReplayReport",
        "SequentialIds",
        "WorkflowHarness",
        "replay_run",
    ],
    "orchestrator.otel": [
        "OtlpExportError",
        "RunTrace",
        "Span",
        "SpanEvent",
        "otlp_exporter",
        "otlp_json_bytes",
        "otlp_request",
        "replay_spans",
        "run_trace",
    ],
    "orchestrator.adapters.file_bridge": ["FileBridge", "FileBridgeInvoker"],
    "orchestrator.adapters.memory": ["MemoryBridge"],
    "orchestrator.adapters.subprocess_agent": ["SubprocessInvoker", "run_command"],
    "orchestrator.adapters.http_agent": ["HttpInvoker"],
    "orchestrator.cli": ["entry"],
    "orchestrator.cli.main": ["entry", "main"],
}


def test_public_modules_keep_their_names() -> None:
    import importlib

    missing = [
        f"{module}.{name}"
        for module, names in PUBLIC_MODULE_NAMES.items()
        for name in names
        if not hasattr(importlib.import_module(module), name)
    ]
    assert missing == []
    assert orchestrator.testing.__all__ == [  # type: ignore[attr-defined]
        n for n in PUBLIC_MODULE_NAMES["orchestrator.testing"] if n != "SequentialIds"
    ]
    assert orchestrator.otel.__all__ == PUBLIC_MODULE_NAMES["orchestrator.otel"]  # type: ignore[attr-defined]


def test_the_console_script_of_earlier_installs_still_resolves() -> None:
    """``orchestrator.cli:entry`` was the console script before the CLI became a package."""
    from orchestrator.cli import entry
    from orchestrator.cli.main import entry as main_entry

    assert entry is main_entry
