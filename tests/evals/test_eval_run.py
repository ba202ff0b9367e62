"""``orchestrate eval run`` against a real agent on loopback whose faults are scripted per
case: every error class where it belongs, with its fields; retries counted in
``attempts``; waits asked of the injected sleep, never slept; bodies and payloads kept in
``assets/`` with hashes; a run directory that reads the same wherever it is copied."""

from __future__ import annotations

import io
import json
import shutil
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft7Validator, FormatChecker

from orchestrator import ContractError, Engine
from orchestrator.adapters.file_bridge import FileBridge
from orchestrator.evals.attempts import Timing
from orchestrator.evals.bodies import BodyFile
from orchestrator.evals.transport import HttpTransport, SubprocessTransport, TransportFailure
from orchestrator.evals.workflow import RegressionRun, run_inputs
from orchestrator.formats.runs import (
    Limits,
    parse_case_artifact,
    parse_cases,
    parse_manifest,
    parse_run,
    runs_schema,
)
from orchestrator.storage.durable import sha256_hex
from support.cli import orchestrate
from support.eval_agent_server import (
    AgentServer,
    CutJSON,
    Drip,
    Drop,
    Good,
    HalfBody,
    OddLength,
    Reply,
    Reset,
    Sleep,
    good_answer,
)

SLEEPS: list[float] = []


class FastRun(RegressionRun):
    """The regression run with its waits recorded instead of slept, jitter fixed at 0.5."""

    timing: ClassVar[Any] = staticmethod(
        lambda clock: Timing(clock=clock, sleep=SLEEPS.append, random=lambda: 0.5)
    )


def write_cases(path: Path, ids: list[str]) -> Path:
    cases = [{"id": i, "title": f"case {i}", "input": {"user": f"do {i}"}} for i in ids]
    path.write_text(json.dumps(cases), encoding="utf-8")
    return path


def run_in_process(tmp_path: Path, agent: dict[str, Any], ids: list[str], **options: Any) -> Path:
    """Run the cases in this process; return the run directory."""
    SLEEPS.clear()
    out = tmp_path / "out"
    workdir = out / "baseline"
    workdir.mkdir(parents=True)
    inputs = run_inputs(
        version="baseline",
        agent=agent,
        cases_file=write_cases(tmp_path / "cases.json", ids),
        out_root=out,
        repo_dir=tmp_path,
        **options,
    )
    engine = Engine(FastRun, bridge=FileBridge(workdir, FastRun.name))
    outcome = engine.start(workflow_ref="test:FastRun", workdir=workdir, inputs=inputs)
    assert outcome.status == "completed", outcome.message
    return workdir / outcome.outputs["plan"]["run_id"]


def read(run_dir: Path, name: str) -> Any:
    return json.loads((run_dir / name).read_text(encoding="utf-8"))


def failure_of(run_dir: Path, case_id: str) -> dict[str, Any]:
    case = read(run_dir, f"{case_id}.json")
    parse_case_artifact(case, source=case_id)
    assert case["status"] == "runner_error", case
    return dict(case["runner_failure"])


def attempt_classes(run_dir: Path, case_id: str) -> list[str | None]:
    return [a.get("error_class") for a in read(run_dir, f"{case_id}.json")["attempts"]]


SCRIPT = {
    "ok": [Good()],
    "slow": [Sleep(3.0)],
    "http": [
        Reply(503, {"error": "busy"}),
        Reply(404, b"no such case", {"Content-Type": "text/plain"}),
    ],
    "cut": [CutJSON()],
    "shape": [Reply(200, {"case_id": "shape", "version": "baseline", "events": "none"})],
    "reset": [Reset()],
    "drop-then-ok": [Drop(), Good()],
    "half": [HalfBody()],
    "big": [Reply(200, b"[" + b"1," * 40_000 + b"1]")],
    "payload": [Good(payload_bytes=40_000)],
}


@pytest.fixture(scope="module")
def scripted_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, AgentServer, list[float]]:
    tmp_path = tmp_path_factory.mktemp("scripted")
    with AgentServer(SCRIPT) as server:
        run_dir = run_in_process(
            tmp_path,
            {"kind": "http", "base_url": server.base_url},
            list(SCRIPT),
            timeout_ms=400,
            retries=2,
            concurrency=4,
            limits=Limits(max_body_bytes=64 * 1024, max_payload_inline_bytes=16 * 1024),
        )
    return run_dir, server, list(SLEEPS)


@pytest.mark.slow
def test_an_answer_is_kept_whole_with_its_one_attempt(scripted_run: Any) -> None:
    run_dir, server, _ = scripted_run
    case = read(run_dir, "ok.json")
    parse_case_artifact(case, source="ok.json")
    assert case["status"] == "ok" and server.tries("ok") == 1
    assert [a["outcome"] for a in case["attempts"]] == ["ok"]
    expected = good_answer(server.bodies[server.log.index("ok")])
    assert case["proposed_actions"] == expected["proposed_actions"]
    assert case["final_output"]["content"] == "done ok"
    assert case["final_output"]["output_hash"].startswith("sha256:")
    snippets = case["events"][0]
    assert snippets["snippets_hashes"] == [
        sha256_hex(s.encode()) for s in expected["events"][0]["snippets"]
    ]


@pytest.mark.slow
def test_a_timeout_is_retried_then_recorded(scripted_run: Any) -> None:
    run_dir, server, _ = scripted_run
    failure = failure_of(run_dir, "slow")
    assert failure["class"] == "timeout" and failure["timeout_ms"] == 400
    assert failure["attempt"] == 3 == server.tries("slow")
    assert attempt_classes(run_dir, "slow") == ["timeout"] * 3
    assert failure["body_snippet"] is None and failure["full_body_saved_to"] is None
    assert failure["full_body_meta_saved_to"] is None


def test_an_http_error_keeps_status_and_body_and_5xx_alone_is_retried(scripted_run: Any) -> None:
    run_dir, server, _ = scripted_run
    failure = failure_of(run_dir, "http")
    assert failure["class"] == "http_error"
    assert (failure["status"], failure["status_text"]) == (404, "Not Found")
    assert (
        attempt_classes(run_dir, "http")
        == ["http_error", "http_error"]
        == ["http_error"] * server.tries("http")
    )
    assert failure["body_snippet"] == "no such case"
    assert (run_dir / failure["full_body_saved_to"]).read_bytes() == b"no such case"
    meta = read(run_dir, failure["full_body_meta_saved_to"])
    assert meta["schema_version"] == "failure-meta.v1" and meta["class"] == "http_error"
    assert (meta["bytes_written"], meta["bytes_total"], meta["truncated"]) == (12, 12, False)
    assert meta["sha256"] == sha256_hex(b"no such case")
    assert meta["content_type"] == "text/plain" and meta["case_id"] == "http"


def test_a_200_with_a_cut_body_is_invalid_json(scripted_run: Any) -> None:
    run_dir, server, _ = scripted_run
    failure = failure_of(run_dir, "cut")
    assert failure["class"] == "invalid_json" and server.tries("cut") == 1
    saved = (run_dir / failure["full_body_saved_to"]).read_bytes()
    assert failure["body_snippet"] == saved.decode() and saved.startswith(b'{"case_id": "cut"')
    assert read(run_dir, failure["full_body_meta_saved_to"])["truncated"] is False


def test_well_formed_json_of_the_wrong_shape_is_a_schema_mismatch(scripted_run: Any) -> None:
    run_dir, _, _ = scripted_run
    failure = failure_of(run_dir, "shape")
    assert failure["class"] == "schema_mismatch"
    message = failure["error_message"]
    assert "$.events" in message and "proposed_actions" in message and "final_output" in message


def test_a_reset_and_a_drop_are_network_errors(scripted_run: Any) -> None:
    run_dir, server, _ = scripted_run
    failure = failure_of(run_dir, "reset")
    assert failure["class"] == "network_error" and server.tries("reset") == 3
    assert failure["error_name"] in {"ConnectionResetError", "RemoteDisconnected"}
    assert failure["body_snippet"] is None
    recovered = read(run_dir, "drop-then-ok.json")
    assert recovered["status"] == "ok"
    assert [(a["outcome"], a.get("error_class")) for a in recovered["attempts"]] == [
        ("runner_error", "network_error"),
        ("ok", None),
    ]


def test_a_connection_dropped_mid_body_keeps_the_part_with_its_meta(scripted_run: Any) -> None:
    run_dir, _, _ = scripted_run
    failure = failure_of(run_dir, "half")
    assert failure["class"] == "network_error" and failure["error_name"] == "IncompleteRead"
    meta = read(run_dir, failure["full_body_meta_saved_to"])
    saved = (run_dir / failure["full_body_saved_to"]).read_bytes()
    assert meta["truncated"] is True and meta["bytes_written"] == len(saved)
    assert meta["bytes_total"] > len(saved) and meta["sha256"] == sha256_hex(saved)


def test_a_body_over_the_cap_is_cut_there_and_said_so(scripted_run: Any) -> None:
    run_dir, _, _ = scripted_run
    failure = failure_of(run_dir, "big")
    assert failure["class"] == "other" and failure["error_name"] == "BodyTooLarge"
    assert len(failure["body_snippet"]) == 2048
    meta = read(run_dir, failure["full_body_meta_saved_to"])
    assert (meta["bytes_written"], meta["truncated"]) == (64 * 1024, True)
    assert meta["bytes_total"] == len(b"[" + b"1," * 40_000 + b"1]")


def test_a_large_tool_payload_goes_to_assets_with_its_hash(scripted_run: Any) -> None:
    run_dir, _, _ = scripted_run
    case = read(run_dir, "payload.json")
    result = case["events"][2]
    href = result["payload_asset_href"]
    data = (run_dir / href).read_bytes()
    assert json.loads(data) == {"blob": "x" * 40_000}
    assert result["payload_asset_sha256"] == sha256_hex(data)
    assert isinstance(result["payload_summary"], str) and len(result["payload_summary"]) < 200


def test_waits_follow_the_policy_and_are_never_slept(scripted_run: Any) -> None:
    _, _, sleeps = scripted_run
    # jitter fixed at 0.5: each wait is three quarters of its step, 200 ms then 400 ms
    assert sorted(set(sleeps)) == [0.15, 0.3]


def test_the_manifest_lists_every_asset_and_the_run_counts_them(scripted_run: Any) -> None:
    run_dir, _, _ = scripted_run
    manifest = parse_manifest(read(run_dir, "assets/manifest.json"), source="manifest")
    listed = {item.href for item in manifest.items}
    assert listed == {p.name for p in (run_dir / "assets").iterdir()} - {"manifest.json"}
    for item in manifest.items:
        data = (run_dir / "assets" / item.href).read_bytes()
        assert (item.size_bytes, item.sha256) == (len(data), sha256_hex(data))
    run = parse_run(read(run_dir, "run.json"), source="run.json")
    assert run.stats is not None
    assert (run.stats.cases_total, run.stats.cases_completed, run.stats.cases_failed) == (10, 3, 7)
    assert run.stats.x_cases_by_error_class == {
        "http_error": 1,
        "invalid_json": 1,
        "network_error": 2,
        "other": 1,
        "schema_mismatch": 1,
        "timeout": 1,
    }
    assert run.retry_policy is not None and run.retry_policy.classes == [
        "timeout",
        "network_error",
        "http_5xx",
    ]
    assert run.selected_case_ids == list(SCRIPT)


def test_a_copied_run_directory_resolves_every_path(scripted_run: Any, tmp_path: Path) -> None:
    run_dir, _, _ = scripted_run
    copy = tmp_path / "elsewhere"
    shutil.copytree(run_dir, copy)
    for path in copy.rglob("*.json"):
        text = path.read_text(encoding="utf-8")
        assert str(run_dir.parent) not in text and str(tmp_path) not in text, path
        json.loads(text)
    for path in copy.glob("*.json"):
        if path.name == "run.json":
            continue
        case = json.loads(path.read_text(encoding="utf-8"))
        failure = case.get("runner_failure") or {}
        for key in ("full_body_saved_to", "full_body_meta_saved_to"):
            if failure.get(key) is not None:
                assert (copy / failure[key]).is_file()
        if failure.get("body_snippet") is not None:
            assert failure["full_body_saved_to"] is not None
        for event in case.get("events", []):
            for key in ("payload_asset_href", "snippets_asset_href"):
                if key in event:
                    assert (copy / event[key]).is_file()


def test_refused_connections_are_network_errors(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    run_dir = run_in_process(
        tmp_path, {"kind": "http", "base_url": f"http://127.0.0.1:{port}"}, ["a"], retries=1
    )
    failure = failure_of(run_dir, "a")
    assert failure["class"] == "network_error"
    assert failure["error_name"] == "ConnectionRefusedError" and failure["attempt"] == 2


def test_a_subprocess_agent_answers_and_its_failure_is_other(tmp_path: Path) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text(
        "import json, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parents[1])!r})\n"
        "from support.eval_agent_server import good_answer\n"
        "request = json.load(sys.stdin)\n"
        "if request['case_id'] == 'bad':\n"
        "    print('cannot', file=sys.stderr); sys.exit(3)\n"
        "print(json.dumps(good_answer(request)))\n",
        encoding="utf-8",
    )
    command = f"{sys.executable} {agent}"
    run_dir = run_in_process(
        tmp_path, {"kind": "subprocess", "command": command}, ["good", "bad"], retries=0
    )
    assert read(run_dir, "good.json")["status"] == "ok"
    label = f"subprocess:{Path(sys.executable).name} agent.py"
    assert read(run_dir, "run.json")["base_url"] == label  # no absolute path
    failure = failure_of(run_dir, "bad")
    assert failure["class"] == "other" and failure["error_name"] == "exit status 3"
    assert "cannot" in failure["error_message"]


def callable_agent(request: dict[str, Any]) -> Any:
    """An in-process agent for the tests: raises for case 'boom'."""
    if request["case_id"] == "boom":
        raise RuntimeError("the agent broke")
    return good_answer(request)


def test_a_callable_agent_answers_in_process(tmp_path: Path) -> None:
    agent = {"kind": "callable", "ref": "test_eval_run:callable_agent"}
    run_dir = run_in_process(tmp_path, agent, ["fine", "boom"], retries=0)
    assert read(run_dir, "fine.json")["status"] == "ok"
    failure = failure_of(run_dir, "boom")
    assert (failure["class"], failure["error_name"]) == ("other", "RuntimeError")


# -- the cases file ------------------------------------------------------------------------

BAD_CASES = [
    ({"id": "a", "input": {"user": 3}}, "$[0].input.user"),
    ({"id": "a"}, "$[0]"),
    ({"id": "../a", "input": {"user": "u"}}, "$[0].id"),
    ({"id": "run", "input": {"user": "u"}}, "$[0].id"),
    ({"id": "a", "input": {"user": "u"}, "extra": 1}, "$[0]"),
]


@pytest.mark.parametrize(("case", "where"), BAD_CASES)
def test_a_bad_case_is_named_by_both_judges(case: dict[str, Any], where: str) -> None:
    with pytest.raises(ContractError) as caught:
        parse_cases([case], source="cases.json")
    assert caught.value.json_path == where and "case 1" in str(caught.value)
    assert list(Draft7Validator(runs_schema("cases")).iter_errors([case]))


def test_good_cases_pass_both_judges() -> None:
    cases = [
        {"id": "c-1", "title": "t", "input": {"user": "u", "context": {"k": 1}}, "expected": {}},
        {"id": "C.2_x", "input": {"user": "u"}, "x_note": "kept"},
    ]
    assert [c.id for c in parse_cases(cases, source="cases.json")] == ["c-1", "C.2_x"]
    assert not list(Draft7Validator(runs_schema("cases")).iter_errors(cases))
    answer = good_answer({"case_id": "c", "version": "new", "input": {"user": "u"}})
    assert not list(Draft7Validator(runs_schema("run-case-answer")).iter_errors(answer))


def test_ids_differing_in_letter_case_are_refused() -> None:
    with pytest.raises(ContractError, match=r"case 2 .*'A'.*case 1"):
        parse_cases(
            [{"id": "a", "input": {"user": "u"}}, {"id": "A", "input": {"user": "u"}}],
            source="cases.json",
        )


def test_a_bad_cases_file_is_refused_before_any_call(tmp_path: Path) -> None:
    cases = tmp_path / "cases.jsonl"
    cases.write_text(
        '{"id": "one", "input": {"user": "u"}}\n{"id": "two", "input": {}}\n', encoding="utf-8"
    )
    with AgentServer() as server:
        result = orchestrate(
            "eval",
            "run",
            "--cases",
            cases,
            "--base-url",
            server.base_url,
            "--version",
            "new",
            "--out",
            tmp_path / "out",
        )
    assert result.returncode == 1
    assert "case 2 ('two')" in result.stderr and "$[1].input" in result.stderr
    assert "'user'" in result.stderr
    assert server.log == [] and not (tmp_path / "out").exists()


def test_the_command_runs_end_to_end(tmp_path: Path) -> None:
    cases = write_cases(tmp_path / "cases.json", ["a", "b", "c"])
    with AgentServer({"b": [Reply(500, b"down")]}) as server:
        result = orchestrate(
            "eval",
            "run",
            "--cases",
            cases,
            "--base-url",
            server.base_url,
            "--version",
            "new",
            "--out",
            tmp_path / "out",
            "--retries",
            "0",
        )
    assert result.returncode == 0, result.stderr
    assert "3/3 cases done, 1 failed" in result.stderr
    (run_dir,) = [p for p in (tmp_path / "out" / "new").iterdir() if not p.name.startswith(".")]
    run = read(run_dir, "run.json")
    assert run["version"] == "new" and run["stats"]["cases_failed"] == 1
    assert run["cases_path"] == "../../../cases.json" and run["out_dir"] == "../.."
    assert (run_dir / run["cases_path"]).resolve() == cases.resolve()


_IDS = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True).filter(
    lambda s: s.casefold() != "run"
)
_CASES = st.lists(
    st.fixed_dictionaries(
        {"id": _IDS, "input": st.fixed_dictionaries({"user": st.text(max_size=20)})},
        optional={
            "title": st.text(max_size=10),
            "expected": st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
        },
    ),
    min_size=1,
    max_size=5,
    unique_by=lambda case: case["id"].casefold(),
)


@pytest.mark.slow
@given(_CASES)
def test_cases_read_back_as_written_and_both_judges_agree(cases: list[dict[str, Any]]) -> None:
    parsed = parse_cases(cases, source="cases.json")
    assert [(c.id, c.input.user, c.title, c.expected) for c in parsed] == [
        (c["id"], c["input"]["user"], c.get("title"), c.get("expected")) for c in cases
    ]
    assert not list(Draft7Validator(runs_schema("cases")).iter_errors(cases))


def test_the_run_directory_passes_its_shipped_schemas(scripted_run: Any) -> None:
    run_dir, _, _ = scripted_run
    checker = FormatChecker()
    judged = set()
    for path in sorted(run_dir.rglob("*.json")):
        document = json.loads(path.read_text(encoding="utf-8"))
        kind = {
            "run.v1": "run",
            "case.v1": "case",
            "assets-manifest.v1": "assets-manifest",
            "failure-meta.v1": "failure-meta",
        }.get(document.get("schema_version") if isinstance(document, dict) else None)
        if kind is None:
            continue  # cases.json, payloads, bodies
        validator = Draft7Validator(runs_schema(kind), format_checker=checker)
        assert not list(validator.iter_errors(document)), path
        judged.add(kind)
    assert judged == {"run", "case", "assets-manifest", "failure-meta"}
    # A snippet whose body was not kept: both judges refuse it.
    case = read(run_dir, "http.json")
    case["runner_failure"]["full_body_saved_to"] = None
    assert list(Draft7Validator(runs_schema("case")).iter_errors(case))
    with pytest.raises(ContractError) as refused:
        parse_case_artifact(case, source="http.json")
    assert refused.value.rule == "full-body"


def extra_fields_agent(request: dict[str, Any]) -> Any:
    """An in-process agent whose answers carry fields v1 does not name, or the runner's own."""
    answer = good_answer(request)
    case_id = request["case_id"]
    if case_id == "traced":
        answer["trace_id"] = "abc"
        answer["x_cost"] = {"usd": 0.1}
    elif case_id == "status":
        answer["status"] = "done"
    elif case_id == "failure":
        answer["runner_failure"] = {}
    elif case_id == "extra":
        answer["x_agent_extra"] = 1
    elif case_id == "href":
        answer["events"][2]["payload_asset_href"] = "/etc/passwd"
    return answer


def test_unknown_answer_fields_are_kept_and_the_runners_own_are_refused(tmp_path: Path) -> None:
    agent = {"kind": "callable", "ref": "test_eval_run:extra_fields_agent"}
    ids = ["traced", "status", "failure", "extra", "href"]
    run_dir = run_in_process(tmp_path, agent, ids, retries=0)
    traced = read(run_dir, "traced.json")
    parse_case_artifact(traced, source="traced.json")
    assert traced["status"] == "ok" and "trace_id" not in traced
    assert traced["x_agent_extra"] == {"trace_id": "abc", "x_cost": {"usd": 0.1}}
    validator = Draft7Validator(runs_schema("case"), format_checker=FormatChecker())
    assert not list(validator.iter_errors(traced))
    for case_id, field in [("status", "status"), ("failure", "runner_failure")]:
        failure = failure_of(run_dir, case_id)
        assert failure["class"] == "schema_mismatch", failure
        assert f"$.{field}" in failure["error_message"]
    assert failure_of(run_dir, "extra")["class"] == "schema_mismatch"
    href = failure_of(run_dir, "href")
    assert href["class"] == "schema_mismatch"
    assert "$.events[2].payload_asset_href" in href["error_message"]


def test_an_odd_content_length_is_ignored_not_a_crash(tmp_path: Path) -> None:
    with AgentServer({"odd": [OddLength()]}) as server:
        run_dir = run_in_process(
            tmp_path, {"kind": "http", "base_url": server.base_url}, ["odd", "fine"], retries=0
        )
    for case_id in ("odd", "fine"):
        case = read(run_dir, f"{case_id}.json")
        parse_case_artifact(case, source=case_id)
        assert case["status"] == "ok", case


def odd_agent(request: dict[str, Any]) -> Any:
    """An in-process agent answering text that cannot be encoded (a lone surrogate)."""
    if request["case_id"] == "odd":
        return "\ud800"
    return good_answer(request)


def test_an_unexpected_error_in_a_try_is_the_cases_other_failure(tmp_path: Path) -> None:
    agent = {"kind": "callable", "ref": "test_eval_run:odd_agent"}
    run_dir = run_in_process(tmp_path, agent, ["odd", "fine"], retries=1, retry_classes=["other"])
    failure = failure_of(run_dir, "odd")
    assert (failure["class"], failure["error_name"]) == ("other", "UnicodeEncodeError")
    assert "surrogate" in failure["error_message"]
    # each try ends as a try (and is retried as one), not the case as a whole
    assert attempt_classes(run_dir, "odd") == ["other", "other"] and failure["attempt"] == 2
    assert read(run_dir, "fine.json")["status"] == "ok"


@pytest.mark.parametrize("close", [False, True], ids=["keep-alive", "http-1.0"])
def test_the_time_limit_is_a_deadline_for_the_whole_try(close: bool, tmp_path: Path) -> None:
    limit = 0.3  # the body takes a minute at a byte per 50 ms
    with AgentServer({"drip": [Drip(interval=0.05, close=close)]}) as server:
        body = json.dumps({"case_id": "drip", "version": "new", "input": {"user": "u"}})
        started = time.monotonic()
        with pytest.raises(TransportFailure) as failed:
            HttpTransport(server.base_url).call(
                body.encode(), timeout_s=limit, sink=BodyFile(tmp_path, "drip", cap=1 << 20)
            )
        took = time.monotonic() - started
    assert failed.value.error_class == "timeout"
    assert took < 3 * limit, took  # ends near the limit, not when the body does


def test_a_failed_commands_whole_output_is_not_called_truncated(tmp_path: Path) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text(
        "import sys\nsys.stdout.write('half an answer'); sys.exit(3)\n", encoding="utf-8"
    )
    command = f"{sys.executable} {agent}"
    run_dir = run_in_process(tmp_path, {"kind": "subprocess", "command": command}, ["a"], retries=0)
    failure = failure_of(run_dir, "a")
    assert failure["class"] == "other" and failure["body_snippet"] == "half an answer"
    meta = read(run_dir, failure["full_body_meta_saved_to"])
    assert (meta["bytes_written"], meta["bytes_total"], meta["truncated"]) == (14, 14, False)


class _Watch:
    """Agent calls and recorded cases (a progress line is written after each record)."""

    lock = threading.Lock()
    calls = 0
    recorded = 0
    ahead: list[int] = []  # at each call: calls made minus cases recorded
    all_called = threading.Event()
    total = 0


def watched_agent(request: dict[str, Any]) -> Any:
    """An instant in-process agent that notes how far it runs ahead of the records."""
    with _Watch.lock:
        _Watch.calls += 1
        _Watch.ahead.append(_Watch.calls - _Watch.recorded)
        if _Watch.calls == _Watch.total:
            _Watch.all_called.set()
    return good_answer(request)


class _SlowRecords(io.StringIO):
    def isatty(self) -> bool:
        return True  # a line after every record

    def write(self, text: str) -> int:
        if _Watch.recorded == 0:
            # hold the main thread after its first record: unbounded workers would
            # answer every case meanwhile; bounded ones stop at `concurrency`
            _Watch.all_called.wait(0.3)
        with _Watch.lock:
            _Watch.recorded += text.startswith("\r")
        return super().write(text)


class WatchedRun(FastRun):
    progress_stream: ClassVar[Any] = staticmethod(_SlowRecords)


def test_at_most_concurrency_cases_run_ahead_of_the_records(tmp_path: Path) -> None:
    ids = [f"c{n}" for n in range(12)]
    _Watch.calls, _Watch.recorded, _Watch.total, _Watch.ahead = 0, 0, len(ids), []
    _Watch.all_called.clear()
    out = tmp_path / "out"
    workdir = out / "new"
    workdir.mkdir(parents=True)
    inputs = run_inputs(
        version="new",
        agent={"kind": "callable", "ref": "test_eval_run:watched_agent"},
        cases_file=write_cases(tmp_path / "cases.json", ids),
        out_root=out,
        repo_dir=tmp_path,
        concurrency=3,
    )
    engine = Engine(WatchedRun, bridge=FileBridge(workdir, WatchedRun.name))
    outcome = engine.start(workflow_ref="test:WatchedRun", workdir=workdir, inputs=inputs)
    assert outcome.status == "completed", outcome.message
    assert _Watch.calls == len(ids) and max(_Watch.ahead) <= 3, _Watch.ahead


def test_credentials_in_the_base_url_are_written_nowhere(tmp_path: Path) -> None:
    with AgentServer({"b": [Reply(500, b"down")]}) as server:
        url = server.base_url.replace("http://", "http://user:hunter2@")
        run_dir = run_in_process(tmp_path, {"kind": "http", "base_url": url}, ["a", "b"], retries=0)
    assert read(run_dir, "run.json")["base_url"] == server.base_url
    assert failure_of(run_dir, "b")["url"] == server.base_url + "/run-case"
    for path in (tmp_path / "out").rglob("*"):
        if path.is_file():
            assert b"hunter2" not in path.read_bytes(), path


def test_a_5xx_dropped_mid_body_keeps_its_status_and_content_type(tmp_path: Path) -> None:
    with AgentServer({"a": [HalfBody(status=503)]}) as server:
        run_dir = run_in_process(
            tmp_path, {"kind": "http", "base_url": server.base_url}, ["a"], retries=0
        )
    failure = failure_of(run_dir, "a")
    assert (failure["class"], failure["status"]) == ("network_error", 503)
    meta = read(run_dir, failure["full_body_meta_saved_to"])
    assert meta["content_type"] == "application/json" and meta["truncated"] is True


def test_a_commands_output_is_kept_to_the_cap_and_counted_whole(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "agent"
    big = f"{sys.executable} -c \"import sys; sys.stdout.buffer.write(b'x' * 3_000_000)\""
    for case_id, command in [("big", big), ("missing", str(missing))]:
        run_dir = run_in_process(
            tmp_path / case_id,
            {"kind": "subprocess", "command": command},
            [case_id],
            retries=0,
            limits=Limits(max_body_bytes=64 * 1024),
        )
        failure = failure_of(run_dir, case_id)
        assert failure["class"] == "other"
        if case_id == "big":
            assert failure["error_name"] == "BodyTooLarge"
            meta = read(run_dir, failure["full_body_meta_saved_to"])
            assert (meta["bytes_written"], meta["bytes_total"]) == (64 * 1024, 3_000_000)
        else:
            assert failure["error_name"] == "FileNotFoundError"
            assert str(tmp_path) not in failure["error_message"]
            assert "agent" in failure["error_message"]


def test_a_command_past_the_limit_is_killed_as_a_timeout(tmp_path: Path) -> None:
    command = f'{sys.executable} -c "import time; time.sleep(30)"'
    with pytest.raises(TransportFailure) as failed:
        SubprocessTransport(command).call(
            b"{}", timeout_s=0.3, sink=BodyFile(tmp_path, "sleep", cap=1024)
        )
    assert failed.value.error_class == "timeout"


@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("--agent-command", 'agent "unclosed', "No closing quotation"),
        ("--base-url", "http://[::1", "Invalid IPv6 URL"),
        ("--agent-callable", ".relative:answer", "TypeError"),
    ],
)
def test_an_agent_that_cannot_be_named_is_a_one_line_usage_error(
    tmp_path: Path, option: str, value: str, words: str
) -> None:
    cases = tmp_path / "cases.json"
    cases.write_text('[{"id": "a", "input": {"user": "hi"}}]', encoding="utf-8")
    out = tmp_path / "runs"
    result = orchestrate(
        "eval", "run", "--cases", cases, "--version", "new", "--out", out, option, value
    )
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"orchestrate: error: {option} ") and words in line, line
    assert not out.exists()
