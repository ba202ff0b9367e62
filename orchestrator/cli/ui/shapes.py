"""What the run page says around its forms: the shape an answer must have (from the
request's ``x_answer_schema``: its fields, their types, a filled-in example), why the
answer before was refused (``x_previous_error``), and a run asleep on a timer (until
when, a countdown, and who resumes it when it is due)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from html import escape
from typing import Any

import attrs

from ...formats.answer_gate import PREVIOUS_ERROR_KEY, describe_schema, example_of
from .runs import RunRef


@attrs.frozen(kw_only=True)
class Sleep:
    """A run asleep on a timer: its wake time (as recorded), whether this server resumes
    it when due (``marked``), and whether it is a run of a store (workers resume those)."""

    until: str
    marked: bool = False
    declined: bool = False  # the box was unticked: the page leaves it asleep
    store: bool = False


def answer_shape(schema: Any) -> str:
    """The fields of the answer ``schema`` asks for, their types, and an example."""
    if not isinstance(schema, Mapping):
        return ""
    properties = schema.get("properties")
    rows = ""
    if schema.get("type") == "object" and isinstance(properties, Mapping):
        required = set(schema.get("required") or ())
        rows = "".join(
            f"<tr><td class='mono'>{escape(str(name))}</td>"
            f"<td>{escape(describe_schema(inner) if isinstance(inner, Mapping) else 'any')}</td>"
            f"<td>{'required' if name in required else 'optional'}</td></tr>"
            for name, inner in properties.items()
        )
        rows = (
            "<table class='fields'><thead><tr><th>field</th><th>type</th><th></th></tr>"
            f"</thead><tbody>{rows}</tbody></table>"
        )
    else:
        rows = f"<p>{escape(describe_schema(schema))}</p>"
    example = json.dumps(example_of(schema), indent=2, ensure_ascii=False)
    return (
        "<details class='shape' open><summary>The answer's shape: JSON, "
        f"{escape(describe_schema(schema))}</summary>{rows}"
        f"<p class='dim'>for example</p><pre class='example'>{escape(example)}</pre></details>"
    )


def previous_refusal(context: Any) -> str:
    """Why the answer before this request was refused, when it was asked again."""
    if not isinstance(context, Mapping) or PREVIOUS_ERROR_KEY not in context:
        return ""
    before = context[PREVIOUS_ERROR_KEY]
    if isinstance(before, Mapping):
        said = str(before.get("message") or "")
        if not said:
            said = (
                f"{before.get('field')}: expected {before.get('expected')}, got {before.get('got')}"
            )
    else:
        said = str(before)
    return (
        "<p class='previous refused' role='note'>asked again: the answer before was refused, "
        f"{escape(said)}</p>"
    )


def sleeping(ref: RunRef, csrf: str, sleep: Sleep) -> str:
    """The run asleep: until when, a countdown (ui.js), and resuming it when due."""
    if sleep.marked:
        who = "this server resumes it when it is due, with this page open or not"
    elif sleep.store:
        who = (
            "a worker of its store ('orchestrate worker') resumes it when it is due; "
            "with the box ticked this page resumes it too"
        )
    else:
        who = "with the box ticked this page resumes it when it is due"
    ticked = " checked" if sleep.marked or not (sleep.store or sleep.declined) else ""
    return (
        "<section class='sleep'><h2>Sleeping on a timer</h2>"
        f"<form method='post' action='/wake' class='wake' data-wake='{escape(sleep.until)}'>"
        f"<input type='hidden' name='dir' value='{ref.directory}'>"
        f"<input type='hidden' name='run' value='{escape(ref.run_id)}'>"
        f"<input type='hidden' name='csrf' value='{escape(csrf)}'>"
        f"<p>sleeping until <time class='mono' datetime='{escape(sleep.until)}'>"
        f"{escape(sleep.until)}</time> <b class='countdown' aria-live='polite'></b></p>"
        f"<p class='dim who'>{escape(who)}</p>"
        "<label class='resume'><input type='checkbox' name='resume' value='1'"
        f"{ticked}> resume the run when it is due</label>"
        "<button type='submit' name='resume' value='1'>Resume when due, even with this "
        "page closed</button>"
        "</form></section>"
    )


def signal_form(ref: RunRef, csrf: str, name: str, schema: Any, draft: str | None) -> str:
    """The run waiting for signal ``name``: a form that sends it (its payload, JSON,
    checked against ``schema`` at the door), and resumes the run if ticked."""
    text = draft if draft is not None else ""
    return (
        "<section class='signal'><h2>Waiting for a signal</h2>"
        "<form method='post' action='/signal' class='signal'>"
        f"<input type='hidden' name='dir' value='{ref.directory}'>"
        f"<input type='hidden' name='run' value='{escape(ref.run_id)}'>"
        f"<input type='hidden' name='csrf' value='{escape(csrf)}'>"
        f"<input type='hidden' name='name' value='{escape(name)}'>"
        f"<p>waiting for signal <b class='mono'>{escape(name)}</b></p>"
        + answer_shape(schema)
        + "<label>payload (JSON; empty: null)<textarea name='payload' rows='6' "
        f"spellcheck='false'>{escape(text)}</textarea></label>"
        "<label class='resume'><input type='checkbox' name='resume' value='1' checked> "
        "resume the run once it is sent</label>"
        "<button type='submit'>Send the signal</button>"
        "</form></section>"
    )
