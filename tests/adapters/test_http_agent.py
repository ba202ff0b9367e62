"""The HTTP invoker against a real HTTP server on loopback (``tests/support/http_fake_server.py``).

Every case checks the error type, how many requests reached the server, what the injected
sleep was asked to wait, and that the API key shows up nowhere but in the Authorization
header: not in a message, the answer's facts, the invoker's repr, output, or a file.
"""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator import AgentAnswer, AgentInvocationError, AgentInvoker, Engine, Workflow, phase
from orchestrator.adapters.file_bridge import FileBridge
from orchestrator.adapters.http_agent import HttpInvoker
from support.http_fake_server import Drop, FakeChatServer, HalfBody, Slow, ok, reply

KEY_ENV = "CHECKPOINT_TEST_LLM_KEY"
KEY = "sk-test-Zq8vN3kT1rW5yB7mD2fH9jL4pX6cV0aG"
PROMPT = (
    "Please summarise the plan in one sentence, mention every phase by its name, "
    "and say which one comes last."
)


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "*")
    monkeypatch.setenv("NO_PROXY", "*")


@pytest.fixture
def server() -> Iterator[FakeChatServer]:
    with FakeChatServer() as running:
        yield running


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def leak_check(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> Iterator[list[Any]]:
    """Things to search for the key at teardown (exceptions with their chains, answers,
    invokers), with the captured output and every file under ``tmp_path``."""
    seen: list[Any] = []
    yield seen
    texts = list(capfd.readouterr())
    for item in seen:
        texts.extend(_texts_of(item))
    for text in texts:
        assert KEY not in text
        assert KEY[8:] not in text  # not even the part after the well-known prefix
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def _texts_of(item: Any) -> list[str]:
    if isinstance(item, BaseException):
        texts = [str(item), repr(item), repr(vars(item))]
        chained = item.__cause__ or item.__context__
        return texts + (_texts_of(chained) if chained is not None else [])
    if isinstance(item, AgentAnswer):
        return [str(item), repr(item.model), json.dumps(item.facts)]
    return [repr(item), repr(vars(item))]


def make_invoker(server: FakeChatServer, sleeps: list[float], **options: Any) -> HttpInvoker:
    settings: dict[str, Any] = {
        "base_url": server.base_url,
        "model": "gpt-test",
        "api_key_env": KEY_ENV,
        "request_timeout": 5.0,
        "sleep": sleeps.append,
    }
    settings.update(options)
    return HttpInvoker(**settings)


def failure_of(
    invoker: HttpInvoker, leaks: list[Any], agent: str = "writer"
) -> AgentInvocationError:
    with pytest.raises(AgentInvocationError) as caught:
        invoker.invoke(agent, PROMPT, 30)
    leaks.extend([caught.value, invoker])
    return caught.value


@pytest.fixture
def upper_jitter(monkeypatch: pytest.MonkeyPatch) -> None:
    """Full jitter always picks the top of its window, so the waits are exact."""
    monkeypatch.setattr(random, "uniform", lambda low, high: high)


# -- success --------------------------------------------------------------------------------


def test_success_returns_the_answer_with_model_tokens_and_facts(
    server: FakeChatServer, sleeps: list[float], leak_check: list[Any]
) -> None:
    server.script(ok("Three phases.", model="gpt-test-2025"))
    invoker = make_invoker(server, sleeps, system_prompt="Be brief.", temperature=0.2)

    answer = invoker.invoke("writer", PROMPT, 30, context={"ignored": True})
    leak_check.extend([answer, invoker])

    assert isinstance(answer, AgentAnswer)
    assert answer == "Three phases."
    assert answer.model == "gpt-test-2025"
    assert answer.tokens_used == 18
    assert answer.facts == {
        "prompt_tokens": 11,
        "completion_tokens": 7,
        "attempts": 1,
        "endpoint": server.base_url,
    }
    [request] = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["Authorization"] == f"Bearer {KEY}"
    assert request.headers["Content-Type"] == "application/json"
    assert request.json() == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": PROMPT},
        ],
        "temperature": 0.2,
    }
    assert sleeps == []


def test_models_map_agents_and_the_requested_model_stands_in_when_the_answer_has_none(
    server: FakeChatServer, sleeps: list[float], leak_check: list[Any]
) -> None:
    server.script(ok(model=None, usage={}), ok())
    invoker = make_invoker(server, sleeps, models={"critic": "critic-model"})

    critic = invoker.invoke("critic", PROMPT)
    writer = invoker.invoke("writer", PROMPT)
    leak_check.extend([critic, writer])

    assert [r.json()["model"] for r in server.requests] == ["critic-model", "gpt-test"]
    assert server.requests[0].json()["messages"] == [{"role": "user", "content": PROMPT}]
    assert "temperature" not in server.requests[0].json()
    assert critic.model == "critic-model"
    assert critic.tokens_used is None
    assert critic.facts == {"attempts": 1, "endpoint": server.base_url}


def test_the_key_is_read_at_call_time(
    server: FakeChatServer, sleeps: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV)
    invoker = make_invoker(server, sleeps)
    monkeypatch.setenv(KEY_ENV, "sk-later-key-1234567890")
    server.script(ok())

    invoker.invoke("writer", PROMPT)

    assert server.requests[0].headers["Authorization"] == "Bearer sk-later-key-1234567890"


def test_a_query_in_the_base_url_is_sent_but_not_recorded(
    server: FakeChatServer, sleeps: list[float], leak_check: list[Any]
) -> None:
    server.script(ok())
    invoker = make_invoker(server, sleeps, base_url=server.base_url + "/?api-version=2024-06")

    answer = invoker.invoke("writer", PROMPT)
    leak_check.append(answer)

    assert server.requests[0].path == "/v1/chat/completions?api-version=2024-06"
    assert answer.facts["endpoint"] == server.base_url


def test_import_is_cheap() -> None:
    code = (
        "import sys, orchestrator.adapters.http_agent\n"
        "loaded = {'tenacity', 'urllib.request', 'http.client', 'ssl'} & set(sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_it_is_an_agent_invoker(server: FakeChatServer, sleeps: list[float]) -> None:
    assert isinstance(make_invoker(server, sleeps), AgentInvoker)


# -- retried --------------------------------------------------------------------------------


def test_429_waits_as_long_as_retry_after_says(
    server: FakeChatServer, sleeps: list[float], leak_check: list[Any]
) -> None:
    server.script(reply(429, {"error": {"message": "slow down"}}, Retry_After="2"), ok())

    answer = make_invoker(server, sleeps).invoke("writer", PROMPT)
    leak_check.append(answer)

    assert answer.facts["attempts"] == 2
    assert len(server.requests) == 2
    assert sleeps == [2.0]


def test_retry_after_is_capped_by_max_wait(
    server: FakeChatServer, sleeps: list[float], upper_jitter: None
) -> None:
    server.script(reply(429, Retry_After="120"), reply(429), ok())

    make_invoker(server, sleeps, max_wait=10.0).invoke("writer", PROMPT)

    assert sleeps == [10.0, 2.0]  # the second 429 has no Retry-After: the backoff's


def test_5xx_backs_off_exponentially_capped(
    server: FakeChatServer, sleeps: list[float], upper_jitter: None, leak_check: list[Any]
) -> None:
    server.script(reply(500), reply(503), reply(502), reply(500), ok())

    answer = make_invoker(server, sleeps, max_attempts=5, initial_wait=0.5, max_wait=3.0).invoke(
        "writer", PROMPT
    )
    leak_check.append(answer)

    assert answer.facts["attempts"] == 5
    assert sleeps == [0.5, 1.0, 2.0, 3.0]


def test_exhausted_5xx_fails_naming_the_attempts_and_the_last_cause(
    server: FakeChatServer, sleeps: list[float], leak_check: list[Any]
) -> None:
    server.script(*[reply(503, {"error": {"message": "overloaded"}})] * 4)

    failure = failure_of(make_invoker(server, sleeps, initial_wait=1.0, max_wait=3.0), leak_check)

    assert failure.error_type == "INVOCATION_FAILED"
    assert "gave up after 4 attempts" in str(failure)
    assert "HTTP 503" in str(failure) and "overloaded" in str(failure)
    assert len(server.requests) == 4
    # full jitter: each wait is anywhere in a window that doubles, up to max_wait
    assert len(sleeps) == 3
    for retry, wait in enumerate(sleeps):
        assert 0.0 <= wait <= min(1.0 * 2**retry, 3.0)


@pytest.mark.slow
def test_a_slow_answer_times_out_and_is_retried(
    server: FakeChatServer, sleeps: list[float], leak_check: list[Any]
) -> None:
    server.script(Slow(30.0, ok()), ok("in time"))

    answer = make_invoker(server, sleeps, request_timeout=0.5).invoke("writer", PROMPT, 120)
    leak_check.append(answer)

    assert answer == "in time"
    assert answer.facts["attempts"] == 2
    assert len(sleeps) == 1


@pytest.mark.slow
def test_timeouts_exhausted_are_a_timeout(
    server: FakeChatServer, sleeps: list[float], leak_check: list[Any]
) -> None:
    server.script(Slow(30.0, ok()), Slow(30.0, ok()))

    failure = failure_of(
        make_invoker(server, sleeps, request_timeout=0.5, max_attempts=2), leak_check
    )

    assert failure.error_type == "TIMEOUT"
    assert "gave up after 2 attempts" in str(failure)
    assert "no answer within 0.5 s" in str(failure)
    assert len(server.requests) == 2
    assert len(sleeps) == 1


@pytest.mark.slow
def test_the_engines_timeout_applies_when_it_is_the_shorter(
    server: FakeChatServer, sleeps: list[float], leak_check: list[Any]
) -> None:
    server.script(Slow(30.0, ok()))

    invoker = make_invoker(server, sleeps, request_timeout=None, max_attempts=1)
    with pytest.raises(AgentInvocationError) as caught:
        invoker.invoke("writer", PROMPT, 1)
    leak_check.append(caught.value)

    assert caught.value.error_type == "TIMEOUT"
    assert "gave up after 1 attempt;" in str(caught.value)
    assert "no answer within 1 s" in str(caught.value)
    assert sleeps == []


@pytest.mark.parametrize(
    ("broken", "cause"),
    [(Drop(), "RemoteDisconnected"), (HalfBody(ok()), "IncompleteRead")],
    ids=["dropped", "half-body"],
)
def test_a_broken_connection_is_retried(
    server: FakeChatServer, sleeps: list[float], leak_check: list[Any], broken: Any, cause: str
) -> None:
    server.script(broken, ok("second try"))

    answer = make_invoker(server, sleeps).invoke("writer", PROMPT)
    leak_check.append(answer)

    assert answer == "second try"
    assert answer.facts["attempts"] == 2
    assert len(sleeps) == 1

    server.script(broken, broken, broken)
    failure = failure_of(make_invoker(server, sleeps, max_attempts=3), leak_check)

    assert failure.error_type == "INVOCATION_FAILED"
    assert "gave up after 3 attempts" in str(failure) and cause in str(failure)
    assert len(server.requests) == 5
    assert len(sleeps) == 3


def test_a_refused_connection_is_retried_then_fails(
    sleeps: list[float], leak_check: list[Any]
) -> None:
    with socket.socket() as probe:  # a port nobody listens on, once it is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    invoker = HttpInvoker(
        base_url=f"http://127.0.0.1:{port}/v1",
        model="gpt-test",
        api_key_env=KEY_ENV,
        max_attempts=3,
        sleep=sleeps.append,
    )

    failure = failure_of(invoker, leak_check)

    assert failure.error_type == "INVOCATION_FAILED"
    assert "gave up after 3 attempts" in str(failure)
    assert "connection failed" in str(failure)
    assert len(sleeps) == 2


# -- not retried ----------------------------------------------------------------------------


@pytest.mark.parametrize("status", [400, 422])
def test_a_refused_request_fails_at_once_with_the_servers_message(
    server: FakeChatServer, sleeps: list[float], leak_check: list[Any], status: int
) -> None:
    long_message = "max_tokens is too large: " + "x" * 1000
    server.script(reply(status, {"error": {"message": long_message, "type": "invalid"}}))

    failure = failure_of(make_invoker(server, sleeps), leak_check)

    assert failure.error_type == "INVOCATION_FAILED"
    assert f"HTTP {status}" in str(failure)
    assert "max_tokens is too large: xxx" in str(failure)
    assert len(str(failure)) < 600  # truncated
    assert len(server.requests) == 1
    assert sleeps == []


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_key_says_which_variable_to_check(
    server: FakeChatServer, sleeps: list[float], leak_check: list[Any], status: int
) -> None:
    # Servers echo the key they refused: it must not reach the message.
    server.script(reply(status, {"error": {"message": f"Incorrect API key provided: {KEY}"}}))

    failure = failure_of(make_invoker(server, sleeps), leak_check)

    assert failure.error_type == "INVOCATION_FAILED"
    assert f"check {KEY_ENV}" in str(failure)
    assert "Incorrect API key provided" in str(failure)
    assert len(server.requests) == 1
    assert sleeps == []


def test_404_is_agent_not_found(
    server: FakeChatServer, sleeps: list[float], leak_check: list[Any]
) -> None:
    server.script(reply(404, {"error": {"message": "The model `nope` does not exist"}}))

    failure = failure_of(make_invoker(server, sleeps, model="nope"), leak_check)

    assert failure.error_type == "AGENT_NOT_FOUND"
    assert "'nope'" in str(failure) and "does not exist" in str(failure)
    assert len(server.requests) == 1
    assert sleeps == []


@pytest.mark.parametrize(
    "answer",
    [
        reply(200, b"<html>not json</html>"),
        reply(200, {"id": "x", "object": "chat.completion"}),
        reply(200, {"choices": []}),
        reply(200, {"choices": [{"message": {"role": "assistant", "content": None}}]}),
    ],
    ids=["not-json", "no-choices", "empty-choices", "null-content"],
)
def test_an_unreadable_answer_is_a_parse_error(
    server: FakeChatServer, sleeps: list[float], leak_check: list[Any], answer: Any
) -> None:
    server.script(answer)

    failure = failure_of(make_invoker(server, sleeps), leak_check)

    assert failure.error_type == "PARSE_ERROR"
    assert len(server.requests) == 1
    assert sleeps == []


def test_a_redirect_is_refused_not_followed(
    server: FakeChatServer, sleeps: list[float], leak_check: list[Any]
) -> None:
    elsewhere = f"http://127.0.0.1:{server.port}/elsewhere"
    server.script(reply(307, Location=elsewhere), ok())

    failure = failure_of(make_invoker(server, sleeps), leak_check)

    assert failure.error_type == "INVOCATION_FAILED"
    assert "HTTP 307" in str(failure) and "set base_url" in str(failure)
    assert [r.path for r in server.requests] == ["/v1/chat/completions"]
    assert sleeps == []


def test_a_missing_key_names_the_variable_and_sends_nothing(
    server: FakeChatServer,
    sleeps: list[float],
    leak_check: list[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(KEY_ENV)

    failure = failure_of(make_invoker(server, sleeps), leak_check)

    assert failure.error_type == "INVOCATION_FAILED"
    assert f"set the environment variable {KEY_ENV}" in str(failure)
    assert server.requests == []


def test_a_key_unfit_for_a_header_is_refused_without_quoting_it(
    server: FakeChatServer,
    sleeps: list[float],
    leak_check: list[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY + "\nX-Injected: yes")

    failure = failure_of(make_invoker(server, sleeps), leak_check)

    assert failure.error_type == "INVOCATION_FAILED"
    assert KEY_ENV in str(failure)
    assert server.requests == []


def test_credentials_in_the_base_url_are_refused_without_quoting_them() -> None:
    with pytest.raises(ValueError) as caught:
        HttpInvoker(base_url=f"https://user:{KEY}@example.invalid/v1", model="m")

    assert KEY not in str(caught.value)
    assert "OPENAI_API_KEY" in str(caught.value)


# -- end to end -----------------------------------------------------------------------------


class OnePhase(Workflow):
    name = "http-one-phase"
    agents = ("writer",)

    @phase(1)
    def draft(self, ctx: Any) -> dict[str, Any]:
        return {"text": ctx.ask("writer", PROMPT)}


def test_an_engine_runs_a_workflow_through_the_http_invoker(
    server: FakeChatServer, sleeps: list[float], tmp_path: Path, leak_check: list[Any]
) -> None:
    server.script(reply(503), ok("All three phases are planned.", model="gpt-test-2025"))
    invoker = make_invoker(server, sleeps)
    engine = Engine(OnePhase, bridge=FileBridge(tmp_path, OnePhase.name), invoker=invoker)

    outcome = engine.start(
        workflow_ref=f"{__name__}:OnePhase", workdir=tmp_path, inputs={"topic": "plans"}
    )

    assert outcome.status == "completed", outcome.message
    assert outcome.outputs["draft"] == {"text": "All three phases are planned."}
    [history] = (tmp_path / ".orchestrator" / "runs").glob("*/state.json")
    [record] = json.loads(history.read_text())["agent_requests"]
    assert record["status"] == "completed"
    assert record["x_response"]["metadata"] == {
        "model": "gpt-test-2025",
        "tokens_used": 18,
        "x_prompt_tokens": 11,
        "x_completion_tokens": 7,
        "x_attempts": 2,
        "x_endpoint": server.base_url,
    }
    assert len(server.requests) == 2
    assert len(sleeps) == 1
