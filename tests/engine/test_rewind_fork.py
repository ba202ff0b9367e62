"""``orchestrate rewind`` and ``orchestrate fork`` on the template-create example.

Rewound to its third phase and driven again, a finished run rewrites only what phases
three and later wrote, and asks no agent of the phases before; a fork starts a new run in
another directory at a phase, and leaves every file of the original as it was.
"""

from __future__ import annotations

import json
import shlex
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from support.cli import orchestrate
from support.evidence_support import EXAMPLE, check_run_evidence, example_args, run_dir_of

# Logs the phase of each request, then answers as the example's fake agent does.
LOGGING_HANDLER = """
import json, subprocess, sys
request = sys.stdin.read()
with open(sys.argv[1], "a") as log:
    log.write(json.loads(request)["phase_name"] + "\\n")
answer = subprocess.run([sys.executable, sys.argv[2]], input=request, capture_output=True,
                        text=True, check=True)
sys.stdout.write(answer.stdout)
"""


pytestmark = pytest.mark.slow


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        p.relative_to(root).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


class Host:
    def __init__(self, tmp: Path) -> None:
        self.log = tmp / "asked.log"
        script = tmp / "handler.py"
        script.write_text(LOGGING_HANDLER)
        self.command = shlex.join(
            [sys.executable, str(script), str(self.log), str(EXAMPLE / "fake_agent.py")]
        )

    def asked(self) -> list[str]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        self.log.unlink(missing_ok=True)
        return lines


@pytest.fixture
def finished(tmp_path: Path) -> tuple[Path, Host]:
    """The example, driven to its end."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    host = Host(tmp_path)
    done = orchestrate("drive", *example_args(workdir), "--handler", host.command)
    assert done.returncode == 0, done.stderr
    assert host.asked()[0] == "codebase_analysis"
    return workdir, host


def outputs(workdir: Path) -> dict[str, Any]:
    return dict(json.loads(orchestrate("output", "--workdir", workdir).stdout))


def test_a_rewound_run_rewrites_only_the_phases_it_took_back(
    finished: tuple[Path, Host],
) -> None:
    workdir, host = finished
    before_outputs = outputs(workdir)
    template = snapshot(workdir / "template")
    rewound = orchestrate("rewind", "--to", "settings_generation", "--workdir", workdir)
    assert rewound.returncode == 0, rewound.stderr
    assert "rewound to phase 3 (settings_generation)" in rewound.stderr
    status = orchestrate("status", "--workdir", workdir).stdout
    assert "phase      3 settings_generation" in status
    assert "completed  codebase_analysis, manifest_generation\n" in status
    again = orchestrate("drive", "--workdir", workdir, "--handler", host.command)
    assert again.returncode == 0, again.stderr
    # The agents of phases 6 and 7 were asked again; the analysis of phase 1 was not.
    assert set(host.asked()) == {"agent_creation", "agent_enhancement"}
    after = snapshot(workdir / "template")
    assert after.keys() == template.keys()
    unchanged = {name for name in after if after[name][1] == template[name][1]}
    assert unchanged == {"manifest.json"}  # written by phase 2 alone
    assert all(after[name][0] == template[name][0] for name in after)  # the same bytes
    assert outputs(workdir) == before_outputs
    history = json.loads((run_dir_of(workdir) / "state.json").read_text())
    (rewind,) = history["phase_data"]["x_orchestrator"]["rewinds"]
    assert (rewind["from_status"], rewind["to_phase"]) == ("completed", "settings_generation")
    assert sorted(rewind["outputs"]) == sorted(list(before_outputs)[2:])
    events = check_run_evidence(run_dir_of(workdir))
    names = [e["event"] for e in events]
    assert names.count("run.rewind") == 1 and names.count("run.end") == 2
    shown = orchestrate("events", "--workdir", workdir, "--type", "run.rewind")
    assert "run.rewind" in shown.stdout
    history = orchestrate("history", "--workdir", workdir).stdout
    assert "rewind from phase template_validation (completed) to phase settings_generation" in (
        history
    )


def test_a_paused_run_rewound_withdraws_its_requests(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    host = Host(tmp_path)
    started = orchestrate("run", *example_args(workdir))
    assert started.returncode == 42
    (request,) = [json.loads((workdir / ".agent-request.json").read_text())]
    rewound = orchestrate("rewind", "--to", "codebase_analysis", "--workdir", workdir)
    assert rewound.returncode == 0, rewound.stderr
    assert not (workdir / ".agent-request.json").exists()
    state = json.loads((workdir / ".template-create-state.json").read_text())
    assert [r["status"] for r in state["agent_requests"]] == ["withdrawn"]
    done = orchestrate("drive", "--workdir", workdir, "--handler", host.command)
    assert done.returncode == 0, done.stderr
    final = json.loads((run_dir_of(workdir) / "state.json").read_text())
    assert final["agent_requests"][0]["request_id"] == request["request_id"]
    assert final["agent_requests"][1]["status"] == "completed"
    check_run_evidence(run_dir_of(workdir))


def test_a_rewind_forward_or_to_no_phase_is_refused(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    assert orchestrate("run", *example_args(workdir)).returncode == 42
    state = (workdir / ".template-create-state.json").read_bytes()
    ahead = orchestrate("rewind", "--to", "template_files", "--workdir", workdir)
    assert ahead.returncode == 2 and "a rewind goes back" in ahead.stderr
    unknown = orchestrate("rewind", "--to", "nope", "--workdir", workdir)
    assert unknown.returncode == 2 and "has no such phase" in unknown.stderr
    assert (workdir / ".template-create-state.json").read_bytes() == state


def test_a_fork_leaves_the_original_as_it_was(finished: tuple[Path, Host], tmp_path: Path) -> None:
    workdir, host = finished
    original = snapshot(workdir)
    fork = tmp_path / "fork"
    fork.mkdir()
    made = orchestrate("fork", "--source", workdir, "--from", "template_files", "--workdir", fork)
    assert made.returncode == 0, made.stderr
    assert "forked from run" in made.stderr
    done = orchestrate("drive", "--workdir", fork, "--handler", host.command)
    assert done.returncode == 0, done.stderr
    assert set(host.asked()) == {"agent_creation", "agent_enhancement"}
    assert snapshot(workdir) == original  # byte for byte, and not even touched
    ours, theirs = outputs(fork), outputs(workdir)
    assert ours == theirs
    # The earlier phases' files came along; the later ones were written anew, the same.
    assert (fork / "template" / "manifest.json").read_bytes() == original["template/manifest.json"][
        0
    ]
    ours_now, theirs_now = snapshot(fork / "template"), snapshot(workdir / "template")
    assert {k: v[0] for k, v in ours_now.items()} == {k: v[0] for k, v in theirs_now.items()}
    (run,) = (fork / ".orchestrator" / "runs").iterdir()
    assert run.name not in {p.name for p in (workdir / ".orchestrator" / "runs").iterdir()}
    events = check_run_evidence(run)
    assert [e["event"] for e in events][:2] == ["run.start", "run.fork"]
    record = json.loads((run / "state.json").read_text())["phase_data"]["x_orchestrator"]
    assert record["forked_from"]["phase"] == "template_files"
    history = orchestrate("history", "--workdir", fork).stdout
    assert f"forked from run {record['forked_from']['run_id']}" in history


def test_a_fork_of_a_run_writing_outside_its_directory_needs_output(tmp_path: Path) -> None:
    workdir, outside = tmp_path / "work", tmp_path / "elsewhere"
    workdir.mkdir()
    args = example_args(workdir)
    args[args.index("--output") + 1] = str(outside)
    assert orchestrate("run", *args).returncode == 42
    fork = tmp_path / "fork"
    fork.mkdir()
    refused = orchestrate(
        "fork", "--source", workdir, "--from", "codebase_analysis", "--workdir", fork
    )
    assert refused.returncode == 2 and "give --output" in refused.stderr
    assert list(fork.iterdir()) == []


# -- kill -9 at every durable write of a rewind and of a fork ------------------------------

FLOW = """
from pathlib import Path
from orchestrator import Workflow, phase


def write(path, text):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text)
    return text


class Three(Workflow):
    name = "three"

    @phase(1)
    def one(self, ctx):
        return ctx.step("one", write, str(ctx.output_path / "one.txt"), "1")

    @phase(2)
    def two(self, ctx):
        return ctx.step("two", write, str(ctx.output_path / "two.txt"), ctx.output("one") + "2")

    @phase(3)
    def three(self, ctx):
        return ctx.step("three", write, str(ctx.output_path / "three.txt"), ctx.output("two") + "3")
"""


def crash_env(point: int | str, log: Path) -> dict[str, str]:
    return {"ORCHESTRATOR_CRASH_AT": str(point), "ORCHESTRATOR_CRASH_LOG": str(log)}


def finished_three(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "flow.py").write_text(FLOW)
    workdir = root / "work"
    workdir.mkdir()
    done = orchestrate(
        "run", f"{root / 'flow.py'}:Three", "--workdir", workdir, "--output", workdir / "out"
    )
    assert done.returncode == 0, done.stderr
    return workdir


def final_outputs(workdir: Path) -> dict[str, Any]:
    return dict(json.loads(orchestrate("output", "--workdir", workdir).stdout))


@pytest.mark.slow
def test_kill_9_at_every_write_of_a_rewind(tmp_path: Path) -> None:
    probe = finished_three(tmp_path / "probe")
    log = tmp_path / "points.log"
    rewind = ("rewind", "--to", "two", "--workdir")
    assert orchestrate(*rewind, probe, env=crash_env("count", log)).returncode == 0
    points = log.read_text().splitlines()
    assert len(points) >= 3, points
    for number, point in enumerate(points, start=1):
        workdir = finished_three(tmp_path / f"k{number}")
        killed = orchestrate(*rewind, workdir, env=crash_env(number, log))
        assert killed.returncode == -signal.SIGKILL, (point, killed.stderr)
        again = orchestrate(*rewind, workdir)  # the rewind again, whole this time
        assert again.returncode == 0, (point, again.stderr)
        assert orchestrate("resume", "--workdir", workdir).returncode == 0, point
        assert final_outputs(workdir) == {"one": "1", "two": "12", "three": "123"}, point
        (run,) = (workdir / ".orchestrator" / "runs").iterdir()
        check_run_evidence(run)


@pytest.mark.slow
def test_kill_9_at_every_write_of_a_fork(tmp_path: Path) -> None:
    source = finished_three(tmp_path / "source")
    original = snapshot(source)
    log = tmp_path / "points.log"
    probe = tmp_path / "probe"
    probe.mkdir()
    fork = ("fork", "--source", source, "--from", "three", "--workdir")
    assert orchestrate(*fork, probe, env=crash_env("count", log)).returncode == 0
    points = log.read_text().splitlines()
    assert any(".out.copying" in p for p in points), points
    for number, point in enumerate(points, start=1):
        target = tmp_path / f"k{number}"
        target.mkdir()
        killed = orchestrate(*fork, target, env=crash_env(number, log))
        assert killed.returncode == -signal.SIGKILL, (point, killed.stderr)
        again = orchestrate(*fork, target)
        if again.returncode != 0:  # the fork had made its instance: it only runs on
            assert "an instance already lives here" in again.stderr, (point, again.stderr)
        assert orchestrate("resume", "--workdir", target).returncode == 0, point
        assert final_outputs(target) == {"one": "1", "two": "12", "three": "123"}, point
        assert (target / "out" / "one.txt").read_text() == "1", point  # copied whole
        assert not (target / ".out.copying").exists(), point
    assert snapshot(source) == original
