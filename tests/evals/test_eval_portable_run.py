"""A finished regression-run folder is portable: copied elsewhere (and the original gone),
no file in it, the engine's own state under ``.orchestrator/`` included, names a place
of the original, and ``eval compare`` (with its report) and ``eval check`` work on the
copy."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from pathlib import Path

import pytest

from support.cli import orchestrate
from support.eval_agent_server import AgentServer, Good


def the_run(out: Path, side: str) -> Path:
    (run_dir,) = [p for p in (out / side).iterdir() if not p.name.startswith(".")]
    return run_dir


@pytest.mark.slow
def test_a_run_folder_copied_elsewhere_names_no_place_of_the_original(tmp_path: Path) -> None:
    work = tmp_path / "original place"
    work.mkdir()
    cases = [{"id": i, "input": {"user": f"do {i}"}} for i in ("a", "b")]
    (work / "cases.json").write_text(json.dumps(cases), encoding="utf-8")
    agent = work / "agent.py"  # the new side's agent: a command, named by its absolute path
    agent.write_text(
        "import json, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parents[1])!r})\n"
        "from support.eval_agent_server import good_answer\n"
        "print(json.dumps(good_answer(json.load(sys.stdin), payload_bytes=40_000)))\n",
        encoding="utf-8",
    )
    with AgentServer({"b": [Good(payload_bytes=40_000)]}) as server:
        done = orchestrate(
            "eval", "run", "--cases", "cases.json", "--base-url", server.base_url,
            "--version", "baseline", "--out", "runs", cwd=work,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    done = orchestrate(
        "eval", "run", "--cases", work / "cases.json", "--agent-command",
        shlex.join([sys.executable, str(agent)]), "--version", "new", "--out", work / "runs",
        cwd=work,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    state = next((work / "runs" / "new" / ".orchestrator").rglob("state.json"))
    record = json.loads(state.read_text(encoding="utf-8"))["phase_data"]["x_orchestrator"]
    inputs = record["inputs"]
    assert (inputs["cases_file"], inputs["repo_dir"], record["workdir"]) == (
        "../../cases.json",
        "../..",
        ".",
    )
    assert inputs["agent"]["command"].endswith(" ./agent.py")  # run in repo_dir
    copy = tmp_path / "shared" / "runs"
    shutil.copytree(work / "runs", copy, symlinks=True)
    shutil.rmtree(work)
    places = {str(work).encode(), str(work.resolve()).encode(), str(tmp_path).encode()}
    for path in copy.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert not any(place in data for place in places), path
    compared = orchestrate("eval", "compare", the_run(copy, "baseline"), the_run(copy, "new"))
    assert compared.returncode == 0, compared.stdout + compared.stderr
    assert (copy / "evaluation.json").is_file() and (copy / "report.html").is_file()
    checked = orchestrate("eval", "check", copy)
    assert (checked.returncode, checked.stdout) == (0, f"{copy}: meets the artifact contract\n")


@pytest.mark.slow
def test_an_unfinished_run_moved_elsewhere_is_finished_where_it_now_is(tmp_path: Path) -> None:
    work = tmp_path / "first place"
    work.mkdir()
    cases = [{"id": i, "input": {"user": f"do {i}"}} for i in ("a", "b", "c")]
    (work / "cases.json").write_text(json.dumps(cases), encoding="utf-8")
    log = tmp_path / "points.log"
    with AgentServer() as server:
        run = ("eval", "run", "--cases", "cases.json", "--base-url", server.base_url,
               "--version", "new", "--out", "runs", "--concurrency", "1")  # fmt: skip
        counted = orchestrate(
            *run, cwd=tmp_path / "first place", env={
                "ORCHESTRATOR_CRASH_AT": "count", "ORCHESTRATOR_CRASH_LOG": str(log)
            }
        )  # fmt: skip
        assert counted.returncode == 0, counted.stderr
        points = log.read_text(encoding="utf-8").splitlines()
        # killed as the second case's artifact is about to be written
        at = next(line.split()[0] for line in points if line.endswith("before-write b.json"))
        shutil.rmtree(work / "runs")
        killed = orchestrate(*run, cwd=work, env={"ORCHESTRATOR_CRASH_AT": at})
        assert killed.returncode < 0, killed.stderr
        moved = tmp_path / "moved" / "runs"
        shutil.copytree(work / "runs", moved, symlinks=True)
        shutil.rmtree(work)
        resumed = orchestrate("resume", "--workdir", moved / "new")
        assert resumed.returncode == 0, resumed.stderr
    run_dir = the_run(moved, "new")
    assert {p.name for p in run_dir.glob("*.json")} == {"run.json", "a.json", "b.json", "c.json"}
    assert json.loads((run_dir / "run.json").read_text(encoding="utf-8"))["x_status"] == "completed"
    assert not (tmp_path / "first place").exists()  # nothing written back where it was
