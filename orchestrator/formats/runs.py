"""Agent regression runs: the cases file, the agent's ``/run-case`` exchange, and what a
run leaves on disk (``run.json``, ``<caseId>.json``, ``assets/manifest.json``, failure
meta files), as the agent artifact contract v1 defines them.

``docs/evals.md`` is the reference; ``orchestrator/formats/schemas/runs/`` ships the JSON
Schemas of the cases file and of the agent's answer. Decisions the contract leaves open,
made here:

- A case id names a file (``<caseId>.json``), so it is 1 to 128 characters of
  ``[A-Za-z0-9._-]``, starting with a letter or digit; ``run`` (``run.json``) and ids that
  differ only in letter case (the same file on some file systems) are refused.
- ``http_5xx`` and ``http_429`` are retry classes (an ``http_error`` with such a status),
  not error classes.
- An ``event`` evidence ref names its event by index: ``{"kind": "event", "id":
  "events[3]"}``; an ``asset`` ref names an ``asset_id`` of the run's manifest.
- The agent's answer is read as a v1 reader reads a later minor version: fields the
  contract does not name are kept in the case artifact and ignored by the checks (the
  top-level ones under ``x_agent_extra``, :data:`AGENT_EXTRA`); events of a type v1 does
  not know need only ``type`` and ``ts``. The keys the runner writes around an answer
  (:data:`RESERVED_ANSWER_KEYS`) are refused in one.
- Paths are relative to the directory of the file that holds them: a case artifact's
  ``assets/c1.full_body.json``, the manifest's ``c1.full_body.json``.
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from .._errors import ContractError
from .convert import refusal, structure, unstructure
from .strict_json import dumps_canonical

__all__ = [
    "AGENT_EXTRA",
    "ASSETS_DIR",
    "ASSET_KINDS",
    "CASE_ID_PATTERN",
    "CASE_SCHEMA_VERSION",
    "ERROR_CLASSES",
    "FAILURE_META_SCHEMA_VERSION",
    "MANIFEST_FILE",
    "MANIFEST_SCHEMA_VERSION",
    "RESERVED_ANSWER_KEYS",
    "RETRY_CLASSES",
    "RUN_FILE",
    "RUN_SCHEMA_VERSION",
    "VERSIONS",
    "AgentAnswer",
    "Attempt",
    "CaseArtifact",
    "CaseInput",
    "CaseSpec",
    "EvidenceRef",
    "FailureMeta",
    "FinalOutput",
    "Limits",
    "Manifest",
    "ManifestItem",
    "ProposedAction",
    "RetryPolicy",
    "RunDocument",
    "RunFailure",
    "RunStats",
    "answer_artifact",
    "dump_document",
    "parse_agent_answer",
    "parse_case_artifact",
    "parse_cases",
    "parse_manifest",
    "parse_run",
    "runs_schema",
]

RUN_SCHEMA_VERSION = "run.v1"
CASE_SCHEMA_VERSION = "case.v1"
MANIFEST_SCHEMA_VERSION = "assets-manifest.v1"
FAILURE_META_SCHEMA_VERSION = "failure-meta.v1"
VERSIONS = ("baseline", "new")
#: The contract's file names, in a run directory.
RUN_FILE = "run.json"
ASSETS_DIR = "assets"
MANIFEST_FILE = "manifest.json"  # in ASSETS_DIR
ERROR_CLASSES = (
    "timeout",
    "http_error",
    "invalid_json",
    "schema_mismatch",
    "network_error",
    "other",
)
#: What a retry policy may name: an error class, or an ``http_error`` by its status.
RETRY_CLASSES = (*ERROR_CLASSES, "http_5xx", "http_429")
RISK_LEVELS = ("high", "medium", "low", "unknown")
CONTENT_TYPES = ("text", "json")
EVIDENCE_KINDS = {"tool_result": "call_id", "retrieval_doc": "doc_id", "event": "id", "asset": "id"}
ASSET_KINDS = ("full_body", "failure_meta", "full_payload", "retrieval_snippets", "other")
CASE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
_CASE_ID = re.compile(CASE_ID_PATTERN[:-1] + r"\Z")
_EVENT_INDEX = re.compile(r"events\[(0|[1-9][0-9]*)\]\Z")
_RESERVED_IDS = frozenset({"run"})


# -- the cases file ------------------------------------------------------------------------


@attrs.define(kw_only=True)
class CaseInput:
    """What the agent is given: the user's message and, optionally, a context object."""

    user: str
    context: dict[str, Any] | None = None


@attrs.define(kw_only=True)
class CaseSpec:
    """One case of a cases file: an id, an optional title, the input, what is expected."""

    id: str
    input: CaseInput
    title: str | None = None
    expected: dict[str, Any] | None = None
    workflow_id: str | None = None


def parse_cases(data: Any, *, source: str) -> list[CaseSpec]:
    """The cases of a cases file (a JSON array, or the values of its JSONL lines), every
    problem of every case named by its path (``$[2].input.user``) and, in words, by case."""
    if not isinstance(data, list):
        raise ContractError(
            "a cases file is a JSON array of cases (or one case per line, JSONL)",
            source=source,
            rule="type",
        )
    if not data:
        raise ContractError(
            "the cases file holds no case; give at least one", source=source, rule="minItems"
        )
    cases: list[CaseSpec] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(data):
        where = _case_where(index, item)
        try:
            case = structure(item, CaseSpec, source=source)
        except ContractError as exc:
            raise _in_case(exc, index, where, source) from None
        _check_case_id(case.id, source, f"$[{index}].id", where)
        folded = case.id.casefold()
        if folded in seen:
            raise ContractError(
                f"{where}: id {case.id!r} is also the id of case {seen[folded] + 1} (ids "
                "must differ, in letter case too: each names a file)",
                source=source,
                json_path=f"$[{index}].id",
                rule="uniqueItems",
            )
        seen[folded] = index
        cases.append(case)
    return cases


def _case_where(index: int, item: Any) -> str:
    case_id = item.get("id") if isinstance(item, dict) else None
    name = f" ({case_id!r})" if isinstance(case_id, str) else ""
    return f"case {index + 1}{name}"


def _in_case(exc: ContractError, index: int, where: str, source: str) -> ContractError:
    prefix = f"$[{index}]"

    def moved(path: str) -> str:
        return prefix + path[1:] if path.startswith("$") else path

    problems = [(moved(exc.json_path), exc.rule, f"{where}: {exc.detail}")]
    problems += [(moved(p), rule, text) for p, rule, text in exc.also]
    return refusal(problems, source=source)


def _check_case_id(case_id: str, source: str, json_path: str, where: str) -> None:
    if _CASE_ID.match(case_id) is None:
        raise ContractError(
            f"{where}: id {case_id!r} cannot name a file; use 1 to 128 characters of "
            "letters, digits, '.', '_' and '-', starting with a letter or digit",
            source=source,
            json_path=json_path,
            rule="pattern",
        )
    if case_id.casefold() in _RESERVED_IDS:
        raise ContractError(
            f"{where}: id {case_id!r} would be written as {case_id}.json, the run's own file; "
            "pick another id",
            source=source,
            json_path=json_path,
            rule="not",
        )


# -- the agent's answer (POST /run-case) -------------------------------------------------


@attrs.define(kw_only=True)
class EvidenceRef:
    """Where an action's evidence is: a tool result, a retrieved document, an event, an asset."""

    kind: str
    call_id: str | None = None
    doc_id: str | None = None
    id: str | None = None


@attrs.define(kw_only=True)
class ProposedAction:
    """An action the agent proposes, with its risk and the evidence it rests on."""

    action_id: str
    action_type: str
    tool_name: str
    params: dict[str, Any]
    risk_level: str
    risk_tags: list[str]
    evidence_refs: list[EvidenceRef]


@attrs.define(kw_only=True)
class FinalOutput:
    """The agent's final output: text, or a JSON object."""

    content_type: str
    content: Any
    output_hash: str | None = None
    redactions_applied: list[str] | None = None


@attrs.define(kw_only=True)
class AgentAnswer:
    """The body of a ``/run-case`` answer (section 5 of the contract)."""

    case_id: str
    version: str
    proposed_actions: list[ProposedAction]
    final_output: FinalOutput
    events: list[dict[str, Any]]
    workflow_id: str | None = None


# Required fields of each event type v1 knows, and their JSON types.
_EVENT_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "tool_call": {"call_id": (str,), "tool": (str,), "args": (dict,)},
    "tool_result": {"call_id": (str,), "status": (str,), "latency_ms": (int, float)},
    "retrieval": {"query": (str,), "doc_ids": (list,)},
    "final_output": {"content_type": (str,), "content": (str, dict)},
}
#: where a case artifact keeps the top-level fields of an answer v1 does not name
AGENT_EXTRA = "x_agent_extra"
#: the case artifact's own keys around an answer: an answer that uses one is refused
RESERVED_ANSWER_KEYS = ("schema_version", "status", "attempts", "runner_failure", AGENT_EXTRA)
_ANSWER_KEYS = {
    "$": frozenset(attrs.fields_dict(AgentAnswer)),
    "action": frozenset(attrs.fields_dict(ProposedAction)),
    "ref": frozenset(attrs.fields_dict(EvidenceRef)),
    "output": frozenset(attrs.fields_dict(FinalOutput)),
}


def parse_agent_answer(
    data: Any, *, source: str, case_id: str, version: str, asset_ids: frozenset[str] = frozenset()
) -> AgentAnswer:
    """The agent's answer to ``case_id``, checked as section 5 says: the required fields
    and their types, the enums, each event's fields, every evidence ref resolvable (from
    ``events``, or an asset among ``asset_ids``), and the case and version it answers."""
    answer = structure(_known_fields(data), AgentAnswer, source=source)
    problems: list[tuple[str, str, str]] = [
        (f"$.{key}", "reserved", f"{key!r} is a field the runner writes, not one of the answer")
        for key in RESERVED_ANSWER_KEYS
        if key in data
    ]
    if answer.case_id != case_id:
        problems.append(("$.case_id", "const", f"answers case {answer.case_id!r}, not {case_id!r}"))
    if answer.version != version:
        problems.append(("$.version", "const", f"version {answer.version!r}, not {version!r}"))
    problems += _output_problems(answer.final_output, "$.final_output")
    problems += _event_problems(answer.events)
    problems += _action_problems(answer, asset_ids)
    if problems:
        raise refusal(problems, source=source)
    return answer


def answer_artifact(
    answer: dict[str, Any],
    *,
    case_id: str,
    version: str,
    workflow_id: str | None,
    attempts: list[dict[str, Any]],
) -> dict[str, Any]:
    """The ``ok`` case artifact of an accepted ``answer``: the envelope, the answer's
    fields v1 names, and the others under :data:`AGENT_EXTRA`."""
    document: dict[str, Any] = {
        "schema_version": CASE_SCHEMA_VERSION,
        "case_id": case_id,
        "version": version,
        "status": "ok",
    }
    workflow = answer.get("workflow_id") or workflow_id
    if workflow is not None:
        document["workflow_id"] = workflow
    document["attempts"] = attempts
    extra: dict[str, Any] = {}
    for key, value in answer.items():
        if key in ("proposed_actions", "final_output", "events"):
            document[key] = value
        elif key not in _ANSWER_KEYS["$"]:
            extra[key] = value
    if extra:
        document[AGENT_EXTRA] = extra
    return document


def _known_fields(data: Any) -> Any:
    """``data`` without the fields v1 does not name (kept in the artifact, not judged)."""
    if not isinstance(data, dict):
        return data
    out = {k: v for k, v in data.items() if k in _ANSWER_KEYS["$"]}
    actions = out.get("proposed_actions")
    if isinstance(actions, list):
        out["proposed_actions"] = [_action_fields(a) for a in actions]
    final = out.get("final_output")
    if isinstance(final, dict):
        out["final_output"] = {k: v for k, v in final.items() if k in _ANSWER_KEYS["output"]}
    return out


def _action_fields(action: Any) -> Any:
    if not isinstance(action, dict):
        return action
    out = {k: v for k, v in action.items() if k in _ANSWER_KEYS["action"]}
    refs = out.get("evidence_refs")
    if isinstance(refs, list):
        out["evidence_refs"] = [
            {k: v for k, v in r.items() if k in _ANSWER_KEYS["ref"]} if isinstance(r, dict) else r
            for r in refs
        ]
    return out


def _output_problems(output: FinalOutput, path: str) -> list[tuple[str, str, str]]:
    if output.content_type not in CONTENT_TYPES:
        return [
            (
                f"{path}.content_type",
                "enum",
                f"content_type {output.content_type!r} is not text or json",
            )
        ]
    wanted = str if output.content_type == "text" else dict
    if not isinstance(output.content, wanted):
        kind = "a string" if wanted is str else "an object"
        return [
            (f"{path}.content", "type", f"content of type {output.content_type} must be {kind}")
        ]
    return []


def _event_problems(events: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    problems = []
    for index, event in enumerate(events):
        path = f"$.events[{index}]"
        if not isinstance(event.get("type"), str):
            problems.append((f"{path}.type", "required", "an event needs a string 'type'"))
            continue
        ts = event.get("ts")
        if isinstance(ts, bool) or not isinstance(ts, (int, float)):
            problems.append((f"{path}.ts", "required", "an event needs 'ts', epoch milliseconds"))
        for name, types in _EVENT_FIELDS.get(event["type"], {}).items():
            value = event.get(name)
            if isinstance(value, bool) or not isinstance(value, types):
                problems.append(
                    (f"{path}.{name}", "required", f"a {event['type']} event needs {name!r}")
                )
    return problems


def _action_problems(answer: AgentAnswer, asset_ids: frozenset[str]) -> list[tuple[str, str, str]]:
    call_ids = {e["call_id"] for e in answer.events if isinstance(e.get("call_id"), str)}
    doc_ids = {
        d
        for e in answer.events
        if e.get("type") == "retrieval" and isinstance(e.get("doc_ids"), list)
        for d in e["doc_ids"]
        if isinstance(d, str)
    }
    problems = []
    for a_index, action in enumerate(answer.proposed_actions):
        path = f"$.proposed_actions[{a_index}]"
        if action.risk_level not in RISK_LEVELS:
            problems.append(
                (
                    f"{path}.risk_level",
                    "enum",
                    f"risk_level {action.risk_level!r} is not one of {', '.join(RISK_LEVELS)}",
                )
            )
        for r_index, ref in enumerate(action.evidence_refs):
            problem = _ref_problem(ref, call_ids, doc_ids, len(answer.events), asset_ids)
            if problem:
                problems.append((f"{path}.evidence_refs[{r_index}]", "resolvable", problem))
    return problems


def _ref_problem(
    ref: EvidenceRef, call_ids: set[str], doc_ids: set[str], events: int, asset_ids: frozenset[str]
) -> str | None:
    field = EVIDENCE_KINDS.get(ref.kind)
    if field is None:
        return f"kind {ref.kind!r} is not one of {', '.join(EVIDENCE_KINDS)}"
    given = [name for name in ("call_id", "doc_id", "id") if getattr(ref, name) is not None]
    if given != [field]:
        return (
            f"a {ref.kind} ref names exactly one identifier, {field!r} (it names {given or 'none'})"
        )
    value = getattr(ref, field)
    if ref.kind == "tool_result" and value not in call_ids:
        return f"call_id {value!r} matches no event's call_id"
    if ref.kind == "retrieval_doc" and value not in doc_ids:
        return f"doc_id {value!r} is in no retrieval event's doc_ids"
    if ref.kind == "event":
        match = _EVENT_INDEX.match(value)
        if match is None or int(match.group(1)) >= events:
            return f"id {value!r} is not events[N] with N below {events}"
    if ref.kind == "asset" and value not in asset_ids:
        return f"id {value!r} is no asset of this case"
    return None


# -- what a run writes ----------------------------------------------------------------------


@attrs.define(kw_only=True)
class Attempt:
    """One try of a case: when, how long, and how it ended."""

    attempt: int
    started_at: str
    outcome: str
    latency_ms: float | None = None
    error_class: str | None = None


@attrs.define(kw_only=True)
class RunFailure:
    """``runner_failure``: why the runner could not produce an answer artifact."""

    url: str
    attempt: int
    body_snippet: str | None
    full_body_saved_to: str | None
    full_body_meta_saved_to: str | None
    timeout_ms: float | None = None
    latency_ms: float | None = None
    status: int | None = None
    status_text: str | None = None
    error_name: str | None = None
    error_message: str | None = None
    #: ``class`` on the wire (a Python keyword here)
    error_class: str


@attrs.define(kw_only=True)
class CaseArtifact:
    """``<caseId>.json``: an agent's answer (``ok``) or a runner failure (``runner_error``)."""

    schema_version: str = CASE_SCHEMA_VERSION
    case_id: str
    version: str
    status: str
    workflow_id: str | None = None
    attempts: list[Attempt] | None = None
    proposed_actions: list[dict[str, Any]] | None = None
    events: list[dict[str, Any]] | None = None
    final_output: dict[str, Any] | None = None
    runner_failure: dict[str, Any] | None = None


@attrs.define(kw_only=True)
class FailureMeta:
    """``failure-meta.v1``: what was kept of a failure's body, and whether all of it."""

    schema_version: str = FAILURE_META_SCHEMA_VERSION
    case_id: str
    version: str
    content_type: str | None
    encoding: str | None
    bytes_written: int
    bytes_total: int | None
    truncated: bool
    sha256: str | None = None
    headers: dict[str, str] | None = None
    note: str | None = None
    error_class: str


@attrs.define(kw_only=True)
class ManifestItem:
    """One file under ``assets/``: its id, where it is, what it holds, its size and hash."""

    asset_id: str
    href: str
    kind: str
    case_id: str | None
    side: str | None
    size_bytes: int
    sha256: str | None = None


@attrs.define(kw_only=True)
class Manifest:
    """``assets/manifest.json``."""

    schema_version: str = MANIFEST_SCHEMA_VERSION
    generated_at: str
    items: list[ManifestItem]


@attrs.define(kw_only=True)
class RetryPolicy:
    """Which failures are tried again, and how long the runner waits between tries."""

    classes: list[str]
    backoff: str = "exponential"
    jitter: bool = True
    x_base_delay_ms: int = 200
    x_max_delay_ms: int = 5000


@attrs.define(kw_only=True)
class Limits:
    """Body cap and inline limits, in bytes."""

    #: an agent's answer with its tool results fits (a large payload then moves to assets/)
    max_body_bytes: int = 16 * 1024 * 1024
    max_inline_snippet_bytes: int = 2048
    max_payload_inline_bytes: int = 16 * 1024


@attrs.define(kw_only=True)
class RunStats:
    """Counts at the end of a run: ``completed`` answered ok, ``failed`` runner errors."""

    cases_total: int
    cases_completed: int
    cases_failed: int
    duration_ms: int
    x_cases_by_error_class: dict[str, int] | None = None


@attrs.define(kw_only=True)
class RunDocument:
    """``run.json``: what was run, against what, with which policy, and how it went."""

    schema_version: str = RUN_SCHEMA_VERSION
    run_id: str
    version: str
    generated_at: str
    base_url: str
    cases_path: str
    out_dir: str
    selected_case_ids: list[str]
    runner_version: str
    repo_commit: str | None = None
    dirty: bool | None = None
    timeout_ms: int | None = None
    retries: int | None = None
    concurrency: int | None = None
    retry_policy: RetryPolicy | None = None
    limits: Limits | None = None
    stats: RunStats | None = None
    x_started_at: str | None = None
    x_status: str | None = None
    x_cases_copy: str | None = None
    x_cases_sha256: str | None = None
    x_python_version: str | None = None


_WIRE_NAMES = {RunFailure: "class", FailureMeta: "class"}


def dump_document(document: Any) -> bytes:
    """The canonical bytes of a run document (nulls omitted, except the fields the
    contract gives as ``null``; ``error_class`` written as ``class``)."""
    data = unstructure(document)
    if type(document) in _WIRE_NAMES:
        data = _with_wire_names(document, data)
    return dumps_canonical(data)


def _with_wire_names(document: Any, data: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"class": data.pop("error_class")}
    out.update(data)
    if isinstance(document, RunFailure):  # the contract's nulls: "no body"
        for name in ("body_snippet", "full_body_saved_to", "full_body_meta_saved_to"):
            out.setdefault(name, None)
    if isinstance(document, FailureMeta):
        for name in ("content_type", "encoding", "bytes_total"):
            out.setdefault(name, None)
    return out


def failure_dict(failure: RunFailure) -> dict[str, Any]:
    """``runner_failure`` as it is written inside a case artifact."""
    return _with_wire_names(failure, unstructure(failure))


# -- reading what a run wrote (for the comparison side and the tests) ------------------------


def parse_run(data: Any, *, source: str) -> RunDocument:
    """``run.json``; an unknown ``schema_version`` fails closed."""
    _check_schema_version(data, RUN_SCHEMA_VERSION, source)
    run = structure(_drop_nulls(data), RunDocument, source=source)
    if run.version not in VERSIONS:
        raise ContractError(
            f"version {run.version!r} is not baseline or new",
            source=source,
            json_path="$.version",
            rule="enum",
        )
    return run


def parse_case_artifact(data: Any, *, source: str) -> CaseArtifact:
    """``<caseId>.json``: the envelope, and the fields its ``status`` requires."""
    _check_schema_version(data, CASE_SCHEMA_VERSION, source)
    case = structure(_drop_nulls(data, keep=("runner_failure",)), CaseArtifact, source=source)
    needed: tuple[str, ...]
    if case.status == "ok":
        needed = ("proposed_actions", "events", "final_output")
    elif case.status == "runner_error":
        needed = ("runner_failure",)
    else:
        raise ContractError(
            f"status {case.status!r} is not ok or runner_error",
            source=source,
            json_path="$.status",
            rule="enum",
        )
    missing = [name for name in needed if getattr(case, name) is None]
    if missing:
        raise ContractError(
            f"a {case.status} case artifact needs {', '.join(missing)}",
            source=source,
            rule="required",
        )
    failure = case.runner_failure or {}
    if failure.get("body_snippet") is not None and failure.get("full_body_saved_to") is None:
        raise ContractError(
            "a body snippet without full_body_saved_to: the whole body (or its cut part "
            "with its meta) must be kept in assets/",
            source=source,
            json_path="$.runner_failure.full_body_saved_to",
            rule="full-body",
        )
    if case.runner_failure is not None and case.runner_failure.get("class") not in ERROR_CLASSES:
        raise ContractError(
            f"runner_failure.class {case.runner_failure.get('class')!r} is not an error class "
            f"({', '.join(ERROR_CLASSES)})",
            source=source,
            json_path="$.runner_failure.class",
            rule="enum",
        )
    return case


def parse_manifest(data: Any, *, source: str) -> Manifest:
    """``assets/manifest.json``."""
    _check_schema_version(data, MANIFEST_SCHEMA_VERSION, source)
    return structure(data, Manifest, source=source)


def _check_schema_version(data: Any, expected: str, source: str) -> None:
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version != expected:
        from .._errors import UnknownVersionError

        raise UnknownVersionError(
            f"schema_version {version!r} is not {expected!r}, the one this build reads",
            source=source,
            json_path="$.schema_version",
            rule="version",
        )


def _drop_nulls(data: Any, keep: tuple[str, ...] = ()) -> Any:
    if not isinstance(data, dict):
        return data
    return {k: v for k, v in data.items() if v is not None or k in keep}


#: The kinds of :func:`runs_schema`.
RUNS_SCHEMA_KINDS = (
    "cases",
    "run-case-answer",
    "run",
    "case",
    "assets-manifest",
    "failure-meta",
)


def runs_schema(kind: str) -> dict[str, Any]:
    """The shipped JSON Schema (draft-07) of a cases file, an agent's answer, ``run.json``,
    a case artifact, the assets manifest or a failure meta file."""
    if kind not in RUNS_SCHEMA_KINDS:
        raise ValueError(f"no runs schema {kind!r}; the kinds are {', '.join(RUNS_SCHEMA_KINDS)}")
    from .schemas import shipped_schema

    return shipped_schema("runs", f"{kind}.schema.json")
