"""Where a state's signature lives, and the parts of a state, each in its canonical
encoding, that a signature over its parts covers.

The engine signs every state it writes over the file's bytes
(``orchestrator.storage.state_key`` holds the key, cuts the file into segments and
computes the MAC). States written before that were signed over their parts, and so is a
state whose own data holds the text that stands for the signature while it is made;
this module says what those parts are, so that every reader cuts a state into the same
parts and encodes them the same way. Every field of the state is in one part, the
signature alone excepted, so a field added later is signed without anyone remembering
to:

- ``workflow``: the workflow reference, its name and version (they decide which code is
  imported and run);
- ``phase``: ``phase``, ``phase_name`` and ``completed_phases`` (which phase runs next);
- ``inputs``: the run's inputs, its work directory, ``output_path``, ``project_path`` and
  ``template_name`` (what the phases are given);
- ``journal``: the current phase's recorded asks and steps;
- ``answers``: ``agent_requests``, with each request and its recorded answer;
- ``outputs``: the completed phases' outputs (``phase_data`` but the engine's record);
- ``rest``: everything else (the run's status, its history of retries and rewinds, the
  evidence outbox, the checkpoint's name and time, ...).

Each part is encoded with :func:`~orchestrator.formats.strict_json.dumps_canonical`,
which keeps key order: a state read back from its file encodes exactly as it did when it
was written. The signature lives at ``phase_data.x_orchestrator.x_signature``, an
extension key, so the state stays valid against the agent bridge state schema and reads
as it always did.
"""

from __future__ import annotations

from .fastpath import shallow
from .strict_json import dumps_canonical

# ``typing`` is not needed at run time; keeping it out of the imports keeps start-up cheap.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "PARTS",
    "SIGNATURE_KEY",
    "SIGNATURE_PATH",
    "engine_record",
    "signature_of",
    "signed_parts",
    "with_signature",
]

ENGINE_KEY = "x_orchestrator"  # as ``orchestrator.storage.runs.ENGINE_KEY``
SIGNATURE_KEY = "x_signature"
SIGNATURE_PATH = f"$.phase_data.{ENGINE_KEY}.{SIGNATURE_KEY}"

#: Each part: its name, where it is (for messages), and what it is, in words.
PARTS: tuple[tuple[str, str, str], ...] = (
    ("workflow", f"$.phase_data.{ENGINE_KEY}.workflow", "the workflow reference"),
    ("phase", "$.phase", "the phase (phase, phase_name, completed_phases)"),
    ("inputs", f"$.phase_data.{ENGINE_KEY}.inputs", "the inputs and paths"),
    ("journal", f"$.phase_data.{ENGINE_KEY}.journal", "the journal of asks and steps"),
    ("answers", "$.agent_requests", "the recorded requests and answers"),
    ("outputs", "$.phase_data", "the phases' outputs"),
    ("rest", "$", "the rest of the state"),
)

# Which keys each part takes: of the state's top level, and of the engine's record.
_TOP = {
    "phase": ("phase", "phase_name", "completed_phases"),
    "inputs": ("output_path", "project_path", "template_name"),
    "answers": ("agent_requests",),
}
_RECORD = {
    "workflow": ("workflow", "workflow_name", "workflow_version"),
    "inputs": ("inputs", "workdir"),
    "journal": ("journal",),
}
_TOP_TAKEN = frozenset(key for keys in _TOP.values() for key in keys) | {"phase_data"}
_RECORD_TAKEN = frozenset(key for keys in _RECORD.values() for key in keys) | {SIGNATURE_KEY}


def engine_record(data: Any) -> dict[str, Any] | None:
    """The engine's record (``phase_data.x_orchestrator``) of a state's JSON data; ``None``
    when the data has none."""
    phase_data = data.get("phase_data") if isinstance(data, dict) else None
    record = phase_data.get(ENGINE_KEY) if isinstance(phase_data, dict) else None
    return record if isinstance(record, dict) else None


def signature_of(data: Any) -> Any:
    """The signature a state's JSON data carries (``None`` when it carries none)."""
    record = engine_record(data)
    return None if record is None else record.get(SIGNATURE_KEY)


def signed_parts(data: dict[str, Any]) -> list[tuple[str, bytes]]:
    """The canonical encoding of each part of ``data`` (see the module's docstring), in
    the order of :data:`PARTS`.

    ``data`` is a state's JSON data as read from its file, or, when it is written, its
    top level (values may still be attrs instances: they are encoded as they are
    written). The signature itself is in no part.
    """
    phase_data = data.get("phase_data")
    phase_data = phase_data if isinstance(phase_data, dict) else {}
    record = phase_data.get(ENGINE_KEY)
    record = record if isinstance(record, dict) else {}
    chosen: dict[str, Any] = {}
    for name, _, _ in PARTS:
        part = {key: data[key] for key in _TOP.get(name, ()) if key in data}
        taken = {key: record[key] for key in _RECORD.get(name, ()) if key in record}
        if taken:
            part[ENGINE_KEY] = taken
        chosen[name] = part
    outputs = chosen["outputs"] = dict(phase_data)  # a copy at C speed, then one key out
    outputs.pop(ENGINE_KEY, None)
    rest = {key: value for key, value in data.items() if key not in _TOP_TAKEN}
    rest[ENGINE_KEY] = {key: value for key, value in record.items() if key not in _RECORD_TAKEN}
    if "phase_data" in data and not isinstance(data["phase_data"], dict):
        rest["phase_data"] = data["phase_data"]  # not a state: never equal to one that is
    chosen["rest"] = rest
    return [(name, dumps_canonical(chosen[name], default=shallow)) for name, _, _ in PARTS]


def with_signature(data: dict[str, Any], signature: Any) -> dict[str, Any]:
    """A copy of the top level of ``data`` whose engine record carries ``signature``
    (``None``: carries none); ``data`` itself is left as it is."""
    phase_data = dict(data.get("phase_data") or {})
    record = {k: v for k, v in (phase_data.get(ENGINE_KEY) or {}).items() if k != SIGNATURE_KEY}
    if signature is not None:
        record[SIGNATURE_KEY] = signature
    phase_data[ENGINE_KEY] = record
    return {**data, "phase_data": phase_data}
