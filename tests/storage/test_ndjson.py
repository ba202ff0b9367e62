"""Append-only JSON-lines files: several real writer processes, kill -9 mid-write, readers.

The writers are separate processes (``tests/support/ndjson_writer_process.py``) released together
through a pipe, so they contend for the file from their first append. Crashes are real:
``RLIMIT_FSIZE`` makes the kernel stop a write short, and the crash hook
(``ORCHESTRATOR_CRASH_AT``) SIGKILLs the writer between the two halves of its line.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator._errors import ContractError, UntrustedJSONError, UsageError
from orchestrator.storage import ndjson as _ndjson
from orchestrator.storage.ndjson import (
    append_joined_lines,
    append_lines,
    iter_lines,
    iter_lines_from,
    iter_records,
    iter_records_from,
)
from support.ndjson_writer_process import worklog_line

WRITER = Path(__file__).parents[1] / "support" / "ndjson_writer_process.py"
WRITERS = 8
RUN_TIMEOUT = 600


def writer_env(*, crash_at: int | None = None, crash_log: Path | None = None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ORCHESTRATOR_CRASH_AT", "ORCHESTRATOR_CRASH_LOG")
    }
    if crash_at is not None:
        assert crash_log is not None
        env["ORCHESTRATOR_CRASH_AT"] = str(crash_at)
        env["ORCHESTRATOR_CRASH_LOG"] = str(crash_log)
    return env


def run_writer(
    path: Path,
    writer: int,
    count: int,
    *extra: str,
    crash_at: int | None = None,
    crash_log: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(WRITER), str(path), str(writer), str(count), *extra],
        env=writer_env(crash_at=crash_at, crash_log=crash_log),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )


# --- several writers --------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("durable", "count"),
    [
        pytest.param(False, 10_000, id="8x10000"),
        pytest.param(True, 500, id="8x500-durable"),
        pytest.param(
            True, 10_000, id="8x10000-durable", marks=[pytest.mark.slow, pytest.mark.soak]
        ),
    ],
)
def test_concurrent_writers_never_lose_split_or_reorder_a_line(
    tmp_path: Path, durable: bool, count: int
) -> None:
    path = tmp_path / "worklogs" / "shared.jsonl"
    path.parent.mkdir()
    start_read, start_write = os.pipe()
    command = [sys.executable, str(WRITER), str(path)]
    options = ["--start-fd", str(start_read), *(["--durable"] if durable else [])]
    try:
        writers = [
            subprocess.Popen(
                [*command, str(writer), str(count), *options],
                env=writer_env(),
                pass_fds=(start_read,),
                stderr=subprocess.PIPE,
            )
            for writer in range(WRITERS)
        ]
    finally:
        os.close(start_read)
        os.close(start_write)  # EOF on the pipe releases every writer at once
    for writer in writers:
        _, stderr = writer.communicate(timeout=RUN_TIMEOUT)
        assert writer.returncode == 0, stderr.decode()

    seen: list[list[int]] = [[] for _ in range(WRITERS)]
    lines = iter_lines(path)
    for (number, record), (line_number, line) in zip(iter_records(path), lines, strict=False):
        assert number == line_number
        who, seq = record["x_writer"], record["x_seq"]
        assert line + b"\n" == worklog_line(who, seq), f"line {number} was altered"
        seen[who].append(seq)
    assert next(lines, None) is None
    # Exactly once each, in each writer's own order, and nothing else in the file.
    assert seen == [list(range(count))] * WRITERS
    data = path.read_bytes()
    assert data.endswith(b"\n")
    assert data.count(b"\n") == WRITERS * count


# --- torn tails ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "torn",
    [b'{"partial": "no newl', b"x" * 200_000, b"\xe2\x82"],
    ids=["short", "longer-than-a-scan-block", "half-a-utf8-character"],
)
def test_append_cuts_a_torn_tail_before_writing(tmp_path: Path, torn: bytes) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"a":1}\n' + torn)
    append_lines(path, [b'{"b":2}\n'])
    assert path.read_bytes() == b'{"a":1}\n{"b":2}\n'


def test_append_to_a_file_holding_only_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"first": "torn')
    assert list(iter_lines(path)) == []
    append_lines(path, [b'{"b":2}\n'])
    assert path.read_bytes() == b'{"b":2}\n'


def test_writer_killed_in_the_middle_of_a_large_write(tmp_path: Path) -> None:
    path = tmp_path / "shared.jsonl"
    assert run_writer(path, 0, 3).returncode == 0
    before = path.read_bytes()
    crash_log = tmp_path / "crash.log"
    # Points: 1 before-append, 2 mid-append (reached only because the write came up short).
    limit = len(before) + 300_000
    proc = run_writer(
        path,
        1,
        1,
        "--first-size",
        "1000000",
        "--file-size-limit",
        str(limit),
        crash_at=2,
        crash_log=crash_log,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert crash_log.read_text() == "2 mid-append shared.jsonl\n"
    torn = path.read_bytes()
    assert len(torn) == limit and torn.startswith(before)  # 300,000 bytes of a 1 MB line
    assert [line for _, line in iter_lines(path)] == before.splitlines()

    assert run_writer(path, 2, 2).returncode == 0
    after = path.read_bytes()
    assert after == before + worklog_line(2, 0) + worklog_line(2, 1)
    assert [record["x_writer"] for _, record in iter_records(path)] == [0, 0, 0, 2, 2]


def test_writer_killed_between_write_and_sync_leaves_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "shared.jsonl"
    crash_log = tmp_path / "crash.log"
    proc = run_writer(path, 0, 3, crash_at=4, crash_log=crash_log)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    # Each append has two points (no short write): the 4th is the 2nd line's sync.
    assert crash_log.read_text() == "4 before-fsync shared.jsonl\n"
    assert path.read_bytes() == worklog_line(0, 0) + worklog_line(0, 1)
    assert run_writer(path, 1, 1).returncode == 0
    assert [r["x_seq"] for _, r in iter_records(path)] == [0, 1, 0]


def test_a_failed_write_is_cut_back_and_reported(tmp_path: Path) -> None:
    path = tmp_path / "shared.jsonl"
    assert run_writer(path, 0, 2).returncode == 0
    before = path.read_bytes()
    # No crash hook: the short write is followed by one that fails with EFBIG (Python
    # ignores SIGXFSZ), and the writer removes the part it had written.
    proc = run_writer(
        path, 1, 1, "--first-size", "100000", "--file-size-limit", str(len(before) + 5000)
    )
    assert proc.returncode == 1
    assert "File too large" in proc.stderr
    assert path.read_bytes() == before


# --- reading ------------------------------------------------------------------------------


def test_reader_skips_blank_lines_and_ignores_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "events.ndjson"
    path.write_bytes(b'{"n":1}\n\n   \n{"n":2}\r\n\t\r\n{"n":3}\n{"n":')
    assert list(iter_lines(path)) == [(1, b'{"n":1}'), (4, b'{"n":2}\r'), (6, b'{"n":3}')]
    assert list(iter_records(path)) == [(1, {"n": 1}), (4, {"n": 2}), (6, {"n": 3})]


def test_a_reader_never_glues_a_torn_tail_to_the_line_written_over_it(tmp_path: Path) -> None:
    path = tmp_path / "events.ndjson"
    path.write_bytes(b'{"n":1}\n["torn by a dead writer", 1, 2')
    with mock.patch.object(_ndjson, "_READ_CHUNK", 12):
        lines = iter_lines(path)
        # The reader has now seen the first bytes of the torn tail...
        assert next(lines) == (1, b'{"n":1}')
        # ...which a writer cuts before appending, while the reader is paused.
        append_lines(path, [b'{"n":2,"pad":"longer than the torn part"}\n', b'{"n":3}\n'])
        assert list(lines) == [(2, b'{"n":2,"pad":"longer than the torn part"}'), (3, b'{"n":3}')]


def test_reader_of_an_empty_file_yields_nothing(tmp_path: Path) -> None:
    path = tmp_path / "events.ndjson"
    path.write_bytes(b"")
    assert list(iter_records(path)) == []


def test_a_line_of_several_megabytes_reads_back_whole(tmp_path: Path) -> None:
    path = tmp_path / "events.ndjson"
    big = json.dumps({"event": "tool.result", "data": {"out": "y" * 5_000_000}}).encode()
    append_lines(path, [b'{"n":1}\n', big + b"\n", b'{"n":3}\n'])
    lines = list(iter_lines(path))
    assert [number for number, _ in lines] == [1, 2, 3]
    assert lines[1][1] == big
    records = list(iter_records(path))
    assert records[1][1]["data"]["out"] == "y" * 5_000_000


def test_a_bad_line_is_named_by_file_and_line_number(tmp_path: Path) -> None:
    path = tmp_path / "T-1.jsonl"
    path.write_bytes(b'{"a":1}\n\n{"a": }\n{"a":2}\n')
    records = iter_records(path, source="worklogs/T-1.jsonl")
    assert next(records) == (1, {"a": 1})
    with pytest.raises(UntrustedJSONError) as caught:
        next(records)
    assert caught.value.source == "worklogs/T-1.jsonl line 3"
    assert caught.value.rule == "syntax"
    assert str(caught.value) == (
        "worklogs/T-1.jsonl line 3: invalid JSON at column 7: Expecting value"
    )


def test_other_strict_json_rules_name_the_line_and_the_json_path(tmp_path: Path) -> None:
    path = tmp_path / "T-1.jsonl"
    path.write_bytes(b'{"a":1}\n{"a":{"b":1,"b":2}}\n')
    with pytest.raises(UntrustedJSONError) as caught:
        list(iter_records(path))
    assert caught.value.source == f"{path} line 2"
    assert (caught.value.rule, caught.value.json_path) == ("duplicate-key", "$.a")


@pytest.mark.parametrize("size", [3_000_000, 101], ids=["spans-chunks", "within-a-chunk"])
def test_a_line_over_the_limit_is_refused_with_its_number(tmp_path: Path, size: int) -> None:
    path = tmp_path / "events.ndjson"
    limit = size - 1
    path.write_bytes(b'{"n":1}\n' + b"x" * (limit - 10) + b"\n" + b"y" * size + b"\n")
    lines = iter_lines(path, source="events.ndjson", max_line_bytes=limit)
    assert [number for number, _ in (next(lines), next(lines))] == [1, 2]
    with pytest.raises(UntrustedJSONError) as caught:
        next(lines)
    assert caught.value.source == "events.ndjson line 3"
    assert caught.value.rule == "too-large"
    assert f"longer than the limit of {limit} bytes" in str(caught.value)


def test_reader_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    target = tmp_path / "real.jsonl"
    target.write_bytes(b"{}\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    with pytest.raises(ContractError) as caught:
        list(iter_lines(link))
    assert caught.value.rule == "symlink"
    with pytest.raises(ContractError) as caught:
        append_lines(link, [b"{}\n"])
    assert caught.value.rule == "symlink"
    assert target.read_bytes() == b"{}\n"
    with pytest.raises(ContractError) as caught:
        list(iter_lines(tmp_path))
    assert caught.value.rule == "not-a-file"
    with pytest.raises(FileNotFoundError):
        list(iter_lines(tmp_path / "missing.jsonl"))


# --- resuming at an offset ----------------------------------------------------------------


def test_resume_from_the_offset_after_the_last_line_read(tmp_path: Path) -> None:
    path = tmp_path / "ledger.ndjson"
    append_lines(path, [b'{"x_seq":1}\n', b"\n", b'{"x_seq":2}\n'])
    first = list(iter_records_from(path, 0))
    assert first == [(12, {"x_seq": 1}), (25, {"x_seq": 2})]
    offset = first[-1][0]
    assert list(iter_lines_from(path, offset)) == []

    with path.open("ab") as torn:
        torn.write(b'{"x_seq":')  # a writer killed mid-line: not read, and cut later
    assert list(iter_lines_from(path, offset)) == []
    append_lines(path, [b'{"x_seq":3}\n'])
    assert list(iter_records_from(path, offset)) == [(37, {"x_seq": 3})]
    assert path.stat().st_size == 37


def test_an_offset_that_is_not_a_line_start_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ledger.ndjson"
    append_lines(path, [b'{"x_seq":1}\n', b'{"x_seq":2}\n'])
    for offset in (5, 25, -1):
        with pytest.raises(ContractError) as caught:
            list(iter_lines_from(path, offset, source="ledger.ndjson"))
        assert caught.value.rule == "offset"
        assert caught.value.source == "ledger.ndjson"
        assert "read it from the start" in str(caught.value)


def test_errors_after_an_offset_name_the_byte_where_the_line_starts(tmp_path: Path) -> None:
    path = tmp_path / "ledger.ndjson"
    path.write_bytes(b'{"x_seq":1}\n{"x_seq":2}\n{"x_seq": }\n')
    records = iter_records_from(path, 12, source="ledger.ndjson")
    assert next(records) == (24, {"x_seq": 2})
    with pytest.raises(UntrustedJSONError) as caught:
        next(records)
    assert caught.value.source == "ledger.ndjson line at byte 24"


@given(
    batches=st.lists(
        st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=5),
        max_size=6,
    ),
    torn=st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")),
    chunk=st.integers(min_value=1, max_value=50),
)
def test_lines_read_back_as_appended_whatever_the_chunk_size(
    batches: list[list[bytes]], torn: bytes, chunk: int
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "log.jsonl"
        path.write_bytes(b"")
        written: list[bytes] = []
        for batch in batches:
            append_lines(path, [line + b"\n" for line in batch], durable=False)
            written.extend(batch)
        with path.open("ab") as tail:
            tail.write(torn)
        numbered = [(n, line) for n, line in enumerate(written, 1) if line.strip(b" \t\r")]
        ends: list[int] = []
        end = 0
        for line in written:
            end += len(line) + 1
            if line.strip(b" \t\r"):
                ends.append(end)
        with mock.patch.object(_ndjson, "_READ_CHUNK", chunk):
            assert list(iter_lines(path)) == numbered
            assert list(iter_lines_from(path, 0)) == list(
                zip(ends, [line for _, line in numbered], strict=True)
            )


# --- bad input to append_lines ------------------------------------------------------------


@pytest.mark.parametrize(
    ("lines", "words"),
    [
        ([b'{"a":1}\n', b'{"a":\n2}\n'], "item 1 of the 2 lines to append holds a newline"),
        ([b'{"a":1}'], "item 0 of the 1 line to append does not end with a newline"),
        ([b'{"a":1}\n', b""], "item 1 of the 2 lines to append does not end with a newline"),
    ],
    ids=["inner-newline", "no-final-newline", "empty-item"],
)
def test_bad_lines_are_refused_and_nothing_is_written(
    tmp_path: Path, lines: list[bytes], words: str
) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"old":1}\n{"torn')
    with pytest.raises(UsageError, match=words) as caught:
        append_lines(path, lines)
    assert isinstance(caught.value, ValueError)
    assert path.read_bytes() == b'{"old":1}\n{"torn'
    missing = tmp_path / "missing.jsonl"
    with pytest.raises(ValueError):
        append_lines(missing, lines)
    assert not missing.exists()


def test_one_bytes_object_is_not_a_sequence_of_lines(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    with pytest.raises(UsageError, match=r"pass \[line\]"):
        append_lines(path, b'{"a":1}\n')  # type: ignore[arg-type]
    assert not path.exists()


def test_nothing_to_append_touches_nothing(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    append_lines(path, [])
    append_joined_lines(path, b"")
    assert not path.exists()


def test_joined_lines_must_end_with_a_newline(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    append_joined_lines(path, b'{"a":1}\n{"a":2}\n')
    with pytest.raises(UsageError, match="does not end with a newline"):
        append_joined_lines(path, b'{"a":3}\n{"a":4}')
    assert [record for _, record in iter_records(path)] == [{"a": 1}, {"a": 2}]
