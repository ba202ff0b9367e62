"""A regression run as a workflow on the engine, so it has checkpoints, ``kill -9``
safety, events and history like any other.

Three phases. ``plan`` (one step) reads the cases, makes the run directory, keeps a copy
of the cases in ``assets/cases.json`` and writes a first ``run.json``. ``cases`` runs
every case as one recorded step, in the order they finish, with at most ``concurrency``
in flight: on resume, the recorded steps hand back their records and only the cases
without one are asked again. ``finish`` (one step) writes the manifest, removes assets
no case names (a try cut short by a crash and made again differently) and the final
``run.json`` with its stats.

The run's inputs are JSON (:func:`run_inputs`), so ``orchestrate resume`` can carry on
from the state alone; time, sleep and chance come from :attr:`RegressionRun.timing`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, ClassVar, TextIO

import attrs

from .._errors import ContractError, RunFailedError
from .._http import endpoint_of
from .._ports import Clock
from .._text import plural
from ..engine.context import PhaseContext
from ..engine.workflow import Workflow, phase
from ..formats.runs import (
    ASSETS_DIR,
    RUN_FILE,
    Attempt,
    CaseSpec,
    Limits,
    RetryPolicy,
    RunDocument,
    RunStats,
    dump_document,
    parse_cases,
)
from ..formats.strict_json import dumps_canonical
from ..formats.times import format_time, parse_time
from ..storage.beneath import make_directories
from ..storage.durable import atomic_write, sha256_hex
from ..storage.files import read_json_file
from .artifacts import manifest_item, sweep_assets, write_case, write_manifest
from .attempts import CaseResult, CaseRunner, Failure, Timing
from .cases import CASES_MAX_BYTES, read_cases
from .transport import command_label, portable_command, transport_for

WORKFLOW_REFERENCE = "orchestrator.evals.workflow:RegressionRun"
CASES_COPY = f"{ASSETS_DIR}/cases.json"


def run_inputs(
    *,
    version: str,
    agent: dict[str, Any],
    cases_file: Path,
    out_root: Path,
    repo_dir: Path,
    timeout_ms: int = 30_000,
    retries: int = 2,
    concurrency: int = 4,
    retry_classes: list[str] | None = None,
    base_delay_ms: int = 200,
    max_delay_ms: int = 5_000,
    limits: Limits | None = None,
) -> dict[str, Any]:
    """The inputs of a :class:`RegressionRun`. Its paths are relative to the run's work
    directory, ``out_root/version`` (where the engine keeps its state, in the folder a
    user copies to share the run): no absolute path of this machine is kept there. A
    command agent runs in ``repo_dir``, its absolute paths inside it written relative."""
    limits = limits or Limits()
    workdir = (out_root / version).resolve()
    if agent.get("kind") == "http":  # credentials in the URL are never sent: never kept
        agent = {**agent, "base_url": endpoint_of(str(agent["base_url"]))}
    if agent.get("kind") == "subprocess":  # run in repo_dir: its paths written relative
        agent = {**agent, "command": portable_command(str(agent["command"]), repo_dir.resolve())}
    return {
        "version": version,
        "agent": agent,
        "cases_file": _relative(cases_file.resolve(), workdir),
        "out_root": _relative(out_root.resolve(), workdir),
        "repo_dir": _relative(repo_dir.resolve(), workdir),
        "timeout_ms": timeout_ms,
        "retries": retries,
        "concurrency": concurrency,
        "retry_classes": retry_classes or ["timeout", "network_error", "http_5xx"],
        "base_delay_ms": base_delay_ms,
        "max_delay_ms": max_delay_ms,
        "limits": {
            "max_body_bytes": limits.max_body_bytes,
            "max_inline_snippet_bytes": limits.max_inline_snippet_bytes,
            "max_payload_inline_bytes": limits.max_payload_inline_bytes,
        },
    }


class RegressionRun(Workflow):
    """Runs every case of a cases file against one agent version; see the module."""

    name = "eval-run"
    purpose = "agent regression run"
    #: time, sleep and chance for the tries; a test gives its own (no real waiting)
    timing: ClassVar[Callable[[Clock], Timing]] = staticmethod(lambda clock: Timing(clock=clock))
    #: where the progress line goes
    progress_stream: ClassVar[Callable[[], TextIO]] = staticmethod(lambda: sys.stderr)

    @phase(1)
    def plan(self, ctx: PhaseContext) -> dict[str, Any]:
        return ctx.step("plan", self._plan, ctx.run_id, _run_dir(ctx), format_time(ctx.clock.now()))

    @phase(2)
    def cases(self, ctx: PhaseContext) -> dict[str, Any]:
        plan = ctx.output("plan")
        run_dir = _run_dir(ctx)
        cases = _cases_copy(run_dir, plan)
        runner = self._runner(ctx)
        progress = Progress(len(cases), type(self).progress_stream(), runner.timing.monotonic)
        records: list[dict[str, Any]] = []
        done: set[str] = set()  # the cases recorded so far; the pool runs the others
        pool = _Pool(self, run_dir, runner)
        try:
            for _ in cases:
                record = ctx.step("case", pool.next_record, cases, done)
                records.append(record)
                done.add(record["case_id"])
                progress.done(record)
        finally:
            pool.close()
        progress.end()
        return {"records": records}

    @phase(3)
    def finish(self, ctx: PhaseContext) -> dict[str, Any]:
        plan = ctx.output("plan")
        records = ctx.output("cases")["records"]
        return ctx.step("finish", self._finish, _run_dir(ctx), plan, records, ctx.clock)

    # -- the steps ----------------------------------------------------------------------

    def _plan(self, run_id: str, run_dir: Path, started_at: str) -> dict[str, Any]:
        inputs = self.inputs
        workdir = run_dir.parent
        cases_file = input_path(workdir, inputs["cases_file"])
        cases, values, raw = read_cases(cases_file)
        copy = dumps_canonical(values)
        make_directories(run_dir / ASSETS_DIR)
        atomic_write(run_dir / CASES_COPY, copy)
        commit, dirty = _repo_state(input_path(workdir, inputs["repo_dir"]))
        plan: dict[str, Any] = {
            "run_id": run_id,
            "started_at": started_at,
            "selected_case_ids": [c.id for c in cases],
            "cases_sha256": sha256_hex(raw),
            "copy_sha256": sha256_hex(copy),
            "cases_path": _relative(cases_file, run_dir),
            "out_dir": _relative(input_path(workdir, inputs["out_root"]), run_dir),
        }
        if commit is not None:
            plan["repo_commit"], plan["dirty"] = commit, dirty
        atomic_write(run_dir / RUN_FILE, dump_document(self._run_document(plan, started_at)))
        return plan

    def _finish(
        self, run_dir: Path, plan: dict[str, Any], records: list[dict[str, Any]], clock: Clock
    ) -> dict[str, Any]:
        ended = clock.now()
        generated_at = format_time(ended)
        version = self.inputs["version"]
        items = [manifest_item(run_dir, "cases.json", None, None)]
        items += [
            manifest_item(run_dir, name, record["case_id"], version)
            for record in records
            for name in record.get("assets", ())
        ]
        write_manifest(run_dir, items, generated_at=generated_at)
        sweep_assets(run_dir, {item["href"] for item in items})
        by_class: dict[str, int] = {}
        for record in records:
            if "error_class" in record:
                by_class[record["error_class"]] = by_class.get(record["error_class"], 0) + 1
        failed = sum(by_class.values())
        stats = RunStats(
            cases_total=len(plan["selected_case_ids"]),
            cases_completed=len(records) - failed,
            cases_failed=failed,
            duration_ms=round((ended - parse_time(plan["started_at"])).total_seconds() * 1000),
            x_cases_by_error_class=dict(sorted(by_class.items())),
        )
        document = self._run_document(plan, generated_at, stats=stats)
        atomic_write(run_dir / RUN_FILE, dump_document(document))
        return {
            "cases_total": stats.cases_total,
            "cases_completed": stats.cases_completed,
            "cases_failed": stats.cases_failed,
        }

    def _run_document(
        self, plan: dict[str, Any], generated_at: str, *, stats: RunStats | None = None
    ) -> RunDocument:
        from .. import __version__

        inputs = self.inputs
        return RunDocument(
            run_id=plan["run_id"],
            version=inputs["version"],
            generated_at=generated_at,
            base_url=transport_url(inputs["agent"]),
            cases_path=plan["cases_path"],
            out_dir=plan["out_dir"],
            selected_case_ids=plan["selected_case_ids"],
            runner_version=f"checkpoint-orchestrator {__version__}",
            repo_commit=plan.get("repo_commit"),
            dirty=plan.get("dirty"),
            timeout_ms=inputs["timeout_ms"],
            retries=inputs["retries"],
            concurrency=inputs["concurrency"],
            retry_policy=self._policy(),
            limits=Limits(**inputs["limits"]),
            stats=stats
            or RunStats(
                cases_total=len(plan["selected_case_ids"]),
                cases_completed=0,
                cases_failed=0,
                duration_ms=0,
            ),
            x_started_at=plan["started_at"],
            x_status="completed" if stats else "running",
            x_cases_copy=CASES_COPY,
            x_cases_sha256=plan["cases_sha256"],
            x_python_version=sys.version.split()[0],
        )

    def _policy(self) -> RetryPolicy:
        inputs = self.inputs
        return RetryPolicy(
            classes=list(inputs["retry_classes"]),
            x_base_delay_ms=inputs["base_delay_ms"],
            x_max_delay_ms=inputs["max_delay_ms"],
        )

    def _runner(self, ctx: PhaseContext) -> CaseRunner:
        inputs = self.inputs
        return CaseRunner(
            transport=transport_for(
                inputs["agent"], cwd=input_path(ctx.workdir, inputs["repo_dir"])
            ),
            bodies=_run_dir(ctx) / ASSETS_DIR,
            version=inputs["version"],
            run_id=ctx.run_id,
            timeout_ms=inputs["timeout_ms"],
            retries=inputs["retries"],
            policy=self._policy(),
            limits=Limits(**inputs["limits"]),
            timing=type(self).timing(ctx.clock),
        )


def transport_url(agent: dict[str, Any]) -> str:
    """What ``base_url`` says of the agent: its URL, or ``subprocess:``/``callable:`` and
    what runs."""
    if agent["kind"] == "http":
        return endpoint_of(str(agent["base_url"]))
    if agent["kind"] == "subprocess":
        return command_label(str(agent["command"]))
    return f"callable:{agent['ref']}"


class _Pool:
    """The cases not yet recorded, run ``concurrency`` at a time; each call of
    :meth:`next_record` hands over the next one to finish. Started by the first step that
    is not a replay: every case recorded before it is known by then.

    A case holds one of ``concurrency`` slots from its first try until its step is
    recorded (the next call of :meth:`next_record` comes after that), so finished cases
    do not pile up unrecorded: a crash loses, and a resume asks again, at most
    ``concurrency`` of them."""

    def __init__(self, workflow: RegressionRun, run_dir: Path, runner: CaseRunner) -> None:
        import threading

        self._workflow = workflow
        self._run_dir = run_dir
        self._runner = runner
        self._executor: ThreadPoolExecutor | None = None
        self._finished: Iterator[Future[dict[str, Any]]] | None = None
        self._slots = threading.Semaphore(max(1, workflow.inputs["concurrency"]))
        self._closing = threading.Event()
        self._handed = False  # a record handed over, its slot held until it is recorded

    def next_record(self, cases: list[CaseSpec], done: set[str]) -> dict[str, Any]:
        if self._handed:  # the engine recorded it before asking for the next
            self._handed = False
            self._slots.release()
        if self._finished is None:
            inputs = self._workflow.inputs
            self._executor = ThreadPoolExecutor(max_workers=max(1, inputs["concurrency"]))
            futures = [
                self._executor.submit(self._slotted, case) for case in cases if case.id not in done
            ]
            self._finished = as_completed(futures)
        record = next(self._finished).result()
        self._handed = True
        return record

    def _slotted(self, case: CaseSpec) -> dict[str, Any]:
        self._slots.acquire()
        if self._closing.is_set():
            self._slots.release()  # wakes the next waiting worker, which also leaves
            raise RuntimeError("the run stopped before this case began")
        try:
            return self._one(case)
        except BaseException:
            self._slots.release()
            raise

    def _one(self, case: CaseSpec) -> dict[str, Any]:
        try:
            result = self._runner.run(case)
        except Exception as exc:  # a bug of the runner's is this case's failure, not the run's
            result = _broken(self._runner.timing, exc, "the runner failed")
        try:
            return self._write(case, result)
        except ContractError as exc:  # what a reader would refuse is never written
            return self._write(case, _broken(self._runner.timing, exc, "not written", result))
        finally:  # a body not kept as an asset (kept, this does nothing)
            if result.failure is not None and result.failure.body is not None:
                result.failure.body.discard()

    def _write(self, case: CaseSpec, result: CaseResult) -> dict[str, Any]:
        inputs = self._workflow.inputs
        return write_case(
            self._run_dir,
            case,
            result,
            version=inputs["version"],
            url=self._runner.transport.url,
            timeout_ms=inputs["timeout_ms"],
            limits=self._runner.limits,
        )

    def close(self) -> None:
        self._closing.set()
        self._slots.release()  # a worker waiting for a slot wakes, sees closing, leaves
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)


class Progress:
    """One line on stderr: cases done of the total, failures so far, the rate."""

    def __init__(self, total: int, stream: TextIO, monotonic: Callable[[], float]) -> None:
        self._total, self._stream, self._monotonic = total, stream, monotonic
        self._done = self._failed = self._fresh = 0
        self._started = monotonic()
        self._last_print = float("-inf")
        self._tty = bool(getattr(stream, "isatty", lambda: False)())

    def done(self, record: dict[str, Any]) -> None:
        self._done += 1
        self._failed += record["status"] != "ok"
        self._fresh += 1
        now = self._monotonic()
        if self._tty or now - self._last_print >= 1.0 or self._done == self._total:
            self._print(now)

    def _print(self, now: float) -> None:
        elapsed = now - self._started
        rate = self._fresh / elapsed if elapsed > 0 else 0.0
        line = (
            f"eval run: {self._done}/{plural(self._total, 'case')} done, {self._failed} failed, "
            f"{rate:.1f} cases/s"
        )
        self._stream.write(("\r" + line) if self._tty else line + "\n")
        self._stream.flush()
        self._last_print = now

    def end(self) -> None:
        if self._tty and self._done:
            self._stream.write("\n")
            self._stream.flush()


def _broken(
    timing: Timing, exc: Exception, what: str, result: CaseResult | None = None
) -> CaseResult:
    """A case ended by an error of the runner's own: an ``other`` failure naming it."""
    attempts = list(result.attempts) if result else []
    if not attempts:
        started = format_time(timing.clock.now())
        attempts = [Attempt(attempt=1, started_at=started, outcome="runner_error")]
    attempts[-1] = attrs.evolve(attempts[-1], outcome="runner_error", error_class="other")
    failure = Failure(
        error_class="other", error_name=type(exc).__name__, error_message=f"{what}: {exc}"
    )
    return CaseResult(
        attempts=attempts, failure=failure, latency_ms=result.latency_ms if result else None
    )


def _run_dir(ctx: PhaseContext) -> Path:
    return ctx.workdir / ctx.run_id


def _cases_copy(run_dir: Path, plan: dict[str, Any]) -> list[CaseSpec]:
    """The run's own copy of its cases, as the plan recorded it."""
    source = str(run_dir / CASES_COPY)
    values = read_json_file(run_dir / CASES_COPY, max_bytes=CASES_MAX_BYTES, source=source)
    if sha256_hex(dumps_canonical(values)) != plan["copy_sha256"]:
        raise RunFailedError(
            f"{source} changed since the run began (its sha256 differs); restore it, or start "
            "a new run with 'orchestrate eval run'"
        )
    return parse_cases(values, source=source)


def _relative(path: Path, start: Path) -> str:
    import os

    return os.path.relpath(path, start).replace(os.sep, "/")


def input_path(workdir: Path, recorded: str) -> Path:
    """A path of a run's inputs as a place here: relative to the run's work directory
    (an absolute one, recorded by an earlier version, as it is)."""
    import os

    return Path(os.path.normpath(workdir.resolve() / recorded))


def _repo_state(directory: Path) -> tuple[str | None, bool]:
    """The commit checked out where the run started, and whether the tree had changes."""
    import subprocess

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", *args],
                cwd=directory,
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None, False
    status = git("status", "--porcelain", "--untracked-files=no")
    return commit, bool(status)
