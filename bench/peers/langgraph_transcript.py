"""The LangGraph peer of ``bench/transcript_growth.py``: one node that resends its growing
transcript at every ``interrupt()`` (each prompt the last one plus 1 KiB), on a
``SqliteSaver`` file as LangGraph ships it; what is measured is the file's size (with its
``-wal`` and ``-shm``) once the loop completes."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from peers.langgraph_workflow import thread_config


class TranscriptState(TypedDict, total=False):
    asks: int


def _graph(asks: int, prompt_of: Callable[[int], str], saver: SqliteSaver) -> Any:
    def loop(state: TranscriptState) -> dict[str, Any]:
        for number in range(asks):
            interrupt(prompt_of(number))
        return {"asks": asks}

    builder = StateGraph(TranscriptState)
    builder.add_node("loop", loop)
    builder.add_edge(START, "loop")
    builder.add_edge("loop", END)
    return builder.compile(checkpointer=saver)


def measure(asks: int, prompt_of: Callable[[int], str], answer: str, root: Path) -> int:
    """The bytes of LangGraph's SQLite files after the loop of ``asks`` asks completes."""
    folder = Path(tempfile.mkdtemp(prefix="langgraph-transcript-", dir=root))
    database = folder / "checkpoints.sqlite"
    config = thread_config("transcript")
    with SqliteSaver.from_conn_string(str(database)) as saver:
        graph = _graph(asks, prompt_of, saver)
        result = graph.invoke({"asks": 0}, config)
        pauses = 0
        while result.get("__interrupt__"):
            pauses += 1
            result = graph.invoke(Command(resume=answer), config)
        if pauses != asks or result.get("asks") != asks:
            raise RuntimeError(f"LangGraph's loop paused {pauses} times, not {asks}")
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
