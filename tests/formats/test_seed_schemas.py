"""The agent bridge files' JSON Schemas and the Python side judge the bridge files alike.

Proves that:
- every file a real template-create run puts on disk (request files, state file, history
  state) and every response the fake agent prints is valid under the verbatim format schemas,
  checked with Draft-07 and a format checker that really enforces "uuid" and "date-time";
- ``workflow_schemas`` reproduces the format's schemas exactly for the example, and gives
  another workflow its own enums and phase maximum, which its files then satisfy;
- for a table of good and bad documents, jsonschema and the Python side (the codec, and
  ``orchestrate validate --workflow`` as a real process) reach the same verdict; the two
  deliberate differences (``x_`` fields, a success without text) are pinned by name.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft7Validator, FormatChecker

from orchestrator import PhaseResult, UnknownVersionError, Workflow, phase, workflow_schemas
from orchestrator.formats.bridge_codec import parse_request, parse_state
from orchestrator.testing import WorkflowHarness
from support.bridge_documents import (
    BAD_DOCUMENTS,
    EXAMPLE,
    GOOD_BASES,
    SEED_SCHEMAS,
    Bad,
    TemplateCreate,
    fake_agent,
    python_verdict,
    seed,
    with_version,
)
from support.cli import orchestrate

# Draft7Validator.FORMAT_CHECKER knows no "uuid" (the format arrived in draft 2019-09), so
# it would pass any string silently. FormatChecker() holds every format jsonschema has.
FORMATS = FormatChecker()
INPUTS = {"project_path": str(EXAMPLE / "sample_project"), "template_name": "task-tracker"}


@pytest.fixture(autouse=True, scope="module")
def formats_are_enforced() -> None:
    for name, package in (("uuid", "jsonschema itself"), ("date-time", "rfc3339-validator")):
        assert name in FORMATS.checkers, (
            f"the installed jsonschema does not check format {name!r}, so these tests would "
            f"pass anything: add {package} to the 'test' extra in pyproject.toml"
        )
    assert not FORMATS.conforms("550e8400-e29b-41d4-a716", "uuid")
    assert not FORMATS.conforms("2025-11-18", "date-time")
    assert FORMATS.conforms("2025-11-18T10:30:00.123Z", "date-time")


def complaints(schema: dict[str, Any], document: Any) -> list[str]:
    validator = Draft7Validator(schema, format_checker=FORMATS)
    return [f"{e.json_path}: {e.message}" for e in validator.iter_errors(document)]


def assert_valid(kind: str, document: Any, schemas: dict[str, Any] = SEED_SCHEMAS) -> None:
    assert complaints(schemas[kind], document) == [], f"{kind} document: {document}"


def orchestrate_validate(
    tmp_path: Path, kind: str, document: Any
) -> subprocess.CompletedProcess[str]:
    path = tmp_path / f"{kind}-document.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return orchestrate(
        "validate",
        path,
        "--kind",
        kind,
        "--workflow",
        f"{EXAMPLE / 'workflow.py'}:TemplateCreate",
    )  # its enums and phase range, as the format's; fmt: skip


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


# -- a real run, checked at every pause ---------------------------------------------------


def check_pause(workdir: Path, schemas: dict[str, Any], state_name: str) -> dict[str, str]:
    """Validate every bridge file now on disk; return each request's text by id."""
    state = read_json(workdir / state_name)
    assert "x_signature" in state["phase_data"]["x_orchestrator"]  # signed, and still valid
    assert_valid("state", state, schemas)
    parse_state(state, source=state_name)
    for record in state["agent_requests"]:  # the request re-derived after a crash
        assert_valid("request", record["x_request"], schemas)
    first = workdir / ".agent-request.json"
    files = [first, *sorted((workdir / ".agent-requests").glob("*"))]
    texts = {}
    for path in filter(Path.exists, files):
        document = read_json(path)
        assert_valid("request", document, schemas)
        parse_request(document, source=str(path))  # the Python side accepts it too
        texts[document["request_id"]] = path.read_text(encoding="utf-8")
    return texts


def test_every_file_of_a_template_create_run_matches_the_seed_schemas(tmp_path: Path) -> None:
    harness = WorkflowHarness(TemplateCreate, tmp_path / "work", invoker=None)
    harness.workdir.mkdir()
    outcome = harness.run(INPUTS, output_path=str(tmp_path / "template"))
    paused_in = []
    while outcome.status == "paused":
        paused_in.append((outcome.pending[0].phase_name, len(outcome.pending)))
        texts = check_pause(harness.workdir, SEED_SCHEMAS, ".template-create-state.json")
        assert set(texts) == {r.request_id for r in outcome.pending}
        for request_id, text in texts.items():
            document = fake_agent(text)
            assert_valid("response", document)
            target = harness.workdir / ".agent-responses" / f"{request_id}.json"
            target.parent.mkdir(exist_ok=True)
            target.write_text(json.dumps(document), encoding="utf-8")
        outcome = harness.resume()
    assert outcome.status == "completed", outcome.message
    assert [name for name, _ in paused_in] == [
        "codebase_analysis",
        "agent_creation",
        "agent_enhancement",
    ]
    assert any(count > 1 for _, count in paused_in), "no pause exercised .agent-requests/"
    history = read_json(Path(outcome.history_path or ""))
    assert history["checkpoint_name"] == "completed"
    assert "x_signature" in history["phase_data"]["x_orchestrator"]
    assert_valid("state", history)
    assert {r["status"] for r in history["agent_requests"]} == {"completed"}


# -- per-workflow schemas -------------------------------------------------------------------


def test_template_create_schemas_are_the_seed_schemas() -> None:
    assert workflow_schemas(TemplateCreate) == SEED_SCHEMAS
    for kind, schema in SEED_SCHEMAS.items():
        Draft7Validator.check_schema(schema)
        # What a host in another language gets from the command line, too.
        reference = f"{EXAMPLE / 'workflow.py'}:TemplateCreate"
        printed = orchestrate("schema", kind, "--workflow", reference, check=True).stdout
        assert json.loads(printed) == schema


class ReleaseNotes(Workflow):
    """Three phases, one agent: its schemas must be its own, not template-create's."""

    name = "release-notes"
    purpose = "release notes drafting"
    agents = ("changelog-writer",)

    @phase(1)
    def collect_changes(self, ctx: Any) -> dict[str, Any]:
        return {"changes": self.inputs["changes"].split(";")}

    @phase(2, asks_agents=True)
    def draft_notes(self, ctx: Any) -> PhaseResult:
        changes = ctx.output("collect_changes")["changes"]
        prompt = "# Release Notes Request\n\nWrite release notes in markdown for these changes:\n"
        draft = ctx.ask("changelog-writer", prompt + "".join(f"- {c}\n" for c in changes))
        return PhaseResult(output={"draft": draft}, summary="Drafted notes")

    @phase(3)
    def publish_notes(self, ctx: Any) -> dict[str, Any]:
        path = ctx.output_path / "NOTES.md"
        ctx.step("write_notes", path.write_text, ctx.output("draft_notes")["draft"])
        return {"file": path.name}


def test_another_workflow_gets_its_own_enums_and_phase_maximum() -> None:
    expected = {kind: json.loads(json.dumps(schema)) for kind, schema in SEED_SCHEMAS.items()}
    request, state = expected["request"], expected["state"]
    request["description"] = request["description"].replace(
        "template creation", "release notes drafting"
    )
    request["properties"]["phase"]["description"] = (
        "Phase number in release notes drafting workflow"
    )
    request["properties"]["phase"]["maximum"] = 3
    request["properties"]["phase_name"]["enum"] = ["draft_notes"]
    request["properties"]["agent_name"]["enum"] = ["changelog-writer"]
    state["title"] = "ReleaseNotesState"
    state["description"] = "Checkpoint state for release notes drafting workflow"
    state["properties"]["phase"]["maximum"] = 3
    assert workflow_schemas(ReleaseNotes) == expected


def test_another_workflows_files_validate_against_its_own_schemas(tmp_path: Path) -> None:
    schemas = workflow_schemas(ReleaseNotes)
    harness = WorkflowHarness(ReleaseNotes, tmp_path, invoker=None)
    outcome = harness.run({"changes": "fix login;add export"})
    assert outcome.status == "paused", outcome.message
    (text,) = check_pause(tmp_path, schemas, ".release-notes-state.json").values()
    request = json.loads(text)
    # The format's (template-create) enums refuse it: the generated enums are doing the work.
    refused_at = {c.split(":")[0] for c in complaints(SEED_SCHEMAS["request"], request)}
    assert refused_at == {"$.phase_name", "$.agent_name"}
    harness.respond(request["request_id"], "## Changes\n\n- Fixed login\n- Added export\n")
    outcome = harness.resume()
    assert outcome.status == "completed", outcome.message
    assert_valid("state", read_json(Path(outcome.history_path or "")), schemas)
    assert (tmp_path / "NOTES.md").read_text().startswith("## Changes")


# -- the same documents, judged by both sides ----------------------------------------------


def bad_params() -> list[Any]:
    return [pytest.param(bad, id=f"{bad.kind}-{bad.label}") for bad in BAD_DOCUMENTS]


@pytest.mark.parametrize("bad", bad_params())
def test_seed_schema_refuses_each_bad_document_for_the_stated_reason(bad: Bad) -> None:
    # No xfail here: this proves each row is bad, and bad where the table says.
    found = complaints(SEED_SCHEMAS[bad.kind], bad.document)
    assert any(bad.where in c for c in found), found


@pytest.mark.parametrize("bad", bad_params())
def test_codec_refuses_each_bad_document(bad: Bad) -> None:
    with pytest.raises(ValueError, match=re.escape(bad.where)):
        python_verdict(bad.kind, bad.document)


@pytest.mark.parametrize("bad", bad_params())
def test_orchestrate_validate_refuses_each_bad_document(tmp_path: Path, bad: Bad) -> None:
    result = orchestrate_validate(tmp_path, bad.kind, bad.document)
    assert result.returncode == 1, result.stdout
    assert bad.where in result.stderr


GOOD = [
    ("response", "example-success-response.json"),
    ("response", "example-error-response.json"),
    ("request", None),  # the format's example request with a prompt of the required length
    ("state", None),  # the format's example state without its agent_requests (see below)
]


@pytest.mark.parametrize(("kind", "name"), GOOD)
def test_good_documents_are_accepted_by_all_three_judges(
    tmp_path: Path, kind: str, name: str | None
) -> None:
    document = seed(name) if name else GOOD_BASES[kind]
    assert complaints(SEED_SCHEMAS[kind], document) == []
    python_verdict(kind, document)
    result = orchestrate_validate(tmp_path, kind, document)
    assert result.returncode == 0, result.stderr


def test_seed_example_request_is_refused_by_both_for_its_short_prompt(tmp_path: Path) -> None:
    # The format's printed example prompt (60 characters) breaks its schema's minLength 100.
    document = seed("example-request.json")
    assert complaints(SEED_SCHEMAS["request"], document) == [
        f"$.prompt: {document['prompt']!r} is too short"
    ]
    with pytest.raises(ValueError, match=r"prompt has 60 characters"):
        python_verdict("request", document)
    result = orchestrate_validate(tmp_path, "request", document)
    assert (result.returncode, "$.prompt" in result.stderr) == (1, True), result.stderr


def test_seed_example_state_is_accepted_by_the_python_side(tmp_path: Path) -> None:
    document = seed("example-state.json")
    assert complaints(SEED_SCHEMAS["state"], document) == []
    python_verdict("state", document)
    assert orchestrate_validate(tmp_path, "state", document).returncode == 0


@pytest.mark.parametrize("kind", ["request", "response", "state"])
def test_unknown_major_version_fails_closed_on_the_python_side_only(
    tmp_path: Path, kind: str
) -> None:
    newer = with_version(GOOD_BASES[kind], "2.0")
    # The format's pattern ^\d+\.\d+$ accepts any MAJOR.MINOR, so the schema lets a 2.0
    # document through; the Python side refuses an unknown major before reading further
    # (fail closed), and names the version it refused.
    assert complaints(SEED_SCHEMAS[kind], newer) == []
    with pytest.raises(UnknownVersionError, match=re.escape("'2.0'")):
        python_verdict(kind, newer)
    result = orchestrate_validate(tmp_path, kind, newer)
    assert result.returncode == 1
    assert "'2.0'" in result.stderr
    # A newer minor of the known major is read as before, by both.
    minor = with_version(GOOD_BASES[kind], "1.7")
    assert complaints(SEED_SCHEMAS[kind], minor) == []
    python_verdict(kind, minor)


def test_deliberate_differences_between_schema_and_python_side() -> None:
    # 1. Extension fields: ARCHITECTURE.md says x_-prefixed fields are ignored, but the
    #    format's additionalProperties: false refuses them at the top level of a document.
    extended = {**GOOD_BASES["response"], "x_trace_id": "abc"}
    assert complaints(SEED_SCHEMAS["response"], extended) != []
    python_verdict("response", extended)
    # 2. A success without 'response' text: the schema does not require the field, the
    #    Python side refuses it (an answer with nothing in it cannot be used).
    empty = {k: v for k, v in GOOD_BASES["response"].items() if k != "response"}
    assert complaints(SEED_SCHEMAS["response"], empty) == []
    with pytest.raises(ValueError, match=r"\$\.response"):
        python_verdict("response", empty)
