"""What the tests of ``orchestrate eval compare`` and ``eval check`` share: a copy of the
hand-made run directories (``tests/fixtures/runs``) and the commands run in-process."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from orchestrator.cli.main import main

FIXTURE_RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


@contextlib.contextmanager
def agent_on_a_port(argv: Sequence[str], port_file: Path, *, wait: float = 20.0) -> Iterator[str]:
    """An agent server started as ``argv``, which writes its port to ``port_file``: its
    base URL while the block runs; stopped after."""
    server = subprocess.Popen(list(argv))
    try:
        deadline = time.monotonic() + wait
        while not port_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port_file.read_text(encoding='utf-8')}"
    finally:
        server.terminate()
        server.wait(timeout=30)


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
