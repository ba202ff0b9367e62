"""``orchestrate eval compare``: the six verdicts, the CI gate, tolerance of what a run
may hold, and ``evaluation.json`` read alike by its JSON Schema and its Python model."""

from __future__ import annotations

import copy
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from orchestrator._errors import ContractError
from orchestrator.cli.main import main
from orchestrator.evals.compare import judge
from orchestrator.formats.evaluation import (
    ActionView,
    Side,
    evaluation_schema,
    parse_evaluation,
)
from support.eval_support import compare, copy_runs, edit_json, evaluation_of, verdicts

EXPECTED = {
    "c-new-failure": "new_failure",
    "c-regressed": "regressed",
    "c-both-failing": "both_failing",
    "c-fixed": "fixed",
    "c-improved": "improved",
    "c-unchanged": "unchanged",
    "c-html": "unchanged",
}


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    return copy_runs(tmp_path)


def test_each_verdict_and_the_order_of_severity(runs: Path) -> None:
    assert compare(runs) == 1
    assert verdicts(runs) == EXPECTED
    evaluation = evaluation_of(runs)
    order = [case["verdict"] for case in evaluation["cases"]]
    assert order[:5] == ["new_failure", "regressed", "both_failing", "fixed", "improved"]
    assert evaluation["totals"] == {
        "cases": 7,
        "new_failure": 1,
        "regressed": 1,
        "both_failing": 1,
        "fixed": 1,
        "improved": 1,
        "unchanged": 2,
    }
    regressed = next(c for c in evaluation["cases"] if c["case_id"] == "c-regressed")
    assert regressed["reasons"] == [
        "new: output lacks 'Refund approved'",
        "new: an action is medium risk, above the allowed low",
    ]
    assert regressed["output_changed"] is True
    assert "-Refund approved: 30 EUR back to the card." in regressed["output_diff"]
    assert [(c["action_id"], c["change"]) for c in regressed["action_changes"]] == [
        ("a1", "same"),
        ("a2", "added"),
    ]
    failure = next(c for c in evaluation["cases"] if c["case_id"] == "c-new-failure")["new"]
    assert failure["failure"]["http_status"] == 500
    assert failure["failure"]["full_body_href"] == (
        "new/r-new/assets/failure_new_c-new-failure.body"
    )


def test_without_expectations_the_riskiest_action_decides(runs: Path) -> None:
    code = main_without_cases(runs)
    assert code == 1
    evaluation = evaluation_of(runs)
    regressed = next(c for c in evaluation["cases"] if c["case_id"] == "c-regressed")
    assert regressed["verdict"] == "regressed"
    assert regressed["reasons"] == ["riskiest action low -> medium"]


def main_without_cases(runs: Path) -> int:
    from orchestrator.cli.main import main

    return main(["eval", "compare", str(runs / "baseline/r-base"), str(runs / "new/r-new")])


def _ok(max_risk: str, *, met: bool | None) -> Side:
    action = ActionView(
        action_id="a1",
        action_type="tool_call",
        tool_name="t",
        risk_level=max_risk,
        risk_tags=[],
        params={},
        evidence=[],
    )
    return Side(status="ok", actions=[action], max_risk=max_risk, expected_met=met)


def test_expectations_are_judged_before_risk() -> None:
    # Met expectations outweigh a riskier action, and the other way round.
    assert judge(_ok("low", met=False), _ok("high", met=True))[0] == "improved"
    assert judge(_ok("high", met=True), _ok("low", met=False))[0] == "regressed"
    assert judge(_ok("low", met=True), _ok("unknown", met=True))[0] == "regressed"
    assert judge(_ok("unknown", met=None), _ok("medium", met=None))[0] == "improved"
    assert judge(_ok("medium", met=None), _ok("medium", met=None)) == ("unchanged", [])


@pytest.mark.parametrize(
    ("fail_on", "code"),
    [
        ("regressed,new-failure", 1),
        ("none", 0),
        ("fixed", 1),
        ("both_failing", 1),
        ("improved,unchanged", 1),
    ],
)
def test_fail_on_sets_the_exit_code(runs: Path, fail_on: str, code: int) -> None:
    assert compare(runs, "--fail-on", fail_on) == code
    gate = evaluation_of(runs)["gate"]
    assert gate["exit_code"] == code and gate["failed"] is (code == 1)


def test_the_gate_passes_when_nothing_it_watches_happened(runs: Path) -> None:
    shutil.rmtree(runs / "new" / "r-new")
    shutil.copytree(runs / "baseline" / "r-base", runs / "new" / "r-new")
    assert compare(runs) == 0
    assert set(verdicts(runs).values()) == {"unchanged", "both_failing"}
    assert compare(runs, "--fail-on", "both-failing") == 1
    assert evaluation_of(runs)["gate"]["cases"] == ["c-both-failing", "c-fixed"]


def test_an_unknown_verdict_is_a_usage_error(
    runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert compare(runs, "--fail-on", "regressed,worse") == 2
    assert "'worse' is not a verdict" in capsys.readouterr().err
    assert not (runs / "evaluation.json").exists()


def test_tolerated_unknown_event_type_and_later_minor_version(runs: Path) -> None:
    # c-html is case.v1.3, has a field v1 does not name and an event type v1 does not
    # know: it is read, judged, and its evidence ref (events[0]) resolves.
    assert compare(runs) == 1
    case = next(c for c in evaluation_of(runs)["cases"] if c["case_id"] == "c-html")
    assert case["new"]["status"] == "ok"
    assert case["new"]["actions"][0]["evidence"][0]["where"] == "events[0]"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{ not json", "c-unchanged.json"),
        ('["a list"]', "expected a JSON object"),
        ('{"schema_version": "case.v2", "case_id": "c-unchanged"}', "major version"),
        (
            '{"schema_version": "case.v1", "case_id": "c-unchanged", "version": "new", '
            '"status": "ok", "events": [], "final_output": {}}',
            "$.proposed_actions",
        ),
    ],
)
def test_a_malformed_case_file_is_reported_not_fatal(
    runs: Path, content: str, message: str
) -> None:
    (runs / "new" / "r-new" / "c-unchanged.json").write_text(content, encoding="utf-8")
    assert compare(runs) == 1
    evaluation = evaluation_of(runs)
    case = next(c for c in evaluation["cases"] if c["case_id"] == "c-unchanged")
    assert case["verdict"] == "new_failure"
    assert case["new"]["status"] == "unreadable"
    (problem,) = evaluation["problems"]
    assert problem["file"] == "new/r-new/c-unchanged.json"
    assert message in problem["message"] + problem["field"] + problem["file"]
    report = (runs / "report.html").read_text(encoding="utf-8")
    assert "Files that could not be read (1)" in report
    assert 'href="new/r-new/c-unchanged.json"' in report


def test_everything_from_the_runs_is_escaped(runs: Path) -> None:
    compare(runs)
    report = (runs / "report.html").read_text(encoding="utf-8")
    assert "<script" not in report
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in report
    assert "&lt;b&gt;tool&lt;/b&gt;" in report
    assert "<img" not in report


def test_runs_outside_the_out_folder_are_copied_in(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "elsewhere"
    assert compare(runs, "--out", str(out)) == 1
    evaluation = evaluation_of(out)
    assert evaluation["baseline"]["dir"] == "baseline/r-base"
    assert (out / "new" / "r-new" / "assets" / "failure_new_c-new-failure.body").is_file()
    assert verdicts(out) == EXPECTED


# -- evaluation.json: the schema and the model agree ---------------------------------------


def _validator() -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(
        evaluation_schema(), format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER
    )


def test_the_written_evaluation_meets_the_schema_and_the_model(runs: Path) -> None:
    compare(runs)
    document = evaluation_of(runs)
    _validator().validate(document)
    parsed = parse_evaluation(document)
    assert parsed.cases[0].verdict == "new_failure"


def _broken(document: dict[str, Any], change: str) -> dict[str, Any]:
    document = copy.deepcopy(document)
    case = document["cases"][0]
    if change == "verdict":
        case["verdict"] = "worse"
    elif change == "absolute":
        case["new"]["case_file"] = "/home/someone/runs/c.json"
    elif change == "climbs":
        document["baseline"]["dir"] = "../outside"
    elif change == "missing":
        del document["gate"]
    elif change == "unknown-field":
        case["surprise"] = 1
    elif change == "null":
        case["new"]["failure"] = None
    elif change == "major":
        document["schema_version"] = "evaluation.v2"
    elif change == "risk":
        document["cases"][1]["new"]["max_risk"] = "extreme"
    return document


@pytest.mark.parametrize(
    "change", ["verdict", "absolute", "climbs", "missing", "unknown-field", "null", "major", "risk"]
)
def test_the_schema_and_the_model_refuse_the_same_documents(runs: Path, change: str) -> None:
    compare(runs)
    document = _broken(evaluation_of(runs), change)
    assert list(_validator().iter_errors(document)), change
    with pytest.raises(ContractError):
        parse_evaluation(document)


def test_extension_fields_and_a_later_minor_version_are_read_by_both(runs: Path) -> None:
    compare(runs)
    document = evaluation_of(runs)
    document["schema_version"] = "evaluation.v1.4"
    document["x_note"] = "kept aside"
    _validator().validate(document)
    assert parse_evaluation(document).schema_version == "evaluation.v1.4"


def test_an_unreadable_run_json_is_named(runs: Path) -> None:
    edit_json(runs / "baseline" / "r-base" / "run.json", lambda d: d.update(schema_version=3))
    compare(runs)
    (problem,) = evaluation_of(runs)["problems"]
    assert problem["file"] == "baseline/r-base/run.json"
    assert problem["field"] == "$.schema_version"


def test_the_cli_loads_no_eval_code_until_an_eval_command_runs() -> None:
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "from orchestrator.cli.main import build_parser as _parser\n"
        "_parser('resume'); _parser()\n"
        "print(sorted(m for m in sys.modules if m.startswith('orchestrator.evals')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"


def test_a_case_file_that_is_a_link_is_not_followed(runs: Path) -> None:
    case = runs / "new" / "r-new" / "c-unchanged.json"
    case.unlink()
    case.symlink_to(runs / "baseline" / "r-base" / "c-unchanged.json")
    assert compare(runs) == 1
    evaluation = evaluation_of(runs)
    (problem,) = evaluation["problems"]
    assert problem["file"] == "new/r-new/c-unchanged.json"
    assert "link" in problem["message"]
    assert verdicts(runs)["c-unchanged"] == "new_failure"


# -- a round trip of any evaluation ---------------------------------------------------------


def _evaluations() -> Any:
    from hypothesis import strategies as st

    from orchestrator.formats.evaluation import (
        RISK_LEVELS,
        SIDE_STATUSES,
        VERDICTS,
        ActionChange,
        CaseEvaluation,
        Evaluation,
        EvidenceLink,
        FailureView,
        Gate,
        Problem,
        RunRef,
    )

    text = st.text(max_size=12)
    rel = st.from_regex(r"[a-z0-9_-]{1,6}(/[a-z0-9_.-]{0,5}[a-z0-9_-]){0,3}", fullmatch=True)

    def maybe(strategy: Any) -> Any:
        return st.none() | strategy

    risk = st.sampled_from(RISK_LEVELS)
    evidence = st.builds(
        EvidenceLink,
        kind=st.sampled_from(["tool_result", "retrieval_doc", "event", "asset"]),
        ref=text,
        resolved=st.booleans(),
        where=maybe(text),
        href=maybe(rel),
    )
    action = st.builds(
        ActionView,
        action_id=text,
        action_type=text,
        tool_name=text,
        risk_level=risk,
        risk_tags=st.lists(text, max_size=2),
        params=st.dictionaries(text, st.integers() | text | st.none(), max_size=2),
        evidence=st.lists(evidence, max_size=2),
    )
    failure = st.builds(
        FailureView,
        error_class=text,
        url=maybe(text),
        attempt=maybe(st.integers(1, 9)),
        http_status=maybe(st.integers(100, 599)),
        message=maybe(text),
        body_snippet=maybe(text),
        full_body_href=maybe(rel),
        full_body_meta_href=maybe(rel),
        truncated=maybe(st.booleans()),
    )
    side = st.builds(
        Side,
        status=st.sampled_from(SIDE_STATUSES),
        case_file=maybe(rel),
        output_type=maybe(st.sampled_from(["text", "json"])),
        output_text=maybe(text),
        output_hash=maybe(text),
        actions=st.lists(action, max_size=2),
        max_risk=maybe(risk),
        expected_met=maybe(st.booleans()),
        expected_misses=st.lists(text, max_size=2),
        failure=maybe(failure),
        problem=maybe(text),
    )
    change = st.builds(
        ActionChange,
        action_id=text,
        change=st.sampled_from(["same", "changed", "riskier", "safer", "added", "removed"]),
        tool_name=text,
        baseline_risk=maybe(risk),
        new_risk=maybe(risk),
    )
    case = st.builds(
        CaseEvaluation,
        case_id=text,
        verdict=st.sampled_from(VERDICTS),
        severity=st.integers(0, 5),
        reasons=st.lists(text, max_size=2),
        output_changed=st.booleans(),
        output_diff=st.lists(text, max_size=3),
        action_changes=st.lists(change, max_size=2),
        baseline=side,
        new=side,
    )
    run = st.builds(RunRef, version=text, dir=rel, run_id=maybe(text))
    return st.builds(
        Evaluation,
        generated_at=st.just("2026-11-26T15:00:00.000Z"),
        evaluator_version=text,
        baseline=run,
        new=run,
        totals=st.dictionaries(st.sampled_from(["cases", *VERDICTS]), st.integers(0, 99)),
        gate=st.builds(
            Gate,
            fail_on=st.lists(st.sampled_from(VERDICTS), unique=True),
            failed=st.booleans(),
            exit_code=st.integers(0, 1),
            cases=st.lists(text, max_size=2),
        ),
        problems=st.lists(st.builds(Problem, file=rel, field=text, message=text), max_size=2),
        cases=st.lists(case, max_size=3),
    )


@pytest.mark.slow
def test_any_evaluation_reads_back_as_written_and_meets_the_schema() -> None:
    import json

    from hypothesis import HealthCheck, given, settings

    from orchestrator.formats.evaluation import unstructure_evaluation
    from orchestrator.formats.strict_json import dumps_canonical

    validator = _validator()

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_evaluations())
    def round_trip(evaluation: Any) -> None:
        document = json.loads(dumps_canonical(unstructure_evaluation(evaluation)))
        validator.validate(document)
        assert parse_evaluation(document) == evaluation

    round_trip()


@pytest.mark.parametrize("content", [None, '[{"id": 3}]', "{ not json"])
def test_a_cases_file_that_cannot_be_read_is_a_usage_error_not_a_failed_gate(
    runs: Path, content: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = runs / "cases.json"
    if content is None:
        cases.unlink()
    else:
        cases.write_text(content, encoding="utf-8")
    assert compare(runs) == 2
    assert "--cases" in capsys.readouterr().err
    assert not (runs / "evaluation.json").exists()


def test_a_malformed_kept_cases_copy_is_a_problem_not_a_crash(runs: Path) -> None:
    run = runs / "new" / "r-new"
    (run / "assets" / "cases.jsonl").write_text('{"id": "c-1"}\n{ not json\n', "utf-8")
    edit_json(
        run / "assets" / "manifest.json",
        lambda d: d["items"].append(
            {"asset_id": "cases", "href": "cases.jsonl", "kind": "cases", "size_bytes": 25}
        ),
    )
    assert main_without_cases(runs) == 1  # the gate, judged without expectations
    evaluation = evaluation_of(runs)
    (problem,) = evaluation["problems"]
    assert problem["file"] == "new/r-new/assets/cases.jsonl"
    assert "went on without the cases' expectations" in problem["message"]
    regressed = next(c for c in evaluation["cases"] if c["case_id"] == "c-regressed")
    assert regressed["reasons"] == ["riskiest action low -> medium"]
    report = (runs / "report.html").read_text(encoding="utf-8")
    assert "Files that could not be read (1)" in report


def test_an_error_that_is_not_the_gate_exits_3(
    runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (runs / "report.html").mkdir()  # the report cannot be written where a directory is
    assert compare(runs) == 3
    err = capsys.readouterr().err
    assert "report.html" in err and "no verdict was reached (exit 3)" in err


@pytest.mark.parametrize("form", ["jsonl", "object", "one-line"])
def test_cases_as_jsonl_whose_lines_say_cases_and_as_an_object(tmp_path: Path, form: str) -> None:
    import json

    from orchestrator.evals.evaluate import read_expectations

    cases = [
        {"id": "a", "context": {"kind": "cases"}, "expected": {"output_contains": "x"}},
        {"id": "b", "expected": {"max_risk_level": "low"}},
    ]
    path = tmp_path / "cases.jsonl"
    if form == "jsonl":
        text = "\n".join(json.dumps(case) for case in cases) + "\n"
    elif form == "object":
        text = "\n  " + json.dumps({"cases": cases}, indent=2)
    else:
        cases = cases[:1]
        text = json.dumps(cases[0]) + "\n"
    path.write_text(text, encoding="utf-8")
    found = read_expectations(path)
    assert sorted(found) == [case["id"] for case in cases]
    assert found["a"].output_contains == ("x",)


def test_no_absolute_path_reaches_the_evaluation_or_the_report(
    runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from orchestrator.cli.main import main

    def failed_command(data: dict[str, Any]) -> None:
        data["runner_failure"].update(
            url="subprocess:/opt/agents/bin/agent --strict",
            error_message="the agent command exited with status 1: Traceback:\n"
            '  File "/home/me/agent/main.py", line 3, in <module>',
        )

    edit_json(runs / "new" / "r-new" / "c-new-failure.json", failed_command)
    # a link where assets/ belongs: the reading refuses it, and names no absolute path
    assets = runs / "new" / "r-new" / "assets"
    shutil.rmtree(assets)
    assets.symlink_to(runs / "baseline" / "r-base" / "assets")
    assert compare(runs) == 1
    written = (runs / "evaluation.json").read_text("utf-8") + (runs / "report.html").read_text(
        "utf-8"
    )
    for absolute in ("/opt/agents", "/home/me", str(runs.parent)):
        assert absolute not in written
    failure = next(c for c in evaluation_of(runs)["cases"] if c["case_id"] == "c-new-failure")
    assert failure["new"]["failure"]["url"] == "subprocess:agent --strict"
    assert 'File "main.py", line 3' in failure["new"]["failure"]["message"]
    assert any("not followed" in p["message"] for p in evaluation_of(runs)["problems"])
    assets.unlink()
    shutil.copytree(runs / "baseline" / "r-base" / "assets", assets)
    capsys.readouterr()
    # eval check finds the paths in the run's own file, and none in what compare wrote
    assert main(["eval", "check", str(runs)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert "new/r-new/c-new-failure.json: $.runner_failure.url: names an absolute path " in (
        "\n".join(lines)
    )
    assert not [line for line in lines if line.startswith(("evaluation.json", "report.html"))]


def test_two_files_claiming_one_case_id_are_named(runs: Path) -> None:
    run = runs / "new" / "r-new"
    shutil.copy(run / "c-unchanged.json", run / "b-copy.json")
    edit_json(run / "b-copy.json", lambda d: d["final_output"].update(content="other"))
    assert compare(runs) == 1
    evaluation = evaluation_of(runs)
    (problem,) = evaluation["problems"]
    assert problem["file"] == "new/r-new/b-copy.json"
    assert problem["field"] == "$.case_id"
    assert "claimed by c-unchanged.json too" in problem["message"]
    assert verdicts(runs)["c-unchanged"] == "unchanged"


def test_without_out_runs_far_apart_are_refused_not_written_above_them(
    runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from orchestrator.cli.main import main

    far = tmp_path / "a" / "b" / "c"
    far.mkdir(parents=True)
    shutil.move(str(runs / "new" / "r-new"), str(far / "r-new"))
    code = main(["eval", "compare", str(runs / "baseline" / "r-base"), str(far / "r-new")])
    assert code == 2
    assert "pass --out DIR" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "runs"]
    assert not (runs / "evaluation.json").exists()


def test_a_copy_replaces_a_link_at_its_place_and_leaves_out_a_fifo(
    runs: Path, tmp_path: Path
) -> None:
    import os

    out = tmp_path / "elsewhere"
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "marker").write_text("mine", encoding="utf-8")
    (out / "new").mkdir(parents=True)
    (out / "new" / "r-new").symlink_to(kept)
    os.mkfifo(runs / "new" / "r-new" / "assets" / "pipe")
    assert compare(runs, "--out", str(out)) == 1
    copied = out / "new" / "r-new"
    assert copied.is_dir() and not copied.is_symlink()
    assert not (copied / "assets" / "pipe").exists()
    assert (kept / "marker").read_text(encoding="utf-8") == "mine"
    assert verdicts(out) == EXPECTED


def test_a_copy_that_fails_is_an_error_not_a_failed_gate(
    runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "elsewhere"
    out.mkdir()
    (out / "new").write_text("a file where the copy goes", encoding="utf-8")
    assert compare(runs, "--out", str(out)) == 3
    assert "cannot copy the run directory" in capsys.readouterr().err


def test_only_the_first_part_of_a_huge_output_is_diffed_and_the_diff_says_so() -> None:
    from orchestrator.evals.compare import MAX_DIFF_INPUT_CHARS, output_diff

    body = "".join(f"line {n:>8} of a long output\n" for n in range(MAX_DIFF_INPUT_CHARS // 16))
    lines = output_diff("first\n" + body + "end A", "second\n" + body + "end B")
    assert "-first" in lines and "+second" in lines
    assert "+end B" not in lines  # past the part compared
    assert lines[-1] == (
        f"@@ only the first {MAX_DIFF_INPUT_CHARS // 1024} KB of each output were compared; "
        "the case files hold the whole @@"
    )
    assert output_diff("a\n", "b\n") == ["--- baseline", "+++ new", "@@ -1 +1 @@", "-a", "+b"]


# -- an unfinished run: refused, or compared as it is when asked --------------------------


def _stop_before(run: Path, case_ids: list[str]) -> None:
    """``run`` as a run stopped before it recorded ``case_ids``: their files never written."""
    for case_id in case_ids:
        (run / f"{case_id}.json").unlink()


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.endswith("\n") and err.count("\n") == 1, err
    return err.strip()


def test_a_run_missing_some_of_its_cases_is_refused_with_exit_3(
    runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _stop_before(runs / "new" / "r-new", ["c-fixed", "c-html"])
    assert compare(runs) == 3
    line = _one_error_line(capsys)
    assert line.startswith(
        f"orchestrate: error: the new run {runs / 'new' / 'r-new'} is unfinished, 2 cases "
        "never recorded (c-fixed, c-html): run it again; or pass --allow-incomplete"
    ), line
    assert not (runs / "evaluation.json").exists() and not (runs / "report.html").exists()


def test_a_baseline_stopped_before_any_case_is_refused_whatever_the_gate(
    runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    baseline = runs / "baseline" / "r-base"
    _stop_before(baseline, sorted(EXPECTED))
    # Nothing the default gate watches could happen: every case was fixed or both failing.
    assert compare(runs, "--fail-on", "regressed,new-failure") == 3
    line = _one_error_line(capsys)
    assert (
        f"the baseline run {baseline} is unfinished, 7 cases never recorded (c-unchanged, "
        "c-improved, c-regressed, c-new-failure, c-fixed and 2 more)"
    ) in line, line
    assert main(["eval", "check", str(baseline)]) == 1  # eval check says the same of it


def test_two_unfinished_runs_are_named_in_one_line(
    runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _stop_before(runs / "baseline" / "r-base", ["c-html"])
    _stop_before(runs / "new" / "r-new", ["c-fixed"])
    assert compare(runs) == 3
    line = _one_error_line(capsys)
    assert "the baseline run" in line and "1 case never recorded (c-html)" in line
    assert "the new run" in line and "1 case never recorded (c-fixed)" in line


@pytest.mark.parametrize(
    ("fail_on", "code"), [("regressed,new-failure", 1), ("improved", 1), ("none", 0)]
)
def test_allow_incomplete_marks_the_missing_cases_not_run_and_fails_any_gate(
    runs: Path, capsys: pytest.CaptureFixture[str], fail_on: str, code: int
) -> None:
    _stop_before(runs / "baseline" / "r-base", ["c-html"])
    _stop_before(runs / "new" / "r-new", ["c-fixed"])
    assert compare(runs, "--allow-incomplete", "--fail-on", fail_on) == code
    out = capsys.readouterr().out
    assert out.startswith("7 cases: 2 not run, 1 new failure, 1 regressed, 1 both failing, ")
    evaluation = evaluation_of(runs)
    assert {k: v for k, v in verdicts(runs).items() if v == "not_run"} == {
        "c-fixed": "not_run",
        "c-html": "not_run",
    }
    assert evaluation["totals"]["not_run"] == 2
    html = next(c for c in evaluation["cases"] if c["case_id"] == "c-html")
    assert html["baseline"]["status"] == "not_run" and html["new"]["status"] == "ok"
    assert html["reasons"] == ["baseline: not run (the run stopped before this case)"]
    assert [c["verdict"] for c in evaluation["cases"]][:2] == ["not_run", "not_run"]
    gate = evaluation["gate"]
    assert (gate["failed"], gate["exit_code"]) == (code == 1, code)
    if code == 1:
        assert gate["fail_on"][0] == "not_run"
        assert {"c-fixed", "c-html"} <= set(gate["cases"])
    _validator().validate(evaluation)
    assert parse_evaluation(evaluation).cases[0].verdict == "not_run"
    report = (runs / "report.html").read_text(encoding="utf-8")
    assert "Not run" in report and "not run" in report


def test_a_complete_comparison_counts_no_not_run(runs: Path) -> None:
    compare(runs, "--allow-incomplete")
    assert "not_run" not in evaluation_of(runs)["totals"]
    assert "Not run" not in (runs / "report.html").read_text(encoding="utf-8")


KILLER = "sh -c 'kill -9 $PPID'"  # the agent kills the runner: no case is ever recorded


@pytest.mark.slow
def test_a_baseline_killed_before_any_case_is_refused_then_compared_only_when_allowed(
    tmp_path: Path,
) -> None:
    from support.cli import orchestrate

    agent = tmp_path / "agent.py"
    agent.write_text(
        "import json, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parents[1])!r})\n"
        "from support.eval_agent_server import good_answer\n"
        "print(json.dumps(good_answer(json.load(sys.stdin))))\n",
        encoding="utf-8",
    )
    ids = ["a", "b", "c", "d"]
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps([{"id": i, "input": {"user": i}} for i in ids]), "utf-8")
    out = tmp_path / "runs"

    def run(version: str, command: str) -> tuple[int, Path]:
        done = orchestrate(
            "eval", "run", "--cases", cases, "--agent-command", command,
            "--version", version, "--out", out, "--concurrency", "1", "--retries", "0",
        )  # fmt: skip
        (run_dir,) = [p for p in (out / version).iterdir() if not p.name.startswith(".")]
        return done.returncode, run_dir

    killed, baseline = run("baseline", KILLER)
    assert killed == -9 and not list(baseline.glob("[a-d].json"))
    finished, new = run("new", f"{sys.executable} {agent}")
    assert finished == 0
    refused = orchestrate("eval", "compare", baseline, new, "--fail-on", "regressed,new-failure")
    assert refused.returncode == 3, refused
    assert refused.stderr == (
        f"orchestrate: error: the baseline run {baseline} is unfinished, 4 cases never "
        f"recorded (a, b, c, d): finish it with 'orchestrate resume --workdir {out / 'baseline'}'"
        "; or pass --allow-incomplete to compare as it is (those cases not_run, any gate "
        "failed)\n"
    )
    assert not (out / "evaluation.json").exists()
    assert orchestrate("eval", "check", baseline).returncode == 1
    allowed = orchestrate("eval", "compare", baseline, new, "--allow-incomplete")
    assert allowed.returncode == 1, allowed
    assert allowed.stdout.startswith("4 cases: 4 not run\n")
    assert allowed.stderr == "gate failed: a, b, c, d\n"


def _summary_row(report: str, case_id: str) -> str:
    start = report.index(f'class="mono">{case_id}</a>', report.index("<h2>Summary</h2>"))
    return report[start : report.index("</tr>", start)]


def test_the_report_names_each_case_by_its_title_and_a_missing_output_as_such(
    runs: Path,
) -> None:
    def titled(cases: list[dict[str, Any]]) -> None:
        for case in cases:
            case["title"] = f"Title of {case['id']} <b>"

    edit_json(runs / "cases.json", titled)
    compare(runs)
    evaluation = evaluation_of(runs)
    assert {c["case_id"]: c.get("title") for c in evaluation["cases"]} == {
        case_id: f"Title of {case_id} <b>" for case_id in EXPECTED
    }
    jsonschema.validate(evaluation, evaluation_schema())
    report = (runs / "report.html").read_text(encoding="utf-8")
    for case_id in EXPECTED:
        assert f"Title of {case_id} &lt;b&gt;" in _summary_row(report, case_id)
        assert report.count(f"Title of {case_id} &lt;b&gt;") == 2  # the summary, the case
    crashed = _summary_row(report, "c-new-failure")
    assert "new: no output (runner error)" in crashed and ">same<" not in crashed
    both = _summary_row(report, "c-both-failing")
    assert "no output (" in both and ">same<" not in both
    assert ">same<" in _summary_row(report, "c-unchanged")
