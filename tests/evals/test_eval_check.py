"""``orchestrate eval check``: the artifact contract's definition of done holds on good
runs and evaluations, wherever they are moved, and each hand-made breach is named with its
file and field."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from support.eval_support import compare, copy_runs, edit_json


@pytest.fixture
def evaluated(tmp_path: Path) -> Path:
    """The hand-made runs, compared: runs, evaluation.json and report.html in one folder."""
    runs = copy_runs(tmp_path)
    compare(runs)
    return runs


def check(directory: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = main(["eval", "check", str(directory)])
    return code, capsys.readouterr().out.splitlines()


def test_good_runs_and_their_evaluation_pass_here_and_after_a_move(
    evaluated: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert check(evaluated, capsys)[0] == 0
    assert check(evaluated / "new" / "r-new", capsys)[0] == 0
    moved = tmp_path / "somewhere" / "else"
    moved.parent.mkdir()
    shutil.move(str(evaluated), str(moved))
    code, lines = check(moved, capsys)
    assert (code, lines) == (0, [f"{moved}: meets the artifact contract"])
    # the moved folder is still readable by the evaluator: comparing again gives the same
    assert main(["eval", "compare", str(moved / "baseline/r-base"), str(moved / "new/r-new")]) == 1


def test_a_missing_body_file(evaluated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (evaluated / "new/r-new/assets/failure_new_c-new-failure.body").unlink()
    code, lines = check(evaluated, capsys)
    assert code == 1
    assert (
        "new/r-new/c-new-failure.json: $.runner_failure.full_body_saved_to: "
        "assets/failure_new_c-new-failure.body does not exist inside the run directory"
    ) in lines
    # the evaluation and its report pointed at it too
    assert any(
        line.startswith("evaluation.json: $.cases[0].new.failure.full_body_href") for line in lines
    )
    assert any(line.startswith("report.html: line ") for line in lines)


def test_a_snippet_without_a_saved_body(
    evaluated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit_json(
        evaluated / "baseline/r-base/c-both-failing.json",
        lambda d: d["runner_failure"].update(full_body_saved_to=None),
    )
    code, lines = check(evaluated / "baseline", capsys)
    assert code == 1
    assert lines == [
        "r-base/c-both-failing.json: $.runner_failure.full_body_saved_to: a body snippet is "
        "given, so the full body must be saved"
    ]


def test_an_absolute_path_in_a_run(evaluated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    edit_json(
        evaluated / "new/r-new/run.json", lambda d: d.update(cases_path="/Users/me/cases.json")
    )
    code, lines = check(evaluated, capsys)
    assert code == 1
    assert lines == ["new/r-new/run.json: $.cases_path: absolute path '/Users/me/cases.json'"]


def test_an_absolute_path_in_the_report(
    evaluated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = evaluated / "report.html"
    text = report.read_text(encoding="utf-8")
    report.write_text(text.replace('href="evaluation.json"', f'href="{evaluated}/x"'), "utf-8")
    code, lines = check(evaluated, capsys)
    assert code == 1
    assert "report.html: -: names the directory's absolute path" in lines
    assert any("is not a relative link inside the folder" in line for line in lines)


def test_a_dangling_evidence_ref(evaluated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    edit_json(
        evaluated / "new/r-new/c-unchanged.json",
        lambda d: d["proposed_actions"][0]["evidence_refs"][0].update(call_id="call-404"),
    )
    code, lines = check(evaluated, capsys)
    assert code == 1
    assert lines == [
        "new/r-new/c-unchanged.json: $.proposed_actions[0].evidence_refs[0]: no "
        "tool_result/tool_call event has call_id 'call-404'"
    ]
    # compared again, the report shows the ref as unresolved rather than linking nowhere
    compare(evaluated)
    report = (evaluated / "report.html").read_text(encoding="utf-8")
    assert '<div class="unresolved">call call-404: unresolved</div>' in report


def test_an_asset_ref_whose_file_is_gone(
    evaluated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (evaluated / "baseline/r-base/assets/full_payload_baseline_c-regressed.json").unlink()
    code, lines = check(evaluated / "baseline/r-base", capsys)
    assert code == 1
    assert "assets/manifest.json: $.items[0].href: " in "\n".join(lines)
    assert any("c-regressed.json: $.proposed_actions[0].evidence_refs[1]" in line for line in lines)
    assert any("c-regressed.json: $.events[2].payload_asset_href" in line for line in lines)


def test_a_link_and_a_missing_case_file(
    evaluated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    os.symlink("/etc/hostname", evaluated / "new/r-new/assets/elsewhere")
    (evaluated / "new/r-new/c-fixed.json").unlink()
    code, lines = check(evaluated / "new", capsys)
    assert code == 1
    assert (
        "r-new/assets/elsewhere: -: a symbolic link: a copy would not carry what it points to"
        in lines
    )
    assert "r-new/run.json: $.selected_case_ids[4]: no case file c-fixed.json was written" in lines


def test_a_case_file_that_is_a_link_is_named_as_a_link_not_as_never_written(
    evaluated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The run recorded the case (something is there); the link is its own breach.
    case = evaluated / "new/r-new/c-fixed.json"
    case.unlink()
    case.symlink_to(evaluated / "baseline/r-base/c-fixed.json")
    code, lines = check(evaluated / "new/r-new", capsys)
    assert (code, lines) == (
        1,
        [
            "c-fixed.json: -: a symbolic link: a copy would not carry what it points to",
            "c-fixed.json: $: is a symbolic link; write the file itself, not a link",
        ],
    )


def test_a_failure_without_a_stable_class(
    evaluated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit_json(
        evaluated / "baseline/r-base/c-fixed.json",
        lambda d: d["runner_failure"].update({"class": "http_5xx"}),
    )
    code, lines = check(evaluated / "baseline/r-base", capsys)
    assert code == 1
    assert lines[0].startswith("c-fixed.json: $.runner_failure.class: 'http_5xx' is not one of")


def test_a_directory_with_nothing_to_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = check(tmp_path, capsys)
    assert code == 1 and "no run.json or evaluation.json under it" in lines[0]


def test_the_hand_made_runs_meet_the_shipped_run_schemas() -> None:
    """The fixtures follow the contract as the runner's own schemas read it; the one
    exception is the case written as a later minor version (``case.v1.3``), which v1's
    schema pins and the evaluator must still read."""
    import json

    import jsonschema

    from orchestrator.formats.schemas import shipped_schema
    from support.eval_support import FIXTURE_RUNS

    def errors(kind: str, path: Path) -> list[str]:
        schema = shipped_schema("runs", f"{kind}.schema.json")
        document = json.loads(path.read_text(encoding="utf-8"))
        return [e.message for e in jsonschema.Draft7Validator(schema).iter_errors(document)]

    checked = 0
    for run in (FIXTURE_RUNS / "baseline" / "r-base", FIXTURE_RUNS / "new" / "r-new"):
        for path in sorted(run.glob("*.json")):
            found = errors("run" if path.name == "run.json" else "case", path)
            expected = ["'case.v1' was expected"] if path.name == "c-html.json" else []
            assert found == expected, path
            checked += 1
        for path in sorted((run / "assets").glob("*.meta.json")):
            assert errors("failure-meta", path) == [], path
            checked += 1
        assert errors("assets-manifest", run / "assets" / "manifest.json") == []
    assert checked == 18


def test_an_absolute_path_in_any_string_or_anywhere_in_a_page(
    evaluated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit_json(
        evaluated / "new/r-new/c-new-failure.json",
        lambda d: d["runner_failure"].update(
            error_message="cannot start: [Errno 2] No such file: 'C:\\agents\\a.exe'",
            url="http://127.0.0.1:8765/run-case/x",  # a URL is no path
        ),
    )
    report = evaluated / "report.html"
    text = report.read_text(encoding="utf-8")
    report.write_text(
        text.replace("</footer>", "see &#x27;/srv/builds/42/log&#x27; POST /run-case</footer>"),
        "utf-8",
    )
    code, lines = check(evaluated, capsys)
    assert code == 1
    run, page = sorted(lines)
    assert run == (
        "new/r-new/c-new-failure.json: $.runner_failure.error_message: names an absolute "
        "path 'C:\\\\agents\\\\a.exe'"
    )
    assert page.startswith("report.html: line ")
    assert page.endswith(": names an absolute path '/srv/builds/42/log'")


def test_a_selected_id_is_not_looked_for_outside_the_run(
    evaluated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outside = "../../baseline/r-base/c-fixed"  # that file exists, but not in this run
    edit_json(evaluated / "new/r-new/run.json", lambda d: d["selected_case_ids"].append(outside))
    code, lines = check(evaluated / "new/r-new", capsys)
    assert code == 1
    assert lines == [f"run.json: $.selected_case_ids[7]: no case file {outside}.json was written"]


def test_a_page_the_parser_refuses_is_a_breach_not_a_crash(
    evaluated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (evaluated / "stray.html").write_text("<p>ok</p>\n<![foo[ x", encoding="utf-8")
    code, lines = check(evaluated, capsys)
    assert code == 1
    assert lines == [
        "stray.html: line 2: cannot be parsed as HTML (AssertionError: unknown status "
        "keyword 'foo' in marked section)"
    ]


def test_a_report_names_a_missing_file_without_linking_to_it(
    evaluated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (evaluated / "baseline/r-base/run.json").unlink()
    compare(evaluated)
    report = (evaluated / "report.html").read_text(encoding="utf-8")
    assert "baseline/r-base/run.json" in report
    assert 'href="baseline/r-base/run.json"' not in report
    _, lines = check(evaluated, capsys)
    assert not [line for line in lines if line.startswith("report.html")], lines


def test_a_nul_in_a_saved_body_path_is_a_breach_not_a_crash(
    evaluated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit_json(
        evaluated / "baseline/r-base/c-both-failing.json",
        lambda d: d["runner_failure"].update(full_body_saved_to="assets/a\u0000b.body"),
    )
    code, lines = check(evaluated, capsys)
    assert code == 1
    assert any(line.startswith("baseline/r-base/c-both-failing.json: ") for line in lines), lines
