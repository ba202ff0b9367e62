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
import threading
import time
from collections.abc import Callable, Sequence
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
from .._text import plural, printable
from ..adapters.file_bridge import MAX_RESPONSE_BYTES
from ..engine.record import Outcome
from ..formats.bridge import REQUEST_FILE, REQUESTS_DIR, RESPONSES_DIR, AgentRequest
from ..formats.bridge_codec import dump_document, parse_response
from ..formats.convert import unstructure
from ..formats.strict_json import dumps_canonical
from ..formats.times import FixedClock, SystemClock, format_time, parse_time
from ..storage.beneath import make_directories
from ..storage.durable import atomic_write
from .hints import Mode, pause_hint


class Progress:
    """What ``drive`` is doing, as it happens, on ``stream`` (standard error).

    One line per request when it is asked (``retried`` when it is an ask again after a
    failure; a task of the task board by its id and title) and when its answer is in
    (with the time it took, or how it failed), a line when a phase ends (``copied`` for a
    phase a fork copied from the run it came from), and a summary at the end, each in
    the order it happened. On a terminal a status line below them
    is redrawn every ``tick`` seconds with each handler at work and how long it has been
    working; elsewhere (a pipe, a log file) only the plain lines are written.
    """

    def __init__(
        self,
        stream: Any,
        *,
        phases: Sequence[tuple[int, str]] = (),
        copied_before: int = 0,
        tty: bool | None = None,
        tick: float = 0.5,
    ) -> None:
        """``copied_before``: the phase a forked run starts at (the ones before it were
        copied from the run it was forked from; 0: none was)."""
        self.stream = stream
        self.copied_before = copied_before
        self.tty = stream.isatty() if tty is None else tty
        self.tick = tick
        self.phases = list(phases)
        self.started = time.monotonic()
        self.asks = self.retries = self.failures = 0
        self.phases_done = 0
        self._working: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def line(self, text: str) -> None:
        with self._lock:
            self._write(f"orchestrate: {printable(text, lines=True)}\n")

    def asked(self, request: AgentRequest) -> None:
        self.asks += 1
        again = request.retry_count > 0
        self.retries += again
        state = "retried" if again else "asked"
        self.line(f"{state:<9} {_who(request)}, phase {request.phase} {request.phase_name}")

    def answering(self, request: AgentRequest) -> None:
        with self._lock:
            self._working[request.request_id] = (request.agent_name, time.monotonic())
        if not self.tty:
            self.line(f"answering {_who(request)}")
        elif self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()

    def answered(self, request: AgentRequest, document: dict[str, Any]) -> None:
        with self._lock:
            _, since = self._working.pop(request.request_id, ("", time.monotonic()))
        took = f"{time.monotonic() - since:.1f} s"
        who = _who(request)
        if document.get("status") == "success":
            self.line(f"answered  {who} in {took}")
        else:
            self.failures += 1
            said = document.get("error_message") or document.get("status")
            self.line(f"failed    {who} after {took}: {document.get('error_type')}: {said}")

    def reached(self, phase: int | None) -> None:
        """Every phase before ``phase`` (all of them, for ``None``) has ended."""
        for number, name in self.phases:
            if number > self.phases_done and (phase is None or number < phase):
                how = "copied" if number < self.copied_before else "done"
                self.line(f"phase {number} {name} {how}")
                self.phases_done = number

    def finish(self, outcome: Outcome, *, phase: int | None = None) -> None:
        """The run ended (``phase``: the one it ended in, when it did not complete)."""
        self._stop.set()
        if outcome.status == "completed":
            self.reached(None)
        elif phase is not None:
            self.reached(phase)
        self.line(outcome.message)
        retried = f" ({self.retries} retried)" if self.retries else ""
        failed = f", {self.failures} failed" if self.failures else ""
        self.line(
            f"drive: {plural(self.phases_done, 'phase')}, {plural(self.asks, 'ask')}"
            f"{retried}{failed}, "
            f"{time.monotonic() - self.started:.1f} s"
        )

    def _tick(self) -> None:
        while not self._stop.wait(self.tick):
            with self._lock:
                self._write("")

    def _write(self, text: str) -> None:
        """``text``, then (on a terminal) the status line redrawn below it."""
        if self.tty:
            text = "\r\x1b[K" + text
            now = time.monotonic()
            busy = [f"{agent} {now - since:.0f} s" for agent, since in self._working.values()]
            if busy:
                text += "answering: " + ", ".join(busy)
        self.stream.write(text)
        self.stream.flush()


def _who(request: AgentRequest) -> str:
    """A request as a line names it: a task of the task board by its id and title, with
    the agent and attempt; any other by its agent and the start of its id."""
    context = request.context or {}
    task = context.get("x_task_id")
    if task is None:
        return f"{request.agent_name} ({request.request_id[:8]})"
    title = context.get("x_task_title")
    named = f"task {task} {json.dumps(title, ensure_ascii=False)}" if title else f"task {task}"
    return f"{named} ({request.agent_name}, attempt {context.get('x_attempt', '?')})"


def drive(
    outcome: Outcome,
    *,
    resume: Callable[[], Outcome],
    handler: str,
    workdir: Path | None,
    parallel: int = 4,
    handler_timeout: float | None = None,
    clock: Clock | None = None,
    progress: Progress | None = None,
    deliver: Callable[[dict[str, Any]], None] | None = None,
    current_phase: Callable[[], int] | None = None,
) -> Outcome:
    """Answer every pause of ``outcome`` with ``handler`` until the run ends.

    Each answer goes to ``deliver`` (a store's mailbox), or by default to the work
    directory's response files; without a work directory the handler gets no request
    file, only the request on its standard input.

    ``handler_timeout`` caps each handler's run (seconds) below the request's own
    ``timeout_seconds``: a handler still running then is killed and answered TIMEOUT.
    A pause for a durable timer is waited out on ``clock`` (the engine's). ``progress``
    tells what happens (default: on standard error); ``current_phase`` says which phase
    the run is in, so that the phases before a timer or a failure are told first.
    """
    progress = progress or Progress(sys.stderr)
    if deliver is None:
        assert workdir is not None, "answers go to a work directory or to deliver"
        deliver = _file_delivery(workdir / RESPONSES_DIR)
    told = None
    while outcome.status == "paused":
        if not outcome.pending and outcome.signal is not None:
            if outcome.message != told:  # said once, not at every look
                told = outcome.message
                progress.reached(current_phase() if current_phase is not None else None)
                progress.line(outcome.message)
                then = pause_hint(outcome, Mode.DRIVE)
                if then is not None:
                    progress.line(f"next: {then}")
            time.sleep(SIGNAL_POLL)  # a signal comes from outside: look again soon
            outcome = resume()
            continue
        if not outcome.pending:  # a durable timer: the phases before its own ended first
            progress.reached(current_phase() if current_phase is not None else None)
            progress.line(outcome.message)
            then = pause_hint(outcome, Mode.DRIVE)
            if then is not None:
                progress.line(f"next: {then}")
            _wait_for_timer(outcome, clock or SystemClock())
            outcome = resume()
            continue
        pending = outcome.pending
        progress.reached(min(request.phase for request in pending))
        for request in pending:
            progress.asked(request)

        several = len(pending) > 1

        def answer(request: AgentRequest, several: bool = several) -> dict[str, Any]:
            progress.answering(request)
            document = _ask_handler(handler, request, workdir, several, handler_timeout)
            progress.answered(request, document)
            return document

        with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
            documents = list(pool.map(answer, pending))
        for document in documents:
            deliver(document)
        outcome = resume()
    ended_in = None
    if outcome.status != "completed" and current_phase is not None:
        ended_in = current_phase()
    progress.finish(outcome, phase=ended_in)
    return outcome


#: Seconds between two looks of ``drive`` at a run waiting for a signal (a resume that
#: finds none writes nothing).
SIGNAL_POLL = 1.0


def _file_delivery(responses_dir: Path) -> Callable[[dict[str, Any]], None]:
    def deliver(document: dict[str, Any]) -> None:
        _written(responses_dir, make_directories, responses_dir)
        target = responses_dir / f"{document['request_id']}.json"
        # Not written: its request stays pending, and the next drive asks again.
        _written(target, atomic_write, target, dumps_canonical(document))

    return deliver


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
    workdir: Path | None,
    several: bool,
    handler_timeout: float | None = None,
) -> dict[str, Any]:
    payload = dump_document(request)
    env = {**os.environ, "ORCHESTRATOR_REQUEST_ID": request.request_id}
    if workdir is not None:
        # With several pending, .agent-request.json holds only the first: each handler is
        # pointed at its own request's file.
        env["ORCHESTRATOR_REQUEST_FILE"] = str(
            workdir / REQUESTS_DIR / f"{request.request_id}.json"
            if several
            else workdir / REQUEST_FILE
        )
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


def drive_engine(
    engine: Any,
    outcome: Outcome,
    args: Any,
    *,
    workdir: Path | None,
    deliver: Callable[[dict[str, Any]], None] | None = None,
) -> Outcome:
    """``drive`` with one engine for the whole loop (it re-reads the state only if
    something else changed it), as ``orchestrate drive`` runs it on either store."""
    phases = [(spec.number, spec.name) for spec in engine.workflow_cls.phases]
    forked = engine.record.forked_from
    copied_before = 0
    if forked is not None:  # the phases before the fork point were copied, not run
        copied_before = next((n for n, name in phases if name == forked.get("phase")), 0)
    return drive(
        outcome,
        resume=engine.resume,
        handler=args.handler or "",
        workdir=workdir,
        parallel=args.parallel,
        handler_timeout=args.handler_timeout,
        clock=engine.clock,
        progress=Progress(sys.stderr, phases=phases, copied_before=copied_before),
        deliver=deliver,
        current_phase=lambda: int(engine.state.phase),
    )
