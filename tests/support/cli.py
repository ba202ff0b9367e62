"""``orchestrate`` as a host runs it, the one way the tests start it.

- :func:`orchestrate`: one ``python -m orchestrator`` process, run to its end; what it
  did (exit code, stdout, stderr), never a traceback.
- :func:`command` and :func:`child_env`: the command line and the environment of such a
  process, for a test that must steer one itself (kill it at a point, read a terminal,
  start several at once).
- :func:`in_process`: ``orchestrate`` called in this process (``orchestrator.cli.main``),
  where a test needs to see inside it (a recorded file system, a fake stdin).
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal, overload

#: Long enough for the slowest command on a busy two-core machine; it only exists so that
#: a hang fails the test instead of the whole session.
PATIENCE = 180.0


def command(*args: object) -> list[str]:
    """``python -m orchestrator ARGS``, every argument as text."""
    return [sys.executable, "-m", "orchestrator", *map(str, args)]


def child_env(env: Mapping[str, str] | None = None, *, unset: Iterable[str] = ()) -> dict[str, str]:
    """This test's environment without the ``ORCHESTRATOR_*`` settings (crash points, a
    fixed clock, a store) but with the session's key file, and without a bytecode cache;
    then ``env`` on top, and the names of ``unset`` taken out.

    Without a bytecode cache an edited workflow file is always compiled afresh, whatever
    its mtime and size (tests edit workflow files between runs), and no ``__pycache__`` is
    left among the fixtures.
    """
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("ORCHESTRATOR_") or k == "ORCHESTRATOR_KEY_FILE"
    }
    base["PYTHONDONTWRITEBYTECODE"] = "1"
    base.update(env or {})
    for name in unset:
        base.pop(name, None)
    return base


@overload
def orchestrate(
    *args: object,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    unset: Iterable[str] = (),
    stdin: str | bytes | None = None,
    timeout: float = PATIENCE,
    text: Literal[True] = True,
    traceback_ok: bool = False,
    check: bool = False,
) -> subprocess.CompletedProcess[str]: ...


@overload
def orchestrate(
    *args: object,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    unset: Iterable[str] = (),
    stdin: str | bytes | None = None,
    timeout: float = PATIENCE,
    text: Literal[False],
    traceback_ok: bool = False,
    check: bool = False,
) -> subprocess.CompletedProcess[bytes]: ...


def orchestrate(
    *args: object,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    unset: Iterable[str] = (),
    stdin: str | bytes | None = None,
    timeout: float = PATIENCE,
    text: bool = True,
    traceback_ok: bool = False,
    check: bool = False,
) -> subprocess.CompletedProcess[str] | subprocess.CompletedProcess[bytes]:
    """Run ``orchestrate ARGS`` to its end in a new process and return what it did.

    The process gets :func:`child_env` (``env`` on top, ``unset`` taken out), runs in
    ``cwd`` (default: this test's), and reads ``stdin`` (default: nothing). Its
    output is UTF-8 text, or bytes with ``text=False``. Whatever it prints, it never
    prints a traceback (unless ``traceback_ok``): a user should never need one. With
    ``check``, an exit other than 0 raises :class:`subprocess.CalledProcessError`.
    """
    data = stdin.encode() if isinstance(stdin, str) else stdin
    done = subprocess.run(
        command(*args),
        input=data if data is not None else b"",
        capture_output=True,
        env=child_env(env, unset=unset),
        cwd=cwd,
        timeout=timeout,
        check=check,
    )
    if not traceback_ok:
        assert b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")
    if not text:
        return done
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


def in_process(*argv: object, stdin: bytes = b"") -> tuple[int, str, str]:
    """``orchestrate ARGV`` in this process, as a host runs it: exit code, stdout, stderr."""
    from orchestrator.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([str(arg) for arg in argv])
    finally:
        sys.stdin = saved
    return code, out.getvalue(), err.getvalue()
