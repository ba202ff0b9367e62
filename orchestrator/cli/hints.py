"""What goes on with a run that paused, said to fit the face that says it.

A pause is reported by several faces, and each goes on in its own way: after ``orchestrate
run`` or ``resume`` a person or a host resumes the run; ``drive`` waits out a timer and
answers requests itself; a worker resumes the runs of its store when they are due; the
web UI resumes a run whose "resume" is ticked. The face names itself with a
:class:`Mode`, and :func:`next_step` and :func:`pause_hint` say what comes next in its
terms, naming the run as its store's commands take it (``--store DSN --run ID``) where
the store holds many.
"""

from __future__ import annotations

import enum
import shlex
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._ports import RunStore
    from ..engine.record import Outcome


class Mode(enum.Enum):
    """The face a hint is printed by."""

    #: ``orchestrate run``, ``resume``, ``retry``, ``status``: a person or a host goes on.
    CLI = "cli"
    #: ``orchestrate drive``: it answers each request and waits out each timer itself.
    DRIVE = "drive"
    #: ``orchestrate worker``: the workers of a store resume its runs when they are due.
    WORKER = "worker"
    #: ``orchestrate ui``: the page resumes a run whose "resume" is ticked.
    UI = "ui"


def run_options(store: RunStore, run_id: str) -> str:
    """The options that name run ``run_id`` to a command of ``store`` (each with a space
    before it), as a person may read them: a DSN without its password; ``""`` where the
    store names its one live run itself (a work directory)."""
    from .run_store import shown

    if store.named_run(run_id) is None:
        return ""
    return "".join(f" {shlex.quote(shown(arg))}" for arg in store.command_arguments(run_id))


def next_step(
    status: str,
    pending: bool,
    *,
    mode: Mode = Mode.CLI,
    store_run: str | None = None,
    options: str | None = None,
    wake_at: str | None = None,
    signal: str | None = None,
) -> str | None:
    """What comes next for a run in ``status`` (``pending``: requests wait for their
    answers; ``wake_at``: a durable timer is due then), said for ``mode``: the ``next`` of
    ``status``, and what ``run`` and ``resume`` say at a pause. ``store_run``: the run's
    id in a store of many runs, where a worker goes on by itself; ``options``: the options
    that name it (default ``--store ... --run ID``)."""
    if options is None:
        options = f" --store ... --run {store_run}" if store_run else ""
    if status == "failed":
        return (
            f"fix the cause, then 'orchestrate retry{options}' goes on from the failed phase, "
            f"asking again only what changed or failed ('orchestrate cancel{options}' removes "
            "the run)"
        )
    if status not in ("paused", "running"):
        return None
    if signal and not pending:
        return _signal_step(signal, mode, options=options, store_run=store_run, wake_at=wake_at)
    timer = bool(wake_at) and not pending
    if mode is Mode.DRIVE:
        return f"drive resumes it at {wake_at}, when the timer is due" if timer else None
    if mode is Mode.WORKER:
        if timer:
            return f"a worker of the store resumes it at {wake_at}, when the timer is due"
        if pending:
            return f"its host answers ('orchestrate respond{options}'), then a worker goes on"
        return "a worker of the store goes on with it"
    if mode is Mode.UI:
        if timer:
            return (
                f"with 'resume' ticked, this page resumes it at {wake_at}, when the timer is "
                "due" + (" (or a worker of the store does)" if store_run else "")
            )
        return "answer each request here, then resume" if pending else "resume it here"
    when = f" once the timer is due ({wake_at})" if timer else ""
    if store_run:
        goes_on = f"a worker of the store goes on{when}, or 'orchestrate resume{options}'"
    else:
        goes_on = f"'orchestrate resume' goes on{when}" if when else "'orchestrate resume'"
    if pending:
        return f"answer each request (or 'orchestrate respond{options}'), then {goes_on}"
    return goes_on if store_run or when else "'orchestrate resume' (or drive) goes on"


def _signal_step(
    signal: str, mode: Mode, *, options: str, store_run: str | None, wake_at: str | None
) -> str:
    """What comes next for a run waiting for ``signal`` (until ``wake_at``, if given)."""
    send = f"'orchestrate signal {signal}{options} --data JSON'"
    late = f" (or it goes on without one at {wake_at})" if wake_at else ""
    if mode is Mode.WORKER:
        return f"waiting for signal {signal}: {send} sends it, then a worker goes on{late}"
    if mode is Mode.UI:
        return f"waiting for signal {signal}: send it here, then resume{late}"
    if mode is Mode.DRIVE:
        return f"waiting for signal {signal}: {send} sends it, and drive goes on{late}"
    goes_on = (
        f"a worker of the store goes on, or 'orchestrate resume{options}'"
        if store_run
        else "'orchestrate resume' goes on"
    )
    return f"waiting for signal {signal}: {send} sends it, then {goes_on}{late}"


def pause_hint(
    outcome: Outcome, mode: Mode, *, store_run: str | None = None, options: str | None = None
) -> str | None:
    """What comes next after ``outcome``, a pause, said for ``mode`` (``None``: nothing
    to say, or no pause)."""
    if outcome.status != "paused":
        return None
    return next_step(
        "paused",
        bool(outcome.pending),
        mode=mode,
        store_run=store_run,
        options=options,
        wake_at=outcome.wake_at,
        signal=outcome.signal,
    )
