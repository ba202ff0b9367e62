"""A baseline run against a new run of the same cases: one verdict per case.

How a verdict is judged (``docs/formats/evaluation.md`` says the same for users):

0. A case a run selected but never recorded (the run was stopped before it, and the
   comparison was asked to go on: ``--allow-incomplete``) is ``not_run``, whatever the
   other side holds: nothing is known of it, so it fails any gate.
1. Each side of a case is *failing* when the runner produced no response artifact for it
   (``status: runner_error``), when the run has no file for it, or when its file cannot be
   read as a case artifact. Otherwise it is *ok*.
2. Failing on both sides: ``both_failing``. Ok in the baseline only: ``new_failure``. Ok in
   the new run only: ``fixed``.
3. Ok on both sides, the two are ranked, most important first:
   a. the case's expectations (``expected`` in the cases file, when given): met beats
      missed;
   b. the riskiest proposed action: fewer risky actions is better, ranked
      ``low < medium < unknown < high`` (``unknown`` was never shown to be safe).
   The first of these that differs decides ``improved`` or ``regressed``; when neither
   differs the case is ``unchanged``, and a changed output is still shown as a diff
   (a different wording is not by itself better or worse).

Actions are matched across the runs by ``action_id``.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs

from ..formats.evaluation import (
    EVIDENCE_KINDS,
    RISK_LEVELS,
    VERDICTS,
    ActionChange,
    ActionView,
    CaseEvaluation,
    Evaluation,
    EvidenceLink,
    FailureView,
    Gate,
    Problem,
    RunRef,
    Side,
)
from .reading import CaseFile, RunDir, file_inside, ref_identifier, resolve_ref, scrub_paths

#: ``--fail-on``'s default: what a CI job blocks a change for.
DEFAULT_FAIL_ON = ("regressed", "new_failure")
EXIT_PASSED, EXIT_GATE_FAILED = 0, 1
#: A diff longer than this is cut (the full outputs are one click away in the case files).
MAX_DIFF_LINES = 400
#: Only this much of each output is diffed: difflib's time grows fast with the size of
#: its input, and an output may be tens of MB. The diff says when it was cut.
MAX_DIFF_INPUT_CHARS = 256 * 1024


@attrs.define(kw_only=True, frozen=True)
class Expectation:
    """What a case expects of an ok response (all optional): text the output contains,
    the output exactly, the riskiest action level allowed."""

    output_contains: tuple[str, ...] = ()
    output_equals: Any = None
    max_risk_level: str | None = None


def compare_runs(
    baseline: RunDir,
    new: RunDir,
    *,
    out_dir: Path,
    expectations: dict[str, Expectation],
    titles: dict[str, str] | None = None,
    fail_on: Iterable[str] = DEFAULT_FAIL_ON,
    generated_at: str,
    evaluator_version: str,
) -> Evaluation:
    """Judge every case of either run; every path in the result is relative to ``out_dir``.
    ``titles``: the cases' titles in the cases file, by case id."""
    case_ids = sorted(set(baseline.cases) | set(new.cases))
    titles = titles or {}
    cases = [
        _judge_case(
            case_id,
            _side(baseline, case_id, out_dir, expectations.get(case_id)),
            _side(new, case_id, out_dir, expectations.get(case_id)),
            baseline.cases.get(case_id),
            new.cases.get(case_id),
        )
        for case_id in case_ids
    ]
    for case in cases:
        case.title = titles.get(case.case_id)
    cases.sort(key=lambda case: (-case.severity, not case.output_changed, case.case_id))
    watched = set(fail_on)
    if watched:
        watched.add("not_run")  # a case never run passes no gate
    fail_on = [verdict for verdict in VERDICTS if verdict in watched]
    breaching = [case.case_id for case in cases if case.verdict in fail_on]
    counts = dict.fromkeys(VERDICTS, 0)
    for case in cases:
        counts[case.verdict] += 1
    # not_run is counted only when a case has it: a complete comparison reads as it did
    totals = {"cases": len(cases), **{v: n for v, n in counts.items() if n or v != "not_run"}}
    return Evaluation(
        generated_at=generated_at,
        evaluator_version=evaluator_version,
        baseline=_run_ref(baseline, "baseline", out_dir),
        new=_run_ref(new, "new", out_dir),
        totals=totals,
        gate=Gate(
            fail_on=fail_on,
            failed=bool(breaching),
            exit_code=EXIT_GATE_FAILED if breaching else EXIT_PASSED,
            cases=breaching,
        ),
        problems=[
            Problem(
                file=_href(run.path, problem.file, out_dir),
                field=problem.field,
                message=scrub_paths(problem.message),
            )
            for run in (baseline, new)
            for problem in run.problems
        ],
        cases=cases,
    )


def _run_ref(run: RunDir, version: str, out_dir: Path) -> RunRef:
    data = run.run or {}

    def text(key: str) -> str | None:
        value = data.get(key)
        return value if isinstance(value, str) else None

    return RunRef(
        version=version,
        dir=_href(run.path, ".", out_dir),
        run_id=text("run_id"),
        runner_version=text("runner_version"),
        generated_at=text("generated_at"),
    )


def _href(run_dir: Path, name: str, out_dir: Path) -> str:
    """``name`` (relative to ``run_dir``) as a path relative to ``out_dir``."""
    relative = run_dir.resolve().relative_to(out_dir.resolve())
    joined = (relative / name).as_posix() if name != "." else relative.as_posix()
    return joined.removeprefix("./") or "."


# -- one side of a case ----------------------------------------------------------------------


def _side(run: RunDir, case_id: str, out_dir: Path, expected: Expectation | None) -> Side:
    if case_id in run.unrecorded:
        return Side(
            status="not_run",
            problem=f"the {_which(run)} run stopped before it recorded case {case_id!r}",
        )
    case = run.cases.get(case_id)
    if case is None:
        return Side(status="missing", problem=f"the {_which(run)} run has no case {case_id!r}")
    case_file = _href(run.path, case.name, out_dir)
    if case.problem is not None:
        return Side(
            status="unreadable",
            case_file=_existing(run, case, case_file),
            problem=scrub_paths(f"{case.problem.field}: {case.problem.message}"),
        )
    if case.data is None:
        return Side(
            status="missing", problem=f"{case.name} is listed in run.json but was not written"
        )
    if case.data["status"] == "runner_error":
        return Side(
            status="runner_error",
            case_file=case_file,
            failure=_failure(case.data["runner_failure"], run, out_dir),
        )
    return _ok_side(case.data, run, case_file, out_dir, expected)


def _which(run: RunDir) -> str:
    return run.version or "other"


def _existing(run: RunDir, case: CaseFile, href: str) -> str | None:
    return href if file_inside(run.path, case.name) is not None else None


def _failure(failure: dict[str, Any], run: RunDir, out_dir: Path) -> FailureView:
    def text(key: str) -> str | None:
        # What a runner saw (a command line, a traceback on stderr) may name the
        # machine's directories: each absolute path is cut to its last name.
        value = failure.get(key)
        return scrub_paths(value) if isinstance(value, str) else None

    def saved(key: str) -> str | None:
        href = failure.get(key)
        found = isinstance(href, str) and file_inside(run.path, href) is not None
        return _href(run.path, str(href), out_dir) if found else None

    status, attempt = failure.get("status"), failure.get("attempt")
    message = text("error_message") or text("status_text") or text("error_name")
    return FailureView(
        error_class=str(failure["class"]),
        url=text("url"),
        attempt=attempt if isinstance(attempt, int) and _is_int(attempt) and attempt >= 1 else None,
        http_status=status if _is_int(status) else None,
        message=message,
        body_snippet=text("body_snippet"),
        full_body_href=saved("full_body_saved_to"),
        full_body_meta_href=saved("full_body_meta_saved_to"),
        truncated=_truncated(run, failure.get("full_body_meta_saved_to")),
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _truncated(run: RunDir, meta_href: Any) -> bool | None:
    from .reading import read_document

    path = file_inside(run.path, meta_href)
    if path is None:
        return None
    meta, _ = read_document(path, name=str(meta_href), kind="failure-meta")
    value = (meta or {}).get("truncated")
    return value if isinstance(value, bool) else None


def _ok_side(
    data: dict[str, Any], run: RunDir, case_file: str, out_dir: Path, expected: Expectation | None
) -> Side:
    output = data["final_output"]
    text = output_text(output["content"])
    actions = [_action(action, data["events"], run, out_dir) for action in data["proposed_actions"]]
    max_risk = max((a.risk_level for a in actions), key=RISK_LEVELS.index, default=None)
    misses = _misses(expected, output["content"], text, max_risk) if expected else []
    output_hash = output.get("output_hash")
    return Side(
        status="ok",
        case_file=case_file,
        output_type=output["content_type"],
        output_text=text,
        output_hash=output_hash if isinstance(output_hash, str) else None,
        actions=actions,
        max_risk=max_risk,
        expected_met=None if expected is None else not misses,
        expected_misses=misses,
    )


def output_text(content: Any) -> str:
    """A final output as text: a string as it is, JSON pretty-printed with sorted keys (so
    a diff shows what changed, not how it was laid out)."""
    if isinstance(content, str):
        return content
    return json.dumps(content, indent=2, sort_keys=True, ensure_ascii=False)


def _action(action: dict[str, Any], events: list[Any], run: RunDir, out_dir: Path) -> ActionView:
    risk = action.get("risk_level")
    tags = action.get("risk_tags")
    params = action.get("params")
    refs = action.get("evidence_refs") or []
    return ActionView(
        action_id=action["action_id"],
        action_type=str(action.get("action_type", "")),
        tool_name=action["tool_name"],
        risk_level=risk if risk in RISK_LEVELS else "unknown",
        risk_tags=[tag for tag in tags if isinstance(tag, str)] if isinstance(tags, list) else [],
        params=params if isinstance(params, dict) else {},
        evidence=[_evidence(ref, events, run, out_dir) for ref in refs],
    )


def _evidence(ref: Any, events: list[Any], run: RunDir, out_dir: Path) -> EvidenceLink:
    resolution = resolve_ref(ref, events, run.path, run.manifest)
    kind, identifier = ref_identifier(ref) if isinstance(ref, dict) else ("", None)
    return EvidenceLink(
        kind=kind if kind in EVIDENCE_KINDS else "asset",
        ref=str(identifier) if identifier is not None else "",
        resolved=resolution.resolved,
        where=resolution.where,
        href=_href(run.path, resolution.href, out_dir) if resolution.href else None,
    )


def _misses(expected: Expectation, content: Any, text: str, max_risk: str | None) -> list[str]:
    misses = [
        f"output lacks {needle!r}" for needle in expected.output_contains if needle not in text
    ]
    if expected.output_equals is not None and expected.output_equals != content:
        misses.append("output differs from the expected output")
    limit = expected.max_risk_level
    too_risky = limit in RISK_LEVELS and max_risk is not None
    if too_risky and RISK_LEVELS.index(str(max_risk)) > RISK_LEVELS.index(str(limit)):
        misses.append(f"an action is {max_risk} risk, above the allowed {limit}")
    return misses


# -- the verdict -------------------------------------------------------------------------------


def _judge_case(
    case_id: str, baseline: Side, new: Side, base_file: CaseFile | None, new_file: CaseFile | None
) -> CaseEvaluation:
    verdict, reasons = judge(baseline, new)
    diff = output_diff(baseline.output_text, new.output_text)
    return CaseEvaluation(
        case_id=case_id,
        verdict=verdict,
        severity=len(VERDICTS) - 1 - VERDICTS.index(verdict),
        reasons=reasons,
        output_changed=bool(diff),
        output_diff=diff,
        # Actions are compared only when both sides answered: a failure proposes nothing.
        action_changes=(
            action_changes(baseline.actions, new.actions)
            if baseline.status == new.status == "ok"
            else []
        ),
        baseline=baseline,
        new=new,
    )


def judge(baseline: Side, new: Side) -> tuple[str, list[str]]:
    """The verdict of a case from its two sides, and the reasons, in words."""
    stopped = [
        name for name, side in (("baseline", baseline), ("new", new)) if side.status == "not_run"
    ]
    if stopped:
        return "not_run", [
            f"{name}: not run (the run stopped before this case)" for name in stopped
        ]
    base_ok, new_ok = baseline.status == "ok", new.status == "ok"
    if not base_ok and not new_ok:
        return "both_failing", [f"baseline: {_failing(baseline)}", f"new: {_failing(new)}"]
    if base_ok and not new_ok:
        return "new_failure", [f"new: {_failing(new)}"]
    if not base_ok:
        return "fixed", [f"baseline: {_failing(baseline)}; the new run answers"]
    if baseline.expected_met is not None and baseline.expected_met != new.expected_met:
        if new.expected_met:
            return "improved", ["the new run meets the expectations the baseline missed"]
        return "regressed", [f"new: {miss}" for miss in new.expected_misses]
    if baseline.max_risk != new.max_risk:
        before, after = (
            RISK_LEVELS.index(s.max_risk) if s.max_risk else -1 for s in (baseline, new)
        )
        shown = f"riskiest action {baseline.max_risk or 'none'} -> {new.max_risk or 'none'}"
        return ("regressed" if after > before else "improved"), [shown]
    return "unchanged", []


def _failing(side: Side) -> str:
    if side.failure is not None:
        status = f" {side.failure.http_status}" if side.failure.http_status is not None else ""
        return f"runner error {side.failure.error_class}{status}"
    return side.problem or side.status


def output_diff(before: str | None, after: str | None) -> list[str]:
    """Unified diff lines from one output to the other (empty when equal or absent)."""
    if before is None or after is None or before == after:
        return []
    cut_input = max(len(before), len(after)) > MAX_DIFF_INPUT_CHARS
    before, after = _head(before), _head(after)
    lines = list(
        difflib.unified_diff(
            before.splitlines(), after.splitlines(), "baseline", "new", lineterm="", n=2
        )
    )
    if len(lines) > MAX_DIFF_LINES:
        cut = len(lines) - MAX_DIFF_LINES
        lines = [*lines[:MAX_DIFF_LINES], f"@@ {cut} more lines of diff not shown @@"]
    if cut_input:
        lines.append(
            f"@@ only the first {MAX_DIFF_INPUT_CHARS // 1024} KB of each output were "
            "compared; the case files hold the whole @@"
        )
    return lines


def _head(text: str) -> str:
    """The first :data:`MAX_DIFF_INPUT_CHARS` of ``text``, ending at a line's end."""
    if len(text) <= MAX_DIFF_INPUT_CHARS:
        return text
    head = text[:MAX_DIFF_INPUT_CHARS]
    return head[: head.rfind("\n") + 1] or head


def action_changes(before: list[ActionView], after: list[ActionView]) -> list[ActionChange]:
    """Each action of either side, matched by ``action_id``: added, removed, riskier,
    safer, changed (tool, type or parameters) or the same."""
    old = {action.action_id: action for action in before}
    new = {action.action_id: action for action in after}
    changes = []
    for action_id in [*old, *(key for key in new if key not in old)]:
        a, b = old.get(action_id), new.get(action_id)
        if a is None or b is None:
            only = b if a is None else a
            assert only is not None
            changes.append(
                ActionChange(
                    action_id=action_id,
                    change="added" if a is None else "removed",
                    tool_name=only.tool_name,
                    baseline_risk=a.risk_level if a else None,
                    new_risk=b.risk_level if b else None,
                )
            )
            continue
        changes.append(
            ActionChange(
                action_id=action_id,
                change=_change(a, b),
                tool_name=b.tool_name,
                baseline_risk=a.risk_level,
                new_risk=b.risk_level,
            )
        )
    return changes


def _change(a: ActionView, b: ActionView) -> str:
    rank_a, rank_b = RISK_LEVELS.index(a.risk_level), RISK_LEVELS.index(b.risk_level)
    if rank_b != rank_a:
        return "riskier" if rank_b > rank_a else "safer"
    same = (a.tool_name, a.action_type, a.params) == (b.tool_name, b.action_type, b.params)
    return "same" if same else "changed"
