"""The exception hierarchy: one root, facts as attributes, messages that say what to do."""

from __future__ import annotations

from typing import Any


class OrchestratorError(Exception):
    """Root of every error the framework raises on purpose."""


class ContractError(OrchestratorError, ValueError):
    """A document does not follow its contract.

    ``source`` names the file (or ``<stdin>``), ``json_path`` the place inside it
    (``$.metadata.confidence``), ``rule`` the rule that was broken. A document with
    several problems found together (unknown fields and missing ones, say) names the
    first in these and the others in ``also``, each as (json_path, rule, message); the
    text names them all.
    """

    #: words appended after the location, saying what to do (subclasses set it)
    advice = ""

    def __init__(
        self,
        message: str,
        *,
        source: str = "",
        json_path: str = "$",
        rule: str = "",
        also: tuple[tuple[str, str, str], ...] = (),
    ) -> None:
        self.source = source
        self.json_path = json_path
        self.rule = rule
        self.detail = message
        self.also = also
        where = f"{source}: " if source else ""
        others = "".join(f"; and {text}{_at(path)}" for path, _, text in also)
        advice = f"; {self.advice}" if self.advice else ""
        super().__init__(f"{where}{message}{_at(json_path)}{others}{advice}")


def _at(json_path: str) -> str:
    return f" at {json_path}" if json_path and json_path != "$" else ""


class UnsafePathError(OrchestratorError):
    """A path under the work directory is a symbolic link, or not the kind of entry the
    engine keeps there (a FIFO where a file belongs, a file where a directory belongs);
    nothing was written through it. ``path`` names it."""

    def __init__(self, message: str, *, path: str) -> None:
        self.path = path
        super().__init__(message)


class UntrustedJSONError(ContractError):
    """Bytes read from outside could not be accepted as JSON (size, nesting, encoding, syntax)."""


class UnknownVersionError(ContractError):
    """A document carries a major version this build does not understand; refused (fail closed)."""


class StateDamagedError(ContractError):
    """The state file cannot be read as this engine's state; it is left untouched."""

    advice = (
        "the state file is damaged: restore it from a backup, or run 'orchestrate cancel "
        "--force' to set it aside and start over"
    )

    @classmethod
    def wrap(
        cls, exc: ContractError, *, source: str = "", path_prefix: str = ""
    ) -> StateDamagedError:
        """The same problem, reported as a damaged state (``path_prefix`` roots a sub-document)."""

        def rooted(json_path: str) -> str:
            return path_prefix + json_path[1:] if path_prefix else json_path

        return cls(
            exc.detail,
            source=source or exc.source,
            json_path=rooted(exc.json_path),
            rule=exc.rule,
            also=tuple((rooted(path), rule, text) for path, rule, text in exc.also),
        )


class StateUntrustedError(ContractError):
    """A state's signature does not hold: it was changed after the engine signed it, it
    carries none, or another key made it. Nothing was run or changed; the advice names
    the command that signs it as it is, once a person has checked it."""

    def __init__(
        self,
        message: str,
        *,
        source: str = "",
        json_path: str = "$",
        rule: str = "",
        also: tuple[tuple[str, str, str], ...] = (),
    ) -> None:
        trust = f"orchestrate trust {source}" if source else "orchestrate trust STATE_FILE"
        self.advice = (
            f"nothing was run or changed: check the state, then '{trust}' signs it as it is"
        )
        name = source.rpartition("/")[2]
        if name.startswith(".") and name.endswith("-state.json"):  # a live instance's
            self.advice += " ('orchestrate cancel --force' sets it aside instead)"
        super().__init__(message, source=source, json_path=json_path, rule=rule, also=also)


class HistoryDamagedError(ContractError):
    """A file of a run's history (an archived request, a phase's journal) differs from the
    digest its signed state keeps for it: nothing was taken from it."""

    advice = (
        "nothing was taken from it: put back the file as orchestrate wrote it (from a "
        "backup or the run's copy), or fork the run from an earlier phase"
    )


class StateRolledBackError(ContractError):
    """A state older than the last one signed for its run, or one signed for another work
    directory: put back or copied. Nothing was run or changed."""

    def __init__(self, message: str, *, source: str = "") -> None:
        trust = f"orchestrate trust --accept-rollback {source}"
        self.advice = (
            f"nothing was run or changed: if it is there on purpose (a state put back, a "
            f"directory moved), '{trust}' accepts it; else put back the run's latest state"
        )
        super().__init__(message, source=source, json_path="$", rule="rollback")


class KeyFileError(OrchestratorError):
    """The signing key cannot be used: not where it can be found, not the user's own, or
    readable by others. ``path`` names the key file."""

    def __init__(self, message: str, *, path: str) -> None:
        self.path = path
        super().__init__(message)


class WorkflowDefinitionError(OrchestratorError, TypeError):
    """A ``Workflow`` subclass is malformed; raised when the class is created."""


class WorkflowNotFoundError(OrchestratorError, LookupError):
    """``pkg.module:Class``, ``path.py:Class`` or an entry-point name did not resolve."""


class NoInstanceError(OrchestratorError, FileNotFoundError):
    """There is no workflow instance (state file) in the work directory."""


class InstanceExistsError(OrchestratorError, FileExistsError):
    """``run`` was asked to start where an instance already lives."""


class InstanceBusyError(OrchestratorError):
    """Another process holds the instance lock."""

    def __init__(self, message: str, *, lock_path: str, holder: str = "") -> None:
        self.lock_path = lock_path
        self.holder = holder
        super().__init__(message)


class LockFileError(OrchestratorError):
    """The instance lock file is not a regular file (a FIFO, a directory, a symbolic link):
    nothing was changed, and removing it lets orchestrate make a new one."""

    def __init__(self, message: str, *, lock_path: str) -> None:
        self.lock_path = lock_path
        super().__init__(message)


class StorageError(OrchestratorError, OSError):
    """The operating system refused to read or write one of the instance's own files: a
    full disk, a quota, a size limit, a read-only file system, no permission, a failing
    device.

    Raised where the file is known (a bridge, the instance lock), so the message names it;
    the engine lets it through instead of failing the run for it. Every write is atomic (a
    temporary file, then a rename), so the failed one left nothing half-written: the
    instance is as its last complete write left it. ``path`` names the file, ``action`` is
    ``read`` or ``write``; ``errno`` and ``strerror`` are the system's.
    """

    def __init__(self, *, path: str, action: str, errno: int | None, strerror: str | None) -> None:
        self.path = path
        self.action = action
        self.message = (
            f"{path}: cannot {action} it: {describe_os_error(errno, strerror)}; the instance "
            f"is intact (every write is atomic, so nothing was half-written): "
            f"{os_error_remedy(errno)}"
        )
        super().__init__(self.message)
        self.errno = errno
        self.strerror = strerror

    @classmethod
    def from_os_error(cls, exc: OSError, *, path: str, action: str) -> StorageError:
        return cls(path=path, action=action, errno=exc.errno, strerror=exc.strerror)

    def __str__(self) -> str:
        # OSError's own would print "[Errno 28] ..." once errno is set.
        return self.message


def describe_os_error(errno: int | None, strerror: str | None) -> str:
    """``No space left on device (ENOSPC)``: the system's words and the errno's name."""
    import errno as codes

    name = codes.errorcode.get(errno, "") if errno is not None else ""
    words = strerror or "an operating system error"
    return f"{words} ({name})" if name else words


def os_error_remedy(errno: int | None) -> str:
    """What to do about an operating system error, as the start of a sentence that a
    caller may end with ``, then ...`` (the command to run again)."""
    import errno as codes

    remedies = {
        codes.ENOSPC: "free space on its file system",
        codes.EDQUOT: "free space within your disk quota, or have the quota raised",
        codes.EFBIG: "the file would pass a size limit ('ulimit -f', or the file "
        "system's): raise the limit",
        codes.EROFS: "its file system is mounted read-only: make it writable",
        codes.EACCES: "give this user access to it and to its directory",
        codes.EPERM: "give this user access to it and to its directory",
        codes.EIO: "the device reported a failure: check it (the kernel log says more)",
        codes.EMFILE: "too many files are open: raise the limit ('ulimit -n')",
        codes.ENFILE: "too many files are open on this system: close some",
    }
    return remedies.get(errno if errno is not None else -1, "fix the cause")


class ResponseRejectedError(OrchestratorError, ValueError):
    """A response file was refused; it is left where it is and the request stays pending."""

    def __init__(self, message: str, *, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(message)


class NonDeterminismError(OrchestratorError):
    """A phase asked or stepped differently on replay than it did when first run.

    ``recorded`` and ``current``, when known: the call the recorded run made at
    ``position`` and the one the code makes now, each in words (a changed prompt with its
    text), so a report can show both sides.
    """

    def __init__(
        self,
        message: str,
        *,
        phase_name: str,
        position: int,
        recorded: str | None = None,
        current: str | None = None,
    ) -> None:
        self.phase_name = phase_name
        self.position = position
        self.recorded = recorded
        self.current = current
        super().__init__(message)


class AgentFailedError(OrchestratorError):
    """An agent request ended in an error the policy does not retry.

    Raised inside a phase at the ``ctx.ask`` that made the request; a phase fallback, or
    the phase itself, may catch it.
    """

    def __init__(self, message: str, *, request_id: str, agent_name: str, error_type: str) -> None:
        self.request_id = request_id
        self.agent_name = agent_name
        self.error_type = error_type
        super().__init__(message)


class RunFailedError(OrchestratorError):
    """The run cannot continue; the state file is kept for inspection."""


class BudgetExceededError(RunFailedError):
    """An ask would start after the run's answers used its workflow's ``budget_tokens``
    or ``budget_usd``: the phase fails with BUDGET_EXCEEDED before the ask is made."""

    error_type = "BUDGET_EXCEEDED"

    def __init__(self, message: str, *, spent: float, budget: float, unit: str) -> None:
        super().__init__(message)
        self.spent, self.budget, self.unit = spent, budget, unit


class ChildRunFailedError(RunFailedError):
    """A child run (``ctx.child``) failed or was cancelled: raised into the parent's
    phase, and raised again when the phase is replayed. ``run_id``: the child's;
    ``status``: ``failed`` or ``cancelled``."""

    def __init__(self, message: str, *, run_id: str, status: str) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.status = status


class StepFailedError(OrchestratorError):
    """On replay: a ``ctx.step`` that raised when it ran, whose exception could not be
    made again from its record (its class, with the recorded message)."""

    def __init__(self, message: str, *, step: str, error_type: str) -> None:
        super().__init__(message)
        self.step = step
        self.error_type = error_type


class StepTimeoutError(OrchestratorError, TimeoutError):
    """An attempt of a ``ctx.step`` or ``ctx.run_command`` ran past its ``timeout`` and was
    abandoned: it counts as a failed attempt, and the step's retry policy applies.

    ``step`` names the step, ``seconds`` the timeout. A function's thread cannot be
    stopped: it may still finish, and its late result is thrown away.
    """

    def __init__(self, message: str, *, step: str = "", seconds: float = 0.0) -> None:
        super().__init__(message)
        self.step = step
        self.seconds = seconds

    def facts(self) -> dict[str, Any]:
        """What a record keeps of it besides its message, to make it again on replay."""
        return {"step": self.step, "seconds": self.seconds}


class CommandFailedError(OrchestratorError):
    """A ``ctx.run_command`` command exited with a code other than 0 (or was ended by a
    signal: a negative code). ``returncode``, and the ends of its ``stdout`` and
    ``stderr`` (as its :class:`CommandResult` would hold them), are attributes; a retry
    policy names it in ``retry_on`` to try the command again."""

    def __init__(
        self,
        message: str,
        *,
        step: str = "",
        returncode: int = 0,
        stdout: str = "",
        stderr: str = "",
    ) -> None:
        super().__init__(message)
        self.step = step
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr

    def facts(self) -> dict[str, Any]:
        """What a record keeps of it besides its message, to make it again on replay."""
        return {
            "step": self.step,
            "returncode": self.returncode,
            "stdout": self.stdout,
            "stderr": self.stderr,
        }


class AgentInvocationError(OrchestratorError):
    """An in-process agent invocation failed (the ``AgentInvocationError`` of the agent
    bridge's mock invoker API).

    ``error_type`` is one of the agent bridge's error types; the engine applies the
    response policy to it exactly as it would to an error response file.
    """

    def __init__(self, message: str, *, error_type: str = "INVOCATION_FAILED") -> None:
        self.error_type = error_type
        super().__init__(message)


class UsageError(OrchestratorError, ValueError):
    """A command or call that cannot be acted on as given (exit code 2)."""


class AnswerRefusedError(UsageError):
    """An answer refused at the answer gate; nothing was written.

    ``reason`` says which check refused it: ``shape`` (the answer is not of the shape
    the request asks for: ``field``, ``expected`` and ``got`` say how), ``answered``
    (the request has an answer already: the first one wins), or ``not-pending``.
    ``details`` holds what a host reads as JSON (the request's answer schema, the
    first answer's time and digest)."""

    def __init__(self, message: str, *, reason: str, details: dict[str, Any] | None = None) -> None:
        self.reason = reason
        self.details = dict(details or {})
        super().__init__(message)


class UnfinishedRunError(OrchestratorError):
    """A run directory given to ``eval compare`` that never recorded some of the cases
    its ``run.json`` selects (stopped before it finished). ``unfinished`` holds, for each
    such run, its side (``baseline``, ``new``), its directory and the ids it lacks."""

    def __init__(self, message: str, *, unfinished: list[tuple[str, str, list[str]]]) -> None:
        self.unfinished = unfinished
        super().__init__(message)


class BoardError(OrchestratorError):
    """The task board refused an operation; ``code`` is its task board error code.

    ``task_id`` and ``delta_id`` name what was refused when there is one; ``details``
    holds the facts a validator prints (the conflicting lock, the versions, ...).
    """

    def __init__(
        self,
        message: str,
        *,
        code: str,
        task_id: str | None = None,
        delta_id: str | None = None,
        details: dict[str, object] | None = None,
    ) -> None:
        self.code = code
        self.task_id = task_id
        self.delta_id = delta_id
        self.details = details or {}
        super().__init__(f"{code}: {message}")
        self.reason = message
