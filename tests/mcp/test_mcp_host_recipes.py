"""``orchestrate init --host HOST NAME`` writes what the coding agent needs, and every
command, option and tool its recipe names exists."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.cli.mcp.tool_schemas import RUN_TOOLS
from support.cli import orchestrate

REPO = Path(__file__).resolve().parents[2]
#: The tools a recipe names, written as code: a word of snake_case.
TOOL_WORD = re.compile(r"`([a-z]+(?:_[a-z]+)+)`")


def options_of(command: str) -> set[str]:
    """The options ``orchestrate COMMAND`` takes, as its parser declares them."""
    parser = main.build_parser(command)
    (commands,) = [a for a in parser._actions if a.choices and command in a.choices]
    sub = commands.choices[command]
    return set(sub._option_string_actions)


def named_commands(text: str) -> list[list[str]]:
    """Every ``orchestrate ...`` the text names in code (inline or a block), as words."""
    spans = re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)
    spans += re.findall(r"`(orchestrate [^`]+)`", text)
    found = []
    for span in spans:
        joined = span.replace("\\\n", " ")
        for line in joined.splitlines():
            line = line.strip()
            if line.startswith("orchestrate "):
                found.append(shlex.split(line)[1:])
    return found


def check_commands(text: str, where: str) -> int:
    checked = 0
    for words in named_commands(text):
        command = words[0]
        assert command in main.COMMANDS, f"{where}: no command {command!r}"
        options = options_of(command)
        for word in words[1:]:
            if word.startswith("--"):
                assert word.split("=")[0] in options, f"{where}: {command} has no {word}"
        checked += 1
    return checked


@pytest.mark.parametrize("host", ["claude-code", "codex", "generic"])
def test_init_host_writes_a_recipe_whose_commands_exist(tmp_path: Path, host: str) -> None:
    done = orchestrate("init", "--host", host, "demo", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    written = [Path(line) for line in done.stdout.splitlines()]
    assert tmp_path / "demo.py" in written and all(p.is_file() for p in written)
    recipes = [p for p in written if p.suffix == ".md"]
    assert recipes
    for recipe in recipes:
        text = recipe.read_text(encoding="utf-8")
        assert check_commands(text, str(recipe)) >= 4
        tools = {w for w in TOOL_WORD.findall(text) if not w.startswith("x_")}
        assert tools <= set(RUN_TOOLS), tools - set(RUN_TOOLS)
        for tool in ("start_run", "list_pending", "respond", "resume", "status", "output"):
            assert f"`{tool}`" in text and tool in RUN_TOOLS, f"{recipe} does not name {tool}"
        for step in ("start_run", "list_pending", "respond", "resume", "completed", "failed"):
            assert step in text, f"{recipe} does not say {step}"


def test_the_claude_code_recipe_registers_the_server(tmp_path: Path) -> None:
    done = orchestrate("init", "--host", "claude-code", "demo", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / ".claude" / "commands" / "demo.md").is_file()
    server = json.loads((tmp_path / ".mcp.json").read_text())["mcpServers"]["orchestrator"]
    assert server["command"] == "orchestrate" and server["args"][0] == "mcp"
    check_commands(f"`orchestrate {shlex.join(server['args'])}`", ".mcp.json")
    again = orchestrate("init", "--host", "claude-code", "demo", cwd=tmp_path)
    assert again.returncode == 2 and "already there" in again.stderr


def test_the_codex_recipe_keeps_what_is_there(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("# Project rules\n\nBe brief.\n", encoding="utf-8")
    done = orchestrate("init", "--host", "codex", "demo", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    agents = (tmp_path / "AGENTS.md").read_text(encoding="utf-8")
    assert agents.startswith("# Project rules\n\nBe brief.\n")
    assert "## Driving the demo workflow" in agents
    config = (tmp_path / ".codex" / "config.toml").read_text(encoding="utf-8")
    tomllib = pytest.importorskip("tomllib")
    table = tomllib.loads(config)["mcp_servers"]["orchestrator"]
    check_commands(f"`orchestrate {shlex.join(table['args'])}`", ".codex/config.toml")


def test_the_hosts_page_names_only_what_exists() -> None:
    text = (REPO / "docs" / "hosts.md").read_text(encoding="utf-8")
    assert check_commands(text, "docs/hosts.md") >= 6
    assert "--handler" in text and "claude -p" in text and "codex exec" in text


def test_the_check_catches_a_command_or_option_that_does_not_exist() -> None:
    with pytest.raises(AssertionError, match="no --nope"):
        check_commands("`orchestrate pending --nope`", "sample")
    with pytest.raises(AssertionError, match="no command"):
        check_commands("```\norchestrate pend --json\n```", "sample")
