"""The files of a run directory: ``<caseId>.json``, its assets and failure meta files,
``assets/manifest.json`` and ``run.json``. Every file is written whole by rename
(``storage.durable.atomic_write``; a failure's body, already on disk in its body file, is
renamed into place), a case's assets before the case file that names them, and every
path written is relative to the directory of the file that holds it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._errors import ContractError
from ..formats.runs import (
    ASSETS_DIR,
    CASE_SCHEMA_VERSION,
    MANIFEST_FILE,
    MANIFEST_SCHEMA_VERSION,
    CaseSpec,
    FailureMeta,
    Limits,
    RunFailure,
    answer_artifact,
    dump_document,
    failure_dict,
    parse_case_artifact,
    parse_manifest,
)
from ..formats.strict_json import dumps_canonical
from ..storage.durable import atomic_write
from .attempts import CaseResult, Failure
from .bodies import BodyFile
from .payloads import PlannedAsset

#: no asset is larger: bodies are capped, payloads come from a capped body
ASSET_MAX_BYTES = 1 << 32
_MEASURE_PIECE = 1 << 20
_SECRET_HEADER_WORDS = ("authorization", "cookie", "key", "token", "secret", "password")


def write_case(
    run_dir: Path,
    case: CaseSpec,
    result: CaseResult,
    *,
    version: str,
    url: str,
    timeout_ms: int,
    limits: Limits,
    durable: bool = True,
) -> dict[str, Any]:
    """Write ``case``'s artifact (and its assets first); return the step's record of it:
    ``case_id``, ``status``, ``error_class``, ``attempts`` and the manifest items."""
    attempts = [_attempt(a) for a in result.attempts]
    body: tuple[BodyFile, str] | None = None
    if result.answer is not None:
        planned = result.answer.assets
        document = answer_artifact(
            result.answer.answer,
            case_id=case.id,
            version=version,
            workflow_id=case.workflow_id,
            attempts=attempts,
        )
    else:
        assert result.failure is not None
        planned, body, failure = _failure_files(case.id, version, result, url, timeout_ms, limits)
        document = {
            "schema_version": CASE_SCHEMA_VERSION,
            "case_id": case.id,
            "version": version,
            "status": "runner_error",
        }
        if case.workflow_id is not None:
            document["workflow_id"] = case.workflow_id
        document["attempts"] = attempts
        document["runner_failure"] = failure
    parse_case_artifact(document, source=f"{case.id}.json")  # never write what a reader refuses
    if body is not None:
        body[0].keep_as(run_dir / ASSETS_DIR / body[1], durable=durable)
    for asset in planned:
        atomic_write(run_dir / ASSETS_DIR / asset.file_name, asset.data, durable=durable)
    atomic_write(run_dir / f"{case.id}.json", dumps_canonical(document), durable=durable)
    # Small: the run's state holds one of these per case, and is saved after each.
    record: dict[str, Any] = {"case_id": case.id, "status": document["status"]}
    if result.failure is not None:
        record["error_class"] = result.failure.error_class
    names = ([body[1]] if body is not None else []) + [asset.file_name for asset in planned]
    if names:
        record["assets"] = names
    return record


def _attempt(attempt: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "attempt": attempt.attempt,
        "started_at": attempt.started_at,
        "latency_ms": attempt.latency_ms,
        "outcome": attempt.outcome,
    }
    if attempt.error_class is not None:
        data["error_class"] = attempt.error_class
    return data


def _failure_files(
    case_id: str, version: str, result: CaseResult, url: str, timeout_ms: int, limits: Limits
) -> tuple[list[PlannedAsset], tuple[BodyFile, str] | None, dict[str, Any]]:
    """The failure's meta file to write, its body file and the name to keep it as, and
    ``runner_failure``."""
    failure = result.failure
    assert failure is not None
    planned: list[PlannedAsset] = []
    body: tuple[BodyFile, str] | None = None
    snippet = body_href = meta_href = None
    if failure.body is not None and failure.body.kept:
        # ``.txt`` for a body that is UTF-8 text, else ``.bin``: never ``.json``, since a
        # failed body is often not (or not whole) JSON
        name = f"{case_id}.full_body{'.txt' if failure.body.is_text() else '.bin'}"
        body = (failure.body, name)
        meta = _meta(case_id, version, failure, failure.body)
        meta_asset = PlannedAsset(
            asset_id=f"{case_id}.full_body.meta",
            file_name=f"{case_id}.full_body.meta.json",
            kind="failure_meta",
            data=dump_document(meta),
        )
        planned = [meta_asset]
        snippet = failure.body.head(limits.max_inline_snippet_bytes).decode("utf-8", "replace")
        body_href, meta_href = f"{ASSETS_DIR}/{name}", meta_asset.href
    document = RunFailure(
        error_class=failure.error_class,
        url=url,
        attempt=len(result.attempts),
        timeout_ms=timeout_ms,
        latency_ms=result.latency_ms,
        # a failing status is kept whatever the class (a 503 dropped mid-body)
        status=failure.status
        if failure.status is not None and not 200 <= failure.status < 300
        else None,
        status_text=failure.status_text if failure.error_class == "http_error" else None,
        error_name=failure.error_name,
        error_message=failure.error_message,
        body_snippet=snippet,
        full_body_saved_to=body_href,
        full_body_meta_saved_to=meta_href,
    )
    return planned, body, failure_dict(document)


def _meta(case_id: str, version: str, failure: Failure, body: BodyFile) -> FailureMeta:
    return FailureMeta(
        case_id=case_id,
        version=version,
        error_class=failure.error_class,
        content_type=failure.content_type,
        encoding=_charset(failure.content_type),
        bytes_written=body.kept,
        bytes_total=failure.bytes_total if failure.truncated else body.kept,
        truncated=failure.truncated,
        sha256=body.sha256,
        headers=_sanitized(failure.headers) or None,
        note=failure.note,
    )


def _charset(content_type: str | None) -> str | None:
    for part in (content_type or "").split(";")[1:]:
        name, _, value = part.strip().partition("=")
        if name.lower() == "charset" and value:
            return value.strip('"').lower()
    return None


def _sanitized(headers: dict[str, str]) -> dict[str, str]:
    return {
        name: "[redacted]" if any(w in name.lower() for w in _SECRET_HEADER_WORDS) else value
        for name, value in sorted(headers.items())
    }


#: an asset's kind, by the end of its file name
_KIND_BY_SUFFIX = (
    (".full_body.meta.json", "failure_meta"),
    (".payload.json", "full_payload"),
    (".snippets.json", "retrieval_snippets"),
    (".full_body.txt", "full_body"),
    (".full_body.bin", "full_body"),
)


def manifest_item(
    run_dir: Path, file_name: str, case_id: str | None, side: str | None
) -> dict[str, Any]:
    """The manifest entry of ``assets/file_name``, measured on disk (read in pieces: a
    body kept up to a large cap is never held whole); ``href`` is relative to ``assets/``
    (the manifest's directory), the id is the name without its extension."""
    size, digest = _measure(run_dir / ASSETS_DIR / file_name)
    kind = next((k for suffix, k in _KIND_BY_SUFFIX if file_name.endswith(suffix)), "other")
    return {
        "asset_id": file_name.rsplit(".", 1)[0],
        "href": file_name,
        "kind": kind,
        "case_id": case_id,
        "side": side,
        "size_bytes": size,
        "sha256": digest,
    }


def _measure(path: Path) -> tuple[int, str]:
    """The size and sha256 of the regular file ``path`` (never through a link)."""
    import os

    from ..storage.beneath import open_file
    from ..storage.durable import sha256_constructor

    digest = sha256_constructor()()
    size = 0
    fd = open_file(path, os.O_RDONLY)
    try:
        while size <= ASSET_MAX_BYTES and (piece := os.read(fd, _MEASURE_PIECE)):
            digest.update(piece)
            size += len(piece)
    finally:
        os.close(fd)
    if size > ASSET_MAX_BYTES:
        raise ContractError(
            f"more than {ASSET_MAX_BYTES} bytes, more than any asset of a run; remove it "
            "and run the case again",
            source=f"{ASSETS_DIR}/{path.name}",
            rule="too-large",
        )
    return size, digest.hexdigest()


def write_manifest(run_dir: Path, items: list[dict[str, Any]], *, generated_at: str) -> None:
    """``assets/manifest.json``: every asset of the run, ordered by id (``case_id`` and
    ``side`` are written as ``null`` for an asset of the run as a whole)."""
    document = {
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "generated_at": generated_at,
        "items": sorted(items, key=lambda item: item["asset_id"]),
    }
    parse_manifest(document, source=f"{ASSETS_DIR}/{MANIFEST_FILE}")
    atomic_write(run_dir / ASSETS_DIR / MANIFEST_FILE, dumps_canonical(document))


def sweep_assets(run_dir: Path, keep: set[str]) -> list[str]:
    """Remove files under ``assets/`` the manifest does not list: what a case tried
    before a crash and did differently when run again. Returns their names."""
    from ..storage.beneath import is_directory, list_directory, unlink
    from ..storage.durable import sweep_temporaries

    sweep_temporaries(run_dir)
    directory = run_dir / ASSETS_DIR
    if not is_directory(directory):
        return []
    sweep_temporaries(directory)
    removed = []
    for name in sorted(list_directory(directory)):
        if name != MANIFEST_FILE and name not in keep and not name.startswith("."):
            unlink(directory / name)
            removed.append(name)
    return removed
