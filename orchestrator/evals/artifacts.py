"""The files of a run directory: ``<caseId>.json``, its assets and failure meta files,
``assets/manifest.json`` and ``run.json``. Every file is written whole by rename
(``storage.durable.atomic_write``), a case's assets before the case file that names
them, and every path written is relative to the directory of the file that holds it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
from ..storage.durable import atomic_write, sha256_hex
from .attempts import CaseResult, Failure
from .payloads import PlannedAsset

#: no asset is larger: bodies are capped, payloads come from a capped body
ASSET_MAX_BYTES = 1 << 32
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
        planned, failure = _failure_files(case.id, version, result, url, timeout_ms, limits)
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
    for asset in planned:
        atomic_write(run_dir / ASSETS_DIR / asset.file_name, asset.data, durable=durable)
    atomic_write(run_dir / f"{case.id}.json", dumps_canonical(document), durable=durable)
    # Small: the run's state holds one of these per case, and is saved after each.
    record: dict[str, Any] = {"case_id": case.id, "status": document["status"]}
    if result.failure is not None:
        record["error_class"] = result.failure.error_class
    if planned:
        record["assets"] = [asset.file_name for asset in planned]
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
) -> tuple[list[PlannedAsset], dict[str, Any]]:
    failure = result.failure
    assert failure is not None
    planned: list[PlannedAsset] = []
    snippet = body_href = meta_href = None
    if failure.body:
        body_asset = PlannedAsset(
            asset_id=f"{case_id}.full_body",
            file_name=f"{case_id}.full_body{_extension(failure.body)}",
            kind="full_body",
            data=failure.body,
        )
        meta = _meta(case_id, version, failure)
        meta_asset = PlannedAsset(
            asset_id=f"{case_id}.full_body.meta",
            file_name=f"{case_id}.full_body.meta.json",
            kind="failure_meta",
            data=dump_document(meta),
        )
        planned = [body_asset, meta_asset]
        snippet = failure.body[: limits.max_inline_snippet_bytes].decode("utf-8", "replace")
        body_href, meta_href = body_asset.href, meta_asset.href
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
    return planned, failure_dict(document)


def _meta(case_id: str, version: str, failure: Failure) -> FailureMeta:
    body = failure.body or b""
    return FailureMeta(
        case_id=case_id,
        version=version,
        error_class=failure.error_class,
        content_type=failure.content_type,
        encoding=_charset(failure.content_type),
        bytes_written=len(body),
        bytes_total=failure.bytes_total if failure.truncated else len(body),
        truncated=failure.truncated,
        sha256=sha256_hex(body),
        headers=_sanitized(failure.headers) or None,
        note=failure.note,
    )


def _extension(body: bytes) -> str:
    """``.txt`` for a body that is UTF-8 text, else ``.bin``: never ``.json``, since a
    failed body is often not (or not whole) JSON."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return ".bin"
    return ".txt"


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
    """The manifest entry of ``assets/file_name``, measured on disk; ``href`` is relative
    to ``assets/`` (the manifest's directory), the id is the name without its extension."""
    from ..storage.files import read_regular_file

    data = read_regular_file(run_dir / ASSETS_DIR / file_name, max_bytes=ASSET_MAX_BYTES)
    kind = next((k for suffix, k in _KIND_BY_SUFFIX if file_name.endswith(suffix)), "other")
    return {
        "asset_id": file_name.rsplit(".", 1)[0],
        "href": file_name,
        "kind": kind,
        "case_id": case_id,
        "side": side,
        "size_bytes": len(data),
        "sha256": sha256_hex(data),
    }


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
