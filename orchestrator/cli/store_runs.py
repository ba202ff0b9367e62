"""Commands on runs in a PostgreSQL store (``--store DSN``): run, resume, retry, cancel,
respond, pending, status. A run there is named by its id (``--run``), not by a work
directory; everything else is what the same command does on files.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import NoInstanceError, StateDamagedError, UsageError
from .._text import printable

if TYPE_CHECKING:
    from ..adapters.postgres.store import PostgresStore
    from ..engine.engine import Engine
    from ..engine.record import Outcome
    from ..formats.bridge import AgentResponse

from .run_store import STORE_ENV, add_store_argument

__all__ = ["STORE_ENV", "add_store_argument"]
EXIT_OK = 0


def store_of(args: argparse.Namespace) -> str | None:
    """The store a command names: ``--store``, else ``$ORCHESTRATOR_STORE``; ``None``: files."""
    dsn = getattr(args, "store", None) or os.environ.get(STORE_ENV) or None
    if dsn is None:
        return None
    from ..adapters.postgres.connection import is_store_dsn

    if not is_store_dsn(dsn):
        where = "--store" if getattr(args, "store", None) else STORE_ENV
        raise UsageError(
            f"{where} {dsn!r}: name a PostgreSQL store as postgresql://USER@HOST/DATABASE "
            "(work directories are named with --workdir)"
        )
    return dsn


def open_store(dsn: str) -> PostgresStore:
    from ..adapters.postgres.store import PostgresStore

    return PostgresStore(dsn)


def required_run(args: argparse.Namespace) -> str:
    run_id = getattr(args, "run", None)
    if not run_id:
        raise UsageError(
            "with --store, name the run: --run ID ('orchestrate status --store' lists them)"
        )
    return str(run_id)


# -- composition --------------------------------------------------------------------------


def engine_for(store: PostgresStore, run_id: str, workflow_cls: Any, agent: str) -> Engine:
    from ..engine.engine import Engine
    from .board import use_store_boards
    from .main import _clock, _invoker

    engine = Engine(
        workflow_cls, bridge=store.bridge(run_id), invoker=_invoker(agent), clock=_clock()
    )
    use_store_boards(engine, store.dsn)  # its task boards live in the store too
    return engine


def recorded_reference(store: PostgresStore, run_id: str) -> str:
    """The workflow a live run records, read from its signed state before anything it
    names is imported; a queued run's from its row."""
    from ..storage.state_key import read_signed

    row = store.conn.execute(
        "select state, workflow_ref, status from runs where run_id = %s", (run_id,)
    ).fetchone()
    if row is None:
        raise NoInstanceError(f"{store.name}: no run {run_id} in this store")
    if row[0] is None:
        if row[2] == "queued":
            return str(row[1])
        raise NoInstanceError(
            f"{store.name}: run {run_id} has ended ({row[2]}); 'orchestrate history --store "
            f"... --run {run_id}' shows it"
        )
    source = f"{store.name} run {run_id}"
    data, _ = read_signed(bytes(row[0]), source=source, peek=True)  # only looked at
    try:
        reference = data["phase_data"]["x_orchestrator"]["workflow"]
    except (KeyError, TypeError):
        reference = None
    if not isinstance(reference, str):
        raise StateDamagedError(
            "no workflow reference recorded, so orchestrate did not write it",
            source=source,
            json_path="$.phase_data.x_orchestrator.workflow",
            rule="required",
        )
    return reference


def run_engine(store: PostgresStore, run_id: str, agent: str) -> Engine:
    from ..engine.loader import load_workflow

    return engine_for(store, run_id, load_workflow(recorded_reference(store, run_id)), agent)


def start_queued(store: PostgresStore, run_id: str, engine: Engine) -> Outcome:
    """Start a queued run with what ``run --queue`` recorded."""
    args = store.run(run_id).start_args or {}
    return engine.start(
        workflow_ref=store.run(run_id).workflow_ref,
        workdir=Path(str(args.get("workdir") or os.getcwd())),
        inputs=dict(args.get("inputs") or {}),
        output_path=args.get("output_path"),
        run_id=run_id,
    )


def report(outcome: Outcome, run_id: str) -> int:
    from .instance import next_step

    print(f"orchestrate: run {run_id}: {printable(outcome.message, lines=True)}", file=sys.stderr)
    if outcome.status == "paused":  # on stderr: stdout is the run's id alone, hosts read it
        then = next_step("paused", bool(outcome.pending), store_run=run_id, wake_at=outcome.wake_at)
        print(f"orchestrate: next: {then}", file=sys.stderr)
    print(run_id)
    return outcome.exit_code


# -- commands -----------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace, dsn: str) -> int:
    from ..engine.loader import locate_workflow
    from .main import _parse_inputs

    reference, workflow_cls = locate_workflow(args.workflow, base_dir=Path.cwd())
    inputs = _parse_inputs(args.input)
    output = str(Path(args.output).resolve()) if args.output else None
    workdir = str((args.workdir or Path.cwd()).resolve())
    run_id = str(uuid.uuid4())
    with open_store(dsn) as store:
        if args.queue:
            store.queue_run(
                run_id=run_id,
                workflow_name=workflow_cls.name,
                workflow_ref=reference,
                start_args={"inputs": inputs, "output_path": output, "workdir": workdir},
            )
            print(f"orchestrate: run {run_id} queued; a worker starts it", file=sys.stderr)
            print(run_id)
            return EXIT_OK
        engine = engine_for(store, run_id, workflow_cls, args.agent)
        outcome = engine.start(
            workflow_ref=reference,
            workdir=Path(workdir),
            inputs=inputs,
            output_path=output,
            run_id=run_id,
        )
        return report(outcome, run_id)


def cmd_resume(args: argparse.Namespace, dsn: str) -> int:
    run_id = required_run(args)
    with open_store(dsn) as store:
        engine = run_engine(store, run_id, args.agent)
        if store.run(run_id).status == "queued":
            return report(start_queued(store, run_id, engine), run_id)
        return report(engine.resume(), run_id)


def cmd_retry(args: argparse.Namespace, dsn: str) -> int:
    run_id = required_run(args)
    with open_store(dsn) as store:
        return report(run_engine(store, run_id, args.agent).retry(run_id=run_id), run_id)


def cmd_cancel(args: argparse.Namespace, dsn: str) -> int:
    run_id = required_run(args)
    with open_store(dsn) as store:
        if store.run(run_id).status == "queued":
            store.conn.execute(
                "update runs set status = 'cancelled', updated_at = now() where run_id = %s "
                "and status = 'queued'",
                (run_id,),
            )
            print(f"orchestrate: run {run_id} cancelled before it started", file=sys.stderr)
            return EXIT_OK
        history = run_engine(store, run_id, "host").cancel()
    print(f"orchestrate: cancelled; history kept in {history}", file=sys.stderr)
    return EXIT_OK


def cmd_respond(
    args: argparse.Namespace, dsn: str, text: str, document: AgentResponse | None
) -> int:
    from .instance import answer_options, choose_request, document_request, response_document

    run_id = required_run(args)
    request_id = args.request_id
    if document is not None:
        request_id = document_request(document, request_id)
    with open_store(dsn) as store:
        pending = [p.request_id for p in store.pending(run_id)]
        request_id = choose_request(pending, request_id, where=f"{store.name} run {run_id}")
        response = document or response_document(request_id, text=text, **answer_options(args))
        store.respond(run_id, response)
    print(f"{run_id} {request_id}")
    return EXIT_OK


def cmd_pending(args: argparse.Namespace, dsn: str) -> int:
    with open_store(dsn) as store:
        found = store.pending(getattr(args, "run", None))
    items = [{"run_id": p.run_id, "request": json.loads(p.document.decode("utf-8"))} for p in found]
    print_pending(items, as_json=args.json)
    return EXIT_OK


def print_pending(items: list[dict[str, Any]], *, as_json: bool) -> None:
    """Pending requests, each with the run it belongs to: JSON, or a line each."""
    if as_json:
        print(json.dumps(items, indent=2, ensure_ascii=False))
        return
    for item in items:
        request = item["request"]
        prompt = " ".join(str(request.get("prompt", "")).split())
        print(
            printable(
                f"{item['run_id']}  {request['request_id']}  {request['agent_name']}  {prompt[:60]}"
            )
        )
    if not items:
        print("orchestrate: no request is pending", file=sys.stderr)


def cmd_status(args: argparse.Namespace, dsn: str) -> int:
    """One run as ``status`` shows a work directory's (with ``--run``), else every run of
    the store, most recently changed first."""
    if getattr(args, "run", None):
        with open_store(dsn) as store:
            summary = describe_run(store, args.run)
        if args.json:
            print(json.dumps(summary, indent=2))
        else:
            from .main import _format_ended, _format_status

            print(_format_ended(summary) if "ended_at" in summary else _format_status(summary))
        return EXIT_OK
    with open_store(dsn) as store:
        rows = store.runs()
    listed = [
        {
            "run_id": r.run_id,
            "workflow": r.workflow_name,
            "status": r.status,
            "pending": r.pending,
            "updated_at": r.updated_at.isoformat(),
        }
        for r in rows
    ]
    if args.json:
        print(json.dumps(listed, indent=2))
        return EXIT_OK
    for item in listed:
        print(
            f"{item['run_id']}  {item['workflow']:<24} {item['status']:<10} "
            f"pending {item['pending']}  {item['updated_at']}"
        )
    if not listed:
        print(f"orchestrate: no run in {store.name}", file=sys.stderr)
    return EXIT_OK


def describe_run(store: PostgresStore, run_id: str) -> dict[str, Any]:
    """``status`` of one run: live (its phase, what it waits for), ended (how, its
    outputs) or queued."""
    from .instance import describe_ended, summarize_state

    row = store.run(run_id)
    if row.status == "queued":
        return {
            "workflow": row.workflow_name,
            "workflow_ref": row.workflow_ref,
            "run_id": run_id,
            "status": "queued",
            "phase": None,
            "phase_name": None,
            "checkpoint_name": None,
            "completed_phases": [],
            "pending": [],
            "request_counts": {},
            "next": "a worker starts it ('orchestrate worker --store ...')",
        }
    state, source = load_run(store, run_id)
    if row.status in ("completed", "cancelled"):
        summary = describe_ended(state, source=source)
        summary["next"] = (
            f"'orchestrate output --store ... --run {run_id}' prints the outputs; "
            f"'orchestrate history --store ... --run {run_id}' tells the run"
        )
        return summary
    return summarize_state(
        state,
        source=source,
        answer_at=lambda request_id: (
            f"orchestrate respond --store ... --run {run_id} --request {request_id}"
        ),
        store_run=run_id,
    )


def cmd_drive(args: argparse.Namespace, dsn: str) -> int:
    """``drive`` on a store: start the run (or go on with ``--run``), answer each pause
    with the handler through the store's mailbox, until the run ends."""
    from ..formats.bridge_codec import parse_response
    from .drive import drive_engine

    if args.handler is None and args.agent == "host":
        raise UsageError("drive needs --handler CMD, or --agent to answer in-process")
    with open_store(dsn) as store:
        if args.run:
            run_id = str(args.run)
            engine = run_engine(store, run_id, args.agent)
            if store.run(run_id).status == "queued":
                outcome = start_queued(store, run_id, engine)
            else:
                outcome = engine.resume()
        elif args.workflow:
            from ..engine.loader import locate_workflow
            from .main import _parse_inputs

            reference, workflow_cls = locate_workflow(args.workflow, base_dir=Path.cwd())
            run_id = str(uuid.uuid4())
            engine = engine_for(store, run_id, workflow_cls, args.agent)
            outcome = engine.start(
                workflow_ref=reference,
                workdir=(args.workdir or Path.cwd()).resolve(),
                inputs=_parse_inputs(args.input),
                output_path=str(Path(args.output).resolve()) if args.output else None,
                run_id=run_id,
            )
        else:
            raise UsageError("with --store, drive starts WORKFLOW or goes on with --run ID")
        print(f"orchestrate: run {run_id}", file=sys.stderr)

        def deliver(document: dict[str, Any]) -> None:
            store.respond(run_id, parse_response(document, source=f"run {run_id} answer"))

        final = drive_engine(engine, outcome, args, workdir=None, deliver=deliver)
    print(run_id)
    return final.exit_code


def load_run(store: PostgresStore, run_id: str) -> tuple[Any, str]:
    """A run's state (live) or its history (ended), signature checked, with every
    archived request whole again; and where it is, for messages."""
    from ..formats.bridge_codec import parse_state, restore_archived
    from ..formats.state_signature import with_signature
    from ..storage.state_key import read_signed

    row = store.conn.execute(
        "select state, history, status from runs where run_id = %s", (run_id,)
    ).fetchone()
    if row is None:
        raise NoInstanceError(f"{store.name}: no run {run_id} in this store")
    raw = row[0] if row[0] is not None else row[1]
    if raw is None:
        raise NoInstanceError(f"{store.name}: run {run_id} is {row[2]}: it has no state yet")
    source = f"{store.name} run {run_id}"
    data, _ = read_signed(bytes(raw), source=source)
    state = parse_state(with_signature(data, None), source=source)
    if row[0] is not None and any(r.x_archived for r in state.agent_requests):
        lines = store.conn.execute(
            "select line from archive where run_id = %s order by seq", (run_id,)
        ).fetchall()
        state = restore_archived(state, b"".join(bytes(r[0]) for r in lines), source=source)
    return state, source


def cmd_rewind(args: argparse.Namespace, dsn: str) -> int:
    """``rewind`` on a store: a live run, or an ended one made live again (a worker, or
    ``resume``, then runs the phase)."""
    from ..engine.loader import load_workflow
    from ..engine.record import load_record

    run_id = required_run(args)
    with open_store(dsn) as store:
        state, source = load_run(store, run_id)
        ended = None if store.run(run_id).status in ("running", "paused") else state
        reference = load_record(state, source=source).workflow
        engine = engine_for(store, run_id, load_workflow(reference), "host")
        message = engine.rewind(args.to, ended=ended)
    print(f"orchestrate: {printable(message)}", file=sys.stderr)
    return EXIT_OK
