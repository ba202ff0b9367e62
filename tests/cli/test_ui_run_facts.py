"""The UI's run page shows where a failed phase raised, and the run's tokens by phase and
agent: a real ``orchestrate ui`` server over runs made by real ``orchestrate`` processes."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlencode

import pytest

from support import needs

needs.extra("starlette", "ui")

from support.cli import orchestrate  # noqa: E402
from support.run_facts import CREW_FLOW, RAISE_LINE, answer, write_failing_flow  # noqa: E402
from support.ui_support import serving  # noqa: E402

pytestmark = pytest.mark.slow


def run_page(workdir: Path) -> str:
    run_id = json.loads(orchestrate("status", "--workdir", workdir, "--json").stdout)["run_id"]
    with serving(workdir) as served:
        status, _, body = served.request("GET", "/run?" + urlencode({"dir": 0, "run": run_id}))
    assert status == 200
    return body.decode()


def test_the_run_page_shows_where_the_phase_raised(tmp_path: Path) -> None:
    flow = write_failing_flow(tmp_path, [1, 2])
    assert orchestrate("run", f"{flow}:Counter", "--workdir", tmp_path).returncode == 1
    page = run_page(tmp_path)
    assert f"ValueError raised at counting.py:{RAISE_LINE}" in page
    assert f"counting.py:{RAISE_LINE} in check_count" in page


def test_the_run_page_shows_the_tokens_by_phase_and_agent(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    (tmp_path / "crew.py").write_text(CREW_FLOW)
    assert orchestrate("run", f"{tmp_path / 'crew.py'}:Crew", "--workdir", workdir).returncode == 42
    answer(workdir, "The tides rise twice a day.", {"model": "model-a", "tokens_used": 1000})
    answer(workdir, "clear", {"model": "model-b", "x_input_tokens": 200, "x_output_tokens": 100})
    page = run_page(workdir)
    assert "<h2>Tokens</h2>" in page
    assert "<tr><th>run</th><td>1300</td><td>200</td><td>100</td><td>2</td></tr>" in page
    assert "<tr><th>phase draft</th><td>1000</td>" in page
    assert "<tr><th>agent critic</th><td>300</td>" in page
