"""The format reference pages, and the words a user reads.

- Every JSON example in the docs that follows a marker line ``<!-- example: KIND -->``
  (a ```json block: one document; an ```ndjson block: one per line) is a valid document
  of that kind for both judges: the shipped JSON Schema and the Python reader, in strict
  mode. Under ``docs/formats/`` every ```json block has a marker, and every kind has an
  example.
- No user-facing text says "seed" (the formats' source documents are internal): README.md
  and ``docs/**/*.md`` (references to test files aside), every ``--help``, every string
  constant in ``orchestrator/`` and ``adapters/`` that is not a docstring, every string in
  the shipped JSON Schemas, and every file under ``examples/``.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from jsonschema import Draft7Validator, FormatChecker

from orchestrator.cli.main import COMMANDS
from orchestrator.formats import steps
from orchestrator.formats.board_rules import (
    BOARD_SCHEMA_KINDS,
    board_schema,
    parse_board_document,
    parse_task,
    refuse_untrusted_secret,
)
from orchestrator.formats.bridge_codec import parse_request, parse_response, parse_state
from orchestrator.formats.strict_json import loads_strict
from orchestrator.formats.workflow_schemas import seed_schema
from support.cli import orchestrate

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FORMATS_DOCS = DOCS / "formats"
FORMATS = FormatChecker()

MARKER = re.compile(r"<!--\s*example:\s*([a-z-]+)\s*-->")
FENCE = re.compile(r"```(\w*)\s*$")


# -- the two judges of each kind -------------------------------------------------------


def _request(data: Any, source: str) -> None:
    schema = seed_schema("request")["properties"]
    parse_request(
        data,
        source=source,
        max_phase=schema["phase"]["maximum"],
        phase_names=tuple(schema["phase_name"]["enum"]),
        agent_names=tuple(schema["agent_name"]["enum"]),
    )


def _state(data: Any, source: str) -> None:
    parse_state(
        data, source=source, max_phase=seed_schema("state")["properties"]["phase"]["maximum"]
    )


def _response(data: Any, source: str) -> None:
    parse_response(data, source=source)


def _board(kind: str) -> Callable[[Any, str], None]:
    def parse(data: Any, source: str) -> None:
        document = parse_board_document(kind, data, source=source, strict=True)
        refuse_untrusted_secret(document, source=source)

    return parse


def _task(data: Any, source: str) -> None:
    refuse_untrusted_secret(parse_task(data, source=source, strict=True), source=source)


def _results(data: Any, source: str) -> None:
    steps.parse_results(data, source=source, strict=True)


def _event(data: Any, source: str) -> None:
    steps.parse_event(data, source=source, strict=True)


class Judges(NamedTuple):
    schema: dict[str, Any]
    python: Callable[[Any, str], None]


def _judges() -> dict[str, Judges]:
    task_schema = {
        "$ref": "#/definitions/task",
        "definitions": board_schema("assignment-packet")["definitions"],
    }
    return {
        "agent-request": Judges(seed_schema("request"), _request),
        "agent-response": Judges(seed_schema("response"), _response),
        "state": Judges(seed_schema("state"), _state),
        "task": Judges(task_schema, _task),
        **{kind: Judges(board_schema(kind), _board(kind)) for kind in BOARD_SCHEMA_KINDS},
        "results": Judges(steps.steps_schema("results"), _results),
        "event": Judges(steps.steps_schema("event"), _event),
    }


JUDGES = _judges()


# -- reading the examples --------------------------------------------------------------


class Example(NamedTuple):
    kind: str
    source: str  # file:line, for messages
    text: str


def _fences(path: Path) -> Iterator[tuple[int, str, str, str | None]]:
    """Each fenced block: (line of its opening fence, language, body, marker kind)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        marker = MARKER.fullmatch(lines[index - 1].strip()) if index else None
        body = "\n".join(lines[index + 1 : end]) + "\n"
        yield index + 1, opening.group(1), body, marker.group(1) if marker else None
        index = end + 1


def _pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def _examples() -> list[Example]:
    found = []
    for path in _pages():
        name = path.relative_to(ROOT)
        for line, language, body, kind in _fences(path):
            if kind is None:
                continue
            if language == "ndjson":
                for offset, text in enumerate(body.splitlines(), start=1):
                    if text.strip():
                        found.append(Example(kind, f"{name}:{line + offset}", text))
            else:
                found.append(Example(kind, f"{name}:{line}", body))
    return found


EXAMPLES = _examples()


def test_the_examples_are_found() -> None:
    assert len(EXAMPLES) > 30


def test_every_marker_names_a_known_kind_and_labels_a_json_block() -> None:
    for path in _pages():
        lines = path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, start=1):
            marker = MARKER.fullmatch(line.strip())
            if marker is None:
                continue
            where = f"{path.relative_to(ROOT)}:{number}"
            assert marker.group(1) in JUDGES, f"{where}: unknown kind {marker.group(1)!r}"
            following = lines[number] if number < len(lines) else ""
            assert following in ("```json", "```ndjson"), (
                f"{where}: a marker goes on the line before a ```json or ```ndjson block"
            )


def test_every_json_block_of_the_format_pages_is_labelled() -> None:
    for path in sorted(FORMATS_DOCS.glob("*.md")):
        for line, language, _, kind in _fences(path):
            if language in ("json", "ndjson"):
                assert kind is not None, (
                    f"{path.relative_to(ROOT)}:{line}: label the example with "
                    "'<!-- example: KIND -->' on the line before it"
                )


def test_every_kind_has_an_example_on_the_format_pages() -> None:
    shown = {e.kind for e in EXAMPLES if e.source.startswith("docs/formats/")}
    assert sorted(set(JUDGES) - shown) == []


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: f"{e.source}-{e.kind}")
def test_the_example_is_valid_for_the_schema_and_the_python_reader(example: Example) -> None:
    judges = JUDGES[example.kind]
    data = loads_strict(example.text.encode("utf-8"), source=example.source)
    validator = Draft7Validator(judges.schema, format_checker=FORMATS)
    problems = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(data)]
    assert problems == [], f"{example.source}: the shipped schema refuses the example"
    judges.python(data, example.source)


# -- no "seed" in what a user reads ----------------------------------------------------

# A test file may keep its name (``tests/formats/test_seed_schemas.py``): a page that says which
# test holds a rule names it as it is.
TEST_FILE_REFERENCE = re.compile(r"tests/[\w./:\[\]-]*")


def _seed_lines(text: str) -> list[str]:
    return [
        line.strip()
        for line in text.splitlines()
        if "seed" in TEST_FILE_REFERENCE.sub("", line).lower()
    ]


@pytest.mark.parametrize(
    "path",
    [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_the_documentation_names_the_formats_by_what_they_are(path: Path) -> None:
    assert _seed_lines(path.read_text(encoding="utf-8")) == []


def _board_subcommands() -> list[str]:
    text = orchestrate("board", "--help").stdout
    listing = text.split("SUBCOMMAND\n", 2)[-1].split("\n\n")[0]
    names = re.findall(r"^    (\S+)", listing, re.MULTILINE)
    assert "create" in names and "handoff" in names, text
    return names


@pytest.mark.slow
def test_no_help_text_says_seed() -> None:
    commands = [["--help"], *([name, "--help"] for name in COMMANDS)]
    commands += [["board", sub, "--help"] for sub in _board_subcommands()]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda args: (args, orchestrate(*args)), commands))
    for args, result in results:
        assert result.returncode == 0, (args, result.stderr)
        assert _seed_lines(result.stdout) == [], f"orchestrate {' '.join(args)}"


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _string_constants(path: Path) -> Iterator[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    docstrings = _docstrings(tree)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            yield node.lineno, node.value


@pytest.mark.slow
def test_no_message_of_the_code_says_seed() -> None:
    """Messages, help, prompts for subagents, written documents: every string constant
    that is not a docstring (names such as ``seed_schema`` are not strings)."""
    found = [
        f"{path.relative_to(ROOT)}:{line}: {value!r}"
        for folder in ("orchestrator", "adapters")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line, value in _string_constants(path)
        if "seed" in value.lower()
    ]
    assert found == []


def _json_strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _json_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _json_strings(item)


def test_no_shipped_schema_says_seed() -> None:
    schemas = sorted((ROOT / "orchestrator" / "formats" / "schemas").rglob("*.json"))
    assert len(schemas) >= 15
    found = [
        f"{path.relative_to(ROOT)}: {text!r}"
        for path in schemas
        for text in _json_strings(json.loads(path.read_text(encoding="utf-8")))
        if "seed" in text.lower()
    ]
    assert found == []


def test_no_example_says_seed() -> None:
    found = []
    for path in sorted((ROOT / "examples").rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        found += [f"{path.relative_to(ROOT)}: {line}" for line in _seed_lines(text)]
    assert found == []


#: "seed" as the name of a source document (not ``EncodedItems.seed``, a method).
SOURCE_DOCUMENT = re.compile(r"(?<![.\w])seeds?\b|SEEDS\.md", re.IGNORECASE)


def _comments_and_docstrings(path: Path) -> Iterator[tuple[int, str]]:
    import io
    import tokenize

    source = path.read_text(encoding="utf-8")
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    tree = ast.parse(source, filename=str(path))
    docstrings = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and id(node) in docstrings:
            yield node.lineno, str(node.value)


@pytest.mark.slow
def test_comments_and_docstrings_name_the_formats_by_what_they_are() -> None:
    """A maintainer has this repository alone: the code says "the task board documents",
    not the name of the document the format came from (names of test files and fixture
    directories aside)."""
    found = [
        f"{path.relative_to(ROOT)}:{line}: {match.group()}"
        for folder in ("orchestrator", "adapters", "tests", "bench", "examples")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path != Path(__file__).resolve()  # this file names the word it looks for
        for line, text in _comments_and_docstrings(path)
        for match in SOURCE_DOCUMENT.finditer(TEST_FILE_REFERENCE.sub("", text))
    ]
    found += [
        f"{path.relative_to(ROOT)}: {line}"
        for path in sorted((ROOT / "tests" / "fixtures").rglob("*.md"))
        for line in _seed_lines(path.read_text(encoding="utf-8"))
    ]
    assert found == []


# -- links between the pages -----------------------------------------------------------

LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = heading.strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    in_fence = False
    found = set()
    for line in text.splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
        elif not in_fence and line.startswith("#"):
            found.add(_anchor(line.lstrip("#")))
    return found


@pytest.mark.parametrize(
    "path",
    [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_every_link_between_the_pages_leads_somewhere(path: Path) -> None:
    broken = []
    for target in LINK.findall(path.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue  # a URL
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(f"{target}: no heading for #{anchor}")
    assert broken == []
