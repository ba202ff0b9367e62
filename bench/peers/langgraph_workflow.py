"""The benchmarks' workflows on LangGraph: N nodes in sequence, one ``interrupt()`` each;
or one node calling ``interrupt()`` N times in a loop.

``phases``: the same workflow as ``WORKFLOW_SOURCE`` in ``bench/resume_cycle.py`` (and the
phases shapes of ``bench/long_runs.py``): phase ``n`` pauses with the same ~300-character
prompt, is resumed with the same answer, and records ``{"phase": n, "answer_chars":
len(answer)}`` under ``phase_nnn``. ``loop``: the loop shape of ``bench/long_runs.py``: one
node named ``loop`` asks N times with the same prompts as ours (:func:`loop_prompt`);
LangGraph runs the node again from its start at every resume, and each ``interrupt()``
already answered returns its recorded answer. It records ``{"asks": N, "answer_chars":
total}`` under ``loop``. State lives in a ``SqliteSaver`` on a file, opened as LangGraph
ships it (``from_conn_string``: WAL, and the connection's default ``synchronous``, FULL
unless SQLite was built otherwise).

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


def loop_prompt(number: int, asks: int) -> str:
    """The prompt of ask ``number`` of the loop shape, character for character ours
    (``_prompt`` in ``LOOP_SOURCE`` of ``bench/long_runs.py``)."""
    text = (
        f"Ask {number} of {asks} of the long-run benchmark's loop. Read the answers to the "
        "earlier asks, then answer with one short paragraph that the next ask can use. "
    )
    return text * 2


def make_loop(asks: int) -> Any:
    def run(state: BenchState) -> dict[str, Any]:
        total = 0
        for number in range(1, asks + 1):
            total += len(interrupt(loop_prompt(number, asks)))
        return {"outputs": {"loop": {"asks": asks, "answer_chars": total}}}

    return run


def build_loop_graph(asks: int, checkpointer: SqliteSaver) -> CompiledStateGraph[Any]:
    """One node from START to END that pauses ``asks`` times in a loop."""
    builder = StateGraph(BenchState)
    builder.add_node("loop", make_loop(asks))
    builder.add_edge(START, "loop")
    builder.add_edge("loop", END)
    return builder.compile(checkpointer=checkpointer)


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


#: The shapes a graph can have: ``phases`` (N nodes, one interrupt each), ``loop`` (one
#: node, N interrupts).
SHAPES = ("phases", "loop")


@contextmanager
def open_graph(
    database: Path, size: int, shape: str = "phases"
) -> Iterator[CompiledStateGraph[Any]]:
    """The compiled graph of ``shape`` on a ``SqliteSaver`` at ``database``, connection as
    shipped."""
    build = build_loop_graph if shape == "loop" else build_graph
    with SqliteSaver.from_conn_string(str(database)) as saver:
        yield build(size, saver)


def prompt_of(shape: str, number: int, size: int) -> str:
    """The prompt of pause ``number`` (from 1) of a run of ``shape``."""
    return loop_prompt(number, size) if shape == "loop" else phase_prompt(number, size)


def thread_config(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}


def pending_prompt(result: dict[str, Any]) -> str | None:
    """The prompt of the interrupt ``invoke`` stopped at, or None when the graph ended."""
    interrupts = result.get("__interrupt__", ())
    return str(interrupts[0].value) if interrupts else None
