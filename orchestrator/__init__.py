"""checkpoint-orchestrator: agent workflows that survive process exits.

Subclass :class:`Workflow`, declare phases with :func:`phase`, and call agents with
``ctx.ask``. When no agent can be called in-process, the engine saves its state, writes
``.agent-request.json`` and exits with code 42; ``orchestrate resume`` carries on where
it stopped once the host has written ``.agent-response.json``.

Public names are imported on first use, so that ``import orchestrator`` stays cheap for
the command line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "AgentAnswer": "_ports",
    "AgentFailedError": "_errors",
    "AgentInvocationError": "_errors",
    "AgentInvoker": "_ports",
    "AgentRequest": "_bridge",
    "AgentResponse": "_bridge",
    "Ask": "_workflow",
    "Board": "_board",
    "BoardError": "_errors",
    "CheckpointState": "_bridge",
    "Clock": "_ports",
    "ContractError": "_errors",
    "DispatchReport": "_dispatch",
    "Engine": "_engine",
    "ErrorCode": "_board_contracts",
    "ErrorType": "_bridge",
    "HostRequired": "_ports",
    "InstanceBusyError": "_errors",
    "NonDeterminismError": "_errors",
    "OrchestratorError": "_errors",
    "Outcome": "_engine",
    "PhaseContext": "_engine",
    "PhaseResult": "_workflow",
    "Priority": "_board_contracts",
    "RequestStatus": "_bridge",
    "ResponseMetadata": "_bridge",
    "ResponseRejectedError": "_errors",
    "RunFailedError": "_errors",
    "StepFailedError": "_errors",
    "Task": "_board_contracts",
    "TaskStatus": "_board_contracts",
    "TaskType": "_board_contracts",
    "UnknownVersionError": "_errors",
    "Workflow": "_workflow",
    "WorkflowDefinitionError": "_errors",
    "bridge_schemas": "_schemas",
    "phase": "_workflow",
    "workflow_schemas": "_schemas",
}

__all__ = [
    "AgentAnswer",
    "AgentFailedError",
    "AgentInvocationError",
    "AgentInvoker",
    "AgentRequest",
    "AgentResponse",
    "Ask",
    "Board",
    "BoardError",
    "CheckpointState",
    "Clock",
    "ContractError",
    "DispatchReport",
    "Engine",
    "ErrorCode",
    "ErrorType",
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
    "RunFailedError",
    "StepFailedError",
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
    from ._board import Board
    from ._board_contracts import ErrorCode, Priority, Task, TaskStatus, TaskType
    from ._bridge import (
        AgentRequest,
        AgentResponse,
        CheckpointState,
        ErrorType,
        RequestStatus,
        ResponseMetadata,
    )
    from ._dispatch import DispatchReport
    from ._engine import Engine, Outcome, PhaseContext
    from ._errors import (
        AgentFailedError,
        AgentInvocationError,
        BoardError,
        ContractError,
        InstanceBusyError,
        NonDeterminismError,
        OrchestratorError,
        ResponseRejectedError,
        RunFailedError,
        StepFailedError,
        UnknownVersionError,
        WorkflowDefinitionError,
    )
    from ._ports import AgentAnswer, AgentInvoker, Clock, HostRequired
    from ._schemas import bridge_schemas, workflow_schemas
    from ._workflow import Ask, PhaseResult, Workflow, phase


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
