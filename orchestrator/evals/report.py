"""``report.html``: an evaluation as one page a person reads at a glance.

The page stands alone: its style is inline, it loads nothing (a Content-Security-Policy
says so to the browser too), it names no absolute path, and each link is a relative path
to a file of the run directories inside the same folder. Everything that came from a run
(outputs, parameters, error bodies, ids) is escaped: a run directory is untrusted, and a
case's output may well hold HTML or a script.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from html import escape
from urllib.parse import quote

from .._text import plural
from ..formats.evaluation import VERDICTS, ActionView, CaseEvaluation, Evaluation, Side

LABELS = {
    "not_run": "Not run",
    "new_failure": "New failure",
    "regressed": "Regressed",
    "both_failing": "Both failing",
    "fixed": "Fixed",
    "improved": "Improved",
    "unchanged": "Unchanged",
}
STATUS_LABELS = {
    "ok": "ok",
    "runner_error": "runner error",
    "missing": "missing",
    "unreadable": "unreadable",
    "not_run": "not run",
}
#: Shown outputs longer than this are cut; the case file holds the whole.
MAX_OUTPUT_CHARS = 6000

#: The pages' style: the agent regression report's, shared by the replay report.
PAGE_STYLE = """
:root{--ink:#1d2433;--muted:#5d6779;--line:#e3e7ee;--bg:#f6f7f9;--card:#fff;
--not_run:#7a2e0e;--new_failure:#b42318;--regressed:#c4320a;--both_failing:#6b4fa8;--fixed:#067647;
--improved:#0b7285;--unchanged:#667085;--low:#067647;--medium:#b54708;--unknown:#6b4fa8;
--high:#b42318}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);font:15px/1.5 system-ui,-apple-system,
"Segoe UI",Roboto,"Noto Sans","Helvetica Neue",Arial,sans-serif}
main{max-width:1240px;margin:0 auto;padding:28px 24px 64px}
h1{font-size:24px;margin:0 0 4px;letter-spacing:-.01em}
h2{font-size:17px;margin:32px 0 10px}
h3{font-size:13px;text-transform:uppercase;letter-spacing:.06em;color:var(--muted);
margin:14px 0 6px}
.sub{color:var(--muted);margin:0 0 18px}
code,pre,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"DejaVu Sans Mono",
monospace;font-size:12.5px}
a{color:#175cd3;text-decoration:none}a:hover{text-decoration:underline}
.gate{border-radius:10px;padding:12px 16px;font-weight:600;margin:0 0 16px;border:1px solid}
.gate.failed{background:#fef3f2;border-color:#fecdca;color:var(--new_failure)}
.gate.passed{background:#ecfdf3;border-color:#abefc6;color:var(--fixed)}
.gate span{font-weight:400;color:var(--ink)}
.totals{display:flex;flex-wrap:wrap;gap:10px;margin:0 0 8px}
.total{background:var(--card);border:1px solid var(--line);border-left:5px solid;
border-radius:8px;padding:8px 14px;min-width:118px}
.total b{display:block;font-size:22px;font-variant-numeric:tabular-nums}
.total small{color:var(--muted)}
table{border-collapse:collapse;width:100%;background:var(--card)}
th,td{text-align:left;padding:7px 10px;border-bottom:1px solid var(--line);vertical-align:top}
th{font-size:12px;text-transform:uppercase;letter-spacing:.05em;color:var(--muted);
background:#fafbfc}
.summary{border:1px solid var(--line);border-radius:10px;overflow:hidden}
.summary td{font-variant-numeric:tabular-nums}
.pill{display:inline-block;border-radius:999px;padding:1px 10px;font-size:12.5px;
font-weight:600;color:#fff;white-space:nowrap}
.risk{display:inline-block;border-radius:4px;padding:0 6px;font-size:12px;font-weight:600;
border:1px solid currentColor}
.nowrap{white-space:nowrap}.st{font-size:13px}.st.bad{color:var(--new_failure);font-weight:600}.dim{color:var(--muted)}
.case{background:var(--card);border:1px solid var(--line);border-left:6px solid;
border-radius:10px;margin:18px 0;padding:14px 18px}
.case header{display:flex;align-items:baseline;gap:12px;flex-wrap:wrap}
.case header h2{margin:0;font-size:17px}
.reasons{margin:6px 0 0;padding-left:18px;color:var(--ink)}
.sides{display:grid;grid-template-columns:1fr 1fr;gap:16px;margin-top:10px}
@media (max-width:860px){.sides{grid-template-columns:1fr}}
.side{border:1px solid var(--line);border-radius:8px;padding:10px 12px;min-width:0}
.side h3:first-child{margin-top:0}
pre{white-space:pre-wrap;word-break:break-word;background:#f8f9fb;border:1px solid var(--line);
border-radius:6px;padding:8px 10px;margin:4px 0;max-height:320px;overflow:auto}
.diff{max-height:none}
.diff .add{background:#dcfae6;display:block}.diff .del{background:#fee4e2;display:block}
.diff .hunk{color:var(--muted);display:block}
.failure{border:1px solid #fecdca;background:#fffbfa;border-radius:6px;padding:8px 10px}
.failure dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:0}
.failure dt{color:var(--muted)}.failure dd{margin:0;word-break:break-word}
details summary{cursor:pointer;color:#175cd3}
.actions td,.actions th{font-size:13px;padding:5px 8px}
.met{color:var(--fixed);font-weight:600}.missed{color:var(--regressed);font-weight:600}
.unresolved{color:var(--new_failure);font-weight:600}
.problems{background:#fffaeb;border:1px solid #fedf89;border-radius:10px;padding:10px 16px}
.problems li{margin:2px 0}
footer{color:var(--muted);font-size:12.5px;margin-top:36px}
"""


def render_report(
    evaluation: Evaluation, *, exists: Callable[[str], bool] = lambda href: True
) -> str:
    """The whole page, as text. ``exists`` tells whether a file a problem or a run names
    is there (a path relative to the folder): a missing one is named, never linked."""
    title = "Agent regression report"
    parts = [
        page_head(title),
        f"<h1>{title}</h1>",
        _subtitle(evaluation, exists),
        _gate(evaluation),
        _totals(evaluation),
        _problems(evaluation, exists),
        _summary_table(evaluation),
        "<h2>Cases, most severe first</h2>",
        *(_case(index, case) for index, case in enumerate(evaluation.cases)),
        f"<footer>{_e(evaluation.evaluator_version)} · evaluation.json "
        f'<a href="evaluation.json">beside this page</a> holds the same data.</footer>',
        "</main></body></html>",
    ]
    return "\n".join(part for part in parts if part) + "\n"


def page_head(title: str, *, style: str = "") -> str:
    """A page's opening up to ``<main>``: its inline style (``PAGE_STYLE``, then
    ``style``) and a Content-Security-Policy that lets it load nothing."""
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
            "style-src 'unsafe-inline'\">",
            '<meta name="referrer" content="no-referrer">',
            f"<title>{escaped(title)}</title><style>{PAGE_STYLE}{style}</style></head><body><main>",
        ]
    )


def escaped(value: object) -> str:
    """``value`` as text safe anywhere in a page (an element's text, an attribute)."""
    return escape(str(value), quote=True)


_e = escaped


def relative_link(href: str | None, text: str) -> str:
    """A link to ``href`` (a path relative to the page) reading ``text``; without
    ``href``, the text alone."""
    if not href:
        return _e(text)
    return f'<a href="{_e(quote(href, safe="/"))}">{_e(text)}</a>'


_link = relative_link


def _pill(verdict: str) -> str:
    return f'<span class="pill" style="background:var(--{verdict})">{_e(LABELS[verdict])}</span>'


def _risk(level: str | None) -> str:
    if level is None:
        return '<span class="dim">none</span>'
    return f'<span class="risk" style="color:var(--{level})">{_e(level)}</span>'


def _subtitle(evaluation: Evaluation, exists: Callable[[str], bool]) -> str:
    def run(ref: object) -> str:
        run_id = getattr(ref, "run_id", None) or "?"
        href = f"{getattr(ref, 'dir', '.')}/run.json".removeprefix("./")
        return _link(href if exists(href) else None, run_id)

    return (
        f'<p class="sub">Baseline {run(evaluation.baseline)} against new '
        f"{run(evaluation.new)} · {plural(evaluation.totals.get('cases', 0), 'case')} · "
        f"evaluated {_e(evaluation.generated_at)}</p>"
    )


def _gate(evaluation: Evaluation) -> str:
    gate = evaluation.gate
    watched = ", ".join(LABELS[v].lower() for v in gate.fail_on) or "nothing"
    if gate.failed:
        count = len(gate.cases)
        anchors = {case.case_id: index for index, case in enumerate(evaluation.cases)}
        names = ", ".join(
            f'<a href="#case-{anchors[case_id]}" class="mono">{_e(case_id)}</a>'
            for case_id in gate.cases
        )
        return (
            f'<div class="gate failed">Gate failed: {plural(count, "case")} ({names}) '
            f"<span>· {watched} fail the gate · exit code {gate.exit_code}</span></div>"
        )
    return f'<div class="gate passed">Gate passed <span>(watching {_e(watched)})</span></div>'


def _totals(evaluation: Evaluation) -> str:
    cells = [
        f'<div class="total" style="border-left-color:var(--{v})"><b>'
        f"{evaluation.totals.get(v, 0)}</b><small>{_e(LABELS[v])}</small></div>"
        for v in VERDICTS
        if v != "not_run" or evaluation.totals.get(v)  # shown only when a case was not run
    ]
    return f'<div class="totals">{"".join(cells)}</div>'


def _problems(evaluation: Evaluation, exists: Callable[[str], bool]) -> str:
    if not evaluation.problems:
        return ""
    items = "".join(
        f"<li>{_link(p.file if exists(p.file) else None, p.file)} <code>{_e(p.field)}</code>: "
        f"{_e(p.message)}</li>"
        for p in evaluation.problems
    )
    return (
        f"<h2>Files that could not be read ({len(evaluation.problems)})</h2>"
        f'<div class="problems"><ul>{items}</ul></div>'
    )


def _summary_table(evaluation: Evaluation) -> str:
    rows = []
    for index, case in enumerate(evaluation.cases):
        rows.append(
            "<tr>"
            f'<td class=nowrap><a href="#case-{index}" class="mono">{_e(case.case_id)}</a>'
            f"{_case_title(case)}</td>"
            f"<td>{_pill(case.verdict)}</td>"
            f"<td>{_status(case.baseline)}</td><td>{_status(case.new)}</td>"
            f"<td class=nowrap>{_risk_change(case.baseline, case.new)}</td>"
            f"<td>{_output_change(case)}</td>"
            f"<td>{_e(case.reasons[0]) if case.reasons else ''}</td>"
            "</tr>"
        )
    head = (
        "<tr><th>Case</th><th>Verdict</th><th>Baseline</th><th>New</th>"
        "<th>Riskiest action</th><th>Output</th><th>Why</th></tr>"
    )
    return f'<h2>Summary</h2><div class="summary"><table>{head}{"".join(rows)}</table></div>'


def _case_title(case: CaseEvaluation) -> str:
    return f'<div class="dim">{_e(case.title)}</div>' if case.title else ""


def _output_change(case: CaseEvaluation) -> str:
    """Whether the output changed; a side that gave none (its runner failed, its case file
    is missing) says so, for "same" would claim two outputs were compared."""
    sides = (("baseline", case.baseline), ("new", case.new))
    gone = [(name, side.status) for name, side in sides if side.status != "ok"]
    if not gone:
        return "changed" if case.output_changed else '<span class="dim">same</span>'
    if len(gone) == 2 and gone[0][1] == gone[1][1]:
        gone = [("", gone[0][1])]  # one reason for both
    told = "; ".join(
        f"{name + ': ' if name else ''}no output ({STATUS_LABELS.get(status, status)})"
        for name, status in gone
    )
    return f'<span class="st bad">{_e(told)}</span>'


def _risk_change(baseline: Side, new: Side) -> str:
    """The riskiest action on each side; a side that did not answer shows a dash."""

    def shown(side: Side) -> str:
        return _risk(side.max_risk) if side.status == "ok" else '<span class="dim">—</span>'

    if baseline.status != "ok" and new.status != "ok":
        return shown(baseline)
    return f"{shown(baseline)} → {shown(new)}"


def _status(side: Side) -> str:
    label = STATUS_LABELS.get(side.status, side.status)
    if side.status == "ok":
        return f'<span class="st">{_e(label)}</span>'
    detail = ""
    if side.failure is not None:
        code = f" {side.failure.http_status}" if side.failure.http_status is not None else ""
        detail = f" · {side.failure.error_class}{code}"
    return f'<span class="st bad">{_e(label + detail)}</span>'


def _case(index: int, case: CaseEvaluation) -> str:
    reasons = "".join(f"<li>{_e(reason)}</li>" for reason in case.reasons)
    return (
        f'<section class="case" id="case-{index}" style="border-left-color:var(--{case.verdict})">'
        f'<header><h2 class="mono">{_e(case.case_id)}</h2>{_pill(case.verdict)}</header>'
        + (f'<p class="title">{_e(case.title)}</p>' if case.title else "")
        + (f'<ul class="reasons">{reasons}</ul>' if reasons else "")
        + _diff(case)
        + _action_changes(case)
        + '<div class="sides">'
        + _side("Baseline", case.baseline)
        + _side("New", case.new)
        + "</div></section>"
    )


def _diff(case: CaseEvaluation) -> str:
    if not case.output_diff:
        return ""
    lines = []
    for line in case.output_diff:
        kind = "hunk" if line.startswith(("@@", "---", "+++")) else ""
        kind = kind or {"+": "add", "-": "del"}.get(line[:1], "")
        lines.append(f'<span class="{kind}">{_e(line)}</span>' if kind else _e(line) + "\n")
    return f'<h3>Output diff</h3><pre class="diff">{"".join(lines)}</pre>'


def _action_changes(case: CaseEvaluation) -> str:
    changed = [c for c in case.action_changes if c.change != "same"]
    if not changed:
        return ""
    rows = "".join(
        f"<tr><td class=mono>{_e(c.action_id)}</td><td class=mono>{_e(c.tool_name)}</td>"
        f"<td>{_e(c.change)}</td><td>{_risk(c.baseline_risk)} → {_risk(c.new_risk)}</td></tr>"
        for c in changed
    )
    return (
        '<h3>Action changes</h3><table class="actions"><tr><th>Action</th><th>Tool</th>'
        f"<th>Change</th><th>Risk</th></tr>{rows}</table>"
    )


def _side(title: str, side: Side) -> str:
    parts = [f'<div class="side"><h3>{title} · {_status(side)}</h3>']
    if side.case_file:
        parts.append(f'<div class="dim">case file {_link(side.case_file, side.case_file)}</div>')
    if side.problem:
        parts.append(f'<div class="failure">{_e(side.problem)}</div>')
    if side.failure is not None:
        parts.append(_failure(side))
    if side.output_text is not None:
        text = side.output_text
        if len(text) > MAX_OUTPUT_CHARS:
            text = text[:MAX_OUTPUT_CHARS] + "\n… (cut; the case file holds the whole output)"
        parts.append(f"<h3>Final output ({_e(side.output_type)})</h3><pre>{_e(text)}</pre>")
    if side.expected_met is not None:
        met = "met" if side.expected_met else "missed: " + "; ".join(side.expected_misses)
        tone = "met" if side.expected_met else "missed"
        parts.append(f'<div class="{tone}">Expectations {_e(met)}</div>')
    if side.status == "ok":
        parts.append(_actions(side.actions, side.case_file))
    parts.append("</div>")
    return "".join(parts)


def _failure(side: Side) -> str:
    failure = side.failure
    assert failure is not None
    rows = [("class", _e(failure.error_class))]
    if failure.http_status is not None:
        rows.append(("HTTP status", _e(failure.http_status)))
    if failure.message:
        rows.append(("message", _e(failure.message)))
    if failure.attempt is not None and failure.attempt > 1:
        rows.append(("tries", f"{failure.attempt} (every one failed; see the case file)"))
    if failure.url:
        rows.append(("url", f"<code>{_e(failure.url)}</code>"))
    if failure.full_body_href:
        cut = " (truncated)" if failure.truncated else ""
        rows.append(("full body", _link(failure.full_body_href, "open the saved body") + cut))
    if failure.full_body_meta_href:
        rows.append(("body meta", _link(failure.full_body_meta_href, "metadata")))
    cells = "".join(f"<dt>{name}</dt><dd>{value}</dd>" for name, value in rows)
    snippet = ""
    if failure.body_snippet is not None:
        shown = _e(failure.body_snippet)
        snippet = f"<details><summary>body snippet</summary><pre>{shown}</pre></details>"
    return f'<div class="failure"><dl>{cells}</dl>{snippet}</div>'


def _actions(actions: list[ActionView], case_file: str | None) -> str:
    if not actions:
        return '<h3>Proposed actions</h3><div class="dim">none</div>'
    rows = "".join(
        "<tr>"
        f"<td class=mono>{_e(a.action_id)}</td>"
        f"<td class=mono>{_e(a.tool_name)}<div class=dim>{_e(a.action_type)}</div></td>"
        f"<td>{_risk(a.risk_level)}<div class=dim>{_e(', '.join(a.risk_tags))}</div></td>"
        f"<td><details><summary>params</summary><pre>"
        f"{_e(json.dumps(a.params, indent=2, sort_keys=True, ensure_ascii=False))}</pre>"
        f"</details></td>"
        f"<td>{_evidence(a, case_file)}</td>"
        "</tr>"
        for a in actions
    )
    return (
        '<h3>Proposed actions</h3><table class="actions"><tr><th>Action</th><th>Tool</th>'
        f"<th>Risk</th><th>Params</th><th>Evidence</th></tr>{rows}</table>"
    )


def _evidence(action: ActionView, case_file: str | None) -> str:
    links = []
    for link in action.evidence:
        label = {"tool_result": "call ", "retrieval_doc": "doc ", "asset": "asset "}.get(
            link.kind, ""
        ) + link.ref
        if not link.resolved:
            links.append(f'<div class="unresolved">{_e(label)}: unresolved</div>')
            continue
        shown = link.where and link.where != link.ref
        where = f" <span class=dim>{_e(link.where)}</span>" if shown else ""
        links.append(f"<div>{_link(link.href or case_file, label)}{where}</div>")
    return "".join(links) or '<span class="dim">none</span>'
