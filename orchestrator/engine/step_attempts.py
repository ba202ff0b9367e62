"""Step attempts: a ``ctx.step`` run under a retry policy, a timeout, or both.

Each attempt that fails is journaled, and its checkpoint saved, before the wait for the
next one begins: a process killed between two attempts goes on, when resumed, with the
next attempt, not the first. The journal entry of a step between attempts holds the
attempts so far and when the next one is due (``JournalEntry.next_attempt_at``); the
entry of a step that is over holds every attempt beside its result or its error.

A wait of up to :data:`IN_PROCESS_WAIT_LIMIT` seconds happens in the process, on the
engine's clock (a test's clock moves at once); a longer one is a durable timer: the run
pauses (exit 42, no request) until the next attempt is due, as ``ctx.sleep`` does.

A timeout abandons the attempt: a function runs in a worker thread, and when the time is
up the step goes on without it. A thread cannot be killed: the function may still finish
(its side effects happen), and its late result is thrown away.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from .._errors import CommandFailedError, RunFailedError, StepFailedError, StepTimeoutError
from .._ports import Clock
from ..formats.times import format_time, parse_time
from ..storage import durable as _durable
from .record import JournalEntry, Pause
from .workflow import RetryPolicy

if TYPE_CHECKING:
    from .engine import Engine

__all__ = [
    "IN_PROCESS_WAIT_LIMIT",
    "ONCE",
    "StepAttempts",
    "call_within",
    "failure_record",
    "recorded_failure",
    "timeout_seconds",
    "wait_on",
]

#: The longest wait between two attempts spent in the process (seconds); a longer one
#: pauses the run as a durable timer.
IN_PROCESS_WAIT_LIMIT = 60.0

#: A step with a timeout and no policy is run once.
ONCE = RetryPolicy(attempts=1, initial_delay=0, max_delay=0, jitter=0)


def timeout_seconds(timeout: Any, where: str) -> float | None:
    """``timeout`` (a ``timedelta``, or seconds) as a number of seconds above 0."""
    if timeout is None:
        return None
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
    number = isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
    if not number or not 0 < seconds < 10**9:
        raise RunFailedError(
            f"{where}: timeout takes a timedelta or seconds above 0 "
            f"(timedelta(seconds=30)), not {timeout!r}"
        )
    return float(seconds)


def failure_record(exc: BaseException) -> dict[str, Any]:
    """What the journal keeps of an exception a step raised: its class and message (and
    the facts it carries, for the engine's own errors), to raise it again on replay."""
    kind = type(exc)
    record: dict[str, Any] = {"type": f"{kind.__module__}:{kind.__qualname__}", "message": str(exc)}
    if isinstance(exc, (StepTimeoutError, CommandFailedError)):
        record["facts"] = exc.facts()
    return record


def recorded_failure(name: str, error: dict[str, Any]) -> Exception:
    """The exception a step raised, made again from its record: its class with the
    recorded message when that class can be found and built from one string, else a
    :class:`StepFailedError` that says what it was."""
    import importlib

    module_name, _, qualname = str(error["type"]).partition(":")
    message = str(error["message"])
    facts = error.get("facts")
    try:
        found: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
        if isinstance(found, type) and issubclass(found, Exception):
            rebuilt = found(message, **facts) if isinstance(facts, dict) else found(message)
            if str(rebuilt) == message:
                return rebuilt
    except Exception:  # any failure to rebuild it falls back to StepFailedError
        pass
    return StepFailedError(
        f"step {name!r} failed when it ran: {error['type']}: {message}",
        step=name,
        error_type=str(error["type"]),
    )


def wait_on(clock: Clock, seconds: float) -> None:
    """Wait ``seconds`` on ``clock`` (its ``sleep``; a test's clock moves at once), or in
    real time when the clock has no ``sleep``."""
    sleep = getattr(clock, "sleep", None)
    if sleep is None:
        import time

        sleep = time.sleep
    sleep(seconds)


def call_within(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    name: str,
    seconds: float,
) -> Any:
    """``fn(*args, **kwargs)`` in a worker thread, given up after ``seconds``: then
    :class:`StepTimeoutError`, and whatever the thread returns later is thrown away."""
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def attempt() -> None:
        try:
            outcome["result"] = fn(*args, **kwargs)
        except BaseException as exc:  # handed to the phase's thread, which decides
            outcome["error"] = exc
        finally:
            done.set()

    # A daemon: an abandoned attempt does not keep the process alive at its end.
    threading.Thread(target=attempt, name=f"step {name}", daemon=True).start()
    if not done.wait(seconds):
        raise StepTimeoutError(
            f"step {name!r} ran past its timeout of {seconds:g} s and was abandoned",
            step=name,
            seconds=seconds,
        )
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


class StepAttempts:
    """Runs one step's attempts as its policy says, journaling each before the next."""

    def __init__(
        self,
        engine: Engine,
        *,
        position: int,
        name: str,
        policy: RetryPolicy | None,
        timeout: float | None,
    ) -> None:
        self._engine = engine
        self._position = position
        self._name = name
        self._policy = policy or ONCE
        self._timeout = timeout

    def run(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        store: Callable[[Any], Any],
        recorded: JournalEntry | None,
    ) -> Any:
        """Run the step's next attempts until one returns (its result is journaled with
        ``store(result)``), or one fails that the policy does not retry, or attempts run
        out (the last error is journaled and raised). ``recorded``: the step's entry
        between two attempts, when an earlier process journaled one."""
        engine, policy = self._engine, self._policy
        attempts: list[dict[str, Any]] = list(recorded.attempts or []) if recorded else []
        if recorded is not None and recorded.next_attempt_at is not None:
            if engine.replay_only:
                raise Pause()  # the recorded run waits here for its next attempt
            self._wait_until(recorded.next_attempt_at)
        while True:
            number = len(attempts) + 1
            if number > policy.attempts:  # the code now allows fewer than were made
                return self._give_up(attempts)
            started = engine.clock.now()
            try:
                result = self._attempt(fn, args, kwargs)
            except Exception as exc:
                attempts.append(self._ended(number, started, exc))
                if number < policy.attempts and policy.retries(exc):
                    wake = engine.clock.now() + timedelta(seconds=policy.delay(number))
                    self._tell(attempts[-1], exc, retry_at=format_time(wake))
                    engine.journal.record_step(
                        self._position,
                        self._name,
                        None,
                        attempts=list(attempts),
                        next_attempt_at=format_time(wake),
                    )
                    _durable.crash_point(f"after-step-attempt {self._name}")
                    self._wait_until(format_time(wake))
                    continue
                self._tell(attempts[-1], exc)
                engine.journal.record_step(
                    self._position,
                    self._name,
                    None,
                    error=failure_record(exc),
                    attempts=list(attempts),
                )
                raise
            _durable.crash_point(f"after-step-run {self._name}")
            stored = store(result)
            attempts.append(self._ended(number, started, None))
            self._tell(attempts[-1], None)
            engine.journal.record_step(self._position, self._name, stored, attempts=list(attempts))
            return result

    def _attempt(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        if self._timeout is None:
            return fn(*args, **kwargs)
        return call_within(fn, args, kwargs, name=self._name, seconds=self._timeout)

    def _ended(self, number: int, started: Any, exc: BaseException | None) -> dict[str, Any]:
        ended = self._engine.clock.now()
        attempt: dict[str, Any] = {
            "attempt": number,
            "started_at": format_time(started),
            "duration_ms": round(max(0.0, (ended - started).total_seconds()) * 1000),
        }
        if exc is not None:
            # Its class and message: the facts (a command's output) stay with the step's
            # own error, so a state of many tries stays small.
            attempt["error"] = {k: v for k, v in failure_record(exc).items() if k != "facts"}
            attempt["timed_out"] = isinstance(exc, StepTimeoutError)
        return attempt

    def _tell(
        self, attempt: dict[str, Any], exc: BaseException | None, *, retry_at: str | None = None
    ) -> None:
        """The attempt's ``tool.call``/``tool.result``, with its number and what follows."""
        facts: dict[str, Any] = {
            "attempt": attempt["attempt"],
            "max_attempts": self._policy.attempts,
            "duration_ms": attempt["duration_ms"],
        }
        if exc is not None:
            facts["error_type"] = type(exc).__name__
            facts["timed_out"] = isinstance(exc, StepTimeoutError)
        if retry_at is not None:
            facts["retry_at"] = retry_at
        error = None if exc is None else f"{type(exc).__name__}: {exc}"
        started = parse_time(attempt["started_at"])
        self._engine.recorder.step(self._name, started, error=error, attempt=facts)

    def _wait_until(self, wake: str) -> None:
        """Wait for the next attempt: in the process for a short wait, else pause the run
        until it is due (a durable timer, as ``ctx.sleep``)."""
        engine = self._engine
        left = (parse_time(wake) - engine.clock.now()).total_seconds()
        if left > IN_PROCESS_WAIT_LIMIT:
            engine.journal.sleep_until(wake)  # pauses: the wake time is in the journal
        if left > 0:
            wait_on(engine.clock, left)
        engine.record.waiting_until = None

    def _give_up(self, attempts: list[dict[str, Any]]) -> Any:
        """Attempts ran out before this one (the policy allows fewer than the journal
        holds): the last attempt's error is the step's."""
        error = attempts[-1]["error"]
        self._engine.journal.record_step(
            self._position, self._name, None, error=error, attempts=list(attempts)
        )
        raise recorded_failure(self._name, error)
