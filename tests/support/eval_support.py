"""What the tests of ``orchestrate eval compare`` and ``eval check`` share: a copy of the
hand-made run directories (``tests/fixtures/runs``) and the commands run in-process."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from orchestrator.cli.main import main

FIXTURE_RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


def copy_runs(target: Path) -> Path:
    """The hand-made runs copied under ``target/runs`` (``baseline/r-base``, ``new/r-new``,
    ``cases.json``); returns ``target/runs``."""
    runs = target / "runs"
    shutil.copytree(FIXTURE_RUNS, runs, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    return runs


def compare(runs: Path, *extra: str) -> int:
    """``orchestrate eval compare`` on the two runs under ``runs``; its exit code."""
    return main(
        [
            "eval",
            "compare",
            str(runs / "baseline" / "r-base"),
            str(runs / "new" / "r-new"),
            "--cases",
            str(runs / "cases.json"),
            *extra,
        ]
    )


def evaluation_of(folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / "evaluation.json").read_text(encoding="utf-8"))
    return data


def verdicts(folder: Path) -> dict[str, str]:
    return {case["case_id"]: case["verdict"] for case in evaluation_of(folder)["cases"]}


def edit_json(path: Path, change: Any) -> None:
    """Load ``path``, let ``change`` edit the data in place, write it back."""
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
