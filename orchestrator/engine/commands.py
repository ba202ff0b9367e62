"""``ctx.run_command``: a command run as a step, in its own process group.

The command is started in a new session (its own process group), so that a timeout ends
all of it: SIGTERM to the group, then, after :data:`TERM_GRACE` seconds, SIGKILL to
whatever of the group is left, grandchildren included. Its output is kept as text (UTF-8,
a byte that is not UTF-8 replaced), each stream cut to its last :data:`OUTPUT_CAP` characters,
in a :class:`CommandResult` that the journal records like any step's result.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from typing import Any

import attrs

from .._errors import CommandFailedError, RunFailedError, StepTimeoutError

__all__ = ["OUTPUT_CAP", "TERM_GRACE", "CommandResult", "check_argv", "run_process"]

#: How much of each of a command's streams is kept (the end of it), in characters.
OUTPUT_CAP = 64 * 1024
#: Seconds a timed-out command's group has between SIGTERM and SIGKILL.
TERM_GRACE = 2.0


@attrs.frozen(kw_only=True)
class CommandResult:
    """What a ``ctx.run_command`` command did: its exit code (negative: the signal that
    ended it) and the ends of its standard output and error, as text."""

    returncode: int
    stdout: str = ""
    stderr: str = ""


def check_argv(argv: Sequence[str], where: str) -> list[str]:
    """``argv`` as a list of strings, the program first; a lone string is refused (no
    shell splits it: give ``["sh", "-c", text]`` for a shell)."""
    if isinstance(argv, (str, bytes)) or not argv or not all(isinstance(a, str) for a in argv):
        raise RunFailedError(
            f"{where}: argv must be a non-empty list of strings, the program first "
            f"(['git', 'status']), not {argv!r}"
        )
    return list(argv)


def run_process(
    argv: list[str],
    *,
    step_name: str,
    cwd: str,
    env: dict[str, str] | None,
    seconds: float | None,
    check: bool,
) -> CommandResult:
    """Run ``argv`` to its end, or until ``seconds`` pass (then its whole process group
    is ended and :class:`StepTimeoutError` raised)."""
    import subprocess

    environment = None if env is None else {**os.environ, **env}
    try:
        process = subprocess.Popen(
            argv,
            cwd=cwd,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        raise CommandFailedError(
            f"step {step_name!r}: command {argv[0]!r} could not start: {exc}",
            step=step_name,
            returncode=127,
        ) from None
    try:
        out, err = process.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        _end_group(process)
        raise StepTimeoutError(
            f"step {step_name!r}: command {argv[0]!r} ran past its timeout of {seconds:g} s; "
            "its process group was ended",
            step=step_name,
            seconds=seconds or 0.0,
        ) from None
    except BaseException:  # the phase's process is going: take the command with it
        _end_group(process)
        raise
    result = CommandResult(returncode=process.returncode, stdout=_text(out), stderr=_text(err))
    if check and result.returncode != 0:
        last = result.stderr.strip().splitlines()[-1:] or ["no output on stderr"]
        raise CommandFailedError(
            f"step {step_name!r}: command {argv[0]!r} exited with code {result.returncode}: "
            f"{last[0][:300]}",
            step=step_name,
            returncode=result.returncode,
            stdout=result.stdout,
            stderr=result.stderr,
        )
    return result


def _end_group(process: Any) -> None:
    """SIGTERM to the command's process group, SIGKILL after the grace to what is left,
    then reap the command (its pipes closed, should something outside the group hold
    them)."""
    import signal
    import subprocess

    _signal_group(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.communicate(timeout=TERM_GRACE)
    # Whatever of the group outlived SIGTERM (a grandchild that ignores it, say).
    _signal_group(process.pid, signal.SIGKILL)
    try:
        process.communicate(timeout=TERM_GRACE)
    except subprocess.TimeoutExpired:  # a process that left the group holds the pipes
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
        process.wait()


def _signal_group(group: int, number: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone
        os.killpg(group, number)


def _text(data: bytes | None) -> str:
    text = (data or b"").decode("utf-8", "replace")
    return text[-OUTPUT_CAP:]
