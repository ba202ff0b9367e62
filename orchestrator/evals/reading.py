"""A run directory read the way an evaluator must: tolerant where the contract says so.

A run directory (``<out>/<version>/<run_id>/``) holds ``run.json``, one ``<caseId>.json``
per case, and ``assets/``. Reading one never stops at a bad file: each file that cannot
be read whole becomes a :class:`FileProblem` naming the file and the field, and the rest
is read. Unknown fields and unknown event types are ignored; a later minor version
(``case.v1.2``) is read as v1; a major other than 1 is refused for that file alone.

Every file is read through :mod:`orchestrator.storage.files` (a regular file, no link
followed, bounded), and every relative reference (an asset href, a saved body) is
resolved by :func:`file_inside`, which refuses anything outside the directory.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from .._errors import OrchestratorError, UnsafePathError
from .._text import plural
from ..formats.evaluation import EVALUATION_FILE, is_relative_href
from ..formats.runs import ASSETS_DIR, RUN_FILE
from ..formats.runs import MANIFEST_FILE as MANIFEST_NAME
from ..storage.files import read_json_file

MANIFEST_FILE = f"{ASSETS_DIR}/{MANIFEST_NAME}"
#: A case artifact may be large (inline payloads); anything past this is refused, named.
MAX_JSON_BYTES = 64 * 1024 * 1024
_VERSION = re.compile(r"([a-z-]+)\.v([0-9]+)(?:\.([0-9]+))?")
_EVENT_INDEX = re.compile(r"(?:events\[)?([0-9]+)\]?")
#: A token of text that may be an absolute path: at the start or after a space, quote,
#: bracket, ``=``, ``:`` or ``,``; a ``/`` not doubled (``http://host/x`` is a URL, and
#: its path follows a host), a drive (``C:\``), a UNC share (``\\host``) or a ``file:`` URL.
_ABSOLUTE_TOKEN = re.compile(
    r"""(?<![^\s'"(\[{=:,;>`])(?:file:/*|/(?!/)|[A-Za-z]:[\\/]|\\\\)[^\s'"<>()\[\]{},;`|]+"""
)


@attrs.define(kw_only=True, frozen=True)
class FileProblem:
    """Why a file (relative to the directory read) is not what the contract says."""

    file: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.field}: {self.message}"


@attrs.define(kw_only=True)
class CaseFile:
    """One ``<caseId>.json``: its data when readable, else the problem."""

    case_id: str
    name: str  # the file's name inside the run directory
    data: dict[str, Any] | None = None
    problem: FileProblem | None = None


@attrs.define(kw_only=True)
class RunDir:
    """A run directory as read: ``run.json``, the case files by id, the asset manifest."""

    path: Path
    run: dict[str, Any] | None
    cases: dict[str, CaseFile]
    manifest: dict[str, Any] | None
    problems: list[FileProblem]
    #: the cases run.json selects that the run never recorded (:func:`unrecorded_cases`)
    unrecorded: list[str] = attrs.Factory(list)

    @property
    def version(self) -> str | None:
        value = (self.run or {}).get("version")
        return value if isinstance(value, str) else None


def read_document(path: Path, *, name: str, kind: str) -> tuple[Any, FileProblem | None]:
    """The JSON at ``path`` (shown as ``name``), checked to be a ``kind`` document of major
    version 1; on any failure ``(None, problem)``."""
    try:
        data = read_json_file(path, max_bytes=MAX_JSON_BYTES, source=name)
    except FileNotFoundError:
        return None, FileProblem(file=name, field="$", message="the file is missing")
    except (OrchestratorError, OSError, UnicodeDecodeError) as exc:
        return None, FileProblem(file=name, field=_json_path(exc), message=detail_of(exc))
    if not isinstance(data, dict):
        return None, FileProblem(file=name, field="$", message="expected a JSON object")
    problem = version_problem(data.get("schema_version"), kind, name)
    return (None, problem) if problem else (data, None)


def version_problem(version: Any, kind: str, name: str) -> FileProblem | None:
    """A problem unless ``version`` is ``<kind>.v1`` or a later minor ``<kind>.v1.N``."""
    match = _VERSION.fullmatch(version) if isinstance(version, str) else None
    if match is None or match.group(1) != kind:
        return FileProblem(
            file=name,
            field="$.schema_version",
            message=f"expected {kind}.v1, found {_shown(version)}",
        )
    if match.group(2) != "1":
        return FileProblem(
            file=name,
            field="$.schema_version",
            message=f"{version} is a major version this evaluator does not know; "
            "use an orchestrate that reads it",
        )
    return None


def read_run_dir(path: Path) -> RunDir:
    """Read the run directory at ``path``; problems are collected, never raised."""
    problems: list[FileProblem] = []
    run, problem = read_document(path / RUN_FILE, name=RUN_FILE, kind="run")
    if problem:
        problems.append(problem)
    manifest = None
    if (path / MANIFEST_FILE).exists():
        manifest, problem = read_document(
            path / MANIFEST_FILE, name=MANIFEST_FILE, kind="assets-manifest"
        )
        if problem:
            problems.append(problem)
    cases = _read_cases(path, problems)
    for case_id in _selected(run):
        if case_id not in cases:
            cases[case_id] = CaseFile(case_id=case_id, name=f"{case_id}.json")
    return RunDir(
        path=path,
        run=run,
        cases=cases,
        manifest=manifest,
        problems=problems,
        unrecorded=_unrecorded_ids(path, run),
    )


def unrecorded_in(run_dir: Path) -> list[str]:
    """The ids of the cases the run at ``run_dir`` never recorded, read from its
    ``run.json`` alone (none when it cannot be read: that is a problem of its own)."""
    run, _ = read_document(run_dir / RUN_FILE, name=RUN_FILE, kind="run")
    return _unrecorded_ids(run_dir, run)


def _unrecorded_ids(run_dir: Path, run: dict[str, Any] | None) -> list[str]:
    return list(dict.fromkeys(case_id for _, case_id in unrecorded_cases(run_dir, _selected(run))))


def _selected(run: dict[str, Any] | None) -> list[str]:
    selected = (run or {}).get("selected_case_ids")
    if not isinstance(selected, list):
        return []
    return [item for item in selected if isinstance(item, str)]


def _read_cases(path: Path, problems: list[FileProblem]) -> dict[str, CaseFile]:
    cases: dict[str, CaseFile] = {}
    for name in sorted(os.listdir(path)):
        if not name.endswith(".json") or name in (RUN_FILE, EVALUATION_FILE):
            continue
        data, problem = read_document(path / name, name=name, kind="case")
        if problem is None and data is not None:
            problem = case_problem(data, name)
        stem = name[: -len(".json")]
        case_id = data.get("case_id") if data is not None else None
        case_id = case_id if isinstance(case_id, str) and case_id else stem
        found = CaseFile(case_id=case_id, name=name, data=None if problem else data)
        found.problem = problem
        if problem:
            problems.append(problem)
        if case_id in cases:
            found = _one_of_two(cases[case_id], found, problems)
        cases[case_id] = found
    return cases


def _one_of_two(first: CaseFile, second: CaseFile, problems: list[FileProblem]) -> CaseFile:
    """Two files claim one case id: the one named after it (``<id>.json``) is judged, else
    the first by name; the other is named in ``problems``, never silently dropped."""
    kept, dropped = first, second
    if second.name == f"{second.case_id}.json":
        kept, dropped = second, first
    problems.append(
        FileProblem(
            file=dropped.name,
            field="$.case_id",
            message=f"case id {dropped.case_id!r} is claimed by {kept.name} too; "
            f"{kept.name} was judged, this file was not: give each case one file",
        )
    )
    return kept


def case_problem(data: dict[str, Any], name: str) -> FileProblem | None:
    """The first breach of the case artifact's shape that keeps it from being judged."""

    def breach(field: str, message: str) -> FileProblem:
        return FileProblem(file=name, field=field, message=message)

    for key in ("case_id", "version", "status"):
        if not isinstance(data.get(key), str):
            return breach(f"$.{key}", f"required string, found {_shown(data.get(key))}")
    if data["status"] == "runner_error":
        failure = data.get("runner_failure")
        if not isinstance(failure, dict):
            return breach("$.runner_failure", "required object for status runner_error")
        if not isinstance(failure.get("class"), str):
            return breach("$.runner_failure.class", "required string (the error class)")
        return None
    if data["status"] != "ok":
        return breach("$.status", f"expected ok or runner_error, found {_shown(data['status'])}")
    return _ok_case_problem(data, breach)


def _ok_case_problem(
    data: dict[str, Any], breach: Callable[[str, str], FileProblem]
) -> FileProblem | None:
    for key in ("proposed_actions", "events"):
        if not isinstance(data.get(key), list):
            return breach(f"$.{key}", f"required array, found {_shown(data.get(key))}")
    output = data.get("final_output")
    if not isinstance(output, dict):
        return breach("$.final_output", "required object")
    if output.get("content_type") not in ("text", "json"):
        return breach("$.final_output.content_type", "expected text or json")
    if not isinstance(output.get("content"), (str, dict)):
        return breach("$.final_output.content", "expected a string or an object")
    for index, action in enumerate(data["proposed_actions"]):
        at = f"$.proposed_actions[{index}]"
        if not isinstance(action, dict):
            return breach(at, "expected an object")
        for key, kind in (("action_id", str), ("tool_name", str), ("risk_level", str)):
            if not isinstance(action.get(key), kind):
                return breach(f"{at}.{key}", "required string")
        if not isinstance(action.get("evidence_refs", []), list):
            return breach(f"{at}.evidence_refs", "expected an array")
    return None


# -- references inside a run directory -----------------------------------------------------


def file_inside(root: Path, href: Any) -> Path | None:
    """The regular file ``href`` names under ``root``, or ``None``: not a relative path,
    climbing out, through a link, or not there."""
    found = _entry_inside(root, href)
    if found is None:
        return None
    path, mode = found
    return path if stat.S_ISREG(mode) else None


def _entry_inside(root: Path, href: Any) -> tuple[Path, int] | None:
    """Whatever ``href`` names under ``root`` (a file, a directory, a link) and its mode
    (``lstat``), reached without following a link; ``None``: not a relative path,
    climbing out, through a link, or nothing there."""
    if not isinstance(href, str) or not is_relative_href(href):
        return None
    current, mode = root, None
    for part in href.replace("\\", "/").split("/"):
        if part in ("", "."):
            continue
        if mode is not None and stat.S_ISLNK(mode):
            return None  # a link on the way is never followed
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except (OSError, ValueError):  # ValueError: a NUL in the href
            return None
    return None if mode is None else (current, mode)


def unrecorded_cases(run_dir: Path, selected: Sequence[str]) -> list[tuple[int, str]]:
    """``(index, case_id)`` of each case ``run.json`` selects (``selected_case_ids``) that
    the run never recorded: nothing named ``<case_id>.json`` in the run directory. A run
    stopped before it finished (killed, or still running) lacks them; ``eval check`` calls
    such a run a breach and ``eval compare`` refuses it unless told to compare it as it
    is. A file there that cannot be read (a link, a bad document) is another fault,
    named where it is read."""
    return [
        (index, case_id)
        for index, case_id in enumerate(selected)
        if _entry_inside(run_dir, f"{case_id}.json") is None
    ]


def manifest_href(run_dir: Path, href: Any) -> str | None:
    """A manifest item's ``href`` as a path relative to the run directory, or ``None``
    when it names no file. The contract makes a path relative to the file that holds it,
    so ``assets/`` is tried first; a path relative to the run directory is read too."""
    if not isinstance(href, str):
        return None
    for candidate in (f"{ASSETS_DIR}/{href}", href):
        if file_inside(run_dir, candidate) is not None:
            return candidate
    return None


@attrs.define(kw_only=True, frozen=True)
class Resolution:
    """Where an evidence ref points: ``where`` in the case (``events[3]``) and/or ``href``
    (relative to the run directory); ``resolved`` false when it points nowhere."""

    resolved: bool
    where: str | None = None
    href: str | None = None
    reason: str = ""


def ref_identifier(ref: dict[str, Any]) -> tuple[str, Any]:
    """The kind of an evidence ref and the identifier its kind uses."""
    kind = ref.get("kind")
    field = {"tool_result": "call_id", "retrieval_doc": "doc_id"}.get(str(kind), "id")
    return str(kind), ref.get(field)


def resolve_ref(
    ref: Any, events: list[Any], run_dir: Path, manifest: dict[str, Any] | None
) -> Resolution:
    """Resolve one ``evidence_refs[]`` entry against the case's ``events`` and ``assets/``."""
    if not isinstance(ref, dict):
        return Resolution(resolved=False, reason="an evidence ref must be an object")
    kind, identifier = ref_identifier(ref)
    if not isinstance(identifier, str):
        field = {"tool_result": "call_id", "retrieval_doc": "doc_id"}.get(kind, "id")
        return Resolution(resolved=False, reason=f"kind {kind} needs a string {field}")
    if kind == "tool_result":
        return _by_event(events, run_dir, "call_id", identifier, "payload_asset_href")
    if kind == "retrieval_doc":
        return _by_event(events, run_dir, "doc_ids", identifier, "snippets_asset_href")
    if kind == "event":
        match = _EVENT_INDEX.fullmatch(identifier)
        if match and int(match.group(1)) < len(events):
            return Resolution(resolved=True, where=f"events[{int(match.group(1))}]")
        return Resolution(
            resolved=False, reason=f"no event {identifier} ({plural(len(events), 'event')})"
        )
    if kind == "asset":
        return _asset(identifier, run_dir, manifest)
    return Resolution(resolved=False, reason=f"unknown evidence kind {_shown(kind)}")


def _by_event(
    events: list[Any], run_dir: Path, key: str, identifier: str, asset_key: str
) -> Resolution:
    wanted = ("tool_result", "tool_call") if key == "call_id" else ("retrieval",)
    for event_type in wanted:
        for index, event in enumerate(events):
            if not isinstance(event, dict) or event.get("type") != event_type:
                continue
            value = event.get(key)
            if value == identifier or (isinstance(value, list) and identifier in value):
                href = event.get(asset_key)
                found = file_inside(run_dir, href) is not None
                return Resolution(
                    resolved=True, where=f"events[{index}]", href=href if found else None
                )
    what = "call_id" if key == "call_id" else "doc_id"
    return Resolution(
        resolved=False, reason=f"no {'/'.join(wanted)} event has {what} {identifier!r}"
    )


def _asset(identifier: str, run_dir: Path, manifest: dict[str, Any] | None) -> Resolution:
    items = (manifest or {}).get("items")
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and item.get("asset_id") == identifier:
            href = manifest_href(run_dir, item.get("href"))
            if href is not None:
                return Resolution(resolved=True, href=href)
            reason = f"asset {identifier!r}: {item.get('href')!r} is missing"
            return Resolution(resolved=False, reason=reason)
    for href in (identifier, f"{ASSETS_DIR}/{identifier}"):
        if file_inside(run_dir, href) is not None:
            return Resolution(resolved=True, href=href)
    return Resolution(resolved=False, reason=f"no asset {identifier!r} in the manifest or assets/")


# -- small helpers ---------------------------------------------------------------------------


def absolute_paths(text: str) -> list[str]:
    """The absolute paths ``text`` names: the whole string when it starts with ``/`` and a
    name, a Windows drive or share anywhere, and any other ``/``-token of two names or more
    (``'/home/me/agent'``, a traceback's ``"/usr/lib/x.py"``). A URL is not one, nor a
    lone ``/word`` inside a sentence (``POST /run-case``)."""
    found = []
    for match in _ABSOLUTE_TOKEN.finditer(text):
        token = match.group()
        if match.start() == 0 or token[0] != "/" or token.count("/") >= 2:
            found.append(token)
    return found


def scrub_paths(text: str) -> str:
    """``text`` with each absolute path it names (:func:`absolute_paths`) cut to its last
    name, so a message shown in an evaluation names no directory of the machine it ran on."""
    for token in sorted(set(absolute_paths(text)), key=len, reverse=True):
        text = text.replace(token, _basename(token))
    return text


def _basename(token: str) -> str:
    return re.split(r"[\\/]", token.rstrip("/\\"))[-1] or "(a path)"


def _shown(value: Any) -> str:
    if value is None:
        return "nothing"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _json_path(exc: BaseException) -> str:
    path = getattr(exc, "json_path", "$")
    return path if isinstance(path, str) else "$"


def detail_of(exc: BaseException) -> str:
    """What went wrong, in the error's own words without the file's path (the caller
    names the file, relative to the directory read)."""
    if isinstance(exc, UnsafePathError):  # its text names the absolute path
        return "a symbolic link or not a regular file: not followed"
    detail = getattr(exc, "detail", None)
    if isinstance(detail, str):
        return scrub_paths(detail)
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    return scrub_paths(str(exc))
