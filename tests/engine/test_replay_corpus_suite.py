"""Recorded runs as a regression suite: twenty runs of the template-create example,
recorded in process, replayed by a real ``orchestrate replay --corpus`` against changed
copies of the workflow. A change to one phase's output for some inputs marks exactly
those runs ``outputs_changed``, with the diff; a changed ask is ``diverged`` with both
sides; a damaged or forged run is ``failed`` with its reason; the report stands alone;
and the recorded runs are left byte for byte as they were."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

import pytest

from orchestrator.evals.replay_corpus import json_changes
from orchestrator.testing import WorkflowHarness
from support.cli import orchestrate

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_DIR = ROOT / "examples" / "template_create"
EXAMPLE = EXAMPLE_DIR / "workflow.py"
SAMPLE = EXAMPLE_DIR / "sample_project"
KINDS = ("service", "library", "web", "cli")
RUNS = 20
# The line of phase 2 (manifest_generation) that the output change edits, and the title
# of phase 7's prompt (agent_enhancement) that the ask change edits.
MANIFEST_NAME = '"name": self.inputs["template_name"],'
ENHANCE = "# Agent Enhancement Request"


def load_module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def changed_copy(tmp_path: Path, name: str, old: str, new: str) -> Path:
    """A copy of the example with ``old`` replaced by ``new`` (once), as a file."""
    source = EXAMPLE.read_text()
    assert source.count(old) == 1, f"the test changes this text of the example: {old}"
    path = tmp_path / f"{name}.py"
    path.write_text(source.replace(old, new))
    return path


def template_names() -> list[str]:
    return [f"{KINDS[i % len(KINDS)]}-{i:02d}" for i in range(RUNS)]


class Corpus(NamedTuple):
    folder: Path
    #: The template name each run was recorded with, by run id.
    names: dict[str, str]


class Recorder:
    """Records runs of the example in process, answered by its offline fake agent."""

    def __init__(self) -> None:
        self.workflow = load_module(EXAMPLE, "corpus_suite_example").TemplateCreate
        self.fake = load_module(EXAMPLE_DIR / "fake_agent.py", "corpus_suite_fake_agent")

    def answer(self, request: dict[str, Any]) -> str:
        prompt = request["prompt"]
        if request["agent_name"] == "architectural-reviewer":
            answer = self.fake.analysis(prompt)
        else:
            answer = self.fake.agent(prompt, enhance=prompt.startswith(ENHANCE))
        return json.dumps(answer, sort_keys=True)

    def harness(self, workdir: Path) -> WorkflowHarness:
        workdir.mkdir(parents=True)
        return WorkflowHarness(self.workflow, workdir=workdir)

    def completed(self, workdir: Path, template_name: str) -> str:
        """A finished run in ``workdir``; its run id."""
        inputs = {"project_path": str(SAMPLE), "template_name": template_name}
        done = self.harness(workdir).run_until_done(inputs, self.answer)
        assert done.status == "completed", done.message
        assert done.history_path is not None
        return Path(done.history_path).parent.name

    def paused_after_analysis(self, workdir: Path, template_name: str) -> None:
        """A live run that has completed phases 1-5 and waits in phase 6 for its agents."""
        harness = self.harness(workdir)
        paused = harness.run({"project_path": str(SAMPLE), "template_name": template_name})
        assert paused.status == "paused" and len(paused.pending) == 1
        (request,) = paused.pending
        from orchestrator.formats.convert import unstructure

        harness.respond(request.request_id, self.answer(unstructure(request)))
        again = harness.resume()
        assert again.status == "paused", again.message
        assert {r.agent_name for r in again.pending} == {"agent-content-enhancer"}


@pytest.fixture(scope="module")
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, recorder: Recorder) -> Corpus:
    """Twenty finished runs under one folder, each in its own work directory."""
    folder = tmp_path_factory.mktemp("corpus") / "recorded"
    names = {recorder.completed(folder / f"work-{n}", n): n for n in template_names()}
    return Corpus(folder=folder, names=names)


def files_under(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def summary_of(out: Path) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    assert summary["schema_version"] == "1.0"
    return summary


def by_id(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {run["run_id"]: run for run in summary["runs"]}


def assert_self_contained(page: str) -> None:
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", page, re.IGNORECASE)
    assert "<script" not in page.lower()


@pytest.mark.slow
def test_a_change_to_one_phase_for_some_inputs_marks_exactly_those_runs(
    tmp_path: Path, recorded: Corpus
) -> None:
    """What must show: twenty recorded runs; phase 2's output now differs for the "web"
    templates only; exactly those runs are outputs_changed, with the diff; the default
    gate passes, ``--fail-on outputs-changed`` fails it."""
    corpus, corpus_dir = recorded.names, recorded.folder
    assert len(corpus) == RUNS
    before = files_under(corpus_dir)
    changed = changed_copy(
        tmp_path,
        "renamed_web_templates",
        MANIFEST_NAME,
        '"name": self.inputs["template_name"].replace("web-", "webapp-"),',
    )
    out = tmp_path / "out"
    done = orchestrate("replay", f"{changed}:TemplateCreate", "--corpus", corpus_dir, "--out", out)
    assert done.returncode == 0, done.stderr  # outputs_changed does not fail the default gate
    summary = summary_of(out)
    web = {run_id for run_id, name in corpus.items() if name.startswith("web-")}
    assert len(web) == RUNS // len(KINDS)
    runs = by_id(summary)
    assert set(runs) == set(corpus)
    assert {i for i, r in runs.items() if r["status"] == "outputs_changed"} == web
    assert {i for i, r in runs.items() if r["status"] == "unchanged"} == set(corpus) - web
    assert summary["totals"] == {
        "runs": RUNS, "unchanged": RUNS - len(web), "outputs_changed": len(web),
        "diverged": 0, "failed": 0, "skipped": 0,
    }  # fmt: skip
    assert summary["gate"] == {
        "fail_on": ["diverged", "failed"], "failed": False, "exit_code": 0, "runs": []
    }  # fmt: skip
    for run_id in web:
        run = runs[run_id]
        name = corpus[run_id]
        changed_phases = [p for p in run["phases"] if p["status"] == "changed"]
        assert [p["name"] for p in changed_phases] == ["manifest_generation"]
        assert changed_phases[0]["changes"] == [
            {
                "path": "$.name",
                "change": "changed",
                "old": name,
                "new": name.replace("web-", "webapp-"),
            }
        ]
        assert len(run["phases"]) == 9  # every phase ran to its end with the recorded answers
        assert run["inputs"]["template_name"] == name
    # One line per run on stdout: its status, its id, its path, and for a change, where.
    lines = done.stdout.splitlines()
    assert len(lines) == RUNS
    for line in lines:
        status, run_id, *_ = line.split()
        assert status == runs[run_id]["status"]
        if run_id in web:
            assert line.endswith(": manifest_generation: $.name")
    assert "20 runs replayed: 15 unchanged, 5 outputs changed" in done.stderr
    page = (out / "report.html").read_text()
    assert_self_contained(page)
    for run_id in corpus:
        assert run_id in page
    assert page.count(">Outputs changed</span>") == len(web) * 2  # its row and its section
    assert page.count(">Unchanged</span>") == RUNS - len(web)
    gated = orchestrate(
        "replay", f"{changed}:TemplateCreate", "--corpus", corpus_dir,
        "--out", tmp_path / "gated", "--fail-on", "outputs-changed",
    )  # fmt: skip
    assert gated.returncode == 1, gated.stderr
    assert "gate failed (--fail-on outputs-changed): 5 runs" in gated.stderr
    assert sorted(summary_of(tmp_path / "gated")["gate"]["runs"]) == sorted(web)
    assert files_under(corpus_dir) == before  # the corpus was only read


@pytest.mark.slow
def test_a_changed_ask_is_diverged_with_both_sides(tmp_path: Path, recorded: Corpus) -> None:
    """Phase 7 now asks with another prompt for the "cli" templates only: those runs
    diverge there, each side of the difference shown; the default gate fails."""
    corpus, corpus_dir = recorded.names, recorded.folder
    changed = changed_copy(
        tmp_path,
        "briefer_cli_agents",
        f'f"{ENHANCE}\\n\\nEnhance the agent',
        f'("briefly: " if self.inputs["template_name"].startswith("cli-") else "")\n'
        f'                    + f"{ENHANCE}\\n\\nEnhance the agent',
    )
    out = tmp_path / "out"
    done = orchestrate("replay", f"{changed}:TemplateCreate", "--corpus", corpus_dir, "--out", out)
    assert done.returncode == 1, done.stderr
    runs = by_id(summary_of(out))
    cli = {run_id for run_id, name in corpus.items() if name.startswith("cli-")}
    assert {i for i, r in runs.items() if r["status"] == "diverged"} == cli
    assert {i for i, r in runs.items() if r["status"] == "unchanged"} == set(corpus) - cli
    for run_id in cli:
        divergence = runs[run_id]["divergence"]
        assert (divergence["phase"], divergence["position"]) == ("agent_enhancement", 0)
        recorded, now = divergence["recorded"], divergence["now"]
        assert recorded.startswith("ask_all of agent-content-enhancer")
        assert now.startswith("ask_all of agent-content-enhancer")
        assert f"with the prompt:\n{ENHANCE}" in recorded
        assert f"with the prompt:\nbriefly: {ENHANCE}" in now
        assert "the prompt changed" in divergence["message"]
        # The phases before it replayed to their ends, unchanged.
        assert [p["status"] for p in runs[run_id]["phases"]] == ["unchanged"] * 6
    assert "gate failed (--fail-on diverged, failed): 5 runs" in done.stderr
    page = (out / "report.html").read_text()
    assert_self_contained(page)
    assert page.count(">Diverged</span>") == len(cli) * 2
    assert "briefly: # Agent Enhancement Request" in page


@pytest.mark.slow
def test_damaged_forged_and_paused_runs_beside_a_good_one(
    tmp_path: Path, recorded: Corpus, recorder: Recorder
) -> None:
    """A run whose journal was edited, one whose state was edited after signing and one
    whose state is a link are failed, each with its reason and no traceback; a live run
    paused in phase 6 compares the five phases it completed; the good run is unchanged."""
    corpus, corpus_dir = recorded.names, recorded.folder
    folder = tmp_path / "mixed"
    # Runs the change leaves alone, so that only what was done to each shows.
    good, journal_edited, state_edited = sorted(i for i, n in corpus.items() if "web" not in n)[:3]
    for run_id in (good, journal_edited, state_edited):
        (source,) = corpus_dir.glob(f"*/.orchestrator/runs/{run_id}")
        shutil.copytree(source, folder / run_id)
    journal = folder / journal_edited / "phases" / "02-manifest_generation" / "journal.json"
    journal.write_bytes(journal.read_bytes().replace(b'"write_manifest"', b'"write_manifesto"'))
    state_file = folder / state_edited / "state.json"
    state = json.loads(state_file.read_bytes())
    state["phase_data"]["manifest_generation"]["name"] = "forged"
    state_file.write_text(json.dumps(state))
    linked = folder / "linked"  # a run whose state is a link to another's
    (linked / "phases").mkdir(parents=True)
    (linked / "state.json").symlink_to(folder / good / "state.json")
    recorder.paused_after_analysis(folder / "live", "web-99")
    changed = changed_copy(
        tmp_path,
        "renamed_again",
        MANIFEST_NAME,
        '"name": self.inputs["template_name"].replace("web-", "webapp-"),',
    )
    before = files_under(folder)
    out = tmp_path / "out"
    done = orchestrate("replay", f"{changed}:TemplateCreate", "--corpus", folder, "--out", out)
    assert done.returncode == 1, done.stderr  # failed runs fail the default gate
    summary = summary_of(out)
    by_path = {Path(run["path"]).name: run for run in summary["runs"]}
    assert set(by_path) == {
        good, journal_edited, state_edited, "linked", ".template-create-state.json"
    }  # fmt: skip
    assert by_path["linked"]["status"] == "failed"
    assert "state.json: is a symbolic link" in by_path["linked"]["reason"]
    assert by_path[good]["status"] == "unchanged"
    damaged = by_path[journal_edited]
    assert damaged["status"] == "failed"
    assert "phase manifest_generation's journal changed since it was written" in damaged["reason"]
    forged = by_path[state_edited]
    assert forged["status"] == "failed"
    assert "changed since orchestrate signed it" in forged["reason"]
    live = by_path[".template-create-state.json"]
    assert live["status"] == "outputs_changed" and live["recorded_status"] == "paused"
    assert [p["name"] for p in live["phases"]] == [
        "codebase_analysis", "manifest_generation", "settings_generation", "template_files",
        "agent_recommendation",
    ]  # fmt: skip
    (manifest,) = [p for p in live["phases"] if p["status"] == "changed"]
    assert manifest["changes"] == [
        {"path": "$.name", "change": "changed", "old": "web-99", "new": "webapp-99"}
    ]
    lines = {line.split()[0] for line in done.stdout.splitlines()}
    assert lines == {"unchanged", "failed", "outputs_changed"}
    assert "Traceback" not in done.stdout + done.stderr
    page = (out / "report.html").read_text()
    assert_self_contained(page)
    assert page.count(">Failed</span>") == 3 * 2
    assert "journal changed since it was written" in page
    assert files_under(folder) == before  # nothing written into the runs, not even the live one


@pytest.mark.slow
def test_usage_errors_say_what_to_do(tmp_path: Path, recorded: Corpus) -> None:
    corpus, corpus_dir = recorded.names, recorded.folder
    workflow = f"{EXAMPLE}:TemplateCreate"
    both = orchestrate("replay", workflow, "--run", corpus_dir, "--corpus", corpus_dir)
    assert both.returncode == 2 and "--run DIR" in both.stderr and "--corpus" in both.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    nothing = orchestrate("replay", workflow, "--corpus", empty)
    assert nothing.returncode == 2 and "no recorded run there" in nothing.stderr
    (run_dir,) = corpus_dir.glob(f"*/.orchestrator/runs/{next(iter(corpus))}")
    inside = orchestrate("replay", workflow, "--corpus", corpus_dir, "--out", run_dir / "r")
    assert inside.returncode == 2 and "the runs are only read" in inside.stderr
    assert not (run_dir / "r").exists()
    unknown = orchestrate("replay", workflow, "--corpus", corpus_dir, "--fail-on", "regressed")
    assert unknown.returncode == 2 and "'regressed' is not a status" in unknown.stderr


def test_the_json_diff_names_each_change_by_its_path() -> None:
    old = {"name": "a", "layers": ["api", "domain"], "odd key": 1, "flag": True, "gone": 0}
    new = {"name": "b", "layers": ["api"], "odd key": 1.0, "flag": 1, "extra": {"x": None}}
    assert json_changes(old, new) == [
        {"path": "$.name", "change": "changed", "old": "a", "new": "b"},
        {"path": "$.layers[1]", "change": "removed", "old": "domain", "new": None},
        {"path": "$.flag", "change": "changed", "old": True, "new": 1},
        {"path": "$.gone", "change": "removed", "old": 0, "new": None},
        {"path": "$.extra", "change": "added", "old": None, "new": {"x": None}},
    ]
    assert json_changes({"a b": [1, {"c": 2}]}, {"a b": [1, {"c": 3}]}) == [
        {"path": '$["a b"][1].c', "change": "changed", "old": 2, "new": 3}
    ]
    assert json_changes([1, 2], [1, 2]) == []
    assert json_changes(None, {"a": 1}) == [
        {"path": "$", "change": "changed", "old": None, "new": {"a": 1}}
    ]


def test_a_phase_that_now_raises_fails_the_run_and_another_workflow_is_skipped(
    tmp_path: Path, recorder: Recorder
) -> None:
    """In process (the judgement the command prints): phase 9 now raises for one run, so
    it is failed with the phase's words; a workflow of another name skips the runs."""
    from orchestrator.evals.replay_corpus import corpus_summary

    folder = tmp_path / "runs"
    failing = recorder.completed(folder / "one", "web-01")
    passing = recorder.completed(folder / "two", "cli-02")
    raising = changed_copy(
        tmp_path,
        "raising_for_web",
        "        if missing:\n",
        '        if missing or self.inputs["template_name"].startswith("web-"):\n',
    )
    workflow = load_module(raising, "corpus_suite_raising").TemplateCreate
    summary = corpus_summary(workflow, [folder], workflow_ref="raising", generated_at="now")
    runs = by_id(summary)
    assert runs[passing]["status"] == "unchanged"
    assert runs[failing]["status"] == "failed"
    assert runs[failing]["reason"] == (
        "phase 'template_validation' raises on replay: RuntimeError: template incomplete, missing: "
    )
    assert [p["name"] for p in runs[failing]["phases"]][-1] == "claude_md_generation"
    assert summary["gate"]["runs"] == [failing]
    renamed = changed_copy(tmp_path, "renamed_flow", 'name = "template-create"', 'name = "other"')
    other = load_module(renamed, "corpus_suite_renamed").TemplateCreate
    skipped = corpus_summary(other, [folder], workflow_ref="other", generated_at="now")
    assert skipped["runs"] == [] and skipped["totals"]["skipped"] == 2
    assert {s["skipped"] for s in skipped["skipped"]} == {
        "a run of workflow 'template-create', not 'other'"
    }
