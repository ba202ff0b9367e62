"""``orchestrate drive``: the host loop built in.

Each pending request goes to the handler command on stdin (its path also in
``ORCHESTRATOR_REQUEST_FILE``); the handler's stdout is the answer. A handler that prints
a whole response document (an object with ``request_id`` and ``status``) has it used as
is. A non-zero exit becomes INVOCATION_FAILED, running past the request's
``timeout_seconds`` becomes TIMEOUT, output that cannot be an answer (not UTF-8, or more
than a response may hold) PARSE_ERROR; the engine's policy takes it from there. The
handler runs as the subprocess adapter runs an agent: in its own session, its output
capped, and everything it started killed when it is done.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .._errors import (
    AgentInvocationError,
    ContractError,
    RunFailedError,
    StorageError,
    UsageError,
)
from .._ports import Clock
from .._text import printable
from ..adapters.file_bridge import MAX_RESPONSE_BYTES
from ..engine.record import Outcome
from ..formats.bridge import REQUEST_FILE, REQUESTS_DIR, RESPONSES_DIR, AgentRequest
from ..formats.bridge_codec import dump_document, parse_response
from ..formats.convert import unstructure
from ..formats.strict_json import dumps_canonical
from ..formats.times import FixedClock, SystemClock, format_time, parse_time
from ..storage.durable import atomic_write


def drive(
    outcome: Outcome,
    *,
    resume: Callable[[], Outcome],
    handler: str,
    workdir: Path,
    parallel: int = 4,
    handler_timeout: float | None = None,
    clock: Clock | None = None,
) -> Outcome:
    """Answer every pause of ``outcome`` with ``handler`` until the run ends.

    ``handler_timeout`` caps each handler's run (seconds) below the request's own
    ``timeout_seconds``: a handler still running then is killed and answered TIMEOUT.
    A pause for a durable timer is waited out on ``clock`` (the engine's).
    """
    responses_dir = workdir / RESPONSES_DIR
    while outcome.status == "paused":
        if not outcome.pending:
            _wait_for_timer(outcome, clock or SystemClock())
            outcome = resume()
            print(f"orchestrate: {printable(outcome.message, lines=True)}", file=sys.stderr)
            continue
        _written(responses_dir, responses_dir.mkdir, exist_ok=True)
        pending = outcome.pending
        with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
            documents = list(
                pool.map(
                    _ask_handler,
                    [handler] * len(pending),
                    pending,
                    [workdir] * len(pending),
                    [len(pending) > 1] * len(pending),
                    [handler_timeout] * len(pending),
                )
            )
        for document in documents:
            target = responses_dir / f"{document['request_id']}.json"
            # Not written: its request stays pending, and the next drive asks again.
            _written(target, atomic_write, target, dumps_canonical(document))
        outcome = resume()
        print(f"orchestrate: {printable(outcome.message, lines=True)}", file=sys.stderr)
    return outcome


def _wait_for_timer(outcome: Outcome, clock: Clock) -> None:
    """Sleep until the timer that paused the run is due."""
    if outcome.wake_at is None:
        raise RunFailedError(f"the run paused with nothing to wait for: {outcome.message}")
    remaining = (parse_time(outcome.wake_at) - clock.now()).total_seconds()
    if remaining <= 0:
        return
    if isinstance(clock, FixedClock):
        raise UsageError(
            f"the run sleeps until {outcome.wake_at}, and ORCHESTRATOR_NOW stops this "
            "process's clock before then: unset it, or resume with a later one"
        )
    sleep = getattr(clock, "sleep", None)  # a test's clock moves at once
    if sleep is not None:
        sleep(remaining)
    else:
        time.sleep(remaining)


def _ask_handler(
    handler: str,
    request: AgentRequest,
    workdir: Path,
    several: bool,
    handler_timeout: float | None = None,
) -> dict[str, Any]:
    payload = dump_document(request)
    # With several pending, .agent-request.json holds only the first: each handler is
    # pointed at its own request's file.
    request_file = (
        workdir / REQUESTS_DIR / f"{request.request_id}.json" if several else workdir / REQUEST_FILE
    )
    env = {
        **os.environ,
        "ORCHESTRATOR_REQUEST_FILE": str(request_file),
        "ORCHESTRATOR_REQUEST_ID": request.request_id,
    }
    limit: float = request.timeout_seconds
    if handler_timeout is not None:
        limit = min(limit, handler_timeout)
    started = time.monotonic()
    from ..adapters.subprocess_agent import run_command

    try:
        stdout = run_command(
            handler,
            payload,
            agent_name=request.agent_name,
            env=env,
            limit=limit,
            max_output_bytes=MAX_RESPONSE_BYTES,
        )
    except AgentInvocationError as exc:
        if exc.error_type == "TIMEOUT":
            message = f"handler did not answer within {limit:g} s; its process group was killed"
            return _error(request, "timeout", "TIMEOUT", message, started)
        return _error(request, "error", exc.error_type, f"handler: {exc}", started)
    try:
        text = stdout.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _error(
            request, "error", "PARSE_ERROR", f"handler output is not UTF-8: {exc}", started
        )
    try:
        document = _as_document(text, request)
    except ContractError as exc:
        # It meant to give a whole response document and got it wrong: an invocation
        # failure (retried by policy), never its JSON passed off as a successful answer.
        return _error(
            request, "error", "INVOCATION_FAILED", f"handler printed a bad response: {exc}", started
        )
    if document is None:
        document = {
            "request_id": request.request_id,
            "version": "1.0",
            "status": "success",
            "response": text,
            "created_at": format_time(SystemClock().now()),
            "duration_seconds": round(time.monotonic() - started, 3),
        }
    size = len(dumps_canonical(document))
    if size > MAX_RESPONSE_BYTES:  # JSON escapes can make a document larger than its text
        message = (
            f"the answer makes a response of {size} bytes, over the {MAX_RESPONSE_BYTES} a "
            "response may hold"
        )
        return _error(request, "error", "PARSE_ERROR", message, started)
    return document


def _as_document(text: str, request: AgentRequest) -> dict[str, Any] | None:
    """The handler's output as a whole response document, if that is what it printed.

    ``None`` for plain answer text; ``ContractError`` for a response document (an object
    with ``request_id`` and ``status``) that is invalid or answers another request.
    """
    stripped = text.strip()
    if not stripped.startswith("{"):
        return None
    try:
        data = json.loads(stripped)
    except ValueError:
        return None
    if not (isinstance(data, dict) and "request_id" in data and "status" in data):
        return None
    response = parse_response(data, source="handler output")
    if response.request_id != request.request_id:
        raise ContractError(
            f"it answers request {response.request_id}, not {request.request_id}",
            source="handler output",
            json_path="$.request_id",
            rule="request_id",
        )
    return unstructure(response)  # type: ignore[no-any-return]


def _error(
    request: AgentRequest, status: str, error_type: str, message: str, started: float
) -> dict[str, Any]:
    return {
        "request_id": request.request_id,
        "version": "1.0",
        "status": status,
        "error_type": error_type,
        "error_message": message,
        "created_at": format_time(SystemClock().now()),
        "duration_seconds": round(time.monotonic() - started, 3),
    }


def _written(path: Path, write: Any, *args: Any, **kwargs: Any) -> None:
    """``write(*args, **kwargs)``; an operating system error names ``path``."""
    try:
        write(*args, **kwargs)
    except OSError as exc:
        raise StorageError.from_os_error(exc, path=str(path), action="write") from exc
