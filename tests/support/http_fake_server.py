"""A scripted OpenAI-compatible chat-completions server on loopback, for the HTTP invoker's tests.

Each test queues behaviours (:func:`ok`, :func:`reply`, :class:`Drop`, :class:`HalfBody`,
:class:`Slow`); every request takes the next one and is recorded whole (path, headers,
body), so a test can count attempts and read what was sent. A request with nothing
queued gets a 500 that says so, and the test fails on it.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Reply:
    """An HTTP answer: ``status``, ``body`` (bytes as they are, anything else as JSON)."""

    status: int = 200
    body: Any = b""
    headers: dict[str, str] = field(default_factory=dict)

    def encoded(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        return json.dumps(self.body).encode("utf-8")


@dataclass(frozen=True)
class Drop:
    """Close the connection without answering."""


@dataclass(frozen=True)
class HalfBody:
    """Send the headers of a 200 and half of its body, then close the connection."""

    reply: Reply


@dataclass(frozen=True)
class Slow:
    """Answer ``reply`` after ``delay`` seconds (cut short when the server stops)."""

    delay: float
    reply: Reply


Behaviour = Reply | Drop | HalfBody | Slow


def reply(status: int, body: Any = b"", **headers: str) -> Reply:
    """An answer with ``status`` and ``body``; header names use ``_`` for ``-``."""
    return Reply(status, body, {name.replace("_", "-"): value for name, value in headers.items()})


def ok(
    content: str = "the answer",
    *,
    model: str | None = "served-model",
    usage: dict[str, int] | None = None,
) -> Reply:
    """A chat-completions success with ``content`` and token ``usage``."""
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": usage
        if usage is not None
        else {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }
    if model is not None:
        body["model"] = model
    return Reply(200, body)


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class FakeChatServer:
    """A ``ThreadingHTTPServer`` on 127.0.0.1 (a free port), answering from a script."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self._script: deque[Behaviour] = deque()
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.fake = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *behaviours: Behaviour) -> None:
        with self._lock:
            self._script.extend(behaviours)

    def next_behaviour(self, request: RecordedRequest) -> Behaviour:
        with self._lock:
            self.requests.append(request)
            if self._script:
                return self._script.popleft()
        return reply(500, {"error": {"message": "unscripted request: the test queued too few"}})

    def __enter__(self) -> FakeChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stopping.set()  # slow handlers stop waiting
        self._server.shutdown()
        self._server.server_close()  # joins the handler threads
        self._thread.join()


class _Server(ThreadingHTTPServer):
    daemon_threads = False
    block_on_close = True
    fake: FakeChatServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out and left makes the late answer fail; that is the test.
        pass


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        recorded = RecordedRequest(
            method="POST",
            path=self.path,
            headers=dict(self.headers.items()),
            body=self.rfile.read(length),
        )
        self._perform(self.server.fake.next_behaviour(recorded))

    def _perform(self, behaviour: Behaviour) -> None:
        self.close_connection = True
        if isinstance(behaviour, Drop):
            return
        if isinstance(behaviour, Slow):
            if self.server.fake.stopping.wait(behaviour.delay):
                return
            behaviour = behaviour.reply
        if isinstance(behaviour, HalfBody):
            body = behaviour.reply.encoded()
            self._head(behaviour.reply, len(body))
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            return
        body = behaviour.encoded()
        self._head(behaviour, len(body))
        self.wfile.write(body)

    def _head(self, answer: Reply, length: int) -> None:
        self.send_response(answer.status)
        headers = {"Content-Type": "application/json", **answer.headers}
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(length))
        self.send_header("Connection", "close")
        self.end_headers()
