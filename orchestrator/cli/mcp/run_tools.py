"""The run tools of ``orchestrate mcp``, over the :class:`orchestrator._ports.RunStore` port.

Plain functions of JSON in and JSON out, one per tool, with no MCP in them: the server
(:mod:`.server`) names them, checks nothing itself and turns an error into a tool error.
Every answer goes through the store's ``respond`` (the answer gate); every run is found
in one of the stores the server was given, and nothing else is reached.
"""

from __future__ import annotations

import ast
import inspect
import json
import threading
import uuid
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..._errors import NoInstanceError, UsageError
from ..._ports import (
    ListRunsInput,
    PendingInput,
    ReadEventsInput,
    RespondInput,
    RunFileInput,
    RunInput,
    SendSignalInput,
)

if TYPE_CHECKING:
    from ..._ports import RunStore
    from ...engine.record import Outcome
    from ...formats.bridge import AgentResponse


class RunTools:
    """The runs of the stores given (work directories' files, a PostgreSQL store): new
    runs start in ``stores[0]``, working in ``workdir``; ``workflows`` are the references
    ``start_run`` may start (besides the installed entry points)."""

    def __init__(self, stores: list[RunStore], *, workdir: Path, workflows: list[str]) -> None:
        if not stores:
            raise UsageError(
                "orchestrate mcp: no store to serve: give --workdir DIR or --store DSN"
            )
        self.stores = stores
        self.workdir = workdir
        self.workflows = workflows
        # One tool at a time touches a run: the engine is not shared between threads.
        self.lock = threading.Lock()

    def close(self) -> None:
        for store in self.stores:
            store.close()

    # -- finding things ---------------------------------------------------------------

    def store_of(self, run_id: str) -> RunStore:
        """The store that holds run ``run_id``."""
        for store in self.stores:
            try:
                store.read_run(RunInput(run_id=run_id))
            except NoInstanceError:
                continue
            return store
        served = ", ".join(s.name for s in self.stores)
        raise NoInstanceError(f"run_id {run_id!r}: no such run in {served}; 'status' lists runs")

    def _startable(self) -> dict[str, str]:
        """``{reference or name: what start_run records}`` for every workflow offered."""
        from importlib.metadata import entry_points

        from ...engine.loader import ENTRY_POINT_GROUP

        offered = {reference: reference for reference in self.workflows}
        for entry in entry_points(group=ENTRY_POINT_GROUP):
            offered.setdefault(entry.name, entry.name)
        return offered

    # -- the tools --------------------------------------------------------------------

    def list_workflows(self, _: dict[str, Any]) -> dict[str, Any]:
        from ...engine.loader import locate_workflow

        listed: list[dict[str, Any]] = []
        for reference in self._startable():
            try:
                recorded, workflow_cls = locate_workflow(reference, base_dir=Path.cwd())
            except Exception as exc:  # one that does not load is listed with why
                listed.append({"workflow": reference, "problem": " ".join(str(exc).split())})
                continue
            listed.append(
                {
                    "workflow": reference,
                    "name": workflow_cls.name,
                    "reference": recorded,
                    "description": inspect.getdoc(workflow_cls) or "",
                    "inputs": workflow_inputs(workflow_cls),
                }
            )
        return {"workflows": listed}

    def start_run(self, arguments: dict[str, Any]) -> dict[str, Any]:
        from ...engine.loader import locate_workflow
        from ..engines import engine_for
        from ..telemetry import finish

        workflow = str(arguments["workflow"])
        if workflow not in self._startable():
            offered = ", ".join(self._startable()) or "none (give orchestrate mcp --workflow REF)"
            raise UsageError(f"workflow {workflow!r} is not served here; served: {offered}")
        inputs = arguments.get("inputs") or {}
        if not isinstance(inputs, dict):
            raise UsageError("inputs: give an object of input names and values")
        output = self._output_path(arguments.get("output"))
        store = self.stores[0]
        reference, workflow_cls = locate_workflow(workflow, base_dir=Path.cwd())
        run_id = str(uuid.uuid4())
        engine = engine_for(store, run_id, workflow_cls, "host", new=True)
        try:
            outcome = engine.start(
                workflow_ref=reference,
                workdir=self.workdir,
                inputs=dict(inputs),
                output_path=output,
                run_id=run_id,
            )
        finally:
            finish(engine)  # the server lives on: its spans go now
        return outcome_document(run_id, outcome)

    def _output_path(self, given: Any) -> str | None:
        """``start_run``'s output path, which must be inside the work directory served."""
        if not given:
            return None
        path = (self.workdir / str(given)).resolve()
        if not path.is_relative_to(self.workdir):
            raise UsageError(
                f"output {given!r} is outside the work directory {self.workdir}: name a "
                "path inside it"
            )
        return str(path)

    def list_pending(self, arguments: dict[str, Any]) -> dict[str, Any]:
        run_id = arguments.get("run_id")
        stores = [self.store_of(run_id)] if run_id else self.stores
        items: list[dict[str, Any]] = []
        for store in stores:
            found = store.pending(PendingInput(run_id=run_id))
            within = _answer_windows(store, {p.run_id for p in found})
            for pending in found:
                request = json.loads(pending.document.decode("utf-8"))
                items.append(pending_item(pending.run_id, request, within))
        return {"pending": items}

    def respond(self, arguments: dict[str, Any]) -> dict[str, Any]:
        run_id = str(arguments["run_id"])
        store = self.store_of(run_id)
        response = response_of(arguments)
        pending = [p.request_id for p in store.pending(PendingInput(run_id=run_id))]
        if response.request_id not in pending:
            shown = ", ".join(pending) or "none"
            raise UsageError(
                f"request_id {response.request_id!r} is not pending in run {run_id} "
                f"(pending: {shown}); nothing was written"
            )
        where = store.respond(RespondInput(run=RunInput(run_id=run_id), response=response))
        answered = store.answered(RunInput(run_id=run_id))
        waiting = [r for r in pending if r not in answered]
        result: dict[str, Any] = {
            "run_id": run_id,
            "request_id": response.request_id,
            "recorded": where,
            "still_pending": waiting,
        }
        if arguments.get("resume") and not waiting:
            result["resumed"] = self.resume({"run_id": run_id})
        return result

    def signal(self, arguments: dict[str, Any]) -> dict[str, Any]:
        run_id, name = str(arguments["run_id"]), str(arguments["name"])
        signal_id = arguments.get("signal_id")
        sent = SendSignalInput(
            run=RunInput(run_id=run_id),
            name=name,
            payload=arguments.get("payload"),
            signal_id=None if signal_id is None else str(signal_id),
        )
        kept = self.store_of(run_id).send_signal(sent)
        result: dict[str, Any] = {"run_id": run_id, "name": name, "signal_id": kept}
        if arguments.get("resume"):
            result["resumed"] = self.resume({"run_id": run_id})
        return result

    def resume(self, arguments: dict[str, Any]) -> dict[str, Any]:
        from ..engines import advance, run_engine
        from ..run_commands import watch_run_board
        from ..telemetry import finish

        run_id = str(arguments["run_id"])
        store = self.store_of(run_id)
        run = RunInput(run_id=run_id)
        engine = run_engine(store, run, "host")
        watch_run_board(store, run)
        try:
            return outcome_document(run_id, advance(store, run, engine))
        finally:
            finish(engine)  # the server lives on: its spans go now

    def status(self, arguments: dict[str, Any]) -> dict[str, Any]:
        from ..run_commands import describe_run

        run_id = arguments.get("run_id")
        if run_id:
            store = self.store_of(str(run_id))
            return describe_run(store, store.read_run(RunInput(run_id=str(run_id))))
        runs = [
            {
                "run_id": r.run_id,
                "workflow": r.workflow,
                "status": r.status,
                "phase": r.phase,
                "pending": r.pending,
                "updated_at": r.updated_at.isoformat(),
                "store": store.name,
            }
            for store in self.stores
            for r in store.list_runs(ListRunsInput())
        ]
        return {"runs": runs}

    def output(self, arguments: dict[str, Any]) -> dict[str, Any]:
        from ...storage.runs import ENGINE_KEY

        run_id = str(arguments["run_id"])
        found = self.store_of(run_id).read_run(RunInput(run_id=run_id))
        if found.state is None:
            raise NoInstanceError(f"run {run_id} is {found.status}: it has no output yet")
        outputs = {k: v for k, v in found.state.phase_data.items() if k != ENGINE_KEY}
        phase = arguments.get("phase")
        if phase is None:
            return {"run_id": run_id, "outputs": outputs}
        if phase not in outputs:
            done = ", ".join(outputs) or "none yet"
            raise UsageError(f"phase {phase!r} has no output (phases with one: {done})")
        return {"run_id": run_id, "phase": phase, "output": outputs[phase]}

    def events(self, arguments: dict[str, Any]) -> dict[str, Any]:
        run_id = str(arguments["run_id"])
        after = int(arguments.get("after_seq") or 0)
        lines = self.store_of(run_id).events(ReadEventsInput(run_id=run_id, after=after))
        events = [json.loads(line) for _, line in lines]
        last = lines[-1][0] if lines else after
        return {"run_id": run_id, "events": events, "last_seq": last}

    def cancel(self, arguments: dict[str, Any]) -> dict[str, Any]:
        from ..engines import run_engine

        run_id = str(arguments["run_id"])
        store = self.store_of(run_id)
        run = RunInput(run_id=run_id)
        if store.cancel_queued(run):
            return {
                "run_id": run_id,
                "status": "cancelled",
                "message": "cancelled before it started",
            }
        history = run_engine(store, run, "host").cancel()
        return {"run_id": run_id, "status": "cancelled", "message": f"history kept in {history}"}

    def retry(self, arguments: dict[str, Any]) -> dict[str, Any]:
        from ..engines import run_engine

        run_id = str(arguments["run_id"])
        store = self.store_of(run_id)
        engine = run_engine(store, RunInput(run_id=run_id), "host")
        return outcome_document(run_id, engine.retry(run_id=run_id))

    def rewind(self, arguments: dict[str, Any]) -> dict[str, Any]:
        from ...engine.loader import load_workflow
        from ...engine.record import load_record
        from ..engines import engine_for

        run_id = str(arguments["run_id"])
        store = self.store_of(run_id)
        found = store.read_run(RunInput(run_id=run_id, signed_only=True))
        if found.state is None:
            raise NoInstanceError(f"run {run_id} is {found.status}: it has no state yet")
        reference = load_record(found.state, source=found.source).workflow
        engine = engine_for(store, run_id, load_workflow(reference), "host", new=not found.live)
        message = engine.rewind(arguments["to"], ended=None if found.live else found.state)
        return {"run_id": run_id, "message": message}

    def run_files(self, run_id: str) -> list[str]:
        return self.store_of(run_id).run_files(RunInput(run_id=run_id))

    def run_file(self, run_id: str, path: str) -> bytes | None:
        """A file of the run's evidence, read by the store under its own rules (no link
        followed, nothing outside the run's directory)."""
        return self.store_of(run_id).read_run_file(RunFileInput(run_id=run_id, path=path))


def outcome_document(run_id: str, outcome: Outcome) -> dict[str, Any]:
    """Where a run stands after a tool advanced it."""
    document: dict[str, Any] = {
        "run_id": run_id,
        "status": outcome.status,
        "message": outcome.message,
        "pending": [r.request_id for r in outcome.pending] if outcome.status == "paused" else [],
    }
    if outcome.wake_at is not None:
        document["wake_at"] = outcome.wake_at
    if outcome.signal is not None:
        document["waiting_for_signal"] = outcome.signal
    return document


def pending_item(
    run_id: str, request: dict[str, Any], within: dict[tuple[str, str], str]
) -> dict[str, Any]:
    """A pending request as ``list_pending`` gives it."""
    context = request.get("context") or {}
    return {
        "run_id": run_id,
        "request_id": request["request_id"],
        "agent": request["agent_name"],
        "phase": request.get("phase_name") or request.get("phase"),
        "prompt": request.get("prompt", ""),
        "x_answer_schema": context.get("x_answer_schema"),
        "deadline": within.get((run_id, request["request_id"])),
        "attempt": int(request.get("retry_count") or 0) + 1,
        "x_previous_error": context.get("x_previous_error"),
        # what else the request carries (a task's id, board and packet for a subagent)
        "context": {k: v for k, v in context.items() if k != "x_answer_schema"},
    }


def _answer_windows(store: RunStore, run_ids: set[str]) -> dict[tuple[str, str], str]:
    """``{(run, request): deadline}`` for the pending requests whose ask set one."""
    from ...formats.bridge import HistoryStatus
    from ...formats.times import format_time, parse_time

    deadlines: dict[tuple[str, str], str] = {}
    for run_id in run_ids:
        state = store.read_run(RunInput(run_id=run_id)).state
        for record in state.agent_requests if state is not None else []:
            if record.status is not HistoryStatus.PENDING or record.x_answer_within is None:
                continue
            if record.x_request is None:
                continue
            asked = parse_time(record.x_request.created_at)
            due = asked + timedelta(seconds=record.x_answer_within)
            deadlines[(run_id, record.request_id)] = format_time(due)
    return deadlines


def response_of(arguments: dict[str, Any]) -> AgentResponse:
    """The response document ``respond`` was given: ``document`` whole, or one made of
    ``answer`` or ``error`` and ``metadata``; checked as ``resume`` checks one."""
    from ..._errors import ContractError
    from ...formats.bridge_codec import parse_response
    from ..instance import response_document

    given = [k for k in ("answer", "error", "document") if arguments.get(k) is not None]
    if len(given) != 1:
        raise UsageError(
            "respond: give exactly one of answer, error or document; nothing was written"
        )
    if given == ["document"]:
        document = arguments["document"]
        if arguments.get("request_id") and document.get("request_id") != arguments["request_id"]:
            raise UsageError(
                f"request_id {arguments['request_id']!r}, but the document answers "
                f"{document.get('request_id')!r}; nothing was written"
            )
        try:
            return parse_response(document, source="document")
        except ContractError as exc:
            raise UsageError(f"{exc}; nothing was written") from None
    request_id = arguments.get("request_id")
    if not request_id:
        raise UsageError("request_id: name the request this answers; nothing was written")
    metadata = arguments.get("metadata") or {}
    model, tokens, confidence = (metadata.get(k) for k in ("model", "tokens_used", "confidence"))
    if given == ["error"]:
        error = arguments["error"]
        kind = str(error.get("type") or "UNKNOWN")
        status = "timeout" if kind == "TIMEOUT" else "error"
        return response_document(
            str(request_id),
            text=str(error.get("message") or kind),
            status=status,
            error_type=kind,
            model=model,
            tokens_used=tokens,
            confidence=confidence,
        )
    answer = arguments["answer"]
    text = answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)
    return response_document(
        str(request_id), text=text, model=model, tokens_used=tokens, confidence=confidence
    )


def workflow_inputs(workflow_cls: type[Any]) -> list[dict[str, Any]]:
    """The inputs a workflow's code reads (``self.inputs["x"]``: required;
    ``self.inputs.get("x")``: optional), found in its source."""
    try:
        tree = ast.parse(inspect.getsource(workflow_cls))
    except (OSError, TypeError, SyntaxError):
        return []
    found: dict[str, bool] = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Subscript)
            and _is_self_inputs(node.value)
            and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str)
        ):
            found[node.slice.value] = True
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and _is_self_inputs(node.func.value)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.setdefault(node.args[0].value, False)
    return [{"name": name, "required": required} for name, required in found.items()]


def _is_self_inputs(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "inputs"
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )
