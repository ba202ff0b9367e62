"""A small offline support agent on loopback, in two versions, for the regression example.

``POST /run-case`` with ``{"case_id", "version", "input": {"user"}}`` answers as the agent
artifact contract's successful response (``proposed_actions``, ``events``,
``final_output``). The ``new`` version differs from the ``baseline`` on purpose:

- ``refund``: the new agent forgets to approve the refund and emails the customer
  instead (a regression against the case's ``expected``);
- ``close-account``: the baseline proposes deleting the account (high risk); the new one
  only reads it (a fix: improved);
- ``order-status``: the baseline answers half a JSON document; the new one answers (fixed);
- ``crash``: the new agent fails with a 500 and a large HTML stack trace;
- ``report``: both return a large tool payload, which the runner keeps in ``assets/``;
- ``slow``: both take longer than the runner waits (a timeout on both sides);
- ``hang-up``: the new agent drops the connection without answering;
- ``greeting``: the same in both.

Usage: ``python agent_server.py PORT_FILE`` serves on a free port and writes it to
PORT_FILE once listening; it stops on SIGTERM. Standard library only.
"""

from __future__ import annotations

import json
import signal
import socket
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

T0 = 1764160000000
SLOW_SECONDS = 3.0


def lookup_events(query: str, payload: Any) -> list[dict[str, Any]]:
    return [
        {"type": "retrieval", "ts": T0, "query": query, "doc_ids": ["policy-7"]},
        {
            "type": "tool_call",
            "ts": T0 + 5,
            "call_id": "call-1",
            "action_id": "a1",
            "tool": "orders.lookup",
            "args": {"order": "A-17"},
        },
        {
            "type": "tool_result",
            "ts": T0 + 20,
            "call_id": "call-1",
            "action_id": "a1",
            "status": "ok",
            "latency_ms": 15,
            "payload_summary": payload,
        },
        {"type": "agent_thought", "ts": T0 + 21, "text": "a type v1 does not know"},
    ]


def action(action_id: str, tool: str, risk: str, **params: Any) -> dict[str, Any]:
    return {
        "action_id": action_id,
        "action_type": "tool_call",
        "tool_name": tool,
        "params": params,
        "risk_level": risk,
        "risk_tags": ["writes"] if risk != "low" else [],
        "evidence_refs": [
            {"kind": "tool_result", "call_id": "call-1"},
            {"kind": "retrieval_doc", "doc_id": "policy-7"},
        ],
    }


def answer(case_id: str, version: str, user: str) -> dict[str, Any]:
    """The answer of ``version`` to a case that gets one."""
    new = version == "new"
    payload: Any = {"order": "A-17", "state": "shipped"}
    actions = [action("a1", "orders.lookup", "low", order="A-17")]
    text = "Hello! How can I help?"
    if case_id == "refund":
        if new:
            text = "We looked into your order.\nThanks for waiting."
            actions.append(action("a2", "email.send", "medium", to="customer"))
        else:
            text = "Refund approved: 30 EUR back to your card.\nThanks for waiting."
            actions.append(action("a2", "refunds.create", "low", amount=30))
    elif case_id == "close-account":
        text = "Your account is closed." if not new else "Your account is kept; see the steps."
        tool, risk = ("accounts.read", "low") if new else ("accounts.delete", "high")
        actions = [action("a1", tool, risk, account="u-9")]
    elif case_id == "order-status":
        text = "Order A-17 ships tomorrow."
    elif case_id == "report":
        payload = {"rows": [{"order": f"A-{n}", "total": n * 3} for n in range(6000)]}
        text = "The quarterly report is ready."
    elif case_id == "crash":
        text = "Everything is fine."
    content: Any = text
    if case_id == "close-account":
        content = {"answer": text, "steps": 2 if new else 1}
    final = {"content_type": "json" if isinstance(content, dict) else "text", "content": content}
    return {
        "case_id": case_id,
        "version": version,
        "proposed_actions": actions,
        "events": [*lookup_events(user, payload), {"type": "final_output", "ts": T0 + 30, **final}],
        "final_output": final,
    }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the runner reports
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        request = json.loads(self.rfile.read(length))
        case_id, version = request["case_id"], request["version"]
        new = version == "new"
        if case_id == "crash" and new:
            trace = "".join(f"<p>  at frame {n} (agent/core.py:{n})</p>" for n in range(4000))
            body = f"<html><body><h1>500 Internal Server Error</h1>{trace}</body></html>"
            return self._send(500, body.encode(), "text/html")
        if case_id == "order-status" and not new:
            return self._send(200, b'{"case_id": "order-status", "final_output": {"cont', None)
        if case_id == "slow":
            time.sleep(SLOW_SECONDS)
        if case_id == "hang-up" and new:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return None
        body = json.dumps(answer(case_id, version, request["input"]["user"])).encode()
        return self._send(200, body, "application/json")

    def _send(self, status: int, body: bytes, content_type: str | None) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type or "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the runner gave up waiting (the slow case): nothing to tell it


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    port_file = Path(sys.argv[1])
    port_file.with_suffix(".tmp").write_text(str(server.server_address[1]))
    port_file.with_suffix(".tmp").rename(port_file)
    try:
        server.serve_forever()
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
