# ruff: noqa: E501  (the table reads best one document per line)
"""Data and helpers for test_seed_schemas.py: the agent bridge fixtures, the example workflow, the
Python-side judge, and the table of bad documents (each with where it is bad)."""

from __future__ import annotations

import copy
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

from orchestrator.formats.bridge_codec import (
    parse_request,
    parse_response,
    parse_state,
    validate_request,
    validate_state,
)

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "template_create"
SEED_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "seed004"


def seed(name: str) -> Any:
    return json.loads((SEED_DIR / name).read_text(encoding="utf-8"))


SEED_SCHEMAS = {
    "request": seed("agent-request.schema.json"),
    "response": seed("agent-response.schema.json"),
    "state": seed("state.schema.json"),
}


def _load_example_workflow() -> Any:
    name = "template_create_example_workflow"
    spec = importlib.util.spec_from_file_location(name, EXAMPLE / "workflow.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # attrs/cattrs resolve the answer types through it
    spec.loader.exec_module(module)
    return module.TemplateCreate


TemplateCreate = _load_example_workflow()


def fake_agent(request_text: str) -> dict[str, Any]:
    """What examples/template_create/fake_agent.py prints for a request, run as a process."""
    result = subprocess.run(
        [sys.executable, str(EXAMPLE / "fake_agent.py")],
        input=request_text,
        capture_output=True,
        text=True,
        check=True,
    )
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def python_verdict(kind: str, document: Any) -> None:
    """The Python side's judgement: raises ContractError (a ValueError) when refused.

    The codec's parse_* know no workflow; like the shipped schema, the request and state are
    also held to template-create's enums and phase maximum.
    """
    parsed = {"request": parse_request, "response": parse_response, "state": parse_state}[kind](
        document, source=kind
    )
    if kind == "request":
        validate_request(
            parsed,
            source=kind,
            max_phase=TemplateCreate.max_phase(),
            phase_names=tuple(p.name for p in TemplateCreate.asking_phases()),
            agent_names=TemplateCreate.agents,
        )
    elif kind == "state":
        validate_state(parsed, source=kind, max_phase=TemplateCreate.max_phase())


def with_version(document: dict[str, Any], version: str) -> dict[str, Any]:
    return {**document, "version": version}


_REQUEST = seed("example-request.json")
GOOD_BASES: dict[str, dict[str, Any]] = {
    "request": {
        **_REQUEST,
        "prompt": _REQUEST["prompt"] + " Identify the primary language and the frameworks.",
    },
    "response": seed("example-success-response.json"),
    # Without agent_requests: the Python side refuses the format example's items (a
    # reported bug).
    "state": {k: v for k, v in seed("example-state.json").items() if k != "agent_requests"},
}
assert len(GOOD_BASES["request"]["prompt"]) >= 100


class Bad(NamedTuple):
    kind: str
    label: str
    document: Any
    where: str  # found in the schema's complaint and the Python side's message


_DROP = object()


def _change(kind: str, path: str, value: Any) -> dict[str, Any]:
    """A copy of the good base with ``a.b[0].c`` set (or deleted when value is _DROP)."""
    document = copy.deepcopy(GOOD_BASES[kind])
    *parents, last = path.replace("[", ".").replace("]", "").split(".")
    target: Any = document
    for key in parents:
        target = target[int(key)] if key.isdigit() else target[key]
    if value is _DROP:
        del target[last]
    else:
        target[last] = value
    return document


BAD_DOCUMENTS = [
    Bad("request", "missing-prompt", _change("request", "prompt", _DROP), "'prompt'"),
    Bad("request", "phase-name-not-in-enum", _change("request", "phase_name", "manifest_generation"), "$.phase_name"),
    Bad("request", "agent-not-in-enum", _change("request", "agent_name", "code-reviewer"), "$.agent_name"),
    Bad("request", "phase-0", _change("request", "phase", 0), "$.phase"),
    Bad("request", "phase-10", _change("request", "phase", 10), "$.phase"),
    Bad("request", "phase-1.5", _change("request", "phase", 1.5), "$.phase"),
    Bad("request", "phase-true", _change("request", "phase", True), "$.phase"),
    Bad("request", "timeout-10", _change("request", "timeout_seconds", 10), "$.timeout_seconds"),
    Bad("request", "timeout-601", _change("request", "timeout_seconds", 601), "$.timeout_seconds"),
    Bad("request", "prompt-99-chars", _change("request", "prompt", "p" * 99), "$.prompt"),
    Bad("request", "prompt-null", _change("request", "prompt", None), "$.prompt"),
    Bad("request", "id-not-uuid", _change("request", "request_id", "req-42"), "$.request_id"),
    Bad("request", "created-at-date-only", _change("request", "created_at", "2025-11-18"), "$.created_at"),
    Bad("request", "created-at-no-offset", _change("request", "created_at", "2025-11-18T10:30:00"), "$.created_at"),
    Bad("request", "created-at-month-13", _change("request", "created_at", "2025-13-18T10:30:00Z"), "$.created_at"),
    Bad("request", "created-at-space", _change("request", "created_at", "2025-11-18 10:30:00Z"), "$.created_at"),
    Bad("request", "unknown-field", _change("request", "priority", "high"), "'priority'"),
    Bad("request", "version-x", _change("request", "version", "x"), "$.version"),
    Bad("request", "retry-count-negative", _change("request", "retry_count", -1), "$.retry_count"),
    Bad("request", "context-not-object", _change("request", "context", "here"), "$.context"),
    Bad("request", "context-path-number", _change("request", "context.project_path", 7), "$.context.project_path"),
    Bad("response", "missing-status", _change("response", "status", _DROP), "'status'"),
    Bad("response", "status-not-in-enum", _change("response", "status", "done"), "$.status"),
    Bad("response", "error-type-not-in-enum", _change("response", "error_type", "CRASHED"), "$.error_type"),
    Bad("response", "confidence-1.5", _change("response", "metadata.confidence", 1.5), "$.metadata.confidence"),
    Bad("response", "confidence-negative", _change("response", "metadata.confidence", -0.1), "$.metadata.confidence"),
    Bad("response", "tokens-not-integer", _change("response", "metadata.tokens_used", 1.5), "$.metadata.tokens_used"),
    Bad("response", "duration-negative", _change("response", "duration_seconds", -1), "$.duration_seconds"),
    Bad("response", "id-not-uuid", _change("response", "request_id", "550e8400e29b41d4a716446655440000"), "$.request_id"),
    Bad("response", "created-at-date-only", _change("response", "created_at", "2025-11-18"), "$.created_at"),
    Bad("response", "unknown-field", _change("response", "answer", "42"), "'answer'"),
    Bad("response", "version-without-minor", _change("response", "version", "1"), "$.version"),
    Bad("response", "response-null", _change("response", "response", None), "$.response"),
    Bad("response", "metadata-not-object", _change("response", "metadata", []), "$.metadata"),
    Bad("state", "missing-output-path", _change("state", "output_path", _DROP), "'output_path'"),
    Bad("state", "phase-0", _change("state", "phase", 0), "$.phase"),
    Bad("state", "phase-10", _change("state", "phase", 10), "$.phase"),
    Bad("state", "phase-name-null", _change("state", "phase_name", None), "$.phase_name"),
    Bad("state", "created-at-date-only", _change("state", "created_at", "2025-11-18"), "$.created_at"),
    Bad("state", "unknown-field", _change("state", "status", "paused"), "'status'"),
    Bad("state", "version-x", _change("state", "version", "x"), "$.version"),
    Bad("state", "phase-data-list", _change("state", "phase_data", []), "$.phase_data"),
    Bad("state", "completed-phases-object", _change("state", "completed_phases", {}), "$.completed_phases"),
    Bad("state", "agent-requests-string", _change("state", "agent_requests", ""), "$.agent_requests"),
    Bad("state", "completed-at-not-date", _change("state", "completed_phases[0].completed_at", "yesterday"), "$.completed_phases[0].completed_at"),
    # null in every optional field: the schemas give no field a null, and the codec agrees
    Bad("request", "context-null", _change("request", "context", None), "$.context"),
    Bad("request", "retry-count-null", _change("request", "retry_count", None), "$.retry_count"),
    Bad("request", "timeout-null", _change("request", "timeout_seconds", None), "$.timeout_seconds"),
    Bad("response", "error-message-null", _change("response", "error_message", None), "$.error_message"),
    Bad("response", "error-type-null", _change("response", "error_type", None), "$.error_type"),
    Bad("response", "duration-null", _change("response", "duration_seconds", None), "$.duration_seconds"),
    Bad("response", "metadata-null", _change("response", "metadata", None), "$.metadata"),
    Bad("response", "model-null", _change("response", "metadata.model", None), "$.metadata.model"),
    Bad("response", "tokens-null", _change("response", "metadata.tokens_used", None), "$.metadata.tokens_used"),
    Bad("response", "confidence-null", _change("response", "metadata.confidence", None), "$.metadata.confidence"),
    Bad("state", "project-path-null", _change("state", "project_path", None), "$.project_path"),
    Bad("state", "template-name-null", _change("state", "template_name", None), "$.template_name"),
    Bad("state", "phase-data-null", _change("state", "phase_data", None), "$.phase_data"),
    Bad("state", "completed-phases-null", _change("state", "completed_phases", None), "$.completed_phases"),
]  # fmt: skip
