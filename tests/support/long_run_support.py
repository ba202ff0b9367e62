"""A long run for the crash tests: a phase asking in a loop, then phases asking once each
(their finished requests move to the run's history in batches of two), and the answer a
host gives each prompt (made from the prompt, so every run's answers are the same)."""

from __future__ import annotations

import hashlib

_SOURCE = '''
"""A long run: a phase asking in a loop, then phases asking once each."""

from orchestrator import Workflow, phase

PROMPT = (
    "You are the survey's note taker. Read the question below and answer with one short "
    "line of plain text, nothing else. Question number {}: what does the survey say?"
)


def _single(number):
    def run(self, ctx):
        return {"phase": number, "answer": ctx.ask("writer", PROMPT.format(f"p{number}"))}

    return run


def _loop(self, ctx):
    notes = [ctx.ask("writer", PROMPT.format(n)) for n in range(@ASKS@)]
    return {"notes": notes, "total": ctx.step("count", lambda: sum(map(len, notes)))}


_namespace = {
    "__module__": __name__,
    "__qualname__": "Long",
    "name": "long",
    "agents": ("writer",),
    "archive_after": 2,
    "loop": phase(1, name="loop")(_loop),
}
for _n in range(2, @PHASES@ + 2):
    _namespace[f"single_{_n}"] = phase(_n, name=f"single_{_n}")(_single(_n))
Long = type("Long", (Workflow,), _namespace)
'''


def long_workflow(asks: int, phases: int) -> str:
    """The source of ``Long``: ``asks`` asks in its loop, then ``phases`` phases."""
    return _SOURCE.replace("@ASKS@", str(asks)).replace("@PHASES@", str(phases))


def answer_for(prompt: str) -> str:
    """A host's answer to ``prompt``."""
    digest = hashlib.sha256(prompt.encode()).hexdigest()[:12]
    return f"Note {digest}: the survey says what it says « {digest} »."
