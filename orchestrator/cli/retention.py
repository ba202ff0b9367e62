"""``orchestrate prune``: remove finished runs' history and evidence, on whichever store
the command names, through the ``RunStore`` port (each store removes a run whole, or not
at all, and never a live one)."""

from __future__ import annotations

import argparse
import re
import sys
from datetime import datetime, timedelta, timezone
from typing import Any

from .._errors import UsageError
from . import common
from .common import EXIT_OK, Command

_AGE = re.compile(r"(\d+)([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
FINISHED = ("completed", "failed", "cancelled")


def parse_age(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``2w``, ``45s``: an age."""
    found = _AGE.fullmatch(text.strip())
    if found is None:
        raise UsageError(
            f"--older-than {text!r}: write a number and a unit: 30d (days), 12h (hours), "
            "90m (minutes), 2w (weeks) or 45s (seconds)"
        )
    return timedelta(**{_UNITS[found.group(2)]: int(found.group(1))})


def parse_statuses(text: str) -> list[str]:
    """``completed,failed``: statuses of finished runs, each checked."""
    statuses = [s.strip() for s in text.split(",") if s.strip()]
    wrong = [s for s in statuses if s not in FINISHED]
    if not statuses or wrong:
        named = ", ".join(repr(s) for s in wrong) or "nothing"
        raise UsageError(
            f"--status {text!r}: {named} is not a finished run's status; name some of "
            f"{', '.join(FINISHED)} (a live run is never pruned)"
        )
    return statuses


def _declare_prune(prune: argparse.ArgumentParser) -> None:
    common.add_workdir(prune)
    common.add_store(prune, run=False)
    prune.add_argument(
        "--older-than",
        default=None,
        metavar="AGE",
        help="only runs last changed longer ago than AGE: 30d, 12h, 90m, 2w, 45s "
        "(default: any age)",
    )
    prune.add_argument(
        "--keep-last",
        type=int,
        default=None,
        metavar="N",
        help="keep the N most recent of the selected runs of each workflow (default: 0)",
    )
    prune.add_argument(
        "--status",
        default=",".join(FINISHED),
        metavar="LIST",
        help="the statuses of the runs that may go, comma-separated (default: "
        "completed,failed,cancelled); a live run never goes",
    )
    prune.add_argument(
        "--dry-run", action="store_true", help="list what would go, and remove nothing"
    )
    prune.add_argument("--json", action="store_true", help="print machine-readable JSON")


def _now() -> datetime:
    fixed = common.clock()
    return fixed.now() if fixed is not None else datetime.now(timezone.utc)


def _cmd_prune(args: argparse.Namespace) -> int:
    from contextlib import closing

    from .._ports import PruneInput
    from .run_store import open_run_store

    if args.older_than is None and args.keep_last is None:
        raise UsageError(
            "say which finished runs go: --older-than AGE (such as 30d), --keep-last N, or "
            "both ('--keep-last 0' removes every run --status selects); --dry-run lists "
            "them first"
        )
    if args.keep_last is not None and args.keep_last < 0:
        raise UsageError(f"--keep-last {args.keep_last}: write 0 or more")
    request = PruneInput(
        status=parse_statuses(args.status),
        older_than=None if args.older_than is None else _now() - parse_age(args.older_than),
        keep_last=args.keep_last or 0,
        dry_run=args.dry_run,
    )
    with closing(open_run_store(args)) as store:
        pruned = store.prune_runs(request)
        where = store.name
    if args.json:
        _print_json(pruned, where, args.dry_run)
    else:
        _print_lines(pruned, where, args.dry_run)
    return EXIT_OK


def _print_lines(pruned: list[Any], where: str, dry_run: bool) -> None:
    from .._text import printable

    verb = "would remove" if dry_run else "removed"
    for run in pruned:
        when = run.updated_at.isoformat(timespec="seconds")
        if run.removed:
            line = f"{verb} {run.run_id}  {run.workflow}  {run.status}  {when}"
        else:
            line = f"kept {run.run_id}  {run.workflow}  {run.status}  {when}: {run.skipped}"
        print(printable(line))
    removed = sum(run.removed for run in pruned)
    kept = len(pruned) - removed
    total = f"{verb} {removed} run{'s' if removed != 1 else ''} from {where}"
    print(printable(total + (f"; {kept} kept (see above)" if kept else "")))


def _print_json(pruned: list[Any], where: str, dry_run: bool) -> None:
    import json

    runs = [
        {
            "run_id": run.run_id,
            "workflow": run.workflow,
            "status": run.status,
            "updated_at": run.updated_at.isoformat(),
            "removed": run.removed,
            "skipped": run.skipped,
        }
        for run in pruned
    ]
    document = {
        "store": where,
        "dry_run": dry_run,
        "removed": sum(run.removed for run in pruned),
        "kept": sum(not run.removed for run in pruned),
        "runs": runs,
    }
    json.dump(document, sys.stdout, indent=2)
    print()


COMMANDS = {
    "prune": Command(
        "Remove finished runs' history and evidence: each run whole, never a live one.",
        _declare_prune,
        _cmd_prune,
    ),
}
