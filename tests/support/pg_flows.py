"""Workflows and an agent for the tests that drive PostgreSQL runs with real worker
processes (``tests/adapters/test_pg_worker_crash.py``,
``tests/adapters/test_pg_workers.py``) and for ``bench/pg_runs.py``.

``Relay`` has three phases; each runs one ``ctx.step`` whose side effect appends a line
``<run tag> <step> <pid>`` to the file ``$PG_FLOWS_STEP_LOG`` names (one ``O_APPEND``
write, so lines of concurrent workers never mix), then asks an agent. A step the engine
runs twice therefore shows up twice in that file, with the process that ran it each time.
With the input ``nap`` (seconds, default none) the second phase also takes a durable
timer before its ask, so the run pauses and any worker may take it on after.

:func:`agent_command` is a fast agent for ``--agent subprocess:...``: it answers
``<first 16 hex digits of the prompt's SHA-256>:<a random nonce>`` and appends
``<digest> <nonce> <worker>`` to ``$PG_FLOWS_AGENT_LOG``, so a test can tell an answer
the agent really gave from one made up or lost, and who asked for it: ``<worker>`` is
``$PG_FLOWS_WORKER`` (a test names each worker process so), else the parent's pid (a
child whose worker was killed before it started sees only init as its parent).
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from orchestrator import Workflow, phase

STEP_LOG_ENV = "PG_FLOWS_STEP_LOG"
AGENT_LOG_ENV = "PG_FLOWS_AGENT_LOG"
WORKER_ENV = "PG_FLOWS_WORKER"
STEPS = ("gather", "shape", "seal")
AGENTS = ("writer", "critic", "writer")


def side_effect(tag: str, step: str) -> str:
    """Append ``<tag> <step> <pid>`` to the step log; the step's result."""
    path = os.environ.get(STEP_LOG_ENV)
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, f"{tag} {step} {os.getpid()}\n".encode())
        finally:
            os.close(fd)
    return f"{step}-of-{tag}"


def prompt_for(tag: str, step: str, made: str) -> str:
    """The prompt phase ``step`` of run ``tag`` sends, given its step's result."""
    return (
        f"You are the {step} agent of run {tag}. Read the note below and reply with one "
        f"plain line that names it, nothing else. The note: {made}."
    )


def digest_of(prompt: str) -> str:
    """What the agent's answer to ``prompt`` starts with."""
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:16]


class Relay(Workflow):
    """Three phases, a step and an ask each; the last returns every answer."""

    name = "relay"
    agents = ("writer", "critic")

    def _leg(self, ctx: Any, number: int) -> str:
        tag = str(self.inputs["tag"])
        made = ctx.step(STEPS[number], side_effect, tag, STEPS[number])
        return str(ctx.ask(AGENTS[number], prompt_for(tag, STEPS[number], made)))

    @phase(1)
    def gather(self, ctx: Any) -> str:
        return self._leg(ctx, 0)

    @phase(2)
    def shape(self, ctx: Any) -> str:
        nap = float(self.inputs.get("nap") or 0)
        if nap:
            ctx.sleep(nap)
        return self._leg(ctx, 1)

    @phase(3)
    def seal(self, ctx: Any) -> dict[str, Any]:
        last = self._leg(ctx, 2)
        return {"answers": [ctx.output("gather"), ctx.output("shape"), last]}


def agent_command() -> str:
    """The ``--agent subprocess:...`` command of the agent described above (POSIX sh)."""
    return (
        'd=$(sha256sum | cut -c1-16); n=$(od -An -N8 -tx1 /dev/urandom | tr -d " \\n"); '
        f'printf "%s %s %s\\n" "$d" "$n" "${{{WORKER_ENV}:-$PPID}}" >> "${AGENT_LOG_ENV}"; '
        'printf "%s:%s" "$d" "$n"'
    )
