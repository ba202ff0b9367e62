"""The resume-cycle workflow on LangGraph: N nodes in sequence, one ``interrupt()`` each.

The same workflow as ``WORKFLOW_SOURCE`` in ``bench/resume_cycle.py``: phase ``n`` pauses
with the same ~300-character prompt, is resumed with the same answer, and records
``{"phase": n, "answer_chars": len(answer)}`` under ``phase_nnn``. State lives in a
``SqliteSaver`` on a file, opened as LangGraph ships it (``from_conn_string``: WAL, and the
connection's default ``synchronous``, FULL unless SQLite was built otherwise).

Imported both by the measuring process and by each fresh process of
``langgraph_resume.py``, so it imports nothing the one-step process would not need.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import interrupt

#: What a pausing process exits with, as ``orchestrate`` does.
EXIT_PAUSED = 42
#: The file the host writes the answer to before a cross-process resume.
ANSWER_FILE = "answer.txt"
#: The benchmark's one thread per checkpoint database (cross-process runs).
THREAD = "bench"
ANSWER = (
    "Done. The benchmark agent read the prompt, did nothing of substance, and answers with "
    "this fixed paragraph of about two hundred characters so that every response is alike."
)


def merge_outputs(done: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The reducer of ``outputs``: each node adds its own phase's entry."""
    return {**done, **new}


class BenchState(TypedDict):
    outputs: Annotated[dict[str, Any], merge_outputs]


def phase_name(number: int) -> str:
    return f"phase_{number:03d}"


def phase_prompt(number: int, phases: int) -> str:
    """The prompt of ours, character for character (``_prompt`` in WORKFLOW_SOURCE)."""
    text = (
        f"Phase {number} of {phases} of the resume-cycle benchmark. Read the notes of the "
        "earlier phases, then answer with one short paragraph that the next phase can use. "
    )
    return text * 2


def make_phase(number: int, phases: int) -> Any:
    prompt = phase_prompt(number, phases)

    def run(state: BenchState) -> dict[str, Any]:
        answer = interrupt(prompt)
        return {"outputs": {phase_name(number): {"phase": number, "answer_chars": len(answer)}}}

    return run


def build_graph(phases: int, checkpointer: SqliteSaver) -> CompiledStateGraph[Any]:
    """``phases`` nodes from START to END, each pausing once."""
    builder = StateGraph(BenchState)
    previous = START
    for number in range(1, phases + 1):
        builder.add_node(phase_name(number), make_phase(number, phases))
        builder.add_edge(previous, phase_name(number))
        previous = phase_name(number)
    builder.add_edge(previous, END)
    return builder.compile(checkpointer=checkpointer)


@contextmanager
def open_graph(database: Path, phases: int) -> Iterator[CompiledStateGraph[Any]]:
    """The compiled graph on a ``SqliteSaver`` at ``database``, connection as shipped."""
    with SqliteSaver.from_conn_string(str(database)) as saver:
        yield build_graph(phases, saver)


def thread_config(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}


def pending_prompt(result: dict[str, Any]) -> str | None:
    """The prompt of the interrupt ``invoke`` stopped at, or None when the graph ended."""
    interrupts = result.get("__interrupt__", ())
    return str(interrupts[0].value) if interrupts else None
