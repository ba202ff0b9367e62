"""What an accepted answer keeps inline, and what moves to ``assets/``.

A tool result's ``payload_summary`` (or a full ``payload``) larger than
``max_payload_inline_bytes`` is written to ``assets/<caseId>.events-<i>.payload.json``;
the event keeps a short summary, ``payload_asset_href`` and ``payload_asset_sha256``.
A retrieval event's ``snippets`` get ``snippets_hashes`` (sha256 of each, when the agent
gave none) and, past the same limit, move to ``assets/<caseId>.events-<i>.snippets.json``
(``snippets_asset_href``). ``final_output`` gets an ``output_hash`` when it has none.
Nothing is written here: the caller writes the planned assets once the answer is accepted.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from .._text import plural
from ..formats.convert import refusal
from ..formats.runs import ASSETS_DIR, Limits
from ..storage.durable import sha256_hex


@attrs.define(kw_only=True)
class PlannedAsset:
    """A file to write under ``assets/``: its id, name, kind and bytes."""

    asset_id: str
    file_name: str
    kind: str
    data: bytes

    @property
    def href(self) -> str:
        """Where it is, relative to the run directory (a case artifact's directory)."""
        return f"{ASSETS_DIR}/{self.file_name}"


@attrs.define(kw_only=True)
class Externalized:
    """An answer as the case artifact will hold it, and the assets it refers to."""

    answer: Any
    assets: list[PlannedAsset]


def encode(value: Any) -> bytes:
    """Compact JSON bytes: what sizes and hashes are measured on."""
    return _encoded_text(value).encode("utf-8")


def _encoded_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def output_hash(content: Any) -> str:
    """A short hash of a final output's content (16 hex digits of sha256)."""
    return "sha256:" + sha256_hex(encode(content))[:16]


#: event fields only the runner writes (an asset it made); an answer may not give them
RUNNER_HREFS = ("payload_asset_href", "snippets_asset_href")


def check_agent_hrefs(data: Any, *, source: str) -> None:
    """Refuse an answer whose events name an asset href themselves: only the runner
    writes ``assets/``, so such a path is absolute, dangling or another case's."""
    events = data.get("events") if isinstance(data, dict) else None
    if not isinstance(events, list):
        return
    problems = [
        (f"$.events[{index}].{key}", "reserved", f"{key!r} is written by the runner, not the agent")
        for index, event in enumerate(events)
        if isinstance(event, dict)
        for key in RUNNER_HREFS
        if key in event
    ]
    if problems:
        raise refusal(problems, source=source)


def externalize(data: Any, *, case_id: str, limits: Limits) -> Externalized:
    """``data`` (the agent's answer, changed in place: a large answer is not copied) with
    its large payloads and snippets planned as assets; anything not shaped as expected is
    left for the checks to name."""
    if not isinstance(data, dict):
        return Externalized(answer=data, assets=[])
    answer = data
    assets: list[PlannedAsset] = []
    events = answer.get("events")
    if isinstance(events, list):
        for index, event in enumerate(events):
            if isinstance(event, dict):
                assets += _event_assets(event, index, case_id, limits)
    final = answer.get("final_output")
    if isinstance(final, dict) and "output_hash" not in final and "content" in final:
        final["output_hash"] = output_hash(final["content"])
    return Externalized(answer=answer, assets=assets)


def _event_assets(
    event: dict[str, Any], index: int, case_id: str, limits: Limits
) -> list[PlannedAsset]:
    kind = event.get("type")
    if kind == "tool_result":
        return _payload_assets(event, index, case_id, limits)
    if kind == "retrieval" and isinstance(event.get("snippets"), list):
        return _snippet_assets(event, index, case_id, limits)
    return []


def _payload_assets(
    event: dict[str, Any], index: int, case_id: str, limits: Limits
) -> list[PlannedAsset]:
    key = "payload" if "payload" in event else "payload_summary"
    if key not in event:
        return []
    text = _encoded_text(event[key])
    if len(text) <= limits.max_payload_inline_bytes and (
        len(text.encode("utf-8")) <= limits.max_payload_inline_bytes
    ):
        return []
    # The event lets go of the value before its text is encoded: a large payload is
    # held at most twice (value and text, then text and bytes), never three times.
    event[key] = None
    data = text.encode("utf-8")
    del text
    asset = PlannedAsset(
        asset_id=f"{case_id}.events-{index}.payload",
        file_name=f"{case_id}.events-{index}.payload.json",
        kind="full_payload",
        data=data,
    )
    digest = sha256_hex(data)
    if key == "payload":
        del event["payload"]
    if key == "payload_summary" or "payload_summary" not in event:
        event["payload_summary"] = (
            f"{plural(len(data), 'byte')} (sha256 {digest[:12]}), kept in {asset.href}"
        )
    event["payload_asset_href"] = asset.href
    event["payload_asset_sha256"] = digest
    return [asset]


def _snippet_assets(
    event: dict[str, Any], index: int, case_id: str, limits: Limits
) -> list[PlannedAsset]:
    snippets = event["snippets"]
    if "snippets_hashes" not in event:
        event["snippets_hashes"] = [
            sha256_hex(s.encode("utf-8") if isinstance(s, str) else encode(s)) for s in snippets
        ]
    data = encode(snippets)
    if len(data) <= limits.max_payload_inline_bytes:
        return []
    asset = PlannedAsset(
        asset_id=f"{case_id}.events-{index}.snippets",
        file_name=f"{case_id}.events-{index}.snippets.json",
        kind="retrieval_snippets",
        data=data,
    )
    del event["snippets"]
    event["snippets_asset_href"] = asset.href
    event["x_snippets_asset_sha256"] = sha256_hex(data)
    return [asset]
