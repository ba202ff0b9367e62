"""How one try reaches the agent under test: an HTTP endpoint (``POST {base_url}/run-case``,
stdlib ``http.client``), a command run as a subprocess (the request on stdin, the answer
on stdout), or a Python callable in this process.

A transport writes the body into the :class:`~orchestrator.evals.bodies.BodyFile` it is
given as it arrives (never holding it whole: past the cap it stops reading, or for a
command reads on, counting) and returns what else came back (:class:`Reply`: status,
whether the body was cut), or raises :class:`TransportFailure` with its error class when
nothing usable came back (``timeout``, ``network_error``, ``other``). Judging the body
(JSON, shape) is the caller's (:mod:`orchestrator.evals.attempts`), the same for every
transport.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import attrs

from .._errors import UsageError
from .._http import endpoint_of
from .._text import plural
from .bodies import BodyFile

_CHUNK = 64 * 1024


@attrs.define(kw_only=True)
class Reply:
    """What one try got back besides its body (in the body file): ``truncated`` says
    whether more came than the cap, ``bytes_total`` the full size when known."""

    status: int | None
    status_text: str | None = None
    truncated: bool = False
    bytes_total: int | None = None
    content_type: str | None = None
    headers: dict[str, str] = attrs.Factory(dict)


class TransportFailure(Exception):
    """A try that got no reply to judge: its error class, name and message; ``with_body``
    says the part of a body in the body file (what arrived before the connection dropped,
    a failed command's output) belongs to the failure."""

    def __init__(
        self,
        error_class: str,
        error_name: str,
        message: str,
        *,
        with_body: bool = False,
        bytes_total: int | None = None,
        status: int | None = None,
        content_type: str | None = None,
        headers: dict[str, str] | None = None,
        truncated: bool = False,
    ) -> None:
        super().__init__(message)
        self.truncated = truncated
        self.error_class = error_class
        self.error_name = error_name
        self.message = message
        self.with_body = with_body
        self.bytes_total = bytes_total
        self.status = status
        self.content_type = content_type
        self.headers = headers or {}


class Transport(Protocol):
    """Sends one request body to the agent, writes the answer's body into ``sink`` (up to
    its cap) and returns the rest of the reply."""

    #: what ``run.json``'s ``base_url`` and ``runner_failure.url`` show
    url: str

    def call(self, body: bytes, *, timeout_s: float, sink: BodyFile) -> Reply: ...


# -- HTTP ---------------------------------------------------------------------------------


class HttpTransport:
    """``POST {base_url}/run-case`` with ``http.client``: one connection per try, a
    deadline over the whole try (connect, send, the headers and the body, together), the
    body read up to one byte past the cap, never further."""

    def __init__(self, base_url: str) -> None:
        from urllib.parse import urlsplit

        try:
            parts = urlsplit(base_url)
        except ValueError as exc:  # such as an unclosed [ of an IPv6 address
            raise UsageError(f"--base-url {base_url!r}: {exc}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(
                f"--base-url {base_url!r}: give an http:// or https:// URL, such as "
                "http://127.0.0.1:8080 (the runner posts to its /run-case)"
            )
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        try:
            self._port = parts.port
        except ValueError:
            raise UsageError(f"--base-url {base_url!r}: the port is not a number") from None
        self._path = parts.path.rstrip("/") + "/run-case"
        self.url = endpoint_of(base_url).rstrip("/") + "/run-case"

    def call(self, body: bytes, *, timeout_s: float, sink: BodyFile) -> Reply:
        import http.client

        connection: http.client.HTTPConnection
        if self._https:
            connection = http.client.HTTPSConnection(self._host, self._port, timeout=timeout_s)
        else:
            connection = http.client.HTTPConnection(self._host, self._port, timeout=timeout_s)
        deadline = _Deadline(timeout_s)
        try:
            connection.connect()
            deadline.guard(connection.sock)
            connection.request(
                "POST",
                self._path,
                body=body,
                headers={"Content-Type": "application/json", "Accept": "application/json"},
            )
            response = connection.getresponse()
            headers = {k.lower(): v for k, v in response.getheaders()}
            length = _content_length(headers)
            truncated = _read_capped(response, sink, length, headers)
            if deadline.expired:  # a body read to its end because the watchdog closed it
                raise TimeoutError
            return Reply(
                status=response.status,
                status_text=response.reason,
                truncated=truncated,
                bytes_total=length if length is not None else (None if truncated else sink.total),
                content_type=headers.get("content-type"),
                headers=headers,
            )
        except Exception as exc:
            raise _failure(exc, deadline.expired, timeout_s) from None
        finally:
            deadline.cancel()
            connection.close()


class _Deadline:
    """A watchdog over one try: at the deadline it shuts the try's socket down, so
    whatever is waiting on it (connect aside, bounded by the socket's own timeout),
    send, headers, a slow body, returns at once; :attr:`expired` says why it did."""

    def __init__(self, seconds: float) -> None:
        import threading

        self.expired = False
        self._lock = threading.Lock()
        self._sock: Any = None
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def guard(self, sock: Any) -> None:
        """Watch ``sock`` (the response keeps reading from it even once the connection
        lets go of it, as for ``Connection: close``)."""
        with self._lock:
            self._sock = sock
            if self.expired:
                _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            if self._sock is not None:
                _shut(self._sock)

    def cancel(self) -> None:
        self._timer.cancel()


def _shut(sock: Any) -> None:
    import socket

    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _failure(exc: Exception, expired: bool, timeout_s: float) -> TransportFailure:
    """The error class of what ended a try early."""
    import http.client

    if expired or isinstance(exc, TimeoutError):
        return TransportFailure(
            "timeout", "TimeoutError", f"no whole answer within {timeout_s * 1000:.0f} ms"
        )
    if isinstance(exc, _Cut):
        return TransportFailure(
            "network_error",
            "IncompleteRead",
            f"the connection closed after {plural(exc.received, 'byte')} of the body"
            + (f" of {exc.expected}" if exc.expected is not None else ""),
            with_body=True,
            bytes_total=exc.expected,
            status=exc.status,
            content_type=exc.headers.get("content-type"),
            headers=exc.headers,
            truncated=True,
        )
    if isinstance(exc, (ConnectionError, http.client.HTTPException, OSError)):
        return TransportFailure("network_error", type(exc).__name__, str(exc) or repr(exc))
    return TransportFailure("other", type(exc).__name__, str(exc) or repr(exc))


class _Cut(Exception):
    def __init__(
        self, received: int, expected: int | None, status: int, headers: dict[str, str]
    ) -> None:
        self.received, self.expected = received, expected
        self.status, self.headers = status, headers


def _content_length(headers: dict[str, str]) -> int | None:
    value = headers.get("content-length")
    # ``isdigit`` alone takes "²", which ``int`` refuses
    return int(value) if value is not None and value.isascii() and value.isdecimal() else None


def _read_capped(
    response: Any, sink: BodyFile, length: int | None, headers: dict[str, str]
) -> bool:
    """Read the body into ``sink`` piece by piece, stopping one byte past its cap;
    whether there was more than the cap."""
    import http.client

    while sink.room:
        try:
            chunk = response.read1(min(_CHUNK, sink.room))
        except http.client.IncompleteRead as exc:
            sink.write(exc.partial)
            raise _Cut(sink.total, length, response.status, headers) from None
        if not chunk:
            break
        sink.write(chunk)
    if sink.truncated:
        return True
    if length is not None and sink.total < length:
        # a read returns b"" at an early end of a sized body instead of raising
        raise _Cut(sink.total, length, response.status, headers)
    return False


def portable_command(command: str, home: Path) -> str:
    """``command`` with each absolute path inside ``home`` written relative to it
    (``./agent.py``), for a command run in ``home``: a run's files then name no place on
    this machine. A command that cannot be split is left as it is (it is refused later)."""
    import shlex

    try:
        argv = shlex.split(command)
    except ValueError:
        return command
    base = os.path.normpath(home)
    changed = [_inside(argument, base) for argument in argv]
    if changed == argv:
        return command
    return shlex.join(changed)


def _inside(argument: str, base: str) -> str:
    if not os.path.isabs(argument):
        return argument
    path = os.path.normpath(argument)
    if path != base and not path.startswith(base.rstrip("/") + "/"):
        return argument
    relative = os.path.relpath(path, base)
    return "." if relative == "." else "./" + relative


def command_label(command: str) -> str:
    """What a run's files say of a command agent: ``subprocess:`` and the command with
    each path that is absolute, or made relative by :func:`portable_command` (``./...``),
    cut to its name (a run directory names no place on this machine)."""
    import shlex

    try:
        argv = shlex.split(command)
    except ValueError:
        return f"subprocess:{os.path.basename(command)}"
    return "subprocess:" + shlex.join(
        os.path.basename(a) if os.path.isabs(a) or a.startswith("./") else a for a in argv
    )


# -- a subprocess -------------------------------------------------------------------------


class SubprocessTransport:
    """Runs ``command`` once per try: the request JSON on stdin, the answer JSON on stdout.
    Exit status 0 is an answer to judge; another is an ``other`` failure (stderr's tail
    in its message). The child runs in ``cwd`` (default: this process's current directory),
    in a session of its own, killed whole on a timeout."""

    def __init__(self, command: str, *, cwd: Path | None = None) -> None:
        import shlex

        try:
            self._argv = shlex.split(command)
        except ValueError as exc:  # an unclosed quote
            raise UsageError(f"--agent-command {command!r}: {exc}") from None
        if not self._argv:
            raise UsageError("--agent-command is empty: give the command line of the agent")
        self.url = command_label(command)
        self._cwd = cwd

    def call(self, body: bytes, *, timeout_s: float, sink: BodyFile) -> Reply:
        import signal
        import subprocess

        try:
            child = subprocess.Popen(
                self._argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self._cwd,
                start_new_session=True,
            )
        except OSError as exc:
            name = os.path.basename(self._argv[0])  # the message names no place on this machine
            raise TransportFailure(
                "other", type(exc).__name__, f"cannot start {name}: {exc.strerror or exc}"
            ) from None
        out = _Drain(child.stdout, sink.write)
        tail = _Tail(500)
        err = _Drain(child.stderr, tail.write)
        _feed(child, body)
        deadline = time.monotonic() + timeout_s
        try:
            child.wait(timeout=timeout_s)
            for drain in (out, err):  # a child of the child may still hold a pipe open
                drain.join(max(0.0, deadline - time.monotonic()))
                if drain.alive:
                    raise subprocess.TimeoutExpired(self._argv, timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            raise TransportFailure(
                "timeout", "TimeoutError", f"no answer within {timeout_s * 1000:.0f} ms"
            ) from None
        if child.returncode != 0:
            said = tail.data.decode("utf-8", "replace").strip()
            raise TransportFailure(
                "other",
                f"exit status {child.returncode}",
                f"the agent command exited with status {child.returncode}"
                + (f": {said}" if said else ""),
                with_body=sink.kept > 0,
                bytes_total=sink.total,
                truncated=sink.truncated,
            )
        return Reply(status=None, truncated=sink.truncated, bytes_total=sink.total)


class _Tail:
    """The last ``keep`` bytes written to it."""

    def __init__(self, keep: int) -> None:
        self.data = b""
        self._keep = keep

    def write(self, chunk: bytes) -> None:
        self.data = (self.data + chunk)[-self._keep :]


class _Drain:
    """Reads a pipe to its end in a thread, handing each piece to ``take`` (which keeps
    what it wants and counts the rest: output past the cap costs no memory)."""

    def __init__(self, pipe: Any, take: Callable[[bytes], None]) -> None:
        import threading

        self._pipe, self._take = pipe, take
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with contextlib.suppress(OSError, ValueError), self._pipe:
            while chunk := self._pipe.read1(_CHUNK):
                self._take(chunk)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float | None) -> None:
        self._thread.join(timeout)


def _feed(child: Any, body: bytes) -> None:
    """Writes the request to the child's stdin in a thread (a child that does not read
    it must not block the try), then closes it."""
    import threading

    def write() -> None:
        with contextlib.suppress(OSError, ValueError), child.stdin:
            child.stdin.write(body)

    threading.Thread(target=write, daemon=True).start()


# -- a callable in this process -------------------------------------------------------------

AgentFunction = Callable[[dict[str, Any]], Any]


class CallableTransport:
    """Calls ``function(request) -> answer`` in this process: the answer is a dict (encoded
    as JSON), or ``str``/``bytes`` (taken as the body). ``TimeoutError`` raised by it is a
    ``timeout``, any other exception ``other``. The time limit is checked after the call
    returns: a function cannot be stopped from outside."""

    def __init__(self, function: AgentFunction, *, name: str) -> None:
        self._function = function
        self.url = f"callable:{name}"

    def call(self, body: bytes, *, timeout_s: float, sink: BodyFile) -> Reply:
        started = time.monotonic()
        try:
            answer = self._function(json.loads(body))
        except TimeoutError as exc:
            raise TransportFailure("timeout", type(exc).__name__, str(exc) or "timed out") from None
        except Exception as exc:  # the agent's own failure, whatever it is
            raise TransportFailure("other", type(exc).__name__, str(exc) or repr(exc)) from None
        if time.monotonic() - started > timeout_s:
            raise TransportFailure(
                "timeout", "TimeoutError", f"answered after more than {timeout_s * 1000:.0f} ms"
            )
        if isinstance(answer, str):
            data = answer.encode("utf-8")
        elif isinstance(answer, bytes):
            data = answer
        else:
            try:
                data = json.dumps(answer, allow_nan=False).encode("utf-8")
            except (TypeError, ValueError) as exc:
                raise TransportFailure(
                    "schema_mismatch", type(exc).__name__, f"the answer is not JSON data: {exc}"
                ) from None
        sink.write(data)
        return Reply(status=None, truncated=sink.truncated, bytes_total=sink.total)


def load_function(reference: str) -> AgentFunction:
    """The callable ``pkg.module:function`` names."""
    import importlib

    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise UsageError(
            f"--agent-callable {reference!r}: write pkg.module:function (importable from here)"
        )
    try:
        found: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"--agent-callable {reference!r}: {exc}") from None
    except Exception as exc:  # a relative name, or a module that fails as it is imported
        raise UsageError(f"--agent-callable {reference!r}: {type(exc).__name__}: {exc}") from None
    if not callable(found):
        raise UsageError(f"--agent-callable {reference!r} is not callable")
    return found  # type: ignore[no-any-return]


def transport_for(agent: dict[str, Any], *, cwd: Path | None = None) -> Transport:
    """The transport an agent description of a run's inputs names: ``{"kind": "http",
    "base_url": ...}``, ``{"kind": "subprocess", "command": ...}`` (run in ``cwd``) or
    ``{"kind": "callable", "ref": "pkg.module:function"}``."""
    kind = agent.get("kind")
    if kind == "http":
        return HttpTransport(str(agent["base_url"]))
    if kind == "subprocess":
        return SubprocessTransport(str(agent["command"]), cwd=cwd)
    if kind == "callable":
        reference = str(agent["ref"])
        return CallableTransport(load_function(reference), name=reference)
    raise UsageError(f"unknown agent kind {kind!r}: http, subprocess or callable")
