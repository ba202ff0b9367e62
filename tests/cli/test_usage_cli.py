"""Tokens and cost of a run, summed from its answers' metadata: real ``orchestrate``
processes.

A run whose answers carry ``model`` and ``tokens_used`` (or input and output tokens as
``x_input_tokens``/``x_output_tokens``) shows its totals, per phase and per agent, in
``status`` (text and ``--json``), ``output --json`` and ``history``; with ``--prices``,
their cost (tokens not split into input and output priced as input).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.cli import orchestrate
from support.run_facts import CREW_FLOW, answer

pytestmark = pytest.mark.slow

PRICES = {"model-a": {"input": 3.0, "output": 15.0}, "model-b": {"input": 1.0, "output": 5.0}}


def test_tokens_and_cost_are_summed_per_phase_and_agent(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    (tmp_path / "crew.py").write_text(CREW_FLOW)
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(PRICES))
    started = orchestrate("run", f"{tmp_path / 'crew.py'}:Crew", "--workdir", workdir)
    assert started.returncode == 42, started.stderr

    answer(workdir, "The tides rise twice a day.", {"model": "model-a", "tokens_used": 1000})
    answer(
        workdir,
        "clear",
        {"model": "model-b", "tokens_used": 300, "x_input_tokens": 200, "x_output_tokens": 100},
    )
    # Still paused on the last ask: status reads the live state.
    live = json.loads(
        orchestrate("status", "--workdir", workdir, "--json", "--prices", prices).stdout
    )
    usage = live["usage"]
    assert (usage["tokens"], usage["answers"]) == (1300, 2)
    # model-a: 1000 unsplit tokens at the input price; model-b: 200 in, 100 out.
    assert usage["cost_usd"] == pytest.approx(1000 * 3e-6 + 200 * 1e-6 + 100 * 5e-6)
    text = orchestrate("status", "--workdir", workdir, "--prices", prices).stdout
    assert "tokens     1300 (200 in, 100 out, 2 answers)" in text
    assert "phase    draft: 1000" in text and "agent    critic: 300" in text

    answer(workdir, "Tides rise twice daily.", {"model": "model-a", "tokens_used": 500})

    outputs = json.loads(orchestrate("output", "--workdir", workdir, "--json").stdout)
    usage = outputs["x_run"]["usage"]
    assert outputs["x_run"]["status"] == "completed"
    assert usage["tokens"] == 1800 and "cost_usd" not in usage
    assert usage["by_phase"]["draft"]["tokens"] == 1000
    assert usage["by_phase"]["review"]["tokens"] == 800
    assert usage["by_agent"]["writer"]["tokens"] == 1500
    assert usage["by_agent"]["critic"] == {
        "tokens": 300,
        "input_tokens": 200,
        "output_tokens": 100,
        "answers": 1,
    }
    assert usage["by_model"]["model-a"]["answers"] == 2

    priced = json.loads(
        orchestrate("output", "--workdir", workdir, "--json", "--prices", prices).stdout
    )
    assert priced["x_run"]["usage"]["by_agent"]["writer"]["cost_usd"] == pytest.approx(0.0045)
    ended = json.loads(orchestrate("status", "--workdir", workdir, "--json").stdout)
    assert ended["usage"]["tokens"] == 1800

    history = orchestrate("history", "--workdir", workdir, "--prices", prices)
    assert history.returncode == 0, history.stderr
    assert "tokens     1800 (200 in, 100 out, 3 answers)  $0.0052" in history.stdout

    bad = tmp_path / "bad-prices.json"
    bad.write_text(json.dumps({"model-a": {"input": "three"}}))
    refused = orchestrate("status", "--workdir", workdir, "--prices", bad)
    assert refused.returncode == 2
    assert "'model-a'.input must be a number" in refused.stderr
