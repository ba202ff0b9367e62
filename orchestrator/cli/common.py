"""What the command modules share: the work directory and its instance, the engine and
its agent, the arguments several commands take (``--store`` among them; the store itself
is chosen in ``run_store``), and the exit codes. Every command module imports this one;
it imports no other module of the CLI.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from .._errors import (
    ContractError,
    StateDamagedError,
    StorageError,
    UsageError,
    WorkflowNotFoundError,
)

if TYPE_CHECKING:
    from ..engine.engine import Engine
    from ..storage.state_key import ReadMemo

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_PAUSED, EXIT_BUSY = 0, 1, 2, 42, 75
STORE_ENV = "ORCHESTRATOR_STORE"


def stdout_reader_gone() -> bool:
    """Whether standard output is a pipe whose reader has closed it: the system reports an
    error condition on it. A broken pipe elsewhere (a handler's stdin, a socket) is not
    the reader leaving, and stays an error."""
    import select
    import sys

    try:
        target = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # a stream in memory
        return False
    poller = select.poll()
    poller.register(target, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def reader_closed() -> int:
    """The reader of standard output left (``orchestrate status | head -n1``): it read what
    it wanted, so the command ends quietly with exit 0. What is still buffered goes to
    ``/dev/null``, so the last flush at exit does not fail again."""
    import sys

    try:
        target = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # a stream in memory: nothing to redirect
        return EXIT_OK
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, target)
    finally:
        os.close(devnull)
    return EXIT_OK


# -- commands and their arguments -----------------------------------------------------------


class Command(NamedTuple):
    """One ``orchestrate`` command as its module declares it."""

    help: str  # the line of ``orchestrate --help``, and the command's description
    declare: Callable[[argparse.ArgumentParser], None]  # adds its arguments
    run: Callable[[argparse.Namespace], int]  # runs it; returns the exit code


class Formatter(argparse.HelpFormatter):
    """argparse's formatter, minus the ``shutil`` import it makes to size the terminal."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=int(os.environ.get("COLUMNS", "") or 100) - 2)


def add_workdir(sub: Any) -> None:
    sub.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="the instance's work directory (default: the current directory)",
    )


def add_instance(sub: Any) -> None:
    sub.add_argument(
        "--workflow",
        default=None,
        help="the instance's workflow name (the NAME of .NAME-state.json), not a file; "
        "not needed, since a work directory holds one instance: given, the command "
        "refuses a directory whose instance is another workflow's",
    )


def add_prices(sub: Any) -> None:
    sub.add_argument(
        "--prices",
        type=Path,
        default=None,
        metavar="FILE",
        help='a JSON price list, model -> {"input": USD, "output": USD} per million '
        "tokens: the tokens are shown with their cost (tokens not split into input and "
        "output are priced as input)",
    )


def read_prices(path: Path | None) -> dict[str, tuple[float, float]] | None:
    """``--prices``' list, or ``None`` without one; a bad one is a usage error."""
    if path is None:
        return None
    from ..evidence.usage import parse_prices
    from ..storage.files import read_json_file

    try:
        return parse_prices(read_json_file(path), source=str(path))
    except ContractError as exc:
        raise UsageError(f"--prices {path}: {exc}") from None
    except FileNotFoundError:
        raise UsageError(f"--prices {path}: no such file; name a JSON price list") from None
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def add_store(sub: Any, *, run: bool = True, needed: bool = False) -> None:
    add_store_argument(sub, run=run, needed=needed)


def add_otlp(sub: Any) -> None:
    """``--otlp URL``: send the run's OpenTelemetry spans there while it runs."""
    sub.add_argument(
        "--otlp",
        dest="otlp_live",
        default=None,
        metavar="URL",
        help="send the run's OpenTelemetry spans to this OTLP/HTTP endpoint as it runs "
        "(http://HOST:4318 gets /v1/traces; default: OTEL_EXPORTER_OTLP_ENDPOINT; needs the "
        "otel extra)",
    )


def add_agent(sub: Any) -> None:
    sub.add_argument(
        "--agent",
        default="host",
        metavar="SPEC",
        help="who answers the asks: 'host' (default: pause with exit 42 for the host), "
        "'subprocess:COMMAND' (run COMMAND with the prompt on stdin), or "
        "'http:MODEL@BASE_URL' (an OpenAI-compatible endpoint; the key from "
        "OPENAI_API_KEY, or the variable named by ORCHESTRATOR_API_KEY_ENV)",
    )


def no_subcommand(args: argparse.Namespace) -> int:
    """What a command group (``board``, ``eval``, ``db``) does when no subcommand is named."""
    raise UsageError(
        f"name a {args.command} subcommand (orchestrate {args.command} --help lists them)"
    )


# -- the work directory and its instance ----------------------------------------------------


def workdir(args: argparse.Namespace) -> Path:
    workdir = (args.workdir or Path.cwd()).resolve()
    if not workdir.is_dir():
        raise UsageError(f"work directory {workdir} does not exist")
    return workdir


def state_path(workdir: Path, workflow_name: str | None) -> Path:
    """The state file of the instance in ``workdir`` (see :func:`live_state_path`)."""
    from ..storage.runs import live_state_path

    return live_state_path(workdir, workflow_name)


def recorded_reference(state_path: Path, reads: ReadMemo | None = None) -> str:
    """The workflow reference recorded at ``run``, read without structuring the state,
    from a state whose signature holds: nothing a state names is imported before.
    ``reads``: where to keep what was learnt of the state's bytes, for the bridge built
    next for the instance (``engine_for``)."""
    from ..storage.files import STATE_MAX_BYTES, read_regular_file
    from ..storage.state_key import check_key_outside, read_signed

    source = str(state_path)
    try:
        raw = read_regular_file(state_path, max_bytes=STATE_MAX_BYTES)
    except ContractError as exc:
        raise StateDamagedError.wrap(exc) from None
    except FileNotFoundError:
        raise
    except OSError as exc:  # a read that failed in the device names no file
        raise StorageError.from_os_error(exc, path=str(state_path), action="read") from exc
    check_key_outside(state_path.parent)
    # Only looked at: the file bridge given ``reads`` reuses the check and the parse.
    data, _ = read_signed(raw, source=source, peek=True, reads=reads)
    try:
        reference = data["phase_data"]["x_orchestrator"]["workflow"]
    except (KeyError, TypeError):
        reference = None
    if not isinstance(reference, str):
        raise StateDamagedError(
            "no workflow reference recorded, so orchestrate did not write it",
            source=str(state_path),
            json_path="$.phase_data.x_orchestrator.workflow",
            rule="required",
        )
    return reference


def engine_for(
    workflow_cls: Any, workdir: Path, agent: str = "host", reads: ReadMemo | None = None
) -> Engine:
    """An engine for the instance of ``workflow_cls`` in ``workdir``; ``reads``: what
    was learnt of its state's bytes (``recorded_reference``), for its bridge."""
    from ..adapters.file_bridge import FileBridge
    from ..engine.engine import Engine

    return Engine(
        workflow_cls,
        bridge=FileBridge(workdir, workflow_cls.name, reads=reads),
        invoker=invoker(agent),
        clock=clock(),
    )


def clock() -> Any:
    """The real clock, or the moment ``ORCHESTRATOR_NOW`` fixes (for tests of processes)."""
    fixed = os.environ.get("ORCHESTRATOR_NOW")
    if not fixed:
        return None
    from ..formats.convert import check_date_time
    from ..formats.times import FixedClock, parse_time

    try:
        check_date_time(fixed, source="ORCHESTRATOR_NOW", json_path="$")
    except ContractError:
        raise UsageError(
            f"ORCHESTRATOR_NOW={fixed!r}: write an RFC 3339 time (2026-01-02T03:04:05Z), "
            "or unset it to use the real clock"
        ) from None
    return FixedClock(parse_time(fixed))


def invoker(spec: str) -> Any:
    """The invoker an ``--agent`` SPEC names (see ``orchestrate run --help``)."""
    kind, _, rest = spec.partition(":")
    if kind == "host" and not rest:
        from ..adapters.file_bridge import FileBridgeInvoker

        return FileBridgeInvoker()
    if kind == "subprocess" and rest.strip():
        from ..adapters.subprocess_agent import SubprocessInvoker

        return SubprocessInvoker(rest)
    model, _, base_url = rest.partition("@")
    if kind == "http" and model and base_url:
        from ..adapters.http_agent import HttpInvoker

        key_env = os.environ.get("ORCHESTRATOR_API_KEY_ENV", "OPENAI_API_KEY")
        return HttpInvoker(base_url=base_url, model=model, api_key_env=key_env)
    raise UsageError(
        f"--agent {spec!r}: write 'host', 'subprocess:COMMAND' or 'http:MODEL@BASE_URL'"
    )


def instance_engine(args: argparse.Namespace) -> Engine:
    from ..engine.loader import load_workflow
    from ..storage.state_key import ReadMemo

    directory = workdir(args)
    path = state_path(directory, args.workflow)
    reads = ReadMemo()  # this command's: its first look at the state, for its bridge
    reference = recorded_reference(path, reads)
    try:
        workflow_cls = load_workflow(reference)
    except WorkflowNotFoundError as exc:
        raise WorkflowNotFoundError(
            f"{exc}; if the project moved, point the instance at its workflow's new place: "
            f"orchestrate trust {path} --workflow NEW/PATH.py:Class"
        ) from None
    return engine_for(workflow_cls, directory, getattr(args, "agent", "host"), reads)


def parse_inputs(pairs: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` pairs. Keys ending in ``_path`` or ``_dir`` are paths: made absolute
    against the current directory now, so a later ``resume`` from elsewhere finds them."""
    inputs = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--input {pair!r}: write KEY=VALUE")
        if key.endswith(("_path", "_dir")) and value:
            value = str(Path(value).resolve())
        inputs[key] = value
    return inputs


# -- the store a command names ------------------------------------------------------------


def add_store_argument(
    sub: Any, *, run: bool = True, run_required: bool = False, needed: bool = False
) -> None:
    """``--store`` (and ``--run``) on a command that works on both stores; ``needed``: on a
    command that works on a PostgreSQL store only (a worker, ``db``, ``export``)."""
    without = (
        "one of the two is required" if needed else "without either: the work directory's files"
    )
    sub.add_argument(
        "--store",
        default=None,
        metavar="DSN",
        help=f"a PostgreSQL store, postgresql://USER@HOST/DATABASE (default: ${STORE_ENV}; "
        f"{without})",
    )
    if run:
        sub.add_argument(
            "--run",
            required=run_required,
            default=None,
            metavar="ID",
            help="with --store: the run's id (as 'run' printed it)",
        )


def fail_on_words(text: str, words: tuple[str, ...], *, what: str, listed: int) -> list[str]:
    """``--fail-on``'s comma-separated ``words`` (or ``none``), spelt as the documents
    spell them (``new_failure``); an unknown word is refused, naming the first ``listed``
    of ``words`` (a ``what``)."""
    if text.strip() == "none":
        return []
    chosen = []
    for word in (w.strip() for w in text.split(",")):
        if word.replace("_", "-") not in words:
            raise UsageError(
                f"--fail-on: {word!r} is not a {what}; use a comma-separated list of "
                f"{', '.join(words[:listed])}, or none"
            )
        chosen.append(word.replace("-", "_"))
    return chosen
