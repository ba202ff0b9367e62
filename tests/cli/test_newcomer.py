"""A newcomer's first hour: ``orchestrate init`` makes a workflow and its test that run
and pass as written, every option says what it does, and ``--version`` answers."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest

from orchestrator import Workflow, phase
from orchestrator.cli.main import COMMANDS
from orchestrator.cli.main import build_parser as _parser
from orchestrator.testing import MockAgentInvoker
from support.cli import orchestrate


@pytest.mark.slow
def test_init_then_its_tests_pass_in_a_fresh_directory(tmp_path: Path) -> None:
    made = orchestrate("init", "demo", "--directory", tmp_path)
    assert made.returncode == 0, made.stderr
    assert made.stdout.split() == [str(tmp_path / "demo.py"), str(tmp_path / "demo_test.py")]
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "demo_test.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "2 passed" in tests.stdout


@pytest.mark.slow
def test_the_made_workflow_runs_as_its_docstring_says(tmp_path: Path) -> None:
    assert orchestrate("init", "code-review", "--directory", tmp_path).returncode == 0
    env = {"PYTHONDONTWRITEBYTECODE": "1"}
    started = orchestrate("run", f"{tmp_path / 'code_review.py'}:CodeReview",
                          "--workdir", tmp_path, "--input", "topic=owls", env=env)  # fmt: skip
    assert started.returncode == 42, started.stderr
    answered = orchestrate("respond", "--workdir", tmp_path, "--text", "Owls hunt at night.")
    assert answered.returncode == 0, answered.stderr
    resumed = orchestrate("resume", "--workdir", tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    output = orchestrate("output", "measure", "--workdir", tmp_path)
    assert '"words": 4' in output.stdout


@pytest.mark.parametrize("name", ["Demo", "two__dashes", "x-", "class", "a b"])
def test_init_refuses_a_name_that_is_not_kebab_case(tmp_path: Path, name: str) -> None:
    refused = orchestrate("init", name, "--directory", tmp_path)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert list(tmp_path.iterdir()) == []


def test_init_overwrites_nothing(tmp_path: Path) -> None:
    (tmp_path / "demo_test.py").write_text("mine\n")
    refused = orchestrate("init", "demo", "--directory", tmp_path)
    assert refused.returncode == 2 and "already there" in refused.stderr
    assert (tmp_path / "demo_test.py").read_text() == "mine\n"
    assert not (tmp_path / "demo.py").exists()


def test_version() -> None:
    from importlib.metadata import version

    shown = orchestrate("--version")
    assert shown.returncode == 0
    assert (
        shown.stdout
        == f"orchestrate (checkpoint-orchestrator) {version('checkpoint-orchestrator')}\n"
    )


def parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    """Every parser of the CLI, the board's subcommands included, with its name."""
    found = [("orchestrate", _parser())]
    index = 0
    while index < len(found):
        name, parser = found[index]
        index += 1
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                found += [(f"{name} {sub}", p) for sub, p in action.choices.items()]
    return found


def test_every_option_and_argument_of_every_command_has_help() -> None:
    missing = [
        f"{name} {action.option_strings or action.dest}"
        for name, parser in parsers()
        for action in parser._actions
        if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))
        and not action.help
    ]
    assert missing == []
    assert {name.split()[1] for name, _ in parsers() if name.count(" ") == 1} == set(COMMANDS)


def option_help(command: str, option: str) -> str:
    parser = dict(parsers())[command]
    return next(a.help or "" for a in parser._actions if option in a.option_strings)


@pytest.mark.parametrize(
    "command",
    [["worker"], ["db", "upgrade"], ["db", "status"], ["export", "--run", "r", "--to", "x"]],
)
def test_a_command_that_needs_a_store_says_so_in_its_help(command: list[str]) -> None:
    name = " ".join(["orchestrate", *(word for word in command[:2] if not word.startswith("-"))])
    shown = option_help(name, "--store")
    assert "work directory" not in shown and "required" in shown, shown
    refused = orchestrate(*command)  # no --store, no $ORCHESTRATOR_STORE
    assert refused.returncode == 2 and "--store" in refused.stderr, refused.stderr


@pytest.mark.parametrize("command", ["resume", "respond"])
def test_workflow_option_says_what_it_does_in_a_one_instance_directory(
    tmp_path: Path, command: str
) -> None:
    shown = option_help(f"orchestrate {command}", "--workflow")
    assert "several" not in shown and "one instance" in shown, shown
    (tmp_path / ".demo-state.json").write_text("{}")  # refused before it is read
    answer = ["--text", "x"] if command == "respond" else []
    refused = orchestrate(command, "--workdir", tmp_path, "--workflow", "other", *answer)
    assert refused.returncode == 2 and "no other instance here" in refused.stderr


@attrs.frozen
class Verdict:
    verdict: str
    confidence: float


class Judge(Workflow):
    name = "judge"
    agents = ("judge",)

    @phase(1)
    def judge(self, ctx: Any) -> dict[str, Any]:
        prompt = (
            'You are a judge. Read the claim below and answer with JSON: {"verdict": ..., '
            '"confidence": 0..1}. Claim: owls hunt at night.'
        )
        answer = ctx.ask("judge", prompt, output_type=Verdict, min_confidence=0.5)
        return {"verdict": answer.verdict}


def test_a_plain_text_answer_to_a_typed_ask_is_reported_as_not_json(
    workflow_harness: Any,
) -> None:
    """Asked again with why (not JSON) each time; when the attempts run out the run fails
    saying so, and not about a confidence it never got to read."""
    invoker = MockAgentInvoker({"judge": "Yes, they do."})
    outcome = workflow_harness(Judge, invoker=invoker).run({})
    assert outcome.status == "failed"
    assert "PARSE_ERROR" in outcome.message and "not JSON" in outcome.message
    assert "metadata.confidence" not in outcome.message
    assert len(invoker.invocations) == 3


# The README's blocks run as written in tests/project/test_readme_blocks.py.


def test_the_cli_reference_is_the_parser_s_own() -> None:
    from orchestrator.cli.reference import render

    page = Path(__file__).parents[2] / "docs" / "cli.md"
    assert page.read_text(encoding="utf-8") == render(), (
        "docs/cli.md is stale: run 'python -m orchestrator.cli.reference > docs/cli.md'"
    )


def test_the_cli_reference_has_every_command_and_subcommand() -> None:
    """Each subcommand has its section, named or not like a top-level command (``eval
    run`` and ``eval check`` once hid ``eval compare``, and ``board`` lost ``create``)."""
    import argparse

    from orchestrator.cli.main import build_parser as _parser
    from orchestrator.cli.reference import render

    page = render()

    def walk(parser: argparse.ArgumentParser, prefix: str) -> list[str]:
        found = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, inner in action.choices.items():
                    found.append(f"{prefix} {name}")
                    found += walk(inner, f"{prefix} {name}")
        return found

    commands = walk(_parser(), "orchestrate")
    assert "orchestrate eval compare" in commands and "orchestrate board create" in commands
    missing = [c for c in commands if f"# `{c}`" not in page]
    assert not missing, missing


@pytest.mark.slow
def test_a_moved_project_is_pointed_at_its_new_place_with_trust(tmp_path: Path) -> None:
    before, after = tmp_path / "before", tmp_path / "after"
    before.mkdir()
    assert orchestrate("init", "demo", "--directory", before).returncode == 0
    started = orchestrate("run", f"{before / 'demo.py'}:Demo", "--workdir", before,
                          "--input", "topic=owls")  # fmt: skip
    assert started.returncode == 42, started.stderr
    before.rename(after)
    assert orchestrate("respond", "--workdir", after, "--text", "Owls hunt.").returncode == 0
    lost = orchestrate("resume", "--workdir", after)
    assert lost.returncode == 2 and lost.stderr.count("\n") == 1, lost.stderr
    assert f"orchestrate trust {after / '.demo-state.json'} --workflow" in lost.stderr
    other = tmp_path / "other.py"
    other.write_text((after / "demo.py").read_text().replace('name = "demo"', 'name = "other"'))
    wrong = orchestrate("trust", after / ".demo-state.json", "--workflow", f"{other}:Demo")
    assert wrong.returncode == 2 and "'other'" in wrong.stderr, wrong.stderr
    pointed = orchestrate("trust", after / ".demo-state.json", "--workflow",
                          f"{after / 'demo.py'}:Demo")  # fmt: skip
    assert pointed.returncode == 0, pointed.stderr
    assert "pointed at" in pointed.stderr
    resumed = orchestrate("resume", "--workdir", after)
    assert resumed.returncode == 0, resumed.stderr
