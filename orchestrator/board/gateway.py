"""The gateway: a subagent's answer in, a verdict (task IO with pins) out.

A subagent answers its assignment with a subagent result (a task board document) or a
``submit.json`` (task IO with pins). The gateway checks it against the task it was given
and produces the verdict's four checks; the first problem found is the blocking one, and
its code is reported both as a fail code of task IO (the verdict's ``reason_code``) and
as the task board error code the ledger records. Only PASS lets a task be done.

The order of the checks is the order of root causes: a document that cannot be read
says nothing about scope; out-of-scope work makes passing tests irrelevant.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import attrs

from .._errors import ContractError
from ..formats.board_documents import (
    SUBMIT_VERSION_PREFIX,
    CheckStatus,
    ErrorCode,
    FailCode,
    Pins,
    ResultStatus,
    SubagentResult,
    Submit,
    SubmitStatus,
    Task,
    Verdict,
    VerdictChecks,
    VerdictLinks,
    VerdictOutcome,
    VerdictTimestamps,
)

MAX_RESULT_BYTES = 4 * 1024 * 1024


@attrs.define
class Problem:
    """One reason a result cannot pass: both codes and a sentence."""

    code: ErrorCode
    fail_code: FailCode
    message: str


@attrs.define
class Judgement:
    """The gateway's answer: the verdict, and the blocking problem if it failed."""

    verdict: Verdict
    problem: Problem | None
    document: SubagentResult | Submit | None
    changed: list[str]  # the files the result says it changed or created

    @property
    def passed(self) -> bool:
        return self.problem is None


def evaluate(
    raw: bytes,
    *,
    task: Task,
    run_id: str,
    source: str,
    submitted_at: str,
    evaluated_at: str,
    result_link: str,
    pins: Pins | None = None,
    workspace: Path | None = None,
) -> Judgement:
    """Judge ``raw`` (the answer's bytes) as the result of ``task`` in run ``run_id``.

    ``pins`` narrows the scope further when the task has them; ``workspace`` is where a
    ``submit.json``'s artifact paths must exist (relative to it, never outside).
    """
    problems: list[Problem] = []
    document = _read(raw, source=source, task=task, run_id=run_id, problems=problems)
    schema_valid = document is not None
    changed = _changed_files(document)
    scope_valid = schema_valid and _check_scope(changed, task, pins, problems)
    if schema_valid:
        _check_secrets(document, problems)
    outcome_ok = schema_valid and _check_outcome(document, problems)
    tests_passed = outcome_ok and _check_tests(document, task, problems)
    evidence_present = schema_valid and _check_evidence(document, workspace, problems)
    checks = VerdictChecks(
        schema_valid=schema_valid,
        scope_valid=scope_valid,
        tests_passed=tests_passed,
        evidence_present=evidence_present,
    )
    first = problems[0] if problems else None
    verdict = Verdict(
        task_id=task.task_id,
        verdict=VerdictOutcome.PASS if first is None else VerdictOutcome.FAIL,
        reason_code=None if first is None else first.fail_code.value,
        messages=[p.message for p in problems] or ["every check passed"],
        checks=checks,
        timestamps=VerdictTimestamps(submitted_at=submitted_at, evaluated_at=evaluated_at),
        links=_links(document, result_link),
        x_code=None if first is None else first.code.value,
    )
    return Judgement(verdict=verdict, problem=first, document=document, changed=changed)


def _read(
    raw: bytes, *, source: str, task: Task, run_id: str, problems: list[Problem]
) -> SubagentResult | Submit | None:
    from ..formats.board_rules import error_code_for, parse_subagent_result, parse_submit
    from ..formats.strict_json import loads_strict

    try:
        data = loads_strict(raw, source=source, max_bytes=MAX_RESULT_BYTES)
        version = data.get("schema_version") if isinstance(data, dict) else None
        if isinstance(version, str) and version.startswith(SUBMIT_VERSION_PREFIX):
            document: SubagentResult | Submit = parse_submit(data, source=source)
        else:  # acceptance is judged below, against the task's own criteria
            document = parse_subagent_result(data, source=source, acceptance=False)
    except ContractError as exc:
        code = error_code_for(exc)
        problems.append(Problem(code, FailCode.SCHEMA_VIOLATION, str(exc)))
        return None
    wrong = []
    if document.task_id != task.task_id:
        wrong.append(f"task_id is {document.task_id}, the assignment was {task.task_id}")
    if isinstance(document, SubagentResult) and document.run_id.lower() != run_id.lower():
        wrong.append(f"run_id is {document.run_id}, the assignment's run is {run_id}")
    if wrong:
        problems.append(
            Problem(
                ErrorCode.SCHEMA_INVALID,
                FailCode.SCHEMA_VIOLATION,
                f"{source}: {'; '.join(wrong)}: a result answers the assignment it was given",
            )
        )
        return None
    return document


def _changed_files(document: SubagentResult | Submit | None) -> list[str]:
    if isinstance(document, SubagentResult):
        return [change.resource for change in document.changes]
    if isinstance(document, Submit):
        return [*document.changed_files, *document.new_files]
    return []


def _check_scope(
    changed: Sequence[str], task: Task, pins: Pins | None, problems: list[Problem]
) -> bool:
    from ..formats.scope import ScopeError, check_pins, in_scope, normalize_resource, pins_allow

    if pins is not None:
        try:
            check_pins(pins.allowed_paths, pins.forbidden_paths)
        except ScopeError as exc:
            problems.append(
                Problem(ErrorCode.SCHEMA_INVALID, FailCode.PINS_INSUFFICIENT, f"the pins: {exc}")
            )
            return False
    outside = []
    for path in changed:
        try:
            normal = normalize_resource(path)
        except ScopeError as exc:
            outside.append(f"{path!r} ({exc})")
            continue
        if in_scope(normal, task.forbidden_scope):
            outside.append(f"{path} (in forbidden_scope)")
        elif not in_scope(normal, task.lock_scope):
            outside.append(f"{path} (outside lock_scope {', '.join(task.lock_scope)})")
        elif pins is not None and not pins_allow(pins.allowed_paths, pins.forbidden_paths, normal):
            outside.append(f"{path} (not allowed by the task's pins)")
    if outside:
        problems.append(
            Problem(
                ErrorCode.SCOPE_VIOLATION,
                FailCode.SCOPE_CONFLICT,
                f"changed files outside the task's scope: {'; '.join(outside)}",
            )
        )
    return not outside


def _check_secrets(document: SubagentResult | Submit | None, problems: list[Problem]) -> None:
    from ..formats.board_rules import untrusted_secret

    found = untrusted_secret(document)
    if found is not None:
        problems.append(
            Problem(ErrorCode.UNTRUSTED_CONTEXT_BLOCK, FailCode.POLICY_VIOLATION, found[1])
        )


def _check_outcome(document: SubagentResult | Submit | None, problems: list[Problem]) -> bool:
    if isinstance(document, SubagentResult) and document.status is not ResultStatus.DONE:
        problems.append(
            Problem(
                ErrorCode.ACCEPTANCE_FAILED,
                FailCode.EXECUTOR_ERROR,
                f"the subagent reports status {document.status.value}",
            )
        )
        return False
    if isinstance(document, Submit) and document.status is not SubmitStatus.DONE:
        fail_code = (
            FailCode.NEEDS_CLARIFICATION
            if document.status is SubmitStatus.NEED_INPUT
            else _fail_code(document.reason_code, FailCode.EXECUTOR_ERROR)
        )
        asked = f": {'; '.join(document.needs_input)}" if document.needs_input else ""
        problems.append(
            Problem(
                ErrorCode.ACCEPTANCE_FAILED,
                fail_code,
                f"the executor reports status {document.status.value}{asked}",
            )
        )
        return False
    return True


def _check_tests(
    document: SubagentResult | Submit | None, task: Task, problems: list[Problem]
) -> bool:
    if isinstance(document, Submit):
        if not document.tests.passed:
            problems.append(
                Problem(
                    ErrorCode.ACCEPTANCE_FAILED,
                    FailCode.CI_FAILED,
                    f"tests did not pass: {document.tests.summary}",
                )
            )
        return document.tests.passed
    assert isinstance(document, SubagentResult)
    checked = {_words(c.criterion): c for c in document.acceptance_check}
    missing = [c for c in task.acceptance_criteria if _words(c) not in checked]
    failing = [c.criterion for c in document.acceptance_check if c.status is not CheckStatus.PASS]
    if missing or failing:
        said = []
        if missing:
            said.append(f"criteria not checked: {'; '.join(missing)}")
        if failing:
            said.append(f"criteria failing: {'; '.join(failing)}")
        problems.append(Problem(ErrorCode.ACCEPTANCE_FAILED, FailCode.CI_FAILED, ", ".join(said)))
        return False
    return True


def _check_evidence(
    document: SubagentResult | Submit | None, workspace: Path | None, problems: list[Problem]
) -> bool:
    if isinstance(document, SubagentResult):
        from ..formats.board_rules import has_evidence

        bare = [c.criterion for c in document.acceptance_check if not has_evidence(c)]
        if bare:
            problems.append(
                Problem(
                    ErrorCode.ACCEPTANCE_FAILED,
                    FailCode.EVIDENCE_MISSING,
                    f"no evidence for: {'; '.join(bare)}",
                )
            )
        return not bare
    assert isinstance(document, Submit)
    missing = [
        f"{name} {path!r}"
        for name, path in attrs.asdict(document.artifacts).items()
        if not _readable_inside(workspace, path)
    ]
    if missing:
        problems.append(
            Problem(
                ErrorCode.ACCEPTANCE_FAILED,
                FailCode.EVIDENCE_MISSING,
                f"artifacts missing or outside the workspace: {', '.join(missing)}",
            )
        )
    return not missing


def _readable_inside(workspace: Path | None, path: str) -> bool:
    if workspace is None:
        return False
    from ..formats.scope import ScopeError, normalize_resource

    try:
        relative = normalize_resource(path)
    except ScopeError:
        return False
    target = workspace / relative
    try:
        resolved = target.resolve(strict=True)
    except OSError:
        return False
    root = workspace.resolve()
    if root != resolved and root not in resolved.parents:
        return False  # a link out of the workspace
    import os

    return os.access(resolved, os.R_OK)


def _links(document: SubagentResult | Submit | None, result_link: str) -> VerdictLinks:
    if isinstance(document, Submit):
        artifacts = document.artifacts
        return VerdictLinks(
            submit_json=result_link,
            report_md=artifacts.report_md,
            selftest_log=artifacts.selftest_log,
            patch_diff=artifacts.patch_diff,
            evidence_dir=artifacts.evidence_dir,
        )
    return VerdictLinks(submit_json=result_link)


def _fail_code(text: str | None, default: FailCode) -> FailCode:
    try:
        return FailCode(text) if text else default
    except ValueError:
        return default


def _words(text: str) -> str:
    return " ".join(text.split()).casefold()
