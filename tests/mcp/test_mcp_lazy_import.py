"""The MCP SDK is the ``mcp`` command's alone: a host's ``resume`` never loads it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support.cli import child_env, orchestrate
from support.evidence_support import example_args


def test_resume_loads_no_part_of_the_mcp_sdk(tmp_path: Path) -> None:
    started = orchestrate("run", *example_args(tmp_path))
    assert started.returncode == 42, started.stderr
    code = (
        "import sys; from orchestrator.cli.main import main; "
        f"rc = main(['resume', '--workdir', {str(tmp_path)!r}]); "
        "print(rc, sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types')))"
    )
    shown = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), check=False
    )
    assert shown.stdout.split()[-2:] == ["42", "[]"], shown.stderr
