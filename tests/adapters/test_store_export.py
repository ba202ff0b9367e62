"""``orchestrate export``: a run of a PostgreSQL store written as the files the file store
keeps, byte for byte. The rows are filled with psycopg as the bridge fills them, from
what a real run on files left at each of its pauses and at its end; the export of those
rows must be that very directory again. Rows that would write outside the run's directory
are refused whole, and nothing is written through a link."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support import needs
from support.cli import orchestrate
from support.process_support import example_answer as answer

psycopg = needs.psycopg()

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "template_create"
FAKE_AGENT = EXAMPLE / "fake_agent.py"
# The example with its finished requests archived early, so runs.archive has rows too.
ARCHIVING = f"""
import sys
sys.path.insert(0, {str(EXAMPLE)!r})
from workflow import TemplateCreate


class ArchivingTemplateCreate(TemplateCreate):
    archive_after = 2
"""


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by its relative path, but the instance lock (a file store
    makes it when a command takes the lock; it holds nothing of the run)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not (p.parent == root / ".orchestrator" and p.suffix == ".lock")
    }


def run_on_files(workdir: Path, tmp_path: Path) -> Iterator[str]:
    """Run the archiving example on files in ``workdir`` as a host does, yielding at each
    pause (before and after the host answered), at the end and once rewound: what the
    directory is."""
    workflow = tmp_path / "archiving.py"
    workflow.write_text(ARCHIVING)
    started = orchestrate(
        "run",
        f"{workflow}:ArchivingTemplateCreate",
        "--workdir",
        workdir,
        "--output",
        workdir / "t",
        "--input",
        f"project_path={EXAMPLE / 'sample_project'}",
        "--input",
        "template_name=task-tracker",
    )
    code = started.returncode
    while code == 42:
        yield "paused"
        listed = orchestrate("pending", "--workdir", workdir, "--json")
        assert listed.returncode == 0, listed.stderr
        for item in json.loads(listed.stdout):
            request = item["request"]
            given = orchestrate(
                "respond",
                "--workdir",
                workdir,
                "--request",
                request["request_id"],
                "--text",
                answer(request),
            )
            assert given.returncode == 0, given.stderr
        yield "answered"
        code = orchestrate("resume", "--workdir", workdir).returncode
    assert code == 0
    yield "completed"
    rewound = orchestrate("rewind", "--workdir", workdir, "--to", "template_validation")
    assert rewound.returncode == 0, rewound.stderr
    yield "rewound"  # live again, its last history kept beside


def answers_in(workdir: Path) -> dict[str, bytes]:
    """The host's answers not yet read, by the request each answers: the store keeps
    them so, whether a host wrote ``.agent-responses/<id>.json`` or, for a lone request,
    ``.agent-response.json``."""
    found = {p.stem: p.read_bytes() for p in sorted(workdir.glob(".agent-responses/*.json"))}
    single = workdir / ".agent-response.json"
    if single.is_file():
        found[json.loads(single.read_bytes())["request_id"]] = single.read_bytes()
    return found


def exported_tree(workdir: Path) -> dict[str, bytes]:
    """What an export of the run in ``workdir`` must write: the directory's files but the
    workflow's output, with each answer not yet read in ``.agent-responses/<id>.json``
    (where the file store reads an answer to any request it waits for)."""
    files = {
        k: v
        for k, v in tree(workdir).items()
        if not k.startswith(("t/", ".agent-response.json", ".agent-responses/"))
    }
    files.update({f".agent-responses/{rid}.json": raw for rid, raw in answers_in(workdir).items()})
    return files


def store_rows(conn: psycopg.Connection[Any], workdir: Path) -> str:
    """Put the run in ``workdir`` into the store's rows as the PostgreSQL bridge keeps it
    (replacing any earlier rows of the run); its id."""
    live = sorted(workdir.glob(".*-state.json"))
    run_dirs = sorted((workdir / ".orchestrator" / "runs").iterdir())
    assert len(run_dirs) == 1
    run_dir = run_dirs[0]
    run_id = run_dir.name
    if live:
        state = live[0].read_bytes()
        history = (
            (run_dir / "state.json").read_bytes() if (run_dir / "state.json").exists() else None
        )
        document = json.loads(state)
    else:
        state, history = None, (run_dir / "state.json").read_bytes()
        document = json.loads(history)
    record = document["phase_data"]["x_orchestrator"]
    conn.execute("delete from runs where run_id = %s", (run_id,))
    conn.execute(
        "insert into runs (run_id, workflow_name, workflow_ref, status, state, history) "
        "values (%s, %s, %s, %s, %s, %s)",
        (run_id, record["workflow_name"], record["workflow"], record["status"], state, history),
    )
    if live:
        pending = [r["request_id"] for r in document["agent_requests"] if r["status"] == "pending"]
        first = (workdir / ".agent-request.json").read_bytes() if pending else b""
        for position, request_id in enumerate(pending):
            several = workdir / ".agent-requests" / f"{request_id}.json"
            raw = several.read_bytes() if len(pending) > 1 else first
            assert position > 0 or raw == first
            conn.execute(
                "insert into requests (run_id, request_id, position, document) "
                "values (%s, %s, %s, %s)",
                (run_id, request_id, position, raw),
            )
        for request_id, raw in answers_in(workdir).items():
            conn.execute(
                "insert into responses (run_id, request_id, document, sha256) "
                "values (%s, %s, %s, '')",
                (run_id, request_id, raw),
            )
    with (run_dir / "events.ndjson").open("rb") as events:
        for line in events:
            conn.execute(
                "insert into events (run_id, seq, line) values (%s, %s, %s)",
                (run_id, json.loads(line)["x_seq"], line),
            )
    archive = run_dir / "requests.ndjson"
    if archive.is_file():
        with archive.open("rb") as lines:
            for line in lines:
                conn.execute("insert into archive (run_id, line) values (%s, %s)", (run_id, line))
    own = {"state.json", "events.ndjson", "requests.ndjson"}
    for path in sorted(run_dir.rglob("*")):
        relative = path.relative_to(run_dir).as_posix()
        if path.is_file() and relative not in own:
            conn.execute(
                "insert into run_files (run_id, path, content) values (%s, %s, %s)",
                (run_id, relative, path.read_bytes()),
            )
    return run_id


def export(dsn: str, run_id: str, target: Path) -> subprocess.CompletedProcess[str]:
    return orchestrate("export", "--store", dsn, "--run", run_id, "--to", target)


@pytest.mark.slow
def test_export_writes_every_point_of_a_run_as_the_file_store_left_it(
    pg_dsn: str, tmp_path: Path
) -> None:
    workdir = tmp_path / "files"
    workdir.mkdir()
    seen = []
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for number, point in enumerate(run_on_files(workdir, tmp_path)):
            run_id = store_rows(conn, workdir)
            target = tmp_path / f"export-{number}"
            done = export(pg_dsn, run_id, target)
            assert done.returncode == 0, done.stderr
            expected = exported_tree(workdir)
            assert tree(target) == expected, point
            seen.append((point, sorted(expected)))
    # Every kind of point was exported: several requests at once, answers not yet read,
    # archived requests, the end.
    names = [name for _, listed in seen for name in listed]
    assert any(name.startswith(".agent-requests/") for name in names)
    assert any(name.startswith(".agent-responses/") for name in names)
    assert any(name.endswith("/requests.ndjson") for name in names)
    ended, rewound = seen[-2], seen[-1]
    assert ended[0] == "completed"
    assert f".orchestrator/runs/{run_id}/state.json" in ended[1]
    assert rewound[0] == "rewound"
    assert {f".orchestrator/runs/{run_id}/state.json", ".template-create-state.json"} <= set(
        rewound[1]
    )


@pytest.mark.slow
def test_an_exported_live_run_goes_on_from_its_files(pg_dsn: str, tmp_path: Path) -> None:
    """A run paused in the store, exported, answered and finished with files alone."""
    started = orchestrate(
        "run",
        f"{EXAMPLE / 'workflow.py'}:TemplateCreate",
        "--store",
        pg_dsn,
        "--workdir",
        tmp_path,
        "--output",
        tmp_path / "t",
        "--input",
        f"project_path={EXAMPLE / 'sample_project'}",
        "--input",
        "template_name=task-tracker",
    )
    assert started.returncode == 42, started.stderr
    run_id = started.stdout.strip()
    target = tmp_path / "exported"
    done = export(pg_dsn, run_id, target)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(target / ".template-create-state.json")
    status = orchestrate("status", "--workdir", target, "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["status"] == "paused"
    driven = orchestrate(
        "drive", "--workdir", target, "--handler", f"{sys.executable} {FAKE_AGENT}"
    )
    assert driven.returncode == 0, driven.stderr
    assert (target / ".orchestrator" / "runs" / run_id / "state.json").is_file()
    # The store's run is as it was: still paused, its request still pending.
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute("select status from runs where run_id = %s", (run_id,)).fetchone()
        assert row == ("paused",)


@pytest.fixture
def ended_run(pg_dsn: str) -> Iterator[tuple[psycopg.Connection[Any], str]]:
    """A completed run's rows (a history, two events, one file), deleted after."""
    run_id = f"run-{os.urandom(6).hex()}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            "insert into runs (run_id, workflow_name, workflow_ref, status, history) "
            "values (%s, 'w', 'w.py:W', 'completed', %s)",
            (run_id, b'{"history": true}\n'),
        )
        for seq in (1, 2):
            conn.execute(
                "insert into events (run_id, seq, line) values (%s, %s, %s)",
                (run_id, seq, f'{{"x_seq": {seq}}}\n'.encode()),
            )
        conn.execute(
            "insert into run_files (run_id, path, content) values (%s, 'results.json', '{}')",
            (run_id,),
        )
        yield conn, run_id
        conn.execute("delete from runs where run_id = %s", (run_id,))


@pytest.mark.parametrize(
    "path",
    [
        "../escape.txt",
        "agents/../../escape.txt",
        "/tmp/escape.txt",
        "agents//prompt.md",
        "./results2.json",
        "state.json",
        "results.json/inside",
    ],
)
def test_a_run_file_path_that_leaves_the_run_is_refused_and_nothing_is_written(
    pg_dsn: str, tmp_path: Path, ended_run: tuple[psycopg.Connection[Any], str], path: str
) -> None:
    conn, run_id = ended_run
    conn.execute(
        "insert into run_files (run_id, path, content) values (%s, %s, 'x')", (run_id, path)
    )
    target = tmp_path / "target"
    done = export(pg_dsn, run_id, target)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"run {run_id}" in done.stderr and repr(path.split("/inside")[0]) in done.stderr
    assert "nothing was written" in done.stderr
    assert not target.exists()
    assert not (tmp_path / "escape.txt").exists() and not Path("/tmp/escape.txt").exists()


def test_an_ended_run_is_its_history_events_and_files(
    pg_dsn: str, tmp_path: Path, ended_run: tuple[psycopg.Connection[Any], str]
) -> None:
    _, run_id = ended_run
    done = export(pg_dsn, run_id, tmp_path)
    assert done.returncode == 0, done.stderr
    run_dir = f".orchestrator/runs/{run_id}"
    assert tree(tmp_path) == {
        f"{run_dir}/state.json": b'{"history": true}\n',
        f"{run_dir}/events.ndjson": b'{"x_seq": 1}\n{"x_seq": 2}\n',
        f"{run_dir}/results.json": b"{}",
    }


def test_a_link_in_the_target_is_never_followed(
    pg_dsn: str, tmp_path: Path, ended_run: tuple[psycopg.Connection[Any], str]
) -> None:
    _, run_id = ended_run
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = tmp_path / "target"
    target.mkdir()
    (target / ".orchestrator").symlink_to(elsewhere)
    done = export(pg_dsn, run_id, target)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert "symbolic link" in done.stderr
    assert list(elsewhere.iterdir()) == []


@pytest.mark.slow
def test_a_directory_holding_an_instance_or_the_run_is_refused_unchanged(
    pg_dsn: str, tmp_path: Path, ended_run: tuple[psycopg.Connection[Any], str]
) -> None:
    _, run_id = ended_run
    (tmp_path / ".other-state.json").write_bytes(b"{}")
    done = export(pg_dsn, run_id, tmp_path)
    assert done.returncode == 2
    assert "holds an instance already (.other-state.json)" in done.stderr
    assert done.stderr.count("\n") == 1
    assert tree(tmp_path) == {".other-state.json": b"{}"}

    again = tmp_path / "again"
    assert export(pg_dsn, run_id, again).returncode == 0
    before = tree(again)
    refused = export(pg_dsn, run_id, again)
    assert refused.returncode == 2
    assert f"{run_id}: this run is in that directory already" in refused.stderr
    assert tree(again) == before


def test_an_unknown_run_or_a_run_id_that_is_no_plain_name_is_named(
    pg_dsn: str, tmp_path: Path
) -> None:
    unknown = export(pg_dsn, "no-such-run", tmp_path / "x")
    assert unknown.returncode == 2
    assert unknown.stderr.count("\n") == 1
    assert "no run no-such-run in this store" in unknown.stderr
    odd = export(pg_dsn, "../up", tmp_path / "x")
    assert odd.returncode == 2
    assert "--run '../up': a run id is a plain name" in odd.stderr
    assert not (tmp_path / "x").exists()


def test_a_queued_run_has_nothing_to_export_yet(pg_dsn: str, tmp_path: Path) -> None:
    run_id = f"queued-{os.urandom(6).hex()}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            "insert into runs (run_id, workflow_name, workflow_ref, status) "
            "values (%s, 'w', 'w.py:W', 'queued')",
            (run_id,),
        )
        done = export(pg_dsn, run_id, tmp_path / "x")
        conn.execute("delete from runs where run_id = %s", (run_id,))
    assert done.returncode == 2
    assert f"run {run_id} is queued" in done.stderr
    assert not (tmp_path / "x").exists()


def test_the_store_can_come_from_the_environment(
    pg_dsn: str, tmp_path: Path, ended_run: tuple[psycopg.Connection[Any], str]
) -> None:
    _, run_id = ended_run
    done = orchestrate(
        "export", "--run", run_id, "--to", tmp_path, env={"ORCHESTRATOR_STORE": pg_dsn}
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / ".orchestrator" / "runs" / run_id / "state.json").is_file()


@pytest.mark.parametrize(
    ("damage", "told"),
    [
        (
            "insert into events (run_id, seq, line) values (%(run)s, 3, '{\"x_seq\": 3}')",
            "event line 3 is not one whole line",
        ),
        (
            "update runs set state = '{}', status = 'paused', workflow_name = '../w' "
            "where run_id = %(run)s",
            "workflow name '../w' is not a plain name",
        ),
        (
            "update runs set state = '{}', status = 'paused' where run_id = %(run)s; "
            "insert into requests (run_id, request_id, position, document) "
            "values (%(run)s, '../evil', 0, '{}')",
            "request id '../evil' is not a plain name",
        ),
    ],
)
def test_other_damaged_rows_are_refused_and_nothing_is_written(
    pg_dsn: str,
    tmp_path: Path,
    ended_run: tuple[psycopg.Connection[Any], str],
    damage: str,
    told: str,
) -> None:
    conn, run_id = ended_run
    for statement in damage.split("; "):
        conn.execute(statement.encode(), {"run": run_id})
    done = export(pg_dsn, run_id, tmp_path / "target")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"run {run_id}: {told}" in done.stderr
    assert "nothing was written" in done.stderr
    assert not (tmp_path / "target").exists()
