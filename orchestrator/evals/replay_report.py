"""``report.html`` of a replay of recorded runs: every run's status at a glance, then
what changed in each run that did not replay unchanged.

The page is the agent regression report's kind (:mod:`.report`: its style, its
escaping, its Content-Security-Policy): it stands alone, loads nothing, and links only
within itself. Everything that came from a run (paths, ids, outputs, prompts, reasons)
is escaped: a recorded run is untrusted, and an output may well hold HTML or a script.
"""

from __future__ import annotations

import json
from typing import Any

from .._text import plural
from .report import escaped, page_head

LABELS = {
    "unchanged": "Unchanged",
    "outputs_changed": "Outputs changed",
    "diverged": "Diverged",
    "failed": "Failed",
}
#: The colours of the statuses, beside the shared page style's.
_STYLE = (
    ":root{--outputs_changed:#b54708;--diverged:#c4320a;--failed:#b42318}"
    ".change td{font-size:13px}.change code{word-break:break-word}"
)
#: A value shown in a diff longer than this is cut; summary.json holds the whole.
MAX_VALUE_CHARS = 2000


def render_replay_report(summary: dict[str, Any]) -> str:
    """The whole page, as text, from ``summary.json``'s document."""
    title = "Workflow replay report"
    runs: list[dict[str, Any]] = summary["runs"]
    parts = [
        page_head(title, style=_STYLE),
        f"<h1>{title}</h1>",
        f'<p class="sub">Workflow <span class="mono">{escaped(summary["workflow_name"])}'
        f"</span> ({escaped(summary['workflow'])}) · {plural(len(runs), 'recorded run')} · "
        f"replayed {escaped(summary['generated_at'])}</p>",
        _gate(summary),
        _totals(summary),
        _skipped(summary),
        _summary_table(runs),
        "<h2>Runs that did not replay unchanged</h2>"
        if any(r["status"] != "unchanged" for r in runs)
        else "",
        *(_run(index, run) for index, run in enumerate(runs) if run["status"] != "unchanged"),
        '<footer>summary.json <a href="summary.json">beside this page</a> holds the same '
        "data.</footer>",
        "</main></body></html>",
    ]
    return "\n".join(part for part in parts if part) + "\n"


def _pill(status: str) -> str:
    return f'<span class="pill" style="background:var(--{status})">{escaped(LABELS[status])}</span>'


def _gate(summary: dict[str, Any]) -> str:
    gate = summary["gate"]
    watched = ", ".join(LABELS[s].lower() for s in gate["fail_on"]) or "nothing"
    if gate["failed"]:
        return (
            f'<div class="gate failed">Gate failed: {plural(len(gate["runs"]), "run")} '
            f"<span>· {escaped(watched)} fail the gate · exit code {gate['exit_code']}"
            "</span></div>"
        )
    return f'<div class="gate passed">Gate passed <span>(watching {escaped(watched)})</span></div>'


def _totals(summary: dict[str, Any]) -> str:
    cells = [
        f'<div class="total" style="border-left-color:var(--{status})"><b>'
        f"{summary['totals'].get(status, 0)}</b><small>{escaped(label)}</small></div>"
        for status, label in LABELS.items()
    ]
    return f'<div class="totals">{"".join(cells)}</div>'


def _skipped(summary: dict[str, Any]) -> str:
    skipped = summary.get("skipped") or []
    if not skipped:
        return ""
    items = "".join(
        f'<li><span class="mono">{escaped(s["path"])}</span>: {escaped(s["skipped"])}</li>'
        for s in skipped
    )
    return (
        f"<h2>Runs of other workflows, not replayed ({len(skipped)})</h2>"
        f'<div class="problems"><ul>{items}</ul></div>'
    )


def _summary_table(runs: list[dict[str, Any]]) -> str:
    rows = []
    for index, run in enumerate(runs):
        name = escaped(run["run_id"] or "(unread)")
        anchor = f'<a href="#run-{index}" class="mono">{name}</a>'
        rows.append(
            "<tr>"
            f"<td class=nowrap>"
            f"{anchor if run['status'] != 'unchanged' else f'<span class=mono>{name}</span>'}"
            f'<div class="dim mono">{escaped(run["path"])}</div></td>'
            f"<td>{_pill(run['status'])}</td>"
            f"<td>{escaped(run['recorded_status'] or '—')}</td>"
            f"<td>{escaped(_inputs(run['inputs']))}</td>"
            f"<td>{escaped(run['reason'] or '')}</td>"
            "</tr>"
        )
    head = "<tr><th>Run</th><th>Status</th><th>Recorded</th><th>Inputs</th><th>Why</th></tr>"
    return f'<h2>Summary</h2><div class="summary"><table>{head}{"".join(rows)}</table></div>'


def _inputs(inputs: Any) -> str:
    if not isinstance(inputs, dict):
        return ""
    return ", ".join(f"{key}={_shown(value)}" for key, value in inputs.items())


def _run(index: int, run: dict[str, Any]) -> str:
    status = run["status"]
    parts = [
        f'<section class="case" id="run-{index}" style="border-left-color:var(--{status})">'
        f'<header><h2 class="mono">{escaped(run["run_id"] or run["path"])}</h2>'
        f"{_pill(status)}</header>",
        f'<div class="dim mono">{escaped(run["path"])}</div>',
    ]
    if status == "failed":
        parts.append(f'<h3>Why</h3><div class="failure">{escaped(run["reason"])}</div>')
    divergence = run.get("divergence")
    if divergence is not None:
        where = f"phase {divergence['phase']}"
        if divergence["position"] is not None:
            where += f", position {divergence['position']}"
        parts.append(
            f"<h3>First difference · {escaped(where)}</h3>"
            '<div class="sides">'
            f'<div class="side"><h3>Recorded</h3><pre>{escaped(divergence["recorded"])}</pre></div>'
            f'<div class="side"><h3>Now</h3><pre>{escaped(divergence["now"])}</pre></div>'
            "</div><details><summary>the whole message</summary>"
            f"<pre>{escaped(divergence['message'])}</pre></details>"
        )
    parts += [_phase(phase) for phase in run["phases"] if phase["status"] == "changed"]
    parts.append("</section>")
    return "".join(parts)


def _phase(phase: dict[str, Any]) -> str:
    note = (
        ""
        if phase["completed_when_recorded"]
        else ' <span class="dim">(the recorded run did not complete it; it completes now)</span>'
    )
    rows = "".join(
        f"<tr><td class=mono>{escaped(c['path'])}</td><td>{escaped(c['change'])}</td>"
        f"<td><code>{escaped(_shown(c['old']))}</code></td>"
        f"<td><code>{escaped(_shown(c['new']))}</code></td></tr>"
        for c in phase["changes"]
    )
    more = (
        f'<div class="dim">… {plural(phase["more_changes"], "more change")} in summary.json</div>'
        if phase["more_changes"]
        else ""
    )
    return (
        f"<h3>Phase {escaped(phase['name'])} · output changed{note}</h3>"
        '<table class="actions change"><tr><th>Path</th><th>Change</th><th>Recorded</th>'
        f"<th>Now</th></tr>{rows}</table>{more}"
    )


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    if len(text) > MAX_VALUE_CHARS:
        return text[:MAX_VALUE_CHARS] + " … (cut; summary.json holds the whole)"
    return text
