"""``orchestrate replay WORKFLOW --corpus DIR...``: recorded runs as a regression suite.

Every recorded run under the folders is replayed against the workflow's current code with
its recorded answers (see :mod:`orchestrator.evals.replay_corpus`); one line per run on
stdout (its status, id, path and why), ``summary.json`` and ``report.html`` in ``--out``,
and exit 1 when a run has a status that ``--fail-on`` names, else 0 (2: a usage error).
The recorded runs are only read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .._errors import UsageError
from .._text import plural, printable
from .common import fail_on_words

_STATUS_WORDS = ("diverged", "outputs-changed", "failed", "unchanged")


def parse_fail_on(text: str) -> list[str]:
    """``--fail-on``'s statuses, as summary.json spells them (``outputs_changed``)."""
    return fail_on_words(text, _STATUS_WORDS, what="status", listed=3)


def cmd_replay_corpus(args: argparse.Namespace) -> int:
    """Replay the corpus, print a line per run, write the summary and the report."""
    from ..engine.loader import locate_workflow
    from ..evals.replay_corpus import (
        REPORT_FILE,
        SUMMARY_FILE,
        corpus_summary,
        find_recorded_runs,
        write_corpus_report,
    )
    from ..formats.times import SystemClock, format_time

    fail_on = parse_fail_on(args.fail_on)
    folders: list[Path] = list(args.corpus)
    for folder in folders:
        if not folder.exists():
            raise UsageError(f"--corpus {folder}: no such folder; name folders of recorded runs")
    runs = [path for folder in folders for path in find_recorded_runs(folder)]
    if not runs:
        shown = ", ".join(str(f) for f in folders)
        raise UsageError(
            f"--corpus {shown}: no recorded run there (a run's directory "
            ".orchestrator/runs/<run_id> holds state.json; a live instance, "
            ".<workflow>-state.json)"
        )
    out: Path = args.out.resolve()
    for path in runs:
        run_dir = (path if path.is_dir() else path.parent).resolve()
        if path.is_dir() and (out == run_dir or run_dir in out.parents):
            raise UsageError(
                f"--out {args.out}: inside the recorded run {path}; the runs are only read: "
                "write the report elsewhere"
            )
    _, workflow_cls = locate_workflow(args.workflow, base_dir=Path.cwd())
    summary = corpus_summary(
        workflow_cls,
        folders,
        workflow_ref=args.workflow,
        fail_on=fail_on,
        generated_at=format_time(SystemClock().now()),
    )
    width = len("outputs_changed")
    for run in summary["runs"]:
        why = f": {run['reason']}" if run["reason"] else ""
        line = f"{run['status']:<{width}}  {run['run_id'] or '-'}  {run['path']}{why}"
        print(printable(line))
    for skipped in summary["skipped"]:
        print(
            printable(
                f"{'skipped':<{width}}  {skipped['run_id']}  {skipped['path']}: "
                f"{skipped['skipped']}"
            )
        )
    write_corpus_report(summary, out)
    totals = summary["totals"]
    counted = ", ".join(
        f"{totals[s]} {s.replace('_', ' ')}"
        for s in ("unchanged", "outputs_changed", "diverged", "failed")
        if totals[s]
    )
    print(
        f"orchestrate: {plural(totals['runs'], 'run')} replayed: {counted or 'none'}; "
        f"{SUMMARY_FILE} and {REPORT_FILE} in {out}",
        file=sys.stderr,
    )
    gate = summary["gate"]
    if gate["failed"]:
        watched = ", ".join(s.replace("_", "-") for s in gate["fail_on"])
        print(
            f"orchestrate: gate failed (--fail-on {watched}): {plural(len(gate['runs']), 'run')}",
            file=sys.stderr,
        )
    return int(gate["exit_code"])
