"""How the journal's calls are told in words and told apart: what a phase called at a
position (an ask, a step, a wait, a child run), and what changed between the recorded
call and the one the code makes now (for non-determinism errors)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .._text import plural
from .record import JournalEntry, prompt_digest
from .workflow import Ask

if TYPE_CHECKING:
    from .mailbox import Mailbox


def what_changed(entry: JournalEntry, kind: str, fingerprint: list[str]) -> str:
    if entry.kind != kind:
        return f"the call changed (the recorded run made {describe_call(entry)})"
    if kind in ("ask", "ask_all"):
        return fingerprint_change(entry.fingerprint, fingerprint)
    return f"{kind} {entry.fingerprint[0]!r} became {fingerprint[0]!r}"


def ask_fingerprint(ask: Ask) -> str:
    return f"{ask.agent} {prompt_digest(ask.prompt)}"


def describe_call(entry: JournalEntry) -> str:
    if entry.kind == "step":
        return f"step {entry.fingerprint[0]!r}"
    if entry.kind == "timer":
        return f"ctx.{entry.fingerprint[0]}"
    if entry.kind == "signal":
        return f"ctx.wait_for_signal({entry.fingerprint[0]!r})"
    if entry.kind == "signals":
        return f"ctx.signals({entry.fingerprint[0]!r})"
    if entry.kind == "children":
        return f"children of {', '.join(entry.fingerprint)}"
    if entry.kind in ("event", "artifact", "patch"):
        return f"{entry.kind} {entry.fingerprint[0]!r}"
    agents = ", ".join(f.split(" ")[0] for f in entry.fingerprint)
    return f"{entry.kind} of {agents}"


def describe_asks(kind: str, asks: Sequence[Ask]) -> str:
    return f"{kind} of {', '.join(a.agent for a in asks)}"


def fingerprint_change(old: list[str], new: list[str]) -> str:
    if len(old) != len(new):
        return f"{plural(len(old), 'request')} recorded, {len(new)} now"
    for index, (a, b) in enumerate(zip(old, new, strict=True)):
        if a != b:
            old_agent, old_hash = a.split(" ")
            new_agent, new_hash = b.split(" ")
            if old_agent != new_agent:
                return f"request {index}: agent {old_agent} became {new_agent}"
            return (
                f"request {index}: the prompt changed (sha256 {old_hash[:12]}... became "
                f"{new_hash[:12]}...)"
            )
    return "unchanged"


def edited_prompt(
    mailbox: Mailbox, entry: JournalEntry, kind: str, fingerprint: list[str], asks: Sequence[Ask]
) -> tuple[int, str, str] | None:
    """``(index, recorded text, current text)`` of the first prompt that changed, when
    the ask is the recorded one but for its prompts and the recorded text is at hand."""
    if entry.kind != kind or not len(entry.fingerprint) == len(fingerprint) == len(asks):
        return None
    for index, (old, new) in enumerate(zip(entry.fingerprint, fingerprint, strict=True)):
        if old == new:
            continue
        if old.split(" ")[0] != new.split(" ")[0]:
            return None  # another agent: the call changed, not only its words
        try:
            recorded = mailbox.records_of(entry)[index].request().prompt
        except (KeyError, IndexError, ValueError):
            return None  # the recorded request is not at hand (an archived one)
        return index, recorded, asks[index].prompt
    return None
