"""``orchestrate prune`` on a work directory: finished runs removed whole, or not at all.

Everything a work directory keeps of an ended run is its directory,
``.orchestrator/runs/<run id>/`` (its last state, its archived requests, its events and
its evidence files), and its entry in the checkpoint register beside the signing key
(``storage.checkpoints``). A run is removed in two moves:

1. under its workflow's instance lock (so no ``retry``, ``rewind`` or ``fork`` makes it
   live meanwhile), and only while no live instance names it, its directory is renamed
   into ``.orchestrator/removing/`` and both directories are synced: from that moment
   every reader (which looks under ``runs/`` only) sees the run gone, whole;
2. its register entry is removed, then its files, its last state last, then the
   directory itself.

A crash in the second move leaves a directory under ``removing/`` that no reader looks
at; the next prune finishes it first. Nothing of a live run is touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

from .._errors import InstanceBusyError, OrchestratorError
from .._ports import PrunedRun, PruneInput, RunListing
from ..storage import beneath
from ..storage.durable import InstanceLock, crash_point, fsync_directory
from ..storage.runs import ENGINE_KEY, HISTORY_DIR, is_run_id, live_state_files, run_id_in, runs_dir

#: Where runs being removed wait, under ``.orchestrator/``; no reader looks there.
REMOVING_DIR = "removing"


def removing_dir(workdir: Path) -> Path:
    return workdir / HISTORY_DIR / REMOVING_DIR


def prune_runs(workdir: Path, request: PruneInput) -> list[PrunedRun]:
    """Remove the finished runs of ``workdir`` that ``request`` selects (see
    :meth:`orchestrator._ports.RunStore.prune_runs`)."""
    from .prune_rule import select_runs

    if not request.dry_run:
        finish_removals(workdir)
    live, _ = live_runs(workdir)
    chosen = select_runs(ended_runs(workdir), _keeping(request, live))
    if request.dry_run:
        return [_pruned(run, removed=True) for run in chosen]
    by_workflow: dict[str, list[RunListing]] = defaultdict(list)
    for run in chosen:
        by_workflow[run.workflow].append(run)
    done: dict[str, PrunedRun] = {}
    for workflow, runs in by_workflow.items():
        for outcome in _prune_workflow(workdir, workflow, runs):
            done[outcome.run_id] = outcome
    # Texts stored once by digest, when runs reference them: the ones no kept run
    # references any more are removed here, after the runs that held them.
    remove_orphan_children(workdir)
    return [done[run.run_id] for run in chosen]


def remove_orphan_children(workdir: Path) -> list[str]:
    """Remove the places of child runs (``.orchestrator/children/<run id>/``) whose
    parent run is gone: neither live here nor kept under ``runs/``. A child's place goes
    with its parent, after it (a crash between leaves the place, which the next prune
    finds an orphan); a place whose state cannot be read is left alone."""
    from .file_runs import children_dir

    place = children_dir(workdir)
    live, _ = live_runs(workdir)
    removed = []
    for name in sorted(beneath.list_directory(place)):
        if not is_run_id(name):
            continue
        parent = _parent_of(place / name)
        if parent is None or parent in live or _ended_listing_of(workdir, parent) is not None:
            continue
        removing = removing_dir(workdir)
        if beneath.make_directory(removing):
            fsync_directory(removing.parent)
        aside = removing / f"child-{name}.{secrets.token_hex(4)}"
        with (
            beneath.parent(place / name) as (source_fd, old),
            beneath.parent(aside) as (
                target_fd,
                new,
            ),
        ):
            os.rename(old, new, src_dir_fd=source_fd, dst_dir_fd=target_fd)
        fsync_directory(place)
        fsync_directory(removing)
        _finish(workdir, aside)
        removed.append(name)
    return removed


def _parent_of(place: Path) -> str | None:
    """The parent run id a child run's place records (its live state's, else its kept
    one's); ``None`` when none can be read."""
    states = [(p.parent, p.name) for p in live_state_files(place)]
    for name in beneath.list_directory(runs_dir(place)):
        if is_run_id(name):
            states.append((runs_dir(place) / name, "state.json"))
    for directory, name in states:
        try:
            raw = beneath.read_file_under(directory, name, max_bytes=1 << 30)
            parent = json.loads(raw or b"")["phase_data"][ENGINE_KEY].get("parent_run_id")
        except (OSError, ValueError, KeyError, TypeError, AttributeError, OrchestratorError):
            continue
        if isinstance(parent, str):
            return parent
    return None


def _keeping(request: PruneInput, live: set[str]) -> PruneInput:
    import attrs

    return attrs.evolve(request, keep=[*request.keep, *sorted(live)])


def _pruned(run: RunListing, *, removed: bool, skipped: str | None = None) -> PrunedRun:
    return PrunedRun(
        run_id=run.run_id,
        workflow=run.workflow,
        status=run.status,
        updated_at=run.updated_at,
        removed=removed,
        skipped=skipped,
    )


def _prune_workflow(workdir: Path, workflow: str, runs: list[RunListing]) -> list[PrunedRun]:
    """Remove ``runs`` (all of ``workflow``) under the workflow's instance lock."""
    if not is_run_id(workflow):
        why = f"its workflow name {workflow!r} is not a plain name: orchestrate wrote no such"
        return [_pruned(run, removed=False, skipped=why) for run in runs]
    lock = InstanceLock(workdir / HISTORY_DIR / f"{workflow}.lock", make_directory=True)
    try:
        lock.acquire()
    except InstanceBusyError as exc:
        why = f"another orchestrate process{_pid(exc.holder)} is working on {workflow}"
        return [_pruned(run, removed=False, skipped=why) for run in runs]
    try:
        live, unread = live_runs(workdir)  # again, under the lock: what may go live is held
        outcomes = []
        for run in runs:
            kept = _why_kept(workdir, run, live, unread)
            if kept is None:
                remove_run(workdir, run.run_id)
            outcomes.append(_pruned(run, removed=kept is None, skipped=kept))
        return outcomes
    finally:
        lock.release()


def _pid(holder: str | None) -> str:
    return f" (pid {holder})" if holder else ""


def _why_kept(workdir: Path, run: RunListing, live: set[str], unread: set[str]) -> str | None:
    """Why ``run`` must stay after all (``None``: it goes): it is live now, a live
    instance of its workflow cannot be read to tell, or its kept state changed."""
    if run.run_id in live:
        return "it is live again (retried, rewound or forked meanwhile)"
    if run.workflow in unread:
        return (
            f"the live {run.workflow} instance's state cannot be read, so it may be this run; "
            "repair it or 'orchestrate cancel --force' it, then prune again"
        )
    now = _ended_listing_of(workdir, run.run_id)
    if now is None or (now.status, now.updated_at) != (run.status, run.updated_at):
        return "it changed while prune looked at it"
    return None


def live_runs(workdir: Path) -> tuple[set[str], set[str]]:
    """The run ids of the live instances, and the workflow names of live instances whose
    state cannot be read (their run could be any)."""
    ids: set[str] = set()
    unread: set[str] = set()
    for state_path in live_state_files(workdir):
        try:
            raw = beneath.read_file_under(workdir, state_path.name, max_bytes=1 << 30)
            if raw is None:
                raise ValueError("not a regular file")
            run_id = run_id_in(json.loads(raw), source=str(state_path))
            if run_id is None:
                raise ValueError("no run id")
            ids.add(run_id)
        except (ValueError, OrchestratorError):
            unread.add(state_path.name[1 : -len("-state.json")])
    return ids, unread


def ended_runs(workdir: Path) -> list[RunListing]:
    """The runs the work directory keeps, as their kept states list them."""
    found = []
    for name in beneath.list_directory(runs_dir(workdir)):
        if is_run_id(name):
            listing = _ended_listing_of(workdir, name)
            if listing is not None:
                found.append(listing)
    return found


def _ended_listing_of(workdir: Path, run_id: str) -> RunListing | None:
    """Run ``run_id``'s kept state as a listing (``None``: it keeps none, or none that
    can be read: a run not ended, or being written)."""
    path = runs_dir(workdir) / run_id / "state.json"
    try:
        info = os.stat(path, follow_symlinks=False)
        raw = beneath.read_file_under(path.parent, path.name, max_bytes=1 << 30)
        if raw is None:
            return None
        record = json.loads(raw)["phase_data"][ENGINE_KEY]
        return RunListing(
            run_id=run_id,
            workflow=str(record.get("workflow_name", "")),
            status=str(record.get("status", "")),
            updated_at=datetime.fromtimestamp(info.st_mtime, tz=timezone.utc),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


# -- the removal --------------------------------------------------------------------------


def remove_run(workdir: Path, run_id: str) -> None:
    """Move run ``run_id``'s directory aside durably (it is gone for every reader), then
    remove what was in it."""
    removing = removing_dir(workdir)
    if beneath.make_directory(removing):
        fsync_directory(removing.parent)
    aside = removing / f"{run_id}.{secrets.token_hex(4)}"
    crash_point(f"prune: before moving run {run_id} aside")
    source = runs_dir(workdir) / run_id
    with beneath.parent(source) as (source_fd, name), beneath.parent(aside) as (target_fd, new):
        info = os.stat(name, dir_fd=source_fd, follow_symlinks=False)
        if not stat.S_ISDIR(info.st_mode):
            return  # not a run's directory: nothing orchestrate made
        os.rename(name, new, src_dir_fd=source_fd, dst_dir_fd=target_fd)
    fsync_directory(source.parent)  # both entries last: the run is gone, and held aside
    fsync_directory(removing)
    crash_point(f"prune: run {run_id} moved aside")
    _finish(workdir, aside)


def finish_removals(workdir: Path) -> list[str]:
    """Finish the removals a crashed prune left under ``.orchestrator/removing/``; the
    names finished."""
    removing = removing_dir(workdir)
    names = sorted(beneath.list_directory(removing))
    for name in names:
        _finish(workdir, removing / name)
    return names


def _finish(workdir: Path, aside: Path) -> None:
    """Remove a run's directory moved aside: its register entry first (read from its
    state, which goes last), then its files, then the directory."""
    _forget_checkpoints(workdir, aside / "state.json")
    try:
        top = beneath.open_directory(aside)
    except NotADirectoryError:
        beneath.unlink(aside)  # not a directory: no run's, and no reader's
        fsync_directory(aside.parent)
        return
    except FileNotFoundError:
        return
    try:
        _empty(top, last="state.json")
    finally:
        os.close(top)
    with contextlib.suppress(FileNotFoundError):
        beneath.remove_directory(aside)
    fsync_directory(aside.parent)
    crash_point(f"prune: run {aside.name.rpartition('.')[0]} removed")


def _empty(fd: int, *, last: str | None = None) -> None:
    """Remove everything in the directory open at ``fd`` (links removed, never followed),
    ``last`` after the rest."""
    names = sorted(os.listdir(fd), key=lambda n: (n == last, n))
    for name in names:
        # Gone meanwhile: another prune finishing the same leftover; nothing is lost.
        with contextlib.suppress(FileNotFoundError):
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
                inner = os.open(name, flags, dir_fd=fd)
                try:
                    _empty(inner)
                finally:
                    os.close(inner)
                os.rmdir(name, dir_fd=fd)
            else:
                os.unlink(name, dir_fd=fd)
                crash_point(f"prune: removed {name}")


def _forget_checkpoints(workdir: Path, state_path: Path) -> None:
    """Remove the run's entry in the checkpoint register, when its state's signature
    holds (a state written by hand names no entry to remove). A run that may live
    anywhere shares its entry with its copies elsewhere: that one stays."""
    from ..storage.checkpoints import home_of, portable, register_entry
    from ..storage.state_key import check_signature

    try:
        raw = beneath.read_file_under(state_path.parent, state_path.name, max_bytes=1 << 30)
        if raw is None:
            return
        data = json.loads(raw)
        check_signature(data, source=str(state_path), raw=raw)
        record = data["phase_data"][ENGINE_KEY]
        run_id, started_at = record["run_id"], record["started_at"]
        if not isinstance(run_id, str) or not isinstance(started_at, str) or portable(record):
            return
    except (OSError, ValueError, KeyError, TypeError, OrchestratorError):
        return
    entry = register_entry(run_id, started_at, home_of(workdir))
    with contextlib.suppress(FileNotFoundError):
        os.unlink(entry)
        crash_point(f"prune: register entry of {run_id} removed")
