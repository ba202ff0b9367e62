"""Recorded runs as a regression suite for workflow code (``orchestrate replay --corpus``).

Every recorded run found under the corpus folders is replayed against the workflow's
current code with its recorded answers and step results (:func:`replay_outputs`: nothing
is asked, no step runs, nothing is written into the runs), and judged:

- ``unchanged``: every phase the run completed gives the output it recorded;
- ``outputs_changed``: some phase now gives another output (a JSON diff per phase);
- ``diverged``: the code now makes a call the run did not (the first one, both sides);
- ``failed``: a phase the run completed now raises, or the run cannot be read or
  trusted (its signature or a journal's digest does not hold): the reason in words.

The judgement is ``summary.json`` (see :func:`corpus_summary` for its fields) and
``report.html`` (:mod:`.replay_report`), written together into one folder.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .._errors import OrchestratorError
from ..engine.record import load_record
from ..engine.replay import OutputReplay, PhaseOutput, load_recorded_run, replay_outputs
from ..engine.workflow import Workflow
from ..formats.strict_json import dumps_canonical
from ..storage.durable import atomic_write

#: The version of ``summary.json``'s layout.
SCHEMA_VERSION = "1.0"
SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.html"
#: A run's verdicts, from the mildest.
STATUSES = ("unchanged", "outputs_changed", "diverged", "failed")
#: ``--fail-on``'s default: a run that would no longer resume, or breaks. A changed
#: output is often the point of the change: gate on it with ``--fail-on``.
DEFAULT_FAIL_ON = ("diverged", "failed")
#: The most changes listed for one phase; ``more_changes`` counts the rest.
MAX_CHANGES = 50

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# -- finding the runs ---------------------------------------------------------------------


def find_recorded_runs(folder: Path) -> list[Path]:
    """The recorded runs under ``folder``, in a stable order: run directories (a
    ``state.json`` in ``.orchestrator/runs/<run_id>/``, or in a copy of such a folder,
    which holds ``phases/``) and live instances' state files (``.<workflow>-state.json``).
    ``folder`` may itself be one of them. No folder that is a symbolic link is entered; a
    state file that is one is listed, and refused when it is read."""
    if folder.is_file():
        return [folder]
    found: list[Path] = []
    for directory, subdirs, names in os.walk(folder):
        here = Path(directory)
        subdirs[:] = sorted(d for d in subdirs if not (here / d).is_symlink())
        if "state.json" in names and (here.parent.name == "runs" or "phases" in subdirs):
            found.append(here)  # (a state file that is a link is refused when read)
            subdirs[:] = []  # a run's own folders hold no other run
            continue
        found += [
            here / name
            for name in sorted(names)
            if name.startswith(".") and name.endswith("-state.json")
        ]
    return found


def _without_copies(paths: list[Path]) -> list[Path]:
    """``paths`` less the run directory of a run whose live state file is also there (a
    run made live again by a rewind): the live state is the newer."""
    live_dirs = set()
    for path in paths:
        if path.is_file():
            try:
                run_dir, _ = load_recorded_run(path)
            except (OrchestratorError, OSError):
                continue  # reported when it is replayed
            live_dirs.add(run_dir.resolve())
    return [p for p in paths if p.is_file() or p.resolve() not in live_dirs]


# -- JSON diff ----------------------------------------------------------------------------


def json_changes(old: Any, new: Any, path: str = "$") -> list[dict[str, Any]]:
    """Where two JSON values differ: ``{"path", "change", "old", "new"}`` for each
    difference, ``path`` as ``$.field[2]`` (a key that is not a name: ``$["a key"]``),
    ``change`` one of ``changed``, ``added`` (``old`` is null), ``removed`` (``new`` is
    null). Objects are compared key by key, arrays item by item; ``1`` and ``1.0`` are
    the same number, ``true`` is not ``1``."""
    if isinstance(old, dict) and isinstance(new, dict):
        changes: list[dict[str, Any]] = []
        for key in [*old, *(k for k in new if k not in old)]:
            where = _member(path, key)
            if key not in new:
                changes.append(_change(where, "removed", old[key], None))
            elif key not in old:
                changes.append(_change(where, "added", None, new[key]))
            else:
                changes += json_changes(old[key], new[key], where)
        return changes
    if isinstance(old, list) and isinstance(new, list):
        changes = []
        for index in range(max(len(old), len(new))):
            where = f"{path}[{index}]"
            if index >= len(new):
                changes.append(_change(where, "removed", old[index], None))
            elif index >= len(old):
                changes.append(_change(where, "added", None, new[index]))
            else:
                changes += json_changes(old[index], new[index], where)
        return changes
    return [] if _same(old, new) else [_change(path, "changed", old, new)]


def _same(old: Any, new: Any) -> bool:
    if isinstance(old, bool) or isinstance(new, bool):
        return type(old) is type(new) and old == new
    numbers = (int, float)
    if isinstance(old, numbers) and isinstance(new, numbers):
        return old == new
    return type(old) is type(new) and old == new


def _member(path: str, key: str) -> str:
    if _IDENTIFIER.match(key):
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def _change(path: str, change: str, old: Any, new: Any) -> dict[str, Any]:
    return {"path": path, "change": change, "old": old, "new": new}


# -- judging ------------------------------------------------------------------------------


def judge_run(path: Path, shown: str, workflow_cls: type[Workflow]) -> dict[str, Any]:
    """One run's entry of ``summary.json`` (``shown``: its path as the report names it);
    ``{"skipped": reason}`` for a run of another workflow."""
    run_id: str | None = None
    try:
        _, state = load_recorded_run(path, signed_only=True)
        record = load_record(state, source=str(path))
        run_id = record.run_id
        if record.workflow_name != workflow_cls.name:
            return {
                "path": shown,
                "run_id": record.run_id,
                "skipped": f"a run of workflow {record.workflow_name!r}, not {workflow_cls.name!r}",
            }
        replay = replay_outputs(path, workflow_cls, signed_only=True)
    except OrchestratorError as exc:
        return _failed(shown, run_id, str(exc))
    except OSError as exc:
        reason = exc.strerror or str(exc)
        return _failed(shown, run_id, f"{exc.filename or path}: {reason}; the run cannot be read")
    return _entry(shown, replay)


def _failed(shown: str, run_id: str | None, reason: str) -> dict[str, Any]:
    """A run that cannot be replayed; ``run_id`` when its state could be read."""
    return {
        "path": shown,
        "run_id": run_id,
        "status": "failed",
        "recorded_status": None,
        "inputs": None,
        "phases": [],
        "divergence": None,
        "reason": f"the run cannot be replayed: {reason}",
    }


def _entry(shown: str, replay: OutputReplay) -> dict[str, Any]:
    phases = [_phase_entry(phase) for phase in replay.phases]
    changed = [p for p in phases if p["status"] == "changed"]
    divergence = None
    if replay.failure is not None:
        status, reason = "failed", replay.failure
    elif replay.divergence is not None:
        d = replay.divergence
        divergence = {
            "phase": d.phase_name,
            "position": d.position,
            "recorded": d.recorded,
            "now": d.now,
            "message": d.message,
        }
        status, reason = "diverged", d.message.splitlines()[0]
    elif changed:
        status, reason = "outputs_changed", "; ".join(_where_changed(p) for p in changed)
    else:
        status, reason = "unchanged", None
    return {
        "path": shown,
        "run_id": replay.run_id,
        "status": status,
        "recorded_status": replay.recorded_status,
        "inputs": replay.inputs,
        "phases": phases,
        "divergence": divergence,
        "reason": reason,
    }


def _phase_entry(phase: PhaseOutput) -> dict[str, Any]:
    changes = json_changes(phase.recorded, phase.now)
    return {
        "name": phase.name,
        "status": "changed" if changes or not phase.completed else "unchanged",
        "completed_when_recorded": phase.completed,
        "changes": changes[:MAX_CHANGES],
        "more_changes": max(0, len(changes) - MAX_CHANGES),
    }


def _where_changed(phase: dict[str, Any]) -> str:
    """``phase: $.a, $.b[1]``: a changed phase in a line (its first three paths)."""
    if not phase["completed_when_recorded"]:
        return f"{phase['name']}: completes now (the recorded run did not complete it)"
    paths = [change["path"] for change in phase["changes"]]
    more = " ..." if len(paths) > 3 or phase["more_changes"] else ""
    return f"{phase['name']}: {', '.join(paths[:3])}{more}"


def corpus_summary(
    workflow_cls: type[Workflow],
    folders: Sequence[Path],
    *,
    workflow_ref: str,
    fail_on: Iterable[str] = DEFAULT_FAIL_ON,
    generated_at: str,
) -> dict[str, Any]:
    """Replay every recorded run under ``folders`` and judge it: ``summary.json``.

    Its fields: ``schema_version``; ``workflow`` (as named) and ``workflow_name``;
    ``generated_at``; ``corpus`` (the folders, as given); ``totals`` (``runs``, then one
    count per status, and ``skipped``); ``gate`` (``fail_on``: the statuses that fail it,
    ``failed``, ``exit_code``: 1 when failed else 0, ``runs``: the ids, or paths, of the
    runs that fail it); ``runs``, one entry per run in the order found: ``path``,
    ``run_id``, ``status``, ``recorded_status`` (the run's own: completed, paused,
    failed...), ``inputs``, ``phases`` (each replayed phase: ``name``, ``status``
    unchanged/changed, ``completed_when_recorded``, ``changes``: its JSON diff, at most
    ``MAX_CHANGES`` entries of ``path``/``change``/``old``/``new``, and
    ``more_changes``), ``divergence`` (``phase``, ``position``, ``recorded``, ``now``,
    ``message``; or null), ``reason`` (a line on why, null when unchanged); and
    ``skipped``: runs of another workflow (``path``, ``run_id``, ``skipped``).
    """
    runs: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for folder in folders:
        for path in _without_copies(find_recorded_runs(folder)):
            shown = str(folder / path.relative_to(folder)) if path != folder else str(folder)
            entry = judge_run(path, shown, workflow_cls)
            (skipped if "skipped" in entry else runs).append(entry)
    watched = [status for status in STATUSES if status in set(fail_on)]
    breaching = [r["run_id"] or r["path"] for r in runs if r["status"] in watched]
    totals: dict[str, int] = {"runs": len(runs)}
    totals.update({s: sum(1 for r in runs if r["status"] == s) for s in STATUSES})
    totals["skipped"] = len(skipped)
    return {
        "schema_version": SCHEMA_VERSION,
        "workflow": workflow_ref,
        "workflow_name": workflow_cls.name,
        "generated_at": generated_at,
        "corpus": [str(f) for f in folders],
        "totals": totals,
        "gate": {
            "fail_on": watched,
            "failed": bool(breaching),
            "exit_code": 1 if breaching else 0,
            "runs": breaching,
        },
        "runs": runs,
        "skipped": skipped,
    }


def write_corpus_report(summary: dict[str, Any], out_dir: Path) -> None:
    """Write ``summary.json`` and ``report.html`` into ``out_dir`` (made if need be)."""
    from .replay_report import render_replay_report

    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(out_dir / SUMMARY_FILE, dumps_canonical(summary))
    page = render_replay_report(summary)
    atomic_write(out_dir / REPORT_FILE, page.encode("utf-8"))
