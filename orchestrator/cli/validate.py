"""The commands that judge a file of the agent bridge: ``validate`` checks a request,
response or state file; ``schema`` prints the JSON Schema of one, as shipped or a
workflow's own."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .common import EXIT_ERROR, EXIT_OK, Command


def _declare_validate(validate: argparse.ArgumentParser) -> None:
    validate.add_argument(
        "file",
        type=Path,
        metavar="FILE",
        help="the file to check: a request, a response or a state file",
    )
    validate.add_argument(
        "--workflow",
        default=None,
        help="also check the workflow's phase names, agent names and phase range",
    )
    validate.add_argument(
        "--kind",
        choices=["request", "response", "state"],
        default=None,
        help="default: from the file name",
    )


def _declare_schema(schema: argparse.ArgumentParser) -> None:
    schema.add_argument(
        "kind", choices=["request", "response", "state"], help="which file's schema to print"
    )
    schema.add_argument("--workflow", default=None, help="derive the schema for this workflow")


def _cmd_validate(args: argparse.Namespace) -> int:
    from .instance import validate_file

    workflow_cls = None
    if args.workflow:
        from ..engine.loader import locate_workflow

        _, workflow_cls = locate_workflow(args.workflow, base_dir=Path.cwd())
    problems = validate_file(args.file, kind=args.kind, workflow_cls=workflow_cls)
    if problems:
        for problem in problems:
            print(f"invalid: {problem}", file=sys.stderr)
        return EXIT_ERROR
    print(f"valid: {args.file}")
    return EXIT_OK


def _cmd_schema(args: argparse.Namespace) -> int:
    import json

    from ..formats.workflow_schemas import seed_schema, workflow_schemas

    if args.workflow:
        from ..engine.loader import locate_workflow

        _, workflow_cls = locate_workflow(args.workflow, base_dir=Path.cwd())
        schema = workflow_schemas(workflow_cls)[args.kind]
    else:
        schema = seed_schema(args.kind)
    print(json.dumps(schema, indent=2))
    return EXIT_OK


COMMANDS = {
    "validate": Command(
        "Check a bridge file (request, response or state); exit 0 valid, 1 invalid.",
        _declare_validate,
        _cmd_validate,
    ),
    "schema": Command(
        "Print the JSON Schema of an agent bridge file: as shipped, or a workflow's own.",
        _declare_schema,
        _cmd_schema,
    ),
}
