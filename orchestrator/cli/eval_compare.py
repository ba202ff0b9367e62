"""``orchestrate eval compare`` and ``orchestrate eval check``: the comparison side of agent
regression runs (the ``eval`` group's parser calls :func:`add_compare_commands`).

``compare`` exits 0 when the gate passes, 1 when a case has a verdict named by
``--fail-on`` (or, with ``--allow-incomplete``, was never run), 2 on a usage error (a
missing directory, an unknown verdict, a cases file that cannot be read), 3 on any other
error (an unfinished run, the report could not be written), so a CI job never takes an
error for a failed gate. ``check``
exits 0 when the directory meets the contract's definition of done and 1 on any breach,
printing each with its file and field.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .._errors import UnfinishedRunError, UsageError
from .._text import plural, printable
from .common import fail_on_words

EXIT_OK, EXIT_FAILED = 0, 1
#: ``compare``'s exit code for an error that is neither a usage error (2) nor the gate (1).
EXIT_COMPARE_ERROR = 3
_VERDICT_WORDS = ("regressed", "new-failure", "both-failing", "fixed", "improved", "unchanged")


def add_compare_commands(subs: Any, formatter: Any) -> None:
    """``compare`` and ``check``, on the ``eval`` group's subparsers."""
    compare = subs.add_parser(
        "compare",
        help="Compare a baseline run with a new run: evaluation.json and report.html.",
        description="Compare a baseline run directory with a new one: judge every case, "
        "write evaluation.json and a self-contained report.html, exit 1 when a case has a "
        "verdict named by --fail-on. A run that never recorded some of the cases its "
        "run.json selects (stopped before it finished) is refused, unless "
        "--allow-incomplete. Exit codes: 0 the gate passed, 1 the gate failed, 2 a usage "
        "error, 3 any other error (an unfinished run, the report could not be written).",
        formatter_class=formatter,
    )
    compare.set_defaults(run_command=cmd_compare)
    compare.add_argument(
        "baseline_dir",
        type=Path,
        metavar="BASELINE_DIR",
        help="the baseline run directory (<out>/baseline/<run_id>)",
    )
    compare.add_argument(
        "new_dir", type=Path, metavar="NEW_DIR", help="the new run directory (<out>/new/<run_id>)"
    )
    compare.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="where evaluation.json and report.html go (default: the folder of runs both "
        "are under, <out> for <out>/baseline/<run_id> and <out>/new/<run_id>; required "
        "when there is none); a run directory outside it is copied in, so the folder "
        "stands alone",
    )
    compare.add_argument(
        "--cases",
        type=Path,
        default=None,
        metavar="FILE",
        help="the cases file, for the cases' 'expected' (judged before risk levels); default: "
        "the copy a run kept in assets/ (asset_id 'cases'), if any",
    )
    compare.add_argument(
        "--fail-on",
        default="regressed,new-failure",
        metavar="VERDICTS",
        help="comma-separated verdicts that fail the gate (exit 1): "
        f"{', '.join(_VERDICT_WORDS)}; 'none' never fails (default: regressed,new-failure)",
    )
    compare.add_argument(
        "--allow-incomplete",
        action="store_true",
        help="compare a run that never recorded some of its cases (stopped before it "
        "finished) instead of refusing it (exit 3): those cases are not_run, and not_run "
        "fails any gate (exit 1; --fail-on none still passes)",
    )

    check = subs.add_parser(
        "check",
        help="Check a run or evaluation directory against the artifact contract.",
        description="Check a run directory, a directory of runs, or an evaluation folder "
        "against the artifact contract's definition of done: failure artifacts complete, a "
        "body snippet implies a saved body, no absolute path in any JSON or HTML, no link "
        "and nothing outside the directory, every evidence ref resolves. Prints each "
        "breach with its file and field; exit 1 on any.",
        formatter_class=formatter,
    )
    check.set_defaults(run_command=cmd_check)
    check.add_argument("directory", type=Path, metavar="DIR", help="the directory to check")


def parse_fail_on(text: str) -> list[str]:
    """``--fail-on``'s verdicts, as evaluation.json spells them (``new_failure``)."""
    return fail_on_words(text, _VERDICT_WORDS, what="verdict", listed=len(_VERDICT_WORDS))


def cmd_compare(args: argparse.Namespace) -> int:
    """Run ``eval compare``; prints the totals and where the report is."""
    from ..evals.evaluate import REPORT_FILE, evaluate
    from ..formats.times import SystemClock, format_time

    fail_on = parse_fail_on(args.fail_on)
    try:
        evaluation, out = evaluate(
            args.baseline_dir,
            args.new_dir,
            out_dir=args.out,
            cases_file=args.cases,
            fail_on=fail_on,
            generated_at=format_time(SystemClock().now()),
            allow_incomplete=args.allow_incomplete,
        )
    except UsageError:
        raise
    except UnfinishedRunError as exc:  # its message says what to do: one line, exit 3
        print(f"orchestrate: error: {exc}", file=sys.stderr)
        return EXIT_COMPARE_ERROR
    except Exception as exc:  # whatever it is, it is not a failed gate
        return _compare_error(exc)
    totals = ", ".join(
        f"{count} {verdict.replace('_', ' ')}"
        for verdict, count in evaluation.totals.items()
        if verdict != "cases" and count
    )
    print(f"{plural(evaluation.totals['cases'], 'case')}: {totals or 'none'}")
    if evaluation.problems:
        print(
            f"{plural(len(evaluation.problems), 'file')} could not be read; the report lists them"
        )
    print(f"report: {out / REPORT_FILE}")
    if evaluation.gate.failed:
        shown = ", ".join(printable(case) for case in evaluation.gate.cases)
        print(f"gate failed: {shown}", file=sys.stderr)
    return evaluation.gate.exit_code


def _compare_error(exc: Exception) -> int:
    """An error that is not the gate's verdict: said, and exit 3, so a CI job that tells
    1 (the gate failed) from anything else never mistakes one for the other."""
    if isinstance(exc, OSError) and exc.filename is not None:
        reason = exc.strerror or str(exc)
        text = f"{exc.filename}: {reason}"
    else:
        text = str(exc) or type(exc).__name__
    print(
        f"orchestrate: error: {printable(text, lines=True)}; no verdict was reached "
        f"(exit {EXIT_COMPARE_ERROR}): fix the cause, then run 'orchestrate eval compare' again",
        file=sys.stderr,
    )
    return EXIT_COMPARE_ERROR


def cmd_check(args: argparse.Namespace) -> int:
    """Run ``eval check``; prints every breach, or how much was checked."""
    from ..evals.check import check_directory

    directory: Path = args.directory
    if not directory.is_dir():
        raise UsageError(f"{directory} is not a directory: name a run or evaluation directory")
    breaches = check_directory(directory)
    for breach in breaches:
        print(printable(str(breach)))
    if breaches:
        print(f"{len(breaches)} breach(es) of the artifact contract", file=sys.stderr)
        return EXIT_FAILED
    print(f"{directory}: meets the artifact contract")
    return EXIT_OK
