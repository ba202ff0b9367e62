"""The file bridge: the agent bridge files in a work directory, and the invoker that defers
to them.

Layout of a work directory::

    .<workflow>-state.json        the state (source of truth), written durably
    .agent-request.json           the first pending request (what a host that knows only
                                  the format reads)
    .agent-requests/<id>.json     every pending request, when several are pending
    .agent-response.json          a host's answer to the first pending request (the one
                                  in .agent-request.json)
    .agent-responses/<id>.json    answers written in parallel, one file each, named for
                                  the request each answers
    .orchestrator/                the instance lock and each run's history: its final
                                  state, and the finished requests archived on the way
    .orchestrator/runs/<run_id>/  the run's evidence: events.ndjson, and an output
                                  directory with a results.json per phase and per agent
                                  request (see docs/steps.md)

Request files are derived from the state: they are renamed into place atomically but not
fsynced, because a resume after a crash writes them again from the state.

An operating system error on any of these files (a full disk, a read-only file system, a
failing device) leaves the bridge as a :class:`StorageError` that names the file; since
every write is atomic, the instance is as its last complete write left it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from .._errors import (
    ContractError,
    NoInstanceError,
    OrchestratorError,
    ResponseRejectedError,
    StateDamagedError,
    StorageError,
)
from .._ports import (
    ArchiveInput,
    Bridge,
    ConsumeInput,
    EvidenceInput,
    FinishInput,
    HostRequired,
    PublishInput,
    ReadSignalsInput,
    ReceivedResponse,
    SaveStateInput,
)
from ..formats.bridge import (
    REJECTED_DIR,
    REQUEST_FILE,
    REQUESTS_DIR,
    RESPONSE_FILE,
    RESPONSES_DIR,
    CheckpointState,
    state_file_name,
)
from ..formats.bridge_codec import (
    dump_document,
    encode_record_line,
    parse_response,
    parse_state,
    restore_archived,
)
from ..formats.signals import SIGNALS_FILE, SignalRecord
from ..formats.state_signature import with_signature
from ..formats.strict_json import loads_strict
from ..storage import beneath
from ..storage.checkpoints import (
    ANYWHERE,
    check_checkpoint,
    home_of,
    note_checkpoint,
    portable,
)
from ..storage.durable import (
    InstanceLock,
    atomic_write,
    fsync_directory,
    group_sync_covers_earlier_writes,
    remove_file,
    sha256_hex,
    sweep_temporaries,
    write_together,
)
from ..storage.files import STATE_MAX_BYTES, read_regular_file
from ..storage.runs import ARCHIVE_FILE, ENGINE_KEY, EVENTS_FILE, HISTORY_DIR, runs_dir
from ..storage.state_key import (
    EncodedItems,
    ReadMemo,
    check_key_outside,
    read_signed,
    signed_document,
)

MAX_RESPONSE_BYTES = 16 * 1024 * 1024


class FileBridgeInvoker:
    """The CLI's default invoker: no agent is called in-process; every ask goes to the host."""

    def invoke(
        self, agent_name: str, prompt: str, timeout_seconds: int = 120, **kwargs: Any
    ) -> str:
        raise HostRequired()


class FileBridge:
    """One workflow instance in ``workdir``, speaking through the agent bridge files."""

    def __init__(
        self,
        workdir: Path,
        workflow_name: str,
        *,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        reads: ReadMemo | None = None,
    ) -> None:
        """``reads``: what the command that builds this bridge learnt of the state's
        bytes (it read the workflow's name from them), for this bridge's own reads; one
        of its own otherwise."""
        self.workdir = workdir
        self.workflow_name = workflow_name
        self.max_response_bytes = max_response_bytes
        self.state_path = workdir / state_file_name(workflow_name)
        self.location = str(self.state_path)
        self.request_path = workdir / REQUEST_FILE
        self.response_path = workdir / RESPONSE_FILE
        self.requests_dir = workdir / REQUESTS_DIR
        self.responses_dir = workdir / RESPONSES_DIR
        self.private_dir = workdir / HISTORY_DIR
        self._swept = False
        # Directories of the run's evidence this bridge made or saw (and swept): not
        # looked for again at every checkpoint.
        self._known_dirs: set[Path] = set()
        self._requests_listed = True  # whether .agent-requests/ may hold files to withdraw
        self._saved: bytes | None = None  # the state's bytes as last written or read
        # The state's bytes this bridge signed, checked or parsed last (and no other's).
        self._reads = reads if reads is not None else ReadMemo()
        # What the history's items encoded to last time (its saves noted in ``_reads``).
        self._encoded = EncodedItems(self._reads)
        beneath.guard(workdir)  # nothing under it is reached through a link
        self._key_checked = False
        self._home: str | None = None  # the work directory's identity, once worked out

    def lock(self) -> InstanceLock:
        # Its directory is made when the lock file cannot be opened for want of it.
        return InstanceLock(self.private_dir / f"{self.workflow_name}.lock", make_directory=True)

    def exists(self) -> bool:
        # Anything at the state's name counts: a link or a FIFO there is refused when it
        # is read, never taken for "no instance here".
        return beneath.entry_exists(self.state_path)

    def load_state(self) -> CheckpointState:
        try:
            with _Naming("read", self.state_path):
                raw = read_regular_file(self.state_path, max_bytes=STATE_MAX_BYTES)
        except FileNotFoundError:
            raise NoInstanceError(
                f"{self.workdir}: no {self.workflow_name} instance here (no "
                f"{self.state_path.name}); start one with 'orchestrate run'"
            ) from None
        source = str(self.state_path)
        self._saved = None
        # Before anything in it is believed: whoever writes here may have edited it. The
        # signature is the file's, not the state's: it is made again at every save.
        self._check_key()
        data, written_here = read_signed(raw, source=source, reads=self._reads)
        # Signed by this key, and the latest it signed for the run, in this directory.
        check_checkpoint(data, self.workdir, source=source)
        try:
            state = parse_state(with_signature(data, None), source=source, items=not written_here)
        except ContractError as exc:
            raise StateDamagedError.wrap(exc) from None
        if written_here:
            self._encoded.take_from_read(state, raw, self._reads)
        self._saved = raw
        return state

    def set_aside(self) -> Path | None:
        """Move a (damaged) state file into ``.orchestrator/damaged/`` and clear the
        request and response files; returns where the state went."""
        kept = None
        with _Naming("move", self.state_path):
            if beneath.entry_exists(self.state_path):  # whatever it is: a FIFO, a link
                damaged = self.private_dir / "damaged"
                beneath.make_directories(damaged)
                kept = damaged / f"{self.state_path.name}.{os.getpid()}.{time.time_ns()}"
                beneath.rename(self.state_path, kept)
        self._clear_bridge_files()
        with _Naming("write", self.workdir):
            fsync_directory(self.workdir)
        return kept

    def save_state(self, request: SaveStateInput) -> int | None:
        self._check_key()
        record = request.state.phase_data.get(ENGINE_KEY)
        if isinstance(record, dict) and isinstance(record.get("run_id"), str):
            record["home"] = self._home_for(record)  # the run belongs here (signed so)
        data = signed_document(request.state, self._encoded)
        self._saved = None  # until it is written whole
        evidence = request.evidence
        if evidence is None:
            with _Naming("write", self.state_path):
                write_together([(self.state_path, data)])
        else:
            # One group: the state first, then the evidence files it makes true, then the
            # lines.
            self._write_evidence(evidence, lead=(self.state_path, data))
        self._saved = data
        self._note_checkpoint(request.state)
        return len(data)

    def _note_checkpoint(self, state: CheckpointState) -> None:
        """The state just written is its run's latest: noted beside the key."""
        record = state.phase_data.get(ENGINE_KEY)
        if isinstance(record, dict) and isinstance(record.get("revision"), int):
            home = self._home_for(record)
            note_checkpoint(record["run_id"], record["started_at"], home, record["revision"])

    def _home_for(self, record: dict[str, Any]) -> str:
        """The home of the run ``record`` is of, here (``storage.checkpoints.home_for``);
        this directory's identity is worked out once."""
        if portable(record):
            return ANYWHERE
        if self._home is None:
            self._home = home_of(self.workdir)
        return self._home

    def publish(self, request: PublishInput) -> None:
        if not self._swept:  # leftovers come from processes that died before this one
            self._sweep()
            self._swept = True
        pending = list(request.pending)
        wanted = {f"{r.request_id}.json" for r in pending} if len(pending) > 1 else set()
        with _Naming("write", self.requests_dir):
            if self._requests_listed or len(pending) > 1:
                stale = [n for n in beneath.list_directory(self.requests_dir) if n not in wanted]
                for name in stale:
                    remove_file(self.requests_dir / name)
                # Only the engine writes there: once found empty, it stays so until it
                # publishes several requests again.
                self._requests_listed = len(pending) > 1
            if len(pending) > 1:
                beneath.make_directories(self.requests_dir)
        for item in pending if len(pending) > 1 else ():
            path = self.requests_dir / f"{item.request_id}.json"
            with _Naming("write", path):
                atomic_write(path, dump_document(item), durable=False)
        with _Naming("write", self.request_path):
            if pending:
                atomic_write(self.request_path, dump_document(pending[0]), durable=False)
            else:
                remove_file(self.request_path)

    def read_responses(self) -> list[ReceivedResponse]:
        candidates = [self.response_path]
        with _Naming("read", self.responses_dir):
            names = beneath.list_directory(self.responses_dir)
        candidates += sorted(self.responses_dir / n for n in names if n.endswith(".json"))
        received = []
        for path in candidates:
            try:
                with _Naming("read", path):
                    raw = read_regular_file(path, max_bytes=self.max_response_bytes)
            except FileNotFoundError:
                continue
            except ContractError as exc:
                raise _rejected(path, exc) from None
            try:
                data = loads_strict(raw, source=str(path), max_bytes=self.max_response_bytes)
                response = parse_response(data, source=str(path))
            except ContractError as exc:
                raise _rejected(path, exc) from None
            single = path == self.response_path
            if not single and response.request_id != path.stem:
                raise _misnamed(path, response.request_id)
            received.append(
                ReceivedResponse(
                    response=response,
                    source=str(path),
                    sha256=sha256_hex(raw),
                    first_pending_only=single,
                )
            )
        return received

    def consume(self, request: ConsumeInput) -> None:
        # No directory fsync: a response file that reappears after a crash is recognised
        # by the digest the state recorded for it, and dropped without being applied (or
        # set aside again).
        for item in request.consumed:
            path = Path(item.source)
            with _Naming("remove", path):
                remove_file(path)
        for item, reason in request.rejected:
            self._set_aside(item, reason)

    def read_signals(self, request: ReadSignalsInput) -> list[SignalRecord]:
        path = runs_dir(self.workdir) / request.run_id / SIGNALS_FILE
        with _Naming("read", path):
            return read_signal_lines(path)

    def _set_aside(self, item: ReceivedResponse, reason: str) -> None:
        """Move a response refused at the gate to ``.agent-responses/rejected/``, with a
        ``.reason.txt`` beside it saying why; the answer itself is kept as it was."""
        rejected = self.responses_dir / REJECTED_DIR
        with _Naming("write", rejected):
            set_aside(Path(item.source), rejected, item.response.request_id, f"refused: {reason}")

    def archive(self, request: ArchiveInput) -> None:
        from ..storage.ndjson import append_joined_lines

        lines = b"".join(encode_record_line(record) for record in request.records)
        path = self._run_dir(request.run_id) / ARCHIVE_FILE
        with _Naming("write", path):
            # Where the next save's group sync covers it, that sync makes it durable before
            # the state that drops the records' text is in place.
            append_joined_lines(path, lines, durable=not group_sync_covers_earlier_writes())

    def evidence_mark(self, run_id: str) -> int:
        from ..storage.ndjson import last_line

        path = runs_dir(self.workdir) / run_id / EVENTS_FILE
        with _Naming("read", path):
            line = last_line(path)
        return _sequence_of(line)

    def write_evidence(self, request: EvidenceInput) -> None:
        self._write_evidence(request)

    def _write_evidence(
        self, request: EvidenceInput, *, lead: tuple[Path, bytes] | None = None
    ) -> None:
        """The evidence's files made durable as one group (after ``lead``, the state, in
        the same group), then its lines appended. Where the group's sync covers earlier
        writes, the lines are not synced here: the next group commit makes them durable
        before any state that no longer holds their events (a power cut before that loses
        only lines the state still holds, and the next resume writes them again)."""
        with beneath.keeping_directories():  # the files share the walk to their run
            self._write_evidence_walked(request, lead)

    def _write_evidence_walked(
        self, request: EvidenceInput, lead: tuple[Path, bytes] | None
    ) -> None:
        run_dir = runs_dir(self.workdir) / request.run_id
        if (
            lead is not None
            and run_dir not in self._known_dirs
            and not beneath.is_directory(run_dir)
        ):
            # A run's first checkpoint: its directory is made only once the state that
            # names the run is durable, so a crash before leaves no run without a state.
            with _Naming("write", lead[0]):
                write_together([lead])
            lead = None
        self._run_dir(request.run_id)  # made and known, if it was not
        files = [(run_dir.joinpath(*_segments(rel)), data) for rel, data in request.files]
        items = [lead, *files] if lead is not None else files
        with _Naming("write", *(path for path, _ in items)):
            try:
                try:
                    self._write_files(run_dir, files, items)
                except FileNotFoundError:
                    # A directory this bridge made went away under it: look again.
                    self._known_dirs.clear()
                    self._write_files(run_dir, files, items)
            except (OSError, OrchestratorError):
                if lead is None:
                    raise
                # The evidence could not be written: the state still is (its outbox keeps
                # the events for the next resume), and the evidence's error is the one told.
                write_together([lead])
                raise
        if request.lines:
            from ..storage.ndjson import append_joined_lines

            events = run_dir / EVENTS_FILE
            with _Naming("write", events):
                append_joined_lines(
                    events, request.lines, durable=not group_sync_covers_earlier_writes()
                )

    def _write_files(
        self, run_dir: Path, files: list[tuple[Path, bytes]], items: list[tuple[Path, bytes]]
    ) -> None:
        made: dict[Path, None] = {}  # new directories: their entries must last too
        make: dict[Path, None] = {}  # new directories the group commit makes
        known = self._known_dirs
        for path, _ in files:
            folder = path.parent
            if folder in known:
                continue
            if folder.parent in known:  # a step's new directory, made with its files
                make[folder] = None
                continue
            for directory in reversed(path.relative_to(run_dir).parents[:-1]):
                absolute = run_dir / directory
                if absolute not in known and _made(absolute):
                    made[absolute] = None
                known.add(absolute)
            if folder not in made:
                # Written again after a crash: a killed writer's temporary may be here.
                sweep_temporaries(folder)
        write_together(
            items, directories=list(dict.fromkeys(d.parent for d in made)), make=list(make)
        )
        known.update(make)

    def saved_token(self) -> object | None:
        # The bytes this bridge last wrote or read: what state_token reads while no one
        # else has written the state since.
        return self._saved

    def take_over(self, previous: Bridge) -> bool:
        if type(previous) is not FileBridge or previous.state_path != self.state_path:
            return False
        # What it knows of the state, which the caller has found unchanged; and what it
        # learnt of the work directory, as one bridge kept from resume to resume knows it
        # (a directory of the run's that went away meanwhile is looked for again, as then).
        self._saved, self._encoded = previous._saved, previous._encoded
        self._reads = previous._reads  # the one its saves note their bytes in
        self._swept, self._requests_listed = previous._swept, previous._requests_listed
        self._known_dirs = previous._known_dirs  # only ever added to, or emptied
        self._key_checked = previous._key_checked
        self._home = previous._home
        return True

    def state_token(self) -> object | None:
        # The content itself: reading a few kilobytes and comparing them is cheap (parsing
        # is not), and unlike inode and timestamps it cannot match a different state.
        try:
            with _Naming("read", self.state_path):
                return read_regular_file(self.state_path, max_bytes=STATE_MAX_BYTES)
        except FileNotFoundError:
            return None
        except ContractError:  # not a regular file any more: never equal, load_state says why
            return object()

    def finish(self, request: FinishInput) -> str:
        run_dir = self._run_dir(request.run_id)
        with _Naming("write", run_dir):
            # The run's own directories too: a writer killed mid-write left its temporary there.
            evidence = [Path(top) for top, _, _ in os.walk(run_dir)][1:]  # links not walked
            self._sweep(run_dir, *evidence)
        state = request.state
        archive = run_dir / ARCHIVE_FILE
        with _Naming("read", archive):
            if beneath.is_file(archive):
                lines = read_regular_file(archive, max_bytes=STATE_MAX_BYTES)
                state = restore_archived(state, lines, source=str(archive))
        history = run_dir / "state.json"
        # Signed again: the requests put back whole are part of what the signature covers.
        # A group commit: its sync also makes the last event lines durable, which the state
        # about to go is the only other keeper of.
        with _Naming("write", history):
            write_together([(history, signed_document(state))])
        # The state goes last: until it is gone, a crash resumes the run from it. The
        # bridge files' removal lasts first, so no request outlives the run's state.
        self._clear_bridge_files()
        with _Naming("write", self.workdir):
            fsync_directory(self.workdir)
        if request.then is not None:
            # The run goes on as a new one here: its first state replaces this one in one
            # rename, so a crash leaves one of the two live (a resume of the old goes on).
            request.then()
            return str(history)
        with _Naming("remove", self.state_path):
            remove_file(self.state_path)
            fsync_directory(self.workdir)
        return str(history)

    def _check_key(self) -> None:
        """The signing key must live outside this work directory (checked once)."""
        if not self._key_checked:
            check_key_outside(self.workdir)
            self._key_checked = True

    def _run_dir(self, run_id: str) -> Path:
        run_dir = runs_dir(self.workdir) / run_id
        if run_dir in self._known_dirs:
            return run_dir
        if not beneath.is_directory(run_dir):
            with _Naming("write", run_dir):
                beneath.make_directories(run_dir)
                # The new run's entry must last, and so must the entries above it that an
                # earlier command may have made without a sync (.orchestrator, runs).
                for directory in (run_dir.parent, self.private_dir, self.workdir):
                    fsync_directory(directory)
        self._known_dirs.add(run_dir)
        return run_dir

    def _sweep(self, *extra: Path) -> None:
        """Clear temporary files of writers that died mid-write (a crash leaves them)."""
        for directory in (self.workdir, self.requests_dir, self.responses_dir, *extra):
            with _Naming("write", directory):
                sweep_temporaries(directory)

    def _clear_bridge_files(self) -> None:
        for directory in (self.requests_dir, self.responses_dir):
            with _Naming("remove", directory):
                if beneath.is_directory(directory):
                    names = beneath.list_directory(directory)
                    for leftover in names:
                        if leftover != REJECTED_DIR:  # refused answers stay, for a person
                            remove_file(directory / leftover)
                    # Its emptiness lasts before it goes: a power cut must not bring back
                    # requests or answers of a run that is over.
                    fsync_directory(directory)
                    if REJECTED_DIR not in names:
                        beneath.remove_directory(directory)
        for path in (self.request_path, self.response_path):
            with _Naming("remove", path):
                remove_file(path)


def _made(directory: Path) -> bool:
    """Make ``directory`` unless it is there; whether it was made (its parents too, if a
    directory on the way went away)."""
    try:
        return beneath.make_directory(directory)
    except FileNotFoundError:
        beneath.make_directories(directory)
        return True


class _Naming:
    """Turns an operating system error raised inside into a :class:`StorageError` that
    names the file it concerns: one of ``targets`` (an atomic write's temporary file is
    named for its target), else the file the error names, else the directory of them all.
    """

    __slots__ = ("action", "targets")

    def __init__(self, action: str, *targets: Path) -> None:
        self.action = action
        self.targets = targets

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, traceback: object) -> None:
        if not isinstance(exc, OSError) or isinstance(exc, (OrchestratorError, FileNotFoundError)):
            return  # a missing file is the callers' "not there yet", not a failure
        raise StorageError.from_os_error(exc, path=self._failed_file(exc), action=self.action)

    def _failed_file(self, exc: OSError) -> str:
        named = os.fsdecode(exc.filename) if exc.filename is not None else None
        if named is not None:
            for target in self.targets:
                # atomic_write's temporary: .<name>.<pid>.tmp beside the target
                if named == os.path.join(target.parent, f".{target.name}.{os.getpid()}.tmp"):
                    return str(target)
            return named
        if len(self.targets) == 1:
            return str(self.targets[0])
        return os.path.commonpath([str(t.parent) for t in self.targets])


def _segments(relative: str) -> list[str]:
    """The parts of a path inside the run's directory; anything else is a programming error."""
    parts = relative.split("/")
    if relative.startswith("/") or any(p in ("", ".", "..") or "\\" in p for p in parts):
        raise ValueError(f"evidence path {relative!r} is not a plain relative path")
    return parts


def _sequence_of(line: bytes | None) -> int:
    """The ``x_seq`` of an event line written by the engine; 0 for none."""
    if line is None:
        return 0
    import json

    try:
        value = json.loads(line).get("x_seq", 0)
    except (ValueError, AttributeError):
        return 0
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def read_signal_lines(path: Path) -> list[SignalRecord]:
    """The signals of an inbox file, in order; none when it is missing. A torn last line
    (a sender killed mid-write) is no signal: its sender was never told it was kept."""
    from ..formats.signals import MAX_SIGNAL_BYTES, parse_signal
    from ..storage.ndjson import iter_records

    if not beneath.entry_exists(path):
        return []
    return [
        parse_signal(value, source=f"{path} line {number}")
        for number, value in iter_records(path, max_line_bytes=MAX_SIGNAL_BYTES + 4096)
    ]


def set_aside(path: Path, rejected: Path, name: str, reason: str) -> None:
    """Move the response file ``path`` into ``rejected`` as ``NAME.<ns>.json``, with a
    ``.reason.txt`` beside it; a file already gone (set aside before a crash, or by a
    racer, or taken by the host) is left at that."""
    stem = f"{name}.{time.time_ns()}"
    beneath.make_directories(rejected)
    try:
        beneath.rename(path, rejected / f"{stem}.json")
    except FileNotFoundError:
        return
    atomic_write(rejected / f"{stem}.reason.txt", f"{path}: {reason}\n".encode(), durable=False)


def _misnamed(path: Path, request_id: str) -> ResponseRejectedError:
    # The name and the content disagree about which request this answers: recording it
    # for either could give one request another's answer.
    return ResponseRejectedError(
        f"{path}: the file is named for request {path.stem}, but its request_id is "
        f"{request_id}; the response was refused and left as it is; the request is still "
        f"pending: name the file {request_id}.json if it answers {request_id}, or correct "
        f"its request_id to {path.stem}, then resume",
        path=str(path),
        reason="misnamed",
    )


def _rejected(path: Path, exc: ContractError) -> ResponseRejectedError:
    return ResponseRejectedError(
        f"{exc}; the response was refused and left as it is; the request is still pending: "
        "write a corrected response, then resume",
        path=str(path),
        reason=exc.rule or "invalid",
    )
