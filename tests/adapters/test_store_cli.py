"""``orchestrate`` on a PostgreSQL store (``--store``), as hosts and workers run it: new
processes against a real server, in this session's own schema."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from orchestrator.adapters.postgres.connection import shown
from support.cli import command, orchestrate
from support.process_support import example_answer as fake_answer

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "template_create"
WORKFLOW = f"{EXAMPLE / 'workflow.py'}:TemplateCreate"
FAKE_AGENT = f"{sys.executable} {EXAMPLE / 'fake_agent.py'}"


pytestmark = pytest.mark.slow


def start_args(workdir: Path, output: str) -> list[str]:
    return [
        "--workdir",
        str(workdir),
        "--output",
        str(workdir / output),
        "--input",
        f"project_path={EXAMPLE / 'sample_project'}",
        "--input",
        "template_name=task-tracker",
    ]


def pending(dsn: str, *run: str) -> list[dict[str, Any]]:
    result = orchestrate("pending", "--store", dsn, *(("--run", run[0]) if run else ()), "--json")
    assert result.returncode == 0, result.stderr
    found: list[dict[str, Any]] = json.loads(result.stdout)
    return found


def status_of(dsn: str, run_id: str) -> dict[str, Any]:
    result = orchestrate("status", "--store", dsn, "--run", run_id, "--json")
    assert result.returncode == 0, result.stderr
    summary: dict[str, Any] = json.loads(result.stdout)
    return summary


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_drive_on_a_store_writes_what_drive_on_files_writes(pg_dsn: str, tmp_path: Path) -> None:
    on_files, on_store = tmp_path / "files", tmp_path / "store"
    on_files.mkdir(), on_store.mkdir()
    done = orchestrate("drive", WORKFLOW, *start_args(on_files, "t"), "--handler", FAKE_AGENT)
    assert done.returncode == 0, done.stderr
    done = orchestrate(
        "drive", WORKFLOW, *start_args(on_store, "t"), "--handler", FAKE_AGENT, "--store", pg_dsn
    )
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    assert tree(on_store / "t") == tree(on_files / "t")
    assert not list(on_store.glob(".*"))  # the store kept the run: nothing in the directory
    assert status_of(pg_dsn, run_id)["status"] == "completed"


def test_hosts_answer_queued_runs_that_workers_advance(pg_dsn: str, tmp_path: Path) -> None:
    runs = []
    for n in range(3):
        queued = orchestrate(
            "run", WORKFLOW, *start_args(tmp_path, f"t{n}"), "--store", pg_dsn, "--queue"
        )
        assert queued.returncode == 0, queued.stderr
        runs.append(queued.stdout.strip())
        assert status_of(pg_dsn, runs[-1])["status"] == "queued"
    for _ in range(40):
        worker = orchestrate("worker", "--store", pg_dsn, "--until-idle", "--concurrency", "2")
        assert worker.returncode == 0, worker.stderr
        waiting = [item for item in pending(pg_dsn) if item["run_id"] in runs]
        if not waiting:
            break
        for item in waiting:
            request = item["request"]
            answered = orchestrate(
                "respond",
                "--store",
                pg_dsn,
                "--run",
                item["run_id"],
                "--request",
                request["request_id"],
                "--text",
                fake_answer(request),
            )
            assert answered.returncode == 0, answered.stderr
    for run_id in runs:
        assert status_of(pg_dsn, run_id)["status"] == "completed"
    assert all(tree(tmp_path / f"t{n}") == tree(tmp_path / "t0") for n in (1, 2))


def test_run_on_a_store_at_a_pause_says_the_next_step_status_gives(
    pg_dsn: str, tmp_path: Path
) -> None:
    started = orchestrate("run", WORKFLOW, *start_args(tmp_path, "out"), "--store", pg_dsn)
    assert started.returncode == 42, started.stderr
    run_id = started.stdout.strip()  # stdout is the run's id alone
    expected = status_of(pg_dsn, run_id)["next"]
    named = f"--store {shlex.quote(shown(pg_dsn))} --run {run_id}"
    assert f"'orchestrate respond {named}'" in expected
    assert "a worker of the store goes on" in expected
    assert f"orchestrate: next: {expected}\n" in started.stderr


def test_an_answer_to_no_pending_request_is_refused_and_nothing_is_written(
    pg_dsn: str, tmp_path: Path
) -> None:
    paused = orchestrate("run", WORKFLOW, *start_args(tmp_path, "t"), "--store", pg_dsn)
    assert paused.returncode == 42, paused.stderr
    run_id = paused.stdout.strip()
    (item,) = pending(pg_dsn, run_id)
    request_id = item["request"]["request_id"]
    refused = orchestrate(
        "respond", "--store", pg_dsn, "--run", run_id, "--request", "no-such", "--text", "x"
    )
    assert refused.returncode == 2
    assert f"request no-such is not pending; pending: {request_id}" in refused.stderr
    answer = fake_answer(item["request"])
    first = orchestrate(
        "respond", "--store", pg_dsn, "--run", run_id, "--request", request_id, "--text", answer
    )
    assert first.returncode == 0, first.stderr
    again = orchestrate(
        "respond", "--store", pg_dsn, "--run", run_id, "--request", request_id, "--text", answer
    )
    assert again.returncode == 2
    assert "has an answer already" in again.stderr and "the first answer wins" in again.stderr
    unknown = orchestrate("resume", "--store", pg_dsn, "--run", "no-such-run")
    assert unknown.returncode == 2
    assert "no run no-such-run" in unknown.stderr


def test_a_busy_run_is_refused_with_exit_75(pg_dsn: str, tmp_path: Path) -> None:
    from orchestrator.adapters.postgres.store import PostgresStore

    paused = orchestrate("run", WORKFLOW, *start_args(tmp_path, "t"), "--store", pg_dsn)
    run_id = paused.stdout.strip()
    with PostgresStore(pg_dsn) as holder, holder.bridge(run_id).lock():
        busy = orchestrate("resume", "--store", pg_dsn, "--run", run_id)
    assert busy.returncode == 75, busy.stderr
    assert "another process is advancing this run" in busy.stderr
    again = orchestrate("resume", "--store", pg_dsn, "--run", run_id)
    assert again.returncode == 42, again.stderr  # the lock went with its holder


def test_cancel_keeps_the_history_and_withdraws_the_requests(pg_dsn: str, tmp_path: Path) -> None:
    paused = orchestrate("run", WORKFLOW, *start_args(tmp_path, "t"), "--store", pg_dsn)
    run_id = paused.stdout.strip()
    cancelled = orchestrate("cancel", "--store", pg_dsn, "--run", run_id)
    assert cancelled.returncode == 0, cancelled.stderr
    assert status_of(pg_dsn, run_id)["status"] == "cancelled"
    assert pending(pg_dsn, run_id) == []
    gone = orchestrate("resume", "--store", pg_dsn, "--run", run_id)
    assert gone.returncode == 2
    assert "has ended (cancelled)" in gone.stderr


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["status", "--store", "mysql://x/y"], "name a PostgreSQL store as postgresql://"),
        (["run", WORKFLOW, "--queue"], "--queue leaves the run for a worker: it needs --store"),
        (["worker"], "a worker advances the runs of a PostgreSQL store"),
        (["resume", "--store", "postgresql:///test"], "with --store, name the run: --run ID"),
        (["status", "--store", "postgresql:///test?foo=bar"], "not a PostgreSQL URL libpq accepts"),
        (
            ["status", "--store", "postgresql:///test?options=-csearch_path%3DBad-Name"],
            "schema 'Bad-Name' in search_path",
        ),
    ],
)
def test_usage_mistakes_are_one_line(argv: list[str], words: str, tmp_path: Path) -> None:
    result = orchestrate(*argv)
    assert result.returncode == 2
    assert words in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_store_that_does_not_answer_is_one_line() -> None:
    result = orchestrate("status", "--store", "postgresql://nobody@127.0.0.1:1/none")
    assert result.returncode == 1
    assert "cannot connect" in result.stderr
    assert "check that the server runs" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_environment_names_the_store(pg_dsn: str) -> None:
    result = orchestrate("status", env={"ORCHESTRATOR_STORE": pg_dsn})
    assert result.returncode == 0, result.stderr


def test_a_worker_stops_at_a_checkpoint_on_sigterm_and_another_goes_on(pg_fresh_dsn: str) -> None:
    from support.store_flows import expected_outputs

    # A store of its own: the session's store holds other tests' runs, which this worker
    # would claim first.
    pg_dsn = pg_fresh_dsn

    flow = f"{REPO / 'tests' / 'support' / 'store_flows.py'}:Chatter"
    queued = orchestrate("run", flow, "--store", pg_dsn, "--queue")
    run_id = queued.stdout.strip()
    agent = f"subprocess:{sys.executable} {REPO / 'tests' / 'support' / 'echo_agent.py'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
    env.update(ORCHESTRATOR_KEY_FILE=os.environ["ORCHESTRATOR_KEY_FILE"], ECHO_AGENT_DELAY="0.3")
    worker = subprocess.Popen(
        command("worker", "--store", pg_dsn, "--agent", agent),
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while status_of(pg_dsn, run_id)["status"] == "queued" and time.monotonic() < deadline:
        time.sleep(0.05)
    worker.send_signal(signal.SIGTERM)  # while it waits on the agent's first answer
    _, stderr = worker.communicate(timeout=60)
    assert worker.returncode == 0, stderr
    # Where it stops depends on when the signal lands: at the checkpoint after the step
    # at hand, in whichever phase that is.
    assert re.search(r"stopped in phase \d \((one|two|three)\) at a checkpoint", stderr), stderr
    assert status_of(pg_dsn, run_id)["status"] == "running"
    finisher = orchestrate("worker", "--store", pg_dsn, "--until-idle", "--agent", agent)
    assert finisher.returncode == 0, finisher.stderr
    assert status_of(pg_dsn, run_id)["status"] == "completed"
    output = orchestrate("output", "--store", pg_dsn, "--run", run_id)
    assert output.returncode == 0, output.stderr
    assert json.loads(output.stdout) == expected_outputs()


def test_a_completed_run_rewound_on_a_store_goes_back_to_the_workers(pg_dsn: str) -> None:
    from support.store_flows import expected_outputs

    flow = f"{REPO / 'tests' / 'support' / 'store_flows.py'}:Chatter"
    agent = f"subprocess:{sys.executable} {REPO / 'tests' / 'support' / 'echo_agent.py'}"
    done = orchestrate("run", flow, "--store", pg_dsn, "--agent", agent)
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    rewound = orchestrate("rewind", "--store", pg_dsn, "--run", run_id, "--to", "two")
    assert rewound.returncode == 0, rewound.stderr
    assert status_of(pg_dsn, run_id)["status"] == "running"
    worker = orchestrate("worker", "--store", pg_dsn, "--until-idle", "--agent", agent)
    assert worker.returncode == 0, worker.stderr
    assert status_of(pg_dsn, run_id)["status"] == "completed"
    history = orchestrate("history", "--store", pg_dsn, "--run", run_id)
    assert "rewind from phase three (completed) to phase two" in history.stdout
    output = orchestrate("output", "--store", pg_dsn, "--run", run_id)
    assert json.loads(output.stdout) == expected_outputs()


@pytest.mark.parametrize("store", ["files", "postgres"])
def test_a_host_answers_with_the_response_document_from_pending(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """``pending --json`` and ``respond --document``: the same request and response
    documents as the files a host reads and writes, on either store."""
    where = ["--store", request.getfixturevalue("pg_dsn")] if store == "postgres" else []
    paused = orchestrate("run", WORKFLOW, *start_args(tmp_path, "t"), *where)
    assert paused.returncode == 42, paused.stderr
    run = ["--run", paused.stdout.strip()] if where else ["--workdir", str(tmp_path)]
    (item,) = pending_where([*where, *run])
    request_id = item["request"]["request_id"]
    document = {
        "request_id": request_id,
        "version": "1.0",
        "status": "success",
        "response": fake_answer(item["request"]),
        "created_at": "2026-01-02T03:04:05Z",
    }
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**document, "status": "maybe"}))
    refused = orchestrate("respond", *where, *run, "--document", str(bad))
    assert refused.returncode == 2
    assert "nothing was written" in refused.stderr
    good = tmp_path / "good.json"
    good.write_text(json.dumps(document))
    answered = orchestrate("respond", *where, *run, "--document", str(good))
    assert answered.returncode == 0, answered.stderr
    resumed = orchestrate("resume", *where, *run)
    assert resumed.returncode == 42, resumed.stderr
    assert request_id not in {i["request"]["request_id"] for i in pending_where([*where, *run])}


def pending_where(where: list[str]) -> list[dict[str, Any]]:
    result = orchestrate("pending", *where, "--json")
    assert result.returncode == 0, result.stderr
    found: list[dict[str, Any]] = json.loads(result.stdout)
    return found


def test_events_of_a_store_run_are_its_log(pg_dsn: str, tmp_path: Path) -> None:
    done = orchestrate(
        "drive", WORKFLOW, *start_args(tmp_path, "t"), "--handler", FAKE_AGENT, "--store", pg_dsn
    )
    run_id = done.stdout.strip()
    lines = orchestrate("events", "--store", pg_dsn, "--run", run_id, "--json")
    assert lines.returncode == 0, lines.stderr
    events = [json.loads(line) for line in lines.stdout.splitlines()]
    assert [e["x_seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[0]["event"] == "run.start" and events[-1]["event"] == "run.end"
    followed = orchestrate(
        "events", "--store", pg_dsn, "--run", run_id, "--follow", "--type", "run.*"
    )
    assert followed.returncode == 0, followed.stderr
    names = [line.split()[2] for line in followed.stdout.splitlines()]
    assert names[0] == "run.start" and names[-1] == "run.end"
    assert set(names[1:-1]) == {"run.pause"}
    spans = orchestrate("events", "--store", pg_dsn, "--run", run_id, "--otlp", "-")
    assert json.loads(spans.stdout)["resourceSpans"]
    missing = orchestrate("events", "--store", pg_dsn, "--run", "no-such-run")
    assert missing.returncode == 2
    assert "no run no-such-run" in missing.stderr


def test_a_failed_run_on_a_store_is_retried_with_answers_that_still_match(pg_dsn: str) -> None:
    from support.store_flows import expected_outputs

    flow = f"{REPO / 'tests' / 'support' / 'store_flows.py'}:Chatter"
    good = f"subprocess:{sys.executable} {REPO / 'tests' / 'support' / 'echo_agent.py'}"
    failed = orchestrate("run", flow, "--store", pg_dsn, "--agent", "subprocess:false")
    assert failed.returncode == 1, failed.stderr
    run_id = failed.stdout.strip()
    assert status_of(pg_dsn, run_id)["status"] == "failed"
    retried = orchestrate("retry", "--store", pg_dsn, "--run", run_id, "--agent", good)
    assert retried.returncode == 0, retried.stderr
    output = orchestrate("output", "--store", pg_dsn, "--run", run_id)
    assert json.loads(output.stdout) == expected_outputs()


def test_a_worker_wakes_for_a_timer_without_being_told(pg_dsn: str) -> None:
    """The run sleeps on a durable timer; an idle worker that would look for orphans only
    every minute still wakes when the timer is due and finishes the run."""
    flow = f"{REPO / 'tests' / 'support' / 'store_flows.py'}:Napper"
    slept = orchestrate("run", flow, "--store", pg_dsn)
    assert slept.returncode == 42, slept.stderr
    run_id = slept.stdout.strip()
    assert "sleeping until" in slept.stderr
    assert "next: a worker of the store goes on once the timer is due" in slept.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
    env["ORCHESTRATOR_KEY_FILE"] = os.environ["ORCHESTRATOR_KEY_FILE"]
    worker = subprocess.Popen(
        command("worker", "--store", pg_dsn, "--orphan-check", "60"),
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while status_of(pg_dsn, run_id)["status"] != "completed" and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=30)
    assert status_of(pg_dsn, run_id)["status"] == "completed", stderr
    output = orchestrate("output", "--store", pg_dsn, "--run", run_id)
    assert json.loads(output.stdout) == {"nap": "rested", "wake": "awake"}


UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
DIGEST = re.compile(r"\b[0-9a-f]{64}\b")  # of documents that hold times or places
SECONDS = re.compile(r"\b\d+(\.\d+)? (s|ms)\b")  # a duration told in words
MOMENT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")


def normalised(value: Any, ids: dict[str, str], root: str = "") -> Any:
    """``value`` with its ids numbered in order of appearance, its times, durations and
    the digests of documents holding times blanked, its work directory named
    ``<workdir>``, and its signature dropped (it covers the times)."""
    if isinstance(value, dict):
        return {
            k: "<varies>"
            # times, digests of bytes with times, and the length of a prompt that names
            # where its board is
            if "duration" in k or k.endswith(("sha256", "_chars"))
            else "<workdir>"
            if k == "home"  # the work directory's identity
            else "<trace>"
            if k in ("trace", "x_trace")  # random trace and span ids, as run ids are
            else normalised(v, ids, root)
            for k, v in value.items()
            # the signature covers the times; x_store and x_board_id address the store
            if k not in ("x_signature", "x_store", "x_board_id")
        }
    if isinstance(value, list):
        return [normalised(v, ids, root) for v in value]
    if isinstance(value, str):
        value = value.replace(root, "<workdir>") if root else value
        value = UUID.sub(lambda m: ids.setdefault(m.group(0), f"<id {len(ids)}>"), value)
        return DIGEST.sub("<digest>", SECONDS.sub("<t> s", MOMENT.sub("<time>", value)))
    return value


def run_files(
    run_dir: Path, ids: dict[str, str], root: Path, same: Sequence[tuple[str, str]] = ()
) -> dict[str, Any]:
    """Every file of a run's directory, JSON and NDJSON parsed, all normalised (``same``:
    texts that say the same as others, put in their words first)."""
    found: dict[str, Any] = {}
    for path in sorted(p for p in run_dir.rglob("*") if p.is_file()):
        text = path.read_text(encoding="utf-8")
        for theirs, ours in same:
            text = text.replace(theirs, ours)
        if path.suffix == ".json":
            content: Any = json.loads(text)
        elif path.suffix == ".ndjson":
            content = [json.loads(line) for line in text.splitlines()]
        else:
            content = text
        found[str(path.relative_to(run_dir))] = normalised(content, ids, str(root))
    return found


TASK_BOARD = REPO / "examples" / "task_board"


def example_drive(example: str, workdir: Path) -> list[str]:
    """``drive`` of an example, as its run_offline.sh runs it, in ``workdir``."""
    if example == "template_create":
        return ["drive", WORKFLOW, *start_args(workdir, "t"), "--handler", FAKE_AGENT]
    return [
        "drive",
        f"{TASK_BOARD / 'workflow.py'}:TaskBoardDemo",
        "--workdir",
        str(workdir),
        "--handler",
        f"{sys.executable} {TASK_BOARD / 'fake_subagent.py'}",
        # Its subagents reach a board in a store through three orchestrate processes each:
        # on a busy machine a well-behaved one nears run_offline.sh's 10 s, and one killed
        # there makes the two runs differ; 30 s on both sides leaves only the one that
        # hangs on purpose to be killed.
        "--handler-timeout",
        "30",
    ]


@pytest.mark.parametrize("example", ["template_create", "task_board"])
def test_an_exported_store_run_is_the_file_store_s_run_apart_from_ids_and_times(
    pg_dsn: str, tmp_path: Path, example: str
) -> None:
    """Each example driven on files, and driven on PostgreSQL then exported: the same run
    directory, file for file, once ids, times and work directories are set aside."""
    on_files, on_store, exported = tmp_path / "files", tmp_path / "store", tmp_path / "export"
    on_files.mkdir(), on_store.mkdir()
    done = orchestrate(*example_drive(example, on_files))
    assert done.returncode == 0, done.stderr
    done = orchestrate(*example_drive(example, on_store), "--store", pg_dsn)
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    out = orchestrate("export", "--store", pg_dsn, "--run", run_id, "--to", exported)
    assert out.returncode == 0, out.stderr
    (files_run,) = (on_files / ".orchestrator" / "runs").iterdir()
    exported_run = exported / ".orchestrator" / "runs" / run_id
    left = run_files(files_run, {}, on_files)
    # Where the run's board is, as the store names it and as files would: the same place.
    board_here = [
        (f"board {run_id} in {pg_dsn}: ", f"{on_store}/.board/"),
        (f"--store {pg_dsn} --board {run_id}", f"--board {on_store}/.board"),
        (f"board {run_id} in {pg_dsn}", f"{on_store}/.board"),
    ]
    right = run_files(exported_run, {}, on_store, board_here)
    assert sorted(left) == sorted(right)
    for name in left:
        assert left[name] == right[name], name


def test_an_answer_the_run_refuses_leaves_it_to_its_host_not_to_a_worker_loop(
    pg_dsn: str, tmp_path: Path
) -> None:
    """A response row written past ``respond`` (by hand, by another tool) that the run
    refuses: the worker says so once and lets the run wait; it does not take it again."""
    import psycopg

    paused = orchestrate("run", WORKFLOW, *start_args(tmp_path, "t"), "--store", pg_dsn)
    run_id = paused.stdout.strip()
    (item,) = pending(pg_dsn, run_id)
    foreign = json.dumps(
        {
            "request_id": item["request"]["request_id"],
            "version": "9.0",
            "status": "success",
            "response": "x",
            "created_at": "2026-01-02T03:04:05Z",
        }
    ).encode()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            "insert into responses (run_id, request_id, document, sha256) values (%s, %s, %s, 'x')",
            (run_id, item["request"]["request_id"], foreign),
        )
        conn.execute("update runs set inbox = inbox + 1 where run_id = %s", (run_id,))
    worker = orchestrate("worker", "--store", pg_dsn, "--until-idle", timeout=120)
    assert worker.returncode == 0, worker.stderr
    assert worker.stderr.count(f"run {run_id} waits for its host") == 1
    assert status_of(pg_dsn, run_id)["status"] == "paused"
    with psycopg.connect(pg_dsn) as conn:
        inbox, handled = conn.execute(
            "select inbox, handled from runs where run_id = %s", (run_id,)
        ).fetchone()
    assert inbox == handled


def test_a_store_that_refuses_a_checkpoint_fails_the_command_not_the_run(
    pg_fresh_dsn: str, tmp_path: Path
) -> None:
    """A database error while saving (a full disk, a trigger, a revoked grant): the
    command says so in one line and exits 1; the run is as its last checkpoint left it,
    not failed, and goes on once the store takes writes again."""
    import psycopg

    from orchestrator.adapters.postgres.migrations import upgrade

    upgrade(pg_fresh_dsn)
    paused = orchestrate("run", WORKFLOW, *start_args(tmp_path, "t"), "--store", pg_fresh_dsn)
    run_id = paused.stdout.strip()
    (item,) = pending(pg_fresh_dsn, run_id)
    request = item["request"]
    answered = orchestrate(
        "respond", "--store", pg_fresh_dsn, "--run", run_id, "--text", fake_answer(request)
    )
    assert answered.returncode == 0, answered.stderr
    with psycopg.connect(pg_fresh_dsn, autocommit=True) as conn:
        # Only the checkpoint inside phase 2 (after its step) is refused: the store takes
        # the writes after it, as a disk that freed up would.
        conn.execute(
            "create function no_room() returns trigger language plpgsql as $$ begin "
            "if position(convert_to('after_step_write_manifest', 'UTF8') in new.state) > 0 "
            "then raise exception 'could not extend file: No space left on device'; end if; "
            "return new; end $$"
        )
        conn.execute(
            "create trigger no_room before update of state on runs "
            "for each row execute function no_room()"
        )
    refused = orchestrate("resume", "--store", pg_fresh_dsn, "--run", run_id)
    assert refused.returncode == 1
    assert "No space left on device" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert status_of(pg_fresh_dsn, run_id)["status"] != "failed"
    with psycopg.connect(pg_fresh_dsn, autocommit=True) as conn:
        conn.execute("drop trigger no_room on runs")
    resumed = orchestrate("resume", "--store", pg_fresh_dsn, "--run", run_id)
    assert resumed.returncode == 42, resumed.stderr
    assert request["request_id"] not in {
        i["request"]["request_id"] for i in pending(pg_fresh_dsn, run_id)
    }
