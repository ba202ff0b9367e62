"""Shared helpers for test_bad_input.py and test_nondeterminism.py.

Everything here drives real ``python -m orchestrator`` processes against real files in a
temporary work directory; nothing is mocked. The workflow is ``tiny`` from
``tests/fixtures/bad_input/wf.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from support.cli import child_env, command, orchestrate

TESTS = Path(__file__).resolve().parents[1]
FIXTURES = TESTS / "fixtures" / "bad_input"
WORKFLOW_FILE = FIXTURES / "wf.py"
STATE_FILE = ".tiny-state.json"
REQUEST_FILE = ".agent-request.json"
RESPONSE_FILE = ".agent-response.json"

# Generous bounds for a process that should finish in well under a second: they only
# exist so that a hang fails the test instead of the whole session.
PROCESS_TIMEOUT = 30


def describe(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\nstdout: {result.stdout!r}\nstderr: {result.stderr!r}"


def assert_one_line_error(stderr: str, *fragments: str) -> str:
    """The refusal is one line, ``orchestrate: error: ...``, no traceback, holding ``fragments``."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{stderr}"
    line = lines[0]
    assert line.startswith("orchestrate: error: "), line
    for fragment in fragments:
        assert fragment in line, f"{fragment!r} not in {line!r}"
    return line


class Instance:
    """One ``tiny`` instance in ``workdir``; its output (answer.txt, steps.log) in ``output``."""

    def __init__(self, workdir: Path, output: Path, workflow_file: Path) -> None:
        self.workdir = workdir
        self.output = output
        self.workflow_file = workflow_file

    @property
    def state_path(self) -> Path:
        return self.workdir / STATE_FILE

    @property
    def request_path(self) -> Path:
        return self.workdir / REQUEST_FILE

    @property
    def response_path(self) -> Path:
        return self.workdir / RESPONSE_FILE

    def state_bytes(self) -> bytes:
        return self.state_path.read_bytes()

    def state(self) -> dict[str, Any]:
        return json.loads(self.state_bytes())  # type: ignore[no-any-return]

    def engine_record(self) -> dict[str, Any]:
        return self.state()["phase_data"]["x_orchestrator"]  # type: ignore[no-any-return]

    def request(self) -> dict[str, Any]:
        return json.loads(self.request_path.read_bytes())  # type: ignore[no-any-return]

    def steps(self) -> list[str]:
        """Every step function that really ran, in order (the workflow logs each one)."""
        log = self.output / "steps.log"
        return log.read_text(encoding="utf-8").splitlines() if log.exists() else []

    def answer(self) -> str:
        return (self.output / "answer.txt").read_text(encoding="utf-8")

    def resume(self) -> subprocess.CompletedProcess[str]:
        return orchestrate("resume", "--workdir", self.workdir)

    def respond(self, text: str) -> subprocess.CompletedProcess[str]:
        return orchestrate("respond", "--workdir", self.workdir, "--text", text)

    def answer_and_resume(self, text: str, *, expect: int = 0) -> subprocess.CompletedProcess[str]:
        """Answer the pending request the ordinary way and resume; assert the exit code."""
        responded = self.respond(text)
        assert responded.returncode == 0, describe(responded)
        resumed = self.resume()
        assert resumed.returncode == expect, describe(resumed)
        return resumed

    def history(self) -> list[dict[str, Any]]:
        """The state files of finished runs (``.orchestrator/runs/<run_id>/state.json``)."""
        runs = sorted((self.workdir / ".orchestrator" / "runs").glob("*/state.json"))
        return [json.loads(p.read_bytes()) for p in runs]


def start(
    tmp_path: Path,
    *,
    topic: str = "owls",
    workflow_file: Path = WORKFLOW_FILE,
    **inputs: str,
) -> Instance:
    """``orchestrate run wf.py:Tiny`` in a fresh work directory; asserts it paused (42)."""
    workdir = (tmp_path / "work").resolve()
    output = (tmp_path / "out").resolve()
    workdir.mkdir()
    args: list[object] = [
        "run",
        f"{workflow_file}:Tiny",
        "--workdir",
        workdir,
        "--output",
        output,
        "--input",
        f"topic={topic}",
    ]
    for key, value in inputs.items():
        args += ["--input", f"{key}={value}"]
    result = orchestrate(*args, cwd=tmp_path)
    assert result.returncode == 42, describe(result)
    assert result.stdout.strip() == str(workdir / REQUEST_FILE), describe(result)
    instance = Instance(workdir, output, workflow_file)
    assert instance.request()["agent_name"] == "writer"
    return instance


def response_document(
    request_id: str, text: str = "Owls hunt at night.", **fields: Any
) -> dict[str, Any]:
    """A valid success response for ``request_id``; ``fields`` override or add keys."""
    document: dict[str, Any] = {
        "request_id": request_id,
        "version": "1.0",
        "status": "success",
        "created_at": "2025-11-18T10:31:00Z",
        "response": text,
    }
    document.update(fields)
    return document


def response_bytes(request_id: str, text: str = "Owls hunt at night.", **fields: Any) -> bytes:
    return json.dumps(response_document(request_id, text, **fields), indent=2).encode("utf-8")


def fresh_uuid() -> str:
    return str(uuid.uuid4())


# -- FIFO handshakes with a blocked orchestrate process ------------------------------------


def read_fifo(
    path: Path, process: subprocess.Popen[str], *, timeout: float = PROCESS_TIMEOUT
) -> str:
    """Open the FIFO ``path`` for reading and return what ``process`` writes into it.

    The open blocks until ``process`` opens the other end: that is the event the test
    waits for. If ``process`` exits first, or ``timeout`` passes, the test fails instead of
    hanging.
    """

    def read() -> str:
        with open(path, encoding="ascii") as fifo:
            return fifo.read()

    return str(_fifo_call(read, path, process, timeout=timeout, unblock=os.O_WRONLY))


def write_fifo(
    path: Path, text: str, process: subprocess.Popen[str], *, timeout: float = PROCESS_TIMEOUT
) -> None:
    """Open the FIFO ``path`` for writing (waits until ``process`` reads it); send ``text``."""

    def write() -> None:
        with open(path, "w", encoding="ascii") as fifo:
            fifo.write(text)

    _fifo_call(write, path, process, timeout=timeout, unblock=os.O_RDONLY)


def _fifo_call(
    action: Any, path: Path, process: subprocess.Popen[str], *, timeout: float, unblock: int
) -> Any:
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = action()
        except BaseException as exc:  # reported by the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    waited = 0.0
    # Joined in short slices only to notice promptly a process that died instead of
    # reaching the FIFO; the wake-up itself is the blocking open() returning.
    while thread.is_alive() and waited < timeout and process.poll() is None:
        thread.join(0.05)
        waited += 0.05
    thread.join(1.0)  # the process may have opened the FIFO and exited in the same slice
    if thread.is_alive():
        with suppress(OSError):  # open the other end ourselves so the thread can finish
            os.close(os.open(path, unblock | os.O_NONBLOCK))
        thread.join(5)
        raise AssertionError(f"{process.args} never opened {path} (exit {process.poll()})")
    if "error" in box:
        raise box["error"]
    return box.get("value")


@contextmanager
def running(*args: object) -> Iterator[subprocess.Popen[str]]:
    """Start ``orchestrate ARGS`` in the background; on the way out make sure it is gone."""
    process = subprocess.Popen(
        command(*args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
        cwd=FIXTURES,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=PROCESS_TIMEOUT)


def run_measured(*args: object) -> tuple[subprocess.CompletedProcess[str], int]:
    """Run ``orchestrate ARGS``; return what it did and its own peak resident set, in bytes.

    ``os.wait4`` reports the rusage of exactly this child (``RUSAGE_CHILDREN`` would mix
    in every child the test session ever had).
    """
    with subprocess.Popen(
        command(*args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
        cwd=FIXTURES,
    ) as process:
        # The output is a line or two: it fits in the pipe, so reading after the exit is safe.
        watchdog = threading.Timer(PROCESS_TIMEOUT, process.kill)  # a hang fails, not blocks
        watchdog.start()
        try:
            _, status, usage = os.wait4(process.pid, 0)
        finally:
            watchdog.cancel()
        process.returncode = os.waitstatus_to_exitcode(status)
        assert process.stdout is not None and process.stderr is not None
        stdout, stderr = process.stdout.read(), process.stderr.read()
    scale = 1 if sys.platform == "darwin" else 1024  # Linux reports kilobytes
    result = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    return result, usage.ru_maxrss * scale
