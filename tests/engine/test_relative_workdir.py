"""A run that records its work directory and output path relative (``"."``, as a
regression run does, so its folder names no place) sees them, in its phases, as the
directory its bridge keeps the instance in: wherever that directory has been moved."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from orchestrator import Engine, PhaseResult, Workflow, phase
from orchestrator.adapters.file_bridge import FileBridge


class WhereAmI(Workflow):
    """Two phases; the second writes a file in its work directory."""

    name = "where-am-i"

    @phase(1)
    def begin(self, ctx: Any) -> PhaseResult:
        return PhaseResult(output={})

    @phase(2)
    def write(self, ctx: Any) -> PhaseResult:
        (ctx.workdir / "note.txt").write_text("here", encoding="utf-8")
        return PhaseResult(output={"workdir": str(ctx.workdir), "out": str(ctx.output_path)})


def test_a_relative_work_directory_is_the_bridges_wherever_it_now_is(tmp_path: Path) -> None:
    first = tmp_path / "first"
    first.mkdir()
    engine = Engine(WhereAmI, bridge=FileBridge(first, WhereAmI.name))
    engine.stop_requested = lambda: True  # left running after its first checkpoint
    engine.start(workflow_ref=f"{__name__}:WhereAmI", workdir=Path("."), output_path=".")
    assert not (first / "note.txt").exists()
    state = json.loads(next(first.glob(".*state.json")).read_text(encoding="utf-8"))
    assert (state["output_path"], state["phase_data"]["x_orchestrator"]["workdir"]) == (".", ".")
    moved = tmp_path / "moved"
    shutil.copytree(first, moved)
    shutil.rmtree(first)
    outcome = Engine(WhereAmI, bridge=FileBridge(moved, WhereAmI.name)).resume()
    assert outcome.status == "completed", outcome.message
    assert outcome.outputs["write"] == {"workdir": str(moved), "out": str(moved)}
    assert (moved / "note.txt").read_text(encoding="utf-8") == "here"
    assert not first.exists()
