"""JSON Schemas shipped with the package, for hosts in any language.

``agent-request``, ``agent-response`` and ``state`` are the agent bridge files' schemas,
as the format prints them; :func:`orchestrator.bridge_schemas` derives a workflow's own
from them (``docs/formats/agent-bridge.md`` is the reference). The task board documents'
schemas are in ``board``, step evidence's in ``steps``, and agent regression runs' in
``runs``.
"""

from __future__ import annotations

import json
from typing import Any


def shipped_schema(folder: str, file_name: str) -> dict[str, Any]:
    """The shipped JSON Schema ``file_name`` in ``folder`` (``""``, ``board`` or
    ``steps``), parsed."""
    from importlib import resources

    package = "orchestrator.formats.schemas" + (f".{folder}" if folder else "")
    schema: dict[str, Any] = json.loads(
        resources.files(package).joinpath(file_name).read_text(encoding="utf-8")
    )
    return schema
