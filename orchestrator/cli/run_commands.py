"""The commands on runs, on whichever store the command names: run, resume, retry,
rewind, status, respond, pending, drive, cancel, history, output.

Each chooses its store once (:mod:`orchestrator.cli.run_store`) and then talks to the
:class:`orchestrator._ports.RunStore` port only: the same code for a work directory's
files and for a PostgreSQL store.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import AnswerRefusedError, UsageError
from .._ports import (
    AdvancedInput,
    AnswerInput,
    ListRunsInput,
    PendingInput,
    QueueRunInput,
    RespondInput,
    RunInput,
    RunNotNamedError,
)
from .._text import printable
from .common import read_prices
from .run_store import open_run_store, workdir_of

if TYPE_CHECKING:
    from .._ports import RunStore, StoredRun
    from ..engine.record import Outcome
    from ..evidence.usage import Prices
    from ..formats.bridge import CheckpointState

EXIT_OK, EXIT_USAGE = 0, 2


def report(store: RunStore, outcome: Outcome, run_id: str) -> int:
    """What a command that advanced a run says: the outcome and the next step on stderr;
    on stdout what its host reads (the request files, or the run's id)."""
    from .hints import Mode, pause_hint, run_options

    named = store.named_run(run_id)
    which = f"run {named}: " if named else ""
    print(f"orchestrate: {which}{printable(outcome.message, lines=True)}", file=sys.stderr)
    pending = [r.request_id for r in outcome.pending] if outcome.status == "paused" else []
    then = pause_hint(outcome, Mode.CLI, store_run=named, options=run_options(store, run_id))
    if then is not None:
        print(f"orchestrate: next: {then}", file=sys.stderr)
    for line in store.host_lines(AdvancedInput(run_id=run_id, pending=pending)):
        print(line)
    return outcome.exit_code


def _start(store: RunStore, args: argparse.Namespace) -> tuple[Any, Outcome, str]:
    """Start ``args.workflow`` as a new run of ``store``: its engine, outcome and id."""
    from ..engine.loader import locate_workflow
    from .common import parse_inputs as _parse_inputs
    from .engines import engine_for

    workdir = workdir_of(args)
    reference, workflow_cls = locate_workflow(args.workflow, base_dir=Path.cwd())
    run_id = str(uuid.uuid4())
    engine = engine_for(store, run_id, workflow_cls, args.agent, new=True)
    outcome = engine.start(
        workflow_ref=reference,
        workdir=workdir,
        inputs=_parse_inputs(args.input),
        output_path=str(Path(args.output).resolve()) if args.output else None,
        run_id=run_id,
    )
    return engine, outcome, run_id


def cmd_run(args: argparse.Namespace) -> int:
    with closing(open_run_store(args, starts_run=True)) as store:
        if args.queue:
            return _queue(store, args)
        _, outcome, run_id = _start(store, args)
        return report(store, outcome, run_id)


def _queue(store: RunStore, args: argparse.Namespace) -> int:
    from ..engine.loader import locate_workflow
    from .common import parse_inputs as _parse_inputs

    reference, workflow_cls = locate_workflow(args.workflow, base_dir=Path.cwd())
    run_id = str(uuid.uuid4())
    output = str(Path(args.output).resolve()) if args.output else None
    start_args = {
        "inputs": _parse_inputs(args.input),
        "output_path": output,
        "workdir": str((args.workdir or Path.cwd()).resolve()),
    }
    store.queue_run(
        QueueRunInput(
            run_id=run_id,
            workflow_name=workflow_cls.name,
            workflow_ref=reference,
            start_args=start_args,
        )
    )
    print(f"orchestrate: run {run_id} queued; a worker starts it", file=sys.stderr)
    print(run_id)
    return EXIT_OK


def cmd_resume(args: argparse.Namespace) -> int:
    from .engines import advance, run_engine

    with closing(open_run_store(args)) as store:
        run = RunInput(run_id=args.run, workflow=args.workflow)
        engine = run_engine(store, run, args.agent)
        watch_run_board(store, run)
        return report(store, advance(store, run, engine), args.run or "")


def watch_run_board(store: RunStore, run: RunInput) -> None:
    """Subagents of the run's board that stopped heartbeating are timed out first, so a
    resume reassigns their tasks instead of waiting for them (unless another pass is
    timing them out right now)."""
    board_store = store.run_board(run)
    if board_store is None:
        return  # a run without a board imports none of it: a host resumes once per pause
    from ..board.board import Board
    from ..board.handoff import watch_board

    try:
        watch_board(Board(store=board_store), store)
    finally:
        board_store.close()


def cmd_retry(args: argparse.Namespace) -> int:
    from .engines import run_engine

    with closing(open_run_store(args)) as store:
        engine = run_engine(store, RunInput(run_id=args.run, workflow=args.workflow), args.agent)
        return report(store, engine.retry(run_id=args.run), args.run or "")


def cmd_rewind(args: argparse.Namespace) -> int:
    """A live run, or an ended one made live again (``resume``, or a worker, then runs
    the phase)."""
    from ..engine.loader import load_workflow
    from ..engine.record import load_record
    from .engines import engine_for

    with closing(open_run_store(args)) as store:
        run = RunInput(run_id=args.run, workflow=args.workflow, signed_only=True)
        found, state = _state_of(store, run)
        ended = None if found.live else state
        reference = load_record(state, source=found.source).workflow
        engine = engine_for(
            store, found.run_id, load_workflow(reference), "host", new=not found.live
        )
        message = engine.rewind(args.to, ended=ended)
    print(f"orchestrate: {printable(message)}", file=sys.stderr)
    return EXIT_OK


def _state_of(store: RunStore, run: RunInput) -> tuple[StoredRun, CheckpointState]:
    """The run and its state, which it must have (a queued run has none yet)."""
    from .._errors import NoInstanceError

    found = store.read_run(run)
    if found.state is None:
        raise NoInstanceError(f"{found.source} is {found.status}: it has no state yet")
    return found, found.state


def cmd_cancel(args: argparse.Namespace) -> int:
    from .engines import run_engine

    with closing(open_run_store(args)) as store:
        run = RunInput(run_id=args.run, workflow=args.workflow)
        if args.force:
            kept = store.set_aside(run)
            print(
                f"orchestrate: instance removed; its state file was moved to {kept}",
                file=sys.stderr,
            )
            return EXIT_OK
        if store.cancel_queued(run):
            print(f"orchestrate: run {args.run} cancelled before it started", file=sys.stderr)
            return EXIT_OK
        history = run_engine(store, run, "host").cancel()
    print(f"orchestrate: cancelled; history kept in {history}", file=sys.stderr)
    return EXIT_OK


def cmd_respond(args: argparse.Namespace) -> int:
    from ..formats.bridge import HistoryStatus
    from .instance import (
        answer_options,
        choose_request,
        document_request,
        read_response_document,
        response_document,
    )

    document = read_response_document(args.document) if args.document else None
    text = "" if document is not None else answer_text(args)
    request_id = args.request_id
    if document is not None:
        request_id = document_request(document, request_id)
    with closing(open_run_store(args)) as store:
        run = RunInput(run_id=args.run, workflow=args.workflow, signed_only=True, live_only=True)
        found = store.read_run(run)
        records = found.state.agent_requests if found.state is not None else []
        pending = [r.request_id for r in records if r.status is HistoryStatus.PENDING]
        # The requests of its child runs are answered here too (one inbox).
        children = children_pending(store, found)
        request_id = choose_request(pending + list(children), request_id, where=found.source)
        response = document or response_document(request_id, text=text, **answer_options(args))
        where = RunInput(run_id=found.run_id or args.run, workflow=args.workflow)
        if request_id in children:
            where = RunInput(run_id=children[request_id])
        try:
            print(store.respond(RespondInput(run=where, response=response)))
        except AnswerRefusedError as refused:
            if not args.json:
                raise
            print(json.dumps(refusal_document(refused), indent=2, ensure_ascii=False))
            return EXIT_USAGE
    return EXIT_OK


def children_pending(store: RunStore, found: StoredRun) -> dict[str, str]:
    """The pending requests of a live run's child runs (and theirs): request id -> the
    child run's id."""
    if found.state is None or not found.live or not found.run_id:
        return {}
    return {
        p.request_id: p.run_id
        for p in store.pending(PendingInput(run_id=found.run_id))
        if p.run_id != found.run_id
    }


def refusal_document(refused: AnswerRefusedError) -> dict[str, Any]:
    """A refusal as a host reads it: why, the one line a person reads, and the facts
    (the field, what was expected and what came; the answer schema; the first answer)."""
    return {"refused": True, "reason": refused.reason, "message": str(refused), **refused.details}


def answer_text(args: argparse.Namespace) -> str:
    """The answer ``respond`` was given: --text, --file or standard input, as UTF-8."""
    if args.stdin:
        try:
            text = sys.stdin.buffer.read().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UsageError(f"standard input is not UTF-8 text ({exc})") from None
    elif args.file is not None:
        try:
            text = args.file.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--file {args.file}: cannot read it as UTF-8 text ({exc})") from None
    else:
        text = args.text
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:  # bytes the locale could not decode
            raise UsageError(
                f"--text is not UTF-8 text (position {exc.start}); pass UTF-8, or the answer "
                "in a file with --file"
            ) from None
    return str(text)


def cmd_pending(args: argparse.Namespace) -> int:
    with closing(open_run_store(args)) as store:
        found = store.pending(
            PendingInput(run_id=args.run, workflow=getattr(args, "workflow", None))
        )
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


def cmd_status(args: argparse.Namespace) -> int:
    """One run (the store's own, or ``--run``'s), else every run of the store, most
    recently changed first."""
    from .instance import format_ended, format_status

    with closing(open_run_store(args)) as store:
        try:
            found = store.read_run(RunInput(run_id=args.run, workflow=args.workflow))
        except RunNotNamedError:
            return _list_runs(store, as_json=args.json)
        summary = describe_run(store, found, prices=read_prices(args.prices))
        named = store.named_run(found.run_id) is not None
    if args.json:
        print(json.dumps(summary, indent=2))
    elif "ended_at" in summary:
        print(format_ended(summary, named=named))
    else:
        print(format_status(summary))
    return EXIT_OK


def _list_runs(store: RunStore, *, as_json: bool) -> int:
    listed = [
        {
            "run_id": r.run_id,
            "workflow": r.workflow,
            "status": r.status,
            "pending": r.pending,
            "updated_at": r.updated_at.isoformat(),
        }
        for r in store.list_runs(ListRunsInput())
    ]
    if as_json:
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


def describe_run(
    store: RunStore, found: StoredRun, *, prices: Prices | None = None
) -> dict[str, Any]:
    """``status`` of one run: live (its phase, what it waits for), ended (how, its
    outputs) or queued; ``prices`` turns its tokens into cost."""
    from ..formats.bridge import HistoryStatus
    from .hints import run_options
    from .instance import describe_ended, summarize_state

    named = store.named_run(found.run_id)
    options = run_options(store, found.run_id)
    if found.state is None:
        return {
            "workflow": found.workflow_name,
            "workflow_ref": found.workflow_ref,
            "run_id": found.run_id,
            "status": found.status,
            "phase": None,
            "phase_name": None,
            "checkpoint_name": None,
            "completed_phases": [],
            "pending": [],
            "request_counts": {},
            "next": "a worker starts it ('orchestrate worker --store ...')",
        }
    if not found.live:
        summary = describe_ended(found.state, source=found.source, prices=prices)
        if named is not None:
            summary["next"] = (
                f"'orchestrate output{options}' prints the outputs; "
                f"'orchestrate history{options}' tells the run"
            )
        return summary
    records = found.state.agent_requests
    count = sum(r.status is HistoryStatus.PENDING for r in records)
    trust = None
    if found.problem is not None:
        trust = (
            "nothing will act on this state until its signature holds: check it, then "
            f"'orchestrate trust {found.source}' signs it as it is ('orchestrate cancel "
            "--force' sets it aside)"
        )
    summary = summarize_state(
        found.state,
        source=found.source,
        answer_at=lambda request_id: store.answer_hint(
            AnswerInput(run_id=found.run_id, request_id=request_id, pending_count=count)
        ),
        signature=found.problem,
        trust_step=trust,
        store_run=named,
        options=options,
        prices=prices,
    )
    if summary["children"]:
        # The child runs' requests: answered from here, as the run's own are (one inbox).
        summary["children_pending"] = [
            {
                "run_id": p.run_id,
                "request_id": p.request_id,
                "agent_name": json.loads(p.document).get("agent_name"),
            }
            for p in store.pending(PendingInput(run_id=found.run_id))
            if p.run_id != found.run_id
        ]
        summary["children_signals"] = _children_signals(store, summary["waiting_for_children"])
    return summary


def _children_signals(store: RunStore, run_ids: list[str]) -> list[dict[str, str]]:
    """The signals the child runs a run waits for wait for: ``{run_id, signal}`` each
    (a host sends them from the parent's place, as it answers the children's asks)."""
    from .._errors import OrchestratorError
    from ..engine.record import load_record

    found: list[dict[str, str]] = []
    for run_id in run_ids:
        try:
            child = store.read_run(RunInput(run_id=run_id))
            if child.state is None:
                continue
            waiting = load_record(child.state, source=child.source).waiting_for_signal
        except OrchestratorError:
            continue  # a child not to be read is told by its own status
        if waiting is not None:
            found.append({"run_id": run_id, "signal": str(waiting.get("name"))})
    return found


def cmd_drive(args: argparse.Namespace) -> int:
    """Start the run (or go on with the store's run, or ``--run``'s), answer each pause
    with the handler through the store's mailbox, until the run ends."""
    from .drive import drive_engine
    from .engines import advance, run_engine

    if args.handler is None and args.agent == "host":
        raise UsageError("drive needs --handler CMD, or --agent to answer in-process")
    with closing(open_run_store(args, starts_run=True)) as store:
        run = RunInput(run_id=args.run)
        if _has_run(store, run):
            engine = run_engine(store, run, args.agent)
            outcome = advance(store, run, engine)
            run_id = args.run or ""
        elif args.workflow:
            engine, outcome, run_id = _start(store, args)
        else:
            raise UsageError(
                f"{store.name}: no run to go on with: name the WORKFLOW to start"
                + (" (or --run ID)" if store.named_run("") is not None else "")
            )
        named = store.named_run(run_id)
        if named is not None:
            print(f"orchestrate: run {named}", file=sys.stderr)
        elif outcome.pending and args.handler is None:
            raise UsageError(
                "requests made before this drive are still pending and no --handler answers "
                "them: give --handler, or answer them with 'orchestrate respond'"
            )
        final = drive_engine(
            engine,
            outcome,
            args,
            workdir=store.mailbox_directory,
            deliver=None if store.mailbox_directory else _delivery(store, run_id),
        )
        for line in store.host_lines(AdvancedInput(run_id=run_id)):
            print(line)
    return final.exit_code


def _has_run(store: RunStore, run: RunInput) -> bool:
    """Whether the store has the run to go on with: ``run.run_id``'s (which must be
    there), or its own live one."""
    from .._errors import NoInstanceError

    if run.run_id is not None:
        return True
    try:
        return store.read_run(RunInput(live_only=True)).live
    except (NoInstanceError, RunNotNamedError):
        return False


def _delivery(store: RunStore, run_id: str) -> Any:
    """Answers delivered to ``run_id`` through the store's mailbox."""
    from ..formats.bridge_codec import parse_response

    def deliver(document: dict[str, Any]) -> None:
        response = parse_response(document, source=f"run {run_id} answer")
        # Judged by the engine, which asks the handler again when the shape is wrong.
        store.respond(
            RespondInput(run=RunInput(run_id=run_id), response=response, check_shape=False)
        )

    return deliver


def load_run(args: argparse.Namespace) -> tuple[Any, str]:
    """The run ``history`` or ``output`` shows: the store's own, or ``--run``'s."""
    with closing(open_run_store(args)) as store:
        found, state = _state_of(store, RunInput(run_id=args.run))
    return state, found.source


def cmd_history(args: argparse.Namespace) -> int:
    from .._ports import ReadEventsInput
    from ..evidence.history import timeline
    from ..evidence.usage import describe_usage, usage_of

    prices = read_prices(args.prices)
    with closing(open_run_store(args)) as store:
        found, state = _state_of(store, RunInput(run_id=args.run))
        lines = store.events(ReadEventsInput(run_id=found.run_id))
    source = found.source
    log = [json.loads(line) for _, line in lines]  # the engine's own log: its timers
    told = timeline(state, log) + describe_usage(usage_of(state.agent_requests, prices=prices))
    print(printable("\n".join(told), lines=True))
    print(f"(from {source})", file=sys.stderr)
    return EXIT_OK


def run_facts(state: Any, *, source: str, prices: Prices | None = None) -> dict[str, Any]:
    """What ``output --json`` tells of the run beside its outputs: its id, status, how
    it failed (the failure and where it was raised), and its tokens (and cost)."""
    from ..engine.record import load_record
    from ..evidence.usage import usage_of

    record = load_record(state, source=source)
    return {
        "run_id": record.run_id,
        "status": record.status,
        "failure": record.failure,
        "failure_trace": record.failure_trace,
        "usage": usage_of(state.agent_requests, prices=prices),
    }


def cmd_output(args: argparse.Namespace) -> int:
    from ..storage.runs import ENGINE_KEY

    state, source = load_run(args)
    outputs = {k: v for k, v in state.phase_data.items() if k != ENGINE_KEY}
    if args.phase is None:
        if args.json:  # no phase is named x_...: the run's own facts go beside the outputs
            outputs["x_run"] = run_facts(state, source=source, prices=read_prices(args.prices))
        print(json.dumps(outputs, indent=2, ensure_ascii=False))
    elif args.phase not in outputs:
        done = ", ".join(outputs) or "none yet"
        raise UsageError(f"{source}: phase {args.phase!r} has no output (phases with one: {done})")
    elif isinstance(outputs[args.phase], str) and not args.json:
        print(outputs[args.phase])
    else:
        print(json.dumps(outputs[args.phase], indent=2, ensure_ascii=False))
    print(f"(from {source})", file=sys.stderr)
    return EXIT_OK
