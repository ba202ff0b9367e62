"""The work directory is untrusted ground: what a host, an agent or the machine leaves
there is refused in one line that names the file and what to do, and nothing is lost.

Every test drives real ``python -m orchestrator`` processes against the ``tiny`` workflow
(tests/fixtures/bad_input/wf.py) in a temporary work directory, with real files, FIFOs and
kernel limits:

- a response holding a lone UTF-16 surrogate escape (``"\\ud800"``) is refused with its
  place, left where it is, and the request stays answerable (the engine's own records
  still read back what a workflow made, lone surrogates included);
- a response whose ``request_id`` is not the request its place names (the file name in
  ``.agent-responses/``; the first pending request for ``.agent-response.json``) is
  refused in one line that names the file, both ids and what to do;
- an operating system error on the instance's files (a full disk on a real tmpfs, a write
  past ``RLIMIT_FSIZE``, a read-only file system, a file where the run's evidence needs a
  directory) is one line that names the file, says the instance is intact and what to do;
  the state is as it was, and resuming afterwards carries on;
- a state "file" that is a FIFO or a directory is damage that ``status`` and ``resume``
  name without hanging, and ``cancel --force`` sets aside; a lock file that is a FIFO, a
  directory or a symbolic link is refused in one line, and no pid is written through a link.
"""

from __future__ import annotations

import errno
import json
import os
import re
import resource
import signal
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import bad_input_support as bad_input
from support import cli
from support.cli import orchestrate
from support.evidence_support import check_run_evidence, run_dir_of

Instance = bad_input.Instance
assert_one_line_error = bad_input.assert_one_line_error
describe = bad_input.describe
response_bytes = bad_input.response_bytes
start = bad_input.start

ANSWER = "Owls hunt at night and see well in the dark."


pytestmark = pytest.mark.slow


def answered_to_the_end(instance: Instance, text: str = ANSWER) -> None:
    """A correct answer now resumes the run to its end, and no step ran twice."""
    instance.answer_and_resume(text, expect=0)
    assert instance.answer() == text + "\n"
    assert instance.steps() == ["outline", "save"]
    (history,) = instance.history()
    assert [r["x_response"]["response"] for r in history["agent_requests"]] == [text]


def refused_twice(instance: Instance, bad: Path, *fragments: str) -> str:
    """Resume with ``bad`` in place: exit 1, one line naming it, nothing changed, twice."""
    state_before = instance.state_bytes()
    request_before = instance.request_path.read_bytes()
    bad_before = bad.read_bytes()
    line = ""
    for _ in range(2):
        result = instance.resume()
        assert result.returncode == 1, describe(result)
        line = assert_one_line_error(result.stderr, str(bad), *fragments)
        assert instance.state_bytes() == state_before
        assert instance.request_path.read_bytes() == request_before
        assert bad.read_bytes() == bad_before, "the refused file must be left as it is"
    return line


# -- 1. lone surrogates ---------------------------------------------------------------------


@pytest.mark.parametrize("escape", ["\\ud800", "\\udc00", "\\uD83DA", "\\ud83d\\u0041"])
@pytest.mark.parametrize("where", ["single", "parallel"])
def test_a_response_with_a_lone_surrogate_is_refused_and_left_in_place(
    tmp_path: Path, escape: str, where: str
) -> None:
    instance = start(tmp_path)
    rid = instance.request()["request_id"]
    good = response_bytes(rid, "Owls PLACEHOLDER at night.")
    bad_bytes = good.replace(b"PLACEHOLDER", escape.encode("ascii"))
    bad = instance.response_path
    if where == "parallel":
        bad = instance.workdir / ".agent-responses" / f"{rid}.json"
        bad.parent.mkdir()
    bad.write_bytes(bad_bytes)
    line_number = bad_bytes[: bad_bytes.index(b"\\u")].count(b"\n") + 1
    refused_twice(
        instance,
        bad,
        escape[:6],
        "lone UTF-16 surrogate",
        f"at line {line_number}, column",
        "$.response",
        "the request is still pending",
    )
    status = orchestrate("status", "--workdir", instance.workdir)
    assert status.returncode == 0, describe(status)
    assert f"pending    {rid}" in status.stdout
    bad.unlink()
    answered_to_the_end(instance)


def test_a_response_with_a_surrogate_pair_escape_is_accepted(tmp_path: Path) -> None:
    instance = start(tmp_path)
    rid = instance.request()["request_id"]
    good = response_bytes(rid, "Owls PLACEHOLDER at night.")
    instance.response_path.write_bytes(good.replace(b"PLACEHOLDER", b"\\ud83e\\udd89"))
    result = instance.resume()
    assert result.returncode == 0, describe(result)
    assert instance.answer() == "Owls \U0001f989 at night.\n"


def test_respond_refuses_text_that_is_not_utf8(tmp_path: Path) -> None:
    """Bytes that are not UTF-8 reach ``sys.argv`` as lone surrogates: refused at once,
    rather than written into a response that resume would refuse."""
    instance = start(tmp_path)
    state_before = instance.state_bytes()
    result = orchestrate("respond", "--workdir", instance.workdir, "--text", "a\udcffb")
    assert result.returncode == 2, describe(result)
    assert_one_line_error(result.stderr, "--text is not UTF-8 text", "--file")
    assert not instance.response_path.exists()
    assert instance.state_bytes() == state_before
    answered_to_the_end(instance)


def test_values_a_workflow_made_with_lone_surrogates_still_read_back(tmp_path: Path) -> None:
    """The engine's own records keep what the workflow gave them, such as a name read with
    ``surrogateescape`` (here an input from bytes that are not UTF-8): the state and its
    history hold it as an escape, and every command reads them."""
    instance = start(tmp_path, note="caf\udce9")
    assert b"caf\\udce9" in instance.state_bytes()
    for command in ("status", "history", "events"):
        result = orchestrate(command, "--workdir", instance.workdir)
        assert result.returncode == 0, (command, describe(result))
    answered_to_the_end(instance)
    (history,) = instance.history()
    assert history["phase_data"]["x_orchestrator"]["inputs"]["note"] == "caf\udce9"
    for command in ("status", "history", "output"):
        result = orchestrate(command, "--workdir", instance.workdir)
        assert result.returncode == 0, (command, describe(result))


# -- 2. a response answers the request its place names -------------------------------------

# Two asks in one pause, so that two requests are pending at once.
PAIR_WORKFLOW = """
from pathlib import Path

from orchestrator import Ask, Workflow, phase

PAD = "Answer in one plain sentence; this sentence pads the prompt past the minimum. " * 2


class Pair(Workflow):
    name = "pair"
    agents = ("writer",)

    @phase(1)
    def ask_both(self, ctx):
        asks = [Ask(agent="writer", prompt=PAD + word) for word in ("first", "second")]
        return ctx.ask_all(asks)

    @phase(2)
    def save(self, ctx):
        answers = ctx.output("ask_both")
        path = Path(ctx.output_path) / "answers.json"
        return ctx.step("save", lambda: path.write_text(" | ".join(answers)) and str(path))
"""


def start_pair(tmp_path: Path) -> tuple[Path, list[str]]:
    """A ``pair`` instance paused on two requests; its work directory and their ids, in
    the order they were asked."""
    workflow = tmp_path / "pair.py"
    workflow.write_text(PAIR_WORKFLOW, encoding="utf-8")
    workdir = tmp_path / "work"
    workdir.mkdir()
    result = orchestrate(
        "run", f"{workflow}:Pair", "--workdir", workdir, "--output", workdir, cwd=tmp_path
    )
    assert result.returncode == 42, describe(result)
    state = json.loads((workdir / ".pair-state.json").read_bytes())
    ids = [r["request_id"] for r in state["agent_requests"]]
    assert (
        len(ids) == 2
        and ids[0] == json.loads((workdir / ".agent-request.json").read_bytes())["request_id"]
    )
    return workdir, ids


def pair_refused(workdir: Path, bad: Path, *fragments: str) -> None:
    state = workdir / ".pair-state.json"
    state_before, bad_before = state.read_bytes(), bad.read_bytes()
    for _ in range(2):
        result = orchestrate("resume", "--workdir", workdir)
        assert result.returncode == 1, describe(result)
        assert_one_line_error(result.stderr, str(bad), *fragments)
        assert state.read_bytes() == state_before
        assert bad.read_bytes() == bad_before
    recorded = json.loads(state_before)["agent_requests"]
    assert [r["status"] for r in recorded] == ["pending", "pending"]


def test_a_response_file_named_for_one_request_answering_another_is_refused(
    tmp_path: Path,
) -> None:
    workdir, (first, second) = start_pair(tmp_path)
    misnamed = workdir / ".agent-responses" / f"{first}.json"
    misnamed.parent.mkdir()
    misnamed.write_bytes(response_bytes(second, "meant for the second"))
    pair_refused(
        workdir,
        misnamed,
        f"named for request {first}",
        f"its request_id is {second}",
        f"name the file {second}.json",
        f"correct its request_id to {first}",
    )
    # What the message says: the file is renamed for the request it answers.
    misnamed.rename(misnamed.with_name(f"{second}.json"))
    (misnamed.parent / f"{first}.json").write_bytes(response_bytes(first, "meant for the first"))
    result = orchestrate("resume", "--workdir", workdir)
    assert result.returncode == 0, describe(result)
    assert (workdir / "answers.json").read_text() == "meant for the first | meant for the second"


def test_a_response_file_named_for_no_request_is_refused(tmp_path: Path) -> None:
    instance = start(tmp_path)
    rid = instance.request()["request_id"]
    other = bad_input.fresh_uuid()
    misnamed = instance.workdir / ".agent-responses" / f"{other}.json"
    misnamed.parent.mkdir()
    misnamed.write_bytes(response_bytes(rid))
    refused_twice(instance, misnamed, other, rid, "the request is still pending")
    misnamed.unlink()
    answered_to_the_end(instance)


def test_the_single_response_file_answers_only_the_first_pending_request(
    tmp_path: Path,
) -> None:
    workdir, (first, second) = start_pair(tmp_path)
    single = workdir / ".agent-response.json"
    single.write_bytes(response_bytes(second, "meant for the second"))
    pair_refused(
        workdir,
        single,
        f"answers the first pending request, {first}",
        f"its request_id is {second}",
        f"orchestrate respond --request-id {second}",
    )
    single.write_bytes(response_bytes(first, "meant for the first"))
    result = orchestrate("resume", "--workdir", workdir)
    assert result.returncode == 42, describe(result)
    published = json.loads((workdir / ".agent-request.json").read_bytes())
    assert published["request_id"] == second, "the one left is published in its turn"
    single.write_bytes(response_bytes(second, "meant for the second"))
    result = orchestrate("resume", "--workdir", workdir)
    assert result.returncode == 0, describe(result)
    assert (workdir / "answers.json").read_text() == "meant for the first | meant for the second"


def test_the_single_response_file_for_another_request_says_what_to_do(tmp_path: Path) -> None:
    instance = start(tmp_path)
    rid = instance.request()["request_id"]
    foreign = bad_input.fresh_uuid()
    instance.response_path.write_bytes(response_bytes(foreign))
    refused_twice(
        instance,
        instance.response_path,
        foreign,
        f"the pending request is {rid}",
        "remove it, or correct its request_id, then resume",
    )
    instance.response_path.unlink()
    answered_to_the_end(instance)


# -- 3. operating system errors ---------------------------------------------------------------

INTACT = "the instance is intact (every write is atomic, so nothing was half-written)"
GOES_ON = "then 'orchestrate resume' goes on from the last checkpoint"


def start_in(workdir: Path, output: Path) -> Instance:
    """``tiny`` paused in ``workdir`` (made here), its output in ``output``: a full disk
    under the work directory must not be a full disk under the workflow's own files."""
    workdir.mkdir()
    result = orchestrate(
        "run",
        f"{bad_input.WORKFLOW_FILE}:Tiny",
        "--workdir",
        workdir,
        "--output",
        output,
        "--input",
        "topic=owls",
        cwd=workdir.parent,
    )
    assert result.returncode == 42, describe(result)
    return Instance(workdir, output, bad_input.WORKFLOW_FILE)


def named_file(line: str, action: str = "write") -> Path:
    """The file an operating system error line names."""
    match = re.match(rf"orchestrate: error: (.+?): cannot {action} it: ", line)
    assert match is not None, line
    return Path(match[1])


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 256 KiB tmpfs, mounted for this test and unmounted after it."""
    if os.geteuid() != 0:
        pytest.skip("a real full disk is a tmpfs, and mounting one needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True, check=False)
        if os.path.ismount(disk):
            subprocess.run(["umount", "-l", str(disk)], capture_output=True, check=True)


def fill(disk: Path) -> Path:
    """Write a file until the file system refuses another byte (ENOSPC)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    return filler


class Snapshot:
    """The instance's bridge files, to prove a failed command changed none of them."""

    def __init__(self, instance: Instance) -> None:
        self.instance = instance
        self.files = self._read()

    def _read(self) -> dict[str, bytes | None]:
        paths = (self.instance.state_path, self.instance.request_path, self.instance.response_path)
        return {p.name: p.read_bytes() if p.exists() else None for p in paths}

    def unchanged(self) -> bool:
        return self._read() == self.files


def test_a_full_disk_names_the_file_keeps_the_instance_and_resume_goes_on(
    tmp_path: Path, small_disk: Path
) -> None:
    instance = start_in(small_disk / "work", tmp_path / "out")
    assert instance.respond(ANSWER).returncode == 0
    filler = fill(small_disk)
    before = Snapshot(instance)

    result = instance.resume()
    assert result.returncode == 1, describe(result)
    line = assert_one_line_error(
        result.stderr,
        "No space left on device (ENOSPC)",
        INTACT,
        "free space on its file system",
        GOES_ON,
    )
    assert named_file(line).is_relative_to(instance.workdir), line
    assert before.unchanged(), "the state, request and response must be as they were"

    # A second answer is refused at the door (the first wins), and writes nothing.
    answered = instance.respond("a second answer")
    assert answered.returncode == 2, describe(answered)
    line = assert_one_line_error(answered.stderr, "has an answer already", "the first answer wins")
    assert line.startswith(f"orchestrate: error: {instance.response_path}: "), line
    assert before.unchanged()
    status = orchestrate("status", "--workdir", instance.workdir)
    assert status.returncode == 0 and "status     paused" in status.stdout, describe(status)

    filler.unlink()
    result = instance.resume()
    assert result.returncode == 0, describe(result)
    (history,) = instance.history()
    assert [r["x_response"]["response"] for r in history["agent_requests"]] == [ANSWER]
    # Work before the last checkpoint is not done again; only the step whose record the
    # full disk cut may run again (steps are idempotent for that, as the README says).
    steps = instance.steps()
    assert steps[:2] == ["outline", "save"] and set(steps[2:]) <= {"save"}, steps
    check_run_evidence(run_dir_of(instance.workdir))


def _resume_with_file_size_limit(
    instance: Instance, limit: int
) -> subprocess.CompletedProcess[str]:
    def limited() -> None:  # in the child, before exec: the kernel enforces it from there
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a refused write is then EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        cli.command("resume", "--workdir", instance.workdir),
        capture_output=True,
        text=True,
        timeout=bad_input.PROCESS_TIMEOUT,
        env=cli.child_env(),
        cwd=bad_input.FIXTURES,
        preexec_fn=limited,
        check=False,
    )


def test_a_write_past_the_file_size_limit_names_the_state_and_resume_goes_on(
    tmp_path: Path,
) -> None:
    instance = start(tmp_path)
    assert instance.respond(ANSWER).returncode == 0
    before = Snapshot(instance)
    # Recording the answer makes the state larger than it is now, so its write is refused.
    result = _resume_with_file_size_limit(instance, len(instance.state_bytes()))
    assert result.returncode == 1, describe(result)
    line = assert_one_line_error(
        result.stderr, "File too large (EFBIG)", INTACT, "raise the limit", GOES_ON
    )
    assert named_file(line) == instance.state_path
    assert before.unchanged()
    assert not list(instance.workdir.glob(".*.tmp")), "the temporary file is cleaned up"
    result = instance.resume()
    assert result.returncode == 0, describe(result)
    (history,) = instance.history()
    assert [r["x_response"]["response"] for r in history["agent_requests"]] == [ANSWER]


def test_a_read_only_file_system_names_the_lock_and_resume_goes_on_once_writable(
    tmp_path: Path, small_disk: Path
) -> None:
    instance = start_in(small_disk / "work", tmp_path / "out")
    assert instance.respond(ANSWER).returncode == 0
    before = Snapshot(instance)
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    try:
        result = instance.resume()
        assert result.returncode == 1, describe(result)
        line = assert_one_line_error(
            result.stderr, "Read-only file system (EROFS)", INTACT, "make it writable", GOES_ON
        )
        assert named_file(line) == instance.workdir / ".orchestrator" / "tiny.lock"
        status = orchestrate("status", "--workdir", instance.workdir)
        assert status.returncode == 0, describe(status)
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=True)
    assert before.unchanged()
    result = instance.resume()
    assert result.returncode == 0, describe(result)
    assert instance.answer() == ANSWER + "\n"


def test_an_evidence_write_that_fails_does_not_fail_the_run(tmp_path: Path) -> None:
    """The engine's own files failing is no failure of the phase: the run stays paused
    and resumable, instead of being recorded as failed for good."""
    instance = start(tmp_path)
    assert instance.respond(ANSWER).returncode == 0
    blocker = run_dir_of(instance.workdir) / "agents"
    blocker.write_bytes(b"a file where the run's evidence needs a directory\n")

    result = instance.resume()
    assert result.returncode == 1, describe(result)
    assert_one_line_error(
        result.stderr, f"{blocker}: is a file where a directory belongs", "instance is intact"
    )
    assert instance.engine_record()["status"] != "failed", "the run must not be failed for it"

    blocker.unlink()
    result = instance.resume()
    assert result.returncode == 0, describe(result)
    assert instance.steps() == ["outline", "save"]  # the step's record was saved first
    check_run_evidence(run_dir_of(instance.workdir))


# -- 4. a state or lock file that is not a regular file -----------------------------------------


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _directory(path: Path) -> None:
    path.mkdir()
    (path / "inside.json").write_text("{}")


NOT_A_FILE = {"fifo": (_fifo, "a FIFO (named pipe)"), "directory": (_directory, "a directory")}


@pytest.mark.parametrize("kind", list(NOT_A_FILE))
def test_a_state_that_is_not_a_regular_file_is_damage_cancel_force_sets_aside(
    tmp_path: Path, kind: str
) -> None:
    make, described = NOT_A_FILE[kind]
    instance = start(tmp_path)
    instance.state_path.unlink()
    make(instance.state_path)
    for command in ("status", "resume", "cancel"):
        # A FIFO with no writer would block a plain open: the timeout fails the test.
        result = orchestrate(command, "--workdir", instance.workdir)
        assert result.returncode == 1, (command, describe(result))
        assert_one_line_error(
            result.stderr,
            f"{instance.state_path}: is {described}, not a regular file",
            "the state file is damaged",
            "'orchestrate cancel --force' to set it aside",
        )
        assert os.path.lexists(instance.state_path)

    result = orchestrate("cancel", "--force", "--workdir", instance.workdir)
    assert result.returncode == 0, describe(result)
    assert not os.path.lexists(instance.state_path)
    assert not instance.request_path.exists()
    (kept,) = (instance.workdir / ".orchestrator" / "damaged").iterdir()
    assert kept.name.startswith(".tiny-state.json.")
    assert str(kept) in result.stderr
    mode = kept.lstat().st_mode
    assert stat.S_ISFIFO(mode) if kind == "fifo" else stat.S_ISDIR(mode)

    rerun = orchestrate(
        "run",
        f"{bad_input.WORKFLOW_FILE}:Tiny",
        "--workdir",
        instance.workdir,
        "--output",
        instance.output,
        "--input",
        "topic=owls",
    )
    assert rerun.returncode == 42, describe(rerun)
    instance.answer_and_resume(ANSWER, expect=0)
    assert instance.answer() == ANSWER + "\n"


def _symlink_to_precious(path: Path) -> None:
    target = path.parent.parent.parent / "precious.txt"
    target.write_text("a file the lock must never write into\n")
    path.symlink_to(target)


LOCKS = {
    "fifo": (_fifo, "a FIFO (named pipe)"),
    "directory": (_directory, "a directory"),
    "symlink": (_symlink_to_precious, "a symbolic link (never followed)"),
}


@pytest.mark.parametrize("kind", list(LOCKS))
def test_a_lock_file_that_is_not_a_regular_file_is_refused_in_one_line(
    tmp_path: Path, kind: str
) -> None:
    make, described = LOCKS[kind]
    instance = start(tmp_path)
    assert instance.respond(ANSWER).returncode == 0
    lock = instance.workdir / ".orchestrator" / "tiny.lock"
    lock.unlink()
    make(lock)
    precious = tmp_path / "precious.txt"
    precious_before = precious.read_bytes() if kind == "symlink" else None
    before = Snapshot(instance)
    for _ in range(2):
        result = instance.resume()
        assert result.returncode == 1, describe(result)
        assert_one_line_error(
            result.stderr,
            f"{lock}: the instance lock is {described}, not a regular file",
            "nothing was changed",
            "remove it (orchestrate makes a new one), then try again",
        )
        assert before.unchanged()
        assert os.path.lexists(lock)
    if precious_before is not None:
        assert precious.read_bytes() == precious_before, "the pid was written through the link"
    if lock.is_dir() and not lock.is_symlink():
        (lock / "inside.json").unlink()
        lock.rmdir()
    else:
        lock.unlink()
    result = instance.resume()
    assert result.returncode == 0, describe(result)
    assert stat.S_ISREG(lock.lstat().st_mode)
    assert instance.answer() == ANSWER + "\n"
