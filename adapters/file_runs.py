"""The work directory's run store: the :class:`orchestrator._ports.RunStore` port over
the files one work directory keeps.

A work directory holds at most one live instance (its state file
``.<workflow>-state.json``, its published requests and the answers not yet read beside
it) and the runs it kept under ``.orchestrator/runs/<run id>/`` (each ended run's last
state, its archived requests, its events and evidence files). A run here is named by its
id, or by nothing: then the live instance, else the run that ended last.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import attrs

from .._errors import (
    AnswerRefusedError,
    ContractError,
    InstanceExistsError,
    NoInstanceError,
    OrchestratorError,
    StateDamagedError,
    StorageError,
    UsageError,
)
from .._ports import (
    AdvancedInput,
    AnswerInput,
    BoardStore,
    BoardTailInput,
    Bridge,
    ListRunsInput,
    OpenRunInput,
    PendingDocument,
    PendingInput,
    PrunedRun,
    PruneInput,
    QueueRunInput,
    ReadEventsInput,
    RespondInput,
    RunFileInput,
    RunInput,
    RunListing,
    SendSignalInput,
    StoredRun,
)
from ..formats.bridge import (
    REJECTED_DIR,
    REQUEST_FILE,
    REQUESTS_DIR,
    RESPONSE_FILE,
    RESPONSES_DIR,
    CheckpointState,
    HistoryStatus,
)
from ..storage.runs import (
    ENGINE_KEY,
    HISTORY_DIR,
    find_live_state,
    is_run_id,
    live_state_files,
    live_state_path,
    load_run,
    run_id_in,
    runs_dir,
)

# ``typing`` is not needed at run time; keeping it out of the imports keeps start-up cheap.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..storage.state_key import ReadsHanded

MAX_RESPONSE = 16 * 1024 * 1024  # as the file bridge reads one
MAX_FILES = 500  # the evidence files a run lists
BOARD_DIR = ".board"


class FileRunStore:
    """The runs of ``workdir``. ``boards``: opens the store of the task board in a
    directory (the board wing's file store), for :meth:`board_store`."""

    def __init__(
        self, workdir: Path, *, boards: Callable[[Path], BoardStore] | None = None
    ) -> None:
        self.workdir = workdir
        self.name = str(workdir)
        self.mailbox_directory: Path | None = workdir
        self._boards = boards
        self._seen: dict[Path, tuple[int, int, RunListing | None]] = {}
        # What ``workflow_of`` learnt of a state's bytes, for the bridge built next for it
        # (made at the first look: a command that looks at none imports no signature).
        self._handed: ReadsHanded | None = None

    def close(self) -> None:
        pass

    def __enter__(self) -> FileRunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def command_arguments(self, run_id: str) -> list[str]:
        return ["--workdir", str(self.workdir)]

    def named_run(self, run_id: str) -> str | None:
        return None  # the work directory names its run

    def answer_hint(self, request: AnswerInput) -> str:
        if request.pending_count == 1:
            return str(self.workdir / RESPONSE_FILE)
        return str(self.workdir / RESPONSES_DIR / f"{request.request_id}.json")

    def host_lines(self, request: AdvancedInput) -> list[str]:
        if len(request.pending) == 1:
            return [str(self.workdir / REQUEST_FILE)]
        return [str(self.workdir / REQUESTS_DIR / f"{rid}.json") for rid in request.pending]

    # -- the live instance ----------------------------------------------------------------

    def state_path(self, workflow: str | None = None) -> Path:
        """The state file of the live instance (of ``workflow``, by its name); one that is
        not a regular file (a FIFO, a directory) is a damaged state."""
        return live_state_path(self.workdir, workflow)

    def find_state(self, workflow: str | None = None) -> Path:
        """Where the instance's state is, whatever it is (read nothing: a FIFO would block)."""
        return find_live_state(self.workdir, workflow)

    # -- listing --------------------------------------------------------------------------

    def list_runs(self, request: ListRunsInput) -> list[RunListing]:
        """The live instance and the kept runs, each read again only when its state file
        changed (a list of a thousand runs parses only what moved since the last)."""
        rows: list[RunListing] = []
        seen: dict[Path, tuple[int, int, RunListing | None]] = {}
        live: set[str] = set()
        for state_path in live_state_files(self.workdir):
            row = self._cached(state_path, seen, _live_listing)
            if row is not None:
                live.add(row.run_id)
                rows.append(row)
        for state in runs_dir(self.workdir).glob("*/state.json"):
            if state.parent.name in live or not is_run_id(state.parent.name):
                continue
            row = self._cached(state, seen, _ended_listing)
            if row is not None:
                rows.append(row)
        self._seen = seen
        if request.status:
            rows = [r for r in rows if r.status in request.status]
        return sorted(rows, key=lambda r: r.updated_at, reverse=True)[: request.limit]

    def _cached(
        self,
        path: Path,
        seen: dict[Path, tuple[int, int, RunListing | None]],
        read: Callable[[Path], RunListing | None],
    ) -> RunListing | None:
        try:
            info = path.stat()
        except OSError:
            return None
        known = self._seen.get(path)
        if known is not None and known[:2] == (info.st_mtime_ns, info.st_size):
            seen[path] = known
            return known[2]
        row = read(path)
        seen[path] = (info.st_mtime_ns, info.st_size, row)
        return row

    # -- one run --------------------------------------------------------------------------

    def read_run(self, request: RunInput) -> StoredRun:
        """The live instance (the one ``request`` names, by its run id or its workflow, or
        the only one), else a run the directory kept (``request.run_id``'s, or the one
        that ended last), else a child run kept here (read in its own place)."""
        live_path = self._live_for(request)
        problem = None
        named = request.run_id
        if live_path is None and named is not None and not _kept(self.workdir, named):
            child = self._child_named(named)
            if child is not None:
                return child.read_run(request)
        if live_path is not None:
            state, problem = read_live(live_path, signed_only=request.signed_only)
            source = str(live_path)
        elif request.live_only:
            self.state_path(request.workflow)  # NoInstanceError: nothing to act on here
            raise NoInstanceError(f"{self.workdir}: run {request.run_id} is not live here")
        elif request.run_id is not None and _kept(self.workdir, request.run_id):
            kept = runs_dir(self.workdir) / request.run_id / "state.json"
            state, problem = read_kept(kept, signed_only=request.signed_only)
            source = str(kept)
            if _run_id_of(state) != request.run_id:
                raise NoInstanceError(f"{kept}: holds another run than {request.run_id}")
        else:
            try:
                state, source = load_run(
                    self.workdir, request.run_id, signed_only=request.signed_only
                )
            except NoInstanceError:
                if request.run_id is None and request.workflow is None:
                    raise NoInstanceError(
                        f"{self.workdir}: no workflow instance here (no .<workflow>-state.json) "
                        f"and no finished run (nothing under {runs_dir(self.workdir)}); start "
                        "one with 'orchestrate run WORKFLOW'"
                    ) from None
                raise
        record = state.phase_data.get(ENGINE_KEY)
        record = record if isinstance(record, dict) else {}
        reference = record.get("workflow")
        return StoredRun(
            run_id=str(record.get("run_id") or request.run_id or ""),
            workflow_name=str(record.get("workflow_name", "")),
            status=str(record.get("status", "")),
            live=live_path is not None,
            source=source,
            state=state,
            problem=problem,
            workflow_ref=reference if isinstance(reference, str) else None,
        )

    def _live_for(self, request: RunInput) -> Path | None:
        """The state file of the live instance ``request`` names, ``None`` when none is."""
        if request.workflow:
            return self.state_path(request.workflow)
        if request.run_id is None:
            if not any(self.workdir.glob(".*-state.json")):
                return None
            return self.state_path(None)
        for state_path in live_state_files(self.workdir):
            try:
                data = json.loads(state_path.read_bytes())
                if run_id_in(data, source=str(state_path)) == request.run_id:
                    return state_path
            except (OSError, ValueError, OrchestratorError):
                continue
        return None

    def run_board(self, request: RunInput) -> BoardStore | None:
        return self.board_store("") if self.boards() and self._boards is not None else None

    def set_aside(self, request: RunInput) -> str:
        """Set the live instance's state aside without reading it (damaged may mean not
        even a file); where it was moved."""
        from .file_bridge import FileBridge

        state_path = self.find_state(request.workflow)
        bridge = FileBridge(self.workdir, state_path.name[1 : -len("-state.json")])
        with bridge.lock():
            kept = bridge.set_aside()
        return str(kept)

    def workflow_of(self, request: RunInput) -> str:
        """The workflow reference recorded at ``run``, read without structuring the state,
        from a state whose signature holds: nothing a state names is imported before."""
        from ..storage.files import STATE_MAX_BYTES, read_regular_file
        from ..storage.state_key import ReadMemo, ReadsHanded, check_key_outside, read_signed

        state_path = self.state_path(request.workflow)
        source = str(state_path)
        try:
            raw = read_regular_file(state_path, max_bytes=STATE_MAX_BYTES)
        except ContractError as exc:
            raise StateDamagedError.wrap(exc) from None
        except FileNotFoundError:
            raise
        except OSError as exc:  # a read that failed in the device names no file
            raise StorageError.from_os_error(exc, path=source, action="read") from exc
        check_key_outside(state_path.parent)
        # Only looked at: the bridge built next for this instance reuses the check and the
        # parse (``bridge``).
        reads = ReadMemo()
        data, _ = read_signed(raw, source=source, peek=True, reads=reads)
        if self._handed is None:
            self._handed = ReadsHanded()
        self._handed.leave(source, reads)
        try:
            reference = data["phase_data"][ENGINE_KEY]["workflow"]
        except (KeyError, TypeError):
            reference = None
        if not isinstance(reference, str):
            raise StateDamagedError(
                "no workflow reference recorded, so orchestrate did not write it",
                source=source,
                json_path=f"$.phase_data.{ENGINE_KEY}.workflow",
                rule="required",
            )
        return reference

    def relocate_hint(self, request: RunInput) -> str | None:
        state_path = self.state_path(request.workflow)
        return f"orchestrate trust {state_path} --workflow NEW/PATH.py:Class"

    # -- the hosts' side ------------------------------------------------------------------

    def pending(self, request: PendingInput) -> list[PendingDocument]:
        """The requests the live instance waits for, as their files hold them; of run
        ``request.run_id`` only when given (a run not here is an error)."""
        from ..formats.bridge_codec import dump_document

        found = []
        paths = live_state_files(self.workdir)
        if request.workflow:
            paths = [self.state_path(request.workflow)]
        for state_path in paths:
            state = read_state(state_path, signed_only=True)
            run_id = _run_id_of(state)
            if request.run_id is not None and run_id != request.run_id:
                continue
            for record in state.agent_requests:
                if record.status is HistoryStatus.PENDING:
                    document = dump_document(record.request())
                    found.append(
                        PendingDocument(
                            run_id=run_id, request_id=record.request_id, document=document
                        )
                    )
        own = {p.run_id for p in found} | self._live_run_ids(request)
        for _, child in self.child_stores():
            # A child's requests are its parent's host's to answer: one inbox.
            for item in child.pending(PendingInput()):
                if request.run_id is None or request.run_id in own or item.run_id == request.run_id:
                    found.append(item)
        if request.run_id is not None and not found:
            if self._child_named(request.run_id) is not None:
                return found
            self.read_run(RunInput(run_id=request.run_id))  # unknown: NoInstanceError
        return found

    def _live_run_ids(self, request: PendingInput) -> set[str]:
        """The run ids of the live instances ``request`` names."""
        if request.run_id is None:
            return set()
        live = self._live_for(RunInput(run_id=request.run_id, workflow=request.workflow))
        return {request.run_id} if live is not None else set()

    def answered(self, request: RunInput) -> frozenset[str]:
        from ..storage import beneath
        from ..storage.files import read_regular_file

        pending = [p.request_id for p in self.pending(PendingInput(run_id=request.run_id))]
        found = {r for r in pending if beneath.is_file(self.workdir / RESPONSES_DIR / f"{r}.json")}
        try:
            document = json.loads(
                read_regular_file(self.workdir / RESPONSE_FILE, max_bytes=MAX_RESPONSE)
            )
        except (OSError, ValueError, OrchestratorError):
            document = None
        if isinstance(document, dict) and document.get("request_id") in pending:
            found.add(str(document["request_id"]))
        return frozenset(found)

    def respond(self, request: RespondInput) -> str:
        """Take the answer where the instance's next resume reads it, through the answer
        gate: the request must be pending and unanswered (the first answer wins: the file
        is created, never replaced) and the answer of the shape it asks for. Returns the
        file's path; a refusal writes nothing."""
        from ..formats.answer_gate import admit_answer
        from ..formats.bridge_codec import dump_document
        from ..storage.beneath import make_directories
        from ..storage.durable import create_new

        child = self._child_named(request.run.run_id)
        if child is not None and self._live_for(request.run) is None:
            return child.respond(request)  # a child run's request: answered in its place
        state_path = self._live_path(request.run)
        state = read_state(state_path, signed_only=True)
        waiting = [r for r in state.agent_requests if r.status is HistoryStatus.PENDING]
        request_id = request.response.request_id
        asked = next((r.request() for r in waiting if r.request_id == request_id), None)
        if asked is None:
            for _, child in self.child_stores():  # a child's request, answered from here
                owner = {p.request_id: p.run_id for p in child.pending(PendingInput())}
                if request_id in owner:
                    return child.respond(
                        attrs.evolve(request, run=RunInput(run_id=owner[request_id]))
                    )
            pending = [r.request_id for r in waiting]
            listed = f"pending: {', '.join(pending)}" if pending else "nothing is pending"
            raise AnswerRefusedError(
                f"{state_path}: request {request_id} is not pending; {listed}",
                reason="not-pending",
            )
        if request.check_shape:
            admit_answer(asked, request.response, where=str(state_path))
        single = self.workdir / RESPONSE_FILE
        named = self.workdir / RESPONSES_DIR / f"{request_id}.json"
        target = single if len(waiting) == 1 else named
        for path in (single, named):
            if self._refuse_if_answered(path, request_id) and path == target:
                _set_aside(path, "not a valid answer to a pending request; replaced by respond")
        try:
            make_directories(target.parent)
            create_new(target, dump_document(request.response))
        except FileExistsError:  # another answer came first, between the look and now
            self._refuse_if_answered(target, request_id, anything=True)
            raise
        except OSError as exc:  # nothing of this answer is left
            raise StorageError.from_os_error(exc, path=str(target), action="write") from exc
        return str(target)

    def send_signal(self, request: SendSignalInput) -> str:
        """Append the signal to the inbox of the run that takes it (``--run``'s, else the
        run here that waits for it, else the live instance), synced before this returns,
        after the answer gate took its payload; a signal id already there is kept once."""
        from .file_signals import append_signal, waiting_for_signal

        child = self._child_named(request.run.run_id)
        if child is not None and self._live_for(request.run) is None:
            return child.send_signal(request)  # a child run's signal: kept in its place
        if request.run.run_id is None and request.run.workflow is None:
            waiting = waiting_for_signal(self, request.name)
            if waiting is not None and waiting is not self:
                return waiting.send_signal(request)  # the child run that waits for it
        return append_signal(self.workdir, self._live_path(request.run), request)

    def _refuse_if_answered(self, path: Path, request_id: str, *, anything: bool = False) -> bool:
        """Refuse a second answer: ``path`` holds an answer to ``request_id`` (with
        ``anything``: holds any file at all), named with when it came and its digest.
        True when a file there answers something else (broken, or stale)."""
        from ..formats.bridge_codec import parse_response
        from ..formats.strict_json import loads_strict
        from ..storage.durable import sha256_hex
        from ..storage.files import read_regular_file

        try:
            raw = read_regular_file(path, max_bytes=MAX_RESPONSE)
            moment = os.stat(path, follow_symlinks=False).st_mtime
        except FileNotFoundError:
            return False
        except ContractError as exc:
            if exc.rule == "too-large" and not anything:
                return True  # no answer the engine would take: out of the way
            raise  # a link, a directory: refused, as every write there is
        try:
            answers = parse_response(loads_strict(raw, source=str(path)), source=str(path))
        except ContractError:
            answers = None  # broken: the engine refuses it, and respond replaces it
        if (answers is None or answers.request_id != request_id) and not anything:
            return True
        when = datetime.fromtimestamp(moment, timezone.utc).isoformat(timespec="seconds")
        digest = sha256_hex(raw)
        raise AnswerRefusedError(
            f"{path}: request {request_id} has an answer already (written at {when}, "
            f"sha256 {digest[:16]}); the first answer wins and this one was not written: "
            "the run takes the first at its next resume",
            reason="answered",
            details={"answered_at": when, "sha256": digest, "path": str(path)},
        )

    def _live_path(self, run: RunInput) -> Path:
        """The state file of ``run`` when it is the live instance."""
        if run.run_id is None or run.workflow:
            return self.state_path(run.workflow)
        live = self._live_for(run)
        if live is not None:
            return live
        self.read_run(run)  # unknown: NoInstanceError naming the directory and the run
        raise NoInstanceError(
            f"{self.workdir}: run {run.run_id} is not live: there is nothing to answer"
        )

    def cancel_queued(self, request: RunInput) -> bool:
        return False  # a work directory queues no run: a live one is cancelled by its engine

    def queue_run(self, request: QueueRunInput) -> None:
        raise UsageError("--queue leaves the run for a worker: it needs --store")

    def bridge(self, request: OpenRunInput) -> Bridge:
        from ..formats.bridge import state_file_name
        from .file_bridge import FileBridge

        if request.new:
            own = state_file_name(request.workflow_name)  # judged under the instance lock
            others = [p.name for p in self.workdir.glob(".*-state.json") if p.name != own]
            if others:
                # The agent bridge's request and response files have one name per
                # directory: two instances would answer each other's requests.
                raise InstanceExistsError(
                    f"{self.workdir}: an instance already lives here "
                    f"({', '.join(sorted(others))}); one instance per work directory: use "
                    "another --workdir, or resume or cancel it"
                )
        handed = self._handed
        location = str(self.workdir / state_file_name(request.workflow_name))
        reads = handed.take(location) if handed is not None else None
        return FileBridge(self.workdir, request.workflow_name, reads=reads)

    def run_boards(self) -> None:
        return None  # each run's task board is kept in its work directory

    # -- evidence -------------------------------------------------------------------------

    def events(self, request: ReadEventsInput) -> list[tuple[int, bytes]]:
        from ..storage.files import read_regular_file

        path = runs_dir(self.workdir) / request.run_id / "events.ndjson"
        try:
            data = read_regular_file(path, max_bytes=1 << 30)
        except (OSError, OrchestratorError):
            return []
        found = []
        for line in data.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break  # being written
            try:
                seq = json.loads(line).get("x_seq")
            except (ValueError, AttributeError):
                continue
            if isinstance(seq, int) and not isinstance(seq, bool) and seq > request.after:
                found.append((seq, line))
        return found

    def run_files(self, request: RunInput) -> list[str]:
        """The run's evidence files: regular files with one name each, found with no
        link followed (a run directory that is a link has none)."""
        return sorted(_evidence_files(runs_dir(self.workdir) / str(request.run_id)))

    def read_run_file(self, request: RunFileInput) -> bytes | None:
        from ..storage import beneath

        return beneath.read_file_under(runs_dir(self.workdir) / request.run_id, request.path)

    # -- retention ------------------------------------------------------------------------

    def prune_runs(self, request: PruneInput) -> list[PrunedRun]:
        """Remove finished runs' directories whole (see ``file_prune``); never the live
        instance's run."""
        from .file_prune import prune_runs

        return prune_runs(self.workdir, request)

    # -- the task board -------------------------------------------------------------------

    def boards(self) -> list[str]:
        return [""] if (self.workdir / BOARD_DIR / "board.json").is_file() else []

    def board_store(self, board_id: str) -> BoardStore:
        if board_id or not self.boards() or self._boards is None:
            raise NoInstanceError(f"{self.workdir}: no task board here")
        return self._boards(self.workdir / BOARD_DIR)

    def board_tail(self, request: BoardTailInput) -> list[bytes]:
        if request.board_id:
            return []
        return last_lines(self.workdir / BOARD_DIR / "ledger.ndjson", request.count)

    # -- child runs -------------------------------------------------------------------------

    def child_store(self, run_id: str) -> FileRunStore:
        """A child run's own work directory, ``.orchestrator/children/<run_id>/`` here
        (made when first asked for): one instance per work directory holds for it too."""
        from ..storage.beneath import make_directories

        if not is_run_id(run_id):
            raise UsageError(f"{self.workdir}: {run_id!r} cannot be a child run's id")
        place = children_dir(self.workdir) / run_id
        try:
            make_directories(place)
        except OSError as exc:
            raise StorageError.from_os_error(exc, path=str(place), action="write") from exc
        return FileRunStore(place, boards=self._boards)

    def child_stores(self) -> list[tuple[str, FileRunStore]]:
        """The child runs kept here, each ``(run_id, its store)``, in name order."""
        from ..storage import beneath

        place = children_dir(self.workdir)
        if not beneath.is_directory(place):
            return []
        return [
            (name, FileRunStore(place / name, boards=self._boards))
            for name in sorted(beneath.list_directory(place))
            if is_run_id(name) and beneath.is_directory(place / name)
        ]

    def _child_named(self, run_id: str | None) -> FileRunStore | None:
        """The store of child run ``run_id`` (or of a child of a child), when it is one."""
        if run_id is None:
            return None
        for name, store in self.child_stores():
            if name == run_id:
                return store
            deeper = store._child_named(run_id)
            if deeper is not None:
                return deeper
        return None


def children_dir(workdir: Path) -> Path:
    """Where a work directory keeps the places of its run's child runs."""
    return workdir / HISTORY_DIR / "children"


# -- reading states ---------------------------------------------------------------------------


def _set_aside(path: Path, reason: str) -> None:
    """Move the response file ``path`` under ``.agent-responses/rejected/`` with why."""
    from .file_bridge import set_aside

    responses = path.parent if path.parent.name == RESPONSES_DIR else path.parent / RESPONSES_DIR
    set_aside(path, responses / REJECTED_DIR, path.stem.lstrip("."), reason)


def read_state(path: Path, *, signed_only: bool = False) -> CheckpointState:
    """The checkpoint state at ``path``; a damaged one raises :class:`StateDamagedError`.
    ``signed_only``: for a command that acts on the state, a state whose signature does
    not hold is refused (it believes only what orchestrate wrote)."""
    return _read_state(path, signed_only=signed_only)[0]


def _read_state(path: Path, *, signed_only: bool) -> tuple[CheckpointState, Any, bytes]:
    """The state at ``path``, and the JSON data and bytes it was read from."""
    from ..formats.bridge_codec import parse_state
    from ..storage.files import STATE_MAX_BYTES, read_json_file_bytes
    from ..storage.state_key import check_key_outside, check_signature

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
    if signed_only:
        check_key_outside(path.parent)
        check_signature(data, source=str(path), raw=raw)
    try:
        return parse_state(data, source=str(path)), data, raw
    except ContractError as exc:
        raise StateDamagedError.wrap(exc) from None


def read_live(path: Path, *, signed_only: bool = False) -> tuple[CheckpointState, str | None]:
    """A live instance's state, with every archived request whole again, and why its
    signature does not hold, if so (``signed_only``: then it is refused instead)."""
    return _read_signed(path, lambda state: runs_dir(path.parent) / _run_id_of(state), signed_only)


def read_kept(path: Path, *, signed_only: bool = False) -> tuple[CheckpointState, str | None]:
    """A kept run's state (``.orchestrator/runs/<run id>/state.json``), as
    :func:`read_live` reads a live one."""
    return _read_signed(path, lambda state: path.parent, signed_only)


def _kept(workdir: Path, run_id: str) -> bool:
    """Whether the directory keeps run ``run_id``'s state (a link there is refused when
    it is read, never followed)."""
    from ..storage import beneath

    return is_run_id(run_id) and beneath.entry_exists(runs_dir(workdir) / run_id / "state.json")


def _read_signed(
    path: Path, run_dir: Callable[[CheckpointState], Path], signed_only: bool
) -> tuple[CheckpointState, str | None]:
    from ..formats.bridge_codec import restore_archived
    from ..storage.files import STATE_MAX_BYTES, read_regular_file
    from ..storage.runs import ARCHIVE_FILE
    from ..storage.state_key import signature_problem

    state, data, raw = _read_state(path, signed_only=signed_only)
    problem = None if signed_only else signature_problem(data, raw, path)
    archive = run_dir(state) / ARCHIVE_FILE
    if any(r.x_archived for r in state.agent_requests) and archive.exists():
        lines = read_regular_file(archive, max_bytes=STATE_MAX_BYTES)
        state = restore_archived(state, lines, source=str(archive))
    return state, problem


def _run_id_of(state: CheckpointState) -> str:
    record = state.phase_data.get(ENGINE_KEY)
    return str(record.get("run_id", "")) if isinstance(record, dict) else ""


def _moment(path: Path) -> datetime:
    return datetime.fromtimestamp(path.stat().st_mtime, tz=timezone.utc)


def _live_listing(state_path: Path) -> RunListing | None:
    from ..formats.bridge_codec import parse_state
    from ..storage.files import STATE_MAX_BYTES, read_json_file_bytes
    from ..storage.state_key import signature_problem

    try:
        data, raw = read_json_file_bytes(
            state_path, max_bytes=STATE_MAX_BYTES, allow_lone_surrogates=True
        )
        state = parse_state(data, source=str(state_path))
        record = state.phase_data[ENGINE_KEY]
        return RunListing(
            run_id=str(record["run_id"]),
            workflow=str(record["workflow_name"]),
            status=str(record["status"]),
            updated_at=_moment(state_path),
            pending=sum(r.status is HistoryStatus.PENDING for r in state.agent_requests),
            phase=state.phase_name,
            problem=signature_problem(data, raw, state_path),
        )
    except (OrchestratorError, OSError, KeyError, TypeError) as exc:
        try:
            updated = _moment(state_path)
        except OSError:
            return None
        return RunListing(
            run_id=state_path.name,
            workflow=state_path.name,
            status="damaged",
            updated_at=updated,
            problem=str(exc),
        )


def _ended_listing(state: Path) -> RunListing | None:
    from ..storage.files import STATE_MAX_BYTES, read_regular_file
    from ..storage.state_key import signature_problem

    try:
        raw = read_regular_file(state, max_bytes=STATE_MAX_BYTES)
        data = json.loads(raw)
        record = data["phase_data"][ENGINE_KEY]
        return RunListing(
            run_id=state.parent.name,
            workflow=str(record.get("workflow_name", "?")),
            status=str(record.get("status", "?")),
            updated_at=_moment(state),
            phase=str(data.get("phase_name", "")),
            problem=signature_problem(data, raw, state),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError, OrchestratorError):
        return None  # being written, a link, or not ours: not listed


def last_lines(path: Path, count: int, *, window: int = 64 * 1024) -> list[bytes]:
    """The last ``count`` whole lines of ``path``, read from its end (a long ledger is
    not read whole for its tail), with no link followed."""
    from ..storage import beneath

    try:
        with open(beneath.open_file(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as file:
            size = file.seek(0, 2)
            file.seek(max(0, size - window))
            chunk = file.read()
    except (OSError, OrchestratorError):
        return []
    lines = chunk.splitlines()
    if size > window and lines:
        lines = lines[1:]  # the first may be cut
    return lines[-count:]


def _evidence_files(run_dir: Path) -> list[str]:
    """The paths, under ``run_dir``, of its regular files with one name each (at most
    ``MAX_FILES``), walked from a descriptor of it reached with no link followed; an
    entry that cannot be read is passed over."""
    import stat

    from ..storage import beneath

    try:
        top = beneath.open_directory(run_dir)
    except (OSError, OrchestratorError):
        return []
    found: list[str] = []
    try:
        # Left early, the walk closes its descriptors as it is dropped.
        walk = os.fwalk(".", dir_fd=top, follow_symlinks=False, onerror=lambda _error: None)
        for where, dirs, files, fd in walk:
            dirs.sort()
            for name in sorted(files):
                try:
                    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
                    found.append(os.path.normpath(os.path.join(where, name)))
            if len(found) >= MAX_FILES:
                break
    finally:
        os.close(top)
    return found[:MAX_FILES]
