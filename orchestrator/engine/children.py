"""Child runs: ``ctx.child`` and ``ctx.children_all`` start runs of other workflows (each
a run of its own: its id, state and evidence), pause the parent until they end, and hand
back their outputs.

The engine never runs a child itself: the host gives each engine a
:class:`~orchestrator._ports.ChildRuns` (``Engine.children``), which starts and advances
the children in the host's store (in-process, or left to the store's workers). What the
parent learnt is journaled like any other call: the children's run ids first (saved
before any child is created, so a crash never starts a second child), then their outputs
or the failure, so a replay of the parent uses what was recorded and runs no child again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from .._errors import ChildRunFailedError, RunFailedError, WorkflowNotFoundError
from .._ports import ChildRunInput, ChildRunState
from ..storage.runs import is_run_id
from .record import JournalEntry, Pause, copy_json, to_json_value
from .workflow import Workflow

if TYPE_CHECKING:
    from .engine import Engine
    from .workflow import PhaseSpec

#: The longest ``id`` a child may be given (its run id is the parent's, a dot, the id).
MAX_CHILD_ID = 100


@attrs.frozen(kw_only=True)
class Child:
    """One child run for :meth:`PhaseContext.children_all`: the workflow it runs (a
    :class:`Workflow` class, or a reference ``path/file.py:Class`` or
    ``package.module:Class``), its inputs, and ``id`` (the same id in the same parent
    run is the same child run; without one, each call starts a new child)."""

    workflow: Any
    inputs: dict[str, Any] = attrs.field(factory=dict)
    id: str | None = None


def as_child(item: Any, *, where: str) -> Child:
    """``item`` as a :class:`Child`: one already, or a tuple ``(workflow, inputs[, id])``."""
    if isinstance(item, Child):
        return item
    if isinstance(item, tuple) and len(item) in (2, 3):
        return Child(workflow=item[0], inputs=item[1], id=item[2] if len(item) == 3 else None)
    raise RunFailedError(
        f"{where}: each child is a Child(workflow, inputs, id=...) or a tuple "
        f"(workflow, inputs[, id]), not {item!r}"
    )


def reference_of(workflow: Any, *, parent_ref: str, where: str) -> tuple[str, type[Workflow]]:
    """The reference to record for a child's workflow, and its class: a class is named
    by its file (a workflow loaded from a file) or its module; a reference that names a
    relative file is taken from the parent workflow's directory."""
    from .loader import locate_workflow

    if isinstance(workflow, type) and issubclass(workflow, Workflow):
        module = workflow.__module__
        if module.startswith("_orchestrator_workflow_"):
            import sys

            path = getattr(sys.modules.get(module), "__file__", None)
            if path is None:
                raise RunFailedError(f"{where}: cannot tell which file {workflow!r} comes from")
            return f"{Path(path).resolve()}:{workflow.__qualname__}", workflow
        return f"{module}:{workflow.__qualname__}", workflow
    if not isinstance(workflow, str) or not workflow:
        raise RunFailedError(
            f"{where}: the child's workflow must be a Workflow class or a reference "
            f"('path/file.py:Class', 'package.module:Class'), not {workflow!r}"
        )
    parent_file = parent_ref.rpartition(":")[0]
    base = Path(parent_file).parent if parent_file.endswith(".py") else Path.cwd()
    try:
        return locate_workflow(workflow, base_dir=base)
    except WorkflowNotFoundError as exc:
        raise RunFailedError(f"{where}: {exc}") from None


class ChildRunner:
    """The phase context's part that runs ``ctx.child``/``ctx.children_all`` at one
    journal position."""

    def __init__(self, engine: Engine, spec: PhaseSpec) -> None:
        self._engine = engine
        self._spec = spec

    def where(self) -> str:
        return f"phase {self._spec.name!r}"

    def fingerprint(self, children: Sequence[Child]) -> tuple[list[str], list[str], list[Any]]:
        """``(fingerprint, references, inputs)`` of the children as this code names them."""
        where = self.where()
        record = self._engine.record
        prints, refs, inputs = [], [], []
        for child in children:
            if child.id is not None and (
                not isinstance(child.id, str)
                or not is_run_id(child.id)
                or len(child.id) > MAX_CHILD_ID
            ):
                raise RunFailedError(
                    f"{where}: a child's id must be a plain name of letters, digits, '.', "
                    f"'_' and '-' (at most {MAX_CHILD_ID} characters), not {child.id!r}"
                )
            if not isinstance(child.inputs, dict):
                raise RunFailedError(
                    f"{where}: a child's inputs must be a dict, not {child.inputs!r}"
                )
            ref, cls = reference_of(child.workflow, parent_ref=record.workflow, where=where)
            refs.append(ref)
            inputs.append(to_json_value(child.inputs, where=f"{where}: the child's inputs"))
            prints.append(f"{cls.name} {child.id or ''}".rstrip())
        return prints, refs, inputs

    def open(
        self, position: int, fingerprint: list[str], children: Sequence[Child]
    ) -> JournalEntry:
        """Journal the children's run ids and save, before any of them is created."""
        engine = self._engine
        record = engine.record
        ids = [
            f"{record.run_id}.{child.id}" if child.id is not None else engine.new_id()
            for child in children
        ]
        entry = JournalEntry(
            position=position, kind="children", fingerprint=fingerprint, result={"runs": ids}
        )
        engine.journal.append(entry)
        for run_id in ids:
            if run_id not in record.children:
                record.children.append(run_id)
        engine.save("before_children")
        return entry

    def settle(self, entry: JournalEntry, refs: list[str], inputs: list[Any]) -> list[Any]:
        """Advance the children of ``entry`` (through the host); their outputs when every
        one completed, the failure of the first that did not; a pause while any runs."""
        engine = self._engine
        record = engine.record
        host = engine.children
        ids = [str(i) for i in entry.result["runs"]]
        if host is None:
            raise RunFailedError(
                f"{self.where()}: starts child runs, and this host runs none (give the "
                "engine a ChildRuns: Engine.children)"
            )
        states: list[ChildRunState] = []
        for run_id, ref, child_inputs in zip(ids, refs, inputs, strict=True):
            states.append(
                host.advance(
                    ChildRunInput(
                        run_id=run_id,
                        parent_run_id=record.run_id,
                        workflow_ref=ref,
                        inputs=copy_json(child_inputs),
                        workdir=record.workdir,
                    )
                )
            )
        waiting = [s.run_id for s in states if not s.ended]
        if waiting:
            record.waiting_children = waiting
            raise Pause()
        record.waiting_children = []
        failed = next((s for s in states if s.status != "completed"), None)
        position = entry.position
        if failed is not None:
            how = "was cancelled" if failed.status == "cancelled" else "failed"
            message = f"child run {failed.run_id} {how}" + (
                f": {failed.failure}" if failed.failure else ""
            )
            error = {"run_id": failed.run_id, "status": failed.status, "message": message}
            engine.journal.replace(attrs.evolve(entry, error=error))
            engine.save("after_children")
            raise ChildRunFailedError(message, run_id=failed.run_id, status=failed.status)
        outputs = [copy_json(s.outputs or {}) for s in states]
        done = attrs.evolve(entry, result={"runs": ids, "outputs": outputs})
        engine.journal.replace(done)
        engine.save("after_children")
        assert done.position == position
        return copy_json(outputs)  # type: ignore[no-any-return]


def recorded_failure(error: dict[str, Any]) -> ChildRunFailedError:
    """The failure a children entry recorded, raised again on replay."""
    return ChildRunFailedError(
        str(error.get("message")), run_id=str(error.get("run_id")), status=str(error.get("status"))
    )


def run_children(
    engine: Engine,
    spec: PhaseSpec,
    children: Sequence[Any],
    *,
    next_position: Callable[[], int],
    recorded: Callable[..., JournalEntry | None],
) -> list[Any]:
    """``ctx.children_all``: start the child runs (or take what the journal recorded of
    them), pause until every one has ended, and return their outputs in order.
    ``next_position`` and ``recorded`` are the phase context's journal cursor."""
    where = f"phase {spec.name!r}: ctx.children_all"
    specs = [as_child(item, where=where) for item in children]
    if not specs:
        return []
    runner = ChildRunner(engine, spec)
    fingerprint, refs, inputs = runner.fingerprint(specs)
    position = next_position()
    what = f"children of {', '.join(fingerprint)}"
    journal = engine.journal
    kept = journal.entry(position)
    if (
        kept is not None
        and journal.reopened
        and kept.kind == "children"
        and kept.fingerprint == fingerprint
        and kept.error is not None
    ):
        # A retry: the same child runs go on (a retry of this run retried them).
        journal.replace(
            JournalEntry(
                position=position,
                kind="children",
                fingerprint=fingerprint,
                result={"runs": kept.result["runs"]},
            )
        )
    entry = recorded(position, kind="children", fingerprint=fingerprint, what=what)
    if entry is not None:
        if entry.error is not None:
            raise recorded_failure(entry.error)
        if "outputs" in entry.result:
            return copy_json(entry.result["outputs"])  # type: ignore[no-any-return]
        if engine.replay_only:
            raise Pause()  # the recorded run was still waiting for them here
    else:
        entry = runner.open(position, fingerprint, specs)
    return runner.settle(entry, refs, inputs)
