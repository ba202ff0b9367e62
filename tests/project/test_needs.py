"""A test that lacks what it needs (an extra, the browser, PostgreSQL) skips with its
reason and never errors at collection; under ``CI=true`` such a skip fails the run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
LACKING = """
from support import needs

needs.extra("no_such_module_anywhere", "ui")


def test_never_runs():
    pass
"""


def pytest_in(folder: Path, *, ci: bool) -> subprocess.CompletedProcess[str]:
    """pytest over ``folder`` with this suite's conftest as a plugin, in one process."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = str(TESTS)
    if ci:
        env["CI"] = "true"
    command = [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider"]
    command += ["-rs", "-q", str(folder)]
    return subprocess.run(
        command, cwd=folder, env=env, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize("ci", [False, True], ids=["here", "under-CI"])
def test_a_missing_extra_skips_with_its_reason_and_fails_under_ci(tmp_path: Path, ci: bool) -> None:
    (tmp_path / "test_lacking.py").write_text(LACKING, encoding="utf-8")
    (tmp_path / "test_present.py").write_text("def test_runs():\n    pass\n", encoding="utf-8")
    done = pytest_in(tmp_path, ci=ci)
    printed = done.stdout + done.stderr
    assert "Extra: needs the ui extra (pip install -e '.[ui]')" in printed, printed
    if ci:
        assert done.returncode != 0, printed
        assert "may not skip for a missing need under CI=true" in printed, printed
    else:
        assert done.returncode == 0 and "1 passed, 1 skipped" in printed, printed
        assert "error" not in printed.lower(), printed
