"""Replay before deploy: a recorded run, played against the current code, calls no agent.

Each phase of the recorded run is run again with its journal (kept beside its
``results.json`` as ``journal.json``, and in the state for the phase a live run is in):
every ask and step returns what it recorded, nothing new is asked or run, and the first
call that differs is reported with its phase, position and what changed. So a change to
a workflow can be checked, in a test, against the runs it would resume.
"""

from __future__ import annotations

import hmac
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import attrs

from .._errors import (
    HistoryDamagedError,
    NoInstanceError,
    NonDeterminismError,
    OrchestratorError,
    StateDamagedError,
)
from .._text import plural
from ..evidence.documents import JOURNAL_FILE, phase_dir
from ..formats.bridge import CheckpointState
from ..formats.bridge_codec import parse_state, restore_archived
from ..formats.convert import structure
from ..storage.durable import sha256_hex
from ..storage.files import STATE_MAX_BYTES, read_json_file_bytes, read_regular_file
from ..storage.runs import ARCHIVE_FILE, ENGINE_KEY, runs_dir
from .engine import Engine
from .record import EngineRecord, JournalEntry, Pause, copy_json, load_record
from .routing import outputs_at, visits_of
from .workflow import Goto, PhaseResult, PhaseSpec, Workflow

__all__ = ["ReplayReport", "load_recorded_run", "replay_run"]


@attrs.frozen(kw_only=True)
class ReplayReport:
    """What a replay found: the phases that replayed clean, and the first difference."""

    run_id: str
    replayed: tuple[str, ...] = ()
    problem: str | None = None
    phase_name: str | None = None
    position: int | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None

    def describe(self) -> str:
        if self.problem is None:
            phases = ", ".join(self.replayed) or "none"
            return (
                f"run {self.run_id} replays clean ({plural(len(self.replayed), 'phase')}: {phases})"
            )
        return f"run {self.run_id} does not replay: {self.problem}"


def load_recorded_run(
    path: str | Path, *, signed_only: bool = False
) -> tuple[Path, CheckpointState]:
    """A recorded run's directory and its state, every archived request whole again.

    ``path`` is a run's directory (``.orchestrator/runs/<run_id>``, or a copy of one), or
    a state file: a live instance's ``.<workflow>-state.json``, or a run's ``state.json``.
    ``signed_only`` refuses a state whose signature does not hold (``orchestrate replay``
    does; a test's own fixtures are part of the test, and need none).
    """
    given = Path(path)
    state_file = given / "state.json" if given.is_dir() else given
    try:
        data, raw = read_json_file_bytes(
            state_file, max_bytes=STATE_MAX_BYTES, allow_lone_surrogates=True
        )
    except FileNotFoundError:
        raise NoInstanceError(
            f"{state_file}: no recorded run here; name a run's directory "
            "(.orchestrator/runs/<run_id>) or a state file"
        ) from None
    if signed_only:
        from ..storage.state_key import check_signature

        check_signature(data, source=str(state_file), raw=raw)
    state = parse_state(data, source=str(state_file))
    if state_file.name == "state.json":
        run_dir = state_file.parent
    else:
        record = load_record(state, source=str(state_file))
        run_dir = runs_dir(state_file.parent) / record.run_id
    archive = run_dir / ARCHIVE_FILE
    if any(item.x_archived for item in state.agent_requests) and archive.exists():
        lines = read_regular_file(archive, max_bytes=STATE_MAX_BYTES)
        state = restore_archived(state, lines, source=str(archive))
    return run_dir, state


def replay_run(
    path: str | Path, workflow_cls: type[Workflow], *, signed_only: bool = False
) -> ReplayReport:
    """Replay the run at ``path`` (see :func:`load_recorded_run`) against
    ``workflow_cls`` as the code is now, without calling any agent or running any step.

    Phases replay in the order the run took them (a ``Goto`` entered some again), each
    visit from its own journal; the report names the first call the code makes
    differently (or a phase that now raises, or now goes elsewhere than the run went),
    else says the run replays clean. A phase the recorded run was waiting in replays up
    to where it waits.
    """
    run_dir, state = load_recorded_run(path, signed_only=signed_only)
    record = load_record(state, source=str(run_dir))
    engine = Engine(workflow_cls, bridge=_NoStore(), clock=_EndOfTime())
    engine.replay_only = True
    workflow = workflow_cls(copy_json(record.inputs))
    done = state.completed_phases
    # The route the run took: each completed visit, then the phase it is in now.
    visits = [p.phase_name for p in done]
    if record.status != "completed":
        visits.append(state.phase_name)
    replayed: list[str] = []
    for index, name in enumerate(visits):
        try:
            spec = workflow_cls.phase_named(name)
        except KeyError:
            return ReplayReport(
                run_id=record.run_id,
                replayed=tuple(replayed),
                problem=f"the run was in phase {name!r}, which the workflow no longer declares",
                phase_name=name,
            )
        completed = index < len(done)
        visit = visits_of(done[:index], name) + 1
        if completed:
            journal = _journal_of(run_dir, spec.number, spec.name, record.journals, visit)
        else:
            journal = list(record.journal)
        engine.attach(*_as_of(state, record, index, spec, journal, visit))
        try:
            result = engine.run_phase(workflow, spec)
        except Pause:
            break  # the recorded run waits here: replayed as far as it went
        except NonDeterminismError as exc:
            return ReplayReport(
                run_id=record.run_id,
                replayed=tuple(replayed),
                problem=str(exc),
                phase_name=exc.phase_name,
                position=exc.position,
            )
        except Exception as exc:
            if not completed:
                break  # the phase the recorded run failed in fails again: as recorded
            return ReplayReport(
                run_id=record.run_id,
                replayed=tuple(replayed),
                problem=f"phase {spec.name!r} raises on replay: {type(exc).__name__}: {exc}",
                phase_name=spec.name,
            )
        routed = completed and (bool(record.route) or isinstance(result, Goto))
        changed = _route_changed(workflow_cls, spec, result, visits, index) if routed else None
        if changed:
            return ReplayReport(
                run_id=record.run_id,
                replayed=tuple(replayed),
                problem=changed,
                phase_name=spec.name,
            )
        replayed.append(spec.name)
    return ReplayReport(run_id=record.run_id, replayed=tuple(replayed))


def _as_of(
    state: CheckpointState,
    record: EngineRecord,
    index: int,
    spec: PhaseSpec,
    journal: list[JournalEntry],
    visit: int,
) -> tuple[CheckpointState, EngineRecord]:
    """The state and record a replay attaches to run visit number ``index`` of the
    recorded run's route: the outputs of the visits before it, and its journal."""
    done = state.completed_phases
    if record.route:
        earlier, _ = outputs_at(state.phase_data, record, done, index)
    else:
        before = {p.phase_name for p in done[:index]}
        earlier = {k: v for k, v in state.phase_data.items() if k in before}
    return (
        attrs.evolve(
            state,
            phase=spec.number,
            phase_name=spec.name,
            completed_phases=list(done[:index]),
            phase_data={**copy_json(earlier), ENGINE_KEY: state.phase_data.get(ENGINE_KEY)},
        ),
        attrs.evolve(
            record,
            journal=journal,
            evidence=False,
            status="running",
            reopened=False,
            marks=[],
            events=[],
            visit=visit if visit > 1 else None,
        ),
    )


def _route_changed(
    workflow_cls: type[Workflow],
    spec: PhaseSpec,
    result: PhaseResult | Goto,
    visits: list[str],
    index: int,
) -> str | None:
    """What differs between where visit number ``index`` of the run's route went next
    and where the code now goes; ``None`` when they agree."""
    went = visits[index + 1] if index + 1 < len(visits) else None
    following = workflow_cls.phase_entered(spec, result)
    goes = None if following is None else following.name
    if goes == went:
        return None
    visit = visits[:index].count(spec.name) + 1
    return (
        f"phase {spec.name!r} (visit {visit}) now goes to {_where(goes)}; the recorded run "
        f"went to {_where(went)}"
    )


def _where(name: str | None) -> str:
    return "the end of the run" if name is None else f"phase {name!r}"


def _journal_of(
    run_dir: Path, number: int, name: str, digests: dict[str, Any], visit: int = 1
) -> list[JournalEntry]:
    """A completed phase's journal, from its ``journal.json``: taken only when its bytes
    have the digest the signed state keeps for it (runs recorded before digests were
    kept have none to compare)."""
    where = run_dir / phase_dir(number, name, visit) / JOURNAL_FILE
    try:
        data, raw = read_json_file_bytes(where, allow_lone_surrogates=True)
    except FileNotFoundError:
        raise StateDamagedError(
            f"phase {name} has no {JOURNAL_FILE}: the run was recorded by a version that kept "
            "no journals, or its evidence is not all here; replay a newer run",
            source=str(where),
            json_path="$",
            rule="required",
        ) from None
    expected = digests.get(phase_dir(number, name, visit))
    if isinstance(expected, str) and not hmac.compare_digest(sha256_hex(raw), expected):
        raise HistoryDamagedError(
            f"phase {name}'s journal changed since it was written: its digest is not the "
            f"one the signed state keeps for it (sha256 {expected[:16]}...)",
            source=str(where),
            rule="digest",
        )
    entries: Any = data.get("entries") if isinstance(data, dict) else None
    return list(structure(entries, list[JournalEntry], source=str(where)))


class _EndOfTime:
    """The clock of a replay: every recorded timer is due."""

    def now(self) -> datetime:
        return datetime(9999, 1, 1, tzinfo=timezone.utc)


class _NoStore:
    """A replay writes nothing: any call on its bridge is a bug of the replay."""

    location = "<replay>"

    def __getattr__(self, name: str) -> Any:
        raise OrchestratorError(f"a replay does not {name}: it writes nothing")
