"""Declaring workflows: the ``Workflow`` base class and the ``@phase`` decorator.

A malformed definition (bad name, duplicate or unordered phases, a phase with the wrong
signature, an unknown fallback or route) fails when the class is created, not in the
middle of a run.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any, ClassVar, TypeVar, cast

import attrs

from .._errors import RunFailedError, WorkflowDefinitionError

_KEBAB = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
_SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")

F = TypeVar("F", bound=Callable[..., Any])

#: How many times a run may enter one phase unless its ``@phase`` says otherwise.
DEFAULT_MAX_VISITS = 100


@attrs.frozen(kw_only=True)
class PhaseSpec:
    """One declared phase: its number, name, method and optional fallback method; the
    phases it declares it may go to with :class:`Goto` (``routes``), and how many times a
    run may enter it (``max_visits``)."""

    number: int
    name: str
    method_name: str
    fallback: str | None = None
    asks_agents: bool = False
    routes: tuple[str, ...] = ()
    max_visits: int = DEFAULT_MAX_VISITS


@attrs.frozen(kw_only=True)
class PhaseResult:
    """What a phase may return to give its output a one-line summary."""

    output: Any = None
    summary: str = ""


@attrs.frozen
class Goto:
    """What a phase may return to choose the phase that runs next: ``to`` names any
    declared phase, an earlier one (a loop: review, revise, review again) or a later one
    (a skip). ``output`` is the phase's output, ``summary`` its one-line summary, as in
    :class:`PhaseResult`.

    When the phase declares ``routes`` (``@phase(2, routes=("revise",))``), ``to`` must
    be one of them; a phase that declares none may go to any phase. A phase entered again
    runs from its top as a new visit: its evidence goes to a directory of its own, and
    its latest output is the one ``ctx.output`` returns.
    """

    to: str
    output: Any = attrs.field(default=None, kw_only=True)
    summary: str = attrs.field(default="", kw_only=True)


@attrs.frozen(kw_only=True)
class Ask:
    """One agent request of ``ctx.ask_all``; the arguments of ``ctx.ask``."""

    agent: str
    prompt: str
    output_type: type[Any] | None = None
    min_confidence: float | None = None
    timeout_seconds: int = 120
    context: dict[str, Any] | None = None
    #: how many times a TIMEOUT or INVOCATION_FAILED answer is asked again (None: the
    #: workflow's ``max_retries``)
    retries: int | None = None
    #: how long the run waits for the answer before it counts as a TIMEOUT (None: as long
    #: as it takes; ``timeout_seconds`` is the host's budget for one invocation, not this)
    answer_within: timedelta | None = None


def _retry_on(value: Any) -> frozenset[Any]:
    """``retry_on`` as a frozenset: one error type or exception class, or several."""
    items = (value,) if isinstance(value, (str, type)) else value
    try:
        found = frozenset(items)
    except TypeError:
        found = frozenset({items})  # not iterable: refused by the check below
    for item in found:
        if not (isinstance(item, str) or (isinstance(item, type) and issubclass(item, Exception))):
            raise WorkflowDefinitionError(
                f"RetryPolicy: retry_on holds {item!r}; give agent error types as strings "
                "('TIMEOUT') and exception classes for steps (ConnectionError)"
            )
    return found


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """How a workflow retries an agent's error answers, and how ``ctx.step`` retries a
    step that raised.

    An answer whose error type is in ``retry_on`` is asked again as a new request, up to
    ``attempts`` tries in all (the first included). An agent answered in process is asked
    again after a wait that grows from ``initial_delay`` seconds, doubling each time up to
    ``max_delay``, plus up to ``jitter`` seconds at random, so that many runs retrying at
    once do not all ask at the same moment; a host answers a retry when it answers it.
    The count lives in each request's ``retry_count``, in the state: a resume goes on
    counting where the run was.

    For a step (``ctx.step(..., retry=RetryPolicy(...))``), ``retry_on`` names exception
    classes: a step that raises an instance of one is run again after the same waits, up
    to ``attempts`` runs in all. A ``retry_on`` that names no class (the default, whose
    strings are agent error types) retries a step whatever ``Exception`` it raises. So one
    policy may serve both: ``retry_on={"TIMEOUT", ConnectionError}``.
    """

    attempts: int = 3
    initial_delay: float = 1.0
    max_delay: float = 30.0
    jitter: float = 1.0
    retry_on: frozenset[str | type[Exception]] = attrs.field(
        default=frozenset({"TIMEOUT", "INVOCATION_FAILED"}), converter=_retry_on
    )

    def retries(self, error: BaseException) -> bool:
        """Whether a step that raised ``error`` may run again (attempts allowing): it is
        an instance of a class in ``retry_on``, or any ``Exception`` when it names none."""
        classes = tuple(item for item in self.retry_on if isinstance(item, type))
        return isinstance(error, classes or Exception)

    def check(self, where: str) -> None:
        """Refuse a policy no retry can follow, naming ``where`` it was given."""
        numbers = (self.attempts, self.initial_delay, self.max_delay, self.jitter)
        if (
            any(isinstance(n, bool) or not isinstance(n, (int, float)) for n in numbers)
            or not isinstance(self.attempts, int)
            or self.attempts < 1
            or not 0 <= self.initial_delay <= self.max_delay
            or not 0 <= self.jitter < float("inf")
            or self.max_delay == float("inf")
        ):
            raise WorkflowDefinitionError(
                f"{where}: a RetryPolicy needs attempts >= 1 and "
                "0 <= initial_delay <= max_delay, jitter >= 0 (finite numbers)"
            )

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first retry)."""
        import tenacity

        wait = tenacity.wait_exponential(
            multiplier=self.initial_delay, max=self.max_delay
        ) + tenacity.wait_random(0, self.jitter)
        # The strategy reads only ``attempt_number`` of the state tenacity would pass.
        return float(wait(cast("tenacity.RetryCallState", _Attempt(retry))))


@attrs.frozen
class _Attempt:
    """What tenacity's wait strategies read of a retry: its number (1 for the first)."""

    attempt_number: int


def phase(
    number: int,
    *,
    name: str | None = None,
    fallback: str | None = None,
    asks_agents: bool = False,
    routes: tuple[str, ...] = (),
    max_visits: int = DEFAULT_MAX_VISITS,
) -> Callable[[F], F]:
    """Declare a method ``(self, ctx)`` as phase ``number``.

    ``name`` defaults to the attribute's name (snake_case). ``fallback`` names a method
    ``(self, ctx, error)`` that produces the phase's output when an agent answers with
    PARSE_ERROR, VALIDATION_ERROR or UNKNOWN, or when retries of TIMEOUT and
    INVOCATION_FAILED run out. ``asks_agents`` marks the phases that ask agents: when
    any phase is marked, only marked phases may ask, and the request schema's
    ``phase_name`` enum lists exactly those (unmarked workflows list every phase).
    ``routes`` names the phases this one may go to by returning :class:`Goto` (then it
    may go to no other; ``orchestrate graph`` draws them). ``max_visits``: how many times
    a run may enter the phase; one more fails the run (a loop that never ends).
    """

    def mark(method: F) -> F:
        method.__orchestrator_phase__ = (  # type: ignore[attr-defined]
            number,
            name,
            fallback,
            asks_agents,
            routes,
            max_visits,
        )
        return method

    return mark


class Workflow:
    """Base class of every workflow.

    Set ``name`` (kebab-case: the state file is ``.<name>-state.json``), ``agents`` (the
    agent names the workflow may ask) and declare phases with :func:`phase`. Class
    options: ``purpose`` (words used in the generated JSON Schemas), ``max_retries`` (for
    TIMEOUT and INVOCATION_FAILED) or a whole ``retry_policy`` (:class:`RetryPolicy`),
    ``archive_after`` (how many finished requests of completed phases gather in the state
    before they move to the run's history), ``warn_state_bytes`` / ``warn_history_bytes``
    (a run's state or history past that many bytes warns once, naming its largest items;
    1 MiB and 256 MiB unless set), ``version`` (an integer, recorded in each
    run's state), ``budget_tokens`` / ``budget_usd`` (an ask that would start once the
    run's answers have used that many tokens, or cost that much, fails the phase with
    BUDGET_EXCEEDED) and ``prices`` (model -> ``{"input": USD, "output": USD}`` per
    million tokens, which ``budget_usd`` needs). A base class meant for further
    subclassing says ``class Base(Workflow, abstract=True)``.

    When a change of the code changes what the phases store, raise ``version`` and give a
    hook per step, ``migrate_v1_to_v2(self, outputs) -> outputs``: it gets the recorded
    outputs of the run's phases (a dict by phase name; ``self.inputs`` are the run's
    inputs) and returns them as the new version expects. A run that a newer version
    resumes passes through every hook from its version to the code's, in order.
    """

    name: ClassVar[str]
    agents: ClassVar[tuple[str, ...]] = ()
    purpose: ClassVar[str] = ""
    max_retries: ClassVar[int] = 2
    retry_policy: ClassVar[RetryPolicy | None] = None
    archive_after: ClassVar[int] = 16
    warn_state_bytes: ClassVar[int] = 1024 * 1024
    warn_history_bytes: ClassVar[int] = 256 * 1024 * 1024
    version: ClassVar[int] = 1
    budget_tokens: ClassVar[int | None] = None
    budget_usd: ClassVar[float | None] = None
    prices: ClassVar[dict[str, Any]] = {}
    phases: ClassVar[tuple[PhaseSpec, ...]] = ()
    # Whether any phase is marked ``asks_agents`` (then only those may ask).
    _asks_marked: ClassVar[bool] = False
    # Each phase's place in ``phases``, by name (names are unique).
    _phase_at: ClassVar[dict[str, int]] = {}

    def __init_subclass__(cls, abstract: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if abstract:
            return
        cls.phases = _collect_phases(cls)
        cls._asks_marked = any(p.asks_agents for p in cls.phases)
        cls._phase_at = {}
        for index, spec in enumerate(cls.phases):
            cls._phase_at.setdefault(spec.name, index)
        _check_definition(cls)

    def __init__(self, inputs: dict[str, Any] | None = None) -> None:
        self.inputs: dict[str, Any] = dict(inputs or {})

    @classmethod
    def phase_named(cls, name: str) -> PhaseSpec:
        return cls.phases[cls._phase_at[name]]

    @classmethod
    def phase_after(cls, spec: PhaseSpec) -> PhaseSpec | None:
        """The phase that follows ``spec`` (one of ``phases``), ``None`` after the last."""
        index = cls._phase_at[spec.name] + 1
        return cls.phases[index] if index < len(cls.phases) else None

    @classmethod
    def phase_entered(cls, spec: PhaseSpec, result: PhaseResult | Goto) -> PhaseSpec | None:
        """The phase that runs after ``spec`` ended with ``result``: the one a
        :class:`Goto` names, else the next in order (``None`` after the last). A ``Goto``
        to a phase the workflow lacks, or to one ``spec`` does not declare in its
        ``routes``, is refused with a :class:`RunFailedError` that says what to do."""
        if not isinstance(result, Goto):
            return cls.phase_after(spec)
        target = result.to
        if not isinstance(target, str) or target not in cls._phase_at:
            names = ", ".join(p.name for p in cls.phases)
            raise RunFailedError(
                f"phase {spec.name!r} returned Goto({target!r}), and the workflow has no "
                f"such phase (its phases: {names}); name one of them"
            )
        if spec.routes and target not in spec.routes:
            raise RunFailedError(
                f"phase {spec.name!r} returned Goto({target!r}), which is not one of the "
                f"routes it declares ({', '.join(spec.routes)}); add it to the routes of "
                f"@phase({spec.number}, routes=...) or go to one of them"
            )
        return cls.phase_named(target)

    @classmethod
    def policy(cls) -> RetryPolicy:
        """The retry policy: ``retry_policy``, else ``max_retries`` retries with the
        default waits."""
        return cls.retry_policy or RetryPolicy(attempts=cls.max_retries + 1)

    @classmethod
    def max_phase(cls) -> int:
        return cls.phases[-1].number

    @classmethod
    def may_ask(cls, spec: PhaseSpec) -> bool:
        """Whether phase ``spec`` may ask agents (it is one of :meth:`asking_phases`),
        known without a pass over a long workflow's phases at every ask."""
        return spec.asks_agents or not cls._asks_marked

    @classmethod
    def asking_phases(cls) -> tuple[PhaseSpec, ...]:
        """The phases that may ask agents (all of them when none is marked)."""
        marked = tuple(p for p in cls.phases if p.asks_agents)
        return marked or cls.phases

    @classmethod
    def describe_purpose(cls) -> str:
        return cls.purpose or cls.name.replace("-", " ")


def _collect_phases(cls: type[Workflow]) -> tuple[PhaseSpec, ...]:
    found: list[PhaseSpec] = []
    seen: set[str] = set()
    # Walk the MRO from the base up so that inherited phases come first and an
    # override replaces its parent's declaration in place.
    for klass in reversed(cls.__mro__):
        for attr_name, value in vars(klass).items():
            marker = getattr(value, "__orchestrator_phase__", None)
            if marker is None:
                continue
            number, name, fallback, asks_agents, routes, max_visits = marker
            spec = PhaseSpec(
                number=number,
                name=name or attr_name,
                method_name=attr_name,
                fallback=fallback,
                asks_agents=asks_agents,
                routes=routes,
                max_visits=max_visits,
            )
            if attr_name in seen:
                found = [spec if s.method_name == attr_name else s for s in found]
            else:
                seen.add(attr_name)
                found.append(spec)
    return tuple(found)


def _check_budget(cls: type[Workflow], where: str) -> None:
    from ..evidence.usage import parse_prices

    tokens, usd = cls.budget_tokens, cls.budget_usd
    if tokens is not None and (
        isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0
    ):
        raise WorkflowDefinitionError(f"{where}: 'budget_tokens' must be an integer >= 0 or None")
    if usd is not None and (
        isinstance(usd, bool) or not isinstance(usd, (int, float)) or not 0 <= usd < float("inf")
    ):
        raise WorkflowDefinitionError(f"{where}: 'budget_usd' must be a number >= 0 or None")
    try:
        prices = parse_prices(cls.prices, source="'prices'")
    except ValueError as exc:
        raise WorkflowDefinitionError(f"{where}: {exc}") from None
    if usd is not None and not prices:
        raise WorkflowDefinitionError(
            f"{where}: 'budget_usd' needs 'prices' (model -> {{\"input\": USD, \"output\": "
            "USD}} per million tokens) to know what the answers cost; give them"
        )


def _check_definition(cls: type[Workflow]) -> None:
    where = f"workflow class {cls.__qualname__}"
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not _KEBAB.match(name):
        raise WorkflowDefinitionError(
            f"{where}: 'name' must be kebab-case like 'template-create', got {name!r}"
        )
    agents = cls.agents
    if isinstance(agents, str) or not all(isinstance(a, str) and _KEBAB.match(a) for a in agents):
        raise WorkflowDefinitionError(
            f"{where}: 'agents' must be a tuple of kebab-case agent names, got {agents!r}"
        )
    if len(set(agents)) != len(agents):
        raise WorkflowDefinitionError(f"{where}: 'agents' lists a name twice: {agents!r}")
    if not isinstance(cls.max_retries, int) or cls.max_retries < 0:
        raise WorkflowDefinitionError(f"{where}: 'max_retries' must be an integer >= 0")
    policy = cls.retry_policy
    if policy is not None and not isinstance(policy, RetryPolicy):
        raise WorkflowDefinitionError(f"{where}: 'retry_policy' must be a RetryPolicy")
    if policy is not None:
        policy.check(f"{where}: 'retry_policy'")
    if not isinstance(cls.archive_after, int) or cls.archive_after < 1:
        raise WorkflowDefinitionError(f"{where}: 'archive_after' must be an integer >= 1")
    if isinstance(cls.version, bool) or not isinstance(cls.version, int) or cls.version < 1:
        raise WorkflowDefinitionError(f"{where}: 'version' must be an integer >= 1")
    _check_budget(cls, where)
    if not cls.phases:
        raise WorkflowDefinitionError(f"{where}: no phases; decorate methods with @phase(n)")
    previous = 0
    names: set[str] = set()
    for spec in cls.phases:
        label = f"{where}, phase {spec.name!r}"
        if isinstance(spec.number, bool) or not isinstance(spec.number, int) or spec.number < 1:
            raise WorkflowDefinitionError(f"{label}: number must be an integer >= 1")
        if spec.number <= previous:
            raise WorkflowDefinitionError(
                f"{label}: number {spec.number} does not follow {previous}; declare phases "
                "in order with increasing, unique numbers"
            )
        previous = spec.number
        if not _SNAKE.match(spec.name) or spec.name.startswith("x_"):
            raise WorkflowDefinitionError(
                f"{label}: name must be snake_case and must not start with 'x_'"
            )
        if spec.name in names:
            raise WorkflowDefinitionError(f"{label}: two phases share this name")
        names.add(spec.name)
        _check_arity(cls, spec.method_name, 2, f"{label}: the method must take (self, ctx)")
        if spec.fallback is not None:
            if not callable(getattr(cls, spec.fallback, None)):
                raise WorkflowDefinitionError(
                    f"{label}: fallback {spec.fallback!r} is not a method of the class"
                )
            _check_arity(cls, spec.fallback, 3, f"{label}: fallback must take (self, ctx, error)")
    for spec in cls.phases:
        _check_routes(spec, names, f"{where}, phase {spec.name!r}")


def _check_routes(spec: PhaseSpec, names: set[str], label: str) -> None:
    """A phase's ``routes`` name phases of the workflow; ``max_visits`` is at least 1."""
    routes = spec.routes
    if not isinstance(routes, tuple) or not all(isinstance(r, str) for r in routes):
        raise WorkflowDefinitionError(
            f'{label}: routes must be a tuple of phase names, like routes=("review",), '
            f"got {routes!r}"
        )
    unknown = [r for r in routes if r not in names]
    if unknown:
        raise WorkflowDefinitionError(
            f"{label}: routes name {unknown[0]!r}, which is not a phase of the workflow "
            f"(its phases: {', '.join(sorted(names))})"
        )
    if len(set(routes)) != len(routes):
        raise WorkflowDefinitionError(f"{label}: routes name a phase twice: {routes!r}")
    visits = spec.max_visits
    if isinstance(visits, bool) or not isinstance(visits, int) or visits < 1:
        raise WorkflowDefinitionError(f"{label}: max_visits must be an integer >= 1")


def _check_arity(cls: type[Workflow], method_name: str, positional: int, message: str) -> None:
    # Reading the code object is enough here and avoids importing inspect (slow to import).
    function = getattr(cls, method_name)
    code = getattr(function, "__code__", None)
    if code is None:
        return
    has_varargs = bool(code.co_flags & 0x04)
    defaults = len(getattr(function, "__defaults__", None) or ())
    required = code.co_argcount - defaults
    if not has_varargs and not (required <= positional <= code.co_argcount):
        raise WorkflowDefinitionError(message)
