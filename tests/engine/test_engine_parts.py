"""The engine's parts and what they may share.

- No module-level state carries one engine's run into the next: an engine not given the
  handoff a pause left reads the state from its file; what a pause hands over lives in a
  :class:`PauseHandoff` that a host holds, and is taken once, also from many threads.
- ``ctx.dispatch`` and ``ctx.board`` reach the task board through the ``TaskDispatcher``
  an engine is given or the one installed for the process, and say what to do when none
  is.
- Every answer (the host's, the in-process agent's, a timeout's) is recorded through the
  mailbox's one method.
"""

from __future__ import annotations

import ast
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from orchestrator import Workflow, phase
from orchestrator._errors import UsageError
from orchestrator.adapters.file_bridge import FileBridge
from orchestrator.engine import dispatcher as tasks
from orchestrator.engine.lifecycle import PausedRun, PauseHandoff
from orchestrator.engine.mailbox import Mailbox
from orchestrator.testing import MockAgentInvoker, WorkflowHarness

REPO = Path(__file__).resolve().parents[2]
PROMPT = (
    "You are the writer of a weather report. Write one sentence about the weather where "
    "you are today, and answer with that sentence alone."
)


class TwoAsks(Workflow):
    name = "two-asks"
    agents = ("writer",)

    @phase(1, asks_agents=True)
    def first(self, ctx: Any) -> str:
        return str(ctx.ask("writer", PROMPT))

    @phase(2, asks_agents=True)
    def second(self, ctx: Any) -> str:
        return str(ctx.ask("writer", PROMPT + " Again."))


def count_loads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    loads: list[int] = []
    original = FileBridge.load_state

    def counted(self: FileBridge) -> Any:
        loads.append(1)
        return original(self)

    monkeypatch.setattr(FileBridge, "load_state", counted)
    return loads


def test_an_engine_not_given_the_handoff_reads_the_state_from_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two hosts in one process, each with its own engines: the second learns nothing
    from the first one's pause, and reads the state as a new process would."""
    loads = count_loads(monkeypatch)
    first = WorkflowHarness(TwoAsks, tmp_path)
    outcome = first.run()
    first.respond(outcome.pending[0].request_id, "Sunny.")
    second = WorkflowHarness(TwoAsks, tmp_path)
    outcome = second.resume()
    assert outcome.status == "paused" and loads == [1]
    first.respond(outcome.pending[0].request_id, "Rainy.")
    assert first.resume().status == "completed"
    assert loads == [1, 1], "the first host's handoff was stale: the state must be read"


def test_the_engines_of_one_host_hand_the_state_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads = count_loads(monkeypatch)
    harness = WorkflowHarness(TwoAsks, tmp_path)
    outcome = harness.run()
    harness.respond(outcome.pending[0].request_id, "Sunny.")
    outcome = harness.resume()
    assert outcome.status == "paused" and loads == []
    harness.handoff.clear()
    harness.respond(outcome.pending[0].request_id, "Rainy.")
    assert harness.resume().status == "completed" and loads == [1]


def test_the_engine_modules_keep_no_mutable_state_at_module_level() -> None:
    """A dict, list or set at the top of an engine module could carry one engine's run
    into the next one."""
    found = []
    for path in sorted((REPO / "orchestrator" / "engine").glob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            names = [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
            if names == ["__all__"]:
                continue
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            mutable = isinstance(value, (ast.Dict, ast.List, ast.Set)) or (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Name)
                and value.func.id in {"dict", "list", "set", "defaultdict", "OrderedDict"}
            )
            if mutable:
                found.append(f"{path.name}:{node.lineno}")
    assert found == []


def test_a_pause_handed_over_is_taken_once_by_many_threads() -> None:
    handoff = PauseHandoff()
    paused = PausedRun(
        token=b"t",
        state=None,  # type: ignore[arg-type]
        record=None,  # type: ignore[arg-type]
        workflow_cls=TwoAsks,
        bridge=None,  # type: ignore[arg-type]
        published=0,
        mailbox=None,  # type: ignore[arg-type]
        journal=None,  # type: ignore[arg-type]
    )
    for _ in range(50):
        handoff.leave("here", paused)
        taken: list[object] = []
        start = threading.Barrier(8)

        def take(start: threading.Barrier = start, taken: list[object] = taken) -> None:
            start.wait()
            kept = handoff.take("here")
            if kept is not None:
                taken.append(kept)

        threads = [threading.Thread(target=take) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert taken == [paused]
    for n in range(PauseHandoff.KEPT + 3):
        handoff.leave(f"run {n}", paused)
    assert not handoff.holds("run 0") and handoff.holds(f"run {PauseHandoff.KEPT + 2}")


class OneTask(Workflow):
    name = "one-task"
    agents = ("worker",)

    @phase(1, asks_agents=True)
    def work(self, ctx: Any) -> Any:
        with ctx.board() as board:
            seen = board
        return {"report": ctx.dispatch([], agent="worker", objective="nothing"), "board": seen}


class RecordingDispatcher:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def dispatch(self, ctx: Any, tasks: Any, **options: Any) -> Any:
        self.calls.append(("dispatch", options["objective"]))
        return "dispatched"

    @contextmanager
    def open_board(self, ctx: Any, board_dir: Path | None) -> Iterator[str]:
        self.calls.append(("board", board_dir))
        yield "the board"


def test_an_engine_given_a_dispatcher_hands_ctx_dispatch_to_it(tmp_path: Path) -> None:
    harness = WorkflowHarness(OneTask, tmp_path)
    engine = harness.engine()
    dispatcher = RecordingDispatcher()
    engine.dispatcher = dispatcher
    outcome = engine.start(workflow_ref="x:OneTask", workdir=tmp_path)
    assert outcome.status == "completed", outcome.message
    assert outcome.outputs["work"] == {"report": "dispatched", "board": "the board"}
    assert dispatcher.calls == [("board", None), ("dispatch", "nothing")]


def test_without_a_dispatcher_ctx_dispatch_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tasks, "_factory", None)
    with pytest.raises(UsageError, match="no task board is installed"):
        tasks.installed_dispatcher()
    outcome = WorkflowHarness(OneTask, tmp_path).run()
    assert outcome.status == "failed" and "no task board is installed" in outcome.message


def test_the_package_installs_the_task_boards_dispatcher() -> None:
    from orchestrator.board.dispatch import BoardDispatcher

    assert isinstance(tasks.installed_dispatcher(), BoardDispatcher)


def test_every_answer_is_recorded_through_one_method(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host's answer and the in-process agent's both go through
    ``Mailbox.record_answer``; so does a timeout (``test_timers``)."""
    recorded: list[str] = []
    original = Mailbox.record_answer

    def counted(self: Mailbox, record: Any, response: Any, *, digest: str | None) -> Any:
        recorded.append(response.response)
        return original(self, record, response, digest=digest)

    monkeypatch.setattr(Mailbox, "record_answer", counted)
    harness = WorkflowHarness(TwoAsks, tmp_path)
    outcome = harness.run()
    harness.respond(outcome.pending[0].request_id, "From the host.")
    harness.invoker = MockAgentInvoker({"writer": "From the agent."})
    assert harness.resume().status == "completed"
    assert recorded == ["From the host.", "From the agent."]
