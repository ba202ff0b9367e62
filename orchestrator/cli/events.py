"""``orchestrate events``: a run's ``events.ndjson``, for a person, a pipe or a tracer.

The run is chosen as ``orchestrate history`` chooses it: the live instance of the work
directory (its ``.<workflow>-state.json`` names the run), else the latest finished run
under ``.orchestrator/runs/``, or the one ``--run`` names. Each event is printed as one
readable line (sequence number, UTC time, name, the facts that matter), or with ``--json``
as the very bytes of its line, for ``jq``. ``--type`` keeps some names (``agent.end``) or
namespaces (``agent.*``).

``--follow`` prints what is there, then what is appended, until the run is over: its log
ends with ``run.end`` and no live instance of it is left (a failed run keeps its instance
for a retry; a retry and a rewind go on in the same log), or, with ``--until-pause``,
until it ends with ``run.pause``. It waits for the run and its log to appear, and reads on
from the byte offset where it stopped, so a line is printed once, whole, and a line still
being written is left for the next look.
(Where no instance is live, the run it finds is the latest finished one, which has ended:
to watch a run from its start, begin in a directory without finished runs, or pass
``--run`` once its id is known.)

``--otlp FILE`` and ``--otlp-endpoint URL`` export the run as OpenTelemetry spans
(see :mod:`orchestrator.evidence.otel`) instead of listing it.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

from .._errors import ContractError, NoInstanceError, OrchestratorError, UsageError
from .._text import plural
from ..storage.runs import (
    EVENTS_FILE,
    is_run_id,
    latest_finished,
    live_state_files,
    run_id_in,
    runs_dir,
)
from . import common
from .common import Command
from .event_lines import describe_event

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Iterator
    from pathlib import Path
    from typing import BinaryIO

__all__ = [
    "EventTail",
    "LoggedEvent",
    "RunLog",
    "RunNotFoundError",
    "add_events_arguments",
    "cmd_events",
    "describe_event",
    "find_run",
    "follow",
    "run_is_over",
    "type_filter",
]

RUNS_DIR = ".orchestrator/runs"  # what messages call runs_dir(workdir)
DEFAULT_POLL_SECONDS = 0.25
DEFAULT_OTLP_TIMEOUT = 10.0
EXIT_OK, EXIT_INTERRUPTED = 0, 130
EVENT_RUN_END, EVENT_RUN_PAUSE = "run.end", "run.pause"
_NAME = r"[a-z0-9_]+(?:\.[a-z0-9_]+)*"
_TYPE_FILTER = re.compile(rf"({_NAME})(\.\*)?")
_TIME_ANY = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})"
)


class RunNotFoundError(NoInstanceError):
    """No run (or no log of it) where the command looked; ``workdir`` and ``run_id`` say
    where and which. A usage error (exit 2), as for every command that finds no run."""

    def __init__(self, message: str, *, workdir: str, run_id: str | None = None) -> None:
        self.workdir = workdir
        self.run_id = run_id
        super().__init__(message)


# -- the command line ----------------------------------------------------------------------


def add_events_arguments(sub: argparse.ArgumentParser) -> None:
    """The options of ``orchestrate events`` (``--workdir`` is added by the caller)."""
    sub.add_argument(
        "--run",
        default=None,
        metavar="RUN_ID",
        help="the run (default: the live instance's, else the latest finished run)",
    )
    sub.add_argument(
        "--type",
        dest="types",
        action="append",
        type=type_filter,
        default=[],
        metavar="NAME",
        help="show only these events: a name (agent.end) or a namespace (agent.*); repeatable",
    )
    sub.add_argument("--json", action="store_true", help="print the log's lines unchanged (for jq)")
    sub.add_argument(
        "--follow",
        action="store_true",
        help="keep printing new events until the run is over: it ended (completed, failed "
        "or cancelled) and no live instance of it is left, so a retry or a rewind is "
        "followed too (waits for the run to start)",
    )
    sub.add_argument(
        "--until-pause",
        action="store_true",
        help="with --follow: stop as well when the run pauses for its host (run.pause)",
    )
    sub.add_argument(
        "--poll",
        type=_positive_seconds,
        default=DEFAULT_POLL_SECONDS,
        metavar="SECONDS",
        help=f"how often --follow looks for new lines (default {DEFAULT_POLL_SECONDS})",
    )
    sub.add_argument(
        "--otlp",
        default=None,
        metavar="FILE",
        help="write the run as OpenTelemetry spans (OTLP/JSON) to FILE ('-': standard "
        "output) instead of listing it",
    )
    sub.add_argument(
        "--otlp-endpoint",
        default=None,
        metavar="URL",
        help="send those spans to an OTLP/HTTP endpoint through the OpenTelemetry SDK's exporter "
        "(http://HOST:4318 gets /v1/traces; headers from OTEL_EXPORTER_OTLP_HEADERS)",
    )
    sub.add_argument(
        "--otlp-timeout",
        type=_positive_seconds,
        default=DEFAULT_OTLP_TIMEOUT,
        metavar="SECONDS",
        help=f"give up on the endpoint after this long (default {DEFAULT_OTLP_TIMEOUT:g})",
    )


def type_filter(text: str) -> str:
    """A ``--type`` value checked: an event name, or a namespace ending in ``.*``."""
    if _TYPE_FILTER.fullmatch(text) is None:
        import argparse

        raise argparse.ArgumentTypeError(
            f"{text!r}: write an event name (agent.end) or a namespace ending in .* (agent.*)"
        )
    return text


def _positive_seconds(text: str) -> float:
    import argparse

    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0.0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: write a number of seconds above 0")
    return value


def cmd_events(args: argparse.Namespace, *, output: BinaryIO | None = None) -> int:
    """Run ``orchestrate events``; returns the exit code (0, also when the reader leaves;
    130 when interrupted)."""
    out = output if output is not None else sys.stdout.buffer
    exporting = args.otlp is not None or args.otlp_endpoint is not None
    _check_options(args, exporting)
    from .run_store import store_dsn

    dsn = store_dsn(args)
    try:
        if dsn is not None:
            return _on_store(args, dsn, out, exporting)
        workdir = _workdir(args.workdir)
        if exporting:
            return _export(args, workdir, out)
        show = _Printer(out, json_lines=args.json, types=args.types)
        if args.follow:
            follow(workdir, args.run, show=show, poll=args.poll, until_pause=args.until_pause)
            return EXIT_OK
        run = find_run(workdir, args.run)
        for event in _whole_log(run):
            show(event)
        show.flush()
        return EXIT_OK
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        if output is None and common.stdout_reader_gone():  # the reader left (``| head``)
            return common.reader_closed()
        raise


def _check_options(args: argparse.Namespace, exporting: bool) -> None:
    if args.until_pause and not args.follow:
        raise UsageError("--until-pause says when --follow stops: add --follow")
    if exporting and (args.json or args.types):
        raise UsageError(
            "--otlp and --otlp-endpoint export every event as spans; drop --json and --type"
        )
    if args.run is not None and not is_run_id(args.run):
        raise UsageError(
            f"--run {args.run!r} is not a run id; 'orchestrate history' or the names under "
            f"{RUNS_DIR} show them"
        )
    if args.otlp_endpoint is not None:
        from ..evidence.otel import traces_url

        try:
            traces_url(args.otlp_endpoint)
        except ValueError as exc:
            raise UsageError(f"--otlp-endpoint {exc}") from None


def _workdir(given: Path | None) -> Path:
    from pathlib import Path

    workdir = (given or Path.cwd()).resolve()
    if not workdir.is_dir():
        raise UsageError(f"work directory {workdir} does not exist")
    return workdir


# -- which run -----------------------------------------------------------------------------


class RunLog:
    """A run's directory and its ``events.ndjson``; ``chosen_by`` is the file (a state, a
    run directory) the choice was read from."""

    __slots__ = ("chosen_by", "directory", "run_id")

    def __init__(self, run_id: str, directory: Path, chosen_by: str) -> None:
        self.run_id = run_id
        self.directory = directory
        self.chosen_by = chosen_by

    @property
    def events_path(self) -> Path:
        return self.directory / EVENTS_FILE


def find_run(workdir: Path, run_id: str | None = None) -> RunLog:
    """The run ``orchestrate history`` would show: ``run_id``'s, else the live instance's,
    else the latest finished one (by its ``state.json``'s time); else
    :class:`RunNotFoundError` saying where it looked and what to do."""
    runs = runs_dir(workdir)
    if run_id is not None:
        directory = runs / run_id
        if directory.is_dir():
            return RunLog(run_id, directory, str(directory))
        raise RunNotFoundError(
            f"{workdir}: no run {run_id} under {runs} ({_known_runs(runs)}); pass one of "
            "them to --run, or --follow to wait for this one",
            workdir=str(workdir),
            run_id=run_id,
        )
    for state in live_state_files(workdir):
        own = _run_of_state(state)
        if own is not None:
            return RunLog(own, runs / own, str(state))
    latest = latest_finished(workdir)
    if latest is not None:
        return RunLog(latest.parent.name, latest.parent, str(latest))
    raise RunNotFoundError(
        f"{workdir}: no run here (no live instance, no .<workflow>-state.json, and no "
        f"finished run under {runs}); start one with 'orchestrate run' or 'orchestrate "
        "drive', point --workdir at its directory, or add --follow to wait for one",
        workdir=str(workdir),
    )


def _run_of_state(state: Path) -> str | None:
    """The run id a live state records; None when the state is gone (it just finished)
    or records none."""
    from ..storage.files import STATE_MAX_BYTES, read_json_file

    try:
        data = read_json_file(state, max_bytes=STATE_MAX_BYTES, allow_lone_surrogates=True)
    except FileNotFoundError:
        return None
    return run_id_in(data, source=str(state))


def _known_runs(runs: Path) -> str:
    names = sorted(p.name for p in runs.glob("*") if p.is_dir()) if runs.is_dir() else []
    if not names:
        return "there are none"
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return f"the runs here: {shown}"


# -- reading the log -----------------------------------------------------------------------


class LoggedEvent:
    """One line of the log: its bytes (without the newline), its 1-based line number,
    and the event it holds."""

    __slots__ = ("line", "number", "record")

    def __init__(self, line: bytes, number: int, record: dict[str, Any]) -> None:
        self.line = line
        self.number = number
        self.record = record

    @property
    def name(self) -> str:
        name: str = self.record["event"]
        return name

    @property
    def seq(self) -> int:
        """``x_seq``; the line number in a log written without it."""
        seq = self.record.get("x_seq")
        return seq if isinstance(seq, int) and not isinstance(seq, bool) else self.number


class EventTail:
    """Reads an ``events.ndjson`` from where the last read stopped, never from the start
    again: each call yields the whole lines appended since, checked as events."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.line_number = 0

    def read_new(self) -> Iterator[LoggedEvent]:
        """The events of the lines completed since the last call (``FileNotFoundError``
        while there is no log). A line torn mid-write is not one yet."""
        from ..storage.ndjson import iter_lines_from

        for end, line in iter_lines_from(self.path, self.offset):
            start = end - len(line) - 1
            number = self.line_number + 1 + self._blank_lines(self.offset, start)
            record = _event_of(line, f"{self.path} line {number}")
            self.offset, self.line_number = end, number
            yield LoggedEvent(line, number, record)

    def size(self) -> int:
        """How many bytes the log holds now (0 while there is none)."""
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0

    def _blank_lines(self, start: int, end: int) -> int:
        """How many blank lines (skipped by the reader) lie between two offsets."""
        if end <= start:
            return 0
        from ..storage.beneath import open_file

        with open(open_file(self.path, os.O_RDONLY), "rb") as file:
            file.seek(start)
            return file.read(end - start).count(b"\n")


def _event_of(line: bytes, where: str) -> dict[str, Any]:
    """The event a line holds, or ``ContractError`` naming the file, line and problem."""
    from ..formats.strict_json import DEFAULT_MAX_DEPTH
    from ..storage.ndjson import DEFAULT_MAX_LINE_BYTES, _parse_line

    # The engine's own log: event data a workflow gave may hold lone surrogates.
    value = _parse_line(line, where, DEFAULT_MAX_LINE_BYTES, DEFAULT_MAX_DEPTH, True)
    if not isinstance(value, dict):
        problem, path = f"is a JSON {type(value).__name__}, not an event object", "$"
    elif not isinstance(value.get("event"), str) or not value["event"]:
        problem, path = "has no event name (a string like 'agent.end')", "$.event"
    elif not isinstance(value.get("data"), dict):
        problem, path = "has no data object", "$.data"
    elif not isinstance(value.get("ts"), str) or _TIME_ANY.fullmatch(value["ts"]) is None:
        problem, path = "has no RFC 3339 time (like 2026-02-09T14:03:00.000Z)", "$.ts"
    else:
        return value
    raise ContractError(problem, source=where, json_path=path, rule="event")


def _whole_log(run: RunLog) -> Iterator[LoggedEvent]:
    try:
        yield from EventTail(run.events_path).read_new()
    except FileNotFoundError:
        raise RunNotFoundError(
            f"{run.directory}: run {run.run_id} has written no {EVENTS_FILE} yet (chosen "
            f"from {run.chosen_by}); add --follow to wait for its events",
            workdir=str(run.directory.parent.parent.parent),
            run_id=run.run_id,
        ) from None


def follow(
    workdir: Path,
    run_id: str | None,
    *,
    show: Callable[[LoggedEvent], None],
    poll: float,
    until_pause: bool = False,
) -> RunLog:
    """Show the run's events as they are appended until the run is over, and return the
    run. Waits, polling every ``poll`` seconds, for the run to start and for its log to
    appear, saying once on standard error what it waits for.

    A ``run.end`` alone does not end the watch: a failed run keeps its instance and may be
    retried, a paused, failed or completed one may be rewound, and each goes on in the same
    log. The run is over when its log ends with ``run.end`` and no live instance of the
    run is left (see :func:`run_is_over`). ``until_pause``: stop as well once the log ends
    with ``run.pause``, the run waiting for its host."""
    import time

    pause, tell = time.sleep, _tell
    run = _wait_for_run(workdir, run_id, poll=poll, sleep=pause, say=tell)
    tail = EventTail(run.events_path)
    told = False
    last: str | None = None
    while True:
        try:
            for event in tail.read_new():
                show(event)
                last = event.name
        except FileNotFoundError:
            if not told:
                tell(f"waiting for run {run.run_id} to write {run.events_path}")
                told = True
        _flush(show)
        if (until_pause and last == EVENT_RUN_PAUSE) or (
            last == EVENT_RUN_END and run_is_over(workdir, run.run_id, tail)
        ):
            return run
        pause(poll)


def run_is_over(workdir: Path, run_id: str, tail: EventTail) -> bool:
    """Whether the run whose log ended with ``run.end`` is over: no live instance of it is
    left in ``workdir``, and nothing was appended to the log while we looked (a retry or a
    rewind writes its event before the next read)."""
    size = tail.size()
    for state in live_state_files(workdir):
        if _run_of_state(state) == run_id:
            return False
    return tail.size() == size == tail.offset


def _wait_for_run(
    workdir: Path,
    run_id: str | None,
    *,
    poll: float,
    sleep: Callable[[float], None],
    say: Callable[[str], None],
) -> RunLog:
    told = False
    while True:
        try:
            return find_run(workdir, run_id)
        except RunNotFoundError:
            if not told:
                which = f"run {run_id}" if run_id else "a run"
                say(f"waiting for {which} to start in {workdir}")
                told = True
        sleep(poll)


def _tell(message: str) -> None:
    print(f"orchestrate: {message}", file=sys.stderr, flush=True)


def _flush(show: Callable[[LoggedEvent], None]) -> None:
    flush = getattr(show, "flush", None)
    if flush is not None:
        flush()


# -- printing ------------------------------------------------------------------------------


class _Printer:
    """Writes the events that pass the ``--type`` filters, as lines or as they are."""

    def __init__(self, out: BinaryIO, *, json_lines: bool, types: list[str]) -> None:
        self.out = out
        self.json_lines = json_lines
        self.names = {t for t in types if not t.endswith(".*")}
        self.prefixes = tuple(t[:-1] for t in types if t.endswith(".*"))  # "agent."
        self.everything = not types

    def wanted(self, name: str) -> bool:
        return self.everything or name in self.names or name.startswith(self.prefixes)

    def __call__(self, event: LoggedEvent) -> None:
        if not self.wanted(event.name):
            return
        if self.json_lines:
            self.out.write(event.line + b"\n")
        else:
            text = describe_event(event.record, seq=event.seq)
            self.out.write(text.encode("utf-8", "backslashreplace") + b"\n")

    def flush(self) -> None:
        self.out.flush()


# -- exporting -----------------------------------------------------------------------------


def _export(args: argparse.Namespace, workdir: Path, out: BinaryIO) -> int:
    """Write or send the run's spans (``--otlp``, ``--otlp-endpoint``); with ``--follow``,
    once the run has ended."""
    events: list[LoggedEvent] = []
    if args.follow:
        run = follow(
            workdir, args.run, show=events.append, poll=args.poll, until_pause=args.until_pause
        )
    else:
        run = find_run(workdir, args.run)
        events = list(_whole_log(run))
    if not events:
        raise RunNotFoundError(
            f"{run.events_path}: no events yet, so nothing to export; add --follow to "
            "export the run once it ends",
            workdir=str(workdir),
            run_id=run.run_id,
        )
    return _send_spans(args, events, run.run_id, out)


def _send_spans(
    args: argparse.Namespace, events: list[LoggedEvent], run_id: str, out: BinaryIO
) -> int:
    from ..evidence.otel import otlp_json_bytes, run_trace

    trace = run_trace([event.record for event in events], run_id=run_id)
    count = f"{plural(len(trace.spans), 'span')} of run {trace.run_id}"
    if args.otlp is not None:
        _write_export(args.otlp, otlp_json_bytes(trace), out)
        if args.otlp != "-":
            _tell(f"wrote {count} to {args.otlp}")
    if args.otlp_endpoint is not None:
        from ..evidence.otel import otlp_exporter, replay_spans

        exporter = otlp_exporter(args.otlp_endpoint, timeout=args.otlp_timeout)
        try:
            replay_spans(trace, exporter)
        finally:
            exporter.shutdown()
        _tell(f"sent {count} to {args.otlp_endpoint}")
    return EXIT_OK


# -- a run in a PostgreSQL store ------------------------------------------------------------


def _on_store(args: argparse.Namespace, dsn: str, out: BinaryIO, exporting: bool) -> int:
    """``events --store ... --run ID``: the run's log from the store's rows, the same
    lines as its ``events.ndjson``; ``--follow`` polls for new ones until the run has ended
    and is not live (a failed run can be retried, so it stays live)."""
    import time
    from contextlib import closing

    from .._ports import ReadEventsInput, RunInput
    from .run_store import open_run_store

    show: Callable[[LoggedEvent], None]
    collected: list[LoggedEvent] = []
    show = collected.append if exporting else _Printer(out, json_lines=args.json, types=args.types)
    with closing(open_run_store(args)) as store:
        run_id = store.read_run(RunInput(run_id=args.run)).run_id  # says so when none
        last, last_name = 0, ""
        while True:
            for seq, line in store.events(ReadEventsInput(run_id=run_id, after=last)):
                event = LoggedEvent(
                    line.rstrip(b"\n"), seq, _event_of(line, f"run {run_id} event {seq}")
                )
                show(event)
                last, last_name = seq, event.name
            if not args.follow or (args.until_pause and last_name == EVENT_RUN_PAUSE):
                break
            if last_name == EVENT_RUN_END and not store.read_run(RunInput(run_id=run_id)).live:
                # ended and not live: over, once nothing came while we asked
                if not store.events(ReadEventsInput(run_id=run_id, after=last)):
                    break
                continue
            _flush(show)
            time.sleep(args.poll)
    _flush(show)
    if exporting:
        if not collected:
            raise RunNotFoundError(
                f"run {run_id}: no events yet, so nothing to export; add --follow to "
                "export the run once it ends",
                workdir=dsn,
                run_id=run_id,
            )
        return _send_spans(args, collected, run_id, out)
    return EXIT_OK


def _write_export(target: str, body: bytes, out: BinaryIO) -> None:
    if target == "-":
        out.write(body)
        out.flush()
        return
    from pathlib import Path

    from ..storage.durable import atomic_write

    path = Path(target).resolve()
    try:
        atomic_write(path, body, durable=False)
    except OSError as exc:
        raise OrchestratorError(
            f"--otlp {path}: cannot write it ({exc.strerror or exc}); choose a file in a "
            "directory that exists and is writable"
        ) from None


def _declare_events(events: argparse.ArgumentParser) -> None:
    common.add_workdir(events)
    add_events_arguments(events)
    common.add_store(events, run=False)


COMMANDS = {
    "events": Command(
        "Show a run's events: filter, follow, or export them as OpenTelemetry spans.",
        _declare_events,
        cmd_events,
    ),
}
