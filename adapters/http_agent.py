"""The HTTP invoker: agents answered by an OpenAI-compatible chat-completions endpoint.

Standard library HTTP only; tenacity retries what is worth retrying (timeouts, dropped
connections, HTTP 429 and 5xx) and nothing else. The API key is read from an environment
variable at every call and never kept: not on the instance, not in a message, not in the
answer's facts. Server text quoted in a message has the key, and anything shaped like a
secret, redacted.

``urllib.request`` (which imports ``ssl``) and tenacity are imported on the first call,
so importing this module stays cheap.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlsplit, urlunsplit

from .._errors import AgentInvocationError, ContractError
from .._http import endpoint_of, header_value_ok, opener_without_redirects
from .._ports import AgentAnswer
from .._text import plural
from ..formats.bridge import ErrorType
from ..formats.secrets import redact
from ..formats.strict_json import loads_strict

if TYPE_CHECKING:
    import urllib.error
    import urllib.request

    import tenacity

__all__ = ["HttpInvoker"]

#: the largest answer body read; a bigger one is a PARSE_ERROR, not a memory problem
MAX_BODY_BYTES = 16 * 1024 * 1024
#: how much of a server's error text a message quotes
QUOTE_LIMIT = 300


class _Retryable(Exception):
    """One attempt failed in a way another attempt may not: ``cause`` says how."""

    def __init__(self, cause: str, *, timed_out: bool = False, retry_after: float | None = None):
        self.cause = cause
        self.timed_out = timed_out
        self.retry_after = retry_after
        super().__init__(cause)


class HttpInvoker:
    """An :class:`orchestrator.AgentInvoker` that POSTs each ask to
    ``{base_url}/chat/completions`` and returns an :class:`orchestrator.AgentAnswer`.

    ``models`` maps agent names to models (others get ``model``). The key is read from
    the environment variable ``api_key_env`` at each call. Timeouts, connection failures,
    HTTP 429 (``Retry-After`` honoured, capped by ``max_wait``) and 5xx are retried up to
    ``max_attempts`` attempts in all, with full-jitter exponential backoff starting at
    ``initial_wait`` seconds; other failures raise at once. ``request_timeout`` caps the
    per-attempt timeout the engine asks for; ``sleep`` is injected so that tests never wait.
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        models: Mapping[str, str] | None = None,
        system_prompt: str | None = None,
        temperature: float | None = None,
        max_attempts: int = 4,
        initial_wait: float = 1.0,
        max_wait: float = 30.0,
        request_timeout: float | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"base_url must be an http:// or https:// address, not {endpoint_of(base_url)!r}"
            )
        if parts.username is not None or parts.password is not None:
            raise ValueError(
                "base_url must not carry credentials; put the key in the environment "
                f"variable {api_key_env} instead"
            )
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, not {max_attempts}")
        if initial_wait < 0 or max_wait < 0:
            raise ValueError("initial_wait and max_wait must not be negative")
        if request_timeout is not None and request_timeout <= 0:
            raise ValueError(f"request_timeout must be positive, not {request_timeout}")
        path = parts.path.rstrip("/") + "/chat/completions"
        self.url = urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))
        #: the base URL without query or fragment: safe to show and to record
        self.endpoint = endpoint_of(base_url)
        self.model = model
        self.api_key_env = api_key_env
        self.models = dict(models or {})
        self.system_prompt = system_prompt
        self.temperature = temperature
        self.max_attempts = max_attempts
        self.initial_wait = initial_wait
        self.max_wait = max_wait
        self.request_timeout = request_timeout
        self.sleep = sleep or time.sleep
        self._opener: urllib.request.OpenerDirector | None = None

    def __repr__(self) -> str:
        return (
            f"HttpInvoker(endpoint={self.endpoint!r}, model={self.model!r}, "
            f"api_key_env={self.api_key_env!r}, max_attempts={self.max_attempts})"
        )

    def invoke(
        self, agent_name: str, prompt: str, timeout_seconds: int = 120, **kwargs: Any
    ) -> str:
        """Ask ``agent_name``'s model; raise :class:`orchestrator.AgentInvocationError`
        with the agent bridge's ``error_type`` on failure."""
        model = self.models.get(agent_name, self.model)
        where = f"POST {self.endpoint}/chat/completions (agent {agent_name!r}, model {model!r})"
        key = self._api_key(where)
        request = self._request(key, self._payload(model, prompt))
        timeout = float(timeout_seconds)
        if self.request_timeout is not None:
            timeout = min(timeout, self.request_timeout)
        attempts = 0

        def attempt() -> bytes:
            nonlocal attempts
            attempts += 1
            return self._send(request, timeout, key=key, where=where, model=model)

        body = self._with_retries(attempt, where, lambda: attempts)
        return self._answer(body, model=model, attempts=attempts, where=where)

    # -- one call -------------------------------------------------------------------------

    def _api_key(self, where: str) -> str:
        key = os.environ.get(self.api_key_env, "").strip()
        if not key:
            raise AgentInvocationError(
                f"{where}: no API key: set the environment variable {self.api_key_env}",
                error_type=ErrorType.INVOCATION_FAILED.value,
            )
        # A header value with spaces, control or non-ASCII characters makes http.client
        # raise an error that quotes the whole value: refuse it here, without quoting it.
        if not header_value_ok(key) or " " in key:
            raise AgentInvocationError(
                f"{where}: the value of {self.api_key_env} is not a valid API key (it holds "
                f"spaces, control or non-ASCII characters); set {self.api_key_env} again",
                error_type=ErrorType.INVOCATION_FAILED.value,
            )
        return key

    def _payload(self, model: str, prompt: str) -> dict[str, Any]:
        messages = []
        if self.system_prompt is not None:
            messages.append({"role": "system", "content": self.system_prompt})
        messages.append({"role": "user", "content": prompt})
        payload: dict[str, Any] = {"model": model, "messages": messages}
        if self.temperature is not None:
            payload["temperature"] = self.temperature
        return payload

    def _request(self, key: str, payload: dict[str, Any]) -> urllib.request.Request:
        import json
        import urllib.request

        request = urllib.request.Request(
            self.url,
            data=json.dumps(payload).encode("utf-8"),
            method="POST",
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        # Unredirected: should a redirect ever be followed, the key stays behind.
        request.add_unredirected_header("Authorization", f"Bearer {key}")
        return request

    def _with_retries(
        self, attempt: Callable[[], bytes], where: str, attempts: Callable[[], int]
    ) -> bytes:
        import tenacity

        backoff = tenacity.wait_random_exponential(multiplier=self.initial_wait, max=self.max_wait)

        def wait(state: tenacity.RetryCallState) -> float:
            failure = state.outcome.exception() if state.outcome is not None else None
            if isinstance(failure, _Retryable) and failure.retry_after is not None:
                return min(failure.retry_after, self.max_wait)
            return float(backoff(state))

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.max_attempts),
            wait=wait,
            retry=tenacity.retry_if_exception_type(_Retryable),
            sleep=self.sleep,
            reraise=True,
        )
        try:
            return retrying(attempt)
        except _Retryable as last:
            made = attempts()
            raise AgentInvocationError(
                f"{where}: gave up after {plural(made, 'attempt')}; last: {last.cause}",
                error_type=(
                    ErrorType.TIMEOUT if last.timed_out else ErrorType.INVOCATION_FAILED
                ).value,
            ) from None

    def _send(
        self, request: urllib.request.Request, timeout: float, *, key: str, where: str, model: str
    ) -> bytes:
        """One attempt: the 2xx body, or :class:`_Retryable`, or the final error."""
        import http.client
        import ssl
        import urllib.error

        try:
            with self._open(request, timeout) as response:
                declared = response.length
                body: bytes = response.read(MAX_BODY_BYTES + 1)
                # read(amt) returns what came before the close; read() alone would raise
                if declared is not None and len(body) < min(declared, MAX_BODY_BYTES + 1):
                    raise http.client.IncompleteRead(body, declared - len(body))
                return body
        except urllib.error.HTTPError as failure:
            with failure:
                self._refuse_status(failure, key=key, where=where, model=model)
        except TimeoutError:
            raise _Retryable(f"no answer within {timeout:g} s", timed_out=True) from None
        except urllib.error.URLError as failure:
            reason = failure.reason
            if isinstance(reason, TimeoutError):
                raise _Retryable(f"no connection within {timeout:g} s", timed_out=True) from None
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise AgentInvocationError(
                    f"{where}: the server's TLS certificate was refused: {reason.verify_message}",
                    error_type=ErrorType.INVOCATION_FAILED.value,
                ) from None
            if isinstance(reason, OSError):
                raise _Retryable(f"connection failed: {_describe(reason)}") from None
            raise AgentInvocationError(
                f"{where}: {reason}", error_type=ErrorType.INVOCATION_FAILED.value
            ) from None
        except (OSError, http.client.HTTPException) as failure:
            # reset, refused, RemoteDisconnected (closed before an answer), IncompleteRead
            raise _Retryable(f"connection failed: {_describe(failure)}") from None

    def _open(self, request: urllib.request.Request, timeout: float) -> Any:

        if self._opener is None:
            self._opener = opener_without_redirects()
        return self._opener.open(request, timeout=timeout)

    def _refuse_status(
        self, failure: urllib.error.HTTPError, *, key: str, where: str, model: str
    ) -> NoReturn:
        status = failure.code
        said = _server_message(failure, key)
        heading = f"HTTP {status} {failure.reason}".rstrip()
        if status == 429 or status >= 500:
            retry_after = _retry_after_seconds(failure.headers.get("Retry-After"))
            raise _Retryable(f"{heading}{said}", retry_after=retry_after)
        if status in (401, 403):
            message = f"{heading}: the server refused the API key; check {self.api_key_env}"
            error_type = ErrorType.INVOCATION_FAILED
        elif status == 404:
            message = (
                f"{heading}: the model {model!r} or the endpoint does not exist; check the "
                "base URL and the model"
            )
            error_type = ErrorType.AGENT_NOT_FOUND
        elif 300 <= status < 400:
            message = f"{heading}: redirected; set base_url to the address it points to"
            error_type = ErrorType.INVOCATION_FAILED
        else:
            message = f"{heading}: the server refused the request"
            error_type = ErrorType.INVOCATION_FAILED
        raise AgentInvocationError(f"{where}: {message}{said}", error_type=error_type.value)

    def _answer(self, body: bytes, *, model: str, attempts: int, where: str) -> AgentAnswer:
        if len(body) > MAX_BODY_BYTES:
            _parse_error(where, f"the answer is larger than {MAX_BODY_BYTES} bytes")
        try:
            data = loads_strict(body, source="the answer", max_bytes=MAX_BODY_BYTES)
        except ContractError as exc:
            _parse_error(where, f"the answer is not JSON ({exc.detail})")
        try:
            content = data["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            content = None
        if not isinstance(content, str):
            _parse_error(where, "the answer has no text at choices[0].message.content")
        usage = data.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        facts: dict[str, Any] = {}
        for name in ("prompt_tokens", "completion_tokens"):
            if _is_count(usage.get(name)):
                facts[name] = usage[name]
        facts["attempts"] = attempts
        facts["endpoint"] = self.endpoint
        answered_by = data.get("model")
        return AgentAnswer(
            content,
            model=answered_by if isinstance(answered_by, str) and answered_by else model,
            tokens_used=usage["total_tokens"] if _is_count(usage.get("total_tokens")) else None,
            facts=facts,
        )


def _parse_error(where: str, what: str) -> NoReturn:
    raise AgentInvocationError(f"{where}: {what}", error_type=ErrorType.PARSE_ERROR.value)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _describe(failure: BaseException) -> str:
    text = str(failure)
    return f"{type(failure).__name__}: {text}" if text else type(failure).__name__


def _retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` in seconds (an HTTP date is left to the backoff)."""
    try:
        seconds = float((value or "").strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def _server_message(failure: urllib.error.HTTPError, key: str) -> str:
    """The server's own words about ``failure``, redacted and cut short (``": ..."``)."""
    import json

    try:
        raw = failure.read(64 * 1024)
    except (OSError, ValueError):
        return ""
    text = raw.decode("utf-8", "replace")
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        error = data.get("error", data.get("detail", data.get("message")))
        if isinstance(error, dict):
            error = error.get("message", error)
        if error is not None:
            text = error if isinstance(error, str) else json.dumps(error)
    text = redact(" ".join(text.split()).replace(key, "[REDACTED]"))
    if not text:
        return ""
    if len(text) > QUOTE_LIMIT:
        text = text[: QUOTE_LIMIT - 1] + "…"
    return f": {text}"
