"""``orchestrate init NAME``: a workflow file and its test file, ready to run and pass.

The workflow has two phases, a step and an ask; the test runs it in-process with the
mock invoker, and once more pausing for a host and resuming, as a real run does. Both
files are the project's own example of how a workflow and its test are written: a
newcomer edits them rather than starting from an empty file.
"""

from __future__ import annotations

import argparse
import keyword
import re
import sys
from pathlib import Path

from .._errors import UsageError
from .common import EXIT_OK, Command

WORKFLOW_TEMPLATE = '''\
"""The {name} workflow: ask a writer for a paragraph, then count its words.

Made by `orchestrate init {name}`; edit it freely. Run it with a host answering:

    orchestrate run {module}.py:{cls} --input topic="durable workflows"   # exit 42
    orchestrate respond --text "..."                                      # the answer
    orchestrate resume                                                    # exit 0
"""

from orchestrator import Workflow, phase


def count_words(text):
    return len(text.split())


class {cls}(Workflow):
    name = "{name}"  # the state file is .{name}-state.json
    agents = ("writer",)  # every agent the workflow may ask

    @phase(1)
    def draft(self, ctx):
        topic = ctx.inputs.get("topic", "durable workflows")
        prompt = (
            "You are a technical writer. Write one short paragraph, plain text, no "
            f"headings, that explains this topic to a new colleague: {{topic}}."
        )  # a prompt has at least 100 characters
        return {{"draft": ctx.ask("writer", prompt)}}

    @phase(2)
    def measure(self, ctx):
        draft = ctx.output("draft")["draft"]
        # a step's result is recorded: after a pause it is not run again
        return {{"words": ctx.step("count_words", count_words, draft)}}
'''

TEST_TEMPLATE = '''\
"""Tests of the {name} workflow (made by `orchestrate init {name}`): `pytest {module}_test.py`."""

from orchestrator.testing import MockAgentInvoker

from {module} import {cls}


def test_it_runs_to_the_end_with_a_mock_agent(workflow_harness):
    invoker = MockAgentInvoker({{"writer": "Durable workflows keep their state on disk."}})
    harness = workflow_harness({cls}, invoker=invoker)  # asks answered in-process

    outcome = harness.run({{"topic": "durable workflows"}})

    assert outcome.status == "completed"
    assert outcome.outputs["measure"] == {{"words": 7}}
    (call,) = invoker.get_invocations("writer")
    assert "durable workflows" in call["prompt"]


def test_it_pauses_for_the_host_and_resumes(workflow_harness):
    harness = workflow_harness({cls})  # no invoker: every ask pauses, as for a host

    outcome = harness.run({{"topic": "owls"}})
    assert outcome.status == "paused"
    (request,) = outcome.pending
    assert request.agent_name == "writer"

    harness.respond(request.request_id, "Owls hunt at night.")
    outcome = harness.resume()

    assert outcome.status == "completed"
    assert outcome.outputs["measure"] == {{"words": 4}}
'''


def names_of(name: str) -> tuple[str, str]:
    """The module and the class of workflow ``name``."""
    if re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*", name) is None:
        raise UsageError(
            f"workflow name {name!r}: write lower-case words joined by '-' (for example "
            "'code-review'); it names the state file and the files made here"
        )
    module = name.replace("-", "_")
    if keyword.iskeyword(module):
        raise UsageError(f"workflow name {name!r} is a Python keyword; choose another")
    return module, "".join(part.capitalize() for part in name.split("-"))


def scaffold(name: str, directory: Path) -> list[Path]:
    """Write ``<module>.py`` and ``<module>_test.py`` for workflow ``name`` in
    ``directory``; nothing is overwritten."""
    module, cls = names_of(name)
    files = {
        directory / f"{module}.py": WORKFLOW_TEMPLATE,
        directory / f"{module}_test.py": TEST_TEMPLATE,
    }
    existing = [str(path) for path in files if path.exists() or path.is_symlink()]
    if existing:
        raise UsageError(f"{', '.join(existing)} already there; nothing was written")
    for path, template in files.items():
        path.write_text(template.format(name=name, module=module, cls=cls), encoding="utf-8")
    return list(files)


def _declare_init(init: argparse.ArgumentParser) -> None:
    init.add_argument("name", metavar="NAME", help="the workflow's name, kebab-case: 'demo'")
    init.add_argument(
        "--directory",
        type=Path,
        default=None,
        help="where to write the two files (default: the current directory)",
    )
    init.add_argument(
        "--host",
        choices=["claude-code", "codex", "generic"],
        default=None,
        help="also write what this coding agent needs to drive the workflow through "
        "'orchestrate mcp' (see docs/hosts.md); a workflow file already there is kept",
    )


def _cmd_init(args: argparse.Namespace) -> int:
    directory = (args.directory or Path.cwd()).resolve()
    if not directory.is_dir():
        raise UsageError(f"directory {directory} does not exist")
    if args.host is not None:
        return _init_host(args.name, args.host, directory)
    workflow, test = scaffold(args.name, directory)
    print(workflow)
    print(test)
    print(
        f"orchestrate: wrote {workflow.name} and {test.name}; run the tests with "
        f"'pytest {test.name}', the workflow with 'orchestrate run {workflow.name}:"
        f"{workflow.stem.title().replace('_', '')} --input topic=owls'",
        file=sys.stderr,
    )
    return EXIT_OK


def _init_host(name: str, host: str, directory: Path) -> int:
    """The workflow's files (unless the workflow is there already), then the host's."""
    from .host_recipes import write_recipe

    module, cls = names_of(name)
    written = [] if (directory / f"{module}.py").exists() else scaffold(name, directory)
    written += write_recipe(host, name, f"{module}.py:{cls}", directory)
    for path in written:
        print(path)
    print(
        f"orchestrate: wrote what {host} needs to drive {name} through 'orchestrate mcp' "
        "(docs/hosts.md tells the loop)",
        file=sys.stderr,
    )
    return EXIT_OK


COMMANDS = {
    "init": Command(
        "Write a new workflow file and its test file (two phases, a step, an ask), ready "
        "to run and to pass: NAME.py and NAME_test.py.",
        _declare_init,
        _cmd_init,
    ),
}
