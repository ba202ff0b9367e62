"""The HTML of each page: every text from a run escaped, prompts rendered from a safe
Markdown subset (headings, lists, code, emphasis; no raw HTML, no links out)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from html import escape
from typing import Any
from urllib.parse import urlencode

from ..._text import plural
from .runs import RunRef, RunRow
from .shapes import Sleep, answer_shape, previous_refusal, signal_form, sleeping

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .reports import Comparison

STATUSES = ("paused", "running", "failed", "completed", "cancelled", "damaged")


def page(title: str, body: str, *, csrf: str = "") -> str:
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width'><title>{escape(title)}</title>"
        "<link rel='icon' href='data:,'><link rel='stylesheet' href='/static/ui.css'>"
        f"<meta name='csrf' content='{escape(csrf)}'>"
        "<script src='/static/ui.js' defer></script></head><body>"
        "<header><a href='/' class='brand'>orchestrate</a>"
        "<nav><a href='/'>Runs</a><a href='/boards'>Boards</a>"
        "<a href='/evals'>Regression runs</a></nav></header>"
        f"<main>{body}</main></body></html>"
    )


def run_link(ref: RunRef, **extra: str) -> str:
    return "/run?" + urlencode({"dir": ref.directory, "run": ref.run_id, **extra})


def runs_page(
    rows: Sequence[RunRow], *, status: str | None, page_number: int, per_page: int
) -> str:
    shown = [r for r in rows if status is None or r.status == status]
    start = page_number * per_page
    window = shown[start : start + per_page]
    filters = " ".join(
        f"<a class='filter{' on' if s == status else ''}' href='/?status={s}'>{s} "
        f"<b>{sum(1 for r in rows if r.status == s)}</b></a>"
        for s in STATUSES
        if any(r.status == s for r in rows)
    )
    lines = "".join(
        f"<tr class='{escape(r.status)}'><td><a href='{escape(run_link(r.ref))}'>"
        f"{escape(r.workflow)}</a></td><td><span class='badge {escape(r.status)}'>"
        f"{escape(r.status)}</span></td><td>{escape(r.phase)}</td>"
        f"<td>{_waits(r.waiting_for)}{_warning(r)}</td>"
        f"<td class='mono'>{escape(r.ref.run_id[:8])}</td>"
        f"<td class='dim'>{escape(r.where)}</td></tr>"
        for r in window
    )
    pager = ""
    if start + per_page < len(shown) or page_number:
        query = {"status": status} if status else {}
        previous = urlencode({**query, "page": page_number - 1})
        following = urlencode({**query, "page": page_number + 1})
        pager = (
            "<p class='pager'>"
            + (f"<a href='/?{previous}'>newer</a> " if page_number else "")
            + (f"<a href='/?{following}'>older</a>" if start + per_page < len(shown) else "")
            + "</p>"
        )
    body = (
        f"<h1>Runs</h1><p class='filters'><a class='filter{' on' if status is None else ''}' "
        f"href='/'>all <b>{len(rows)}</b></a> {filters}</p>"
        "<table class='runs'><thead><tr><th>workflow</th><th>status</th><th>phase</th>"
        f"<th>waits</th><th>run</th><th>work directory</th></tr></thead><tbody>{lines}</tbody>"
        f"</table>{pager}"
    )
    if not rows:
        body += "<p class='empty'>No run in the served directories yet.</p>"
    return page("Runs", body)


def _warning(row: RunRow) -> str:
    """A run whose state cannot be trusted as it is (its signature does not hold), said
    in its row: the page shows it, and nothing can be done to it from here."""
    if not row.problem or row.status == "damaged":
        return ""
    return f"<p class='refused' role='alert'>signature NOT VALID: {escape(row.problem)}</p>"


def _waits(count: int) -> str:
    if not count:
        return ""
    return f"waits for {plural(count, 'answer')}"


def run_page(
    ref: RunRef,
    *,
    state: Any,
    summary: dict[str, Any],
    timeline: Sequence[str],
    files: Sequence[str],
    csrf: str,
    notice: str | None = None,
    refused: dict[str, str] | None = None,
    drafts: dict[str, str] | None = None,
    answered: frozenset[str] = frozenset(),
    events: Sequence[tuple[int, str]] = (),
    sleep: Sleep | None = None,
    untrusted: str | None = None,
) -> str:
    """A run's page; ``untrusted``: why its state cannot be trusted, said at the top, and
    then the page offers no form (no answer, retry, rewind or wake)."""
    refused, drafts = refused or {}, drafts or {}
    status = str(summary.get("status", "?"))
    head = (
        f"<h1>{escape(str(summary.get('workflow')))} <span class='badge {escape(status)}'>"
        f"{escape(status)}</span></h1><p class='dim mono'>run {escape(ref.run_id)}</p>"
    )
    if untrusted:
        head += f"<p class='refused untrusted' role='alert'>{escape(untrusted)}</p>"
    if notice:
        head += f"<p class='notice' role='status'>{escape(notice)}</p>"
    if summary.get("failure"):
        head += f"<p class='failure'>{escape(str(summary['failure']))}</p>"
        head += _trace_html(summary.get("failure_trace"))
    waiting = [r for r in state.agent_requests if r.status.value == "pending"]
    if untrusted:
        waiting = []  # its prompts are under "Asks and answers"; no form takes an answer
    asks = "".join(
        _answered_ask(record, refused.get(record.request_id), drafts.get(record.request_id))
        if record.request_id in answered
        else _ask_form(
            ref, record, csrf, refused.get(record.request_id), drafts.get(record.request_id)
        )
        for record in waiting
    )
    for request_id, why in refused.items():  # an answer to no request shown here
        if request_id not in {r.request_id for r in waiting}:
            head += f"<p class='refused' role='alert'>{escape(why)}</p>"
    if asks:
        asks = f"<section><h2>Waiting for an answer</h2>{asks}</section>"
    if status == "paused" and not waiting and not untrusted:
        asks = _quiet_wait(ref, csrf, state, sleep, drafts) or asks
    actions = _recover(ref, csrf, state) if status == "failed" and not untrusted else ""
    last = str(events[-1][0]) if events else "0"
    asked = "".join(_asked(record) for record in state.agent_requests if record.x_request)
    if asked:
        asked = f"<section><h2>Asks and answers</h2>{asked}</section>"
    outputs = {k: v for k, v in state.phase_data.items() if k != "x_orchestrator"}
    outputs_html = "".join(
        f"<details><summary>{escape(name)}</summary><pre>{escape(_as_text(value))}</pre></details>"
        for name, value in outputs.items()
    )
    evidence = "".join(
        f"<li><a href='{escape(run_link(ref, path=f))}&amp;view=file'>{escape(f)}</a></li>"
        for f in files
    )
    body = (
        head
        + asks
        + actions
        + asked
        + "<section><h2>Timeline</h2><pre class='timeline'>"
        + escape("\n".join(timeline))
        + "</pre></section>"
        + f"<section><h2>Outputs</h2>{outputs_html or '<p class=dim>none yet</p>'}</section>"
        + _usage_html(summary.get("usage"))
        + "<section><h2>Events</h2>"
        + f"<ol class='events' data-stream='{escape(run_link(ref, view='events', after=last))}'>"
        + "".join(f"<li>{escape(text)}</li>" for _, text in events)
        + "</ol></section>"
        + f"<section><h2>Evidence</h2><ul class='files'>{evidence}</ul></section>"
    )
    return page(f"{summary.get('workflow')} {ref.run_id[:8]}", body, csrf=csrf)


def _quiet_wait(
    ref: RunRef, csrf: str, state: Any, sleep: Sleep | None, drafts: dict[str, str]
) -> str:
    """What a paused run with no request waits for: a signal (a form that sends it), or
    a timer (when it is due, and resuming it then); ``""`` for neither."""
    signal = (state.phase_data.get("x_orchestrator") or {}).get("waiting_for_signal")
    if isinstance(signal, dict):
        name = str(signal.get("name"))
        return signal_form(ref, csrf, name, signal.get("schema"), drafts.get(f"signal {name}"))
    return sleeping(ref, csrf, sleep) if sleep is not None else ""


def _recover(ref: RunRef, csrf: str, state: Any) -> str:
    """The recovery actions of a failed run: retry its phase, rewind it."""
    phases = [p.phase_name for p in state.completed_phases] + [state.phase_name]
    options = "".join(f"<option>{escape(p)}</option>" for p in phases)
    return (
        "<section><h2>Recover</h2>"
        f"<form method='post' action='/retry' data-confirm='Retry the failed phase?'>"
        f"{_hidden(ref, csrf)}<button>Retry the failed phase</button></form>"
        f"<form method='post' action='/rewind' data-confirm='Rewind the run?'>"
        f"{_hidden(ref, csrf)}<label>rewind to <select name='to'>{options}</select></label>"
        "<button>Rewind</button></form></section>"
    )


def _hidden(ref: RunRef, csrf: str) -> str:
    return (
        f"<input type='hidden' name='dir' value='{ref.directory}'>"
        f"<input type='hidden' name='run' value='{escape(ref.run_id)}'>"
        f"<input type='hidden' name='csrf' value='{escape(csrf)}'>"
    )


def _asked(record: Any) -> str:
    """A request of the run, its prompt and how it was answered (one click away)."""
    request = record.request()
    response = record.x_response
    if response is None:
        answer = "<p class='dim'>no answer yet</p>"
    elif response.response is not None:
        answer = f"<pre>{escape(response.response)}</pre>"
    else:
        answer = (
            f"<p class='refused'>{escape(str(response.status.value))}: "
            f"{escape(str(response.error_type.value if response.error_type else ''))} "
            f"{escape(response.error_message or '')}</p>"
        )
    retry = f" · retry {request.retry_count}" if request.retry_count else ""
    return (
        f"<details class='asked'><summary>{escape(request.agent_name)} "
        f"<span class='dim'>phase {request.phase} {escape(request.phase_name)}{retry} · "
        f"{escape(record.status.value)}</span></summary>"
        f"<div class='prompt'>{markdown(request.prompt)}</div>{answer}</details>"
    )


def _answered_ask(record: Any, refused: str | None = None, draft: str | None = None) -> str:
    """A request answered already; an answer refused for it (the first one won) is shown
    with it, as typed."""
    request = record.request()
    late = ""
    if refused:
        late = f"<p class='refused' role='alert'>{escape(refused)}</p>"
        if draft:
            late += (
                f"<p class='dim'>the answer refused:</p><pre class='draft'>{escape(draft)}</pre>"
            )
    return (
        f"<article class='ask answered' id='answered-{escape(request.request_id)}'>"
        f"<h3>{escape(request.agent_name)} <span class='dim'>phase {request.phase} "
        f"{escape(request.phase_name)}</span></h3><p class='dim'>an answer is in; the run "
        f"takes it when it resumes</p>{late}</article>"
    )


def _ask_form(ref: RunRef, record: Any, csrf: str, refused: str | None, draft: str | None) -> str:
    request = record.request()
    schema = (request.context or {}).get("x_answer_schema")
    expects_json = schema is not None or "json" in request.prompt.lower()
    shape = f" data-schema='{escape(json.dumps(schema))}'" if isinstance(schema, dict) else ""
    error = f"<p class='refused' role='alert'>{escape(refused)}</p>" if refused else ""
    return (
        f"<article class='ask' id='ask-{escape(request.request_id)}'>"
        f"<h3>{escape(request.agent_name)} <span class='dim'>phase {request.phase} "
        f"{escape(request.phase_name)} · retry {request.retry_count}</span></h3>"
        f"<div class='prompt'>{markdown(request.prompt)}</div>"
        f"{previous_refusal(request.context)}{answer_shape(schema)}"
        f"<form method='post' action='/answer' class='answer'{shape}>{_hidden(ref, csrf)}"
        f"<input type='hidden' name='request' value='{escape(request.request_id)}'>"
        "<fieldset class='mode'>"
        f"<label><input type='radio' name='mode' value='text'{_on(not expects_json)}> text</label>"
        f"<label><input type='radio' name='mode' value='json'{_on(expects_json)}> JSON</label>"
        "</fieldset>"
        f"<textarea name='answer' rows='8' required>{escape(draft or '')}</textarea>"
        "<p class='check' aria-live='polite'></p>"
        f"{error}"
        "<label class='resume'><input type='checkbox' name='resume' value='1' checked> "
        "resume the run once every request is answered</label>"
        "<button type='submit'>Answer</button></form></article>"
    )


def _on(checked: bool) -> str:
    return " checked" if checked else ""


def evals_page(found: Sequence[Comparison], workdirs: Sequence[Any]) -> str:
    """The regression comparisons: each with its date, its gate, its counts and the runs it
    compared, linking to its report."""
    rows = "".join(_comparison_row(c, workdirs) for c in found)
    if not rows:
        body = "<p class='dim'>none: 'orchestrate eval compare' writes one</p>"
    else:
        body = (
            "<table class='comparisons'><tr><th>Date</th><th>Gate</th><th>Cases</th>"
            f"<th>Runs</th><th>Report</th></tr>{rows}</table>"
        )
    return page("Regression runs", f"<h1>Regression runs</h1>{body}")


def _comparison_row(found: Comparison, workdirs: Sequence[Any]) -> str:
    link = (
        f"<a href='/evals/{found.place}/{escape(found.report)}'>{escape(found.report)}</a> "
        f"<span class='dim'>in {escape(str(workdirs[found.place]))}</span>"
    )
    if found.problem is not None:
        return (
            f"<tr><td class='dim'>?</td><td colspan='3'>evaluation.json cannot be read: "
            f"{escape(found.problem)}</td><td>{link}</td></tr>"
        )
    if found.gate_failed is None:
        gate = "<span class='dim'>?</span>"
    else:
        watched = ", ".join(found.fail_on) or "nothing"
        verdict = "failed" if found.gate_failed else "passed"
        gate = (
            f"<b class='gate-{verdict}'>{verdict}</b> <span class='dim'>on {escape(watched)}</span>"
        )
    counts = ", ".join(
        f"{count} {name.replace('_', ' ')}"
        for name, count in found.totals
        if count or name == "cases"
    )
    runs = f"{escape(found.baseline or '?')} → {escape(found.new or '?')}"
    return (
        f"<tr><td class='nowrap'>{escape(found.generated_at or '?')}</td><td>{gate}</td>"
        f"<td>{escape(counts)}</td><td class='mono'>{runs}</td><td>{link}</td></tr>"
    )


def board_link(index: int, board_id: str, **extra: str) -> str:
    return "/board?" + urlencode({"dir": index, "board": board_id, **extra})


def boards_page(boards: Iterable[tuple[int, str, str]]) -> str:
    items = "".join(
        f"<li><a href='{escape(board_link(index, board_id))}'>{escape(where)} "
        f"{escape(board_id)}</a></li>"
        for index, board_id, where in boards
    )
    return page("Boards", f"<h1>Boards</h1><ul>{items or '<li class=dim>none</li>'}</ul>")


def board_page(index: int, board_id: str, snapshot: dict[str, Any]) -> str:
    refresh = escape(board_link(index, board_id, view="json"))
    return page(
        "Board",
        f"<h1>Board <span class='dim'>{escape(str(snapshot.get('where', '')))}</span></h1>"
        f"<div class='board' data-board='{refresh}'>"
        f"{board_columns(index, board_id, snapshot)}</div>",
    )


def board_columns(index: int, board_id: str, snapshot: dict[str, Any]) -> str:
    columns = []
    order = ["todo", "in_progress", "blocked", "done", "failed", "canceled"]
    found = snapshot["columns"]
    for status in [*order, *(s for s in found if s not in order)]:
        tasks = found.get(status, [])
        if not tasks and status == "canceled":
            continue
        cards = "".join(
            f"<li class='task' data-task='{escape(t['task_id'])}'><b>{escape(t['task_id'])}</b> "
            f"{escape(t['title'])} <a class='worklog' href='"
            f"{escape(worklog_link(index, board_id, t['task_id']))}'>worklog</a>"
            f"<br><span class='dim'>{escape(t['owner'] or '')} "
            f"{escape(', '.join(t['locks']))}</span>"
            + (
                f"<br><span class='dim'>heartbeat {escape(t['heartbeat'])}</span>"
                if t["heartbeat"]
                else ""
            )
            + "</li>"
            for t in tasks
        )
        columns.append(
            f"<section class='column' data-status='{escape(status)}'><h2>{escape(status)} "
            f"<b>{len(tasks)}</b></h2><ul>{cards}</ul></section>"
        )
    ledger = "".join(
        f"<tr><td class='mono'>{escape(str(d.get('x_seq', '')))}</td>"
        f"<td>{escape(str(d.get('task_id', '')))}</td><td>{escape(str(d.get('status', '')))}</td>"
        f"<td>{escape(str(d.get('owner', '')))}</td>"
        f"<td>{escape(str(d.get('reason', ''))[:160])}</td>"
        f"<td class='mono dim'>{escape(str(d.get('x_at', ''))[11:23])}</td></tr>"
        for d in snapshot["ledger_tail"]
    )
    return (
        f"<div class='columns'>{''.join(columns)}</div>"
        "<h2>Ledger, latest first</h2><table class='ledger'><thead><tr><th>seq</th><th>task</th>"
        f"<th>status</th><th>owner</th><th>reason</th><th>at</th></tr></thead><tbody>{ledger}"
        "</tbody></table>"
    )


def worklog_link(index: int, board_id: str, task_id: str) -> str:
    return "/worklog?" + urlencode({"dir": index, "board": board_id, "task": task_id})


def worklog_page(index: int, board_id: str, task_id: str, entries: Sequence[dict[str, Any]]) -> str:
    columns = ("actor", "action", "decision", "result", "next_step")
    rows = "".join(
        f"<tr><td class='mono dim'>{escape(str(e.get('timestamp', ''))[11:23])}</td>"
        + "".join(f"<td>{escape(str(e.get(c, ''))[:300])}</td>" for c in columns)
        + "</tr>"
        for e in entries
    )
    head = "".join(f"<th>{c.replace('_', ' ')}</th>" for c in ("at", *columns))
    back = escape(board_link(index, board_id))
    return page(
        f"Worklog {task_id}",
        f"<h1>Worklog <span class='mono'>{escape(task_id)}</span></h1>"
        f"<p><a href='{back}'>back to the board</a></p>"
        f"<table class='ledger'><thead><tr>{head}</tr></thead>"
        f"<tbody>{rows or '<tr><td>no entry yet</td></tr>'}</tbody></table>"
        f"<details><summary>as recorded</summary><pre>{escape(json.dumps(list(entries), indent=2))}"
        "</pre></details>",
    )


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)


_INLINE = [
    (re.compile(r"`([^`]+)`"), r"<code>\1</code>"),
    (re.compile(r"\*\*([^*]+)\*\*"), r"<strong>\1</strong>"),
    (re.compile(r"(?<![*\w])\*([^*]+)\*(?!\w)"), r"<em>\1</em>"),
]


_BULLET = re.compile(r"^\s*([-*]|\d+\.)\s+")


def markdown(text: str) -> str:
    """A safe subset of Markdown: the text is escaped first, then headings, bullet and
    numbered lists, fenced code and paragraphs are made of it."""
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            block = []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                block.append(lines[i])
                i += 1
            out.append(f"<pre><code>{escape(chr(10).join(block))}</code></pre>")
            i += 1
            continue
        heading = re.match(r"(#{1,6})\s+(.*)", line)
        if heading:
            level = min(len(heading.group(1)) + 2, 6)
            out.append(f"<h{level}>{_inline(heading.group(2))}</h{level}>")
        elif _BULLET.match(line):
            ordered = bool(re.match(r"\s*\d+\.", line))
            items = []
            while i < len(lines) and _BULLET.match(lines[i]):
                item = _inline(_BULLET.sub("", lines[i], count=1))
                items.append(f"<li>{item}</li>")
                i += 1
            tag = "ol" if ordered else "ul"
            out.append(f"<{tag}>{''.join(items)}</{tag}>")
            continue
        elif line.strip():
            para = [line]
            while (
                i + 1 < len(lines)
                and lines[i + 1].strip()
                and not re.match(r"(#{1,6}\s|```|\s*([-*]|\d+\.)\s)", lines[i + 1])
            ):
                i += 1
                para.append(lines[i])
            out.append(f"<p>{_inline(' '.join(para))}</p>")
        i += 1
    return "".join(out)


def _inline(text: str) -> str:
    html = escape(text)
    for pattern, replacement in _INLINE:
        html = pattern.sub(replacement, html)
    return html


def _trace_html(trace: Any) -> str:
    """Where a failed phase raised: its frames, innermost last."""
    if not isinstance(trace, dict) or not trace.get("frames"):
        return ""
    rows = "".join(
        f"<li class='mono'>{escape(str(f.get('file')))}:{escape(str(f.get('line')))} in "
        f"{escape(str(f.get('function')))}</li>"
        for f in trace["frames"]
        if isinstance(f, dict)
    )
    kind = escape(str(trace.get("type", "")))
    return (
        f"<details class='trace' open><summary>{kind} raised at "
        f"{escape(str(trace['frames'][-1].get('file')))}:"
        f"{escape(str(trace['frames'][-1].get('line')))}</summary><ol>{rows}</ol></details>"
    )


def _usage_html(usage: Any) -> str:
    """The run's tokens (and cost), by phase and by agent, as its answers told them."""
    if not isinstance(usage, dict) or not usage.get("answers"):
        return ""
    priced = "cost_usd" in usage
    head = "<tr><th></th><th>tokens</th><th>input</th><th>output</th><th>answers</th>"
    head += "<th>cost (USD)</th></tr>" if priced else "</tr>"

    def row(label: str, part: dict[str, Any]) -> str:
        cells = [part.get(k) for k in ("tokens", "input_tokens", "output_tokens", "answers")]
        if priced:
            cells.append(f"{part.get('cost_usd', 0):.4f}")
        return (
            f"<tr><th>{escape(label)}</th>"
            + "".join(f"<td>{escape(str(c))}</td>" for c in cells)
            + "</tr>"
        )

    rows = [row("run", usage)]
    rows += [row(f"phase {n}", p) for n, p in (usage.get("by_phase") or {}).items()]
    rows += [row(f"agent {n}", p) for n, p in (usage.get("by_agent") or {}).items()]
    return (
        "<section><h2>Tokens</h2><table class='usage'>"
        + head
        + "".join(rows)
        + "</table></section>"
    )
