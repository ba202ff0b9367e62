"""``orchestrate graph WORKFLOW``: the phases in order and the routes they declare, as
Mermaid text a Markdown page draws."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support.cli import orchestrate

FLOWS = Path(__file__).resolve().parents[1] / "support" / "routing_flows.py"


def test_graph_prints_the_phases_and_their_routes_as_mermaid() -> None:
    shown = orchestrate("graph", f"{FLOWS}:ReviewLoop")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == (
        "flowchart TD\n"
        '    p1["1 draft"]\n'
        '    p2["2 review"]\n'
        '    p3["3 revise"]\n'
        '    p4["4 publish"]\n'
        "    p1 --> p2\n"
        "    p2 --> p3\n"
        "    p3 --> p4\n"
        "    p2 -. goto .-> p3\n"
        "    p2 -. goto .-> p4\n"
        "    p3 -. goto .-> p2\n"
    )
    # A phase's own limit of visits is shown with it.
    endless = orchestrate("graph", f"{FLOWS}:EndlessReview")
    assert endless.returncode == 0, endless.stderr
    assert '    p1["1 review<br/>max_visits 3"]\n' in endless.stdout
    assert "    p1 -. goto .-> p2\n" in endless.stdout


def test_graph_of_a_workflow_that_is_not_there_is_a_usage_error(tmp_path: Path) -> None:
    missing = orchestrate("graph", f"{tmp_path / 'absent.py'}:Flow")
    assert missing.returncode == 2
    assert "absent.py" in missing.stderr and missing.stdout == ""


def test_graph_builds_its_parser_without_the_engine() -> None:
    # Building the command's parser (what every start of the command costs before it
    # runs) imports no engine module: the workflow is located only when it runs.
    code = (
        "import sys\n"
        "from orchestrator.cli.main import build_parser\n"
        "build_parser('graph')\n"
        "print(sorted(m for m in sys.modules if m.startswith('orchestrator.engine.')))\n"
    )
    seen = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "orchestrator.engine.routing" not in seen
    assert "orchestrator.engine.loader" not in seen
