"""The regression runs the page serves: the files of regression-run folders under the
served work directories, and nothing else of them.

A folder is a regression-run folder when the evals would read it as one:

- an evaluation folder (``orchestrate eval compare``'s output) holds an
  ``evaluation.json`` that reads as an evaluation; its ``evaluation.json`` and
  ``report.html`` are served;
- a run directory (``orchestrate eval run``'s ``<out>/<version>/<run_id>/``, or its copy
  in an evaluation folder) holds a ``run.json`` that reads as a run; every file under it
  is served. The work directory itself is never taken for one: that would serve all of
  it.

A file is named by its path under the work directory: no ``..``, no empty or hidden
component (the engine's own files there are hidden), reached with no link followed, and
served only when it is a regular file with one name (not a hard link to a file
elsewhere).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from ..._errors import OrchestratorError
from ...evals.evaluate import REPORT_FILE
from ...evals.reading import read_document
from ...formats.evaluation import EVALUATION_FILE
from ...formats.runs import RUN_FILE
from ...storage import beneath

#: How deep under a work directory a report is looked for, and a served path may go.
REPORT_DEPTH = 3
MAX_PARTS = 16


def eval_reports(workdirs: Sequence[Path]) -> list[tuple[int, str]]:
    """The ``report.html`` of each evaluation folder under the served directories (up to
    three levels down): ``(directory index, path under it)``."""
    found = []
    for index, workdir in enumerate(workdirs):
        for current, dirs, files in os.walk(workdir, followlinks=False):
            parts = Path(current).relative_to(workdir).parts
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            if len(parts) >= REPORT_DEPTH:
                dirs[:] = []
            if REPORT_FILE in files and _servable(workdir, [*parts, REPORT_FILE]):
                found.append((index, "/".join([*parts, REPORT_FILE])))
    return sorted(found)


class Comparison(NamedTuple):
    """One evaluation folder as the regression page lists it: where its report is, and
    what its ``evaluation.json`` says in short (``problem`` when it could not be read)."""

    place: int  # the served directory it is under, by its index
    report: str  # its report.html, by its path under that directory
    generated_at: str | None = None
    gate_failed: bool | None = None
    fail_on: tuple[str, ...] = ()
    totals: tuple[tuple[str, int], ...] = ()
    baseline: str | None = None  # the compared runs' ids
    new: str | None = None
    problem: str | None = None


def comparisons(workdirs: Sequence[Path]) -> list[Comparison]:
    """Every evaluation folder under the served directories (see :func:`eval_reports`),
    the latest comparison first."""
    found = [
        _comparison(workdirs[index], index, report) for index, report in eval_reports(workdirs)
    ]
    return sorted(found, key=lambda c: (c.generated_at or "", -c.place, c.report), reverse=True)


def _comparison(workdir: Path, index: int, report: str) -> Comparison:
    folder = report.split("/")[:-1]
    data, problem = read_document(
        workdir.joinpath(*folder, EVALUATION_FILE), name=EVALUATION_FILE, kind="evaluation"
    )
    if problem is not None:
        return Comparison(index, report, problem=f"{problem.field}: {problem.message}")
    gate = data.get("gate") if isinstance(data.get("gate"), dict) else {}
    totals = data.get("totals") if isinstance(data.get("totals"), dict) else {}

    def run_id(side: str) -> str | None:
        ref = data.get(side)
        value = ref.get("run_id") if isinstance(ref, dict) else None
        return value if isinstance(value, str) else None

    generated = data.get("generated_at")
    failed = gate.get("failed")
    return Comparison(
        index,
        report,
        generated_at=generated if isinstance(generated, str) else None,
        gate_failed=failed if isinstance(failed, bool) else None,
        fail_on=tuple(str(v) for v in gate.get("fail_on") or () if isinstance(v, str)),
        totals=tuple(
            (str(k), v) for k, v in totals.items() if isinstance(v, int) and not isinstance(v, bool)
        ),
        baseline=run_id("baseline"),
        new=run_id("new"),
    )


def regression_file(workdir: Path, relative: str) -> bytes | None:
    """The bytes of ``relative`` under ``workdir`` when it is a file of a regression-run
    folder (see the module), ``None`` for anything else."""
    parts = relative.split("/")
    if not _servable(workdir, parts):
        return None
    return beneath.read_file_under(workdir, relative)


def _servable(workdir: Path, parts: list[str]) -> bool:
    if not 0 < len(parts) <= MAX_PARTS or not all(_plain(p) for p in parts):
        return False
    if not _single_regular_file(workdir.joinpath(*parts)):
        return False
    if parts[-1] in (EVALUATION_FILE, REPORT_FILE) and _holds(workdir, parts[:-1], "evaluation"):
        return True
    return any(_holds(workdir, parts[:depth], "run") for depth in range(1, len(parts)))


def _plain(part: str) -> bool:
    """A component that names an entry of its directory, and not a hidden one."""
    return bool(part) and not part.startswith(".") and "\0" not in part and "\\" not in part


def _holds(workdir: Path, folder: list[str], kind: str) -> bool:
    """Whether the folder ``workdir/folder`` is a regression-run folder of ``kind``:
    ``evaluation`` (its ``evaluation.json``) or ``run`` (its ``run.json``)."""
    name = EVALUATION_FILE if kind == "evaluation" else RUN_FILE
    path = workdir.joinpath(*folder, name)
    if not _single_regular_file(path):
        return False
    _data, problem = read_document(path, name=name, kind=kind)
    return problem is None


def _single_regular_file(path: Path) -> bool:
    """Whether ``path`` is a regular file with one name, reached with no link followed."""
    try:
        with beneath.parent(path) as (directory, name):
            info = os.stat(name, dir_fd=directory, follow_symlinks=False)
    except (OSError, ValueError, OrchestratorError):
        return False
    return stat.S_ISREG(info.st_mode) and info.st_nlink == 1
