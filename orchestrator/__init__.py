"""checkpoint-orchestrator: agent workflows that survive process exits.

Subclass :class:`Workflow`, declare phases with :func:`phase`, and call agents with
``ctx.ask``. When no agent can be called in-process, the engine saves its state, writes
``.agent-request.json`` and exits with code 42; ``orchestrate resume`` carries on where
it stopped once the host has written ``.agent-response.json``.

Public names are imported on first use, so that ``import orchestrator`` stays cheap for
the command line.

The wings, each a package (``docs/architecture.md``): ``formats`` (the wire formats),
``storage`` (bytes to disk and back), ``evidence`` (what a run leaves behind),
``engine``, ``board`` (the task board), ``evals`` (agent regression runs), ``adapters``
(the ports' implementations) and ``cli`` (``orchestrate``). The base modules:
``_errors`` (the exception hierarchy), ``_ports`` (the ports, with the task board's in
``_board_ports``), ``_text`` (text made safe to print), ``_http`` (what the HTTP clients
share). The face: this module, ``testing`` (the testing helpers), ``_pytest_plugin``
(them as pytest fixtures), ``otel`` (the OpenTelemetry export) and ``__main__``
(``python -m orchestrator``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .engine.dispatcher import install_dispatcher as _install_dispatcher

__version__ = "0.1.0"


def _board_dispatcher() -> BoardDispatcher:
    """``ctx.dispatch`` runs on the task board, imported when a phase first dispatches:
    the board is built on the engine, so the engine never imports it."""
    from .board.dispatch import BoardDispatcher

    return BoardDispatcher()


_install_dispatcher(_board_dispatcher)

_EXPORTS = {
    "AgentAnswer": "_ports",
    "AgentFailedError": "_errors",
    "AnswerRefusedError": "_errors",
    "AgentInvocationError": "_errors",
    "AgentInvoker": "_ports",
    "AgentRequest": "formats.bridge",
    "AgentResponse": "formats.bridge",
    "Ask": "engine.workflow",
    "Board": "board.board",
    "BoardError": "_errors",
    "CheckpointState": "formats.bridge",
    "Child": "engine.children",
    "ChildRunFailedError": "_errors",
    "Clock": "_ports",
    "CommandFailedError": "_errors",
    "CommandResult": "engine.commands",
    "ContractError": "_errors",
    "DispatchReport": "board.dispatch",
    "Engine": "engine.engine",
    "ErrorCode": "formats.board_documents",
    "ErrorType": "formats.bridge",
    "Goto": "engine.workflow",
    "HostRequired": "_ports",
    "InstanceBusyError": "_errors",
    "NonDeterminismError": "_errors",
    "OrchestratorError": "_errors",
    "Outcome": "engine.record",
    "PhaseContext": "engine.context",
    "PhaseResult": "engine.workflow",
    "Priority": "formats.board_documents",
    "RequestStatus": "formats.bridge",
    "ResponseMetadata": "formats.bridge",
    "ResponseRejectedError": "_errors",
    "RetryPolicy": "engine.workflow",
    "RunFailedError": "_errors",
    "StepFailedError": "_errors",
    "StepTimeoutError": "_errors",
    "Task": "formats.board_documents",
    "TaskStatus": "formats.board_documents",
    "TaskType": "formats.board_documents",
    "UnknownVersionError": "_errors",
    "Workflow": "engine.workflow",
    "WorkflowDefinitionError": "_errors",
    "bridge_schemas": "formats.workflow_schemas",
    "phase": "engine.workflow",
    "workflow_schemas": "formats.workflow_schemas",
}

__all__ = [
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

if TYPE_CHECKING:
    from ._errors import (
        AgentFailedError,
        AgentInvocationError,
        AnswerRefusedError,
        BoardError,
        ChildRunFailedError,
        CommandFailedError,
        ContractError,
        InstanceBusyError,
        NonDeterminismError,
        OrchestratorError,
        ResponseRejectedError,
        RunFailedError,
        StepFailedError,
        StepTimeoutError,
        UnknownVersionError,
        WorkflowDefinitionError,
    )
    from ._ports import AgentAnswer, AgentInvoker, Clock, HostRequired
    from .board.board import Board
    from .board.dispatch import BoardDispatcher, DispatchReport
    from .engine.children import Child
    from .engine.commands import CommandResult
    from .engine.context import PhaseContext
    from .engine.engine import Engine
    from .engine.record import Outcome
    from .engine.workflow import Ask, Goto, PhaseResult, RetryPolicy, Workflow, phase
    from .formats.board_documents import ErrorCode, Priority, Task, TaskStatus, TaskType
    from .formats.bridge import (
        AgentRequest,
        AgentResponse,
        CheckpointState,
        ErrorType,
        RequestStatus,
        ResponseMetadata,
    )
    from .formats.workflow_schemas import bridge_schemas, workflow_schemas


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"orchestrator.{module_name}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
