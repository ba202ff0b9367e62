"""The subprocess invoker: each agent call runs a real command line, prompt on stdin.

The command is anything with a non-interactive mode that reads a prompt on stdin and
prints its answer on stdout (a coding agent's ``-p`` mode, a script around an API). The
prompt never goes into the command line, and neither prompt nor answer is written
anywhere but the child's pipes.

The child runs in a session of its own, so that on a timeout (or an answer past the size
cap, or an interrupt) ``os.killpg`` ends everything it started: a shell's children would
otherwise keep the pipes open. POSIX only.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import selectors
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from .._errors import AgentInvocationError, UntrustedJSONError, UsageError
from .._ports import AgentAnswer
from ..formats.strict_json import loads_strict

__all__ = ["DEFAULT_MAX_OUTPUT_BYTES", "SubprocessInvoker", "run_command"]

DEFAULT_MAX_OUTPUT_BYTES = 16 * 1024 * 1024
#: characters of stderr quoted in a failure message: enough to see why, never all of it
STDERR_TAIL_CHARS = 2000
_READ_CHUNK = 64 * 1024
#: once the child has exited, how long processes it left behind may keep its pipes open
#: before what it printed counts as its whole answer (they are killed then)
EXIT_GRACE_SECONDS = 0.25
_FENCED = re.compile(r"```[ \t]*(json)?[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)

_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")

Command = Sequence[str] | str
Expect = Literal["text", "json"]


class SubprocessInvoker:
    """An :class:`~orchestrator.AgentInvoker` that runs a command for each agent call.

    ``command`` runs for every agent without an entry in ``commands`` (agent name ->
    command); with neither, the call fails ``AGENT_NOT_FOUND``. A ``str`` command runs
    through ``/bin/sh``; a sequence is the argv, run directly.

    The child gets the prompt on stdin (UTF-8) and answers on stdout. Its environment is
    this process's, then ``env``, then ``ORCHESTRATOR_AGENT_NAME``,
    ``ORCHESTRATOR_TIMEOUT_SECONDS`` and, when the call has a context,
    ``ORCHESTRATOR_CONTEXT`` (JSON). ``timeout_seconds`` caps each request's own timeout.

    ``expect="json"`` requires the answer to be one JSON document, or to hold one in a
    fenced ```` ```json ```` block, which is then the answer text; ``expects`` sets it
    per agent, as ``commands`` does the command. The answer is an
    :class:`~orchestrator.AgentAnswer` with the facts ``exit_code``, ``duration_ms`` and
    ``command`` (the program's name, never its arguments).
    """

    def __init__(
        self,
        command: Command | None = None,
        *,
        commands: Mapping[str, Command] | None = None,
        expect: Expect = "text",
        expects: Mapping[str, Expect] | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        timeout_seconds: float | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        for name, value in {"expect": expect, **(expects or {})}.items():
            if value not in ("text", "json"):
                raise UsageError(f"expect for {name!r} must be 'text' or 'json', not {value!r}")
        if command is None and not commands:
            raise UsageError("SubprocessInvoker needs a command, or commands for some agents")
        if max_output_bytes < 1:
            raise UsageError(f"max_output_bytes must be at least 1, not {max_output_bytes}")
        if timeout_seconds is not None and timeout_seconds <= 0:
            raise UsageError(f"timeout_seconds must be positive, not {timeout_seconds}")
        self.command = None if command is None else _checked(command, "command")
        self.commands = {
            name: _checked(value, f"commands[{name!r}]") for name, value in (commands or {}).items()
        }
        self.expect = expect
        self.expects = dict(expects or {})
        self.env = dict(env or {})
        self.cwd = cwd
        self.max_output_bytes = max_output_bytes
        self.timeout_seconds = timeout_seconds
        #: measures ``duration_ms`` only; deadlines always use the real monotonic clock
        self.monotonic = monotonic

    def invoke(
        self, agent_name: str, prompt: str, timeout_seconds: float = 120, **kwargs: Any
    ) -> AgentAnswer:
        """Run the agent's command with ``prompt`` on stdin; its stdout is the answer.

        Raises :class:`~orchestrator.AgentInvocationError`: ``AGENT_NOT_FOUND`` (no
        command for the agent), ``TIMEOUT`` (the process group was killed),
        ``INVOCATION_FAILED`` (cannot start, non-zero exit or a signal), ``PARSE_ERROR``
        (output not UTF-8, empty, over ``max_output_bytes``, or not the JSON expected),
        ``VALIDATION_ERROR`` (a prompt or context that cannot be sent).
        """
        command = self.commands.get(agent_name, self.command)
        if command is None:
            raise AgentInvocationError(
                f"no command for agent {agent_name!r}: give SubprocessInvoker a default "
                f"command or add it to commands (known: {sorted(self.commands)})",
                error_type="AGENT_NOT_FOUND",
            )
        limit = float(timeout_seconds)
        if self.timeout_seconds is not None:
            limit = min(limit, self.timeout_seconds)
        run = _Run(
            agent_name=agent_name,
            command=command,
            program=_program_name(command),
            limit=limit,
            max_output_bytes=self.max_output_bytes,
        )
        payload = _encode_prompt(run, prompt)
        env = self._child_env(run, kwargs.get("context"))
        started = self.monotonic()
        stdout = run.execute(payload, env, self.cwd)
        duration_ms = max(0, round((self.monotonic() - started) * 1000))
        text = _decode(run, stdout)
        if self.expects.get(agent_name, self.expect) == "json":
            text = _json_text(run, text, self.max_output_bytes)
        facts = {"exit_code": 0, "duration_ms": duration_ms, "command": run.program}
        return AgentAnswer(text, facts=facts)

    def _child_env(self, run: _Run, context: Any) -> dict[str, str]:
        env = {**os.environ, **self.env}
        env["ORCHESTRATOR_AGENT_NAME"] = run.agent_name
        env["ORCHESTRATOR_TIMEOUT_SECONDS"] = f"{run.limit:g}"
        env.pop("ORCHESTRATOR_CONTEXT", None)
        if context is not None:
            try:
                env["ORCHESTRATOR_CONTEXT"] = json.dumps(context, sort_keys=True, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise AgentInvocationError(
                    f"agent {run.agent_name!r}: the request context is not JSON data ({exc})",
                    error_type="VALIDATION_ERROR",
                ) from exc
        return env


def run_command(
    command: Command,
    payload: bytes,
    *,
    agent_name: str,
    env: Mapping[str, str],
    limit: float,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    cwd: Path | None = None,
) -> bytes:
    """Run ``command`` once as an agent call, ``payload`` on stdin; its stdout once it
    exited 0. Its whole process group is killed at the end, whatever happened.

    Raises :class:`~orchestrator.AgentInvocationError`: ``TIMEOUT`` past ``limit``
    seconds, ``PARSE_ERROR`` past ``max_output_bytes``, ``INVOCATION_FAILED`` when it
    cannot start, exits non-zero or dies by a signal (with the tail of its stderr).
    """
    checked = _checked(command, "command")
    run = _Run(
        agent_name=agent_name,
        command=checked,
        program=_program_name(checked),
        limit=limit,
        max_output_bytes=max_output_bytes,
    )
    return run.execute(payload, dict(env), cwd)


class _Run:
    """One call: starts the command, feeds stdin, reads stdout (capped) and a stderr tail."""

    def __init__(
        self,
        *,
        agent_name: str,
        command: Command,
        program: str,
        limit: float,
        max_output_bytes: int,
    ) -> None:
        self.agent_name = agent_name
        self.command = command
        self.program = program
        self.limit = limit
        self.max_output_bytes = max_output_bytes

    def execute(self, payload: bytes, env: dict[str, str], cwd: Path | None) -> bytes:
        """The child's stdout, once it exited 0; otherwise ``AgentInvocationError``."""
        shell = isinstance(self.command, str)
        args: str | list[str] = self.command if isinstance(self.command, str) else [*self.command]
        deadline = time.monotonic() + self.limit
        try:
            process = subprocess.Popen(
                args,
                shell=shell,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd=cwd,
                bufsize=0,
                start_new_session=True,
            )
        except (OSError, ValueError) as exc:
            # ValueError: a NUL byte in an argument or environment value
            reason = str(exc)
            if isinstance(exc, OSError) and exc.strerror:
                reason = exc.strerror if exc.filename is None else f"{exc.strerror}: {exc.filename}"
            raise self.error(
                f"cannot start {self.program!r} ({reason}); check that it is installed, "
                "on PATH and executable, and that the working directory exists",
                "INVOCATION_FAILED",
            ) from exc
        with process:
            try:
                stdout, stderr_tail, overflow = self._exchange(process, payload, deadline)
                if not overflow:
                    self._await_exit(process, deadline)
            except subprocess.TimeoutExpired:
                stdout, stderr_tail, overflow = b"", b"", False
                timed_out = True
            else:
                timed_out = False
            finally:
                # Whatever happened, nothing the agent started outlives the call.
                _kill_group(process)
        if timed_out:
            raise self.error(
                f"did not answer within {self.limit:g} s; its process group was killed "
                "(raise the request's timeout_seconds, or the invoker's cap)",
                "TIMEOUT",
            )
        if overflow:
            raise self.error(
                f"printed more than {self.max_output_bytes} bytes; it was stopped and the "
                "output dropped (raise max_output_bytes if that much is expected)",
                "PARSE_ERROR",
            )
        if process.returncode != 0:
            raise self.error(self._exit_message(process.returncode, stderr_tail), None)
        return stdout

    def _exchange(
        self, process: subprocess.Popen[bytes], payload: bytes, deadline: float
    ) -> tuple[bytes, bytes, bool]:
        """Write ``payload`` and read both pipes until EOF, the deadline or the cap.

        Returns stdout, the last bytes of stderr, and whether stdout went past the cap.
        """
        assert process.stdin and process.stdout and process.stderr
        stdout = bytearray()
        stderr_tail = bytearray()
        keep_stderr = STDERR_TAIL_CHARS * 4
        with selectors.DefaultSelector() as selector:
            for stream in (process.stdin, process.stdout, process.stderr):
                os.set_blocking(stream.fileno(), False)
            if payload:
                selector.register(process.stdin, selectors.EVENT_WRITE)
            else:
                process.stdin.close()
            selector.register(process.stdout, selectors.EVENT_READ)
            selector.register(process.stderr, selectors.EVENT_READ)
            view = memoryview(payload)
            exited_at: float | None = None
            while selector.get_map():
                now = time.monotonic()
                remaining = deadline - now
                if remaining <= 0:
                    raise subprocess.TimeoutExpired(self.program, self.limit)
                if exited_at is None and _has_exited(process):
                    exited_at = now
                if exited_at is not None:
                    # The child is gone; what it left running may hold the pipes open
                    # forever. Past a short grace, its output so far is the answer.
                    if now - exited_at > EXIT_GRACE_SECONDS:
                        if self._drain(selector, process, stdout):  # what is already there
                            return b"", bytes(stderr_tail), True
                        break
                    remaining = min(remaining, EXIT_GRACE_SECONDS / 5)
                else:
                    remaining = min(remaining, 0.5)  # look at the child now and then
                for key, _ in selector.select(remaining):
                    if key.fileobj is process.stdin:
                        view = _write_some(selector, process.stdin, view)
                        continue
                    assert key.fileobj is process.stdout or key.fileobj is process.stderr
                    chunk = _read_some(key.fileobj)
                    if chunk is None:
                        continue
                    if not chunk:
                        selector.unregister(key.fileobj)
                    elif key.fileobj is process.stdout:
                        stdout += chunk
                        if len(stdout) > self.max_output_bytes:
                            return b"", bytes(stderr_tail), True
                    else:
                        stderr_tail += chunk
                        del stderr_tail[:-keep_stderr]
        return bytes(stdout), bytes(stderr_tail), False

    def _drain(
        self,
        selector: selectors.BaseSelector,
        process: subprocess.Popen[bytes],
        stdout: bytearray,
    ) -> bool:
        """Read what is already in the stdout pipe, without waiting for more; True when
        that goes past the cap."""
        if process.stdout is None or process.stdout not in {
            key.fileobj for key in selector.get_map().values()
        }:
            return False
        while True:
            chunk = _read_some(process.stdout)
            if not chunk:  # EOF, or nothing more for now
                return False
            stdout += chunk
            if len(stdout) > self.max_output_bytes:
                return True

    def _await_exit(self, process: subprocess.Popen[bytes], deadline: float) -> None:
        """Wait until the child exits, leaving it unreaped: while it is a zombie its pid,
        the group id, cannot be reused, so killing the group afterwards hits no stranger."""
        delay = 0.001
        while os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise subprocess.TimeoutExpired(self.program, self.limit)
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 0.05)

    def _exit_message(self, returncode: int, stderr_tail: bytes) -> str:
        if returncode < 0:
            try:
                how = f"was killed by {signal.Signals(-returncode).name}"
            except ValueError:
                how = f"was killed by signal {-returncode}"
        else:
            how = f"exited with code {returncode}"
            if returncode in (126, 127) and isinstance(self.command, str):
                how += " (the shell could not find or run the command)"
        tail = stderr_tail.decode("utf-8", "replace")[-STDERR_TAIL_CHARS:].strip()
        return f"{how}; stderr ends: {tail}" if tail else f"{how}; stderr was empty"

    def error(self, message: str, error_type: str | None) -> AgentInvocationError:
        return AgentInvocationError(
            f"agent {self.agent_name!r} (command {self.program!r}) {message}",
            error_type=error_type or "INVOCATION_FAILED",
        )


def _write_some(selector: selectors.BaseSelector, stdin: Any, view: memoryview) -> memoryview:
    """Write what the pipe takes now; close stdin when all is written or the child left."""
    try:
        written = os.write(stdin.fileno(), view[:_READ_CHUNK])
    except BlockingIOError:
        return view
    except BrokenPipeError:
        # The child does not read its stdin (or stopped reading): its answer still counts.
        written = len(view)
    view = view[written:]
    if not view:
        selector.unregister(stdin)
        stdin.close()
    return view


def _has_exited(process: subprocess.Popen[bytes]) -> bool:
    """Whether the child has exited, leaving it unreaped (see ``_await_exit``)."""
    return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None


def _read_some(stream: Any) -> bytes | None:
    try:
        return os.read(stream.fileno(), _READ_CHUNK)
    except BlockingIOError:
        return None


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's process group (stragglers too, after a clean exit), then reap
    the child: until it is reaped, the group id cannot belong to anyone else."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _checked(command: Command, what: str) -> Command:
    if isinstance(command, str):
        if not command.strip():
            raise UsageError(f"{what} is an empty shell command")
        return command
    argv = list(command)
    if not argv or not all(isinstance(arg, str) for arg in argv) or not argv[0]:
        raise UsageError(f"{what} must be a shell command or a non-empty list of strings")
    return tuple(argv)


def _program_name(command: Command) -> str:
    """argv[0], or a shell command's first word: what messages and facts name."""
    if not isinstance(command, str):
        return command[0]
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    # skip leading variable assignments: "API_BASE=... claude -p" runs claude
    programs = [word for word in words if not _ASSIGNMENT.match(word)]
    return (programs or words or [command.strip()])[0]


def _encode_prompt(run: _Run, prompt: str) -> bytes:
    try:
        return prompt.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise AgentInvocationError(
            f"agent {run.agent_name!r}: the prompt cannot be encoded as UTF-8 ({exc})",
            error_type="VALIDATION_ERROR",
        ) from exc


def _decode(run: _Run, stdout: bytes) -> str:
    try:
        text = stdout.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise run.error(
            f"printed output that is not UTF-8 (byte {stdout[exc.start]:#04x} at offset "
            f"{exc.start})",
            "PARSE_ERROR",
        ) from exc
    text = text.removeprefix("\ufeff").rstrip()
    if not text.strip():
        raise run.error("exited 0 but printed nothing on stdout", "PARSE_ERROR")
    return text


def _json_text(run: _Run, text: str, max_bytes: int) -> str:
    """The JSON document in ``text``: all of it, else its first fenced ``json`` block."""
    candidates = [text.strip()]
    fenced = _fenced_block(text)
    if fenced is not None:
        candidates.append(fenced)
    problem = ""
    for candidate in candidates:
        try:
            loads_strict(candidate.encode("utf-8"), source="output", max_bytes=max_bytes)
        except UntrustedJSONError as exc:
            problem = problem or exc.detail
            continue
        return candidate
    raise run.error(
        f"did not print a JSON document, bare or in a ```json block ({problem})", "PARSE_ERROR"
    )


def _fenced_block(text: str) -> str | None:
    """The first ```` ```json ```` block, else the first unlabelled fenced block."""
    blocks = [(bool(m.group(1)), m.group(2).strip()) for m in _FENCED.finditer(text)]
    labelled = [body for is_json, body in blocks if is_json]
    plain = [body for is_json, body in blocks if not is_json]
    return (labelled or plain or [None])[0]
