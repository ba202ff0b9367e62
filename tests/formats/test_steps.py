"""Step evidence: ``results.json``, ``events.ndjson``, their schemas and the log.

Proves that:
- the format's examples, made valid (``tests/fixtures/seed000``), are accepted by both
  judges (Draft-07 with a format checker that enforces "date-time", and ``parse_*``), in
  strict mode too, and are written back as they were read; the verbatim JSONC
  placeholders are refused;
- every rule is enforced by both judges at the same JSON path (the table ``BAD``); the
  rules only Python checks are the rows whose keyword is ``None``: NaN confidence (JSON
  has no NaN, so only a built object can hold one) and the ``Validate()`` of built
  objects; the schema's date-time format checker refuses a leap second, which RFC 3339 and
  Python accept (pinned below);
- an unknown major version fails closed; unknown keys are ignored, or refused in strict
  mode; ``x_`` keys are always accepted;
- both documents round-trip (hypothesis), and what is generated is valid for the schema;
- the reader numbers lines in errors, skips blank lines, ignores a torn last line and
  reads a 5 MB line; the log's appends from four processes stay whole lines.
"""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft7Validator, FormatChecker

from orchestrator._errors import ContractError, UnknownVersionError, UntrustedJSONError
from orchestrator.evidence.step_log import EventLog, read_events
from orchestrator.formats import steps
from orchestrator.formats.steps import (
    EVENT_TYPES,
    STEPS_SCHEMA_KINDS,
    Artifact,
    Event,
    Results,
    StepStatus,
    dump_results,
    encode_event,
    parse_event,
    parse_results,
    steps_schema,
    validate_event,
    validate_results,
)
from orchestrator.formats.strict_json import loads_strict

SEED000 = Path(__file__).parents[1] / "fixtures" / "seed000"
FORMATS = FormatChecker()
RESULTS = json.loads((SEED000 / "results-example.json").read_text(encoding="utf-8"))
EVENT_LINES = (SEED000 / "events-example.ndjson").read_bytes().splitlines()
EVENTS = [json.loads(line) for line in EVENT_LINES]
EVENT = EVENTS[2]  # tool.call: nested data


def complaints(kind: str, document: Any) -> list[tuple[str, str]]:
    """(JSON path, keyword) of every complaint of the shipped schema."""
    validator = Draft7Validator(steps_schema(kind), format_checker=FORMATS)
    return [(e.json_path, str(e.validator)) for e in validator.iter_errors(document)]


PARSERS = {"results": parse_results, "event": parse_event}


def parse(kind: str, document: Any, *, strict: bool = False) -> Any:
    return PARSERS[kind](document, source=f"{kind}.json", strict=strict)


@pytest.fixture(autouse=True, scope="module")
def formats_are_enforced() -> None:
    assert not FORMATS.conforms("2026-02-09", "date-time")


# -- the format's examples ----------------------------------------------------------------


def test_both_schemas_are_valid_draft_07() -> None:
    assert STEPS_SCHEMA_KINDS == ("results", "event")
    for kind in STEPS_SCHEMA_KINDS:
        Draft7Validator.check_schema(steps_schema(kind))
    with pytest.raises(ValueError, match="no steps schema 'nope'"):
        steps_schema("nope")


@pytest.mark.parametrize("strict", [False, True])
def test_the_results_example_is_accepted_by_both_judges(strict: bool) -> None:
    document = copy.deepcopy(RESULTS)
    assert complaints("results", document) == []
    results = parse_results(document, source="results.json", strict=strict)
    assert document == RESULTS, "parsing changed its input"
    assert results.status is StepStatus.PASS
    assert results.confidence == 0.92
    assert results.artifacts[1] == Artifact(
        name="review-report", path="artifacts/report.md", media_type="text/markdown"
    )
    assert results.metadata == {"files_reviewed": 3, "issues_found": 2}
    written = dump_results(results)
    assert loads_strict(written, source="written") == RESULTS
    assert written.endswith(b"}\n")


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("index", range(len(EVENTS)))
def test_each_example_event_is_accepted_by_both_judges(index: int, strict: bool) -> None:
    document = EVENTS[index]
    assert complaints("event", document) == []
    event = parse_event(document, source="events.ndjson", strict=strict)
    assert event.event == EVENT_TYPES[[0, 2, 4, 5, 6, 3, 1][index]]
    line = encode_event(event)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == document
    # The format's example lines are the same JSON, with spaces after separators.
    assert line[:-1] == json.dumps(document, separators=(",", ":")).encode()


def test_the_example_log_reads_back_with_line_numbers() -> None:
    events = list(read_events(SEED000 / "events-example.ndjson"))
    assert [number for number, _ in events] == [1, 2, 3, 4, 5, 6, 7]
    assert events[-1][1].data == {"status": "pass", "confidence": 0.92, "duration_ms": 18500}


def test_the_reference_doc_examples_are_valid() -> None:
    reference = Path(__file__).parents[2] / "docs" / "formats" / "step-evidence.md"
    text = reference.read_text(encoding="utf-8")
    blocks = text.split("```")[1::2]
    (results,) = (
        block[len("json\n") :]
        for block in blocks
        if block.startswith("json\n") and '"schema_version"' in block
    )
    assert json.loads(results) == RESULTS
    (log,) = (block[len("ndjson\n") :] for block in blocks if block.startswith("ndjson\n"))
    lines = log.strip().splitlines()
    assert len(lines) == 8
    for line in lines:
        assert complaints("event", json.loads(line)) == []
        parse_event(json.loads(line), source=str(reference), strict=True)
    assert [json.loads(line)["ts"] for line in lines] == sorted(
        json.loads(line)["ts"] for line in lines
    )


def test_the_verbatim_jsonc_placeholders_are_refused() -> None:
    # The format's printed examples are JSONC placeholders, not documents.
    text = (SEED000 / "results-example.jsonc").read_bytes()
    with pytest.raises(UntrustedJSONError, match="invalid JSON"):
        loads_strict(text, source="results-example.jsonc")
    placeholder = {
        "schema_version": "1.0",
        "status": "pass | fail | error | abstain",
        "confidence": 0.5,
        "summary": "string",
        "artifacts": [],
    }
    assert ("$.status", "enum") in complaints("results", placeholder)
    with pytest.raises(ContractError, match="status"):
        parse_results(placeholder, source="r")
    for line in (SEED000 / "events-example.jsonc").read_bytes().splitlines():
        document = json.loads(line)  # valid JSON, but "RFC3339" is not a timestamp
        assert ("$.ts", "format") in complaints("event", document)
        with pytest.raises(ContractError) as caught:
            parse_event(document, source="e")
        assert (caught.value.json_path, caught.value.rule) == ("$.ts", "format")


# -- bad documents ------------------------------------------------------------------------

_DROP = object()
GOOD = {"results": RESULTS, "event": EVENT}


class Bad(NamedTuple):
    kind: str
    label: str
    document: Any
    where: str  # the JSON path both judges name
    rule: str  # the Python side's rule
    keyword: str  # the schema's keyword


def changed(kind: str, path: str, value: Any) -> Any:
    """A copy of the good ``kind`` document with ``a.b[0].c`` set (deleted for _DROP)."""
    document = copy.deepcopy(GOOD[kind])
    *parents, last = path.replace("[", ".").replace("]", "").split(".")
    target: Any = document
    for key in parents:
        target = target[int(key)] if key.isdigit() else target[key]
    if value is _DROP:
        del target[last]
    else:
        target[last] = value
    return document


def bad(kind: str, path: str, value: Any, where: str, rule: str, keyword: str = "") -> Bad:
    label = f"{path}={'missing' if value is _DROP else value!r}"
    return Bad(kind, label, changed(kind, path, value), where, rule, keyword or rule)


def artifact_path(value: str) -> Bad:
    return bad("results", "artifacts[0].path", value, "$.artifacts[0].path", "pattern")


def event_ts(value: str, keyword: str = "format") -> Bad:
    return bad("event", "ts", value, "$.ts", "format", keyword)


def event_name(value: str) -> Bad:
    return bad("event", "event", value, "$.event", "pattern")


BAD = [
    Bad("results", "not an object", ["x"], "$", "type", "type"),
    *(
        bad("results", name, _DROP, "$", "required")
        for name in ("schema_version", "status", "confidence", "summary", "artifacts")
    ),
    *(
        bad("results", f"artifacts[0].{name}", _DROP, "$.artifacts[0]", "required")
        for name in ("name", "path", "media_type")
    ),
    bad("results", "schema_version", "1", "$.schema_version", "pattern"),
    bad("results", "schema_version", "1.0.0", "$.schema_version", "pattern"),
    bad("results", "schema_version", "01.0", "$.schema_version", "pattern"),
    bad("results", "schema_version", "1.0\n", "$.schema_version", "pattern"),
    bad("results", "schema_version", "2.0", "$.schema_version", "version", "pattern"),
    bad("results", "schema_version", 1.0, "$.schema_version", "type"),
    bad("results", "status", "passed", "$.status", "enum"),
    bad("results", "status", "PASS", "$.status", "enum"),
    bad("results", "confidence", -0.1, "$.confidence", "range", "minimum"),
    bad("results", "confidence", 1.1, "$.confidence", "range", "maximum"),
    bad("results", "confidence", "0.9", "$.confidence", "type"),
    bad("results", "confidence", True, "$.confidence", "type"),
    bad("results", "summary", None, "$.summary", "type"),
    bad("results", "artifacts", {}, "$.artifacts", "type"),
    bad("results", "metadata", [], "$.metadata", "type"),
    bad("results", "artifacts[0].metadata", "k=v", "$.artifacts[0].metadata", "type"),
    bad("results", "artifacts[0].name", "", "$.artifacts[0].name", "minLength"),
    bad("results", "artifacts[0].media_type", "", "$.artifacts[0].media_type", "minLength"),
    artifact_path("/etc/passwd"),
    artifact_path("../x"),
    artifact_path("a/../../x"),
    artifact_path("a/../b"),
    artifact_path("C:\\x"),
    artifact_path("C:/x"),
    artifact_path("c:x"),
    artifact_path("artifacts\\comments.json"),
    artifact_path(""),
    artifact_path("."),
    artifact_path("./a"),
    artifact_path("a//b"),
    artifact_path("a/"),
    artifact_path(" a"),
    artifact_path("a /b"),
    artifact_path("a\nb"),
    artifact_path("a\n"),
    bad("event", "ts", _DROP, "$", "required"),
    bad("event", "event", _DROP, "$", "required"),
    bad("event", "data", _DROP, "$", "required"),
    event_ts("2026-02-09"),
    event_ts("2026-02-09T14:03"),
    event_ts("2026-02-09T14:03:00"),
    event_ts("2026-02-09 14:03:00Z"),
    event_ts("2026-02-30T14:03:00Z"),
    event_ts("2026-02-09T24:00:00Z"),
    # rfc3339-validator takes a final newline (its "$"); the schema's pattern does not
    event_ts("2026-02-09T14:03:00Z\n", "pattern"),
    event_ts("0000-01-01T00:00:00Z"),
    event_ts("\uff12026-02-09T14:03:00Z"),
    bad("event", "ts", 1770645780, "$.ts", "type"),
    event_name(""),
    event_name("Agent.Start"),
    event_name("agent..start"),
    event_name(".agent"),
    event_name("agent."),
    event_name("agent start"),
    event_name("agent-start"),
    event_name("tool.call\n"),
    bad("event", "event", ["tool.call"], "$.event", "type"),
    bad("event", "data", "grep TODO", "$.data", "type"),
    bad("event", "data", None, "$.data", "type"),
    bad("event", "data", [1], "$.data", "type"),
]


def bad_params() -> list[Any]:
    return [pytest.param(row, id=f"{row.kind}-{row.label}-{row.rule}") for row in BAD]


@pytest.mark.parametrize("row", bad_params())
def test_schema_refuses_each_bad_document_where_the_table_says(row: Bad) -> None:
    found = complaints(row.kind, row.document)
    assert (row.where, row.keyword) in found, found


@pytest.mark.parametrize("row", bad_params())
@pytest.mark.parametrize("strict", [False, True])
def test_python_refuses_each_bad_document_naming_source_path_and_rule(
    row: Bad, strict: bool
) -> None:
    with pytest.raises(ContractError) as caught:
        PARSERS[row.kind](row.document, source="doc.json", strict=strict)
    error = caught.value
    assert (error.source, error.json_path, error.rule) == ("doc.json", row.where, row.rule)
    assert str(error).startswith("doc.json: ")
    assert isinstance(error, UnknownVersionError) == (row.rule == "version")


def test_messages_say_what_to_write_instead() -> None:
    def message(path: str) -> str:
        with pytest.raises(ContractError) as caught:
            parse_results(changed("results", "artifacts[0].path", path), source="r.json")
        return str(caught.value)

    assert "'/etc/passwd' is an absolute path" in message("/etc/passwd")
    assert "write 'etc/passwd' instead" in message("/etc/passwd")
    assert "climbs out of the output directory" in message("a/../../x")
    assert "holds a backslash" in message("C:\\x")
    assert "write 'a/b'" in message("./a//b/")
    with pytest.raises(ContractError, match=r"required field 'media_type' is missing"):
        parse_results(changed("results", "artifacts[0].media_type", _DROP), source="r")


@pytest.mark.parametrize(
    "name", [*EVENT_TYPES, "review.file_analyzed", "review.v2.file_analyzed", "x9_1"]
)
def test_event_names_are_dot_namespaced_and_open(name: str) -> None:
    document = {**EVENT, "event": name}
    assert complaints("event", document) == []
    assert parse_event(document, source="e").event == name


@pytest.mark.parametrize(
    "ts",
    [
        "2026-02-09T14:03:00Z",
        "2026-02-09T14:03:00.123456+05:30",
        "2026-02-09T14:03:00-00:00",
        "2026-02-09t14:03:00z",
    ],
)
def test_timestamps_both_judges_accept(ts: str) -> None:
    assert complaints("event", {**EVENT, "ts": ts}) == []
    parse_event({**EVENT, "ts": ts}, source="e")


def test_a_leap_second_only_the_format_checker_refuses() -> None:
    # RFC 3339 allows second 60; rfc3339-validator, which jsonschema's "date-time" uses,
    # does not. Python follows the RFC.
    ts = "2016-12-31T23:59:60Z"
    assert complaints("event", {**EVENT, "ts": ts}) == [("$.ts", "format")]
    parse_event({**EVENT, "ts": ts}, source="e")


def test_a_nan_confidence_is_refused_by_python_only() -> None:
    # JSON has no NaN (the strict reader refuses it), so only a built object holds one.
    results = parse_results(RESULTS, source="r")
    results.confidence = math.nan
    with pytest.raises(ContractError, match="confidence is NaN") as caught:
        results.validate()
    assert (caught.value.source, caught.value.rule) == ("results.json", "range")
    with pytest.raises(UntrustedJSONError):
        loads_strict(b'{"confidence": NaN}', source="r")


def test_validate_methods_check_built_objects() -> None:
    results = Results(status=StepStatus.ABSTAIN, confidence=0, summary="", artifacts=[])
    results.validate()
    assert results.schema_version == "1.0"
    assert dump_results(results) == (
        b'{\n  "schema_version": "1.0",\n  "status": "abstain",\n  "confidence": 0,\n'
        b'  "summary": "",\n  "artifacts": []\n}\n'
    )
    results.artifacts.append(Artifact(name="x", path="../x", media_type="text/plain"))
    with pytest.raises(ContractError, match=r"at \$\.artifacts\[0\]\.path"):
        results.validate(source="out/results.json")
    with pytest.raises(ContractError):
        dump_results(results)
    results.artifacts.clear()
    results.schema_version = "3.1"
    with pytest.raises(UnknownVersionError):
        validate_results(results, source="built")
    event = Event(ts="2026-02-09", event="decision", data={})
    with pytest.raises(ContractError, match="RFC 3339") as caught:
        event.validate()
    assert caught.value.source == "events.ndjson"
    with pytest.raises(ContractError):
        encode_event(event)
    event.ts = "2026-02-09T14:03:00Z"
    validate_event(event, source="built")
    assert encode_event(event) == (b'{"ts":"2026-02-09T14:03:00Z","event":"decision","data":{}}\n')


def test_unknown_major_version_fails_closed_before_anything_else() -> None:
    newer = {"schema_version": "2.0", "status": 7, "something": "else"}
    with pytest.raises(UnknownVersionError, match=r"'2\.0' has major 2") as caught:
        parse_results(newer, source="next.json")
    assert caught.value.json_path == "$.schema_version"
    assert ("$.schema_version", "pattern") in complaints("results", newer)
    later = {**RESULTS, "schema_version": "1.7"}
    assert parse_results(later, source="later.json", strict=True).schema_version == "1.7"
    assert complaints("results", later) == []


# -- extension policy ---------------------------------------------------------------------


def with_keys(kind: str, prefix: str) -> Any:
    document = copy.deepcopy(GOOD[kind])
    document[f"{prefix}top"] = 1
    if kind == "results":
        document["artifacts"][0][f"{prefix}in_list"] = {"deep": [1]}
    return document


@pytest.mark.parametrize("kind", STEPS_SCHEMA_KINDS)
def test_unknown_keys_are_ignored_unless_strict(kind: str) -> None:
    document = with_keys(kind, "")
    assert parse(kind, document) == parse(kind, GOOD[kind])
    assert "top" in document, "the caller's document was changed"
    with pytest.raises(ContractError) as caught:
        parse(kind, document, strict=True)
    assert (caught.value.rule, caught.value.json_path) == ("additionalProperties", "$")
    assert "unknown field 'top'" in str(caught.value)
    expected = {"$", "$.artifacts[0]"} if kind == "results" else {"$"}
    assert {path for path, _ in complaints(kind, document)} == expected


@pytest.mark.parametrize("kind", STEPS_SCHEMA_KINDS)
@pytest.mark.parametrize("strict", [False, True])
def test_x_keys_are_always_accepted(kind: str, strict: bool) -> None:
    document = with_keys(kind, "x_")
    assert parse(kind, document, strict=strict) == parse(kind, GOOD[kind])
    assert complaints(kind, document) == []


def test_metadata_and_data_are_open_objects() -> None:
    anything = {"nested": {"list": [1, None, "x"]}, "Key With Spaces": True}
    results = parse_results({**RESULTS, "metadata": anything}, source="r", strict=True)
    assert results.metadata == anything
    event = parse_event({**EVENT, "data": anything}, source="e", strict=True)
    assert event.data == anything
    assert json.loads(encode_event(event))["data"] == anything


def test_constants_are_the_seeds_and_the_schemas() -> None:
    assert steps.STEPS_SCHEMA_VERSION == "1.0"
    assert [s.value for s in StepStatus] == ["pass", "fail", "error", "abstain"]
    assert [s.value for s in StepStatus] == [
        steps.STATUS_PASS,
        steps.STATUS_FAIL,
        steps.STATUS_ERROR,
        steps.STATUS_ABSTAIN,
    ]
    assert EVENT_TYPES == (
        "agent.start",
        "agent.end",
        "skill.start",
        "skill.end",
        "tool.call",
        "tool.result",
        "artifact.written",
        "decision",
        "error",
    )
    assert (steps.EVENT_TOOL_CALL, steps.EVENT_ERROR) == ("tool.call", "error")
    results = steps_schema("results")
    assert results["properties"]["status"]["enum"] == [s.value for s in StepStatus]
    assert results["definitions"]["artifact"]["properties"]["path"]["pattern"] == (
        steps.ARTIFACT_PATH_PATTERN
    )
    event = steps_schema("event")["properties"]
    assert event["event"]["pattern"] == steps.EVENT_NAME_PATTERN
    assert event["ts"]["pattern"] == steps.DATE_TIME_PATTERN
    assert event["ts"]["format"] == "date-time"


def test_importing_and_reading_does_not_import_cattrs() -> None:
    code = (
        "import sys\n"
        "from orchestrator.formats.steps import parse_results, dump_results\n"
        "from orchestrator.evidence.step_log import read_events\n"
        "import json\n"
        "loaded = 'cattrs' in sys.modules\n"
        f"r = parse_results(json.load(open({str(SEED000 / 'results-example.json')!r})),"
        " source='r', strict=True)\n"
        "dump_results(r)\n"
        f"list(read_events({str(SEED000 / 'events-example.ndjson')!r}, strict=True))\n"
        "print(loaded, 'cattrs' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


# -- round trips --------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
OBJECTS = st.dictionaries(st.text(max_size=10), JSON_VALUES, max_size=3)
SEGMENTS = st.text(
    st.characters(blacklist_characters="/\\", blacklist_categories=("Cc", "Cs")),
    min_size=1,
    max_size=8,
).filter(lambda s: s == s.strip() and s not in (".", ".."))
PATHS = (
    st.lists(SEGMENTS, min_size=1, max_size=4)
    .map("/".join)
    .filter(lambda p: not (len(p) > 1 and p[1] == ":" and p[0].isascii() and p[0].isalpha()))
)
ARTIFACTS = st.builds(
    Artifact,
    name=st.text(min_size=1, max_size=10),
    path=PATHS,
    media_type=st.sampled_from(["application/json", "text/markdown", "text/plain"]),
    metadata=st.none() | OBJECTS,
)
RESULTS_STRATEGY = st.builds(
    Results,
    schema_version=st.sampled_from(["1.0", "1.1", "1.12"]),
    status=st.sampled_from(list(StepStatus)),
    confidence=st.floats(min_value=0, max_value=1),
    summary=st.text(max_size=30),
    artifacts=st.lists(ARTIFACTS, max_size=3),
    metadata=st.none() | OBJECTS,
)
NAMES = st.from_regex(r"\A[a-z0-9_]{1,6}(\.[a-z0-9_]{1,6}){0,2}\Z")
# Naive date-times; the strategy below adds an offset.
TIMESTAMPS = st.datetimes().map(lambda moment: moment.isoformat(timespec="microseconds"))
EVENT_STRATEGY = st.builds(
    Event,
    ts=st.tuples(TIMESTAMPS, st.sampled_from(["Z", "+00:00", "-07:30", "+14:00"])).map("".join),
    event=st.sampled_from(EVENT_TYPES) | NAMES,
    data=OBJECTS,
)


@pytest.mark.slow
@given(results=RESULTS_STRATEGY)
def test_results_round_trip(results: Results) -> None:
    written = dump_results(results)
    document = loads_strict(written, source="results.json")
    assert complaints("results", document) == []
    assert parse_results(document, source="results.json", strict=True) == results


@pytest.mark.slow
@given(event=EVENT_STRATEGY)
def test_events_round_trip(event: Event) -> None:
    line = encode_event(event)
    assert line.isascii() and line.endswith(b"\n") and line.count(b"\n") == 1
    document = loads_strict(line, source="events.ndjson")
    assert complaints("event", document) == []
    assert parse_event(document, source="events.ndjson", strict=True) == event


@settings(max_examples=50)
@given(paths=st.lists(PATHS, min_size=1, max_size=5))
def test_artifact_paths_are_normalised_forms(paths: list[str]) -> None:
    from orchestrator.formats.scope import normalize_resource

    for path in paths:
        assert normalize_resource(path) == path


# -- the reader and the log ---------------------------------------------------------------


def event_line(number: int, **data: Any) -> bytes:
    event = Event(ts="2026-02-09T14:03:00Z", event="review.file_analyzed", data=data)
    return encode_event(event)


def test_reader_numbers_lines_and_skips_blank_ones(tmp_path: Path) -> None:
    log = tmp_path / "events.ndjson"
    log.write_bytes(event_line(1, n=1) + b"\n  \n" + event_line(4, n=4) + b"\r\n")
    assert [(number, e.data) for number, e in read_events(log)] == [(1, {"n": 1}), (4, {"n": 4})]


def test_reader_errors_name_the_file_and_line(tmp_path: Path) -> None:
    log = tmp_path / "events.ndjson"
    log.write_bytes(event_line(1) + b"\n" + b'{"ts": "2026-02-09", "event": "x", "data": {}}\n')
    with pytest.raises(ContractError) as caught:
        list(read_events(log, source="out/events.ndjson"))
    assert caught.value.source == "out/events.ndjson line 3"
    assert (caught.value.json_path, caught.value.rule) == ("$.ts", "format")
    assert str(caught.value).startswith("out/events.ndjson line 3: '2026-02-09' is not")
    log.write_bytes(event_line(1) + b"{not json}\n")
    with pytest.raises(UntrustedJSONError, match=r"events\.ndjson line 2: invalid JSON at column"):
        list(read_events(log))
    log.write_bytes(b'{"ts": "2026-02-09T14:03:00Z", "data": {}}\n')
    with pytest.raises(ContractError, match=r"line 1: required field 'event' is missing"):
        list(read_events(log))


def test_reader_ignores_a_torn_last_line(tmp_path: Path) -> None:
    log = tmp_path / "events.ndjson"
    whole = event_line(1, n=1)
    log.write_bytes(whole + whole[:-9])
    assert [e.data for _, e in read_events(log)] == [{"n": 1}]
    # The next append cuts the torn tail rather than gluing onto it.
    EventLog(log, durable=False).append(parse_event(json.loads(whole), source="e"))
    assert log.read_bytes() == whole + whole
    assert [number for number, _ in read_events(log)] == [1, 2]


def test_reader_reads_a_5_mb_line(tmp_path: Path) -> None:
    log = tmp_path / "events.ndjson"
    big = "x" * (5 * 1024 * 1024)
    EventLog(log).append_many(
        [
            Event(ts="2026-02-09T14:03:00Z", event="tool.result", data={"output": big}),
            Event(ts="2026-02-09T14:03:01Z", event="agent.end", data={}),
        ]
    )
    events = list(read_events(log))
    assert [number for number, _ in events] == [1, 2]
    assert events[0][1].data["output"] == big


def test_log_refuses_an_invalid_event_and_writes_nothing(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.ndjson")
    good = Event(ts="2026-02-09T14:03:00Z", event="agent.start", data={"step": "review"})
    bad_event = Event(ts="yesterday", event="agent.end", data={})
    with pytest.raises(ContractError, match=r"events\.ndjson: 'yesterday'"):
        log.append_many([good, bad_event])
    assert not log.path.exists()
    log.append(good)
    assert log.path.read_bytes() == encode_event(good)
    assert log.durable and not EventLog(log.path, durable=False).durable


WRITER = """
import sys
from orchestrator.evidence.step_log import EventLog
from orchestrator.formats.steps import Event
path, writer, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sys.stdin.read()  # wait until every writer has started
log = EventLog(path)
for seq in range(count):
    size = 6000 if seq % 25 == 0 else 40 + (seq * 37 + writer) % 400
    event = Event(
        ts="2026-02-09T14:03:00Z",
        event="test.append",
        data={"writer": writer, "seq": seq, "pad": "p" * size},
    )
    if seq % 10 == 9:
        log.append_many([event, Event(ts=event.ts, event="test.pair", data=event.data)])
    else:
        log.append(event)
"""


@pytest.mark.slow
def test_appends_from_four_processes_stay_whole(tmp_path: Path) -> None:
    log = tmp_path / "events.ndjson"
    count = 60
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(log), str(writer), str(count)],
            stdin=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for writer in range(4)
    ]
    for process in writers:
        assert process.stdin is not None
        process.stdin.close()  # release them together
    for process in writers:
        assert process.stderr is not None
        stderr = process.stderr.read()
        assert process.wait(timeout=120) == 0, stderr.decode()
        process.stderr.close()
    events = [event for _, event in read_events(log, strict=True)]
    seen: dict[int, list[int]] = {writer: [] for writer in range(4)}
    for index, event in enumerate(events):
        if event.event == "test.pair":
            # A batch is one write: its second line directly follows its first.
            assert events[index - 1].data == event.data
            continue
        seen[event.data["writer"]].append(event.data["seq"])
    assert seen == {writer: list(range(count)) for writer in range(4)}
    assert len(events) == 4 * (count + count // 10)


# -- writers validate exactly as readers do ----------------------------------------------


@pytest.mark.parametrize(
    ("fields", "path", "rule"),
    [
        ({"status": "unknown"}, "$.status", "enum"),
        ({"artifacts": None}, "$", "required"),
        ({"confidence": "high"}, "$.confidence", "type"),
        ({"metadata": {"when": object()}}, "$", "type"),
        ({"summary": 7}, "$.summary", "type"),
        ({"metadata": {"score": float("nan")}}, "$", "type"),
    ],
)
def test_a_writer_refuses_what_a_reader_would(fields: dict[str, Any], path: str, rule: str) -> None:
    """``Results(...).validate()`` and ``dump_results`` raise the contract's own error for a
    value ``parse_results`` would refuse, never a ``TypeError``, and write nothing."""
    good: dict[str, Any] = {
        "status": StepStatus.PASS,
        "confidence": 0.5,
        "summary": "done",
        "artifacts": [],
    }
    results = Results(**{**good, **fields})
    with pytest.raises(ContractError) as refused:
        results.validate()
    assert (refused.value.json_path, refused.value.rule) == (path, rule), refused.value
    with pytest.raises(ContractError):
        dump_results(results)


def test_an_event_writer_refuses_what_a_reader_would() -> None:
    with pytest.raises(ContractError) as refused:
        encode_event(Event(ts="2026-01-01T00:00:00Z", event="tool.call", data=None))  # type: ignore[arg-type]
    assert refused.value.rule == "required"
