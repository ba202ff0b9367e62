"""Testing helpers: the agent bridge's ``MockAgentInvoker``, a fake clock, and a workflow
harness.

All of them are also pytest fixtures (``mock_invoker``, ``fake_clock``,
``workflow_harness``) through the plugin this package registers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from ._errors import AgentInvocationError
from ._text import plural
from .engine.engine import Engine
from .engine.lifecycle import PauseHandoff
from .engine.record import Outcome
from .engine.replay import ReplayReport, replay_run
from .engine.workflow import Workflow
from .formats.times import format_time

__all__ = [
    "AgentInvocationError",
    "FakeClock",
    "MockAgentInvoker",
    "ReplayReport",
    "WorkflowHarness",
    "replay_run",
]


class MockAgentInvoker:
    """Canned answers per agent, with every invocation recorded (the agent bridge's
    mock invoker API).

    ``responses`` maps an agent name to its answer text. An answer may also be an
    ``AgentInvocationError`` instance (raised) or a callable ``(prompt) -> str``.
    """

    def __init__(self, responses: dict[str, Any] | None = None) -> None:
        self.responses: dict[str, Any] = dict(responses or {})
        self.invocations: list[dict[str, Any]] = []

    def add_response(self, agent_name: str, response: Any) -> None:
        """Add a canned answer (text, an error to raise, or a callable of the prompt)."""
        self.responses[agent_name] = response

    def add_response_from_dict(self, agent_name: str, response_dict: dict[str, Any]) -> None:
        """Add a canned answer given as a dictionary (sent as its JSON text)."""
        self.responses[agent_name] = json.dumps(response_dict)

    def invoke(
        self, agent_name: str, prompt: str, timeout_seconds: int = 120, **kwargs: Any
    ) -> str:
        """Record the call and return the canned answer; unknown agent -> AgentInvocationError."""
        self.invocations.append(
            {
                "agent_name": agent_name,
                "prompt": prompt,
                "timeout_seconds": timeout_seconds,
                "kwargs": kwargs,
            }
        )
        if agent_name not in self.responses:
            raise AgentInvocationError(
                f"No mock response configured for agent: {agent_name}", error_type="AGENT_NOT_FOUND"
            )
        answer = self.responses[agent_name]
        if isinstance(answer, AgentInvocationError):
            raise answer
        if callable(answer):
            return str(answer(prompt))
        return str(answer)

    @classmethod
    def from_run(cls, run: str | Path) -> MockAgentInvoker:
        """A mock that answers as a recorded run's agents did: for each agent, the answer
        it gave to the same prompt (``run``: a run's directory or a state file). A prompt
        the run never asked is AGENT_NOT_FOUND, so a test sees what is new."""
        from .engine.replay import load_recorded_run

        _, state = load_recorded_run(run)
        answers: dict[str, dict[str, str]] = {}
        for item in state.agent_requests:
            response = item.x_response
            if item.x_request is None or response is None or response.response is None:
                continue
            if response.error_type is None:
                answers.setdefault(item.agent_name, {})[item.x_request.prompt] = response.response

        def answering(agent: str) -> Any:
            def answer(prompt: str) -> str:
                if prompt not in answers[agent]:
                    raise AgentInvocationError(
                        f"the recorded run never asked {agent} this prompt",
                        error_type="AGENT_NOT_FOUND",
                    )
                return answers[agent][prompt]

            return answer

        return cls({agent: answering(agent) for agent in answers})

    def get_invocations(self, agent_name: str | None = None) -> list[dict[str, Any]]:
        """Recorded invocations, optionally only those of one agent."""
        if agent_name:
            return [i for i in self.invocations if i["agent_name"] == agent_name]
        return self.invocations

    def reset(self) -> None:
        """Forget the recorded invocations (canned answers stay)."""
        self.invocations = []


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, start: datetime | None = None) -> None:
        self.current = start or datetime(2025, 11, 18, 10, 30, tzinfo=timezone.utc)

    def now(self) -> datetime:
        return self.current

    def advance(self, by: timedelta | float) -> None:
        """Move the clock on by ``by``: a ``timedelta``, or a number of seconds."""
        self.current += by if isinstance(by, timedelta) else timedelta(seconds=by)

    def sleep(self, seconds: timedelta | float) -> None:
        """Waiting on a fake clock moves it, at once."""
        self.advance(seconds)


class SequentialIds:
    """Deterministic UUID-shaped ids: ``00000000-0000-4000-8000-000000000001``, ..."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> str:
        self.count += 1
        return f"00000000-0000-4000-8000-{self.count:012d}"


class WorkflowHarness:
    """Runs a workflow in a work directory, in-process or as real ``orchestrate`` processes.

    In-process, ``invoker`` answers asks directly (a ``MockAgentInvoker``); with
    ``invoker=None`` every ask pauses as it would for a host, and :meth:`respond` plus
    :meth:`resume` play the host. :meth:`run_subprocess` drives the real CLI through every
    pause, answering each request with ``answer(request_dict) -> str``.
    """

    def __init__(
        self,
        workflow_cls: type[Workflow],
        workdir: Path,
        *,
        invoker: Any = None,
        clock: Any = None,
        new_id: Callable[[], str] | None = None,
    ) -> None:
        self.workflow_cls = workflow_cls
        self.workdir = Path(workdir)
        self.invoker = invoker
        self.clock = clock
        self.new_id = new_id
        #: What each engine's clean pause leaves for the next engine this harness builds
        #: (a new one per call, as a host that builds an engine per resume): the state
        #: is read back only when something else changed it. ``handoff.clear()``: the
        #: next engine reads the state from its file, as a new process does.
        self.handoff = PauseHandoff()

    def engine(self) -> Engine:
        from .adapters.file_bridge import FileBridge
        from .adapters.file_runs import FileRunStore
        from .cli.engines import StoreChildRuns

        bridge = FileBridge(self.workdir, self.workflow_cls.name)
        engine = Engine(
            self.workflow_cls,
            bridge=bridge,
            invoker=self.invoker,
            clock=self.clock,
            new_id=self.new_id,
            handoff=self.handoff,
        )
        # Child runs (``ctx.child``) run in this process too, with the same agents and clock.
        engine.children = StoreChildRuns(FileRunStore(self.workdir), "host", make=self._child)
        return engine

    def _child(self, store: Any, run_id: str, workflow_cls: Any, new: bool) -> Engine:
        """The engine of a child run kept in ``store`` (its place in the work directory)."""
        from ._ports import OpenRunInput
        from .cli.engines import StoreChildRuns

        opened = OpenRunInput(run_id=run_id, workflow_name=workflow_cls.name, new=new)
        engine = Engine(
            workflow_cls,
            bridge=store.bridge(opened),
            invoker=self.invoker,
            clock=self.clock,
            new_id=self.new_id,
            handoff=self.handoff,
        )
        engine.children = StoreChildRuns(store, "host", make=self._child)
        return engine

    def run(
        self, inputs: dict[str, Any] | None = None, *, output_path: str | None = None
    ) -> Outcome:
        ref = f"{self.workflow_cls.__module__}:{self.workflow_cls.__qualname__}"
        return self.engine().start(
            workflow_ref=ref, workdir=self.workdir, inputs=inputs, output_path=output_path
        )

    def resume(self) -> Outcome:
        return self.engine().resume()

    def retry(self) -> Outcome:
        """``orchestrate retry``: re-open the failed run with the current code."""
        return self.engine().retry()

    def respond(
        self, request_id: str, text: str, *, status: str = "success", **fields: Any
    ) -> Path:
        """Write a response document for ``request_id`` as a host would."""
        document: dict[str, Any] = {
            "request_id": request_id,
            "version": "1.0",
            "status": status,
            "created_at": format_time(
                self.clock.now() if self.clock else datetime.now(timezone.utc)
            ),
        }
        if status == "success":
            document["response"] = text
        document.update(fields)
        target = self.workdir / ".agent-responses" / f"{request_id}.json"
        target.parent.mkdir(exist_ok=True)
        target.write_text(json.dumps(document), encoding="utf-8")
        return target

    def run_until_done(
        self, inputs: dict[str, Any] | None, answer: Callable[[dict[str, Any]], str]
    ) -> Outcome:
        """In-process host loop: answer every pause with ``answer(request)`` until the end."""
        from .formats.convert import unstructure

        outcome = self.run(inputs)
        while outcome.status == "paused":
            for request in outcome.pending:
                self.respond(request.request_id, answer(unstructure(request)))
            outcome = self.resume()
        return outcome

    def run_subprocess(
        self,
        workflow_ref: str,
        inputs: dict[str, Any] | None,
        answer: Callable[[dict[str, Any]], str],
        *,
        env: dict[str, str] | None = None,
        output_path: str | None = None,
        max_cycles: int = 1000,
    ) -> subprocess.CompletedProcess[str]:
        """Drive real ``orchestrate run``/``respond``/``resume`` processes through every pause."""
        command = [
            sys.executable,
            "-m",
            "orchestrator",
            "run",
            workflow_ref,
            "--workdir",
            str(self.workdir),
        ]
        for key, value in (inputs or {}).items():
            command += ["--input", f"{key}={value}"]
        if output_path is not None:
            command += ["--output", output_path]
        full_env = {**os.environ, **(env or {})}
        result = subprocess.run(command, capture_output=True, text=True, env=full_env, check=False)
        for _ in range(max_cycles):
            if result.returncode != 42:
                return result
            for path in self._pending_request_files():
                request = json.loads(path.read_text(encoding="utf-8"))
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "orchestrator",
                        "respond",
                        "--workdir",
                        str(self.workdir),
                        "--request-id",
                        request["request_id"],
                        "--stdin",
                    ],
                    input=answer(request),
                    capture_output=True,
                    text=True,
                    env=full_env,
                    check=True,
                )
            result = subprocess.run(
                [sys.executable, "-m", "orchestrator", "resume", "--workdir", str(self.workdir)],
                capture_output=True,
                text=True,
                env=full_env,
                check=False,
            )
        raise AssertionError(f"still paused after {plural(max_cycles, 'cycle')}")

    def _pending_request_files(self) -> list[Path]:
        many = self.workdir / ".agent-requests"
        if many.is_dir() and any(many.iterdir()):
            return sorted(many.glob("*.json"))
        single = self.workdir / ".agent-request.json"
        return [single] if single.exists() else []
