"""One writer process for tests/storage/test_ndjson.py: appends worklog entries to a shared file.

    python ndjson_writer_process.py PATH WRITER COUNT [--durable] [--start-fd FD]
                                    [--first-size N] [--file-size-limit BYTES]

Each entry is a task board worklog entry whose ``x_writer`` and ``x_seq`` say who wrote it
and in which order; its length varies with the sequence number, and every 97th entry is
several kilobytes, so one write is larger than a page and than ``PIPE_BUF``. With
``--start-fd`` the process reads that pipe until EOF before its first append, so the
test can release every writer at once. ``--first-size`` pads the first entry to about
N bytes. ``--file-size-limit`` sets ``RLIMIT_FSIZE`` just before appending, which makes
the kernel stop a write short at that file size (a real partial write); combined with
``ORCHESTRATOR_CRASH_AT`` the crash hook then kills the process mid-line.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
from pathlib import Path

from orchestrator.storage.ndjson import append_lines

_FILLER = "abcdefghijklmnopqrstuvwxyz0123456789 "


def worklog_line(writer: int, seq: int, *, size: int | None = None) -> bytes:
    """One worklog entry as a JSON line; its length depends on ``seq`` (or is ``size``)."""
    if size is None:
        size = 6000 + (seq * 131) % 6000 if seq % 97 == 0 else 40 + (seq * 37 + writer) % 400
    entry = {
        "timestamp": f"2025-01-01T00:00:{seq % 60:02d}Z",
        "run_id": "run-ndjson",
        "task_id": f"T-{writer}",
        "actor": f"writer-{writer}",
        "action": "append",
        "files_touched": [f"src/w{writer}/file{seq % 7}.py"],
        "decision": (_FILLER * (size // len(_FILLER) + 1))[:size],
        "result": "ok",
        "next_step": "continue",
        "x_writer": writer,
        "x_seq": seq,
    }
    return json.dumps(entry, separators=(",", ":")).encode() + b"\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("path", type=Path)
    parser.add_argument("writer", type=int)
    parser.add_argument("count", type=int)
    parser.add_argument("--durable", action="store_true")
    parser.add_argument("--start-fd", type=int)
    parser.add_argument("--first-size", type=int)
    parser.add_argument("--file-size-limit", type=int)
    args = parser.parse_args()
    lines = [
        worklog_line(args.writer, seq, size=args.first_size if seq == 0 else None)
        for seq in range(args.count)
    ]
    if args.start_fd is not None:
        while os.read(args.start_fd, 4096):
            pass
    if args.file_size_limit is not None:
        hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
        resource.setrlimit(resource.RLIMIT_FSIZE, (args.file_size_limit, hard))
    for line in lines:
        append_lines(args.path, [line], durable=args.durable)


if __name__ == "__main__":
    main()
