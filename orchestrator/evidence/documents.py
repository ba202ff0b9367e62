"""A run's step evidence: its ``events.ndjson``, and a ``results.json`` per output
directory, built from what the engine recorded.

Layout, relative to the run's directory (``.orchestrator/runs/<run_id>/`` with the file
bridge)::

    events.ndjson                         one event per line, x_seq 1, 2, 3, ... in order
    phases/<NN>-<phase>/results.json      each phase's outcome, with the artifacts that
    phases/<NN>-<phase>/<path>            ctx.artifact wrote there
    phases/<NN>-<phase>.<V>/...           visit V (2, 3, ...) of a phase a route entered again
    agents/<NNNN>-<agent>/results.json    each agent request (NNNN: the x_seq of its
    agents/<NNNN>-<agent>/prompt.md       agent.start), its prompt and its answer
    agents/<NNNN>-<agent>/response.json   (response.txt when the answer is not JSON)

The recorder (:mod:`orchestrator.evidence.recorder`) queues the events the engine tells
it in an outbox saved with every checkpoint, and builds their documents here only once
the state that holds them is durable; see ``docs/steps.md``.

What the engine builds here is valid by construction (its names, times and statuses are
its own; confidences are checked where they come in); what authors give (``ctx.event``,
``ctx.artifact``) is checked against ``formats.steps`` when they give it. That keeps
``formats.steps`` and its models out of ``resume``'s imports, and a document that could
fail a check out of the outbox, where it would stop every later publication. The tests
validate every file a run writes against the shipped schemas.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from .._errors import ContractError
from .._text import plural
from ..formats.answer_gate import confidence_of
from ..formats.bridge_codec import error_type_of
from ..formats.step_names import (
    EVENT_NAME_PATTERN,
    RESULTS_FILE,
    STATUS_ABSTAIN,
    STATUS_ERROR,
    STATUS_FAIL,
    STATUS_PASS,
    STEPS_SCHEMA_VERSION,
)
from ..formats.strict_json import dumps_canonical, loads_strict

if TYPE_CHECKING:
    from ..formats.bridge import AgentRequestRecord, AgentResponse

#: Event names the engine writes besides the format's; authors may not use the namespaces
#: ``run``, ``agent``, ``skill`` and ``tool``, nor ``artifact.written``.
EVENT_RUN_START = "run.start"
EVENT_RUN_PAUSE = "run.pause"
EVENT_RUN_END = "run.end"
EVENT_RUN_RETRY = "run.retry"
EVENT_RUN_REWIND = "run.rewind"
EVENT_RUN_FORK = "run.fork"
EVENT_RUN_MIGRATE = "run.migrate"
EVENT_AGENT_LATE_ANSWER = "agent.late_answer"
RESERVED_PREFIXES = ("run.", "agent.", "skill.", "tool.")
RESERVED_NAMES = frozenset({"artifact.written"})
PROMPT_FILE = "prompt.md"
#: A phase's journal (its asks, steps and other calls, by position, with what they
#: returned), kept beside its ``results.json`` so that a run can be replayed later.
JOURNAL_FILE = "journal.json"
_EVENT_NAME = re.compile(EVENT_NAME_PATTERN)


def phase_dir(number: int, name: str, visit: int = 1) -> str:
    """A phase's output directory; a visit after the first (a route entered the phase
    again) has its own, ``phases/02-review.2``."""
    return f"phases/{number:02d}-{name}" + (f".{visit}" if visit > 1 else "")


def agent_dir(sequence: int, agent: str) -> str:
    return f"agents/{sequence:04d}-{agent}"


def event_line(
    sequence: int, ts: str, event: str, data: dict[str, Any], worker: str | None = None
) -> bytes:
    """One ``events.ndjson`` line: the format's three keys and ``x_seq``; ``x_worker`` names
    the worker that advanced the run then, where a worker did."""
    line: dict[str, Any] = {"ts": ts, "event": event, "data": data, "x_seq": sequence}
    if worker is not None:
        line["x_worker"] = worker
    text = json.dumps(line, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return text.encode("ascii") + b"\n"


def event_name_ok(name: object) -> bool:
    """Whether ``name`` is a dot-namespaced event name (``review.file_analyzed``)."""
    return isinstance(name, str) and _EVENT_NAME.match(name) is not None


def check_artifact(document: dict[str, Any], *, source: str) -> None:
    """Refuse an artifact entry ``results.json`` could not list (its path above all)."""
    from ..formats.steps import parse_results, validate_results

    holder = {"status": "pass", "confidence": 1.0, "summary": "", "artifacts": [document]}
    results = parse_results({"schema_version": "1.0", **holder}, source=source, strict=True)
    validate_results(results, source=source)


def results_document(
    *,
    status: str,
    confidence: float,
    summary: str,
    artifacts: list[dict[str, Any]],
    metadata: dict[str, Any],
) -> dict[str, Any]:
    """A ``results.json`` (``None`` metadata values left out)."""
    return {
        "schema_version": STEPS_SCHEMA_VERSION,
        "status": status,
        "confidence": confidence,
        "summary": summary,
        "artifacts": artifacts,
        "metadata": {k: v for k, v in metadata.items() if v is not None},
    }


def agent_outcome(record: AgentRequestRecord) -> tuple[str, str]:
    """The step evidence status of an agent request, and a one-line summary of how it ended."""
    from ..formats.bridge import HistoryStatus

    response = record.x_response
    note = record.x_note or ""
    if record.status is HistoryStatus.PENDING or response is None:
        return STATUS_ABSTAIN, f"withdrawn before an answer came{_suffix(note)}"
    if record.status in (HistoryStatus.SUPERSEDED, HistoryStatus.WITHDRAWN):
        return STATUS_ABSTAIN, note or "withdrawn"
    if record.status is HistoryStatus.CANCELLED:
        return STATUS_ABSTAIN, "the host cancelled the request"
    took = "" if response.duration_seconds is None else f" in {response.duration_seconds:.2f} s"
    if response.error_type is not None:
        message = response.error_message or response.error_type.value
        return STATUS_ERROR, f"{response.error_type.value}{took}: {message}{_suffix(note)}"
    refused = record.x_refused
    if refused is not None:  # refused at the answer gate (then asked again, or failed)
        return STATUS_FAIL, f"answer refused ({refused['error_type']}): {refused['message']}"
    if record.status is HistoryStatus.FAILED:  # an answer the phase could not use
        return STATUS_FAIL, f"answer refused: {note}" if note else "answer refused"
    words = len((response.response or "").split())
    return STATUS_PASS, f"{record.agent_name} answered{took} ({plural(words, 'word')})"


def agent_files(
    record: AgentRequestRecord, *, confidence: float | None, phase_name: str
) -> list[tuple[str, bytes]]:
    """The files of an ended agent request's output directory, written together: its
    prompt, its answer (when there is one) and its ``results.json``. (While a request
    waits, its prompt is in the request file.)"""
    request = record.request()
    response = record.x_response
    directory = record.x_output_dir
    assert directory is not None, "only requests of runs with evidence have files"
    files: list[tuple[str, bytes]] = [(f"{directory}/{PROMPT_FILE}", _utf8(request.prompt))]
    artifacts = [{"name": "prompt", "path": PROMPT_FILE, "media_type": "text/markdown"}]
    if response is not None and response.response is not None:
        name, media_type = _answer_file(response.response)
        files.append((f"{directory}/{name}", _utf8(response.response)))
        artifacts.append({"name": "response", "path": name, "media_type": media_type})
    status, summary = agent_outcome(record)
    context = request.context or {}
    details: dict[str, Any] = {
        "agent": record.agent_name,
        "request_id": record.request_id,
        "phase": request.phase,
        "skill": phase_name,
        "attempt": request.retry_count + 1,
        **answer_facts(record),
        "duration_seconds": None if response is None else response.duration_seconds,
        "confidence_reported": confidence is not None,
        "task": context.get("x_task_id"),
        "history_status": record.status.value,
    }
    results = results_document(
        status=status,
        confidence=0.0 if confidence is None else confidence,
        summary=summary,
        artifacts=artifacts,
        metadata=details,
    )
    files.append((f"{directory}/{RESULTS_FILE}", dumps_canonical(results)))
    return files


def answer_facts(record: AgentRequestRecord) -> dict[str, Any]:
    """What the answer to ``record`` says of itself (``None`` where it says nothing), for
    its ``agent.end`` and its ``results.json`` alike."""
    response = record.x_response
    if response is None:
        return {"response_status": None, "error_type": None, "model": None, "tokens_used": None}
    metadata = response.metadata
    return {
        "response_status": response.status.value,
        "error_type": None if response.error_type is None else response.error_type.value,
        "model": None if metadata is None else metadata.model,
        "tokens_used": None if metadata is None else metadata.tokens_used,
    }


def _answer_file(text: str) -> tuple[str, str]:
    try:
        loads_strict(_utf8(text), source="answer")
    except ContractError:  # anything that is not strict JSON is text
        return "response.txt", "text/plain"
    return "response.json", "application/json"


def _utf8(text: str) -> bytes:
    """``text`` as UTF-8; a lone surrogate (JSON allows ``"\\ud800"``) as its escape."""
    return text.encode("utf-8", "backslashreplace")


def _suffix(note: str) -> str:
    return f"; {note}" if note else ""


def usable_confidence(response: AgentResponse | None) -> float | None:
    """The confidence an answer reported, for evidence: ``None`` for an error answer, or
    when it reported none, or one outside [0, 1] (not a confidence step evidence can hold)."""
    if response is None or error_type_of(response) is not None:
        return None
    found = confidence_of(response)
    if found is None or not 0.0 <= found <= 1.0:  # NaN fails both comparisons
        return None
    return found
