"""The agent regression example end to end, in real processes: its agent on loopback, a
baseline and a new run, the comparison, and ``eval check`` on the output where it was
written and after the folder is moved elsewhere."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from support.cli import orchestrate
from support.eval_support import agent_on_a_port

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent_regression"


@pytest.fixture
def agent(tmp_path: Path):  # type: ignore[no-untyped-def]
    port_file = tmp_path / "agent.port"
    argv = [sys.executable, str(EXAMPLE / "agent_server.py"), str(port_file)]
    with agent_on_a_port(argv, port_file) as base_url:
        yield base_url


@pytest.mark.slow
def test_the_example_runs_compares_and_checks_here_and_after_a_move(
    agent: str, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    cases = str(EXAMPLE / "cases.json")
    for version in ("baseline", "new"):
        done = orchestrate(
            "eval", "run", "--cases", cases, "--base-url", agent, "--version", version,
            "--out", str(runs), "--timeout-ms", "1000", "--retries", "1",
        )  # fmt: skip
        assert done.returncode in (0, 1), done.stderr
    (baseline,), (new,) = (list((runs / v).glob("[!.]*")) for v in ("baseline", "new"))
    compared = orchestrate("eval", "compare", str(baseline), str(new))
    assert compared.returncode == 1, compared.stderr
    evaluation = json.loads((runs / "evaluation.json").read_text(encoding="utf-8"))
    assert {case["case_id"]: case["verdict"] for case in evaluation["cases"]} == {
        "crash": "new_failure",
        "hang-up": "new_failure",
        "refund": "regressed",
        "slow": "both_failing",
        "order-status": "fixed",
        "close-account": "improved",
        "greeting": "unchanged",
        "report": "unchanged",
    }
    crash = next(case for case in evaluation["cases"] if case["case_id"] == "crash")
    body = runs / crash["new"]["failure"]["full_body_href"]
    assert body.stat().st_size > 100_000  # the whole 500 page, not the snippet
    checked = orchestrate("eval", "check", str(runs))
    assert checked.returncode == 0, checked.stdout
    moved = tmp_path / "moved" / "copy of runs"
    moved.parent.mkdir()
    shutil.copytree(runs, moved, symlinks=True)
    shutil.rmtree(runs)
    checked = orchestrate("eval", "check", str(moved))
    assert (checked.returncode, checked.stdout) == (0, f"{moved}: meets the artifact contract\n")
