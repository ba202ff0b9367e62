"""One case, tried until it answers or the retry policy gives up: each try judged into
an error class, the tries retried through tenacity with exponential backoff and jitter,
every try kept for the case's ``attempts``.

Time and chance come from :class:`Timing` (the clock, a monotonic counter, ``sleep``, a
random source), so a test never waits for a backoff.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from .._errors import ContractError
from .._ports import Clock
from ..formats.runs import (
    Attempt,
    CaseSpec,
    Limits,
    RetryPolicy,
    answer_artifact,
    parse_agent_answer,
    parse_case_artifact,
)
from ..formats.strict_json import loads_strict
from ..formats.times import SystemClock, format_time
from .bodies import BodyFile
from .payloads import Externalized, check_agent_hrefs, externalize
from .transport import Reply, Transport, TransportFailure


@attrs.define(kw_only=True)
class Timing:
    """What the runner reads time and chance from; tests give their own."""

    clock: Clock = attrs.Factory(SystemClock)
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    random: Callable[[], float] = attrs.Factory(lambda: random.Random().random)


@attrs.define(kw_only=True)
class Failure:
    """Why a try gave no usable answer, with what came back of its body (in a body file,
    up to the cap)."""

    error_class: str
    error_name: str | None = None
    error_message: str | None = None
    status: int | None = None
    status_text: str | None = None
    body: BodyFile | None = None
    truncated: bool = False
    bytes_total: int | None = None
    content_type: str | None = None
    headers: dict[str, str] = attrs.Factory(dict)
    note: str | None = None


@attrs.define(kw_only=True)
class CaseResult:
    """A case's end: its tries, and either the accepted answer or the last failure."""

    attempts: list[Attempt]
    answer: Externalized | None = None
    failure: Failure | None = None
    latency_ms: float | None = None


@attrs.define(kw_only=True)
class CaseRunner:
    """Tries cases against one transport under one policy; each try's body is written
    to a file in ``bodies`` (the run's ``assets/``) as it arrives."""

    transport: Transport
    bodies: Path
    version: str
    run_id: str
    timeout_ms: int
    retries: int
    policy: RetryPolicy
    limits: Limits
    timing: Timing = attrs.Factory(Timing)

    def run(self, case: CaseSpec) -> CaseResult:
        """Every try of ``case`` until one is accepted or the policy stops."""
        import tenacity

        body = _request_body(case, self.version, self.run_id)
        attempts: list[Attempt] = []
        last: list[float | None] = [None]

        def one_try() -> Externalized | Failure:
            number = len(attempts) + 1
            started_at = format_time(self.timing.clock.now())
            started = self.timing.monotonic()
            outcome = self._try(case, body)
            latency = round((self.timing.monotonic() - started) * 1000, 3)
            last[0] = latency
            failed = isinstance(outcome, Failure)
            attempts.append(
                Attempt(
                    attempt=number,
                    started_at=started_at,
                    latency_ms=latency,
                    outcome="runner_error" if failed else "ok",
                    error_class=outcome.error_class if isinstance(outcome, Failure) else None,
                )
            )
            return outcome

        outcomes: list[Externalized | Failure] = []

        def kept_try() -> Externalized | Failure:
            if outcomes:  # a try given up on: its body is never written
                _drop_body(outcomes.pop())
            outcomes.append(one_try())
            return outcomes[-1]

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.retries + 1),
            wait=self._wait,
            sleep=self.timing.sleep,
            retry=tenacity.retry_if_result(self._retryable),
            retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
            reraise=True,
        )
        outcome = retrying(kept_try)
        if isinstance(outcome, Failure):
            return CaseResult(attempts=attempts, failure=outcome, latency_ms=last[0])
        return CaseResult(attempts=attempts, answer=outcome, latency_ms=last[0])

    def _try(self, case: CaseSpec, body: bytes) -> Externalized | Failure:
        try:
            return self._ask(case, body)
        except Exception as exc:  # whatever else went wrong ends this try, never the run
            return Failure(
                error_class="other",
                error_name=type(exc).__name__,
                error_message=str(exc) or repr(exc),
            )

    def _ask(self, case: CaseSpec, body: bytes) -> Externalized | Failure:
        """One try; its body file goes with a failure that keeps it, else is removed."""
        sink = BodyFile(self.bodies, f"{case.id}.answer", cap=self.limits.max_body_bytes)
        try:
            outcome = self._call(case, body, sink)
        except BaseException:
            sink.discard()
            raise
        if not (isinstance(outcome, Failure) and outcome.body is sink):
            sink.discard()
        return outcome

    def _call(self, case: CaseSpec, body: bytes, sink: BodyFile) -> Externalized | Failure:
        try:
            reply = self.transport.call(body, timeout_s=self.timeout_ms / 1000, sink=sink)
        except TransportFailure as failure:
            kept = sink if failure.with_body and sink.kept else None
            return Failure(
                error_class=failure.error_class,
                error_name=failure.error_name,
                error_message=failure.message,
                status=failure.status,
                body=kept,
                truncated=failure.truncated,
                bytes_total=failure.bytes_total,
                content_type=failure.content_type,
                headers=failure.headers,
                note="the connection closed before the whole body arrived"
                if failure.with_body and failure.error_class == "network_error"
                else None,
            )
        return self._judge(case, reply, sink)

    def _judge(self, case: CaseSpec, reply: Reply, sink: BodyFile) -> Externalized | Failure:
        facts: dict[str, Any] = {
            "status": reply.status,
            "status_text": reply.status_text,
            "body": sink if sink.kept else None,
            "truncated": reply.truncated,
            "bytes_total": reply.bytes_total,
            "content_type": reply.content_type,
            "headers": reply.headers,
        }
        if reply.status is not None and not 200 <= reply.status < 300:
            return Failure(error_class="http_error", **facts)
        if reply.truncated:
            cap = self.limits.max_body_bytes
            return Failure(
                error_class="other",
                error_name="BodyTooLarge",
                error_message=f"the answer is larger than max_body_bytes ({cap} bytes); its "
                f"first {cap} bytes are kept in assets/; to read it whole, run again with "
                "--max-body-bytes set above its size",
                note="cut at max_body_bytes",
                **facts,
            )
        source = f"answer to case {case.id}"
        try:
            data = _parse(sink, source=source, max_bytes=self.limits.max_body_bytes)
        except ContractError as exc:
            return Failure(
                error_class="invalid_json", error_name=exc.rule, error_message=str(exc), **facts
            )
        try:
            check_agent_hrefs(data, source=source)
            externalized = externalize(data, case_id=case.id, limits=self.limits)
            parse_agent_answer(
                externalized.answer,
                source=source,
                case_id=case.id,
                version=self.version,
                asset_ids=frozenset(a.asset_id for a in externalized.assets),
            )
            # What the case file will hold must read back: refused here, it is this
            # case's failure rather than an error out of the run.
            artifact = answer_artifact(
                externalized.answer,
                case_id=case.id,
                version=self.version,
                workflow_id=case.workflow_id,
                attempts=[],
            )
            parse_case_artifact(artifact, source=f"{case.id}.json")
        except ContractError as exc:
            return Failure(
                error_class="schema_mismatch",
                error_name=exc.rule or "schema",
                error_message=str(exc),
                **facts,
            )
        return externalized

    def _retryable(self, outcome: Externalized | Failure) -> bool:
        if not isinstance(outcome, Failure):
            return False
        classes = self.policy.classes
        if outcome.error_class in classes:
            return True
        status = outcome.status
        if outcome.error_class != "http_error" or status is None:
            return False
        return ("http_5xx" in classes and status >= 500) or (
            "http_429" in classes and status == 429
        )

    def _wait(self, state: Any) -> float:
        """Exponential backoff with equal jitter: half the step, plus up to half again."""
        step = min(
            self.policy.x_max_delay_ms,
            self.policy.x_base_delay_ms * 2 ** (state.attempt_number - 1),
        )
        if self.policy.jitter:
            step = step / 2 + self.timing.random() * step / 2
        return float(step) / 1000


def _parse(sink: BodyFile, *, source: str, max_bytes: int) -> Any:
    """The answer in ``sink`` as JSON data: its bytes are read once and let go as soon
    as they are parsed."""
    return loads_strict(sink.read(), source=source, max_bytes=max_bytes)


def _drop_body(outcome: Externalized | Failure) -> None:
    if isinstance(outcome, Failure) and outcome.body is not None:
        outcome.body.discard()
        outcome.body = None


def _request_body(case: CaseSpec, version: str, run_id: str) -> bytes:
    request: dict[str, Any] = {"case_id": case.id, "version": version}
    if case.workflow_id is not None:
        request["workflow_id"] = case.workflow_id
    case_input: dict[str, Any] = {"user": case.input.user}
    if case.input.context is not None:
        case_input["context"] = case.input.context
    request["input"] = case_input
    request["run_meta"] = {"run_id": run_id}
    return json.dumps(request, ensure_ascii=False).encode("utf-8")
