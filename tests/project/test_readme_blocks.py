"""Every block of README.md and docs/guide.md runs as written, and the README stays short.

- A ```python block whose first line is ``# NAME.py`` is that file, written into the
  document's directory; any other Python block runs there as a script.
- A ```sh block runs in bash in that directory, one command after another (a command may
  go on over lines that end in a backslash, or carry a here-document). A command's
  comment says how it exits (``# exit N``; no such comment: 0) and, when the comment is
  JSON, what it prints.
- A ```text block is a sample (printed output, a picture) and is not run. Any other kind
  of block is refused.
- A block after a line ``<!-- block: ... -->`` is run elsewhere: the two commands by CI
  (``.ci/run``), the installation by ``test_the_install_section_installs_as_written``.

The blocks of one document run in order in one fresh directory, so a block may use the
files the blocks before it made; beside them lie ``examples/`` and ``tests/`` of this
checkout (symbolic links), as the guide asks of its reader. Commands run with this
environment's ``orchestrate``, ``python3`` and ``pytest`` first on the ``PATH`` and no
``ORCHESTRATOR_*`` variable but the signing key's. (That every relative link of these
pages leads to a file is held by ``tests/project/test_format_docs.py``.)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
GUIDE = ROOT / "docs" / "guide.md"
DOCUMENTS = [README, GUIDE]

RUN = {"python", "sh"}
SAMPLES = {"text"}
INSTALL = "Installing it into your own project"
# The blocks run elsewhere, by document and section, with the marker that says where.
RUN_ELSEWHERE = {
    ("README.md", "The two commands"): "covered by CI (.ci/run runs both commands)",
    ("README.md", INSTALL): "run by test_the_install_section_installs_as_written (soak)",
}

FENCE = re.compile(r"^```(\S*)\s*$")
MARKER = re.compile(r"^<!-- block: (.+?) -->$")
COMMENT = re.compile(r"(?:^|\s)#\s?(.*)$")
HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")
EXIT = re.compile(r"exit (\d+)\b:?\s*(.*)$")


class Block(NamedTuple):
    document: Path
    section: str
    line: int  # of the opening fence, from 1
    language: str
    text: str
    marker: str | None

    @property
    def where(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line} ({self.section})"


class Command(NamedTuple):
    text: str
    line: int
    exit_code: int
    prints: Any  # the JSON the command prints, or None when the comment says none


def blocks_of(document: Path) -> list[Block]:
    """The fenced blocks of ``document``, each with its ``## `` section and marker."""
    lines = document.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    section = ""
    index = 0
    while index < len(lines):
        opened = FENCE.match(lines[index])
        if opened is None:
            if lines[index].startswith("## "):
                section = lines[index][3:].strip()
            index += 1
            continue
        end = lines.index("```", index + 1)
        before = [line for line in lines[:index] if line.strip()]
        marker = MARKER.match(before[-1]) if before else None
        body = "\n".join(lines[index + 1 : end]) + "\n"
        found.append(
            Block(
                document,
                section,
                index + 1,
                opened.group(1),
                body,
                marker.group(1) if marker else None,
            )
        )
        index = end + 1
    return found


def commands_of(block: Block) -> list[Command]:
    """The commands of a shell block, each with what its comment expects."""
    lines = block.text.splitlines()
    found = []
    index = 0
    while index < len(lines):
        if not lines[index].strip() or lines[index].lstrip().startswith("#"):
            index += 1
            continue
        first = index
        while lines[index].endswith("\\"):
            index += 1
        last = index
        heredoc = HEREDOC.search(" ".join(lines[first : last + 1]))
        if heredoc is not None:
            index = lines.index(heredoc.group(2), index + 1)
        comment = COMMENT.search(lines[last])
        code, prints = expectation(comment.group(1) if comment else "")
        text = "\n".join(lines[first : index + 1])
        found.append(Command(text, block.line + 1 + first, code, prints))
        index += 1
    return found


def expectation(comment: str) -> tuple[int, Any]:
    """``exit N`` (else 0), and the JSON the comment shows, if it shows JSON."""
    said = EXIT.match(comment)
    code, rest = (int(said.group(1)), said.group(2)) if said else (0, comment)
    prints = json.loads(rest) if rest.startswith(("{", "[")) else None
    return code, prints


def block_environment(tmp_path: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("ORCHESTRATOR_") or k == "ORCHESTRATOR_KEY_FILE"
    }
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["TMPDIR"] = str(tmp_path)  # what mktemp makes is this test's, and goes with it
    return env


def run_shell(block: Block, cwd: Path, env: dict[str, str], scratch: Path) -> None:
    """Run the block's commands in one bash process (a variable set by one is seen by the
    next), each one's exit code and output kept apart, then judge them in order."""
    commands = commands_of(block)
    assert commands, f"{block.where}: a shell block with no command"
    scratch.mkdir()
    script = "".join(
        f"{{ {command.text}\n}} >{scratch}/{n}.out 2>{scratch}/{n}.err\necho $? >{scratch}/{n}.rc\n"
        for n, command in enumerate(commands)
    )
    subprocess.run(["bash", "-c", script], cwd=cwd, env=env, timeout=300, check=False)
    for n, command in enumerate(commands):
        where = f"{block.document.relative_to(ROOT)}:{command.line}: {command.text}"
        stdout = (scratch / f"{n}.out").read_text(encoding="utf-8")
        stderr = (scratch / f"{n}.err").read_text(encoding="utf-8")
        code = int((scratch / f"{n}.rc").read_text())
        assert code == command.exit_code, f"{where}\nexit {code}\n{stdout}\n{stderr}"
        assert "Traceback" not in stderr, f"{where}\n{stderr}"
        if command.prints is not None:
            assert json.loads(stdout) == command.prints, f"{where}\n{stdout}"


def run_python(block: Block, cwd: Path, env: dict[str, str], scratch: Path) -> None:
    """Write a named block to its file; run any other as a script in ``cwd``."""
    named = re.match(r"# (\S+\.py)\n", block.text)
    if named is not None:
        (cwd / named.group(1)).write_text(block.text, encoding="utf-8")
        return
    scratch.write_text(block.text, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(scratch)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{block.where}\n{done.stdout}\n{done.stderr}"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_block_is_one_the_tests_run_or_a_sample(document: Path) -> None:
    blocks = blocks_of(document)
    assert blocks
    unknown = [f"{b.where}: ```{b.language}" for b in blocks if b.language not in RUN | SAMPLES]
    assert unknown == [], "a block is run (python, sh) or an output sample (text)"
    elsewhere = {(document.name, b.section): b.marker for b in blocks if b.marker}
    assert elsewhere == {key: v for key, v in RUN_ELSEWHERE.items() if key[0] == document.name}
    assert all(b.language == "sh" for b in blocks if b.marker)


@pytest.mark.slow
@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_blocks_run_as_written(document: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    for name in ("examples", "tests"):
        (work / name).symlink_to(ROOT / name, target_is_directory=True)
    env = block_environment(tmp_path)
    runnable = [b for b in blocks_of(document) if b.marker is None and b.language in RUN]
    assert any(b.language == "sh" for b in runnable)
    for n, block in enumerate(runnable):
        scratch = tmp_path / f"block-{n}"
        if block.language == "python":
            run_python(block, work, env, scratch.with_suffix(".py"))
        else:
            run_shell(block, work, env, scratch)


def test_the_two_commands_are_a_shell_block_of_two_commented_commands() -> None:
    """Tooling reads this section: two commands, each after a comment line."""
    (block,) = [b for b in blocks_of(README) if b.section == "The two commands"]
    lines = [line for line in block.text.splitlines() if line.strip()]
    assert block.language == "sh" and len(lines) == 4
    assert [line.startswith("# ") for line in lines] == [True, False, True, False]
    assert lines[1] == "bash examples/template_create/run_offline.sh"
    assert lines[3] == (
        "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest"
    )


@pytest.mark.slow
@pytest.mark.soak
def test_the_install_section_installs_as_written(tmp_path: Path) -> None:
    """Into a new virtual environment, from a copy of this checkout: each line as written,
    ``/path/to/checkout`` standing for the copy, run in it; then every extra imports."""
    (block,) = [b for b in blocks_of(README) if b.section == INSTALL]
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, checkout / name)
    for name in ("orchestrator", "adapters"):
        shutil.copytree(ROOT / name, checkout / name, ignore=shutil.ignore_patterns("__pycache__"))
    venv = tmp_path / "project" / ".venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    env = block_environment(tmp_path)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    env.pop("PYTHONHOME", None)
    as_written = block._replace(text=block.text.replace("/path/to/checkout", str(checkout)))
    run_shell(as_written, checkout, env, tmp_path / "install")
    assert (checkout / "dist" / "checkpoint_orchestrator-0.1.0-py3-none-any.whl").is_file()
    imports = "import orchestrator, psycopg, starlette, uvicorn, opentelemetry.sdk"
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", imports], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    version = subprocess.run(
        [str(venv / "bin" / "orchestrate"), "--version"], capture_output=True, text=True
    )
    assert version.stdout.startswith("orchestrate (checkpoint-orchestrator) 0.1.0")


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_readme_reads_in_ten_minutes() -> None:
    """At most 300 lines, and a table of contents that links every section in order."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    fenced = False
    sections = []
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and line.startswith("## "):
            sections.append(line[3:].strip())
    assert sections[0] == "Contents"
    contents = text.split("\n## Contents\n", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"\]\(#([^)]+)\)", contents) == [_anchor(s) for s in sections[1:]]
