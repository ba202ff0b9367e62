"""CI runs the README's test command as the README writes it: ``.ci/run`` reads it from the
README's "The two commands" block, and the line it quotes for readers is that command."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## The two commands\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```\w*\n(.*?)^```$", section, flags=re.S | re.M)
    return [
        line
        for block in blocks
        for line in block.splitlines()
        if line.strip() and not line.startswith("#")
    ]


def test_ci_reads_and_quotes_the_readme_test_command() -> None:
    commands = readme_commands()
    assert len(commands) == 2, commands
    example, tests = commands
    assert "examples/" in example and "pytest" in tests
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert f"#   {tests}\n" in ci, "the command .ci/run quotes is not the README's"
    assert 'eval "$test_command"' in ci


def test_the_readme_command_ci_reads_is_the_one_a_reader_sees() -> None:
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    found = re.search(r"^test_command=\$\((.*?sed -n 2p)\)$", ci, flags=re.S | re.M)
    assert found is not None, "no test_command=$(...) in .ci/run"
    read = subprocess.run(
        ["bash", "-c", found.group(1)], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert read.stdout.strip() == readme_commands()[1]
