"""``orchestrate graph``: a workflow's phases and the routes they declare, as Mermaid text
(a ``flowchart TD`` a Markdown page or a Mermaid viewer draws)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .common import EXIT_OK, Command


def _declare_graph(graph: argparse.ArgumentParser) -> None:
    graph.add_argument(
        "workflow",
        metavar="WORKFLOW",
        help="pkg.module:Class, path/file.py:Class, path/file.py (the one workflow the file "
        "defines), or a registered workflow name",
    )


def _cmd_graph(args: argparse.Namespace) -> int:
    from ..engine.loader import locate_workflow
    from ..engine.routing import mermaid_graph

    _, workflow_cls = locate_workflow(args.workflow, base_dir=Path.cwd())
    print(mermaid_graph(workflow_cls), end="")
    return EXIT_OK


COMMANDS = {
    "graph": Command(
        "Print a workflow's phases in order and the routes they declare (Goto) as Mermaid "
        "text: solid arrows for the order, dashed ones labelled goto for the routes.",
        _declare_graph,
        _cmd_graph,
    ),
}
