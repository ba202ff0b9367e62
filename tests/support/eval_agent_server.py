"""An agent under test on loopback: ``POST /run-case`` answered from a script per case.

Each case id may be given a list of behaviours, one per request for that case (the last
one repeats); a case with none gets :func:`good_answer`. Every request is logged (case
id, the JSON sent), so a test can count the tries of each case.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def good_answer(request: dict[str, Any], *, payload_bytes: int = 0) -> dict[str, Any]:
    """A valid answer to ``request``, the same every time for the same case."""
    case_id = request["case_id"]
    payload: Any = {"rows": [case_id]}
    if payload_bytes:
        payload = {"blob": "x" * payload_bytes}
    return {
        "case_id": case_id,
        "version": request["version"],
        "workflow_id": request.get("workflow_id", "wf-1"),
        "proposed_actions": [
            {
                "action_id": "a1",
                "action_type": "write",
                "tool_name": "db.update",
                "params": {"id": case_id},
                "risk_level": "medium",
                "risk_tags": ["writes"],
                "evidence_refs": [
                    {"kind": "tool_result", "call_id": "c1"},
                    {"kind": "retrieval_doc", "doc_id": "d1"},
                    {"kind": "event", "id": "events[0]"},
                ],
            }
        ],
        "final_output": {"content_type": "text", "content": f"done {case_id}"},
        "events": [
            {
                "type": "retrieval",
                "ts": 1000,
                "query": request["input"]["user"],
                "doc_ids": ["d1"],
                "snippets": ["first snippet", "second snippet"],
            },
            {"type": "tool_call", "ts": 1001, "call_id": "c1", "tool": "db.query", "args": {}},
            {
                "type": "tool_result",
                "ts": 1002,
                "call_id": "c1",
                "status": "ok",
                "latency_ms": 3,
                "payload_summary": payload,
            },
            {
                "type": "final_output",
                "ts": 1003,
                "content_type": "text",
                "content": f"done {case_id}",
            },
        ],
    }


@dataclass(frozen=True)
class Reply:
    """An HTTP answer as given: ``body`` bytes, or JSON."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0

    def encoded(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        return json.dumps(self.body).encode("utf-8")


@dataclass(frozen=True)
class Good:
    """The good answer, after ``delay`` seconds, with a tool payload of ``payload_bytes``."""

    delay: float = 0.0
    payload_bytes: int = 0


@dataclass(frozen=True)
class Drop:
    """Close the connection without a word."""


@dataclass(frozen=True)
class Reset:
    """Reset the connection (TCP RST) without a word."""


@dataclass(frozen=True)
class HalfBody:
    """Headers of a ``status`` (200) announcing the whole good answer, half of it, then
    close."""

    status: int = 200


@dataclass(frozen=True)
class CutJSON:
    """A 200 whose body, complete as HTTP sees it, is the first half of the good answer."""


@dataclass(frozen=True)
class Sleep:
    """Answer nothing for ``seconds`` (the runner times out first)."""

    seconds: float


@dataclass(frozen=True)
class OddLength:
    """A 200 with the good answer and ``Content-Length: ²`` (a digit to ``str.isdigit``)."""


@dataclass(frozen=True)
class Drip:
    """A 200 announcing the good answer, sent one byte every ``interval`` seconds (as
    HTTP/1.0, the connection closing after it, when ``close``)."""

    interval: float = 0.05
    close: bool = False


Behaviour = Reply | Good | Drop | Reset | HalfBody | CutJSON | Sleep | OddLength | Drip


class AgentServer:
    """A ``ThreadingHTTPServer`` on 127.0.0.1 (a free port) playing the agent under test."""

    def __init__(self, script: dict[str, list[Behaviour]] | None = None) -> None:
        self.script = dict(script or {})
        self.log: list[str] = []  # case ids, in the order their requests came
        self.bodies: list[dict[str, Any]] = []
        self._count: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.agent = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def tries(self, case_id: str) -> int:
        with self._lock:
            return self.log.count(case_id)

    def take(self, request: dict[str, Any]) -> Behaviour:
        case_id = str(request.get("case_id"))
        with self._lock:
            self.log.append(case_id)
            self.bodies.append(request)
            index = self._count[case_id]
            self._count[case_id] += 1
            plan = self.script.get(case_id) or [Good()]
        return plan[min(index, len(plan) - 1)]

    def __enter__(self) -> AgentServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a runner killed or timed out mid-answer: that is the test


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        agent: AgentServer = self.server.agent  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length", "0"))
        request = json.loads(self.rfile.read(length))
        behaviour = agent.take(request)
        good = json.dumps(good_answer(request)).encode()
        if isinstance(behaviour, Good):
            if behaviour.delay:
                agent.stopping.wait(behaviour.delay)
            body = json.dumps(good_answer(request, payload_bytes=behaviour.payload_bytes))
            self._send(200, body.encode(), "application/json")
        elif isinstance(behaviour, Reply):
            if behaviour.delay:
                agent.stopping.wait(behaviour.delay)
            ctype = behaviour.headers.get("Content-Type", "application/json")
            self._send(behaviour.status, behaviour.encoded(), ctype)
        elif isinstance(behaviour, Sleep):
            agent.stopping.wait(behaviour.seconds)
            self.close_connection = True
        elif isinstance(behaviour, Drop):
            self.close_connection = True
        elif isinstance(behaviour, Reset):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
        elif isinstance(behaviour, HalfBody):
            self.send_response(behaviour.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(good)))
            self.end_headers()
            self.wfile.write(good[: len(good) // 2])
            self.wfile.flush()
            time.sleep(0.01)
            self.close_connection = True
        elif isinstance(behaviour, CutJSON):
            self._send(200, good[: len(good) // 2], "application/json")
        elif isinstance(behaviour, Drip):
            if behaviour.close:
                self.protocol_version = "HTTP/1.0"
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(good)))
            self.end_headers()
            self.wfile.flush()
            for index in range(len(good)):
                if agent.stopping.wait(behaviour.interval):
                    break
                self.wfile.write(good[index : index + 1])
                self.wfile.flush()
            self.close_connection = True
        elif isinstance(behaviour, OddLength):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "\u00b2")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(good)
            self.close_connection = True

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
