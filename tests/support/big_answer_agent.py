"""An agent under test whose answer is huge, streamed as it is made, never held whole.

``python big_answer_agent.py http PORT_FILE SIZE``: serves ``POST /run-case`` on loopback
(its port written to PORT_FILE), answering SIZE bytes of one long JSON string with a
Content-Length, in 1 MiB pieces; a client that stops reading ends the answer.
``python big_answer_agent.py command SIZE``: writes the same SIZE bytes to stdout.
``python big_answer_agent.py valid SIZE``: writes a valid answer of about SIZE bytes to
stdout, nearly all of it one tool result's payload.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PIECE = 1 << 20


def pieces(size: int) -> Iterator[bytes]:
    """``{"case_id": "x" ... `` up to ``size`` bytes: an answer that never ends in time."""
    head = b'{"case_id": "'
    yield head
    left = size - len(head)
    block = b"x" * PIECE
    while left > 0:
        yield block[: min(PIECE, left)]
        left -= PIECE


def stream(size: int, write: Callable[[bytes], object]) -> None:
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        for piece in pieces(size):
            write(piece)


def serve(port_file: Path, size: int) -> None:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            stream(size, self.wfile.write)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    temporary = port_file.with_suffix(".part")
    temporary.write_text(str(server.server_address[1]), encoding="utf-8")
    temporary.replace(port_file)
    server.serve_forever()


def valid(size: int, write: Callable[[bytes], object]) -> None:
    request = json.loads(sys.stdin.buffer.read())
    answer = {
        "case_id": request["case_id"],
        "version": request["version"],
        "proposed_actions": [],
        "final_output": {"content_type": "text", "content": "done"},
        "events": [
            {"type": "tool_result", "ts": 1, "call_id": "c1", "status": "ok", "latency_ms": 1,
             "payload_summary": "@"},
        ],
    }  # fmt: skip
    before, after = json.dumps(answer).encode().split(b"@")
    write(before)
    left = size - len(before) - len(after)
    while left > 0:
        write(b"y" * min(PIECE, left))
        left -= PIECE
    write(after)


def main(argv: list[str]) -> None:
    if argv[0] == "http":
        serve(Path(argv[1]), int(argv[2]))
    elif argv[0] == "valid":
        valid(int(argv[1]), sys.stdout.buffer.write)
    else:
        sys.stdin.buffer.read()
        stream(int(argv[1]), sys.stdout.buffer.write)


if __name__ == "__main__":
    main(sys.argv[1:])
