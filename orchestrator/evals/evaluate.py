"""``orchestrate eval compare``: two run directories in, ``evaluation.json`` and
``report.html`` out, in one folder that can be copied anywhere.

The output folder (``--out``, by default the directory both runs are under, which for a
runner's ``<out>/<version>/<run_id>/`` layout is ``<out>``) holds the two files and, when
a run directory is not already inside it, a copy of that run directory (regular files
only, no link), so every link of the report resolves inside the folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .._errors import ContractError, OrchestratorError, UnfinishedRunError, UsageError
from .._text import plural, printable
from ..formats.evaluation import EVALUATION_FILE, RISK_LEVELS, Evaluation, unstructure_evaluation
from ..formats.strict_json import dumps_canonical, loads_strict
from ..storage.durable import atomic_write
from ..storage.files import read_regular_file
from .cases import CASES_MAX_BYTES
from .compare import DEFAULT_FAIL_ON, Expectation, compare_runs
from .reading import (
    FileProblem,
    RunDir,
    detail_of,
    file_inside,
    manifest_href,
    read_run_dir,
    unrecorded_in,
)

REPORT_FILE = "report.html"


def _given_expectations(path: Path) -> dict[str, Expectation]:
    try:
        return read_expectations(path)
    except FileNotFoundError:
        raise UsageError(f"--cases {path}: no such file; name the cases file of the runs") from None
    except (ContractError, OSError) as exc:
        raise UsageError(f"--cases: {exc}; fix the cases file or leave --cases out") from None


def evaluate(
    baseline_dir: Path,
    new_dir: Path,
    *,
    out_dir: Path | None = None,
    cases_file: Path | None = None,
    fail_on: Iterable[str] = DEFAULT_FAIL_ON,
    generated_at: str,
    allow_incomplete: bool = False,
) -> tuple[Evaluation, Path]:
    """Compare the runs, write ``evaluation.json`` and ``report.html``; returns the
    evaluation and the folder written. A cases file that cannot be read is a
    ``UsageError``, raised before anything is written: never taken for a failed gate.
    A run that never recorded some of its cases is refused
    (:class:`~orchestrator._errors.UnfinishedRunError`, nothing written) unless
    ``allow_incomplete``: then those cases are ``not_run`` and fail any gate."""
    given = None if cases_file is None else _given_expectations(cases_file)
    for name, path in (("BASELINE_DIR", baseline_dir), ("NEW_DIR", new_dir)):
        if not path.is_dir() or path.is_symlink():
            raise UsageError(f"{name} {path} is not a directory: name a run directory")
    if not allow_incomplete:
        _refuse_unfinished({"baseline": baseline_dir, "new": new_dir})
    if out_dir is None:
        out_dir = _runs_folder(baseline_dir.resolve(), new_dir.resolve())
    out_dir.mkdir(parents=True, exist_ok=True)
    baseline_dir = _inside(baseline_dir, out_dir, "baseline")
    new_dir = _inside(new_dir, out_dir, "new")
    from ..storage.beneath import guard

    for run_dir in (baseline_dir, new_dir):  # a run directory is untrusted: no link followed
        guard(run_dir)
    baseline, new = read_run_dir(baseline_dir), read_run_dir(new_dir)
    if given is not None:
        expectations = given
    else:
        expectations = _kept_expectations(new) or _kept_expectations(baseline) or {}
    evaluation = compare_runs(
        baseline,
        new,
        out_dir=out_dir,
        expectations=expectations,
        titles=_titles(cases_file, new, baseline),
        fail_on=fail_on,
        generated_at=generated_at,
        evaluator_version=_version(),
    )
    from .report import render_report

    document = unstructure_evaluation(evaluation)
    atomic_write(out_dir / EVALUATION_FILE, dumps_canonical(document))
    page = render_report(evaluation, exists=lambda href: file_inside(out_dir, href) is not None)
    atomic_write(out_dir / REPORT_FILE, page.encode("utf-8"))
    return evaluation, out_dir


#: How many missing case ids the refusal of an unfinished run names before "and N more".
SHOWN_MISSING = 5


def _refuse_unfinished(runs: dict[str, Path]) -> None:
    """Refuse, in one line, the runs that never recorded some of their cases."""
    unfinished = [
        (side, str(path), missing)
        for side, path in runs.items()
        if (missing := unrecorded_in(path))
    ]
    if not unfinished:
        return
    parts = []
    for side, path, missing in unfinished:
        shown = ", ".join(printable(case_id) for case_id in missing[:SHOWN_MISSING])
        more = len(missing) - SHOWN_MISSING
        listed = f"{shown} and {more} more" if more > 0 else shown
        parts.append(
            f"the {side} run {printable(path)} is unfinished, {plural(len(missing), 'case')} "
            f"never recorded ({listed}): {_how_to_finish(Path(path))}"
        )
    raise UnfinishedRunError(
        f"{'; '.join(parts)}; or pass --allow-incomplete to compare as it is (those "
        "cases not_run, any gate failed)",
        unfinished=unfinished,
    )


def _how_to_finish(run_dir: Path) -> str:
    """A run directory is ``<out>/<version>/<run_id>``; the run's state, while it is
    unfinished, is in ``<out>/<version>``."""
    from ..storage.runs import live_state_files

    workdir = run_dir.parent
    if live_state_files(workdir):
        return f"finish it with 'orchestrate resume --workdir {printable(str(workdir))}'"
    return "run it again"


def _runs_folder(baseline_dir: Path, new_dir: Path) -> Path:
    """The folder both runs are under, when it is a folder of runs (``<out>``, each run at
    ``<out>/<version>/<run_id>`` or ``<out>/<run_id>``): the default output folder. Any
    other (``/``, the home directory, a tree far above the runs) is refused, never
    written into."""
    common = Path(os.path.commonpath([baseline_dir, new_dir]))
    depths = [len(run.relative_to(common).parts) for run in (baseline_dir, new_dir)]
    special = {Path(common.anchor)}
    with contextlib.suppress(RuntimeError, KeyError):  # no home directory known
        special.add(Path.home().resolve())
    if common in special or max(depths) > 2:
        raise UsageError(
            f"the two runs are under {common}, which is not a folder of runs "
            "(<out>/baseline/<run_id> and <out>/new/<run_id>): pass --out DIR to say where "
            "evaluation.json and report.html go"
        )
    return common


def _kept_expectations(run: RunDir) -> dict[str, Expectation] | None:
    """The expectations of the copy of the cases file a run kept in ``assets/`` (manifest
    ``asset_id`` ``cases``), so a comparison knows each case's ``expected`` without being
    told; ``None`` when there is none. A copy that cannot be read is a problem of that run
    (shown in the report), never the end of the comparison: it goes on without it."""
    href = _kept_cases_href(run)
    if href is None:
        return None
    try:
        return read_expectations(run.path / href, source=href)
    except (OrchestratorError, OSError, UnicodeDecodeError) as exc:
        field = getattr(exc, "json_path", "$")
        run.problems.append(
            FileProblem(
                file=href,
                field=field if isinstance(field, str) else "$",
                message=f"{detail_of(exc)}; the comparison went on without the cases' "
                "expectations: fix the copy or pass --cases",
            )
        )
        return None


def _titles(cases_file: Path | None, *runs: RunDir) -> dict[str, str]:
    """The cases' titles: from ``--cases``, else from the copy a run kept (the first that
    reads); a file that cannot be read gives none (its problem is told with the
    expectations)."""
    places: list[tuple[Path, str | None]] = [(cases_file, None)] if cases_file else []
    for run in runs:
        href = _kept_cases_href(run)
        if href is not None:
            places.append((run.path / href, href))
    for path, source in places:
        try:
            return read_titles(path, source=source)
        except (OrchestratorError, OSError, UnicodeDecodeError):
            continue
    return {}


def _kept_cases_href(run: RunDir) -> str | None:
    items = (run.manifest or {}).get("items")
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and item.get("asset_id") == "cases":
            return manifest_href(run.path, item.get("href"))
    return None


def _inside(run_dir: Path, out_dir: Path, version: str) -> Path:
    """``run_dir`` if it is under ``out_dir``; else its copy at ``out_dir/<version>/<name>``."""
    resolved, root = run_dir.resolve(), out_dir.resolve()
    if resolved == root or root in resolved.parents:
        return resolved
    if (root / version).is_symlink():
        raise UsageError(
            f"{root / version} is a symbolic link: a run is never copied through one; "
            "remove it or pass another --out"
        )
    target = root / version / resolved.name
    staging = target.with_name(f".{target.name}.copying")
    try:
        _remove(staging)
        shutil.copytree(resolved, staging, symlinks=True, ignore=_not_regular)
        _remove(target)  # an older copy, or a link left there: the link goes, not its target
        staging.rename(target)
    except OSError as exc:  # shutil.Error too: each file it could not copy
        raise OrchestratorError(
            f"cannot copy the run directory {run_dir} to {target}: {_copy_failure(exc)}; "
            "nothing was compared: fix that (or pass another --out), then compare again"
        ) from None
    return target


def _remove(path: Path) -> None:
    """``path`` gone, whatever it is: a link or a file is unlinked, a directory removed."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def _not_regular(directory: str, names: list[str]) -> list[str]:
    """Left out of a copy: a link (it may point anywhere, and a copy must stand alone) and
    anything that is neither a file nor a directory (a FIFO would block the copy)."""
    left = []
    for name in names:
        path = os.path.join(directory, name)
        if os.path.islink(path) or not (os.path.isfile(path) or os.path.isdir(path)):
            left.append(name)
    return left


def _copy_failure(exc: OSError) -> str:
    if isinstance(exc, shutil.Error) and exc.args and isinstance(exc.args[0], list):
        failures = exc.args[0]
        first = failures[0] if failures else None
        if isinstance(first, tuple) and len(first) == 3:
            more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
            return f"{first[0]}: {first[2]}{more}"
    return f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc)


def read_expectations(path: Path, *, source: str | None = None) -> dict[str, Expectation]:
    """``{case_id: Expectation}`` from a cases file, as the runner reads it: a JSON array of
    cases or one case per line (JSONL); an object with ``cases`` is read too. Each case has
    an ``id`` and, optionally, ``expected``; fields the evaluator does not judge are
    ignored. ``source`` names the file in errors (by default its path)."""
    found: dict[str, Expectation] = {}
    for case_id, at, case in _case_objects(path, source):
        expected = case.get("expected")
        if expected is not None:
            found[case_id] = _expectation(expected, str(path) if source is None else source, at)
    return found


def read_titles(path: Path, *, source: str | None = None) -> dict[str, str]:
    """``{case_id: title}`` of the cases of a cases file that have a ``title``, read as
    :func:`read_expectations` reads the file: the report names each case by it."""
    return {
        case_id: case["title"]
        for case_id, _, case in _case_objects(path, source)
        if isinstance(case.get("title"), str) and case["title"].strip()
    }


def _case_objects(path: Path, source: str | None) -> list[tuple[str, str, dict[str, Any]]]:
    """Each case of a cases file: its id, where it is (for errors), its object."""
    source = str(path) if source is None else source
    raw = read_regular_file(path, max_bytes=CASES_MAX_BYTES, source=source)
    whole = _whole_document(raw, source)
    if isinstance(whole, list):
        located = [(f"$[{index}]", case) for index, case in enumerate(whole)]
    elif isinstance(whole, dict) and isinstance(whole.get("cases"), list):
        located = [(f"$.cases[{index}]", case) for index, case in enumerate(whole["cases"])]
    else:  # JSONL: one case per line
        located = [
            (f"line {number}", loads_strict(line, source=f"{source} line {number}"))
            for number, line in enumerate(raw.split(b"\n"), start=1)
            if line.strip()
        ]
    cases = []
    for at, case in located:
        if not isinstance(case, dict):
            raise ContractError("expected an object", source=source, json_path=at)
        case_id = case.get("id", case.get("case_id"))
        if not isinstance(case_id, str):
            raise ContractError("a case needs a string 'id'", source=source, json_path=at)
        cases.append((case_id, f"{at}.expected", case))
    return cases


def _whole_document(raw: bytes, source: str) -> Any:
    """The file read as one JSON value when it is one: an array (``[`` first), or an
    object that parses whole (``{"cases": [...]}``, or a single case); ``None`` for JSONL,
    whose lines may say anything (``"cases"`` too)."""
    first = raw.lstrip()[:1]
    if first == b"[":
        return loads_strict(raw, source=source)
    if first == b"{":
        try:
            return loads_strict(raw, source=source)
        except ContractError:  # several values: one case per line
            return None
    return None


def _expectation(expected: Any, source: str, at: str) -> Expectation:
    if not isinstance(expected, dict):
        raise ContractError("expected an object", source=source, json_path=at)
    contains = expected.get("output_contains", [])
    if isinstance(contains, str):
        contains = [contains]
    if not isinstance(contains, list) or not all(isinstance(c, str) for c in contains):
        raise ContractError(
            "expected a string or an array of strings",
            source=source,
            json_path=f"{at}.output_contains",
        )
    limit = expected.get("max_risk_level")
    if limit is not None and limit not in RISK_LEVELS:
        raise ContractError(
            "expected low, medium, unknown or high", source=source, json_path=f"{at}.max_risk_level"
        )
    return Expectation(
        output_contains=tuple(contains),
        output_equals=expected.get("output_equals"),
        max_risk_level=limit,
    )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"checkpoint-orchestrator {version('checkpoint-orchestrator')}"
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "checkpoint-orchestrator (not installed)"
