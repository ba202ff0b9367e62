"""``orchestrate events``: a run's log listed, filtered, piped and followed, by real processes
reading real files (the template-create example driven to its end, or logs written here)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.cli import command, orchestrate
from support.evidence_support import EXAMPLE_HANDLER, example_args

RUN_ID = "5f0c1e2a-0b1c-4d2e-8f30-1a2b3c4d5e6f"
# How long a child may take before the test gives up on it: a safety net, never a measure.
PATIENCE = 120.0


def drive(workdir: Path) -> subprocess.CompletedProcess[bytes]:
    return orchestrate("drive", *example_args(workdir), "--handler", EXAMPLE_HANDLER, text=False)


def only_log(workdir: Path) -> Path:
    (log,) = (workdir / ".orchestrator" / "runs").glob("*/events.ndjson")
    return log


class Lines:
    """A child's pipe read line by line; the test fails after PATIENCE instead of hanging."""

    def __init__(self, pipe: object) -> None:
        self.fd = pipe.fileno()  # type: ignore[attr-defined]
        self.buffer = b""

    def line(self) -> bytes:
        while b"\n" not in self.buffer:
            if not self._read_more():
                pytest.fail(f"the pipe closed before a whole line; it held {self.buffer!r}")
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line + b"\n"

    def rest(self) -> bytes:
        while self._read_more():
            pass
        rest, self.buffer = self.buffer, b""
        return rest

    def _read_more(self) -> bool:
        ready, _, _ = select.select([self.fd], [], [], PATIENCE)
        if not ready:
            pytest.fail(f"nothing more came within {PATIENCE:g} s; so far {self.buffer!r}")
        chunk = os.read(self.fd, 65536)
        self.buffer += chunk
        return bool(chunk)


def event_line(seq: int, event: str, data: dict[str, object], ts: str | None = None) -> bytes:
    moment = ts or f"2026-03-01T10:00:{seq:02d}.{seq * 7 % 1000:03d}Z"
    line = {"ts": moment, "event": event, "data": data, "x_seq": seq}
    return json.dumps(line, separators=(",", ":")).encode() + b"\n"


def handmade_run(workdir: Path, lines: list[bytes], *, run_id: str = RUN_ID) -> Path:
    """A run directory holding ``lines`` as its log, the way the engine lays it out."""
    run_dir = workdir / ".orchestrator" / "runs" / run_id
    run_dir.mkdir(parents=True)
    log = run_dir / "events.ndjson"
    log.write_bytes(b"".join(lines))
    return log


def small_log() -> list[bytes]:
    return [
        event_line(1, "run.start", {"workflow": "tiny", "run_id": RUN_ID, "phases": ["only"]}),
        event_line(2, "skill.start", {"skill": "only", "phase": 1}),
        event_line(3, "review.file_analyzed", {"file": "src/main.go", "issues": 2}),
    ]


@pytest.fixture(scope="module")
def driven(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A work directory where the template-create example ran to its end."""
    workdir = tmp_path_factory.mktemp("driven")
    done = drive(workdir)
    assert done.returncode == 0, done.stderr.decode()
    return workdir


# -- listing -------------------------------------------------------------------------------


READABLE = re.compile(rb" *(\d+)  (\d\d:\d\d:\d\d\.\d{3})  ([a-z0-9_.]+) +(.*)")


@pytest.mark.slow
def test_every_event_gets_one_readable_line_in_order(driven: Path) -> None:
    shown = orchestrate("events", "--workdir", str(driven), text=False)
    assert shown.returncode == 0, shown.stderr.decode()
    records = [json.loads(line) for line in only_log(driven).read_bytes().splitlines()]
    lines = shown.stdout.splitlines()
    assert len(lines) == len(records) > 40
    for line, record in zip(lines, records, strict=True):
        match = READABLE.fullmatch(line)
        assert match is not None, line
        assert int(match[1]) == record["x_seq"]
        assert match[2].decode() == record["ts"][11:23]
        assert match[3].decode() == record["event"]
    text = shown.stdout.decode()
    assert "None" not in text
    first_answer = next(line for line in lines if b" agent.end " in line).decode()
    assert "architectural-reviewer" in first_answer and "  pass  " in first_answer
    assert "offline-fake-agent" in first_answer and "217 tokens" in first_answer
    assert "confidence 0.92" in first_answer and "answered in" in first_answer
    assert "phase 1 codebase_analysis  pass" in text and "Analyzed 16 files" in text
    assert "scan_project  ok" in text and "waiting for 4 requests" in text
    assert re.search(r"run\.end +completed  [\d.]+ m?s  9 phases completed$", lines[-1].decode())


@pytest.mark.slow
def test_json_prints_the_log_lines_byte_for_byte(driven: Path) -> None:
    shown = orchestrate("events", "--workdir", str(driven), "--json", text=False)
    assert shown.returncode == 0, shown.stderr.decode()
    assert shown.stdout == only_log(driven).read_bytes()


def test_type_keeps_exact_names_and_namespaces(driven: Path) -> None:
    lines = only_log(driven).read_bytes().splitlines(keepends=True)
    names = [json.loads(line)["event"] for line in lines]
    shown = orchestrate(
        "events",
        "--workdir",
        str(driven),
        "--json",
        "--type",
        "agent.end",
        "--type",
        "tool.*",
        text=False,
    )
    assert shown.returncode == 0, shown.stderr.decode()
    wanted = {"agent.end", "tool.call", "tool.result"}
    assert shown.stdout == b"".join(
        line for line, n in zip(lines, names, strict=True) if n in wanted
    )
    assert {json.loads(line)["event"] for line in shown.stdout.splitlines()} == wanted
    ends = orchestrate("events", "--workdir", str(driven), "--type", "run.end", text=False)
    assert len(ends.stdout.splitlines()) == 1 and b"run.end" in ends.stdout


@pytest.mark.parametrize("bad", ["agent*", "Agent.End", ".*", "agent.", "*", "agent.*.end"])
def test_a_filter_that_is_no_name_or_namespace_is_a_usage_error(tmp_path: Path, bad: str) -> None:
    shown = orchestrate("events", "--workdir", str(tmp_path), "--type", bad, text=False)
    assert shown.returncode == 2
    assert b"namespace ending in .*" in shown.stderr and b"Traceback" not in shown.stderr


def test_an_authors_event_shows_its_data(tmp_path: Path) -> None:
    handmade_run(tmp_path, small_log())
    shown = orchestrate("events", "--workdir", str(tmp_path), "--run", RUN_ID, text=False)
    assert shown.returncode == 0, shown.stderr.decode()
    last = shown.stdout.decode().splitlines()[-1]
    assert last == "   3  10:00:03.021  review.file_analyzed  file=src/main.go issues=2"


def test_control_characters_in_a_summary_do_not_reach_the_terminal(tmp_path: Path) -> None:
    summary = "fine\x1b]0;owned\x07 then \u202eevil\nnext line"
    lines = [event_line(1, "skill.end", {"skill": "x", "status": "pass", "summary": summary})]
    handmade_run(tmp_path, lines)
    shown = orchestrate("events", "--workdir", str(tmp_path), "--run", RUN_ID, text=False)
    assert shown.returncode == 0, shown.stderr.decode()
    text = shown.stdout.decode()
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert text.count("\n") == 1 and "\\u001b]0;owned\\u0007" in text and "next line" in text


# -- choosing the run ----------------------------------------------------------------------


def finished_run(workdir: Path, run_id: str, workflow: str) -> Path:
    lines = [
        event_line(1, "run.start", {"workflow": workflow, "run_id": run_id}),
        event_line(2, "run.end", {"status": "completed", "duration_ms": 5}),
    ]
    log = handmade_run(workdir, lines, run_id=run_id)
    (log.parent / "state.json").write_text("{}")
    return log


def live_state(workdir: Path, run_id: str) -> None:
    state = {"phase_data": {"x_orchestrator": {"run_id": run_id}}}
    (workdir / ".live-state.json").write_text(json.dumps(state))


def test_the_live_instance_comes_first_then_the_latest_finished_run(tmp_path: Path) -> None:
    older = finished_run(tmp_path, "run-older", "older")
    newer = finished_run(tmp_path, "run-newer", "newer")
    os.utime(older.parent / "state.json", (1_000_000, 1_000_000))
    live = handmade_run(tmp_path, [event_line(1, "run.start", {"workflow": "live"})], run_id="b")
    shown = orchestrate("events", "--workdir", str(tmp_path), "--json", text=False)
    assert shown.stdout == newer.read_bytes()
    live_state(tmp_path, "b")
    shown = orchestrate("events", "--workdir", str(tmp_path), "--json", text=False)
    assert shown.stdout == live.read_bytes()
    shown = orchestrate(
        "events", "--workdir", str(tmp_path), "--json", "--run", "run-older", text=False
    )
    assert shown.stdout == older.read_bytes()


def test_no_run_here_says_where_it_looked_and_what_to_do(tmp_path: Path) -> None:
    shown = orchestrate("events", "--workdir", str(tmp_path), text=False)
    assert shown.returncode == 2  # as every command that finds no run
    message = shown.stderr.decode()
    assert str(tmp_path) in message and "no run here" in message
    assert "orchestrate run" in message and "--follow" in message
    assert "Traceback" not in message


def test_an_unknown_run_lists_the_runs_there(driven: Path) -> None:
    shown = orchestrate("events", "--workdir", str(driven), "--run", "no-such-run", text=False)
    assert shown.returncode == 2
    (run_dir,) = (driven / ".orchestrator" / "runs").iterdir()
    message = shown.stderr.decode()
    assert "no run no-such-run" in message and run_dir.name in message


def test_a_run_without_a_log_yet_is_named(tmp_path: Path) -> None:
    (tmp_path / ".orchestrator" / "runs" / RUN_ID).mkdir(parents=True)
    shown = orchestrate("events", "--workdir", str(tmp_path), "--run", RUN_ID, text=False)
    assert shown.returncode == 2
    assert b"has written no events.ndjson yet" in shown.stderr and b"--follow" in shown.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--run", "../elsewhere"],
        ["--run", ""],
        ["--poll", "0"],
        ["--poll", "soon"],
        ["--workdir", "/no/such/directory"],
    ],
)
def test_usage_errors_exit_2(tmp_path: Path, args: list[str]) -> None:
    shown = orchestrate("events", "--workdir", str(tmp_path), *args, text=False)
    assert shown.returncode == 2, shown.stderr.decode()
    assert b"Traceback" not in shown.stderr


# -- a damaged log -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "where", "what"),
    [
        (b"{not json\n", "line 3", "invalid JSON"),
        (b"[1, 2]\n", "line 3", "not an event object"),
        (b'{"ts": "2026-03-01", "event": "x", "data": {}}\n', "line 3", "RFC 3339"),
        (b'{"ts": "2026-03-01T10:00:00Z", "event": "x", "data": []}\n', "line 3", "data"),
    ],
)
def test_a_bad_line_is_named_by_file_and_line(
    tmp_path: Path, bad: bytes, where: str, what: str
) -> None:
    # A blank line before it still counts, as in an editor.
    log = handmade_run(tmp_path, [small_log()[0], b"\n", bad, small_log()[1]])
    for extra in ([], ["--json"], ["--type", "skill.*"]):
        shown = orchestrate(
            "events", "--workdir", str(tmp_path), "--run", RUN_ID, *extra, text=False
        )
        assert shown.returncode == 1
        message = shown.stderr.decode()
        assert f"{log} {where}" in message and what in message, message
        assert "Traceback" not in message


def test_a_torn_last_line_is_left_out(tmp_path: Path) -> None:
    lines = small_log()
    handmade_run(tmp_path, [*lines[:2], lines[2][:20]])
    shown = orchestrate("events", "--workdir", str(tmp_path), "--run", RUN_ID, "--json", text=False)
    assert shown.returncode == 0, shown.stderr.decode()
    assert shown.stdout == b"".join(lines[:2])


# -- following -----------------------------------------------------------------------------


@contextlib.contextmanager
def following(workdir: Path, *args: str) -> Iterator[Follower]:
    """``orchestrate events --follow`` running on ``workdir``; killed if the test leaves
    it running, its pipes closed."""
    child = subprocess.Popen(
        command("events", "--follow", "--poll", "0.05", "--workdir", workdir, *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,
        # A suite started in the background ignores SIGINT, and a child inherits that:
        # the follower gets the default, as a person's terminal gives it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        yield Follower(child)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        for pipe in (child.stdout, child.stderr):
            if pipe is not None:
                pipe.close()


class Follower:
    def __init__(self, child: subprocess.Popen[bytes]) -> None:
        self.child = child
        self.out = Lines(child.stdout)
        self.err = Lines(child.stderr)

    def exit_code(self) -> int:
        return self.child.wait(timeout=PATIENCE)


@pytest.mark.slow
def test_follow_started_before_the_run_prints_every_event_once(tmp_path: Path) -> None:
    with following(tmp_path, "--json") as follower:
        assert b"waiting for a run to start in" in follower.err.line()
        done = drive(tmp_path)
        assert done.returncode == 0, done.stderr.decode()
        printed = follower.out.rest()
        assert follower.exit_code() == 0, follower.err.rest().decode()
    assert printed == only_log(tmp_path).read_bytes()
    seqs = [json.loads(line)["x_seq"] for line in printed.splitlines()]
    assert seqs == list(range(1, len(seqs) + 1))
    assert json.loads(printed.splitlines()[-1])["event"] == "run.end"


@pytest.mark.slow
def test_follow_picks_up_a_paused_run_and_stays_until_it_ends(tmp_path: Path) -> None:
    paused = orchestrate("run", *example_args(tmp_path), text=False)
    assert paused.returncode == 42, paused.stderr.decode()
    with following(tmp_path) as follower:
        before = [follower.out.line()]
        while b" run.pause " not in before[-1]:
            before.append(follower.out.line())
        assert follower.child.poll() is None  # a paused run is not over
        done = drive(tmp_path)
        assert done.returncode == 0, done.stderr.decode()
        after = follower.out.rest().splitlines(keepends=True)
        assert follower.exit_code() == 0, follower.err.rest().decode()
    printed = before + after
    shown = [READABLE.fullmatch(line.rstrip(b"\n")) for line in printed]
    seqs = [int(m[1]) if m else line for m, line in zip(shown, printed, strict=True)]
    records = [json.loads(line) for line in only_log(tmp_path).read_bytes().splitlines()]
    assert seqs == [record["x_seq"] for record in records] == list(range(1, len(records) + 1))
    assert b" run.end " in after[-1]


def test_follow_never_prints_half_a_line(tmp_path: Path) -> None:
    lines = [*small_log(), event_line(4, "run.end", {"status": "completed"})]
    log = handmade_run(tmp_path, [*lines[:2], lines[2][:25]])
    with following(tmp_path, "--run", RUN_ID, "--json") as follower:
        # The half line was there from the start: it is read, and left, on every look.
        assert follower.out.line() + follower.out.line() == b"".join(lines[:2])
        with log.open("ab") as file:  # the writer finishes its line
            file.write(lines[2][25:])
        assert follower.out.line() == lines[2]
        with log.open("ab") as file:
            file.write(lines[3])
        assert follower.out.line() == lines[3]
        assert follower.out.rest() == b""
        assert follower.exit_code() == 0
        assert follower.err.rest() == b""


def test_follow_waits_for_the_log_of_a_run_that_has_none_yet(tmp_path: Path) -> None:
    lines = [*small_log(), event_line(4, "run.end", {"status": "completed"})]
    with following(tmp_path, "--run", RUN_ID, "--json") as follower:
        assert b"waiting for run " + RUN_ID.encode() in follower.err.line()
        handmade_run(tmp_path, lines)
        assert follower.out.rest() == b"".join(lines)
        assert follower.exit_code() == 0


def test_an_interrupted_follow_exits_130_quietly(tmp_path: Path) -> None:
    handmade_run(tmp_path, small_log())
    with following(tmp_path, "--run", RUN_ID) as follower:
        for _ in small_log():
            follower.out.line()  # it is in its loop now
        follower.child.send_signal(signal.SIGINT)
        assert follower.exit_code() == 130
        assert follower.err.rest() == b""


def test_a_reader_that_leaves_ends_the_follow_quietly(tmp_path: Path) -> None:
    log = handmade_run(tmp_path, small_log()[:1])
    with following(tmp_path, "--run", RUN_ID) as follower:
        follower.out.line()
        assert follower.child.stdout is not None
        follower.child.stdout.close()  # like `| head -1`
        with log.open("ab") as file:
            file.write(b"".join(small_log()[1:]))
        assert follower.exit_code() == 0
        assert follower.err.rest() == b""


def test_listing_imports_nothing_heavy(tmp_path: Path) -> None:
    handmade_run(tmp_path, small_log())
    probe = (
        "import io, sys\n"
        "from orchestrator.cli.main import main\n"
        "sys.stdout = io.TextIOWrapper(io.BytesIO())\n"
        "assert main(['events', '--workdir', sys.argv[1], '--run', sys.argv[2]]) == 0\n"
        "heavy = {'urllib.request', 'opentelemetry', 'orchestrator.evidence.otel',"
        " 'orchestrator.engine.engine', 'attrs', 'cattrs'}\n"
        "print(sorted(heavy & set(sys.modules)), file=sys.stderr)\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path), RUN_ID],
        capture_output=True,
        check=True,
        timeout=PATIENCE,
    )
    assert loaded.stderr.strip() == b"[]"
