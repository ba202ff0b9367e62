"""One step of the LangGraph peer in a fresh process, as ``orchestrate resume`` is for ours.

    python bench/peers/langgraph_resume.py start|resume DATABASE SIZE [phases|loop]

Imports LangGraph, opens the ``SqliteSaver`` at DATABASE, compiles the graph of the shape
(``phases``, the default: SIZE nodes with one interrupt each; ``loop``: one node with SIZE
interrupts in a loop, see ``langgraph_workflow.py``) and invokes it
once: ``start`` from the beginning, ``resume`` with ``Command(resume=...)`` carrying the
answer the host wrote to ``answer.txt`` beside the database. Prints the next interrupt's
prompt as JSON and exits 42, or prints the outputs and exits 0 when the graph ends.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from langgraph.types import Command
from langgraph_workflow import (
    ANSWER_FILE,
    EXIT_PAUSED,
    SHAPES,
    THREAD,
    open_graph,
    pending_prompt,
    thread_config,
)


def main(argv: list[str]) -> int:
    action, database, size, *rest = argv
    shape = rest[0] if rest else "phases"
    if shape not in SHAPES or action not in ("start", "resume"):
        print(f"usage: {sys.argv[0]} start|resume DATABASE SIZE [phases|loop]", file=sys.stderr)
        return 2
    path = Path(database)
    with open_graph(path, int(size), shape) as graph:
        if action == "start":
            result = graph.invoke({"outputs": {}}, thread_config(THREAD))
        else:
            answer = (path.parent / ANSWER_FILE).read_text(encoding="utf-8")
            result = graph.invoke(Command(resume=answer), thread_config(THREAD))
    prompt = pending_prompt(result)
    if prompt is None:
        print(json.dumps({"outputs": result["outputs"]}))
        return 0
    print(json.dumps({"prompt": prompt}))
    return EXIT_PAUSED


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
