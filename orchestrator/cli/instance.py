"""Read-only looks at an instance and the host-side helpers: status, respond, validate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._errors import (
    ContractError,
    StateDamagedError,
    StorageError,
    UsageError,
)
from ..engine.failure_trace import describe_trace
from ..engine.record import load_record
from ..evidence.usage import Prices, describe_usage, usage_of
from ..formats.bridge import (
    REQUESTS_DIR,
    RESPONSE_FILE,
    RESPONSES_DIR,
    AgentResponse,
    HistoryStatus,
    RequestStatus,
)
from ..formats.bridge_codec import dump_document, parse_request, parse_response, parse_state
from ..formats.times import SystemClock, format_time
from ..storage.beneath import make_directories
from ..storage.durable import atomic_write
from ..storage.files import STATE_MAX_BYTES, read_json_file, read_json_file_bytes
from ..storage.state_key import check_key_outside, check_signature, signature_problem
from .hints import Mode, next_step


def load_state_file(path: Path) -> Any:
    """The checkpoint state at ``path``; a damaged one raises :class:`StateDamagedError`."""
    return _load(path)


def _load(path: Path, *, signed_only: bool = False) -> Any:
    try:
        data, raw = read_json_file_bytes(
            path, max_bytes=STATE_MAX_BYTES, allow_lone_surrogates=True
        )
    except ContractError as exc:
        raise StateDamagedError.wrap(exc) from None
    except FileNotFoundError:
        raise
    except OSError as exc:  # a read that failed in the device names no file
        raise StorageError.from_os_error(exc, path=str(path), action="read") from exc
    if signed_only:  # a command that acts on the state believes only what orchestrate wrote
        check_key_outside(path.parent)
        check_signature(data, source=str(path), raw=raw)
    try:
        return parse_state(data, source=str(path))
    except ContractError as exc:
        raise StateDamagedError.wrap(exc) from None


def describe_instance(state_path: Path) -> dict[str, Any]:
    """A JSON-ready summary of an instance for ``orchestrate status``: what the state
    says, and whether its signature holds (a state that was changed is shown, not acted
    on)."""
    try:
        data, raw = read_json_file_bytes(
            state_path, max_bytes=STATE_MAX_BYTES, allow_lone_surrogates=True
        )
        state = parse_state(data, source=str(state_path))
    except ContractError as exc:
        raise StateDamagedError.wrap(exc) from None
    signature = signature_problem(data, raw, state_path)
    pending = [r for r in state.agent_requests if r.status is HistoryStatus.PENDING]
    return summarize_state(
        state,
        source=str(state_path),
        answer_at=lambda request_id: str(
            _response_target(state_path.parent, request_id, len(pending))
        ),
        signature=signature,
        trust_step=_trust_step(state_path) if signature is not None else None,
    )


def signal_waited(record: Any) -> str | None:
    """The name of the signal a run's engine record says it waits for, if any."""
    waiting = record.waiting_for_signal
    return None if waiting is None else str(waiting.get("name"))


def summarize_state(
    state: Any,
    *,
    source: str,
    answer_at: Any,
    signature: str | None = None,
    trust_step: str | None = None,
    store_run: str | None = None,
    options: str | None = None,
    mode: Mode = Mode.CLI,
    prices: Prices | None = None,
) -> dict[str, Any]:
    """A JSON-ready summary of a live run's state, for ``status`` on either store;
    ``answer_at(request_id)``: where, or how, a host answers that request; ``store_run``:
    the run's id, for a run of a store of many, and ``options``, the options that name
    it; ``mode``: the face that shows the summary (its ``next`` fits it); ``prices``:
    turns the tokens into cost."""
    record = load_record(state, source=source)
    pending = [r for r in state.agent_requests if r.status is HistoryStatus.PENDING]
    if signature is not None:
        then: str | None = trust_step
    else:
        wake_at = record.waiting_until
        then = next_step(
            record.status,
            bool(pending),
            mode=mode,
            store_run=store_run,
            options=options,
            wake_at=wake_at,
            signal=signal_waited(record),
        )
    counts: dict[str, int] = {}
    for item in state.agent_requests:
        counts[item.status.value] = counts.get(item.status.value, 0) + 1
    return {
        "workflow": record.workflow_name,
        "workflow_ref": record.workflow,
        "run_id": record.run_id,
        "status": record.status,
        "failure": record.failure,
        "failure_trace": record.failure_trace,
        "phase": state.phase,
        "phase_name": state.phase_name,
        "checkpoint_name": state.checkpoint_name,
        "updated_at": state.created_at,
        "completed_phases": [p.phase_name for p in state.completed_phases],
        "pending": [
            {
                "request_id": r.request_id,
                "agent_name": r.agent_name,
                "phase": r.phase,
                "retry_count": r.request().retry_count,
                "created_at": r.request().created_at,
                "timeout_seconds": r.request().timeout_seconds,
                "answer_within_seconds": r.x_answer_within,
                "response_file": answer_at(r.request_id),
            }
            for r in pending
        ],
        "request_counts": counts,
        "sleeping_until": None if pending else record.waiting_until,
        "waiting_for_signal": None if pending else signal_waited(record),
        # child runs (ctx.child): those the current phase waits for, and all it started
        "waiting_for_children": list(record.waiting_children),
        "children": list(record.children),
        "lineage": lineage_of(record),
        "usage": usage_of(state.agent_requests, prices=prices),
        "signature": "valid" if signature is None else "not valid",
        "signature_problem": signature,
        "next": then,
    }


def _trust_step(state_path: Path) -> str:
    return (
        "nothing will act on this state until its signature holds: check it, then "
        f"'orchestrate trust {state_path}' signs it as it is ('orchestrate cancel --force' "
        "sets it aside)"
    )


def describe_ended_run(workdir: Path) -> dict[str, Any]:
    """The last run of ``workdir`` that ended (completed or cancelled), for ``status``
    when no instance is live: how and when it ended, its outputs."""
    from ..evidence.history import load_run

    state, source = load_run(workdir)
    return describe_ended(state, source=source)


def describe_ended(state: Any, *, source: str, prices: Prices | None = None) -> dict[str, Any]:
    """How a run ended, from its last state (its history); ``prices``: turns the tokens
    into cost."""
    from ..storage.runs import ENGINE_KEY

    record = load_record(state, source=source)
    outputs = {k: v for k, v in state.phase_data.items() if k != ENGINE_KEY}
    return {
        "workflow": record.workflow_name,
        "workflow_ref": record.workflow,
        "run_id": record.run_id,
        "status": record.status,
        "ended_at": state.created_at,
        "completed_phases": [p.phase_name for p in state.completed_phases],
        "outputs": outputs,  # JSON values, as 'orchestrate output --json' prints them
        "history": source,
        "lineage": lineage_of(record),
        "usage": usage_of(state.agent_requests, prices=prices),
        "next": "'orchestrate output [PHASE]' prints the outputs; 'orchestrate history' "
        "tells the run; 'orchestrate run WORKFLOW' starts a new one here",
    }


def in_short(value: Any) -> str:
    """One line of an output: a text's start, or a JSON value's."""
    import json

    from .._text import shorten

    return shorten(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False), 100)


def pending_of(workdir: Path) -> list[dict[str, Any]]:
    """The requests the instance in ``workdir`` waits for: ``{run_id, request}`` each, the
    request as its file holds it (none when no instance lives there)."""
    import json

    from ..storage.runs import live_state_files

    found = []
    for state_path in live_state_files(workdir):
        state = _load(state_path, signed_only=True)
        run_id = load_record(state, source=str(state_path)).run_id
        for record in state.agent_requests:
            if record.status is HistoryStatus.PENDING:
                request = json.loads(dump_document(record.request()))
                found.append({"run_id": run_id, "request": request})
    return found


def _response_target(workdir: Path, request_id: str, pending_count: int) -> Path:
    if pending_count == 1:
        return workdir / RESPONSE_FILE
    return workdir / RESPONSES_DIR / f"{request_id}.json"


def write_response(
    state_path: Path,
    *,
    request_id: str | None,
    text: str,
    status: str = "success",
    error_type: str | None = None,
    model: str | None = None,
    tokens_used: int | None = None,
    confidence: float | None = None,
    document: AgentResponse | None = None,
) -> Path:
    """Write a valid response for a pending request where ``resume`` will read it:
    ``document`` as it is, or one made of ``text`` and the rest."""
    state = _load(state_path, signed_only=True)
    pending = [r.request_id for r in state.agent_requests if r.status is HistoryStatus.PENDING]
    if document is not None:
        request_id = document_request(document, request_id)
    request_id = choose_request(pending, request_id, where=str(state_path))
    response = document or response_document(
        request_id,
        text=text,
        status=status,
        error_type=error_type,
        model=model,
        tokens_used=tokens_used,
        confidence=confidence,
    )
    target = _response_target(state_path.parent, request_id, len(pending))
    try:
        make_directories(target.parent)
        atomic_write(target, dump_document(response))
    except OSError as exc:  # atomic: no response, or the one that was there, is left
        raise StorageError.from_os_error(exc, path=str(target), action="write") from exc
    return target


def answer_options(args: Any) -> dict[str, Any]:
    """What ``respond`` was told of the answer besides its text."""
    return {
        "status": args.status,
        "error_type": args.error_type,
        "model": args.model,
        "tokens_used": args.tokens_used,
        "confidence": args.confidence,
    }


def read_response_document(path: str) -> AgentResponse:
    """A whole response document from ``path`` (``-``: standard input), checked as
    ``resume`` checks a response file; refused in one line otherwise."""
    import sys

    from ..formats.strict_json import loads_strict

    source = "standard input" if path == "-" else path
    try:
        raw = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"--document {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        return parse_response(loads_strict(raw, source=source), source=source)
    except ContractError as exc:
        raise UsageError(f"--document: {exc}; nothing was written") from None


def document_request(document: AgentResponse, request_id: str | None) -> str:
    """The request a whole response document answers (``--request``, if given, must agree)."""
    if request_id is not None and request_id != document.request_id:
        raise UsageError(
            f"--request {request_id}, but the document answers {document.request_id}; "
            "nothing was written"
        )
    return document.request_id


def choose_request(pending: list[str], request_id: str | None, *, where: str) -> str:
    """The pending request an answer is for: ``request_id``, or the only one pending."""
    if not pending:
        raise UsageError(f"{where}: no request is pending; there is nothing to answer")
    if request_id is None:
        if len(pending) > 1:
            raise UsageError(
                f"several requests are pending ({', '.join(pending)}); choose one with --request-id"
            )
        return pending[0]
    if request_id not in pending:
        raise UsageError(f"request {request_id} is not pending; pending: {', '.join(pending)}")
    return request_id


def response_document(
    request_id: str,
    *,
    text: str,
    status: str = "success",
    error_type: str | None = None,
    model: str | None = None,
    tokens_used: int | None = None,
    confidence: float | None = None,
) -> AgentResponse:
    """The response ``orchestrate respond`` writes, checked as ``resume`` will check it."""
    document: dict[str, Any] = {
        "request_id": request_id,
        "version": "1.0",
        "status": status,
        "created_at": format_time(SystemClock().now()),
    }
    if status == RequestStatus.SUCCESS.value:
        document["response"] = text
    else:
        document["error_message"] = text or status
        document["error_type"] = error_type or ("TIMEOUT" if status == "timeout" else "UNKNOWN")
    metadata = {
        k: v
        for k, v in (("model", model), ("tokens_used", tokens_used), ("confidence", confidence))
        if v is not None
    }
    if metadata:
        document["metadata"] = metadata
    return parse_response(document, source="response")


def detect_kind(path: Path) -> str:
    name = path.name
    if name.endswith("-state.json") or name == "state.json":
        return "state"
    if "response" in name or path.parent.name == RESPONSES_DIR:
        return "response"
    if "request" in name or path.parent.name == REQUESTS_DIR:
        return "request"
    raise UsageError(
        f"{path}: cannot tell the kind from the name; pass --kind request|response|state"
    )


def validate_file(path: Path, *, kind: str | None, workflow_cls: Any = None) -> list[str]:
    """Problems with a bridge file (empty when valid).

    With ``workflow_cls``, requests and states are also held to that workflow's phase
    names, agent names and phase range, as its generated schemas are.
    """
    kind = kind or detect_kind(path)
    limits: dict[str, Any] = {}
    if workflow_cls is not None:
        limits["max_phase"] = workflow_cls.max_phase()
        if kind == "request":
            limits["phase_names"] = tuple(p.name for p in workflow_cls.asking_phases())
            limits["agent_names"] = tuple(workflow_cls.agents)
    try:
        # A state holds what the workflow produced, and reads back as the engine wrote it.
        data = read_json_file(
            path, max_bytes=STATE_MAX_BYTES, allow_lone_surrogates=kind == "state"
        )
        if kind == "request":
            parse_request(data, source=str(path), **limits)
        elif kind == "response":
            parse_response(data, source=str(path))
        else:
            parse_state(data, source=str(path), **limits)
    except FileNotFoundError:
        return [f"{path}: no such file"]
    except ContractError as exc:
        return [str(exc)]
    return []


def lineage_of(record: Any) -> dict[str, str] | None:
    """A run's place in its lineage (``ctx.continue_as_new``): its first run, the run it
    goes on from, the run it went on as; ``None`` for a run that has none."""
    links = {
        "first": record.lineage_run_id,
        "previous": record.previous_run_id,
        "continued_as": record.continued_as,
    }
    kept = {k: v for k, v in links.items() if v is not None}
    return kept or None


def describe_lineage(lineage: dict[str, str] | None) -> list[str]:
    """The ``lineage`` lines of ``status`` and ``history``."""
    if not lineage:
        return []
    said = {"first": "first run", "previous": "goes on from", "continued_as": "went on as"}
    return [f"lineage    {said[k]} {v}" for k, v in lineage.items()]


def format_ended(summary: dict[str, Any], *, named: bool = False) -> str:
    """``status`` of a run that has ended, for a person; ``named``: a run of a store of
    many, named by its id (not "the run here")."""
    from .._text import printable

    lines = [
        f"workflow   {summary['workflow']}  (run {summary['run_id']}"
        + (")" if named else "; no live instance here)"),
        f"status     {summary['status']}, at {summary['ended_at']}",
        f"completed  {', '.join(summary['completed_phases']) or '-'}",
    ]
    for name, value in summary["outputs"].items():
        lines.append(f"output     {name}: {printable(in_short(value))}")
    lines += describe_lineage(summary.get("lineage"))
    lines += describe_usage(summary.get("usage") or {})
    lines.append(f"history    {summary['history']}")
    lines.append(f"next       {summary['next']}")
    return "\n".join(lines)


def format_status(summary: dict[str, Any]) -> str:
    """``status`` of a live instance, for a person."""
    lines = [
        f"workflow   {summary['workflow']}  (run {summary['run_id']})",
        f"status     {summary['status']}"
        + (f": {summary['failure']}" if summary.get("failure") else "")
        + (
            f" (waiting for signal {summary['waiting_for_signal']})"
            if summary.get("waiting_for_signal")
            else ""
        ),
        f"phase      {summary['phase']} {summary['phase_name']}"
        f"  (checkpoint {summary['checkpoint_name']})",
        f"completed  {', '.join(summary['completed_phases']) or '-'}",
    ]
    raised = describe_trace(summary.get("failure_trace"))
    if raised:
        lines.insert(2, f"where      {raised}")
    for request in summary["pending"]:
        lines.append(
            f"pending    {request['request_id']}  {request['agent_name']}"
            f"  retry {request['retry_count']}"
            f"  -> answer in {request['response_file']}"
        )
    lines += describe_lineage(summary.get("lineage"))
    for run_id in summary.get("waiting_for_children") or ():
        lines.append(f"waiting    for child run {run_id}")
    for waiting in summary.get("children_signals") or ():
        lines.append(
            f"waiting    child run {waiting['run_id']} waits for signal {waiting['signal']}"
            f"  -> 'orchestrate signal {waiting['signal']} --run {waiting['run_id']}'"
        )
    for request in summary.get("children_pending") or ():
        lines.append(
            f"pending    {request['request_id']}  {request['agent_name']}"
            f"  (child run {request['run_id']})"
            f"  -> 'orchestrate respond --request-id {request['request_id']}' here"
        )
    if summary.get("signature_problem"):
        lines.append(f"signature  NOT VALID: {summary['signature_problem']}")
    if summary.get("next"):
        lines.append(f"next       {summary['next']}")
    if summary.get("sleeping_until"):
        timer = "the signal's deadline" if summary.get("waiting_for_signal") else "a durable timer"
        lines.append(f"sleeping   until {summary['sleeping_until']} ({timer})")
    counts = ", ".join(f"{k} {v}" for k, v in sorted(summary["request_counts"].items()))
    lines.append(f"requests   {counts or 'none yet'}")
    lines += describe_usage(summary.get("usage") or {})
    return "\n".join(lines)
