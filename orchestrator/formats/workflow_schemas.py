"""Per-workflow JSON Schemas derived from the agent bridge files' shipped ones.

The shipped schemas are specific to template creation: the request's ``phase_name`` and
``agent_name`` enums and the phase range are that workflow's. A workflow gets the same
shape with its own values: the enum lists the phases that ask agents, in order; the agent
enum lists the declared agents; the phase range is 1..the highest phase number. For the
template-create example the result equals the shipped schemas exactly.
"""

from __future__ import annotations

import copy
from typing import Any

KINDS = ("request", "response", "state")
_FILES = {
    "request": "agent-request.schema.json",
    "response": "agent-response.schema.json",
    "state": "state.schema.json",
}
_SEED_PURPOSE = "template creation"


def seed_schema(kind: str) -> dict[str, Any]:
    """The agent bridge's shipped schema for ``kind`` (request, response or state)."""
    from .schemas import shipped_schema

    return shipped_schema("", _FILES[kind])


def bridge_schemas(
    *,
    workflow_name: str,
    purpose: str,
    asking_phases: list[str],
    agents: list[str],
    max_phase: int,
) -> dict[str, dict[str, Any]]:
    """The three schemas for one workflow, keyed by kind."""
    request = copy.deepcopy(seed_schema("request"))
    props = request["properties"]
    props["phase"]["maximum"] = max_phase
    props["phase_name"]["enum"] = list(asking_phases)
    props["agent_name"]["enum"] = list(agents)
    request["description"] = request["description"].replace(_SEED_PURPOSE, purpose)
    props["phase"]["description"] = props["phase"]["description"].replace(_SEED_PURPOSE, purpose)

    state = copy.deepcopy(seed_schema("state"))
    state["title"] = "".join(part.capitalize() for part in workflow_name.split("-")) + "State"
    state["description"] = state["description"].replace(_SEED_PURPOSE, purpose)
    state["properties"]["phase"]["maximum"] = max_phase
    return {"request": request, "response": seed_schema("response"), "state": state}


def workflow_schemas(workflow_cls: Any) -> dict[str, dict[str, Any]]:
    """Schemas for a ``Workflow`` subclass."""
    return bridge_schemas(
        workflow_name=workflow_cls.name,
        purpose=workflow_cls.describe_purpose(),
        asking_phases=[p.name for p in workflow_cls.asking_phases()],
        agents=list(workflow_cls.agents),
        max_phase=workflow_cls.max_phase(),
    )
