"""A replayed ``ctx.ask`` is a lookup, and the lookup changes nothing but the speed.

A phase asking in a loop replays every earlier ask at each resume; a plain ask already
answered with a success is found in the journal and given its recorded answer without
the full path (the rows of ``ReplayRows``, kept from one resume to the next, then
the checks of ``PhaseReplay``). These tests resume a five-ask loop after four answers
with the code changed in one way or another at its second ask, once with the lookup and
once with it turned off, and expect the very same outcome: the lookup
must defer every case it does not settle (another prompt or agent, an agent not
declared, a timeout out of range, a typed or confidence-checked answer) to the path that
checks, fails or re-opens. And it is taken: replayed asks build no ``Ask``, and a prompt
equal to the recorded one is compared, not digested.
"""

from __future__ import annotations

import itertools
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from orchestrator import Workflow, phase
from orchestrator.engine import context, journal
from orchestrator.testing import WorkflowHarness

ASKS = 5
ANSWERED = 4
#: How the code at the second ask differs on the resume after the answers (see ``Loop``).
CHANGE: dict[str, Any] = {}


def prompt(number: int) -> str:
    return (
        f"You are the writer of a numbered list. Write item {number} of {ASKS} in one plain "
        "sentence, and answer with the sentence alone."
    )


AGENTS = ("writer", "critic")


class Loop(Workflow):
    name = "replay-loop"
    agents = AGENTS

    @phase(1)
    def loop(self, ctx: Any) -> dict[str, Any]:
        answers = []
        for number in range(1, ASKS + 1):
            # The last ask goes to the other agent: with "writer" no longer declared, a
            # replay that did not check the agents would reach it and pause, not fail.
            agent, text, options = "critic" if number == ASKS else "writer", prompt(number), {}
            if number == 2:
                agent = CHANGE.get("agent", agent)
                text = CHANGE.get("prompt", text)
                options = CHANGE.get("options", options)
            answers.append(ctx.ask(agent, text, **options))
        return {"answers": answers}


VARIANTS: dict[str, dict[str, Any]] = {
    "the same code": {},
    "another prompt": {"prompt": prompt(2) + " Keep it short."},
    "another declared agent": {"agent": "critic"},
    "an agent not declared": {"agent": "stranger"},
    "the agent no longer declared": {"agents": ("critic",)},
    "a timeout out of range": {"options": {"timeout_seconds": 0}},
    "a typed answer": {"options": {"output_type": dict}},
    "a confidence required": {"options": {"min_confidence": 0.5}},
    "a deadline for the answer": {"options": {"answer_within": timedelta(hours=1)}},
    "an invalid deadline": {"options": {"answer_within": timedelta(0)}},
}


def answer(number: int) -> str:
    return f"Item {number}: owls hunt at night."


def resume_changed(tmp_path: Path, change: dict[str, Any]) -> tuple[Any, ...]:
    """Answer four asks, the code changed at the second before the last resume: what
    that resume gives."""
    tmp_path.mkdir()
    ids = (str(uuid.UUID(int=n)) for n in itertools.count(1))
    harness = WorkflowHarness(Loop, tmp_path, new_id=lambda: next(ids))
    CHANGE.clear()
    outcome = harness.run()
    for number in range(1, ANSWERED + 1):
        assert outcome.status == "paused", outcome.message
        harness.respond(outcome.pending[0].request_id, answer(number))
        if number == ANSWERED:  # the resume that replays the answered asks
            CHANGE.update(change)
            Loop.agents = change.get("agents", AGENTS)
        try:
            outcome = harness.resume()
        finally:
            CHANGE.clear()
            Loop.agents = AGENTS
    pending = tuple((r.request_id, r.agent_name, r.prompt) for r in outcome.pending)
    return outcome.status, outcome.exit_code, outcome.message, pending, outcome.outputs


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_lookup_gives_what_the_full_path_gives(
    variant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    looked_up = resume_changed(tmp_path / "lookup", VARIANTS[variant])
    monkeypatch.setattr(journal.PhaseReplay, "_checked", lambda *_: None)
    monkeypatch.setattr(context.ReplayRows, "of", lambda *_, **__: [])
    full = resume_changed(tmp_path / "full", VARIANTS[variant])
    assert looked_up == full
    if variant in ("the same code", "a deadline for the answer"):
        assert looked_up[0] == "paused"
        fifth = str(uuid.UUID(int=ANSWERED + 2))  # the run's id was made first
        assert looked_up[3] == ((fifth, "critic", prompt(ANSWERED + 1)),)
    else:
        assert looked_up[0] == "failed", looked_up[2]


def test_replayed_asks_build_no_ask_and_answer_as_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[str] = []
    real = context.Ask
    digested: list[bytes] = []  # what the replay digested: nothing, its prompts being equal
    real_constructor = context._durable.sha256_constructor

    def counted(**fields: Any) -> Any:
        made.append(fields["prompt"])
        return real(**fields)

    def watched_constructor(size: int = 0) -> Any:
        constructor = real_constructor(size)

        def sha256(data: bytes = b"") -> Any:
            digested.append(bytes(data))
            return constructor(data)

        return sha256

    harness = WorkflowHarness(Loop, tmp_path)
    outcome = harness.run()
    for number in range(1, ASKS + 1):
        monkeypatch.setattr(context, "Ask", counted)
        monkeypatch.setattr(context._durable, "sha256_constructor", watched_constructor)
        made.clear()
        digested.clear()
        harness.respond(outcome.pending[0].request_id, answer(number))
        outcome = harness.resume()
        monkeypatch.setattr(context, "Ask", real)
        monkeypatch.setattr(context._durable, "sha256_constructor", real_constructor)
        # The answered asks replay as lookups; only the next one is made.
        assert made == ([prompt(number + 1)] if number < ASKS else [])
        replayed = {prompt(n).encode() for n in range(1, number + 1)}
        assert not replayed.intersection(digested)
    assert outcome.status == "completed", outcome.message
    assert outcome.outputs["loop"] == {"answers": [answer(n) for n in range(1, ASKS + 1)]}


def test_a_resume_in_process_replays_from_rows_kept_since_the_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each resume looks up its earlier asks in the rows the last one left: only the ask
    past the journal's end goes the checking way, so a loop's replay costs no step of
    Python per earlier entry beyond its index and compares."""
    checked: list[int] = []
    real = journal.PhaseReplay._checked

    def watched(self: Any, position: int, agent: str, text: str, timeout_seconds: int) -> Any:
        checked.append(position)
        return real(self, position, agent, text, timeout_seconds)

    monkeypatch.setattr(journal.PhaseReplay, "_checked", watched)
    harness = WorkflowHarness(Loop, tmp_path)
    outcome = harness.run()
    for number in range(1, ASKS + 1):
        checked.clear()
        harness.respond(outcome.pending[0].request_id, answer(number))
        outcome = harness.resume()
        assert checked == ([number] if number < ASKS else [])
    assert outcome.status == "completed", outcome.message
    assert outcome.outputs["loop"] == {"answers": [answer(n) for n in range(1, ASKS + 1)]}


class Mixed(Workflow):
    """Three asks to one agent, then two to another."""

    name = "replay-mixed"
    agents = AGENTS

    @phase(1)
    def loop(self, ctx: Any) -> dict[str, Any]:
        agents = ["writer"] * 3 + ["critic"] * 2
        return {"answers": [ctx.ask(agent, prompt(n + 1)) for n, agent in enumerate(agents)]}


def test_rows_kept_from_the_last_resume_follow_the_agents_declared_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent no longer declared is refused at an ask the last resume replayed: the rows
    it left are not taken as they are."""
    harness = WorkflowHarness(Mixed, tmp_path)
    outcome = harness.run()
    for number in range(1, 4):
        harness.respond(outcome.pending[0].request_id, answer(number))
        outcome = harness.resume()
    assert outcome.pending[0].agent_name == "critic"
    monkeypatch.setattr(Mixed, "agents", ("critic",))
    harness.respond(outcome.pending[0].request_id, answer(4))
    outcome = harness.resume()
    assert outcome.status == "failed"
    assert "asks agent 'writer', which the workflow does not declare" in outcome.message


def test_a_row_goes_when_its_request_is_edited(tmp_path: Path) -> None:
    """A request whose answer is no longer a success (its fields assigned since the rows
    were made) replays no more from its row."""
    harness = WorkflowHarness(Loop, tmp_path)
    outcome = harness.run()
    for number in range(1, 3):
        harness.respond(outcome.pending[0].request_id, answer(number))
        outcome = harness.resume()
    engine = harness.engine()
    assert engine.adopt_paused()
    spec = Loop.phase_named("loop")
    rows = engine.journal.rows_for(spec, replayable=True)
    assert [row and row[2] for row in rows] == [answer(1), answer(2), None]
    first = engine.mailbox.records_by_id()[engine.record.journal[0].request_ids[0]]
    first.status = context.HistoryStatus.FAILED
    rows = engine.journal.rows_for(spec, replayable=True)
    assert [row and row[2] for row in rows] == [None, answer(2), None]
