"""``orchestrate init --host claude-code|codex|generic NAME``: what a coding agent needs to
drive the workflow as its host, written beside it.

- ``claude-code``: a slash command (``.claude/commands/NAME.md``) and the MCP server's
  entry in ``.mcp.json``;
- ``codex``: a section of ``AGENTS.md`` and the MCP server in ``.codex/config.toml``
  (read in a trusted project);
- ``generic``: ``NAME-host.md``, the loop in a few lines of markdown.

Each says the same loop: start the run, list what is pending, answer each request by
delegating it to the subagent it names, respond, resume; until the run completes or
fails, then report. ``docs/hosts.md`` explains each one.
"""

from __future__ import annotations

import json
from pathlib import Path

from .._errors import UsageError

HOSTS = ("claude-code", "codex", "generic")
SERVER = "orchestrator"

LOOP = """\
1. Start the run: `start_run` with workflow `{ref}` and its inputs (`list_workflows`
   shows what it reads).
2. `list_pending` with the run's id. Each request names an `agent`, carries a `prompt`,
   the answer's JSON Schema (`x_answer_schema`) and, when an answer before was refused,
   why (`x_previous_error`).
3. Answer each request by delegating its prompt to the subagent it names.{delegate}
   Then `respond` with the run id, the request id and the answer (JSON of the answer's schema,
   or text). A refused answer is a tool error naming the field: fix it and respond again.
   A subagent that cannot answer: `respond` with an `error` (type and message).
4. When every request is answered, `resume` (or `respond` with `resume: true` last).
5. Repeat from 2 until the run's status is `completed` or `failed`; then report the
   outcome: `status` and `output` of the run.

Without the MCP server, the same loop on the command line:
`orchestrate run {ref} --input KEY=VALUE` (exit 42: paused),
`orchestrate pending --json`, `orchestrate respond --request-id ID --text ANSWER` (or
`--file`), `orchestrate resume`, until exit 0 (completed) or 1 (failed); then
`orchestrate status` and `orchestrate output`.
"""

CLAUDE_COMMAND = """\
---
description: Drive the {name} workflow to its end with the orchestrator MCP tools
argument-hint: "[KEY=VALUE inputs]"
---
Drive a run of the `{name}` workflow as its host, with the tools of the `{server}` MCP
server (`mcp__{server}__start_run`, `mcp__{server}__list_pending`, ...). Inputs:
$ARGUMENTS

{loop}"""

AGENTS_SECTION = """\

## Driving the {name} workflow

When asked to run the `{name}` workflow, act as its host with the tools of the
`{server}` MCP server (configured in `.codex/config.toml`):

{loop}"""

GENERIC = """\
# Hosting the {name} workflow

Any coding agent with an MCP client can drive it: start `orchestrate mcp --workflow
{ref} --workdir .` as a stdio MCP server, then loop:

{loop}"""


def server_arguments(ref: str) -> list[str]:
    """The arguments that start the MCP server for workflow ``ref`` (in the project)."""
    return ["mcp", "--workdir", ".", "--workflow", ref]


def write_recipe(host: str, name: str, ref: str, directory: Path) -> list[Path]:
    """Write what ``host`` needs to drive workflow ``name`` (``ref``: its reference) into
    ``directory``; refuses to overwrite a recipe, adds to a configuration file."""
    if host == "claude-code":
        delegate = "\n   In Claude Code: the Task tool, with the subagent of that name."
        loop = LOOP.format(ref=ref, delegate=delegate)
        command = directory / ".claude" / "commands" / f"{name}.md"
        _refuse_existing(command)
        command.parent.mkdir(parents=True, exist_ok=True)
        command.write_text(
            CLAUDE_COMMAND.format(name=name, server=SERVER, loop=loop), encoding="utf-8"
        )
        return [command, _add_mcp_json(directory / ".mcp.json", ref)]
    if host == "codex":
        loop = LOOP.format(
            ref=ref, delegate="\n   In Codex: a subagent, or `codex exec` of its prompt."
        )
        agents = directory / "AGENTS.md"
        heading = f"## Driving the {name} workflow"
        before = agents.read_text(encoding="utf-8") if agents.exists() else ""
        if heading in before:
            raise UsageError(f"{agents} has a section '{heading}' already; nothing was written")
        section = AGENTS_SECTION.format(name=name, server=SERVER, loop=loop)
        agents.write_text(before + section if before else section.lstrip("\n"), encoding="utf-8")
        return [agents, _add_codex_config(directory / ".codex" / "config.toml", ref)]
    if host == "generic":
        recipe = directory / f"{name}-host.md"
        _refuse_existing(recipe)
        loop = LOOP.format(ref=ref, delegate="")
        recipe.write_text(GENERIC.format(name=name, ref=ref, loop=loop), encoding="utf-8")
        return [recipe]
    raise UsageError(f"--host {host!r}: choose one of {', '.join(HOSTS)}")


def _refuse_existing(path: Path) -> None:
    if path.exists() or path.is_symlink():
        raise UsageError(f"{path} already there; nothing was written")


def _add_mcp_json(path: Path, ref: str) -> Path:
    """``.mcp.json`` with the server's entry added (the others kept)."""
    config: dict[str, object] = {}
    if path.exists():
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise UsageError(f"{path}: not JSON ({exc}); fix it, then run init again") from None
    servers = config.setdefault("mcpServers", {})
    if not isinstance(servers, dict):
        raise UsageError(f"{path}: 'mcpServers' is not an object; fix it, then run init again")
    if SERVER not in servers:
        servers[SERVER] = {
            "type": "stdio",
            "command": "orchestrate",
            "args": server_arguments(ref),
        }
    path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return path


def _add_codex_config(path: Path, ref: str) -> Path:
    """``.codex/config.toml`` with the server's table added (the rest kept as it is)."""
    before = path.read_text(encoding="utf-8") if path.exists() else ""
    table = f"[mcp_servers.{SERVER}]"
    if table not in before:
        arguments = ", ".join(json.dumps(a) for a in server_arguments(ref))
        entry = f'{table}\ncommand = "orchestrate"\nargs = [{arguments}]\n'
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(before + ("\n" if before else "") + entry, encoding="utf-8")
    return path
