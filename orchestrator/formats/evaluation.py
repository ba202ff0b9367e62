"""``evaluation.json``: what ``orchestrate eval compare`` judged of a baseline and a new run.

The agent artifact contract leaves the evaluator's output to the project; this module is
its definition: attrs models, reading with path-precise errors, the rules a type cannot
say, and the shipped JSON Schema (``orchestrator/formats/schemas/evaluation.schema.json``)
saying the same. ``docs/formats/evaluation.md`` is the reference, including how each
verdict is judged.

Every path in the document (``dir``, ``case_file``, ``href``) is relative to the
directory holding ``evaluation.json`` and stays inside it, so the folder can be copied
anywhere. An optional field is omitted, never null.
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from .._errors import UnknownVersionError
from .convert import null_problem, refusal, structure, unstructure

__all__ = [
    "ACTION_CHANGES",
    "EVALUATION_FILE",
    "EVALUATION_SCHEMA_VERSION",
    "RISK_LEVELS",
    "SIDE_STATUSES",
    "VERDICTS",
    "ActionChange",
    "ActionView",
    "CaseEvaluation",
    "Evaluation",
    "EvidenceLink",
    "FailureView",
    "Gate",
    "Problem",
    "RunRef",
    "Side",
    "evaluation_schema",
    "parse_evaluation",
    "unstructure_evaluation",
    "validate_evaluation",
]

EVALUATION_FILE = "evaluation.json"
EVALUATION_SCHEMA_VERSION = "evaluation.v1"
#: The verdicts, most severe first: the report's order and the ``severity`` they get.
#: ``not_run``: a run stopped before it recorded the case (compared only when asked to);
#: it fails any gate, and ``totals`` counts it only when a case has it.
VERDICTS = (
    "not_run",
    "new_failure",
    "regressed",
    "both_failing",
    "fixed",
    "improved",
    "unchanged",
)
#: Risk levels from least to most worrying: ``unknown`` was not shown to be safe, so it
#: ranks above ``medium``, below a level someone judged ``high``.
RISK_LEVELS = ("low", "medium", "unknown", "high")
SIDE_STATUSES = ("ok", "runner_error", "missing", "unreadable", "not_run")
ACTION_CHANGES = ("same", "changed", "riskier", "safer", "added", "removed")
EVIDENCE_KINDS = ("tool_result", "retrieval_doc", "event", "asset")
_VERSION = re.compile(r"evaluation\.v([0-9]+)(?:\.([0-9]+))?")


@attrs.define(kw_only=True)
class Problem:
    """A file the evaluator could not read whole: which, where in it, and what is wrong."""

    file: str
    field: str
    message: str


@attrs.define(kw_only=True)
class RunRef:
    """One of the two runs compared: its directory (relative) and what ``run.json`` says."""

    version: str
    dir: str
    run_id: str | None = None
    runner_version: str | None = None
    generated_at: str | None = None


@attrs.define(kw_only=True)
class EvidenceLink:
    """An action's evidence ref, resolved: ``where`` in the case file (``events[3]``) or
    ``href`` to a file (relative), or ``resolved`` false."""

    kind: str
    ref: str
    resolved: bool
    where: str | None = None
    href: str | None = None


@attrs.define(kw_only=True)
class ActionView:
    """A proposed action as the report shows it."""

    action_id: str
    action_type: str
    tool_name: str
    risk_level: str
    risk_tags: list[str]
    params: dict[str, Any]
    evidence: list[EvidenceLink]


@attrs.define(kw_only=True)
class FailureView:
    """A runner failure: its class, HTTP status, snippet, and links to the saved body."""

    error_class: str
    url: str | None = None
    attempt: int | None = None
    http_status: int | None = None
    message: str | None = None
    body_snippet: str | None = None
    full_body_href: str | None = None
    full_body_meta_href: str | None = None
    truncated: bool | None = None


@attrs.define(kw_only=True)
class Side:
    """One case in one run: its status and output, or why there is none."""

    status: str
    case_file: str | None = None
    output_type: str | None = None
    output_text: str | None = None
    output_hash: str | None = None
    actions: list[ActionView] = attrs.Factory(list)
    max_risk: str | None = None
    expected_met: bool | None = None
    expected_misses: list[str] = attrs.Factory(list)
    failure: FailureView | None = None
    problem: str | None = None


@attrs.define(kw_only=True)
class ActionChange:
    """How one proposed action (matched by ``action_id``) differs between the runs."""

    action_id: str
    change: str
    tool_name: str
    baseline_risk: str | None = None
    new_risk: str | None = None


@attrs.define(kw_only=True)
class CaseEvaluation:
    """One case judged: the verdict, why, and both sides."""

    case_id: str
    verdict: str
    severity: int
    reasons: list[str]
    output_changed: bool
    output_diff: list[str]
    action_changes: list[ActionChange]
    baseline: Side
    new: Side
    #: the case's title in the cases file, when it has one
    title: str | None = None


@attrs.define(kw_only=True)
class Gate:
    """The CI gate: which verdicts fail it, whether it failed, the exit code, the cases."""

    fail_on: list[str]
    failed: bool
    exit_code: int
    cases: list[str]


@attrs.define(kw_only=True)
class Evaluation:
    """``evaluation.json``: the comparison of a baseline run with a new one."""

    schema_version: str = EVALUATION_SCHEMA_VERSION
    generated_at: str
    evaluator_version: str
    baseline: RunRef
    new: RunRef
    totals: dict[str, int]
    gate: Gate
    problems: list[Problem]
    cases: list[CaseEvaluation]


def parse_evaluation(data: Any, *, source: str = EVALUATION_FILE) -> Evaluation:
    """Read an ``evaluation.json`` document; ``ContractError`` names the file and field.

    A major version other than 1 is refused before anything else (fail closed).
    """
    if isinstance(data, dict):
        _check_version(data.get("schema_version"), source)
    nulls = list(_nulls(data, "$"))
    if nulls:
        raise refusal([null_problem(path, [key]) for path, key in nulls], source=source)
    evaluation = structure(data, Evaluation, source=source)
    validate_evaluation(evaluation, source=source)
    return evaluation


def _nulls(value: Any, at: str) -> Any:
    """``(path of the object, key)`` of each null outside an action's open ``params``."""
    if isinstance(value, dict):
        for key, item in value.items():
            if item is None:
                yield at, str(key)
            elif key != "params":
                yield from _nulls(item, f"{at}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _nulls(item, f"{at}[{index}]")


def unstructure_evaluation(evaluation: Evaluation) -> dict[str, Any]:
    """The JSON-ready form (optional fields left out)."""
    data: dict[str, Any] = unstructure(evaluation)
    return data


def validate_evaluation(evaluation: Evaluation, *, source: str = EVALUATION_FILE) -> None:
    """The rules beyond types: known verdicts, statuses, risk levels; relative paths."""
    problems: list[tuple[str, str, str]] = []
    _check_version(evaluation.schema_version, source)

    def one_of(value: str | None, allowed: tuple[str, ...], path: str) -> None:
        if value is not None and value not in allowed:
            problems.append((path, "enum", f"{value!r} is not one of {', '.join(allowed)}"))

    def relative(value: str | None, path: str) -> None:
        if value is not None and not is_relative_href(value):
            problems.append((path, "pattern", f"{value!r} is not a relative path inside"))

    for verdict in evaluation.gate.fail_on:
        one_of(verdict, VERDICTS, "$.gate.fail_on")
    for key in evaluation.totals:
        one_of(key, (*VERDICTS, "cases"), f"$.totals.{key}")
    for name in ("baseline", "new"):
        relative(getattr(evaluation, name).dir, f"$.{name}.dir")
    for index, case in enumerate(evaluation.cases):
        at = f"$.cases[{index}]"
        one_of(case.verdict, VERDICTS, f"{at}.verdict")
        for change_index, change in enumerate(case.action_changes):
            one_of(change.change, ACTION_CHANGES, f"{at}.action_changes[{change_index}].change")
        for name in ("baseline", "new"):
            _side_rules(getattr(case, name), f"{at}.{name}", one_of, relative)
    if problems:
        raise refusal(problems, source=source)


def _side_rules(side: Side, at: str, one_of: Any, relative: Any) -> None:
    one_of(side.status, SIDE_STATUSES, f"{at}.status")
    one_of(side.max_risk, RISK_LEVELS, f"{at}.max_risk")
    relative(side.case_file, f"{at}.case_file")
    if side.failure is not None:
        relative(side.failure.full_body_href, f"{at}.failure.full_body_href")
        relative(side.failure.full_body_meta_href, f"{at}.failure.full_body_meta_href")
    for index, action in enumerate(side.actions):
        one_of(action.risk_level, RISK_LEVELS, f"{at}.actions[{index}].risk_level")
        for ref_index, link in enumerate(action.evidence):
            where = f"{at}.actions[{index}].evidence[{ref_index}]"
            one_of(link.kind, EVIDENCE_KINDS, f"{where}.kind")
            relative(link.href, f"{where}.href")


def is_relative_href(value: str) -> bool:
    """A ``/``-separated relative path that does not climb out (no ``..``, no drive, no
    scheme, no leading ``/`` or ``\\``)."""
    if not value or value.startswith(("/", "\\")) or re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", value):
        return False
    return ".." not in value.replace("\\", "/").split("/")


def _check_version(version: Any, source: str) -> None:
    if not isinstance(version, str):
        return  # the structuring names the missing or mistyped field
    match = _VERSION.fullmatch(version)
    if match is None or match.group(1) != "1":
        raise UnknownVersionError(
            f"schema_version {version!r} is not evaluation.v1 (or a later evaluation.v1.N); "
            "use an orchestrate that knows it",
            source=source,
            json_path="$.schema_version",
            rule="const",
        )


def evaluation_schema() -> dict[str, Any]:
    """The shipped JSON Schema of ``evaluation.json``."""
    from .schemas import shipped_schema

    return shipped_schema("", "evaluation.schema.json")
