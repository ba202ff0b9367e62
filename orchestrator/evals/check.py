"""``orchestrate eval check DIR``: the agent artifact contract's definition of done, proved
on a directory of runs, one run, or an evaluation folder.

Every breach is named with its file (relative to DIR) and field:

- a runner failure has a case file with ``status: runner_error`` and a stable
  ``runner_failure.class``; ``body_snippet`` and ``full_body_saved_to`` are present; a
  snippet implies a saved body, and every saved body or metadata file exists under
  ``assets/``;
- every evidence ref of every proposed action resolves (an event of the case, or a file
  in ``assets/``), and every asset href of an event or the manifest names a file;
- no JSON or HTML names an absolute path: path fields are relative, no string holds the
  directory's own absolute path or any other (:func:`~.reading.absolute_paths`: a
  string starting with ``/`` and a name, a drive, a ``file:`` URL, a ``/a/b`` token
  inside a text; a URL is none), and every ``href``/``src`` of a page is relative;
- everything is readable after a copy: no symbolic link anywhere, every reference stays
  inside DIR, every link of a report names a file that exists;
- hidden directories (the engine's bookkeeping, ``.orchestrator/``) are not artifacts and
  are not walked; in ``assets/`` only the manifest and failure metadata are documents
  (a saved body or payload is the agent's content, JSON or not);
- an ``evaluation.json`` reads as its model and its references resolve.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from .._errors import ContractError
from ..formats.evaluation import EVALUATION_FILE, parse_evaluation
from ..formats.runs import ASSETS_DIR, ERROR_CLASSES, RUN_FILE, VERSIONS
from .reading import (
    MANIFEST_FILE,
    MAX_JSON_BYTES,
    FileProblem,
    absolute_paths,
    case_problem,
    detail_of,
    file_inside,
    manifest_href,
    read_document,
    resolve_ref,
    unrecorded_cases,
)

Breach = FileProblem
_RUN_STRINGS = ("run_id", "generated_at", "base_url", "cases_path", "out_dir", "runner_version")
#: Keys whose values are paths: they must be relative wherever they appear.
_PATH_KEY = re.compile(r"(^|_)(href|path|dir|saved_to|case_file|file)$")
#: A page larger than this is not read (a report of thousands of cases is a few MB).
MAX_PAGE_BYTES = 64 * 1024 * 1024
_ABSOLUTE = re.compile(r"^(/|\\|[A-Za-z]:[\\/]|file:)")


def check_directory(root: Path) -> list[Breach]:
    """Every breach of the contract's definition of done under ``root``."""
    root = root.resolve()
    breaches: list[Breach] = []
    found_any = False
    for directory, files in _walk(root, breaches):
        rel_dir = directory.relative_to(root)
        if RUN_FILE in files:
            found_any = True
            breaches += _prefixed(_check_run(directory), rel_dir)
        if EVALUATION_FILE in files:
            found_any = True
            breaches += _prefixed(_check_evaluation(directory), rel_dir)
        for name in files:
            if name.endswith(".json") and _is_document(rel_dir, name):
                breaches += _prefixed(_check_json_paths(directory / name, name, root), rel_dir)
            elif name.endswith((".html", ".htm")):
                breaches += _prefixed(_check_html(directory, name, root), rel_dir)
    if not found_any:
        breaches.append(
            Breach(
                file=".",
                field="-",
                message="no run.json or evaluation.json under it: "
                "name a run directory, a directory of runs, or an evaluation folder",
            )
        )
    return breaches


def _walk(root: Path, breaches: list[Breach]) -> Iterator[tuple[Path, list[str]]]:
    for current, dirs, files in os.walk(root, followlinks=False):
        here = Path(current)
        for name in [*dirs, *files]:
            if os.path.islink(here / name):
                breaches.append(
                    Breach(
                        file=(here / name).relative_to(root).as_posix(),
                        field="-",
                        message="a symbolic link: a copy would not carry what it points to",
                    )
                )
        # A hidden directory is bookkeeping (the engine's run history under
        # .orchestrator/), not an artifact of the contract.
        dirs[:] = sorted(d for d in dirs if not os.path.islink(here / d) and d[0] != ".")
        yield here, sorted(f for f in files if not os.path.islink(here / f))


def _is_document(rel_dir: Path, name: str) -> bool:
    """A JSON document of the contract, whose path fields are checked: not an agent's
    payload or a saved body kept in ``assets/`` (its content is the agent's, not paths)."""
    if rel_dir.name != ASSETS_DIR:
        return True
    return name == "manifest.json" or name.endswith("meta.json")


def _prefixed(breaches: list[Breach], rel_dir: Path) -> list[Breach]:
    if rel_dir == Path("."):
        return breaches
    return [
        Breach(file=(rel_dir / b.file).as_posix(), field=b.field, message=b.message)
        for b in breaches
    ]


# -- a run directory -------------------------------------------------------------------------


def _check_run(run_dir: Path) -> list[Breach]:
    breaches: list[Breach] = []
    run, problem = read_document(run_dir / RUN_FILE, name=RUN_FILE, kind="run")
    if problem:
        return [problem]
    for key in _RUN_STRINGS:
        if not isinstance(run.get(key), str):
            breaches.append(Breach(file=RUN_FILE, field=f"$.{key}", message="required string"))
    if run.get("version") not in VERSIONS:
        breaches.append(
            Breach(file=RUN_FILE, field="$.version", message="expected baseline or new")
        )
    selected = run.get("selected_case_ids")
    if not isinstance(selected, list) or not all(isinstance(s, str) for s in selected):
        breaches.append(
            Breach(file=RUN_FILE, field="$.selected_case_ids", message="required array of strings")
        )
        selected = []
    manifest = None
    if (run_dir / MANIFEST_FILE).exists():
        manifest, problem = read_document(
            run_dir / MANIFEST_FILE, name=MANIFEST_FILE, kind="assets-manifest"
        )
        breaches += [problem] if problem else _check_manifest(run_dir, manifest)
    # an id is untrusted: looked for without climbing out or following a link
    for index, case_id in unrecorded_cases(run_dir, selected):
        breaches.append(
            Breach(
                file=RUN_FILE,
                field=f"$.selected_case_ids[{index}]",
                message=f"no case file {case_id}.json was written",
            )
        )
    for name in sorted(os.listdir(run_dir)):
        if name.endswith(".json") and name not in (RUN_FILE, EVALUATION_FILE):
            breaches += _check_case(run_dir, name, manifest)
    return breaches


def _check_manifest(run_dir: Path, manifest: dict[str, Any]) -> list[Breach]:
    items = manifest.get("items")
    if not isinstance(items, list):
        return [Breach(file=MANIFEST_FILE, field="$.items", message="required array")]
    breaches = []
    for index, item in enumerate(items):
        href = item.get("href") if isinstance(item, dict) else None
        if manifest_href(run_dir, href) is None:
            breaches.append(
                Breach(
                    file=MANIFEST_FILE,
                    field=f"$.items[{index}].href",
                    message=f"{href!r} names no file inside the run directory",
                )
            )
    return breaches


def _check_case(run_dir: Path, name: str, manifest: dict[str, Any] | None) -> list[Breach]:
    data, problem = read_document(run_dir / name, name=name, kind="case")
    if problem is None and data is not None:
        problem = case_problem(data, name)
    if problem is not None or data is None:
        return [problem] if problem else []
    if data["status"] == "runner_error":
        return _check_failure(run_dir, name, data["runner_failure"])
    breaches = []
    events = data["events"]
    for index, action in enumerate(data["proposed_actions"]):
        for ref_index, ref in enumerate(action.get("evidence_refs", [])):
            resolution = resolve_ref(ref, events, run_dir, manifest)
            if not resolution.resolved:
                field = f"$.proposed_actions[{index}].evidence_refs[{ref_index}]"
                breaches.append(Breach(file=name, field=field, message=resolution.reason))
    for index, event in enumerate(events):
        for key in ("payload_asset_href", "snippets_asset_href"):
            href = event.get(key) if isinstance(event, dict) else None
            if href is not None and file_inside(run_dir, href) is None:
                breaches.append(
                    Breach(
                        file=name,
                        field=f"$.events[{index}].{key}",
                        message=f"{href!r} names no file inside the run directory",
                    )
                )
    return breaches


def _check_failure(run_dir: Path, name: str, failure: dict[str, Any]) -> list[Breach]:
    breaches = []

    def breach(field: str, message: str) -> None:
        breaches.append(Breach(file=name, field=f"$.runner_failure.{field}", message=message))

    if failure["class"] not in ERROR_CLASSES:
        breach("class", f"{failure['class']!r} is not one of {', '.join(ERROR_CLASSES)}")
    for key in ("body_snippet", "full_body_saved_to"):
        if key not in failure:
            breach(key, "required (null when the failure has no body)")
    snippet, saved = failure.get("body_snippet"), failure.get("full_body_saved_to")
    if snippet is not None and saved is None:
        breach("full_body_saved_to", "a body snippet is given, so the full body must be saved")
    for key in ("full_body_saved_to", "full_body_meta_saved_to"):
        href = failure.get(key)
        if href is None:
            continue
        if not isinstance(href, str) or not href.startswith(f"{ASSETS_DIR}/"):
            breach(key, f"{href!r} is not a relative path into {ASSETS_DIR}/")
        elif file_inside(run_dir, href) is None:
            breach(key, f"{href} does not exist inside the run directory")
        elif key == "full_body_meta_saved_to":
            _, problem = read_document(run_dir / href, name=href, kind="failure-meta")
            if problem:
                breaches.append(problem)
    if failure["class"] == "http_error" and not isinstance(failure.get("status"), int):
        breach("status", "required number for class http_error")
    return breaches


# -- an evaluation folder --------------------------------------------------------------------


def _check_evaluation(folder: Path) -> list[Breach]:
    data, problem = read_document(folder / EVALUATION_FILE, name=EVALUATION_FILE, kind="evaluation")
    if problem:
        return [problem]
    try:
        evaluation = parse_evaluation(data, source=EVALUATION_FILE)
    except ContractError as exc:
        return [Breach(file=EVALUATION_FILE, field=exc.json_path, message=exc.detail)]
    breaches = []
    for field, href in _evaluation_hrefs(evaluation):
        target = folder / href
        exists = target.is_dir() if field.endswith(".dir") else file_inside(folder, href)
        if not exists:
            breaches.append(
                Breach(
                    file=EVALUATION_FILE,
                    field=field,
                    message=f"{href!r} does not resolve inside the folder",
                )
            )
    return breaches


def _evaluation_hrefs(evaluation: Any) -> Iterator[tuple[str, str]]:
    yield "$.baseline.dir", evaluation.baseline.dir
    yield "$.new.dir", evaluation.new.dir
    for index, case in enumerate(evaluation.cases):
        for name in VERSIONS:
            side = getattr(case, name)
            at = f"$.cases[{index}].{name}"
            if side.case_file:
                yield f"{at}.case_file", side.case_file
            if side.failure is not None:
                for key in ("full_body_href", "full_body_meta_href"):
                    if getattr(side.failure, key):
                        yield f"{at}.failure.{key}", getattr(side.failure, key)
            for a_index, action in enumerate(side.actions):
                for e_index, link in enumerate(action.evidence):
                    if link.href:
                        yield f"{at}.actions[{a_index}].evidence[{e_index}].href", link.href


# -- absolute paths, in any JSON or HTML ----------------------------------------------------


def _check_json_paths(path: Path, name: str, root: Path) -> list[Breach]:
    from ..storage.files import read_json_file

    try:
        data = read_json_file(path, max_bytes=MAX_JSON_BYTES, source=name)
    except (ContractError, OSError, UnicodeDecodeError) as exc:
        return [Breach(file=name, field=getattr(exc, "json_path", "$"), message=str(exc))]
    breaches = []
    for field, key, value in _strings(data, "$", ""):
        if _PATH_KEY.search(key) and _ABSOLUTE.match(value):
            breaches.append(Breach(file=name, field=field, message=f"absolute path {value!r}"))
        elif _names_root(value, root):
            breaches.append(
                Breach(file=name, field=field, message="names the directory's absolute path")
            )
        elif found := absolute_paths(value):
            breaches.append(
                Breach(file=name, field=field, message=f"names an absolute path {found[0]!r}")
            )
    return breaches


def _strings(value: Any, at: str, key: str) -> Iterator[tuple[str, str, str]]:
    if isinstance(value, str):
        yield at, key, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, f"{at}.{k}", str(k))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{at}[{index}]", key)


def _names_root(text: str, root: Path) -> bool:
    return str(root) in text and str(root) != "/"


def _absolute_in_page(text: str) -> Iterator[tuple[int, str]]:
    """Each absolute path a page names in its text or an attribute (entities decoded, so
    ``&#x27;/home/me&#x27;`` is found too), with its line."""
    from html import unescape

    for number, line in enumerate(text.splitlines(), start=1):
        for token in absolute_paths(unescape(line)):
            yield number, token


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[tuple[int, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("href", "src", "action", "poster", "srcset") and value is not None:
                self.links.append((self.getpos()[0], f"<{tag} {name}>", value))


def _check_html(directory: Path, name: str, root: Path) -> list[Breach]:
    from ..storage.files import read_regular_file

    try:
        raw = read_regular_file(directory / name, max_bytes=MAX_PAGE_BYTES, source=name)
    except (ContractError, OSError) as exc:
        return [Breach(file=name, field="-", message=f"cannot be read: {detail_of(exc)}")]
    text = raw.decode("utf-8", errors="replace")
    breaches = []
    if _names_root(text, root):
        breaches.append(Breach(file=name, field="-", message="names the directory's absolute path"))
    breaches += [
        Breach(file=name, field=f"line {line}", message=f"names an absolute path {token!r}")
        for line, token in _absolute_in_page(text)
    ]
    parser = _Links()
    try:
        parser.feed(text)
        parser.close()
    except Exception as exc:  # the parser asserts on some markup ("<![foo[")
        where = f"line {parser.getpos()[0]}"
        message = f"cannot be parsed as HTML ({type(exc).__name__}: {exc})"
        return [*breaches, Breach(file=name, field=where, message=message)]
    for line, where, value in parser.links:
        field = f"line {line} {where}"
        parts = urlsplit(value)
        if parts.scheme or parts.netloc or value.startswith(("/", "\\")):
            breaches.append(
                Breach(
                    file=name,
                    field=field,
                    message=f"{value!r} is not a relative link inside the folder",
                )
            )
        elif parts.path and file_inside(directory, unquote(parts.path)) is None:
            breaches.append(
                Breach(file=name, field=field, message=f"{value!r} names no file inside the folder")
            )
    return breaches
