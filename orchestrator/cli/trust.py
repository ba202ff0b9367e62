"""``orchestrate trust STATE``: a person signs a state as it is now.

Every command that acts on a state refuses one whose signature does not hold: it was
changed after the engine wrote it, it carries none (a run begun before states were
signed), or another user's key made it. Whoever checked the state (the edit, the run)
vouches for it here, as ``jupyter trust`` vouches for a notebook: the state is signed
with the user's key, unchanged but for its signature, and the command says what was
signed (the workflow that will be imported, the phase that will run).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .._errors import ContractError, UsageError
from .._text import printable
from ..engine.record import EngineRecord, load_record
from ..formats.bridge_codec import parse_state
from ..formats.strict_json import loads_strict
from ..storage.durable import atomic_write
from ..storage.files import STATE_MAX_BYTES, read_regular_file
from ..storage.state_key import (
    Verdict,
    check_key_outside,
    judge_signature,
    key_file,
    signed_bytes,
)
from .common import EXIT_OK, Command

_LIVE_SUFFIX = "-state.json"


def trust_state(path: Path, *, workflow: str | None = None, accept_rollback: bool = False) -> str:
    """Sign the state at ``path`` as it is; return what was signed, in one line.

    A live instance's state (``.<workflow>-state.json``) is signed under its instance
    lock, so no ``resume`` writes it meanwhile. A state already signed with the user's
    key is left as it is. With ``workflow``, the state is first pointed at that
    reference (a project that moved): it must load, and be the workflow of the state.
    With ``accept_rollback``, a state older than the last one signed for its run, or
    one copied or moved from another work directory, is accepted here as it is.
    """
    path = Path.cwd() / path
    data, record, verdict = _read(path)
    moved = _moved_reference(workflow, path, record) if workflow is not None else None
    if moved is None and verdict.ok and not accept_rollback:  # nothing to do, no lock to take
        return printable(
            f"{path} is already signed with your key ({_what(data, record)}); nothing was changed"
        )
    instance = _instance_name(path)
    if instance is None:
        return _sign(path, moved=moved, accept_rollback=accept_rollback)
    from ..adapters.file_bridge import FileBridge

    with FileBridge(path.parent, instance).lock():
        return _sign(path, moved=moved, accept_rollback=accept_rollback)


def _accepted_here(path: Path, data: dict[str, Any], record: EngineRecord) -> str:
    """``data`` made this work directory's latest state of its run: its home is here, its
    next event number follows the run's event log, and the register notes its
    revision. Returns what was accepted, in words."""
    from ..storage.checkpoints import home_for, last_signed, note_checkpoint
    from ..storage.ndjson import last_line
    from ..storage.runs import EVENTS_FILE

    # A live state lives in the work directory; a run's history state in its run's own.
    workdir = path.parent if _instance_name(path) else path.parent.parent.parent.parent
    engine = data["phase_data"]["x_orchestrator"]
    here = home_for(engine, workdir)
    was_elsewhere = engine.get("home") not in (None, here)
    engine["home"] = here
    events = workdir / ".orchestrator" / "runs" / record.run_id / EVENTS_FILE
    line = last_line(events) if events.is_file() else None
    logged = _sequence_in(line)
    if logged >= record.next_seq:  # the log went further: its numbers stay increasing
        engine["next_seq"] = logged + 1
    last = last_signed(record.run_id, record.started_at, here)
    atomic_write(path, signed_bytes(data, {}))
    note_checkpoint(record.run_id, record.started_at, here, record.revision)
    told = [f"checkpoint {record.revision} accepted as the run's latest"]
    if last is not None and last > record.revision:
        told[0] += f" (the last signed was {last})"
    if was_elsewhere:
        told.append("it was signed for another work directory and now belongs to this one")
    return "; ".join(told)


def _sequence_in(line: bytes | None) -> int:
    try:
        number = json.loads(line)["x_seq"] if line else 0
    except (ValueError, KeyError, TypeError):
        return 0
    return number if isinstance(number, int) else 0


def _instance_name(path: Path) -> str | None:
    """The workflow a live instance's state file is named for (``.NAME-state.json``);
    ``None`` for any other file (a run's history state)."""
    name = path.name
    if name.startswith(".") and name.endswith(_LIVE_SUFFIX) and len(name) > len(_LIVE_SUFFIX) + 1:
        return name[1 : -len(_LIVE_SUFFIX)]
    return None


def _moved_reference(workflow: str, path: Path, record: EngineRecord) -> str:
    """``workflow`` as the reference a state records, once it loads and is the same
    workflow (by name) as the state's: its file's name says it (``.NAME-state.json``),
    else the workflow ``record`` names, if that still loads."""
    from ..engine.loader import locate_workflow

    reference, new_cls = locate_workflow(workflow, base_dir=Path.cwd())
    old_name = _instance_name(path) or _workflow_name(record.workflow)
    if old_name is not None and new_cls.name != old_name:
        raise UsageError(
            f"--workflow {workflow}: that workflow is {new_cls.name!r}, this state is "
            f"{old_name!r}'s; name the same workflow at its new place"
        )
    return reference


def _workflow_name(reference: str) -> str | None:
    """The name of the workflow ``reference`` names, if it still loads."""
    from .._errors import WorkflowNotFoundError
    from ..engine.loader import load_workflow

    try:
        name: str = load_workflow(reference).name
    except WorkflowNotFoundError:
        return None  # moved away: the state file's name tells it (checked by resume)
    return name


def _sign(path: Path, *, moved: str | None = None, accept_rollback: bool = False) -> str:
    data, record, verdict = _read(path)  # again: under the lock, when there is one
    if accept_rollback:
        accepted = _accepted_here(path, data, record)
        return printable(
            f"signed {path}: {accepted}: {_what(data, record)}; with the key {key_file()}"
        )
    if moved is not None:
        before_ref = record.workflow
        data["phase_data"]["x_orchestrator"]["workflow"] = moved
        data, record = _reread(path, data)
        if _instance_name(path):  # the project moved, its work directory with it
            _accepted_here(path, data, record)
        else:
            atomic_write(path, signed_bytes(data, {}))
        return printable(
            f"signed {path}, pointed at {moved} (was {before_ref}): {_what(data, record)}; "
            f"with the key {key_file()}"
        )
    atomic_write(path, signed_bytes(data, {}))
    if verdict.ok:
        before = "it was already signed"
    elif verdict.changed:
        before = "changed since it was signed: " + ", ".join(w for _, _, w in verdict.changed)
    elif verdict.rule == "signature-missing":
        before = "it carried no signature"
    else:
        before = verdict.reason
    return printable(
        f"signed {path} as it is now: {_what(data, record)}; {before}; with the key {key_file()}"
    )


def _what(data: dict[str, Any], record: EngineRecord) -> str:
    """What a person trusts: the workflow that will be imported, the phase that runs."""
    return (
        f"workflow {record.workflow} (run {record.run_id}), phase {data['phase']} "
        f"({data['phase_name']}), {record.status}, {len(record.journal)} journal entries, "
        f"{len(data.get('agent_requests') or [])} agent requests"
    )


def _reread(path: Path, data: dict[str, Any]) -> tuple[dict[str, Any], EngineRecord]:
    """``data`` checked again as a state of this engine, after a change."""
    source = str(path)
    return data, load_record(parse_state(data, source=source), source=source)


def _read(path: Path) -> tuple[dict[str, Any], EngineRecord, Verdict]:
    """The state's JSON data, its engine record, and what its signature says; anything
    that is not a state of this engine is refused."""
    source = str(path)
    try:
        raw = read_regular_file(path, max_bytes=STATE_MAX_BYTES)
        data = loads_strict(raw, source=source, allow_lone_surrogates=True)
        record = load_record(parse_state(data, source=source), source=source)
    except FileNotFoundError:
        raise UsageError(
            f"{path}: no such file; name a state file (.<workflow>-state.json in a work "
            "directory, or a run's state.json)"
        ) from None
    except ContractError as exc:
        raise ContractError(
            f"not a state of this engine, so it is not signed: {exc.detail}",
            source=source,
            json_path=exc.json_path,
            rule=exc.rule,
        ) from None
    check_key_outside(path.parent)
    return data, record, judge_signature(data, raw)


def _declare_trust(trust: argparse.ArgumentParser) -> None:
    trust.add_argument(
        "state",
        type=Path,
        metavar="STATE",
        help="the state file: .<workflow>-state.json in a work directory, or a run's "
        "state.json (.orchestrator/runs/<run_id>/state.json)",
    )
    trust.add_argument(
        "--workflow",
        default=None,
        metavar="REFERENCE",
        help="point the state at its workflow's new place first (path/file.py:Class or "
        "pkg.module:Class), for a project that moved; the workflow must have the "
        "instance's name",
    )
    trust.add_argument(
        "--accept-rollback",
        action="store_true",
        help="accept a state put back on purpose: older than the last one signed for its "
        "run, or copied or moved from another work directory (its next events follow the "
        "run's event log)",
    )


def _cmd_trust(args: argparse.Namespace) -> int:
    said = trust_state(args.state, workflow=args.workflow, accept_rollback=args.accept_rollback)
    print(f"orchestrate: {said}", file=sys.stderr)
    return EXIT_OK


COMMANDS = {
    "trust": Command(
        "Sign a state file as it is now, once you have checked it: a state changed by "
        "hand, or begun before states were signed. Commands that act on a state refuse "
        "one whose signature does not hold.",
        _declare_trust,
        _cmd_trust,
    ),
}
