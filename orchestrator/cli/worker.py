"""``orchestrate worker``: advance the runs of a PostgreSQL store, on any number of hosts.

Each of ``--concurrency`` slots has a connection of its own and loops: claim a run that
can advance (``WorkerRunStore.claim``; in PostgreSQL: candidates ``FOR UPDATE SKIP
LOCKED``, then the run's advisory lock), advance it with the in-process agent
``--agent`` names until it pauses, ends or is told to stop, let it go, claim the next.
With nothing to claim a slot sleeps on ``LISTEN orchestrator_ready`` until an answer or
a new run arrives, the next timer is due, or ``--orphan-check`` seconds pass (a worker
that died frees its runs' locks without a word: the look after that while is how they
are taken on).

SIGTERM or Ctrl-C: every slot finishes the step at hand (the engine stops at its next
checkpoint, the run left ``running`` for whoever comes next) and the worker exits 0.
A worker killed outright loses nothing: its locks die with its connections.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import threading
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from .._errors import OrchestratorError, ResponseRejectedError, UsageError
from .._text import plural, printable
from . import common
from .common import Command

if TYPE_CHECKING:
    from .._ports import WorkerRunStore

EXIT_OK, EXIT_ERROR = 0, 1
#: How long a run that failed to advance here is left alone by this worker (seconds).
BACKOFF = 30.0
#: How often a worker runs the task boards' watchdog while it has nothing to advance.
WATCH_EVERY = 5.0
#: The first and the longest wait before connecting again to a store that went away.
RECONNECT_FIRST, RECONNECT_LONGEST = 0.1, 5.0


def add_worker_arguments(sub: Any) -> None:
    sub.add_argument(
        "--concurrency",
        type=int,
        default=1,
        metavar="N",
        help="runs advanced at once, each on a connection of its own (default 1)",
    )
    sub.add_argument(
        "--until-idle",
        action="store_true",
        help="exit 0 once no run can advance (the rest wait for a host or a timer): for "
        "scripts and tests; without it a worker serves until stopped",
    )
    sub.add_argument(
        "--name",
        default=None,
        help="the worker's name in the runs' events (default: HOST:PID)",
    )
    sub.add_argument(
        "--orphan-check",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="how often an idle worker looks for runs whose worker died (default 5)",
    )


def cmd_worker(args: argparse.Namespace, dsn: str) -> int:
    from .._errors import UsageError
    from .run_store import worker_store

    if args.concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    worker_store(dsn).close()  # the store answers and its schema is current: say so now
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    name = args.name or f"{socket.gethostname()}:{os.getpid()}"
    fleet = Fleet(dsn, name=name, agent=args.agent, stop=stop, args=args)
    threads = [
        threading.Thread(target=fleet.serve, name=f"slot-{n}", daemon=True)
        for n in range(args.concurrency)
    ]
    say(f"worker {name}: serving {fleet.store_name} with {plural(args.concurrency, 'slot')}")
    for thread in threads:
        thread.start()
    while any(t.is_alive() for t in threads):
        for thread in threads:
            thread.join(timeout=0.2)
    say(f"worker {name}: stopped; {plural(fleet.advanced, 'advance')}, {fleet.failures} refused")
    return EXIT_OK if not fleet.fatal else EXIT_ERROR


def say(text: str) -> None:
    print(f"orchestrate: {printable(text, lines=True)}", file=sys.stderr, flush=True)


class Fleet:
    """What the slots of one worker process share."""

    def __init__(
        self, dsn: str, *, name: str, agent: str, stop: threading.Event, args: argparse.Namespace
    ) -> None:
        from .run_store import shown

        self.dsn = dsn
        self.store_name = shown(dsn)
        self.name = name
        self.agent = agent
        self.stop = stop
        self.until_idle = bool(args.until_idle)
        self.orphan_check = max(0.05, float(args.orphan_check))
        self.advanced = 0
        self.failures = 0
        self.fatal = False
        self._lock = threading.Lock()
        self._busy = 0
        self._backoff: dict[str, float] = {}  # run id -> monotonic time to try it again
        self._next_watch = 0.0  # when this worker next runs the boards' watchdog

    def serve(self) -> None:
        """One slot: serve on a connection; when it is lost, reconnect with backoff (the
        run at hand was let go: its lock died with the connection) and serve on."""
        from .run_store import worker_store

        delay = RECONNECT_FIRST
        while not self.stop.is_set():
            try:
                store = worker_store(self.dsn, migrate=False)
            except OrchestratorError as exc:
                say(f"worker {self.name}: {exc}; trying again in {delay:g} s")
                self.stop.wait(delay)
                delay = min(delay * 2, RECONNECT_LONGEST)
                continue
            delay = RECONNECT_FIRST
            try:
                try:
                    self._serve_on(store)
                finally:
                    store.close()
                return
            except Exception as exc:
                reason = " ".join(str(exc).split()) or type(exc).__name__
                if not store.lost:
                    # Not the store going away: this slot cannot go on. The others stop
                    # at their next checkpoint, and the worker exits 1 saying why.
                    say(f"worker {self.name}: a slot stopped on an error: {reason}")
                    self.fatal = True
                    self.stop.set()
                    return
                say(
                    f"worker {self.name}: lost its connection to {self.store_name} ({reason}); "
                    "the run at hand is left to whoever claims it next; reconnecting"
                )

    def _serve_on(self, store: WorkerRunStore) -> None:
        """Claim and advance runs on ``store`` until told to stop (or idle)."""
        while not self.stop.is_set():
            run_id = store.claim(skip=self._skipped())
            if run_id is None:
                if self._watch_boards(store):
                    continue  # a timed-out task's answer may have made a run able to go on
                if self.until_idle and self._idle(store):
                    return
                store.wait(self._sleep_for(store), stop=self.stop.is_set)
                continue
            with self._lock:
                self._busy += 1
            try:
                self._advance(store, run_id)
            finally:
                with self._lock:
                    self._busy -= 1

    def _advance(self, store: WorkerRunStore, run_id: str) -> None:
        from .._ports import RunInput
        from .engines import StoreChildRuns, advance, run_engine
        from .hints import Mode, pause_hint, run_options

        handled = None
        engine = None
        try:
            run = RunInput(run_id=run_id)
            engine = run_engine(store, run, self.agent)
            # Its children are runs of the store any worker claims; their end wakes it.
            engine.children = StoreChildRuns(store, self.agent, in_process=False)
            engine.recorder.worker = self.name
            engine.stop_requested = self.stop.is_set
            outcome = advance(store, run, engine)
            handled = getattr(engine.bridge, "inbox_seen", None)
            with self._lock:
                self.advanced += 1
            then = pause_hint(outcome, Mode.WORKER, options=run_options(store, run_id))
            hint = f"; next: {then}" if then else ""
            say(f"worker {self.name}: run {run_id}: {outcome.message}{hint}")
        except ResponseRejectedError as exc:
            # An answer the run refuses waits for its host to correct it: no worker takes
            # the run again until another answer comes (the inbox read so far is handled).
            handled = getattr(engine.bridge, "inbox_seen", None) if engine else None
            say(f"worker {self.name}: run {run_id} waits for its host: {exc}")
        except OrchestratorError as exc:
            if store.lost:
                raise  # not the run's doing: the slot reconnects, and claims it again
            # The run stays as it was; this worker leaves it alone for a while, and says why.
            with self._lock:
                self.failures += 1
                self._backoff[run_id] = time.monotonic() + BACKOFF
            say(f"worker {self.name}: run {run_id} not advanced: {exc}")
        finally:
            if engine is not None:
                from .telemetry import finish

                finish(engine)  # its spans go now, not when the worker stops
            store.release(run_id, handled=handled)

    def _watch_boards(self, store: WorkerRunStore) -> bool:
        """The task boards' watchdog, at most every WATCH_EVERY seconds per worker: on the
        board of each paused run, tasks whose subagent stopped heartbeating are timed out
        and their waiting requests answered TIMEOUT (another worker's pass at the same
        moment leaves the board to it). True when it timed a task out."""
        from .board_handoff import watch_store_board

        with self._lock:
            if time.monotonic() < self._next_watch:
                return False
            self._next_watch = time.monotonic() + WATCH_EVERY
        timed_out = 0
        for board_id in store.boards_of_paused_runs():
            try:
                found = watch_store_board(self.dsn, board_id)
            except OrchestratorError as exc:
                say(f"worker {self.name}: board {board_id}: the watchdog could not run: {exc}")
                continue
            if found:
                timed_out += len(found)
                stale = plural(len(found), "stale task")
                say(f"worker {self.name}: board {board_id}: {stale} timed out")
        return timed_out > 0

    def _skipped(self) -> list[str]:
        now = time.monotonic()
        with self._lock:
            for run_id in [r for r, until in self._backoff.items() if until <= now]:
                del self._backoff[run_id]
            return list(self._backoff)

    def _idle(self, store: WorkerRunStore) -> bool:
        """Nothing left that a worker could advance, and no slot of ours at work."""
        with self._lock:
            if self._busy:
                return False
            skipped = list(self._backoff)
        return store.advanceable(skip=skipped) == 0

    def _sleep_for(self, store: WorkerRunStore) -> float:
        """Until the next timer, or the next look for runs whose worker died."""
        wait = self.orphan_check
        if self.until_idle:
            wait = min(wait, 0.5)  # another worker's run may end at any time
        wake = store.next_wake()
        if wake is not None:
            due = (wake - datetime.now(timezone.utc)).total_seconds()
            wait = min(wait, max(due, 0.0))
        return wait


def _declare_worker(worker: argparse.ArgumentParser) -> None:
    common.add_store(worker, run=False, needed=True)
    common.add_agent(worker)
    add_worker_arguments(worker)
    common.add_otlp(worker)


def _cmd_worker(args: argparse.Namespace) -> int:
    from .run_store import store_dsn

    dsn = store_dsn(args)
    if dsn is None:
        raise UsageError(
            "a worker advances the runs of a PostgreSQL store: give --store DSN (or set "
            "ORCHESTRATOR_STORE)"
        )
    return cmd_worker(args, dsn)


COMMANDS = {
    "worker": Command(
        "Advance runs of a PostgreSQL store: claim each run that can go on (new, "
        "answered, a timer due, or left by a worker that died), advance it under its lock, "
        "wait for the next; stops cleanly on SIGTERM or Ctrl-C after the step at hand.",
        _declare_worker,
        _cmd_worker,
    ),
}
