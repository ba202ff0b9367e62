"""The command-line reference (``docs/cli.md``), made from the parser itself.

``python -m orchestrator.cli.reference > docs/cli.md`` writes it; a test compares the file
with what this module makes, so the page never drifts from the commands.
"""

from __future__ import annotations

import argparse

from .main import COMMANDS, build_parser

HEADER = """# Command-line reference

Made from the parser by `python -m orchestrator.cli.reference > docs/cli.md`; a test
keeps it current. Exit codes: 0 done, 1 error (state kept), 2 usage, 42 paused for an
agent, 75 another process holds the instance.
"""


def render() -> str:
    """The whole reference, as Markdown."""
    parts = [HEADER]
    top = build_parser()
    parts.append(_command("orchestrate", top, level=2))
    for name, parser in _subparsers(top):
        parts.append(_command(f"orchestrate {name}", parser, level=2))
        for sub, inner in _subparsers(parser):
            parts.append(_command(f"orchestrate {name} {sub}", inner, level=3))
    return "\n".join(parts)


def _subparsers(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            choices: dict[str, argparse.ArgumentParser] = action.choices
            if parser.prog.split()[1:]:  # a command's own subcommands, in their order
                return list(choices.items())
            ordered = [name for name in COMMANDS if name in choices]
            ordered += [name for name in choices if name not in ordered]
            return [(name, choices[name]) for name in ordered]
    return []


def _command(title: str, parser: argparse.ArgumentParser, *, level: int) -> str:
    usage = " ".join(parser.format_usage().split())
    usage = usage.removeprefix("usage: ")
    lines = [f"{'#' * level} `{title}`", ""]
    if parser.description:
        lines += [parser.description, ""]
    lines += ["```", usage, "```", ""]
    rows = [
        (_names(action), _text(action))
        for action in parser._actions
        if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))
    ]
    if rows:
        lines += ["| argument | what it does |", "| --- | --- |"]
        lines += [f"| {names} | {text} |" for names, text in rows]
        lines.append("")
    return "\n".join(lines)


def _names(action: argparse.Action) -> str:
    if action.option_strings:
        shown = ", ".join(f"`{option}`" for option in action.option_strings)
        if action.nargs != 0:
            shown += f" `{action.metavar or action.dest.upper()}`"
        return shown
    return f"`{action.metavar or action.dest}`"


def _text(action: argparse.Action) -> str:
    text = " ".join(str(action.help or "").split()).replace("|", "\\|")
    if action.choices and not isinstance(action.choices, dict):
        text += f" (one of: {', '.join(map(str, action.choices))})"
    if action.required and action.option_strings:
        text += " (required)"
    return text


if __name__ == "__main__":
    print(render(), end="")
