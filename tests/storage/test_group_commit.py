"""The group commit: several files made durable together with two waits on the disk.

``write_together`` writes every file to its temporary, makes them durable as one group
(``syncfs``, or an fsync of each file where there is none), renames them in order, and
makes the renames durable. These tests watch the system calls it makes, in order, on
real files; the power-cut simulator (``tests/storage/test_power_cut.py``) checks what the
ordering buys.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator import Engine, RetryPolicy, Workflow, phase
from orchestrator.adapters.file_bridge import FileBridge
from orchestrator.storage import durable
from orchestrator.testing import MockAgentInvoker


def prompt(which: str) -> str:
    return (
        f"You are the writer of a short greeting card. Write its {which} paragraph in two "
        "plain sentences, and answer with the paragraph alone."
    )


class AskTwice(Workflow):
    """Two phases, one ask each."""

    name = "ask-twice"
    agents = ("writer",)

    @phase(1)
    def first(self, ctx: Any) -> dict[str, Any]:
        return {"text": ctx.ask("writer", prompt("first"))}

    @phase(2)
    def second(self, ctx: Any) -> dict[str, Any]:
        return {"text": ctx.ask("writer", prompt("second"))}


class Calls:
    """Records the durable layer's system calls (names relative to the test's directory)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
        self.log: list[tuple[str, str]] = []
        self.root = root
        real_replace, real_fsync = os.replace, os.fsync
        real_sync = durable.sync_filesystem

        def replace(src: Any, dst: Any, **kwargs: Any) -> None:
            self.log.append(("rename", self._name(dst, kwargs.get("dst_dir_fd"))))
            real_replace(src, dst, **kwargs)

        def fsync(fd: int) -> None:
            self.log.append(("fsync", self._name(".", fd)))
            real_fsync(fd)

        def sync_filesystem(fd: int) -> None:
            self.log.append(("syncfs", ""))
            real_sync(fd)

        monkeypatch.setattr(os, "replace", replace)
        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(durable, "sync_filesystem", sync_filesystem)

    def _name(self, name: Any, fd: int | None) -> str:
        where = os.readlink(f"/proc/self/fd/{fd}") if fd is not None else os.getcwd()
        full = os.path.normpath(os.path.join(where, os.fsdecode(name)))
        return os.path.relpath(full, self.root)

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.log]


needs_syncfs = pytest.mark.skipif(
    not durable.group_sync_covers_earlier_writes(), reason="no syncfs on this system"
)


@needs_syncfs
def test_files_are_written_then_synced_once_then_renamed_in_order_then_synced_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "state.json").write_bytes(b"old")
    calls = Calls(monkeypatch, tmp_path)
    durable.write_together(
        [(tmp_path / "state.json", b"new"), (tmp_path / "sub" / "a.json", b"a")],
        directories=[tmp_path],
    )
    assert calls.log == [
        ("syncfs", ""),
        ("rename", "state.json"),
        ("rename", "sub/a.json"),
        ("syncfs", ""),
    ]
    assert (tmp_path / "state.json").read_bytes() == b"new"
    assert (tmp_path / "sub" / "a.json").read_bytes() == b"a"
    assert sorted(os.listdir(tmp_path)) == ["state.json", "sub"]
    assert os.listdir(tmp_path / "sub") == ["a.json"]


def test_without_syncfs_each_file_then_each_directory_is_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(durable, "_syncfs_function", None)
    (tmp_path / "sub").mkdir()
    calls = Calls(monkeypatch, tmp_path)
    durable.write_together(
        [(tmp_path / "state.json", b"s"), (tmp_path / "sub" / "a.json", b"a")],
        directories=[tmp_path],
    )
    assert calls.kinds() == ["fsync", "fsync", "rename", "rename", "fsync", "fsync"]
    # The two directories touched, each once (the extra one is already among them).
    assert [name for kind, name in calls.log[4:]] == [".", "sub"]
    assert not durable.group_sync_covers_earlier_writes()


def test_a_refused_target_renames_nothing_and_leaves_no_temporary(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_bytes(b"old")
    (tmp_path / "a.json").mkdir()  # a directory where a file belongs
    with pytest.raises(Exception, match=r"a\.json"):
        durable.write_together([(tmp_path / "state.json", b"new"), (tmp_path / "a.json", b"a")])
    assert (tmp_path / "state.json").read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["a.json", "state.json"]


@needs_syncfs
def test_a_failed_sync_renames_nothing_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "state.json").write_bytes(b"old")

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(durable, "sync_filesystem", failing)
    with pytest.raises(OSError, match="Input/output"):
        durable.write_together([(tmp_path / "state.json", b"new"), (tmp_path / "b", b"b")])
    assert (tmp_path / "state.json").read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["state.json"]


def test_sync_filesystem_names_a_bad_descriptor() -> None:
    if not durable.group_sync_covers_earlier_writes():
        pytest.skip("no syncfs on this system")
    fd = os.open("/", os.O_RDONLY)
    os.close(fd)
    with pytest.raises(OSError) as caught:
        durable.sync_filesystem(fd)
    assert caught.value.errno == 9


@needs_syncfs
def test_a_checkpoint_waits_on_the_disk_twice_and_its_lines_come_after_its_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One in-process ask to the next: one group (the state first, then the evidence it
    makes true), two waits, then the event lines, appended without a wait of their own."""
    bridge = FileBridge(tmp_path, AskTwice.name)
    engine = Engine(AskTwice, bridge=bridge, invoker=MockAgentInvoker({"writer": "an answer"}))
    log: list[str] = []
    real_sync = durable.sync_filesystem
    real_append = os.write

    def sync_filesystem(fd: int) -> None:
        log.append("syncfs")
        real_sync(fd)

    def write(fd: int, data: Any) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").endswith("events.ndjson"):
            log.append("append events")
        return real_append(fd, data)

    def fsync(fd: int) -> None:
        log.append("fsync " + os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))

    # Bound at its import: imported first, it keeps the real function once this test ends.
    from orchestrator.storage import ndjson  # noqa: F401

    monkeypatch.setattr(durable, "sync_filesystem", sync_filesystem)
    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "fdatasync", fsync)
    outcome = engine.start(workflow_ref="tests.test_group_commit:AskTwice", workdir=tmp_path)
    assert outcome.status == "completed", outcome.message
    # No file or line synced by itself: every wait is a group's.
    assert not [entry for entry in log if entry.startswith("fsync")], log
    # Each checkpoint: two waits, then its lines; the last lines ride on the history's.
    groups = "".join("s" if entry == "syncfs" else "a" for entry in log)
    assert groups.startswith("ss"), groups
    assert "sss" not in groups and "aa" not in groups, groups
    assert groups.endswith("ass"), groups


def test_the_environment_can_turn_syncfs_off(tmp_path: Path) -> None:
    """ORCHESTRATOR_NO_SYNCFS=1: each file and directory is synced by itself (for a disk
    other programs keep busy with large writes, which syncfs would wait for)."""
    import subprocess
    import sys

    probe = (
        "from orchestrator.storage import durable; "
        "print(durable.group_sync_covers_earlier_writes())"
    )
    env = {**os.environ, "ORCHESTRATOR_NO_SYNCFS": "1"}
    off = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert off.stdout.strip() == "False", off.stderr
    env.pop("ORCHESTRATOR_NO_SYNCFS")
    on = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    expected = str(sys.platform.startswith("linux"))
    assert on.stdout.strip() == expected, on.stderr


@pytest.fixture
def two_lanes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The group commit's two lanes always on; the threads that made each temporary."""
    import threading

    monkeypatch.setattr(durable, "_lanes_forced", True)
    makers: list[int] = []
    real_open = os.open

    def open_(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if os.fsdecode(path).endswith(".tmp"):
            makers.append(threading.get_ident())
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    return makers


@needs_syncfs
def test_files_of_several_directories_are_written_in_two_lanes_and_renamed_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, two_lanes: list[int]
) -> None:
    """The temporaries of different directories are made by two threads; the waits and
    the renames are as with one, in the order given."""
    import threading

    for sub in ("one", "two"):
        (tmp_path / sub).mkdir()
    (tmp_path / "state.json").write_bytes(b"old")
    calls = Calls(monkeypatch, tmp_path)
    items = [
        (tmp_path / "state.json", b"new"),
        (tmp_path / "one" / "a.json", b"a"),
        (tmp_path / "two" / "b.json", b"b"),
        (tmp_path / "two" / "c.json", b"c"),
    ]
    durable.write_together(items)
    assert calls.log == [
        ("syncfs", ""),
        ("rename", "state.json"),
        ("rename", "one/a.json"),
        ("rename", "two/b.json"),
        ("rename", "two/c.json"),
        ("syncfs", ""),
    ]
    assert [path.read_bytes() for path, _ in items] == [b"new", b"a", b"b", b"c"]
    assert len(two_lanes) == 4
    # This thread wrote the state's lane (state.json, one/), the helper two/'s files.
    here = threading.get_ident()
    assert two_lanes.count(here) == 2 and len(set(two_lanes)) == 2
    assert sorted(os.listdir(tmp_path / "two")) == ["b.json", "c.json"]


@pytest.mark.parametrize("refused", ["one/a.json", "two/c.json"])
def test_a_file_refused_in_either_lane_renames_nothing_and_leaves_no_temporary(
    tmp_path: Path, two_lanes: list[int], refused: str
) -> None:
    """Whichever lane meets the refusal, the other lane's temporaries go too, nothing is
    renamed, and the error names the file."""
    for sub in ("one", "two"):
        (tmp_path / sub).mkdir()
    (tmp_path / "state.json").write_bytes(b"old")
    (tmp_path / refused).mkdir()  # a directory where a file belongs
    items = [
        (tmp_path / "state.json", b"new"),
        (tmp_path / "one" / "a.json", b"a"),
        (tmp_path / "two" / "b.json", b"b"),
        (tmp_path / "two" / "c.json", b"c"),
    ]
    with pytest.raises(Exception, match=refused.replace(".", r"\.")):
        durable.write_together(items)
    assert (tmp_path / "state.json").read_bytes() == b"old"
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert left == sorted(["one", "two", "state.json", refused])
    assert len(set(two_lanes)) == 2  # both lanes ran


@pytest.mark.parametrize("full", ["one/a.json", "two/c.json"])
def test_a_full_disk_in_either_lane_names_the_file_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, two_lanes: list[int], full: str
) -> None:
    """A write the disk refuses (ENOSPC) in either lane: the error names the file it was
    for, no temporary is left in any directory, and nothing is renamed."""
    import errno

    for sub in ("one", "two"):
        (tmp_path / sub).mkdir()
    (tmp_path / "state.json").write_bytes(b"old")
    real_write = os.write
    refused = f".{os.path.basename(full)}."  # then the writer's thread and pid, ".tmp"

    def write(fd: int, data: Any) -> int:
        name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        if name.startswith(refused) and name.endswith(f".{os.getpid()}.tmp"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    items = [
        (tmp_path / "state.json", b"new"),
        (tmp_path / "one" / "a.json", b"a"),
        (tmp_path / "two" / "b.json", b"b"),
        (tmp_path / "two" / "c.json", b"c"),
    ]
    with pytest.raises(OSError) as caught:
        durable.write_together(items)
    assert caught.value.errno == errno.ENOSPC
    assert caught.value.filename == str(tmp_path / full)
    assert (tmp_path / "state.json").read_bytes() == b"old"
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert left == ["one", "state.json", "two"]
    assert len(set(two_lanes)) == 2  # both lanes ran


@pytest.mark.parametrize("lanes", [True, False], ids=["two lanes", "one lane"])
def test_a_directory_to_make_is_made_with_its_files_and_one_already_there_is_swept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lanes: bool
) -> None:
    """``make``: a new directory is made before its files (its entry synced with them
    where there is no syncfs); one that is there already loses a dead writer's
    temporary, and keeps a live writer's."""
    from support.powercut import DEAD_PID

    monkeypatch.setattr(durable, "_lanes_forced", lanes)
    (tmp_path / "steps" / "old").mkdir(parents=True)
    dead = tmp_path / "steps" / "old" / f".results.json.{DEAD_PID}.tmp"
    live = tmp_path / "steps" / "old" / f".results.json.{os.getppid()}.tmp"
    dead.write_bytes(b"half")
    live.write_bytes(b"being written")
    new, old = tmp_path / "steps" / "new", tmp_path / "steps" / "old"
    durable.write_together(
        [
            (tmp_path / "state.json", b"s"),
            (new / "results.json", b"n"),
            (old / "results.json", b"o"),
        ],
        make=[new, old],
    )
    assert (new / "results.json").read_bytes() == b"n"
    assert (old / "results.json").read_bytes() == b"o"
    assert sorted(os.listdir(new)) == ["results.json"]
    assert sorted(os.listdir(old)) == sorted(["results.json", live.name])


def test_without_syncfs_a_directory_made_in_the_commit_has_its_entry_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(durable, "_syncfs_function", None)
    (tmp_path / "steps").mkdir()
    calls = Calls(monkeypatch, tmp_path)
    new = tmp_path / "steps" / "new"
    durable.write_together([(new / "a.json", b"a")], make=[new])
    # The file, its rename, its directory, and the new directory's entry in its parent.
    assert calls.log == [
        ("fsync", f"steps/new/.a.json.{threading.get_native_id()}.{os.getpid()}.tmp"),
        ("rename", "steps/new/a.json"),
        ("fsync", "steps/new"),
        ("fsync", "steps"),
    ]


def test_the_lanes_start_when_writing_a_file_is_slow_and_stop_when_it_is_fast(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(durable, "_write_ns", 0)
    monkeypatch.setattr(durable, "_brief", False)
    assert not durable._lanes_pay()
    durable._note_write_time(6 * 400_000, 6, in_lanes=False)  # 0.4 ms a file
    assert durable._lanes_pay()
    durable._note_write_time(3 * 400_000, 6, in_lanes=True)  # as slow, written in two
    assert durable._lanes_pay()
    for _ in range(4):  # fast again: 20 us a file
        durable._note_write_time(6 * 10_000, 6, in_lanes=True)
    assert not durable._lanes_pay()
    # A process that lives for one command never starts the helper.
    durable._note_write_time(6 * 900_000, 6, in_lanes=False)
    monkeypatch.setattr(durable, "_brief", True)
    assert not durable._lanes_pay()


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_kept_directories_are_walked_once_never_through_a_link_and_closed(
    tmp_path: Path,
) -> None:
    """Within ``keeping_directories`` the files of one commit share the walk to their
    directory. A directory swapped for a link meanwhile is not followed: the walk holds
    the directory it reached. At the block's end every descriptor is closed."""
    import threading

    from orchestrator.storage import beneath

    work = tmp_path / "work"
    (work / "a" / "b").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "b").mkdir(parents=True)
    beneath.guard(work)
    before = _open_descriptors()
    seen_by_other_thread: list[int] = []
    with beneath.keeping_directories():
        durable.write_together([(work / "a" / "b" / "x", b"x")])
        kept = _open_descriptors() - before
        # The swap: the real directory moves aside, a link takes its name.
        (work / "a").rename(work / "moved")
        (work / "a").symlink_to(elsewhere)
        durable.write_together([(work / "a" / "b" / "y", b"y")])

        # Another thread's walk is its own: it refuses the link at once.
        def walk() -> None:
            try:
                beneath.is_directory(work / "a" / "b")
            except Exception as exc:  # the refusal names the link
                seen_by_other_thread.append(str(exc).count("link"))

        thread = threading.Thread(target=walk)
        thread.start()
        thread.join()
    assert kept == 2  # the work directory and a (b is opened from a, each time)
    assert _open_descriptors() == before
    assert (work / "moved" / "b" / "y").read_bytes() == b"y"
    assert not (elsewhere / "b" / "y").exists()
    assert seen_by_other_thread and seen_by_other_thread[0] > 0
    # After the block, a walk refuses the link as always.
    with pytest.raises(Exception, match="link"):
        durable.write_together([(work / "a" / "b" / "z", b"z")])


def _asking(number: int) -> Any:
    def run(self: Any, ctx: Any) -> dict[str, Any]:
        return {"text": ctx.ask("writer", prompt(f"number {number}"))}

    return run


# Five phases, one ask each; finished requests archived at once, so records change between
# saves (their text leaves, ``x_archived`` is set).
AskMany = type(
    "AskMany",
    (Workflow,),
    {
        "__module__": __name__,
        "name": "ask-many",
        "agents": ("writer",),
        "archive_after": 1,
        **{f"phase_{n}": phase(n, name=f"phase_{n}")(_asking(n)) for n in range(1, 6)},
    },
)


def test_a_save_reuses_the_text_of_unchanged_items_and_writes_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every save through the bridge (which keeps the items' texts from one save to the
    next) gives the very bytes a fresh encoding gives, as requests are answered and
    archived; and later saves do reuse texts."""
    from orchestrator.adapters import file_bridge
    from orchestrator.storage import state_key

    original = state_key.signed_document
    saves: list[int] = []

    def checked(state: Any, encoded: Any = None) -> bytes:
        reused = encoded.held() if encoded is not None else 0
        data = original(state, encoded)
        assert data == original(state), "a reused text changed the state's bytes"
        saves.append(reused)
        return data

    monkeypatch.setattr(file_bridge, "signed_document", checked)
    bridge = FileBridge(tmp_path, AskMany.name)
    answers = {"writer": lambda text: "Réponse : " + text[-40:]}
    engine = Engine(AskMany, bridge=bridge, invoker=MockAgentInvoker(answers))
    outcome = engine.start(workflow_ref="tests.test_group_commit:AskMany", workdir=tmp_path)
    assert outcome.status == "completed", outcome.message
    assert len(saves) > 5 and max(saves) > 0


class AskInALoop(Workflow):
    """A phase asking in a loop, and a phase that keeps what it returns and changes it
    in the next one. Outputs hold text outside ASCII (and the second phase a lone
    surrogate, which has the state written all in ASCII from then on)."""

    name = "ask-loop"
    agents = ("writer",)
    archive_after = 2

    @phase(1)
    def gather(self, ctx: Any) -> dict[str, Any]:
        notes = [ctx.ask("writer", prompt(f"note {n}")) for n in range(4)]
        self.kept = {"notes": notes, "title": "Carte de vœux"}
        return self.kept

    @phase(2)
    def finish(self, ctx: Any) -> dict[str, Any]:
        if hasattr(self, "kept"):  # the same engine ran the phase before
            self.kept["title"] = "changed after it was returned"
        text = ctx.ask("writer", prompt("closing"))
        return {"closing": text, "odd": "\udce9"}

    @phase(3)
    def last(self, ctx: Any) -> dict[str, Any]:
        return {"done": ctx.ask("writer", prompt("last"))}


def test_a_resumed_state_reuses_the_texts_it_was_read_from_and_writes_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bridge that has just read the state (a new process, or a new engine) takes each
    item's text from the file; every save still gives the bytes a fresh encoding gives,
    and the texts are reused, but not once the state is written all in ASCII."""
    from orchestrator.adapters import file_bridge
    from orchestrator.storage import state_key
    from orchestrator.testing import WorkflowHarness

    original = state_key.signed_document
    reused: list[int] = []

    def checked(state: Any, encoded: Any = None) -> bytes:
        before = encoded.held() if encoded is not None else 0
        data = original(state, encoded)
        assert data == original(state), "a text read from the file changed the state's bytes"
        reused.append(before)
        return data

    monkeypatch.setattr(file_bridge, "signed_document", checked)
    harness = WorkflowHarness(AskInALoop, tmp_path)
    outcome = harness.run()
    answers = 0
    while outcome.status == "paused":
        for request in outcome.pending:
            answers += 1
            harness.respond(request.request_id, f"Réponse n° {answers}.")
        reused.append(-1)  # a new engine and bridge from here
        harness.handoff.clear()  # as in a new process: the state is read from its file
        outcome = harness.resume()
    assert outcome.status == "completed", outcome.message
    assert answers == 6
    firsts = [reused[i + 1] for i, mark in enumerate(reused) if mark == -1]
    assert all(n > 0 for n in firsts[1:4]), firsts  # read back while the state is UTF-8
    assert firsts[-1] == 0, firsts  # the lone surrogate made it ASCII: nothing taken


def test_a_new_engine_takes_the_state_a_pause_in_this_process_left_without_reading_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host that builds an engine per resume (the harness does) has the state its last
    pause left handed over, with the texts of its items: nothing is read back or encoded
    again, and every save is still the bytes a fresh encoding gives. A state that another
    writer changed since is read from its file; what is handed over is taken once."""
    from orchestrator.adapters import file_bridge
    from orchestrator.storage import state_key
    from orchestrator.testing import WorkflowHarness

    original = state_key.signed_document
    loads: list[int] = []
    load_state = FileBridge.load_state

    def counted(self: FileBridge) -> Any:
        loads.append(1)
        return load_state(self)

    def checked(state: Any, encoded: Any = None) -> bytes:
        data = original(state, encoded)
        assert data == original(state), "a handed-over text changed the state's bytes"
        return data

    monkeypatch.setattr(FileBridge, "load_state", counted)
    monkeypatch.setattr(file_bridge, "signed_document", checked)
    harness = WorkflowHarness(AskInALoop, tmp_path)
    outcome = harness.run()
    state_file = tmp_path / ".ask-loop-state.json"
    first_pause, first_request = state_file.read_bytes(), outcome.pending[0].request_id
    for answer in range(2):
        harness.respond(outcome.pending[0].request_id, f"answer {answer}")
        outcome = harness.resume()
    assert outcome.status == "paused" and loads == [], "a handed-over state was read again"

    # Another writer put an earlier state back (accepted on purpose, as 'orchestrate
    # trust --accept-rollback' does): the next engine reads the file.
    from orchestrator.cli.trust import trust_state

    later_request = outcome.pending[0].request_id
    state_file.write_bytes(first_pause)
    trust_state(state_file, accept_rollback=True)
    harness.respond(first_request, "answer again")
    outcome = harness.resume()
    assert loads == [1], "a state changed by someone else must be read from its file"
    assert outcome.status == "paused" and outcome.pending[0].request_id != first_request
    assert later_request not in state_file.read_text(encoding="utf-8")

    # Taken once: the engine that took it holds it alone.
    assert harness.handoff.holds(str(state_file))
    first, second = harness.engine(), harness.engine()
    harness.respond(outcome.pending[0].request_id, "one more")
    assert first.adopt_paused() and not second.adopt_paused()


def test_a_new_engine_keeps_what_the_last_bridge_learnt_of_the_work_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine per resume (the harness) takes over, with the state, what the bridge
    before it learnt of the work directory, as one engine kept from resume to resume
    knows it: leftovers are not looked for again, nor the run's directories. A directory
    of the run's that goes away meanwhile is made again."""
    import shutil

    from orchestrator.testing import WorkflowHarness

    sweeps: list[Path] = []
    sweep = durable.sweep_temporaries

    def counted(directory: Path) -> list[Path]:
        sweeps.append(directory)
        return sweep(directory)

    monkeypatch.setattr(durable, "sweep_temporaries", counted)
    from orchestrator.adapters import file_bridge

    monkeypatch.setattr(file_bridge, "sweep_temporaries", counted)
    harness = WorkflowHarness(AskInALoop, tmp_path)
    outcome = harness.run()
    harness.respond(outcome.pending[0].request_id, "answer 0")
    outcome = harness.resume()
    assert sweeps, "the first bridge of the process looks for leftovers"
    sweeps.clear()
    harness.respond(outcome.pending[0].request_id, "answer 1")
    outcome = harness.resume()
    assert outcome.status == "paused" and sweeps == [], sweeps

    # The run's step directories go away between two resumes: made again.
    (run,) = (tmp_path / ".orchestrator" / "runs").iterdir()
    shutil.rmtree(run / "agents")
    harness.respond(outcome.pending[0].request_id, "answer 2")
    outcome = harness.resume()
    assert outcome.status == "paused"
    assert [p.name for p in (run / "agents").iterdir()] != []


def test_what_a_phase_returned_is_recorded_as_it_was_when_returned(tmp_path: Path) -> None:
    """The engine keeps a copy of a phase's output: a workflow that changes the object
    afterwards changes neither the state nor the run's history."""
    invoker = MockAgentInvoker({"writer": "Une réponse."})
    engine = Engine(AskInALoop, bridge=FileBridge(tmp_path, AskInALoop.name), invoker=invoker)
    outcome = engine.start(workflow_ref="tests.test_group_commit:AskInALoop", workdir=tmp_path)
    assert outcome.status == "completed", outcome.message
    (history,) = (tmp_path / ".orchestrator" / "runs").glob("*/state.json")
    state = json.loads(history.read_bytes())
    assert state["phase_data"]["gather"]["title"] == "Carte de vœux"
    assert outcome.outputs["gather"]["title"] == "Carte de vœux"


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["append", "answer", "archive", "replace_list"]), st.integers(0, 30)
        ),
        min_size=1,
        max_size=25,
    )
)
def test_kept_lines_of_a_changing_history_give_the_bytes_of_a_fresh_encoding(
    changes: list[tuple[str, int]],
) -> None:
    """Whatever the engine does to the history between saves (append a request, answer
    or archive one anywhere in it, replace the list), a save that starts from the lines
    kept from the last one writes what a fresh encoding writes. The lines are kept in
    pieces joined into one when they grow many: here, after a few."""
    from orchestrator.formats import strict_json
    from orchestrator.formats.bridge import (
        AgentRequest,
        AgentRequestRecord,
        CheckpointState,
        CompletedPhase,
        HistoryStatus,
    )
    from orchestrator.storage.state_key import EncodedItems, signed_document

    def record(n: int) -> AgentRequestRecord:
        request = AgentRequest(
            request_id=f"r{n}",
            phase=1,
            phase_name="one",
            agent_name="writer",
            prompt=prompt(f"number {n} é"),
            created_at="2026-01-01T00:00:00Z",
        )
        return AgentRequestRecord(
            request_id=f"r{n}",
            agent_name="writer",
            phase=1,
            status=HistoryStatus.PENDING,
            x_request=request,
            x_position=n,
        )

    state = CheckpointState(
        phase=1,
        phase_name="one",
        checkpoint_name="c",
        created_at="2026-01-01T00:00:00Z",
        output_path="out",
        phase_data={"x_orchestrator": {"run_id": "r"}},
        agent_requests=[record(0)],
        completed_phases=[
            CompletedPhase(
                phase=1, phase_name="one", completed_at="2026-01-01T00:00:00Z", result_summary="s"
            )
        ],
    )
    encoded = EncodedItems()
    assert signed_document(state, encoded) == signed_document(state)
    made = 1
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(strict_json, "_PIECES_KEPT", 6)
        for change, where in changes:
            items = state.agent_requests
            target = items[where % len(items)]
            if change == "append":
                items.append(record(made))
                made += 1
            elif change == "answer":
                target.status = HistoryStatus.COMPLETED
            elif change == "archive":
                target.x_request = None
                target.x_archived = True
            else:
                state.agent_requests = list(items)
            assert signed_document(state, encoded) == signed_document(state), change


def check_every_stored_journal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Have every save check that the journal it stores is what encoding each entry afresh
    gives."""
    from orchestrator.engine import engine as engine_module
    from orchestrator.formats.convert import unstructure

    original = engine_module.Engine._store_record

    def checked(self: Any) -> None:
        original(self)
        stored = self.state.phase_data["x_orchestrator"]["journal"]
        assert stored == [unstructure(entry) for entry in self.record.journal]

    monkeypatch.setattr(engine_module.Engine, "_store_record", checked)


def test_a_new_engine_takes_the_journal_as_it_was_read_and_stores_what_it_would_make(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal's JSON form is taken from the state a new engine read; at every save
    it is what encoding each entry afresh gives, and entries read are not encoded again."""
    from orchestrator.engine import engine as engine_module
    from orchestrator.engine import journal as journal_module
    from orchestrator.testing import WorkflowHarness

    made: list[int] = []
    real = engine_module.unstructure

    def counting(obj: Any) -> Any:
        if type(obj).__name__ == "JournalEntry":
            made.append(1)
        return real(obj)

    monkeypatch.setattr(engine_module, "unstructure", counting)
    monkeypatch.setattr(journal_module, "unstructure", counting)
    check_every_stored_journal(monkeypatch)
    harness = WorkflowHarness(AskInALoop, tmp_path)
    outcome = harness.run()
    fresh_saves = []
    while outcome.status == "paused":
        for request in outcome.pending:
            harness.respond(request.request_id, "Une réponse.")
        before = len(made)
        outcome = harness.resume()
        fresh_saves.append(len(made) - before)
    assert outcome.status == "completed", outcome.message
    # Each resume in the loop replays the asks recorded before: only the new entry is
    # made (the fourth also writes the finished phase's journal.json).
    assert fresh_saves[:3] == [1, 1, 1], fresh_saves


class AskTwelveTimes(Workflow):
    """One phase asking in a loop, long enough that a new process would encode its
    journal in one call."""

    name = "ask-twelve"
    agents = ("writer",)

    @phase(1)
    def gather(self, ctx: Any) -> list[str]:
        return [ctx.ask("writer", prompt(f"note {n} — « {n} »")) for n in range(12)]


def test_a_resume_that_reads_the_state_cuts_the_journal_from_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resume that reads the state (as a new process does) takes the journal's entries'
    texts from the record's line instead of encoding them again, and every save still
    stores and writes what a fresh encoding gives."""
    from orchestrator.formats import strict_json
    from orchestrator.storage.state_key import signed_document
    from orchestrator.testing import WorkflowHarness

    encoded_whole: list[int] = []
    real_split = strict_json._split_items

    def counting(values: list[Any], encode: Any) -> Any:
        encoded_whole.append(len(values))
        return real_split(values, encode)

    monkeypatch.setattr(strict_json, "_split_items", counting)
    check_every_stored_journal(monkeypatch)
    harness = WorkflowHarness(AskTwelveTimes, tmp_path)
    outcome = harness.run()
    cycles = 0
    while outcome.status == "paused":
        for request in outcome.pending:
            harness.respond(request.request_id, f"Réponse {cycles}.")
        harness.handoff.clear()  # nothing left by the last pause: the file is read
        outcome = harness.resume()
        cycles += 1
        if outcome.status == "paused":
            path = tmp_path / ".ask-twelve-state.json"
            state = FileBridge(tmp_path, "ask-twelve").load_state()
            assert path.read_bytes() == signed_document(state)
    assert outcome.status == "completed", outcome.message
    assert cycles == 12
    # Only a journal of one entry (and the new one) is encoded: there is nothing to cut.
    assert [n for n in encoded_whole if n > 2] == [], "a journal read from the file was encoded"


class AskWithRetries(Workflow):
    """A phase asking in a loop, whose agent fails now and then: each failure is retried,
    and the journal's entry then names the retry."""

    name = "ask-retries"
    agents = ("writer",)
    retry_policy = RetryPolicy(attempts=3, initial_delay=0, max_delay=0, jitter=0)

    @phase(1)
    def gather(self, ctx: Any) -> list[str]:
        return [ctx.ask("writer", prompt(f"note {n}")) for n in range(4)]


def test_a_retried_ask_replaces_its_journal_entry_and_the_state_records_the_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Entries are frozen and a retry puts a new one in place of the entry that waited for
    the failed request: every save stores what encoding each entry afresh gives, the
    state read back names each retry, and the phase ends with the retries' answers."""
    from orchestrator.testing import WorkflowHarness

    check_every_stored_journal(monkeypatch)
    harness = WorkflowHarness(AskWithRetries, tmp_path)
    failures = iter([False, True, False, True, True, False])
    outcome = harness.run()
    retried = 0
    while outcome.status == "paused":
        for request in outcome.pending:
            if next(failures, False):
                harness.respond(
                    request.request_id,
                    "",
                    status="error",
                    error_type="TIMEOUT",
                    error_message="not now",
                )
                retried += 1
            else:
                harness.respond(request.request_id, "A paragraph.")
        outcome = harness.resume()
        if outcome.status == "paused":
            (state_path,) = tmp_path.glob(".*-state.json")
            state = json.loads(state_path.read_text())
            records = {r["request_id"]: r for r in state["agent_requests"]}
            waiting = state["phase_data"]["x_orchestrator"]["journal"][-1]["request_ids"]
            assert [records[rid]["status"] for rid in waiting] == ["pending"]
    assert outcome.status == "completed", outcome.message
    assert outcome.outputs["gather"] == ["A paragraph."] * 4
    assert retried == 3
